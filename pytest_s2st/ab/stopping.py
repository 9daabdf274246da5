"""When a code-version A/B may stop its rounds early: a group-sequential rule over the paired round ratios.

The fixed design runs ``rounds`` rounds per worker pair and side and judges them once, at 95 %. This rule looks at
the rounds so far from ``FIRST_LOOK`` on, each look GROWTH times the rounds of the one before (so the looks, and the
level each one pays, grow with the log of the rounds, not with the rounds), with the same estimator
(ab/estimators.py; the default: median of the pooled ratios, order-statistic interval widened to each pair's median)
at a stricter level:
1 - 0.05 / K for K interim looks (Bonferroni). It stops when that interval holds none of the verdict's boundaries, so
the rounds left could not move the verdict unless the interval missed the true ratio: at most 5 % of the time over
all looks together. The boundaries: each percent runtime limit of --s2st-compare-fail where one is given (the test's
PASS/FAIL is what the rounds must settle: an A/A well inside a 5 % limit stops at the first look), else the word's
1 +- 2 %. The verdict itself is then computed as always (95 %, on the rounds run): its interval lies inside the
stricter one, on the same side of every boundary. Its word (slower/faster) after an early stop must hold at the
looks' level too (``held``): the rule looked K times, and at 95 % an A/A stopped early under a 5 % limit said
`faster` 2 times in 20 at load 3 (both gone at the looks' level, no other word changed). A runtime limit in seconds
is no ratio: no early stop.

A change past a boundary (a FAIL, or `slower`/`faster`) is also measured: it stops only once its 95 % interval is
within +-PRECISION of its ratio, so the reported size of a slowdown is as good as its verdict (at load 3, 10 rounds
of one pair put x1.10 anywhere in x1.08-1.12). Sameness (inside every boundary) stops as soon as it is decided:
that is the common pull request, and what the early stop is for.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Sequence

from ..significance import NOISE, SAME, Change
from .estimators import DEFAULT, Estimator, median_interval

FIRST_LOOK = 6  # the earliest first look, in rounds per pair and side (later where too few pairs give no interval)
GROWTH = 1.25   # each look at this many times the rounds of the one before (at least one round more)
ALPHA = 0.05    # the chance, over all looks together, that an early stop is on the wrong side of a boundary
PRECISION = 0.02  # a change past a boundary stops once its 95 % interval is within this of its ratio (relative)


@dataclass(frozen=True)
class StoppingRule:
    rounds: int                     # the most rounds per pair and side (the fixed design's)
    bounds: tuple[float, ...] = ()  # ratios the interval must not hold to stop; () never stops early
    estimator: Estimator = DEFAULT  # what the verdict is computed by (--s2st-ab-estimator): each look uses it too
    first: int = FIRST_LOOK         # the first look, in rounds per pair and side (first_look)

    @classmethod
    def for_limits(cls, rounds: int, limits: Sequence[object] = (), estimator: Estimator = DEFAULT,
                   pairs: int = 2) -> "StoppingRule":
        """The rule for ``limits`` (limits.CompareLimit) on runtime_s, else for the word's noise threshold, over
        ``pairs`` worker pairs."""
        bounds = []
        for limit in limits:
            if getattr(limit, "metric", None) != "runtime_s":
                continue
            if not getattr(limit, "percent", False):
                # a limit in seconds: no ratio says which side of it the head is
                return cls(rounds, estimator=estimator)
            bounds.append(1 + float(getattr(limit, "limit")) / 100)
        return cls(rounds, tuple(sorted(set(bounds or [1 - NOISE, 1 + NOISE]))), estimator, first_look(rounds, pairs))

    @property
    def looks(self) -> tuple[int, ...]:
        """The rounds per pair and side after which the rule looks (before the last)."""
        return looks_from(self.first, self.rounds) if self.bounds else ()

    @property
    def confidence(self) -> float:
        return 1 - ALPHA / max(1, len(self.looks))

    def settled(self, done: int, sets: Sequence[tuple[Sequence[float], Sequence[float]]]) -> bool:
        """After ``done`` rounds of each pair and side (``sets``: per pair, (base, head) round times), whether the
        verdict is decided: a look, and the strict interval holds no boundary."""
        if done not in self.looks:
            return False
        change = self.estimator.pair_sets(sets, self.confidence)
        if change.low is None or change.high is None or any(change.low <= b <= change.high for b in self.bounds):
            return False
        inside = all(change.high < b if b > 1 else change.low > b for b in self.bounds)
        return inside or precise(self.estimator.pair_sets(sets))


def held(change: Change, strict: Change) -> Change:
    """``change`` (the 95 % verdict of rounds that stopped early) with its slower/faster word only where ``strict``
    (the same rounds at the looks' level, StoppingRule.confidence) says it too; else no significant change."""
    if change.significant and strict.word != change.word:
        return replace(change, word=SAME)
    return change


def first_look(rounds: int, pairs: int) -> int:
    """The fewest rounds per pair and side (FIRST_LOOK at least) whose pooled ratios, ``pairs`` pairs of them, have an
    order-statistic interval of the median at the level of the looks from there on: a look before it could not stop
    and would only cost the others their level (one pair: 8 rounds of 20; two pairs: 6)."""
    n = FIRST_LOOK
    while n < rounds:
        if median_interval(max(1, pairs) * n, 1 - ALPHA / len(looks_from(n, rounds))) is not None:
            return n
        n += 1
    return n


def precise(change: Change) -> bool:
    """Whether ``change``'s interval is within +-PRECISION of its ratio."""
    if not change.ratio or change.low is None or change.high is None:
        return False
    return change.high <= change.ratio * (1 + PRECISION) and change.low >= change.ratio * (1 - PRECISION)


def looks_from(first: int, rounds: int) -> tuple[int, ...]:
    """The looks of a rule of at most ``rounds`` rounds whose first look is at ``first`` (none at the last round: the
    fixed design judges that one)."""
    looks, n = [], first
    while n < rounds:
        looks.append(n)
        n = max(n + 1, math.ceil(n * GROWTH))
    return tuple(looks)
