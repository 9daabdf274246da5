"""How the load generator carries one speech request: one object per transport, chosen by name (wire.TRANSPORTS).

A transport sends a request's bytes and hands the response's head and body to the run's ``answer``
(client.py: status, Content-Type, the protocol's reader), as a ``Response``; the protocol object
(wire.py) says what the request carries (Accept, Authorization, the body). Both transports stamp the
same times: ``send_wall``/``start_t`` when the request is begun, ``send_t`` when its bytes reach the
socket.

- ``http1``: http1.py, one keep-alive connection per worker (a ``Slot``), kept from the warm-ups into
  the measured phase; a failed exchange drops its connection, and so does anything the server sent on it
  after its last response (``Connection.quiet``).
- ``aiohttp``: aiohttp's client, one session (a pool of ``concurrency`` connections) per run; its
  errors are translated into http1's, so a reason reads the same over either (issue 22's comparison);
  its pool is made to drop a connection with an answer waiting on it, as http1 does (``_quiet_connector``).
"""
from __future__ import annotations

import asyncio
import contextvars
import json
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator, Awaitable, Callable

from yarl import URL

from . import http1
from .readers.limits import Fail
from .readers.response import Body
from .record import RequestRecord


def host_header(url: URL) -> str:
    host = f"[{url.raw_host}]" if ":" in (url.raw_host or "") else url.raw_host
    if url.port != {"http": 80, "https": 443}[url.scheme]:
        host = f"{host}:{url.port}"
    return host


def request_head(url: URL, accept: str = "text/event-stream", authorization: str | None = None) -> bytes:
    """The request line and fixed headers of every speech request (X-Request-Id and Content-Length follow).
    ``Accept-Encoding: identity``: a server may compress only what the client asks for; the client never inflates."""
    auth = f"Authorization: {authorization}\r\n" if authorization else ""
    return (f"POST {url.raw_path_qs} HTTP/1.1\r\nHost: {host_header(url)}\r\nUser-Agent: pytest-s2st\r\n"
            f"Accept: {accept}\r\nAccept-Encoding: identity\r\nContent-Type: application/json\r\n{auth}").encode()


def not_an_answer(status: int, headers: dict[str, str]) -> str | None:
    """Why a response's head alone makes it no answer (a redirect, a protocol switch, a compressed body), or None.
    A redirect is never followed: the benchmark measures the endpoint it was given, not another host."""
    if 300 <= status < 400:
        location = headers.get("location")
        where = f"redirect to {location[:200]!r}" if location is not None else "redirect without a Location"
        return f"HTTP {status} {where}, not followed"
    if status == 101:
        return (f"HTTP 101: the server switched protocols (Upgrade: {headers.get('upgrade', '')[:60]!r}); "
                "no speech answer")
    why = http1.refused_encoding(headers)
    return f"HTTP {status}: {why}" if why else None


class Response(Body):
    """A response as the run's ``answer`` sees it: a reader's Body, plus its status, the Content-Type as the
    record's reasons show it (``seen_type``: "" when the server sent none), and the reads of a body that is
    not audio."""
    status: int
    seen_type: str

    async def head_of_body(self, limit: int) -> bytes:
        """At most ``limit`` bytes of a body that is not read as audio (an error page)."""
        raise NotImplementedError

    async def describe(self) -> str:
        """What an answer of the wrong shape was, for its reason."""
        raise NotImplementedError

    def refuse(self) -> None:
        """Its body is not read: the connection carries no further request."""


Answer = Callable[[Response], Awaitable[None]]


