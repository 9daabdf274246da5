"""The wire formats and transports are objects chosen by name (service/wire.py), the load options one
dataclass (service/options.py): a new protocol registered in ``wire.PROTOCOLS`` runs through ``run_load``
untouched, the settings offer exactly the registered protocols, and a bad option is one line."""
from __future__ import annotations

import asyncio
import base64

import pytest
from aiohttp import web

from pytest_s2st import runs
from pytest_s2st.errors import S2STError
from pytest_s2st.service import wire
from pytest_s2st.service.arrivals import Gamma
from pytest_s2st.service.client import run_load
from pytest_s2st.service.options import SETTING_NAMES, LoadOptions
from pytest_s2st.service.readers.sse import SseDialect, read_sse
from pytest_s2st.service.answers import sse_event
from pytest_s2st.service.server import serve_app
from pytest_s2st.settings import SETTINGS

WORKLOAD = [{"id": "a", "text": "hello there", "language": "English", "voice": "Ryan", "seed": 1}]
PCM = b"\x01\x00\xff\x7f\x02\x00"  # three int16 samples


class _TickDialect(SseDialect):
    """A made-up SSE dialect: {"type": "tick", "b64": ...} events at 8 kHz, then {"type": "end"}."""
    key, done = "b64", "end"

    def first_rate(self, s):
        return 8000

    def classify(self, event, streamed):
        kind = event.get("type")
        return {"tick": ("audio", None), "end": ("done", event)}.get(kind, ("other", None))

    def audio(self, s, events, event, value, t, streamed):
        s.record.sample_rate = events.rate
        s.audio(base64.b64decode(event["b64"]), t, events.rate)

    def finish(self, s, events, done):
        s.record.server_done = {}


async def _read_tick(s):
    await read_sse(s, _TickDialect())


class Tick(wire.Protocol):
    """A third wire format, defined here only: nothing in client.py knows its name."""
    name = "tick"
    accept = "application/x-tick"
    readers = {"text/event-stream": _read_tick}
    wanted = "tick events"
    event_types = "tick/end"

    def body(self, item, model, extra_body):
        return {"say": item["text"]}

    def speaks(self, event_names):
        return "'tick'" in event_names


async def _serve(handler):
    app = web.Application()
    app.router.add_post("/tts", handler)
    runner, port = await serve_app(app, shutdown_timeout=0.2)
    return runner, f"http://127.0.0.1:{port}/tts"


def _load(tmp_path, handler, **kw):
    async def main():
        runner, endpoint = await _serve(handler)
        try:
            return await run_load(endpoint, WORKLOAD, 1, out_dir=tmp_path, **kw)
        finally:
            await runner.cleanup()

    return asyncio.run(asyncio.wait_for(main(), 30))


async def _tick_server(request):
    body = await request.json()
    assert body == {"say": "hello there"} and request.headers["Accept"] == "application/x-tick"
    return await _ticks(request)


async def _ticks(request):
    await request.read()
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(sse_event({"type": "tick", "b64": base64.b64encode(PCM[:4]).decode()}))
    await resp.write(sse_event({"type": "tick", "b64": base64.b64encode(PCM[4:]).decode()}))
    await resp.write(sse_event({"type": "end"}))
    return resp


@pytest.mark.parametrize("transport", list(wire.TRANSPORTS))
def test_a_protocol_registered_by_name_runs_through_run_load_untouched(tmp_path, monkeypatch, transport):
    monkeypatch.setitem(wire.PROTOCOLS, "tick", Tick())
    result = _load(tmp_path, _tick_server, protocol="tick", transport=transport, warmups=0)
    r = result.records[0]
    assert r["status"] == "ok", r["error"]
    assert [n for _, n in r["chunks"]] == [4, 2] and r["sample_rate"] == 8000
    assert runs.wav_path(tmp_path, r["id"]).read_bytes() == runs.wav_bytes(PCM, 8000)
    assert runs.read_summary(tmp_path)["by_concurrency"]["1"]["protocol"] == "tick"


