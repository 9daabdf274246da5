"""summarize() against hand-computed values (percentiles: linear interpolation, rank (n-1)*p/100)."""
from __future__ import annotations

import pytest

from pytest_s2st.runs import request_metrics
from pytest_s2st.service.stats import describe, summarize


def rec(send, first, done, audio, status="ok", warmup=False):
    return {"send_t": send, "first_audio_t": first, "done_t": done, "audio_seconds": audio,
            "status": status, "warmup": warmup}


RECORDS = [
    rec(0.0, 0.5, 1.0, 2.0),  # ttfa 0.5  latency 1.0  rtf 0.5
    rec(1.0, 1.2, 2.0, 4.0),  # ttfa 0.2  latency 1.0  rtf 0.25
    rec(2.0, 3.0, 4.0, 1.0),  # ttfa 1.0  latency 2.0  rtf 2.0
    rec(3.0, None, None, None, status="error"),
    rec(0.0, 50.0, 100.0, 1.0, warmup=True),  # warm-up: must not count anywhere
]


def approx(x):
    return pytest.approx(x, rel=1e-9, abs=1e-12)


def test_describe_linear_interpolation_by_hand():
    # sorted [1, 2, 3, 4]: p50 at rank 1.5 -> 2.5; p90 at 2.7 -> 3.7; p99 at 2.97 -> 3.97
    d = describe([4.0, 1.0, 3.0, 2.0])
    assert d == {"n": 4, "mean": approx(2.5), "p50": approx(2.5), "p90": approx(3.7), "p99": approx(3.97)}
    assert describe([7.0]) == {"n": 1, "mean": 7.0, "p50": 7.0, "p90": 7.0, "p99": 7.0}


def test_summary_by_hand():
    s = summarize(RECORDS, wall_s=5.0)
    assert (s["n"], s["n_ok"], s["n_error"]) == (4, 3, 1)
    assert s["error_rate"] == approx(0.25)
    # ttfa sorted [0.2, 0.5, 1.0]: p50 rank 1 -> 0.5; p90 rank 1.8 -> 0.9; p99 rank 1.98 -> 0.99
    assert s["ttfa_s"] == {"n": 3, "mean": approx(1.7 / 3), "p50": approx(0.5), "p90": approx(0.9), "p99": approx(0.99)}
    # rtf sorted [0.25, 0.5, 2.0]: p90 -> 0.5 + 0.8 * 1.5 = 1.7; p99 -> 0.5 + 0.98 * 1.5 = 1.97
    assert s["rtf"] == {"n": 3, "mean": approx(2.75 / 3), "p50": approx(0.5), "p90": approx(1.7), "p99": approx(1.97)}
    assert s["latency_s"] == {"n": 3, "mean": approx(4 / 3), "p50": approx(1.0), "p90": approx(1.8), "p99": approx(1.98)}
    assert s["audio_seconds"] == approx(7.0)
    assert s["throughput"] == approx(7.0 / 5.0)
    assert s["goodput"] is None and "goodput" in s["reasons"]
    assert "linear" in s["percentile_method"]


def test_goodput_counts_errors_as_not_good():
    s = summarize(RECORDS, wall_s=5.0, targets={"ttfa_s": 0.6, "rtf": 1.0})
    # r0 (0.5, 0.5) good; r1 (0.2, 0.25) good; r2 (1.0, 2.0) not; the error not -> 2 of 4
    assert s["goodput"]["n_good"] == 2
    assert s["goodput"]["fraction"] == approx(0.5)
    assert s["goodput"]["per_s"] == approx(2 / 5.0)
    only_ttfa = summarize(RECORDS, wall_s=5.0, targets={"ttfa_s": 0.3})
    assert only_ttfa["goodput"]["n_good"] == 1


def test_missing_data_is_none_never_zero():
    empty = summarize([], wall_s=3.0)
    assert empty["n"] == 0 and empty["error_rate"] is None and empty["throughput"] is None
    assert empty["ttfa_s"] == {"n": 0, "mean": None, "p50": None, "p90": None, "p99": None}
    failed = summarize([rec(0.0, None, None, None, status="error")], wall_s=3.0, targets={"rtf": 1.0})
    assert failed["error_rate"] == 1.0
    assert failed["throughput"] is None and failed["audio_seconds"] is None and failed["rtf"]["mean"] is None
    assert failed["goodput"]["fraction"] == 0.0  # a failed request is measured: it did not meet the target
    assert failed["reasons"]["all"] == "no request completed ok: all 1 measured requests failed"
    why = summarize([{**rec(0.0, None, None, None, status="error"), "error": "HTTP 503: busy"}] * 2, wall_s=3.0)["reasons"]
    assert why["all"] == "no request completed ok: all 2 measured requests failed (first: HTTP 503: busy)"
    no_wall = summarize(RECORDS, wall_s=0.0)
    assert no_wall["throughput"] is None and "throughput" in no_wall["reasons"]
    assert no_wall["ttfa_s"]["n"] == 3


