"""Service benchmarks through real pytest sessions: reference server subprocess, load, table, JSON, evidence."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import soundfile as sf

from helpers import TONE_PY, write_tone_case
from loopback import server_thread, unused_port

SERVICE_TEST = '''
def test_service(s2st_service, s2st_workload, s2st_concurrency, s2st_load):
    s2st_load(s2st_service, s2st_workload, concurrency=s2st_concurrency)
'''


def test_service_levels_table_json_and_evidence(pytester):
    cfg = write_tone_case(pytester.path, "tone", service=True)
    pytester.makepyfile(test_service=SERVICE_TEST)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--s2st-config={cfg}", "-v",
                                           "--benchmark-json=out.json", "--s2st-plot=plots")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([
        "*test_service?callable-tone-c1? PASSED*",
        "*test_service?callable-tone-c2? PASSED*",
        "*s2st: service (TTFA, RTF, latency per concurrency level)*",
        "Name*conc*ok/n*TTFA p50*p99*RTF p50*p99*latency p99*errors*goodput",
        "test_service?callable-tone-c2?*2*4/4*",
    ])
    benches = {b["name"]: b["extra_info"]["s2st_service"] for b in json.loads((pytester.path / "out.json").read_text())["benchmarks"]}
    c2 = benches["test_service[callable-tone-c2]"]
    assert c2["concurrency"] == 2 and c2["summary"]["n_ok"] == 4 and c2["summary"]["error_rate"] == 0
    row = next(b for b in json.loads((pytester.path / "out.json").read_text())["benchmarks"] if b["name"].endswith("c2]"))
    assert row["extra_info"]["error_rate"] == 0 and row["extra_info"]["requests_failed"] == 0  # zero is a value
    assert c2["streaming"] is False and c2["identity"]["model_type"] == "callable"
    assert 0 < c2["summary"]["ttfa_s"]["p50"] <= c2["summary"]["latency_s"]["p99"]
    assert c2["verdict"]["status"] == "PASS"
    assert "send_t" in c2["methods"]["ttfa_s"] and "socket" in c2["methods"]["send_t"]  # how it was measured
    # evidence: a record per request (warm-up included) and a real WAV per response
    from pytest_s2st.runs import read_records

    records = read_records(c2["evidence_dir"])
    assert sorted(r["id"] for r in records) == ["c2-r0", "c2-r1", "c2-r2", "c2-r3", "c2-w0"]
    data, rate = sf.read(f"{c2['evidence_dir']}/wav/c2-r3.wav")
    assert rate == 16000 and len(data) == int(16000 * (0.2 + 0.02 * len("hello world" * 4)))
    assert (pytester.path / "plots" / "callable-tone.png").stat().st_size > 1000


def test_external_endpoint_and_a_server_killed_mid_run_is_inconclusive(pytester, tmp_path):
    cfg = write_tone_case(pytester.path, "tone", service=True)
    identity = tmp_path / "id.json"
    server = subprocess.Popen([sys.executable, "-m", "pytest_s2st.cli.serve", "--demo-tone", "--demo-delay-s", "0.3",
                               "--port", "0", "--identity-output", str(identity)])
    try:
        deadline = time.monotonic() + 60
        while not identity.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        endpoint = json.loads(identity.read_text())["endpoint"]
        pytester.makepyfile(test_service=SERVICE_TEST.replace(
            "    s2st_load(", "    import os, signal, threading\n"
            f"    threading.Timer(1.2, os.kill, ({server.pid}, signal.SIGKILL)).start()\n    s2st_load("))
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--s2st-config={cfg}", f"--s2st-endpoint={endpoint}",
                                               "--s2st-concurrency=1", "-v", "--s2st-request-timeout=5")
    finally:
        server.kill()
        server.wait()
    # --s2st-concurrency on the command line wins over the config's [1, 2]
    assert result.parseoutcomes() == {"inconclusive": 1}
    result.stdout.fnmatch_lines([
        "*test_service?callable-tone-c1? INCONCLUSIVE*",
        "*s2st INCONCLUSIVE*",
        "*c1-r*: request failed: *",
    ])
    assert result.ret == 0


def test_service_tests_run_only_on_cases_that_serve_speech(pytester):
    """A service benchmark parametrizes over the cases a speech service can serve: a text-only or
    feature-in case (known model type, or general.serves_speech: false) is left out of it, not run into
    one HTTP 500 per request; the inference benchmark still runs on every case."""
    tone = write_tone_case(pytester.path, "tone", service=True)
    frames = pytester.path / "frames.yaml"
    frames.write_text("general:\n  name: frames\n  model_type: callable\n  serves_speech: false\n"
                      "stage1:\n  entry: tone.py:build_tone\n")
    pytester.makepyfile(test_service=SERVICE_TEST, test_cases="def test_cases(s2st_case):\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--s2st-config={tone}",
                                           f"--s2st-config={frames}", "-v")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines_random(["*test_service?callable-tone-c1? PASSED*", "*test_service?callable-tone-c2? PASSED*",
                                        "*test_cases?callable-frames? PASSED*", "*test_cases?callable-tone? PASSED*"])
    result.stdout.no_fnmatch_line("*test_service?callable-frames*")

    # only cases that cannot serve: the service benchmark is skipped with the reason, not failed
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--s2st-config={frames}", "-rs", "test_service.py")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*no configured case serves speech from text (callable-frames do not)*"])

    # a value that is not a boolean: one line naming the file, line and key
    frames.write_text(frames.read_text().replace("serves_speech: false", "serves_speech: maybe"))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--s2st-config={frames}", "test_service.py")
    assert result.ret == 4
    result.stderr.fnmatch_lines([f"*{frames}:4 (general.serves_speech): must be true or false, got 'maybe'*"])
    assert "Traceback" not in result.stderr.str()


def test_which_model_types_serve_speech(tmp_path):
    from pytest_s2st.cases import load_case

    for model_type, serves in (("TTS", True), ("Qwen3TTS", True), ("S2T", False), ("MT", False),
                               ("S2UT", False), ("3StageS2ST", False), ("callable", True)):
        cfg = tmp_path / f"{model_type}.yaml"
        # a declaration cannot make a known text-out or speech-in type serve speech
        stages = "".join(f"stage{i}:\n  path: x.pt\n" for i in range(1, (3 if model_type == "3StageS2ST" else 1) + 1))
        cfg.write_text(f"general:\n  model_type: {model_type}\n  serves_speech: true\n{stages}")
        assert load_case(cfg, {}, lambda name: None).serves_speech is serves, model_type


def test_command_line_overrides_reach_the_reference_server(pytester):
    """The server receives the resolved case: a model type, threads and levels given to pytest are
    what its identity JSON shows, and each level's summary.json is written once, complete."""
    (pytester.path / "tone.py").write_text(TONE_PY)
    cfg = pytester.path / "tone.yaml"
    # the YAML says TTS (no such model here) and 1 thread; the command line says otherwise
    cfg.write_text("general:\n  name: tone\n  model_type: TTS\n  threads: 1\n  warmup: 0\n"
                   "stage1:\n  entry: tone.py:build_tone\n")
    pytester.makepyfile(test_service=SERVICE_TEST)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--s2st-config={cfg}", "--s2st-model-type",
                                           "callable", "--s2st-threads=2", "--s2st-requests=2",
                                           "--s2st-concurrency=1", "--s2st-warmup", "0", "--benchmark-json=out.json")
    result.assert_outcomes(passed=1)
    data = json.loads((pytester.path / "out.json").read_text())["benchmarks"][0]["extra_info"]["s2st_service"]
    identity = data["identity"]
    assert identity["model_type"] == "callable" and identity["case_id"] == "callable-tone"
    assert identity["settings"]["threads"] == 2 and identity["settings"]["warmup"] == 0
    assert identity["settings"]["requests"] == 2
    # one write per level, by the load generator, keeping what the plugin used to drop
    level = json.loads((pytester.path / data["evidence_dir"] / "summary.json").read_text())["by_concurrency"]["1"]
    assert level["wall_s"] > 0 and level["timed_out"] is False and "t0_perf" in level
    assert level["summary"]["n"] == 2


