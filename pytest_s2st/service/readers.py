"""The load generator's readers, one per answer shape, chosen by the protocol object (wire.py) by Content-Type.

A reader takes a ``Stream`` (one 200 response: its body's pieces as they arrive, the record to fill, the
sink its PCM goes to, the bounds) and fills the record: audio arrivals ``chunks`` [t, nbytes] stamped
when each body piece is read, ``first_audio_t`` at the piece that completes the first whole int16
sample, ``done_t``, ``sample_rate``, ``streaming`` and ``server_done`` (what the server says it sent:
samples / sample_rate / pcm_sha256, checked later), or raises ``Fail`` with the request's reason.
A new wire format is a protocol object in wire.py naming its readers; an SSE one needs only an ``SseDialect``.

- own SSE ("s2st"): {"type": "audio", "pcm": base64, "sample_rate"} events, then {"type": "done", ...};
- OpenAI SSE: speech.audio.delta (base64 "audio") events, then speech.audio.done (or [DONE]);
- raw PCM (OpenAI's pcm): every body piece an arrival; the rate from the Content-Type, else the one asked
  for (``Stream.sample_rate``); audio/L16 swapped from big-endian; more than one channel refused;
- WAV: audio only when whole: one arrival at the body's end (TTFA = the whole response).

Every byte a reader holds is bounded from ``max_audio_s`` (``Limits``): the audio, one SSE line and
event, one HTTP chunk's announced size, the number of events or arrivals. Audio that begins with a
RIFF/WAVE header where samples were promised is refused (``Stream.not_a_wav``).
"""
from __future__ import annotations

import array
import base64
import binascii
import functools
import re
import sys
from dataclasses import dataclass
from typing import Any, AsyncIterator, Awaitable, Callable, Iterator

from . import openai_api as oa
from ..inputs import loads_finite
from .evidence import AudioSink

_MAX_EVENT = 16 * 1024 * 1024  # one SSE event, whatever max_audio_s allows
_EVENT_SLACK = 4096  # the JSON around one event's base64 PCM
_DEFAULT_RATE = 48_000  # the PCM bound's rate until the stream names its own
_MAX_RATE = 384_000  # a higher sample_rate is malformed (it would lift the PCM bound)
_EVENTS_PER_AUDIO_S = 100  # one per 10 ms of the allowed audio: finer than streaming TTS sends
_WAV_LEAD = 12  # "RIFF" <size> "WAVE": what marks a WAV file


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


class Streamed:
    """An SSE event too large to hold (its data passed HOLD_BYTES): its fields as a dict, the audio field's
    value replaced by "", and the count of audio bytes that field's base64 decoded to, already handed to
    the reader's sink piece by piece as it arrived (None: the event had no such string field)."""
    __slots__ = ("event", "audio_bytes")

    def __init__(self, event: dict, audio_bytes: int | None) -> None:
        self.event, self.audio_bytes = event, audio_bytes

    def __repr__(self) -> str:
        return f"Streamed({self.event!r}, {self.audio_bytes})"


HOLD_BYTES = 256 * 1024  # an SSE line or event held whole; a larger one is streamed (Events)
MAX_FIELDS = 64 * 1024  # a streamed event's JSON besides its audio field's base64
_B64 = re.compile(rb"[A-Za-z0-9+/]*={0,2}")


def _a2b_strict(block: Any) -> bytes:
    """Whole base64 quanta -> bytes; ValueError unless every character is base64 and '=' only pads the end."""
    if sys.version_info >= (3, 11):  # one C pass that checks as it decodes
        return binascii.a2b_base64(block, strict_mode=True)
    if not _B64.fullmatch(block):
        raise ValueError("not base64")
    return binascii.a2b_base64(block)


def _str_stop(raw: bytes, i: int, n: int) -> int:
    """Where a JSON string's text stops in raw[i:n]: its closing quote or a backslash, else n."""
    quote = raw.find(b'"', i, n)
    end = n if quote < 0 else quote
    backslash = raw.find(b"\\", i, end)
    return end if backslash < 0 else backslash
_JSON_SPACE = frozenset(b" \t\r\n")


