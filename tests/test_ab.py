"""The in-process A/B (s2st_benchmark(model, inputs, baseline=other)) and the gross verdict of one run per side:
the statistics against hand-computed truths, then real pytest sessions with the plugin loaded."""
from __future__ import annotations

import json
import math
from math import comb

import pytest

from pytest_s2st.ab.inprocess import AB_MIN_PAIRS, PairedRounds, pairs_for
from pytest_s2st.measure.runqueue import RunqueueClock
from pytest_s2st.rounds import RoundPolicy, TimedRounds
from pytest_s2st.measure.device import resolve_device
from pytest_s2st.ab.estimators import compare_pairs, median_interval
from pytest_s2st.significance import (CANNOT_TELL, FASTER, GROSS, GROSS_RAW, MIN_PAIRS, NOT_FINITE, SAME, SLOWER, TOO_FEW,
                                      compare_runs)


@pytest.mark.parametrize("n", [6, 7, 10, 20, 30, 31, 50, 100])
def test_the_median_interval_is_the_sign_tests(n):
    """[x_(k), x_(n-k+1)] covers the median with P = 1 - 2 P(Bin(n, 1/2) <= k-1) >= 95 %, and k is the largest such."""
    lo, hi = median_interval(n)
    k = lo + 1
    assert hi == n - k
    tail = lambda k: sum(comb(n, i) for i in range(k)) / 2 ** n  # noqa: E731 -- P(Bin <= k-1)
    assert 1 - 2 * tail(k) >= 0.95 and (k == 1 or 1 - 2 * tail(k + 1) < 0.95)


def test_known_median_intervals_and_too_few_pairs():
    assert median_interval(10) == (1, 8) and median_interval(30) == (9, 20)  # any table of the sign test
    assert median_interval(MIN_PAIRS - 1) is None
    assert compare_pairs([1.0] * 5, [2.0] * 5).word == TOO_FEW


def test_the_paired_ratio_is_the_median_and_one_outlier_pair_moves_nothing():
    base = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]
    cand = [b * r for b, r in zip(base, [1.1, 1.2, 1.1, 1.2, 1.1, 1.2, 1.1, 1.2, 1.1, 50.0])]  # one stalled round
    change = compare_pairs(base, cand)
    assert change.ratio == pytest.approx((1.1 * 1.2) ** 0.5)  # the median of the ten log-ratios: 5th and 6th's mean
    assert (change.low, change.high) == (pytest.approx(1.1), pytest.approx(1.2))  # sorted ratios 2 and 9
    assert change.word == SLOWER and change.pairs == 10
    same = compare_pairs(base, [b * r for b, r in zip(base, [0.99, 1.01] * 4 + [1.0, 40.0])])
    assert same.word == SAME and same.low < 1 < same.high
    assert compare_pairs(base, [b / 1.5 for b in base]).word == FASTER
    assert compare_pairs(base, base[:-1] + [float("nan")]).word == NOT_FINITE


def test_one_run_per_side_gross_changes_get_a_word_drift_does_not():
    # own round times (run-queue wait taken out): GROSS of means and medians
    own = dict(old_rounds=[1.0] * 5, new_rounds=[GROSS] * 5, own=True)
    assert compare_runs([1.0], [GROSS], **own).word == SLOWER and compare_runs([1.0], [GROSS], **own).gross
    assert compare_runs([1.0], [1 / GROSS], old_rounds=[1.0] * 5, new_rounds=[1 / GROSS] * 5, own=True).word == FASTER
    assert compare_runs([1.0], [2.5], old_rounds=[1.0] * 5, new_rounds=[2.5] * 5, own=True).word == CANNOT_TELL
    # the mean is past GROSS but the median is not (one slow round): no word
    assert compare_runs([1.0], [3.2], old_rounds=[1.0] * 5, new_rounds=[1.0] * 4 + [12.0], own=True).word == CANNOT_TELL
    # the old side waited 2/3 of every round for a CPU: the raw means are equal, the own times GROSS apart
    hidden = compare_runs([3.0], [3.0], old_rounds=[1.0] * 5, new_rounds=[3.0] * 5, own=True)
    assert GROSS == 3.0 and hidden.word == SLOWER and hidden.short() == "x1.000, slower (gross, own x3.000, 1/1 runs)"
    # a neighbour made every round of the new side x3 (no run-queue readings): raw needs GROSS_RAW
    assert compare_runs([1.0], [3.0], [1.0] * 5, [3.0] * 5).word == CANNOT_TELL
    assert compare_runs([1.0], [GROSS_RAW], [1.0] * 5, [GROSS_RAW] * 5).word == SLOWER
    # one stalled round inflates the new mean x5.6; the rounds' median did not move: no word
    assert compare_runs([1.0], [5.6], [1.0] * 5, [1.0] * 4 + [24.0]).word == CANNOT_TELL
    assert compare_runs([1.0], [22.0], [1.0] * 5, [22.0] * 5).short() == "x22.000, slower (gross, 1/1 runs)"