def test_another_protocols_events_hint_at_a_registered_protocol(tmp_path, monkeypatch):
    """The hint to switch comes from the registry: the own protocol's reader names 'tick' for tick events."""
    monkeypatch.setitem(wire.PROTOCOLS, "tick", Tick())
    result = _load(tmp_path, _ticks, protocol="s2st", warmups=0, requests=1)
    assert result.records[0]["error"] == (
        "expected SSE events of type audio/done for protocol s2st; got events of type 'tick', 'end' "
        "(this server may speak protocol tick: try --s2st-protocol tick)")


def test_the_settings_offer_exactly_the_registered_protocols():
    setting = next(s for s in SETTINGS if s.name == "protocol")
    for name in wire.PROTOCOLS:
        assert setting.parse(name) == name
    with pytest.raises(ValueError, match="must be one of " + ", ".join(wire.PROTOCOLS)):
        setting.parse("websocket")
    assert setting.default == wire.DEFAULT_PROTOCOL == LoadOptions.protocol
    assert LoadOptions.transport == wire.DEFAULT_TRANSPORT
    assert set(SETTING_NAMES) <= {s.name for s in SETTINGS}


@pytest.mark.parametrize("kw, message", [
    ({"protocol": "websocket"}, "protocol='websocket': expected one of s2st, openai"),
    ({"transport": "h2"}, "transport='h2': expected http1 or aiohttp"),
    ({"timeout": 3}, "run_load: unknown option(s) timeout; options are warmups, timeout_s, "),
])
def test_a_bad_option_is_one_line_before_anything_is_sent(tmp_path, kw, message):
    with pytest.raises(S2STError) as e:
        asyncio.run(run_load("http://127.0.0.1:9", WORKLOAD, 1, out_dir=tmp_path, **kw))
    assert str(e.value).startswith(message) and "\n" not in str(e.value)
    assert not (tmp_path / runs.REQUESTS).exists()


def test_options_given_as_one_object_or_as_keywords_load_alike(tmp_path):
    async def ok(request):
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(sse_event({"type": "audio", "index": 0, "sample_rate": 8000,
                                    "pcm": base64.b64encode(PCM).decode()}))
        await resp.write(sse_event({"type": "done", "samples": 3}))
        return resp

    options = LoadOptions(warmups=0, requests=2, timeout_s=4.0, extra={"note": "x"})
    by_object = _load(tmp_path / "object", ok, options=options)
    by_keywords = _load(tmp_path / "keywords", ok, warmups=0, requests=2, timeout_s=4.0, extra={"note": "x"})
    levels = [runs.read_summary(d)["by_concurrency"]["1"] for d in (tmp_path / "object", tmp_path / "keywords")]
    same = ("warmups", "requests", "timeout_s", "read_timeout_s", "protocol", "request_rate", "note")
    assert [{k: lv[k] for k in same} for lv in levels] == [
        {"warmups": 0, "requests": 2, "timeout_s": 4.0, "read_timeout_s": 4.0, "protocol": "s2st",
         "request_rate": "inf", "note": "x"}] * 2
    assert [r["status"] for r in by_object.records + by_keywords.records] == ["ok"] * 4
    # keywords override the object's fields
    assert LoadOptions.of(options, requests=5) == LoadOptions(warmups=0, requests=5, timeout_s=4.0, extra={"note": "x"})


def test_options_from_a_cases_settings():
    settings = {"warmup": 2, "request_timeout": 7, "requests": None, "max_audio_s": None, "protocol": "openai",
                "extra_body": {"model": "m"}, "sample_rate": None, "request_rate": "inf", "burstiness": None}
    o = LoadOptions.from_settings(settings, total_timeout_s=50.0)
    assert (o.warmups, o.timeout_s, o.protocol, o.extra_body, o.sample_rate, o.arrival,
            o.total_timeout_s, o.max_audio_s) == (2, 7.0, "openai", {"model": "m"}, 24000, Gamma(float("inf"), 1.0),
                                                  50.0, 600.0)
