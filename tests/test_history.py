"""The results history: saved runs (a real session's JSON, a plain pytest-benchmark row) into SQLite and a real
PostgreSQL server, writers side by side, change points and window alerts on seeded series, the CLI."""
from __future__ import annotations

import copy
import json
import math
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from helpers import session_env
from pg import postgres

from pytest_s2st.cli import history as cli
from pytest_s2st.errors import S2STError
from pytest_s2st.history import records, store
from pytest_s2st.history.changes import change_points, window_alert, window_alerts
from pytest_s2st.history.store import SeriesKey, open_store

LINEAR = '''
import torch

layer = torch.nn.Linear(80, 80)


@torch.inference_mode()
def my_model(x):
    return layer(x)


def test_my_model(s2st_benchmark):
    s2st_benchmark(my_model, [torch.randn(frames, 80) for frames in (50, 100, 150, 200)])


def test_plain(benchmark):
    benchmark(sum, range(100))
'''


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """One real session's --benchmark-json: an s2st row and a plain pytest-benchmark row."""
    root = tmp_path_factory.mktemp("session")
    (root / "test_my_model.py").write_text(LINEAR)
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_my_model.py",
                          "--benchmark-json", "out.json"], cwd=root, env=session_env(), capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    return root / "out.json"


def test_a_session_row_becomes_points_with_their_intervals(saved):
    doc = records.load_document(saved)
    raw = json.loads(saved.read_text())
    points = {(p.benchmark, p.part, p.metric): p for p in doc.points if p.statistic != "own mean"}
    flops = points[("test_my_model.py::test_my_model", "total", "flops")]
    assert flops.value == 2 * 125 * 80 * 80  # the mean of 2*frames*80*80 over 50..200 frames
    runtime = points[("test_my_model.py::test_my_model", "total", "runtime_s")]
    details = raw["benchmarks"][0]["extra_info"]["s2st"]["metrics"]["runtime_s"]["details"]
    assert runtime.statistic == "mean" and runtime.n == details["rounds"]
    assert runtime.low == pytest.approx(runtime.value * (1 - details["precision"]))
    assert runtime.high == pytest.approx(runtime.value * (1 + details["precision"]))
    assert ("test_my_model.py::test_my_model", "stage1", "flops") in points
    device = points[("test_my_model.py::test_my_model", "total", "device_peak_mib")]
    assert device.value is None and device.reason == "no device memory on cpu"  # kept as missing, never 0
    assert doc.run.torch and doc.run.torch.startswith("2.13") and doc.run.machine


def test_the_own_time_series_is_the_rounds_less_their_wait():
    """rounds 10, 12, 30 ms with 0, 2, 19 ms waited for a CPU: own time 10, 10, 11 ms, mean 10.333 ms."""
    row = {"fullname": "t.py::t", "extra_info": {"s2st": {"metrics": {"runtime_s": {
        "value": 0.017333, "method": "timer", "details": {"statistic": "mean", "rounds": 3,
                                                           "rounds_s": [0.010, 0.012, 0.030],
                                                           "waited_s": [0.0, 0.002, 0.019]}}}}}}
    doc = records.from_document({"benchmarks": [row], "datetime": "2026-01-01T00:00:00"}, "hand-made")
    own = next(p for p in doc.points if p.statistic == "own mean")
    assert own.value == pytest.approx(0.031 / 3) and own.n == 3
    row["extra_info"]["s2st"]["metrics"]["runtime_s"]["details"]["waited_s"] = [0.0, None, 0.0]
    doc = records.from_document({"benchmarks": [row], "datetime": "2026-01-01T00:00:00"}, "hand-made")
    assert [p.statistic for p in doc.points] == ["mean"]  # a reading missing: no own time claimed


