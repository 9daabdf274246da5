"""What the load generator adds to the TTFA it reports, at concurrency 64 (target: <= 1 ms p99).

A null server (its own process, so it does not share the client's event loop) answers each request
with one fixed PCM chunk and the done event, and keeps per X-Request-Id the perf_counter times at
which its handler started and wrote the audio. Per request:

    overhead = client TTFA (send -> first PCM event read) - server interval (handler start -> write)

= everything that is not the server's handler: request building, the loopback socket, aiohttp's
parsing on both sides, event-loop scheduling among 64 streams, reading the event. The same null
server is driven in rotation by three clients, so the machine's noise (shared, 2 cores here) falls on all:
- loadgen: ``run_load`` as users run it (records, WAVs, hashes, validation);
- aiohttp: a bare aiohttp client loop (what run_load's own code costs = loadgen - aiohttp);
- raw: a minimal raw-socket client (pre-built request bytes, hand-parsed chunked SSE) (the floor).

Two regimes at concurrency 64:
- paced: the null server holds each response uniform(0.25, 0.75) s (a model's time, seeded), so 64
  requests stay in flight at ~128 req/s: the TTS-like case, where the target applies.
- at once: no hold. A closed loop of 64 against a zero-time server saturates the CPUs; TTFA is then
  queueing (64 / throughput), so this reports capacity (req/s) and is not held to the target.

    pytest benchmarks/test_loadgen_overhead.py -s
    S2ST_LOADGEN_ENFORCE_TARGET=1 pytest benchmarks/test_loadgen_overhead.py   # also assert the 1 ms target

The target is reported (extra_info "target_met") but only asserted on request: on a shared 2-core
machine even the raw-socket floor is several ms at p99, so the assertion would measure the neighbours.

Also ``python benchmarks/test_loadgen_overhead.py null-server PORT_FILE HOLD_S`` (the null server).
"""
from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

CONCURRENCY = 64
TARGET_P99_S = 0.001
SAMPLE_RATE = 24000


def null_server(port_file: str, hold_s: float) -> None:
    """hold_s > 0: each response first waits uniform(0.5, 1.5) * hold_s (seeded)."""
    from aiohttp import web

    from pytest_s2st.service.server import serve_app, sse_event

    pcm = (np.sin(np.arange(4800) / 10.0) * 8000).astype("<i2").tobytes()
    audio = sse_event({"type": "audio", "index": 0, "pcm": base64.b64encode(pcm).decode(), "sample_rate": SAMPLE_RATE})
    done = sse_event({"type": "done", "samples": 4800, "sample_rate": SAMPLE_RATE, "streaming": False})
    timings: dict[str, tuple[float, float]] = {}
    rng = np.random.default_rng(0)

    async def speech(request: web.Request) -> web.StreamResponse:
        t_recv = time.perf_counter()
        await request.read()
        if hold_s > 0:
            await asyncio.sleep(hold_s * rng.uniform(0.5, 1.5))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        t_write = time.perf_counter()
        await resp.write(audio + done)
        timings[request.headers.get("X-Request-Id", "?")] = (t_recv, t_write)
        return resp

    async def get_timings(request: web.Request) -> web.Response:
        return web.json_response(timings)

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/v1/audio/speech", speech)
        app.router.add_get("/timings", get_timings)
        _, port = await serve_app(app, shutdown_timeout=0.5)
        tmp = Path(port_file + ".tmp")
        tmp.write_text(str(port))
        os.replace(tmp, port_file)
        await asyncio.Event().wait()

    asyncio.run(main())


def _start_null_server(tmp_path: Path, hold_s: float) -> tuple[subprocess.Popen, int]:
    port_file = tmp_path / f"port-{hold_s}"
    proc = subprocess.Popen([sys.executable, __file__, "null-server", str(port_file), str(hold_s)])
    deadline = time.monotonic() + 30
    while not port_file.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("null server did not start")
        time.sleep(0.02)
    return proc, int(port_file.read_text())


async def _server_timings(port: int) -> dict:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET /timings HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
    raw = await reader.read()
    writer.close()
    return json.loads(raw.split(b"\r\n\r\n", 1)[1])


