"""A failed request's reason says what the response really was (issue 20 item 7), for both protocols:
a body without any event, a foreign event stream that outlives the timeout, events without a type;
a level's achieved rate counts what was sent, and an all-failed level says so. Real aiohttp servers
on loopback."""
from __future__ import annotations

import asyncio
import base64
import re

import pytest
from aiohttp import web

import loopback
from loopback import PCM, unused_port
from pytest_s2st import runs
from pytest_s2st.service import openai_api as oa
from pytest_s2st.service.answers import sse_event

OWN_AUDIO = {"type": "audio", "index": 0, "pcm": base64.b64encode(PCM).decode(), "sample_rate": 8000}
OWN_EXPECTED = "audio/done for protocol s2st"
OPENAI_EXPECTED = f"{oa.DELTA}/{oa.DONE} for protocol openai"


async def _stream(request, *pieces: bytes, ctype: str = oa.SSE_TYPE, pause_s: float = 0.0) -> web.StreamResponse:
    await request.read()
    resp = web.StreamResponse(headers={"Content-Type": ctype})
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    for piece in pieces:
        await resp.write(piece)
        if pause_s:
            await asyncio.sleep(pause_s)
    await resp.write_eof()
    return resp


async def no_events(request):  # an SSE body that ends cleanly (terminated chunked body) with no event in it
    return await _stream(request, b"hello\n", b": just a comment\n")


async def empty_sse(request):
    return await _stream(request)


async def typeless_events(request):
    return await _stream(request, *[sse_event({"pcm_b64": "AAAA", "sample_rate": 24000})] * 3)


async def own_events_forever(request):  # the own protocol's audio events, never a done: for an openai client
    await request.read()
    resp = web.StreamResponse(headers={"Content-Type": oa.SSE_TYPE})
    await resp.prepare(request)
    while True:
        await resp.write(sse_event(OWN_AUDIO))
        await asyncio.sleep(0.002)


async def openai_events_forever(request):  # OpenAI's delta events, never a done: for an s2st client
    await request.read()
    resp = web.StreamResponse(headers={"Content-Type": oa.SSE_TYPE})
    await resp.prepare(request)
    while True:
        await resp.write(sse_event({"type": oa.DELTA, "audio": base64.b64encode(PCM).decode()}))
        await asyncio.sleep(0.002)


async def pcm_split_at_one_byte(request):  # a sample split across pieces: TTFA waits for the whole one
    return await _stream(request, PCM[:1], PCM[1:2], PCM[2:], ctype="audio/pcm", pause_s=0.05)


async def http500(request):
    return web.Response(status=500, text="internal oops")


ROUTES = {f.__name__: f for f in (no_events, empty_sse, typeless_events, own_events_forever,
                                   openai_events_forever, pcm_split_at_one_byte, http500)}


def load(tmp_path, route: str | None, protocol: str, **kw):
    return loopback.load(tmp_path, lambda: ROUTES, route, protocol=protocol, bound=None, **kw)  # not serial: no wall bound


def errors(result) -> list[str]:
    assert all(r["status"] == "error" for r in result.records)
    return [r["error"] for r in result.records]


@pytest.mark.parametrize("protocol, expected", [("s2st", OWN_EXPECTED), ("openai", OPENAI_EXPECTED)])
def test_a_body_without_events_that_ends_cleanly_says_so(tmp_path, protocol, expected):
    for route, shown in (("no_events", "first bytes: b'hello\\n: just a comment\\n'"), ("empty_sse", "an empty body")):
        out = tmp_path / route
        for error in errors(load(out, route, protocol)):
            assert error == f"no events of the expected type ({expected}) in a response that ended cleanly ({shown})"
            assert "mid-stream" not in error


@pytest.mark.parametrize("protocol, route, other, name", [
    ("openai", "own_events_forever", "s2st", "'audio'"),
    ("s2st", "openai_events_forever", "openai", f"'{oa.DELTA}'"),
])
def test_a_foreign_stream_that_outlives_the_timeout_names_its_events(tmp_path, protocol, route, other, name):
    expected = OPENAI_EXPECTED if protocol == "openai" else OWN_EXPECTED
    for error in errors(load(tmp_path, route, protocol, timeout_s=1.0)):
        match = re.fullmatch(
            rf"timeout: no complete response within 1 s; the response held no events of the expected type "
            rf"\({re.escape(expected)}\) but ([0-9,]+) events of type {re.escape(name)} "
            rf"\(this server may speak protocol {other}: try --s2st-protocol {other}\)", error)
        assert match, error
        assert int(match.group(1).replace(",", "")) >= 10  # ~2 ms apart for a second


@pytest.mark.parametrize("protocol, expected", [("s2st", OWN_EXPECTED), ("openai", OPENAI_EXPECTED)])
def test_events_without_a_type_are_named_by_their_keys(tmp_path, protocol, expected):
    for error in errors(load(tmp_path, "typeless_events", protocol)):
        assert error == f"expected SSE events of type {expected}; got events of type none (keys 'pcm_b64', 'sample_rate')"
        assert "None" not in error


def test_achieved_rate_counts_sent_requests(tmp_path):
    result = load(tmp_path, None, "s2st", endpoint=f"http://127.0.0.1:{unused_port()}", requests=3)
    assert all(r["send_t"] is None for r in result.records)  # refused before a byte was sent
    assert result.summary["achieved_rate"] is None
    assert result.summary["reasons"]["achieved_rate"] == (
        "none of the 3 measured requests was sent (no connection, or the run's bound ran out)")


def test_an_all_failed_level_says_so(tmp_path):
    result = load(tmp_path, "http500", "s2st", requests=3)
    assert result.summary["reasons"]["all"] == (
        "no request completed ok: all 3 measured requests failed (first: HTTP 500: internal oops)")
    assert result.summary["achieved_rate"] > 0  # they were sent: the server saw the load


def test_raw_pcm_split_at_one_byte_stamps_ttfa_at_the_first_whole_sample(tmp_path):
    result = load(tmp_path, "pcm_split_at_one_byte", "openai", requests=1, sample_rate=8000)
    r = result.records[0]
    assert r["status"] == "ok", r["error"]
    assert [n for _, n in r["chunks"]] == [1, 1, 2]
    assert r["chunks"][0][0] < r["chunks"][1][0] == r["first_audio_t"]  # not at the lone first byte
    assert runs.request_metrics(r)["ttfa_s"] == r["chunks"][1][0] - r["send_t"]
    assert runs.wav_path(tmp_path, r["id"]).read_bytes() == runs.wav_bytes(PCM, 8000)
