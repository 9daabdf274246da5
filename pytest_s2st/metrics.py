"""Every metric pytest-s2st reports, in ONE table (pytest-free, import-light).

The runner (cascade aggregation, order), the extra table, compare and ``--s2st-compare-fail``, the
``s2st_budget`` marker (its known keywords and help), the service table and the JSON all read
this table. Adding a metric is one entry here plus the measurement that produces it.

Two families:
- inference metrics (``s2st_benchmark``): one value per stage and a cascade total; ``aggregate``
  says how the stages add up (runtime and FLOPs sum, memory peaks take the max).
- service metrics (``s2st_load``): statistics over the measured requests of one concurrency level,
  read from the level's summary; ``stats`` are the statistics kept (budget keywords are
  ``<name>_<stat>``, e.g. ``ttfa_s_p99``), ``table_stats`` those shown in the service table (which must fit a
  120-column terminal: the other statistics are in the JSON's summary).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from .inputs import finite
from .runtime_stats import RUNTIME_STATISTIC

INFERENCE, SERVICE = "inference", "service"
# which way is better: a limit (--s2st-compare-fail, a budget) fails on a change the worse way. NEITHER: a property of
# the workload, not a quality (audio seconds per request); it can carry no limit
LOWER, HIGHER, NEITHER = "lower", "higher", "neither"
RSS_NOISE_MIB = 1.0  # vmhwm reads 200 MiB as 199.8-199.9 (batched RSS counters); the allocator keeps or returns pages


def fmt_seconds(value: float) -> str:
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")):
        if value >= scale:
            return f"{value / scale:.3f} {unit}"
    return f"{value / 1e-9:.1f} ns"


def fmt_count(value: float) -> str:
    for scale, unit in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3f} {unit}"
    return f"{value:.0f}"


def fmt_mib(value: float) -> str:
    return f"{value:.1f} MiB"


def fmt_small_mib(value: float) -> str:
    """MiB, or KiB below 1 MiB: tiny models' tensor peaks are tens of KiB, which '0.0 MiB' would hide."""
    return f"{value * 1024:.1f} KiB" if abs(value) < 1 else fmt_mib(value)


def fmt_ratio(value: float) -> str:
    return f"{value:.3f}"


def fmt_percent(value: float) -> str:
    return f"{100 * value:.1f}%"


def fmt_audio_rate(value: float) -> str:
    return f"{value:.2f} s/s"


def fmt_lag_seconds(value: float) -> str:
    """Seconds where exactly 0 is the common, good value (an underrun, a gap): '0 s', not '0.0 ns'."""
    return "0 s" if value == 0 else fmt_seconds(value)


def fmt_score(value: float) -> str:
    return f"{value:.2f}"


def fmt_mean_count(value: float) -> str:
    return f"{value:.2f}"


@dataclass(frozen=True)
class MetricDef:
    name: str
    title: str                      # column title
    unit: str
    fmt: Callable[[float], str]
    family: str                     # INFERENCE or SERVICE
    measured_by: str                # which measurement produces it
    aggregate: str | None = None    # inference: "sum" or "max" over a cascade's stages
    comparable: bool = False        # --benchmark-compare table and --s2st-compare-fail
    budgetable: bool = True         # an s2st_budget keyword (service: one per stat)
    show_method: bool = False       # its method goes into the table's "methods" column
    note_missing: bool = True       # an n/a cell gets a "why" note under the table
    column: bool = True             # inference: a column of the extra and compare tables (else JSON and gates only)
    noise: float = 0.0              # a change smaller than this (absolute, in the unit) is called noise, not a percent
    stats: tuple[str, ...] = ()     # service: statistics kept in the summary
    table_stats: tuple[str, ...] = ()  # service: statistics shown in the service table
    help: str = ""
    better: str = ""                # LOWER or HIGHER is better (NEITHER: no limit may judge it); every row says
    exact: bool = False             # deterministic: the same code gives the same value, so any change is a change

    def __post_init__(self) -> None:
        if self.better not in (LOWER, HIGHER, NEITHER):
            raise ValueError(f"metric {self.name}: better={self.better!r}; say which is better: lower, higher or "
                             "neither")
        if self.better == NEITHER and (self.comparable or self.budgetable):
            raise ValueError(f"metric {self.name}: a limit needs a direction (better=lower or higher)")

    def worsening(self, old: float, new: float) -> float:
        """How much worse ``new`` is than ``old`` (negative: better), in the metric's unit."""
        return old - new if self.better == HIGHER else new - old

    def format(self, value: float | None) -> str:
        return "n/a" if value is None else self.fmt(value)


