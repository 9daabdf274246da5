"""pytest-xdist workers and CI shards give one result: real sessions (pytester) with -n 2, shards, s2st-merge."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_s2st.cli import merge as merge_cli
from pytest_s2st.distribute import MAX_RUN_BYTES, merge_saved_runs, parse_shard, shard_partition, worker_device
from pytest_s2st.errors import S2STError

from helpers import BENCH_TEST, write_case, write_tone_case

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

FAST = ["-p", "no:cacheprovider", "--s2st-warmup=0"]
XDIST = ["-p", "xdist", "-n", "2", "--dist", "loadgroup"]
LIN_FLOPS = 2 * 20 * 80 * 32   # Linear(80 -> 32) on (20, 80), per sample
TWO_FLOPS = LIN_FLOPS + 2 * 20 * 32 * 8

TESTS = '''
import pytest

@pytest.mark.s2st_models("callable-lin", "callable-two")
def test_inference(s2st_pipeline, s2st_dataset, s2st_benchmark):
    s2st_benchmark(s2st_pipeline, s2st_dataset)

@pytest.mark.s2st_models("callable-tone")
def test_service(s2st_service, s2st_workload, s2st_concurrency, s2st_load):
    s2st_load(s2st_service, s2st_workload, concurrency=s2st_concurrency)

@pytest.mark.s2st_budget(flops=1e12)
def test_measures_nothing():
    pass
'''


def one(text: str, fragment: str) -> None:
    assert text.count(fragment) == 1, f"{fragment!r} {text.count(fragment)} times in:\n{text}"


def test_two_workers_print_one_result_and_save_one_json(pytester):
    configs = [write_case(pytester.path, "lin", ["build_linear"]), write_case(pytester.path, "two", ["build_linear", "build_second"]),
               write_tone_case(pytester.path, "tone", service=True)]
    pytester.makepyfile(test_bench=TESTS)
    # the controller's core count, faked to 1: two workers then oversubscribe it
    pytester.makeconftest("import psutil\npsutil.cpu_count = lambda logical=True: 1\n")
    result = pytester.runpytest_subprocess(*FAST, *XDIST, *[f"--s2st-config={c}" for c in configs], "-v",
                                           "--benchmark-json=out.json", "--benchmark-autosave", "--s2st-evidence-dir=ev")
    out = result.stdout.str() + result.stderr.str()
    assert result.parseoutcomes() == {"passed": 4, "inconclusive": 1}, out
    assert result.ret == 0, out
    assert "Benchmarks are automatically disabled" not in out
    for fragment in ("s2st: runtime per sample, peak memory, FLOPs", "s2st: service (TTFA, RTF, latency",
                     "s2st INCONCLUSIVE", "s2st_budget set but the test measured nothing", "evidence (requests.jsonl",
                     "Name (time in", "warning: 2 xdist workers on 1 physical core(s) timed 2 cpu benchmark(s)"):
        one(out, fragment)
    result.stdout.fnmatch_lines(["test_inference?callable-two? *", "  stage1 *", "  stage2 *"])
    # one JSON with every worker's rows, named as a one-process run names them (no xdist "@group")
    data = json.loads((pytester.path / "out.json").read_text())
    autosaved = list(pytester.path.glob(".benchmarks/*/*.json"))
    assert len(autosaved) == 1 and len(json.loads(autosaved[0].read_text())["benchmarks"]) == 4  # saved once
    rows = {b["fullname"]: b for b in data["benchmarks"]}
    assert sorted(rows) == ["test_bench.py::test_inference[callable-lin]", "test_bench.py::test_inference[callable-two]",
                            "test_bench.py::test_service[callable-tone-c1]", "test_bench.py::test_service[callable-tone-c2]"]
    lin = rows["test_bench.py::test_inference[callable-lin]"]
    assert lin["extra_info"]["s2st"]["metrics"]["flops"]["value"] == LIN_FLOPS
    assert rows["test_bench.py::test_inference[callable-two]"]["extra_info"]["s2st"]["metrics"]["flops"]["value"] == TWO_FLOPS
    # timed for real on the worker: the dataset cycled to 5 rounds, each a positive duration
    assert len(lin["stats"]["data"]) == 5 and min(lin["stats"]["data"]) > 0  # 3 samples cycled to the default 5 rounds
    assert lin["stats"]["mean"] == pytest.approx(sum(lin["stats"]["data"]) / 5)
    workers = {b["extra_info"].get("s2st", b["extra_info"].get("s2st_service"))["xdist_worker"] for b in rows.values()}
    assert workers <= {"gw0", "gw1"} and workers
    c1, c2 = (rows[f"test_bench.py::test_service[callable-tone-c{c}]"]["extra_info"]["s2st_service"] for c in (1, 2))
    assert c1["xdist_worker"] == c2["xdist_worker"]  # loadgroup: one case's tests on one worker (server started once)
    assert c1["summary"]["n_ok"] == c2["summary"]["n_ok"] == 4
    # one evidence root for the session, whichever worker wrote
    roots = {Path(c["evidence_dir"]).parents[2] for c in (c1, c2)}
    assert len(roots) == 1 and roots.pop().parent == pytester.path / "ev"
    assert len(list((pytester.path / "ev").iterdir())) == 1


def test_shards_merge_into_one_run_that_both_compares_read(pytester):
    configs = [write_case(pytester.path, name, stages) for name, stages in
               (("lin", ["build_linear"]), ("np", ["build_numpy"]), ("two", ["build_linear", "build_second"]))]
    pytester.makepyfile(test_bench=BENCH_TEST)
    cfg_args = [f"--s2st-config={c}" for c in configs]

    def run(*args):
        result = pytester.runpytest_subprocess(*FAST, *cfg_args, *args)
        return result, result.stdout.str() + result.stderr.str()

    result, out = run("--benchmark-json=full.json")
    assert result.ret == 0, out
    shards = []
    for i in (1, 2):
        result, out = run(f"--s2st-shard={i}/2", f"--benchmark-json=shard{i}.json")
        assert result.ret == 0, out
        shards.append({b["fullname"] for b in json.loads((pytester.path / f"shard{i}.json").read_text())["benchmarks"]})
    full = {b["fullname"]: b for b in json.loads((pytester.path / "full.json").read_text())["benchmarks"]}
    assert shards[0] and shards[1] and not shards[0] & shards[1] and shards[0] | shards[1] == set(full)

    merged_path = pytester.path / "merged.json"
    assert merge_cli.main([str(pytester.path / "shard1.json"), str(pytester.path / "shard2.json"), "-o", str(merged_path)]) == 0
    merged = {b["fullname"]: b for b in json.loads(merged_path.read_text())["benchmarks"]}
    assert set(merged) == set(full)
    for name, row in merged.items():  # same rows, same FLOPs (per stage too) as one run
        s2st, ref = row["extra_info"]["s2st"], full[name]["extra_info"]["s2st"]
        assert s2st["metrics"]["flops"] == ref["metrics"]["flops"]
        assert [s["metrics"]["flops"] for s in s2st["stages"]] == [s["metrics"]["flops"] for s in ref["stages"]]
    # pytest-benchmark's own compare reads it
    exe = shutil.which("pytest-benchmark") or str(Path(sys.executable).parent / "pytest-benchmark")
    shown = subprocess.run([exe, "compare", str(merged_path), str(pytester.path / "full.json")],
                           capture_output=True, text=True, cwd=pytester.path)
    assert shown.returncode == 0 and "test_inference[callable-two]" in shown.stdout, shown.stdout + shown.stderr

    # ... and so do --benchmark-compare and --s2st-compare-fail, on a -n 2 run: a wider Linear doubles FLOPs
    from pytest_benchmark.utils import get_machine_id

    storage = pytester.path / "store" / get_machine_id()  # pytest-benchmark's storage layout
    storage.mkdir(parents=True)
    shutil.copy(merged_path, storage / "0001_merged.json")
    models = pytester.path / "models.py"
    models.write_text(models.read_text().replace("def build_linear(hidden=32)", "def build_linear(hidden=64)")
                      .replace("def build_second(hidden=32)", "def build_second(hidden=64)"))
    result, out = run(*XDIST, "--benchmark-storage=store", "--benchmark-compare", "--s2st-compare-fail=flops:1%")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, out
    # the regressions are counted on pytest's last line: "2 passed, 1 inconclusive, 2 regressed"; the numpy model's
    # FLOPs limit is its INCONCLUSIVE (no FLOPs to check), decided on its worker
    outcomes = result.parseoutcomes()
    assert outcomes["passed"] == 2 and outcomes["inconclusive"] == 1 and outcomes["regressed"] >= 1, out
    assert set(outcomes) == {"passed", "inconclusive", "regressed"}, out
    result.stdout.fnmatch_lines(["*s2st INCONCLUSIVE*", "test_bench.py::test_inference?callable-np?:",
                                 "    limit flops:1% not checked: flops n/a: no torch operation was dispatched*"])
    one(out, "s2st regressions (--s2st-compare-fail)")
    one(out, "s2st: compared with the saved run (then -> now)")
    assert "no counterpart" not in out
    result.stdout.fnmatch_lines(["*test_inference?callable-lin?*flops*"])


@pytest.mark.parametrize("args, fragment", [
    (["--s2st-shard=3/2"], "--s2st-shard: must be I/N with 1 <= I <= N (e.g. 1/2), got '3/2'"),
    (["--s2st-shard=half"], "--s2st-shard: must be I/N"),
])
def test_bad_shard_is_one_line(pytester, args, fragment):
    pytester.makepyfile(test_bench=BENCH_TEST)
    result = pytester.runpytest_subprocess(*FAST, *args)
    text = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR and "Traceback" not in text
    assert [line for line in text.splitlines() if fragment in line], text


def test_bad_shard_in_the_ini_names_the_ini_key(pytester):
    pytester.makeini("[pytest]\ns2st_shard = 0/4\n")
    pytester.makepyfile(test_bench=BENCH_TEST)
    result = pytester.runpytest_subprocess(*FAST)
    text = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR and "Traceback" not in text
    assert "ini option s2st_shard: must be I/N with 1 <= I <= N (e.g. 1/2), got '0/4'" in text, text


# ---------------------------------------------------------------------------------------------- pure parts

@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=8), max_size=40), st.integers(1, 7))
def test_shards_are_disjoint_cover_everything_and_keep_a_key_together(keys, count):
    items = list(enumerate(keys))
    parts = [shard_partition(items, lambda it: it[1], i, count) for i in range(1, count + 1)]
    kept = [p[0] for p in parts]
    assert sorted(x for k in kept for x in k) == sorted(items)          # union is everything, nothing twice
    for (keep, drop) in parts:
        assert sorted(keep + drop) == sorted(items)
    owners = {}
    for i, keep in enumerate(kept):
        for _, key in keep:
            assert owners.setdefault(key, i) == i                       # one key (case) on one shard
    sizes = [len({key for _, key in keep}) for keep in kept]
    assert max(sizes) - min(sizes) <= 1                                 # cases spread evenly


@given(st.text(max_size=12))
def test_parse_shard_accepts_only_i_of_n(text):
    try:
        index, count = parse_shard(text)
    except ValueError as exc:
        assert "must be I/N" in str(exc)
    else:
        assert 1 <= index <= count and [int(part) for part in text.split("/")] == [index, count]


@given(st.integers(0, 64), st.integers(0, 9))
def test_worker_k_uses_device_k_mod_count(k, count):
    for kind in ("cuda", "npu"):
        got = worker_device(kind, k, lambda asked: count)
        assert got == (f"{kind}:{k % count}" if count else kind)
    assert worker_device("cpu", k, lambda asked: count) == "cpu"
    assert worker_device("cuda:1", k, lambda asked: count) == "cuda:1"  # an explicit pin stays
    assert worker_device("cuda", None, lambda asked: 1 / 0) == "cuda"   # not a worker: torch not even asked


def saved(path: Path, names, machine=None, commit=None, version="5.3.1") -> Path:
    path.write_text(json.dumps({
        "machine_info": {"node": path.stem, "machine": "x86_64", "system": "Linux", "python_implementation": "CPython",
                         "python_version": "3.11.9", **(machine or {})},
        "commit_info": {"id": "abc", "dirty": False, "project": "p", **(commit or {})},
        "benchmarks": [{"fullname": n, "name": n, "stats": {"data": [1.0], "mean": 1.0}} for n in names],
        "datetime": "2026-01-01T00:00:00", "version": version}))
    return path


def test_merge_keeps_every_row_and_where_each_shard_ran(tmp_path):
    merged = merge_saved_runs([saved(tmp_path / "a.json", ["t::a", "t::b"]), saved(tmp_path / "b.json", ["t::c"])])
    assert [b["fullname"] for b in merged["benchmarks"]] == ["t::a", "t::b", "t::c"]
    assert [s["node"] for s in merged["machine_info"]["s2st_merged_from"]] == ["a", "b"]


@pytest.mark.parametrize("second, fragment", [
    (dict(names=["t::a"]), "b.json: benchmark 't::a' is also in"),
    (dict(names=["t::c", "t::c"]), "b.json: benchmark 't::c' is twice in it"),
    (dict(names=["t::c"], machine={"machine": "aarch64"}), "b.json: machine_info differs from"),
    (dict(names=["t::c"], machine={"python_version": "3.12.1"}), "python_version '3.11.9' != '3.12.1'"),
    (dict(names=["t::c"], commit={"id": "def"}), "b.json: commit_info differs from"),
    (dict(names=["t::c"], version="4.0.0"), "b.json: saved by pytest-benchmark '4.0.0'"),
])
def test_merge_refuses_what_is_not_one_run_in_one_line(tmp_path, capsys, second, fragment):
    a = saved(tmp_path / "a.json", ["t::a"])
    b = saved(tmp_path / "b.json", **second)
    assert merge_cli.main([str(a), str(b), "-o", str(tmp_path / "m.json")]) == 2
    err = capsys.readouterr().err
    assert fragment in err and err.count("\n") == 1, err
    assert not (tmp_path / "m.json").exists()


@pytest.mark.parametrize("content, fragment", [
    ("{not json", "not valid JSON"), ("[1, 2]", "top level is list"), ('{"machine_info": {}}', "'commit_info' missing"),
    ('{"machine_info": {}, "commit_info": {}, "benchmarks": [{"name": "x"}]}', "benchmarks[0] has no fullname/stats"),
    (b"\xff\xfe", "not utf-8 text"), ('{"machine_info": NaN}', "NaN is not JSON"),
])
def test_merge_refuses_a_file_that_is_not_a_saved_run(tmp_path, capsys, content, fragment):
    bad = tmp_path / "bad.json"
    bad.write_bytes(content if isinstance(content, bytes) else content.encode())
    assert merge_cli.main([str(saved(tmp_path / "a.json", ["t::a"])), str(bad), "-o", str(tmp_path / "m.json")]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: " in err and fragment in err and err.count("\n") == 1, err


def test_merge_bounds_what_it_reads(tmp_path, monkeypatch):
    import pytest_s2st.distribute as distribute

    monkeypatch.setattr(distribute, "MAX_RUN_BYTES", 400)
    big = saved(tmp_path / "big.json", [f"t::{i}" for i in range(20)])
    with pytest.raises(S2STError, match=r"big.json: saved run is \d+ bytes, over the 400 "):
        merge_saved_runs([saved(tmp_path / "a.json", []), big])
    assert MAX_RUN_BYTES >= 64 * 2**20


def test_merge_needs_two_runs_and_never_overwrites_an_input(tmp_path, capsys):
    a, b = saved(tmp_path / "a.json", ["t::a"]), saved(tmp_path / "b.json", ["t::b"])
    assert merge_cli.main([str(a), "-o", str(tmp_path / "m.json")]) == 2
    assert "give two or more saved runs" in capsys.readouterr().err
    assert merge_cli.main([str(a), str(b), "-o", str(a)]) == 2
    assert "is one of the inputs" in capsys.readouterr().err
    assert json.loads(a.read_text())["benchmarks"][0]["fullname"] == "t::a"


@settings(max_examples=100, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=12))
def test_merge_fuzz_any_json_is_merged_or_refused_in_one_line(tmp_path_factory, value):
    root = tmp_path_factory.mktemp("fuzz")
    (root / "x.json").write_text(json.dumps(value))
    try:
        merge_saved_runs([saved(root / "a.json", ["t::a"]), root / "x.json"])
    except S2STError as exc:
        assert "\n" not in str(exc) and "x.json" in str(exc)


def test_worker_k_pins_cuda_device_k_mod_count_in_a_real_session(pytester):
    """torch here is a CPU build: its device count is faked to 3 (conftest, loaded by every worker), so
    each worker's pin shows in the one line that then says CUDA is not available."""
    configs = [write_case(pytester.path, name, ["build_numpy"]) for name in ("a", "b", "c", "d")]
    pytester.makepyfile(test_bench=BENCH_TEST)
    pytester.makeconftest("import torch\ntorch.cuda.device_count = lambda: 3\n")
    result = pytester.runpytest_subprocess(*FAST, *XDIST, *[f"--s2st-config={c}" for c in configs],
                                           "--s2st-device=cuda", "-rf")
    out = result.stdout.str() + result.stderr.str()
    assert result.parseoutcomes() == {"errors": 4}, out  # the s2st_pipeline fixture fails: setup errors
    import re

    pinned = re.findall(r"--s2st-device=(cuda\S*): CUDA is not available", out)
    assert len(pinned) >= 4 and set(pinned) <= {"cuda:0", "cuda:1"} and "Traceback" not in out, out