def test_a_service_level_is_a_part_of_its_own_with_each_statistic_and_its_gate_verdict():
    row = {"fullname": "b.py::test_load[tts-c4]", "extra_info": {"s2st_service": {
        "concurrency": 4, "summary": {"ttfa_s": {"mean": 0.2, "p50": 0.19, "p90": 0.3, "p99": 0.4, "nope": 1},
                                      "throughput": 3.5, "error_rate": 0.0, "rtf": "NaN"},
        "verdict": {"status": "INCONCLUSIVE", "reasons": ["no baseline"]}}}}
    doc = records.from_document({"benchmarks": [row], "datetime": "2026-01-01T00:00:00"}, "hand-made")
    got = {(p.part, p.metric, p.statistic): p.value for p in doc.points}
    assert got == {("c4", "ttfa_s", "mean"): 0.2, ("c4", "ttfa_s", "p50"): 0.19, ("c4", "ttfa_s", "p90"): 0.3,
                   ("c4", "ttfa_s", "p99"): 0.4, ("c4", "throughput", ""): 3.5, ("c4", "error_rate", ""): 0.0}
    assert [(v.kind, v.verdict, v.detail) for v in doc.verdicts] == [("gate", "INCONCLUSIVE", "no baseline")]


def test_a_plain_row_is_its_mean_with_a_t_interval_computed_by_hand(saved):
    from scipy import stats

    doc = records.load_document(saved)
    plain = [p for p in doc.points if p.benchmark.endswith("::test_plain")]
    assert [p.metric for p in plain] == ["runtime_s"]
    row = next(b for b in json.loads(saved.read_text())["benchmarks"] if b["name"] == "test_plain")["stats"]
    half = stats.t.ppf(0.975, row["rounds"] - 1) * row["stddev"] / math.sqrt(row["rounds"])
    assert plain[0].value == row["mean"]
    assert (plain[0].low, plain[0].high) == pytest.approx((row["mean"] - half, row["mean"] + half), rel=1e-6)


@pytest.mark.parametrize("df", [1, 4, 29, 30, 31, 45, 100, 5000])
def test_the_t_quantile_without_scipy_is_scipys(df):
    from scipy import stats

    assert records._t95(df) == pytest.approx(float(stats.t.ppf(0.975, df)), rel=1e-6)


@pytest.mark.parametrize("text, why", [
    ("[]", "not a pytest-benchmark JSON document"),
    ('{"benchmarks": {}}', "not a pytest-benchmark JSON document"),
    ('{"benchmarks": []}', "no 'datetime'"),
    ('{"benchmarks": [], "datetime": 5}', "no 'datetime'"),
    ("{", "not valid JSON"),
])
def test_a_file_that_is_no_saved_run_is_one_line_naming_it(tmp_path, text, why):
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    with pytest.raises(S2STError) as exc:
        records.load_document(bad)
    assert str(bad) in str(exc.value) and why in str(exc.value)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner,
                                                                                 max_size=4), max_leaves=30))
def test_documents_fuzzed_give_rows_or_one_line(junk):
    doc = {"benchmarks": [junk, {"fullname": "t", "extra_info": {"s2st": junk, "s2st_service": junk}, "stats": junk}],
           "datetime": "2026-01-01T00:00:00", "machine_info": junk, "commit_info": junk}
    try:
        out = records.from_document(doc, "fuzz")
    except S2STError:
        return
    assert all(isinstance(p.benchmark, str) and (p.value is None or math.isfinite(p.value)) for p in out.points)


def _docs(saved: Path, n: int, scale=lambda i: 1.0, branch: str = "main", seed: int = 0, jitter: float = 0.0):
    base = json.loads(saved.read_text())
    rng = random.Random(seed)
    for i in range(n):
        doc = copy.deepcopy(base)
        doc["datetime"] = f"2026-11-{1 + i // 24:02d}T{i % 24:02d}:{seed % 60:02d}:00+00:00"
        doc["commit_info"] = {"id": f"{seed:04x}{i:04x}" + "0" * 32, "time": doc["datetime"], "branch": branch,
                              "dirty": False}
        row = doc["benchmarks"][0]["extra_info"]["s2st"]["metrics"]
        row["runtime_s"]["value"] = 1e-3 * scale(i) * math.exp(rng.gauss(0, jitter))
        yield records.from_document(doc, f"doc {i}")


