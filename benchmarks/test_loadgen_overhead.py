"""What the load generator adds to the TTFA it reports, at concurrency 64 (target: <= 1 ms p99).

A null server (its own process, so it does not share the client's event loop; a raw asyncio protocol
costing tens of microseconds a request, so it adds little queueing of its own) answers each request
with one fixed PCM chunk and the done event, and keeps per X-Request-Id the perf_counter times at
which the request's first bytes reached it and it wrote the response. Per request:

    overhead = client TTFA (send -> first PCM event read) - server interval (request in -> write)

= everything that is not the server's hold: request building, the loopback socket both ways, the
server's and client's event-loop scheduling among 64 streams, parsing, reading the event. The same null
server is driven in rotation by three clients, so the machine's noise (shared, 2 cores here) falls on all:
- loadgen: ``run_load`` as users run it (its lean HTTP/1.1 client, records, WAVs, hashes, validation);
- aiohttp: a bare aiohttp client loop (what run_load used before: aiohttp's client);
- raw: a minimal raw-socket client (pre-built request bytes, hand-parsed chunked SSE) (the floor).
Each stamps the send when the request's bytes go to the socket: loadgen and raw just before their
write, aiohttp through its on_request_chunk_sent trace.
Each client's workers start together, so the first 64 requests form a burst; the overhead after it
(the steady state) is reported beside the overall figure. perf_counter is CLOCK_MONOTONIC, shared by
both processes, so the overhead splits into two legs: send -> server (loopback + the server's loop:
not the client's, since send_t is stamped at the socket write) and server write -> client stamp
(loopback delivery + the client's wake-up and reading: the client's own share).

Two regimes at concurrency 64:
- paced: the null server holds each response uniform(0.25, 0.75) s (a model's time, seeded), so 64
  requests stay in flight at ~128 req/s: the TTS-like case, where the target applies.
- at once: no hold. A closed loop of 64 against a zero-time server saturates the CPUs; TTFA is then
  queueing (64 / throughput), so this reports capacity (req/s) and is not held to the target.

    pytest benchmarks/test_loadgen_overhead.py -s
    S2ST_LOADGEN_ENFORCE_TARGET=1 pytest benchmarks/test_loadgen_overhead.py   # also assert the 1 ms target

The target is reported (extra_info "target_met" on the whole overhead, "client_receive_leg_target_met"
on the client's leg) but only asserted on request: on a shared 2-core machine even the raw-socket
client's whole overhead is 1.3-1.7 ms at p99, so the assertion would measure the neighbours.

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
    """A raw asyncio protocol, not aiohttp: its own per-request cost (parse, answer) is a few tens of
    microseconds, so a burst of 64 requests barely queues at the server and what is measured is the
    client. Keep-alive HTTP/1.1; POST /v1/audio/speech answers a fixed chunked SSE response (one PCM
    event + done); GET /timings answers the stamps. hold_s > 0: each response first waits
    uniform(0.5, 1.5) * hold_s (seeded)."""
    from pytest_s2st.service.answers import sse_event

    pcm = (np.sin(np.arange(4800) / 10.0) * 8000).astype("<i2").tobytes()
    audio = sse_event({"type": "audio", "index": 0, "pcm": base64.b64encode(pcm).decode(), "sample_rate": SAMPLE_RATE})
    done = sse_event({"type": "done", "samples": 4800, "sample_rate": SAMPLE_RATE, "streaming": False})
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    body = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (audio, done)) + b"0\r\n\r\n"
    # an OpenAI speech request ({"input": ...}) gets the same PCM as raw chunked audio/pcm
    pcm_head = b"HTTP/1.1 200 OK\r\nContent-Type: audio/pcm\r\nTransfer-Encoding: chunked\r\n\r\n"
    pcm_body = b"%x\r\n%s\r\n0\r\n\r\n" % (len(pcm), pcm)
    timings: dict[str, tuple[float, float]] = {}
    rng = np.random.default_rng(0)

    class NullHTTP(asyncio.Protocol):
        def connection_made(self, transport):
            self.transport, self.buf, self.t_first = transport, b"", None

        def data_received(self, data: bytes) -> None:
            if self.t_first is None:
                self.t_first = time.perf_counter()  # the request's first bytes, as this loop sees them
            self.buf += data
            while b"\r\n\r\n" in self.buf:
                header, rest = self.buf.split(b"\r\n\r\n", 1)
                fields = dict(line.split(b": ", 1) for line in header.split(b"\r\n")[1:] if b": " in line)
                fields = {k.lower(): v for k, v in fields.items()}
                size = int(fields.get(b"content-length", b"0"))
                if len(rest) < size:
                    return
                openai = b'"input"' in rest[:size]
                self.buf, t_recv, self.t_first = rest[size:], self.t_first, None
                if header.startswith(b"GET /timings"):
                    blob = json.dumps(timings).encode()
                    self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                         b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(blob), blob))
                    self.transport.close()
                    return
                rid = fields.get(b"x-request-id", b"?").decode()
                if hold_s > 0:
                    loop.call_later(hold_s * rng.uniform(0.5, 1.5), self.answer, rid, t_recv, openai)
                else:
                    self.answer(rid, t_recv, openai)

        def answer(self, rid: str, t_recv: float, openai: bool = False) -> None:
            if self.transport.is_closing():
                return
            t_write = time.perf_counter()
            self.transport.write(pcm_head + pcm_body if openai else head + body)
            timings[rid] = (t_recv, t_write)

    async def main() -> None:
        server = await loop.create_server(NullHTTP, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        tmp = Path(port_file + ".tmp")
        tmp.write_text(str(port))
        os.replace(tmp, port_file)
        await asyncio.Event().wait()

    loop = asyncio.new_event_loop()
    loop.run_until_complete(main())


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


async def _with_loadgen(port: int, out_dir: Path, requests: int,
                        protocol: str = "s2st") -> tuple[list[tuple], list[str], float]:
    """run_load as users run it (records + WAVs kept); rows of (id, send, first audio) in perf_counter."""
    from pytest_s2st.service.client import run_load
    from pytest_s2st.workload import load_workload

    openai = {"protocol": "openai", "extra_body": {"model": "null"}} if protocol == "openai" else {}
    result = await run_load(f"http://127.0.0.1:{port}", load_workload(), CONCURRENCY, out_dir=out_dir,
                            warmups=CONCURRENCY, requests=requests, timeout_s=30.0, **openai)
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
    sent: dict[str, float] = {}

    async def on_chunk_sent(session, ctx, params) -> None:  # the same send stamp as run_load's
        sent.setdefault(ctx.trace_request_ctx, time.perf_counter())

    trace = aiohttp.TraceConfig()
    trace.on_request_chunk_sent.append(on_chunk_sent)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=CONCURRENCY),
                                     trace_configs=[trace]) as session:
        async def worker(indices, tag: str) -> None:
            for i in indices:
                rid = f"{prefix}-{tag}{i}"
                try:
                    async with session.post(url, json=body, headers={"X-Request-Id": rid},
                                            trace_request_ctx=rid) as resp:
                        first = None
                        while line := await resp.content.readline():
                            if first is None and line.startswith(b"data:"):
                                first = time.perf_counter()
                except aiohttp.ClientError as exc:
                    errors.append(repr(exc))
                    continue
                if tag == "r":
                    rows.append((rid, sent[rid], first))

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
    pooled: dict[str, dict[str, list]] = {name: {"overhead": [], "steady": [], "to_server": [], "to_client": [],
                                                 "errors": [], "req_per_s": []} for name in CLIENTS}
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
                for n, (rid, sent, first) in enumerate(sorted(rows, key=lambda row: row[1])):
                    recv, wrote = timings[rid]
                    p["overhead"].append((first - sent) - (wrote - recv))
                    if n >= CONCURRENCY:  # past the closed loop's start, when all 64 are sent at once
                        p["steady"].append(p["overhead"][-1])
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
            "overhead_after_start_burst_s": describe(p["steady"]),
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
        steady = res[name]["overhead_after_start_burst_s"]
        print(f"  {name:8s} overhead p50 {ms(o['p50'])} ms  p99 {ms(o['p99'])} ms  mean {ms(o['mean'])} ms"
              f"  ({o['n']} requests, {res[name]['requests_per_s']:.0f} req/s);"
              f" after the start burst p99 {ms(steady['p99'])} ms")
        legs = res[name]["send_to_server_handler_s"], res[name]["server_write_to_client_read_s"]
        print(f"  {'':8s} send -> server p50 {ms(legs[0]['p50'])} p99 {ms(legs[0]['p99'])} ms;"
              f" server write -> client stamp p50 {ms(legs[1]['p50'])} p99 {ms(legs[1]['p99'])} ms")
    print(f"  loadgen p99 minus raw socket p99: {ms(res['loadgen_p99_inflation_s'])} ms; "
          f"minus bare aiohttp p99: {ms(res['loadgen_p99_over_bare_aiohttp_s'])} ms")


def test_loadgen_ttfa_overhead_c64(benchmark, tmp_path, timing_target):
    res: dict = {}
    benchmark.pedantic(lambda: res.update(_compare(tmp_path, hold_s=0.5, requests=320, rounds=3)),
                       rounds=1, iterations=1)
    loadgen, raw = res["loadgen"]["overhead_s"], res["raw"]["overhead_s"]
    res["target_met"] = loadgen["p99"] <= TARGET_P99_S
    # With send_t stamped at the socket write, the client's own share of TTFA is the receive leg:
    # server write -> client stamp (loopback delivery, a few tens of us, + the client's wake-up and reading)
    receive = res["loadgen"]["server_write_to_client_read_s"]
    res["client_receive_leg_target_met"] = receive["p99"] <= TARGET_P99_S
    benchmark.extra_info.update(res)
    _report("paced null server", res)
    print(f"  target p99 <= {TARGET_P99_S * 1e3:.0f} ms: {'met' if res['target_met'] else 'NOT met'} overall"
          f" (server and kernel included); {'met' if res['client_receive_leg_target_met'] else 'NOT met'} by the"
          f" client's receive leg (p99 {receive['p99'] * 1e3:.3f} ms)")
    assert all(res[name]["errors"] == 0 for name in CLIENTS), [res[name]["first_errors"] for name in CLIENTS]
    # Regression guard that survives a shared, noisy machine: the median stays within a few raw-client
    # medians (blocking file IO on the event loop, for one, multiplies it several-fold).
    timing_target(loadgen["p50"] <= 6 * raw["p50"] + 0.001,
                  f"TTFA overhead p50 {loadgen['p50'] * 1e3:.3f} ms > 6x raw {raw['p50'] * 1e3:.3f} ms + 1 ms")
    # and the tail: requests stamped long before they left (a 64-wide start built in one loop tick on
    # Python < 3.12) put p99 at 9-19 ms here against a raw p99 of 3-7; now 2-4 ms against 1.3-1.7
    timing_target(loadgen["p99"] <= 4 * raw["p99"] + 0.002,
                  f"TTFA overhead p99 {loadgen['p99'] * 1e3:.3f} ms > 4x raw {raw['p99'] * 1e3:.3f} ms + 2 ms")
    if os.environ.get("S2ST_LOADGEN_ENFORCE_TARGET") == "1":  # on a quiet machine
        assert res["target_met"], f"load generator TTFA overhead p99 {loadgen['p99'] * 1e3:.3f} ms > 1 ms"


def test_loadgen_capacity_c64_at_once(benchmark, tmp_path):
    res: dict = {}
    benchmark.pedantic(lambda: res.update(_compare(tmp_path, hold_s=0.0, requests=1000, rounds=3)),
                       rounds=1, iterations=1)
    benchmark.extra_info.update(res)
    _report("null server answering at once (saturated closed loop: TTFA is queueing)", res)
    assert all(res[name]["errors"] == 0 for name in CLIENTS), [res[name]["first_errors"] for name in CLIENTS]


def test_loadgen_capacity_openai_vs_own_c64_at_once(benchmark, tmp_path):
    """Client capacity (req/s) of run_load with protocol openai (raw chunked PCM) beside the own protocol
    (SSE + base64), against the same zero-time null server, alternated round by round (a ratio within one
    run: the shared machine's noise falls on both)."""
    res: dict = {"concurrency": CONCURRENCY, "hold_s": 0.0, "requests_per_round": 1000, "rounds": 3}
    rates: dict[str, list[float]] = {"s2st": [], "openai": []}
    ttfa: dict[str, list[float]] = {"s2st": [], "openai": []}

    def run() -> None:
        proc, port = _start_null_server(tmp_path, 0.0)
        try:
            for k in range(res["rounds"]):
                for protocol in (("s2st", "openai") if k % 2 == 0 else ("openai", "s2st")):
                    rows, errors, rate = asyncio.run(_with_loadgen(port, tmp_path / f"{protocol}{k}", 1000, protocol))
                    assert not errors, errors[:3]
                    rates[protocol].append(rate)
                    ttfa[protocol] += [first - sent for _, sent, first in rows]
        finally:
            proc.kill()
            proc.wait()

    benchmark.pedantic(run, rounds=1, iterations=1)
    from pytest_s2st.service.stats import describe

    for protocol in rates:
        res[protocol] = {"requests_per_s": float(np.mean(rates[protocol])), "per_round": rates[protocol],
                         "ttfa_s": describe(ttfa[protocol])}
    res["openai_over_own_capacity"] = res["openai"]["requests_per_s"] / res["s2st"]["requests_per_s"]
    res["load_average_1m"] = os.getloadavg()[0]
    res["method"] = "measured requests / measured wall of run_load, c=64 closed loop, zero-time null server"
    benchmark.extra_info.update(res)
    print(f"\nclient capacity at c={CONCURRENCY} (zero-time null server, load avg {res['load_average_1m']:.1f}): "
          f"own protocol {res['s2st']['requests_per_s']:.0f} req/s, openai {res['openai']['requests_per_s']:.0f} req/s "
          f"(ratio {res['openai_over_own_capacity']:.2f})")


def _serve_demo_tone(tmp_path: Path, delay_s: float) -> tuple[subprocess.Popen, str]:
    identity = tmp_path / f"serve-{delay_s}.json"
    proc = subprocess.Popen([sys.executable, "-m", "pytest_s2st.cli.serve", "--demo-tone", "--demo-delay-s",
                             str(delay_s), "--port", "0", "--queue-size", "64", "--identity-output", str(identity)])
    deadline = time.monotonic() + 60
    while not identity.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("s2st-serve did not start")
        time.sleep(0.05)
    return proc, f"http://127.0.0.1:{json.loads(identity.read_text())['port']}"


async def _sdk_ttfa(base: str, workload: list[dict], concurrency: int, requests: int) -> tuple[list, list]:
    """A plain timed loop of the official openai SDK (AsyncOpenAI, ``concurrency`` workers) -> (TTFA from just
    before create(), TTFA from its HTTP client's request hook, i.e. after the SDK built the request), each
    to the first non-empty piece of iter_bytes()."""
    import openai

    out: list[float] = []
    hooked: list[float] = []
    sent: dict = {}

    async def on_request(request) -> None:  # httpx event hook: the request is built, about to be sent
        sent[asyncio.current_task()] = time.perf_counter()

    todo = iter(range(requests))
    http = openai.DefaultAsyncHttpxClient(event_hooks={"request": [on_request]})
    async with openai.AsyncOpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=60,
                                  http_client=http) as client:
        async def worker() -> None:
            for i in todo:
                item = workload[i % len(workload)]
                t = time.perf_counter()
                async with client.audio.speech.with_streaming_response.create(
                        model="demo-tone", voice=item["voice"], input=item["text"], response_format="pcm",
                        extra_body={"language": item["language"], "stream": True}) as response:
                    first = None
                    async for chunk in response.iter_bytes():
                        if chunk and first is None:
                            first = time.perf_counter()
                out.append(first - t)
                hooked.append(first - sent.pop(asyncio.current_task()))

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return out, hooked