def test_request_metrics_needs_ok_status_and_audio():
    assert request_metrics(rec(1.0, 1.5, 3.0, 4.0)) == {"ttfa_s": 0.5, "latency_s": 2.0, "rtf": 0.5}
    assert request_metrics(rec(1.0, 1.5, 3.0, 4.0, status="error"))["ttfa_s"] is None
    assert request_metrics(rec(1.0, 1.5, 3.0, 0.0))["rtf"] is None


def test_unknown_target_is_refused():
    with pytest.raises(ValueError, match="latency"):
        summarize(RECORDS, wall_s=1.0, targets={"latency": 1.0})


# --- boundaries and the reasons for missing numbers (added from a mutation-testing pass) -------------------


def test_wall_s_and_throughput_need_a_positive_duration():
    for wall in (0.5, 5.0):  # below one second is still a duration
        s = summarize(RECORDS, wall_s=wall)
        assert s["wall_s"] == wall and s["throughput"] == approx(7.0 / wall) and "throughput" not in s["reasons"]
    for wall in (0.0, -2.0, None):
        s = summarize(RECORDS, wall_s=wall, targets={"rtf": 1.0})
        assert s["wall_s"] is None and s["throughput"] is None
        assert s["reasons"]["throughput"] == f"wall_s={wall!r} is not a positive duration"
        assert s["goodput"]["per_s"] is None and s["goodput"]["n_good"] == 2  # counts need no clock


def test_goodput_per_second_below_one_second_of_wall():
    s = summarize(RECORDS, wall_s=0.5, targets={"ttfa_s": 0.6, "rtf": 1.0})
    assert s["goodput"] == {"targets": {"ttfa_s": 0.6, "rtf": 1.0}, "n_good": 2, "fraction": approx(0.5),
                            "per_s": approx(4.0)}


def test_goodput_target_is_met_at_equality():
    # r0: ttfa 0.5 and rtf 0.5 exactly (binary fractions, no rounding), r1 below both; "meets" means <=
    s = summarize(RECORDS, wall_s=5.0, targets={"ttfa_s": 0.5, "rtf": 0.5})
    assert s["goodput"]["n_good"] == 2
    s = summarize(RECORDS, wall_s=5.0, targets={"rtf": 0.25})  # r1: 1.0 / 4.0 exactly
    assert s["goodput"]["n_good"] == 1


def test_nothing_measured_is_none_with_reasons():
    warm_only = [rec(0.0, 0.5, 1.0, 2.0, warmup=True)]
    for records in ([], warm_only):
        s = summarize(records, wall_s=3.0, targets={"rtf": 1.0})
        assert s["n"] == 0 and s["error_rate"] is None and s["throughput"] is None
        assert s["goodput"] == {"targets": {"rtf": 1.0}, "n_good": None, "fraction": None, "per_s": None}
        assert s["reasons"] == {"all": "no measured (non-warm-up) requests"}


def test_no_targets_reason():
    reasons = summarize(RECORDS, wall_s=5.0)["reasons"]
    assert reasons["goodput"].startswith("no targets given (the config's general.targets")
    # these hand-made records carry no chunk timeline: every playback figure says so, none is 0
    assert {k for k in reasons if k != "goodput"} == {"underrun_s", "underrun_events", "underrun_longest_s",
                                                        "continuity_rate", "gap_s", "playback_skipped"}
    assert "no ok request has a usable chunk timeline" in reasons["underrun_s"]


def test_ok_request_without_audio_seconds_adds_no_audio():
    records = RECORDS + [{"status": "ok", "send_t": 0.0, "first_audio_t": 0.1, "done_t": 0.2}]
    s = summarize(records, wall_s=5.0)
    assert s["n_ok"] == 4 and s["audio_seconds"] == approx(7.0) and s["throughput"] == approx(7.0 / 5.0)
    assert s["rtf"]["n"] == 3 and s["ttfa_s"]["n"] == 4


def test_unknown_target_message_lists_the_known_ones():
    with pytest.raises(ValueError) as e:
        summarize(RECORDS, wall_s=1.0, targets={"latency": 1.0})
    assert str(e.value) == "goodput target 'latency': known targets are ttfa_s, rtf"