RUNTIME = SeriesKey("test_my_model.py::test_my_model", "total", "runtime_s", "mean")


def test_sqlite_keeps_each_run_once_and_reads_the_series_in_order(saved, tmp_path):
    with open_store(tmp_path / "h.sqlite") as db:
        docs = list(_docs(saved, 5, scale=lambda i: 1 + i))
        for doc in reversed(docs):  # arrival order is not history order: commit time is
            assert db.append(doc) is not None
        assert db.append(docs[0]) is None and db.run_count() == 5
        assert [round(e.point.value * 1e3, 6) for e in db.series(RUNTIME)] == [1, 2, 3, 4, 5]
        assert db.series(RUNTIME, branch="other") == []


WRITER = textwrap.dedent('''
    import json, sys
    from pytest_s2st.history import records, store
    base = json.load(open(sys.argv[2]))
    db = store.open_store(sys.argv[1])
    for i in range(int(sys.argv[4])):
        base["datetime"] = f"2026-11-01T00:{i:02d}:00+{sys.argv[3]}"
        db.append(records.from_document(base, "w"))
''')


def _two_writers(url: str, saved: Path, each: int = 20) -> None:
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, url, str(saved), zone, str(each)],
                              stderr=subprocess.PIPE, text=True) for zone in ("01:00", "02:00")]
    for p in procs:
        assert p.wait(timeout=300) == 0, p.stderr.read()


def test_two_sqlite_writers_at_once_lose_no_row(saved, tmp_path):
    url = str(tmp_path / "h.sqlite")
    _two_writers(url, saved)
    points = len(records.load_document(saved).points)
    with open_store(url) as db:
        assert db.run_count() == 40
        assert int(db._rows("SELECT COUNT(*) FROM s2st_points")[0][0]) == 40 * points


def test_postgresql_keeps_what_sqlite_keeps_and_two_writers_lose_nothing(saved, tmp_path):
    from pytest_s2st.history.judge import judge

    with postgres() as url:
        sqlite_db, pg_db = open_store(tmp_path / "h.sqlite"), open_store(url)
        docs = list(_docs(saved, 30, scale=lambda i: 1.1 if i >= 20 else 1.0, jitter=0.01))
        for doc in docs:
            sqlite_db.append(doc)
        assert pg_db.append_all(docs + docs[:3]) == (30, 3)  # an import's batches: each run once
        assert pg_db.keys() == sqlite_db.keys()
        for key in sqlite_db.keys():
            assert pg_db.series(key) == [e.__class__(e.run_id, e.run, e.point) for e in sqlite_db.series(key)]
        a, b = judge(RUNTIME, sqlite_db.series(RUNTIME)), judge(RUNTIME, pg_db.series(RUNTIME))
        assert [c.index for c in a.changes] == [c.index for c in b.changes] == [20]
        from pytest_s2st.history.site import write_site

        pages = {store: write_site(store, tmp_path / store.dialect) for store in (sqlite_db, pg_db)}
        assert [p.relative_to(tmp_path / "sqlite") for p in pages[sqlite_db]] == \
            [p.relative_to(tmp_path / "postgresql") for p in pages[pg_db]]
        for mine, theirs in zip(pages[sqlite_db], pages[pg_db]):
            assert mine.read_bytes() == theirs.read_bytes(), mine  # the same pages, byte for byte
        pg_db.close()
        sqlite_db.close()
        _two_writers(url, saved, each=15)
        with open_store(url) as db:
            assert db.run_count() == 30 + 30


