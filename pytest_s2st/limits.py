"""``--s2st-compare-fail`` / ``s2st-compare --fail`` limits: their grammar, and when a change crosses one (pytest-free).

    LIMITS := ITEM ("," ITEM)*
    ITEM   := METRIC ":" ["+"] NUMBER ("%" | UNIT)      e.g. runtime_s:5%  runtime_s:2ms  peak_delta_mib:10MiB

``%`` is relative to the compared (old) value; a UNIT makes the limit absolute, in the metric's unit or a scaled
spelling of it (s, ms, us, ns; KiB, MiB, GiB; FLOPs; Ir). A bare number is refused: pytest-benchmark reads
``min:5`` as 5 seconds, and ``runtime_s:5`` read that way never failed a x2 slowdown of a millisecond model, which
is not what anyone writing it meant. A limit is a worsening: each metric says which way is better
(metrics.MetricDef.better), so ``bleu:1%`` fails on BLEU falling by more than 1 %, never on it rising.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from .inputs import closest, show
from .metrics import BY_NAME, COMPARABLE, HIGHER

MAX_LIMITS_CHARS = 2000  # the whole option value: a limit per metric is ~20 characters
# absolute units per base unit: spelling -> factor to the base unit
_SCALED = {"s": {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9},
           "MiB": {"KiB": 1 / 1024, "MiB": 1.0, "GiB": 1024.0}}
_ITEM = re.compile(r"^(?P<metric>[A-Za-z0-9_]+):(?P<sign>\+?)(?P<number>\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)"
                   r"(?P<unit>[A-Za-z%]*)$")


def units(metric: str) -> dict[str, float]:
    """The absolute-limit spellings a metric accepts (unit -> factor to its own unit); {} when it has no unit."""
    unit = BY_NAME[metric].unit
    return dict(_SCALED.get(unit, {unit: 1.0} if unit and " " not in unit else {}))


@dataclass(frozen=True)
class CompareLimit:
    metric: str
    limit: float    # percent, or in the metric's own unit
    percent: bool

    @property
    def better(self) -> str:
        return BY_NAME[self.metric].better

    def exceeded(self, old: float | None, new: float | None) -> float | None:
        """The change (new - old: in % of old, or in the metric's unit) when it is a worsening past the limit
        (higher-is-better metrics worsen downwards), else None."""
        if old is None or new is None:
            return None
        worse = BY_NAME[self.metric].worsening(old, new)
        change = new - old
        if self.percent:
            if old == 0:  # no percent of 0: any worsening from 0 is past every relative limit
                return None if worse <= 0 else math.copysign(math.inf, change)
            worse, change = 100.0 * worse / abs(old), 100.0 * change / abs(old)
        return change if worse > self.limit else None

    def change_text(self, change: float) -> str:
        """A change as exceeded() returns it, signed, in the limit's terms: '+12.50%', '+0.0021 s'."""
        if self.percent:
            return f"{change:+.2f}%"
        return f"{change:+.6g} {BY_NAME[self.metric].unit}"

    def direction(self) -> str:
        """'' for the usual lower-is-better metrics; '; higher is better' where a drop is the worsening."""
        return "; higher is better" if self.better == HIGHER else ""

    def __str__(self) -> str:  # parses back to the same limit (cases.py sends limits to workers this way)
        return f"{self.metric}:{self.limit:g}{'%' if self.percent else BY_NAME[self.metric].unit}"


def _example(metric: str) -> str:
    spelled = units(metric)
    unit = next(iter(spelled), None)
    return f"{metric}:5% (relative)" + (f" or {metric}:5{unit} (absolute, in {unit})" if unit else "")


def compare_limits(value: Any) -> tuple[CompareLimit, ...]:
    """'peak_delta_mib:10%,flops:1%,runtime_s:2ms' -> limits; ValueError, one line naming the item, otherwise."""
    text = str(value)
    if len(text) > MAX_LIMITS_CHARS:
        raise ValueError(f"is {len(text)} characters, over the {MAX_LIMITS_CHARS} a list of limits may have")
    items = [part.strip() for part in text.split(",")]
    if not any(items):
        raise ValueError("must be metric:limit%,... or metric:limit<unit>,... e.g. runtime_s:5%,flops:1%")
    out: dict[str, CompareLimit] = {}
    for item in items:
        if not item:
            raise ValueError(f"an empty item in {show(repr(text), 120)} (two commas, or one at an end)")
        match = _ITEM.match(item)
        if not match:
            raise ValueError(f"bad item {show(repr(item), 120)}: expected metric:limit% or metric:limit<unit> "
                             "(e.g. runtime_s:5%, runtime_s:2ms); a limit is a number >= 0")
        metric, unit = match["metric"], match["unit"]
        if metric not in COMPARABLE:
            raise ValueError(f"unknown metric {metric!r} in {item!r}{closest(metric, COMPARABLE)}; "
                             f"known: {', '.join(COMPARABLE)}")
        number = float(match["number"])
        if not math.isfinite(number):
            raise ValueError(f"bad item {item!r}: {match['number']} is not a finite number")
        spelled = units(metric)
        if not unit:
            raise ValueError(f"bad item {item!r}: a bare number is ambiguous; write {_example(metric)}")
        if unit != "%" and unit not in spelled:
            known = f"one of {', '.join(spelled)}" if spelled else "none: it has no unit, give a percent"
            raise ValueError(f"bad item {item!r}: unit {unit!r} is not {metric}'s (absolute units: {known})")
        if metric in out:
            raise ValueError(f"{metric} is limited twice ({out[metric]} and {item}): give one limit per metric")
        limit = number if unit == "%" else number * spelled[unit]
        if not math.isfinite(limit):
            raise ValueError(f"bad item {item!r}: not a finite limit")
        out[metric] = CompareLimit(metric, limit, unit == "%")
    return tuple(out.values())
