"""The client's memory stays bounded against loopback servers that never end a response.

Each shape streams forever (or as long as the client reads). The client runs in a subprocess that
measures its own peak RSS over the run (VmHWM, reset first), so the server's buffers never count.
Every request, warm-up included, must end as a record with a reason naming the limit crossed.
"""
from __future__ import annotations

import asyncio
import base64
import json
import sys
import time

import pytest

from pytest_s2st import runs
from pytest_s2st.service.answers import sse_event

TIMEOUT_S = 4.0
MAX_GROWTH_KIB = 64 * 1024
SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
PCM = b"\x01\x00" * 2400  # 0.1 s at 24 kHz


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def forever(head: bytes, block: bytes):
    async def send(writer):
        writer.write(head)
        while True:
            writer.write(block)
            await writer.drain()
    return send


SHAPES = {
    # valid audio events, never a done event: the PCM bound (max_audio_s=1 at 24 kHz)
    "endless_audio": (forever(SSE_HEAD, chunk(sse_event({"type": "audio", "index": 0, "sample_rate": 24000,
                                                         "pcm": base64.b64encode(PCM).decode()}))),
                      {"max_audio_s": 1}, "response audio passed max_audio_s=1 (48000 bytes at 24000 Hz)"),
    # the same at the default max_audio_s=600: 28.8 MB of 24 kHz PCM per response goes to disk as it comes,
    # not into memory (a loaded machine needs more than 4 s to take it: the bound here is memory, not time)
    "endless_audio_default": (forever(SSE_HEAD, chunk(sse_event({"type": "audio", "index": 0, "sample_rate": 24000,
                                                                 "pcm": base64.b64encode(PCM * 20).decode()}))),
                              {"timeout_s": 40.0}, "response audio passed max_audio_s=600 (28800000 bytes at 24000 Hz)"),
    # audio events with no samples: the bound on the number of events (100 per allowed audio second + 100)
    "endless_empty_audio": (forever(SSE_HEAD, chunk(sse_event({"type": "audio", "index": 0, "sample_rate": 24000,
                                                               "pcm": ""}))),
                            {"max_audio_s": 1}, "response passed 200 SSE events (max_audio_s=1"),
    # one data: line that never ends, at the default max_audio_s: not held past HOLD_BYTES, read as it
    # arrives, and no JSON object (issue 29: it used to be held to the 16 MiB SSE event ceiling)
    "endless_data_bytes": (forever(SSE_HEAD + chunk(b"data: "), chunk(b"A" * 65536)),
                           {}, "malformed SSE event (not one JSON object): b'AAAA"),
    # the same inside an audio event's base64: decoded to the evidence as it arrives, up to the event bound
    "endless_audio_line": (forever(SSE_HEAD + chunk(b'data: {"type":"audio","index":0,"sample_rate":24000,"pcm":"'),
                                   chunk(b"A" * 65536)),
                           {}, "an SSE event passed max_event_bytes=16777216 (max_audio_s=600 at 48000 Hz)"),
    # data: lines, never the blank line that ends the event
    "endless_data_lines": (forever(SSE_HEAD, chunk(b"data: " + b"A" * 8000 + b"\n")), {"max_audio_s": 1},
                           "an SSE event passed max_event_bytes=132096 (max_audio_s=1 at 48000 Hz)"),
    # one chunk header announcing 64 GiB, then bytes for as long as the client reads
    "huge_chunk": (forever(SSE_HEAD + b"1000000000\r\n", b"A" * 65536),
                   {}, "response too large: a chunk of 68719476736 bytes passed max_chunk_bytes="),
    # comments only, as fast as the client reads: nothing is kept, the whole-request timeout ends it
    "endless_comments": (forever(SSE_HEAD, chunk(b": keep-alive\n" * 1000)),
                         {"timeout_s": 3.0}, "timeout: no complete response within 3 s"),
    # a header block that never ends
    "endless_headers": (forever(b"HTTP/1.1 200 OK\r\n", b"X-Pad: " + b"a" * 1000 + b"\r\n"),
                        {}, "response too large: response headers passed max_header_bytes=65536"),
}

CLIENT = """
import asyncio, json, re, sys, time
from pathlib import Path
from pytest_s2st.service.client import run_load

def status(key):
    return int(re.search(key + r":\\s+(\\d+)", open("/proc/self/status").read()).group(1))

endpoint, out, kw = sys.argv[1], Path(sys.argv[2]), json.loads(sys.argv[3])
workload = [{"id": "a", "text": "hi", "language": "English", "voice": "Ryan", "seed": 1}]
with open("/proc/self/clear_refs", "w") as fh:
    fh.write("5")  # the peak (VmHWM) starts over at the current RSS
before, t = status("VmRSS"), time.perf_counter()
result = asyncio.run(run_load(endpoint, workload, 1, out_dir=out, warmups=1, requests=2, **kw))
print(json.dumps({"before_kib": before, "peak_kib": status("VmHWM"), "after_kib": status("VmRSS"),
                  "took_s": time.perf_counter() - t}))
"""


async def serve(send):
    """Answer GET /identity with 404; answer each POST with ``send(writer)``, for as long as the client reads."""
    tasks: set[asyncio.Task] = set()

    async def handle(reader, writer):
        tasks.add(asyncio.current_task())
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                if head.startswith(b"GET"):
                    writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                    await writer.drain()
                    break
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                await send(writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client gave up on the response: the point of the test
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], tasks


async def run_client(send, out, kw) -> dict:
    server, port, tasks = await serve(send)
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", CLIENT, f"http://127.0.0.1:{port}", str(out), json.dumps(kw),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        stdout, stderr = await asyncio.wait_for(proc.communicate(), 3 * max(TIMEOUT_S, kw["timeout_s"]) + 30)
        assert proc.returncode == 0, stderr.decode()[-3000:]
        return json.loads(stdout.decode().strip().splitlines()[-1])
    finally:
        server.close()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
@pytest.mark.parametrize("shape", list(SHAPES))
def test_endless_response_is_bounded_and_recorded(tmp_path, shape):
    send, kw, reason = SHAPES[shape]
    out = tmp_path / "run"
    t = time.perf_counter()
    mem = asyncio.run(run_client(send, out, {"timeout_s": TIMEOUT_S, **kw}))
    took = time.perf_counter() - t
    growth = mem["peak_kib"] - mem["before_kib"]
    print(f"{shape}: peak RSS growth {growth / 1024:.1f} MiB, run {mem['took_s']:.2f} s")
    assert growth <= MAX_GROWTH_KIB, f"{shape}: RSS grew {growth / 1024:.0f} MiB"
    if shape == "endless_audio_default":  # the 27.5 MiB of audio each response carries is not held
        assert growth <= 20 * 1024, f"{shape}: RSS grew {growth / 1024:.0f} MiB"
    records = runs.read_records(out)
    assert sorted(r["id"] for r in records) == ["c1-r0", "c1-r1", "c1-w0"]  # warm-up included
    for r in records:
        assert r["status"] == "error" and reason in r["error"], r["error"]
        assert r["wav"] is None and not runs.wav_path(out, r["id"]).exists()
    bound = max(TIMEOUT_S, kw.get("timeout_s", TIMEOUT_S))
    assert mem["took_s"] < 3 * bound and took < 3 * bound + 30
    assert runs.read_summary(out)["by_concurrency"]["1"]["summary"]["n_error"] == 2
