"""s2st-compare and s2st-merge --repeats on real saved runs (one pytest session's --benchmark-json) and on the
files a careless or hostile user gives them: one line and a documented exit code, never a verdict between runs
that did not measure the same work, never a run dropped without a word."""
from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from helpers import BENCH_TEST, session_env, write_case
from pytest_s2st.cli import compare as compare_cli
from pytest_s2st.cli import merge as merge_cli
from pytest_s2st.distribute import MAX_RUN_BYTES, load_saved_run
from pytest_s2st.errors import S2STError

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict:
    """A real saved run: one s2st benchmark (a torch Linear over 3 samples), as --benchmark-json wrote it."""
    root = tmp_path_factory.mktemp("saved")
    cfg = write_case(root, "lin", ["build_linear"])
    (root / "test_bench.py").write_text(BENCH_TEST)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--s2st-warmup=0",
                           f"--s2st-config={cfg}", "--benchmark-json=run.json", "test_bench.py"],
                          cwd=root, env=session_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((root / "run.json").read_text())


def write(path: Path, data: dict) -> Path:
    path.write_text(json.dumps(data))
    return path


def s2st_of(data: dict) -> dict:
    return data["benchmarks"][0]["extra_info"]["s2st"]


def run(main, argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's refusal
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def refused_line(code: int, err: str, *names: str) -> str:
    assert code == 2 and "Traceback" not in err, (code, err)
    lines = err.splitlines()
    assert len(lines) == 1 and all(n in lines[0] for n in names), (names, err)
    return lines[0]


# ------------------------------------------------------------------------------------------- s2st-compare

def test_the_exit_codes_are_the_documented_ones():
    doc = (ROOT / "docs" / "options.md").read_text()
    table = dict(re.findall(r"^\| `(\d)` \| (.+?) \|$", doc.split("### s2st-compare exit status")[1], re.M))
    assert sorted(table) == ["0", "1", "2", "3"]
    assert (compare_cli.EXIT_OK, compare_cli.EXIT_FAIL, compare_cli.EXIT_REFUSED, compare_cli.EXIT_NO_VERDICT) == \
        (0, 1, 2, 3)
    assert "same work" in table["3"] and "refused" in table["2"]


def test_a_run_against_itself_compares_and_passes(saved, tmp_path):
    a = write(tmp_path / "a.json", saved)
    code, out, err = run(compare_cli.main, [str(a), str(a), "--fail", "flops:1%,tensor_peak_mib:1%"])
    assert code == 0, out + err
    assert "other work" not in out and "s2st-compare: 0 regression(s), 0 not checked" in out


def test_another_machine_kind_gets_no_verdict(saved, tmp_path):
    """Issue: an aarch64 run against an x86_64 one gave a verdict and exit 0 (s2st-merge refuses such runs)."""
    other = copy.deepcopy(saved)
    other["machine_info"]["machine"] = "aarch64"
    a, b = write(tmp_path / "a.json", saved), write(tmp_path / "b.json", other)
    code, out, _ = run(compare_cli.main, [str(a), str(b), "--fail", "flops:1%"])
    assert code == 3
    assert out.splitlines() == [f"s2st-compare: no verdict: {a} and {b} ran on different machine kinds "
                                f"(machine {saved['machine_info']['machine']} -> aarch64)"]


def test_another_python_version_is_said_not_refused(saved, tmp_path):
    other = copy.deepcopy(saved)
    other["machine_info"]["python_version"] = "3.99.0"
    code, out, _ = run(compare_cli.main, [str(write(tmp_path / "a.json", saved)), str(write(tmp_path / "b.json", other))])
    assert code == 0 and f"note: python_version {saved['machine_info']['python_version']} -> 3.99.0" in out


@pytest.mark.parametrize("field, value, said", [
    ("samples", 500, "samples 500 -> 3"),
    ("runtime_protocol", "upstream", "runtime_protocol upstream -> warm"),
    ("threads", 8, "threads 8 -> 1"),
    ("model_type", "S2UT", "model_type S2UT -> callable"),
    ("inputs_sha256", "0" * 64, "inputs_sha256 000000000000 -> "),
])
def test_a_counterpart_of_other_work_gets_no_verdict(saved, tmp_path, field, value, said):
    """Issue: a saved row of another config with 500 samples under the same test id read 'x0.000, faster'."""
    old = copy.deepcopy(saved)
    s2st_of(old)[field] = value
    s2st_of(old)["metrics"]["runtime_s"]["value"] *= 1000  # would read as a gross change were it compared
    a, b = write(tmp_path / "a.json", old), write(tmp_path / "b.json", saved)
    code, out, _ = run(compare_cli.main, [str(a), str(b)])
    assert code == 3 and "(gross" not in out and "other work" in out, out
    [line] = [line for line in out.splitlines() if "not the same work" in line]
    assert line.startswith("s2st-compare: test_bench.py::test_inference[callable-lin]: not the same work as the "
                           f"compared row (") and said in line and line.endswith("): no verdict")
    code, out, _ = run(compare_cli.main, [str(a), str(b), "--fail", "flops:1%"])
    assert code == 3 and "not checked: test_bench.py::test_inference[callable-lin]: not the same work" in out
    assert "regressed:" not in out


def test_a_model_file_of_another_content_is_the_change_compare_is_for(saved, tmp_path):
    """The model's code and weights may differ (that is what a compare judges); their names may not."""
    old = copy.deepcopy(saved)
    assets = s2st_of(old)["assets"]
    s2st_of(old)["assets"] = {k: "f" * 64 for k in assets}  # same files, other content
    s2st_of(old)["metrics"]["flops"]["value"] /= 2
    code, out, _ = run(compare_cli.main, [str(write(tmp_path / "a.json", old)), str(write(tmp_path / "b.json", saved)),
                                          "--fail", "flops:1%"])
    assert code == 1 and "regressed: test_bench.py::test_inference[callable-lin]: flops regressed +100.00%" in out
    s2st_of(old)["assets"] = {"/x/other_model.py": "f" * 64}
    code, out, _ = run(compare_cli.main, [str(write(tmp_path / "a.json", old)), str(write(tmp_path / "b.json", saved))])
    assert code == 3 and "model files other_model.py -> models.py" in out


@pytest.mark.parametrize("old_bleu, new_bleu, code, said", [
    (20.0, 30.0, 0, None),
    (30.0, 20.0, 1, "bleu regressed -33.33% (30.00 -> 20.00; higher is better), limit bleu:1%"),
])
def test_compare_honours_a_metric_where_higher_is_better(saved, tmp_path, old_bleu, new_bleu, code, said):
    old, new = copy.deepcopy(saved), copy.deepcopy(saved)
    s2st_of(old)["metrics"]["bleu"] = {"value": old_bleu, "method": "sacrebleu"}
    s2st_of(new)["metrics"]["bleu"] = {"value": new_bleu, "method": "sacrebleu"}
    got, out, _ = run(compare_cli.main, [str(write(tmp_path / "a.json", old)), str(write(tmp_path / "b.json", new)),
                                         "--fail", "bleu:1%"])
    assert got == code, out
    assert (said in out) if said else "regressed" not in out.replace("0 regression(s)", "")


def test_a_bare_number_limit_is_refused(saved, tmp_path):
    a = write(tmp_path / "a.json", saved)
    code, _, err = run(compare_cli.main, [str(a), str(a), "--fail", "runtime_s:5"])
    refused_line(code, err, "--fail", "a bare number is ambiguous", "runtime_s:5%", "runtime_s:5s")


def _hostile(path: Path, kind: str, good: str) -> None:
    if kind == "truncated":
        path.write_text(good[: len(good) // 2])
    elif kind == "directory":
        path.mkdir()
    elif kind == "symlink loop":
        path.symlink_to(path)
    elif kind == "device":
        path.symlink_to("/dev/zero")
    elif kind == "dangling symlink out of the folder":
        path.symlink_to("/nonexistent/../../etc/never.json")
    elif kind == "non-UTF-8":
        path.write_bytes(good.encode()[:100] + b"\xff\xfe" + good.encode()[100:])
    elif kind == "NaN":
        path.write_text(good.replace('"samples": 3', '"samples": NaN', 1))
    elif kind == "huge":
        with open(path, "wb") as fh:
            fh.truncate(MAX_RUN_BYTES + 1)  # sparse: costs no disk
    elif kind == "benchmarks not a list":
        path.write_text(good.replace('"benchmarks": [', '"benchmarks": {"x": [', 1).replace('], "datetime"', ']}, "datetime"'))
    elif kind == "stats a string":
        data = json.loads(good)
        data["benchmarks"][0]["stats"] = "fast"
        path.write_text(json.dumps(data))
    elif kind == "deep":
        path.write_text("[" * 100000)


HOSTILE = ["truncated", "directory", "symlink loop", "device", "dangling symlink out of the folder", "non-UTF-8", "NaN",
           "huge", "benchmarks not a list", "stats a string", "deep"]


@pytest.mark.parametrize("kind", HOSTILE)
@pytest.mark.parametrize("side", ["old", "new"])
def test_a_bad_saved_run_is_one_line_naming_it(saved, tmp_path, kind, side):
    good = json.dumps(saved)
    ok, bad = write(tmp_path / "ok.json", saved), tmp_path / "bad.json"
    _hostile(bad, kind, good)
    argv = [str(bad), str(ok)] if side == "old" else [str(ok), str(bad)]
    code, out, err = run(compare_cli.main, argv)
    refused_line(code, err, "s2st-compare: error: ", str(bad))
    assert out == ""


@pytest.mark.parametrize("kind", HOSTILE)
def test_merge_refuses_the_same_bad_files_in_one_line(saved, tmp_path, kind):
    ok, bad = write(tmp_path / "ok.json", saved), tmp_path / "bad.json"
    _hostile(bad, kind, json.dumps(saved))
    code, _, err = run(merge_cli.main, [str(ok), str(bad), "--repeats", "-o", str(tmp_path / "m.json")])
    refused_line(code, err, "s2st-merge: error: ", str(bad))
    assert not (tmp_path / "m.json").exists()


# ------------------------------------------------------------------------------------------- s2st-merge --repeats

def _runtime(data: dict, value) -> dict:
    out = copy.deepcopy(data)
    s2st_of(out)["metrics"]["runtime_s"]["value"] = value
    return out


def test_merge_repeats_folds_three_real_runs(saved, tmp_path):
    runs = [write(tmp_path / f"r{i}.json", _runtime(saved, v)) for i, v in enumerate((1.0, 2.0, 6.0))]
    code, out, err = run(merge_cli.main, [*map(str, runs), "--repeats", "-o", str(tmp_path / "m.json")])
    assert code == 0, err
    assert out.startswith("s2st-merge: 1 benchmark(s) from 3 run(s)")
    runtime = s2st_of(json.loads((tmp_path / "m.json").read_text()))["metrics"]["runtime_s"]
    assert runtime["value"] == 3.0 and runtime["details"]["runs_s"] == [1.0, 2.0, 6.0]  # (1 + 2 + 6) / 3


@pytest.mark.parametrize("edit, said", [
    (lambda d: _runtime(d, "fast"), "extra_info.s2st.metrics.runtime_s.value is a JSON string \"fast\", not a runtime"),
    (lambda d: _runtime(d, None), "extra_info.s2st.metrics.runtime_s.value is null, not a runtime in seconds"),
    (lambda d: _runtime(d, -1.0), "extra_info.s2st.metrics.runtime_s.value is a JSON number -1.0"),
    (lambda d: _runtime(d, True), "is a JSON boolean true"),
    (lambda d: {**d, "benchmarks": [{k: v for k, v in d["benchmarks"][0].items() if k != "extra_info"}]},
     "a plain pytest-benchmark row (no extra_info.s2st) where"),
    (lambda d: json.loads(json.dumps(d).replace('"samples": 3', '"samples": 500')), "not the same work as in"),
])
def test_merge_repeats_refuses_a_run_it_would_drop(saved, tmp_path, edit, said):
    """Issue: b's runtime a string, null, or b a plain pytest-benchmark row gave '1 benchmark(s) from 3 run(s)',
    the merged row a's alone."""
    a, b, c = (write(tmp_path / f"{n}.json", saved) for n in "abc")
    write(b, edit(saved))
    code, out, err = run(merge_cli.main, [str(a), str(b), str(c), "--repeats", "-o", str(tmp_path / "m.json")])
    line = refused_line(code, err, f"{b}: test_bench.py::test_inference[callable-lin]: ", said)
    assert out == "" and not (tmp_path / "m.json").exists(), line


def test_merge_repeats_refuses_plain_rows_it_would_keep_one_run_of(saved, tmp_path):
    plain = copy.deepcopy(saved)
    del plain["benchmarks"][0]["extra_info"]
    a, b = write(tmp_path / "a.json", plain), write(tmp_path / "b.json", plain)
    code, _, err = run(merge_cli.main, [str(a), str(b), "--repeats", "-o", str(tmp_path / "m.json")])
    refused_line(code, err, "not an s2st row (no extra_info.s2st) in any run", "merge such rows without --repeats")


def test_merge_repeats_folds_past_a_details_of_another_type(saved, tmp_path):
    """Found by the fuzz below: runtime_s.details `true` in one run crashed the fold of the waits (AttributeError)."""
    odd = copy.deepcopy(saved)
    s2st_of(odd)["metrics"]["runtime_s"]["details"] = True
    a, b = write(tmp_path / "a.json", saved), write(tmp_path / "b.json", odd)
    code, _, err = run(merge_cli.main, [str(a), str(b), "--repeats", "-o", str(tmp_path / "m.json")])
    assert code == 0 and "Traceback" not in err, err
    details = s2st_of(json.loads((tmp_path / "m.json").read_text()))["metrics"]["runtime_s"]["details"]
    rounds = len(s2st_of(saved)["metrics"]["runtime_s"]["details"]["rounds_s"])
    # both runs' runtimes kept; b's details hold no rounds, so the rounds and their waits are a's, side by side
    assert len(details["runs_s"]) == 2 and len(details["rounds_s"]) == len(details["waited_s"]) == rounds


# ------------------------------------------------------------------------------------------- fuzz

def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value[:3]):
            yield from _paths(v, prefix + (i,))


json_values = st.recursive(st.none() | st.booleans() | st.integers(-10**30, 10**30) | st.text(max_size=8)
                           | st.floats(allow_nan=False, allow_infinity=False),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                           max_leaves=6)


@settings(max_examples=120, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzz_the_saved_run_reader_and_compare(saved, tmp_path, data):
    """Any one part of a real saved run replaced by any JSON value: the reader returns a run or refuses in one
    line; compare then answers with a documented exit code, never a traceback."""
    paths = list(_paths(saved))
    where = data.draw(st.sampled_from(paths))
    mutated = copy.deepcopy(saved)
    value = data.draw(json_values)
    if where:
        parent = mutated
        for key in where[:-1]:
            parent = parent[key]
        parent[where[-1]] = value
    else:
        mutated = value
    bad = write(tmp_path / "fuzz.json", mutated)
    try:
        load_saved_run(bad)
    except S2STError as exc:
        assert "\n" not in str(exc) and str(bad) in str(exc)
    good = write(tmp_path / "good.json", saved)
    for argv in ([str(good), str(bad), "--fail", "runtime_s:5%,flops:1%,bleu:1%"], [str(bad), str(good)]):
        code, _, err = run(compare_cli.main, argv)
        assert code in (0, 1, 2, 3) and "Traceback" not in err, (where, value, err)
        assert code != 2 or len(err.splitlines()) == 1
    for argv in ([str(good), str(bad), "--repeats"], [str(bad), str(good)]):
        code, _, err = run(merge_cli.main, [*argv, "-o", str(tmp_path / "m.json")])
        assert code in (0, 2) and "Traceback" not in err and (code == 0 or len(err.splitlines()) == 1), err
    os.unlink(bad)
