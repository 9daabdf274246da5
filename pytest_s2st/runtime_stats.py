"""The runtime statistic, by name, over the raw timed rounds (pytest-free, standard library only).

As pytest-benchmark's ``stats.Stats``: ``RuntimeStats`` holds one list of rounds and every statistic is a named
property of it (rounds, total, min, max, mean, median, stddev); ``get(name)`` reads one by name. The runtime a
benchmark reports is the statistic named ``RUNTIME_STATISTIC``; it is saved beside the value
(``runtime_s.details.statistic``) and every reader (the runner, significance, s2st-merge / fold_repeats, compare
and its verdicts) asks ``saved_statistic`` which one a saved row holds: a row saved before the name was (no
``statistic``) holds the mean.

Each statistic the runtime may be has its 95 % interval method (``Statistic.interval``): the mean Student's t
(``t975``: the one t table, df 1..30, interpolated in 1/df between entries and a Cornish-Fisher expansion past
30), the median the distribution-free order-statistic interval (the sign test's binomial). ``precision`` is the
interval's half-width relative to the statistic, what --s2st-target-precision stops on.

Changing the runtime statistic (mean -> median) is the one line ``RUNTIME_STATISTIC`` below.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable, Mapping, Sequence

CONFIDENCE = 0.95

# two-sided 95 % quantiles of Student's t for 1..30 degrees of freedom (any statistics table)
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
_Z975 = 1.959963984540054


def t975(df: float) -> float:
    """The two-sided 95 % quantile of Student's t with ``df`` >= 1 degrees of freedom (a Welch df need not be
    whole): the table's value at a whole df <= 30; between two entries log t interpolated linearly in 1/df;
    past 30 a Cornish-Fisher expansion (within 1e-6 of the exact quantile there)."""
    if not df >= 1:  # NaN too
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df >= len(T975):
        if df == len(T975):
            return T975[-1]
        z = _Z975
        return (z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
                + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3))
    lo = int(df)
    if lo == df:
        return T975[lo - 1]
    weight = (1 / lo - 1 / df) / (1 / lo - 1 / (lo + 1))
    return math.exp((1 - weight) * math.log(T975[lo - 1]) + weight * math.log(T975[lo]))


def median_interval(n: int, confidence: float = CONFIDENCE) -> tuple[int, int] | None:
    """0-based order statistics (lo, hi) whose interval covers the median of n values with at least
    ``confidence``, whatever their distribution (the sign test's binomial); None when even the whole sample's
    range does not (n <= 5 at 95 %)."""
    alpha = 1 - confidence
    cdf, k = 0.0, 0
    # the largest k with P(Bin(n, 1/2) <= k - 1) <= alpha / 2: the interval [x_(k), x_(n-k+1)] (1-based)
    while k <= n // 2:
        nxt = cdf + math.comb(n, k) / 2 ** n
        if nxt > alpha / 2:
            break
        cdf, k = nxt, k + 1
    if k == 0:
        return None
    return k - 1, n - k


class RuntimeStats:
    """Named statistics over one list of timed rounds (seconds), each a property computed once."""

    fields = ("rounds", "total", "min", "max", "mean", "median", "stddev")

    def __init__(self, data: Sequence[float]):
        self.data = [float(v) for v in data]

    def __bool__(self) -> bool:
        return bool(self.data)

    def get(self, name: str) -> float:
        """The statistic called ``name`` (ValueError naming the known ones)."""
        if name not in self.fields:
            raise ValueError(f"unknown runtime statistic {name!r}; known: {', '.join(self.fields)}")
        return getattr(self, name)

    def as_dict(self) -> dict[str, float]:
        return {name: self.get(name) for name in self.fields}

    @cached_property
    def sorted_data(self) -> list[float]:
        return sorted(self.data)

    @cached_property
    def rounds(self) -> int:
        return len(self.data)

    @cached_property
    def total(self) -> float:
        return math.fsum(self.data)

    @cached_property
    def min(self) -> float:
        return self.sorted_data[0]

    @cached_property
    def max(self) -> float:
        return self.sorted_data[-1]

    @cached_property
    def mean(self) -> float:
        n = len(self.data)
        return math.fsum(v / n for v in self.data)  # never overflows where the values do not (2 x 1e308)

    @cached_property
    def median(self) -> float:
        s, n = self.sorted_data, len(self.data)
        return s[n // 2] if n % 2 else s[n // 2 - 1] / 2 + s[n // 2] / 2

    @cached_property
    def sum_sq(self) -> float:
        """The sum of squared deviations from the mean."""
        mean = self.mean
        return math.fsum((v - mean) ** 2 for v in self.data)

    @cached_property
    def stddev(self) -> float:
        """The sample standard deviation (n - 1); 0 below 2 rounds, as pytest-benchmark's."""
        n = len(self.data)
        return (self.sum_sq / (n - 1)) ** 0.5 if n > 1 else 0.0


def t_half_width(n: int, sum_sq: float) -> float | None:
    """t(0.975, n-1) * sqrt(sample variance / n): the 95 % half-width of a mean of n values whose squared
    deviations sum to ``sum_sq``; None below 2 values."""
    if n < 2:
        return None
    return t975(n - 1) * (max(sum_sq, 0.0) / (n - 1) / n) ** 0.5


def _mean_halves(s: RuntimeStats) -> tuple[float, float] | None:
    half = t_half_width(s.rounds, s.sum_sq)
    return None if half is None else (half, half)


def _median_halves(s: RuntimeStats) -> tuple[float, float] | None:
    bounds = median_interval(s.rounds)
    if bounds is None:
        return None
    return s.median - s.sorted_data[bounds[0]], s.sorted_data[bounds[1]] - s.median


@dataclass(frozen=True)
class Statistic:
    """A statistic the runtime may be: its name, its 95 % interval and how that is described."""

    name: str                                   # a RuntimeStats property, and numpy's reduction of that name
    halves_of: Callable[[RuntimeStats], tuple[float, float] | None]  # the interval's reach below and above it
    method: str                                 # what the saved ``precision`` is (details.precision_method)
    additive: bool                              # a cascade's statistic is the sum of its stages' (the mean)

    def of(self, values: Sequence[float]) -> float:
        return RuntimeStats(values).get(self.name)

    def interval(self, values: Sequence[float] | RuntimeStats) -> tuple[float, float] | None:
        """The statistic's 95 % interval (low, high); None below the rounds it needs."""
        stats = values if isinstance(values, RuntimeStats) else RuntimeStats(values)
        halves = self.halves_of(stats) if stats else None
        if halves is None:
            return None
        centre = stats.get(self.name)
        return centre - halves[0], centre + halves[1]

    def precision(self, values: Sequence[float] | RuntimeStats) -> float | None:
        """The interval's half-width relative to the statistic (the wider side of an asymmetric one); None
        without an interval or at a statistic <= 0."""
        stats = values if isinstance(values, RuntimeStats) else RuntimeStats(values)
        halves = self.halves_of(stats) if stats else None
        centre = stats.get(self.name) if halves is not None else 0.0
        return max(halves) / centre if halves is not None and centre > 0 else None


STATISTICS: dict[str, Statistic] = {s.name: s for s in (
    Statistic("mean", _mean_halves, "t-based 95% CI half-width of the mean / mean", additive=True),
    Statistic("median", _median_halves, "order-statistic (distribution-free) 95% CI half-width of the median "
                                          "/ median", additive=False),
)}
DEFAULT_STATISTIC = "mean"  # what a runtime saved without a name holds (every run saved before the name was)
RUNTIME_STATISTIC = "mean"  # the statistic every benchmark's runtime is: change it here, and only here
RUNTIME = STATISTICS[RUNTIME_STATISTIC]


def statistic(name: str) -> Statistic:
    """The runtime statistic called ``name`` (ValueError naming the known ones)."""
    try:
        return STATISTICS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown runtime statistic {name!r}; known: {', '.join(STATISTICS)}") from None


def saved_statistic(entry: Any) -> str:
    """Which statistic a saved runtime entry ({value, method, details}) holds: ``details.statistic``, else
    DEFAULT_STATISTIC (saved before the name was). ValueError, naming the value, when it names none known."""
    details = entry.get("details") if isinstance(entry, Mapping) else None
    name = details.get("statistic", DEFAULT_STATISTIC) if isinstance(details, Mapping) else DEFAULT_STATISTIC
    if not isinstance(name, str) or name not in STATISTICS:
        raise ValueError(f"runtime_s.details.statistic {str(name)[:40]!r} is not one of {', '.join(STATISTICS)}")
    return name


class RunningPrecision:
    """The runtime statistic's ``precision`` of a growing list of rounds, fed the rounds added since the last
    call. The mean's is O(1) a round (Welford's running mean and sum of squares); another statistic's is
    computed over all the rounds each time."""

    def __init__(self, stat: Statistic = RUNTIME):
        self.stat = stat
        self._n, self._mean, self._m2 = 0, 0.0, 0.0

    def __call__(self, values: Sequence[float]) -> float | None:
        if self.stat.name != "mean":
            return self.stat.precision(values)
        for value in values[self._n:]:
            self._n += 1
            delta = value - self._mean
            self._mean += delta / self._n
            self._m2 += delta * (value - self._mean)
        half = t_half_width(self._n, self._m2)
        return None if half is None or self._mean <= 0 else half / self._mean


def own_times(rounds: list[float], waits: list[float] | None) -> list[float] | None:
    """Each saved round's time less the run-queue wait that fell in it (never below 0); None without waits for every
    round. A wait read between setups covers the round and the runner's bookkeeping around it, so the
    subtraction is capped at the round."""
    if not waits or len(waits) != len(rounds):
        return None
    return [max(r - min(w, r), 0.0) for r, w in zip(rounds, waits)]
