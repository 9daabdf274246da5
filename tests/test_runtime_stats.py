"""The runtime statistic by name (runtime_stats.py): hand-computed statistics and intervals, the one t table
against exact quantiles, the name saved and read back (old files without it read as the mean)."""
from __future__ import annotations

import json
import math

import pytest

from pytest_s2st import significance
from pytest_s2st.judging import regressions
from pytest_s2st.report import render_compare
from pytest_s2st.rounds import TimedRounds, relative_precision
from pytest_s2st.rows import Row, SavedRow
from pytest_s2st.runtime_stats import (RUNTIME, STATISTICS, T975, RunningPrecision, RuntimeStats, median_interval,
                                       saved_statistic, statistic, t975)
from pytest_s2st.settings import compare_limits

ROUNDS = [1.0, 2.0, 3.0, 4.0, 10.0]  # mean 4, median 3, squared deviations 9+4+1+0+36 = 50


def test_every_statistic_by_hand():
    s = RuntimeStats(ROUNDS)
    assert s.as_dict() == {"rounds": 5, "total": 20.0, "min": 1.0, "max": 10.0, "mean": 4.0, "median": 3.0,
                           "stddev": pytest.approx(math.sqrt(50 / 4))}
    assert RuntimeStats([4.0, 1.0, 10.0, 2.0]).median == 3.0  # even count: the middle two's mean
    assert RuntimeStats([7.0]).stddev == 0.0 and RuntimeStats([1e308, 1e308]).mean == 1e308  # no overflow
    assert [s.get(name) for name in ("mean", "median")] == [4.0, 3.0]
    with pytest.raises(ValueError, match="unknown runtime statistic 'p99'; known: rounds, total"):
        s.get("p99")


def test_the_mean_interval_is_students_t_by_hand():
    # t(0.975, 4) = 2.776 (any table); standard error sqrt(12.5 / 5)
    half = 2.776 * math.sqrt(12.5 / 5)
    low, high = STATISTICS["mean"].interval(ROUNDS)
    assert low == pytest.approx(4.0 - half, rel=1e-12) and high == pytest.approx(4.0 + half, rel=1e-12)
    assert STATISTICS["mean"].precision(ROUNDS) == pytest.approx(half / 4.0, rel=1e-12)
    assert STATISTICS["mean"].interval([3.0]) is None and STATISTICS["mean"].precision([0.0, 0.0]) is None
    assert relative_precision(ROUNDS) == RUNTIME.precision(ROUNDS)  # the rounds' is the runtime statistic's


def test_the_median_interval_is_the_order_statistics_by_hand():
    # n = 10: P(Bin(10, 1/2) <= 1) = 11/1024 <= 2.5 % < P(<= 2) = 56/1024: the 2nd and 9th values
    values = [float(v) for v in (7, 1, 9, 3, 5, 2, 10, 4, 8, 6)]
    assert median_interval(10) == (1, 8) and median_interval(5) is None  # 5 values: 2/32 > 5 %
    assert STATISTICS["median"].interval(values) == (2.0, 9.0)
    assert STATISTICS["median"].precision(values) == pytest.approx(3.5 / 5.5)  # the wider side, 9 - 5.5
    assert STATISTICS["median"].interval(ROUNDS) is None


# exact two-sided 95 % quantiles of Student's t (scipy.stats.t.ppf(0.975, df), to 6 decimals)
EXACT = {2.5: 3.574655, 3.7: 2.867521, 7.5: 2.33304, 15.2: 2.129009, 29.5: 2.043725, 45: 2.014103,
         200: 1.971896, 1e4: 1.960201}


def test_the_one_t_table_against_exact_quantiles():
    try:
        from scipy.stats import t as student
        exact = {df: float(student.ppf(0.975, df)) for df in [*EXACT, 2.01, 5.5, 9.9, 30.5, 31, 1000]}
    except ImportError:  # the quality extra brings scipy; without it the quantiles above
        exact = EXACT
    assert significance.t975 is t975  # one table
    assert [t975(df) for df in range(1, 31)] == list(T975)
    for df, want in exact.items():  # between whole dfs within 0.5 % (linear in df was 4.7 % off at 2.5)
        assert t975(df) == pytest.approx(want, rel=5e-3 if df < 30 else 1e-5), df
    for bad in (0, 0.5, float("nan")):
        with pytest.raises(ValueError, match="degrees of freedom must be >= 1"):
            t975(bad)


@pytest.mark.parametrize("name", list(STATISTICS))
def test_the_running_precision_is_the_direct_one(name):
    values = [1.0, 1.3, 0.9, 1.1, 1.6, 1.2, 1.05, 0.95, 1.4, 1.0, 1.2]
    running = RunningPrecision(statistic(name))
    for end in range(1, len(values) + 1):
        want = statistic(name).precision(values[:end])
        got = running(values[:end])
        assert (got is None) == (want is None) and (got is None or got == pytest.approx(want, rel=1e-9))


