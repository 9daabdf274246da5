"""The load generator against a hostile server (issue 29; tests/hostile.py): nothing a server sends can
exhaust, fool or redirect a benchmark. Every wire format (own SSE; OpenAI raw PCM, SSE and WAV), both
transports (http1.py and aiohttp's client), and the untimed GETs: each misbehaviour is ONE recorded reason
naming what came; a compressed body is never audio; a redirect is never followed; a status already read
stays in the reason; an endless or huge body is bounded."""
from __future__ import annotations

import asyncio
import time

import pytest

from hostile import MAX_EVENT, PCM, hostile, max_event_pcm
from pytest_s2st import runs
from pytest_s2st.service import server_facts
from pytest_s2st.service.bench import external_case_name
from pytest_s2st.service.client import run_load, speech_url
from pytest_s2st.service.readers.limits import Fail, Limits

WORKLOAD = [{"id": "a", "text": "hello there", "language": "English", "voice": "Ryan", "seed": 1}]
PROTOCOLS = ("s2st", "openai")
TRANSPORTS = ("http1", "aiohttp")


def load(tmp_path, mode: str, protocol: str = "openai", transport: str = "http1", bound: float = 20.0, **kw):
    kw = {"warmups": 0, "requests": 2, "timeout_s": 3.0, "sample_rate": 24000, **kw}

    async def main():
        async with hostile(mode) as server:
            t = time.perf_counter()
            result = await run_load(server.url, WORKLOAD, kw.pop("concurrency", 1), out_dir=tmp_path,
                                    protocol=protocol, transport=transport, **kw)
            return result, server, time.perf_counter() - t

    result, server, took = asyncio.run(asyncio.wait_for(main(), bound + 10))
    assert took < bound, f"run took {took:.1f} s"
    assert runs.read_records(tmp_path) == result.records
    return result, server


def failed_with(result, tmp_path, *reasons: str) -> None:
    assert len(result.records) == 2
    for r in result.records:
        assert r["status"] == "error", r
        assert all(reason in r["error"] for reason in reasons), r["error"]
        assert r["audio_seconds"] is None and r["pcm_sha256"] is None
        assert not runs.wav_path(tmp_path, r["id"]).exists()


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_good_answer_passes_and_every_request_asks_for_identity(tmp_path, protocol, transport):
    result, server = load(tmp_path, "ok", protocol, transport)
    assert [r["status"] for r in result.records] == ["ok", "ok"], result.records[0]["error"]
    assert result.identity == {"case_id": "hostile", "model_type": "hostile", "streaming": True}
    assert server.seen and all(h.get("accept-encoding") == "identity" for _, _, h in server.seen), server.seen


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_legal_framing_is_read_folded_headers_and_any_number_of_interim_responses(tmp_path, transport):
    """RFC 9112 5.2: an obsolete folded header line is one field (its fold one SP), so the folded Content-Type's
    rate is read; RFC 9110 15.2: interim responses may come in any number (40 here; 16 were taken)."""
    for mode in ("folded", "many_interim"):
        result, server = load(tmp_path / mode, mode, "openai", transport)
        assert [(r["status"], r["audio_seconds"], r["sample_rate"]) for r in result.records] == \
            [("ok", pytest.approx(len(PCM) / 2 / 24000), 24000)] * 2, [r["error"] for r in result.records]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_kept_connection_closed_as_a_request_went_out_is_retried_once_on_a_new_one(tmp_path, transport):
    """The server closes each connection as the next request arrives on it, unread, without Connection: close
    (an idle timeout crossing the request): that request failed "server closed the connection before answering"
    though the server never read it. Now it is sent again on a new connection, once, and the record says so:
    every request answered, the server read each once, the first one (on a new connection) not retried."""
    result, server = load(tmp_path, "close_after", "openai", transport, requests=3)
    assert [r["status"] for r in result.records] == ["ok"] * 3, [r["error"] for r in result.records]
    assert [method for method, _, _ in server.seen].count("POST") == 3
    assert [r["retried"] for r in result.records] == [False, True, True]


