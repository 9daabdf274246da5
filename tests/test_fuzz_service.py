"""Hypothesis fuzzing of the service client's parsers: any input either works or fails as the one
kind of failure its caller handles (S2STError in one line, a request error with a reason), never
another exception and never a hang.

Parsers: the SSE event path (the client's own-SSE reader (readers/own_sse.py) + _finish, fed body pieces directly), the
HTTP/1.1 response parser (an in-memory stream), both together through a raw loopback server, the
endpoint normaliser, and load_workload. Examples run per test are counted and printed (pytest -s).
"""
from __future__ import annotations

import asyncio
import base64
import collections
import hashlib
import json
import math
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pytest_s2st import runs
from pytest_s2st.errors import S2STError
from pytest_s2st.service import http1
from pytest_s2st.service.client import LoadOptions, _Run, request_head, run_load, speech_url
from pytest_s2st.service.evidence import AudioSink
from pytest_s2st.service.readers.limits import Fail
from pytest_s2st.service.readers.own_sse import read_own_sse
from pytest_s2st.service.readers.response import Body, Seen, Stream
from pytest_s2st.service.answers import sse_event
from pytest_s2st.workload import load_workload

COUNTS: collections.Counter = collections.Counter()
FUZZ = settings(deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module", autouse=True)
def report_counts():
    yield
    print("\nhypothesis examples run: " + ", ".join(f"{k}={v}" for k, v in sorted(COUNTS.items())))


# --- strategies ------------------------------------------------------------------------------

json_scalars = st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=20)
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)
pcm_text = (st.binary(max_size=64).map(lambda b: base64.b64encode(b).decode())
            | st.sampled_from(["", "***", "AAA", "AAAA====", "é", "AQ=="]) | json_values)
rates = st.sampled_from([8000, 24000, 48000, 0, -1, 10**9, True, "24000", None])
audio = st.fixed_dictionaries({"type": st.just("audio"), "pcm": pcm_text, "sample_rate": rates},
                              optional={"index": json_values})
done = st.fixed_dictionaries({"type": st.just("done")}, optional={
    "samples": st.integers(-1, 64) | json_values, "pcm_sha256": st.text(max_size=64) | json_values,
    "streaming": json_values})
error = st.fixed_dictionaries({"type": st.just("error"), "message": json_values})
events = audio | done | error | st.dictionaries(st.text(max_size=6), json_values, max_size=3)
event_lines = events.map(lambda e: b"data: " + json.dumps(e).encode() + b"\n\n")
other_lines = st.sampled_from([b": keep-alive\n", b"\n", b"\r\n", b"data:\n", b"data: {\n", b"data: [1]\n\n",
                               b"event: audio\n", b"data:" + b"[" * 5000 + b"\n\n", b"retry: 5\n"]) \
    | st.binary(max_size=40)
noisy_bodies = st.lists(event_lines | other_lines, max_size=12).map(b"".join)


