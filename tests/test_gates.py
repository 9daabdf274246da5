"""Gates that cannot be fooled (issue 20): one CLASS test per class of garbage, parametrised over every
entry point that reads it, instead of one test per example.

1. a number that is not finite is missing evidence (inputs.finite): never PASS, never "no change",
   never `nan` in a table, never NaN in a JSON file;
2. every file goes through one bounded reader (inputs.read_bytes): FIFOs, devices, directories,
   sockets, symlink loops and oversized files are one line at once; YAML alias bombs refused;
3. absurd but well-formed option values are refused, naming the flag;
4. console scripts end in one line and an exit code, never a traceback (hypothesis, structure-aware);
5. echoed values stay on one line (newline, NUL);
6. typos in a quality section, a policy, a budget or a stage factory's arguments name the closest valid key;
8. the callable path fails in one line naming the user's own file:line (import, factory, forward).
"""
from __future__ import annotations

import json
import math
import os
import shutil
import socket
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_s2st import inputs, metrics
from pytest_s2st.errors import S2STError
from pytest_s2st.inputs import finite

NAN, INF = float("nan"), float("inf")
# what a hand-edited file or a broken producer can put where a number belongs
GARBAGE = [NAN, INF, -INF, "1.0", True, [1.0], {"v": 1}]
HUGE = 1e308  # finite, but its arithmetic overflows
TEXT_NUMBERS = ["nan", "inf", "-inf", "1e308", "NaN", "fast", "", True]


# ------------------------------------------------------------------------------------------- 1. numbers

@pytest.mark.parametrize("value", GARBAGE + [None, 10**400])
def test_finite_refuses_what_is_not_a_finite_number(value):
    assert finite(value) is None


def test_finite_keeps_numbers_and_reads_negative_zero_as_zero():
    assert finite(HUGE) == HUGE and finite(3) == 3.0 and finite(0) == 0.0
    assert math.copysign(1.0, finite(-0.0)) == 1.0  # never "-0" in a table


def _metrics(value, rounds=None):
    out = {name: {"value": 1.0, "method": "m"} for name in metrics.COMPARABLE}
    out["peak_rss_mib"] = {"value": value, "method": "m"}
    out["runtime_s"] = {"value": 1.0, "method": "m", "details": {"rounds_s": rounds or [1.0] * 8}}
    return out


@pytest.mark.parametrize("side", ["compared", "current"])
@pytest.mark.parametrize("value", GARBAGE)
def test_compare_fail_never_passes_a_value_that_is_not_finite(side, value):
    """`--s2st-compare-fail peak_rss_mib:10%` used to pass a NaN baseline (NaN > limit is False)."""
    from pytest_s2st.judging import regressions
    from pytest_s2st.report import render_compare, render_table
    from pytest_s2st.rows import Row, SavedRow
    from pytest_s2st.settings import compare_limits

    old, new = (_metrics(value), _metrics(100.0)) if side == "compared" else (_metrics(100.0), _metrics(value))
    rows, compared = [Row("t", "f::t", new, key="k")], {"k": SavedRow.from_metrics(old)}
    found = regressions(rows, compared, compare_limits("peak_rss_mib:10%"))
    assert found and "not measured" in found[0] and "not a finite number" in found[0], found
    assert "\n" not in found[0]
    for line in render_compare(rows, compared) + render_table(rows):
        assert "nan" not in line.lower() and "inf" not in line.lower(), line


@pytest.mark.parametrize("where", ["old", "new"])
@pytest.mark.parametrize("value", GARBAGE + [HUGE])
def test_runtime_rounds_that_are_not_finite_are_no_change_and_no_pass(where, value):
    from pytest_s2st.judging import regressions
    from pytest_s2st.report import render_compare
    from pytest_s2st.rows import Row, SavedRow
    from pytest_s2st.settings import compare_limits
    from pytest_s2st.significance import NOT_FINITE, compare_rounds

    bad = [1.0] * 7 + [value]
    old, new = (bad, [2.0] * 8) if where == "old" else ([1.0] * 8, bad)
    change = compare_rounds(old, new)
    assert change.word == NOT_FINITE and change.ratio is None and not change.significant
    rows = [Row("t", "f::t", _metrics(1.0, new), key="k")]
    saved = _metrics(1.0, old)
    rows[0].metrics["runtime_s"]["value"], saved["runtime_s"]["value"] = 2.0, 1.0  # past the limit
    compared = {"k": SavedRow.from_metrics(saved)}
    found = regressions(rows, compared, compare_limits("runtime_s:5%"))
    assert found and "not finite" in found[0], found
    text = "\n".join(render_compare(rows, compared))
    assert "no significant change" not in text and "nan" not in text.lower()


