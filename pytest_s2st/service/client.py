"""Load generator for the speech service: closed-loop concurrency, per-request evidence, bounded faults.

Transport (one object, chosen by name: wire.TRANSPORTS, transport.py): by default http1.Connection, a
lean HTTP/1.1 client over asyncio streams, one keep-alive connection per worker (see http1.py for why not
aiohttp's client on the timed path); connect and every read are bounded, and so is each whole request.
The untimed GETs (/identity, /v1/models: server_facts.py) go over http1.py too. How the load runs is one
dataclass, options.LoadOptions, passed through.

``run_load`` sends warm-ups (ids c<conc>-w<i>), then measured requests (c<conc>-r<i>), keeping
``concurrency`` in flight, cycling the workload. Every request ends as one record (record.RequestRecord)
appended to out_dir/requests.jsonl (flushed per record) and, when it completed, out_dir/wav/<id>.wav (finished
first, under a temp name till then). Each response's PCM streams to its WAV and its hash as it arrives
(evidence.py: one writer thread, off the event loop that stamps chunk arrivals), so a stream costs a
bounded window, not its audio; run_load returns once it has written everything, last its
level's entry in out_dir/summary.json (the caller's ``extra`` merged in; nobody else writes it). Any failure
(connection refused, HTTP error, busy, broken or malformed stream, stall, killed server, run deadline)
is that request's status "error" with a reason; the others go on; the run ends within its bound.

Bounded memory: every byte a server sends is bounded from outside, so a server that never ends a
response costs a bounded amount. ``max_audio_s`` (default 600 s of audio per request) bounds the PCM
(max_audio_s * sample_rate * 2 bytes; 48 kHz until the stream names its rate), one SSE event (its
base64, never over 16 MiB), one HTTP chunk's announced size and the number of events; http1 bounds the
response headers (64 KiB). A crossed bound is that request's error, naming the limit and its value.

Clock: time.perf_counter(); record times are seconds since the run start (t0_perf), plus a
wall-clock ``send_wall`` (epoch seconds). ``start_t``: the client began the request (a new
connection's connect comes after it); ``send_t``: its bytes were handed to the socket, so the
client's own work is not in the server's numbers. TTFA = send_t -> first SSE event with a non-empty
PCM sample (a whole int16 sample, >= 2 bytes), stamped when the body piece that ends it is read,
before decoding.

Protocols: "s2st" (this project's SSE dialect above) or "openai" (OpenAI's speech API, as vLLM-Omni
serves it; openai_api.py): the answer is read by its Content-Type — raw int16 PCM (every body piece an
audio arrival), OpenAI's SSE events (speech.audio.delta / speech.audio.done) or a WAV (one arrival at
its end: TTFA = the whole response). Each protocol is one object (wire.PROTOCOLS: its request, its
readers by Content-Type, its reasons' words); nothing here branches on its name. Records have the same
fields either way. An answer in neither shape is that request's
error naming what was expected and what came; so is one whose X-Request-Id names another request of the
run (a server that sent one answer more than asked: docs/service.md, "Lies a server can tell").

Load: closed loop (``concurrency`` workers, each sending its next request when its last one ends), or,
with an open arrival process (``LoadOptions.arrival``, arrivals.py: by default seeded gamma arrivals as
``vllm bench serve``), open loop for the measured phase, the concurrency cap still applying.
"""
from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from yarl import URL

from .. import runs
from ..errors import S2STError
from . import http1, wire
from . import openai_api as oa
from .evidence import AudioSink, Writer
from .options import MAX_AUDIO_S, LoadOptions
from .readers.limits import Fail, Limits
from .readers.response import Seen, Stream, short
from .record import LEVEL_KEYS, WORKLOAD_FIELDS, LevelEntry, RequestRecord, set_rates
from .server_facts import server_facts
from .stats import summarize
from .transport import Response, Slot, Transport, not_an_answer, request_head

LINGER_MIN_S, LINGER_MAX_S = 0.05, 2.0  # the watch for answers nobody asked for, after the measured phase (_Run)

