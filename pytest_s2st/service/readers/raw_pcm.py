"""A raw PCM answer (OpenAI's pcm, audio/L16, audio/x-raw): every body piece an audio arrival; its Content-Type
read as RFC 9110 writes it (rate, sample format, channels). Kept as int16: float32 samples are converted."""
from __future__ import annotations

import array
import re

import numpy as np

from .. import openai_api as oa
from .limits import Fail
from .response import Stream


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


FORMATS = {"S16LE": 2, "S16BE": 2, "F32LE": 4}  # sample format (GStreamer's names) -> bytes a sample


def pcm_format(content_type: str) -> tuple[int | None, str]:
    """(the rate it names or None, its sample format: FORMATS) of a raw PCM answer's Content-Type; ValueError
    (one line) for a shape the client does not read. RFC 2586's audio/L16 is big-endian int16 (network byte
    order); every other raw type is int16 little-endian, as OpenAI's pcm, unless its ``format`` parameter names
    another (audio/x-raw;format=F32LE: float32 read as int16 would count each sample twice). More than one
    channel is refused, as a WAV of two is: the evidence and every score are mono, and interleaved frames
    counted as samples double the audio."""
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
                         "PCM only (channels=1)")
    implied = "S16BE" if media == "audio/l16" else "S16LE"
    sample = params.get("format", implied).upper()
    if sample not in FORMATS or (media == "audio/l16" and sample != implied):
        raise ValueError(f"Content-Type {content_type[:80]!r}: format {params['format'][:20]!r} is not read (the "
                         f"client reads {', '.join(FORMATS)}{'; audio/L16 is S16BE' if media == 'audio/l16' else ''})")
    return rate, sample


def _to_int16(data: bytes, sample: str) -> bytes:
    """Whole samples of ``sample`` format -> int16 little-endian (float32 clipped to [-1, 1], scaled by 32767)."""
    if sample == "S16LE":
        return data
    if sample == "S16BE":
        samples = array.array("h")
        samples.frombytes(data)
        samples.byteswap()
        return samples.tobytes()

    floats = np.frombuffer(data, dtype="<f4")
    if not np.isfinite(floats).all():
        raise Fail("raw PCM response: a float32 sample is not finite (NaN or infinity)")
    return np.round(np.clip(floats, -1.0, 1.0) * 32767).astype("<i2").tobytes()


async def read_raw_pcm(s: Stream) -> None:
    """Raw mono PCM: every body piece, stamped as read, is an audio arrival (a piece may split a sample; TTFA
    waits for the first whole one). The body's end is the done. The rate: the Content-Type's, else the one asked
    for (``Stream.sample_rate``); big-endian and float32 samples become int16 little-endian as they arrive."""
    try:
        rate, sample = pcm_format(s.body.headers.get("content-type", ""))
    except ValueError as exc:
        raise Fail(str(exc)) from None
    width = FORMATS[sample]
    rate = rate or s.sample_rate
    s.record.sample_rate = rate
    s.body.max_chunk_bytes = s.limits.at(rate)[2] * width // 2
    carry = b""  # the first bytes of a sample split across pieces
    lead = b""  # the first bytes as sent: a WAV is a WAV before its bytes are converted as samples
    async for piece in s.body.pieces():
        t = s.now()
        if piece:
            s.seen.body(piece)
            if sample != "S16LE":
                if len(lead) < 12:
                    lead += piece[: 12 - len(lead)]
                    s.refuse_a_wav(lead)
                data = carry + piece if carry else piece
                whole = len(data) - len(data) % width
                carry = data[whole:]
                piece = _to_int16(data[:whole], sample)
            s.audio(piece, t, rate)
            await s.room()
    s.record.done_t = s.now()
    if carry:
        raise Fail(f"raw PCM response: {len(carry)} byte(s) after the last whole {sample} sample")
    s.whole_samples("raw PCM response")
    s.record.server_done = {}
