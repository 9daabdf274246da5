"""Change points on one series, and the window threshold that judges a new value against its history.

Change points: binary segmentation with the l2 cost (Scott & Knott; ``ruptures.Binseg(model="l2")`` is the same
method) on the logarithm of the values, so a step is relative (+10 % reads the same at 1 ms and 1 s). The penalty is
BIC-like, ``PENALTY * sigma**2 * ln(n)``, where sigma is the series' own noise: the median absolute successive
difference (robust to the steps themselves, as a standard deviation). The runs' own scatter, not the intervals each
run claims: a mean of 5 rounds claims +-35 % (README's example) where successive runs differ by 1-2 %, and a floor at
the claimed interval hid a +10 % step. Binary segmentation places the candidates; each is then kept only when the
segments on either side differ by a Welch t-test at ``P_VALUE`` and by more than ``MIN_STEP``. A candidate that fails
is removed and its two segments merged before the others are tested again (weakest first): a creep split 3 runs
apart leaves a short middle segment that fails on both sides, and dropping both splits lost the creep.
Why not a library: apache-otava (E-divisive) pins numpy 2.2 and pulls cloud clients; ruptures' loops took 7.6 s on
one 1,000-run series here, so a site of 50 benchmarks x 14 series x 1,000 runs would take over an hour; with prefix
sums one split is one numpy operation (tests/test_history.py holds the two methods' candidates equal on seeded
series).

Exact metrics (FLOPs, tensor peak: ``MetricDef.exact``) have no noise to weigh: any change between
two consecutive runs beyond ``EXACT_TOLERANCE`` is a change point, at any history length (``exact_changes``).

Short histories (fewer than ``2 * MIN_SEGMENT`` runs, too short to segment): a split is a change point only when
every value on one side is past every value on the other, their intervals do not overlap and the medians differ by
more than ``SHORT_STEP`` (``short_changes``): a 4-commit history with one 1.2x slower commit shows it; a no-op commit
whose run moved 2 % does not.

Window threshold (Bencher's statistical threshold): a new value against the last ``window`` values of its
series: a one-sided t-test (``t``: the value against the window's mean, scaled by its standard deviation and
sqrt(1 + 1/n)), a z-score (``z``), or a percentage off the window's mean (``percent``). Only the metric's bad
direction fires (slower, larger, a lower BLEU), and never for a value within ``MIN_STEP`` of the window's mean: a
series steady to 0.05 % (a deterministic count, a busy-wait) would otherwise fire on one preempted round.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from statistics import NormalDist, mean, median, stdev
from typing import Sequence

PENALTY = 6.0
P_VALUE = 0.001
MIN_STEP = 0.005       # a relative step below 0.5 % is not called a change, whatever the test says
MIN_SEGMENT = 3        # points on each side of a change point
EXACT_TOLERANCE = 1e-6  # an exact metric's relative change below this is the float formatting, not a change
SHORT_STEP = 0.05      # short histories: a step must exceed 5 % (runs of the same code on a shared runner move 3-8 %)
TESTS = ("t", "z", "percent")


@dataclass(frozen=True)
class ChangePoint:
    index: int           # the first point after the change
    before: float        # median of the segment before
    after: float         # median of the segment after
    p_value: float
    worse: bool          # in the metric's bad direction
    last: int | None = None  # a gradual change (the chained series): the last run of it

    @property
    def ratio(self) -> float:
        return self.after / self.before if self.before else math.inf


@dataclass(frozen=True)
class Alert:
    index: int
    value: float
    baseline: float      # the window's mean
    limit: float         # the value past which it fires
    statistic: float     # t / z score, or the relative change for percent
    test: str
    window: int


def _logs(values: Sequence[float]) -> list[float] | None:
    return [math.log(v) for v in values] if values and all(v > 0 for v in values) else None


def noise(values: Sequence[float]) -> float:
    """Sigma of the log values: successive differences' MAD (x1.4826 / sqrt 2)."""
    diffs = [abs(b - a) for a, b in zip(values, values[1:])]
    sigma = 1.4826 * median(diffs) / math.sqrt(2) if diffs else 0.0
    return max(sigma, 1e-9)  # a deterministic series (FLOPs): any step is a change


