"""The reference server's resampler (``sample_rate``, ``speed``): chunk by chunk == whole at once, the
length ceil(n / step), a tone kept at its pitch (sample_rate) or moved by the speed; and the server's answer
under ``--stream`` equal, byte for byte, to the non-streamed server's for the same resampled request."""
from __future__ import annotations

import asyncio
import math
from fractions import Fraction

import aiohttp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_s2st.service.resample import Resampler, resample
from pytest_s2st.service.server import make_app, serve_app


def _tone(hz: float, rate: int, seconds: float = 0.5) -> np.ndarray:
    return (0.5 * np.sin(2 * np.pi * hz * np.arange(int(rate * seconds)) / rate)).astype(np.float32)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([(24000, 16000, 1.0), (24000, 48000, 1.0), (24000, 22050, 1.0), (16000, 24000, 1.5),
                        (24000, 24000, 0.25), (24000, 8000, 1.1), (24000, 24000, 1.0)]),
       st.lists(st.integers(0, 3000), max_size=12))
def test_pieces_give_what_the_whole_gives(rates, cuts):
    in_rate, out_rate, speed = rates
    wave = np.random.default_rng(len(cuts)).standard_normal(9000).astype(np.float32) * 0.1
    r = Resampler(in_rate, out_rate, speed)
    pieces, start = [], 0
    for cut in sorted(cuts):
        pieces.append(r.feed(wave[start:cut]))
        start = max(start, cut)
    pieces += [r.feed(wave[start:]), r.flush()]
    whole = resample(wave, in_rate, out_rate, speed)
    assert np.array_equal(np.concatenate(pieces), whole)
    step = Fraction(in_rate) * Fraction(speed).limit_denominator(1000) / out_rate
    assert len(whole) == math.ceil(len(wave) / step)


@pytest.mark.parametrize("out_rate, speed", [(16000, 1.0), (44100, 1.0), (8000, 1.0), (24000, 2.0), (24000, 0.5)])
def test_a_tone_keeps_its_pitch_or_moves_with_the_speed(out_rate, speed):
    out = resample(_tone(440.0, 24000), 24000, out_rate, speed)
    t = np.arange(len(out)) / out_rate
    want = 0.5 * np.sin(2 * np.pi * 440.0 * speed * t)
    middle = slice(200, len(out) - 200)  # the edges fade in from the silence outside
    assert np.abs(out[middle] - want[middle]).max() < 1e-3


def test_downsampling_does_not_alias():
    """A 10 kHz tone is above 16 kHz's Nyquist rate: filtered out, not folded to 6 kHz."""
    out = resample(_tone(10000.0, 24000), 24000, 16000)
    assert np.abs(out[200:-200]).max() < 1e-3


def test_streamed_and_whole_answers_are_the_same_bytes():
    """A streaming synthesizer emitting 7 uneven chunks vs a whole-waveform one of the same audio, both asked
    for sample_rate 16000 at speed 1.25: the same bytes (the resampler carries its state across chunks)."""
    wave = np.random.default_rng(1).standard_normal(24000).astype(np.float32) * 0.2
    cuts = [0, 1, 300, 2400, 2401, 9000, 17000, 24000]

    def whole(request):
        return wave, 24000

    def chunks(request, emit):
        for a, b in zip(cuts, cuts[1:]):
            emit(wave[a:b], 24000)

    async def ask(app):
        runner, port = await serve_app(app, shutdown_timeout=0.5)
        try:
            async with aiohttp.ClientSession() as session:
                body = {"input": "hi", "response_format": "pcm", "sample_rate": 16000, "speed": 1.25}
                async with session.post(f"http://127.0.0.1:{port}/v1/audio/speech", json=body) as r:
                    return r.status, r.headers["Content-Type"], await r.read()
        finally:
            await runner.cleanup()

    a = asyncio.run(ask(make_app(whole, identity={})))
    b = asyncio.run(ask(make_app(whole, identity={}, stream=chunks)))
    assert a[:2] == b[:2] == (200, "audio/pcm;rate=16000") and a[2] == b[2]
    assert len(a[2]) // 2 == -(-24000 * 16000 // 30000)  # ceil(n / step), step = 24000 x 1.25 / 16000
