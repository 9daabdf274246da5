"""A lean HTTP/1.1 client connection for the load generator: one keep-alive socket per worker.

Why not aiohttp's client on the timed path: the load generator must not be the bottleneck of what it
measures. Measured here at concurrency 64 (benchmarks/test_loadgen_overhead.py), the client's own
share of TTFA (server write -> client stamp) was p99 0.95-1.25 ms with aiohttp's client in run_load,
0.81-1.12 ms with this one (a bare raw-socket client: 0.5-0.6); the target is 1 ms. The reference server, and the
untimed GET /identity, stay on aiohttp.

It speaks what a speech endpoint answers: a status line and headers, then a body framed by
``Transfer-Encoding: chunked``, by ``Content-Length``, or by the connection's close. Interim 1xx
responses are skipped. Every read is bounded by ``read_timeout_s`` (a stall); the caller bounds
the whole request. Every byte it buffers is bounded too: the header block (``max_header_bytes``), a
chunk-size or trailer line, and a chunk's announced size (``max_chunk_bytes``); chunk data is passed on
as it arrives, never held whole. A crossed bound is TooLarge, naming the limit and its value. A header
line curl refuses (a name that is no token, a value holding NUL, CR or LF) is a ProtocolError, and a
kept-alive connection carries the next request only when nothing came on it since (``quiet``).
"""
from __future__ import annotations

import asyncio
import re
import select
import ssl
import sys
from dataclasses import dataclass
from typing import Any, AsyncIterator, Awaitable

MAX_HEADER_BYTES = 64 * 1024  # status line + headers (aiohttp's server allows 8 KiB per line)
MAX_CHUNK_BYTES = 64 * 1024 * 1024  # one chunk's announced size; the client sets its own from the workload
_MAX_LINE = 8 * 1024  # a chunk-size line (hex + extensions) or one trailer line
_READ_SIZE = 256 * 1024
_HEX = re.compile(rb"[0-9A-Fa-f]+")
_DIGITS = re.compile(r"[0-9]+")
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # a field name (RFC 9110 5.1, 5.6.2)
_BAD_VALUE = re.compile(rb"[\x00\r\n]")  # RFC 9110 5.5: a value holding one is refused, never read as another


class ProtocolError(Exception):
    """The response is not HTTP/1.1 as framed (bad status line, chunk size, ...)."""


class TooLarge(ProtocolError):
    """The response crossed one of the client's size bounds (the message names it and its value)."""


class Disconnected(Exception):
    """The server closed the connection before the response ended."""


class Stalled(Exception):
    """No data for read_timeout_s."""


@dataclass
class Response:
    status: int
    headers: dict[str, str]  # lower-case names; a repeated field is joined with ", "

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").split(";", 1)[0].strip().lower()


async def within(seconds: float, awaitable: Awaitable[Any]) -> Any:
    """``await awaitable``, or asyncio.TimeoutError after ``seconds`` (no extra task on Python >= 3.11)."""
    if sys.version_info >= (3, 11):
        async with asyncio.timeout(seconds):
            return await awaitable
    return await asyncio.wait_for(awaitable, seconds)


def refused_encoding(headers: dict[str, str]) -> str | None:
    """Why a response's Content-Encoding is refused, or None when it is identity (or absent). The client asks
    for identity (``Accept-Encoding: identity``) and never inflates: a compressed body is no audio."""
    coding = headers.get("content-encoding", "").strip().lower()
    if coding in ("", "identity"):
        return None
    return f"Content-Encoding {coding[:60]} refused (the client asks for identity and never inflates)"


async def _bounded(awaitable: Awaitable[Any], seconds: float) -> Any:
    try:
        return await within(seconds, awaitable)
    except asyncio.TimeoutError:  # only this read's own deadline: the caller's bound cancels instead
        raise Stalled(f"no data for {seconds:g} s") from None


def _unfolded(lines: list[bytes]) -> list[bytes]:
    """Header lines with each obsolete line folding (a line starting with SP or HTAB continues the one before)
    replaced by one SP, as RFC 9112 5.2 tells a recipient to; a first line that starts so is left to be refused."""
    out: list[bytes] = []
    for line in lines:
        if line[:1] in (b" ", b"\t") and out:
            out[-1] = out[-1].rstrip(b" \t") + b" " + line.strip(b" \t")
        else:
            out.append(line)
    return out


