"""Metric records: a value, how it was measured, and why it is missing when it is."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Metric:
    value: float | None
    method: str
    reason: str | None = None  # set when value is None: the evidence is missing, never a silent 0
    details: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def missing(cls, method: str, reason: str) -> "Metric":
        return cls(None, method, reason)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"value": self.value, "method": self.method}
        if self.reason is not None:
            out["reason"] = self.reason
        if self.details:
            out["details"] = dict(self.details)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Metric":
        return cls(data.get("value"), data.get("method", "?"), data.get("reason"), dict(data.get("details") or {}))


def mib_summary(per_sample: list[dict[str, Metric]], name: str) -> Metric:
    """A stage's memory metric: the max over samples (a peak is a peak); mean kept in details."""
    metrics = [m[name] for m in per_sample]
    values = [m.value for m in metrics if m.value is not None]
    if len(values) != len(metrics):
        first = next(m for m in metrics if m.value is None)
        return Metric.missing(first.method, first.reason or "not measured")
    return Metric(max(values), metrics[0].method,
                  details={"mean_over_samples": sum(values) / len(values), "samples": len(values)})
