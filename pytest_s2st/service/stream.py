"""Streaming options of the reference server (pytest-free, no torch): what ``--stream`` and a config's
``serve:`` section say, checked in one place.

    serve:
      stream: true                # decode in chunks and send each as soon as it is decoded
      chunk_frames: 12            # codec frames per decoded chunk (Qwen3-TTS: 12.5 frames per second)
      left_context_frames: 25     # frames of already-sent audio decoded again before each chunk (qwen-tts's own
                                  # chunked_decode uses 25); 0 decodes every chunk from scratch (audible seams)

A pipeline streams when it has ``stream(sample, emit)``; one that cannot (fairseq's TTS: the vocoder
runs once on the whole spectrogram the autoregressive decoder returns) is refused with one line.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping

from ..errors import S2STError

DEFAULT_CHUNK_FRAMES = 12
DEFAULT_LEFT_CONTEXT = 25  # qwen-tts's Qwen3TTSTokenizerV2Decoder.chunked_decode default
MAX_FRAMES = 100_000
SERVE_KEYS = ("stream", "chunk_frames", "left_context_frames")


@dataclass(frozen=True)
class StreamOptions:
    chunk_frames: int = DEFAULT_CHUNK_FRAMES
    left_context_frames: int = DEFAULT_LEFT_CONTEXT

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


def _frames(value: Any, minimum: int, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= MAX_FRAMES:
        raise S2STError(f"{where}: must be an integer in {minimum}-{MAX_FRAMES}, got {value!r}")
    return value


def parse_serve(section: Mapping[str, Any] | None, where: str) -> StreamOptions | None:
    """A config's ``serve:`` section -> StreamOptions when it streams, else None. ``where`` names the file."""
    if section is None:
        return None
    if not isinstance(section, Mapping):
        raise S2STError(f"{where} (serve): must be a mapping of {', '.join(SERVE_KEYS)}, got {type(section).__name__}")
    for key in section:
        if key not in SERVE_KEYS:
            raise S2STError(f"{where} (serve.{key}): unknown key; known: {', '.join(SERVE_KEYS)}")
    stream = section.get("stream", False)
    if not isinstance(stream, bool):
        raise S2STError(f"{where} (serve.stream): must be true or false, got {stream!r}")
    chunk = _frames(section.get("chunk_frames", DEFAULT_CHUNK_FRAMES), 1, f"{where} (serve.chunk_frames)")
    left = _frames(section.get("left_context_frames", DEFAULT_LEFT_CONTEXT), 0,
                   f"{where} (serve.left_context_frames)")
    return StreamOptions(chunk, left) if stream else None


def options(stream: bool, chunk_frames: int | None, left_context: int | None,
            section: Mapping[str, Any] | None, where: str) -> StreamOptions | None:
    """Command line over config: --stream (or serve.stream), --stream-chunk-frames, --stream-left-context."""
    from_config = parse_serve(section, where)
    if not stream and from_config is None:
        if chunk_frames is not None or left_context is not None:
            raise S2STError("--stream-chunk-frames / --stream-left-context need --stream (or serve.stream: true)")
        return None
    base = from_config or StreamOptions()
    chunk = base.chunk_frames if chunk_frames is None else _frames(chunk_frames, 1, "--stream-chunk-frames")
    left = base.left_context_frames if left_context is None else _frames(left_context, 0, "--stream-left-context")
    return StreamOptions(chunk, left)


def no_stream_reason(pipeline: Any) -> str | None:
    """None when the pipeline can stream, else the one line that says why not."""
    if callable(getattr(pipeline, "stream", None)):
        return None
    own = getattr(pipeline, "no_stream_reason", None)
    kind = getattr(pipeline, "model_type", type(pipeline).__name__)
    return own or f"model_type {kind} has no chunked decoder: it returns whole waveforms"