def test_own_times_take_the_run_queue_wait_out_of_each_round():
    from pytest_s2st.measure.runqueue import RunqueueClock, own_times

    assert own_times([1.0, 2.0, 3.0], [0.5, 0.0, 5.0]) == [0.5, 2.0, 0.0]  # a wait past its round: capped there
    assert own_times([1.0], None) is None and own_times([1.0, 2.0], [0.1]) is None
    clock = RunqueueClock()
    first = clock.read()
    if first is not None:  # Linux: cumulative and never decreasing
        assert clock.read() >= first >= 0
    clock.close()
    assert clock.read() is None and RunqueueClock("/nonexistent/schedstat").read() is None


class _Stage:
    """A stage whose forward records the order of calls."""

    def __init__(self, name, log):
        self.name, self.log = name, log

    def forward(self, x):
        self.log.append((self.name, x))


def test_paired_rounds_alternate_abba_on_the_same_input():
    log: list = []
    cpu = resolve_device("cpu")
    cand = TimedRounds([_Stage("A", log)], [[0, 1, 2]], cpu, 1, policy=RoundPolicy(5))
    base = TimedRounds([_Stage("B", log)], [[0, 1, 2]], cpu, 1, policy=RoundPolicy(5))
    paired = PairedRounds(cand, base)
    paired.run_all()
    assert log == [("B", 0), ("A", 0), ("A", 1), ("B", 1), ("B", 2), ("A", 2), ("A", 0), ("B", 0), ("B", 1), ("A", 1)]
    assert len(cand.round_totals) == len(base.round_totals) == 5


class _Slow:
    """A stage whose every call takes ``s`` seconds of a fake clock."""

    def __init__(self, clock, s):
        self.name, self.clock, self.s = "slow", clock, s

    def forward(self, x):
        self.clock[0] += self.s


@pytest.mark.parametrize(("call_s", "pairs"), [(0.003, 112), (0.0125, 120), (0.05, 60), (0.1, 30), (2.0, 30)])
def test_short_rounds_get_more_pairs_in_the_time_thirty_long_ones_took(call_s, pairs):
    """Rounds of ~0.025 s: as many pairs as fill 6 s (30 pairs of 0.1 s took that), 30 to 120; a call that outlasts
    the round is the round, and a model of 2 s a call keeps 30 pairs, not 120 (4 minutes more a test)."""
    clock = [0.0]
    cpu = resolve_device("cpu")
    sides = [TimedRounds([_Slow(clock, call_s)], [list(range(50))], cpu, 1, timer=lambda: clock[0],
                         policy=RoundPolicy(4, AB_MIN_PAIRS)) for _ in range(2)]
    for side in sides:
        side._queue = RunqueueClock("/nonexistent")
    paired = PairedRounds(*sides, fill=True)
    calls = paired.calibrate(0.025)
    assert calls == max(1, math.ceil(0.025 / call_s - 1e-9)) and paired.policy.required == pairs == paired.count
    fixed = PairedRounds(*[TimedRounds([_Slow(clock, call_s)], [list(range(50))], cpu, 1, timer=lambda: clock[0],
                                       policy=RoundPolicy(4, 6)) for _ in range(2)])
    fixed.calibrate(0.025)
    assert fixed.policy.required == 6  # --s2st-min-rounds given: as many as asked
    assert pairs_for(0.025) == 120 and pairs_for(0) == AB_MIN_PAIRS


