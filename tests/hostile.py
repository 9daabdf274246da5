"""A hostile speech server on loopback (issue 29): ONE raw-asyncio server, parametrised by mode, that answers
the load generator's requests the ways a broken or malicious server may: compressed bodies, redirects to
another host, endless bodies and lines, legal events at the size bound, a status line and then silence.

Raw sockets, not aiohttp's server: every byte is the mode's, nothing is fixed up on the way out. A mode is a
pair (answer to POST, answer to GET): ``MODES[name]``. Both protocols are served: a request body with
"input" is OpenAI's, one with "text" is this project's own.

In-process (the fault tests): ``async with hostile("gzip") as server: server.url``. In its own process (the
memory benchmarks, so that its buffers are not the client's): ``python tests/hostile.py MODE PORT_FILE``.

Redirects point at ``http://localhost:<port>/elsewhere/...``: another host name for the same server, which
answers there as a different server would (identity "elsewhere", model "elsewhere-model") and counts every
request it gets (``server.elsewhere``): a client that never follows a redirect leaves it at 0.
"""
from __future__ import annotations

import asyncio
import base64
import contextlib
import gzip
import hashlib
import json
import os
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Awaitable, Callable

RATE = 24_000
PCM = bytes(range(256)) * 188  # 48,128 bytes: ~1 s of int16 at 24 kHz, not silence
IDENTITY = {"case_id": "hostile", "model_type": "hostile", "streaming": True}
MODEL = "hostile-model"
MAX_EVENT = 16 * 1024 * 1024  # the client's bound on one SSE event (readers._MAX_EVENT)
BLOCK = 64 * 1024


@dataclass
class Ctx:
    port: int = 0
    elsewhere: int = 0  # requests that reached the redirect target
    requests: int = 0


@dataclass
class Request:
    method: str
    path: str
    headers: dict
    body: bytes

    @property
    def openai(self) -> bool:
        return b'"input"' in self.body


Writer = asyncio.StreamWriter
Handler = Callable[[Request, Writer, Ctx], Awaitable[None]]


