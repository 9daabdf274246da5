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
    if mode == "max_events":
        _max_events(True), _max_events(False)  # built before the port is announced
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
