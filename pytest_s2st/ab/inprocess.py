"""The in-process A/B (``s2st_benchmark(model, inputs, baseline=other)``): both callables in one process, the
candidate's rounds timed by the caller with a baseline round beside each, ABBA (``PairedRounds``); the runner
measures the baseline's untimed passes and writes ``ab_record``."""
from __future__ import annotations

import math
from typing import Callable

from ..rounds import TimedRounds, calls_per_round
from .estimators import DEFAULT, Estimator
from .mode import ABMode, PairContext
from .record import IN_PROCESS, ABRecord

# ABBA pairs at least, unless --s2st-min-rounds says otherwise (rounds of --s2st-ab-round-s: docs/compare.md)
AB_MIN_PAIRS = 30
# and as many more (up to 4x) as both sides' rounds fit in this time: 120 pairs of 0.025 s rounds, the time 30 pairs
# of 0.1 s rounds took; a model whose one call outlasts a round stays at AB_MIN_PAIRS
AB_PAIRS_S = 6.0


def pairs_for(round_s: float) -> int:
    """ABBA pairs of rounds of ``round_s`` (the slower side's): as many as fill AB_PAIRS_S, AB_MIN_PAIRS to 4x."""
    if not round_s > 0:
        return AB_MIN_PAIRS
    return max(AB_MIN_PAIRS, min(4 * AB_MIN_PAIRS, math.ceil(AB_PAIRS_S / (2 * round_s))))


class InProcess(ABMode):
    name = IN_PROCESS
    legend = ("ratio: median of the paired candidate/baseline round ratios (rounds alternating ABBA in one process; "
              "each round less its wait for a CPU) "
              "[its 95% interval]; slower/faster when the interval excludes 1 and the ratio is past 2%; other "
              "columns: the candidate (its change from the baseline), or, stacked, each side and the change")

    def title(self, record: ABRecord) -> str:
        return "A/B in one process (baseline -> candidate)"

    def pair(self, candidate: TimedRounds, baseline: TimedRounds, context: PairContext) -> "PairedRounds":
        return PairedRounds(candidate, baseline, context.estimator, fill=context.settings.min_rounds is None)


MODE = InProcess()


class PairedRounds:
    """The in-process A/B: the candidate's rounds (timed by the caller, e.g. pytest-benchmark's pedantic, as
    ``TimedRounds``) with a baseline round of the same input beside each, in ABBA order -- B0 A0, A1 B1, B2 A2,
    ... -- so a drift of the machine or a cache warmed by one side's last round hits both sides alike. The
    baseline rounds run in ``setup`` (outside the caller's clock) on the same timer; ``finish`` runs the last
    pair's baseline round when the candidate went first; ``estimator`` judges the pairs (ab/estimators.py);
    ``fill``: ``calibrate`` raises the rounds to ``pairs_for`` the calibrated round (no --s2st-min-rounds given)."""

    def __init__(self, candidate: TimedRounds, baseline: TimedRounds, estimator: Estimator = DEFAULT,
                 fill: bool = False):
        self.candidate, self.baseline = candidate, baseline
        self.estimator = estimator
        self.fill = fill
        self.policy, self.count = candidate.policy, candidate.count
        self._pending: int | None = None  # the index of a pair whose baseline round is still to run

    @property
    def timer(self) -> Callable[[], float]:
        return self.candidate.timer

    @timer.setter
    def timer(self, value: Callable[[], float]) -> None:
        self.candidate.timer = self.baseline.timer = value

    def calibrate(self, target_s: float) -> int:
        """Both sides run ``calls_per_round`` samples a round, sized so that the slower side's round takes about
        ``target_s``: a preemption then takes its share of a round instead of adding the same delay to both
        sides of a pair, which pulls the ratio toward 1 on a busy machine (+10 % read x1.042 with one-call rounds
        at load ~7)."""
        per_call = max(self.candidate.per_call_s(target_s / 2), self.baseline.per_call_s(target_s / 2))
        calls = calls_per_round(per_call, target_s, self.candidate.n_samples)
        self.candidate.calls = self.baseline.calls = calls
        if self.fill:
            self.policy.required = max(self.policy.required, pairs_for(calls * per_call))
            self.count = self.candidate.count = self.policy.required
        return calls

    def setup(self):
        self.candidate.settle()  # the candidate's last round ended with the caller's clock
        if self._pending is not None:
            self.baseline.run_marked(self._pending)  # B of the last pair (A went first)
            self._pending = None
        k = len(self.candidate.round_totals)
        args, kwargs = self.candidate.setup(mark=False)
        if k % 2 == 0:
            self.baseline.run_marked(args[0])        # B A
        else:
            self._pending = args[0]              # A B: B after the candidate's round
        self.candidate.mark()
        return args, kwargs

    def run(self, index: int) -> None:
        self.candidate.run(index)

    def more(self) -> bool:
        return self.candidate.more()

    def last_round_s(self) -> float:
        return self.candidate.last_round_s()

    def finish(self) -> None:
        self.candidate.settle()
        if self._pending is not None:
            self.baseline.run_marked(self._pending)
            self._pending = None
        self.candidate.finish()
        self.baseline.finish()

    def run_all(self) -> None:
        while self.more():
            args, _ = self.setup()
            self.run(*args)
        self.finish()

    def own(self) -> bool:
        """Whether the change is judged on own times: every round of both sides has a run-queue reading."""
        return self.candidate.own_round_totals() is not None and self.baseline.own_round_totals() is not None

    def change(self):
        """The paired change on each round's own time (its wall time less the time the thread waited for a CPU in
        it), else on wall times. At load 7 (six busy loops beside), on the same rounds: wall times read +10 % slower
        13/20 and A/A once faster, own times 20/20 and never (docs/records/measurement.md). (With one-call rounds
        taking the wait out was measured worse: the bookkeeping around a round weighed as much as the round.)"""
        base, cand = ((self.baseline.own_round_totals(), self.candidate.own_round_totals()) if self.own()
                      else (self.baseline.round_totals, self.candidate.round_totals))
        n = min(len(cand), len(base))
        return self.estimator.pairs(base[:n], cand[:n])

    def record(self, round_s: float) -> ABRecord:
        return ab_record(self, round_s)


def ab_record(paired: PairedRounds, round_s: float) -> ABRecord:
    """The paired change of the candidate's and the baseline's rounds, and how they were timed."""
    change, estimator = paired.change(), paired.estimator
    return ABRecord(
        change.ratio, change.low, change.high, change.word, change.pairs, calls_per_round=paired.candidate.calls,
        round_target_s=round_s, timing="own time (wall less run-queue wait)" if paired.own() else "wall time",
        method=f"{estimator.statistic} of paired candidate/baseline round ratios, rounds of {paired.candidate.calls} "
               f"calls (about {round_s:g} s) alternating ABBA in one process, each round's own time (wall "
               f"less the time its thread waited for a CPU) where every round has it; 95% {estimator.interval}",
        estimator=estimator.name)
