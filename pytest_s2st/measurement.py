"""What one benchmark measured (pytest-free): each stage's metrics (``StageResult``), the benchmark's record
(``Measurement``, saved as ``to_dict`` and rebuilt by ``from_dict``: a code-version worker's, an xdist worker's),
and a cascade's totals over its stages (``aggregate``)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from .errors import S2STError
from .measure.record import Metric
from .metrics import BY_NAME, INFERENCE_NAMES
from .rounds import PRECISION_METHOD, relative_precision
from .runtime_stats import RUNTIME


@dataclass
class StageResult:
    name: str
    metrics: dict[str, Metric] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "metrics": {k: m.to_dict() for k, m in self.metrics.items()}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "StageResult":
        return cls(str(data.get("name")), {k: Metric.from_dict(v) for k, v in (data.get("metrics") or {}).items()})


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
        stages = [StageResult.from_dict(s) for s in data.get("stages") or []]
        staged = {k for s in stages for k in s.metrics}
        out = cls(str(data.get("case")), str(data.get("model_type")), stages,
                  info={k: v for k, v in data.items()
                        if k not in ("case", "model_type", "metrics", "stages", "baseline")})
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
