"""OpenAI's speech API shape (POST /v1/audio/speech), as both sides of this project speak it.

Client side (``--s2st-protocol openai``): the request body built from a workload item, and the pieces
that read an answer: a bounded incremental WAV header parser and the SSE event reader of
``speech.audio.delta`` / ``speech.audio.done``. Server side (``s2st-serve``): the request check and
the event bytes. Nothing here does I/O; every parser raises ValueError with a one-line reason.

What was copied from where (behaviour, not text):
- The request, from vLLM-Omni's benchmark backend ``openai-audio-speech``
  (vllm_omni/benchmarks/patch/patch.py, ``async_request_openai_audio_speech``): a JSON body
  {"model", "input", "stream": true, "response_format": "pcm"}, then ``--extra-body`` merged over it
  with dict.update (so the extra body wins); the answer read as raw PCM, 16-bit mono, 24 kHz by
  default, every non-empty body piece an audio arrival, TTFP = send -> first non-empty piece.
  Unlike it, a piece counts as audio only once it completes an int16 sample, and the model name comes
  from the extra body, else from GET /v1/models (its first id), as ``vllm bench serve`` does without --model.
- The SSE events, from OpenAI's API reference (audio/speech, ``stream_format: "sse"``): data lines
  holding {"type": "speech.audio.delta", "audio": <base64>} then {"type": "speech.audio.done", "usage": ...}.
- The media types, from vLLM-Omni's audio_utils_mixin.py: pcm -> audio/pcm, wav -> audio/wav.
"""
from __future__ import annotations

import base64
import json
import math
import os
import struct
from typing import Any

from ..inputs import loads_finite
from .resample import MAX_SPEED, MIN_SPEED

OWN, OPENAI = "s2st", "openai"
PROTOCOLS = (OWN, OPENAI)
DEFAULT_SAMPLE_RATE = 24_000  # OpenAI's pcm: 24 kHz, int16 little-endian, mono
MAX_RATE = 384_000
MAX_EXTRA_BODY_CHARS = 64 * 1024
MODELS_PATH, VOICES_PATH = "/v1/models", "/v1/audio/voices"

PCM_TYPES = frozenset({"audio/pcm", "audio/l16", "audio/raw", "audio/x-raw", "audio/x-pcm", "audio/basic-pcm",
                       "application/octet-stream"})
WAV_TYPES = frozenset({"audio/wav", "audio/x-wav", "audio/wave", "audio/vnd.wave"})
SSE_TYPE = "text/event-stream"
DELTA, DONE = "speech.audio.delta", "speech.audio.done"

# workload field -> request field (seed is no field of OpenAI's request: put it in the extra body)
_ITEM_TO_REQUEST = (("text", "input"), ("voice", "voice"), ("language", "language"), ("instruct", "instructions"))


API_KEY_ENV = "OPENAI_API_KEY"  # as the openai SDK and ``vllm bench serve`` read it


def authorization() -> str | None:
    """``Bearer $OPENAI_API_KEY`` for servers started with an API key (never saved, never printed);
    None when unset or empty. A key holding a line break would split the header: refused in one line."""
    key = os.environ.get(API_KEY_ENV, "").strip()
    if not key:
        return None
    if any(c in key for c in "\r\n\0") or not key.isascii():
        raise ValueError(f"${API_KEY_ENV}: not a single line of ASCII")
    return f"Bearer {key}"


def parse_extra_body(value: Any) -> dict:
    """``--s2st-extra-body``: a JSON object (text) or a mapping (a config's YAML) -> dict; ValueError otherwise."""
    if isinstance(value, dict):
        data = value
    else:
        text = str(value).strip()
        if len(text) > MAX_EXTRA_BODY_CHARS:
            raise ValueError(f"must be a JSON object of at most {MAX_EXTRA_BODY_CHARS} characters, got {len(text)}")
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise ValueError(f"must be a JSON object, e.g. '{{\"speed\": 1.0}}'; not JSON ({exc})") from None
        if not isinstance(data, dict):
            raise ValueError(f"must be a JSON object, e.g. '{{\"speed\": 1.0}}'; got a JSON {type(data).__name__}")
    try:
        json.dumps(data, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"must be a JSON object ({exc})") from None
    return dict(data)