__all__ = ["LoadOptions", "LoadResult", "MAX_AUDIO_S", "request_head", "run_load", "speech_url"]


@dataclass
class LoadResult:
    endpoint: str
    concurrency: int
    out_dir: Path
    records: list[dict]  # this run's records (RequestRecord.to_dict: warm-ups and measured), in completion order
    wall_s: float | None  # wall seconds of the measured phase
    warmup_wall_s: float
    summary: dict
    identity: dict | None
    t0_perf: float  # perf_counter() at run start; record times are relative to it
    started_wall: float
    timed_out: bool = False
    identity_error: str | None = None
    unasked: list[str] = field(default_factory=list)  # bytes that came unasked on kept connections (Transport.look)

    @property
    def measured(self) -> list[dict]:
        return [r for r in self.records if not r["warmup"]]


def speech_url(endpoint: str) -> URL:
    """The endpoint in its one spelling (runs.normalize_endpoint), as a URL; S2STError when unusable."""
    return URL(runs.normalize_endpoint(endpoint), encoded=True)


@dataclass
class _Run:
    url: URL
    concurrency: int
    out_dir: Path
    opts: LoadOptions  # checked (LoadOptions.checked): read_timeout_s filled, rates floats
    t0: float
    model: str | None = None  # the request's "model", where the protocol sends one (None: not sent)
    protocol: wire.Protocol = field(init=False)
    transport: Transport = field(init=False)
    limits: Limits = field(init=False)
    slots: list[Slot] = field(init=False)  # one per worker
    records: list[RequestRecord] = field(default_factory=list)
    writer: Writer = field(init=False)  # the evidence-writer thread (evidence.py)
    pcm_rate: int = field(init=False)  # of answers that name no rate (Protocol.pcm_rate)
    ids: set[str] = field(default_factory=set)  # every request id this run has begun
    unasked: list[str] = field(default_factory=list)  # Transport.look's lines

    def __post_init__(self) -> None:
        self.limits = Limits(self.opts.max_audio_s)
        self.protocol = wire.protocol(self.opts.protocol)
        self.pcm_rate = self.protocol.pcm_rate(self.opts)
        self.transport = wire.transport(self.opts.transport)(self)
        self.slots = [Slot() for _ in range(self.concurrency)]
        self.writer = Writer(self.out_dir)

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def keep(self, record: RequestRecord, sink: AudioSink | None = None, completed: bool = False) -> None:
        """Hand the record to the writer thread, in order: a completed response's WAV is finished
        (hash checked, header written, renamed) before its record; a failed one's part file removed."""
        self.records.append(record)
        self.writer.keep(record, sink, completed)

    def new_record(self, item: dict, index: int, warmup: bool) -> RequestRecord:
        return RequestRecord(runs.request_id(self.concurrency, index, warmup), self.concurrency, index, warmup,
                             item.get("id"), {key: item[key] for key in WORKLOAD_FIELDS if key in item})

    async def request(self, slot: Slot, item: dict, index: int, warmup: bool, due_t: float | None = None) -> None:
        record = self.new_record(item, index, warmup)
        record.due_t = due_t
        self.ids.add(record.id)
        body = self.body(item)
        pcm = self.writer.sink(record.id)
        seen = Seen()
        try:
            await http1.within(self.opts.timeout_s, self.transport.exchange(
                slot, body, record, lambda resp: self._answer(resp, record, pcm, seen)))
            self._finish(record, pcm)
        except asyncio.CancelledError:
            slot.drop()
            record.error = seen.then("cancelled: the run's total time bound ran out before this request finished")
            self.keep(record, pcm)
            raise
        except Fail as exc:
            record.error = str(exc)
        except http1.Stalled:
            record.error = seen.then(f"read stalled: no data for {self.opts.read_timeout_s:g} s")
        except asyncio.TimeoutError:
            record.error = seen.then(f"timeout: no complete response within {self.opts.timeout_s:g} s")
        except http1.Disconnected as exc:
            record.error = seen.then(str(exc))
        except http1.TooLarge as exc:
            record.error = seen.then(f"response too large: {exc}")
        except http1.ProtocolError as exc:
            record.error = seen.then(f"response broken mid-stream: {exc}" if seen.status is not None
                                        else f"response broken: {exc}")
        except OSError as exc:  # e.g. reset by a server that died
            record.error = seen.then(f"connection lost: {exc}")
        except Exception as exc:  # a client bug must not take the other requests down; record it
            record.error = f"client error {type(exc).__name__}: {exc}"
        else:
            self.keep(record, pcm, completed=True)  # its WAV is finished first, then the record
            return
        if seen.foreign and not record.chunks and "of type" not in record.error:
            # the request failed (a timeout, a bound) on a stream of another protocol's events: say so
            record.error += (f"; the response held no events of the expected type ({self.protocol.expected()}) "
                                f"but {seen.names()}{self.protocol.hint(seen.foreign)}")
        slot.drop()  # a failed exchange leaves its connection in an unknown state
        self.keep(record, pcm)

    def body(self, item: dict) -> dict:
        return self.protocol.body(item, self.model, self.opts.extra_body)

    async def _answer(self, resp: Response, record: RequestRecord, pcm: AudioSink, seen: Seen) -> None:
        """A response's head, then its body by the protocol's reader of its Content-Type (any transport)."""
        record.http_status = resp.status
        seen.head_read(resp.status, resp.seen_type)
        why = not_an_answer(resp.status, resp.headers)
        echoed = resp.headers.get("x-request-id")
        if not why and echoed not in (None, record.id) and echoed in self.ids:
            # a server that echoes the id (vLLM's --enable-request-id-headers) says whose answer this is:
            # one sent unasked, before this request, is read as this one's where the two cross on the wire
            why = (f"the answer names X-Request-Id {short(echoed)}: it answers that request, not this one "
                   f"(the server sent one answer more than asked)")
        if why:
            resp.refuse()  # its body is not read
            raise Fail(why)
        if resp.status != 200:
            raw = await resp.head_of_body(2000)
            raise Fail(f"HTTP {resp.status}: {oa.error_message(raw)}"[:500])
        protocol = self.protocol
        reader = protocol.reader(resp.content_type)
        if reader is None:
            raise Fail(f"expected {protocol.wanted} for protocol {protocol.name}; got "
                       f"{await resp.describe()}{protocol.wrong_type(resp.content_type)}")
        await reader(Stream(resp, record, pcm, seen, protocol, self.limits, self.pcm_rate, self.now,
                            self.writer.room))

    def _finish(self, record: RequestRecord, pcm: AudioSink) -> None:
        samples = pcm.size // 2
        server = record.server_done or {}
        if not samples:
            raise Fail("response carried no audio")
        if server.get("samples") is not None and server["samples"] != samples:
            raise Fail(f"done event says {server['samples']} samples, received {samples}")
        # the hash is checked, and the WAV finished, by the writer thread (evidence.Writer)
        record.status, record.audio_seconds = "ok", samples / record.sample_rate

    async def measure(self, workload: list[dict], warmups: int, count: int,
                      deadline: float | None) -> tuple[bool, float, float]:
        """Warm-ups, then the measured phase: (timed_out, warm-up wall s since t0, measured wall s)."""
        self.writer.open()
        await self.transport.start()
        try:
            timed_out = await self.phase(workload, warmups, True, deadline)
            # the warm-ups' evidence is on disk before the clock starts: its writing does not
            # compete with the measured phase's first requests
            await asyncio.wrap_future(self.writer.barrier())
            warmup_wall = time.perf_counter() - self.t0
            t_measured = time.perf_counter()
            timed_out = await self.phase(workload, count, False, deadline) or timed_out
            wall = time.perf_counter() - t_measured
            if not timed_out:
                self.unasked = await self.transport.look(self.slots, self.linger_s())
        finally:
            for slot in self.slots:
                slot.drop()
            await self.transport.close()
            await asyncio.to_thread(self.writer.close)  # every queued record and WAV is on disk
        if self.writer.error:
            raise S2STError(f"{self.out_dir / runs.REQUESTS}: {self.writer.error}")
        return timed_out, warmup_wall, wall

    def linger_s(self) -> float:
        """How long the kept connections are watched after the last answer: 1.5x the slowest answer (an answer
        sent unasked comes within about one answer's time), 0.05-2 s."""
        took = [r.done_t - r.send_t for r in self.records if r.done_t is not None and r.send_t is not None]
        return min(LINGER_MAX_S, max(LINGER_MIN_S, 1.5 * max(took, default=0.0)))

    async def phase(self, workload: list[dict], count: int, warmup: bool, deadline: float | None) -> bool:
        """Run ``count`` requests with ``concurrency`` in flight; True when the deadline cut it short.
        Closed loop (warm-ups, and a closed arrival process: rate inf): each worker sends its next request when
        its last one ends. Open loop (measured phase, an open arrival process): request i is due at the
        schedule's offset (``opts.arrival.schedule``) and is sent then, or as soon as one of the ``concurrency``
        workers' connections is free (the cap still applies); its ``due_t`` is saved in its record."""
        if count <= 0:
            return False
        pending_idx = iter(range(count))
        started: set[int] = set()

        async def worker(slot: Slot) -> None:
            for index in pending_idx:
                started.add(index)
                await self.request(slot, workload[index % len(workload)], index, warmup)

        free: asyncio.Queue = asyncio.Queue()

        async def arrival(index: int, due: float) -> None:
            delay = due - self.now()
            if delay > 0:
                await asyncio.sleep(delay)
            slot = await free.get()  # the concurrency cap: a free worker connection
            try:
                started.add(index)
                await self.request(slot, workload[index % len(workload)], index, warmup, due_t=due)
            finally:
                free.put_nowait(slot)

        timeout = None if deadline is None else deadline - time.perf_counter()
        tasks: list[asyncio.Task] = []
        cut_short = True  # unless every worker finishes in time
        opts = self.opts
        if (timeout is None or timeout > 0) and not warmup and not opts.arrival.closed:
            for slot in self.slots[: min(self.concurrency, count)]:
                free.put_nowait(slot)
            start = self.now()
            offsets = opts.arrival.schedule(count)
            tasks = [asyncio.create_task(arrival(i, start + offset)) for i, offset in enumerate(offsets)]
        elif timeout is None or timeout > 0:  # a spent bound sends nothing
            for slot in self.slots[: min(self.concurrency, count)]:
                tasks.append(asyncio.create_task(worker(slot)))
                # Let this worker's request reach the socket before the next one is begun: 64 workers
                # stamped in one loop tick, then sent in another, would carry each other's build time
                # (measured with aiohttp's client: the first requests of a c=64 phase left ~7 ms late).
                await asyncio.sleep(0)
        if tasks:
            if deadline is not None:  # the staggered start took some of the bound
                timeout = max(0.0, deadline - time.perf_counter())
            _, pending = await asyncio.wait(tasks, timeout=timeout)
            cut_short = bool(pending)
        for task in tasks:
            task.cancel()  # no-op on finished ones
        await asyncio.gather(*tasks, return_exceptions=True)
        for task in tasks:  # a worker that died of a bug is a bug, not a request error
            if not task.cancelled() and task.exception() is not None:
                raise task.exception()
        for index in range(count):
            if index not in started:
                record = self.new_record(workload[index % len(workload)], index, warmup)
                record.error = "not sent: the run's total time bound ran out"
                self.keep(record)
        return cut_short