class Connection:
    """Its own read buffer over the stream: a response that arrived in one segment (the usual case) is
    parsed with one bounded socket read, not one per framing line (each bound costs a timer)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.reusable = True  # False once a response leaves it in an unknown state or says close
        self._buf = bytearray()
        self._framing: tuple[str, int] = ("close", 0)
        self.max_header_bytes = MAX_HEADER_BYTES
        self.max_chunk_bytes = MAX_CHUNK_BYTES
        self.carried = 0  # requests sent on it
        self.heard = 0  # bytes read since the last request was sent

    @classmethod
    async def open(cls, host: str, port: int, *, tls: bool, timeout_s: float) -> "Connection":
        """OSError (refused, unreachable, ...) or asyncio.TimeoutError propagate to the caller."""
        context = ssl.create_default_context() if tls else None
        reader, writer = await within(timeout_s, asyncio.open_connection(host, port, ssl=context))
        return cls(reader, writer)

    @property
    def usable(self) -> bool:
        """Still open, the last response ended cleanly, and nothing came since (``quiet``)."""
        return self.reusable and not self.writer.is_closing() and self.quiet()

    def quiet(self) -> bool:
        """Nothing from the server since the last response's end: no byte in this buffer, the stream's or
        the socket (a non-blocking look, nothing read), and no close. A request sent on a connection that is
        not quiet would take what waits there for its answer: a server that sends one answer more than asked
        would give it a TTFA of microseconds. (Over TLS, the socket's own bytes, e.g. a session ticket, are
        not looked at: only what TLS has handed on.)"""
        if self._buf or getattr(self.reader, "_buffer", None) or self.reader.at_eof():  # no public size
            return False
        sock = self.writer.get_extra_info("socket")
        if sock is None or self.writer.get_extra_info("sslcontext") is not None:
            return True
        try:
            if hasattr(select, "poll"):  # select.select fails past fd 1023
                poller = select.poll()
                poller.register(sock.fileno(), select.POLLIN)
                return not poller.poll(0)
            return not select.select([sock.fileno()], [], [], 0)[0]
        except (OSError, ValueError):  # closed under us
            return False

    def waiting(self) -> int:
        """Bytes already here past the last response's end (this buffer and the stream's; what the socket
        holds reaches the stream at the loop's next turn): a server that answered more than it was asked.
        A 408 is not counted: RFC 9110 15.5.9 lets a server send one as it closes an idle connection."""
        held = bytes(self._buf) + bytes(getattr(self.reader, "_buffer", b""))  # the stream has no public size
        return 0 if held[:12] in (b"HTTP/1.1 408", b"HTTP/1.0 408") else len(held)

    async def linger(self, seconds: float) -> int:
        """Wait up to ``seconds`` for bytes nobody asked for: their count (0: none came, or a close)."""
        if not self.reusable or self.writer.is_closing():
            return 0
        await asyncio.sleep(0)
        if self.waiting() or self.reader.at_eof():
            return self.waiting()
        try:
            self._buf += await asyncio.wait_for(self.reader.read(_READ_SIZE), seconds)
        except (asyncio.TimeoutError, OSError):
            return 0
        return self.waiting()

    def send(self, data: bytes) -> None:
        """Hand the request to the socket (asyncio writes at once when its buffer is empty)."""
        self.carried += 1
        self.heard = 0
        self.writer.write(data)

    @property
    def closed_unanswered(self) -> bool:
        """The server closed this kept-alive connection before any byte of the answer to its latest request: a
        close that crossed the request on the wire (a server that closes idle connections without saying so),
        so the request never reached it. Browsers and urllib3 send such a request again, once, on a new one."""
        return self.carried > 1 and self.heard == 0 and not self._buf

    async def _fill(self, read_timeout_s: float) -> None:
        data = await _bounded(self.reader.read(_READ_SIZE), read_timeout_s)
        self.heard += len(data)
        if not data:
            self.reusable = False
            raise Disconnected("server disconnected mid-response")
        self._buf += data

    async def _until(self, sep: bytes, read_timeout_s: float, limit: int, what: str) -> bytes:
        """Up to and including ``sep``; TooLarge "<what>=<limit>" once more than ``limit`` bytes came without it."""
        start = 0
        while (end := self._buf.find(sep, start)) < 0:
            if len(self._buf) > limit:
                raise TooLarge(f"{what}={limit}")
            start = max(0, len(self._buf) - len(sep) + 1)
            await self._fill(read_timeout_s)
        if end > limit:  # found, but only after more than the bound had arrived in one read
            raise TooLarge(f"{what}={limit}")
        end += len(sep)
        out = bytes(self._buf[:end])
        del self._buf[:end]
        return out

    async def _exactly(self, n: int, read_timeout_s: float) -> bytes:
        while len(self._buf) < n:
            await self._fill(read_timeout_s)
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    async def _upto(self, n: int, read_timeout_s: float) -> bytes:
        """At most ``n`` bytes: what is buffered, else one read's worth."""
        if not self._buf:
            await self._fill(read_timeout_s)
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    async def response(self, read_timeout_s: float) -> Response:
        """Status line and headers of the next final (non-1xx) response."""
        while True:  # any number of interim responses (RFC 9110 15.2); the caller's deadline bounds a drip
            try:
                head = await self._until(b"\r\n\r\n", read_timeout_s, self.max_header_bytes,
                                         "response headers passed max_header_bytes")
            except Disconnected:
                raise Disconnected("server closed the connection before answering") from None
            lines = head[:-4].split(b"\r\n")
            parts = lines[0].split(None, 2)
            if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
                raise ProtocolError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
            status = int(parts[1])
            headers: dict[str, str] = {}
            for line in _unfolded(lines[1:]):
                name, sep, value = line.partition(b":")
                if not sep or not name or name[:1] in (b" ", b"\t"):
                    raise ProtocolError(f"malformed header line: {line[:80]!r}")
                # a name that is no token (Content-Encoding\0) would be no header we act on, and its
                # value (gzip) would pass unseen: refused, as curl and aiohttp refuse it
                if not _TOKEN.fullmatch(name.rstrip(b" \t")):
                    raise ProtocolError(f"malformed header name {name[:60]!r} (not an HTTP token)")
                if _BAD_VALUE.search(value):
                    raise ProtocolError(f"header {name[:60].decode('latin-1')!r}: its value holds NUL, CR or LF")
                key, text = name.rstrip(b" \t").lower().decode("latin-1"), value.strip(b" \t").decode("latin-1")
                headers[key] = f"{headers[key]}, {text}" if key in headers else text
            if 100 <= status < 200 and status != 101:
                continue  # interim response (e.g. 100 Continue): the final one follows
            if parts[0] == b"HTTP/1.0" or "close" in headers.get("connection", "").lower():
                self.reusable = False
            try:
                self._framing = self._frame(status, headers)
            except ProtocolError as exc:
                raise ProtocolError(f"HTTP {status}: {exc}") from None
            return Response(status, headers)

    def _frame(self, status: int, headers: dict[str, str]) -> tuple[str, int]:
        if status in (204, 304):
            return "length", 0
        coding = headers.get("transfer-encoding", "").strip().lower()
        if coding:
            if coding != "chunked":  # gzip, chunked: compressed bytes inside the chunks; never inflated
                self.reusable = False
                raise ProtocolError(f"Transfer-Encoding {coding[:60]!r} refused (only chunked is read)")
            return "chunked", 0
        if "content-length" in headers:
            if not _DIGITS.fullmatch(headers["content-length"]):  # int() would take "+5", "1_0", " 5"
                raise ProtocolError(f"bad Content-Length {headers['content-length'][:40]!r}")
            return "length", int(headers["content-length"])
        self.reusable = False  # the body ends when the server closes
        return "close", 0

    async def body(self, read_timeout_s: float) -> AsyncIterator[bytes]:
        """The response body, piece by piece as it arrives; ends where the framing says."""
        kind, length = self._framing
        try:
            if kind == "chunked":
                async for piece in self._chunked(read_timeout_s):
                    yield piece
            elif kind == "length":
                while length > 0:
                    data = await self._upto(length, read_timeout_s)
                    length -= len(data)
                    yield data
            else:
                while True:
                    if self._buf:
                        data = bytes(self._buf)
                        self._buf.clear()
                        yield data
                    try:
                        await self._fill(read_timeout_s)
                    except Disconnected:
                        return  # the close is the body's end
        except BaseException:
            self.reusable = False  # left mid-body (stall, cancel, disconnect, protocol error): never reuse
            raise

    async def _chunked(self, read_timeout_s: float) -> AsyncIterator[bytes]:
        """Chunk data as it arrives (a chunk is never held whole: its size is the sender's claim)."""
        while True:
            line = await self._until(b"\r\n", read_timeout_s, _MAX_LINE, "a chunk-size line passed max_line_bytes")
            digits = line.split(b";", 1)[0].strip()
            if not _HEX.fullmatch(digits):  # int(x, 16) would take "-1", "0x1", "1_0"
                raise ProtocolError(f"bad chunk size line {line[:40]!r}")
            size = int(digits, 16)
            if size > self.max_chunk_bytes:
                raise TooLarge(f"a chunk of {size} bytes passed max_chunk_bytes={self.max_chunk_bytes}")
            if size == 0:
                trailers = 0
                while (line := await self._until(b"\r\n", read_timeout_s, _MAX_LINE,
                                                 "a trailer line passed max_line_bytes")) != b"\r\n":
                    trailers += len(line)
                    if trailers > self.max_header_bytes:
                        raise TooLarge(f"trailers passed max_header_bytes={self.max_header_bytes}")
                return
            while size > 0:
                data = await self._upto(size, read_timeout_s)
                size -= len(data)
                yield data
            if await self._exactly(2, read_timeout_s) != b"\r\n":
                raise ProtocolError("chunk not followed by CRLF")

    def close(self) -> None:
        self.reusable = False
        if not self.writer.is_closing():
            self.writer.close()