def test_a_history_newer_than_this_version_or_no_database_is_one_line(tmp_path):
    path = tmp_path / "h.sqlite"
    open_store(path).close()
    import sqlite3

    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE s2st_schema SET version = 99")
    with pytest.raises(S2STError, match="schema version 99 is newer"):
        open_store(path)
    (tmp_path / "text.sqlite").write_text("not a database" * 100)
    with pytest.raises(S2STError, match="not a history database"):
        open_store(tmp_path / "text.sqlite")
    with pytest.raises(S2STError, match="is not a regular file"):
        open_store(tmp_path)
    with pytest.raises(S2STError, match="mysql://x/y: a history is a file path, sqlite:///PATH"):
        open_store("mysql://x/y")
    with pytest.raises(S2STError, match=r"postgresql://u:\*\*\*@127.0.0.1:1/d: cannot connect"):
        open_store("postgresql://u:secret@127.0.0.1:1/d")


# --- change points and window alerts on seeded series -------------------------------------------------------

def _series(kind: str, sigma: float, seed: int, n: int = 30) -> list[float]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        factor = 1.0
        if kind == "step" and i >= 20:
            factor = 1.10
        if kind == "creep" and i >= 20:
            factor = 1.02 ** min(i - 19, 5)
        out.append(0.01 * factor * math.exp(rng.gauss(0, sigma)))
    return out


@pytest.mark.parametrize("sigma", [0.005, 0.01, 0.02])
def test_a_ten_percent_step_is_found_at_its_commit_and_a_steady_series_flags_nothing(sigma):
    """100 seeded histories of 30 runs, noise sigma (log scale) per run: the rates, not one lucky series."""
    found = sum(any(abs(c.index - 20) <= 1 and c.worse for c in change_points(_series("step", sigma, s)))
                for s in range(100))
    false_changes = sum(bool(change_points(_series("aa", sigma, s))) for s in range(100))
    false_alerts = sum(bool(window_alerts(_series("aa", sigma, s), boundary=0.999)) for s in range(100))
    assert found >= 98
    assert false_changes <= 3 and false_alerts <= 10


@pytest.mark.parametrize("kind", ["aa", "step", "creep"])
def test_the_splits_are_ruptures_binary_segmentation(kind):
    """The same method as ruptures.Binseg(model="l2") with the same penalty, on 30 seeded series of each kind."""
    import numpy as np
    import ruptures

    from pytest_s2st.history.changes import MIN_SEGMENT, PENALTY, _segments, noise

    for seed in range(30):
        logs = np.log(_series(kind, 0.01, seed))
        penalty = PENALTY * noise(list(logs)) ** 2 * math.log(len(logs))
        theirs = ruptures.Binseg(model="l2", min_size=MIN_SEGMENT, jump=1).fit(logs.reshape(-1, 1)).predict(pen=penalty)
        assert _segments(logs, penalty, MIN_SEGMENT) == theirs[:-1], seed


def test_a_creep_of_two_percent_five_times_fires_the_window_threshold():
    fired = sum(bool(window_alerts(_series("creep", 0.005, s), boundary=0.999)) for s in range(100))
    assert fired >= 95


def test_direction_decides_what_is_worse():
    bleu = [30.0] * 10 + [27.0] * 10
    assert [c.worse for c in change_points(bleu, higher_is_better=True)] == [True]
    assert [c.worse for c in change_points(bleu, higher_is_better=False)] == [False]
    assert window_alert([30.0, 30.2, 29.8, 30.1], 25.0, 4, higher_is_better=True) is not None
    assert window_alert([30.0, 30.2, 29.8, 30.1], 35.0, 4, higher_is_better=True) is None
    assert window_alert([1.0, 1.0, 1.0], 1.001, 3) is None  # within MIN_STEP of a steady series: not an alert
    assert window_alert([1.0, 1.0, 1.0], 1.1, 3).statistic == math.inf


# --- the command line ------------------------------------------------------------------------------------------