def build_request(item: dict, model: str | None, extra_body: dict | None) -> dict:
    """The JSON body of one OpenAI speech request for a workload item (extra body merged last)."""
    body: dict[str, Any] = {}
    if model is not None:
        body["model"] = model
    for src, dst in _ITEM_TO_REQUEST:
        if item.get(src) is not None:
            body[dst] = item[src]
    body.update(response_format="pcm", stream=True)
    body.update(extra_body or {})
    return body


def content_rate(content_type: str) -> int | None:
    """A ``rate=`` (or ``sample_rate=``) parameter of a Content-Type (audio/L16;rate=16000); ValueError when bad."""
    for param in content_type.split(";")[1:]:
        name, _, value = param.partition("=")
        if name.strip().lower() in ("rate", "sample_rate", "samplerate"):
            text = value.strip().strip('"')
            if not text.isdigit() or not 0 < int(text) <= MAX_RATE:
                raise ValueError(f"Content-Type {content_type[:80]!r}: rate {text[:20]!r} is not in 1-{MAX_RATE}")
            return int(text)
    return None


def check_rate(rate: Any, where: str) -> int:
    if isinstance(rate, bool) or not isinstance(rate, int) or not 0 < rate <= MAX_RATE:
        raise ValueError(f"{where}: sample_rate {str(rate)[:40]!r} is not an integer in 1-{MAX_RATE}")
    return rate


def parse_event(raw: bytes) -> tuple[str, Any]:
    """One SSE event's data -> ("delta", (pcm bytes, rate or None)) | ("done", event) | ("error", message)
    | ("other", its type). ValueError when it is not a JSON object or a delta's audio is not base64."""
    if raw.strip() == b"[DONE]":  # the chat API's end marker: some servers end speech streams with it too
        return "done", {}
    try:
        event = loads_finite(raw)  # NaN/Infinity are not JSON
    except (ValueError, RecursionError):
        raise ValueError(f"malformed SSE event: {raw[:80]!r}") from None
    if not isinstance(event, dict):
        raise ValueError(f"malformed SSE event (not an object): {raw[:80]!r}")
    return classify(event)


def classify(event: dict, streamed: int | None = None) -> tuple[str, Any]:
    """An event object -> as parse_event. ``streamed``: the delta's audio was decoded as it arrived (the
    client's reader of events too large to hold): that many bytes, in place of the pcm bytes."""
    kind = event.get("type")
    if kind == DELTA:
        if streamed is not None:
            pcm: bytes | int = streamed
        else:
            try:
                pcm = base64.b64decode(event["audio"], validate=True)
            except (KeyError, TypeError, ValueError):
                raise ValueError(f"malformed {DELTA} event: 'audio' is not base64") from None
        rate = event.get("sample_rate")  # not OpenAI's: this project's server names its rate
        return "delta", (pcm, None if rate is None else check_rate(rate, f"{DELTA} event"))
    if kind == DONE:
        return "done", event
    if kind == "error" or "error" in event:
        error = event.get("error", event.get("message"))
        if isinstance(error, dict):
            error = error.get("message", error)
        return "error", str(error)[:300]
    return "other", str(kind)[:60]


def error_message(raw: bytes) -> str:
    """The message of an error body: OpenAI's {"error": {"message"}}, this project's {"error": "..."}, or the text."""
    try:
        data = json.loads(raw)
        message = data.get("error", raw.decode(errors="replace"))
        if isinstance(message, dict):
            message = message.get("message", message)
        return str(message)
    except (ValueError, AttributeError, RecursionError):
        return raw.decode(errors="replace").strip()


