"""Every fault the load generator must survive, served by real misbehaving aiohttp servers on loopback.

Each affected request must end as status "error" with its reason, the run must go on with the others,
and it must end within its time bound (no hang).
"""
from __future__ import annotations

import asyncio
import base64
import hashlib

import pytest
from aiohttp import web

import loopback
from loopback import PCM, assert_every_request_failed, unused_port
from pytest_s2st import runs
from pytest_s2st.service.answers import sse_event

AUDIO = {"type": "audio", "index": 0, "pcm": base64.b64encode(PCM).decode(), "sample_rate": 8000}
DONE = {"type": "done", "samples": 2, "sample_rate": 8000, "pcm_sha256": hashlib.sha256(PCM).hexdigest()}


async def _sse(request, *events: dict | bytes) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    for event in events:
        await resp.write(event if isinstance(event, bytes) else sse_event(event))
    return resp


async def ok(request):
    return await _sse(request, AUDIO, DONE)


async def http500(request):
    return web.Response(status=500, text="internal oops")


async def busy(request):
    return web.json_response({"error": "busy"}, status=503)


async def close_abruptly(request):
    resp = await _sse(request, AUDIO)
    request.transport.close()  # socket gone mid-stream, chunked body never terminated
    return resp


async def end_without_done(request):
    return await _sse(request, AUDIO)


async def malformed_json(request):
    return await _sse(request, AUDIO, b"data: {not json\n\n")


async def malformed_base64(request):
    return await _sse(request, {**AUDIO, "pcm": "***"}, DONE)


async def non_ascii_base64(request):
    return await _sse(request, {**AUDIO, "pcm": "AAé="}, DONE)


async def absurd_rate(request):  # would lift the PCM bound (max_audio_s * rate * 2) past any memory
    return await _sse(request, {**AUDIO, "sample_rate": 10**9}, DONE)


async def odd_bytes(request):
    return await _sse(request, {**AUDIO, "pcm": base64.b64encode(b"\x01\x02\x03").decode()}, DONE)


async def error_event(request):
    return await _sse(request, AUDIO, {"type": "error", "message": "out of device memory"})


async def sha_mismatch(request):
    return await _sse(request, AUDIO, {**DONE, "pcm_sha256": "0" * 64})


async def no_audio(request):
    return await _sse(request, {**DONE, "samples": 0, "pcm_sha256": hashlib.sha256(b"").hexdigest()})


async def not_sse(request):
    return web.json_response({"audio": "nope"})


async def stall_after_first_chunk(request):
    resp = await _sse(request, AUDIO)
    await asyncio.sleep(3600)
    return resp


ROUTES = {f.__name__: f for f in (ok, http500, busy, close_abruptly, end_without_done, malformed_json,
                                  malformed_base64, non_ascii_base64, absurd_rate, odd_bytes, error_event, sha_mismatch, no_audio, not_sse,
                                  stall_after_first_chunk)}


def routes() -> dict:
    counter = {"n": 0}

    async def every_other(request):  # alternate failure and success: the others must go on
        counter["n"] += 1
        return await (http500 if counter["n"] % 2 else ok)(request)

    async def every_other_too_long(request):  # 40 bytes of PCM against max_audio_s=0.001 (16 bytes at 8 kHz)
        counter["n"] += 1
        return await (_sse(request, *[AUDIO] * 10, DONE) if counter["n"] % 2 else ok(request))

    return {**ROUTES, "every_other": every_other, "every_other_too_long": every_other_too_long}


def load(tmp_path, route: str | None, **kw):
    return loopback.load(tmp_path, routes, route, protocol="s2st", **kw)


@pytest.mark.parametrize(
    "route, reason, kw",
    [
        ("http500", "HTTP 500: internal oops", {}),
        ("busy", "HTTP 503: busy", {}),
        ("close_abruptly", "mid-", {}),
        ("end_without_done", "stream ended before the done event", {}),
        ("malformed_json", "malformed SSE event", {}),
        ("malformed_base64", "not base64", {}),
        ("non_ascii_base64", "malformed audio event 0: 'pcm' is not base64", {}),
        ("absurd_rate", "malformed audio event 0: sample_rate 1000000000", {}),
        ("odd_bytes", "not whole int16 samples", {}),
        ("error_event", "server error event: out of device memory", {}),
        ("sha_mismatch", "pcm_sha256", {}),
        ("no_audio", "no audio", {}),
        ("not_sse", "not text/event-stream", {}),
        ("stall_after_first_chunk", "read stalled: no data for 0.3 s", {"read_timeout_s": 0.3}),
        ("stall_before_headers", "read stalled", {"read_timeout_s": 0.3}),
        ("trickle_forever", "timeout: no complete response within 0.5 s", {"timeout_s": 0.5}),
    ],
)
def test_fault_is_recorded_and_bounded(tmp_path, route, reason, kw):
    assert_every_request_failed(load(tmp_path, route, **kw), tmp_path, reason)


def test_partial_audio_before_a_fault_keeps_its_chunk_times(tmp_path):
    r = load(tmp_path, "end_without_done", requests=1).records[0]
    assert r["status"] == "error" and r["chunks"] and r["first_audio_t"] is not None


def test_connection_refused(tmp_path):
    result = load(tmp_path, None, endpoint=f"http://127.0.0.1:{unused_port()}", requests=3, warmups=1)
    assert len(result.records) == 4
    assert all(r["status"] == "error" and "connection failed" in r["error"] for r in result.records)
    assert result.identity is None and result.identity_error


def test_other_requests_continue_past_failures(tmp_path):
    result = load(tmp_path, "every_other", requests=6, concurrency=1)
    statuses = [r["status"] for r in sorted(result.records, key=lambda r: r["index"])]
    assert statuses == ["error", "ok"] * 3
    assert result.summary["n_ok"] == 3 and result.summary["error_rate"] == 0.5


def test_a_crossed_bound_fails_only_that_request(tmp_path):
    result = load(tmp_path, "every_other_too_long", requests=6, warmups=1, max_audio_s=0.001)
    by_index = sorted(result.measured, key=lambda r: r["index"])
    assert [r["status"] for r in by_index] == ["ok", "error"] * 3  # the warm-up took the first answer
    assert all(r["error"] == "response audio passed max_audio_s=0.001 (16 bytes at 8000 Hz)"
               for r in by_index if r["status"] == "error")
    assert len(runs.read_records(tmp_path)) == 7 and result.summary["n_ok"] == 3


def test_total_time_bound_cancels_and_records_every_request(tmp_path):
    result = load(tmp_path, "stall_before_headers", bound=6.0, requests=5, concurrency=2, warmups=1,
                  timeout_s=60.0, total_timeout_s=1.0)
    assert result.timed_out
    by_id = {r["id"]: r for r in result.records}
    assert set(by_id) == {"c2-w0", *(f"c2-r{i}" for i in range(5))}
    assert by_id["c2-w0"]["error"].startswith("cancelled")
    # the deadline fell during the warm-up: no measured request was sent
    assert all(by_id[f"c2-r{i}"]["error"].startswith("not sent") for i in range(5))
    assert all(by_id[f"c2-r{i}"]["send_t"] is None for i in range(5))