class _Scanner:
    """One SSE event's JSON data, read as it arrives, without holding its audio: the value of the top-level
    ``key`` (a base64 string) is decoded piece by piece into ``on_audio``; the rest of the text (at most
    MAX_FIELDS bytes, that value written as "") is parsed once the event ends. Only JSON's ``\\/`` escape is
    taken inside the base64 (no other escape can stand for a base64 character)."""

    def __init__(self, key: bytes, on_audio: Callable[[bytes], None]) -> None:
        self.key, self.on_audio = key, on_audio
        self.fields = bytearray()
        self.audio_bytes = 0
        self.streamed = False  # the audio field was met (and decoded)
        self._depth = 0
        self._in_str = self._esc = self._is_key = False
        self._last = b""  # the last ':' / ',' / '{' at depth 1: a string after '{' or ',' is a key
        self._key = bytearray()  # the key string being read
        self._prev_key = b""
        self._audio = False  # inside the audio field's string
        self._carry = b""  # base64 characters of an incomplete quantum
        self._padded = False  # a quantum ended with '=': nothing may follow
        self._closed = False  # the top-level object has ended: only whitespace may follow

    def _grow(self, data: Any) -> None:
        self.fields += data
        if len(self.fields) > MAX_FIELDS:
            raise Fail(f"an SSE event's fields besides its audio passed {MAX_FIELDS} bytes")

    def _decode(self, data: Any, last: bool = False) -> None:
        buf = self._carry + bytes(data) if self._carry else data
        n = len(buf) if last else len(buf) // 4 * 4
        block, self._carry = buf[:n], bytes(buf[n:])
        if not block:
            return
        if self._padded or len(block) % 4:
            raise self._bad()
        try:
            chunk = _a2b_strict(block)
        except ValueError:  # binascii.Error
            raise self._bad() from None
        self._padded = block[-1:] == b"="
        self.audio_bytes += len(chunk)
        self.on_audio(chunk)

    def _bad(self) -> Fail:
        return Fail(f"malformed SSE event: its {self.key.decode()!r} is not base64")

    def feed(self, data: Any) -> None:
        raw = data if isinstance(data, bytes) else bytes(data)  # bytes.find (memchr): a regex search ran ~10x slower
        data = memoryview(raw)
        i, n = 0, len(data)
        while i < n:
            if self._audio:
                if self._esc:  # an escape split across pieces: only \/ stands for a base64 character
                    if data[i] != 0x2F:
                        raise self._bad()
                    self._esc = False
                    self._decode(b"/")
                    i += 1
                    continue
                j = _str_stop(raw, i, n)
                if j > i:
                    self._decode(data[i:j])
                if j == n:
                    return
                if data[j] == 0x5C:  # backslash
                    self._esc = True
                    i = j + 1
                    continue
                self._decode(b"", last=True)  # the closing quote
                self._audio = False
                self._grow(b'""')
                i = j + 1
                continue
            if self._in_str:
                if self._esc:
                    self._esc = False
                    self._grow(data[i:i + 1])
                    if self._is_key:
                        self._key += data[i:i + 1]
                    i += 1
                    continue
                j = _str_stop(raw, i, n)
                self._grow(data[i:n if j == n else j + 1])
                if self._is_key:
                    self._key += data[i:j]
                    if len(self._key) > MAX_FIELDS:
                        raise Fail(f"an SSE event's fields besides its audio passed {MAX_FIELDS} bytes")
                if j == n:
                    return
                if data[j] == 0x5C:
                    self._esc = True
                else:
                    self._in_str = False
                    if self._is_key:
                        self._prev_key, self._key = bytes(self._key), bytearray()
                i = j + 1
                continue
            c = data[i]
            if self._depth == 0 and c not in _JSON_SPACE and (self._closed or c != 0x7B):
                raise Fail(f"malformed SSE event (not one JSON object): {bytes(self.fields[:40]) + bytes(data[i:i + 40])!r}")
            if c == 0x22:  # '"'
                if self._depth == 1 and self._last == b":" and self._prev_key == self.key and not self.streamed:
                    self._audio = self.streamed = True
                    i += 1
                    continue
                self._in_str, self._is_key = True, self._depth == 1 and self._last in (b"{", b",")
            elif c in (0x7B, 0x5B):  # '{' '['
                self._depth += 1
                if self._depth == 1:
                    self._last = b"{" if c == 0x7B else b"["
            elif c in (0x7D, 0x5D):  # '}' ']'
                self._depth -= 1
                self._closed = self._depth == 0
            elif self._depth == 1 and c in (0x3A, 0x2C):  # ':' ','
                self._last = bytes((c,))
            self._grow(data[i:i + 1])
            i += 1

    def finish(self) -> Streamed:
        if self._audio or self._in_str or self._esc:
            raise Fail(f"malformed SSE event: it ended inside a string ({bytes(self.fields[:60])!r}...)")
        event = _parse(bytes(self.fields))
        if self.streamed and event.get(self.key.decode()) != "":
            raise Fail(f"malformed SSE event: its {self.key.decode()!r} field twice")
        return Streamed(event, self.audio_bytes if self.streamed else None)