@pytest.mark.parametrize("value", GARBAGE)
def test_budgets_refuse_a_limit_and_never_pass_a_value_that_is_not_finite(value):
    from pytest_s2st.budget import check_budget, parse_budget, service_lookup
    from pytest_s2st.measure.record import Metric
    from pytest_s2st.quality.verdict import INCONCLUSIVE

    with pytest.raises(S2STError, match=r"t: s2st_budget: flops must be a finite number >= 0"):
        parse_budget({"flops": value}, "t")
    verdict = check_budget(lambda name, stage: Metric(value, "m"), {"flops": 10.0})
    assert verdict.status == INCONCLUSIVE and "not a finite number" in verdict.reasons[0]
    lookup = service_lookup({"summary": {"ttfa_s": {"p99": value}, "reasons": {}}})
    assert check_budget(lookup, {"ttfa_s_p99": 1.0}).status == INCONCLUSIVE


def test_budget_huge_and_negative_zero_limits_are_values():
    from pytest_s2st.budget import parse_budget

    assert parse_budget({"flops": HUGE, "peak_rss_mib": -0.0}, "t")[0] == {"flops": HUGE, "peak_rss_mib": 0.0}


@pytest.mark.parametrize("value", GARBAGE)
@pytest.mark.parametrize("key", ["max_error_rate_increase", "min_improvement_pct", "max_ttfa_regression_pct"])
def test_policy_thresholds_must_be_finite(key, value):
    """inf would be a threshold nothing crosses: a gate that cannot fail."""
    from pytest_s2st.quality.policy import Policy

    with pytest.raises(S2STError, match=rf"^p.json: {key} must be a finite number, got"):
        Policy.from_mapping({"scorer_id": "s", key: value}, "p.json")


@pytest.mark.parametrize("value", GARBAGE)
@pytest.mark.parametrize("name", ["error_rate", "speaker_similarity"])
def test_score_values_must_be_finite_or_null(name, value):
    from pytest_s2st.quality.scorefile import scores_from_mapping

    item = {"id": "c1-r0", "pcm_sha256": "0" * 64, "error_rate": 0.1, "speaker_similarity": 0.9, name: value}
    with pytest.raises(S2STError, match=rf"s.json: baseline\[0\] \(c1-r0\): {name} must be a finite number or null"):
        scores_from_mapping({"scorer_id": "s", "baseline": [item], "candidate": []}, "s.json")


@pytest.mark.parametrize("value", GARBAGE + [HUGE, -HUGE])
@pytest.mark.parametrize("field", ["send_t", "first_audio_t", "done_t", "audio_seconds", "ttfa_s"])
def test_request_metrics_never_yield_a_number_that_is_not_finite(field, value):
    from pytest_s2st.runs import request_metrics

    rec = {"status": "ok", "send_t": 100.0, "first_audio_t": 100.5, "done_t": 101.0, "audio_seconds": 2.0, field: value}
    for name, got in request_metrics(rec).items():
        assert got is None or math.isfinite(got), (name, got)


# the JSON readers: NaN / Infinity are not JSON, so a file holding them is refused in one line
def _json_readers(tmp: Path):
    from pytest_s2st import assets, distribute, runs
    from pytest_s2st.quality.policy import Policy
    from pytest_s2st.quality.scorefile import load_scores
    from pytest_s2st.workload import load_workload

    run_dir = tmp / "run"
    run_dir.mkdir(exist_ok=True)
    return {
        "saved run (s2st-merge, compare)": (tmp / "saved.json", distribute.load_saved_run),
        "scores": (tmp / "scores.json", load_scores),
        "policy": (tmp / "policy.json", Policy.load),
        "summary.json": (run_dir / runs.SUMMARY, lambda p: runs.read_summary(p.parent)),
        "requests.jsonl": (run_dir / runs.REQUESTS, lambda p: runs.read_records(p.parent)),
        "workload": (tmp / "w.jsonl", load_workload),
        "case JSON (s2st-serve --case)": (tmp / "case.json", lambda p: inputs.load_json(p, "the case JSON")),
        "asset manifest": (tmp / "manifest.json", assets.read_manifest),
    }


