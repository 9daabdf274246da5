"""Servers on loopback for the service tests: a free port, the speech app in a thread, and the one fault-server
harness (``load``) every fault module runs its misbehaving aiohttp routes through, for either protocol."""
from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from typing import Any, Awaitable, Callable, Mapping

from aiohttp import web

from pytest_s2st import runs
from pytest_s2st.service.client import run_load
from pytest_s2st.service.server import make_app, serve_app

IDENTITY = {"case_id": "callable-tone", "model_type": "callable"}
WORKLOAD = [{"id": "a", "text": "hello there", "language": "English", "voice": "Ryan", "seed": 1}]
PCM = b"\x01\x00\xff\x7f"  # two int16 samples
# what a fault run of each protocol sends besides its own keywords: an OpenAI run names its model (no GET
# /v1/models first) and reads raw PCM at the 8 kHz the fault servers write
PROTOCOL_OPTIONS: dict[str, dict[str, Any]] = {"s2st": {}, "openai": {"sample_rate": 8000, "extra_body": {"model": "m"}}}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def unused_port() -> int:
    """A loopback port nobody listens on (bound once, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def server_thread(synth, app=None, **kw):
    """The speech app (or ``app``) on loopback, its event loop in a thread (for blocking clients such as the
    openai SDK): yields the base URL."""
    loop = asyncio.new_event_loop()
    ready, box = threading.Event(), {}

    def main():
        asyncio.set_event_loop(loop)
        box["runner"], port = loop.run_until_complete(
            serve_app(app or make_app(synth, identity=IDENTITY, **kw), shutdown_timeout=0.5))
        box["base"] = f"http://127.0.0.1:{port}"
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    assert ready.wait(20), "server did not start"
    try:
        yield box["base"]
    finally:
        asyncio.run_coroutine_threadsafe(box["runner"].cleanup(), loop).result(20)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(20)


# --- the fault-server harness ------------------------------------------------------------------------------

async def stall_before_headers(request):
    await asyncio.sleep(3600)
    return web.Response()


async def trickle_forever(request):
    """Never silent long enough for the read timeout: only the whole-request timeout can end it."""
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    while True:
        await resp.write(b": keep-alive\n")
        await asyncio.sleep(0.05)


PROTOCOL_BLIND = {f.__name__: f for f in (stall_before_headers, trickle_forever)}  # the same fault either way


def load(tmp_path, routes: Callable[[], Mapping[str, Handler]], route: str | None, *, protocol: str = "s2st",
         bound: float | None = 15.0, endpoint: str | None = None, **kw):
    """One ``run_load`` (defaults: no warm-up, 2 requests, 5 s per request, concurrency 1, the protocol's
    PROTOCOL_OPTIONS) against a fresh loopback server of ``routes()`` (POST /<name>; made per run, so a
    route may keep state), at ``/route`` or at ``endpoint``. The run must end within ``bound`` seconds
    (None: only a 30 s guard against a hang, for modules not run serially), and the records on disk must
    be the result's."""
    kw = {"warmups": 0, "requests": 2, "timeout_s": 5.0, "protocol": protocol, **PROTOCOL_OPTIONS[protocol], **kw}

    async def main():
        app = web.Application()
        for name, handler in {**PROTOCOL_BLIND, **routes()}.items():
            app.router.add_post(f"/{name}", handler)
        runner, port = await serve_app(app, shutdown_timeout=0.2)
        try:
            t = time.perf_counter()
            result = await run_load(endpoint or f"http://127.0.0.1:{port}/{route}", WORKLOAD,
                                    kw.pop("concurrency", 1), out_dir=tmp_path, **kw)
            return result, time.perf_counter() - t
        finally:
            await runner.cleanup()

    result, took = asyncio.run(asyncio.wait_for(main(), 30 if bound is None else bound + 10))
    if bound is not None:
        assert took < bound, f"run took {took:.1f} s"
    assert runs.read_records(tmp_path) == result.records
    return result


def assert_every_request_failed(result, out_dir, reason: str) -> None:
    """Both requests of a faulty route: an error naming the reason, no audio kept, nothing averaged."""
    assert [r["id"] for r in sorted(result.records, key=lambda r: r["index"])] == ["c1-r0", "c1-r1"]
    for r in result.records:
        assert r["status"] == "error" and reason in r["error"], r["error"]
        assert r["pcm_sha256"] is None and r["audio_seconds"] is None
        assert not runs.wav_path(out_dir, r["id"]).exists()
    assert result.summary["error_rate"] == 1.0 and result.summary["ttfa_s"]["mean"] is None
