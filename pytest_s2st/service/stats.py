"""Service metrics from request records (DESIGN.md: ttfa_s, rtf, throughput).

Per measured (non-warm-up) request with status "ok", by ``runs.request_metrics`` (the one definition,
shared with the quality gate):
    ttfa_s    = first_audio_t - send_t   (request sent -> first SSE event with a non-empty PCM sample;
                                          queueing included)
    latency_s = done_t - send_t
    rtf       = latency_s / audio_seconds  (mean over requests is the seed's RTF)
Run level:
    throughput = sum(audio_seconds of ok requests) / wall_s   (audio seconds per wall second)
    error_rate = failed / measured
    goodput    = requests that are ok AND meet every given target {"ttfa_s": x, "rtf": y}, as a fraction
                 of measured requests and per wall second.

Streaming playback, per ok request by ``runs.playback_metrics`` (vLLM-Omni's definitions; see there):
    underrun_s, underrun_events, underrun_longest_s, continuity_ok, gaps_s, audio_duration_s
Run level: underrun_s / underrun_events / underrun_longest_s / audio_duration_s described over the ok
requests that have a chunk timeline; gap_s described over every inter-chunk gap of those requests pooled;
continuity_rate = continuous requests / requests with a timeline (vLLM-Omni's audio_continuity_ok_rate in
vllm_omni/benchmarks/metrics/metrics.py::calculate_metrics, which also pools the underrun percentiles
over successful requests; except that no timeline at all gives None + a reason where vLLM-Omni reports 1.0).

Percentiles: linear interpolation between closest ranks (numpy.percentile's default "linear",
Hyndman & Fan type 7): p of n sorted values sits at rank (n - 1) * p / 100.
Missing data gives None plus a reason, never 0.
"""
from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from ..runs import CONTINUITY_THRESHOLD_S, playback_metrics, request_metrics

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
    "underrun_s": "chunk timeline (client arrival stamps, non-empty chunks): worst deficit of a real-time player "
                  "started at the first audio, max(0, max_i (t_i - t0) - audio received before i); "
                  "vLLM-Omni audio_continuity.compute_continuity_stats",
    "underrun_events": "chunks arriving after the audio before them had played out (deficit > 0; vLLM-Omni)",
    "underrun_longest_s": "longest single dry spell of a player that waits when dry and resumes at the next chunk",
    "continuity_rate": f"requests whose underrun_s <= {CONTINUITY_THRESHOLD_S:g} s (inclusive; vLLM-Omni default) "
                       "/ requests with a chunk timeline",
    "gap_s": "arrival differences of consecutive non-empty chunks, pooled over the level's ok requests",
    "audio_duration_s": "seconds of audio returned per ok request",
}
PLAYBACK_STATS = ("underrun_s", "underrun_events", "underrun_longest_s", "audio_duration_s")


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
        first = next((str(r["error"]) for r in measured if r.get("error")), None)
        reasons["all"] = (f"no request completed ok: all {n} measured requests failed"
                          + (f" (first: {first[:200]})" if first else ""))

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

    out.update(playback_summary(ok, reasons))

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
        reasons["goodput"] = "no targets given (the config's general.targets, e.g. {ttfa_s: 1.0, rtf: 1.0})"
    out["reasons"] = reasons
    return out


def playback_summary(ok: list[dict], reasons: dict[str, str]) -> dict[str, Any]:
    """The playback statistics of a level's ok records; a missing one gets a reason under its name."""
    per = [playback_metrics(r) for r in ok]
    have = [m for m in per if m["reason"] is None]
    out: dict[str, Any] = {name: describe(m[name] for m in per if m[name] is not None) for name in PLAYBACK_STATS}
    out["gap_s"] = describe(g for m in have for g in m["gaps_s"])
    out["continuity_rate"] = sum(1 for m in have if m["continuity_ok"]) / len(have) if have else None
    out["continuity_threshold_s"] = CONTINUITY_THRESHOLD_S
    out["n_playback"] = len(have)
    if ok and not have:
        why = per[0]["reason"]
        for name in ("underrun_s", "underrun_events", "underrun_longest_s", "continuity_rate", "gap_s"):
            reasons[name] = f"no ok request has a usable chunk timeline (first: {why})"
    elif have and out["gap_s"]["n"] == 0:
        reasons["gap_s"] = "every response came as one audio chunk: no inter-chunk gap"
    if len(have) < len(ok):
        skipped = [m["reason"] for m in per if m["reason"] is not None]
        reasons["playback_skipped"] = (f"{len(skipped)} of {len(ok)} ok requests without a usable timeline "
                                       f"(first: {skipped[0]})")
    if ok and out["audio_duration_s"]["n"] == 0:
        reasons["audio_duration_s"] = "no ok request recorded audio_seconds"
    return out
