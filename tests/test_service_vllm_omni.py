"""vLLM-Omni's own TTS benchmark clients, run unmodified against s2st-serve: the exact request bodies and
headers they send to POST /v1/audio/speech, read back as they read it (aiohttp, every non-empty body piece
raw 16-bit mono PCM at 24 kHz). The shapes were read from vLLM-Omni's source (github:vllm-project/vllm-omni,
not copied; each test names its file):

- benchmarks/qwen3-tts/vllm_omni/bench_tts_serve.py, ``create_payload``: no "model"; "input", "language",
  "stream": true, "response_format": "pcm", "task_type", then by task "voice" (CustomVoice),
  "instructions" (VoiceDesign) or "ref_audio" (a file:// URI) + "ref_text" (Base).
- benchmarks/qwen3-tts/vllm_omni/bench_async_chunk.py, ``send_tts_request``: "input", "voice", "language",
  "stream" (true, or false with --no-stream), "response_format": "pcm".
- vllm_omni/benchmarks/patch/patch.py, ``async_request_openai_audio_speech`` (``vllm bench serve --omni
  --backend openai-audio-speech``, which benchmarks/tts/bench_tts.py drives): {"model", "input", "stream":
  true, "response_format": "pcm"} updated with --extra-body (benchmarks/tts/model_configs.yaml's
  task_extra_body, "seed" from --request-seed, "ignore_eos" from --ignore-eos) and a Seed-TTS row's fields
  (vllm_omni/benchmarks/data_modules/seed_tts_dataset.py: an inline data: URL "ref_audio", "ref_text",
  "task_type": "Base", "language", "max_new_tokens"); headers Authorization "Bearer <$OPENAI_API_KEY>"
  (the text "None" when unset) and x-request-id.

vLLM-Omni's request model (vllm_omni/entrypoints/openai/protocol/audio.py, OpenAICreateSpeechRequest) is a
plain pydantic BaseModel: pydantic's default extra="ignore" drops a field it does not know, without an
error. s2st-serve does the same, and logs each such field once per server.
"""
from __future__ import annotations

import asyncio
import base64
import io
import logging

import aiohttp
import pytest
import soundfile as sf

from pytest_s2st.service.model_worker import to_pcm16
from pytest_s2st.service.server import make_app, serve_app
from pytest_s2st.service.synthesizers import demo_tone_synthesizer

HUB_ID = "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice"  # a hub id with a "/": served with --served-model-name
PROMPT = "She said she would be here by noon, but nobody showed up."  # one of the clients' prompts
REF_TEXT = "A short reference sentence."
INSTRUCT = "Speak in an incredulous tone."
STREAM_OPTIONS = {"include_usage": True}  # the chat API's streaming option: vLLM-Omni's speech API does not know it


def ref_wav(tmp_path) -> tuple[str, str]:
    """A real reference WAV, as a file:// URI and as the inline data: URL the Seed-TTS rows send."""
    path = tmp_path / "ref.wav"
    sf.write(path, [0.0, 0.1, -0.1] * 800, 24000, subtype="PCM_16")
    return path.as_uri(), "data:audio/wav;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def truth(text: str, voice: str | None = None, seed: int | None = None) -> bytes:
    """What the demo tone synthesizes for the fields s2st-serve acts on (text, voice, seed)."""
    return to_pcm16(*demo_tone_synthesizer()({"text": text, "voice": voice, "seed": seed}))[0]


def shapes(tmp_path) -> list[tuple[str, dict, dict, bytes]]:
    """(which client, JSON body, headers, the PCM expected back) of every request shape the clients send."""
    file_uri, data_url = ref_wav(tmp_path)
    bench_auth = {"Content-Type": "application/json", "Authorization": "Bearer None", "x-request-id": "bench-0"}
    serve = {"input": PROMPT, "language": "English", "stream": True, "response_format": "pcm"}
    bench = {"model": HUB_ID, "input": PROMPT, "stream": True, "response_format": "pcm"}
    return [
        ("bench_tts_serve CustomVoice", {**serve, "task_type": "CustomVoice", "voice": "vivian"}, {},
         truth(PROMPT, "vivian")),
        ("bench_tts_serve VoiceDesign", {**serve, "task_type": "VoiceDesign", "instructions": INSTRUCT}, {},
         truth(PROMPT)),
        ("bench_tts_serve Base", {**serve, "task_type": "Base", "ref_audio": file_uri, "ref_text": REF_TEXT}, {},
         truth(PROMPT)),
        ("bench_async_chunk stream", {"input": PROMPT, "voice": "vivian", "language": "English", "stream": True,
                                      "response_format": "pcm"}, {}, truth(PROMPT, "vivian")),
        ("bench_async_chunk --no-stream", {"input": PROMPT, "voice": "vivian", "language": "English",
                                           "stream": False, "response_format": "pcm"}, {}, truth(PROMPT, "vivian")),
        ("vllm bench default_voice", {**bench, "voice": "Vivian", "language": "English", "task_type": "CustomVoice",
                                      "seed": 7}, bench_auth, truth(PROMPT, "Vivian", 7)),
        ("vllm bench voice_design", {**bench, "task_type": "VoiceDesign", "language": "English"}, bench_auth,
         truth(PROMPT)),
        ("vllm bench voice_clone (Seed-TTS row)", {**bench, "task_type": "Base", "ref_audio": data_url,
                                                   "ref_text": REF_TEXT, "language": "English",
                                                   "max_new_tokens": 2048, "ignore_eos": True,
                                                   "stream_options": STREAM_OPTIONS}, bench_auth, truth(PROMPT)),
    ]


