"""s2st-serve's OpenAI request model (service/request_model.py) against vLLM-Omni 0.30's own.

vLLM-Omni's ``OpenAICreateSpeechRequest`` is the oracle: its file (pure pydantic + numpy) is loaded by path from
the wheel ``make install`` downloads into <venv>/wheels (as tests/test_stream_gate.py loads its continuity
function), never copied here. The same bodies, listed and fuzzed, go through both models; what differs on
purpose is a row of docs/server.md's table, each checked here. The bodies also go through a real server (the
openai SDK, raw HTTP): 200 or a 400 of one line naming the field, never a 500."""
from __future__ import annotations

import asyncio
import copy
import importlib.util
import json
import math
import os
import re
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path

import aiohttp
import openai
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from loopback import server_thread
from pytest_s2st.service import request_model as rm
from pytest_s2st.service.model_worker import to_pcm16
from pytest_s2st.service.synthesizers import demo_tone_synthesizer

VLLM_OMNI_WHEEL = Path(os.environ.get("S2ST_VLLM_OMNI_WHEEL")
                       or Path(sys.prefix) / "wheels" / "vllm_omni-0.30.0-py3-none-any.whl")
PROTOCOL = "vllm_omni/entrypoints/openai/protocol/audio.py"
DOCS = Path(__file__).resolve().parents[1] / "docs" / "server.md"
SPEECH = "/v1/audio/speech"
MODEL = "callable-tone"  # the name loopback.server_thread's identity serves


@pytest.fixture(scope="module")
def theirs(tmp_path_factory):
    """vLLM-Omni's OpenAICreateSpeechRequest, loaded by path (importing its package would import vLLM)."""
    if not VLLM_OMNI_WHEEL.is_file():
        pytest.skip(f"{VLLM_OMNI_WHEEL} missing: make install fetches it "
                    "(pip download --no-deps vllm-omni==0.30.0 -d <venv>/wheels)")
    source = tmp_path_factory.mktemp("vllm_omni") / "audio.py"
    with zipfile.ZipFile(VLLM_OMNI_WHEEL) as wheel:
        source.write_bytes(wheel.read(PROTOCOL))
    spec = importlib.util.spec_from_file_location("vllm_omni_speech_protocol", source)
    module = importlib.util.module_from_spec(spec)
    with warnings.catch_warnings():  # its CreateAudio's class-based config: pydantic's deprecation, not ours
        warnings.simplefilter("ignore", DeprecationWarning)
        spec.loader.exec_module(module)
    return module.OpenAICreateSpeechRequest


def _dump(model) -> str:
    return json.dumps(model.model_dump(), sort_keys=True, default=str)  # NaN in extra_params compares as text


def outcome(model_cls, body: dict) -> tuple[str, str | None]:
    """("ok", the validated dump) | ("refused", None) | ("TypeError", None): a validator's TypeError, which
    pydantic does not catch (FastAPI answers it 500)."""
    try:
        return "ok", _dump(model_cls.model_validate(copy.deepcopy(body)))  # its references validator mutates
    except ValidationError:
        return "refused", None
    except TypeError:
        return "TypeError", None


def test_the_declarations_are_vllm_omnis(theirs):
    """Field by field: the same names, defaults, aliases and extra policy (the validators are compared by
    the bodies below)."""
    ours = rm.SpeechRequest
    assert list(ours.model_fields) == list(theirs.model_fields)
    for name, field in theirs.model_fields.items():
        mine = ours.model_fields[name]
        assert (mine.default, mine.is_required()) == (field.default, field.is_required()), name
        assert str(mine.validation_alias) == str(field.validation_alias), name
    assert ours.model_config.get("extra", "ignore") == theirs.model_config.get("extra", "ignore") == "ignore"


# the bodies: what vLLM-Omni's model converts is served, what it refuses is refused
CONVERTED = [{"speed": "1.5"}, {"seed": "7"}, {"seed": 1.0}, {"sample_rate": "16000"}, {"stream": "true"},
             {"stream": 1}, {"max_new_tokens": 10.0}, {"x_vector_only_mode": "yes"}, {"speaker_embedding": [1, "2"]},
             {"stream": "false"}, {"stream": 0}, {"speaker": "aiden"}, {"voice": {"id": "aiden"}}, {"speed": None},
             {"references": [{"audio_path": "data:,", "text": "hi"}]}, {"stream_options": {"x": 1}}, {"seed": True},
             {"voice": None, "speaker": "x"}]  # AliasChoices takes the first key present: voice None