async def _with_loadgen(port: int, out_dir: Path, requests: int) -> tuple[list[tuple], list[str], float]:
    """run_load as users run it (records + WAVs kept); rows of (id, send, first audio) in perf_counter."""
    from pytest_s2st.service.client import run_load
    from pytest_s2st.service.workload import load_workload

    result = await run_load(f"http://127.0.0.1:{port}", load_workload(), CONCURRENCY, out_dir=out_dir,
                            warmups=CONCURRENCY, requests=requests, timeout_s=30.0)
    t0 = result.t0_perf
    measured = [r for r in result.records if not r["warmup"]]
    rows = [(r["id"], t0 + r["send_t"], t0 + r["first_audio_t"]) for r in measured if r["status"] == "ok"]
    return rows, [r["error"] for r in measured if r["status"] != "ok"], len(measured) / result.wall_s


async def _with_raw_socket(port: int, prefix: str, requests: int) -> tuple[list[tuple], list[str], float]:
    """The minimal client: one keep-alive socket per worker, chunked SSE parsed by hand."""
    body = json.dumps({"text": "hello", "language": "English", "voice": "Ryan", "seed": 1}).encode()
    head = (f"POST /v1/audio/speech HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n")
    rows: list[tuple] = []
    errors: list[str] = []

    async def one(reader, writer, rid: str) -> None:
        t_send = time.perf_counter()
        writer.write(f"{head}X-Request-Id: {rid}\r\n\r\n".encode() + body)
        status = await reader.readuntil(b"\r\n\r\n")
        if b" 200 " not in status.split(b"\r\n", 1)[0]:
            raise RuntimeError(status[:40])
        first = None
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip(), 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                break
            chunk = await reader.readexactly(size + 2)
            if first is None and b'"type":"audio"' in chunk:
                first = time.perf_counter()
        rows.append((rid, t_send, first))

    warmed, all_warm = [0], asyncio.Event()
    todo = iter(range(requests))

    async def worker(w: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            await one(reader, writer, f"{prefix}-w{w}")  # warm-up: one per connection
            warmed[0] += 1
            if warmed[0] == CONCURRENCY:
                all_warm.set()
            await all_warm.wait()
            for i in todo:
                await one(reader, writer, f"{prefix}-r{i}")
        except (OSError, RuntimeError, ValueError, asyncio.IncompleteReadError) as exc:
            errors.append(repr(exc))
            all_warm.set()
        finally:
            writer.close()

    tasks = [asyncio.create_task(worker(w)) for w in range(CONCURRENCY)]
    await all_warm.wait()
    t = time.perf_counter()
    await asyncio.gather(*tasks)
    rate = requests / (time.perf_counter() - t)
    return [row for row in rows if "-r" in row[0]], errors, rate


async def _with_bare_aiohttp(port: int, prefix: str, requests: int) -> tuple[list[tuple], list[str], float]:
    """aiohttp's client with nothing of run_load: no records, WAVs, hashing or validation."""
    import aiohttp

    rows: list[tuple] = []
    errors: list[str] = []
    url = f"http://127.0.0.1:{port}/v1/audio/speech"
    body = {"text": "hello", "language": "English", "voice": "Ryan", "seed": 1}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=CONCURRENCY)) as session:
        async def worker(indices, tag: str) -> None:
            for i in indices:
                rid = f"{prefix}-{tag}{i}"
                t_send = time.perf_counter()
                try:
                    async with session.post(url, json=body, headers={"X-Request-Id": rid}) as resp:
                        first = None
                        while line := await resp.content.readline():
                            if first is None and line.startswith(b"data:"):
                                first = time.perf_counter()
                except aiohttp.ClientError as exc:
                    errors.append(repr(exc))
                    continue
                if tag == "r":
                    rows.append((rid, t_send, first))

        warm = iter(range(CONCURRENCY))
        await asyncio.gather(*(worker(warm, "w") for _ in range(CONCURRENCY)))
        todo = iter(range(requests))
        t = time.perf_counter()
        await asyncio.gather(*(worker(todo, "r") for _ in range(CONCURRENCY)))
    return rows, errors, requests / (time.perf_counter() - t)


CLIENTS = ("loadgen", "aiohttp", "raw")


