"""s2st-serve's OpenAI speech request (POST /v1/audio/speech): a declared pydantic model, then this server's limits.

``SpeechRequest`` declares vLLM-Omni 0.30's own request model field by field (vllm_omni/entrypoints/openai/
protocol/audio.py, ``OpenAICreateSpeechRequest``): the same types in pydantic's lax mode (``"speed": "1.5"``,
``"seed": "7"``, ``"stream": "true"`` are converted, as there), defaults, bounds, Literal choices, the
``voice``/``speaker`` alias, its validators, and pydantic's default ``extra="ignore"`` (unknown fields dropped).
tests/test_service_request_model.py validates the same bodies with vLLM-Omni's model (loaded by path from its
wheel) and compares. Where this differs from it, on purpose, is a row of docs/server.md's table:
- a validator's TypeError (``ref_audio: [1]``) is a 400 here; there pydantic does not catch it: a 500;
- lists fail at their first bad item (pydantic's fail_fast): the same accept/reject, but an 8 MiB list of bad
  numbers costs one error, not millions (vLLM-Omni's model: 77 s and 4.8 GB for 2 M bad entries, measured);
- its higgs_audio_v2 guard (rich-input keys refused when the model names higgs-audio-v2) is not copied.

``validate_openai_request`` then applies what this server serves (pcm/wav, sse with pcm, sample rates up to
384 kHz, at most 4096 characters, no forced aligner). Every refusal is a ``RequestError``: one line naming the
field. Server-only: the plugin never imports this module (pydantic is the ``service`` extra's).
"""
from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .openai_api import MAX_RATE
from .resample import MAX_SPEED, MIN_SPEED

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1  # vLLM-Omni's bounds of its int fields
MAX_EMBEDDING_DIM = 8192  # vLLM-Omni's max_length of speaker_embedding
RESPONSE_FORMATS = ("pcm", "wav")  # of vLLM-Omni's wav, pcm, flac, mp3, opus: the codec-free ones
STREAM_FORMATS = ("audio", "sse")

_Vector = Annotated[list[float], Field(fail_fast=True)]  # stop at the first bad number


class RequestError(ValueError):
    """A refused request: ``field`` (None for the body as a whole) and a one-line reason starting with it."""

    def __init__(self, field: str | None, message: str):
        super().__init__(message)
        self.field = field