REFUSED = [({"duration_seconds": -1}, "duration_seconds: Input should be greater than or equal to 0, got -1"),
           ({"references": []}, "references: 'references' must be a non-empty array of {audio_path, text} objects"),
           ({"response_format": None}, "response_format: Input should be 'wav', 'pcm', 'flac', 'mp3' or 'opus', "
                                       "got None"),
           ({"stream": None}, "stream: Input should be a valid boolean, got None"),
           ({"seed": 1.5}, "seed: Input should be a valid integer, got a number with a fractional part, got 1.5"),
           ({"speed": float("nan")}, "speed: Input should be less than or equal to 4, got nan"),
           ({"voice": {}}, "voice: voice dict must contain 'id'"),
           ({"speaker": 5}, "speaker: Input should be a valid string, got 5"),
           ({"speaker_embedding": [1, "x"]}, "speaker_embedding[1]: Input should be a valid number, unable to parse "
                                             "string as a number, got 'x'"),
           ({"speaker_embedding": [[]]}, "speaker_embedding: 'speaker_embedding' nested vectors must be non-empty"),
           ({"stream": True, "response_format": "mp3"}, "response_format: Streaming (stream=true"),
           ({"input": None}, "input: Input should be a valid string, got None")]


@pytest.mark.parametrize("extra", CONVERTED, ids=json.dumps)
def test_what_vllm_omni_converts_is_converted_the_same(theirs, extra):
    body = {"input": "hi", **extra}
    got = outcome(rm.SpeechRequest, body)
    assert got[0] == "ok" and got == outcome(theirs, body)


@pytest.mark.parametrize("extra, message", REFUSED, ids=[json.dumps(b) for b, _ in REFUSED])
def test_what_vllm_omni_refuses_is_refused_in_one_line(theirs, extra, message):
    body = {"input": "hi", **extra}
    assert outcome(theirs, body)[0] == outcome(rm.SpeechRequest, body)[0] == "refused"
    with pytest.raises(rm.RequestError) as info:
        rm.parse_request(body)
    assert str(info.value).startswith(message) and "\n" not in str(info.value)
    assert info.value.field == message.split(":")[0].split("[")[0]


# --- docs/server.md's rows of differences: each row's body, and what each side does with it ----------------

def _table_rows() -> list[str]:
    text = DOCS.read_text(encoding="utf-8")
    table = text[text.index("| what | OpenAI | vLLM-Omni | s2st-serve | why |"):]
    return [line for line in table.splitlines() if line.startswith("| ")]


# (the row's first cell, a body, vLLM-Omni's model's outcome, this server's HTTP status, its message's start)
ROWS = [
    ("`ref_audio` or `speaker_embedding` of another JSON type", {"ref_audio": [1]}, "TypeError", 400,
     "ref_audio: 'ref_audio' list entries must be strings"),
    ("`ref_audio` or `speaker_embedding` of another JSON type", {"ref_audio": {}}, "TypeError", 400,
     "ref_audio: 'ref_audio' must be a string or list of strings"),
    ("`speaker_embedding`", {"speaker_embedding": [[0.5] * 8193]}, "ok", 400,
     "speaker_embedding: each vector holds at most 8192 numbers here"),
    ("`input` over 4096 characters", {"input": "x" * 4097}, "ok", 400, "input: longer than 4096 characters"),
    ("`word_timestamps: true`", {"word_timestamps": True}, "ok", 400, "word_timestamps: true requires a forced"),
    ("`messages`, `reference_audio`", {"model": "bosonai/higgs-audio-v2-generation-3B-base", "messages": []},
     "refused", 404, "The model `bosonai/higgs-audio-v2-generation-3B-base` does not exist"),
    ("`response_format`", {"response_format": "mp3"}, "ok", 400, "response_format: 'mp3' is not served here"),
    ("`stream_format: \"sse\"`", {"stream_format": "sse", "response_format": "wav"}, "ok", 400,
     "stream_format: sse carries pcm deltas here"),
    ("`sample_rate`", {"sample_rate": 384001}, "ok", 400, "sample_rate: must be in 1-384000, got 384001"),
]