class Events:
    """SSE framing: body bytes in, whole events' data out; a line and an event are bounded.

    An event whose data stays within HOLD_BYTES comes out whole (bytes). A longer one is never held: its
    line is read as it arrives, its audio field (``key``: "pcm" or "audio") decoded into ``on_audio`` piece
    by piece, and it comes out as a Streamed. So one stream holds at most about 2 x HOLD_BYTES of framing,
    whatever the event bound (max_event_bytes, up to 16 MiB) lets the server send."""

    def __init__(self, limits: Limits, key: str = "pcm", on_audio: Callable[[bytes], None] | None = None) -> None:
        self.limits, self.rate = limits, None  # the rate the bound follows, once the stream names it
        self.limit = limits.at(None)[1]
        self.done: dict | None = None  # the done event, once read: the rest of the body is drained
        self.key = key.encode()
        self.on_audio = on_audio or (lambda chunk: None)
        self._line = bytearray()  # a partial line (at most HOLD_BYTES)
        self._data: list[bytes] = []
        self._size = 0  # the current event's data bytes
        self._scan: _Scanner | None = None  # the current event, streamed
        self._long: str | None = None  # a line too long to hold, being read: "data" or "skip"
        self._long_size = 0

    def _check(self, n: int, what: str) -> None:
        if n > self.limit:
            raise Fail(f"{what} passed max_event_bytes={self.limit} ({self.limits.why(self.rate)})")

    def held(self) -> int:
        """Bytes this reader holds between pieces (its bound is what the tests check)."""
        return len(self._line) + self._size * (self._scan is None) + (len(self._scan.fields) if self._scan else 0)

    def _stream(self, data: Any, sep: bool) -> None:
        """Data of the current event, streamed: into its scanner (made from what was held, the first time);
        ``sep``: a line break (JSON whitespace) before it, as SSE joins an event's data lines."""
        if self._scan is None:
            self._scan = _Scanner(self.key, self.on_audio)
            for k, held in enumerate(self._data):
                if k:
                    self._scan.feed(b"\n")
                self._scan.feed(held)
            self._data = []
        if sep:
            self._scan.feed(b"\n")
        if len(data):
            self._scan.feed(data)

    def _data_line(self, value: Any) -> None:
        first = self._scan is None and not self._data
        self._size += len(value) + 1
        self._check(self._size, "an SSE event")
        if self._scan is None and self._size <= HOLD_BYTES:
            self._data.append(bytes(value))
        else:
            self._stream(value, not first)

    def _end_event(self) -> Any:
        event = self._scan.finish() if self._scan is not None else b"\n".join(self._data)
        self._scan, self._data, self._size = None, [], 0
        return event

    def _line_done(self, line: Any) -> Any:
        """A whole line (held); the event it ends, if any."""
        if line[-1:] == b"\r":
            line = line[:-1]
        if line[:5] == b"data:":
            self._data_line(line[6:] if line[:6] == b"data: " else line[5:])
        elif not len(line) and (self._data or self._scan is not None):  # comments, other fields: ignored
            return self._end_event()
        return None

    def _long_line(self, data: Any) -> None:
        """More of a line too long to hold."""
        self._long_size += len(data)
        if self._long == "skip":
            self._check(self._long_size, "an SSE line")
            return
        self._size += len(data)
        self._check(self._size, "an SSE event")
        self._stream(data, False)

    def _start_long(self, head: memoryview) -> None:
        """A line passed HOLD_BYTES without its newline: from now on it is read as it arrives."""
        self._long_size = 0
        if head[:5] != b"data:":
            self._long = "skip"
            self._long_line(head)
            return
        self._long = "data"
        if self._scan is not None or self._data:
            self._size += 1
            self._stream(b"", True)
        self._long_line(head[6:] if head[:6] == b"data: " else head[5:])

    def feed(self, piece: bytes) -> Iterator[Any]:
        """The events that ``piece`` completes, as they are found (a caller that stops reads no further):
        bytes (held whole) or Streamed."""
        view = memoryview(piece)
        pos, n = 0, len(piece)
        while pos < n:
            nl = piece.find(b"\n", pos)
            end = n if nl < 0 else nl
            if self._long is not None:
                if end > pos:
                    self._long_line(view[pos:end])
                if nl < 0:
                    return
                self._long = None  # the line ended; its event goes on to its blank line
                pos = nl + 1
                continue
            if nl < 0:
                if len(self._line) + n - pos <= max(HOLD_BYTES, 6):  # 6: the line's field is known
                    self._line += view[pos:]
                    self._check(len(self._line), "an SSE line")
                else:
                    head, self._line = self._line + view[pos:], bytearray()
                    self._start_long(memoryview(head))
                return
            if self._line:
                self._line += view[pos:nl]
                line, self._line = self._line, bytearray()
            else:
                line = view[pos:nl]
            event = self._line_done(line)
            pos = nl + 1
            if event is not None:
                yield event