def test_merge_reads_a_cpu_named_by_a_string(tmp_path, capsys):
    """machine_info["cpu"] as a plain name (another tool, a hand edit) rather than py-cpuinfo's object."""
    a = saved(tmp_path / "a.json", ["t::a"], machine={"cpu": "Intel Xeon"})
    b = saved(tmp_path / "b.json", ["t::b"], machine={"cpu": {"brand_raw": "AMD EPYC"}})
    assert merge_cli.main([str(a), str(b), "-o", str(tmp_path / "m.json")]) == 0, capsys.readouterr().err
    merged = json.loads((tmp_path / "m.json").read_text())
    assert [s["cpu"] for s in merged["machine_info"]["s2st_merged_from"]] == ["Intel Xeon", "AMD EPYC"]


def repeat_run(path: Path, runtime: str, s2st: str | None = None) -> Path:
    """A saved run of one s2st benchmark whose runtime_s value is written as the given JSON text."""
    row = s2st or '{"metrics": {"runtime_s": {"value": %s, "details": {"rounds_s": [1.0]}}}}' % runtime
    text = json.dumps({
        "machine_info": {"node": path.stem, "machine": "x86_64", "system": "Linux", "python_implementation": "CPython",
                         "python_version": "3.11.9"},
        "commit_info": {"id": "abc", "dirty": False, "project": "p"},
        "benchmarks": [{"fullname": "t::a", "name": "t::a", "stats": {"data": [1.0], "mean": 1.0},
                        "extra_info": {"s2st": "@ROW@"}}],
        "datetime": "2026-01-01T00:00:00", "version": "5.3.1"}).replace('"@ROW@"', row)
    path.write_text(text)
    return path


