"""Reference HTTP/SSE speech server around any blocking synthesizer.

aiohttp: its StreamResponse writes SSE without a web framework, and the same library drives the
load-generating client, so server, client and fault-injecting test servers share one asyncio stack.

Shape (the qwen3-tts-npu reference service): ONE model worker thread runs ``synthesize``; requests
wait in a bounded asyncio queue (full -> 503 {"error": "busy"}); the whole waveform is generated,
then sent as int16 PCM SSE chunks, so TTFA includes queueing and the full generation (the final
``done`` event says ``"streaming": false``). With a streaming synthesizer (``s2st-serve --stream``,
service/stream.py) the model thread hands each decoded chunk to the event loop as soon as it exists
and the handler sends it at once, in every protocol but OpenAI's wav (a file needs its length first);
the done event then says ``"streaming": true``.

Endpoints: GET /health, GET /identity, POST /v1/audio/speech, GET /v1/models, GET /v1/audio/voices.

POST /v1/audio/speech speaks two protocols, told apart by the body: this project's own
({"text", ...}: SSE audio/done events as above) and OpenAI's ({"input", "model", ...}; openai_api.py):
``response_format`` pcm (raw int16 mono, chunked, Content-Type ``audio/pcm;rate=<Hz>``) or wav (the
default, as vLLM-Omni's; one non-streamed file), and ``stream_format: "sse"`` (pcm only) for OpenAI's
speech.audio.delta / speech.audio.done events. A body that is not recognisably the own protocol (no
"text") is OpenAI's: every error under /v1/ then comes in OpenAI's shape {"error": {"message", "type",
"param", "code"}} with OpenAI's status (400 malformed, 404 unknown model or path, 413 body over
MAX_BODY_BYTES, 503 busy with Retry-After, 405 with Allow for a wrong method on a served path); the body
is validated by a declared pydantic model of vLLM-Omni's request (request_model.py).
GET /v1/models/{id} answers one model card. The official ``openai`` SDK is a client of it
(tests/test_service_openai.py), and so are the request shapes of vLLM-Omni's TTS benchmark clients
(tests/test_service_vllm_omni.py).
"""
from __future__ import annotations

import asyncio
import base64
import hashlib
import ipaddress
import json
import logging
import math
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
from aiohttp import web

from .. import runs
from ..errors import S2STError
from . import openai_api as oa
from . import request_model
from .resample import Resampler

SPEECH_PATH = "/v1/audio/speech"
MAX_TEXT_CHARS = 4096  # OpenAI's bound of "input"
# a request body's bound: vLLM-Omni's voice-clone clients inline the reference audio as base64 (a 30 s
# 24 kHz WAV is ~1.9 MB of base64), so aiohttp's default 1 MiB would refuse them
MAX_BODY_BYTES = 8 * 1024 * 1024
RETRY_AFTER_S = 1  # the Retry-After of a 503 busy: a queue place frees when one request finishes
log = logging.getLogger(__name__)
NON_STREAMING_NOTE = "reference pipeline is non-streaming: the whole waveform is generated, then sent in chunks"
STREAMING_NOTE = "each chunk is sent as soon as the model has decoded it"

Synthesizer = Callable[[dict], tuple[np.ndarray, int]]
# (request, emit(waveform chunk, sample_rate)) -> None: calls emit for each decoded chunk, in order
StreamSynthesizer = Callable[[dict, Callable[[np.ndarray, int], None]], None]


class ClientGone(Exception):
    """Raised inside the model thread by emit() once the request's client went away: stops the work."""

# request field -> (accepted types, required); "model" is a client label, accepted and ignored
_FIELDS: dict[str, tuple[tuple[type, ...], bool]] = {
    "text": ((str,), True),
    "voice": ((str,), False),
    "language": ((str,), False),
    "seed": ((int,), False),
    "instruct": ((str,), False),
    "model": ((str,), False),
}

_STATE = web.AppKey("state", dict)  # served / failed / busy counters, readable by tests


@dataclass
class _Job:
    request: dict
    future: asyncio.Future = field(repr=False)
    chunks: asyncio.Queue | None = field(default=None, repr=False)  # streaming: ("audio", pcm, rate) | ("end",) | ("error", exc)
    sample_rate: int | None = None  # an OpenAI request's "sample_rate": the answer is resampled to it
    speed: float = 1.0  # an OpenAI request's "speed" (resample.py: a change of playback rate)

    def resampler(self, native_rate: int) -> Resampler | None:
        rate = self.sample_rate or native_rate
        return None if rate == native_rate and self.speed == 1 else Resampler(native_rate, rate, self.speed)


