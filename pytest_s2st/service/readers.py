"""The load generator's readers, one per wire format, chosen by (protocol, Content-Type) in ``READERS``.

A reader takes a ``Stream`` (one 200 response: its body's pieces as they arrive, the record to fill, the
sink its PCM goes to, the bounds) and fills the record: audio arrivals ``chunks`` [t, nbytes] stamped
when each body piece is read, ``first_audio_t`` at the piece that completes the first whole int16
sample, ``done_t``, ``sample_rate``, ``streaming`` and ``server_done`` (what the server says it sent:
samples / sample_rate / pcm_sha256, checked later), or raises ``Fail`` with the request's reason.
A new wire format is one new reader and one row of the table.

- own SSE ("s2st"): {"type": "audio", "pcm": base64, "sample_rate"} events, then {"type": "done", ...};
- OpenAI SSE: speech.audio.delta (base64 "audio") events, then speech.audio.done (or [DONE]);
- raw PCM (OpenAI's pcm): every body piece an arrival; the rate from the Content-Type, else the run's;
- WAV: audio only when whole: one arrival at the body's end (TTFA = the whole response).

Every byte a reader holds is bounded from ``max_audio_s`` (``Limits``): the audio, one SSE line and
event, one HTTP chunk's announced size, the number of events or arrivals.
"""
from __future__ import annotations

import base64
import functools
import json
from dataclasses import dataclass
from typing import Any, AsyncIterator, Awaitable, Callable

from . import openai_api as oa
from ..inputs import loads_finite
from .evidence import AudioSink

_MAX_EVENT = 16 * 1024 * 1024  # one SSE event, whatever max_audio_s allows
_EVENT_SLACK = 4096  # the JSON around one event's base64 PCM
_DEFAULT_RATE = 48_000  # the PCM bound's rate until the stream names its own
_MAX_RATE = 384_000  # a higher sample_rate is malformed (it would lift the PCM bound)
_EVENTS_PER_AUDIO_S = 100  # one per 10 ms of the allowed audio: finer than streaming TTS sends


class Fail(Exception):
    """A request-level failure with the reason to record."""