@st.composite
def valid_bodies(draw) -> bytes:
    """A well-formed stream (audio events, then done), now and then with comments or a fault mixed in."""
    whole_samples = st.binary(min_size=2, max_size=40).map(lambda b: b[: len(b) // 2 * 2])
    chunks = draw(st.lists(whole_samples, min_size=1, max_size=6))
    pcm = b"".join(chunks)
    parts = [sse_event({"type": "audio", "index": i, "pcm": base64.b64encode(c).decode(), "sample_rate": 8000})
             for i, c in enumerate(chunks)]
    parts.append(sse_event({"type": "done", "samples": len(pcm) // 2, "pcm_sha256": hashlib.sha256(pcm).hexdigest()}))
    extra = draw(st.lists(st.tuples(st.integers(0, len(parts)), other_lines | event_lines), max_size=2))
    for at, line in sorted(extra, reverse=True):
        parts.insert(at, line)
    return b"".join(parts)


sse_bodies = valid_bodies() | noisy_bodies


@st.composite
def split(draw, body_strategy):
    """A body cut into the pieces the socket would deliver."""
    body = draw(body_strategy)
    cuts = sorted(draw(st.lists(st.integers(0, len(body)), max_size=6)))
    return [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)])]


# --- the SSE event path, fed directly ----------------------------------------------------------

class _PieceBody(Body):
    """What a reader needs of a response: the body's pieces, and a chunk bound to set."""
    content_type, headers, max_chunk_bytes = "text/event-stream", {}, 0

    def __init__(self, pieces: list[bytes]):
        self._pieces = pieces

    async def pieces(self):
        for piece in self._pieces:
            yield piece


async def _no_wait() -> None:
    pass


@settings(FUZZ, max_examples=400)
@given(pieces=split(sse_bodies), max_audio_s=st.sampled_from([0.001, 0.01, 1.0, 600.0]))
def test_sse_event_path_ends_in_an_event_or_a_recorded_reason(pieces, max_audio_s):
    COUNTS["sse_direct"] += 1
    opts = LoadOptions(timeout_s=1.0, read_timeout_s=1.0, max_audio_s=max_audio_s)
    run = _Run(speech_url("http://127.0.0.1:1"), 1, Path("."), opts, time.perf_counter())
    record = run.new_record({"id": "a"}, 0, False)
    pcm = AudioSink(Path("unused.wav"), lambda *_: None)  # counted, never written
    stream = Stream(_PieceBody(pieces), record, pcm, Seen(), run.protocol, run.limits, 24000, run.now, _no_wait)

    try:
        asyncio.run(read_own_sse(stream))
        run._finish(record, pcm)
        COUNTS["sse_direct:ok"] += 1
    except Fail as exc:
        assert str(exc) and len(str(exc)) < 1000
        COUNTS["sse_direct:reason"] += 1
    assert pcm.size <= run.limits.pcm_bytes(record.sample_rate)
    assert len(record.chunks) <= run.limits.events
    runs.record_json(record.to_dict())  # the writer can always write it (a lone surrogate is escaped)


# --- the HTTP/1.1 response parser, on an in-memory stream ------------------------------------------

class _NoWriter:
    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass


status_lines = st.sampled_from([b"HTTP/1.1 200 OK", b"HTTP/1.0 200 OK", b"HTTP/1.1 100 Continue", b"HTTP/1.1 204 x",
                                b"HTTP/1.1 5xx", b"HTTP/2 200", b"SMTP", b""]) | st.binary(max_size=20)
header_lines = st.sampled_from([b"Transfer-Encoding: chunked", b"Content-Length: 5", b"Content-Length: -1",
                                b"Content-Length: 99999999999", b"Connection: close", b"X", b" folded: x",
                                b"Content-Type: text/event-stream"]) | st.binary(max_size=30)
chunk_parts = st.sampled_from([b"5\r\nhello\r\n", b"0\r\n\r\n", b"0\r\nT: x\r\n\r\n", b"ff\r\n", b"-1\r\n",
                               b"1000000000\r\n", b"2;x=y\r\nab\r\n", b"zz\r\n", b"3\r\nabcXY"]) \
    | st.binary(max_size=20)


framings = st.sampled_from(["chunked", "length", "close", "length-wrong", "busy"])


def framed(framing: str, body: bytes) -> bytes:
    """A 200 text/event-stream response carrying ``body`` as ``framing`` says (or a 503)."""
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    if framing == "chunked":
        return head + b"Transfer-Encoding: chunked\r\n\r\n" + b"".join(
            b"%x\r\n%s\r\n" % (len(body[i:i + 50]), body[i:i + 50]) for i in range(0, len(body), 50)) + b"0\r\n\r\n"
    if framing.startswith("length"):
        return head + b"Content-Length: %d\r\n\r\n" % (64 if framing == "length-wrong" else len(body)) + body
    if framing == "busy":
        return b"HTTP/1.1 503 Busy\r\nContent-Length: 16\r\n\r\n{\"error\":\"busy\"}"
    return head + b"\r\n" + body


@st.composite
def responses(draw):
    head = b"\r\n".join([draw(status_lines), *draw(st.lists(header_lines, max_size=4))]) + b"\r\n\r\n"
    return head + b"".join(draw(st.lists(chunk_parts | st.binary(max_size=30), max_size=6)))


@settings(FUZZ, max_examples=500)
@given(pieces=split(st.builds(lambda f, b, cut: framed(f, b)[:cut], framings, st.binary(max_size=300),
                              st.integers(1, 10**4)) | responses() | st.binary(max_size=200)))
def test_http1_parser_completes_or_names_the_fault(pieces):
    COUNTS["http1_stream"] += 1

    async def parse():
        reader = asyncio.StreamReader()
        for piece in pieces:
            reader.feed_data(piece)
        reader.feed_eof()
        conn = http1.Connection(reader, _NoWriter())  # type: ignore[arg-type]
        conn.max_chunk_bytes = 1 << 20
        await conn.response(1.0)
        return b"".join([piece async for piece in conn.body(1.0)])

    try:
        body = asyncio.run(asyncio.wait_for(parse(), 5))
        assert len(body) <= sum(map(len, pieces))
        COUNTS["http1_stream:ok"] += 1
    except (http1.ProtocolError, http1.Disconnected):
        COUNTS["http1_stream:reason"] += 1


# --- both, through a real loopback server ------------------------------------------------------



@settings(FUZZ, max_examples=200)
@given(answer=st.builds(framed, framings, sse_bodies) | responses())
# was: Infinity parsed into the record, written as it came, and requests.jsonl unreadable after the run
@example(answer=framed("chunked", b'data: {"type": "done", "samples": 0, "streaming": Infinity}\n\n'))
@example(answer=framed("length", b'data: {"type": "speech.audio.done", "usage": NaN}\n\n'))
def test_loopback_server_answers_end_as_one_record_each(answer):
    COUNTS["loopback"] += 1

    async def handle(reader, writer):
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            if head.startswith(b"POST"):
                await reader.readexactly(int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0]))
                writer.write(answer)
            else:
                writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()  # the body always ends: never a wait on the read timeout

    async def main(out):
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        try:
            return await run_load(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", WORKLOAD, 1,
                                  out_dir=out, warmups=0, requests=1, timeout_s=3.0, max_audio_s=0.02)
        finally:
            server.close()

    with tempfile.TemporaryDirectory() as out:
        result = asyncio.run(asyncio.wait_for(main(Path(out)), 20))
        records = runs.read_records(out)
    assert records == result.records and len(records) == 1
    r = records[0]
    assert r["status"] == "ok" or (r["error"] and not r["error"].startswith("client error")), r["error"]
    COUNTS[f"loopback:{r['status']}"] += 1


