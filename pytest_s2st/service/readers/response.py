"""What every reader gets and fills: one 200 response being read (``Stream``) and what its body showed,
for a failure's reason (``Seen``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, AsyncIterator, Awaitable, Callable

from ..evidence import AudioSink
from ..record import RequestRecord
from .limits import DEFAULT_RATE, EVENTS_PER_AUDIO_S, Fail, Limits
from .sse_frames import Events

_WAV_LEAD = 12  # "RIFF" <size> "WAVE": what marks a WAV file


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
        return ", ".join(f"{n:,} {'events' if n != 1 else 'event'} of type {name}" if i == 0
                         else f"{n:,} of type {name}" for i, (name, n) in enumerate(counts))

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
    record: RequestRecord
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
        self.refuse_a_wav(self.lead)

    def refuse_a_wav(self, lead: bytes) -> None:
        """``lead``, the body's first bytes as sent (before any sample conversion), must not be a WAV's."""
        if len(lead) >= _WAV_LEAD and lead[:4] == b"RIFF" and lead[8:12] == b"WAVE":
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
        if len(self.record.chunks) >= self.limits.events:
            raise Fail(f"response passed {self.limits.events} audio chunks "
                       f"(max_audio_s={self.limits.max_audio_s:g} allows {EVENTS_PER_AUDIO_S} per audio second)")
        if not isinstance(chunk, int):
            self.not_a_wav(chunk)
            self.pcm.add(chunk)
        self.record.chunks.add(t, n)
        if self.record.first_audio_t is None and self.pcm.size >= 2:  # a whole int16 sample has arrived
            self.record.first_audio_t = t

    def streamed(self, events: "Events", rate: Callable[[], int | None]) -> Callable[[bytes], None]:
        """``on_audio`` of an Events: the audio of an event too large to hold, into the sink as it is decoded
        (the arrival is recorded when the event ends), within the audio bound at ``rate()``."""
        def add(chunk: bytes) -> None:
            if events.done is not None:
                return  # after the done event: drained, not audio
            cap = self.limits.at(rate())[0]
            if self.pcm.size + len(chunk) > cap:
                raise Fail(f"response audio passed max_audio_s={self.limits.max_audio_s:g} "
                           f"({cap} bytes at {rate() or DEFAULT_RATE} Hz)")
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
                               f"{self.limits.max_audio_s:g} allows {EVENTS_PER_AUDIO_S} per audio second)")
                yield t, raw
                if events.done is not None:
                    break
            await self.room()

    def no_done(self, done: str) -> None:
        """The body ended (as its framing says) without the done event: why, as far as the body shows."""
        if not self.record.chunks and self.seen.foreign:
            raise Fail(f"expected SSE events of type {self.protocol.expected()}; got events of type "
                       f"{', '.join(self.seen.foreign)}{self.protocol.hint(self.seen.foreign)}")
        if not self.seen.events:
            raise Fail(f"no events of the expected type ({self.protocol.expected()}) in a response that ended "
                       f"cleanly ({self.seen.first_bytes()})")
        raise Fail(f"stream ended before the {done} event (server closed mid-stream)")


Reader = Callable[[Stream], Awaitable[None]]
