"""The one SSE reader of every protocol (``read_sse``) and what a protocol's SSE says to it (``SseDialect``)."""
from __future__ import annotations

from typing import Any

from .limits import Fail
from .response import Stream, event_name
from .sse_frames import Events, Streamed, parse_event


class SseDialect:
    """One protocol's SSE events, as ``read_sse`` needs them: the field holding an event's base64 audio
    (``key``), the name of its done event, the rate before the stream names one, how an event object is
    classified ("audio" | "done" | "error" | "other"), what an audio event does, and what the done says."""
    key = "pcm"
    done = "done"

    def first_rate(self, s: Stream) -> int | None:
        return None

    def parse(self, raw: bytes) -> dict:
        return parse_event(raw)

    def classify(self, event: dict, streamed: int | None) -> tuple[str, Any]:
        raise NotImplementedError

    def audio(self, s: Stream, events: "Events", event: dict, value: Any, t: float, streamed: int | None) -> None:
        raise NotImplementedError

    def finish(self, s: Stream, events: "Events", done: dict) -> None:
        raise NotImplementedError


def follow_rate(s: Stream, events: "Events", rate: int | None) -> None:
    """The stream's rate is known (or changed before any audio): the bounds follow it."""
    events.rate = rate
    _, events.limit, s.body.max_chunk_bytes = s.limits.at(rate)


async def read_sse(s: Stream, dialect: SseDialect) -> None:
    """An SSE answer of any protocol: audio events, then the done event (``dialect`` says which is which)."""
    events = Events(s.limits, dialect.key)
    events.on_audio = s.streamed(events, lambda: events.rate)
    follow_rate(s, events, dialect.first_rate(s))
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
            record.done_t = t
            done = events.done = value
        elif kind == "error":
            raise Fail(f"server error event: {value}")
        else:
            s.seen.other(event_name(event))  # another protocol's events: named if no audio comes
    if done is None:
        s.no_done(dialect.done)
    dialect.finish(s, events, done)