METRICS: tuple[MetricDef, ...] = (
    MetricDef("runtime_s", "runtime", "s", fmt_seconds, INFERENCE, "timing pass (pytest-benchmark timer, "
              "device-synchronised)", aggregate="sum", comparable=True, show_method=True,
              better=LOWER, help=f"{RUNTIME_STATISTIC} wall seconds per sample"),
    # RSS changes below RSS_NOISE_MIB are the kernel's batched counters and the allocator's slack, not the model
    MetricDef("rss_rise_mib", "RSS rise", "MiB", fmt_mib, INFERENCE, "memory pass (vmhwm or memory_profiler) minus "
              "the process's RSS at the case's start", aggregate="max", comparable=True, noise=RSS_NOISE_MIB,
              better=LOWER, help="peak RSS during the forward minus the process's RSS at the case's start (before "
                   "its model was built): what the case added to the process"),
    MetricDef("peak_rss_mib", "peak RSS", "MiB", fmt_mib, INFERENCE, "memory pass (vmhwm or memory_profiler)",
              aggregate="max", comparable=True, column=False, noise=RSS_NOISE_MIB,
              better=LOWER, help="absolute process peak RSS during the forward (the whole process: every case before "
                   "it too)"),
    MetricDef("peak_delta_mib", "peak delta", "MiB", fmt_mib, INFERENCE, "memory pass (vmhwm or memory_profiler)",
              aggregate="max", comparable=True, show_method=True, noise=RSS_NOISE_MIB,
              better=LOWER, help="peak RSS during the forward minus RSS just before it"),
    MetricDef("device_peak_mib", "device peak", "MiB", fmt_mib, INFERENCE, "memory pass (cuda/npu peak allocated)",
              aggregate="max", comparable=True, note_missing=False,
              better=LOWER, help="peak allocated device memory after a reset (cuda / npu)"),
    MetricDef("tensor_peak_mib", "tensor peak", "MiB", fmt_small_mib, INFERENCE,
              "dispatch pass (storages created by torch ops during the call, alive at once; measure/tensor_memory.py)",
              aggregate="max", comparable=True,
              better=LOWER, exact=True,
              help="peak of live tensor bytes the forward allocated (deterministic; pages already resident still "
                   "count)"),
    MetricDef("flops", "FLOPs", "FLOPs", fmt_count, INFERENCE, "FLOPs pass (torch dispatch count or PAPI)",
              aggregate="sum", comparable=True, show_method=True, better=LOWER, exact=True,
              help="floating-point operations per sample"),
    MetricDef("instructions", "instructions", "Ir", fmt_count, INFERENCE,
              "instruction pass (valgrind callgrind around the forward, in a child process; measure/instructions.py)",
              aggregate="sum", comparable=True, show_method=True, better=LOWER,  # not exact: two valgrind
              # children of the same torch call counted 324,759 and 323,379 (0.4 %): judged as a measured value
              help="CPU instructions of the forward on the first sample (deterministic: the CI gate on shared "
                   "runners)"),
    # translation quality of the case's outputs (quality/translation.py), not per stage: no cascade aggregate
    MetricDef("bleu", "BLEU", "", fmt_score, INFERENCE, "sacrebleu corpus BLEU of the last text stage against the "
              "reference translations", budgetable=False, comparable=True,
              better=HIGHER, help="corpus BLEU of the translations (0-100, higher is better)"),
    MetricDef("chrf", "chrF", "", fmt_score, INFERENCE, "sacrebleu corpus chrF of the last text stage against the "
              "reference translations", budgetable=False, comparable=True,
              better=HIGHER, help="corpus chrF of the translations (0-100, higher is better)"),
    MetricDef("asr_bleu", "ASR-BLEU", "", fmt_score, INFERENCE, "sacrebleu corpus BLEU of an offline ASR's transcripts "
              "of the output speech against the reference translations (fairseq asr_bleu)", budgetable=False,
              comparable=True,
              better=HIGHER, help="corpus BLEU of the output speech, through ASR (0-100, higher is better)"),
    MetricDef("asr_chrf", "ASR-chrF", "", fmt_score, INFERENCE, "sacrebleu corpus chrF of an offline ASR's "
              "transcripts of the output speech against the reference translations", budgetable=False, comparable=True,
              better=HIGHER, help="corpus chrF of the output speech, through ASR (0-100, higher is better)"),
    MetricDef("ttfa_s", "TTFA", "s", fmt_seconds, SERVICE, "client clock: send -> first non-empty PCM sample",
              stats=("mean", "p50", "p90", "p99"), table_stats=("p50", "p99"),
              better=LOWER, help="time to first audio"),
    MetricDef("rtf", "RTF", "", fmt_ratio, SERVICE, "client clock: (completion - send) / audio seconds",
              stats=("mean", "p50", "p90", "p99"), table_stats=("p50", "p99"),
              better=LOWER, help="real-time factor"),
    MetricDef("latency_s", "latency", "s", fmt_seconds, SERVICE, "client clock: completion - send",
              stats=("mean", "p50", "p90", "p99"), table_stats=("p99",), better=LOWER, help="end-to-end latency"),
    # streaming playback (vLLM-Omni's definitions, runs.playback_metrics): a real-time player started at the
    # first audio, fed by the chunks as the client received them
    MetricDef("underrun_s", "underrun", "s", fmt_lag_seconds, SERVICE,
              "chunk timeline: worst deficit of a real-time player started at the first audio (vLLM-Omni)",
              stats=("mean", "p50", "p90", "p99"), table_stats=("p99",),
              better=LOWER, help="playback underrun: seconds a real-time player falls behind (= its total dry time)"),
    MetricDef("underrun_events", "underrun events", "", fmt_mean_count, SERVICE,
              "chunk timeline: chunks that arrived after the audio before them had played out (vLLM-Omni)",
              stats=("mean", "p50", "p90", "p99"), better=LOWER, help="late chunks per request"),
    MetricDef("underrun_longest_s", "longest dry spell", "s", fmt_lag_seconds, SERVICE,
              "chunk timeline: longest dry spell of a player that waits and resumes at the next chunk",
              stats=("mean", "p50", "p90", "p99"), better=LOWER, help="longest single playback stall per request"),
    MetricDef("continuity_rate", "continuity", "", fmt_percent, SERVICE,
              "requests whose underrun <= 0.1 s / requests with a chunk timeline (vLLM-Omni)", budgetable=False,
              better=HIGHER, help="fraction of requests that play without an audible gap"),
    MetricDef("gap_s", "chunk gap", "s", fmt_lag_seconds, SERVICE,
              "chunk timeline: arrival differences of consecutive audio chunks, pooled over requests",
              stats=("mean", "p50", "p90", "p99"), table_stats=("p99",), better=LOWER, help="inter-chunk gap"),
    MetricDef("audio_duration_s", "audio", "s", fmt_seconds, SERVICE, "seconds of audio returned per request",
              budgetable=False, stats=("mean", "p50", "p90", "p99"), better=NEITHER, help="audio duration per request"),
    MetricDef("throughput", "throughput", "audio s/s", fmt_audio_rate, SERVICE,
              "audio seconds of ok requests / wall seconds of the measured phase", budgetable=False,
              better=HIGHER, help="audio seconds produced per wall second"),
    MetricDef("error_rate", "errors", "", fmt_percent, SERVICE, "failed / measured requests",
              better=LOWER, help="fraction of measured requests that failed"),
)

