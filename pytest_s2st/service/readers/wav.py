"""A WAV answer: audio only when whole (one arrival at the body's end)."""
from __future__ import annotations

from .. import openai_api as oa
from .limits import Fail
from .response import Stream


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
    record = s.record
    record.sample_rate, record.done_t, record.streaming, record.server_done = reader.rate, t, False, {}
    if s.pcm.size:
        record.chunks.add(t, s.pcm.size)
        record.first_audio_t = t
