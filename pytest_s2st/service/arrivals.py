"""Open-loop arrival schedules: when each measured request of a level is due.

Copied in behaviour from ``vllm bench serve`` (vllm/benchmarks/serve.py, ``get_request``):
inter-arrival gaps ~ Gamma(shape=burstiness, scale=1 / (rate * burstiness)), so their mean is 1/rate
whatever the burstiness (1 = exponential gaps, a Poisson process; < 1 burstier; > 1 more even;
inf = constant 1/rate); the first request also waits its gap; the cumulative offsets are then scaled
so that the last one lands exactly on n / rate (vLLM's "close the 1-2 % gap" step, which makes the
asked rate the schedule's rate). rate = inf sends everything at once (the closed loop).

Unlike vLLM (numpy's global seed), the schedule has its own generator, seeded: the same (n, rate,
burstiness, seed) gives the same offsets in every run, so request ids and their arrival offsets are
stable across runs.
"""
from __future__ import annotations

import math

import numpy as np

DEFAULT_SEED = 0
METHOD = ("gamma(shape=burstiness, scale=1/(rate*burstiness)) gaps, cumulated, scaled so the last is n/rate "
          "(as vllm bench serve's get_request); seeded numpy Generator (PCG64)")


MIN_RATE = 1 / 3600  # requests per second: one an hour; slower, a 12-request level would take half a day
MAX_RATE = 1e6  # past it every gap is below the event loop's resolution: use inf (the closed loop)
BURSTINESS_RANGE = (1e-3, 1e3)  # gamma shapes outside it give gaps of 0 or overflow; inf = evenly spaced


def _positive_or_inf(value, expected: str, low: float, high: float) -> float:
    if isinstance(value, bool):
        raise ValueError(f"must be {expected}, got {value!r}")
    try:
        out = float(str(value).strip().lower())
    except ValueError:
        raise ValueError(f"must be {expected}, got {value!r}") from None
    if math.isnan(out) or out <= 0 or not math.isinf(out) and not low <= out <= high:
        raise ValueError(f"must be {expected}, got {value!r}")
    return out


def parse_rate(value) -> float:
    """--s2st-request-rate: requests per second in [MIN_RATE, MAX_RATE], or inf (closed loop). ValueError otherwise."""
    return _positive_or_inf(value, f"requests per second in {MIN_RATE:.3g}-{MAX_RATE:g} (one an hour to a million) "
                                   "or inf", MIN_RATE, MAX_RATE)


def parse_burstiness(value) -> float:
    """--s2st-burstiness: the gamma shape in BURSTINESS_RANGE (1 = Poisson), or inf (evenly spaced)."""
    low, high = BURSTINESS_RANGE
    return _positive_or_inf(value, f"a number in {low:g}-{high:g} (1 = Poisson arrivals) or inf", low, high)


def schedule(n: int, rate: float, burstiness: float = 1.0, seed: int = DEFAULT_SEED) -> list[float]:
    """Offsets (seconds from the phase start) at which requests 0..n-1 are due; all 0 when rate is inf."""
    if n <= 0:
        return []
    rate, burstiness = parse_rate(rate), parse_burstiness(burstiness)
    if math.isinf(rate):
        return [0.0] * n
    if math.isinf(burstiness):
        gaps = np.full(n, 1.0 / rate)
    else:
        gaps = np.random.Generator(np.random.PCG64(seed)).gamma(shape=burstiness, scale=1.0 / (rate * burstiness),
                                                                 size=n)
    offsets = np.cumsum(gaps)
    if offsets[-1] > 0:
        offsets *= (n / rate) / offsets[-1]
    return [float(x) for x in offsets]


def achieved_rate(n: int, wall_s: float | None) -> tuple[float | None, str | None]:
    """Measured requests / measured wall seconds, or None with the reason."""
    if not n:
        return None, "no measured requests"
    if wall_s is None or not wall_s > 0 or not math.isfinite(wall_s):
        return None, f"wall_s={wall_s!r} is not a positive duration"
    return n / wall_s, None
