"""The load generator's HTTP/1.1 client against real loopback servers that answer byte-for-byte."""
from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess

import pytest
from aiohttp import web

from pytest_s2st.service import http1
from pytest_s2st.service.client import request_head, run_load, speech_url
from pytest_s2st.service.server import make_app
from pytest_s2st.service.synthesizers import demo_tone_synthesizer

REQUEST = b"POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\n{}"
CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"


async def raw_server(*answers: bytes, close_after: bool = False):
    """Answer each request on a connection with the next of ``answers`` (bytes as given)."""
    seen: list[bytes] = []

    async def handle(reader, writer):
        for answer in answers:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                break
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0]) if b"content-length" in head.lower() else 0
            seen.append(head + await reader.readexactly(length))
            writer.write(answer)
            await writer.drain()
        if close_after:
            writer.close()
        else:
            await reader.read()  # keep the connection until the client closes it

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], seen


async def exchange(conn: http1.Connection, timeout: float = 2.0) -> tuple[int, dict, bytes]:
    conn.send(REQUEST)
    resp = await conn.response(timeout)
    body = b"".join([piece async for piece in conn.body(timeout)])
    return resp.status, resp.headers, body


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


@pytest.mark.parametrize("answer, body, reusable", [
    (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", b"hello", True),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nhel\r\n2\r\nlo\r\n0\r\nX-Trailer: t\r\n\r\n",
     b"hello", True),
    (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", b"ok", True),
    (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", b"ok", False),
    (b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", b"ok", False),
    (b"HTTP/1.1 204 No Content\r\n\r\n", b"", True),
])
def test_framings(answer, body, reusable):
    async def main():
        server, port, _ = await raw_server(answer)
        conn = await http1.Connection.open("127.0.0.1", port, tls=False, timeout_s=2)
        try:
            status, headers, got = await exchange(conn)
            usable = conn.usable  # may it carry the next request?
        finally:
            conn.close()
            server.close()
        return status, got, usable

    status, got, usable = run(main())
    assert got == body and status in (200, 204)
    assert usable is reusable


def test_keep_alive_carries_the_next_request_and_headers_are_folded():
    answer = b"HTTP/1.1 200 OK\r\nSet: a\r\nSet: b\r\nContent-Length: 2\r\n\r\nok"

    async def main():
        server, port, seen = await raw_server(answer, answer)
        conn = await http1.Connection.open("127.0.0.1", port, tls=False, timeout_s=2)
        try:
            first = await exchange(conn)
            assert conn.usable
            second = await exchange(conn)
        finally:
            conn.close()
            server.close()
        return first, second, seen

    first, second, seen = run(main())
    assert first == second == (200, {"set": "a, b", "content-length": "2"}, b"ok")
    assert len(seen) == 2  # both on the one connection


def test_body_until_close_and_a_server_closing_an_idle_connection():
    async def main():
        server, port, _ = await raw_server(b"HTTP/1.1 200 OK\r\n\r\nuntil close", close_after=True)
        conn = await http1.Connection.open("127.0.0.1", port, tls=False, timeout_s=2)
        try:
            got = await exchange(conn)
            await asyncio.sleep(0.05)
        finally:
            server.close()
        return got, conn

    (status, _, body), conn = run(main())
    assert (status, body) == (200, b"until close") and not conn.usable


@pytest.mark.parametrize("answer, error, message", [
    (b"SMTP ready\r\n\r\n", http1.ProtocolError, "not an HTTP/1.x status line"),
    (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", http1.ProtocolError, "malformed header line"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", http1.ProtocolError, "bad chunk size"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabXY", http1.ProtocolError, "not followed by CRLF"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", http1.ProtocolError, "bad Content-Length"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", http1.Disconnected, "mid-response"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", http1.Disconnected, "mid-response"),
    (b"", http1.Disconnected, "before answering"),
    # every buffered byte is bounded: headers, chunk-size and trailer lines, a chunk's announced size
    (b"HTTP/1.1 200 OK\r\nX: " + b"a" * 70000 + b"\r\n\r\n", http1.TooLarge,
     "response headers passed max_header_bytes=65536"),
    (b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 20000, http1.TooLarge, "response headers passed max_header_bytes=65536"),
    (CHUNKED + b"1000000000\r\n" + b"a" * 1000, http1.TooLarge,
     "a chunk of 68719476736 bytes passed max_chunk_bytes=67108864"),
    (CHUNKED + b"5;" + b"x" * 9000 + b"\r\nhello\r\n", http1.TooLarge, "a chunk-size line passed max_line_bytes=8192"),
    (CHUNKED + b"0\r\n" + (b"T: " + b"a" * 1000 + b"\r\n") * 70 + b"\r\n", http1.TooLarge,
     "trailers passed max_header_bytes=65536"),
    # any number of interim responses is legal (RFC 9110 15.2): what ends these is the close
    (b"HTTP/1.1 100 Continue\r\n\r\n" * 17, http1.Disconnected, "before answering"),
    (b"HTTP/1.1 200 OK\r\n folded: before any field\r\n\r\n", http1.ProtocolError, "malformed header line"),
    # int() would take these
    (CHUNKED + b"-1\r\nx\r\n", http1.ProtocolError, "bad chunk size"),
    (CHUNKED + b"0x5\r\nhello\r\n0\r\n\r\n", http1.ProtocolError, "bad chunk size"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\nhello", http1.ProtocolError, "bad Content-Length"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 1_0\r\n\r\nhello", http1.ProtocolError, "bad Content-Length"),
])
def test_broken_responses_raise_with_a_reason(answer, error, message):
    async def main():
        server, port, _ = await raw_server(answer, close_after=True)
        conn = await http1.Connection.open("127.0.0.1", port, tls=False, timeout_s=2)
        try:
            with pytest.raises(error, match=message):
                await exchange(conn)
        finally:
            conn.close()
            server.close()
        return conn

    assert not run(main()).reusable


def test_a_stall_is_bounded_per_read():
    async def main():
        server, port, _ = await raw_server(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhel")
        conn = await http1.Connection.open("127.0.0.1", port, tls=False, timeout_s=2)
        loop = asyncio.get_running_loop()
        t = loop.time()
        try:
            with pytest.raises(http1.Stalled, match="no data for 0.2 s"):
                await exchange(conn, timeout=0.2)
        finally:
            conn.close()
            server.close()
        return loop.time() - t

    assert run(main()) < 5


def test_chunk_data_is_passed_on_as_it_arrives():
    """A chunk is never held whole (its size is the sender's claim): what arrived is yielded at once."""
    async def main():
        server, port, _ = await raw_server(CHUNKED + b"10\r\nhello")  # 16 bytes announced, 5 sent
        conn = await http1.Connection.open("127.0.0.1", port, tls=False, timeout_s=2)
        try:
            conn.send(REQUEST)
            await conn.response(2)
            body = conn.body(1.0)
            first = await body.__anext__()
            await body.aclose()
        finally:
            conn.close()
            server.close()
        return first, conn.reusable

    assert run(main()) == (b"hello", False)  # left mid-body: never reused


def test_request_head_names_host_and_port():
    assert request_head(speech_url("http://127.0.0.1:8000")).startswith(
        b"POST /v1/audio/speech HTTP/1.1\r\nHost: 127.0.0.1:8000\r\n")
    assert b"Host: example.org\r\n" in request_head(speech_url("https://example.org/tts?x=1"))
    assert request_head(speech_url("https://example.org/tts?x=1")).startswith(b"POST /tts?x=1 HTTP/1.1")
    assert b"Host: [::1]:9\r\n" in request_head(speech_url("http://[::1]:9"))


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command to make a test certificate")
def test_run_load_over_https(tmp_path, monkeypatch):
    """An https endpoint: TLS with the certificate verified against SSL_CERT_FILE (here a self-signed one)."""
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, capture_output=True)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)

    async def main():
        app = make_app(demo_tone_synthesizer(), identity={"code": "t"}, queue_size=4, chunk_samples=1000)
        runner = web.AppRunner(app, handle_signals=False)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_ctx).start()
        port = runner.addresses[0][1]
        try:
            return await run_load(f"https://127.0.0.1:{port}", [{"text": "hi", "voice": "a", "seed": 1}], 2,
                                  out_dir=tmp_path / "run", warmups=1, requests=3)
        finally:
            await runner.cleanup()

    result = run(main())
    assert [r["status"] for r in result.records] == ["ok"] * 4, [r["error"] for r in result.records]