class _FieldError(ValueError):
    """A model validator's refusal that names its field (pydantic gives such errors no location)."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


class SpeechRequest(BaseModel):
    """vLLM-Omni's OpenAICreateSpeechRequest, declared again (descriptions left out)."""

    model_config = ConfigDict(extra="ignore")  # pydantic's default, as vLLM-Omni's: unknown fields dropped

    input: str
    model: str | None = None
    voice: str | None = Field(default=None, validation_alias=AliasChoices("voice", "speaker"))
    instructions: str | None = None
    response_format: Literal["wav", "pcm", "flac", "mp3", "opus"] = "wav"
    sample_rate: Annotated[int, Field(gt=0)] | None = None
    speed: float | None = Field(default=1.0, ge=MIN_SPEED, le=MAX_SPEED)
    stream_format: Literal["sse", "audio"] | None = None
    stream: bool = False
    task_type: Literal["CustomVoice", "VoiceDesign", "Base"] | None = None
    language: str | None = None
    ref_audio: str | list[str] | None = None
    ref_text: str | None = None
    ref_audio_2: str | None = None
    ambient_sound: str | None = None
    duration_seconds: float | None = Field(default=None, ge=0.0)
    x_vector_only_mode: bool | None = None
    speaker_embedding: _Vector | Annotated[list[_Vector], Field(fail_fast=True)] | None = Field(
        default=None, max_length=MAX_EMBEDDING_DIM)
    max_new_tokens: int | None = Field(default=None, ge=1, le=INT64_MAX)
    seed: int | None = Field(default=None, ge=INT64_MIN, le=INT64_MAX)
    initial_codec_chunk_frames: int | None = Field(default=None, ge=0, le=INT64_MAX)
    non_streaming_mode: bool | None = None
    extra_params: dict[str, Any] | None = None
    word_timestamps: bool = False

    @field_validator("voice", mode="before")
    @classmethod
    def _voice_object(cls, voice: Any) -> Any:
        """OpenAI's custom voice object {"id": ...} names its id."""
        if isinstance(voice, dict):
            if "id" not in voice:
                raise ValueError("voice dict must contain 'id'")
            return voice["id"]
        return voice

    @field_validator("ref_audio", mode="before")
    @classmethod
    def _ref_audio(cls, value: Any) -> Any:
        # vLLM-Omni raises TypeError here (a 500 there); a ValueError is a 400
        if value is None or isinstance(value, str):
            return value
        if not isinstance(value, list):
            raise ValueError("'ref_audio' must be a string or list of strings")
        if not all(isinstance(item, str) for item in value):
            raise ValueError("'ref_audio' list entries must be strings")
        if not value:
            raise ValueError("'ref_audio' list cannot be empty")
        return value

    @field_validator("speaker_embedding")
    @classmethod
    def _finite_embedding(cls, value: Any) -> Any:
        if value and isinstance(value[0], list):
            if not all(value):
                raise ValueError("'speaker_embedding' nested vectors must be non-empty")
            numbers = (x for vector in value for x in vector)
        else:
            numbers = iter(value or ())
        if not all(math.isfinite(x) for x in numbers):
            raise ValueError("'speaker_embedding' values must be finite (no NaN or Inf)")
        return value

    @model_validator(mode="before")
    @classmethod
    def _references(cls, data: Any) -> Any:
        """Higgs Audio v3's ``references: [{"audio_path", "text"}]``, mapped onto ref_audio / ref_text."""
        if not isinstance(data, dict) or data.get("references") is None:
            return data
        data, refs = dict(data), data["references"]  # a copy: the caller's body keeps its fields
        if not isinstance(refs, list) or not refs:
            raise _FieldError("references", "'references' must be a non-empty array of {audio_path, text} objects")
        if len(refs) > 1:
            raise _FieldError("references", "'references' only supports a single reference; multi-shot voice "
                                            "clone is not supported")
        first = refs[0]
        if not isinstance(first, dict):
            raise _FieldError("references", "'references[0]' must be an object with 'audio_path' and optional 'text'")
        audio_path = first.get("audio_path")
        if not isinstance(audio_path, str) or not audio_path:
            raise _FieldError("references", "'references[0].audio_path' is required and must be a string "
                                            "(URL, data: URI, or file path)")
        if data.get("ref_audio") and data["ref_audio"] != audio_path:
            raise _FieldError("references", "'references' and 'ref_audio' are mutually exclusive")
        data["ref_audio"] = audio_path
        text = first.get("text")
        if isinstance(text, str) and text.strip():
            if data.get("ref_text") and data["ref_text"] != text:
                raise _FieldError("references", "'references[0].text' and 'ref_text' conflict; supply only one")
            data["ref_text"] = text
        data.pop("references")
        return data

    @model_validator(mode="after")
    def _embedding_or_reference(self) -> SpeechRequest:
        if self.speaker_embedding is not None and isinstance(self.ref_audio, str):
            raise _FieldError("speaker_embedding", "'speaker_embedding' and 'ref_audio' are mutually exclusive")
        return self

    @model_validator(mode="after")
    def _streamable_format(self) -> SpeechRequest:
        if self.stream_format == "audio" or self.stream or self.stream_format == "sse":  # vLLM-Omni's is_streaming()
            if self.response_format not in ("pcm", "wav"):
                raise _FieldError("response_format", "Streaming (stream=true, stream_format='audio', or "
                                                     "stream_format='sse') requires response_format='pcm' or 'wav'. "
                                                     f"Got response_format='{self.response_format}'.")
            if self.speed is None:
                self.speed = 1.0
        return self


# the fields this server acts on; every other one is accepted and ignored ("word_timestamps": true is refused)
ACTED_ON = frozenset({"input", "model", "voice", "speaker", "instructions", "language", "response_format",
                      "stream_format", "stream", "speed", "seed", "sample_rate", "word_timestamps"})
# vLLM-Omni's fields (and its aliases "speaker", "references"); any other name is unknown to it too
VLLM_OMNI_FIELDS = frozenset(SpeechRequest.model_fields) | {"speaker", "references"}


def ignored_fields(body: dict) -> list[str]:
    """The fields of a valid request this server accepted without acting on them (vLLM-Omni's and unknown ones)."""
    return [name for name in body if name not in ACTED_ON]