BY_NAME: dict[str, MetricDef] = {m.name: m for m in METRICS}
INFERENCE_METRICS: tuple[MetricDef, ...] = tuple(m for m in METRICS if m.family == INFERENCE)
SERVICE_METRICS: tuple[MetricDef, ...] = tuple(m for m in METRICS if m.family == SERVICE)
INFERENCE_NAMES: tuple[str, ...] = tuple(m.name for m in INFERENCE_METRICS)
TRANSLATION_NAMES: tuple[str, ...] = ("bleu", "chrf", "asr_bleu", "asr_chrf")  # of a whole case, never of one stage
COMPARABLE: tuple[str, ...] = tuple(m.name for m in METRICS if m.comparable)


def budget_keys(metric: MetricDef) -> tuple[str, ...]:
    """The s2st_budget keywords one metric offers: its name, or <name>_<stat> for a service statistic."""
    if not metric.budgetable:
        return ()
    return tuple(f"{metric.name}_{s}" for s in metric.stats) if metric.stats else (metric.name,)


INFERENCE_BUDGETS: tuple[str, ...] = tuple(k for m in INFERENCE_METRICS for k in budget_keys(m))
SERVICE_BUDGETS: dict[str, tuple[str, str | None]] = {  # budget keyword -> (metric, stat or None)
    k: (m.name, k[len(m.name) + 1:] or None) for m in SERVICE_METRICS for k in budget_keys(m)
}
BUDGETS: tuple[str, ...] = INFERENCE_BUDGETS + tuple(SERVICE_BUDGETS)


