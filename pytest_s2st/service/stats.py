"""Service metrics from request records (DESIGN.md: ttfa_s, rtf, throughput).

Per measured (non-warm-up) request with status "ok", by ``runs.request_metrics`` (the one definition,
shared with the quality gate):
    ttfa_s    = first_audio_t - send_t   (request sent -> first SSE event with a non-empty PCM sample; queueing included)
    latency_s = done_t - send_t
    rtf       = latency_s / audio_seconds  (mean over requests is the seed's RTF)
Run level:
    throughput = sum(audio_seconds of ok requests) / wall_s   (audio seconds per wall second)
    error_rate = failed / measured
    goodput    = requests that are ok AND meet every given target {"ttfa_s": x, "rtf": y}, as a fraction
                 of measured requests and per wall second.

Percentiles: linear interpolation between closest ranks (numpy.percentile's default "linear",
Hyndman & Fan type 7): p of n sorted values sits at rank (n - 1) * p / 100.
Missing data gives None plus a reason, never 0.
"""
from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from ..runs import request_metrics

PERCENTILE_METHOD = "linear (numpy default; Hyndman-Fan type 7: rank (n-1)*p/100, interpolated)"
_TARGETS = ("ttfa_s", "rtf")
# how each number is measured, saved beside it (the JSON of every service row)
METHODS = {
    "clock": "time.perf_counter (client side)",
    "send_t": "the request's bytes handed to the socket, after it was built and its connection opened "
              "(start_t is before both); workers start one at a time",
    "ttfa_s": "send_t -> first SSE event with a non-empty PCM sample, stamped when its line is read (queueing "
              "included)",
    "rtf": "(completion - send_t) / seconds of audio returned",
    "throughput": "audio seconds of ok requests / wall seconds of the measured phase",
}


def describe(values: Iterable[float]) -> dict[str, float | int | None]:
    data = np.asarray([float(v) for v in values], dtype=np.float64)
    if data.size == 0:
        return {"n": 0, "mean": None, "p50": None, "p90": None, "p99": None}
    p50, p90, p99 = np.percentile(data, [50, 90, 99], method="linear")
    return {"n": int(data.size), "mean": float(data.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99)}


def summarize(records: list[dict], wall_s: float, targets: dict | None = None) -> dict[str, Any]:
    for key in targets or {}:
        if key not in _TARGETS:
            raise ValueError(f"goodput target {key!r}: known targets are {', '.join(_TARGETS)}")
    measured = [r for r in records if not r.get("warmup")]
    ok = [r for r in measured if r.get("status") == "ok"]
    per = [request_metrics(r) for r in ok]
    reasons: dict[str, str] = {}
    n = len(measured)
    if n == 0:
        reasons["all"] = "no measured (non-warm-up) requests"
    elif not ok:
        reasons["all"] = "no request completed ok"

    out: dict[str, Any] = {
        "n": n,
        "n_ok": len(ok),
        "n_error": n - len(ok),
        "error_rate": (n - len(ok)) / n if n else None,
        "wall_s": wall_s if wall_s and wall_s > 0 else None,
        "percentile_method": PERCENTILE_METHOD,
    }
    for name in ("ttfa_s", "rtf", "latency_s"):
        out[name] = describe(m[name] for m in per if m[name] is not None)

    audio = sum(float(r.get("audio_seconds") or 0.0) for r in ok)
    out["audio_seconds"] = audio if ok else None
    if not wall_s or wall_s <= 0:
        reasons["throughput"] = f"wall_s={wall_s!r} is not a positive duration"
        out["throughput"] = None
    else:
        out["throughput"] = audio / wall_s if ok else None

    if targets:
        good = sum(
            1
            for m in per
            if all(m[key] is not None and m[key] <= float(limit) for key, limit in targets.items())
        )
        out["goodput"] = {
            "targets": dict(targets),
            "n_good": good if n else None,
            "fraction": good / n if n else None,
            "per_s": good / wall_s if n and wall_s and wall_s > 0 else None,
        }
    else:
        out["goodput"] = None
        reasons["goodput"] = "no targets given"
    out["reasons"] = reasons
    return out
