"""The quality gate in real pytest sessions, on real speech: espeak-ng is the system under test.

A candidate identical to its baseline PASSes (and only then reports a speedup); a candidate that
speaks in another voice FAILs the speaker threshold; a candidate with no baseline is INCONCLUSIVE.
Baseline and candidate run in the same session, in paired AB/BA order.
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

ESPEAK_PY = '''
import io, subprocess
import numpy as np
import soundfile as sf

VOICES = {"a": "en-us+klatt2", "b": "en-us+klatt5"}

def build_espeak(swap=None):
    """Text -> espeak-ng speech; `swap` replaces the voice of one workload voice (a damaged candidate)."""
    voices = dict(VOICES, **(swap or {}))
    def forward(sample):
        wav = subprocess.run(["espeak-ng", "-v", voices[sample.get("voice") or "a"], "--stdout", sample["text"]],
                             capture_output=True, check=True).stdout
        data, rate = sf.read(io.BytesIO(wav), dtype="float32")
        return {"waveform": data, "sample_rate": rate}
    return forward
'''

SERVICE_TEST = '''
def test_service(s2st_service, s2st_workload, s2st_concurrency, s2st_load):
    s2st_load(s2st_service, s2st_workload, concurrency=s2st_concurrency)
'''


def espeak(voice: str, text: str, path: Path) -> Path:
    path.write_bytes(subprocess.run(["espeak-ng", "-v", voice, "--stdout", text], capture_output=True, check=True).stdout)
    return path


@pytest.fixture(scope="module")
def anchors(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("anchors")
    for name, voice in (("a", "en-us+klatt2"), ("b", "en-us+klatt5")):
        espeak(voice, "The quick brown fox jumps over the lazy dog near the river bank.", out / f"{name}.wav")
    return out


def test_gate_pass_fail_inconclusive_on_espeak_speech(pytester, anchors):
    from pytest_s2st.quality.scorers import get_scorer

    scorer_id = get_scorer(str(anchors)).scorer_id  # frozen before measuring, as a user would
    root = pytester.path
    (root / "sut.py").write_text(ESPEAK_PY)
    (root / "wl.jsonl").write_text(
        json.dumps({"id": "en1", "text": "Turn left at the next corner and stop.", "language": "en", "voice": "a", "seed": 1}) + "\n"
        + json.dumps({"id": "en2", "text": "Please open the window before dinner.", "language": "en", "voice": "b", "seed": 2}) + "\n")
    common = "  model_type: callable\n  workload: wl.jsonl\n  concurrency: [1, 2]\n  warmup: 1\n"
    (root / "base.yaml").write_text(f"general:\n  name: base\n{common}stage1:\n  entry: sut.py:build_espeak\n")
    policy = (f"quality:\n  baseline: base.yaml\n  anchors: {anchors}\n  scorer_id: {scorer_id}\n"
              "  max_error_rate_increase: 0.3\n  max_speaker_drop: 0.1\n  max_duration_change_pct: 25\n")
    (root / "same.yaml").write_text(f"general:\n  name: same\n{common}stage1:\n  entry: sut.py:build_espeak\n{policy}")
    (root / "voice.yaml").write_text(f"general:\n  name: voice\n{common}stage1:\n  entry: sut.py:build_espeak\n"
                                     "  swap: {a: en-us+f3, b: en-us+f3}\n" + policy)
    (root / "nobase.yaml").write_text(f"general:\n  name: nobase\n{common}stage1:\n  entry: sut.py:build_espeak\n"
                                      + policy.replace("  baseline: base.yaml\n", ""))
    pytester.makepyfile(test_service=SERVICE_TEST)
    args = ["-p", "no:cacheprovider", "-v", "--benchmark-json=out.json"]
    for name in ("same", "voice", "nobase"):
        args.append(f"--s2st-config={root / name}.yaml")
    result = pytester.runpytest_subprocess(*args)
    out = result.stdout.str()
    assert result.parseoutcomes() == {"passed": 2, "failed": 2, "inconclusive": 2}, out
    for line in ("test_service[callable-same-c1] PASSED", "test_service[callable-same-c2] PASSED",
                 "test_service[callable-voice-c1] FAILED", "test_service[callable-nobase-c1] INCONCLUSIVE"):
        assert line in out, line  # pytest orders session-scoped params by level, so no fixed line order
    result.stdout.fnmatch_lines(["speaker_similarity drop * > 0.1 *"])
    assert "no baseline" in out
    benches = {b["name"]: b["extra_info"]["s2st_service"] for b in json.loads((root / "out.json").read_text())["benchmarks"]}
    same1, same2 = benches["test_service[callable-same-c1]"], benches["test_service[callable-same-c2]"]
    # paired AB/BA: the baseline ran first at the first level, second at the next
    assert (same1["order"], same2["order"]) == ("AB", "BA")
    assert same1["gate"]["status"] == "PASS" and set(same1["gate"]["speedup"]) == {"c1"}
    assert same1["policy"]["max_speaker_drop"] == 0.1 and same1["policy_fingerprint"]
    voice = benches["test_service[callable-voice-c1]"]["gate"]
    assert voice["status"] == "FAIL" and voice["speedup"] is None
    assert any("speaker" in r for r in voice["reasons"])
    # the policy is saved with each run's evidence
    summary = json.loads((Path(same1["evidence_dir"]) / "summary.json").read_text())
    assert summary["by_concurrency"]["1"]["policy"]["scorer_id"] == scorer_id


TONE_PY = '''
import numpy as np

def build_tone(seconds_per_char=0.02):
    def forward(sample):
        n = int(16000 * (0.2 + seconds_per_char * len(sample["text"])))
        return {"waveform": (0.3 * np.sin(2 * np.pi * 220 * np.arange(n) / 16000)).astype(np.float32), "sample_rate": 16000}
    return forward
'''

GATED_TEST = '''
import pytest

@pytest.mark.s2st_gate(max_duration_change_pct=5)
def test_service(s2st_service, s2st_workload, s2st_concurrency, s2st_load):
    s2st_load(s2st_service, s2st_workload, concurrency=s2st_concurrency)
'''


def test_gate_baseline_from_the_saved_run_that_benchmark_compare_names(pytester):
    root = pytester.path
    (root / "tone.py").write_text(TONE_PY)
    (root / "wl.jsonl").write_text("".join(
        json.dumps({"id": f"u{i}", "text": "hello there " * (i + 1), "language": "en", "voice": "a", "seed": i}) + "\n"
        for i in range(3)))
    cfg = root / "tone.yaml"
    cfg.write_text("general:\n  name: tone\n  model_type: callable\n  workload: wl.jsonl\n  warmup: 1\n"
                   "stage1:\n  entry: tone.py:build_tone\n")
    pytester.makepyfile(test_service=GATED_TEST)
    base = ["-p", "no:cacheprovider", f"--s2st-config={cfg}", "--s2st-concurrency=1"]
    # run 1 saves the baseline; with nothing to compare against, the gate is INCONCLUSIVE
    first = pytester.runpytest_subprocess(*base, "--benchmark-autosave")
    assert first.parseoutcomes() == {"inconclusive": 1}
    # run 2, same model: judged against run 1's evidence -> PASS with a speedup
    same = pytester.runpytest_subprocess(*base, "--benchmark-compare", "--benchmark-json=same.json")
    assert same.parseoutcomes() == {"passed": 1}, same.stdout.str()
    gate = json.loads((root / "same.json").read_text())["benchmarks"][0]["extra_info"]["s2st_service"]["gate"]
    assert gate["status"] == "PASS" and gate["speedup"]["c1"] > 0
    same.stdout.fnmatch_lines(["gate test_service?callable-tone-c1?: PASS against *; speedup (rtf): c1 *x"])
    # run 3, a model that speaks 50 % longer: FAIL on the duration threshold
    cfg.write_text(cfg.read_text() + "  seconds_per_char: 0.03\n")
    longer = pytester.runpytest_subprocess(*base, "--benchmark-compare")
    assert longer.parseoutcomes() == {"failed": 1}
    longer.stdout.fnmatch_lines(["*duration*> 5*"])


def test_a_gate_without_a_baseline_says_why_not_against_none():
    """A gated level without a baseline run read 'gate ...: INCONCLUSIVE against None' (issue 32 item 7)."""
    from pytest_s2st.terminal import gate_line

    why = "no baseline: set quality.baseline, --s2st-baseline or --benchmark-compare"
    line = gate_line("t[c1]", {"status": "INCONCLUSIVE", "reasons": [why]}, None, "rtf", "")
    assert line == f"gate t[c1]: INCONCLUSIVE: {why}" and "None" not in line
    assert gate_line("t[c1]", {"status": "PASS", "reasons": []}, "/runs/base", "rtf", "c1 1.2x") == \
        "gate t[c1]: PASS against /runs/base; speedup (rtf): c1 1.2x"
