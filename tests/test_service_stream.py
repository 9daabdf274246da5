"""``s2st-serve --stream`` on the tiny Qwen3-TTS: real servers on loopback, spoken to in both protocols
(this project's SSE, OpenAI's raw PCM through the official SDK and its SSE events). The streamed PCM is
the same in every protocol and within the stated bound of the non-streamed server's answer to the same
request and seed (4-frame chunks, left context 72 = the tiny decoder's attention window: <= 2 LSB)."""
from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
import time
import urllib.request

import numpy as np
import pytest

pytest.importorskip("qwen_tts")
openai = pytest.importorskip("openai")

REQUEST = {"text": "Hello world, this is a tiny test.", "language": "en", "voice": "Vivian", "seed": 3}


def start(tmp_path, name: str, yaml_text: str, *extra: str):
    cfg = tmp_path / f"{name}.yaml"
    cfg.write_text(yaml_text)
    identity = tmp_path / f"{name}.json"
    proc = subprocess.Popen([sys.executable, "-m", "pytest_s2st.cli.serve", "--s2st-config", str(cfg), "--port", "0",
                             "--threads", "1", "--identity-output", str(identity), *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 600
    while not identity.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"s2st-serve {name} did not start: {proc.stderr.read().decode()[-500:]}")
        time.sleep(0.1)
    return proc, json.loads(identity.read_text())


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    from pytest_s2st.tiny.qwen_tiny import tiny_qwen3tts_dir

    tmp = tmp_path_factory.mktemp("stream")
    base = (f"general:\n  name: tiny\n  model_type: Qwen3TTS\n  device: cpu\n"
            f"stage1:\n  path: {tiny_qwen3tts_dir()}\n  max_new_tokens: 40\n")
    procs = []
    try:
        procs.append(start(tmp, "base", base))
        procs.append(start(tmp, "stream", base + "serve:\n  stream: true\n  chunk_frames: 4\n  left_context_frames: 72\n"))
        yield procs[0][1], procs[1][1]
    finally:
        for proc, _ in procs:
            proc.terminate()
            proc.wait(timeout=30)


def own_sse(identity: dict, body: dict) -> tuple[list[dict], dict]:
    req = urllib.request.Request(identity["endpoint"], data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    events = []
    with urllib.request.urlopen(req, timeout=600) as response:
        for line in response:
            if line.startswith(b"data: "):
                events.append(json.loads(line[6:]))
    return [e for e in events if e["type"] == "audio"], events[-1]


def test_streamed_pcm_is_the_same_in_both_protocols_and_matches_the_baseline(servers):
    base, stream = servers
    assert base["streaming"] is False and base["stream"] is None
    assert stream["streaming"] is True and stream["stream"] == {"chunk_frames": 4, "left_context_frames": 72}

    base_audio, base_done = own_sse(base, REQUEST)
    assert base_done["streaming"] is False
    base_pcm = b"".join(base64.b64decode(e["pcm"]) for e in base_audio)

    audio, done = own_sse(stream, REQUEST)
    own_pcm = b"".join(base64.b64decode(e["pcm"]) for e in audio)
    assert done["type"] == "done" and done["streaming"] is True and done["chunks"] == len(audio) >= 8
    assert done["pcm_sha256"] == hashlib.sha256(own_pcm).hexdigest()

    with openai.OpenAI(base_url=stream["endpoint"].rsplit("/audio/speech", 1)[0], api_key="unused",
                       max_retries=0, timeout=600) as client:
        with client.audio.speech.with_streaming_response.create(
                model="tiny", voice="Vivian", input=REQUEST["text"], response_format="pcm",
                extra_body={"language": "en", "seed": 3}) as response:
            assert response.headers["content-type"] == "audio/pcm;rate=24000"
            sdk_pcm = b"".join(response.iter_bytes())
    openai_sse, _ = [], None
    req = urllib.request.Request(stream["endpoint"], headers={"Content-Type": "application/json"}, data=json.dumps(
        {"input": REQUEST["text"], "voice": "Vivian", "language": "en", "seed": 3, "response_format": "pcm",
         "stream_format": "sse"}).encode())
    with urllib.request.urlopen(req, timeout=600) as response:
        events = [json.loads(line[6:]) for line in response if line.startswith(b"data: ")]
    deltas = [e for e in events if e["type"] == "speech.audio.delta"]
    assert len(deltas) == len(audio) and events[-1]["type"] == "speech.audio.done"
    assert events[-1]["samples"] == events[-1]["usage"]["output_samples"] == len(own_pcm) // 2
    sse_pcm = b"".join(base64.b64decode(e["audio"]) for e in deltas)

    assert sdk_pcm == own_pcm == sse_pcm  # same request, same seed, same server: the same bytes

    def openai_pcm(**extra):
        body = {"input": REQUEST["text"], "voice": "Vivian", "language": "en", "seed": 3, "response_format": "pcm",
                **extra}
        req = urllib.request.Request(stream["endpoint"], headers={"Content-Type": "application/json"},
                                     data=json.dumps(body).encode())
        with urllib.request.urlopen(req, timeout=600) as response:
            return dict(response.headers), response.read()

    headers, whole = openai_pcm(stream=False)  # under --stream, "stream": false still gets one body
    assert whole == own_pcm and headers["Content-Length"] == str(len(whole)) and "Transfer-Encoding" not in headers
    headers, low = openai_pcm(sample_rate=16000)  # resampled chunk by chunk as decoded == the whole resampled
    from pytest_s2st.service.resample import resample
    want16 = np.round(resample(np.frombuffer(own_pcm, "<i2") / 32767.0, 24000, 16000) * 32767).astype(np.int64)
    assert headers["Content-Type"] == "audio/pcm;rate=16000" and len(low) == 2 * len(want16)
    assert np.abs(np.frombuffer(low, "<i2").astype(np.int64) - want16).max() <= 2
    assert openai_pcm(seed=-3)[1] != own_pcm  # a negative seed is a seed (torch.manual_seed takes it)
    got, want = np.frombuffer(own_pcm, "<i2").astype(np.int64), np.frombuffer(base_pcm, "<i2").astype(np.int64)
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= 2


def test_stream_is_refused_in_one_line_where_nothing_streams():
    out = subprocess.run([sys.executable, "-m", "pytest_s2st.cli.serve", "--demo-tone", "--port", "0", "--stream"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == ["s2st-serve: error: --stream: the demo tone is one whole waveform; "
                                               "stream a Qwen3TTS case"]
