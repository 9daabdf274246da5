"""OpenAI's speech SSE answer: speech.audio.delta (base64 "audio") events, then speech.audio.done (or [DONE])."""
from __future__ import annotations

from typing import Any

from .. import openai_api as oa
from .limits import Fail
from .response import Stream
from .sse import SseDialect, follow_rate, read_sse
from .sse_frames import Events, parse_event


class OpenAISse(SseDialect):
    """OpenAI's speech SSE: speech.audio.delta (base64 "audio") events, then speech.audio.done (or [DONE])."""
    key = "audio"
    done = oa.DONE

    def first_rate(self, s: Stream) -> int | None:
        return s.sample_rate

    def parse(self, raw: bytes) -> dict:
        if raw.strip() == b"[DONE]":  # the chat API's end marker: some servers end speech streams with it too
            return {"type": oa.DONE}
        return parse_event(raw)

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
            if s.record.chunks:
                raise Fail(f"sample_rate changed mid-stream: {rate} -> {named}")
            rate = named
            follow_rate(s, events, rate)
        s.record.sample_rate = rate
        if chunk:
            s.audio(chunk, t, rate)

    def finish(self, s: Stream, events: "Events", done: dict) -> None:
        s.record.sample_rate = events.rate
        s.whole_samples("SSE audio")
        s.record.server_done = {}  # OpenAI's answers carry no sample count or hash to check


OPENAI_SSE = OpenAISse()


async def read_openai_sse(s: Stream) -> None:
    """OpenAI's speech SSE (``OpenAISse``)."""
    await read_sse(s, OPENAI_SSE)

