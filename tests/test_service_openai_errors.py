"""Every error the reference server's OpenAI API gives comes in OpenAI's shape
{"error": {"message", "type", "param", "code"}} with OpenAI's status, read back by raw HTTP (the exact
bytes) and by the official ``openai`` SDK (the error class it raises). The own protocol keeps its shape."""
from __future__ import annotations

import asyncio
import json
import threading
import urllib.request

import aiohttp
import numpy as np
import openai
import pytest

from loopback import server_thread
from pytest_s2st.service.server import MAX_BODY_BYTES
from pytest_s2st.service.synthesizers import demo_tone_synthesizer

SPEECH = "/v1/audio/speech"


def post_raw(base: str, path: str, **kw) -> tuple[int, str, dict, dict]:
    async def main():
        async with aiohttp.ClientSession() as s:
            async with s.request(kw.pop("method", "POST"), base + path, **kw) as r:
                raw = await r.read()
                return r.status, r.content_type, dict(r.headers), raw
    status, ctype, headers, raw = asyncio.run(asyncio.wait_for(main(), 30))
    return status, ctype, headers, json.loads(raw)


def assert_openai_error(data: dict, message_start: str, param: str | None = None, kind="invalid_request_error",
                        code: str | None = None) -> None:
    assert set(data) == {"error"} and set(data["error"]) == {"message", "type", "param", "code"}, data
    err = data["error"]
    assert err["message"].startswith(message_start) and "\n" not in err["message"], err
    assert (err["type"], err["param"], err["code"]) == (kind, param, code), err


@pytest.fixture(scope="module")
def base():
    with server_thread(demo_tone_synthesizer()) as url:
        yield url



JSON_TYPE = {"Content-Type": "application/json"}


@pytest.mark.parametrize("kw, message, param", [
    ({"data": b"{oops", "headers": JSON_TYPE}, "body: not valid JSON (line 1 column 2", None),
    ({"data": b"", "headers": JSON_TYPE}, "body: not valid JSON (line 1 column 1", None),
    ({"json": [1, 2]}, "body: expected a JSON object, got list", None),
    ({"data": b"null", "headers": JSON_TYPE}, "body: expected a JSON object, got null", None),
    ({"data": b'{"input": "\xff\xfe"}', "headers": JSON_TYPE}, "body: not UTF-8 (byte 11)", None),
    ({"data": b"[" * 100_000, "headers": JSON_TYPE}, "body: JSON nested too deeply", None),
    ({"json": {}}, "input: Field required", "input"),  # {} is no own-protocol request: OpenAI's field is named
    ({"json": {"input": "hi", "voice": 3}}, "voice: Input should be a valid string, got 3", "voice"),
    ({"json": {"input": "hi", "task_type": "Clone"}},
     "task_type: Input should be 'CustomVoice', 'VoiceDesign' or 'Base', got 'Clone'", "task_type"),
    ({"json": {"input": "hi", "max_new_tokens": "many"}},
     "max_new_tokens: Input should be a valid integer, unable to parse string as an integer, got 'many'",
     "max_new_tokens"),
    # a validator of the model's own: the field it names is the param, with no pydantic "Value error, " prefix
    ({"json": {"input": "hi", "references": []}},
     "references: 'references' must be a non-empty array of {audio_path, text} objects", "references"),
    ({"json": {"input": "hi", "speed": 9, "seed": "x"}},
     "speed: Input should be less than or equal to 4, got 9 (and seed)", "speed"),
])
def test_malformed_bodies_are_400_in_openai_shape(base, kw, message, param):
    status, ctype, _, data = post_raw(base, SPEECH, **kw)
    assert (status, ctype) == (400, "application/json")
    assert_openai_error(data, message, param)


@pytest.mark.parametrize("headers, said", [
    ({"Content-Type": "text/plain"}, "(Content-Type 'text/plain')"), ({}, "(no Content-Type)"),
    ({"Content-Type": "application/x-www-form-urlencoded"}, "(Content-Type 'application/x-www-form-urlencoded')"),
])
def test_a_body_that_does_not_say_it_is_json_is_415_as_vllm_answers_it(base, headers, said):
    """vLLM's validate_json_request: only application/json is read (415; later vLLM answers 400 with the same
    message). http.client sends no Content-Type unless told: the 'none' case is a real one."""
    import http.client
    from urllib.parse import urlsplit

    where = urlsplit(base)
    conn = http.client.HTTPConnection(where.hostname, where.port, timeout=30)
    conn.request("POST", SPEECH, body=b'{"input": "hello"}', headers=headers)
    answer = conn.getresponse()
    data = json.loads(answer.read())
    conn.close()
    assert answer.status == 415
    assert_openai_error(data, "Unsupported Media Type: Only 'application/json' is allowed " + said, "Content-Type")


@pytest.mark.parametrize("body", [b'\xef\xbb\xbf{"input": "hi", "response_format": "pcm"}',
                                  b'{"model": "", "input": "hi", "response_format": "pcm"}'])
def test_a_bom_before_the_json_and_an_empty_model_are_served_as_vllm_serves_them(base, body):
    async def main():
        async with aiohttp.ClientSession() as s:
            async with s.post(base + SPEECH, data=body, headers=JSON_TYPE) as r:
                return r.status, await r.read()
    status, pcm = asyncio.run(main())
    assert status == 200 and len(pcm) == 2 * int(24000 * (0.1 + 0.02 * 2))