def _compare(tmp_path: Path, hold_s: float, requests: int, rounds: int) -> dict:
    """Rotate the three clients against one null server; overheads pooled over rounds."""
    from pytest_s2st.service.stats import describe

    proc, port = _start_null_server(tmp_path, hold_s)
    pooled: dict[str, dict[str, list]] = {name: {"overhead": [], "to_server": [], "to_client": [], "errors": [],
                                                 "req_per_s": []} for name in CLIENTS}
    try:
        for k in range(rounds):
            for name in CLIENTS[k % 3:] + CLIENTS[: k % 3]:
                if name == "loadgen":
                    rows, errors, rate = asyncio.run(_with_loadgen(port, tmp_path / f"run{k}", requests))
                elif name == "aiohttp":
                    rows, errors, rate = asyncio.run(_with_bare_aiohttp(port, f"aio{k}", requests))
                else:
                    rows, errors, rate = asyncio.run(_with_raw_socket(port, f"raw{k}", requests))
                timings = asyncio.run(_server_timings(port))
                p = pooled[name]
                for rid, sent, first in rows:
                    recv, wrote = timings[rid]
                    p["overhead"].append((first - sent) - (wrote - recv))
                    p["to_server"].append(recv - sent)
                    p["to_client"].append(first - wrote)
                p["errors"] += errors
                p["req_per_s"].append(rate)
    finally:
        proc.kill()
        proc.wait()
    out: dict = {"concurrency": CONCURRENCY, "hold_s": hold_s, "requests_per_round": requests, "rounds": rounds}
    for name, p in pooled.items():
        out[name] = {
            "overhead_s": describe(p["overhead"]),
            # perf_counter is CLOCK_MONOTONIC on Linux, shared by both processes: the two legs
            "send_to_server_handler_s": describe(p["to_server"]),
            "server_write_to_client_read_s": describe(p["to_client"]),
            "requests_per_s": float(np.mean(p["req_per_s"])),
            "errors": len(p["errors"]),
            "first_errors": p["errors"][:3],
        }
    out["loadgen_p99_inflation_s"] = out["loadgen"]["overhead_s"]["p99"] - out["raw"]["overhead_s"]["p99"]
    out["loadgen_p99_over_bare_aiohttp_s"] = out["loadgen"]["overhead_s"]["p99"] - out["aiohttp"]["overhead_s"]["p99"]
    out["load_average_1m"] = os.getloadavg()[0]
    out["method"] = "TTFA minus null-server handler interval per request; loadgen vs raw-socket client, alternated"
    return out


def _report(title: str, res: dict) -> None:
    ms = lambda x: f"{x * 1e3:.3f}"  # noqa: E731
    print(f"\n{title} (c={CONCURRENCY}, load avg {res['load_average_1m']:.1f}):")
    for name in CLIENTS:
        o = res[name]["overhead_s"]
        print(f"  {name:8s} overhead p50 {ms(o['p50'])} ms  p99 {ms(o['p99'])} ms  mean {ms(o['mean'])} ms"
              f"  ({o['n']} requests, {res[name]['requests_per_s']:.0f} req/s)")
    print(f"  loadgen p99 minus raw socket p99: {ms(res['loadgen_p99_inflation_s'])} ms; "
          f"minus bare aiohttp p99: {ms(res['loadgen_p99_over_bare_aiohttp_s'])} ms")


def test_loadgen_ttfa_overhead_c64(benchmark, tmp_path):
    res: dict = {}
    benchmark.pedantic(lambda: res.update(_compare(tmp_path, hold_s=0.5, requests=320, rounds=3)),
                       rounds=1, iterations=1)
    loadgen, raw = res["loadgen"]["overhead_s"], res["raw"]["overhead_s"]
    res["target_met"] = loadgen["p99"] <= TARGET_P99_S
    benchmark.extra_info.update(res)
    _report("paced null server", res)
    print(f"  target p99 <= {TARGET_P99_S * 1e3:.0f} ms: {'met' if res['target_met'] else 'NOT met'}")
    assert all(res[name]["errors"] == 0 for name in CLIENTS), [res[name]["first_errors"] for name in CLIENTS]
    # Regression guard that survives a shared, noisy machine: the median stays within a few raw-client
    # medians (blocking file IO on the event loop, for one, multiplies it several-fold).
    assert loadgen["p50"] <= 6 * raw["p50"] + 0.001, (loadgen, raw)
    if os.environ.get("S2ST_LOADGEN_ENFORCE_TARGET") == "1":  # on a quiet machine
        assert res["target_met"], f"load generator TTFA overhead p99 {loadgen['p99'] * 1e3:.3f} ms > 1 ms"


def test_loadgen_capacity_c64_at_once(benchmark, tmp_path):
    res: dict = {}
    benchmark.pedantic(lambda: res.update(_compare(tmp_path, hold_s=0.0, requests=1000, rounds=3)),
                       rounds=1, iterations=1)
    benchmark.extra_info.update(res)
    _report("null server answering at once (saturated closed loop: TTFA is queueing)", res)
    assert all(res[name]["errors"] == 0 for name in CLIENTS), [res[name]["first_errors"] for name in CLIENTS]


if __name__ == "__main__" and len(sys.argv) == 4 and sys.argv[1] == "null-server":
    null_server(sys.argv[2], float(sys.argv[3]))
