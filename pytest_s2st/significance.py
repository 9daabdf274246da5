"""Is a runtime change real? Runs of two sides -> ratio, confidence interval, and a word (pytest-free).

Between runs (``compare_runs``, what compare and --s2st-compare-fail use): the rounds inside one run measure the
noise *within* that process, not the drift *between* processes (another process, another page layout, another
neighbour on the machine): on identical code, one run against another was called significant 17 times in 37.
So, as pyperf does (several processes, their means compared), the interval is built from each run's runtime
statistic (runtime_stats.py, by name: the mean): a Welch t interval on the logs of the per-run values of each side
(both sides' spreads, MIN_RUNS or more runs per side), the word "slower"/"faster" only when it excludes 1 and
the ratio is past NOISE. With fewer runs the ratio is shown and the word is "cannot tell from one run per
side": nothing is claimed. Repeat runs of one commit become one saved run with ``s2st-merge --repeats``
(distribute.fold_repeats).

One run per side: the word is given only for a gross change, far past the between-process drift measured on a
shared 2-core runner (docs/records/measurement.md): the means and medians of each run's own round times (wall time less
the thread's run-queue wait: a neighbour's load taken out) both at least GROSS (x3) apart, or, for runs saved
without run-queue readings, the raw means and medians both GROSS_RAW (x5) apart. Smaller ratios stay "cannot
tell".

In one process, baseline and candidate alternating (an A/B): rounds run ABBA (B A, A B, B A, ...) on the same
input, so drift of the machine hits both sides of a pair alike; the change is an A/B estimator's (ab/estimators.py,
by default the median of the paired log-ratios and its order-statistic interval), a ``Change`` with ``pairs``.

Within one process (``compare_rounds``, for interleaved passes of one run, e.g. the cost benchmark):
as criterion does: resample each run's rounds with replacement (bootstrap), take the ratio of the
means each time, and read the 95 % percentile interval of those ratios. The change is
- "slower" / "faster" when the interval excludes 1 and the ratio is past the noise threshold,
- "no significant change" otherwise, and
- "too few rounds" below MIN_ROUNDS on either side: nothing can be said, so nothing is claimed.
The resampling is seeded: the same rounds always give the same interval.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from .inputs import finite
from .runtime_stats import DEFAULT_STATISTIC, T975, statistic, t975  # noqa: F401 -- the one t table (runtime_stats.py)

MIN_ROUNDS = 5          # per side; fewer and no interval is computed
CONFIDENCE = 0.95
RESAMPLES = 2000
NOISE = 0.02            # |ratio - 1| below this is noise even when the interval excludes 1
SEED = 20261201

SLOWER, FASTER, SAME, TOO_FEW = "slower", "faster", "no significant change", "too few rounds"
MIN_RUNS = 3            # per side, for a verdict between runs
CANNOT_TELL = "cannot tell from one run per side"
NOT_FINITE = "rounds not finite (missing evidence)"  # a NaN/inf/non-number round: nothing is claimed
# one run per side, own times (run-queue wait out): identical short runs were seen up to x1.88 apart on the idle VM
# (docs/records/measurement.md, one run per side: x2 work read as little as x1.12); x3 in mean and median is beyond
# that drift
GROSS = 3.0
GROSS_RAW = 5.0         # the same without run-queue readings: raw means of identical short runs were seen x3.83 apart
MIN_PAIRS = 6           # A/B: the fewest pairs whose median has a 95 % order-statistic interval


@dataclass(frozen=True)
class Change:
    ratio: float | None              # new / old runtime statistic (a comparison between runs: of the runs' values)
    low: float | None = None         # the interval's bounds (None without enough rounds)
    high: float | None = None
    word: str = TOO_FEW
    rounds: tuple[int, int] = (0, 0)  # (old, new)
    runs: tuple[int, int] | None = None  # (old, new) runs, for a comparison between runs
    pairs: int | None = None         # ABBA pairs, for an A/B (ab/estimators.py)
    gross: bool = False              # one run per side, judged by GROSS alone (no interval)
    own_ratio: float | None = None   # the gross rule's ratio of own round times (run-queue wait out), when it had them
    needs: int | None = None         # A/B: the fewest pairs its estimator gives an interval from (said when too few)

    @property
    def significant(self) -> bool:
        return self.word in (SLOWER, FASTER)

    def short(self) -> str:
        """describe() for a table cell: below MIN_RUNS per side only the ratio and the run counts (the table's
        footnote says what is needed)."""
        if self.gross:
            own = f"own x{self.own_ratio:.3f}, " if self.own_ratio is not None else ""
            return f"x{self.ratio:.3f}, {self.word} (gross, {own}{self.runs[0]}/{self.runs[1]} runs)"
        if self.ratio is not None and self.runs is not None and self.low is None:
            return f"x{self.ratio:.3f}, cannot tell ({self.runs[0]}/{self.runs[1]} runs)"
        if self.pairs is not None and self.low is not None:
            return f"x{self.ratio:.3f} [{self.low:.3f}, {self.high:.3f}] {self.word}"
        return self.describe()

    def describe(self) -> str:
        if self.ratio is None:  # why, unless it is only that a side had nothing to compare
            return "n/a" if self.word == TOO_FEW else f"n/a ({self.word})"
        if self.pairs is not None:
            if self.low is None:
                need = f", need {self.needs}" if self.needs else ""
                return f"x{self.ratio:.3f}, {self.word} ({self.pairs} ABBA pairs{need})"
            return f"x{self.ratio:.3f} [{self.low:.3f}, {self.high:.3f}] {self.word} ({self.pairs} ABBA pairs)"
        if self.gross:
            own = (f"; own round times, the run-queue wait taken out: x{self.own_ratio:.3f}"
                   if self.own_ratio is not None else "")
            return (f"x{self.ratio:.3f}, {self.word}: a gross change (beyond run-to-run drift, "
                    f"{self.runs[0]}/{self.runs[1]} runs{own})")
        if self.runs is not None:
            runs = f"{self.runs[0]}/{self.runs[1]} runs"
            if self.low is None:
                what = self.word if self.runs == (1, 1) else f"cannot tell from {runs}"
                return f"x{self.ratio:.3f}, {what} (need {MIN_RUNS} runs per side: s2st-merge --repeats)"
            return f"x{self.ratio:.3f} [{self.low:.3f}, {self.high:.3f}] {self.word} ({runs})"
        if self.low is None:
            return f"x{self.ratio:.3f}, {self.word} ({self.rounds[0]}/{self.rounds[1]} rounds, need {MIN_ROUNDS})"
        return f"x{self.ratio:.3f} [{self.low:.3f}, {self.high:.3f}] {self.word}"


def usable(values: object) -> list[float] | None:
    """A list of finite numbers whose sum does not overflow, as floats; else None (missing evidence: 1e308 is
    finite, but a mean of several overflows)."""
    if isinstance(values, np.ndarray):
        values = values.tolist()
    if not isinstance(values, (list, tuple)):
        return None
    out = [finite(v) for v in values]
    if None in out or (out and finite(max(abs(v) for v in out) * len(out)) is None):
        return None
    return out  # type: ignore[return-value]


def word_of(ratio: float, low: float, high: float) -> str:
    """slower/faster only when the interval excludes 1 and the ratio is past the noise threshold."""
    if low > 1 and ratio > 1 + NOISE:
        return SLOWER
    if high < 1 and ratio < 1 - NOISE:
        return FASTER
    return SAME


def _count(values: object) -> int:
    return len(values) if isinstance(values, (list, tuple, np.ndarray)) else 0


def _reduce(name: str) -> Callable[..., np.ndarray]:
    """numpy's reduction of the runtime statistic called ``name`` (np.mean, np.median)."""
    return getattr(np, statistic(name).name)