class WavReader:
    """Incremental, bounded RIFF/WAVE reader: body pieces in, int16 mono PCM out.

    The header (every chunk before "data") may be at most ``max_header`` bytes; only 16-bit PCM mono
    (format 1, or WAVE_FORMAT_EXTENSIBLE) is taken. A data size of 0 or 0xFFFFFFFF (a streamed WAV
    whose length was unknown) means "to the end of the body"; bytes after a sized data chunk (e.g. a
    trailing LIST chunk) are dropped."""

    def __init__(self, max_header: int = 64 * 1024) -> None:
        self.max_header = max_header
        self.rate: int | None = None
        self.ready = False  # the header is parsed; PCM follows
        self._head = bytearray()
        self._left: int | None = None  # data bytes still expected; None = to the end

    def feed(self, piece: bytes) -> bytes:
        if self.ready:
            return self._take(piece)
        self._head += piece
        if len(self._head) < 12:
            return b""
        if self._head[:4] != b"RIFF" or self._head[8:12] != b"WAVE":
            raise ValueError(f"not a RIFF/WAVE header: {bytes(self._head[:12])!r}")
        pos = 12
        fmt = None
        while len(self._head) >= pos + 8:
            cid, size = self._head[pos:pos + 4], struct.unpack_from("<I", self._head, pos + 4)[0]
            if cid == b"data":
                if fmt is None:
                    raise ValueError("the data chunk comes before any fmt chunk")
                self.ready = True
                self._left = None if size in (0, 0xFFFFFFFF) else size
                rest = bytes(self._head[pos + 8:])
                self._head = bytearray()
                return self._take(rest)
            if pos + 8 + size > self.max_header:  # a chunk before the audio that would pass the bound
                raise ValueError(f"no data chunk within the first {self.max_header} bytes "
                                 f"(a {bytes(cid)!r} chunk of {size} bytes)")
            if len(self._head) < pos + 8 + size + (size & 1):
                return b""  # this chunk is not complete yet
            if cid == b"fmt ":
                fmt = self._fmt(bytes(self._head[pos + 8:pos + 8 + size]))
            pos += 8 + size + (size & 1)  # chunks are padded to even sizes
        if len(self._head) > self.max_header or pos + 8 > self.max_header:
            raise ValueError(f"no data chunk within the first {self.max_header} bytes")
        return b""

    def _fmt(self, data: bytes) -> tuple[int, int, int, int]:
        if len(data) < 16:
            raise ValueError(f"fmt chunk of {len(data)} bytes (16 at least)")
        tag, channels, rate, _, _, bits = struct.unpack_from("<HHIIHH", data)
        if tag not in (1, 0xFFFE):
            raise ValueError(f"WAV format tag {tag}, not PCM (1)")
        if channels != 1 or bits != 16:
            raise ValueError(f"WAV is {channels} channel(s) of {bits}-bit samples; expected mono 16-bit PCM")
        self.rate = check_rate(rate, "WAV header")
        return tag, channels, rate, bits

    def _take(self, piece: bytes) -> bytes:
        if self._left is None:
            return piece
        out = piece[: self._left]
        self._left -= len(out)
        return out

    def finish(self) -> None:
        if not self.ready:
            raise ValueError("the response ended inside the WAV header")
        if self._left:
            raise ValueError(f"the WAV data chunk ended {self._left} bytes short of its size")


# --- server side -------------------------------------------------------------------------------------------

RESPONSE_FORMATS = ("pcm", "wav")  # of OpenAI's mp3, opus, aac, flac, wav, pcm: the lossless, codec-free ones
STREAM_FORMATS = ("audio", "sse")
# request field -> (accepted types, required): the fields this server acts on. "language" is vLLM-Omni's
# extension, "seed" this server's; "speaker" is vLLM-Omni's alias of "voice" (AliasChoices("voice", "speaker")).
_FIELDS: dict[str, tuple[tuple[type, ...], bool]] = {
    "input": ((str,), True),
    "model": ((str,), False),
    "voice": ((str, dict), False),  # OpenAI's custom voice object {"id": ...}, as vLLM-Omni takes it
    "speaker": ((str, dict), False),
    "instructions": ((str,), False),
    "language": ((str,), False),
    "response_format": ((str,), False),
    "stream_format": ((str,), False),
    "stream": ((bool,), False),
    "speed": ((int, float), False),
    "seed": ((int,), False),
    "sample_rate": ((int,), False),  # vLLM-Omni's: the rate of the returned audio (resampled here)
}
INT64 = (-(2**63), 2**63)  # vLLM-Omni's bound of a seed (ge=-2**63, le=2**63-1)
# vLLM-Omni's speech request fields this server accepts and does not act on (its Qwen3-TTS extensions:
# voice cloning, codec chunking, token budget), type-checked as vLLM-Omni's pydantic model does
# (vllm_omni/entrypoints/openai/protocol/audio.py, OpenAICreateSpeechRequest).
VLLM_OMNI_IGNORED: dict[str, tuple[type, ...]] = {
    "task_type": (str,),
    "ref_audio": (str, list),  # one reference, or vLLM-Omni's list of them
    "ref_text": (str,),
    "x_vector_only_mode": (bool,),
    "speaker_embedding": (list,),  # a vector, or vLLM-Omni's list of vectors
    "max_new_tokens": (int,),
    "initial_codec_chunk_frames": (int,),
}
TASK_TYPES = ("CustomVoice", "VoiceDesign", "Base")
# Any other field is dropped, as vLLM-Omni drops it: its request model is a plain pydantic BaseModel, whose
# default (extra="ignore") discards unknown keys without an error (e.g. the chat API's "stream_options" or
# vLLM's "ignore_eos" that ``vllm bench serve`` may merge in). The server logs each such field once.


