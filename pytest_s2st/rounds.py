"""The timed rounds (pytest-free): how many (``RoundPolicy``), and one pipeline's rounds, each stage clocked
(``TimedRounds``); an A/B's drivers pace both sides' rounds with it (ab/inprocess.py ``PairedRounds`` in one
process, versions/worker.py in a code-version worker, sized by ``calls_per_round``)."""
from __future__ import annotations

import math
import time
from typing import Any, Callable, Sequence

from .measure.device import Device
from .measure.record import Metric
from .measure.runqueue import RunqueueClock
from .runtime_stats import RUNTIME, RunningPrecision, RuntimeStats

PROGRESS_EVERY = 100  # samples between progress lines (upstream logs every 100 samples)
Progress = Callable[[str, str, int, int], None]  # (stage, pass, done, total)


PRECISION_METHOD = RUNTIME.method


def relative_precision(values: Sequence[float]) -> float | None:
    """Half-width of the runtime statistic's 95 % interval, relative to it (runtime_stats.py; the mean's: Student's t);
    None below the rounds an interval needs or at a statistic <= 0."""
    return RUNTIME.precision(values)


class RoundPolicy:
    """How many timed rounds: at least ``base`` (samples x repeat) and ``min_rounds``; then, with a target
    precision, more until the relative 95 % half-width of the runtime statistic (runtime_stats.RUNTIME) of the
    round times is <= the target or the rounds
    have taken ``max_time`` seconds (``clock`` from the first round on). ``stop_reason`` says which."""

    def __init__(self, base: int, min_rounds: int | None = None, target_precision: float | None = None,
                 max_time: float = 60.0, clock: Callable[[], float] = time.perf_counter, fill_time: bool = False):
        self.required = max(base, min_rounds or 0)
        self.target = target_precision
        self.max_time = max_time
        self.fill_time = fill_time  # without a target: add rounds until max_time (pytest-benchmark's max-time)
        self.clock = clock
        self.started: float | None = None
        self.stop_reason = "rounds"
        self._precision = RunningPrecision()  # the mean's: Welford's running mean and sum of squares

    def precision(self, totals: Sequence[float]) -> float | None:
        """relative_precision(totals), updated with the rounds added since the last call (the mean's: O(1) per
        round)."""
        return self._precision(totals)

    @property
    def adaptive(self) -> bool:
        return self.target is not None or self.fill_time

    def more(self, totals: Sequence[float]) -> bool:
        """Run another round, given the round times so far?"""
        if self.started is None:
            self.started = self.clock()
        if len(totals) < self.required:
            return True
        if self.target is None and not self.fill_time:
            self.stop_reason = "rounds"
            return False
        precision = self.precision(totals) if self.target is not None else None
        if precision is not None and precision <= self.target:
            self.stop_reason = "target precision reached"
            return False
        if self.clock() - self.started >= self.max_time:
            self.stop_reason = "max time reached"
            return False
        return True


class RoundProbe:
    """A reading taken around every timed round, outside the clock, beside the run-queue wait: a counter the machine
    keeps (package energy, ...) whose difference over a round is the round's share. Each probe fills one metric of
    the table (``metric``: its name in metrics.py) per stage; every TimedRounds takes every probe of ROUND_PROBES.
    A probe that cannot read (no such counter here) still answers, with a metric that says why (value None)."""

    metric: str = ""

    def read(self) -> Any:
        """The counter now (anything ``between`` understands); cheap, never raises."""
        raise NotImplementedError

    def between(self, before: Any, after: Any) -> float | None:
        """The round's amount from two readings; None when either is missing."""
        raise NotImplementedError

    def stage_metrics(self, per_round: Sequence[float | None], rounds: "TimedRounds") -> list[Metric]:
        """One Metric per stage, per sample, from each round's amount (``rounds``: its calls, durations, totals)."""
        raise NotImplementedError

    def close(self) -> None:
        """The rounds are over (files it holds open)."""


# the probes every timed round takes, as factories (a probe may hold state per TimedRounds): one entry per probe
ROUND_PROBES: list[Callable[[], RoundProbe]] = []