READER_NAMES = [
    "saved run (s2st-merge, compare)", "scores", "policy", "summary.json", "requests.jsonl", "workload",
    "case JSON (s2st-serve --case)", "asset manifest"]


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
@pytest.mark.parametrize("reader", READER_NAMES)
def test_json_readers_refuse_non_finite_constants(tmp_path, reader, constant):
    path, read = _json_readers(tmp_path)[reader]
    path.write_text('{"id": "x", "value": %s}\n{"id": "y"}\n' % constant)
    with pytest.raises(S2STError) as e:
        read(path)
    assert f"{constant} is not JSON" in str(e.value) and path.name in str(e.value) and "\n" not in str(e.value)


def test_json_writers_never_write_nan():
    with pytest.raises(ValueError):
        inputs.dumps({"x": NAN})


# ------------------------------------------------------------------------- 2. one bounded reader

SPECIAL = ["fifo", "dev_zero", "directory", "socket", "symlink_loop", "oversized"]


def _special(path: Path, kind: str, keep: list) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev_zero":
        path.symlink_to("/dev/zero")
    elif kind == "directory":
        path.mkdir()
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        keep.append(sock)
    elif kind == "symlink_loop":
        path.symlink_to(path.name)
    elif kind == "oversized":  # sparse: 4 GiB on no disk, over every bound
        with open(path, "wb") as fh:
            fh.truncate(4 * 2**30)


EXPECTED = {"fifo": "a FIFO, not a regular file", "dev_zero": "a character device, not a regular file",
            "directory": "a directory, not a regular file", "socket": "a socket, not a regular file",
            "symlink_loop": "a symlink loop", "oversized": "bytes, over the"}


def _finishes(fn, seconds: float = 20.0):
    """fn() in a thread: (finished, exception). A FIFO read that blocks leaves the thread waiting."""
    box: dict = {}

    def target():
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001
            box["exc"] = exc

    th = threading.Thread(target=target, daemon=True)
    th.start()
    th.join(seconds)
    return not th.is_alive(), box.get("exc")


def _load_config(path):
    from pytest_s2st.config import load_config
    from pytest_s2st.pipelines.base import MODEL_TYPES

    return load_config(path, known_model_types=MODEL_TYPES)


def _all_readers(tmp: Path):
    out = dict(_json_readers(tmp))
    out["config YAML"] = (tmp / "c.yaml", _load_config)
    out["policy YAML"] = (tmp / "p.yaml", lambda p: __import__("pytest_s2st.quality.policy").quality.policy.Policy.load(p))
    return out


@pytest.mark.parametrize("kind", SPECIAL)
@pytest.mark.parametrize("reader", READER_NAMES + ["config YAML", "policy YAML"])
def test_special_files_are_one_line_at_once(tmp_path, reader, kind):
    path, read = _all_readers(tmp_path)[reader]
    keep: list = []
    _special(path, kind, keep)
    finished, exc = _finishes(lambda: read(path))
    if kind == "fifo" and not finished:  # unblock the reader so the thread ends
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
    assert finished, f"{reader}: reading a {kind} did not return"
    assert isinstance(exc, S2STError), (reader, kind, repr(exc))
    assert "\n" not in str(exc) and path.name in str(exc), str(exc)
    assert EXPECTED[kind] in str(exc), str(exc)  # refused for what it is, before any read
    for sock in keep:
        sock.close()


ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
    for p, c in zip("abcdefgh", "bcdefghi"))  # 10**9 leaves once expanded


@pytest.mark.parametrize("reader", ["config YAML", "policy YAML"])
def test_yaml_alias_bomb_is_refused_before_it_expands(tmp_path, reader):
    path, read = _all_readers(tmp_path)[reader]
    path.write_text(ALIAS_BOMB)
    finished, exc = _finishes(lambda: read(path), 20.0)
    assert finished and isinstance(exc, S2STError) and "aliases expand to more than" in str(exc), repr(exc)