@pytest.fixture(scope="module")
def base():
    with server_thread(demo_tone_synthesizer()) as url:
        yield url


def post(base: str, path: str, body, method: str = "POST") -> tuple[int, dict, bytes]:
    async def main():
        async with aiohttp.ClientSession() as s:
            data = json.dumps(body).encode()  # NaN and Infinity as Python's json writes them (the server reads them)
            async with s.request(method, base + path, data=data,
                                 headers={"Content-Type": "application/json"}) as r:
                return r.status, dict(r.headers), await r.read()
    return asyncio.run(asyncio.wait_for(main(), 60))


@pytest.mark.parametrize("row, extra, vllm_omni, status, message", ROWS, ids=[json.dumps(r[1])[:40] for r in ROWS])
def test_each_documented_difference_is_a_row_and_holds(theirs, base, row, extra, vllm_omni, status, message):
    assert any(line.startswith(f"| {row}") for line in _table_rows()), f"no row {row!r} in {DOCS}"
    body = {"input": "hi", **extra}
    assert outcome(theirs, body)[0] == vllm_omni
    got, _, raw = post(base, SPEECH, body)
    error = json.loads(raw)["error"]
    assert got == status and error["message"].startswith(message) and "\n" not in error["message"], error


def test_bad_numbers_cost_one_error_not_one_each(theirs):
    """The fail_fast row: every bad entry is an error in each branch of vLLM-Omni's union (2 x 5000, by hand),
    one here, with the same refusal."""
    body = {"input": "hi", "speaker_embedding": ["x"] * 5000}
    with pytest.raises(ValidationError) as info:
        theirs.model_validate(body)
    assert info.value.error_count() == 2 * 5000
    with pytest.raises(ValidationError) as info:
        rm.SpeechRequest.model_validate(body)
    assert info.value.error_count() <= 2


def test_a_wrong_method_on_a_served_path_is_405_and_an_unserved_path_404(base):
    """docs/server.md's rows: POST /v1/audio/voices (a GET path here) is 405 with Allow, as aiohttp and
    vLLM's FastAPI answer a wrong method on a route they serve; the batch path and DELETE voice are 404."""
    status, headers, raw = post(base, "/v1/audio/voices", {"name": "x"})
    assert status == 405 and set(headers["Allow"].split(",")) == {"GET", "HEAD"}
    assert json.loads(raw)["error"]["message"] == "POST /v1/audio/voices: Method Not Allowed"
    for method, path in (("POST", "/v1/audio/speech/batch"), ("DELETE", "/v1/audio/voices/x")):
        status, _, raw = post(base, path, {"items": []}, method)
        assert status == 404 and json.loads(raw)["error"]["message"] == f"{method} {path}: Not Found"


def test_fastapi_answers_a_wrong_method_405_too():
    """The oracle of the row above: vLLM's server is FastAPI (Starlette); a GET-only route answers POST 405."""
    fastapi = pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    app = fastapi.FastAPI()
    app.get("/v1/audio/voices")(lambda: {"voices": []})
    answer = TestClient(app).post("/v1/audio/voices", json={})
    assert answer.status_code == 405 and "GET" in answer.headers["allow"]


# --- the bodies through the openai SDK against a real server -------------------------------------

def truth(text: str = "hi", voice: str = "Ryan", seed: int | None = None) -> bytes:
    request = {"text": text, "voice": voice, **({"seed": seed} if seed is not None else {})}
    return to_pcm16(*demo_tone_synthesizer()(request))[0]


@pytest.fixture(scope="module")
def client(base):
    with openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=60) as c:
        yield c


def _speak(client, extra: dict) -> tuple[bytes, dict]:
    with client.audio.speech.with_streaming_response.create(
            model=MODEL, voice="Ryan", input="hi", response_format="pcm", extra_body=extra) as response:
        return response.read(), dict(response.headers)


