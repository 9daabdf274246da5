"""This project's SSE answer ("s2st"): {"type": "audio", "pcm": base64, "sample_rate"} events, then
{"type": "done", ...} naming the samples, rate and hash the server sent."""
from __future__ import annotations

import base64
from typing import Any

from .limits import Fail
from .response import Stream, short
from .sse import SseDialect, follow_rate, read_sse
from .sse_frames import Events

_MAX_RATE = 384_000  # a higher sample_rate is malformed (it would lift the PCM bound)


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
        if record.sample_rate not in (None, rate):
            raise Fail(f"sample_rate changed mid-stream: {record.sample_rate} -> {rate}")
        n = streamed if chunk is None else len(chunk)
        if n % 2:
            raise Fail(f"audio event {short(event.get('index'))}: {n} bytes is not whole int16 samples")
        cap = s.limits.at(rate)[0]
        if s.pcm.size + (0 if chunk is None else n) > cap:
            raise Fail(f"response audio passed max_audio_s={s.limits.max_audio_s:g} ({cap} bytes at {rate} Hz)")
        named = record.sample_rate is None
        record.sample_rate = rate
        if chunk is not None:
            s.not_a_wav(chunk)
            s.pcm.add(chunk)
        record.chunks.add(t, n)
        if n and record.first_audio_t is None:
            record.first_audio_t = t
        if named:  # the stream named its rate: the bounds follow it
            follow_rate(s, events, rate)

    def finish(self, s: Stream, events: "Events", done: dict) -> None:
        # the done event's count and hash are checked later (client, evidence writer); its rate here: audio
        # events at 24 kHz under a done naming 16 kHz are no answer to take either way
        rate, heard = done.get("sample_rate"), s.record.sample_rate
        if rate is not None and heard is not None and (isinstance(rate, bool) or rate != heard):
            raise Fail(f"done event says sample_rate {short(rate)}, its audio events {heard}")
        s.record.streaming = done.get("streaming")
        s.record.server_done = {k: done.get(k) for k in ("samples", "sample_rate", "pcm_sha256")}


OWN_SSE = OwnSse()


async def read_own_sse(s: Stream) -> None:
    """This project's SSE (``OwnSse``)."""
    await read_sse(s, OWN_SSE)