# --- compressed bodies: refused, never inflated, never audio -------------------------------------------------

@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("protocol, mode, coding", [
    ("openai", "gzip", "gzip"),  # raw PCM, gzipped: the compressed bytes used to be recorded as audio
    ("s2st", "gzip", "gzip"),  # own SSE, gzipped
    ("openai", "gzip_sse", "gzip"),  # OpenAI SSE, gzipped, chunked
    ("openai", "gzip_wav", "gzip"),  # a WAV (not streamed), gzipped
    ("openai", "deflate_chunked", "deflate"),
    ("openai", "br", "br"),
    ("s2st", "br", "br"),
])
def test_a_compressed_body_is_a_failed_request_naming_its_encoding(tmp_path, protocol, mode, coding, transport):
    result, _ = load(tmp_path, mode, protocol, transport)
    failed_with(result, tmp_path, f"HTTP 200: Content-Encoding {coding} refused")
    assert all(not r["chunks"] for r in result.records)  # not one byte of it counted as audio


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_gzip_transfer_coding_is_refused(tmp_path, protocol):
    result, _ = load(tmp_path, "transfer_gzip", protocol)
    failed_with(result, tmp_path, "HTTP 200: Transfer-Encoding 'gzip, chunked' refused")


# --- redirects: never followed, the target named ----------------------------------------------------------

@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_redirected_speech_request_is_not_followed(tmp_path, protocol, transport):
    result, server = load(tmp_path, "redirect", protocol, transport)
    target = f"http://localhost:{server.ctx.port}/elsewhere/v1/audio/speech"
    failed_with(result, tmp_path, f"HTTP 307 redirect to {target!r}, not followed")
    assert server.ctx.elsewhere == 0


def test_redirected_gets_are_not_followed_and_name_the_target(tmp_path):
    result, server = load(tmp_path, "get_redirect", "openai")
    port = server.ctx.port
    assert result.identity is None and result.identity_error == (
        f"GET /identity: HTTP 307 redirect to 'http://localhost:{port}/elsewhere/identity', not followed")
    level = runs.read_summary(tmp_path)["by_concurrency"]["1"]
    assert level["model"] is None and level["model_source"] == (
        f"GET /v1/models: HTTP 307 redirect to 'http://localhost:{port}/elsewhere/v1/models', not followed; "
        "no model sent")
    assert [r["status"] for r in result.records] == ["ok", "ok"]  # the speech requests themselves are fine
    assert server.ctx.elsewhere == 0


def test_an_external_case_is_not_named_after_the_redirect_target():
    async def main():
        async with hostile("get_redirect") as server:
            name = await asyncio.to_thread(external_case_name, server.url, 2.0)
            return name, server

    (name, where), server = asyncio.run(main())
    assert name == f"external-127.0.0.1-{server.ctx.port}" and "elsewhere-model" not in name
    assert "HTTP 307 redirect to" in where and server.ctx.elsewhere == 0


# --- untimed GETs: bounded in bytes and time ------------------------------------------------------------

@pytest.mark.parametrize("mode, reason", [
    ("get_endless", "GET /identity: HTTP 200: the answer passed 1048576 bytes (not read further)"),
    ("get_gzip_bomb", "GET /identity: HTTP 200: Content-Encoding gzip refused"),
    ("get_hold", "GET /identity: HTTP 200 application/json, then timeout: no complete answer within 1 s"),
])
def test_an_untimed_get_is_bounded(tmp_path, mode, reason):
    result, _ = load(tmp_path, mode, "openai", timeout_s=1.0)
    assert result.identity is None and result.identity_error.startswith(reason), result.identity_error
    model_source = runs.read_summary(tmp_path)["by_concurrency"]["1"]["model_source"]
    assert model_source.startswith(reason.replace("/identity", "/v1/models")) and model_source.endswith(
        "; no model sent"), model_source