@pytest.mark.parametrize("extra, same_as", [
    ({"seed": "7"}, {"seed": 7}), ({"seed": 1.0}, {"seed": 1}), ({"speed": "1.5"}, {"speed": 1.5}),
    ({"sample_rate": "16000"}, {"sample_rate": 16000}), ({"stream": "true"}, {"stream": True}),
    ({"stream": 1}, {"stream": True}), ({"stream": 0}, {"stream": False}), ({"stream": "false"}, {"stream": False}),
], ids=json.dumps)
def test_converted_values_act_as_their_typed_form(client, extra, same_as):
    assert _speak(client, extra)[0] == _speak(client, same_as)[0]


def test_converted_values_reach_the_audio(client):
    assert _speak(client, {"seed": "7"})[0] == truth(seed=7) != truth(seed=0)
    native = len(truth()) // 2
    pcm, headers = _speak(client, {"speed": "1.5"})
    assert len(pcm) // 2 == -(-native * 24000 // 36000)  # ceil(n x 24 kHz / (24 kHz x 1.5))
    assert _speak(client, {"sample_rate": "16000"})[1]["content-type"] == "audio/pcm;rate=16000"
    streamed, one_body = _speak(client, {"stream": "true"})[1], _speak(client, {"stream": 0})[1]
    assert streamed.get("transfer-encoding") == "chunked" and "content-length" not in streamed
    assert one_body["content-length"] == str(len(truth()))
    for extra in ({"max_new_tokens": 10.0}, {"x_vector_only_mode": "yes"}, {"speaker_embedding": [1, "2"]}):
        assert _speak(client, extra)[0] == truth(), extra  # accepted and not acted on


@pytest.mark.parametrize("extra, message", REFUSED[:3], ids=[json.dumps(b) for b, _ in REFUSED[:3]])
def test_the_sdk_sees_the_refusals_as_bad_requests(client, extra, message):
    with pytest.raises(openai.BadRequestError) as info:
        _speak(client, extra)
    assert info.value.body["message"].startswith(message) and info.value.param == message.split(":")[0]


# --- fuzzed: both models, and the server ------------------------------------------------------------------

NAMES = sorted(set(rm.SpeechRequest.model_fields) | {"speaker", "references", "stream_options", "other"})
INF, NAN = float("inf"), float("nan")
scalars = (st.none() | st.booleans() | st.integers(-2**64, 2**64) | st.floats() | st.text(max_size=6)
           | st.sampled_from(["wav", "pcm", "sse", "true", "yes", "1.5", "7", "-1", "", "nan", "data:,"]))
junk = (scalars
        | st.lists(st.floats() | st.integers(-9, 9) | st.sampled_from(["2", "x"]), max_size=4)
        | st.lists(st.lists(st.floats() | st.sampled_from(["1"]), max_size=3), max_size=3)
        | st.lists(st.fixed_dictionaries({}, optional={"audio_path": scalars, "text": scalars}), max_size=2)
        | st.fixed_dictionaries({}, optional={"id": scalars, "k": scalars})).map(lambda x: x)  # one branch, not ten
# per field: its valid and convertible forms and the edges of its declaration, beside any JSON value
TEXT = ["Ryan", "", None, 5, ["a"]]
FORMS = {
    "model": [MODEL, None, "x", 1], "voice": ["Ryan", None, {"id": "aiden"}, {}, {"id": 5}, 5],
    "speaker": ["aiden", None, 5], "instructions": TEXT, "language": TEXT, "ref_text": TEXT, "ref_audio_2": TEXT,
    "ambient_sound": TEXT, "response_format": ["wav", "pcm", "mp3", "flac", "opus", None, "WAV"],
    "sample_rate": [16000, "16000", 16000.0, 0, -1, 1.5, True, None, 384001, "16k"],
    "speed": [1.5, "1.5", 0.25, 4.0, 0.2, 5, None, "nan", True, NAN, INF],
    "stream_format": ["sse", "audio", None, "SSE"],
    "stream": [True, False, "true", "false", 1, 0, None, "yes", 2, "maybe", 1.0],
    "task_type": ["CustomVoice", "VoiceDesign", "Base", "Clone", None],
    "ref_audio": ["data:,", ["a"], ["a", "b"], [], [1], {}, None, 5],
    "duration_seconds": [0, -1, 1.5, "2", None, INF, NAN, -0.0],
    "x_vector_only_mode": [True, "yes", "no", "off", "maybe", 1, 2, None],
    "speaker_embedding": [[0.1], [1, "2"], [[0.1], [0.2]], [[]], [], [INF], [NAN], "abc", [[1], 2], [1, [2]], None],
    "max_new_tokens": [1, 0, 10.0, "10", 10.5, None, 2**63, 2**63 - 1],
    "seed": [7, "7", 1.0, 1.5, -2**63, -2**63 - 1, 2**63, True, None, "x"],
    "initial_codec_chunk_frames": [0, -1, "3", None, 3.0],
    "non_streaming_mode": [True, "off", None, "x"], "extra_params": [{}, {"a": [1, NAN]}, [], None],
    "word_timestamps": [False, True, "false", None, 0],
    "references": [[{"audio_path": "data:,", "text": "t"}], [], [{"audio_path": ""}], [1], "x", None,
                   [{"audio_path": "a"}, {"audio_path": "b"}], [{"audio_path": "a", "text": " "}]],
    "input": ["hi", "Hello there.", " ", "", None, 5],
}
fields = {name: st.sampled_from(FORMS.get(name, [None])) | st.sampled_from(FORMS.get(name, [None])) | junk
          for name in NAMES}