@pytest.mark.parametrize("runtime, s2st, fragment", [
    ("1e400", None, "the number 1e400 overflows to infinity"),
    ("1", '"fast"', "benchmarks[0] (t::a): extra_info.s2st is a JSON string, not an object"),
    ("1", '{"metrics": [1]}', "benchmarks[0] (t::a): extra_info.s2st.metrics is not an object"),
])
def test_merge_repeats_refuses_a_run_it_cannot_fold_in_one_line(tmp_path, capsys, runtime, s2st, fragment):
    a = repeat_run(tmp_path / "a.json", "1.0")
    b = repeat_run(tmp_path / "b.json", runtime, s2st)
    assert merge_cli.main([str(a), str(b), "--repeats", "-o", str(tmp_path / "m.json")]) == 2
    err = capsys.readouterr().err
    assert f"{b}: " in err and fragment in err and err.count("\n") == 1 and "Traceback" not in err, err


def test_merge_repeats_of_huge_finite_means_stays_finite(tmp_path, capsys):
    """Two means of 1e308: their sum overflows, their mean does not."""
    runs = [repeat_run(tmp_path / f"{n}.json", "1e308") for n in "ab"]
    assert merge_cli.main([*map(str, runs), "--repeats", "-o", str(tmp_path / "m.json")]) == 0, capsys.readouterr()
    entry = json.loads((tmp_path / "m.json").read_text())["benchmarks"][0]["extra_info"]["s2st"]["metrics"]["runtime_s"]
    assert entry["value"] == 1e308 and entry["details"]["runs_s"] == [1e308, 1e308]