def validate_request(body: Any) -> dict:
    """Checked copy of a speech request; raises ValueError("<field>: <why>") naming the field."""
    if not isinstance(body, dict):
        raise ValueError("body: expected a JSON object")
    for name in body:
        if name not in _FIELDS:
            raise ValueError(f"{name}: unknown field; accepted: {', '.join(_FIELDS)}")
    out: dict[str, Any] = {}
    for name, (types, required) in _FIELDS.items():
        if name not in body or body[name] is None:
            if required:
                raise ValueError(f"{name}: required")
            continue
        value = body[name]
        # bool is an int subclass; a seed of true is a client bug, not a seed
        if not isinstance(value, types) or isinstance(value, bool):
            raise ValueError(f"{name}: expected {types[0].__name__}, got {type(value).__name__}")
        out[name] = value
    if not out["text"].strip():
        raise ValueError("text: must not be empty")
    if len(out["text"]) > MAX_TEXT_CHARS:
        raise ValueError(f"text: longer than {MAX_TEXT_CHARS} characters")
    if "seed" in out and not 0 <= out["seed"] < 2**63:
        raise ValueError("seed: must be in [0, 2**63)")
    return out


def to_pcm16(waveform: Any, sample_rate: Any) -> tuple[bytes, int]:
    """float waveform in [-1, 1] -> little-endian int16 bytes; ValueError on unusable output."""
    wave = np.asarray(waveform)
    if wave.ndim != 1:
        raise ValueError(f"synthesizer returned a {wave.ndim}-D waveform; expected 1-D")
    if wave.size == 0:
        raise ValueError("synthesizer returned an empty waveform")
    if not np.issubdtype(wave.dtype, np.floating):
        raise ValueError(f"synthesizer returned dtype {wave.dtype}; expected float32")
    if not np.all(np.isfinite(wave)):
        raise ValueError("synthesizer returned non-finite samples")
    if isinstance(sample_rate, bool) or not isinstance(sample_rate, (int, np.integer)) or sample_rate <= 0:
        raise ValueError(f"synthesizer returned sample_rate {sample_rate!r}; expected a positive int")
    pcm = np.round(np.clip(wave.astype(np.float64), -1.0, 1.0) * 32767.0).astype("<i2")
    return pcm.tobytes(), int(sample_rate)


