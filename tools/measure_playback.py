"""Playback-underrun figures on loopback (issue 12, "Measured"): the non-streaming reference server and
a paced streaming server whose chunks arrive slower than real time, beside the hand-computed answer.

    .venv/bin/python tools/measure_playback.py [--requests 20] [--concurrency 1 8] [--chunk-s 0.1 --sleep-s 0.3 --chunks 4]

Prints one line per (server, level): underrun p50/p99, underrun events p50, longest dry spell p50,
continuity rate, inter-chunk gap p50/p99, and for the paced server the hand computation for its
nominal schedule (deficit at chunk i = i*sleep - i*chunk). Run it on a quiet machine: the paced
server's sleeps only overshoot, and a busy scheduler shows up as extra underrun.
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import tempfile
from pathlib import Path

from aiohttp import web

from pytest_s2st.service.client import run_load
from pytest_s2st.service.answers import sse_event
from pytest_s2st.service.server import make_app, serve_app
from pytest_s2st.service.synthesizers import demo_tone_synthesizer

RATE = 24000
WORKLOAD = [{"id": f"w{i}", "text": "a sentence of moderate length for the tone server " * 2, "language": "English",
             "voice": "Ryan", "seed": i} for i in range(8)]


def paced_app(chunk_s: float, sleep_s: float, chunks: int, rate: int = RATE) -> web.Application:
    """The project's SSE protocol streamed slower than real time: chunk_s of audio, then sleep_s of sleep
    (tests/test_playback.py serves this too, against its hand-computed timeline)."""
    samples = int(round(chunk_s * rate))
    pcm = b"\x10\x00" * samples

    async def speech(request):
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(chunks):
            if i:
                await asyncio.sleep(sleep_s)
            await resp.write(sse_event({"type": "audio", "index": i, "pcm": base64.b64encode(pcm).decode(),
                                        "sample_rate": rate}))
        whole = pcm * chunks
        await resp.write(sse_event({"type": "done", "samples": len(whole) // 2, "sample_rate": rate,
                                    "pcm_sha256": hashlib.sha256(whole).hexdigest()}))
        await resp.write_eof()
        return resp

    async def identity(request):
        return web.json_response({"code": "paced", "streaming": True})

    app = web.Application()
    app.router.add_post("/v1/audio/speech", speech)
    app.router.add_get("/identity", identity)
    return app


def fmt(x: float | None, scale: float = 1e3, unit: str = "ms") -> str:
    return "n/a" if x is None else f"{x * scale:.1f} {unit}"


async def level(app: web.Application, concurrency: int, requests: int, out: Path) -> dict:
    runner, port = await serve_app(app, shutdown_timeout=1.0)
    try:
        result = await run_load(f"http://127.0.0.1:{port}", WORKLOAD, concurrency, out_dir=out, warmups=1,
                                requests=requests, timeout_s=60.0)
    finally:
        await runner.cleanup()
    return result.summary


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--chunk-s", type=float, default=0.1)
    ap.add_argument("--sleep-s", type=float, default=0.3)
    ap.add_argument("--chunks", type=int, default=4)
    args = ap.parse_args()
    late = max(0.0, args.sleep_s - args.chunk_s)
    hand = {"underrun_s": late * (args.chunks - 1), "events": args.chunks - 1 if late > 0 else 0, "longest_s": late}
    print(f"paced server by hand: underrun {fmt(hand['underrun_s'])}, events {hand['events']}, "
          f"longest dry spell {fmt(hand['longest_s'])}, gap {fmt(args.sleep_s)}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, make in (("reference", lambda: make_app(demo_tone_synthesizer(sample_rate=RATE), identity={"code": "ref"},
                                                            queue_size=64, chunk_samples=2400)),
                           ("paced", lambda: paced_app(args.chunk_s, args.sleep_s, args.chunks))):
            for c in args.concurrency:
                s = asyncio.run(level(make(), c, args.requests, Path(tmp) / f"{name}-c{c}"))
                print(f"{name:9s} c{c:<2d} ok {s['n_ok']}/{s['n']}  underrun p50 {fmt(s['underrun_s']['p50'])} "
                      f"p99 {fmt(s['underrun_s']['p99'])}  events p50 {s['underrun_events']['p50']}  "
                      f"longest p50 {fmt(s['underrun_longest_s']['p50'])}  continuity {s['continuity_rate']}  "
                      f"gap p50 {fmt(s['gap_s']['p50'])} p99 {fmt(s['gap_s']['p99'])}  TTFA p50 {fmt(s['ttfa_s']['p50'])}")


if __name__ == "__main__":
    main()