def is_openai_request(body: Any) -> bool:
    """OpenAI's speech request names its text "input"; this project's own names it "text". Anything that
    is not recognisably the own protocol (a non-object, {}, a body without "text") is answered as OpenAI's."""
    return not (isinstance(body, dict) and "text" in body and "input" not in body)


def ignored_fields(body: dict) -> list[str]:
    """The fields of a valid request this server accepted without acting on them (vLLM-Omni's and unknown ones)."""
    return [name for name in body if name not in _FIELDS]


def _check_type(name: str, value: Any, types: tuple[type, ...]) -> None:
    if not isinstance(value, types) or (bool not in types and isinstance(value, bool)):
        names = " or ".join("object" if t is dict else t.__name__ for t in types)
        raise ValueError(f"{name}: expected {names}, got {type(value).__name__}")


def _finite_vector(value: Any) -> bool:
    return (isinstance(value, list) and len(value) <= MAX_EMBEDDING_DIM
            and all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in value))


MAX_EMBEDDING_DIM = 8192  # vLLM-Omni's max_length of speaker_embedding


def _check_vllm_omni_fields(body: dict) -> None:
    for name, types in VLLM_OMNI_IGNORED.items():
        if body.get(name) is not None:
            _check_type(name, body[name], types)
    task = body.get("task_type")
    if task is not None and task not in TASK_TYPES:
        raise ValueError(f"task_type: {str(task)[:40]!r} is not one of {', '.join(TASK_TYPES)}")
    for name in ("max_new_tokens", "initial_codec_chunk_frames"):
        if body.get(name) is not None and body[name] < (1 if name == "max_new_tokens" else 0):
            raise ValueError(f"{name}: must be >= {1 if name == 'max_new_tokens' else 0}, got {body[name]}")
    ref_audio = body.get("ref_audio")
    if isinstance(ref_audio, list) and (not ref_audio or not all(isinstance(x, str) for x in ref_audio)):
        raise ValueError("ref_audio: a list of references must hold one or more strings")
    embedding = body.get("speaker_embedding")
    if embedding is not None:
        if embedding and isinstance(embedding[0], list):  # vLLM-Omni's nested form: one vector per reference
            if len(embedding) > MAX_EMBEDDING_DIM or not all(v and _finite_vector(v) for v in embedding):
                raise ValueError(f"speaker_embedding: expected at most {MAX_EMBEDDING_DIM} non-empty vectors of "
                                 f"at most {MAX_EMBEDDING_DIM} finite numbers, flat and nested not mixed")
        elif not _finite_vector(embedding):
            raise ValueError(f"speaker_embedding: expected at most {MAX_EMBEDDING_DIM} finite numbers "
                             "(or a list of such vectors)")
        if isinstance(ref_audio, str):  # as vLLM-Omni: a list of references may come with embeddings
            raise ValueError("speaker_embedding: and ref_audio are mutually exclusive")


def _voice(body: dict) -> str | None:
    """"voice" wins over vLLM-Omni's alias "speaker"; an object {"id": ...} (OpenAI's custom voice) names its id."""
    name = "voice" if body.get("voice") is not None else "speaker"
    voice = body.get(name)
    if isinstance(voice, dict):
        if not isinstance(voice.get("id"), str):
            raise ValueError(f"{name}: an object must name the voice as a string \"id\"")
        voice = voice["id"]
    return voice


