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
