"""Budgets (``@pytest.mark.s2st_budget``) checked against a Measurement -> PASS / FAIL / INCONCLUSIVE."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from .errors import S2STError
from .runner import METRICS, Measurement

PASS, FAIL, INCONCLUSIVE = "PASS", "FAIL", "INCONCLUSIVE"


@dataclass
class Verdict:
    status: str
    reasons: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "reasons": list(self.reasons)}


def parse_budget(kwargs: Mapping[str, Any], where: str) -> tuple[dict[str, float], str | None]:
    """Validate the marker's keywords: known metric names with positive numbers, optional stage=."""
    limits: dict[str, float] = {}
    stage = None
    for key, value in kwargs.items():
        if key == "stage":
            stage = str(value)
            continue
        if key not in METRICS:
            raise S2STError(f"{where}: s2st_budget: unknown metric {key!r}; known: {', '.join(METRICS)}, stage")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise S2STError(f"{where}: s2st_budget: {key} must be a number > 0, got {value!r}")
        limits[key] = float(value)
    if not limits:
        raise S2STError(f"{where}: s2st_budget needs at least one limit ({', '.join(METRICS)})")
    return limits, stage


def _fmt(value: float) -> str:
    return f"{value:.6g}"


def check_budget(measurement: Measurement, limits: Mapping[str, float], stage: str | None = None) -> Verdict:
    failures, missing = [], []
    if stage is not None and stage not in [s.name for s in measurement.stages]:
        return Verdict(INCONCLUSIVE, [f"budget names stage {stage!r}, measured stages: {', '.join(s.name for s in measurement.stages)}"])
    scope = f" (stage {stage})" if stage else ""
    for name, limit in limits.items():
        metric = measurement.metric(name, stage)
        if metric is None or metric.value is None:
            reason = metric.reason if metric is not None else "not measured"
            missing.append(f"{name}{scope}: no value to check against budget {_fmt(limit)} ({reason})")
        elif metric.value > limit:
            failures.append(f"{name}{scope}: measured {_fmt(metric.value)} > budget {_fmt(limit)} (method {metric.method})")
    if failures:
        return Verdict(FAIL, failures + missing)
    if missing:
        return Verdict(INCONCLUSIVE, missing)
    return Verdict(PASS, [])