def sse_event(payload: Mapping[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


class _SpeechApp:
    """The handlers of one app; ONE model worker, a bounded queue in front of it."""

    def __init__(self, synthesize: Synthesizer, identity: dict, queue_size: int, chunk_samples: int,
                 served_model_names: list[str] | None = None, stream: StreamSynthesizer | None = None):
        self.synthesize, self.identity, self.stream = synthesize, identity, stream
        self.queue_size, self.chunk_samples = queue_size, chunk_samples
        self.state = {"ready": False, "served": 0, "failed": 0, "busy": 0}
        # the model ids GET /v1/models lists and a request's "model" may name (vLLM's --served-model-name)
        # (default: the config's name, general.name -- "tiny" for general.name: tiny, not the case id "Qwen3TTS-tiny")
        self.model_ids = list(served_model_names or [
            str(identity.get("name") or identity.get("case_id") or identity.get("model_type") or "s2st-reference")])
        self.ignored: list[str] = []  # request fields accepted and not acted on, each logged once
        self.created = int(time.time())
        self.queue: asyncio.Queue | None = None
        self.executor: ThreadPoolExecutor | None = None
        self.worker_task: asyncio.Task | None = None

    def generate(self, job: _Job) -> tuple[bytes, int]:
        # on the model thread: the resampling and int16 conversion of a long waveform stay off the event loop
        wave, rate = self.synthesize(job.request)
        to_pcm16(wave, rate)  # the synthesizer's own output checked before any resampling
        resampler = job.resampler(int(rate))
        if resampler is not None:
            wave = np.concatenate([resampler.feed(wave), resampler.flush()])
            rate = job.sample_rate or rate
        return to_pcm16(wave, rate)

    def generate_chunks(self, job: _Job, loop: asyncio.AbstractEventLoop) -> None:
        """On the model thread: each decoded chunk goes to the request's queue as int16 PCM at once."""
        convert: list = []  # [resampler or None, the native rate], made at the first chunk

        def send(wave: Any, rate: int) -> None:
            if np.asarray(wave).size:
                pcm, rate = to_pcm16(wave, rate)  # per sample: chunk by chunk == the whole at once
                loop.call_soon_threadsafe(job.chunks.put_nowait, ("audio", pcm, rate))

        def emit(wave: Any, sample_rate: int) -> None:
            if job.future.cancelled():
                raise ClientGone()
            if np.asarray(wave).size == 0:
                return
            to_pcm16(wave, sample_rate)  # the synthesizer's own output checked before any resampling
            if not convert:
                convert.extend([job.resampler(int(sample_rate)), sample_rate])
            if convert[0] is None:  # a changed rate is refused by the handler
                return send(wave, sample_rate)
            if sample_rate != convert[1]:
                raise ValueError(f"synthesizer changed its sample rate mid-stream ({convert[1]} -> {sample_rate})")
            send(convert[0].feed(wave), job.sample_rate or sample_rate)  # resampled with state: == whole

        self.stream(job.request, emit)
        if convert and convert[0] is not None:
            send(convert[0].flush(), job.sample_rate or convert[1])

    async def worker(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            job: _Job = await self.queue.get()
            if job.future.cancelled():  # client went away while queued: skip the work
                continue
            if job.chunks is not None:
                try:  # items the model thread queued with call_soon_threadsafe run before this resumes
                    await loop.run_in_executor(self.executor, self.generate_chunks, job, loop)
                except ClientGone:
                    continue
                except Exception as exc:
                    job.chunks.put_nowait(("error", exc))
                else:
                    job.chunks.put_nowait(("end",))
                continue
            try:
                result = await loop.run_in_executor(self.executor, self.generate, job)
            except Exception as exc:  # reported to that request; the worker lives on
                if not job.future.done():
                    job.future.set_exception(exc)
            else:
                if not job.future.done():
                    job.future.set_result(result)

    async def on_startup(self, app: web.Application) -> None:
        self.queue = asyncio.Queue(maxsize=self.queue_size)
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="s2st-model")
        self.worker_task = asyncio.create_task(self.worker())
        self.state["ready"] = True

    async def on_cleanup(self, app: web.Application) -> None:
        self.state["ready"] = False
        self.worker_task.cancel()
        self.executor.shutdown(wait=False, cancel_futures=True)

    async def health(self, request: web.Request) -> web.Response:
        if not self.state["ready"]:
            return web.json_response({"status": "starting"}, status=503)
        state = self.state
        return web.json_response(
            {"status": "ok", "queued": self.queue.qsize(), "queue_size": self.queue_size,
             "served": state["served"], "failed": state["failed"], "busy_rejections": state["busy"],
             "ignored_fields": list(self.ignored)}
        )

    async def get_identity(self, request: web.Request) -> web.Response:
        return web.json_response(self.identity)

    @staticmethod
    def _error(openai: bool, status: int, message: str, field: str | None = None, code: str | None = None,
               headers: dict | None = None) -> web.Response:
        if openai:  # OpenAI's error shape (the SDK raises it as APIStatusError with this message)
            return web.json_response(oa.error_body(status, message, field, code), status=status, headers=headers)
        return web.json_response({"error": message, **({"field": field} if field else {})}, status=status,
                                 headers=headers)

    def _unknown_model(self, model: str) -> web.Response:
        return self._error(True, 404, f"The model `{model[:200]}` does not exist; this server serves "
                                      f"{', '.join(self.model_ids)}", "model", "model_not_found")

    def _note_ignored(self, body: dict) -> None:
        """Log each accepted-but-unused request field once per server, not once per request."""
        for name in request_model.ignored_fields(body):
            if name not in self.ignored and len(self.ignored) < 64:  # bounded: a client may send any names
                self.ignored.append(name)
                known = "vLLM-Omni's field" if name in request_model.VLLM_OMNI_FIELDS else "unknown field"
                log.warning("s2st-serve: request field %r (%s) accepted and ignored, as vLLM-Omni ignores what it "
                            "does not use; logged once", name[:80], known)

    async def _queue_job(self, request: web.Request, body: Any, openai: bool, shape: dict) -> _Job | web.Response:
        """Validate and queue: the job, or the error response to send. An OpenAI request's answer shape
        (response_format, stream_format) goes into ``shape``."""
        try:
            if openai:
                fields, answer = request_model.validate_openai_request(body, MAX_TEXT_CHARS)
                shape.update(answer, characters=len(fields["text"]))
            else:
                fields = validate_request(body)
        except ValueError as exc:
            name = getattr(exc, "field", None) or str(exc).split(":", 1)[0]
            return self._error(openai, 400, str(exc), None if name == "body" else name)
        if openai:  # after validation, as vLLM checks the model after its request model parsed
            if body.get("model") is not None and body["model"] not in self.model_ids:
                return self._unknown_model(body["model"])
            self._note_ignored(body)
        fields.pop("model", None)
        fields["id"] = request.headers.get("X-Request-Id", "request")
        job = _Job(fields, asyncio.get_running_loop().create_future(),
                   asyncio.Queue() if self.stream is not None else None,
                   shape.get("sample_rate"), shape.get("speed", 1.0))
        try:
            self.queue.put_nowait(job)
        except asyncio.QueueFull:
            self.state["busy"] += 1
            return self._error(openai, 503, "busy", code="server_busy" if openai else None,
                               headers={"Retry-After": str(RETRY_AFTER_S)})
        return job

    async def _synthesize(self, request: web.Request, body: Any, openai: bool,
                          shape: dict) -> tuple[bytes, int] | web.Response:
        """Validate, queue, wait for the model: the PCM, or the error response to send."""
        job = await self._queue_job(request, body, openai, shape)
        if isinstance(job, web.Response):
            return job
        try:
            return await job.future
        except asyncio.CancelledError:
            job.future.cancel()
            raise
        except Exception as exc:  # before streaming: a plain 500 the client can read
            self.state["failed"] += 1
            return self._error(openai, 500, f"synthesis failed: {type(exc).__name__}: {exc}")

    async def speech(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()  # over MAX_BODY_BYTES: 413, answered by the /v1 error middleware
        try:
            body = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            return self._error(True, 400, f"body: not UTF-8 (byte {exc.start})")
        except json.JSONDecodeError as exc:
            return self._error(True, 400, f"body: not valid JSON (line {exc.lineno} column {exc.colno}: {exc.msg}); "
                                          "send a JSON object with \"input\"")
        except RecursionError:
            return self._error(True, 400, "body: JSON nested too deeply")
        openai, shape = oa.is_openai_request(body), {}
        if self.stream is not None:
            return await self._speech_streaming(request, body, openai, shape)
        outcome = await self._synthesize(request, body, openai, shape)
        if isinstance(outcome, web.Response):
            return outcome
        pcm, sample_rate = outcome
        if openai:
            return await self._openai_answer(request, pcm, sample_rate, shape)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        try:
            await self._stream(response, pcm, sample_rate)
        except ConnectionError:
            return response  # client went away mid-stream; nothing left to tell it
        except Exception as exc:  # headers already sent: report in-band
            return await self._fail_in_band(response, exc, sse=True)
        self.state["served"] += 1
        return response

    async def _fail_in_band(self, response: web.StreamResponse, exc: Exception, sse: bool) -> web.StreamResponse:
        """A failure after the headers went out: counted, told as an SSE error event where the protocol has one
        (raw PCM has none), and the stream ended; a client already gone is left alone."""
        self.state["failed"] += 1
        try:
            if sse:
                await response.write(sse_event({"type": "error", "message": f"{type(exc).__name__}: {exc}"}))
            await response.write_eof()
        except ConnectionError:
            pass
        return response

    @staticmethod
    async def _next_chunk(job: _Job) -> tuple[bytes, int] | None:
        """The next decoded chunk; None at the end; the model's exception when it failed."""
        item = await job.chunks.get()
        if item[0] == "audio":
            return item[1], item[2]
        if item[0] == "end":
            return None
        raise item[1]

    async def _speech_streaming(self, request: web.Request, body: Any, openai: bool,
                                shape: dict) -> web.StreamResponse:
        """Headers go out with the first decoded chunk (an error before it is a plain 500); every chunk
        is written as soon as the model thread hands it over."""
        job = await self._queue_job(request, body, openai, shape)
        if isinstance(job, web.Response):
            return job
        try:
            first = await self._next_chunk(job)
            if first is None:
                raise ValueError("synthesizer returned an empty waveform")
            pieces = [first[0]]
            whole = openai and (shape["format"] == "wav" or not shape["streamed"])
            if whole:  # a WAV file names its length first, and "stream": false asks for one body: whole, then sent
                while (chunk := await self._next_chunk(job)) is not None:
                    pieces.append(chunk[0])
        except asyncio.CancelledError:
            job.future.cancel()
            raise
        except Exception as exc:
            self.state["failed"] += 1
            return self._error(openai, 500, f"synthesis failed: {type(exc).__name__}: {exc}")
        rate = first[1]
        if whole:
            return await self._openai_answer(request, b"".join(pieces), rate, shape)
        sse = not openai or shape["stream_format"] == "sse"
        ctype = "text/event-stream" if sse else f"audio/pcm;rate={rate}"
        response = web.StreamResponse(headers={"Content-Type": ctype, "Cache-Control": "no-cache"})
        if openai:
            response.enable_chunked_encoding()
        digest, samples, index, chunk = hashlib.sha256(), 0, 0, first
        try:
            await response.prepare(request)
            while chunk is not None:
                pcm = chunk[0]
                if chunk[1] != rate:
                    raise ValueError(f"synthesizer changed its sample rate mid-stream ({rate} -> {chunk[1]})")
                digest.update(pcm)
                samples += len(pcm) // 2
                if not openai:
                    await response.write(sse_event({"type": "audio", "index": index, "sample_rate": rate,
                                                    "pcm": base64.b64encode(pcm).decode("ascii")}))
                else:
                    await response.write(oa.delta_event(pcm, rate) if sse else pcm)
                index += 1
                chunk = await self._next_chunk(job)
            if not openai:
                await response.write(sse_event({
                    "type": "done", "audio_seconds": samples / rate, "samples": samples, "sample_rate": rate,
                    "streaming": True, "note": STREAMING_NOTE, "pcm_sha256": digest.hexdigest(),
                    "chunks": index}))
            elif sse:
                await response.write(oa.done_event(samples, shape["characters"]))
            await response.write_eof()
        except ConnectionError:
            job.future.cancel()  # the model thread stops at its next chunk
            return response
        except asyncio.CancelledError:
            job.future.cancel()
            raise
        except Exception as exc:  # headers already sent: report in-band where the protocol can
            job.future.cancel()
            return await self._fail_in_band(response, exc, sse)
        self.state["served"] += 1
        return response

    async def _openai_answer(self, request: web.Request, pcm: bytes, sample_rate: int,
                             shape: dict) -> web.StreamResponse:
        """OpenAI's answers: a WAV file, one raw PCM body ("stream": false), raw PCM chunks, or SSE delta
        events then the done event."""
        if shape["format"] == "wav":
            self.state["served"] += 1
            return web.Response(body=runs.wav_bytes(pcm, sample_rate), content_type="audio/wav")
        sse = shape["stream_format"] == "sse"
        if not shape["streamed"]:
            self.state["served"] += 1
            return web.Response(body=pcm, headers={"Content-Type": f"audio/pcm;rate={sample_rate}"})
        ctype = oa.SSE_TYPE if sse else f"audio/pcm;rate={sample_rate}"  # the rate: pcm does not say it
        response = web.StreamResponse(headers={"Content-Type": ctype, "Cache-Control": "no-cache"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        step = 2 * self.chunk_samples
        try:
            for start in range(0, len(pcm), step):
                chunk = pcm[start: start + step]
                await response.write(oa.delta_event(chunk, sample_rate) if sse else chunk)
            if sse:
                await response.write(oa.done_event(len(pcm) // 2, shape["characters"]))
            await response.write_eof()
        except ConnectionError:
            return response  # client went away mid-stream
        self.state["served"] += 1
        return response

    async def models(self, request: web.Request) -> web.Response:
        """OpenAI's model list: the model this server serves, under each served name (``vllm bench serve``
        takes the first id)."""
        return web.json_response({"object": "list", "data": [oa.model_card(m, self.created) for m in self.model_ids]})

    async def model(self, request: web.Request) -> web.Response:
        """GET /v1/models/{id} (the SDK's ``models.retrieve``): its card, or 404 in OpenAI's shape."""
        model = request.match_info["model"]
        if model not in self.model_ids:
            return self._unknown_model(model)
        return web.json_response(oa.model_card(model, self.created))

    async def voices(self, request: web.Request) -> web.Response:
        """The voices the model names (identity "voices"); any voice string is passed to the synthesizer."""
        return web.json_response({"voices": list(self.identity.get("voices") or []), "any_voice_accepted": True})

    async def _stream(self, response: web.StreamResponse, pcm: bytes, sample_rate: int) -> None:
        """Audio events of chunk_samples int16 samples each, then the done event."""
        step = 2 * self.chunk_samples
        for index, start in enumerate(range(0, len(pcm), step)):
            chunk = base64.b64encode(pcm[start : start + step]).decode("ascii")
            await response.write(sse_event({"type": "audio", "index": index, "pcm": chunk, "sample_rate": sample_rate}))
        samples = len(pcm) // 2
        await response.write(sse_event({
            "type": "done", "audio_seconds": samples / sample_rate, "samples": samples, "sample_rate": sample_rate,
            "streaming": False, "note": NON_STREAMING_NOTE, "pcm_sha256": hashlib.sha256(pcm).hexdigest(),
        }))
        await response.write_eof()


@web.middleware
async def openai_errors(request: web.Request, handler: Callable) -> web.StreamResponse:
    """Under /v1/ the framework's own errors (unknown path 404, wrong method 405, body over the limit
    413) come in OpenAI's JSON shape, not aiohttp's text/plain."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400 or not request.path.startswith("/v1/"):
            raise
        if isinstance(exc, web.HTTPRequestEntityTooLarge):
            message = f"body: larger than {MAX_BODY_BYTES} bytes"
        else:
            message = f"{request.method} {request.path[:200]}: {exc.reason}"
        headers = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
        return web.json_response(oa.error_body(exc.status, message), status=exc.status, headers=headers)


def make_app(
    synthesize: Synthesizer,
    *,
    identity: dict,
    queue_size: int = 8,
    chunk_samples: int = 4800,
    served_model_names: list[str] | None = None,
    stream: StreamSynthesizer | None = None,
) -> web.Application:
    """The speech app. ``queue_size`` requests may wait while one runs; one more gets 503 busy.
    With ``stream`` the app streams: each chunk it emits is sent at once (``synthesize`` is unused).
    ``served_model_names``: the model ids a request may name (default: the identity's name, the config's
    general.name; else its case id)."""
    if queue_size < 1:
        raise S2STError(f"queue_size={queue_size}: must be >= 1")
    if chunk_samples < 1:
        raise S2STError(f"chunk_samples={chunk_samples}: must be >= 1")
    if served_model_names is not None and not all(isinstance(n, str) and n for n in served_model_names):
        raise S2STError(f"served_model_names={served_model_names!r}: must be non-empty strings")
    handlers = _SpeechApp(synthesize, identity, queue_size, chunk_samples, served_model_names, stream)
    app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[openai_errors])
    app[_STATE] = handlers.state
    app.on_startup.append(handlers.on_startup)
    app.on_cleanup.append(handlers.on_cleanup)
    app.router.add_get("/health", handlers.health)
    app.router.add_get("/identity", handlers.get_identity)
    app.router.add_post(SPEECH_PATH, handlers.speech)
    app.router.add_get(oa.MODELS_PATH, handlers.models)
    app.router.add_get(oa.MODELS_PATH + "/{model:.+}", handlers.model)  # ids may hold "/" (Qwen/Qwen3-TTS-...)
    app.router.add_get(oa.VOICES_PATH, handlers.voices)
    return app


def check_loopback(host: str) -> str:
    """The service is a benchmark harness, not a public server: loopback only."""
    if host == "localhost":
        return "127.0.0.1"
    try:
        if ipaddress.ip_address(host).is_loopback:
            return host
    except ValueError:
        pass
    raise S2STError(f"host {host!r}: the speech server binds loopback only (127.0.0.1 or ::1)")


async def serve_app(
    app: web.Application, host: str = "127.0.0.1", port: int = 0, *, shutdown_timeout: float = 5.0
) -> tuple[web.AppRunner, int]:
    """Start ``app`` on host:port (0 = a port from the OS); returns (runner, bound port).
    ``shutdown_timeout``: how long cleanup waits for in-flight handlers."""
    host = check_loopback(host)
    # handler_cancellation: a client that gives up while queued frees its place and never costs model time
    runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=shutdown_timeout,
                           handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True)
    await site.start()
    bound = runner.addresses[0][1]
    return runner, bound


def write_json_atomic(path: Path, data: Any) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def run_server(
    synthesize: Synthesizer,
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    identity: dict | None = None,
    identity_path: str | Path | None = None,
    queue_size: int = 8,
    chunk_samples: int = 4800,
    served_model_names: list[str] | None = None,
    stream: StreamSynthesizer | None = None,
    stream_options: dict | None = None,
) -> None:
    """Serve until SIGINT/SIGTERM. The identity file (with the bound port) is written once listening.
    ``stream``: a streaming synthesizer (``stream_options``, its chunking, goes into the identity)."""
    host = check_loopback(host)
    identity = dict(identity or {})

    async def main() -> None:
        app = make_app(synthesize, identity=identity, queue_size=queue_size, chunk_samples=chunk_samples,
                       served_model_names=served_model_names, stream=stream)
        runner, bound = await serve_app(app, host, port)
        shown = f"[{host}]" if ":" in host else host
        identity.update(
            {
                "host": host,
                "port": bound,
                "endpoint": f"http://{shown}:{bound}{SPEECH_PATH}",
                "pid": os.getpid(),
                "queue_size": queue_size,
                "chunk_samples": chunk_samples,
                "streaming": stream is not None,
                "stream": dict(stream_options or {}) if stream is not None else None,
                "protocols": list(oa.PROTOCOLS),
                **({"served_model_names": list(served_model_names)} if served_model_names else {}),
            }
        )
        if identity_path is not None:
            write_json_atomic(Path(identity_path), identity)
        print(f"s2st-serve: listening on {identity['endpoint']}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            await stop.wait()
        finally:
            await runner.cleanup()

    asyncio.run(main())


# --- synthesizers -------------------------------------------------------------------------------


def pipeline_synthesizer(pipeline: Any) -> Synthesizer:
    """Wrap a Pipeline: prepare_sample(text sample), every stage with to_next_input in between."""
    stages = list(pipeline.stages)
    if not stages:
        raise S2STError(f"pipeline {getattr(pipeline, 'model_type', '?')!r} has no stages")

    def synthesize(request: dict) -> tuple[np.ndarray, int]:
        sample = {key: request.get(key) for key in ("text", "language", "voice", "seed")}
        sample["id"] = request.get("id", "request")
        if request.get("instruct") is not None:
            sample["instruct"] = request["instruct"]
        x = pipeline.prepare_sample(sample)
        output: Any = None
        for i, stage in enumerate(stages):
            output = stage.forward(x)
            if i + 1 < len(stages):
                x = stage.to_next_input(output)
        if not isinstance(output, Mapping) or "waveform" not in output or "sample_rate" not in output:
            raise ValueError(f"last stage {stages[-1].name!r} did not return {{'waveform', 'sample_rate'}}")
        return np.asarray(output["waveform"], dtype=np.float32), int(output["sample_rate"])

    return synthesize


def pipeline_stream_synthesizer(pipeline: Any, options: Any) -> StreamSynthesizer:
    """Wrap a pipeline that streams (``stream(prepared sample, emit, chunk_frames, left_context_frames)``;
    ``options``: service.stream.StreamOptions)."""
    from .stream import no_stream_reason

    why = no_stream_reason(pipeline)
    if why:
        raise S2STError(f"--stream: {why}")

    def stream(request: dict, emit: Callable[[np.ndarray, int], None]) -> None:
        sample = {key: request.get(key) for key in ("text", "language", "voice", "seed")}
        sample["id"] = request.get("id", "request")
        if request.get("instruct") is not None:
            sample["instruct"] = request["instruct"]
        pipeline.stream(pipeline.prepare_sample(sample), emit, options.chunk_frames, options.left_context_frames)

    return stream


def demo_tone_synthesizer(
    sample_rate: int = 24000, seconds_per_char: float = 0.02, delay_s: float = 0.0
) -> Synthesizer:
    """No model: a deterministic sine; length grows with the text, pitch follows seed and voice.

    ``delay_s`` simulates model time (the worker thread sleeps), for queueing tests and demos.
    """

    def synthesize(request: dict) -> tuple[np.ndarray, int]:
        if delay_s > 0:
            import time

            time.sleep(delay_s)
        text = request["text"]
        n = int(sample_rate * (0.1 + seconds_per_char * len(text)))
        voice_offset = sum((request.get("voice") or "").encode()) % 7
        freq = 220.0 + 20.0 * ((int(request.get("seed") or 0) + voice_offset) % 12)
        t = np.arange(n, dtype=np.float64) / sample_rate
        wave = 0.3 * np.sin(2.0 * math.pi * freq * t)
        return wave.astype(np.float32), sample_rate

    return synthesize
