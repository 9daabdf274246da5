"""What every history store and its callers share, owned by no backend: a series' key, one entry of a series, and
the order a series is read in. A new backend imports these, ``records.py`` and ``protocol.py``, never another
backend (kept in the SQL module, these made a new backend import it: an import cycle).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timezone

from .records import Point, Run


@dataclass(frozen=True)
class SeriesKey:
    benchmark: str
    part: str
    metric: str
    statistic: str

    def label(self) -> str:
        stat = f" {self.statistic}" if self.statistic else ""
        return f"{self.benchmark} [{self.part}] {self.metric}{stat}"


@dataclass(frozen=True)
class Entry:
    """One point of a series with the run it came from."""
    run_id: int
    run: Run
    point: Point


def instant(text: str | None) -> float:
    """An ISO 8601 time as seconds since the epoch, UTC: commit times carry their author's offset (+02:00, Z), so
    compared as text a commit at 10:00+02:00 (08:00 UTC) sorts after one at 09:00Z. No offset: taken as UTC."""
    if not text:
        return math.inf
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        return math.inf  # unreadable: after every readable time, in arrival order
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.timestamp()


def run_order(run: Run) -> tuple[float, float]:
    """Where a run sorts in its series: its commit's instant (UTC), then its own; a store breaks ties by arrival
    (its run ids), so every backend reads a series in the same order."""
    return (instant(run.commit_time or run.run_time), instant(run.run_time))