def _sides(old: object, new: object, counted: str, usable_sides: Callable[[np.ndarray, np.ndarray], bool],
           minimum: int, few: str, name: str = DEFAULT_STATISTIC
           ) -> Change | tuple[np.ndarray, np.ndarray, float, dict]:
    """The prologue both comparisons share: (old, new as float arrays, the ratio of the statistic ``name`` of new
    to old, {counted: (old count, new count)}) when an interval can be computed; else the Change that says why not
    -- a non-finite value, an empty side or one ``usable_sides`` refuses (no ratio), fewer than ``minimum`` per
    side (the ratio, word ``few``)."""
    olds, news = usable(old), usable(new)
    counts = {counted: (_count(old), _count(new))}
    if olds is None or news is None:
        return Change(None, word=NOT_FINITE, **counts)
    o = np.asarray(olds, dtype=np.float64)
    n = np.asarray(news, dtype=np.float64)
    if o.size == 0 or n.size == 0 or not usable_sides(o, n):
        return Change(None, **counts)
    reduce = _reduce(name)
    ratio = finite(float(reduce(n) / reduce(o)))
    if ratio is None:
        return Change(None, word=NOT_FINITE, **counts)
    if o.size < minimum or n.size < minimum:
        return Change(ratio, word=few, **counts)
    return o, n, ratio, counts