def _check_out_dir(out_dir: Path, concurrency: int) -> None:
    path = out_dir / runs.REQUESTS
    if path.exists() and path.stat().st_size:
        with open(path, "rb") as fh:
            fh.seek(-1, 2)
            if fh.read(1) != b"\n":
                raise S2STError(f"{path}: ends with a truncated record (a killed run); use a new out_dir")
        if any(r.get("concurrency") == concurrency for r in runs.read_records(out_dir)):
            raise S2STError(f"{path}: already holds records for concurrency {concurrency}; use a new out_dir")



def _check_workload(workload: list[dict]) -> None:
    """Every item can be sent: a request that cannot be built is refused here, before any is sent."""
    if not workload:
        raise S2STError("workload: no items")
    for i, item in enumerate(workload):
        if not isinstance(item, dict):
            raise S2STError(f"workload item {i}: expected a dict, got {type(item).__name__}")
        try:
            json.dumps({key: item[key] for key in WORKLOAD_FIELDS if key in item}, ensure_ascii=False).encode()
        except (TypeError, ValueError) as exc:  # UnicodeEncodeError: a lone surrogate
            raise S2STError(f"workload item {i} ({short(item.get('id'))}): cannot be sent as UTF-8 JSON "
                            f"({type(exc).__name__}: {short(str(exc))})") from None