def head(status: str, ctype: str | None = None, length: int | None = None, extra: str = "") -> bytes:
    """A status line and headers; chunked unless ``length`` is given."""
    lines = [f"HTTP/1.1 {status}"]
    if ctype:
        lines.append(f"Content-Type: {ctype}")
    lines.append(f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked")
    return ("\r\n".join(lines) + "\r\n" + extra + "\r\n").encode()


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def sse(payload: dict) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def good_events(req: Request, pcm: bytes = PCM) -> bytes:
    b64 = base64.b64encode(pcm).decode()
    if req.openai:
        return sse({"type": "speech.audio.delta", "audio": b64}) + sse({"type": "speech.audio.done"})
    return sse({"type": "audio", "index": 0, "pcm": b64, "sample_rate": RATE}) + sse(
        {"type": "done", "samples": len(pcm) // 2, "sample_rate": RATE, "pcm_sha256": hashlib.sha256(pcm).hexdigest()})


async def hold(w: Writer) -> None:
    await w.drain()
    await asyncio.sleep(3600)


# --- answers to the speech request (POST) -----------------------------------------------------------------------

async def ok(req: Request, w: Writer, ctx: Ctx) -> None:
    if req.openai:
        w.write(head("200 OK", f"audio/pcm;rate={RATE}", len(PCM)) + PCM)
    else:
        body = good_events(req)
        w.write(head("200 OK", "text/event-stream", len(body)) + body)


def _encoded(encoding: str, sse_body: bool, chunked: bool) -> Handler:
    async def answer(req: Request, w: Writer, ctx: Ctx) -> None:
        raw = good_events(req) if sse_body or not req.openai else PCM * 20
        body = gzip.compress(raw) if encoding == "gzip" else zlib.compress(raw) if encoding == "deflate" else raw
        ctype = "text/event-stream" if sse_body or not req.openai else f"audio/pcm;rate={RATE}"
        extra = f"Content-Encoding: {encoding}\r\n"
        if chunked:
            w.write(head("200 OK", ctype, extra=extra) + chunk(body) + b"0\r\n\r\n")
        else:
            w.write(head("200 OK", ctype, len(body), extra) + body)
    return answer


async def gzip_wav(req: Request, w: Writer, ctx: Ctx) -> None:
    wav = b"RIFF" + (36 + len(PCM)).to_bytes(4, "little") + b"WAVEfmt " + (16).to_bytes(4, "little") + (
        1).to_bytes(2, "little") + (1).to_bytes(2, "little") + RATE.to_bytes(4, "little") + (RATE * 2).to_bytes(
        4, "little") + (2).to_bytes(2, "little") + (16).to_bytes(2, "little") + b"data" + len(PCM).to_bytes(
        4, "little") + PCM
    body = gzip.compress(wav)
    w.write(head("200 OK", "audio/wav", len(body), "Content-Encoding: gzip\r\n") + body)


async def transfer_gzip(req: Request, w: Writer, ctx: Ctx) -> None:
    """A gzip transfer coding under the chunked one: the chunks carry compressed bytes."""
    raw = good_events(req) if not req.openai else PCM * 20
    ctype = "text/event-stream" if not req.openai else f"audio/pcm;rate={RATE}"
    w.write(b"HTTP/1.1 200 OK\r\nContent-Type: " + ctype.encode() + b"\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
            + chunk(gzip.compress(raw)) + b"0\r\n\r\n")


async def endless_pcm(req: Request, w: Writer, ctx: Ctx) -> None:
    """Raw PCM at line rate, forever (own protocol: the same as endless audio events)."""
    if not req.openai:
        return await endless_events(req, w, ctx)
    w.write(head("200 OK", f"audio/pcm;rate={RATE}"))
    block = chunk(PCM[:BLOCK // 2] * 2)
    while True:
        w.write(block)
        await w.drain()


async def endless_events(req: Request, w: Writer, ctx: Ctx) -> None:
    """Well-formed ~1 s audio events, forever (no done)."""
    w.write(head("200 OK", "text/event-stream"))
    event = chunk(good_events(req).split(b"\n\n")[0] + b"\n\n")
    while True:
        w.write(event)
        await w.drain()


def _line_prefix(req: Request) -> bytes:
    return (b'data: {"type":"speech.audio.delta","audio":"' if req.openai
            else b'data: {"type":"audio","index":0,"sample_rate":24000,"pcm":"')


async def endless_line(req: Request, w: Writer, ctx: Ctx) -> None:
    """An SSE data line that never ends: an audio event whose base64 goes on forever, no newline."""
    w.write(head("200 OK", "text/event-stream") + chunk(_line_prefix(req)))
    block = chunk(b"A" * BLOCK)
    while True:
        w.write(block)
        await w.drain()


async def endless_comment(req: Request, w: Writer, ctx: Ctx) -> None:
    """An SSE comment line that never ends (no data field at all)."""
    w.write(head("200 OK", "text/event-stream") + chunk(b": "))
    block = chunk(b"x" * BLOCK)
    while True:
        w.write(block)
        await w.drain()


def max_event_pcm() -> bytes:
    """The PCM of the largest event the client takes at 600 s of audio: its base64 plus the JSON around it
    just under the 16 MiB bound."""
    n = (MAX_EVENT - 4096) // 4 * 3 // 2 * 2
    return PCM * (n // len(PCM)) + PCM[: n % len(PCM)]


_MAX_EVENTS: dict[bool, bytes] = {}


def _max_events(openai: bool) -> bytes:
    """Two max-size audio events and the done: a legal answer of ~524 s of audio."""
    if openai not in _MAX_EVENTS:
        pcm = max_event_pcm()
        b64 = base64.b64encode(pcm).decode()
        if openai:
            body = sse({"type": "speech.audio.delta", "audio": b64}) * 2 + sse({"type": "speech.audio.done"})
        else:
            body = sse({"type": "audio", "index": 0, "pcm": b64, "sample_rate": RATE}) * 2 + sse(
                {"type": "done", "samples": len(pcm), "sample_rate": RATE,
                 "pcm_sha256": hashlib.sha256(pcm * 2).hexdigest()})
        _MAX_EVENTS[openai] = body
    return _MAX_EVENTS[openai]


async def max_events(req: Request, w: Writer, ctx: Ctx) -> None:
    body = _max_events(req.openai)
    w.write(head("200 OK", "text/event-stream"))
    for i in range(0, len(body), BLOCK):
        w.write(chunk(body[i:i + BLOCK]))
        await w.drain()
    w.write(b"0\r\n\r\n")


async def redirect(req: Request, w: Writer, ctx: Ctx) -> None:
    w.write(head("307 Temporary Redirect", length=0,
                 extra=f"Location: http://localhost:{ctx.port}/elsewhere{req.path}\r\n"))


def _then_hold(status: str, ctype: str | None, extra: str = "", length: int | None = 100) -> Handler:
    async def answer(req: Request, w: Writer, ctx: Ctx) -> None:
        if status.startswith("101"):
            w.write(f"HTTP/1.1 {status}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n".encode())
        else:
            w.write(head(status, ctype, length, extra))
        await hold(w)
    return answer


# --- lies a server can tell: answers that look like good audio and are not ---------------------------------

def asked_rate(req: Request) -> int:
    """The rate the request asks for (``"sample_rate"``, vLLM-Omni's field, from --s2st-extra-body), else RATE."""
    rate = json.loads(req.body or b"{}").get("sample_rate")
    return rate if isinstance(rate, int) else RATE


def tone(seconds: float, rate: int) -> bytes:
    """``seconds`` of int16 LE mono at ``rate``: PCM's byte pattern, so no two neighbouring bytes are equal."""
    n = 2 * round(seconds * rate)
    return PCM * (n // len(PCM)) + PCM[: n % len(PCM)]


def wav_file(pcm: bytes, rate: int, channels: int = 1) -> bytes:
    return (b"RIFF" + (36 + len(pcm)).to_bytes(4, "little") + b"WAVEfmt " + (16).to_bytes(4, "little")
            + (1).to_bytes(2, "little") + channels.to_bytes(2, "little") + rate.to_bytes(4, "little")
            + (rate * 2 * channels).to_bytes(4, "little") + (2 * channels).to_bytes(2, "little")
            + (16).to_bytes(2, "little") + b"data" + len(pcm).to_bytes(4, "little") + pcm)


PRESEND_DELAY_S = 0.3


async def presend(req: Request, w: Writer, ctx: Ctx) -> None:
    """Every answer takes 0.3 s; then one more complete answer nobody asked for, on the kept-alive connection.
    Both name the request they answer (X-Request-Id, as vLLM's --enable-request-id-headers echoes it)."""
    await asyncio.sleep(PRESEND_DELAY_S)
    echo = f"X-Request-Id: {req.headers.get('x-request-id', '')}\r\n"
    if req.openai:
        answer = head("200 OK", f"audio/pcm;rate={RATE}", len(PCM), echo) + PCM
    else:
        body = good_events(req)
        answer = head("200 OK", "text/event-stream", len(body), echo) + body
    w.write(answer)
    await w.drain()
    await asyncio.sleep(0.02)  # its own segment: not in the read that ended the real answer
    w.write(answer)


async def presend_anon(req: Request, w: Writer, ctx: Ctx) -> None:
    """As presend, but no answer names its request (no X-Request-Id echo: most servers)."""
    await asyncio.sleep(PRESEND_DELAY_S)
    answer = head("200 OK", f"audio/pcm;rate={RATE}", len(PCM)) + PCM if req.openai else \
        head("200 OK", "text/event-stream", len(body := good_events(req)), "") + body
    w.write(answer)
    await w.drain()
    await asyncio.sleep(0.02)
    w.write(answer)


async def pcm_no_rate(req: Request, w: Writer, ctx: Ctx) -> None:
    """0.5 s at the asked rate as ``audio/pcm`` naming no rate (vLLM-Omni 0.30's answer)."""
    if not req.openai:
        return await ok(req, w, ctx)
    pcm = tone(0.5, asked_rate(req))
    w.write(head("200 OK", "audio/pcm", len(pcm)) + pcm)


async def sse_no_rate(req: Request, w: Writer, ctx: Ctx) -> None:
    """0.5 s at the asked rate as OpenAI SSE deltas naming no rate (vLLM-Omni's deltas carry none)."""
    if not req.openai:
        return await ok(req, w, ctx)
    body = good_events(req, tone(0.5, asked_rate(req)))
    w.write(head("200 OK", "text/event-stream", len(body)) + body)


async def nul_encoding(req: Request, w: Writer, ctx: Ctx) -> None:
    """A gzip body under a header named ``Content-Encoding\\0`` (no valid field name: curl refuses it)."""
    raw = good_events(req) if not req.openai else PCM * 20
    body = gzip.compress(raw)
    ctype = "text/event-stream" if not req.openai else f"audio/pcm;rate={RATE}"
    w.write(head("200 OK", ctype, len(body), "Content-Encoding\0: gzip\r\n") + body)


async def stereo(req: Request, w: Writer, ctx: Ctx) -> None:
    """0.5 s of two-channel PCM, said so in the Content-Type."""
    if not req.openai:
        return await ok(req, w, ctx)
    pcm = tone(0.5, RATE * 2)  # 2 x 12,000 frames
    w.write(head("200 OK", f"audio/pcm;rate={RATE};channels=2", len(pcm)) + pcm)


def big_endian(pcm: bytes) -> bytes:
    swapped = bytearray(pcm)
    swapped[0::2], swapped[1::2] = pcm[1::2], pcm[0::2]
    return bytes(swapped)


async def l16(req: Request, w: Writer, ctx: Ctx) -> None:
    """RFC 2586's audio/L16: big-endian samples (0.5 s), in pieces that split samples."""
    if not req.openai:
        return await ok(req, w, ctx)
    pcm = big_endian(tone(0.5, RATE))
    w.write(head("200 OK", f"audio/L16;rate={RATE}"))
    for i in range(0, len(pcm), 4097):  # odd pieces: a sample split across two of them
        w.write(chunk(pcm[i:i + 4097]))
        await w.drain()
    w.write(b"0\r\n\r\n")


def f32le(pcm: bytes) -> bytes:
    """int16 samples as float32 little-endian (s / 32767): what a server sending audio/x-raw;format=F32LE sends."""
    import array

    ints = array.array("h")
    ints.frombytes(pcm)
    return array.array("f", [v / 32767 for v in ints]).tobytes()


async def float_raw(req: Request, w: Writer, ctx: Ctx) -> None:
    """0.5 s of float32 samples, declared audio/x-raw;format=F32LE, in pieces that split samples."""
    if not req.openai:
        return await ok(req, w, ctx)
    pcm = f32le(tone(0.5, RATE))
    w.write(head("200 OK", f"audio/x-raw;format=F32LE;rate={RATE}"))
    for i in range(0, len(pcm), 4097):
        w.write(chunk(pcm[i:i + 4097]))
        await w.drain()
    w.write(b"0\r\n\r\n")


def extensible_wav(pcm: bytes, rate: int, subformat: int, bits: int) -> bytes:
    """A WAVE_FORMAT_EXTENSIBLE file (fmt chunk of 40 bytes) whose SubFormat GUID starts with ``subformat``
    (1 PCM, 3 IEEE float)."""
    guid = subformat.to_bytes(4, "little") + bytes.fromhex("000010008000" "00aa00389b71")
    block = bits // 8
    fmt = ((0xFFFE).to_bytes(2, "little") + (1).to_bytes(2, "little") + rate.to_bytes(4, "little")
           + (rate * block).to_bytes(4, "little") + block.to_bytes(2, "little") + bits.to_bytes(2, "little")
           + (22).to_bytes(2, "little") + bits.to_bytes(2, "little") + (4).to_bytes(4, "little") + guid)
    return (b"RIFF" + (4 + 8 + len(fmt) + 8 + len(pcm)).to_bytes(4, "little") + b"WAVE" + b"fmt "
            + len(fmt).to_bytes(4, "little") + fmt + b"data" + len(pcm).to_bytes(4, "little") + pcm)


def _wav_answer(make: Callable[[], bytes]) -> Handler:
    async def answer(req: Request, w: Writer, ctx: Ctx) -> None:
        if not req.openai:
            return await ok(req, w, ctx)
        body = make()
        w.write(head("200 OK", "audio/wav", len(body)) + body)
    return answer


async def sse_bom(req: Request, w: Writer, ctx: Ctx) -> None:
    """0.5 s of audio as SSE (either protocol) whose stream starts with a UTF-8 BOM, split across two pieces."""
    body = b"\xef\xbb\xbf" + good_events(req, tone(0.5, RATE))
    w.write(head("200 OK", "text/event-stream"))
    for part in (body[:2], body[2:]):
        w.write(chunk(part))
        await w.drain()
        await asyncio.sleep(0.01)
    w.write(b"0\r\n\r\n")


async def sse_cr(req: Request, w: Writer, ctx: Ctx) -> None:
    """0.5 s of audio as SSE (either protocol) with CR-only line ends, in pieces of 7 bytes."""
    body = good_events(req, tone(0.5, RATE)).replace(b"\n", b"\r")
    w.write(head("200 OK", "text/event-stream"))
    for i in range(0, len(body), 7):
        w.write(chunk(body[i:i + 7]))
    w.write(b"0\r\n\r\n")


async def folded(req: Request, w: Writer, ctx: Ctx) -> None:
    """The answer's Content-Type folded over two lines (RFC 9112 5.2's obsolete line folding)."""
    if not req.openai:
        return await ok(req, w, ctx)
    w.write(f"HTTP/1.1 200 OK\r\nContent-Type: audio/pcm;\r\n\t rate={RATE}\r\nContent-Length: {len(PCM)}\r\n"
            f"\r\n".encode() + PCM)


INTERIM = 40  # 1xx responses before the final one (the client took at most 16)


async def many_interim(req: Request, w: Writer, ctx: Ctx) -> None:
    for _ in range(INTERIM):
        w.write(b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n")
    await ok(req, w, ctx)


async def close_after(req: Request, w: Writer, ctx: Ctx) -> None:
    """Answers, and closes the connection (no Connection: close) as the next request arrives on it, unread: an
    idle timeout crossing a request on the wire (Hostile.handle does the closing)."""
    await ok(req, w, ctx)


CLOSE_ON_NEXT = {"close_after"}


async def done_rate(req: Request, w: Writer, ctx: Ctx) -> None:
    """Own SSE: audio events at 24 kHz, then a done event naming 16 kHz (count and hash right)."""
    if req.openai:
        return await ok(req, w, ctx)
    body = good_events(req).replace(b'"sample_rate":24000,"pcm_sha256"', b'"sample_rate":16000,"pcm_sha256"')
    assert body.count(b'"sample_rate":16000') == 1
    w.write(head("200 OK", "text/event-stream", len(body)) + body)


async def wav_as_pcm(req: Request, w: Writer, ctx: Ctx) -> None:
    """A whole WAV file (header and all) sent as audio/pcm, or as the first SSE delta's audio."""
    if not req.openai:
        return await ok(req, w, ctx)
    wav = wav_file(tone(0.5, RATE), RATE)
    if b'"sse"' in req.body:  # the request asked stream_format sse
        body = good_events(req, wav)
        w.write(head("200 OK", "text/event-stream", len(body)) + body)
    else:
        w.write(head("200 OK", f"audio/pcm;rate={RATE}", len(wav)) + wav)


async def wav_as_f32(req: Request, w: Writer, ctx: Ctx) -> None:
    """A whole WAV file sent as float32 raw PCM (audio/x-raw;format=F32LE): its header is no samples either."""
    wav = wav_file(tone(0.5, RATE), RATE)
    w.write(head("200 OK", f"audio/x-raw;format=F32LE;rate={RATE}", len(wav)) + wav)


def max_pcm() -> bytes:
    """The audio of two max-size events (max_events), as one raw PCM or WAV answer: ~524 s at 24 kHz."""
    return max_event_pcm() * 2


async def _send_chunked(w: Writer, ctype: str, body: bytes) -> None:
    w.write(head("200 OK", ctype))
    for i in range(0, len(body), BLOCK):
        w.write(chunk(body[i:i + BLOCK]))
        await w.drain()
    w.write(b"0\r\n\r\n")


_MAX_BODIES: dict[str, bytes] = {}


async def max_raw(req: Request, w: Writer, ctx: Ctx) -> None:
    if not req.openai:
        return await max_events(req, w, ctx)
    if "pcm" not in _MAX_BODIES:
        _MAX_BODIES["pcm"] = max_pcm()
    await _send_chunked(w, f"audio/pcm;rate={RATE}", _MAX_BODIES["pcm"])


async def max_wav(req: Request, w: Writer, ctx: Ctx) -> None:
    if not req.openai:
        return await max_events(req, w, ctx)
    if "wav" not in _MAX_BODIES:
        _MAX_BODIES["wav"] = wav_file(max_pcm(), RATE)
    await _send_chunked(w, "audio/wav", _MAX_BODIES["wav"])


# --- answers to the untimed GETs (/identity, /v1/models) ----------------------------------------------------

async def get_ok(req: Request, w: Writer, ctx: Ctx) -> None:
    if req.path.startswith("/elsewhere"):
        ctx.elsewhere += 1
        data = {"data": [{"id": "elsewhere-model"}]} if "models" in req.path else {"case_id": "elsewhere"}
    elif req.path == "/v1/models":
        data = {"object": "list", "data": [{"id": MODEL, "object": "model"}]}
    elif req.path == "/identity":
        data = IDENTITY
    else:
        w.write(head("404 Not Found", length=0))
        return
    body = json.dumps(data).encode()
    w.write(head("200 OK", "application/json", len(body)) + body)


async def get_endless(req: Request, w: Writer, ctx: Ctx) -> None:
    w.write(head("200 OK", "application/json") + chunk(b'{"data": [{"id": "x"}], "pad": "'))
    block = chunk(b" " * BLOCK)
    while True:
        w.write(block)
        await w.drain()


BOMB_INFLATED = 16 * 1024 * 1024  # in-process; its own process (the memory benchmarks) serves 256 MiB
_BOMB: list[bytes] = []


def bomb() -> bytes:
    """A JSON object of BOMB_INFLATED bytes (mostly spaces), gzipped (1/1000 of it)."""
    if not _BOMB:
        z = zlib.compressobj(9, zlib.DEFLATED, 31)
        parts = [z.compress(b'{"data": [{"id": "bomb"}], "pad": "')]
        block = b" " * (1 << 20)
        for _ in range(BOMB_INFLATED >> 20):
            parts.append(z.compress(block))
        parts.append(z.compress(b'"}') + z.flush())
        _BOMB.append(b"".join(parts))
    return _BOMB[0]


async def get_gzip_bomb(req: Request, w: Writer, ctx: Ctx) -> None:
    body = bomb()
    w.write(head("200 OK", "application/json", len(body), "Content-Encoding: gzip\r\n") + body)


async def get_redirect(req: Request, w: Writer, ctx: Ctx) -> None:
    if req.path.startswith("/elsewhere"):
        return await get_ok(req, w, ctx)
    w.write(head("307 Temporary Redirect", length=0,
                 extra=f"Location: http://localhost:{ctx.port}/elsewhere{req.path}\r\n"))


async def get_hold(req: Request, w: Writer, ctx: Ctx) -> None:
    w.write(head("200 OK", "application/json", 100))
    await hold(w)


async def by_path(req: Request, w: Writer, ctx: Ctx) -> None:
    """POST /<mode>/...: that mode's answer (one server, an endpoint per mode: the pytest-path tests)."""
    await MODES[req.path.split("/")[1]][0](req, w, ctx)


# mode -> (POST answer, GET answer); the table first, then more of our own
MODES: dict[str, tuple[Handler, Handler]] = {
    "ok": (ok, get_ok),
    "gzip": (_encoded("gzip", False, False), get_ok),  # raw PCM (openai) / SSE (own), gzipped
    "gzip_sse": (_encoded("gzip", True, True), get_ok),
    "gzip_wav": (gzip_wav, get_ok),
    "deflate_chunked": (_encoded("deflate", False, True), get_ok),
    "br": (_encoded("br", False, False), get_ok),
    "transfer_gzip": (transfer_gzip, get_ok),
    "endless_pcm": (endless_pcm, get_ok),
    "endless_events": (endless_events, get_ok),
    "endless_line": (endless_line, get_ok),
    "endless_comment": (endless_comment, get_ok),
    "max_events": (max_events, get_ok),
    "get_endless": (ok, get_endless),
    "get_gzip_bomb": (ok, get_gzip_bomb),
    "get_redirect": (ok, get_redirect),
    "get_hold": (ok, get_hold),
    "redirect": (redirect, get_ok),
    "s503_hold": (_then_hold("503 Service Unavailable", "application/json"), get_ok),
    "s101_hold": (_then_hold("101 Switching Protocols", None), get_ok),
    "html_hold": (_then_hold("200 OK", "text/html"), get_ok),
    "sse_hold": (_then_hold("200 OK", "text/event-stream", length=None), get_ok),
    "pcm_hold": (_then_hold("200 OK", "audio/pcm", length=None), get_ok),
    # lies a server can tell (tests/test_service_lies.py)
    "presend": (presend, get_ok),
    "presend_anon": (presend_anon, get_ok),
    "pcm_no_rate": (pcm_no_rate, get_ok),
    "sse_no_rate": (sse_no_rate, get_ok),
    "nul_encoding": (nul_encoding, get_ok),
    "stereo": (stereo, get_ok),
    "l16": (l16, get_ok),
    "done_rate": (done_rate, get_ok),
    "wav_as_pcm": (wav_as_pcm, get_ok),
    "wav_as_f32": (wav_as_f32, get_ok),
    "float_raw": (float_raw, get_ok),
    "folded": (folded, get_ok),
    "many_interim": (many_interim, get_ok),
    "close_after": (close_after, get_ok),
    "wav_ext_pcm": (_wav_answer(lambda: extensible_wav(tone(0.5, RATE), RATE, 1, 16)), get_ok),
    "wav_ext_float": (_wav_answer(lambda: extensible_wav(f32le(tone(0.5, RATE)), RATE, 3, 32)), get_ok),
    "sse_bom": (sse_bom, get_ok),
    "sse_cr": (sse_cr, get_ok),
    "max_raw": (max_raw, get_ok),
    "max_wav": (max_wav, get_ok),
    "by_path": (by_path, get_ok),
}


async def _read(reader: asyncio.StreamReader) -> Request:
    raw = await reader.readuntil(b"\r\n\r\n")
    lines = raw.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length") or 0))
    return Request(method, path, headers, body)


@dataclass
class Hostile:
    mode: str
    ctx: Ctx = field(default_factory=Ctx)
    seen: list = field(default_factory=list)  # every request's (method, path, headers)
    server: asyncio.base_events.Server | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.ctx.port}"

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        post, get = MODES[self.mode]
        try:
            while True:
                req = await _read(reader)
                self.ctx.requests += 1
                self.seen.append((req.method, req.path, req.headers))
                await (post if req.method == "POST" else get)(req, writer, self.ctx)
                await writer.drain()
                if self.mode in CLOSE_ON_NEXT and req.method == "POST":
                    await reader.read(1)  # the next request's first byte: closed with it unread
                    return
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass
        finally:
            writer.close()

    async def start(self) -> "Hostile":
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0, backlog=1024)
        self.ctx.port = self.server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        assert self.server is not None
        self.server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.server.wait_closed(), 0.5)


@contextlib.asynccontextmanager
async def hostile(mode: str):
    server = await Hostile(mode).start()
    try:
        yield server
    finally:
        await server.close()


def serve(mode: str, port_file: str) -> None:
    """In its own process: write the port to ``port_file`` once listening, serve until killed."""
    if mode in ("max_events", "max_raw", "max_wav"):
        _max_events(True), _max_events(False)  # built before the port is announced
        _MAX_BODIES.update(pcm=max_pcm(), wav=wav_file(max_pcm(), RATE))
    if mode == "get_gzip_bomb":
        global BOMB_INFLATED
        BOMB_INFLATED = 256 * 1024 * 1024
        bomb()

    async def main() -> None:
        server = await Hostile(mode).start()
        tmp = Path(port_file + ".tmp")
        tmp.write_text(str(server.ctx.port))
        os.replace(tmp, port_file)
        await asyncio.Event().wait()

    asyncio.run(main())


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2])