def _shown(value: Any) -> str:
    if value is None or isinstance(value, (bool, int, float, str)):
        text = repr(value)
        return text if len(text) <= 40 else text[:37] + "..."
    return "an object" if isinstance(value, dict) else f"a {type(value).__name__}"


def _one_line(exc: ValidationError) -> RequestError:
    """pydantic's errors -> one line: the first error's field, index and message, and the other fields named."""
    errors = exc.errors(include_url=False)
    fields: list[str] = []
    for err in errors:
        cause = (err.get("ctx") or {}).get("error")
        field = getattr(cause, "field", None) or (str(err["loc"][0]) if err["loc"] else "body")
        if field not in fields:
            fields.append(field)
    first = errors[0]
    cause = (first.get("ctx") or {}).get("error")
    if isinstance(cause, Exception):  # a validator's own words, without pydantic's "Value error, "
        message = str(cause)
    else:
        message = first["msg"]
        if first["type"] != "missing":
            message += f", got {_shown(first.get('input'))}"
    where = fields[0] + "".join(f"[{p}]" for p in first["loc"][1:] if isinstance(p, int))  # union tags left out
    others = f" (and {', '.join(fields[1:4])}{', ...' if len(fields) > 4 else ''})" if len(fields) > 1 else ""
    return RequestError(fields[0] if fields[0] != "body" else None, f"{where}: {message[:300]}{others}")


def parse_request(body: Any) -> SpeechRequest:
    """The body as vLLM-Omni's model reads it; RequestError naming the field otherwise."""
    if not isinstance(body, dict):
        raise RequestError(None, f"body: expected a JSON object, got {'null' if body is None else type(body).__name__}")
    try:
        return SpeechRequest.model_validate(body)
    except ValidationError as exc:
        raise _one_line(exc) from None
    except RecursionError:
        raise RequestError(None, "body: JSON nested too deeply") from None


def _refuse(field: str, why: str) -> RequestError:
    return RequestError(field, f"{field}: {why}")


def validate_openai_request(body: Any, max_chars: int) -> tuple[dict, dict]:
    """-> (synthesizer request {text, voice, language, instruct, seed}, answer shape {format, stream_format,
    streamed, sample_rate, speed}); RequestError naming the field. ``streamed``: False when the request says
    ``"stream": false`` (or 0, "false": pydantic's bool) and names no stream_format; ``sample_rate`` None keeps
    the model's rate."""
    req = parse_request(body)
    if not req.input.strip():  # vLLM-Omni's serving says "Input text cannot be empty"
        raise _refuse("input", "must not be empty")
    if len(req.input) > max_chars:
        raise _refuse("input", f"longer than {max_chars} characters")
    if req.response_format not in RESPONSE_FORMATS:
        raise _refuse("response_format", f"{req.response_format!r} is not served here; use one of "
                                         f"{', '.join(RESPONSE_FORMATS)}")
    stream_format = req.stream_format or "audio"
    if stream_format == "sse" and req.response_format != "pcm":
        raise _refuse("stream_format", "sse carries pcm deltas here; set response_format to pcm")
    if req.sample_rate is not None and req.sample_rate > MAX_RATE:
        raise _refuse("sample_rate", f"must be in 1-{MAX_RATE}, got {req.sample_rate}")
    if req.speaker_embedding and isinstance(req.speaker_embedding[0], list) and any(
            len(v) > MAX_EMBEDDING_DIM for v in req.speaker_embedding):
        raise _refuse("speaker_embedding", f"each vector holds at most {MAX_EMBEDDING_DIM} numbers here")
    if req.word_timestamps:  # as vLLM-Omni started without --forced-aligner answers it
        raise _refuse("word_timestamps", "true requires a forced aligner; this server has none")
    # OpenAI's default streams; an explicit "stream": false asks for one body; a stream_format always streams
    streamed = req.stream_format is not None or req.stream or "stream" not in req.model_fields_set
    request: dict[str, Any] = {"text": req.input}
    for src, dst in (("voice", "voice"), ("language", "language"), ("instructions", "instruct"), ("seed", "seed")):
        if getattr(req, src) is not None:
            request[dst] = getattr(req, src)
    return request, {"format": req.response_format, "stream_format": stream_format, "streamed": streamed,
                     "sample_rate": req.sample_rate, "speed": 1.0 if req.speed is None else req.speed}
