"""Every fault of tests/test_service_faults.py, for ``protocol="openai"``: real misbehaving aiohttp servers on
loopback answering in OpenAI's shapes (raw PCM, SSE speech.audio.* events, WAV). Each affected request
ends as status "error" with its reason, the others go on, the run ends within its bound; and a server
speaking another protocol gets a reason naming what was expected and what came (both protocols)."""
from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
import time

import pytest
from aiohttp import web

import loopback
from loopback import PCM, WORKLOAD, assert_every_request_failed, unused_port
from pytest_s2st import runs
from pytest_s2st.service import openai_api as oa
from pytest_s2st.service.client import run_load
from pytest_s2st.service.answers import sse_event

DELTA = {"type": oa.DELTA, "audio": base64.b64encode(PCM).decode()}
DONE = {"type": oa.DONE}


async def _raw(request, *pieces: bytes, ctype: str = "audio/pcm") -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": ctype})
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    for piece in pieces:
        await resp.write(piece)
    return resp


async def _sse(request, *events: dict | bytes) -> web.StreamResponse:
    return await _raw(request, *(e if isinstance(e, bytes) else sse_event(e) for e in events), ctype=oa.SSE_TYPE)


async def ok(request):
    body = await request.json()
    assert body["input"] == "hello there" and body["response_format"] == "pcm" and body["stream"] is True
    return await _raw(request, PCM[:3], PCM[3:])  # a sample split across chunks is legal


async def http500(request):
    return web.json_response({"error": {"message": "internal oops", "type": "server_error"}}, status=500)


async def busy(request):
    return web.json_response({"error": {"message": "busy", "type": "server_error"}}, status=503)


async def close_abruptly(request):
    resp = await _raw(request, PCM)
    request.transport.close()  # chunked body never terminated
    return resp


async def sse_without_done(request):
    return await _sse(request, DELTA)


async def malformed_chunking(request):  # a chunk-size line that is not hex, after one good chunk
    request.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: audio/pcm\r\nTransfer-Encoding: chunked\r\n\r\n"
                            b"4\r\n" + PCM + b"\r\nzz\r\n")  # by hand: aiohttp would frame it right
    await asyncio.sleep(3600)


async def malformed_json(request):
    return await _sse(request, DELTA, b"data: {not json\n\n")


async def malformed_base64(request):
    return await _sse(request, {**DELTA, "audio": "***"}, DONE)


async def odd_bytes(request):
    return await _raw(request, b"\x01\x02\x03")


async def error_event(request):
    return await _sse(request, DELTA, {"type": "error", "error": {"message": "out of device memory"}})


async def malformed_wav(request):
    return web.Response(body=b"RIFX" + b"\0" * 40, content_type="audio/wav")


async def stereo_wav(request):
    header = runs.wav_bytes(PCM, 8000)
    return web.Response(body=header[:22] + b"\x02\x00" + header[24:], content_type="audio/wav")


async def no_audio(request):
    return await _raw(request)


async def html_page(request):
    return web.Response(text="<html><body>Welcome to nginx!</body></html>", content_type="text/html")


async def own_protocol_events(request):  # a server of this project's own dialect answering an OpenAI request
    return await _sse(request, {"type": "audio", "index": 0, "pcm": DELTA["audio"], "sample_rate": 8000},
                      {"type": "done", "samples": 2})


async def stall_after_first_chunk(request):
    resp = await _raw(request, PCM)
    await asyncio.sleep(3600)
    return resp


async def endless_pcm(request):  # audio past max_audio_s, never ending
    resp = await _raw(request)
    while True:
        await resp.write(b"\0" * 4096)
        await asyncio.sleep(0)


ROUTES = {f.__name__: f for f in (
    ok, http500, busy, close_abruptly, sse_without_done, malformed_chunking, malformed_json, malformed_base64,
    odd_bytes, error_event, malformed_wav, stereo_wav, no_audio, html_page, own_protocol_events,
    stall_after_first_chunk, endless_pcm)}


def routes() -> dict:
    counter = {"n": 0}

    async def every_other(request):
        counter["n"] += 1
        return await (http500 if counter["n"] % 2 else ok)(request)

    async def openai_shaped(request):  # an OpenAI server asked in the own protocol: raw PCM back
        return await _raw(request, PCM)

    async def openai_sse(request):
        return await _sse(request, DELTA, DONE)

    async def needs_key(request):  # a server started with an API key (vllm serve --api-key)
        if request.headers.get("Authorization") != "Bearer sk-test":
            return web.json_response({"error": {"message": "Unauthorized"}}, status=401)
        return await ok(request)

    return {**ROUTES, "every_other": every_other, "openai_shaped": openai_shaped, "openai_sse": openai_sse,
            "needs_key": needs_key}


def load(tmp_path, route: str | None, protocol: str = "openai", **kw):
    return loopback.load(tmp_path, routes, route, protocol=protocol, **kw)


def test_ok_raw_pcm_split_sample(tmp_path):
    result = load(tmp_path, "ok")
    for r in result.records:
        assert r["status"] == "ok" and r["audio_seconds"] == 2 / 8000 and r["sample_rate"] == 8000
        assert [n for _, n in r["chunks"]] == [3, 1]
        assert r["first_audio_t"] == r["chunks"][0][0]  # 3 bytes hold a whole sample


