"""Enough rounds: the stopping rule against a fake clock and known distributions; real sessions whose rounds grow."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import BENCH_TEST, write_case
from pytest_s2st.rounds import RoundPolicy, relative_precision
from pytest_s2st.runtime_stats import t975

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

FAST = ["-p", "no:cacheprovider", "--s2st-warmup=0", "--benchmark-disable-gc", "--s2st-flops=off",
        "--s2st-memory=off", "--s2st-tensor-memory=off"]


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def drive(policy: RoundPolicy, draw, clock: FakeClock | None = None, step_s: float = 0.0) -> list[float]:
    """Run the policy's loop with round times from draw(); the fake clock advances step_s per round."""
    totals: list[float] = []
    while policy.more(totals):
        totals.append(draw())
        if clock is not None:
            clock.now += step_s
        assert len(totals) < 100_000
    return totals


def test_t_quantiles_match_the_tables():
    # two-sided 95 % Student t: df 1, 4, 10, 30 from the tables; 60, 120 and the normal limit
    assert t975(1) == 12.706 and t975(4) == 2.776 and t975(10) == 2.228 and t975(30) == 2.042
    assert abs(t975(60) - 2.000) < 1e-3 and abs(t975(120) - 1.980) < 1e-3 and abs(t975(10**6) - 1.960) < 1e-3
    with pytest.raises(ValueError):
        t975(0)


def test_relative_precision_known_values():
    assert relative_precision([]) is None and relative_precision([1.0]) is None
    assert relative_precision([0.0, 0.0]) is None  # mean 0: no relative width
    assert relative_precision([2.0, 2.0, 2.0]) == 0.0
    # mean 2, sd 1 (1, 2, 3): t(2) * 1/sqrt(3) / 2
    assert relative_precision([1.0, 2.0, 3.0]) == pytest.approx(4.303 / math.sqrt(3) / 2)


def test_fixed_rounds_without_target():
    assert len(drive(RoundPolicy(base=2), lambda: 1.0)) == 2
    policy = RoundPolicy(base=2, min_rounds=7)
    assert len(drive(policy, lambda: 1.0)) == 7 and policy.stop_reason == "rounds"
    assert len(drive(RoundPolicy(base=9, min_rounds=3), lambda: 1.0)) == 9  # a minimum never cuts rounds


def test_target_precision_stops_when_reached_on_a_known_distribution():
    # normal round times, cv 10 %: a 2 % half-width needs n with 1.96 * 0.1 / sqrt(n) <= 0.02, i.e. about 96
    rng = np.random.default_rng(3)
    policy = RoundPolicy(base=2, target_precision=0.02, max_time=1e9, clock=FakeClock())
    totals = drive(policy, lambda: float(rng.normal(1.0, 0.1)))
    assert policy.stop_reason == "target precision reached"
    assert relative_precision(totals) <= 0.02 < relative_precision(totals[:-1])
    assert 60 <= len(totals) <= 150, len(totals)
    # a tighter target needs about 4x the rounds for half the width
    rng = np.random.default_rng(3)
    tighter = drive(RoundPolicy(base=2, target_precision=0.01, max_time=1e9, clock=FakeClock()),
                    lambda: float(rng.normal(1.0, 0.1)))
    assert 3 * len(totals) <= len(tighter) <= 6 * len(totals)


def test_constant_rounds_stop_at_the_minimum():
    policy = RoundPolicy(base=1, min_rounds=5, target_precision=0.001, clock=FakeClock())
    assert len(drive(policy, lambda: 0.5)) == 5 and policy.stop_reason == "target precision reached"


def test_max_time_bounds_an_unreachable_target():
    # cv 100 %: 0.1 % half-width would take millions of rounds; at 0.25 s per round, 3 s allow 12
    clock = FakeClock()
    rng = np.random.default_rng(0)
    policy = RoundPolicy(base=2, target_precision=0.001, max_time=3.0, clock=clock)
    totals = drive(policy, lambda: float(rng.exponential(1.0)), clock, step_s=0.25)
    assert policy.stop_reason == "max time reached"
    assert len(totals) == 12


def test_the_minimum_outlasts_the_time_budget():
    clock = FakeClock()
    policy = RoundPolicy(base=1, min_rounds=50, target_precision=1e-9, max_time=0.1, clock=clock)
    assert len(drive(policy, lambda: 1.0 + clock.now, clock, step_s=1.0)) == 50


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=1e-9, max_value=1e3, allow_nan=False), min_size=0, max_size=50))
def test_relative_precision_never_negative_or_nan(values):
    p = relative_precision(values)
    assert p is None or (p >= 0 and not math.isnan(p))


def saved_json(pytester) -> dict:
    files = sorted(pytester.path.glob(".benchmarks/*/*.json"))
    assert files, "no benchmark JSON saved"
    return json.loads(files[-1].read_text())


def test_min_rounds_cycles_the_dataset_in_a_real_session(pytester):
    case = write_case(pytester.path, "lin", ["build_linear"])  # 3 samples
    pytester.makepyfile(test_bench=BENCH_TEST)
    result = pytester.runpytest(*FAST, f"--s2st-config={case}", "--s2st-min-rounds=11", "--benchmark-autosave")
    result.assert_outcomes(passed=1)
    bench = saved_json(pytester)["benchmarks"][0]
    runtime = bench["extra_info"]["s2st"]["metrics"]["runtime_s"]
    assert runtime["details"]["rounds"] == 11 and len(runtime["details"]["rounds_s"]) == 11
    assert bench["stats"]["rounds"] == 11  # pytest-benchmark's own stats hold the same rounds
    assert runtime["details"]["precision"] > 0
    result.stdout.fnmatch_lines(["*test_inference?callable-lin?*±*% n=11*"])