def test_unknown_model_is_404_and_after_validation(base):
    status, _, _, data = post_raw(base, SPEECH, json={"model": "no-such-model", "input": "hi"})
    assert status == 404
    assert_openai_error(data, "The model `no-such-model` does not exist; this server serves callable-tone",
                        "model", code="model_not_found")
    # vLLM checks the model after the request parsed: a bad body with a bad model is a 400
    assert post_raw(base, SPEECH, json={"model": "no-such-model", "input": " "})[0] == 400
    status, _, _, card = post_raw(base, "/v1/models/callable-tone", method="GET")
    assert status == 200 and card["id"] == "callable-tone" and card["object"] == "model"
    status, _, _, data = post_raw(base, "/v1/models/no/such", method="GET")
    assert status == 404 and data["error"]["code"] == "model_not_found"


def test_framework_errors_under_v1_are_openai_shaped(base):
    status, ctype, _, data = post_raw(base, SPEECH, data=b"x" * (MAX_BODY_BYTES + 1), headers=JSON_TYPE)
    assert (status, ctype) == (413, "application/json")  # not aiohttp's text/plain
    assert_openai_error(data, f"body: larger than {MAX_BODY_BYTES} bytes")
    status, _, _, data = post_raw(base, "/v1/no/such/path", json={})
    assert status == 404
    assert_openai_error(data, "POST /v1/no/such/path: Not Found")
    status, _, headers, data = post_raw(base, SPEECH, method="GET")
    assert status == 405 and headers["Allow"] == "POST"
    assert_openai_error(data, f"GET {SPEECH}: Method Not Allowed")


def test_a_body_near_the_limit_is_served(base):
    # vLLM-Omni's voice-clone clients inline the reference audio as base64: ~7 MB passes, and is ignored
    async def main():
        async with aiohttp.ClientSession() as s:
            async with s.post(base + SPEECH, json={"input": "hi", "response_format": "pcm", "task_type": "Base",
                                                   "ref_audio": "data:audio/wav;base64," + "A" * 7_000_000}) as r:
                return r.status, await r.read()
    status, pcm = asyncio.run(main())
    assert status == 200 and len(pcm) == 2 * int(24000 * (0.1 + 0.02 * 2))


def test_own_protocol_keeps_its_shape(base):
    status, _, _, data = post_raw(base, SPEECH, json={"text": " "})
    assert status == 400 and data == {"error": "text: must not be empty", "field": "text"}


def test_sdk_raises_its_error_classes(base):
    with openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=30) as client:
        assert client.models.retrieve("callable-tone").id == "callable-tone"
        with pytest.raises(openai.NotFoundError) as info:
            client.models.retrieve("no-such-model")
        assert info.value.code == "model_not_found" and info.value.param == "model"
        with pytest.raises(openai.NotFoundError) as info:
            client.audio.speech.create(model="no-such-model", voice="Ryan", input="hi")
        assert info.value.status_code == 404 and "no-such-model" in info.value.message
        with pytest.raises(openai.BadRequestError) as info:
            client.post("/audio/speech", body={}, cast_to=object)
        assert info.value.param == "input" and info.value.type == "invalid_request_error"
        with pytest.raises(openai.APIStatusError) as info:
            client.post("/audio/speech", body={"input": "x" * (MAX_BODY_BYTES + 1)}, cast_to=object)
        assert info.value.status_code == 413 and info.value.body["message"].startswith("body: larger than")


def test_busy_is_503_with_retry_after_through_the_sdk():
    """One request on the model, one queued (queue_size=1): the third is refused at once with a
    Retry-After, which the SDK (retries off) raises as an APIStatusError carrying the header."""
    release, running = threading.Event(), threading.Event()

    def slow(request):
        running.set()
        assert release.wait(20)
        return np.full(240, 0.1, np.float32), 24000

    with server_thread(slow, queue_size=1) as url:
        with openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=30) as client:
            def speak(out):
                out.append(client.audio.speech.create(model="callable-tone", voice="v", input="hi",
                                                      response_format="pcm").read())
            done: list[bytes] = []
            first = threading.Thread(target=speak, args=(done,))
            first.start()
            assert running.wait(20)  # the model thread holds request one
            second = threading.Thread(target=speak, args=(done,))
            second.start()
            try:
                for _ in range(1000):  # until request two waits in the queue
                    with urllib.request.urlopen(f"{url}/health", timeout=10) as health:
                        if json.loads(health.read())["queued"] == 1:
                            break
                    threading.Event().wait(0.01)
                else:
                    raise AssertionError("request two never queued")
                with pytest.raises(openai.APIStatusError) as info:
                    client.audio.speech.create(model="callable-tone", voice="v", input="hi", response_format="pcm")
            finally:
                release.set()
                first.join(20)
                second.join(20)
    assert isinstance(info.value, openai.InternalServerError) and info.value.status_code == 503
    assert info.value.response.headers["retry-after"] == "1" and info.value.code == "server_busy"
    assert info.value.type == "server_error" and info.value.body["message"] == "busy"
    assert done == [np.full(240, round(0.1 * 32767), "<i2").tobytes()] * 2  # the two admitted ones are served