def test_a_large_import_reads_in_parallel_keeps_order_and_what_came_before_a_bad_file(saved, tmp_path, capsys):
    """20 files (read by worker processes: cli.PARALLEL_FROM is 16), the 18th not JSON: one line naming it, the 17
    before it kept in their order, the same points as appending each file alone; the rest added on the next go."""
    assert cli.PARALLEL_FROM <= 20
    runs = tmp_path / "runs"
    runs.mkdir()
    for i in range(20):
        doc = json.loads(saved.read_text())
        doc["datetime"] = f"2026-11-01T{i:02d}:00:00"
        doc["benchmarks"][0]["extra_info"]["s2st"]["metrics"]["runtime_s"]["value"] = 1e-3 * (1 + i / 100)
        (runs / f"{i:04d}.json").write_text(json.dumps(doc) if i != 17 else "{not json")
    db = str(tmp_path / "h.sqlite")
    assert cli.main(["--db", db, "import", str(runs)]) == 2
    assert "0017.json: cannot read saved run: not valid JSON" in capsys.readouterr().err
    key = SeriesKey("test_my_model.py::test_my_model", "total", "runtime_s", "mean")
    with open_store(db, create=False) as s:
        assert [round(e.point.value * 1e3, 3) for e in s.series(key)] == [round(1 + i / 100, 3) for i in range(17)]
        parallel = sorted(repr((e.run.source, e.point)) for k in s.keys() for e in s.series(k))
    (runs / "0017.json").unlink()
    assert cli.main(["--db", db, "import", str(runs)]) == 0
    assert "2 run(s) added, 17 already kept; 19 run(s)" in capsys.readouterr().out
    with open_store(tmp_path / "one.sqlite") as s:
        for i in range(17):
            s.append(records.load_document(runs / f"{i:04d}.json"))
        assert sorted(repr((e.run.source, e.point)) for k in s.keys() for e in s.series(k)) == parallel


def test_cli_imports_a_folder_writes_a_site_and_checks(saved, tmp_path, capsys):
    runs = tmp_path / ".benchmarks" / "Linux-CPython-3.11-64bit"
    runs.mkdir(parents=True)
    for i, doc_scale in enumerate([1.0] * 12 + [1.3]):
        doc = json.loads(saved.read_text())
        doc["datetime"] = f"2026-11-01T{i:02d}:00:00"
        doc["benchmarks"][0]["extra_info"]["s2st"]["metrics"]["runtime_s"]["value"] = 1e-3 * doc_scale * (
            1 + 0.001 * (i % 3))
        doc["benchmarks"][0]["extra_info"]["s2st"]["metrics"]["runtime_s"]["details"]["precision"] = 0.01
        (runs / f"{i:04d}_run.json").write_text(json.dumps(doc))
    db = str(tmp_path / "h.sqlite")
    assert cli.main(["--db", db, "import", str(tmp_path / ".benchmarks")]) == 0
    assert "13 run(s) added, 0 already kept; 13 run(s)" in capsys.readouterr().out
    assert cli.main(["--db", db, "import", str(runs / "0000_run.json")]) == 0
    assert "0 run(s) added, 1 already kept" in capsys.readouterr().out
    assert cli.main(["--db", db, "check"]) == 1
    out = capsys.readouterr().out
    assert "[total] runtime_s mean: FAIL: the newest value" in out and "1 of " in out and "series worse at the newest" in out
    assert cli.main(["--db", db, "site", str(tmp_path / "site")]) == 0
    assert (tmp_path / "site" / "index.html").is_file()
    assert cli.main(["--db", db, "import", str(tmp_path / "missing.json")]) == 2
    assert "missing.json: no such file or folder" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        cli.main(["--db", db, "check", "--boundary", "1.5"])
    assert exc.value.code == 2 and "'1.5': expected a number between 0 and 1" in capsys.readouterr().err
