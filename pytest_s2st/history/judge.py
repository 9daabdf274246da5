"""One series judged: its change points and its window alerts, in the metric's bad direction (what the trend site
draws and ``s2st-history check`` exits on)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..metrics import BY_NAME, HIGHER, NEITHER
from .changes import (MIN_SEGMENT, Alert, ChangePoint, change_points, exact_changes, short_changes,
                      window_alerts)
from .chain import Link, chain
from .records import PAIRED
from .series import Entry, SeriesKey


@dataclass
class Judged:
    key: SeriesKey
    entries: list[Entry]
    values: list[float]          # the entries with a value, in order
    valued: list[Entry]
    changes: list[ChangePoint]
    alerts: list[Alert]
    method: str = ""             # how the change points were found: EXACT, SHORT, SEGMENTED or CHAINED
    band: tuple[list[float], list[float]] | None = None  # the values' own band where it is not the points' interval

    def in_force(self, window: int) -> ChangePoint | None:
        """The newest change point when it is worse and among the last ``window`` runs: the regression the newest
        run still carries (what ``s2st-history check`` fails on)."""
        last = self.changes[-1] if self.changes else None
        recent = last is not None and max(last.index, last.last or 0) >= len(self.values) - window
        return last if recent and last.worse else None


EXACT = "exact: any change between two runs"
SHORT = "short history: the sides apart by more than 5 %, intervals included"
SEGMENTED = "binary segmentation, Welch p < 0.001"
CHAINED = ("paired ratios against the parent, chained; a change is a stretch of commits whose ratios multiply past "
           "chance")


def is_exact(metric: str) -> bool:
    definition = BY_NAME.get(metric)
    return definition is not None and definition.exact


def higher_is_better(metric: str) -> bool:
    definition = BY_NAME.get(metric)
    return definition is not None and definition.better == HIGHER


def has_direction(metric: str) -> bool:
    definition = BY_NAME.get(metric)
    return definition is not None and definition.better != NEITHER


def standard_error(point: Any) -> float:
    """A point's own standard error: its 95 % interval's half-width / 1.96 (0 without an interval)."""
    if point.low is None or point.high is None:
        return 0.0
    return max(point.high - point.low, 0.0) / 2 / 1.96


def absolute_key(key: SeriesKey) -> SeriesKey | None:
    """The absolute series a paired-ratio series is anchored to (the head's mean, same benchmark and part)."""
    return SeriesKey(key.benchmark, key.part, key.metric, "mean") if key.statistic == PAIRED else None


def judge(key: SeriesKey, entries: list[Entry], test: str = "t", boundary: float = 0.999,
          window: int = 30, anchor: list[Entry] | None = None) -> Judged:
    """``anchor``: for a paired-ratio series, the absolute series (``absolute_key``) its chain is anchored to."""
    valued = [e for e in entries if e.point.value is not None]
    values = [float(e.point.value) for e in valued]  # type: ignore[arg-type]
    better = higher_is_better(key.metric)
    if key.statistic == PAIRED:
        absolute = {e.run_id: e.point.value for e in anchor or ()}
        chained = chain([Link(e.run.commit, e.run.base_commit, v, e.point.low, e.point.high, absolute.get(e.run_id))
                         for e, v in zip(valued, values)], better)
        return Judged(key, entries, chained.values, valued, chained.changes, [], CHAINED,
                      (chained.lows, chained.highs))
    # PAPI's FLOPs are a hardware counter, not a count of the code's operations: judged as measured values
    exact = exact_changes(values, better) if is_exact(key.metric) and not any(
        "papi" in (e.point.method or "").lower() for e in valued) else None
    if exact is not None and len(exact) <= max(3, len(values) // 4):
        changes, method = exact, EXACT  # (changing at every other run: not deterministic here, judged as measured)
    elif is_exact(key.metric) and len(values) < 2 * MIN_SEGMENT and exact is not None:
        changes, method = exact, EXACT
    elif len(values) < 2 * MIN_SEGMENT:
        changes, method = short_changes(values, [e.point.low for e in valued], [e.point.high for e in valued],
                                        better), SHORT
    else:
        changes, method = change_points(values, better), SEGMENTED
    if not has_direction(key.metric):  # e.g. audio seconds: a change is shown, neither way is worse
        changes = [dataclasses.replace(c, worse=False) for c in changes]
    alerts = (window_alerts(values, test, boundary, window, better, standard_errors=[standard_error(e.point)
                                                                                    for e in valued])
              if has_direction(key.metric) else [])
    return Judged(key, entries, values, valued, changes, alerts, method)