def test_service_budgets_judge_the_levels_statistics(pytester):
    """s2st_budget(<metric>_<stat>=...) on a service benchmark reads that statistic of the level."""
    cfg = write_tone_case(pytester.path, "tone", service=True)
    pytester.makepyfile(test_service='''
import pytest

@pytest.mark.s2st_budget(ttfa_s_p99=1e-6)
def test_too_fast_asked(s2st_service, s2st_workload, s2st_concurrency, s2st_load):
    s2st_load(s2st_service, s2st_workload, concurrency=s2st_concurrency)

@pytest.mark.s2st_budget(error_rate=0, rtf_mean=1000, latency_s_p50=1000)
def test_within(s2st_service, s2st_workload, s2st_concurrency, s2st_load):
    s2st_load(s2st_service, s2st_workload, concurrency=s2st_concurrency)
''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--s2st-config={cfg}", "-v",
                                           "--s2st-concurrency=1", "--s2st-requests=2")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines_random([
        "*test_too_fast_asked?callable-tone-c1? FAILED*",
        "*test_within?callable-tone-c1? PASSED*",
        "*ttfa_s_p99: measured * > budget 1e-06*",
    ])


def test_a_case_name_with_slashes_stays_under_the_evidence_root(pytester, tmp_path):
    """general.name '../../fast/v2': the reference server starts, every file lands under the root."""
    cfg = write_tone_case(pytester.path, "tone", service=True)
    cfg.write_text(cfg.read_text().replace("name: tone", "name: ../../fast/v2"))
    pytester.makepyfile(test_service=SERVICE_TEST)
    root = tmp_path / "deep" / "er" / "ev"
    before = {p for p in tmp_path.rglob("*")}
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--s2st-config={cfg}", "--s2st-concurrency=1",
                                           "--s2st-requests=1", f"--s2st-evidence-dir={root}",
                                           "--benchmark-json=out.json")
    result.assert_outcomes(passed=1)
    data = json.loads((pytester.path / "out.json").read_text())["benchmarks"][0]["extra_info"]["s2st_service"]
    assert Path(data["evidence_dir"]).resolve().is_relative_to(root.resolve())
    outside = {p for p in tmp_path.rglob("*") if not p.resolve().is_relative_to(root.resolve())} - before
    assert {p for p in outside if p not in root.parents} == set()


def test_external_endpoint_given_as_a_base_url(pytester, tmp_path):
    """The README's own example, --s2st-endpoint http://127.0.0.1:PORT (and with a trailing /), against
    a healthy server: every request succeeds, and the JSON shows the one normalised endpoint."""
    cfg = write_tone_case(pytester.path, "tone", service=True)
    identity = tmp_path / "id.json"
    server = subprocess.Popen([sys.executable, "-m", "pytest_s2st.cli.serve", "--demo-tone", "--port", "0",
                               "--identity-output", str(identity)])
    try:
        deadline = time.monotonic() + 60
        while not identity.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        port = json.loads(identity.read_text())["port"]
        pytester.makepyfile(test_service=SERVICE_TEST)
        for base in (f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port}/"):
            result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--s2st-config={cfg}",
                                                   f"--s2st-endpoint={base}", "--s2st-concurrency=1",
                                                   "--s2st-requests=2", "--benchmark-json=out.json")
            result.assert_outcomes(passed=1)
            data = json.loads((pytester.path / "out.json").read_text())["benchmarks"][0]["extra_info"]["s2st_service"]
            assert data["endpoint"] == f"http://127.0.0.1:{port}/v1/audio/speech"
            assert data["summary"]["n_ok"] == 2 and data["verdict"]["status"] == "PASS"
    finally:
        server.kill()
        server.wait()


def test_external_endpoint_without_a_config_is_one_case_named_from_the_server(pytester, tmp_path):
    """--s2st-endpoint and no --s2st-config: ONE service case, named from the server's GET /v1/models
    (its hub id made an id), not the embedded demo cases; a server that does not answer is named by
    its host and port (and its requests then fail, each with its reason)."""
    identity = tmp_path / "id.json"
    server = subprocess.Popen([sys.executable, "-m", "pytest_s2st.cli.serve", "--demo-tone", "--port", "0",
                               "--served-model-name", "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice",
                               "--identity-output", str(identity)])
    try:
        deadline = time.monotonic() + 60
        while not identity.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        port = json.loads(identity.read_text())["port"]
        pytester.makepyfile(test_service=SERVICE_TEST)
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--s2st-endpoint=http://127.0.0.1:{port}",
                                               "--s2st-concurrency=1", "--s2st-requests=2", "-v",
                                               "--benchmark-json=out.json")
    finally:
        server.kill()
        server.wait()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_service?external-Qwen-Qwen3-TTS-12Hz-0.6B-CustomVoice-c1? PASSED*"])
    assert "tiny" not in result.stdout.str()  # no embedded demo case was benchmarked against it
    data = json.loads((pytester.path / "out.json").read_text())["benchmarks"][0]["extra_info"]["s2st_service"]
    assert data["summary"]["n_ok"] == 2

    down = unused_port()
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--s2st-endpoint=http://127.0.0.1:{down}",
                                           "--collect-only", "-q")
    result.stdout.fnmatch_lines([f"test_service.py::test_service[[]external-127.0.0.1-{down}-c1[]]"])


def test_external_case_name_asks_models_then_identity(tmp_path):
    from aiohttp import web

    from pytest_s2st.service.bench import external_case_name

    with server_thread(lambda request: None) as base:  # IDENTITY's case id, served as the model
        assert external_case_name(base) == ("external-callable-tone", "GET /v1/models")
    async def identity(request):
        return web.json_response({"case_id": "TTS x/y", "model_type": "TTS"})

    app = web.Application()  # an own-protocol server without the OpenAI model list
    app.router.add_get("/identity", identity)
    with server_thread(None, app=app) as base:
        name, where = external_case_name(base + "/v1/audio/speech")
    assert name == "external-TTS-x-y" and where == "GET /identity (case_id)"


def test_a_level_whose_requests_fail_fast_carries_its_error_rate_on_its_row(pytester):
    """Every request refused by the model: the level is short, so the row's time alone would read fast; its
    pytest-benchmark row carries error_rate beside the time (what compare tools and dashboards read)."""
    cfg = write_tone_case(pytester.path, "tone", service=True)
    with open(pytester.path / "tone.py", "a") as tone:
        tone.write("\n\ndef build_broken():\n    def forward(sample):\n        raise ValueError('no voice')\n"
                   "    return forward\n")
    cfg.write_text(cfg.read_text().replace("tone.py:build_tone", "tone.py:build_broken"))
    pytester.makepyfile(test_service=SERVICE_TEST)
    pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--s2st-config={cfg}", "--benchmark-json=out.json")
    rows = {b["name"]: b for b in json.loads((pytester.path / "out.json").read_text())["benchmarks"]}
    c2 = rows["test_service[callable-tone-c2]"]
    assert c2["extra_info"]["error_rate"] == 1.0 and c2["extra_info"]["requests_failed"] == 4
    assert c2["extra_info"]["s2st_service"]["summary"]["n_ok"] == 0