def compare_rounds(old: Sequence[float], new: Sequence[float], name: str = DEFAULT_STATISTIC) -> Change:
    """The bootstrap of the ratio of the statistic ``name`` (runtime_stats.py) of one run's rounds to another's."""
    reduce = _reduce(name)
    sides = _sides(old, new, "rounds", lambda o, n: reduce(o) > 0, MIN_ROUNDS, TOO_FEW, name)
    if isinstance(sides, Change):
        return sides
    o, n, ratio, counts = sides
    rng = np.random.default_rng(SEED)
    old_means = reduce(o[rng.integers(0, o.size, (RESAMPLES, o.size))], axis=1)
    new_means = reduce(n[rng.integers(0, n.size, (RESAMPLES, n.size))], axis=1)
    tail = 100 * (1 - CONFIDENCE) / 2
    low, high = (float(v) for v in np.percentile(new_means / old_means, [tail, 100 - tail]))
    return Change(ratio, low, high, word_of(ratio, low, high), **counts)


def _gross(ratio: float, old_rounds: Sequence[float] | None, new_rounds: Sequence[float] | None,
           own: bool) -> str | None:
    """SLOWER/FASTER when the run's change is gross: with ``own`` rounds (each round less the run-queue wait of
    its thread, measure/runqueue.py) the ratios of their means and of their medians both at least GROSS from 1
    in the same direction; without, the ratio of the means and of the rounds' medians both at least GROSS_RAW
    (a neighbour's load moves a whole short run: identical runs were seen x2.47 apart). Else None."""
    olds, news = usable(old_rounds or []), usable(new_rounds or [])
    if own and not (olds and news):
        return None
    ratios = [] if own else [ratio]
    if olds and news:
        for reduce in (np.mean, np.median):
            before = float(reduce(olds))
            if before <= 0:
                return None
            ratios.append(float(reduce(news)) / before)
    bound = GROSS if own else GROSS_RAW
    if all(r >= bound for r in ratios):
        return SLOWER
    if all(r <= 1 / bound for r in ratios):
        return FASTER
    return None


def compare_runs(old: Sequence[float], new: Sequence[float], old_rounds: Sequence[float] | None = None,
                 new_rounds: Sequence[float] | None = None, own: bool = False, name: str = DEFAULT_STATISTIC) -> Change:
    """Each side's per-run runtimes (each run's statistic ``name``, runtime_stats.py) -> the change between them, judged
    against the spread between runs; the ratio is that of the statistic of each side's runs.
    With fewer than MIN_RUNS per side only a gross change gets a word (``_gross``): ``old_rounds``/``new_rounds``
    are a single run's timed rounds, ``own`` when they are its own times (run-queue wait taken out)."""
    sides = _sides(old, new, "runs", lambda o, n: (o > 0).all() and (n > 0).all(), MIN_RUNS, CANNOT_TELL, name)
    if isinstance(sides, Change):
        if sides.word == CANNOT_TELL and sides.ratio is not None:
            single = len(old) == 1 and len(new) == 1
            word = _gross(sides.ratio, old_rounds if single else None, new_rounds if single else None,
                          own and single)
            if word is not None:
                reduce = _reduce(name)
                own_ratio = float(reduce(new_rounds) / reduce(old_rounds)) if own and single else None
                return Change(sides.ratio, word=word, runs=sides.runs, gross=True, own_ratio=own_ratio)
        return sides
    o, n, ratio, counts = sides
    lo_, ln = np.log(o), np.log(n)
    vo, vn = lo_.var(ddof=1) / o.size, ln.var(ddof=1) / n.size
    se = float(np.sqrt(vo + vn))
    # Welch-Satterthwaite degrees of freedom; identical runs (se 0) leave the interval a point
    df = (vo + vn) ** 2 / (vo ** 2 / (o.size - 1) + vn ** 2 / (n.size - 1)) if se > 0 else float(o.size + n.size - 2)
    centre = float(ln.mean() - lo_.mean())
    half = t975(df) * se
    low, high = float(np.exp(centre - half)), float(np.exp(centre + half))
    return Change(ratio, low, high, word_of(ratio, low, high), **counts)