def test_ttfa_agrees_with_the_openai_sdk(benchmark, tmp_path, timing_target):
    """TTFA p50 of run_load (protocol openai) vs a plain timed loop of the official openai SDK on the same
    reference server (s2st-serve --demo-tone, 20 ms of model time) and the shipped workload, at c=1 and
    c=8, alternated round by round. The issue's bar: agree within 2 ms at c=1."""
    from pytest_s2st.service.client import run_load
    from pytest_s2st.service.stats import describe
    from pytest_s2st.workload import load_workload

    workload = load_workload()
    res: dict = {"server": "s2st-serve --demo-tone --demo-delay-s 0.02", "rounds": 3, "requests_per_round": 24}
    pooled = {(c, who): [] for c in (1, 8) for who in ("loadgen", "sdk", "sdk_hook")}

    def run() -> None:
        proc, base = _serve_demo_tone(tmp_path, 0.02)
        try:
            for k in range(res["rounds"]):
                for c in (1, 8):
                    for who in (("loadgen", "sdk") if k % 2 == 0 else ("sdk", "loadgen")):
                        if who == "sdk":
                            asyncio.run(_sdk_ttfa(base, workload, c, c))  # warm-up, as run_load's
                            whole, hooked = asyncio.run(_sdk_ttfa(base, workload, c, res["requests_per_round"]))
                            pooled[(c, "sdk")] += whole
                            pooled[(c, "sdk_hook")] += hooked
                            continue
                        result = asyncio.run(run_load(base, workload, c, out_dir=tmp_path / f"lg{k}-{c}",
                                                      warmups=c, requests=res["requests_per_round"], timeout_s=60,
                                                      protocol="openai"))
                        assert all(r["status"] == "ok" for r in result.records), result.records[0]["error"]
                        pooled[(c, who)] += [r["first_audio_t"] - r["send_t"] for r in result.measured]
        finally:
            proc.kill()
            proc.wait()

    benchmark.pedantic(run, rounds=1, iterations=1)
    for c in (1, 8):
        lg, sdk, hook = (describe(pooled[(c, who)]) for who in ("loadgen", "sdk", "sdk_hook"))
        res[f"c{c}"] = {"loadgen_ttfa_s": lg, "sdk_ttfa_s": sdk, "sdk_from_request_hook_ttfa_s": hook,
                        "p50_difference_s": sdk["p50"] - lg["p50"],
                        "p50_difference_from_request_hook_s": hook["p50"] - lg["p50"]}
        print(f"\nc={c}: TTFA p50 loadgen {lg['p50'] * 1e3:.3f} ms; openai SDK {sdk['p50'] * 1e3:.3f} ms from create()"
              f" ({(sdk['p50'] - lg['p50']) * 1e3:+.3f}), {hook['p50'] * 1e3:.3f} ms from its request hook"
              f" ({(hook['p50'] - lg['p50']) * 1e3:+.3f}); p99 {lg['p99'] * 1e3:.3f} / {sdk['p99'] * 1e3:.3f} / "
              f"{hook['p99'] * 1e3:.3f} ms; n {lg['n']}/{sdk['n']}")
    res["c1_within_2ms"] = abs(res["c1"]["p50_difference_from_request_hook_s"]) <= 0.002
    res["load_average_1m"] = os.getloadavg()[0]
    res["method"] = ("TTFA = send -> first whole PCM sample (run_load) vs before create() -> first iter_bytes piece "
                     "(SDK), and from the SDK's httpx request hook (request built, before its send); p50 over all "
                     "rounds, the two clients alternated")
    benchmark.extra_info.update(res)
    # the SDK's own request building (httpx) is inside its number: it can only read later, never much earlier
    timing_target(res["c1"]["p50_difference_s"] > -0.002,
                  f"our TTFA p50 reads {-res['c1']['p50_difference_s'] * 1e3:.3f} ms later than the SDK's")
    if os.environ.get("S2ST_LOADGEN_ENFORCE_TARGET") == "1":  # on a quiet machine
        assert res["c1_within_2ms"], res["c1"]


if __name__ == "__main__" and len(sys.argv) == 4 and sys.argv[1] == "null-server":
    null_server(sys.argv[2], float(sys.argv[3]))
