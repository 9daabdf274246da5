"""A streaming band-limited resampler for the reference server's ``sample_rate`` and ``speed`` (numpy only).

Output sample m sits at input position m * step (step = input samples per output sample, a Fraction), and
is the input convolved with a Kaiser-windowed sinc whose cutoff is the lower of the two Nyquist rates
(so downsampling does not alias). Input before the first sample and after the last counts as silence.
The state is the few input samples the next output still needs, so feeding a waveform in pieces gives
exactly what feeding it whole gives (tests/test_service_resample.py), and ``--stream`` can resample chunk
by chunk. The output of n input samples has ceil(n / step) samples.

``speed`` is applied as a change of playback rate (the input is read as if recorded at rate x speed):
the duration is divided by ``speed`` and the pitch multiplied by it, like a tape played faster. This is
not vLLM-Omni's pitch-preserving ``librosa.effects.time_stretch``; docs/server.md lists the difference.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

HALF_WIDTH = 16  # zero crossings of the sinc on each side (at the output's cutoff)
BETA = 8.6  # Kaiser window shape: about -80 dB side lobes
MAX_BLOCK = 1 << 20  # at most this many taps are held in memory at once
MIN_SPEED, MAX_SPEED = 0.25, 4.0  # OpenAI's and vLLM-Omni's range


def speed_fraction(speed: float) -> Fraction:
    """A speed as an exact small fraction (1.1 -> 11/10), so the output length is exact."""
    return Fraction(speed).limit_denominator(1000)


class Resampler:
    """Feed float waveform pieces, get resampled float pieces; ``flush`` at the end."""

    def __init__(self, in_rate: int, out_rate: int, speed: float = 1.0) -> None:
        step = Fraction(in_rate) * speed_fraction(speed) / out_rate
        self.p, self.q = step.numerator, step.denominator
        self.identity = self.p == self.q
        self.fc = min(1.0, self.q / self.p)  # cutoff, relative to the input's Nyquist rate
        self.w = math.ceil(HALF_WIDTH / self.fc)  # taps on each side, in input samples
        self.buf = np.zeros(0, np.float64)
        self.start = 0  # absolute index of buf[0]
        self.n_in = 0
        self.m = 0  # the next output sample's index
        # the kernel depends only on the output's phase (q of them): tabulated when the table is small
        offsets = np.arange(-self.w + 1, self.w + 1, dtype=np.int64)
        self._table = (self._kernel(np.arange(self.q) / self.q, offsets)
                       if not self.identity and self.q * len(offsets) <= MAX_BLOCK else None)

    def _kernel(self, frac: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        d = frac[:, None] - offsets[None, :]  # the output's position minus the input sample's index
        x = np.clip(d / self.w, -1.0, 1.0)
        return self.fc * np.sinc(self.fc * d) * np.i0(BETA * np.sqrt(1.0 - x * x)) / np.i0(BETA)

    def _center(self, m: int) -> int:
        return m * self.p // self.q

    def _outputs(self, end: int) -> np.ndarray:
        """Outputs self.m .. end-1 from the buffer (input outside it counts as 0)."""
        offsets = np.arange(-self.w + 1, self.w + 1, dtype=np.int64)
        block = max(1, MAX_BLOCK // len(offsets))
        parts = []
        for lo in range(self.m, end, block):
            ms = np.arange(lo, min(end, lo + block), dtype=np.int64)
            num = ms * self.p  # exact: at most ~1e7 outputs x p < 2**63
            centers = num // self.q
            phase = num - centers * self.q
            idx = centers[:, None] + offsets[None, :]
            kernel = self._table[phase] if self._table is not None else self._kernel(phase / self.q, offsets)
            rel = idx - self.start
            inside = (idx < self.n_in) & (rel >= 0) & (rel < len(self.buf))
            taps = np.where(inside, self.buf[np.clip(rel, 0, max(0, len(self.buf) - 1))] if len(self.buf) else 0.0, 0.0)
            parts.append((taps * kernel).sum(axis=1))
        self.m = end
        return np.concatenate(parts) if parts else np.zeros(0, np.float64)

    def _trim(self) -> None:
        keep = self._center(self.m) - self.w + 1  # the first input sample the next output needs
        drop = min(max(0, keep - self.start), len(self.buf))
        if drop:
            self.buf = self.buf[drop:]
            self.start += drop

    def feed(self, piece: np.ndarray) -> np.ndarray:
        piece = np.asarray(piece, dtype=np.float64).ravel()
        if self.identity:
            self.n_in += len(piece)
            return piece.astype(np.float32)
        self.buf = np.concatenate([self.buf, piece])
        self.n_in += len(piece)
        # every output whose last tap (center + w) is an input sample already fed
        end = max(self.m, -(-(self.n_in - self.w) * self.q // self.p))
        out = self._outputs(end)
        self._trim()
        return out.astype(np.float32)

    def flush(self) -> np.ndarray:
        if self.identity:
            return np.zeros(0, np.float32)
        total = -(-self.n_in * self.q // self.p)  # ceil(n_in / step)
        out = self._outputs(max(self.m, total))
        self.buf = np.zeros(0, np.float64)
        return out.astype(np.float32)


def resample(wave: np.ndarray, in_rate: int, out_rate: int, speed: float = 1.0) -> np.ndarray:
    r = Resampler(in_rate, out_rate, speed)
    return np.concatenate([r.feed(wave), r.flush()])