WORKLOAD = [{"id": "a", "text": "hi", "language": "English", "voice": "Ryan", "seed": 1}]


# --- endpoints ----------------------------------------------------------------------------------

schemes = st.sampled_from(["http", "https", "HTTP", "ftp", "", "ws", "http:"])
hosts = st.sampled_from(["127.0.0.1", "localhost", "[::1]", "[::1", "bücher.de", "a..b", "", "u:p@h", "h%41"]) \
    | st.text(max_size=12)
ports = st.sampled_from(["", ":", ":0", ":80", ":443", ":8000", ":65535", ":65536", ":99999", ":-5", ":abc"]) \
    | st.integers(-10, 70000).map(lambda p: f":{p}")
paths = st.sampled_from(["", "/", "/v1/audio/speech", "/a b", "/x?y=1", "#f", "/\r\nX: y", "/\ud800"]) \
    | st.text(max_size=15)
good_endpoints = st.builds(
    lambda s, h, p, q: f"{s}://{h}{p}{q}", st.sampled_from(["http", "https", "HTTP"]),
    st.sampled_from(["127.0.0.1", "localhost", "[::1]", "bücher.de", "Example.ORG", "a-b.c_d"]),
    st.sampled_from(["", ":80", ":443"]) | st.integers(1, 65535).map(lambda p: f":{p}"),
    st.sampled_from(["", "/"]) | st.text(max_size=15).map(lambda t: "/" + t))
endpoints = good_endpoints | st.builds(lambda s, h, p, q: f"{s}://{h}{p}{q}", schemes, hosts, ports, paths) \
    | st.text(max_size=40)


@settings(FUZZ, max_examples=1500)
@given(endpoint=endpoints)
def test_endpoint_normalises_once_or_is_one_line(endpoint):
    COUNTS["endpoint"] += 1
    try:
        normal = runs.normalize_endpoint(endpoint)
    except S2STError as exc:
        assert "\n" not in str(exc) and str(exc).startswith(f"endpoint {endpoint!r}")
        COUNTS["endpoint:refused"] += 1
        return
    assert runs.normalize_endpoint(normal) == normal  # one spelling: normalising again changes nothing
    assert normal.isascii() and normal.isprintable() and " " not in normal
    url = speech_url(endpoint)
    assert str(url) == normal and url.scheme in ("http", "https") and 0 < url.port < 65536
    line, *headers = request_head(url).decode("ascii").split("\r\n")
    assert len(line.split(" ")) == 3 and headers[0].startswith("Host: ") and headers[-1] == ""


