"""A/B estimators: how paired rounds become the ratio, its interval and word (pytest-free).

Every A/B mode times rounds in pairs, baseline and candidate next to each other (ABBA: B A, A B, B A, ...), so a
drift of the machine hits both sides of a pair alike; an ``Estimator`` turns those pairs into a
``significance.Change``: from one set of pairs (``pairs``, the in-process A/B) or from several worker pairs' sets
(``pair_sets``, the code versions; the stopping rule looks with it at a stricter confidence, ab/stopping.py).

The default, ``median``: the median of the paired log-ratios and its 95 % interval the distribution-free
order-statistic interval of that median (binomial, as the sign test): one outlier round moves neither. Over several
worker pairs the pooled interval is widened to hold each worker pair's own median.

A test chooses one with ``s2st_benchmark(..., baseline=, ab_estimator=NAME)``, a session with
``--s2st-ab-estimator NAME``; adding one: an ``Estimator`` subclass (its ``name``, the phrases a record's method
and a table's legend use, ``pairs``) and ``register_estimator`` (or its entry in ``ESTIMATORS``).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..errors import S2STError
from ..runtime_stats import median_interval as _median_interval
from ..significance import CONFIDENCE, MIN_PAIRS, NOT_FINITE, TOO_FEW, Change, usable, word_of
from .record import MEDIAN  # the default's name; settings.py spells it too (the settings table imports no A/B module)

Sets = Sequence[tuple[Sequence[float], Sequence[float]]]  # per worker pair: (baseline rounds, candidate rounds)


class Estimator:
    name: str = ""       # the key in ESTIMATORS, saved as the A/B record's "estimator" unless it is the default
    statistic: str = ""  # what the ratio is, in a record's method: "<statistic> of paired candidate/baseline ..."
    interval: str = ""   # how its interval is had, in a record's method: "95% <interval>"

    @property
    def sets_interval(self) -> str:
        """``interval`` over several worker pairs (``pair_sets``), in a record's method."""
        return f"{self.interval}, widened to hold each worker pair's own {self.statistic}"

    def pairs(self, baseline: Sequence[float], candidate: Sequence[float],
              confidence: float = CONFIDENCE) -> Change:
        """Round i of each side ran next to the other's round i: the candidate/baseline ratio, its interval at
        ``confidence`` and the word (``significance.word_of``), ``pairs`` the pairs counted. A non-finite round:
        no ratio, word NOT_FINITE; too few pairs for an interval: the ratio, word TOO_FEW."""
        raise NotImplementedError

    def pair_sets(self, sets: Sets, confidence: float = CONFIDENCE) -> Change:
        """Several worker pairs, each with its rounds paired (baseline, candidate) as in ``pairs``: the estimate
        over every pair's rounds pooled, its interval widened to hold each worker pair's own estimate -- a
        process's layout biases every round of its pair alike, which the pooled interval cannot see, so pairs
        that disagree widen the interval to their spread (an A/A whose two pairs read x0.98 and x1.03 is not
        called faster or slower)."""
        pooled_old: list[float] = []
        pooled_new: list[float] = []
        own = []
        for old, new in sets:
            pooled_old += list(old)
            pooled_new += list(new)
            one = self.pairs(old, new)
            if one.ratio is None:
                return Change(one.ratio, word=one.word, pairs=min(_count(old), _count(new)))
            own.append(one.ratio)
        change = self.pairs(pooled_old, pooled_new, confidence)
        if change.low is None or len(own) < 2:
            return change
        low, high = min(change.low, *own), max(change.high, *own)
        return Change(change.ratio, low, high, word_of(change.ratio, low, high), pairs=change.pairs)

    def description(self) -> str:
        """One phrase for a table's legend when a row was judged by this estimator and not the default."""
        return f"{self.statistic} of the paired ratios, its 95% {self.interval}"


def _count(values: object) -> int:
    return len(values) if isinstance(values, (list, tuple, np.ndarray)) else 0


def logs_of(baseline: Sequence[float], candidate: Sequence[float]) -> Change | np.ndarray:
    """The sorted paired log-ratios log(candidate / baseline); or the Change that says why there are none (a
    non-finite round, no pairs, sides of unequal length, a round not above 0). For an estimator's ``pairs``."""
    olds, news = usable(baseline), usable(candidate)
    n = min(_count(baseline), _count(candidate))
    if olds is None or news is None:
        return Change(None, word=NOT_FINITE, pairs=n)
    if n == 0 or len(olds) != len(news) or min(olds) <= 0 or min(news) <= 0:
        return Change(None, pairs=n)
    return np.sort(np.log(np.asarray(news)) - np.log(np.asarray(olds)))


def median_interval(n: int, confidence: float = CONFIDENCE) -> tuple[int, int] | None:
    """0-based order statistics (lo, hi) whose interval covers the median of n values with at least
    ``confidence``, whatever their distribution (the sign test's binomial, runtime_stats.median_interval); None below
    MIN_PAIRS values."""
    return _median_interval(n, confidence) if n >= MIN_PAIRS else None


class Median(Estimator):
    name = MEDIAN
    statistic = "median"
    interval = "distribution-free interval of the median (order statistics, binomial)"
    sets_interval = "order-statistic interval of the median, widened to hold each worker pair's own median"

    def pairs(self, baseline: Sequence[float], candidate: Sequence[float],
              confidence: float = CONFIDENCE) -> Change:
        """The median candidate/baseline ratio of the pairs, its order-statistic interval."""
        logs = logs_of(baseline, candidate)
        if isinstance(logs, Change):
            return logs
        n = logs.size
        ratio = float(np.exp(np.median(logs)))
        bounds = median_interval(n, confidence)
        if bounds is None:
            return Change(ratio, word=TOO_FEW, pairs=n, needs=MIN_PAIRS)
        low, high = float(np.exp(logs[bounds[0]])), float(np.exp(logs[bounds[1]]))
        return Change(ratio, low, high, word_of(ratio, low, high), pairs=n)


DEFAULT = Median()
ESTIMATORS: dict[str, Estimator] = {DEFAULT.name: DEFAULT}


def register_estimator(estimator: Estimator) -> None:
    """Adds ``estimator`` to ESTIMATORS under its name (replacing one of the same name)."""
    ESTIMATORS[estimator.name] = estimator


def estimator(name: str) -> Estimator:
    """The estimator called ``name``; ValueError naming the value and the known names for one no one registered."""
    found = ESTIMATORS.get(name)
    if found is None:
        raise ValueError(f"must be one of {', '.join(ESTIMATORS)}, got {name!r}")
    return found


def chosen(name: str) -> Estimator:
    """The estimator a test chose (``s2st_benchmark(..., ab_estimator=NAME)``); S2STError for an unknown name."""
    found = ESTIMATORS.get(name)
    if found is None:
        raise S2STError(f"s2st_benchmark(..., ab_estimator={name!r}): not an A/B estimator; "
                        f"known: {', '.join(map(repr, ESTIMATORS))}")
    return found


def compare_pairs(baseline: Sequence[float], candidate: Sequence[float], confidence: float = CONFIDENCE) -> Change:
    """The default estimator on one set of pairs (``Median.pairs``)."""
    return DEFAULT.pairs(baseline, candidate, confidence)


def compare_pair_sets(sets: Sets, confidence: float = CONFIDENCE) -> Change:
    """The default estimator over several worker pairs (``Estimator.pair_sets``)."""
    return DEFAULT.pair_sets(sets, confidence)