async def send_like_the_clients(session: aiohttp.ClientSession, url: str, body: dict, headers: dict):
    """POST the JSON body; on 200 every non-empty piece of the body is audio, as the clients count it."""
    async with session.post(url, json=body, headers=headers) as response:
        if response.status != 200:
            return response.status, await response.text(), []
        pieces = [piece async for piece in response.content.iter_any() if piece]
        return 200, response.headers["Content-Type"], pieces


def test_vllm_omni_clients_run_unmodified(tmp_path, caplog):
    cases = shapes(tmp_path)

    async def main():
        app = make_app(demo_tone_synthesizer(), identity={"model_type": "demo-tone"}, chunk_samples=2400,
                       served_model_names=[HUB_ID, "demo-tone"])
        runner, port = await serve_app(app, shutdown_timeout=0.5)
        base = f"http://127.0.0.1:{port}"
        try:
            async with aiohttp.ClientSession() as session:
                answers = []
                for _ in range(2):  # twice: an ignored field is logged once per server, not per request
                    answers.append([await send_like_the_clients(session, base + "/v1/audio/speech", body, headers)
                                    for _, body, headers, _ in cases])
                async with session.get(f"{base}/v1/models/{HUB_ID}") as r:  # vllm bench serve --model checks
                    card = (r.status, (await r.json())["id"])
                async with session.get(base + "/health") as r:
                    ignored = (await r.json())["ignored_fields"]
            return answers, card, ignored
        finally:
            await runner.cleanup()

    with caplog.at_level(logging.WARNING, logger="pytest_s2st.service.server"):
        answers, card, ignored = asyncio.run(asyncio.wait_for(main(), 60))
    for answer in answers:
        for (client, _, _, expected), (status, ctype, pieces) in zip(cases, answer):
            assert status == 200, (client, ctype)
            assert ctype == "audio/pcm;rate=24000" and b"".join(pieces) == expected, client
    assert card == (200, HUB_ID)
    assert ignored == ["task_type", "ref_audio", "ref_text", "max_new_tokens", "ignore_eos", "stream_options"]
    logged = [r.getMessage() for r in caplog.records if "accepted and ignored" in r.getMessage()]
    assert len(logged) == len(ignored) and all(f"{name!r}" in line for name, line in zip(ignored, logged))
    assert "vLLM-Omni's field" in logged[0] and "unknown field" in logged[-1]


@pytest.mark.parametrize("body, status, why", [
    ({"input": PROMPT, "task_type": "Clone"}, 400,
     "task_type: Input should be 'CustomVoice', 'VoiceDesign' or 'Base', got 'Clone'"),
    ({"input": PROMPT, "x_vector_only_mode": "maybe"}, 400,  # pydantic's bool takes "yes"; not "maybe"
     "x_vector_only_mode: Input should be a valid boolean, unable to interpret input, got 'maybe'"),
    ({"input": PROMPT, "speaker_embedding": [0.1, float("inf")]}, 400,
     "speaker_embedding: 'speaker_embedding' values must be finite (no NaN or Inf)"),
    ({"input": PROMPT, "speaker_embedding": [0.1], "ref_audio": "data:,"}, 400,
     "speaker_embedding: 'speaker_embedding' and 'ref_audio' are mutually exclusive"),
    ({"input": PROMPT, "initial_codec_chunk_frames": -1}, 400,
     "initial_codec_chunk_frames: Input should be greater than or equal to 0, got -1"),
    ({"model": "Qwen/Qwen3-TTS-12Hz-0.6B-Base", "input": PROMPT}, 404, "The model `Qwen/Qwen3-TTS-12Hz-0.6B-Base`"),
])
def test_what_vllm_omni_refuses_is_refused(body, status, why):
    """vLLM-Omni's pydantic model refuses these values (a Literal, a bool, finite floats, ge=0, the
    mutual exclusion), and vLLM answers an unserved model 404: so does s2st-serve, in OpenAI's shape."""
    async def main():
        runner, port = await serve_app(make_app(demo_tone_synthesizer(), identity={"model_type": "demo-tone"}),
                                       shutdown_timeout=0.5)
        try:
            async with aiohttp.ClientSession() as session:
                async with session.post(f"http://127.0.0.1:{port}/v1/audio/speech", json=body) as r:
                    return r.status, await r.json()
        finally:
            await runner.cleanup()

    got, data = asyncio.run(asyncio.wait_for(main(), 30))
    assert got == status and data["error"]["message"].startswith(why), data


def test_speaker_is_voices_alias_and_a_wav_is_whole(tmp_path):
    """vLLM-Omni's AliasChoices("voice", "speaker"); its default response_format is wav (one file)."""
    async def main():
        runner, port = await serve_app(make_app(demo_tone_synthesizer(), identity={"model_type": "demo-tone"}),
                                       shutdown_timeout=0.5)
        try:
            async with aiohttp.ClientSession() as session:
                url = f"http://127.0.0.1:{port}/v1/audio/speech"
                async with session.post(url, json={"input": PROMPT, "speaker": "aiden", "language": "Auto"}) as r:
                    return r.status, r.headers["Content-Type"], await r.read()
        finally:
            await runner.cleanup()

    status, ctype, wav = asyncio.run(asyncio.wait_for(main(), 30))
    data, rate = sf.read(io.BytesIO(wav), dtype="int16")
    assert (status, ctype, rate) == (200, "audio/wav", 24000) and data.tobytes() == truth(PROMPT, "aiden")
