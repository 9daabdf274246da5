"""Workload text the client cannot send is refused up front, and no record ever goes missing."""
from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp import web

from pytest_s2st import runs
from pytest_s2st.errors import S2STError
from pytest_s2st.service.client import run_load
from pytest_s2st.service.answers import sse_event
from pytest_s2st.service.server import serve_app
from pytest_s2st.workload import load_workload

GOOD = {"id": "a", "text": "hello", "language": "English", "voice": "Ryan", "seed": 1}


@pytest.mark.parametrize("field", ["text", "id", "voice", "instruct"])
def test_lone_surrogate_is_refused_at_load_naming_file_line_and_field(tmp_path, field):
    path = tmp_path / "w.jsonl"
    bad = json.dumps({**GOOD, "id": "b", field: "x\ud800y"})  # json.dumps writes the "\ud800" escape
    path.write_text(json.dumps(GOOD) + "\n" + bad + "\n", encoding="utf-8")
    with pytest.raises(S2STError) as e:
        load_workload(path)
    message = str(e.value)
    assert message.startswith(f"{path}:2: field {field!r} holds a lone surrogate '\\ud800'") and "\n" not in message


def test_run_load_refuses_an_unsendable_item_before_sending_anything(tmp_path):
    workload = [GOOD, {**GOOD, "id": "b", "text": "\ud800"}]
    with pytest.raises(S2STError, match=r"workload item 1 \('b'\): cannot be sent as UTF-8 JSON") as e:
        asyncio.run(run_load("http://127.0.0.1:9", workload, 1, out_dir=tmp_path, warmups=1))
    assert "\n" not in str(e.value)
    assert runs.read_records(tmp_path) == []  # nothing sent, so no record is missing


def test_a_server_message_with_a_lone_surrogate_is_still_recorded(tmp_path):
    """The server's error message (JSON "\\ud800") lands in the record: the record is written escaped."""
    async def handler(request):
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(sse_event({"type": "error", "message": "bad \ud800 text"}))
        return resp

    async def main():
        app = web.Application()
        app.router.add_post("/v1/audio/speech", handler)
        runner, port = await serve_app(app, shutdown_timeout=0.2)
        try:
            return await run_load(f"http://127.0.0.1:{port}", [GOOD], 1, out_dir=tmp_path, warmups=1, requests=2)
        finally:
            await runner.cleanup()

    result = asyncio.run(asyncio.wait_for(main(), 20))
    records = runs.read_records(tmp_path)
    assert sorted(r["id"] for r in records) == ["c1-r0", "c1-r1", "c1-w0"]
    assert records == result.records
    assert all(r["error"] == "server error event: bad \ud800 text" for r in records)


def test_line_separators_inside_json_strings_are_text_not_line_ends(tmp_path):
    items = [{**GOOD, "text": "one\u2028two\x85three\x1cfour"}, {**GOOD, "id": "b"}]
    path = tmp_path / "w.jsonl"
    path.write_text("\ufeff" + "\r\n".join(json.dumps(i, ensure_ascii=False) for i in items) + "\r\n",
                    encoding="utf-8")
    assert load_workload(path) == items
    path.write_text(json.dumps(items[0]) + "\n" + json.dumps(GOOD) + "\n", encoding="utf-8")
    with pytest.raises(S2STError, match=r"w\.jsonl:2: field 'id' 'a' repeats"):  # line numbers still count
        load_workload(path)


def test_json_nested_too_deep_is_one_line(tmp_path):
    path = tmp_path / "w.jsonl"
    path.write_text("[" * 100_000 + "\n", encoding="utf-8")
    with pytest.raises(S2STError, match=r"w\.jsonl:1: nested too deep"):
        load_workload(path)