class Seen:
    """What a response's body showed, for a failure's reason: its first bytes, how many SSE events it
    held, and the events of other types, counted by name (at most _MAX_NAMES names)."""
    _HEAD, _MAX_NAMES = 80, 8

    def __init__(self) -> None:
        self.head = b""
        self.events = 0
        self.foreign: dict[str, int] = {}
        self.status: int | None = None  # the response's status, once its head was read
        self.content_type = ""

    def head_read(self, status: int, content_type: str) -> None:
        self.status, self.content_type = status, content_type

    def then(self, reason: str) -> str:
        """A failure's reason, led by what was already known of the response: its status and Content-Type
        (``HTTP 503 application/json, then read stalled: ...``) unless it was a 200 whose body had begun."""
        if self.status is None or (self.status == 200 and self.head):
            return reason
        ctype = f" {self.content_type[:60]}" if self.content_type else ""
        return f"HTTP {self.status}{ctype}, then {reason}"

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
    protocol: Any  # the wire.Protocol being read: its reasons name what it expected
    limits: Limits
    sample_rate: int  # raw PCM answers that do not name their rate
    now: Callable[[], float]
    room: Callable[[], Awaitable[None]]  # waits while the evidence writer is behind (backpressure)
    lead: bytes = b""  # the audio's first bytes, until a RIFF/WAVE header is ruled out (``not_a_wav``)

    def not_a_wav(self, data: Any) -> None:
        """Before ``data`` goes to the sink: the audio must not begin with a RIFF/WAVE header (a whole WAV
        file sent where int16 samples were promised: its header would be read as samples)."""
        if self.pcm.size >= _WAV_LEAD or self.pcm.size > len(self.lead):
            return
        self.lead += bytes(data[: _WAV_LEAD - len(self.lead)])
        if len(self.lead) >= _WAV_LEAD and self.lead[:4] == b"RIFF" and self.lead[8:12] == b"WAVE":
            what = self.body.content_type or "audio"
            raise Fail(f"the audio begins with a RIFF/WAVE header: a WAV file sent as {what} "
                       f"(its header would be read as samples)")

    def audio(self, chunk: bytes | int, t: float, rate: int) -> None:
        """One audio arrival of ``chunk`` at ``t``, within the audio and arrival bounds (an int: that many
        bytes already handed to the sink as they arrived, see ``streamed``)."""
        n = chunk if isinstance(chunk, int) else len(chunk)
        cap = self.limits.at(rate)[0]
        if self.pcm.size + (0 if isinstance(chunk, int) else n) > cap:
            raise Fail(f"response audio passed max_audio_s={self.limits.max_audio_s:g} ({cap} bytes at {rate} Hz)")
        if len(self.record["chunks"]) >= self.limits.events:
            raise Fail(f"response passed {self.limits.events} audio chunks "
                       f"(max_audio_s={self.limits.max_audio_s:g} allows {_EVENTS_PER_AUDIO_S} per audio second)")
        if not isinstance(chunk, int):
            self.not_a_wav(chunk)
            self.pcm.add(chunk)
        self.record["chunks"].add(t, n)
        if self.record["first_audio_t"] is None and self.pcm.size >= 2:  # a whole int16 sample has arrived
            self.record["first_audio_t"] = t

    def streamed(self, events: "Events", rate: Callable[[], int | None]) -> Callable[[bytes], None]:
        """``on_audio`` of an Events: the audio of an event too large to hold, into the sink as it is decoded
        (the arrival is recorded when the event ends), within the audio bound at ``rate()``."""
        def add(chunk: bytes) -> None:
            if events.done is not None:
                return  # after the done event: drained, not audio
            cap = self.limits.at(rate())[0]
            if self.pcm.size + len(chunk) > cap:
                raise Fail(f"response audio passed max_audio_s={self.limits.max_audio_s:g} "
                           f"({cap} bytes at {rate() or _DEFAULT_RATE} Hz)")
            self.not_a_wav(chunk)
            self.pcm.add(chunk)
        return add

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
            raise Fail(f"expected SSE events of type {self.protocol.expected()}; got events of type "
                       f"{', '.join(self.seen.foreign)}{self.protocol.hint(self.seen.foreign)}")
        if not self.seen.events:
            raise Fail(f"no events of the expected type ({self.protocol.expected()}) in a response that ended "
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


class SseDialect:
    """One protocol's SSE events, as ``read_sse`` needs them: the field holding an event's base64 audio
    (``key``), the name of its done event, the rate before the stream names one, how an event object is
    classified ("audio" | "done" | "error" | "other"), what an audio event does, and what the done says."""
    key = "pcm"
    done = "done"

    def first_rate(self, s: Stream) -> int | None:
        return None

    def parse(self, raw: bytes) -> dict:
        return _parse(raw)

    def classify(self, event: dict, streamed: int | None) -> tuple[str, Any]:
        raise NotImplementedError

    def audio(self, s: Stream, events: "Events", event: dict, value: Any, t: float, streamed: int | None) -> None:
        raise NotImplementedError

    def finish(self, s: Stream, events: "Events", done: dict) -> None:
        raise NotImplementedError


def _follow_rate(s: Stream, events: "Events", rate: int | None) -> None:
    """The stream's rate is known (or changed before any audio): the bounds follow it."""
    events.rate = rate
    _, events.limit, s.body.max_chunk_bytes = s.limits.at(rate)


async def read_sse(s: Stream, dialect: SseDialect) -> None:
    """An SSE answer of any protocol: audio events, then the done event (``dialect`` says which is which)."""
    events = Events(s.limits, dialect.key)
    events.on_audio = s.streamed(events, lambda: events.rate)
    _follow_rate(s, events, dialect.first_rate(s))
    record, done = s.record, None
    async for t, raw in s.events(events):
        streamed = None
        if isinstance(raw, Streamed):
            event, streamed = raw.event, raw.audio_bytes
        else:
            event = dialect.parse(raw)
        kind, value = dialect.classify(event, streamed)
        if kind != "audio" and streamed:
            raise Fail(f"an SSE event of type {event_name(event)} carried {streamed} bytes in its {dialect.key!r}")
        if kind == "audio":
            dialect.audio(s, events, event, value, t, streamed)
        elif kind == "done":
            record["done_t"] = t
            done = events.done = value
        elif kind == "error":
            raise Fail(f"server error event: {value}")
        else:
            s.seen.other(event_name(event))  # another protocol's events: named if no audio comes
    if done is None:
        s.no_done(dialect.done)
    dialect.finish(s, events, done)


class OwnSse(SseDialect):
    """This project's SSE: audio events (base64 "pcm", their rate), then the done event (samples, hash)."""

    def classify(self, event: dict, streamed: int | None) -> tuple[str, Any]:
        kind = event.get("type")
        if kind in ("audio", "done"):
            return kind, event
        if kind == "error":
            return "error", str(event.get("message"))[:300]
        return "other", None

    def audio(self, s: Stream, events: "Events", event: dict, value: Any, t: float, streamed: int | None) -> None:
        """An audio event; ``streamed``: its PCM (that many bytes) already went to the sink as it arrived."""
        if streamed is not None:
            chunk: bytes | None = None
        else:
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
        n = streamed if chunk is None else len(chunk)
        if n % 2:
            raise Fail(f"audio event {short(event.get('index'))}: {n} bytes is not whole int16 samples")
        cap = s.limits.at(rate)[0]
        if s.pcm.size + (0 if chunk is None else n) > cap:
            raise Fail(f"response audio passed max_audio_s={s.limits.max_audio_s:g} ({cap} bytes at {rate} Hz)")
        named = record["sample_rate"] is None
        record["sample_rate"] = rate
        if chunk is not None:
            s.not_a_wav(chunk)
            s.pcm.add(chunk)
        record["chunks"].add(t, n)
        if n and record["first_audio_t"] is None:
            record["first_audio_t"] = t
        if named:  # the stream named its rate: the bounds follow it
            _follow_rate(s, events, rate)

    def finish(self, s: Stream, events: "Events", done: dict) -> None:
        # the done event's count and hash are checked later (client, evidence writer); its rate here: audio
        # events at 24 kHz under a done naming 16 kHz are no answer to take either way
        rate, heard = done.get("sample_rate"), s.record["sample_rate"]
        if rate is not None and heard is not None and (isinstance(rate, bool) or rate != heard):
            raise Fail(f"done event says sample_rate {short(rate)}, its audio events {heard}")
        s.record["streaming"] = done.get("streaming")
        s.record["server_done"] = {k: done.get(k) for k in ("samples", "sample_rate", "pcm_sha256")}


class OpenAISse(SseDialect):
    """OpenAI's speech SSE: speech.audio.delta (base64 "audio") events, then speech.audio.done (or [DONE])."""
    key = "audio"
    done = oa.DONE

    def first_rate(self, s: Stream) -> int | None:
        return s.sample_rate

    def parse(self, raw: bytes) -> dict:
        if raw.strip() == b"[DONE]":  # the chat API's end marker: some servers end speech streams with it too
            return {"type": oa.DONE}
        return _parse(raw)

    def classify(self, event: dict, streamed: int | None) -> tuple[str, Any]:
        try:
            kind, value = oa.classify(event, streamed)
        except ValueError as exc:
            raise Fail(str(exc)) from None
        return ("audio" if kind == "delta" else kind), value

    def audio(self, s: Stream, events: "Events", event: dict, value: Any, t: float, streamed: int | None) -> None:
        chunk, named = value
        rate = events.rate
        if named is not None and named != rate:
            if s.record["chunks"]:
                raise Fail(f"sample_rate changed mid-stream: {rate} -> {named}")
            rate = named
            _follow_rate(s, events, rate)
        s.record["sample_rate"] = rate
        if chunk:
            s.audio(chunk, t, rate)

    def finish(self, s: Stream, events: "Events", done: dict) -> None:
        s.record["sample_rate"] = events.rate
        s.whole_samples("SSE audio")
        s.record["server_done"] = {}  # OpenAI's answers carry no sample count or hash to check


OWN_SSE, OPENAI_SSE = OwnSse(), OpenAISse()


async def read_own_sse(s: Stream) -> None:
    """This project's SSE (``OwnSse``)."""
    await read_sse(s, OWN_SSE)


async def read_openai_sse(s: Stream) -> None:
    """OpenAI's speech SSE (``OpenAISse``)."""
    await read_sse(s, OPENAI_SSE)


_TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"  # RFC 9110 5.6.2
_QUOTED = r'"(?:[^"\\]|\\.)*"'  # RFC 9110 5.6.4
_PARAM = re.compile(rf"[ \t]*;[ \t]*(?:({_TOKEN})=({_QUOTED}|{_TOKEN}))?")  # an empty one is allowed
_RATE_NAMES = ("rate", "sample_rate", "samplerate")
MAX_CONTENT_TYPE = 1024  # a longer Content-Type is refused, not parsed


def media_type(value: str) -> tuple[str, dict[str, str]]:
    """A Content-Type -> (type/subtype lower-case, {parameter name lower-case: value unquoted}), as RFC 9110
    5.6.6 and 8.3.1 write it; ValueError (one line) when it is not that shape or names a parameter twice."""
    if len(value) > MAX_CONTENT_TYPE:
        raise ValueError(f"Content-Type of {len(value)} characters (at most {MAX_CONTENT_TYPE})")
    media, sep, rest = value.partition(";")
    params: dict[str, str] = {}
    rest = sep + rest.rstrip(" \t")
    pos = 0
    while pos < len(rest):
        m = _PARAM.match(rest, pos)
        if m is None:
            raise ValueError(f"Content-Type {value[:80]!r}: malformed parameter at {rest[pos:pos + 20]!r}")
        pos = m.end()
        if m.group(1) is None:
            continue
        name, text = m.group(1).lower(), m.group(2)
        if text[:1] == '"':
            text = re.sub(r"\\(.)", r"\1", text[1:-1])
        if name in params:
            raise ValueError(f"Content-Type {value[:80]!r}: names {name} twice")
        params[name] = text
    return media.strip(" \t").lower(), params


def pcm_format(content_type: str) -> tuple[int | None, bool]:
    """(the rate it names or None, big-endian) of a raw PCM answer's Content-Type; ValueError (one line) for
    a shape the client does not read. RFC 2586's audio/L16 is big-endian (network byte order); every other
    raw type is read as OpenAI's pcm, little-endian. More than one channel is refused, as a WAV of two is:
    the evidence and every score are mono, and interleaved frames counted as samples double the audio."""
    media, params = media_type(content_type)
    named = [n for n in _RATE_NAMES if n in params]
    if len(named) > 1:
        raise ValueError(f"Content-Type {content_type[:80]!r}: names its rate twice ({', '.join(named)})")
    rate = None
    if named:
        text = params[named[0]]
        if not text.isdigit() or not text.isascii() or not 0 < int(text) <= oa.MAX_RATE:
            raise ValueError(f"Content-Type {content_type[:80]!r}: rate {text[:20]!r} is not in 1-{oa.MAX_RATE}")
        rate = int(text)
    channels = params.get("channels", "1")
    if not (channels.isascii() and channels.isdigit() and int(channels) == 1):
        raise ValueError(f"Content-Type {content_type[:80]!r}: {channels[:20]} channels; the client reads mono "
                         "int16 PCM only (channels=1)")
    return rate, media == "audio/l16"


def _swap16(data: bytes) -> bytes:
    """Big-endian int16 samples -> little-endian (an even number of bytes)."""
    samples = array.array("h")
    samples.frombytes(data)
    samples.byteswap()
    return samples.tobytes()


async def read_raw_pcm(s: Stream) -> None:
    """Raw int16 mono PCM: every body piece, stamped as read, is an audio arrival (a piece may split a
    sample; TTFA waits for the first whole one). The body's end is the done. The rate: the Content-Type's,
    else the one asked for (``Stream.sample_rate``); audio/L16 is swapped to little-endian as it arrives."""
    try:
        rate, big_endian = pcm_format(s.body.headers.get("content-type", ""))
    except ValueError as exc:
        raise Fail(str(exc)) from None
    rate = rate or s.sample_rate
    s.record["sample_rate"] = rate
    s.body.max_chunk_bytes = s.limits.at(rate)[2]
    carry = b""  # L16: the first byte of a sample split across pieces
    async for piece in s.body.pieces():
        t = s.now()
        if piece:
            s.seen.body(piece)
            if big_endian:
                data = carry + piece if carry else piece
                whole = len(data) & ~1
                carry = data[whole:]
                piece = _swap16(data[:whole])
            s.audio(piece, t, rate)
            await s.room()
    s.record["done_t"] = s.now()
    if carry:
        raise Fail(f"raw PCM response: {s.pcm.size + 1} bytes is not whole int16 samples")
    s.whole_samples("raw PCM response")
    s.record["server_done"] = {}


async def read_wav(s: Stream) -> None:
    """A WAV answer is audio only when whole: one arrival, at the body's end (TTFA = the whole response)."""
    reader = oa.WavReader()
    s.body.max_chunk_bytes = s.limits.at(oa.MAX_RATE)[2]
    cap = None
    async for piece in s.body.pieces():
        s.seen.body(piece)
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
