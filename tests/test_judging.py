"""The compare's judging (judging.py) and the typed rows it reads (rows.py), on hand-made rows: dicts as a saved
pytest-benchmark JSON holds them, read the way --benchmark-compare and s2st-compare read them."""
from __future__ import annotations

import pytest

from pytest_s2st import metrics
from pytest_s2st.judging import insignificant, judge_limits, regressions, unmeasured_limits
from pytest_s2st.measure.record import Metric
from pytest_s2st.rows import SavedMetric, SavedRow, compared_rows, rows_from
from pytest_s2st.settings import compare_limits

NAME = "t.py::test_x[c]"


def _s2st(runs: list[float], **extra_metrics: dict) -> dict:
    """A measurement as runner.Measurement.to_dict saves it after `s2st-merge --repeats` (one mean per run)."""
    runtime = {"value": sum(runs) / len(runs), "method": "timer:time.perf_counter",
               "details": {"rounds_s": [v for v in runs for _ in range(5)], "runs_s": runs, "statistic": "mean"}}
    return {"case": "c", "model_type": "callable", "identity": NAME, "samples": 3,
            "metrics": {"runtime_s": runtime, "flops": {"value": 1000.0, "method": "torch"}, **extra_metrics},
            "stages": [{"name": "forward", "metrics": {}}]}


def _benchmark(s2st: object) -> dict:
    """A benchmark entry of a saved pytest-benchmark JSON."""
    return {"fullname": NAME, "name": "test_x[c]", "extra_info": {"s2st": s2st}}


def _judge(old: dict, new: dict, limits: str) -> tuple[list[str], list[str]]:
    return judge_limits(rows_from("test_x[c]", NAME, new), compared_rows(_benchmark(old)), compare_limits(limits))


# ------------------------------------------------------------------------------------------- limits

def test_a_slower_runtime_past_its_limit_fires():
    crossed, unchecked = _judge(_s2st([1.0, 1.01, 0.99]), _s2st([1.5, 1.52, 1.49]), "runtime_s:5%")
    assert unchecked == []
    assert crossed == [f"{NAME}: runtime_s regressed +50.33% (1.000 s -> 1.503 s), limit runtime_s:5%"]


def test_an_a_a_within_the_noise_between_runs_stays_quiet():
    """+10 % on the means, but the runs spread 20 %: past the limit, not a significant slowdown, so no verdict
    (a note says why)."""
    old, new = _s2st([1.0, 0.8, 1.2]), _s2st([1.1, 0.88, 1.32])
    rows, compared = rows_from("test_x[c]", NAME, new), compared_rows(_benchmark(old))
    assert regressions(rows, compared, compare_limits("runtime_s:5%")) == []
    [note] = insignificant(rows, compared, compare_limits("runtime_s:5%"))
    assert note.startswith(f"{NAME}: runtime_s past runtime_s:5% but not a significant slowdown (x1.100")
    assert _judge(_s2st([1.0, 1.01, 0.99]), _s2st([1.0, 1.01, 0.99]), "runtime_s:5%,flops:1%") == ([], [])


def test_a_limit_on_a_metric_a_side_could_not_measure_is_named_never_passed():
    off = {"flops": {"value": None, "method": "torch", "reason": "FLOPs off (--s2st-flops=off)"}}
    limits = compare_limits("flops:1%")
    assert unmeasured_limits(SavedRow.from_dict(_s2st([1.0], **off)), limits) == [
        "limit flops:1% not checked: flops n/a: FLOPs off (--s2st-flops=off)"]
    assert unmeasured_limits(SavedRow.from_dict(_s2st([1.0])), limits) == []
    assert _judge(_s2st([1.0]), _s2st([1.0], **off), "flops:1%") == ([], [
        f"{NAME}: flops not measured in the current run (current: FLOPs off (--s2st-flops=off)), so limit "
        "flops:1% was not checked"])
    saved = _s2st([1.0])
    del saved["metrics"]["flops"]  # a run saved before FLOPs were counted
    assert _judge(saved, _s2st([1.0]), "flops:1%") == ([], [
        f"{NAME}: flops not measured in the compared run (compared: not in the saved row), so limit flops:1% was "
        "not checked"])