@dataclass(frozen=True)
class Limits:
    """What one response may make the client hold, all from ``max_audio_s``."""
    max_audio_s: float

    @functools.lru_cache(maxsize=16)  # (self, rate) -> bounds: computed once per rate, not per response
    def at(self, rate: int | None) -> tuple[int, int, int]:
        """(PCM bytes, SSE event bytes, HTTP chunk bytes) at ``rate``."""
        return self.pcm_bytes(rate), self.event_bytes(rate), self.chunk_bytes(rate)

    def pcm_bytes(self, rate: int | None) -> int:
        return 2 * int(self.max_audio_s * (rate or _DEFAULT_RATE))

    def event_bytes(self, rate: int | None) -> int:
        """One SSE event: the base64 of one chunk holding all the allowed audio, at most 16 MiB."""
        return min(_MAX_EVENT, 4 * -(-self.pcm_bytes(rate) // 3) + _EVENT_SLACK)

    def chunk_bytes(self, rate: int | None) -> int:
        """One HTTP chunk: a server may put the whole response in one."""
        return 4 * -(-self.pcm_bytes(rate) // 3) + 64 * 1024

    @property
    def events(self) -> int:
        return int(self.max_audio_s * _EVENTS_PER_AUDIO_S) + 100

    def why(self, rate: int | None) -> str:
        return f"max_audio_s={self.max_audio_s:g} at {rate or _DEFAULT_RATE} Hz"


class Events:
    """SSE framing: body bytes in, whole events' data out; a line and an event are bounded."""

    def __init__(self, limits: Limits) -> None:
        self.limits, self.rate = limits, None  # the rate the bound follows, once the stream names it
        self.limit = limits.at(None)[1]
        self.done: dict | None = None  # the done event, once read: the rest of the body is drained
        self._pending = bytearray()
        self._data: list[bytes] = []
        self._size = 0

    def _check(self, n: int, what: str) -> None:
        if n > self.limit:
            raise Fail(f"{what} passed max_event_bytes={self.limit} ({self.limits.why(self.rate)})")

    def feed(self, piece: bytes) -> list[bytes]:
        if b"\n" not in piece:
            self._pending += piece
            self._check(len(self._pending), "an SSE line")
            return []
        if self._pending:
            self._pending += piece
            piece = bytes(self._pending)
        *lines, rest = piece.split(b"\n")  # usually the piece holds whole events: no copy before this
        self._pending = bytearray(rest)
        self._check(len(rest), "an SSE line")
        events = []
        for line in lines:
            if line.endswith(b"\r"):
                line = line[:-1]
            if line.startswith(b"data:"):
                value = line[6:] if line.startswith(b"data: ") else line[5:]
                self._size += len(value) + 1
                self._check(self._size, "an SSE event")
                self._data.append(value)
            elif not line and self._data:  # comments / other fields are ignored; events end at a blank line
                events.append(b"\n".join(self._data))
                self._data, self._size = [], 0
        return events


class Seen:
    """What a response's body showed, for a failure's reason: its first bytes, how many SSE events it
    held, and the events of other types, counted by name (at most _MAX_NAMES names)."""
    _HEAD, _MAX_NAMES = 80, 8

    def __init__(self) -> None:
        self.head = b""
        self.events = 0
        self.foreign: dict[str, int] = {}

    def body(self, piece: bytes) -> None:
        if len(self.head) < self._HEAD:
            self.head += piece[: self._HEAD - len(self.head)]

    def other(self, name: str) -> None:
        if name in self.foreign or len(self.foreign) < self._MAX_NAMES:
            self.foreign[name] = self.foreign.get(name, 0) + 1

    def names(self) -> str:
        """'1,204 events of type 'audio', 1 of type 'done'' (most first)."""
        counts = sorted(self.foreign.items(), key=lambda kv: -kv[1])
        return ", ".join(f"{n:,} {'events' if n != 1 else 'event'} of type {name}" if i == 0 else f"{n:,} of type {name}"
                         for i, (name, n) in enumerate(counts))

    def first_bytes(self) -> str:
        return f"first bytes: {self.head!r}" if self.head else "an empty body"


def event_name(event: dict) -> str:
    """An event's name for a reason: its type, or, without one, its keys."""
    if "type" in event:
        return repr(str(event["type"])[:60])
    keys = ", ".join(repr(str(k)[:30]) for k in list(event)[:5])
    return f"none (keys {keys})" if keys else "none (an empty object)"


def short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def expected(protocol: str) -> str:
    """The event types a protocol's SSE answer must hold, for reasons."""
    types = f"{oa.DELTA}/{oa.DONE}" if protocol == oa.OPENAI else "audio/done"
    return f"{types} for protocol {protocol}"


def hint_events(protocol: str, names: Any) -> str:
    """Event names (repr'd) that belong to the other protocol -> a hint to switch."""
    other = oa.OPENAI if protocol == oa.OWN else oa.OWN
    looks_other = (any(t.startswith("'speech.") for t in names) if protocol == oa.OWN
                   else any(t in ("'audio'", "'done'") for t in names))
    return f" (this server may speak protocol {other}: try --s2st-protocol {other})" if looks_other else ""


class Body:
    """What a reader needs of a transport's response: its Content-Type, its headers (lower-case names),
    its body's pieces as they arrive, and a bound on one HTTP chunk's announced size that it may tighten."""
    content_type: str
    headers: dict[str, str]
    max_chunk_bytes: int

    def pieces(self) -> AsyncIterator[bytes]:
        raise NotImplementedError


@dataclass
class Stream:
    """One 200 response being read: what every reader gets."""
    body: Body
    record: dict
    pcm: AudioSink
    seen: Seen
    protocol: str
    limits: Limits
    sample_rate: int  # raw PCM answers that do not name their rate
    now: Callable[[], float]
    room: Callable[[], Awaitable[None]]  # waits while the evidence writer is behind (backpressure)

    def audio(self, chunk: bytes, t: float, rate: int) -> None:
        """One audio arrival of ``chunk`` at ``t``, within the audio and arrival bounds."""
        cap = self.limits.at(rate)[0]
        if self.pcm.size + len(chunk) > cap:
            raise Fail(f"response audio passed max_audio_s={self.limits.max_audio_s:g} ({cap} bytes at {rate} Hz)")
        if len(self.record["chunks"]) >= self.limits.events:
            raise Fail(f"response passed {self.limits.events} audio chunks "
                       f"(max_audio_s={self.limits.max_audio_s:g} allows {_EVENTS_PER_AUDIO_S} per audio second)")
        self.pcm.add(chunk)
        self.record["chunks"].add(t, len(chunk))
        if self.record["first_audio_t"] is None and self.pcm.size >= 2:  # a whole int16 sample has arrived
            self.record["first_audio_t"] = t

    def whole_samples(self, what: str) -> None:
        if self.pcm.size % 2:
            raise Fail(f"{what}: {self.pcm.size} bytes is not whole int16 samples")

    async def events(self, events: Events) -> AsyncIterator[tuple[float, bytes]]:
        """(arrival time, raw event) off the body as it arrives, each piece stamped when read, at most
        limits.events of them. Once the caller sets ``events.done`` the rest of the body is read to its
        end unparsed, so that the connection can carry the next request."""
        count = 0
        async for piece in self.body.pieces():
            t = self.now()
            if events.done is not None:
                continue  # draining
            self.seen.body(piece)
            for raw in events.feed(piece):
                count += 1
                self.seen.events = count
                if count > self.limits.events:
                    raise Fail(f"response passed {self.limits.events} SSE events (max_audio_s="
                               f"{self.limits.max_audio_s:g} allows {_EVENTS_PER_AUDIO_S} per audio second)")
                yield t, raw
                if events.done is not None:
                    break
            await self.room()

    def no_done(self, done: str) -> None:
        """The body ended (as its framing says) without the done event: why, as far as the body shows."""
        if not self.record["chunks"] and self.seen.foreign:
            raise Fail(f"expected SSE events of type {expected(self.protocol)}; got events of type "
                       f"{', '.join(self.seen.foreign)}{hint_events(self.protocol, self.seen.foreign)}")
        if not self.seen.events:
            raise Fail(f"no events of the expected type ({expected(self.protocol)}) in a response that ended "
                       f"cleanly ({self.seen.first_bytes()})")
        raise Fail(f"stream ended before the {done} event (server closed mid-stream)")


Reader = Callable[[Stream], Awaitable[None]]


# --- own SSE ---------------------------------------------------------------------------------------------

def _parse(raw: bytes) -> dict:
    try:
        event = loads_finite(raw)  # NaN/Infinity are not JSON: a done event's value goes into the record
    except (ValueError, RecursionError):  # RecursionError: nested too deep
        raise Fail(f"malformed SSE event: {raw[:80]!r}") from None
    if not isinstance(event, dict):
        raise Fail(f"malformed SSE event (not an object): {raw[:80]!r}")
    return event


def _own_audio(s: Stream, event: dict, t: float) -> None:
    try:
        chunk = base64.b64decode(event["pcm"], validate=True)
    except (KeyError, TypeError, ValueError):  # ValueError: binascii.Error, or non-ASCII text
        raise Fail(f"malformed audio event {short(event.get('index'))}: 'pcm' is not base64") from None
    rate = event.get("sample_rate")
    if isinstance(rate, bool) or not isinstance(rate, int) or not 0 < rate <= _MAX_RATE:
        raise Fail(f"malformed audio event {short(event.get('index'))}: sample_rate {short(rate)}")
    record = s.record
    if record["sample_rate"] not in (None, rate):
        raise Fail(f"sample_rate changed mid-stream: {record['sample_rate']} -> {rate}")
    if len(chunk) % 2:
        raise Fail(f"audio event {short(event.get('index'))}: {len(chunk)} bytes is not whole int16 samples")
    cap = s.limits.at(rate)[0]
    if s.pcm.size + len(chunk) > cap:
        raise Fail(f"response audio passed max_audio_s={s.limits.max_audio_s:g} ({cap} bytes at {rate} Hz)")
    record["sample_rate"] = rate
    s.pcm.add(chunk)
    record["chunks"].add(t, len(chunk))
    if chunk and record["first_audio_t"] is None:
        record["first_audio_t"] = t


async def read_own_sse(s: Stream) -> None:
    """This project's SSE: audio events (base64 PCM, their rate), then the done event (samples, hash)."""
    events = Events(s.limits)
    s.body.max_chunk_bytes = s.limits.at(None)[2]
    record, done = s.record, None
    async for t, raw in s.events(events):
        event = _parse(raw)
        kind = event.get("type")
        if kind == "audio":
            rate = record["sample_rate"]
            _own_audio(s, event, t)
            if rate is None:  # the stream named its rate: the bounds follow it
                events.rate = record["sample_rate"]
                _, events.limit, s.body.max_chunk_bytes = s.limits.at(events.rate)
        elif kind == "done":
            record["done_t"] = t
            done = events.done = event
        elif kind == "error":
            raise Fail(f"server error event: {str(event.get('message'))[:300]}")
        else:
            s.seen.other(event_name(event))  # another protocol's events: named if no audio comes
    if done is None:
        s.no_done("done")
    record["streaming"] = done.get("streaming")
    record["server_done"] = {k: done.get(k) for k in ("samples", "sample_rate", "pcm_sha256")}


# --- OpenAI's speech API: SSE, raw PCM, WAV ------------------------------------------------------------------

async def read_openai_sse(s: Stream) -> None:
    """OpenAI's speech SSE: speech.audio.delta (base64 PCM) events, then speech.audio.done."""
    events = Events(s.limits)
    rate = events.rate = s.sample_rate
    _, events.limit, s.body.max_chunk_bytes = s.limits.at(rate)
    record, done = s.record, None
    async for t, raw in s.events(events):
        try:
            kind, value = oa.parse_event(raw)
        except ValueError as exc:
            raise Fail(str(exc)) from None
        if kind == "delta":
            chunk, named = value
            if named is not None and named != rate:
                if record["chunks"]:
                    raise Fail(f"sample_rate changed mid-stream: {rate} -> {named}")
                rate = events.rate = named
                _, events.limit, s.body.max_chunk_bytes = s.limits.at(rate)
            record["sample_rate"] = rate
            if chunk:
                s.audio(chunk, t, rate)
        elif kind == "done":
            record["done_t"] = t
            done = events.done = value
        elif kind == "error":
            raise Fail(f"server error event: {value}")
        else:
            s.seen.other(event_name(json.loads(raw)))  # parse_event read it as a JSON object
    if done is None:
        s.no_done(oa.DONE)
    record["sample_rate"] = rate
    s.whole_samples("SSE audio")
    record["server_done"] = {}  # OpenAI's answers carry no sample count or hash to check


async def read_raw_pcm(s: Stream) -> None:
    """Raw int16 LE mono PCM: every body piece, stamped as read, is an audio arrival (a piece may split
    a sample; TTFA waits for the first whole one). The body's end is the done."""
    try:
        rate = oa.content_rate(s.body.headers.get("content-type", "")) or s.sample_rate
    except ValueError as exc:
        raise Fail(str(exc)) from None
    s.record["sample_rate"] = rate
    s.body.max_chunk_bytes = s.limits.at(rate)[2]
    async for piece in s.body.pieces():
        t = s.now()
        if piece:
            s.audio(piece, t, rate)
            await s.room()
    s.record["done_t"] = s.now()
    s.whole_samples("raw PCM response")
    s.record["server_done"] = {}


async def read_wav(s: Stream) -> None:
    """A WAV answer is audio only when whole: one arrival, at the body's end (TTFA = the whole response)."""
    reader = oa.WavReader()
    s.body.max_chunk_bytes = s.limits.at(oa.MAX_RATE)[2]
    cap = None
    async for piece in s.body.pieces():
        try:
            data = reader.feed(piece)
        except ValueError as exc:
            raise Fail(f"malformed WAV response: {exc}") from None
        if reader.rate is not None and cap is None:
            cap = s.limits.at(reader.rate)[0]
            s.body.max_chunk_bytes = s.limits.at(reader.rate)[2]
        if cap is not None and s.pcm.size + len(data) > cap:
            raise Fail(f"response audio passed max_audio_s={s.limits.max_audio_s:g} ({cap} bytes at {reader.rate} Hz)")
        s.pcm.add(data)
        await s.room()
    t = s.now()
    try:
        reader.finish()
    except ValueError as exc:
        raise Fail(f"malformed WAV response: {exc}") from None
    s.whole_samples("WAV response")
    s.record.update(sample_rate=reader.rate, done_t=t, streaming=False, server_done={})
    if s.pcm.size:
        s.record["chunks"].add(t, s.pcm.size)
        s.record["first_audio_t"] = t


# (protocol, Content-Type) -> reader; a Content-Type not in a protocol's row is that request's error
READERS: dict[str, dict[str, Reader]] = {
    oa.OWN: {oa.SSE_TYPE: read_own_sse},
    oa.OPENAI: {oa.SSE_TYPE: read_openai_sse, **dict.fromkeys(oa.PCM_TYPES, read_raw_pcm),
                **dict.fromkeys(oa.WAV_TYPES, read_wav)},
}
# what each protocol's error says it expected, when the Content-Type has no reader
WANTED = {oa.OWN: "SSE audio events (text/event-stream)", oa.OPENAI: "raw PCM, SSE audio events or a WAV"}