def budget_signature() -> str:
    """The marker's signature line in ``pytest --markers``, generated from the table."""
    return "s2st_budget(" + ", ".join(f"{k}=" for k in BUDGETS) + ", stage=None)"


def service_value(summary: Mapping[str, Any], key: str) -> float | None:
    """A service budget keyword's value in a level summary: 'ttfa_s_p99' -> summary['ttfa_s']['p99']."""
    metric, stat = SERVICE_BUDGETS[key]
    value = summary.get(metric)
    if stat is not None:
        value = value.get(stat) if isinstance(value, Mapping) else None

    return finite(value)  # NaN/inf/a string in a summary: no value (the budget says why), never a number


def format_value(name: str, value: float | None) -> str:
    return BY_NAME[name].format(value)


_TIME_UNITS = ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns"))
# formatter -> (the units it chooses among, largest first; decimals shown at the chosen unit)
_UNITS: dict[Callable[[float], str], tuple[tuple[tuple[float, str], ...], int]] = {
    fmt_seconds: (_TIME_UNITS, 3),
    fmt_lag_seconds: (_TIME_UNITS, 3),
    fmt_count: (((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, "")), 3),
    fmt_small_mib: (((1.0, "MiB"), (1 / 1024, "KiB")), 1),
    fmt_mib: (((1.0, "MiB"),), 1),  # below 1 MiB: three significant digits, not '0.0 MiB'
}


def column_format(name: str, values: Any) -> Callable[[float | None], str]:
    """One unit for a whole table column (never KiB beside MiB, k beside M): the unit the column's largest
    value would get alone; smaller values keep three significant digits at that unit (more decimals, at most
    six). A column of one value, or of a metric with a fixed unit, reads as format_value."""
    metric = BY_NAME[name]
    units = _UNITS.get(metric.fmt)
    present = [abs(v) for v in values if v is not None]
    if units is None or not any(present):
        return metric.format
    scales, decimals = units
    top = max(present)
    scale, unit = next(((s, u) for s, u in scales if top >= s), scales[-1])
    integers = metric.fmt is fmt_count and scale == 1.0  # plain counts
    suffix = f" {unit}" if unit else ""

    def fmt(value: float | None) -> str:
        if value is None:
            return "n/a"
        if value == 0 and metric.fmt is fmt_lag_seconds:
            return f"0{suffix}"
        scaled = value / scale
        places = 0 if integers else decimals
        if scaled and abs(scaled) < 1 and not integers:  # three significant digits, six decimals at most
            places = min(6, max(decimals, 2 - math.floor(math.log10(abs(scaled)))))
        return f"{scaled:.{places}f}{suffix}"

    return fmt