# --- workload files -----------------------------------------------------------------------------

field_names = st.sampled_from(["id", "text", "language", "voice", "seed", "instruct", "speed"])
field_values = (st.text(max_size=8) | st.integers(-5, 2**64) | st.booleans() | st.none() | st.floats()
                | st.sampled_from(["\ud800", "a\u2028b", "x\x85", " ", "ok"]) | json_values)
item = st.fixed_dictionaries({"id": st.text(min_size=1, max_size=4), "text": st.text(min_size=1, max_size=12),
                              "language": st.just("English"), "voice": st.just("Ryan"), "seed": st.integers(0, 9)})
items = item | st.dictionaries(field_names, field_values, max_size=7) | json_values
ids = st.text(st.characters(codec="utf-8"), min_size=1, max_size=4).filter(str.strip)
good_items = st.lists(item.flatmap(lambda i: ids.map(lambda n: {**i, "id": n})), min_size=1, max_size=5,
                      unique_by=lambda i: i["id"])
line_ends = st.sampled_from(["\n", "\r\n", "\r", "\n\n"])


@st.composite
def workload_files(draw) -> bytes:
    if draw(st.booleans()):  # a valid file, now and then with one bad line
        lines = [json.dumps(v, ensure_ascii=draw(st.booleans())) for v in draw(good_items)]
        lines += draw(st.lists(items.map(json.dumps), max_size=1))
    else:
        lines = [json.dumps(v, ensure_ascii=draw(st.booleans())) for v in draw(st.lists(items, max_size=5))]
        lines += draw(st.lists(st.sampled_from(["{oops", "[" * 3000, "", "  ", "\ufeff{}"]) | st.text(max_size=10),
                               max_size=2))
    text = "".join(line + draw(line_ends) for line in draw(st.permutations(lines)))
    return text.encode("utf-8", "surrogatepass")  # a raw lone surrogate is invalid UTF-8


@settings(FUZZ, max_examples=400)
@given(data=workload_files() | st.binary(max_size=100))
def test_workload_loads_or_is_one_line(data):
    COUNTS["workload"] += 1
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "w.jsonl"
        path.write_bytes(data)
        try:
            loaded = load_workload(path)
        except S2STError as exc:
            assert "\n" not in str(exc) and str(exc).startswith(str(path)), str(exc)
            COUNTS["workload:refused"] += 1
            return
    assert loaded and len({i["id"] for i in loaded}) == len(loaded)
    for i in loaded:  # whatever loads can be sent
        json.dumps(i, ensure_ascii=False).encode("utf-8")
        assert isinstance(i["seed"], int) and not isinstance(i["seed"], bool) and not math.isnan(i["seed"])


@settings(max_examples=300, deadline=None)
@given(events=st.lists(st.dictionaries(st.sampled_from("abc"), st.integers(-5, 5), min_size=1), min_size=1, max_size=4),
       end=st.sampled_from([b"\n", b"\r", b"\r\n"]), bom=st.booleans(),
       cuts=st.lists(st.integers(0, 400), max_size=8))
def test_fuzz_sse_line_ends_and_a_leading_bom_read_the_same_events(events, end, bom, cuts):
    """The WHATWG event-stream grammar: lines end in CRLF, LF or CR, and one leading UTF-8 BOM is not part of
    the stream; however the body is cut into pieces (a CRLF or the BOM split across two), the same events."""
    from pytest_s2st.service.readers.limits import Limits
    from pytest_s2st.service.readers.sse_frames import BOM, Events

    body = (BOM if bom else b"") + b"".join(b"data: " + json.dumps(e).encode() + end + b": a comment" + end + end
                                             for e in events)
    reader, got, at = Events(Limits(60)), [], 0
    for cut in sorted(set(c for c in cuts if c < len(body))) + [len(body)]:
        got += [json.loads(raw) for raw in reader.feed(body[at:cut])]
        at = cut
    assert got == events
