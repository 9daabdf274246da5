"""Is a runtime change real? Timed rounds of two runs -> ratio, confidence interval, and a word (pytest-free).

As criterion does: resample each run's rounds with replacement (bootstrap), take the ratio of the
means each time, and read the 95 % percentile interval of those ratios. The change is
- "slower" / "faster" when the interval excludes 1 and the ratio is past the noise threshold,
- "no significant change" otherwise, and
- "too few rounds" below MIN_ROUNDS on either side: nothing can be said, so nothing is claimed.
The resampling is seeded: the same rounds always give the same interval.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

MIN_ROUNDS = 5          # per side; fewer and no interval is computed
CONFIDENCE = 0.95
RESAMPLES = 2000
NOISE = 0.02            # |ratio - 1| below this is noise even when the interval excludes 1
SEED = 20261201

SLOWER, FASTER, SAME, TOO_FEW = "slower", "faster", "no significant change", "too few rounds"
NOT_FINITE = "rounds not finite (missing evidence)"  # a NaN/inf/non-number round: nothing is claimed


@dataclass(frozen=True)
class Change:
    ratio: float | None              # new mean / old mean
    low: float | None = None         # the interval's bounds (None without enough rounds)
    high: float | None = None
    word: str = TOO_FEW
    rounds: tuple[int, int] = (0, 0)  # (old, new)

    @property
    def significant(self) -> bool:
        return self.word in (SLOWER, FASTER)

    def describe(self) -> str:
        if self.ratio is None:
            return f"n/a ({self.word})" if self.word == NOT_FINITE else "n/a"
        if self.low is None:
            return f"x{self.ratio:.3f}, {self.word} ({self.rounds[0]}/{self.rounds[1]} rounds, need {MIN_ROUNDS})"
        return f"x{self.ratio:.3f} [{self.low:.3f}, {self.high:.3f}] {self.word}"


def compare_rounds(old: Sequence[float], new: Sequence[float]) -> Change:
    from .inputs import finite

    if not isinstance(old, (list, tuple)) or not isinstance(new, (list, tuple)):
        return Change(None, word=NOT_FINITE)
    olds, news = [finite(v) for v in old], [finite(v) for v in new]
    rounds = (len(olds), len(news))
    if None in olds or None in news:
        return Change(None, word=NOT_FINITE, rounds=rounds)
    o = np.asarray(olds, dtype=np.float64)
    n = np.asarray(news, dtype=np.float64)
    if o.size == 0 or n.size == 0 or not o.mean() > 0:
        return Change(None, rounds=rounds)
    # 1e308 rounds are finite, but a resample of several overflows: no mean of them is evidence
    if finite(float(np.abs(o).max()) * o.size) is None or finite(float(np.abs(n).max()) * n.size) is None:
        return Change(None, word=NOT_FINITE, rounds=rounds)
    ratio = finite(float(n.mean() / o.mean()))
    if ratio is None:
        return Change(None, word=NOT_FINITE, rounds=rounds)
    if o.size < MIN_ROUNDS or n.size < MIN_ROUNDS:
        return Change(ratio, rounds=rounds)
    rng = np.random.default_rng(SEED)
    old_means = o[rng.integers(0, o.size, (RESAMPLES, o.size))].mean(axis=1)
    new_means = n[rng.integers(0, n.size, (RESAMPLES, n.size))].mean(axis=1)
    tail = 100 * (1 - CONFIDENCE) / 2
    low, high = (float(v) for v in np.percentile(new_means / old_means, [tail, 100 - tail]))
    if low > 1 and ratio > 1 + NOISE:
        word = SLOWER
    elif high < 1 and ratio < 1 - NOISE:
        word = FASTER
    else:
        word = SAME
    return Change(ratio, low, high, word, rounds)