def test_http_get_reads_a_small_answer_and_refuses_one_past_its_bound():
    http_get, fetch_identity, fetch_model = server_facts.http_get, server_facts.fetch_identity, server_facts.fetch_model
    assert server_facts.MAX_GET_BYTES == 1 << 20

    async def main():
        async with hostile("get_endless") as bad, hostile("ok") as good:
            status, body = await http_get(speech_url(good.url), "/identity", 2.0)
            assert status == 200 and b'"hostile"' in body
            assert await fetch_model(speech_url(good.url), 2.0) == ("hostile-model", "GET /v1/models")
            identity, error = await fetch_identity(speech_url(bad.url), 2.0)
            assert identity is None and "passed 1048576 bytes" in error

    asyncio.run(asyncio.wait_for(main(), 20))


# --- a status already read stays in the reason --------------------------------------------------------------

@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("mode, reason", [
    ("s503_hold", "HTTP 503 application/json, then "),
    ("s101_hold", "HTTP 101: the server switched protocols (Upgrade: 'websocket'); no speech answer"),
    ("html_hold", "text/html"),
    ("sse_hold", "HTTP 200 text/event-stream, then "),
])
def test_a_status_then_silence_keeps_the_status(tmp_path, protocol, transport, mode, reason):
    result, _ = load(tmp_path, mode, protocol, transport, timeout_s=1.0)
    failed_with(result, tmp_path, reason)
    assert all(r["http_status"] == int(mode[1:4]) if mode[0] == "s" and mode[1].isdigit() else True
               for r in result.records)


def test_raw_pcm_headers_then_silence_keep_the_status(tmp_path):
    result, _ = load(tmp_path, "pcm_hold", "openai", timeout_s=1.0)
    failed_with(result, tmp_path, "HTTP 200 audio/pcm, then ")


# --- endless and huge SSE: bounded, legal events at the bound still read ---------------------------------