class TimedRounds:
    """One round = one sample through every stage on its pre-generated inputs, each stage clocked.

    Driven by pytest-benchmark (``benchmark.pedantic(rounds.run, setup=rounds.setup, rounds=rounds.count)``)
    or by ``run_all`` outside pytest. The stage clocks use the same timer as pytest-benchmark.
    """

    def __init__(self, stages: Sequence[Any], stage_inputs: Sequence[Sequence[Any]], device: Device, repeat: int,
                 timer: Callable[[], float] = time.perf_counter, progress: Progress | None = None,
                 policy: RoundPolicy | None = None):
        self.progress = progress
        self.stages = list(stages)
        self.stage_inputs = stage_inputs
        self.device = device
        self.timer = timer
        self.n_samples = len(stage_inputs[0])
        # samples a round runs one after another (an A/B sizes it: PairedRounds.calibrate): each round records the
        # per-sample mean of its calls, so rounds of any length read as per-sample times
        self.calls = 1
        self.policy = policy or RoundPolicy(self.n_samples * repeat)
        self.count = self.policy.required  # the fixed count when no precision target is set
        self.durations: list[list[float]] = [[] for _ in self.stages]
        self.round_totals: list[float] = []  # each round's time over all stages
        self._next = 0
        # each round's run-queue wait (measure/runqueue.py), read between rounds, outside every clock
        self.waits: list[float | None] = []
        # each round's wall time between the same two readings: the window the wait fell in (_own)
        self.windows: list[float] = []
        self._queue = RunqueueClock()
        self._before: float | None = None
        self._t_before = 0.0
        self._marked = False
        self.probes = [make() for make in ROUND_PROBES]
        self.probed: dict[str, list[float | None]] = {p.metric: [] for p in self.probes}  # each round's amount
        self._probes_before: list[Any] = []

    def mark(self) -> None:
        """The next round starts: read the run-queue wait and the probes (outside the timed call)."""
        self._probes_before = [p.read() for p in self.probes]
        # the window's clock starts before the first reading and stops after the second (settle): a preemption
        # between a reading and the clock fell outside the window yet inside the wait, so wait >= window made a
        # round's own time 0 and its A/B had no ratio (7 of 60 code-version A/Bs at load 8)
        self._t_before = time.perf_counter()
        self._before, self._marked = self._queue.read(), True

    def settle(self) -> None:
        """The marked round ended: its run-queue wait is the difference of the readings."""
        if not self._marked:
            return
        now = self._queue.read()
        window = time.perf_counter() - self._t_before
        self.waits.append(now - self._before if now is not None and self._before is not None else None)
        self.windows.append(window)
        for probe, before in zip(self.probes, self._probes_before):
            self.probed[probe.metric].append(probe.between(before, probe.read()))
        self._marked = False

    def setup(self, mark: bool = True):
        # pytest-benchmark calls this outside the clock, so progress costs the timings nothing
        if mark:
            self.settle()
        if self.progress is not None and self._next and self._next % PROGRESS_EVERY == 0:
            self.progress("all stages", "timing", self._next, self.count)
        index = (self._next * self.calls) % self.n_samples
        self._next += 1
        if mark:
            self.mark()
        return (index,), {}

    def finish(self) -> None:
        self.settle()
        self._queue.close()
        for probe in self.probes:
            probe.close()

    def probe_metrics(self) -> dict[str, list[Metric]]:
        """{metric: one Metric per stage} of every probe (ROUND_PROBES) over the timed rounds."""
        return {p.metric: p.stage_metrics(self.probed[p.metric], self) for p in self.probes}

    def run(self, index: int) -> None:
        """One round: ``calls`` samples from ``index`` on (the dataset cycled), each through every stage, each stage
        clocked per call; the round records each stage's per-sample mean."""
        timer, sync = self.timer, self.device.synchronize
        sums = [0.0] * len(self.stages)
        for c in range(self.calls):
            i = (index + c) % self.n_samples
            for s, stage in enumerate(self.stages):
                x = self.stage_inputs[s][i]
                start = timer()
                stage.forward(x)
                sync()
                sums[s] += timer() - start
        for s, took in enumerate(sums):
            self.durations[s].append(took / self.calls)
        self.round_totals.append(sum(sums) / self.calls)

    def per_call_s(self, budget_s: float) -> float:
        """Untimed by any round: calls over the samples in order until ``budget_s`` has passed (at least one,
        at most one pass over the dataset); their mean time, what calls_per_round sizes rounds from."""
        timer, sync = self.timer, self.device.synchronize
        calls, start = 0, timer()
        while calls < self.n_samples:
            for s, stage in enumerate(self.stages):
                stage.forward(self.stage_inputs[s][calls])
                sync()
            calls += 1
            if timer() - start >= budget_s:
                break
        return (timer() - start) / calls

    def more(self) -> bool:
        return self.policy.more(self.round_totals)

    def last_round_s(self) -> float:
        """The last round's time over all stages, as the stage clocks took it (what pytest-benchmark records)."""
        return self.round_totals[-1]

    def run_all(self) -> None:
        while self.more():
            args, _ = self.setup()
            self.run(*args)
        self.finish()

    def run_marked(self, index: int) -> None:
        """One round outside any caller's clock, its run-queue wait read around it (an in-process A/B's baseline
        round, a code-version worker's ordered round)."""
        self.mark()
        self.run(index)
        self.settle()

    def next_round(self) -> tuple[float, float | None]:
        """The next round on its own (run_marked): its per-sample time, and the same less its share of the round's
        run-queue wait (None without a reading)."""
        args, _ = self.setup(mark=False)
        self.run_marked(*args)
        wait = self.waits[-1]
        own = self._own(self.round_totals[-1], wait, len(self.round_totals) - 1) if wait is not None else None
        return self.last_round_s(), own

    def _waited(self, round_s: float, wait_s: float, k: int) -> float:
        """Round k's per-sample wait: the round's wait over its window (the wall time between the two readings),
        as a share of the round's per-sample time. The stage clocks see less than the window (the loop between
        calls, the bookkeeping around the round), so a whole wait taken from them made own times 0 at load ~13
        (``too few rounds``); a wait falls in the clocked part and the rest alike. Without a window: the wait /
        the round's calls, capped at the round."""
        window = self.windows[k] if len(self.windows) == len(self.waits) else None
        if window is not None and window > 0:
            return round_s * min(wait_s / window, 1.0)
        return min(wait_s / self.calls, round_s)

    def _own(self, round_s: float, wait_s: float, k: int) -> float:
        """Round k less its share of the wait; a reading that leaves nothing (a clock's grain) is the wall time:
        one round's 0 would leave its whole A/B without a ratio."""
        own = round_s - self._waited(round_s, wait_s, k)
        return own if own > 0 else round_s

    def own_round_totals(self) -> list[float] | None:
        """Each round's per-sample time less its share of the round's run-queue wait (the time this thread was
        runnable but had no CPU: a neighbour's); None unless every round has a reading."""
        if len(self.waits) != len(self.round_totals) or any(w is None for w in self.waits):
            return None
        return [self._own(t, w, k) for k, (t, w) in enumerate(zip(self.round_totals, self.waits))]

    def stage_waits(self) -> list[list[float]] | None:
        """Each stage's share of each round's run-queue wait, per sample as its durations are (the round's wait / its
        calls, in proportion to the stage's time in the round); None unless every round has a reading. Saved as
        ``waited_s`` beside the per-sample ``rounds_s``: a whole round's wait against one sample's time made own
        times 0 and the A/B judged nothing (``too few rounds``)."""
        if len(self.waits) != len(self.round_totals) or any(w is None for w in self.waits):
            return None
        return [[self._waited(total, w, k) * (d / total if total > 0 else 0.0)
                 for k, (w, d, total) in enumerate(zip(self.waits, durations, self.round_totals))]
                for durations in self.durations]

    def runtime_metrics(self, method: str) -> list[Metric]:
        out = []
        waits = self.stage_waits()
        for s, durations in enumerate(self.durations):
            if not durations:
                out.append(Metric.missing(method, "no timed round ran"))
                continue
            stats = RuntimeStats(durations)
            # every round is kept: compare judges a change against the spread (significance.py)
            details = {"statistic": RUNTIME.name, "rounds": stats.rounds, "min": stats.min, "max": stats.max,
                       "rounds_s": list(durations), "precision": RUNTIME.precision(stats),
                       "precision_method": PRECISION_METHOD, "stopped": self.policy.stop_reason}
            if waits is not None:  # what a neighbour took from each round: compare's gross rule looks past it
                details["waited_s"] = waits[s]
            out.append(Metric(stats.get(RUNTIME.name), method, details=details))
        return out


MAX_CALLS_PER_ROUND = 1_000_000


def calls_per_round(per_call_s: float, target_s: float, n_samples: int) -> int:
    """Samples a round runs so that it takes about ``target_s`` at ``per_call_s`` a sample: at least one; past the
    dataset's size a whole number of passes over it (every sample weighs the same in every round); at most
    MAX_CALLS_PER_ROUND (a call too fast for the clock)."""
    if not per_call_s > 0:
        return MAX_CALLS_PER_ROUND
    calls = max(1, math.ceil(target_s / per_call_s))
    if calls > n_samples:
        calls = math.ceil(calls / n_samples) * n_samples
    return min(calls, MAX_CALLS_PER_ROUND)
