"""The metric table (metrics.py) is what the runner, tables, compare, budgets and marker help read."""
from __future__ import annotations

import pytest

from pytest_s2st import metrics
from pytest_s2st.budget import parse_budget, service_lookup
from pytest_s2st.measure.record import Metric
from pytest_s2st.report import render_table
from pytest_s2st.report_service import render_service_table
from pytest_s2st.rows import Row
from pytest_s2st.measurement import StageResult, aggregate
from pytest_s2st.settings import compare_limits


def test_every_inference_metric_is_a_column_in_table_order():
    lines = render_table([Row("x", "x", {})])
    # a table wider than the terminal wraps into blocks (report.fit), each under its own header line, in column order
    titles = "  ".join([lines[0]] + [lines[i + 1] for i, line in enumerate(lines[:-1]) if line == ""])
    shown = [m for m in metrics.INFERENCE_METRICS if m.column]  # column=False: JSON, budgets and compares only
    assert shown and len(shown) < len(metrics.INFERENCE_METRICS)  # peak_rss_mib is one (the RSS rise is shown)
    positions = [titles.index(m.title) for m in shown]
    assert positions == sorted(positions)


def test_a_metric_no_row_has_gets_no_column_but_a_missing_value_keeps_its_n_a():
    flops = {"value": 1e6, "method": "torch"}
    header = render_table([Row("x", "x", {"flops": flops})])[0]
    assert "FLOPs" in header and "instructions" not in header  # off: not asked for
    missing = {"value": None, "method": "callgrind", "reason": "valgrind not found"}
    lines = render_table([Row("x", "x", {"flops": flops}), Row("y", "y", {"flops": flops, "instructions": missing})])
    col = lines[0].index("instructions")  # right-aligned cells end where the title ends
    end = col + len("instructions")
    assert [line[end - 3:end] for line in lines[2:]] == ["n/a", "n/a"]


def test_cascade_totals_follow_each_metrics_aggregate():
    a = StageResult("a", {m.name: Metric(2.0, "x") for m in metrics.INFERENCE_METRICS})
    b = StageResult("b", {m.name: Metric(5.0, "x") for m in metrics.INFERENCE_METRICS})
    totals = aggregate([a, b])
    for m in metrics.INFERENCE_METRICS:
        if m.aggregate is None:  # a metric of the whole case (translation quality): never over stages
            assert m.name not in totals
            continue
        assert totals[m.name].value == {"sum": 7.0, "max": 5.0}[m.aggregate], m.name
    assert set(metrics.TRANSLATION_NAMES) <= {m.name for m in metrics.INFERENCE_METRICS if m.aggregate is None}
    # the known ones keep their rule (a new metric brings its own): time and counts add up, memory peaks take the max
    sums = {m.name for m in metrics.INFERENCE_METRICS if m.aggregate == "sum"}
    assert {"runtime_s", "flops", "instructions"} <= sums
    assert all(m.aggregate == "max" for m in metrics.INFERENCE_METRICS if m.unit == "MiB")


def test_every_budget_keyword_is_accepted_and_in_the_marker_signature():
    signature = metrics.budget_signature()
    for key in metrics.BUDGETS:
        assert f"{key}=" in signature
        limits, _ = parse_budget({key: 1.0}, "t")
        assert limits == {key: 1.0}
    assert "ttfa_s_p99" in metrics.BUDGETS and "runtime_s" in metrics.BUDGETS
    assert "throughput_p99" not in metrics.BUDGETS  # not budgetable
    with pytest.raises(Exception, match="unknown metric 'throughput'"):
        parse_budget({"throughput": 1.0}, "t")


@pytest.mark.parametrize("key", ["underrun_s_p99", "error_rate", "flops"])
def test_a_zero_budget_is_a_limit_not_unset(key):
    assert parse_budget({key: 0}, "t") == ({key: 0.0}, None)


@pytest.mark.parametrize("bad", [-1, float("inf"), float("nan"), True, "1"])
def test_a_budget_that_is_not_a_finite_number_at_least_zero_is_one_line(bad):
    with pytest.raises(Exception, match=r"t: s2st_budget: flops must be a finite number >= 0, got"):
        parse_budget({"flops": bad}, "t")


def test_a_missing_service_value_gives_its_own_reason():
    lookup = service_lookup({"summary": {"underrun_s": {"p99": None}, "reasons": {
        "underrun_s": "no ok request has a usable chunk timeline", "all": "generic"}}})
    assert lookup("underrun_s_p99", None).reason == "no ok request has a usable chunk timeline"
    assert lookup("ttfa_s_p99", None).reason == "generic"


def test_every_comparable_metric_can_gate_a_compare():
    limits = compare_limits(",".join(f"{name}:1%" for name in metrics.COMPARABLE))
    assert [limit.metric for limit in limits] == list(metrics.COMPARABLE)


def test_service_lookup_reads_the_stat_the_keyword_names():
    summary = {"ttfa_s": {"p99": 0.5, "mean": 0.2}, "rtf": {"p50": 0.3}, "error_rate": 0.0, "reasons": {}}
    lookup = service_lookup({"summary": summary})
    assert lookup("ttfa_s_p99", None).value == 0.5
    assert lookup("rtf_p50", None).value == 0.3
    assert lookup("error_rate", None).value == 0.0  # zero is a value, not "unset"
    assert lookup("latency_s_p99", None).value is None


def test_service_table_columns_come_from_the_table():
    data = {"concurrency": 2, "summary": {"n": 2, "n_ok": 2, "ttfa_s": {"mean": 0.1, "p50": 0.1, "p90": 0.1, "p99": 0.1},
                                          "rtf": {}, "latency_s": {"p50": 1.0, "p99": 2.0}, "throughput": 3.0,
                                          "error_rate": 0.0}}
    lines = render_service_table([("svc", data)])
    header, row = lines[0], lines[2]
    assert header.split()[:7] == ["Name", "conc", "ok/n", "TTFA", "p50", "p99", "RTF"]
    assert "latency p99" in header and "errors" in header and "throughput" in lines[4]
    assert "100.000 ms" in row and "0.0%" in row and "3.00 s/s" in lines[6]


def test_marker_help_is_generated(pytester):
    result = pytester.runpytest("--markers")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*@pytest.mark.s2st_budget(runtime_s=, *ttfa_s_p99=, *error_rate=, stage=None)*"])


def test_the_methods_cell_gives_a_precision_only_from_enough_rounds():
    from pytest_s2st.report import short_method
    from pytest_s2st.significance import MIN_ROUNDS

    few = {"method": "timer:time.perf_counter", "details": {"precision": 7.6, "rounds_s": [1.0, 2.0]}}
    assert short_method("runtime_s", few) == "time.perf_counter (2 rounds: too few for an interval)"
    enough = {"method": "timer:time.perf_counter", "details": {"precision": 0.018, "rounds_s": [1.0] * MIN_ROUNDS}}
    assert short_method("runtime_s", enough) == f"time.perf_counter ±1.8% ({MIN_ROUNDS} rounds)"