MISSING = object()
_inputs = st.sampled_from([0] * 8 + [1, 2]).flatmap(  # 8 in 10 a good input, 1 any input, 1 none
    lambda k: st.sampled_from(["hi", "Hello there."]) if k == 0 else fields["input"] if k == 1 else st.just(MISSING))
# a few fields a body, mostly with a good input: one refused field would hide the others from the comparison
bodies = st.tuples(st.lists(st.sampled_from([n for n in NAMES if n != "input"]), max_size=3, unique=True),
                   _inputs).flatmap(
    lambda t: st.fixed_dictionaries({name: fields[name] for name in t[0]}).map(
        lambda body: body if t[1] is MISSING else {"input": t[1], **body}))


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bodies)
def test_fuzzed_bodies_meet_vllm_omnis_model(theirs, body):
    """Same accept/reject and the same validated values; where vLLM-Omni's validator raises TypeError (its
    500), a 400 here (a row). A refusal is one line whose field is in the body (or the missing input)."""
    model = body.get("model")
    assume(not (isinstance(model, str) and "higgsaudiov2" in model.lower().replace("-", "").replace("_", "")))
    mine, other = outcome(rm.SpeechRequest, body), outcome(theirs, body)
    assert mine == other or (other[0] == "TypeError" and mine[0] == "refused")
    try:
        request, shape = rm.validate_openai_request(body, 4096)
    except rm.RequestError as exc:
        line = str(exc)
        assert "\n" not in line and len(line) < 1000
        assert exc.field in body or exc.field == "input" or (exc.field == "voice" and "speaker" in body)
        assert exc.field not in ("other", "stream_options")  # unknown fields are never refused
    else:
        assert mine[0] == "ok" and request["text"] == body["input"] and math.isfinite(shape["speed"])
        assert shape["format"] in rm.RESPONSE_FORMATS and shape["stream_format"] in rm.STREAM_FORMATS
        assert set(rm.ignored_fields(body)) == set(body) - rm.ACTED_ON


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bodies)
def test_any_json_body_is_200_or_one_line_400_never_500(base, body):
    status, headers, raw = post(base, SPEECH, body)
    if status == 200:
        assert isinstance(body.get("input"), str) and raw
        return
    error = json.loads(raw)["error"]
    assert status in (400, 404) and "\n" not in error["message"], (status, error)
    if status == 404:  # a model this server does not serve, named after the body validated
        assert error["code"] == "model_not_found" and body.get("model") != MODEL
    else:
        assert error["param"] is None or error["param"] in body or error["param"] == "input"
        assert re.match(r"^[a-z_0-9]+(\[\d+\])*: ", error["message"]), error


def test_the_plugin_never_imports_pydantic_or_the_request_model():
    """pydantic is the service extra's: importing the plugin (and its service fixtures) must not need it."""
    code = ("import sys, pytest_s2st.plugin, pytest_s2st.plugin_service; "
            "print(sorted(m for m in ('pydantic', 'pytest_s2st.service.request_model', "
            "'pytest_s2st.service.server') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"
