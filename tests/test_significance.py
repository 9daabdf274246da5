"""Runtime changes judged against the rounds' spread (significance.py), on hand-made rounds."""
from __future__ import annotations

import numpy as np
import pytest

from pytest_s2st.report import Row, insignificant, regressions, render_compare
from pytest_s2st.settings import compare_limits
from pytest_s2st.significance import FASTER, MIN_ROUNDS, SAME, SLOWER, TOO_FEW, compare_rounds


def noisy(mean: float, n: int = 20, spread: float = 0.05, seed: int = 1) -> list[float]:
    rng = np.random.default_rng(seed)
    return list(mean * (1 + spread * rng.standard_normal(n)))


def test_a_clear_slowdown_is_slower_with_an_interval_around_the_ratio():
    c = compare_rounds(noisy(1.0), noisy(1.5, seed=2))
    assert c.word == SLOWER and c.significant
    assert c.low < c.ratio < c.high and c.low > 1.3 and c.high < 1.7


def test_a_clear_speedup_is_faster():
    assert compare_rounds(noisy(1.0), noisy(0.5, seed=2)).word == FASTER


def test_the_same_distribution_is_no_significant_change():
    c = compare_rounds(noisy(1.0, seed=3), noisy(1.0, seed=4))
    assert c.word == SAME and not c.significant and c.low < 1 < c.high


def test_a_tiny_real_shift_inside_the_noise_threshold_is_not_claimed():
    # 1 % slower with almost no spread: the interval excludes 1, but 1 % is below the 2 % noise threshold
    c = compare_rounds(noisy(1.0, spread=1e-4), noisy(1.01, spread=1e-4, seed=2))
    assert c.low > 1 and c.word == SAME


def test_too_few_rounds_says_so_and_claims_nothing():
    c = compare_rounds([1.0] * (MIN_ROUNDS - 1), [3.0] * 10)
    assert c.word == TOO_FEW and c.low is None and c.ratio == pytest.approx(3.0)
    assert "need 5" in c.describe()


def test_same_rounds_same_interval():
    assert compare_rounds(noisy(1.0), noisy(1.2, seed=5)) == compare_rounds(noisy(1.0), noisy(1.2, seed=5))


def _row(rounds):
    return {"runtime_s": {"value": float(np.mean(rounds)), "details": {"rounds_s": rounds}}, "flops": {"value": 10.0}}


def test_compare_fail_on_runtime_needs_a_significant_slowdown():
    limits = compare_limits("runtime_s:5%")
    spread = noisy(1.0, n=8, spread=0.5, seed=6)
    noise = (spread, [1.1 * v for v in reversed(spread)])  # exactly +10 %, inside a 50 % spread
    real = (noisy(1.0), noisy(1.5, seed=2))
    for (old, new), fails in ((noise, False), (real, True)):
        rows, compared = [Row("t", "f::t", _row(new), key="k")], {"k": _row(old)}
        assert bool(regressions(rows, compared, limits)) is fails
        assert bool(insignificant(rows, compared, limits)) is not fails
    rows, compared = [Row("t", "f::t", _row(real[1]), key="k")], {"k": _row(real[0])}
    assert "slower" in render_compare(rows, compared)[2]
