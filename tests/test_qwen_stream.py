"""Streaming Qwen3-TTS on the tiny model: the same codes as the non-streamed call, decoded in chunks
with left context; the concatenated chunks against the non-streamed waveform of the same request and seed.

Stated bounds (int16 PCM, the server's conversion), measured on the tiny model:
- chunk 300 / left context 25 (qwen-tts's own chunked_decode): bit-equal;
- left context >= the decoder's attention window (72 frames; the tiny decoder has one layer) with 4-frame
  chunks: max |difference| <= 2 LSB (float rounding of other matmul shapes; measured 1);
- the default (12 frames, context 25): SNR >= 30 dB against the non-streamed audio (measured 46 dB);
- no left context: SNR < 10 dB (measured 1.5 dB): the metric can fail.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("qwen_tts")

from pytest_s2st.quality.verdict import SNR_CAP_DB, snr_db  # noqa: E402


def pcm16(wave: np.ndarray) -> np.ndarray:  # the server's to_pcm16
    return np.round(np.clip(wave.astype(np.float64), -1.0, 1.0) * 32767.0).astype(np.int16)


@pytest.fixture(scope="module")
def tiny():
    import torch

    from pytest_s2st.pipelines.qwen3tts import build
    from pytest_s2st.tiny.qwen_tiny import tiny_qwen3tts_dir

    torch.set_num_threads(1)
    pipeline = build([{"path": str(tiny_qwen3tts_dir()), "max_new_tokens": 40}], device="cpu",
                     config_path=Path("tiny.yaml"))
    sample = pipeline.prepare_sample({"id": "a", "text": "Hello world, this is a tiny test.", "language": "en",
                                      "seed": 3})
    reference = pipeline.stages[0].forward(sample)["waveform"]
    yield pipeline, sample, reference
    pipeline.close()


def streamed(pipeline, sample, chunk: int, left: int) -> tuple[list[np.ndarray], np.ndarray]:
    pieces: list[np.ndarray] = []
    out = pipeline.stream(sample, lambda wave, rate: pieces.append(wave), chunk, left)["waveform"]
    return pieces, out


def test_snr_against_hand_computed_truths():
    assert snr_db([3, 4], [3, 4]) == SNR_CAP_DB
    assert snr_db([1, 0, 0], [0, 0, 0]) == pytest.approx(0.0)
    assert snr_db([2, 2], [2, 1]) == pytest.approx(10 * np.log10(8 / 1))
    assert snr_db([1, 1], [1]) == pytest.approx(10 * np.log10(2 / 1))  # a missing sample is error
    assert snr_db([0, 0], [1, 1]) is None  # silent baseline: undefined, not 0


def test_chunked_like_the_package_is_bit_equal(tiny):
    pipeline, sample, reference = tiny
    pieces, out = streamed(pipeline, sample, 300, 25)
    assert np.array_equal(pcm16(np.concatenate(pieces)), pcm16(reference))
    assert np.array_equal(out, np.concatenate(pieces))  # what the stage returns is what was streamed


def test_small_chunks_with_the_full_window_of_context_are_within_2_lsb(tiny):
    pipeline, sample, reference = tiny
    pieces, _ = streamed(pipeline, sample, 4, 72)
    assert len(pieces) >= 8  # 40 frames at most, 4 per chunk: really streamed
    got = pcm16(np.concatenate(pieces)).astype(np.int64)
    assert got.shape == pcm16(reference).shape
    assert np.abs(got - pcm16(reference)).max() <= 2


def test_default_chunking_keeps_the_audio_and_no_context_does_not(tiny):
    pipeline, sample, reference = tiny
    good, _ = streamed(pipeline, sample, 12, 25)
    bad, _ = streamed(pipeline, sample, 12, 0)
    assert snr_db(pcm16(reference), pcm16(np.concatenate(good))) >= 30.0
    assert snr_db(pcm16(reference), pcm16(np.concatenate(bad))) < 10.0


def test_a_request_that_stops_early_still_ends_its_stream(tiny):
    """The first chunk comes after chunk_frames frames; the last, partial one from the final decode."""
    pipeline, sample, reference = tiny
    pieces, _ = streamed(pipeline, sample, 7, 25)
    frames = len(reference) // 1920
    assert [len(p) for p in pieces] == [7 * 1920] * (frames // 7) + ([frames % 7 * 1920] if frames % 7 else [])