AB_TEST = '''
import time

def fast(x):
    return sum(range(2000))

def sleepy(x):
    time.sleep(0.005)
    return sum(range(2000))

INPUTS = list(range(4))

def test_same(s2st_benchmark):
    s2st_benchmark(fast, INPUTS, baseline=fast)

def test_slower(s2st_benchmark):
    s2st_benchmark(sleepy, INPUTS, baseline=fast)
'''


def test_a_slower_candidate_fails_its_test_and_the_same_one_passes(pytester, monkeypatch):
    """The 5 ms sleep (x20 and more) fails the test itself: the short summary names the metric, the ratio and its
    interval; the A/A passes; junitxml carries the evidence; the saved JSON holds both sides."""
    pytester.makepyfile(test_ab=AB_TEST)
    monkeypatch.setenv("COLUMNS", "200")  # pytest cuts the short summary at the terminal's width
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rA", "--s2st-compare-fail=runtime_s:25%",
                                           "--junitxml=junit.xml", "--benchmark-json=out.json")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "*s2st: A/B in one process (baseline -> candidate)*",
        "test_same *no significant change*",
        "test_slower *slower*",
        "FAILED test_ab.py::test_slower - runtime_s x* ?*, *? slower (* ABBA pairs) against the baseline*",
    ])
    junit = (pytester.path / "junit.xml").read_text()
    assert "runtime candidate/baseline: x" in junit and "ABBA pairs" in junit
    assert 'name="s2st_verdict" value="FAIL' in junit and 'name="s2st_verdict" value="PASS"' in junit
    saved = {b["name"]: b["extra_info"]["s2st"] for b in json.loads((pytester.path / "out.json").read_text())["benchmarks"]}
    assert saved["test_slower"]["ab"]["word"] == SLOWER and saved["test_slower"]["ab"]["ratio"] > 10
    assert saved["test_slower"]["ab"]["pairs"] >= AB_MIN_PAIRS and saved["test_slower"]["ab"]["calls_per_round"] >= 1
    assert saved["test_slower"]["baseline"]["metrics"]["runtime_s"]["value"] > 0
    assert saved["test_same"]["verdict"]["status"] == "PASS"