@pytest.mark.parametrize("route, reason, kw", [
    ("http500", "HTTP 500: internal oops", {}),
    ("busy", "HTTP 503: busy", {}),
    ("close_abruptly", "server disconnected mid-response", {}),
    ("sse_without_done", f"stream ended before the {oa.DONE} event (server closed mid-stream)", {}),
    ("malformed_chunking", "response broken mid-stream: bad chunk size line", {}),
    ("malformed_json", "malformed SSE event", {}),
    ("malformed_base64", f"malformed {oa.DELTA} event: 'audio' is not base64", {}),
    ("odd_bytes", "raw PCM response: 3 bytes is not whole int16 samples", {}),
    ("error_event", "server error event: out of device memory", {}),
    ("malformed_wav", "malformed WAV response: not a RIFF/WAVE header", {}),
    ("stereo_wav", "malformed WAV response: WAV is 2 channel(s) of 16-bit samples; expected mono 16-bit PCM", {}),
    ("no_audio", "response carried no audio", {}),
    ("html_page", "expected raw PCM, SSE audio events or a WAV for protocol openai; got text/html: "
                  "'<html><body>Welcome to nginx!</body></html>'", {}),
    ("own_protocol_events", f"expected SSE events of type {oa.DELTA}/{oa.DONE} for protocol openai; got events of "
                            "type 'audio', 'done' (this server may speak protocol s2st: try --s2st-protocol s2st)", {}),
    ("stall_after_first_chunk", "read stalled: no data for 0.3 s", {"read_timeout_s": 0.3}),
    ("stall_before_headers", "read stalled", {"read_timeout_s": 0.3}),
    ("trickle_forever", "timeout: no complete response within 0.5 s", {"timeout_s": 0.5}),
    ("endless_pcm", "response audio passed max_audio_s=0.5 (8000 bytes at 8000 Hz)", {"max_audio_s": 0.5}),
])
def test_fault_is_recorded_and_bounded(tmp_path, route, reason, kw):
    assert_every_request_failed(load(tmp_path, route, **kw), tmp_path, reason)


def test_connection_refused(tmp_path):
    result = load(tmp_path, None, endpoint=f"http://127.0.0.1:{unused_port()}", requests=3, warmups=1, extra_body={})
    assert len(result.records) == 4
    assert all(r["status"] == "error" and "connection failed" in r["error"] for r in result.records)
    level = json.loads((tmp_path / runs.SUMMARY).read_text())["by_concurrency"]["1"]
    assert level["model"] is None and level["model_source"].startswith("GET /v1/models: ")


def test_other_requests_continue_past_failures(tmp_path):
    result = load(tmp_path, "every_other", requests=6)
    statuses = [r["status"] for r in sorted(result.records, key=lambda r: r["index"])]
    assert statuses == ["error", "ok"] * 3 and result.summary["n_ok"] == 3


@pytest.mark.parametrize("route, reason", [
    ("openai_shaped", "expected SSE audio events (text/event-stream) for protocol s2st; got audio/pcm "
                      "(not text/event-stream) (this server may speak protocol openai: try --s2st-protocol openai)"),
    ("openai_sse", f"expected SSE events of type audio/done for protocol s2st; got events of type '{oa.DELTA}', "
                   f"'{oa.DONE}' (this server may speak protocol openai: try --s2st-protocol openai)"),
    ("html_page", "expected SSE audio events (text/event-stream) for protocol s2st; got text/html: "
                  "'<html><body>Welcome to nginx!</body></html>' (not text/event-stream)"),
])
def test_own_protocol_names_what_it_expected_and_what_came(tmp_path, route, reason):
    result = load(tmp_path, route, protocol="s2st")
    assert all(r["status"] == "error" and r["error"] == reason for r in result.records), result.records[0]["error"]


def test_killed_server_mid_run_is_each_requests_error(tmp_path):
    identity = tmp_path / "id.json"
    proc = subprocess.Popen([sys.executable, "-m", "pytest_s2st.cli.serve", "--demo-tone", "--demo-delay-s", "0.3",
                             "--port", "0", "--identity-output", str(identity)])
    try:
        deadline = time.monotonic() + 60
        while not identity.exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        endpoint = json.loads(identity.read_text())["endpoint"]

        async def main():
            asyncio.get_running_loop().call_later(1.0, proc.kill)
            return await run_load(endpoint, WORKLOAD, 1, out_dir=tmp_path / "run", warmups=0, requests=8,
                                  timeout_s=5.0, protocol="openai")

        t = time.perf_counter()
        result = asyncio.run(asyncio.wait_for(main(), 30))
        assert time.perf_counter() - t < 15
    finally:
        proc.kill()
        proc.wait()
    by_index = sorted(result.records, key=lambda r: r["index"])
    assert len(by_index) == 8 and by_index[0]["status"] == "ok"
    assert by_index[-1]["status"] == "error"
    assert any(x in by_index[-1]["error"] for x in ("connection failed", "disconnected", "connection lost"))


def test_api_key_from_the_environment_is_sent_as_bearer(tmp_path, monkeypatch):
    monkeypatch.delenv(oa.API_KEY_ENV, raising=False)
    result = load(tmp_path / "without", "needs_key")
    assert all("HTTP 401: Unauthorized" in r["error"] for r in result.records)
    monkeypatch.setenv(oa.API_KEY_ENV, "sk-test")
    result = load(tmp_path / "with", "needs_key")
    assert [r["status"] for r in result.records] == ["ok", "ok"]
    saved = (tmp_path / "with" / runs.SUMMARY).read_text() + (tmp_path / "with" / runs.REQUESTS).read_text()
    assert "sk-test" not in saved  # the key is sent, never written


def test_an_api_key_that_would_split_the_header_is_one_line(tmp_path, monkeypatch):
    from pytest_s2st.errors import S2STError

    monkeypatch.setenv(oa.API_KEY_ENV, "sk-1\r\nX-Evil: 1")
    with pytest.raises(S2STError, match=r"^\$OPENAI_API_KEY: not a single line of ASCII$"):
        load(tmp_path, "needs_key")