def test_recursive_yaml_alias_is_refused(tmp_path):
    with pytest.raises(S2STError, match="recursive alias"):
        inputs.parse_yaml("a: &a [*a]\n", "r.yaml")


# ------------------------------------------------------------------ 3. absurd but well-formed values

OPTION_VALUES = {
    "burstiness": ["nan", "-inf", "1e308", "1e-300", "0", "x"],
    "request_rate": ["nan", "-inf", "1e-300", "1e308", "0", "x"],
    "max_audio_s": ["nan", "inf", "-inf", "1e308", "0", "x"],
    "target_precision": ["nan", "inf", "-inf", "1e308", "1", "0", "x"],
    "max_time": ["nan", "inf", "1e308", "0"],
    "request_timeout": ["nan", "inf", "1e308", "0"],
    "level_parts_wait": ["nan", "inf", "1e308"],
    "min_rounds": ["nan", "inf", "1e308", str(10**18), "0"],
    "repeat": [str(10**18), "0"],
}


@pytest.mark.parametrize("name, value", [(n, v) for n, vs in OPTION_VALUES.items() for v in vs])
def test_absurd_option_values_are_refused_naming_the_form(name, value):
    from pytest_s2st.settings import BY_NAME, argparse_type

    import argparse

    with pytest.raises(argparse.ArgumentTypeError) as e:
        argparse_type(BY_NAME[name])(value)
    assert "\n" not in str(e.value) and repr(value) in str(e.value)


@pytest.mark.parametrize("name, value", [("max_audio_s", "1e308"), ("request_rate", "1e-9")])
def test_absurd_option_on_the_command_line_names_the_flag(pytester, name, value):
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    flag = "--s2st-" + name.replace("_", "-")
    result = pytester.runpytest(f"{flag}={value}")
    err = result.stderr.str()
    assert result.ret == 4 and flag in err and "Traceback" not in err, err


def test_quality_policy_is_checked_when_the_case_is_resolved(tmp_path):
    """A typo in `quality:` is refused by the config loader, for every test, with the closest key."""
    load_config = _load_config
    cfg = tmp_path / "c.yaml"
    cfg.write_text("general:\n  model_type: callable\nstage1:\n  factory: m:f\nquality:\n  scorer_id: s\n"
                   "  max_eror_rate_increase: 0.1\n")
    with pytest.raises(S2STError) as e:
        load_config(cfg)
    msg = str(e.value)
    assert "c.yaml:7 (quality.max_eror_rate_increase): unknown key 'max_eror_rate_increase'" in msg  # its own line
    assert "did you mean 'max_error_rate_increase'?" in msg
    cfg.write_text("general:\n  model_type: callable\nstage1:\n  factory: m:f\nquality:\n  scorer_id: s\n"
                   "  min_improvement_pct: .inf\n")
    with pytest.raises(S2STError, match="min_improvement_pct must be a finite number"):
        load_config(cfg)


def test_budget_and_policy_typos_name_the_closest_key():
    from pytest_s2st.budget import parse_budget
    from pytest_s2st.quality.policy import Policy

    with pytest.raises(S2STError, match=r"did you mean 'peak_rss_mib'\?"):
        parse_budget({"peak_rs_mib": 1}, "t")
    with pytest.raises(S2STError, match=r"did you mean 'speed_metric'\?"):
        Policy.from_mapping({"sped_metric": "rtf"}, "p")


# ----------------------------------------------------- 4 + 5. console scripts: one line, never a traceback

def _one_line(err: str) -> bool:
    return err.count("\n") == 1 and "Traceback" not in err


WEIRD_PATHS = ["a\nb.json", "a\x00b.json", "a\x1b[31mb.json", "-"]