def test_a_metric_with_no_direction_is_never_judged():
    neither = [m.name for m in metrics.METRICS if m.better == metrics.NEITHER]
    assert neither
    for name in neither:
        with pytest.raises(ValueError, match="unknown metric"):
            compare_limits(f"{name}:5%")
    every = ",".join(f"{name}:1%" for name in metrics.COMPARABLE)
    grown = {name: {"value": 10.0, "method": "m"} for name in neither}
    old = _s2st([1.0], **{name: {"value": 1.0, "method": "m"} for name in neither})
    crossed, unchecked = _judge(old, _s2st([1.0], **grown), every)
    assert not any(name in line for line in crossed + unchecked for name in neither)
    assert not crossed


# ------------------------------------------------------------------------------------------- typed rows

def test_a_saved_metric_and_row_read_back_what_they_write():
    for metric in (Metric(1.5, "timer:x", details={"rounds_s": [1.0, 2.0], "statistic": "mean"}),
                   Metric.missing("torch", "FLOPs off"), Metric(3.0, "torch")):
        entry = SavedMetric.from_dict(metric.to_dict())
        assert entry.to_dict() == metric.to_dict()  # the shape Metric.to_dict writes, unchanged
        assert SavedMetric.from_dict(entry.to_dict()) == entry
    s2st = _s2st([1.0, 1.2, 1.1])
    row = SavedRow.from_dict(s2st, {"samples": 3})
    assert row.to_dict() == {"metrics": s2st["metrics"]}
    assert SavedRow.from_dict(row.to_dict(), row.work) == row
    assert row.value("runtime_s") == pytest.approx(1.1) and row.statistic() == "mean"


def test_a_saved_row_from_an_older_run_reads_what_it_has():
    """Saved before methods, details and statistics were: a bare value is an entry, its statistic the mean."""
    row = SavedRow.from_dict({"metrics": {"runtime_s": {"value": 2.0}}})
    assert row.metric("runtime_s") == SavedMetric(2.0, "?", None, {})
    assert row.value("runtime_s") == 2.0 and row.statistic() == "mean" and row.details("runtime_s") == {}


@pytest.mark.parametrize("junk, reason", [
    ("fast", "not in the saved row"),       # a string where an entry is expected
    (None, "not in the saved row"),
    ({}, "not in the saved row"),
    ({"value": None}, "no value"),          # a null value, no reason
    ({"value": None, "reason": "FLOPs off"}, "FLOPs off"),
    ({"value": "1.0", "method": "m"}, "value '1.0' is not a finite number (missing evidence)"),
    ({"value": float("nan")}, "value nan is not a finite number (missing evidence)"),
])
def test_junk_in_a_saved_file_is_missing_evidence_with_its_reason(junk, reason):
    row = SavedRow.from_dict({"metrics": {"flops": junk}})
    assert row.value("flops") is None and row.reason("flops") == reason
    assert (row.metric("flops") is None) is (reason == "not in the saved row")
    _, unchecked = _judge(_s2st([1.0], flops=junk), _s2st([1.0]), "flops:1%")
    assert unchecked == [f"{NAME}: flops not measured in the compared run (compared: {reason}), so limit "
                         "flops:1% was not checked"]


def test_a_part_of_the_wrong_shape_is_a_row_with_no_metrics():
    assert SavedRow.from_dict("junk") == SavedRow.from_dict({"metrics": [1, 2]}) == SavedRow()
    assert SavedMetric.from_dict({"value": 1.0, "details": "junk"}).details == {}
    assert compared_rows(_benchmark("junk")) == {} and compared_rows("junk") == {}
    saved = compared_rows(_benchmark({"identity": NAME, "metrics": "junk", "stages": ["junk", {"name": "s"}]}))
    assert saved == {NAME: SavedRow(work={}), f"{NAME}::s": SavedRow(work={})}