def test_the_saved_name_is_read_back_and_old_files_hold_the_mean():
    assert saved_statistic(None) == saved_statistic({"value": 1.0}) == "mean"   # saved before the name was
    assert saved_statistic({"value": 1.0, "details": {"rounds_s": [1.0]}}) == "mean"
    assert saved_statistic({"details": {"statistic": "median"}}) == "median"
    for bad in ("p99", 5, None):
        with pytest.raises(ValueError, match="runtime_s.details.statistic .* is not one of mean, median"):
            saved_statistic({"details": {"statistic": bad}})
    assert RUNTIME.name == "mean"  # the default; runtime_stats.RUNTIME_STATISTIC changes it


def test_a_measured_runtime_saves_its_statistic():
    from pytest_s2st.measure.device import resolve_device

    class Stage:
        def forward(self, x):
            return x

    rounds = TimedRounds([Stage()], [[0, 1]], resolve_device("cpu"), repeat=3)
    rounds.run_all()
    [metric] = rounds.runtime_metrics("timer:x")
    assert metric.details["statistic"] == RUNTIME.name and metric.details["rounds"] == 6
    assert metric.value == RuntimeStats(metric.details["rounds_s"]).get(RUNTIME.name)
    assert metric.details["precision_method"] == RUNTIME.method
    assert metric.details["precision"] == RUNTIME.precision(metric.details["rounds_s"])


def _row(value, rounds, name=None, runs=None):
    details = {"rounds_s": rounds, **({"statistic": name} if name else {}), **({"runs_s": runs} if runs else {})}
    return {"runtime_s": {"value": value, "details": details}}


def test_compare_reads_the_statistic_of_each_side():
    limits = compare_limits("runtime_s:5%")
    old_runs, new_runs = [1.0, 1.01, 0.99], [1.5, 1.52, 1.49]
    # an old file (no name) against a new one saying "mean": compared as before, a significant slowdown
    rows = [Row("t", "f::t", _row(1.503, [1.5] * 5, "mean", new_runs), key="k")]
    assert len(regressions(rows, {"k": SavedRow.from_metrics(_row(1.0, [1.0] * 5, None, old_runs))}, limits)) == 1
    assert "slower (3/3 runs)" in render_compare(rows, {"k": SavedRow.from_metrics(_row(1.0, [1.0] * 5, None, old_runs))})[2]
    # medians against means: not comparable, the limit is not checked (never a pass)
    out = regressions(rows, {"k": SavedRow.from_metrics(_row(1.0, [1.0] * 5, "median", old_runs))}, limits)
    assert out == ["f::t: runtime_s not comparable (the compared run's runtime is the median, the current run's "
                   "the mean), so limit runtime_s:5% was not checked"]
    assert "n/a (the compared run's runtime is the median" in render_compare(
        rows, {"k": SavedRow.from_metrics(_row(1.0, [1.0] * 5, "median", old_runs))})[2]


def test_runs_compare_by_the_named_statistic():
    old, new = [1.0, 1.0, 4.0], [1.1, 1.1, 1.1]
    assert significance.compare_runs(old, new).ratio == pytest.approx(1.1 / 2.0)               # means
    assert significance.compare_runs(old, new, name="median").ratio == pytest.approx(1.1 / 1.0)  # medians


def _saved(path, runs, name):
    s2st = {"identity": "t.py::t", "metrics": {"runtime_s": _row(runs[0], [runs[0]], name)["runtime_s"]}}
    path.write_text(json.dumps({
        "machine_info": {"node": "n", "machine": "x86_64", "system": "Linux", "python_implementation": "CPython",
                         "python_version": "3.11.9"},
        "commit_info": {"id": "abc", "dirty": False, "project": "p"},
        "benchmarks": [{"fullname": "t.py::t", "name": "t", "stats": {}, "extra_info": {"s2st": s2st}}],
        "datetime": "2026-01-01T00:00:00", "version": "5.3.1"}))
    return str(path)


def test_merge_folds_runs_by_their_statistic_and_refuses_a_mix(tmp_path, capsys):
    from pytest_s2st.cli import merge as merge_cli

    out = tmp_path / "m.json"
    medians = [_saved(tmp_path / f"{i}.json", [v], "median") for i, v in enumerate((1.0, 2.0, 9.0))]
    assert merge_cli.main([*medians, "--repeats", "-o", str(out)]) == 0
    runtime = json.loads(out.read_text())["benchmarks"][0]["extra_info"]["s2st"]["metrics"]["runtime_s"]
    assert runtime["value"] == 2.0 and runtime["details"]["statistic"] == "median"  # the median of the runs
    means = [_saved(tmp_path / f"a{i}.json", [v], None) for i, v in enumerate((1.0, 2.0, 9.0))]  # old files
    assert merge_cli.main([*means, "--repeats", "-o", str(out)]) == 0
    runtime = json.loads(out.read_text())["benchmarks"][0]["extra_info"]["s2st"]["metrics"]["runtime_s"]
    assert runtime["value"] == 4.0 and runtime["details"]["statistic"] == "mean"
    capsys.readouterr()
    assert merge_cli.main([medians[0], means[1], "--repeats", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "t.py::t: its runs' runtimes hold different statistics (mean, median)" in err[0], err
    bad = tmp_path / "bad.json"
    bad.write_text(open(medians[1]).read().replace('"median"', '"p99"'))
    assert merge_cli.main([medians[0], str(bad), "--repeats", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad.json: benchmarks[0] (t.py::t): extra_info.s2st runtime_s.details.statistic " \
                             "'p99' is not one of mean, median" in err[0], err