@pytest.mark.parametrize("bad", WEIRD_PATHS)
@pytest.mark.parametrize("script", ["merge", "assess-policy", "assess-quality", "assess-baseline"])
def test_path_options_holding_control_characters_are_one_line(tmp_path, capsys, script, bad):
    from pytest_s2st.cli import assess, merge

    good = tmp_path / "good.json"
    good.write_text("{}")
    run = tmp_path / "run"
    run.mkdir()
    main, args = {"merge": (merge.main, [str(good), bad, "-o", str(tmp_path / "m.json")]),
                  "assess-policy": (assess.main, ["--baseline", str(run), "--candidate", str(run), "--policy", bad]),
                  "assess-quality": (assess.main, ["--baseline", str(run), "--candidate", str(run), "--quality", bad]),
                  "assess-baseline": (assess.main, ["--baseline", bad, "--candidate", str(run)])}[script]
    try:
        rc = main(args)
    except SystemExit as exc:  # a NUL is refused while parsing the arguments
        rc = exc.code
    out = capsys.readouterr()
    err = out.err or out.out
    if script == "assess-baseline" and "\x00" not in bad:  # the verdict: its header and one reason line
        assert rc == 2 and err.count("\n") == 2 and "no baseline: " in err, err
    else:
        assert rc == 2 and _one_line(err), err
    assert "\x00" not in err and "\x1b" not in err


def _saved_run() -> dict:
    row = {"fullname": "t.py::t", "name": "t", "stats": {"mean": 1.0, "data": [1.0]},
           "extra_info": {"s2st": {"identity": "t.py::t", "metrics": _metrics(1.0)}}}
    return {"machine_info": {"machine": "x86_64", "system": "Linux", "python_implementation": "CPython",
                             "python_version": "3.11"}, "commit_info": {"id": "a", "dirty": False, "project": "p"},
            "benchmarks": [row], "version": "5.1.0", "datetime": "x"}


def _paths(data, prefix=()):
    """Every (path) to a value inside nested dicts/lists: where one field can be mutated."""
    yield prefix
    if isinstance(data, dict):
        for k, v in data.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from _paths(v, prefix + (i,))


def _mutate(data, path, value):
    if not path:
        return value
    data = json.loads(json.dumps(data))
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return data


MUTANTS = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=6),
                       lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                       max_leaves=6) | st.just("[" * 50_000)


def _write_mutant(path: Path, data) -> None:
    text = data if isinstance(data, str) and data.startswith("[[") else json.dumps(data)  # NaN allowed: a bad file
    path.write_text(text)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_merge_fuzz_one_field_mutated(tmp_path_factory, data):
    from pytest_s2st.cli import merge

    base = _saved_run()
    path = data.draw(st.sampled_from(list(_paths(base))))
    root = tmp_path_factory.mktemp("m")
    (root / "a.json").write_text(json.dumps(base))
    second = dict(base, benchmarks=[dict(base["benchmarks"][0], fullname="t.py::u")])
    _write_mutant(root / "b.json", _mutate(second, path, data.draw(MUTANTS)))
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = merge.main([str(root / "a.json"), str(root / "b.json"), "-o", str(root / "m.json")])
    assert rc in (0, 2) and (rc == 0 or _one_line(err.getvalue())), err.getvalue()
    if rc == 0:
        json.loads((root / "m.json").read_text(), parse_constant=lambda c: pytest.fail(f"{c} written"))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_compare_fuzz_one_field_of_the_saved_run_mutated(data):
    """The compare hook's pure part: any mutated saved row gives tables and regressions, never a crash,
    and a gate on a mutated metric never passes silently."""
    from pytest_s2st.judging import regressions
    from pytest_s2st.report import render_compare
    from pytest_s2st.rows import Row, compared_rows
    from pytest_s2st.settings import compare_limits

    row = _saved_run()["benchmarks"][0]
    path = data.draw(st.sampled_from(list(_paths(row))))
    mutated = _mutate(row, path, data.draw(MUTANTS.filter(lambda v: not (isinstance(v, str) and v.startswith("[[")))))
    if not isinstance(mutated, dict):
        return
    compared = compared_rows(mutated)
    current = [Row("t", "t.py::t", _metrics(1.0), key="t.py::t")]
    lines = render_compare(current, compared)
    found = regressions(current, compared, compare_limits("peak_rss_mib:10%,flops:1%"))
    assert all("nan" not in line.lower() for line in lines)
    old = compared.get("t.py::t")
    if old is None or old.value("peak_rss_mib") is None:
        assert found  # nothing to compare with, or no usable value: never a silent pass


