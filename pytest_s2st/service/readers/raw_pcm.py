"""A raw int16 PCM answer (OpenAI's pcm, audio/L16): every body piece an audio arrival; its Content-Type
read as RFC 9110 writes it (rate, byte order, channels)."""
from __future__ import annotations

import array
import re

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
    s.record.sample_rate = rate
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
    s.record.done_t = s.now()
    if carry:
        raise Fail(f"raw PCM response: {s.pcm.size + 1} bytes is not whole int16 samples")
    s.whole_samples("raw PCM response")
    s.record.server_done = {}

