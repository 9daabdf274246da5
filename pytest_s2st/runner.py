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

The caller drives the timing pass (pytest-benchmark's pedantic) through ``TimedRounds`` (rounds.py): as many
rounds as ``RoundPolicy`` says; an in-process A/B's baseline rounds beside them (ab/inprocess.py).
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Callable, Mapping, Sequence

from .ab import paired_modes
from .ab.estimators import chosen
from .ab.inprocess import AB_MIN_PAIRS
from .ab.mode import PairContext
from .ab.record import IN_PROCESS, MEDIAN
from .errors import S2STError
from .inputs import show
from .isolated import isolated_memory
from .measure.device import Device
from .measure.determinism import runtime_info, seed_everything, set_threads
from .measure.flops import count_flops, strict_flops
from .measure.instructions import InstructionPass
from .measure.memory import MemoryProbe, current_rss_mib, resolve_memory_method, rss_rise
from .measure.tensor_memory import TENSOR_NOTE, measure_tensor_memory, probe_call
from .measure.record import Metric, mib_summary
from .measurement import Measurement, StageResult, mark_uncounted
from .metrics import INFERENCE_NAMES
from .pipelines.callable import user_frame
from .rounds import PROGRESS_EVERY, Progress, RoundPolicy, TimedRounds
from .settings import AB_ROUND_S, BY_NAME
from .work import inputs_fingerprint

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
    isolate: bool = False     # the memory pass in a fresh process per case (isolated.py)
    isolate_model: Any = None  # --s2st-isolate: the benchmarked callable when it is not the case's pipeline
    # the process's RSS (MiB) at the case's start, and what that start was: rss_rise_mib is the peak above it.
    # None: measure_pipeline's own start (the model already built)
    start_rss_mib: float | None = None
    start_what: str = "before the case's model was built"
    instructions_model: Any = None  # the instruction pass's child re-creates this callable (not the case's pipeline)
    instructions_baseline: Any = None  # likewise, an in-process A/B's baseline callable
    ab_round_s: float = AB_ROUND_S  # an A/B's round target (--s2st-ab-round-s)
    ab_mode: str = IN_PROCESS  # how an A/B (baseline=) times its rounds: a mode of ab.MODES that pairs rounds
    ab_estimator: str = MEDIAN  # what judges an A/B's paired rounds: an estimator of ab.ESTIMATORS

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any], **given: Any) -> "RunSettings":
        """Every field named like a setting of the table (settings.SETTINGS) takes that setting's resolved value
        from ``settings`` (a case's, or the session's: precedence and errors are settled there); ``given``
        holds what the table has not (the resolved ``device``, ``fill_time``, ``case``) and wins."""
        table = {f.name: settings[f.name] for f in fields(cls) if f.name in BY_NAME and f.name not in given}
        return cls(**table, **given)



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
            result.metrics["tensor_peak_mib"] = Metric.missing("off",
                                                               "tensor memory disabled (--s2st-tensor-memory=off)")
        values = [m.value for m in flop_counts]
        if any(v is None for v in values):
            first = next(m for m in flop_counts if m.value is None)
            result.metrics["flops"] = Metric.missing(first.method, first.reason or "not counted")
        else:
            # deterministic models give one count per sample; the mean is what upstream reports
            result.metrics["flops"] = Metric(sum(values) / len(values), flop_counts[0].method,
                                             details={"per_sample": values,
                                                      **{k: v for k, v in flop_counts[0].details.items()
                                                         if k != "by_op"}})
            mark_uncounted(result.metrics["flops"], [m.details for m in flop_counts])
            if self.settings.flops == "torch-strict":
                result.metrics["flops"] = strict_flops(result.metrics["flops"])
        instructions = self.instructions.measure(stage, inputs)  # valgrind child; None when off
        if instructions is not None:
            result.metrics["instructions"] = instructions
        return result, outputs if outputs is not None else flop_outputs


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
    """--s2st-isolate: the stages' memory metrics from a fresh process (isolated.py)."""
    if not settings.isolate or settings.memory == "off":
        return

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
        raise S2STError(f"an in-process A/B (s2st_benchmark(..., baseline=...)) times both sides under the warm "
                        f"runtime protocol; got --s2st-runtime-protocol {settings.runtime_protocol}")
    if baseline is not None and settings.ab_mode not in paired_modes():
        raise S2STError(f"s2st_benchmark(..., ab_mode={settings.ab_mode!r}): not an A/B mode chosen per test; "
                        f"known: {', '.join(map(repr, paired_modes()))}")
    estimator = chosen(settings.ab_estimator) if baseline is not None else None
    if settings.runtime_protocol not in PROTOCOLS:
        raise ValueError(f"unknown runtime protocol {settings.runtime_protocol!r}; known: {', '.join(PROTOCOLS)}")
    measurement = measurement or Measurement(case_id, pipeline.model_type)
    if settings.start_rss_mib is None:  # no earlier start known: the measurement's own (the model already built)
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
        paired = paired_modes()[settings.ab_mode].pair(
            rounds, TimedRounds(base_stages, base_inputs, settings.device, settings.repeat),
            PairContext(pipeline, baseline, samples, settings, estimator))
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
    _probe_metrics(measurement, rounds)
    if paired is not None:
        _paired_runtime(measurement, paired, method, settings, threads)
    # the runtime goes first in every stage's metrics, as in the table; a name the table lacks is refused, not dropped
    for m in (measurement, measurement.baseline):
        for result in (m.stages if m is not None else ()):
            result.metrics = {**{k: result.metrics[k] for k in INFERENCE_NAMES if k in result.metrics},
                              **result.metrics}
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


def _paired_runtime(measurement: Measurement, paired: Any, method: str, settings: RunSettings,
                    threads: Any) -> None:
    """The baseline's per-stage runtimes and the paired change (``info["ab"]``: what the A/B table and the
    runtime_s limit read)."""
    base = measurement.baseline
    for result, metric in zip(base.stages, paired.baseline.runtime_metrics(method)):
        metric.details.update(device=settings.device.name, threads=threads, protocol=settings.runtime_protocol)
        result.metrics["runtime_s"] = metric
    _probe_metrics(base, paired.baseline)
    measurement.info["ab"] = paired.record(settings.ab_round_s).to_dict()


def _probe_metrics(measurement: Measurement, rounds: TimedRounds) -> None:
    """What every round probe (rounds.ROUND_PROBES) read around the timed rounds, into each stage's metrics."""
    for name, metrics in rounds.probe_metrics().items():
        for result, metric in zip(measurement.stages, metrics):
            result.metrics[name] = metric


def _inputs_fingerprint(samples: Any) -> str | None:
    return inputs_fingerprint(samples)