async def run_load(endpoint: str, workload: list[dict], concurrency: int, options: LoadOptions | None = None, *,
                   out_dir: Path, **fields: Any) -> LoadResult:
    """Warm-ups, then ``requests`` (default: one pass over the workload) measured requests.

    ``endpoint``: http(s)://host:port, the protocol's path (/v1/audio/speech) when none is given;
    it is saved, and compared, as runs.normalize_endpoint spells it. How the load runs is ``options``
    (a LoadOptions, see there), each of its fields also accepted as a keyword (``timeout_s=5.0``,
    ``protocol="openai"``, ...) over it. The level's entry of summary.json, which run_load alone
    writes, once, gets ``options.extra`` (e.g. {"policy": ..., "policy_fingerprint": ...}) merged in.
    """
    opts = LoadOptions.of(options, **fields)
    _check_workload(workload)
    opts = opts.checked(concurrency, LEVEL_KEYS)
    protocol = wire.protocol(opts.protocol)
    protocol.pcm_rate(opts)  # a bad asked rate is refused before any folder or request
    url = speech_url(endpoint)
    endpoint = str(url)
    out_dir = Path(out_dir)
    (out_dir / runs.WAV_DIR).mkdir(parents=True, exist_ok=True)
    _check_out_dir(out_dir, concurrency)
    count = len(workload) if opts.requests is None else opts.requests

    started_wall, t0 = time.time(), time.perf_counter()
    deadline = None if opts.total_timeout_s is None else t0 + opts.total_timeout_s
    identity, identity_error, model, model_source = await server_facts(url, protocol, opts.extra_body,
                                                                       opts.timeout_s)
    run = _Run(url, concurrency, out_dir, opts, t0, model)
    timed_out, warmup_wall, wall = await run.measure(workload, opts.warmups, count, deadline)

    records = [record.to_dict() for record in run.records]
    summary = summarize(records, wall, opts.targets)
    set_rates(summary, records, count, wall, opts.arrival)
    level = LevelEntry(
        concurrency=concurrency, summary=summary, wall_s=wall, warmup_wall_s=warmup_wall, warmups=opts.warmups,
        requests=count, timeout_s=opts.timeout_s, read_timeout_s=opts.read_timeout_s,
        total_timeout_s=opts.total_timeout_s, max_audio_s=opts.max_audio_s, timed_out=timed_out,
        started_wall=started_wall, t0_perf=t0, identity_error=identity_error, unasked=run.unasked,
        protocol=opts.protocol, arrival=opts.arrival.level_entry(),
        protocol_entry=protocol.level_entry(opts, model, model_source), extra=dict(opts.extra or {}),
    )
    runs.write_summary(out_dir, summary, concurrency=concurrency, endpoint=endpoint, identity=identity,
                       extra=level.to_dict())
    return LoadResult(
        endpoint=endpoint, concurrency=concurrency, out_dir=out_dir, records=records, wall_s=wall,
        warmup_wall_s=warmup_wall, summary=summary, identity=identity, t0_perf=t0, started_wall=started_wall,
        timed_out=timed_out, identity_error=identity_error, unasked=run.unasked,
    )
