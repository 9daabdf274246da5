"""OpenAI's speech API shape (POST /v1/audio/speech), as both sides of this project speak it.

Client side (``--s2st-protocol openai``): the request body built from a workload item, and the pieces
that read an answer: a bounded incremental WAV header parser and the SSE event reader of
``speech.audio.delta`` / ``speech.audio.done``. Server side (``s2st-serve``): the error shape and the
event bytes (the request's validation is request_model.py's, with pydantic, which only the server imports).
Nothing here does I/O; every parser raises ValueError with a one-line reason.

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
import os
import struct
from typing import Any

from ..inputs import loads_finite

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
    if data.get("sample_rate") is not None:  # the rate the answers are read at (wire.OpenAI.pcm_rate)
        check_rate(data["sample_rate"], "extra body")
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


# the SubFormat GUIDs of WAVE_FORMAT_EXTENSIBLE (ksmedia.h), as the fmt chunk holds them (little-endian fields)
KSDATAFORMAT_SUBTYPE_PCM = bytes.fromhex("0100000000001000800000aa00389b71")
KSDATAFORMAT_SUBTYPE_IEEE_FLOAT = bytes.fromhex("0300000000001000800000aa00389b71")


def _guid(raw: bytes) -> str:
    """A GUID as written (00000003-0000-0010-8000-00aa00389b71) from its 16 bytes."""
    a, b, c = struct.unpack_from("<IHH", raw)
    return f"{a:08x}-{b:04x}-{c:04x}-{raw[8:10].hex()}-{raw[10:16].hex()}"


class WavReader:
    """Incremental, bounded RIFF/WAVE reader: body pieces in, int16 mono PCM out.

    The header (every chunk before "data") may be at most ``max_header`` bytes; only 16-bit PCM mono
    (format 1, or WAVE_FORMAT_EXTENSIBLE whose SubFormat is PCM) is taken. A data size of 0 or 0xFFFFFFFF (a
    streamed WAV whose length was unknown) means "to the end of the body"; bytes after a sized data chunk (e.g. a
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
        if tag == 0xFFFE:  # WAVE_FORMAT_EXTENSIBLE: the samples' format is its SubFormat GUID, not the tag
            if len(data) < 40:
                raise ValueError(f"WAVE_FORMAT_EXTENSIBLE fmt chunk of {len(data)} bytes (40 hold its SubFormat)")
            sub = data[24:40]
            if sub != KSDATAFORMAT_SUBTYPE_PCM:
                name = "IEEE float" if sub == KSDATAFORMAT_SUBTYPE_IEEE_FLOAT else "not PCM"
                raise ValueError(f"WAVE_FORMAT_EXTENSIBLE SubFormat {_guid(sub)} ({name}); the client reads 16-bit "
                                 "PCM only")
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

# The request's validation (pydantic, vLLM-Omni's declarations): request_model.py, imported by the server only.


def is_openai_request(body: Any) -> bool:
    """OpenAI's speech request names its text "input"; this project's own names it "text". Anything that
    is not recognisably the own protocol (a non-object, {}, a body without "text") is answered as OpenAI's."""
    return not (isinstance(body, dict) and "text" in body and "input" not in body)


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
    (unknown, not 0), and what it did count is beside them (docs/server.md, the table of differences)."""
    return sse({"type": DONE, "usage": {"input_tokens": None, "output_tokens": None, "total_tokens": None,
                                        "input_characters": input_characters, "output_samples": samples},
                "samples": samples})
