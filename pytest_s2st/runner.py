"""Measure one pipeline on one dataset (pytest-free).

Two runtime protocols (``RunSettings.runtime_protocol``; PROTOCOLS says what each times):

- ``warm`` (default), per stage: warm-up on the first input, memory pass and dispatch pass (FLOPs and
  tensor peak) over every input (both untimed; their outputs become the next stage's inputs, so cascades
  are measured on inputs generated beforehand and the bridging IO is never in a number; the memory pass's
  sampler is stopped before anything is timed); then, right before timing, one plain call of every stage
  on each distinct input shape (``shape_key``), so no timed call is the first of its shape; then the
  timing pass over all stages, at least ``DEFAULT_MIN_ROUNDS`` rounds.
- ``upstream``: fairseq's get_metrics.py order: ``warmup`` calls of the whole chain on sample 0, the
  earlier stages of a cascade run once over every sample to make the next stage's inputs, the timing pass
  (samples x repeat rounds: the last stage meets each new input shape cold, as upstream times it), then
  the memory and dispatch passes.

The caller drives the timing pass (pytest-benchmark's pedantic) through ``TimedRounds``: as many rounds
as ``RoundPolicy`` says.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Mapping, Sequence

from .measure.device import Device
from .measure.determinism import runtime_info, seed_everything, set_threads
from .measure.flops import count_flops, strict_flops
from .measure.instructions import InstructionPass
from .measure.memory import MemoryProbe, resolve_memory_method, rss_rise
from .measure.tensor_memory import TENSOR_NOTE, measure_tensor_memory, probe_call
from .measure.record import Metric, mib_summary
from .measure.runqueue import RunqueueClock
from .metrics import BY_NAME, INFERENCE_NAMES
from .runtime_stats import RUNTIME, RunningPrecision, RuntimeStats
from .runtime_stats import t975  # noqa: F401 -- the one t table, kept importable from here

PROGRESS_EVERY = 100  # samples between progress lines (upstream logs every 100 samples)
Progress = Callable[[str, str, int, int], None]  # (stage, pass, done, total)
DEFAULT_MIN_ROUNDS = 5  # timed rounds at least under the warm protocol: significance.MIN_ROUNDS, an interval
PROTOCOLS = {
    "warm": "warm: every stage called on each distinct input shape before the timed rounds (at least "
            f"{DEFAULT_MIN_ROUNDS}, the dataset cycled)",
    "upstream": "upstream get_metrics.py: warm-up on sample 0 only, timed before the memory and FLOP passes, "
                "samples x repeat rounds (each new input shape of the last stage timed cold)",
}
SHAPE_KEY_ITEMS = 64  # items of a sequence a shape key looks into (longer ones: their length and first item)


@dataclass
class RunSettings:
    device: Device
    repeat: int = 1
    warmup: int = 2
    memory: str = "vmhwm"
    flops: str = "torch"
    threads: int = 1
    seed: int = 1
    instructions: str = "off"
    tensor_memory: str = "dispatch"
    min_rounds: int | None = None          # timed rounds at least (the dataset is cycled); None: samples x repeat
    target_precision: float | None = None  # stop adding rounds once the relative 95 % CI half-width is <= this
    max_time: float = 60.0                 # seconds of timed rounds the precision target may spend
    case: dict | None = None  # the resolved case (Case.to_dict): the instruction pass's child rebuilds it
    runtime_protocol: str = "warm"  # a key of PROTOCOLS
    fill_time: bool = False   # add timed rounds until max_time even without a target precision
    isolate: bool = False     # the memory pass in a fresh process per case (measure/isolated.py)
    isolate_model: Any = None  # --s2st-isolate: the benchmarked callable when it is not the case's pipeline
    # the process's RSS (MiB) at the case's start, and what that start was: rss_rise_mib is the peak above it.
    # None: measure_pipeline's own start (the model already built)
    start_rss_mib: float | None = None
    start_what: str = "before the case's model was built"
    instructions_model: Any = None  # the instruction pass's child re-creates this callable (not the case's pipeline)
    instructions_baseline: Any = None  # likewise, an in-process A/B's baseline callable
    ab_round_s: float = 0.1  # an A/B's round target (--s2st-ab-round-s; PairedRounds.calibrate)

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any], **given: Any) -> "RunSettings":
        """Every field named like a setting of the table (settings.SETTINGS) takes that setting's resolved value
        from ``settings`` (a case's, or the session's: precedence and errors are settled there); ``given``
        holds what the table has not (the resolved ``device``, ``fill_time``, ``case``) and wins."""
        from .settings import BY_NAME

        table = {f.name: settings[f.name] for f in fields(cls) if f.name in BY_NAME and f.name not in given}
        return cls(**table, **given)


@dataclass
class StageResult:
    name: str
    metrics: dict[str, Metric] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "metrics": {k: m.to_dict() for k, m in self.metrics.items()}}


@dataclass
class Measurement:
    """Everything one benchmark measured; filled stage by stage so a crash keeps what was measured."""

    case_id: str
    model_type: str
    stages: list[StageResult] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    outputs: list[Any] = field(default_factory=list, repr=False)  # final stage outputs (not saved)
    baseline: "Measurement | None" = None  # the in-process A/B's baseline, measured in the same process
    stage_outputs: list[list[Any]] = field(default_factory=list, repr=False)  # every stage's (not saved)
    # metrics of the case as a whole, after the passes (translation quality: bleu, chrf, asr_bleu)
    quality: dict[str, Metric] = field(default_factory=dict)
    gate: Any = field(default=None, repr=False)  # the translation gate's Verdict, when the policy sets one

    @property
    def totals(self) -> dict[str, Metric]:
        return {**aggregate(self.stages), **self.quality}

    def metric(self, name: str, stage: str | None = None) -> Metric | None:
        if stage is None:
            return self.totals.get(name)
        for result in self.stages:
            if result.name == stage:
                return result.metrics.get(name)
        return None

    def to_dict(self) -> dict[str, Any]:
        # a metric the table lacks would vanish from a cascade's totals and every table: refused, named
        unknown = sorted(({*self.quality} | {k for s in self.stages for k in s.metrics}) - set(BY_NAME))
        if unknown:
            from .errors import S2STError

            raise S2STError(f"{self.case_id}: metric(s) {', '.join(map(repr, unknown))} not in the metric table "
                            "(pytest_s2st/metrics.py METRICS): add a row there, or rename the measurement")
        return {
            "case": self.case_id,
            "model_type": self.model_type,
            **self.info,
            "metrics": {k: m.to_dict() for k, m in self.totals.items()},
            "stages": [s.to_dict() for s in self.stages],
            **({"baseline": self.baseline.to_dict()} if self.baseline is not None else {}),
        }


    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Measurement":
        """The inverse of to_dict (outputs are never saved): stages with their metrics, the case's own metrics
        (those no stage holds: translation quality), the rest as info."""
        stages = [StageResult(str(s.get("name")), {k: Metric.from_dict(v) for k, v in (s.get("metrics") or {}).items()})
                  for s in data.get("stages") or []]
        staged = {k for s in stages for k in s.metrics}
        out = cls(str(data.get("case")), str(data.get("model_type")), stages,
                  info={k: v for k, v in data.items() if k not in ("case", "model_type", "metrics", "stages", "baseline")})
        out.quality = {k: Metric.from_dict(v) for k, v in (data.get("metrics") or {}).items() if k not in staged}
        if isinstance(data.get("baseline"), Mapping):
            out.baseline = cls.from_dict(data["baseline"])
        return out


def aggregate(stages: Sequence[StageResult]) -> dict[str, Metric]:
    if not stages:
        return {}
    if len(stages) == 1:
        return dict(stages[0].metrics)
    out: dict[str, Metric] = {}
    for name in INFERENCE_NAMES:
        if BY_NAME[name].aggregate is None:  # a metric of the whole case (translation quality), not of stages
            continue
        parts = [(s.name, s.metrics.get(name)) for s in stages]
        if all(m is None for _, m in parts):
            continue  # not asked for (the instruction count is off by default)
        missing = [(n, m) for n, m in parts if m is None or m.value is None]
        methods = sorted({m.method for _, m in parts if m is not None})
        method = methods[0] if len(methods) == 1 else "+".join(methods)
        if missing:
            reason = "; ".join(f"{n}: {m.reason if m else 'not measured'}" for n, m in missing)
            out[name] = Metric.missing(method, reason)
            continue
        values = [m.value for _, m in parts]
        how = BY_NAME[name].aggregate  # runtime and FLOPs add up, memory peaks take the max
        details: dict[str, Any] = {"over_stages": how}
        value = sum(values) if how == "sum" else max(values)
        rounds = [m.details.get("rounds_s") for _, m in parts]
        if how == "sum" and all(rounds) and len({len(r) for r in rounds}) == 1:
            details["rounds_s"] = [sum(r) for r in zip(*rounds)]  # round i of the cascade: its stages' round i
            waited = [m.details.get("waited_s") for _, m in parts]
            if all(waited) and len({len(w) for w in waited} | {len(rounds[0])}) == 1:
                details["waited_s"] = [sum(w) for w in zip(*waited)]
            details["statistic"] = RUNTIME.name
            details["precision"] = relative_precision(details["rounds_s"])
            details["precision_method"] = PRECISION_METHOD
            if not RUNTIME.additive:  # the median of round totals is not the sum of the stages' medians
                value = RUNTIME.of(details["rounds_s"])
        protocols = {m.details.get("protocol") for _, m in parts}
        if len(protocols) == 1 and None not in protocols:
            details["protocol"] = protocols.pop()
        out[name] = Metric(value, method, details=details)
        if name == "flops":
            mark_uncounted(out[name], [m.details for _, m in parts])
    return out


def mark_uncounted(metric: Metric, parts: Sequence[Mapping[str, Any]]) -> None:
    """A FLOP total made of parts (samples, stages) is partial when any part is: their uncounted calls add up."""
    uncounted: dict[str, int] = {}
    for details in parts:
        for op, calls in (details or {}).get("uncounted", {}).items():
            uncounted[op] = uncounted.get(op, 0) + calls
    metric.details.pop("uncounted", None)
    metric.details.pop("partial", None)
    if uncounted:
        metric.details.update(uncounted=uncounted, partial=True)


def shape_key(x: Any) -> Any:
    """What makes two inputs the same shape for a model: array/tensor shapes and dtypes, text and sequence
    lengths, mapping keys; nested. Scalars count by type only (a token id or a seed is not a shape)."""
    if hasattr(x, "shape") and hasattr(x, "dtype"):  # numpy array, torch tensor (no import needed)
        return ("array", tuple(int(d) for d in x.shape), str(x.dtype))
    if isinstance(x, (str, bytes)):
        return (type(x).__name__, len(x))
    if isinstance(x, dict):
        return ("dict", tuple((str(k), shape_key(v)) for k, v in x.items()))
    if isinstance(x, (list, tuple)):
        items = x if len(x) <= SHAPE_KEY_ITEMS else x[:1]
        return ("seq", len(x), tuple(shape_key(v) for v in items))
    return type(x).__name__


def first_of_each_shape(inputs: Sequence[Any]) -> list[int]:
    """Indices of the first input of each distinct shape_key, in dataset order."""
    seen: set = set()
    out = []
    for i, x in enumerate(inputs):
        key = shape_key(x)
        try:
            new = key not in seen
        except TypeError:  # an unhashable leaf: treat the input as its own shape
            key, new = ("index", i), True
        if new:
            seen.add(key)
            out.append(i)
    return out


class StageMeasurer:
    """The untimed passes of one stage: warm-up, memory, device peak, FLOPs."""

    def __init__(self, settings: RunSettings, progress: Progress | None = None):
        self.settings = settings
        self.progress = progress
        method, self.memory_fallback = resolve_memory_method(settings.memory)
        self.memory = MemoryProbe(method, self.memory_fallback)
        self.instructions = InstructionPass(settings.instructions, settings.case, settings.device.name,
                                            settings.warmup, settings.seed, model=settings.instructions_model)

    def _tick(self, stage: str, phase: str, index: int, total: int) -> None:
        if self.progress is not None and index and index % PROGRESS_EVERY == 0:
            self.progress(stage, phase, index, total)

    def _synced(self, stage, x):
        out = stage.forward(x)
        self.settings.device.synchronize()
        return out

    def measure(self, stage, inputs: Sequence[Any], warm_up: bool = True) -> tuple[StageResult, list[Any]]:
        """The untimed passes; ``warm_up`` False: no warm-up calls first (the upstream protocol warmed the
        chain before timing, and upstream's memory pass follows its timed pass without another)."""
        result = StageResult(stage.name)
        device = self.settings.device
        for _ in range(self.settings.warmup if warm_up else 0):
            self._synced(stage, inputs[0])

        outputs: list[Any] | None = None
        if not self.settings.isolate and (self.settings.memory != "off" or device.name != "cpu"):
            per_sample, device_peaks, outputs = [], [], []
            for i, x in enumerate(inputs):
                self._tick(stage.name, "memory", i, len(inputs))
                device.reset_peak()
                out, mem = self.memory.measure(self._synced, stage, x)
                device_peaks.append(device.peak_mib())
                per_sample.append(mem)
                outputs.append(out)
            self.memory.close()  # no sampler left beside the timed pass
            result.metrics["peak_rss_mib"] = mib_summary(per_sample, "peak_rss_mib")
            result.metrics["peak_delta_mib"] = mib_summary(per_sample, "peak_delta_mib")
            result.metrics["rss_rise_mib"] = rss_rise(result.metrics["peak_rss_mib"], self.settings.start_rss_mib,
                                                      self.settings.start_what)
            if self.memory_fallback:
                for name in ("rss_rise_mib", "peak_rss_mib", "peak_delta_mib"):
                    result.metrics[name].details["fallback"] = self.memory_fallback
            result.metrics["device_peak_mib"] = mib_summary([{"d": d} for d in device_peaks], "d")
        else:
            off = Metric.missing("off", "memory measurement disabled (--s2st-memory=off)")
            if self.settings.isolate and self.settings.memory != "off":  # replaced by the fresh process's numbers
                off = Metric.missing(self.settings.memory, "--s2st-isolate: the fresh process gave no memory numbers")
            result.metrics.update(rss_rise_mib=off, peak_rss_mib=off, peak_delta_mib=off,
                                  device_peak_mib=device.peak_mib())

        # one dispatch pass counts the torch FLOPs and the live tensor bytes together (measure/tensor_memory.py)
        tensors = self.settings.tensor_memory == "dispatch"
        flop_counts, flop_outputs, tensor_peaks = [], [], []
        for i, x in enumerate(inputs):
            self._tick(stage.name, "flops", i, len(inputs))
            if self.settings.flops in ("torch", "torch-strict"):
                out, metric, peak = probe_call(self._synced, (stage, x), {}, flops=True, tensors=tensors)
            else:
                out, metric = count_flops(self.settings.flops, self._synced, stage, x)
                peak = measure_tensor_memory(self._synced, stage, x)[1] if tensors else None
            flop_counts.append(metric)
            flop_outputs.append(out)
            tensor_peaks.append(peak)
        if tensors:
            result.metrics["tensor_peak_mib"] = mib_summary([{"t": t} for t in tensor_peaks], "t")
            if result.metrics["tensor_peak_mib"].value is not None:
                result.metrics["tensor_peak_mib"].details["note"] = TENSOR_NOTE
        else:
            result.metrics["tensor_peak_mib"] = Metric.missing("off", "tensor memory disabled (--s2st-tensor-memory=off)")
        values = [m.value for m in flop_counts]
        if any(v is None for v in values):
            first = next(m for m in flop_counts if m.value is None)
            result.metrics["flops"] = Metric.missing(first.method, first.reason or "not counted")
        else:
            # deterministic models give one count per sample; the mean is what upstream reports
            result.metrics["flops"] = Metric(sum(values) / len(values), flop_counts[0].method,
                                             details={"per_sample": values, **{k: v for k, v in flop_counts[0].details.items() if k != "by_op"}})
            mark_uncounted(result.metrics["flops"], [m.details for m in flop_counts])
            if self.settings.flops == "torch-strict":
                result.metrics["flops"] = strict_flops(result.metrics["flops"])
        instructions = self.instructions.measure(stage, inputs)  # valgrind child; None when off
        if instructions is not None:
            result.metrics["instructions"] = instructions
        return result, outputs if outputs is not None else flop_outputs


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
        self._queue = RunqueueClock()
        self._before: float | None = None
        self._marked = False

    def mark(self) -> None:
        """The next round starts: read the run-queue wait (outside the timed call)."""
        self._before, self._marked = self._queue.read(), True

    def settle(self) -> None:
        """The marked round ended: its run-queue wait is the difference of the readings."""
        if not self._marked:
            return
        now = self._queue.read()
        self.waits.append(now - self._before if now is not None and self._before is not None else None)
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

    def own_round_totals(self) -> list[float] | None:
        """Each round's per-sample time less its share of the round's run-queue wait (the time this thread was
        runnable but had no CPU: a neighbour's); None unless every round has a reading."""
        if len(self.waits) != len(self.round_totals) or any(w is None for w in self.waits):
            return None
        return [max(t - w / self.calls, 0.0) for t, w in zip(self.round_totals, self.waits)]

    def stage_waits(self) -> list[list[float]] | None:
        """Each stage's share of each round's run-queue wait (in proportion to its time in the round); None
        unless every round has a reading."""
        if len(self.waits) != len(self.round_totals) or any(w is None for w in self.waits):
            return None
        return [[w * (d / total if total > 0 else 0.0) for w, d, total in zip(self.waits, durations, self.round_totals)]
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


class PairedRounds:
    """The in-process A/B: the candidate's rounds (timed by the caller, e.g. pytest-benchmark's pedantic, as
    ``TimedRounds``) with a baseline round of the same input beside each, in ABBA order -- B0 A0, A1 B1, B2 A2,
    ... -- so a drift of the machine or a cache warmed by one side's last round hits both sides alike. The
    baseline rounds run in ``setup`` (outside the caller's clock) on the same timer; ``finish`` runs the last
    pair's baseline round when the candidate went first."""

    def __init__(self, candidate: TimedRounds, baseline: TimedRounds):
        self.candidate, self.baseline = candidate, baseline
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
        return calls

    def _baseline_round(self, index: int) -> None:
        self.baseline.mark()
        self.baseline.run(index)
        self.baseline.settle()

    def setup(self):
        self.candidate.settle()  # the candidate's last round ended with the caller's clock
        if self._pending is not None:
            self._baseline_round(self._pending)  # B of the last pair (A went first)
            self._pending = None
        k = len(self.candidate.round_totals)
        args, kwargs = self.candidate.setup(mark=False)
        if k % 2 == 0:
            self._baseline_round(args[0])        # B A
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
            self._baseline_round(self._pending)
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
        13/20 and A/A once faster, own times 20/20 and never (docs/measurement.md). (With one-call rounds taking the
        wait out was measured worse: the bookkeeping around a round weighed as much as the round.)"""
        from .significance import compare_pairs

        base, cand = ((self.baseline.own_round_totals(), self.candidate.own_round_totals()) if self.own()
                      else (self.baseline.round_totals, self.candidate.round_totals))
        n = min(len(cand), len(base))
        return compare_pairs(base[:n], cand[:n])


AB_MIN_PAIRS = 30  # ABBA pairs at least, unless --s2st-min-rounds says otherwise (rounds of --s2st-ab-round-s: docs/measurement.md)
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


def min_rounds_for(settings: RunSettings) -> int | None:
    """The floor of timed rounds: the explicit one, else DEFAULT_MIN_ROUNDS (warm) or none (upstream:
    samples x repeat, as get_metrics.py times them)."""
    if settings.min_rounds is not None:
        return settings.min_rounds
    return DEFAULT_MIN_ROUNDS if settings.runtime_protocol == "warm" else None


def _chain_warm_up(stages: Sequence[Any], first: Any, times: int, sync: Callable[[], None]) -> None:
    """get_metrics.py's model.warm_up(sample=dataset[0], repeat): the whole chain on sample 0."""
    for _ in range(times):
        x = first
        for s, stage in enumerate(stages):
            out = stage.forward(x)
            sync()
            if s + 1 < len(stages):
                x = stage.to_next_input(out)


def _warm_chain(pipeline, samples: Sequence[Any], sync: Callable[[], None]) -> None:
    """Every sample through the whole chain once, untimed and unmeasured."""
    xs = [pipeline.prepare_sample(s) for s in samples]
    stages = list(pipeline.stages)
    for s, stage in enumerate(stages):
        outs = []
        for x in xs:
            outs.append(stage.forward(x))
            sync()
        if s + 1 < len(stages):
            xs = [stage.to_next_input(o) for o in outs]


def _isolated_memory(measurement: Measurement, settings: RunSettings, inputs: Sequence[Any]) -> None:
    """--s2st-isolate: the stages' memory metrics from a fresh process (measure/isolated.py)."""
    if not settings.isolate or settings.memory == "off":
        return
    from .measure.isolated import isolated_memory

    measurement.info["memory_isolated"] = True
    results = isolated_memory(settings.case, inputs, method=settings.memory, warmup=settings.warmup,
                              threads=settings.threads, seed=settings.seed, stages=len(measurement.stages),
                              device=settings.device.name, model=settings.isolate_model)
    for result, metrics in zip(measurement.stages, results):
        result.metrics.update(metrics)


def measure_pipeline(pipeline, samples: Sequence[Any], settings: RunSettings, *, case_id: str,
                     drive_timing: Callable[[TimedRounds], str] | None = None,
                     measurement: Measurement | None = None, progress: Progress | None = None,
                     baseline: Any = None) -> Measurement:
    """Run every pass; ``drive_timing(rounds)`` runs the timed rounds and returns the timer's description.
    ``baseline``: a second pipeline timed in the same rounds, ABBA (PairedRounds), for an in-process A/B.
    A model that calls sys.exit() (SystemExit is no Exception: it passed every guard, then pytest printed a
    traceback) is one S2STError line naming where; what ``measurement`` holds by then is kept."""
    try:
        return _measure_pipeline(pipeline, samples, settings, case_id=case_id, drive_timing=drive_timing,
                                 measurement=measurement, progress=progress, baseline=baseline)
    except SystemExit as exc:
        from .errors import S2STError
        from .inputs import show
        from .pipelines.callable import user_frame

        at = user_frame(exc)
        raise S2STError(f"the benchmarked model called sys.exit({show(repr(exc.code), 60)})"
                        f"{f' at {show(at)}' if at else ''}: a model returns its output; nothing after that call "
                        "was measured") from None


def _measure_pipeline(pipeline, samples: Sequence[Any], settings: RunSettings, *, case_id: str,
                      drive_timing: Callable[[TimedRounds], str] | None,
                      measurement: Measurement | None, progress: Progress | None, baseline: Any) -> Measurement:
    if not samples:
        raise ValueError("empty dataset")
    if baseline is not None and settings.runtime_protocol != "warm":
        from .errors import S2STError

        raise S2STError(f"an in-process A/B (s2st_benchmark(..., baseline=...)) times both sides under the warm "
                        f"runtime protocol; got --s2st-runtime-protocol {settings.runtime_protocol}")
    if settings.runtime_protocol not in PROTOCOLS:
        raise ValueError(f"unknown runtime protocol {settings.runtime_protocol!r}; known: {', '.join(PROTOCOLS)}")
    measurement = measurement or Measurement(case_id, pipeline.model_type)
    if settings.start_rss_mib is None:  # no earlier start known: the measurement's own (the model already built)
        from dataclasses import replace

        from .measure.memory import current_rss_mib

        settings = replace(settings, start_rss_mib=current_rss_mib(),
                           start_what="when its measurement began (the model already built)")
    threads = set_threads(settings.threads)
    seed_everything(settings.seed)
    measurement.info.update(
        device=settings.device.describe(),
        threads=threads,
        runtime=runtime_info(),
        samples=len(samples),
        inputs_sha256=_inputs_fingerprint(samples),  # compare's "same work" (work.py): the inputs' content
        repeat=settings.repeat,
        warmup=settings.warmup,
        runtime_protocol=settings.runtime_protocol,
        assets=pipeline.assets(),
    )
    measurer = StageMeasurer(settings, progress)
    stages = list(pipeline.stages)
    inputs = [pipeline.prepare_sample(s) for s in samples]
    sync = settings.device.synchronize
    stage_inputs: list[list[Any]] = [inputs]
    if settings.runtime_protocol == "upstream":
        _chain_warm_up(stages, inputs[0], settings.warmup, sync)
        for stage in stages[:-1]:  # upstream's generate_*_outputs: every sample, before anything is timed
            outs = []
            for x in stage_inputs[-1]:
                outs.append(stage.forward(x))
                sync()
            stage_inputs.append([stage.to_next_input(o) for o in outs])
    else:
        if baseline is not None:  # both sides' allocators grown before either memory pass: the first is not blamed
            for side in (pipeline, baseline):
                _warm_chain(side, samples, sync)
        for s, stage in enumerate(stages):
            result, outputs = measurer.measure(stage, stage_inputs[s])
            measurement.stages.append(result)
            measurement.stage_outputs.append(outputs)
            if s + 1 < len(stages):
                stage_inputs.append([stage.to_next_input(o) for o in outputs])
        measurement.outputs = outputs
        warmed = []
        for stage, xs in zip(stages, stage_inputs):  # no timed call is the first of its shape
            firsts = first_of_each_shape(xs)
            for i in firsts:
                stage.forward(xs[i])
                sync()
            warmed.append(len(firsts))
        measurement.info["warmed_shapes"] = warmed  # per stage: distinct input shapes called before timing
        _isolated_memory(measurement, settings, inputs)  # a child process: nothing of it runs beside timing

    floor = min_rounds_for(settings)
    if baseline is not None and settings.min_rounds is None:
        floor = max(floor or 0, AB_MIN_PAIRS)
    policy = RoundPolicy(len(samples) * settings.repeat, floor, settings.target_precision,
                         settings.max_time, fill_time=settings.fill_time)
    rounds = TimedRounds(stages, stage_inputs, settings.device, settings.repeat, progress=progress,
                         policy=policy)
    paired = None
    if baseline is not None:
        base_stages, base_inputs = _measure_baseline(baseline, samples, settings, measurement, measurer)
        paired = PairedRounds(rounds, TimedRounds(base_stages, base_inputs, settings.device, settings.repeat))
        paired.calibrate(settings.ab_round_s)
    driven = paired or rounds
    if drive_timing is None:
        driven.run_all()
        timer = "time.perf_counter"
    else:
        timer = drive_timing(driven)
        driven.finish()

    if settings.runtime_protocol == "upstream":  # then upstream's max_memory and count_flops passes
        for stage, xs in zip(stages, stage_inputs):
            result, outputs = measurer.measure(stage, xs, warm_up=False)
            measurement.stages.append(result)
            measurement.stage_outputs.append(outputs)
        measurement.outputs = outputs
        _isolated_memory(measurement, settings, inputs)
    method = f"timer:{timer}"
    for result, metric in zip(measurement.stages, rounds.runtime_metrics(method)):
        metric.details["device"] = settings.device.name
        metric.details["threads"] = threads
        metric.details["protocol"] = settings.runtime_protocol
        result.metrics["runtime_s"] = metric
    if paired is not None:
        _paired_runtime(measurement, paired, method, settings, threads)
    # the runtime goes first in every stage's metrics, as in the table; a name the table lacks is refused, not dropped
    for m in (measurement, measurement.baseline):
        for result in (m.stages if m is not None else ()):
            result.metrics = {**{k: result.metrics[k] for k in INFERENCE_NAMES if k in result.metrics}, **result.metrics}
        if m is not None:
            m.to_dict()  # raises S2STError naming a metric the table lacks, before the test reports anything
    return measurement


def _measure_baseline(baseline, samples: Sequence[Any], settings: RunSettings, measurement: Measurement,
                      measurer: "StageMeasurer") -> tuple[list[Any], list[list[Any]]]:
    """The baseline's untimed passes (warm protocol: memory, FLOPs, tensor peak; every input shape called
    once), into ``measurement.baseline``; returns its stages and each stage's inputs for the paired rounds."""
    sync = settings.device.synchronize
    measurement.baseline = Measurement(f"{measurement.case_id} baseline", baseline.model_type)
    stages = list(baseline.stages)
    stage_inputs: list[list[Any]] = [[baseline.prepare_sample(s) for s in samples]]
    # the baseline's own valgrind child (the measurer's counts the candidate): it re-creates the baseline callable,
    # or builds the case's pipeline when that is the baseline
    model = settings.instructions_baseline
    counted = InstructionPass(settings.instructions, settings.case if model is None else None, settings.device.name,
                              settings.warmup, settings.seed, model=model)
    for s, stage in enumerate(stages):
        result, outputs = measurer.measure(stage, stage_inputs[s])
        if "instructions" in result.metrics:
            result.metrics["instructions"] = counted.measure(stage, stage_inputs[s])
        measurement.baseline.stages.append(result)
        if s + 1 < len(stages):
            stage_inputs.append([stage.to_next_input(o) for o in outputs])
    for stage, xs in zip(stages, stage_inputs):
        for i in first_of_each_shape(xs):
            stage.forward(xs[i])
            sync()
    return stages, stage_inputs


def _paired_runtime(measurement: Measurement, paired: PairedRounds, method: str, settings: RunSettings,
                    threads: Any) -> None:
    """The baseline's per-stage runtimes and the paired change (``info["ab"]``: what the A/B table and the
    runtime_s limit read)."""
    base = measurement.baseline
    for result, metric in zip(base.stages, paired.baseline.runtime_metrics(method)):
        metric.details.update(device=settings.device.name, threads=threads, protocol=settings.runtime_protocol)
        result.metrics["runtime_s"] = metric
    change = paired.change()
    measurement.info["ab"] = {
        "ratio": change.ratio, "low": change.low, "high": change.high, "word": change.word, "pairs": change.pairs,
        "calls_per_round": paired.candidate.calls, "round_target_s": settings.ab_round_s,
        "timing": "own time (wall less run-queue wait)" if paired.own() else "wall time",
        "method": f"median of paired candidate/baseline round ratios, rounds of {paired.candidate.calls} calls "
                  f"(about {settings.ab_round_s:g} s) alternating ABBA in one process, each round's own time (wall "
                  "less the time its thread waited for a CPU) where every round has it; 95% distribution-free "
                  "interval of the median (order statistics, binomial)",
    }


def _inputs_fingerprint(samples: Any) -> str | None:
    from .work import inputs_fingerprint

    return inputs_fingerprint(samples)