def test_target_precision_grows_rounds_in_a_real_session(pytester):
    case = write_case(pytester.path, "lin", ["build_linear"])
    pytester.makepyfile(test_bench=BENCH_TEST)
    # ini twins: the same settings from [pytest]
    pytester.makeini("[pytest]\ns2st_target_precision = 0.03\ns2st_max_time = 20\n")
    result = pytester.runpytest(*FAST, f"--s2st-config={case}", "--benchmark-autosave")
    result.assert_outcomes(passed=1)
    bench = saved_json(pytester)["benchmarks"][0]
    details = bench["extra_info"]["s2st"]["metrics"]["runtime_s"]["details"]
    assert details["rounds"] > 3, details["rounds"]  # more than the 3 samples
    assert bench["stats"]["rounds"] == details["rounds"]
    assert details["stopped"] in ("target precision reached", "max time reached")
    if details["stopped"] == "target precision reached":
        assert details["precision"] <= 0.03
    assert details["precision"] == pytest.approx(relative_precision(details["rounds_s"]))


def test_bad_round_options_are_one_line_usage_errors(pytester):
    pytester.makepyfile(test_bench=BENCH_TEST)
    result = pytester.runpytest("-p", "no:cacheprovider", "--s2st-min-rounds=0")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*--s2st-min-rounds*must be an integer > 0*"])
    pytester.makeini("[pytest]\ns2st_target_precision = -1\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret != 0
    assert "s2st_target_precision" in (result.stdout.str() + result.stderr.str())


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=1e-6, max_value=10.0, allow_nan=False), min_size=0, max_size=40),
       st.integers(min_value=1, max_value=5))
def test_incremental_precision_equals_the_direct_formula(values, step):
    # the policy updates its mean and variance round by round (Welford); same number as relative_precision
    policy = RoundPolicy(base=1)
    for end in range(0, len(values) + 1, step):
        got, want = policy.precision(values[:end]), relative_precision(values[:end])
        assert (got is None) == (want is None)
        if want is not None:
            assert got == pytest.approx(want, rel=1e-6, abs=1e-12)


class CallCounter:
    """A round probe over a counter the model itself moves (as a hardware counter would): the round's amount is
    the calls made in it, so each stage's per-sample value is known by hand (1 call per sample and stage)."""

    count = 0
    metric = "calls_probe"

    def read(self):
        return CallCounter.count

    def between(self, before, after):
        return after - before

    def stage_metrics(self, per_round, rounds):
        from pytest_s2st.measure.record import Metric

        stages = len(rounds.stages)
        per_sample = sum(per_round) / len(per_round) / rounds.calls / stages
        return [Metric(per_sample, "call counter", details={"rounds": len(per_round)}) for _ in range(stages)]

    def close(self):
        pass


def test_a_round_probe_reads_around_every_timed_round_and_fills_its_metric(monkeypatch):
    """A metric read around the timed rounds is a RoundProbe and an entry of rounds.ROUND_PROBES: the runner puts
    its per-stage values into both sides of an A/B, with no other edit (the metric table knows its name)."""
    from dataclasses import replace

    from pytest_s2st import metrics, rounds
    from pytest_s2st.measure.device import resolve_device
    from pytest_s2st.pipelines.callable import from_function
    from pytest_s2st.runner import RunSettings, measure_pipeline

    monkeypatch.setitem(metrics.BY_NAME, "calls_probe", replace(metrics.BY_NAME["flops"], name="calls_probe"))
    monkeypatch.setattr(rounds, "ROUND_PROBES", [CallCounter])

    def model(x):
        CallCounter.count += 1
        return x

    settings = RunSettings(device=resolve_device("cpu"), warmup=1, memory="off", flops="off", tensor_memory="off",
                           min_rounds=6, ab_round_s=0.001)
    m = measure_pipeline(from_function(model, "t"), [1, 2, 3], settings, case_id="probe",
                         baseline=from_function(model, "b"))
    for side in (m, m.baseline):
        metric = side.stages[0].metrics["calls_probe"]
        assert metric.value == 1.0 and metric.details["rounds"] >= 6, metric
    assert m.to_dict()["stages"][0]["metrics"]["calls_probe"]["value"] == 1.0


def test_the_saved_waits_are_per_sample_as_the_rounds_are():
    """Rounds of 3 calls, each call 1 tick: 1 tick a sample; a neighbour took 0.6 and 1.5 ticks of the rounds.
    Saved beside the per-sample rounds_s, waited_s is the wait per sample (0.2, 0.5): the whole round's wait made
    own times 0 (rounds 1 tick, waits 1.5) and the A/B judged nothing."""
    from pytest_s2st.measure.device import resolve_device
    from pytest_s2st.measure.runqueue import own_times
    from pytest_s2st.rounds import TimedRounds

    class Stage:
        name = "s"

        def forward(self, x):
            return x

    clock = iter(range(1000))
    rounds = TimedRounds([Stage()], [[0, 1, 2]], resolve_device("cpu"), 1, timer=lambda: next(clock),
                         policy=RoundPolicy(2))
    rounds.calls = 3
    rounds.run_all()
    rounds.waits, rounds.windows = [0.6, 1.5], [3.0, 3.0]  # 3 calls of 1.0 s: the wait's share of each window
    details = rounds.runtime_metrics("timer")[0].details
    assert details["rounds_s"] == [1.0, 1.0]
    assert details["waited_s"] == pytest.approx([0.2, 0.5])
    assert own_times(details["rounds_s"], details["waited_s"]) == pytest.approx([0.8, 0.5])
    assert rounds.own_round_totals() == pytest.approx([0.8, 0.5])  # the same as the A/B's own rounds