def validate_openai_request(body: Any, max_chars: int) -> tuple[dict, dict]:
    """-> (synthesizer request {text, voice, language, instruct, seed}, answer shape {format, stream_format,
    streamed, sample_rate, speed}); ValueError("<field>: <why>") naming the field ("body" when it is not a
    JSON object). ``streamed``: False when the request says ``"stream": false`` and names no stream_format
    (vLLM-Omni's rule: an explicit stream_format streams); ``sample_rate`` None keeps the model's rate."""
    if not isinstance(body, dict):
        raise ValueError(f"body: expected a JSON object, got {'null' if body is None else type(body).__name__}")
    for name, (types, required) in _FIELDS.items():
        value = body.get(name)
        if value is None:
            if required:
                raise ValueError(f"{name}: required")
            continue
        _check_type(name, value, types)
    _check_vllm_omni_fields(body)
    text = body["input"]
    if not text.strip():
        raise ValueError("input: must not be empty")
    if len(text) > max_chars:
        raise ValueError(f"input: longer than {max_chars} characters")
    fmt = body.get("response_format") or "wav"  # vLLM-Omni's default (OpenAI's mp3 needs a codec)
    if fmt not in RESPONSE_FORMATS:
        raise ValueError(f"response_format: {fmt!r} is not served here; use one of {', '.join(RESPONSE_FORMATS)}")
    streamed = body.get("stream_format") is not None or body.get("stream") is not False
    stream_format = body.get("stream_format") or "audio"
    if stream_format not in STREAM_FORMATS:
        raise ValueError(f"stream_format: {stream_format!r}; use one of {', '.join(STREAM_FORMATS)}")
    if stream_format == "sse" and fmt != "pcm":
        raise ValueError("stream_format: sse carries pcm deltas here; set response_format to pcm")
    speed = 1.0 if body.get("speed") is None else body["speed"]
    if not MIN_SPEED <= speed <= MAX_SPEED:  # also NaN
        raise ValueError(f"speed: must be in {MIN_SPEED}-{MAX_SPEED}, got {speed!r}")
    seed = body.get("seed")
    if seed is not None and not INT64[0] <= seed < INT64[1]:
        raise ValueError("seed: must be in [-2**63, 2**63)")
    rate = body.get("sample_rate")
    if rate is not None and not 0 < rate <= MAX_RATE:
        raise ValueError(f"sample_rate: must be in 1-{MAX_RATE}, got {rate}")
    request = {"text": text}
    voice = _voice(body)
    if voice is not None:
        request["voice"] = voice
    for src, dst in (("language", "language"), ("instructions", "instruct"), ("seed", "seed")):
        if body.get(src) is not None:
            request[dst] = body[src]
    return request, {"format": fmt, "stream_format": stream_format, "streamed": streamed, "sample_rate": rate,
                     "speed": float(speed)}


# status -> OpenAI's error "type" (https://platform.openai.com/docs/guides/error-codes)
_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "invalid_request_error", 405: "invalid_request_error", 413: "invalid_request_error",
                415: "invalid_request_error", 422: "invalid_request_error", 429: "rate_limit_error"}


def error_body(status: int, message: str, param: str | None = None, code: str | None = None) -> dict:
    """OpenAI's error object: {"error": {"message", "type", "param", "code"}} (the SDK raises it as
    BadRequestError, NotFoundError, ... with this message)."""
    kind = _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def model_card(model_id: str, created: int) -> dict:
    """One entry of GET /v1/models, and the answer of GET /v1/models/{id}."""
    return {"id": model_id, "object": "model", "created": created, "owned_by": "pytest-s2st"}


def sse(payload: dict) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def delta_event(pcm: bytes, sample_rate: int) -> bytes:
    return sse({"type": DELTA, "audio": base64.b64encode(pcm).decode("ascii"), "sample_rate": sample_rate})


def done_event(samples: int, input_characters: int) -> bytes:
    """OpenAI's done event with its "usage" object. This server counts no tokens: the token counts are null
    (unknown, not 0), and what it did count is beside them (docs/service.md, the table of differences)."""
    return sse({"type": DONE, "usage": {"input_tokens": None, "output_tokens": None, "total_tokens": None,
                                        "input_characters": input_characters, "output_samples": samples},
                "samples": samples})