def test_compare_fail_without_a_saved_run_or_a_baseline_checks_nothing_and_fails(pytester):
    pytester.makepyfile(test_plain='''
def test_plain(s2st_benchmark):
    s2st_benchmark(lambda x: x, [1, 2, 3])
''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--s2st-compare-fail=runtime_s:5%")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*test_plain: no baseline (s2st_benchmark(..., baseline=)) and no "
                                 "--benchmark-compare, so no limit of --s2st-compare-fail runtime_s:5% was checked",
                                 "*1 passed, 1 unchecked*"])  # nothing regressed: nothing was checked
    assert "regressed" not in result.stdout.str()


SAVED_TEST = '''
import os, time

DELAY = float(os.environ.get("S2ST_TEST_DELAY", "0"))

def model(x):
    if DELAY:
        time.sleep(DELAY)
    return sum(range(2000))

def test_model(s2st_benchmark):
    s2st_benchmark(model, list(range(4)))
'''


def test_a_gross_slowdown_fails_a_live_compare_with_one_run_per_side(pytester, monkeypatch):
    pytester.makepyfile(test_saved=SAVED_TEST)
    pytester.runpytest_subprocess("-p", "no:cacheprovider", "--benchmark-autosave").assert_outcomes(passed=1)
    monkeypatch.setenv("S2ST_TEST_DELAY", "0.005")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--benchmark-compare",
                                           "--s2st-compare-fail=runtime_s:5%")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*x*, slower (gross, own x*, 1/1 runs)*", "*runtime_s regressed*limit runtime_s:5%",
                                 "*1 passed, 1 regressed*"])


# --s2st-processes N: every benchmark timed in N fresh xdist workers taking turns, one side of N runs

@pytest.mark.serial  # a Welch verdict over 3 runs of 5 ~40 us rounds: on busy cores one preempted round moves a
# run's mean x20 and widens the interval past the 5 ms sleep (seen once beside other work); `make test` runs it alone
def test_three_processes_are_one_side_of_three_runs_and_a_slower_side_fails(pytester, monkeypatch):
    pytester.makepyfile(test_saved=SAVED_TEST)
    first = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--s2st-processes=3", "--benchmark-autosave",
                                          "--benchmark-json=side.json")
    first.assert_outcomes(passed=3)  # one test, three workers
    assert "xdist workers on" not in first.stdout.str()  # they take turns: no contention warning
    rows = json.loads((pytester.path / "side.json").read_text())["benchmarks"]
    assert len(rows) == 1
    runtime = rows[0]["extra_info"]["s2st"]["metrics"]["runtime_s"]
    assert len(runtime["details"]["runs_s"]) == 3 and len(runtime["details"]["rounds_s"]) == 15
    assert len(runtime["details"]["waited_s"]) == 15  # each round's run-queue wait kept beside it
    assert runtime["value"] == pytest.approx(sum(runtime["details"]["runs_s"]) / 3, rel=1e-12)
    assert len(rows[0]["stats"]["data"]) == 15  # pytest-benchmark's own stats hold every run's rounds
    monkeypatch.setenv("S2ST_TEST_DELAY", "0.005")
    second = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--s2st-processes=3", "--benchmark-compare",
                                           "--s2st-compare-fail=runtime_s:5%")
    assert second.ret == 1
    second.stdout.fnmatch_lines(["*x* ?*, *? slower (3/3 runs)*", "*runtime_s regressed*", "*3 passed, 1 regressed*"])


def test_processes_refuses_what_cannot_be_a_side(pytester):
    pytester.makepyfile(test_saved=SAVED_TEST)
    one = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--s2st-processes=1")
    assert one.ret == 4 and "--s2st-processes 1: needs 2 or more processes" in one.stderr.str()
    both = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--s2st-processes=2", "-n", "2")
    assert both.ret == 4 and "sets the xdist workers itself" in both.stderr.str()
    pytester.makeini("[pytest]\ns2st_processes = many\n")
    bad = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert bad.ret == 4 and "ini s2st_processes" in bad.stderr.str()


def test_the_pairs_interval_is_exactly_the_sign_tests_order_statistics():
    """Distinct ratios, so one order statistic inward or outward reads differently: for 10 pairs the 2nd and 9th
    smallest (median_interval(10) == (1, 8))."""
    base = [1.0] * 10
    ratios = [1.01, 1.10, 1.03, 1.08, 1.05, 1.02, 1.09, 1.04, 1.07, 1.06]
    change = compare_pairs(base, [r * b for r, b in zip(ratios, base)])
    assert (change.low, change.high) == (pytest.approx(1.02), pytest.approx(1.09))
    assert change.ratio == pytest.approx((1.05 * 1.06) ** 0.5)


def test_the_gross_rule_judges_own_round_times_of_a_saved_row():
    """Raw rounds equal, but the old run waited 2/3 of every round for a CPU: its own times are x3 faster, so the
    new run is gross-slower (judging.runtime_change takes the wait out of each round)."""
    from pytest_s2st.judging import runtime_change
    from pytest_s2st.rows import SavedRow

    def row(rounds, waits):
        return SavedRow.from_metrics({"runtime_s": {"value": sum(rounds) / len(rounds),
                                                    "details": {"rounds_s": rounds, "waited_s": waits,
                                                                "statistic": "mean"}}})

    change = runtime_change(row([3.0] * 5, [2.0] * 5), row([3.0] * 5, [0.0] * 5))
    assert change.word == SLOWER and change.gross and change.own_ratio == pytest.approx(3.0)
    assert runtime_change(row([3.0] * 5, [0.0] * 5), row([3.0] * 5, [0.0] * 5)).word == CANNOT_TELL


def test_a_runtime_limit_needs_the_word_slower_not_only_a_ratio_past_it():
    """A noisy A/A whose ratio is past 5 % but whose interval holds 1 crosses no runtime limit."""
    from pytest_s2st.judging import ab_limits
    from pytest_s2st.settings import compare_limits

    def s2st(ratio, low, high, word):
        return {"metrics": {"runtime_s": {"value": ratio}}, "baseline": {"metrics": {"runtime_s": {"value": 1.0}}},
                "ab": {"ratio": ratio, "low": low, "high": high, "word": word, "pairs": 30}}

    limits = compare_limits("runtime_s:5%")
    assert ab_limits(s2st(1.08, 0.95, 1.20, SAME), limits) == ([], [])
    crossed, _ = ab_limits(s2st(1.08, 1.06, 1.10, SLOWER), limits)
    assert len(crossed) == 1 and "against the baseline, limit runtime_s:5%" in crossed[0]