@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_an_endless_sse_line_fails_at_the_event_bound(tmp_path, protocol):
    result, _ = load(tmp_path, "endless_line", protocol, max_audio_s=5.0)
    bound = 4 * -(-2 * 5 * (24000 if protocol == "openai" else 48000) // 3) + 4096
    failed_with(result, tmp_path, f"an SSE event passed max_event_bytes={bound}")


def test_an_endless_sse_comment_fails_at_the_line_bound(tmp_path):
    result, _ = load(tmp_path, "endless_comment", "openai", max_audio_s=5.0)
    failed_with(result, tmp_path, "an SSE line passed max_event_bytes=")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_events_at_the_16_mib_bound_are_read_whole_and_right(tmp_path, protocol):
    result, _ = load(tmp_path, "max_events", protocol, requests=1, timeout_s=20.0, bound=40.0)
    r = result.records[0]
    pcm = max_event_pcm()
    assert r["status"] == "ok", r["error"]
    assert [n for _, n in r["chunks"]] == [len(pcm), len(pcm)]
    assert len(pcm) * 4 // 3 > MAX_EVENT - 8192  # the events are at the bound
    wav = runs.wav_path(tmp_path, r["id"])
    with open(wav, "rb") as fh:
        fh.seek(44)
        assert fh.read(len(pcm)) == pcm
    assert wav.stat().st_size == 44 + 2 * len(pcm)
    wav.unlink()


# --- the SSE reader's memory, and its byte-level fuzz ------------------------------------------------------

def _feed_all(events, body: bytes, piece: int) -> list:
    out = []
    for i in range(0, len(body), piece):
        out.extend(events.feed(body[i:i + piece]))
    return out


@pytest.mark.parametrize("body", [
    b'data: {"type":"speech.audio.delta","audio":"' + b"A" * (MAX_EVENT - 8192),  # an endless line, unfinished
    b'data: {"type":"speech.audio.delta","audio":"' + b"A" * (MAX_EVENT - 8192) + b'"}\n\n',  # a legal max event
    b": " + b"x" * (MAX_EVENT - 8192),  # an endless comment
])
def test_the_sse_reader_holds_a_bounded_window_of_a_16_mib_event(body):
    """Python's allocations while 16 MiB of one event pass through the reader in 64 KiB pieces: the
    reader used to hold (and copy) the whole line or event."""
    import tracemalloc

    from pytest_s2st.service.readers.sse_frames import Events

    audio = [0]
    events = Events(Limits(600.0), "audio", lambda chunk: audio.__setitem__(0, audio[0] + len(chunk)))
    tracemalloc.start()
    try:
        _feed_all(events, body, 64 * 1024)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * 1024 * 1024, f"peak {peak / 2**20:.1f} MiB"


try:
    from hypothesis import given, settings, strategies as st
except ImportError:  # pragma: no cover
    given = None

if given is not None:
    _EVENT = st.fixed_dictionaries({"type": st.sampled_from(["speech.audio.delta", "other"]),
                                    "audio": st.binary(max_size=300).map(lambda b: __import__("base64").b64encode(b).decode())},
                                   optional={"x": st.recursive(st.none() | st.integers() | st.text(max_size=8),
                                                               lambda c: st.lists(c, max_size=3), max_leaves=5)})

    @settings(max_examples=300, deadline=None)
    @given(events=st.lists(_EVENT, min_size=1, max_size=4), piece=st.integers(1, 64), hold=st.integers(1, 200),
           slash=st.booleans(), audio_first=st.booleans(), crlf=st.booleans())
    def test_fuzz_streamed_events_read_as_held_ones(events, piece, hold, slash, audio_first, crlf):
        """Any split into pieces, any hold threshold: the streamed reader gives the events and the audio
        that the whole-event reader gives."""
        import base64
        import json

        from pytest_s2st.service.readers import sse_frames

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(sse_frames, "HOLD_BYTES", hold)
            _check_streamed(sse_frames, events, piece, slash, audio_first, crlf)

    def _check_streamed(sse_frames, events, piece, slash, audio_first, crlf):
        import base64
        import json

        nl = b"\r\n" if crlf else b"\n"
        body = b""
        for e in events:
            e = dict(sorted(e.items(), reverse=audio_first))
            text = json.dumps(e)
            if slash:
                text = text.replace("/", "\\/")
            body += b"data: " + text.encode() + nl + nl
        audio = bytearray()
        reader = sse_frames.Events(Limits(600.0), "audio", audio.extend)
        out = _feed_all(reader, body, piece)
        assert len(out) == len(events)
        expected_audio = b""
        for got, e in zip(out, events):
            if isinstance(got, sse_frames.Streamed):
                assert got.event == {**e, "audio": ""}
                assert got.audio_bytes == len(base64.b64decode(e["audio"]))
                expected_audio += base64.b64decode(e["audio"])
            else:
                assert json.loads(got) == e
        assert bytes(audio) == expected_audio

    @settings(max_examples=300, deadline=None)
    @given(body=st.binary(max_size=400), piece=st.integers(1, 64), hold=st.integers(1, 100))
    def test_fuzz_sse_bytes_end_in_events_or_one_fail(body, piece, hold):
        """Arbitrary bytes: events (bytes or Streamed) or Fail, never another exception."""
        from pytest_s2st.service.readers import sse_frames

        reader = sse_frames.Events(Limits(0.01), "audio", lambda chunk: None)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(sse_frames, "HOLD_BYTES", hold)
            try:
                for got in _feed_all(reader, b'data: {"audio": "' + body, piece):
                    assert isinstance(got, (bytes, sse_frames.Streamed))
            except Fail as exc:
                assert str(exc) and "\n" not in str(exc)
