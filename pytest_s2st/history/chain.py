"""The chained series: each run's paired head/base ratio (``--s2st-ab-base`` against its parent) multiplied along
the commits, and the changes read from the ratios themselves (pytest-free, standard library only).

Why: on a shared runner the absolute means of separate runs move 3-8 % (a neighbour's load, the host), while the
paired ratio of one run reads a +10 % change as x1.093-1.111. A history of absolute values cannot tell a +2 % commit
from the weather; the product of the paired ratios can.

The chain. Runs in commit order; a run whose base commit is the previous run's commit extends the chain: its log
value is the previous one's plus its log ratio, and its variance the previous one's plus its own (the ratio's 95 %
interval read as +-1.96 standard errors in log space). A run whose base is not the previous run starts a new piece.
Each piece is anchored to the absolute values: shifted so that its geometric mean equals the absolute series' over
the same runs (the chain says how runtime moved, the absolute values where it stands). The band is the uncertainty
accumulated from the piece's first run.

Changes. Binary segmentation on the chained values would split a random walk of measurement errors; each ratio is
instead a direct measurement of what one commit did. A change is a stretch of consecutive commits of one piece whose
summed log ratio is past ``z_critical`` standard errors -- the number of stretches scanned corrected for (Bonferroni at
``ALPHA``) -- and more than ``MIN_STEP``. Each ratio's variance gets ``FLOOR_SE``**2 added: the paired intervals are
honest to about 0.2 % (an A/A read x0.998-1.008 over runs whose intervals were +-0.5 %); and where a piece's
ratios scatter wider than their intervals claim (the median |log ratio| / standard error, as a robust scale: the
steps themselves are outliers to it), every interval of the piece is widened by that factor. The stretch with the
largest z is taken first, then the commits left and right of it are searched again, as binary segmentation does:
a +10 % commit is one change at its commit, a creep of +2 % x 5 one change spanning its five commits.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist, median
from typing import Sequence

from .changes import MIN_STEP, ChangePoint

ALPHA = 0.001          # family-wise false-alarm rate per piece
MAX_STRETCH = 30       # commits one gradual change may span (bounds the scan: n x 30 stretches, not n^2 / 2)
CALIBRATE_FROM = 8     # links in a piece from which its ratios' own scatter may widen their intervals
FLOOR_SE = 0.002       # log-space standard error added to every ratio's own (the intervals' calibration)
Z95 = 1.959963984540054


@dataclass(frozen=True)
class Link:
    """One run's paired ratio: ``commit`` measured against ``base``."""
    commit: str | None
    base: str | None
    ratio: float
    low: float | None = None
    high: float | None = None
    absolute: float | None = None   # the same run's absolute value, where it has one (the anchor)

    @property
    def log_se(self) -> float:
        if self.low is None or self.high is None or not 0 < self.low <= self.ratio <= self.high:
            return FLOOR_SE
        return math.hypot((math.log(self.high) - math.log(self.low)) / (2 * Z95), FLOOR_SE)


@dataclass(frozen=True)
class Chained:
    values: list[float]          # the chained value of each link, anchored
    lows: list[float]            # its accumulated 95 % band
    highs: list[float]
    pieces: list[tuple[int, int]]  # [start, end) of each piece: runs linked base -> commit
    changes: list[ChangePoint]


def chain(links: Sequence[Link], higher_is_better: bool = False) -> Chained:
    pieces: list[tuple[int, int]] = []
    start = 0
    for k in range(1, len(links) + 1):
        if k == len(links) or links[k].base is None or links[k].base != links[k - 1].commit:
            if k > start:
                pieces.append((start, k))
            start = k
    logs, variances = [0.0] * len(links), [0.0] * len(links)
    for a, b in pieces:
        level, variance = 0.0, 0.0
        for k in range(a, b):
            level += math.log(links[k].ratio)
            variance += links[k].log_se ** 2
            logs[k], variances[k] = level, variance
        anchored = [math.log(links[k].absolute) - logs[k] for k in range(a, b)
                    if links[k].absolute is not None and links[k].absolute > 0]
        offset = math.fsum(anchored) / len(anchored) if anchored else 0.0
        for k in range(a, b):
            logs[k] += offset
    values = [math.exp(v) for v in logs]
    lows = [math.exp(v - Z95 * math.sqrt(s)) for v, s in zip(logs, variances)]
    highs = [math.exp(v + Z95 * math.sqrt(s)) for v, s in zip(logs, variances)]
    found: list[ChangePoint] = []
    for a, b in pieces:
        found += _stretches(links, logs, a, b, higher_is_better)
    return Chained(values, lows, highs, pieces, sorted(found, key=lambda c: c.index))


def z_critical(count: int) -> float:
    """The two-sided z past which one of ``count`` stretches is a change at family-wise rate ALPHA."""
    return NormalDist().inv_cdf(1 - ALPHA / (2 * max(count, 1)))


def _stretches(links: Sequence[Link], logs: Sequence[float], a: int, b: int,
               higher_is_better: bool) -> list[ChangePoint]:
    """Changes among links [a, b) of one piece: the strongest stretch first, then either side of it."""
    n = b - a
    if n < 1:
        return []
    x = [math.log(links[k].ratio) for k in range(a, b)]
    v = [links[k].log_se ** 2 for k in range(a, b)]
    if n >= CALIBRATE_FROM:  # ratios scattered wider than their intervals claim: widen them all, never narrow
        spread = 1.4826 * median(abs(xi) / math.sqrt(vi) for xi, vi in zip(x, v))
        v = [vi * max(1.0, spread) ** 2 for vi in v]
    width = min(n, MAX_STRETCH)
    limit = z_critical(n * width - width * (width - 1) // 2)
    out: list[ChangePoint] = []
    todo = [(0, n)]
    while todo:
        lo, hi = todo.pop()
        best: tuple[float, int, int, float] | None = None
        for i in range(lo, hi):
            total = variance = 0.0
            for j in range(i, min(hi, i + MAX_STRETCH)):
                total += x[j]
                variance += v[j]
                z = abs(total) / math.sqrt(variance)
                if z > limit and abs(total) > MIN_STEP and (best is None or z > best[0]):
                    best = (z, i, j, total)
        if best is None:
            continue
        z, i, j, total = best
        after = math.exp(logs[a + j])
        before = after / math.exp(total)
        worse = (total < 0) if higher_is_better else (total > 0)
        p = 2 * (1 - NormalDist().cdf(z))
        out.append(ChangePoint(a + i, before, after, p, worse, last=a + j))
        todo += [(lo, i), (j + 1, hi)]
    return out