def _welch_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Welch's two-sided t-test p (scipy.stats.ttest_ind(equal_var=False)'s, tests/test_history_gates.py holds
    them equal), computed here: the scipy call's argument checks took most of a large site's time."""
    from scipy.special import stdtr  # lazy: heavy

    na, nb = len(a), len(b)
    ma, mb = math.fsum(a) / na, math.fsum(b) / nb
    va = math.fsum((x - ma) ** 2 for x in a) / (na - 1) if na > 1 else 0.0
    vb = math.fsum((x - mb) ** 2 for x in b) / (nb - 1) if nb > 1 else 0.0
    if va == 0 and vb == 0:
        return 0.0 if ma != mb else 1.0
    sa, sb = va / na, vb / nb
    t = (ma - mb) / math.sqrt(sa + sb)
    df = (sa + sb) ** 2 / ((sa * sa / (na - 1) if na > 1 else 0.0) + (sb * sb / (nb - 1) if nb > 1 else 0.0))
    return float(2 * stdtr(df, -abs(t)))


def _segments(series: "np.ndarray", penalty: float, min_size: int) -> list[int]:
    """Binary segmentation with the l2 cost: split a segment where the drop in the sum of squared deviations is
    largest, while that drop exceeds the penalty. Prefix sums make each split one vector operation."""
    import numpy as np  # lazy: heavy

    ends: list[int] = []
    todo = [(0, len(series))]
    s1 = np.concatenate([[0.0], np.cumsum(series)])
    s2 = np.concatenate([[0.0], np.cumsum(series * series)])

    def cost(a: "np.ndarray | int", b: "np.ndarray | int") -> "np.ndarray":
        n = b - a
        return (s2[b] - s2[a]) - (s1[b] - s1[a]) ** 2 / n

    while todo:
        a, b = todo.pop()
        if b - a < 2 * min_size:
            continue
        k = np.arange(a + min_size, b - min_size + 1)
        gain = cost(a, b) - cost(a, k) - cost(k, b)
        best = int(np.argmax(gain))
        if gain[best] <= penalty:
            continue
        split = int(k[best])
        ends.append(split)
        todo += [(a, split), (split, b)]
    return sorted(ends)


def change_points(values: Sequence[float], higher_is_better: bool = False,
                  penalty: float = PENALTY) -> list[ChangePoint]:
    """Where the series steps; values must be > 0 for relative steps (a series with a zero or negative value is
    judged on the values themselves)."""
    import numpy as np  # lazy: heavy

    logs = _logs(values)
    series = logs if logs is not None else [float(v) for v in values]
    n = len(series)
    if n < 2 * MIN_SEGMENT:
        return []
    sigma = noise(series)
    bounds = [0] + _segments(np.asarray(series, dtype=float), penalty * sigma * sigma * math.log(n), MIN_SEGMENT) + [n]
    while True:  # test every candidate against its neighbours' segments; drop the weakest failure, merge, test again
        tested = [_tested(values, series, logs is not None, bounds[k - 1], bounds[k], bounds[k + 1])
                  for k in range(1, len(bounds) - 1)]
        failed = [(p, k) for k, (p, step) in enumerate(tested, start=1) if not (p < P_VALUE and step > MIN_STEP)]
        if not failed:
            break
        del bounds[max(failed)[1]]
    out = []
    for k, (p, _) in enumerate(tested, start=1):
        before, after = median(values[bounds[k - 1]:bounds[k]]), median(values[bounds[k]:bounds[k + 1]])
        out.append(ChangePoint(bounds[k], before, after, p, (after < before) if higher_is_better else (after > before)))
    return out


def _tested(values: Sequence[float], series: Sequence[float], relative: bool, a: int, k: int,
            b: int) -> tuple[float, float]:
    """The Welch p and the relative step between the segments [a, k) and [k, b)."""
    left, right = series[a:k], series[k:b]
    if relative:
        step = abs(median(right) - median(left))
    else:
        before, after = median(values[a:k]), median(values[k:b])
        step = abs(after - before) / (abs(before) or 1.0)
    return _welch_p(left, right), step


def exact_changes(values: Sequence[float], higher_is_better: bool = False,
                  tolerance: float = EXACT_TOLERANCE) -> list[ChangePoint]:
    """Every change of a deterministic count between consecutive runs (2 runs suffice); p is 0: nothing is noise."""
    out = []
    for i in range(1, len(values)):
        before, after = values[i - 1], values[i]
        if abs(after - before) > tolerance * max(abs(before), abs(after)):
            out.append(ChangePoint(i, before, after, 0.0, (after < before) if higher_is_better else (after > before)))
    return out


def short_changes(values: Sequence[float], lows: Sequence[float | None], highs: Sequence[float | None],
                  higher_is_better: bool = False, min_step: float = SHORT_STEP) -> list[ChangePoint]:
    """A history too short to segment: the one split (if any) where the two sides are apart -- every value, and
    every interval, on one side past those on the other -- by more than ``min_step`` between the medians."""
    best: ChangePoint | None = None
    for k in range(1, len(values)):
        left, right = values[:k], values[k:]
        left_hi = max(h if h is not None else v for v, h in zip(left, highs[:k]))
        left_lo = min(lo if lo is not None else v for v, lo in zip(left, lows[:k]))
        right_hi = max(h if h is not None else v for v, h in zip(right, highs[k:]))
        right_lo = min(lo if lo is not None else v for v, lo in zip(right, lows[k:]))
        if not (right_lo > left_hi or right_hi < left_lo):
            continue
        before, after = median(left), median(right)
        step = abs(after - before) / (abs(before) or 1.0)
        if step <= min_step or (best is not None and step <= abs(best.ratio - 1)):
            continue
        best = ChangePoint(k, before, after, 0.0, (after < before) if higher_is_better else (after > before))
    return [best] if best is not None else []


@functools.lru_cache(maxsize=4096)
def _t_quantile(q: float, df: int) -> float:
    from scipy import stats  # lazy: heavy

    return float(stats.t.ppf(q, df))


@functools.lru_cache(maxsize=64)
def _z_quantile(q: float) -> float:
    return NormalDist().inv_cdf(q)


def window_alert(history: Sequence[float], value: float, index: int, test: str = "t", boundary: float = 0.99,
                 window: int = 30, higher_is_better: bool = False, value_se: float = 0.0) -> Alert | None:
    """The new value against the last ``window`` values before it; an Alert when it is past the boundary in the
    bad direction. ``boundary``: a quantile in (0.5, 1) for t and z, a fraction (0.05 = 5 %) for percent.
    ``value_se``: the new value's own standard error (its interval half-width / 1.96), added to the window's
    spread: a run that measured itself as +-21 % (one preempted round of five) is not called a regression on
    its mean alone, as asv weighs each step by the measured uncertainty."""
    past = list(history[-window:])
    if len(past) < 2:
        return None  # no history to judge against: not an alert, not a pass either (the caller says so)
    base, sign = math.fsum(past) / len(past), (-1.0 if higher_is_better else 1.0)
    if base and (value - base) * sign / abs(base) <= MIN_STEP:
        return None
    if test == "percent":
        limit = base * (1 + sign * boundary)
        rel = (value - base) / base if base else 0.0
        fired = rel * sign > boundary
        return Alert(index, value, base, limit, rel, test, len(past)) if fired else None
    sd = math.sqrt(math.fsum((x - base) ** 2 for x in past) / (len(past) - 1))  # statistics.stdev is exact and slow
    value_se = value_se if math.isfinite(value_se) and value_se > 0 else 0.0
    if test == "t":
        scale, q = math.hypot(sd * math.sqrt(1 + 1 / len(past)), value_se), _t_quantile(boundary, len(past) - 1)
    elif test == "z":
        scale, q = math.hypot(sd, value_se), _z_quantile(boundary)
    else:
        raise ValueError(f"test must be one of {', '.join(TESTS)}, got {test!r}")
    limit = base + sign * q * scale
    if scale == 0:
        score = math.inf if value != base else 0.0
        score = score if (value - base) * sign > 0 else -score
    else:
        score = (value - base) * sign / scale
    return Alert(index, value, base, limit, score, test, len(past)) if score > q else None


def window_alerts(values: Sequence[float], test: str = "t", boundary: float = 0.99, window: int = 30,
                  higher_is_better: bool = False, min_history: int = 5,
                  standard_errors: Sequence[float] = ()) -> list[Alert]:
    """Every point judged against the points before it (the trend page marks them). The windows' means and spreads
    come from prefix sums, so that only the points near or past the boundary are judged one by one (by
    window_alert itself: the same alerts, tests/test_history_gates.py checks); a 1,000-run series took 20 ms."""
    import numpy as np  # lazy: heavy

    n = len(values)
    if n <= min_history:
        return []
    v = np.asarray(values, dtype=float)
    shift = float(v.mean())
    c = v - shift  # centred: the prefix sums of squares keep their precision
    s1 = np.concatenate([[0.0], np.cumsum(c)])
    s2 = np.concatenate([[0.0], np.cumsum(c * c)])
    idx = np.arange(min_history, n)
    lo = np.maximum(0, idx - window)
    k = idx - lo
    mean_c = (s1[idx] - s1[lo]) / k
    base = mean_c + shift
    sign = -1.0 if higher_is_better else 1.0
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = (v[idx] - base) * sign / np.abs(base)
        near = (base == 0) | (rel > MIN_STEP / 2)
        if test in ("t", "z"):
            var = np.maximum((s2[idx] - s2[lo] - k * mean_c ** 2) / np.maximum(k - 1, 1), 0.0)
            se = np.zeros(n) if not standard_errors else np.array(
                [x if isinstance(x, (int, float)) and math.isfinite(x) and x > 0 else 0.0
                 for x in list(standard_errors)[:n]] + [0.0] * max(0, n - len(standard_errors)))
            spread = np.sqrt(var) * (np.sqrt(1 + 1 / k) if test == "t" else 1.0)
            scale = np.hypot(spread, se[idx])
            quantile = (np.array([_t_quantile(boundary, int(df)) if df >= 1 else math.inf for df in k - 1])
                        if test == "t" else _z_quantile(boundary))
            score = (v[idx] - base) * sign / scale
            near &= (scale == 0) | ~np.isfinite(score) | (score > 0.9 * quantile)
    out = []
    for i in idx[near]:
        i = int(i)
        se_i = standard_errors[i] if i < len(standard_errors) else 0.0
        alert = window_alert(values[:i], values[i], i, test, boundary, window, higher_is_better, se_i)
        if alert is not None:
            out.append(alert)
    return out