@dataclass
class Slot:
    """One worker's keep-alive connection (http1), kept from the warm-up phase into the measured one."""
    conn: http1.Connection | None = None
    last: str | None = None  # the id of the latest request its connection carried

    def drop(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


class Transport:
    """One way of carrying the run's requests. ``run`` is the client's run: its url, protocol, options
    (timeout_s, read_timeout_s), concurrency and clock (``now``)."""
    name = ""

    def __init__(self, run: Any) -> None:
        self.run = run
        self.unasked: list[str] = []  # a line each time a kept connection held bytes nobody asked for

    async def start(self) -> None:
        """Before the first request (a session, a pool)."""

    async def close(self) -> None:
        """After the last request; every slot is dropped before."""

    async def exchange(self, slot: Slot, body: dict, record: RequestRecord, answer: Answer) -> None:
        raise NotImplementedError

    async def look(self, slots: list[Slot], seconds: float) -> list[str]:
        """After the measured phase, each kept connection is watched ``seconds`` for answers nobody asked for:
        one line for each that got some. (aiohttp's pool is not looked at: its connections are its own.)"""
        return []


# --- http1: this project's HTTP/1.1 client (http1.py) ----------------------------------------------------------

class _H1Response(Response):
    """A response of the own HTTP/1.1 client (http1.py)."""

    def __init__(self, conn: http1.Connection, resp: http1.Response, read_timeout_s: float) -> None:
        self.conn, self.resp, self.read_timeout_s = conn, resp, read_timeout_s
        self.status, self.content_type, self.headers = resp.status, resp.content_type, resp.headers
        self.seen_type = resp.content_type

    @property
    def max_chunk_bytes(self) -> int:  # type: ignore[override]
        return self.conn.max_chunk_bytes

    @max_chunk_bytes.setter
    def max_chunk_bytes(self, value: int) -> None:
        self.conn.max_chunk_bytes = value

    def pieces(self):
        return self.conn.body(self.read_timeout_s)

    def refuse(self) -> None:
        self.conn.reusable = False

    async def head_of_body(self, limit: int) -> bytes:
        raw = bytearray()
        async for piece in self.conn.body(self.read_timeout_s):
            raw += piece
            if len(raw) >= limit:
                self.conn.reusable = False  # the rest is not read
                break
        return bytes(raw[:limit])

    async def describe(self) -> str:
        """'<content type>: <the body's first bytes>' (text bodies only: an audio body is not read, a read
        that fails leaves the type alone)."""
        ctype = self.content_type or "no Content-Type"
        self.conn.reusable = False
        if not (ctype.startswith("text/") or ctype.endswith(("json", "xml"))):
            return ctype
        try:
            raw = await self.head_of_body(120)
        except (http1.Stalled, http1.Disconnected, http1.ProtocolError, OSError):
            return ctype
        text = " ".join(raw.decode(errors="replace").split())
        return f"{ctype}: {text!r}" if text else ctype


class Http1(Transport):
    """http1.py: one keep-alive socket per worker; connect and every read bounded."""
    name = "http1"

    def __init__(self, run: Any) -> None:
        super().__init__(run)
        protocol = run.protocol
        self.head = request_head(run.url, protocol.accept, protocol.authorization())  # built once

    async def _connect(self, slot: Slot) -> http1.Connection:
        if slot.conn is not None and slot.conn.usable:
            return slot.conn
        if slot.conn is not None:
            await asyncio.sleep(0)  # what the socket holds reaches the stream
            self._unasked(slot, slot.conn.waiting())
        slot.drop()
        url, timeout_s = self.run.url, self.run.opts.timeout_s
        try:
            slot.conn = await http1.Connection.open(url.raw_host, url.port, tls=url.scheme == "https",
                                                    timeout_s=timeout_s)
        except asyncio.TimeoutError:
            raise Fail(f"connection failed: no connection within {timeout_s:g} s") from None
        except (OSError, ValueError) as exc:  # refused, unreachable, TLS handshake, ...
            raise Fail(f"connection failed: {exc}") from None
        return slot.conn

    async def exchange(self, slot: Slot, body: dict, record: RequestRecord, answer: Answer) -> None:
        run = self.run
        record.send_wall = time.time()
        record.start_t = run.now()
        conn = await self._connect(slot)
        payload = json.dumps(body, ensure_ascii=False).encode()
        head = self.head + f"X-Request-Id: {record.id}\r\nContent-Length: {len(payload)}\r\n\r\n".encode()
        record.send_t = run.now()
        conn.send(head + payload)
        slot.last = record.id
        try:
            resp = await conn.response(run.opts.read_timeout_s)
        except (http1.Disconnected, ConnectionResetError, BrokenPipeError):
            if not conn.closed_unanswered:
                raise
            # the kept connection was closed as the request went out: it never reached the server. Once more on
            # a new connection (as browsers and urllib3 do), timed from that send, and said so in the record
            record.retried = True
            slot.drop()
            conn = await self._connect(slot)
            record.send_t = run.now()
            conn.send(head + payload)
            resp = await conn.response(run.opts.read_timeout_s)
        await answer(_H1Response(conn, resp, run.opts.read_timeout_s))

    def _unasked(self, slot: Slot, nbytes: int) -> None:
        if nbytes:
            self.unasked.append(unasked_line(nbytes, slot.last))

    async def look(self, slots: list[Slot], seconds: float) -> list[str]:
        kept = [slot for slot in slots if slot.conn is not None]
        for slot, nbytes in zip(kept, await asyncio.gather(*(slot.conn.linger(seconds) for slot in kept))):
            self._unasked(slot, nbytes)
        return self.unasked


def unasked_line(nbytes: int, last: str | None) -> str:
    return (f"{nbytes} bytes nobody asked for came on a kept-alive connection after the answer to {last}: the "
            f"server sent more answers than requests, so which answer was whose cannot be told")


# --- aiohttp: the same run over aiohttp's client (issue 22's fair comparison) -----------------------------------

class _AioResponse(Response):
    """An aiohttp response. aiohttp never holds a whole HTTP chunk (it passes chunk data on as it arrives),
    so max_chunk_bytes has nothing to bound."""

    def __init__(self, resp: Any) -> None:
        self.resp, self.max_chunk_bytes, self.status = resp, 0, resp.status
        self.protocol = _PROTOCOL.get()
        self.content_type = resp.content_type.lower()  # aiohttp: application/octet-stream when none was sent
        self.headers = {k.lower(): v for k, v in resp.headers.items()}
        self.seen_type = self.content_type if "content-type" in resp.headers else ""

    async def pieces(self) -> AsyncIterator[bytes]:
        async for piece in self.resp.content.iter_any():
            yield piece

    async def head_of_body(self, limit: int) -> bytes:
        return await self.resp.content.read(limit)

    def refuse(self) -> None:
        self.resp.close()
        if self.protocol is not None:  # already back in the pool when its body was whole: closed there
            self.protocol.close()

    async def describe(self) -> str:
        return self.resp.content_type


# the aiohttp connection (its protocol) of the exchange running in this task: aiohttp releases a response's
# connection to the pool as soon as its body is parsed, so the response no longer holds it when refused
_PROTOCOL: contextvars.ContextVar[Any] = contextvars.ContextVar("s2st_aiohttp_protocol", default=None)


def _quiet_connector(aiohttp: Any) -> type:
    """aiohttp's TCPConnector, but a pooled connection is taken only when nothing came on it since its last
    response. aiohttp (3.14) hands a kept-alive connection out without looking: a whole answer the server
    sent unasked waits parsed in its protocol and is read as the next request's answer (TTFA: none, or
    microseconds). Such a connection is closed and the next one taken (a new one, at worst)."""

    class QuietConnector(aiohttp.TCPConnector):
        async def connect(self, req: Any, traces: Any, timeout: Any) -> Any:
            for _ in range(self.limit + 1):  # the pool holds at most ``limit``: then a new connection
                conn = await super().connect(req, traces, timeout)
                if conn.protocol is None or not conn.protocol.should_close:
                    break
                conn.close()
            _PROTOCOL.set(conn.protocol)  # the exchange (same task) may have to close it: ``refuse``
            return conn

    return QuietConnector


def _one_line(exc: BaseException) -> str:
    """aiohttp's parser errors span lines (the bad line, a caret under it): one line for the record."""
    return " ".join(str(getattr(exc, "message", "") or exc).split()).rstrip(" ^")[:300]


class Aiohttp(Transport):
    """aiohttp's client: a connection pool of ``concurrency``, errors translated into http1's."""
    name = "aiohttp"
    session: Any = None

    def __init__(self, run: Any) -> None:
        super().__init__(run)
        self.reused: set[str] = set()  # ids of the requests in flight on a kept-alive connection of the pool

    async def start(self) -> None:
        import aiohttp  # lazy: heavy

        run = self.run

        async def on_sent(session, ctx, params) -> None:  # the send stamp: the request's bytes went to the socket
            record = ctx.trace_request_ctx
            if record is not None and record.send_t is None:
                record.send_t = run.now()

        async def on_reuse(session, ctx, params) -> None:  # a kept-alive connection of the pool carries it
            if ctx.trace_request_ctx is not None:
                self.reused.add(ctx.trace_request_ctx.id)

        trace = aiohttp.TraceConfig()
        trace.on_request_chunk_sent.append(on_sent)
        trace.on_connection_reuseconn.append(on_reuse)
        self.session = aiohttp.ClientSession(
            connector=_quiet_connector(aiohttp)(limit=run.concurrency), trace_configs=[trace],
            timeout=aiohttp.ClientTimeout(sock_connect=run.opts.timeout_s, sock_read=run.opts.read_timeout_s),
            max_line_size=8 * 1024, max_field_size=8 * 1024, auto_decompress=False)

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()

    async def exchange(self, slot: Slot, body: dict, record: RequestRecord, answer: Answer) -> None:
        record.send_wall = time.time()
        record.start_t = self.run.now()
        try:
            await self._exchange(body, record, answer)
        except http1.Disconnected:
            if record.id not in self.reused or record.http_status is not None or record.retried:
                raise
            # as http1's: the kept connection closed before any byte of the answer: once more, on a new one
            record.retried, record.send_t = True, None
            await self._exchange(body, record, answer)
        finally:
            self.reused.discard(record.id)

    async def _exchange(self, body: dict, record: RequestRecord, answer: Answer) -> None:
        import aiohttp  # lazy: heavy

        run = self.run
        self.reused.discard(record.id)
        payload = json.dumps(body, ensure_ascii=False).encode()
        headers = {"User-Agent": "pytest-s2st", "Content-Type": "application/json", "X-Request-Id": record.id,
                   "Accept": run.protocol.accept, "Accept-Encoding": "identity"}
        auth = run.protocol.authorization()
        if auth:
            headers["Authorization"] = auth
        assert self.session is not None
        try:
            async with self.session.post(run.url, data=payload, headers=headers, trace_request_ctx=record,
                                         allow_redirects=False) as resp:
                await answer(_AioResponse(resp))
        except aiohttp.ServerTimeoutError:
            raise http1.Stalled() from None
        except aiohttp.ClientConnectorError as exc:
            raise Fail(f"connection failed: {exc}") from None
        except aiohttp.ServerDisconnectedError:
            raise http1.Disconnected("server disconnected mid-response") from None
        except aiohttp.ClientPayloadError as exc:
            raise http1.ProtocolError(_one_line(exc)) from None
        except aiohttp.ClientResponseError as exc:
            raise http1.ProtocolError(_one_line(exc)) from None
