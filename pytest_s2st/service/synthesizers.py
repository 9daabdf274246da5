"""The synthesizers the reference server runs: a built pipeline, whole or streaming, or a demo tone (no model)."""
from __future__ import annotations

import math
import time
from typing import Any, Callable, Mapping

import numpy as np

from ..errors import S2STError
from .model_worker import StreamSynthesizer, Synthesizer
from .stream import no_stream_reason


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
            time.sleep(delay_s)
        text = request["text"]
        n = int(sample_rate * (0.1 + seconds_per_char * len(text)))
        voice_offset = sum((request.get("voice") or "").encode()) % 7
        freq = 220.0 + 20.0 * ((int(request.get("seed") or 0) + voice_offset) % 12)
        t = np.arange(n, dtype=np.float64) / sample_rate
        wave = 0.3 * np.sin(2.0 * math.pi * freq * t)
        return wave.astype(np.float32), sample_rate

    return synthesize
