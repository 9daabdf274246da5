"""OpenAI's speech API: the reference server spoken to by the official ``openai`` SDK, the load generator's
``protocol="openai"`` against it (raw PCM, SSE, WAV), and a pytest session benchmarking it with
``--s2st-protocol openai``. Every side is real: an ``s2st-serve`` subprocess on loopback, real WAVs."""
from __future__ import annotations

import asyncio
import base64
import io
import json
import subprocess
import sys
import time

import openai  # the official SDK (dev extra): the client under test
import pytest
import soundfile as sf

from pytest_s2st import runs
from pytest_s2st.service import openai_api as oa
from pytest_s2st.service.client import run_load
from pytest_s2st.service.model_worker import to_pcm16
from pytest_s2st.service.synthesizers import demo_tone_synthesizer

TEXT = "Hello from the reference server."
WORKLOAD = [{"id": "a", "text": TEXT, "language": "English", "voice": "Ryan", "seed": 0},
            {"id": "b", "text": "A second, longer sentence to speak.", "language": "English", "voice": "Ryan"}]


def expected_pcm(text: str, voice: str = "Ryan") -> bytes:
    """What the demo tone synthesizes for this request: the known truth every answer is checked against."""
    return to_pcm16(*demo_tone_synthesizer()({"text": text, "voice": voice}))[0]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A real ``s2st-serve --demo-tone`` subprocess on loopback: (base URL, identity)."""
    identity = tmp_path_factory.mktemp("serve") / "id.json"
    proc = subprocess.Popen([sys.executable, "-m", "pytest_s2st.cli.serve", "--demo-tone", "--port", "0",
                             "--chunk-samples", "2400", "--identity-output", str(identity)])
    try:
        deadline = time.monotonic() + 60
        while not identity.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "s2st-serve did not start"
            time.sleep(0.05)
        data = json.loads(identity.read_text())
        yield f"http://127.0.0.1:{data['port']}", data
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def client(server):
    with openai.OpenAI(base_url=f"{server[0]}/v1", api_key="unused", max_retries=0, timeout=30) as c:
        yield c


def test_sdk_streams_raw_pcm(client):
    with client.audio.speech.with_streaming_response.create(
            model="demo-tone", voice="Ryan", input=TEXT, response_format="pcm",
            extra_body={"stream": True, "language": "English"}) as response:
        assert response.headers["content-type"] == "audio/pcm;rate=24000"
        pieces = list(response.iter_bytes())
    assert len(pieces) > 1  # streamed in chunks (2400 samples each), not one body
    assert b"".join(pieces) == expected_pcm(TEXT)


def test_sdk_reads_a_wav(client):
    with client.audio.speech.with_streaming_response.create(
            model="demo-tone", voice="Ryan", input=TEXT, response_format="wav") as response:
        assert response.headers["content-type"] == "audio/wav"
        data, rate = sf.read(io.BytesIO(response.read()), dtype="int16")
    assert rate == 24000 and data.tobytes() == expected_pcm(TEXT)


def test_sdk_reads_sse_events(client):
    with client.audio.speech.with_streaming_response.create(
            model="demo-tone", voice="Ryan", input=TEXT, response_format="pcm", stream_format="sse") as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[len("data: "):]) for line in response.iter_lines() if line.startswith("data: ")]
    assert [e["type"] for e in events[:-1]] == [oa.DELTA] * (len(events) - 1) and events[-1]["type"] == oa.DONE
    pcm = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
    assert pcm == expected_pcm(TEXT) and events[-1]["samples"] == len(pcm) // 2


def test_sdk_lists_models_and_voices(client, server):
    assert [m.id for m in client.models.list().data] == ["demo-tone"]
    assert client.models.retrieve("demo-tone").id == "demo-tone"  # GET /v1/models/{id}
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("tts-1")
    voices = client.get("/audio/voices", cast_to=object)
    assert voices == {"voices": [], "any_voice_accepted": True}
    assert server[1]["protocols"] == ["s2st", "openai"]


@pytest.mark.parametrize("kw, message", [
    ({"input": " "}, "input: must not be empty"),
    ({"response_format": "mp3"}, "response_format: 'mp3' is not served here; use one of pcm, wav"),
    ({"speed": 4.5}, "speed: Input should be less than or equal to 4, got 4.5"),
    ({"input": "x" * 4097}, "input: longer than 4096 characters"),
    ({"extra_body": {"sample_rate": 0}}, "sample_rate: Input should be greater than 0, got 0"),
    ({"extra_body": {"sample_rate": 384001}}, "sample_rate: must be in 1-384000, got 384001"),
    ({"extra_body": {"sample_rate": "16k"}},
     "sample_rate: Input should be a valid integer, unable to parse string as an integer, got '16k'"),
    ({"voice": {"name": "x"}}, "voice: voice dict must contain 'id'"),
    ({"extra_body": {"seed": 2**63}}, f"seed: Input should be less than or equal to {2**63 - 1}, got {2**63}"),
    ({"response_format": "wav", "stream_format": "sse"}, "stream_format: sse carries pcm deltas here"),
])
def test_sdk_sees_bad_requests_as_openai_errors(client, kw, message):
    args = {"model": "demo-tone", "voice": "Ryan", "input": TEXT, **kw}
    with pytest.raises(openai.BadRequestError) as info:
        client.audio.speech.create(**args)
    assert info.value.status_code == 400 and message in info.value.message
    assert info.value.body["type"] == "invalid_request_error"


def _pcm(client, **kw) -> tuple[bytes, dict, list[bytes]]:
    """One raw-PCM answer through the SDK: (pcm, headers, the body's pieces)."""
    args = {"model": "demo-tone", "voice": "Ryan", "input": TEXT, "response_format": "pcm", **kw}
    with client.audio.speech.with_streaming_response.create(**args) as response:
        pieces = list(response.iter_bytes())
        return b"".join(pieces), dict(response.headers), pieces


def test_sdk_gets_what_openai_and_vllm_omni_accept(client):
    """4096 characters (OpenAI's bound), a voice object {"id"} (OpenAI's custom voices; vLLM-Omni takes its
    id), a negative seed (vLLM-Omni's int64 range), ref_audio as a list and a nested speaker_embedding
    (vLLM-Omni's forms): each answered 200, with the audio the demo tone makes for that text and voice."""
    long_text = ("All work and no play. " * 200)[:4096]
    assert _pcm(client, input=long_text)[0] == expected_pcm(long_text)
    assert _pcm(client, voice={"id": "Aiden"})[0] == expected_pcm(TEXT, "Aiden")
    pcm = _pcm(client, extra_body={"seed": -1})[0]
    assert pcm == to_pcm16(*demo_tone_synthesizer()({"text": TEXT, "voice": "Ryan", "seed": -1}))[0]
    assert pcm != expected_pcm(TEXT)  # the seed reached the synthesizer (the tone's pitch follows it)
    assert _pcm(client, extra_body={"ref_audio": ["data:,a", "data:,b"], "ref_text": "hi",
                                    "speaker_embedding": [[0.1, 0.2], [0.3, 0.4]]})[0] == expected_pcm(TEXT)


def _tone_hz(pcm: bytes, rate: int) -> float:
    import numpy as np

    wave = np.frombuffer(pcm, "<i2").astype(np.float64)
    spectrum = np.abs(np.fft.rfft(wave * np.hanning(len(wave))))
    return float(np.argmax(spectrum)) * rate / len(wave)


@pytest.mark.parametrize("extra, rate, speed", [({"sample_rate": 16000}, 16000, 1.0), ({"sample_rate": 48000}, 48000, 1.0),
                                                ({}, 24000, 2.0), ({"sample_rate": 8000}, 8000, 0.5)])
def test_sample_rate_is_resampled_and_speed_applied(client, extra, rate, speed):
    """sample_rate: the answer is at that rate (named in the Content-Type), as long and at the pitch of the
    native answer; speed: the audio lasts 1/speed as long (and, as a tape, is speed x higher)."""
    native = expected_pcm(TEXT)
    pcm, headers, _ = _pcm(client, speed=speed, extra_body=extra)
    assert headers["content-type"] == f"audio/pcm;rate={rate}"
    assert len(pcm) // 2 == -(-(len(native) // 2) * rate // round(24000 * speed))  # ceil(n * rate / (24k x speed))
    assert abs(_tone_hz(pcm, rate) - speed * _tone_hz(native, 24000)) < 3.0


def test_stream_false_is_one_body_and_sse_done_carries_usage(client):
    """"stream": false (and no stream_format) asks for one body: Content-Length, no chunked encoding."""
    pcm, headers, _ = _pcm(client, extra_body={"stream": False})
    assert pcm == expected_pcm(TEXT) and headers["content-length"] == str(len(pcm))
    assert "transfer-encoding" not in headers
    streamed, headers, pieces = _pcm(client, extra_body={"stream": True})
    assert streamed == pcm and headers.get("transfer-encoding") == "chunked" and len(pieces) > 1
    with client.audio.speech.with_streaming_response.create(
            model="demo-tone", voice="Ryan", input=TEXT, response_format="pcm", stream_format="sse",
            extra_body={"stream": False}) as response:  # an explicit stream_format streams (vLLM-Omni's rule)
        events = [json.loads(line[len("data: "):]) for line in response.iter_lines() if line.startswith("data: ")]
    samples = len(pcm) // 2
    assert events[-1] == {"type": oa.DONE, "samples": samples, "usage": {
        "input_tokens": None, "output_tokens": None, "total_tokens": None,
        "input_characters": len(TEXT), "output_samples": samples}}


def _load(endpoint, tmp_path, **kw):
    kw = {"warmups": 1, "timeout_s": 30.0, "protocol": "openai", **kw}
    return asyncio.run(run_load(endpoint, WORKLOAD, kw.pop("concurrency", 1), out_dir=tmp_path, **kw))


@pytest.mark.parametrize("extra_body, content", [
    (None, "pcm"),
    ({"stream_format": "sse"}, "sse"),
    ({"response_format": "wav", "stream": False}, "wav"),
])
def test_load_generator_speaks_openai_to_the_reference_server(server, tmp_path, extra_body, content):
    # a base URL: the protocol's default path is used
    result = _load(server[0], tmp_path, extra_body=extra_body, concurrency=2)
    assert result.endpoint == f"{server[0]}/v1/audio/speech"
    assert [r["status"] for r in result.records] == ["ok"] * 3, [r["error"] for r in result.records]
    level = json.loads((tmp_path / runs.SUMMARY).read_text())["by_concurrency"]["2"]
    assert level["protocol"] == "openai" and level["model"] == "demo-tone" and level["model_source"] == "GET /v1/models"
    for r in result.measured:
        item = next(i for i in WORKLOAD if i["id"] == r["workload_id"])
        data, rate = sf.read(tmp_path / r["wav"], dtype="int16")
        assert rate == 24000 == r["sample_rate"] and data.tobytes() == expected_pcm(item["text"])
        assert r["audio_seconds"] == len(data) / 24000
        assert r["send_t"] < r["first_audio_t"] <= r["done_t"]
        assert sum(n for _, n in r["chunks"]) == 2 * len(data)
        if content == "wav":  # not streamed: the audio is usable only when whole
            assert r["first_audio_t"] == r["done_t"] and len(r["chunks"]) == 1 and r["streaming"] is False
        else:
            assert len(r["chunks"]) == -(-len(data) // 2400) or len(r["chunks"]) > 1
    assert result.summary["n_ok"] == 2 and result.summary["ttfa_s"]["p50"] > 0


def test_model_from_the_extra_body_wins(server, tmp_path):
    result = _load(f"{server[0]}/v1/audio/speech", tmp_path, extra_body={"model": "demo-tone", "seed": 3})
    level = json.loads((tmp_path / runs.SUMMARY).read_text())["by_concurrency"]["1"]
    assert level["model_source"] == "extra_body" and level["extra_body"] == {"model": "demo-tone", "seed": 3}
    assert all(r["status"] == "ok" for r in result.records)


def test_extra_body_the_server_refuses_is_each_requests_error(server, tmp_path):
    # vLLM-Omni's task_type is accepted (tests/test_service_vllm_omni.py); a value it would refuse is refused
    result = _load(server[0], tmp_path, extra_body={"task_type": "Clone"}, warmups=0)
    assert all(r["status"] == "error" and r["error"].startswith("HTTP 400: task_type: Input should be 'CustomVoice'")
               for r in result.records), [r["error"] for r in result.records]


def test_own_protocol_still_served_beside_openai(server, tmp_path):
    result = _load(server[0], tmp_path, protocol="s2st", warmups=0)
    assert all(r["status"] == "ok" and r["streaming"] is False for r in result.records)
    for r in result.records:
        item = next(i for i in WORKLOAD if i["id"] == r["workload_id"])
        data, _ = sf.read(tmp_path / r["wav"], dtype="int16")
        # the own protocol sends the seed; the tone's pitch follows it (seed 0 = none)
        assert data.tobytes() == to_pcm16(*demo_tone_synthesizer()(item))[0]


TONE_PY = '''
import numpy as np

def build_tone(sample_rate=16000):
    def forward(sample):
        n = int(sample_rate * (0.2 + 0.02 * len(sample["text"])))
        t = np.arange(n) / sample_rate
        return {"waveform": (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), "sample_rate": sample_rate}
    return forward
'''


def test_pytest_session_benchmarks_the_reference_server_with_protocol_openai(pytester):
    (pytester.path / "tone.py").write_text(TONE_PY)
    (pytester.path / "wl.jsonl").write_text("".join(
        json.dumps({"id": f"u{i}", "text": "hello world" * (i + 1), "language": "en", "voice": "a", "seed": i}) + "\n"
        for i in range(3)))
    cfg = pytester.path / "tone.yaml"
    cfg.write_text("general:\n  name: tone\n  model_type: callable\n  workload: wl.jsonl\n  concurrency: [2]\n"
                   "  warmup: 1\n  protocol: openai\n  extra_body: {stream_format: sse}\nstage1:\n  entry: tone.py:build_tone\n")
    pytester.makepyfile(test_service='''
def test_service(s2st_service, s2st_workload, s2st_concurrency, s2st_load):
    s2st_load(s2st_service, s2st_workload, concurrency=s2st_concurrency)
''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--s2st-config={cfg}", "-v",
                                           "--benchmark-json=out.json", "--s2st-sample-rate=8000",
                                           "--s2st-request-rate=50", "--s2st-burstiness=2")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["Name*conc*ok/n*TTFA p50*goodput",
                                 "test_service?callable-tone-c2?*2*3/3*",
                                 "Name*conc*throughput*rate asked*rate got",
                                 "test_service?callable-tone-c2?*2*50 req/s*.* req/s"])
    data = json.loads((pytester.path / "out.json").read_text())["benchmarks"][0]["extra_info"]["s2st_service"]
    assert data["protocol"] == "openai" and data["summary"]["n_ok"] == 3 and data["summary"]["error_rate"] == 0
    assert data["summary"]["request_rate"] == 50.0 and data["summary"]["achieved_rate"] > 0
    assert "speech.audio.delta" in data["methods"]["ttfa_s"]  # how it was measured, for this protocol
    assert data["methods"]["request_rate"].startswith("open loop at 50 req/s: gamma(shape=burstiness")
    records = runs.read_records(data["evidence_dir"])
    assert all(r["due_t"] is not None for r in records if not r["warmup"])
    # the server names its rate in each SSE delta (16 kHz): it wins over --s2st-sample-rate
    assert {r["sample_rate"] for r in records} == {16000}
    wav, rate = sf.read(f"{data['evidence_dir']}/wav/c2-r2.wav")
    assert rate == 16000 and len(wav) == int(16000 * (0.2 + 0.02 * len("hello world" * 3)))

    # bad settings: one line naming where they came from
    for flag, why in (("--s2st-extra-body=[1]", "must be a JSON object"), ("--s2st-protocol=grpc", "must be one of"),
                      ("--s2st-request-rate=0", "must be requests per second in")):
        bad = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--s2st-config={cfg}", flag)
        assert bad.ret != 0 and why in bad.stderr.str() and "Traceback" not in bad.stderr.str(), bad.stderr.str()
