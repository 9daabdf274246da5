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

This module holds the routes (make_app, serve_app, run_server); the model thread and its queue are
model_worker.py's, the bytes of each answer answers.py's, the synthesizers synthesizers.py's.
"""
from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import os
import signal
import time
from pathlib import Path
from typing import Any, Callable

from aiohttp import web

from ..errors import S2STError
from . import openai_api as oa
from . import request_model
from .answers import Answers
from .model_worker import Job, ModelWorker, StreamSynthesizer, Synthesizer

SPEECH_PATH = "/v1/audio/speech"
MAX_TEXT_CHARS = 4096  # OpenAI's bound of "input"
# a request body's bound: vLLM-Omni's voice-clone clients inline the reference audio as base64 (a 30 s
# 24 kHz WAV is ~1.9 MB of base64), so aiohttp's default 1 MiB would refuse them
MAX_BODY_BYTES = 8 * 1024 * 1024
RETRY_AFTER_S = 1  # the Retry-After of a 503 busy: a queue place frees when one request finishes
log = logging.getLogger(__name__)

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


class _SpeechApp:
    """The routes of one app: ONE model worker (model_worker.py), a bounded queue in front of it; the
    answers it sends are answers.py's."""

    def __init__(self, synthesize: Synthesizer, identity: dict, queue_size: int, chunk_samples: int,
                 served_model_names: list[str] | None = None, stream: StreamSynthesizer | None = None):
        self.identity, self.streaming, self.queue_size = identity, stream is not None, queue_size
        self.state = {"ready": False, "served": 0, "failed": 0, "busy": 0}
        self.model_worker = ModelWorker(synthesize, stream, queue_size)
        self.answers = Answers(chunk_samples, self.state)
        # the model ids GET /v1/models lists and a request's "model" may name (vLLM's --served-model-name)
        # (default: the config's name, general.name -- "tiny" for general.name: tiny, not the case id "Qwen3TTS-tiny")
        self.model_ids = list(served_model_names or [
            str(identity.get("name") or identity.get("case_id") or identity.get("model_type") or "s2st-reference")])
        self.ignored: list[str] = []  # request fields accepted and not acted on, each logged once
        self.created = int(time.time())

    async def on_startup(self, app: web.Application) -> None:
        self.model_worker.start()
        self.state["ready"] = True

    async def on_cleanup(self, app: web.Application) -> None:
        self.state["ready"] = False
        self.model_worker.stop()

    async def health(self, request: web.Request) -> web.Response:
        if not self.state["ready"]:
            return web.json_response({"status": "starting"}, status=503)
        state = self.state
        return web.json_response(
            {"status": "ok", "queued": self.model_worker.queued(), "queue_size": self.queue_size,
             "served": state["served"], "failed": state["failed"], "busy_rejections": state["busy"],
             "ignored_fields": list(self.ignored)}
        )

    async def get_identity(self, request: web.Request) -> web.Response:
        return web.json_response(self.identity)

    def _unknown_model(self, model: str) -> web.Response:
        return self.answers.error(True, 404, f"The model `{model[:200]}` does not exist; this server serves "
                                           f"{', '.join(self.model_ids)}", "model", "model_not_found")

    def _note_ignored(self, body: dict) -> None:
        """Log each accepted-but-unused request field once per server, not once per request."""
        for name in request_model.ignored_fields(body):
            if name not in self.ignored and len(self.ignored) < 64:  # bounded: a client may send any names
                self.ignored.append(name)
                known = "vLLM-Omni's field" if name in request_model.VLLM_OMNI_FIELDS else "unknown field"
                log.warning("s2st-serve: request field %r (%s) accepted and ignored, as vLLM-Omni ignores what it "
                            "does not use; logged once", name[:80], known)

    async def _queue_job(self, request: web.Request, body: Any, openai: bool, shape: dict) -> Job | web.Response:
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
            return self.answers.error(openai, 400, str(exc), None if name == "body" else name)
        if openai:  # after validation, as vLLM checks the model after its request model parsed
            if body.get("model") not in (None, "") and body["model"] not in self.model_ids:  # "": vLLM serves it
                return self._unknown_model(body["model"])
            self._note_ignored(body)
        fields.pop("model", None)
        fields["id"] = request.headers.get("X-Request-Id", "request")
        job = Job(fields, asyncio.get_running_loop().create_future(), asyncio.Queue() if self.streaming else None,
                  shape.get("sample_rate"), shape.get("speed", 1.0))
        try:
            self.model_worker.put(job)
        except asyncio.QueueFull:
            self.state["busy"] += 1
            return self.answers.error(openai, 503, "busy", code="server_busy" if openai else None,
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
            return self.answers.error(openai, 500, f"synthesis failed: {type(exc).__name__}: {exc}")

    async def speech(self, request: web.Request) -> web.StreamResponse:
        # vLLM's validate_json_request: the body is JSON only when it says so (415 there; 400 in later vLLM)
        media = request.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()
        if media != "application/json":
            said = f"Content-Type {media[:60]!r}" if media else "no Content-Type"
            return self.answers.error(True, 415, f"Unsupported Media Type: Only 'application/json' is allowed "
                                                 f"({said})", "Content-Type")
        raw = await request.read()  # over MAX_BODY_BYTES: 413, answered by the /v1 error middleware
        try:
            body = json.loads(raw.decode("utf-8-sig"))  # one leading BOM dropped, as FastAPI's request.json()
        except UnicodeDecodeError as exc:
            return self.answers.error(True, 400, f"body: not UTF-8 (byte {exc.start})")
        except json.JSONDecodeError as exc:
            return self.answers.error(True, 400, f"body: not valid JSON (line {exc.lineno} column {exc.colno}: "
                                                 f"{exc.msg}); send a JSON object with \"input\"")
        except RecursionError:
            return self.answers.error(True, 400, "body: JSON nested too deeply")
        openai, shape = oa.is_openai_request(body), {}
        if self.streaming:
            job = await self._queue_job(request, body, openai, shape)
            if isinstance(job, web.Response):
                return job
            return await self.answers.streamed(request, job, openai, shape)
        outcome = await self._synthesize(request, body, openai, shape)
        if isinstance(outcome, web.Response):
            return outcome
        pcm, sample_rate = outcome
        if openai:
            return await self.answers.openai(request, pcm, sample_rate, shape)
        return await self.answers.own_sse(request, pcm, sample_rate)

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