POLICY = {"scorer_id": "sid", "min_improvement_pct": 5, "max_duration_change_pct": 20, "max_ttfa_regression_pct": 50}


def _run_dir(root: Path, name: str, rtf: float, wav_bytes: bytes) -> Path:
    from pytest_s2st.quality.scorefile import pcm_sha256

    run = root / name
    (run / "wav").mkdir(parents=True)
    recs = []
    for i in range(2):
        rid = f"c1-r{i}"
        (run / "wav" / f"{rid}.wav").write_bytes(wav_bytes)
        recs.append({"id": rid, "concurrency": 1, "warmup": False, "status": "ok", "send_t": 10.0 * i,
                     "first_audio_t": 10.0 * i + 0.1, "done_t": 10.0 * i + rtf, "audio_seconds": 1.0,
                     "pcm_sha256": pcm_sha256(run / "wav" / f"{rid}.wav")})
    (run / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (run / "summary.json").write_text(json.dumps({"policy": POLICY}))
    return run


@pytest.fixture(scope="module")
def wav_bytes() -> bytes:
    from pytest_s2st.runs import wav_bytes as make

    import numpy as np

    t = np.arange(16000) / 16000
    return make((0.3 * 32767 * np.sin(2 * np.pi * 440 * t)).astype("<i2").tobytes(), 16000)


@pytest.mark.parametrize("value", GARBAGE + [HUGE, -HUGE, -0.0])
@pytest.mark.parametrize("field", ["send_t", "first_audio_t", "done_t", "audio_seconds", "ttfa_s", "concurrency"])
@pytest.mark.parametrize("side", ["baseline", "candidate"])
def test_assess_never_passes_a_record_whose_number_is_not_evidence(tmp_path, capsys, wav_bytes, side, field, value):
    """s2st-assess used to PASS a candidate whose timestamps were NaN against a 5 % speed-up policy."""
    from pytest_s2st.cli import assess

    base = _run_dir(tmp_path, "base", 0.8, wav_bytes)
    cand = _run_dir(tmp_path, "cand", 0.4, wav_bytes)  # twice as fast: PASS as written
    args = ["--baseline", str(base), "--candidate", str(cand), "--json", str(tmp_path / "v.json")]
    assert assess.main(args) == 0
    capsys.readouterr()
    run = base if side == "baseline" else cand
    recs = [json.loads(x) for x in (run / "requests.jsonl").read_text().splitlines()]
    recs[1][field] = value
    (run / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (tmp_path / "v.json").unlink()
    rc = assess.main(args)
    out = capsys.readouterr()
    text = out.out + out.err
    # a different concurrency is just another level; a ttfa_s of -0.0 is 0 s; a baseline sent at time 0
    # is merely slower: those may PASS. Everything else here is no evidence, or a worse candidate.
    harmless = field == "concurrency" or (field == "ttfa_s" and value == 0) or \
        (field == "send_t" and value == 0 and side == "baseline")
    if not harmless:
        assert rc != 0, text
    assert "nan" not in text.replace("NaN is not JSON", "").lower() and "Traceback" not in text
    if (tmp_path / "v.json").exists():
        json.loads((tmp_path / "v.json").read_text(), parse_constant=lambda c: pytest.fail(f"{c} written"))


def test_assess_refuses_a_corrupt_wav_as_missing_evidence(tmp_path, capsys, wav_bytes):
    from pytest_s2st.cli import assess

    base = _run_dir(tmp_path, "base", 0.8, wav_bytes)
    cand = _run_dir(tmp_path, "cand", 0.4, wav_bytes)
    (cand / "wav" / "c1-r1.wav").write_bytes(b"RIFF\x00\x00\x00\x00WAVEjunk")
    assert assess.main(["--baseline", str(base), "--candidate", str(cand)]) == 2
    out = capsys.readouterr().out
    assert "candidate WAV for c1-r1 unreadable" in out and "Traceback" not in out
    line = next(x for x in out.splitlines() if "unreadable" in x)  # libsndfile's reason, not its buffer's address
    assert line.count("c1-r1.wav") == 1 and "cannot read WAV: Error in WAV file. No 'data' chunk" in line
    assert "BytesIO" not in line and " at 0x" not in line
    (cand / "wav" / "c1-r1.wav").unlink()
    os.mkfifo(cand / "wav" / "c1-r1.wav")  # a FIFO named like a WAV: never read
    finished, exc = _finishes(lambda: assess.main(["--baseline", str(base), "--candidate", str(cand)]))
    assert finished and exc is None


def test_negative_durations_and_budgets_are_no_evidence():
    """From the mutation pass: a time before the send, and a negative budget, are refused."""
    from pytest_s2st.budget import parse_budget
    from pytest_s2st.runs import request_metrics

    rec = {"status": "ok", "send_t": 100.0, "first_audio_t": 99.0, "done_t": 98.0, "audio_seconds": 1.0}
    assert request_metrics(rec) == {"ttfa_s": None, "latency_s": None, "rtf": None}
    with pytest.raises(S2STError, match="flops must be a finite number >= 0"):
        parse_budget({"flops": -1}, "t")


def test_a_change_that_overflows_is_inconclusive_not_fail(tmp_path, capsys, wav_bytes):
    """From the mutation pass: a denormal baseline time (5e-324 s) makes the change % overflow to inf;
    that is no evidence (INCONCLUSIVE), not an "improvement of -inf %" FAIL."""
    from pytest_s2st.cli import assess

    base = _run_dir(tmp_path, "base", 0.8, wav_bytes)
    cand = _run_dir(tmp_path, "cand", 0.4, wav_bytes)
    recs = [json.loads(x) for x in (base / "requests.jsonl").read_text().splitlines()]
    for r in recs:
        r.update(send_t=0.0, first_audio_t=0.0, done_t=5e-324)
    (base / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert assess.main(["--baseline", str(base), "--candidate", str(cand)]) == 2
    out = capsys.readouterr().out
    assert "not a finite number" in out and "inf" not in out.replace("INCONCLUSIVE", ""), out


# ------------------------------------------------- 5. path options: a NUL or a line break names the flag

PATH_FLAGS = ["--s2st-workload", "--s2st-dump-dir", "--s2st-evidence-dir", "--s2st-baseline", "--s2st-quality",
              "--s2st-plot", "--s2st-dataset-path"]


@pytest.mark.parametrize("bad", ["a\x00b", "a\nb"])
@pytest.mark.parametrize("flag", PATH_FLAGS + ["--s2st-config"])
def test_nul_or_newline_in_a_path_option_is_one_line(pytester, flag, bad):
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest(f"{flag}={bad}")
    err = result.stderr.str()
    assert result.ret == 4 and "INTERNALERROR" not in err and "Traceback" not in err, err
    shown = bad.replace("\x00", "\\x00").replace("\n", "\\n")
    line = next(x for x in err.splitlines() if shown in x)  # the value, escaped, on one line
    assert flag in line, err


# ------------------------------------------ 8. the callable path: the user's own file:line, one line

FACTORY = '''\
def build(hidden=128):
    if hidden == -1:
        raise ValueError("hidden must be > 0")  # line 3
    if hidden == -2:
        return 42
    def forward(x):
        if x == "boom":
            raise KeyError("boom")  # line 8
        return x
    return forward


def build_any(**kwargs):
    return lambda x: x
'''


@pytest.fixture(params=["file", "module"])
def entry(request, tmp_path, monkeypatch):
    """The same factory named both ways a config can: 'file.py:attr' and 'package.module:attr'."""
    if request.param == "file":
        src = tmp_path / "user_model.py"
        src.write_text(FACTORY)
        return src, "user_model.py"
    pkg = tmp_path / f"userpkg_{abs(hash(str(tmp_path))) % 10**8}"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text(FACTORY)
    monkeypatch.syspath_prepend(str(tmp_path))
    return pkg / "mod.py", f"{pkg.name}.mod"


def _build(tmp_path, entry_text, stage_lines="", general_lines=""):
    from pytest_s2st.pipelines.base import build_pipeline

    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"general:\n  model_type: callable\n{general_lines}stage1:\n  entry: {entry_text}\n{stage_lines}")
    config = _load_config(cfg)
    return build_pipeline("callable", config.stages, device="cpu", config_path=config.path, config_lines=config.lines)


@pytest.mark.parametrize("kind, stage_lines, line", [
    ("factory raises", "  hidden: -1\n", 3),
    ("forward raises", "", 8),
    ("returns no callable", "  hidden: -2\n", 1),
])
def test_callable_failures_name_the_users_file_and_line(tmp_path, entry, kind, stage_lines, line):
    src, target = entry
    with pytest.raises(S2STError) as e:
        pipe = _build(tmp_path, f"{target}:build", stage_lines)
        pipe.stages[0].forward("boom")
    msg = str(e.value)
    assert "\n" not in msg and f"{src}:{line}" in msg, msg
    assert {"factory raises": "ValueError: hidden must be > 0", "forward raises": "KeyError: 'boom'",
            "returns no callable": "returned int, not a callable"}[kind] in msg, msg


def test_a_module_that_fails_to_import_names_its_line(tmp_path, entry):
    src, target = entry
    src.write_text(FACTORY + "\nraise RuntimeError('no GPU here')\n")
    with pytest.raises(S2STError) as e:
        _build(tmp_path, f"{target}:build")
    assert f"{src}:{FACTORY.count(chr(10)) + 2}" in str(e.value) and "RuntimeError: no GPU here" in str(e.value)


def test_a_misspelt_factory_argument_is_refused_with_the_closest_name(tmp_path, entry):
    _, target = entry
    with pytest.raises(S2STError) as e:
        _build(tmp_path, f"{target}:build", "  hiden: 256\n")
    assert "c.yaml:5 (stage1.hiden)" in str(e.value) and "did you mean 'hidden'?" in str(e.value), str(e.value)
    # the spelt-right key reaches the factory; general's keys, the framework's and **kwargs are not refused
    assert _build(tmp_path, f"{target}:build", "  hidden: 256\n  stage_name: enc\n  target_sr: 16000\n",
                  "  dataset_path: x.npy\n  hiden: 1\n").stages[0].forward(3) == 3
    assert _build(tmp_path, f"{target}:build_any", "  hiden: 256\n").stages[0].forward(3) == 3


# ------------------------------------------ 2. a WAV read for its hash is bounded too (no FIFO hang)

@pytest.mark.parametrize("reader", ["pcm_sha256", "load_16k", "pcm_snr_db"])
@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "directory"])
def test_a_special_file_named_like_a_wav_is_one_line_never_a_hang(tmp_path, reader, kind, wav_bytes):
    from pytest_s2st.quality.scorefile import pcm_sha256
    from pytest_s2st.quality.scorers import load_16k
    from pytest_s2st.quality.verdict import pcm_snr_db

    good = tmp_path / "good.wav"
    good.write_bytes(wav_bytes)
    wav = tmp_path / "x.wav"
    {"fifo": os.mkfifo, "dev_zero": lambda p: os.symlink("/dev/zero", p), "directory": os.mkdir}[kind](wav)
    call = {"pcm_sha256": lambda: pcm_sha256(wav), "load_16k": lambda: load_16k(wav),
            "pcm_snr_db": lambda: pcm_snr_db(good, wav)}[reader]
    try:
        finished, exc = _finishes(call, 10.0)
    finally:
        if kind == "fifo":  # release a reader blocked in open() (old code): a writer that closes at once
            try:
                os.close(os.open(wav, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
    assert finished and isinstance(exc, S2STError), exc
    assert str(wav) in str(exc) and "not a regular file" in str(exc) and "\n" not in str(exc)
    assert pcm_snr_db(good, good) is not None  # a real WAV still reads


def test_a_forward_that_raises_in_s2st_benchmark_is_one_line(pytester):
    """s2st_benchmark(fn, inputs): the failure names the user's line, with no traceback."""
    pytester.makepyfile(test_y="def model(x):\n    raise ValueError(f'bad input {x}')\n\n\n"
                               "def test_a(s2st_benchmark):\n    s2st_benchmark(model, [1])\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    out = result.stdout.str()
    assert result.ret == 1 and "Traceback" not in out and "raise ValueError" not in out, out
    result.stdout.fnmatch_lines(["stage 'stage1': the model raised ValueError: bad input 1 (at *test_y.py:2)"])
