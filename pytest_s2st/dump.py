"""Write speech outputs as WAV files, {prefix}_{i}_pred.wav, as upstream get_metrics.py names them."""
from __future__ import annotations

from math import gcd
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .errors import S2STError


def to_numpy(wave: Any) -> np.ndarray:
    if hasattr(wave, "detach"):  # a torch tensor; no torch import needed to convert it
        wave = wave.detach().cpu().numpy()
    return np.asarray(wave, dtype=np.float32).reshape(-1)


def resample(wav: np.ndarray, sr: int, target_sr: int) -> np.ndarray:
    """Polyphase resampling (scipy.signal.resample_poly), only when the rates differ."""
    if sr == target_sr:
        return wav
    try:
        from scipy.signal import resample_poly  # lazy: optional
    except ImportError as exc:
        raise S2STError(f"writing {sr} Hz audio at target_sr {target_sr} needs scipy: {exc}") from None
    g = gcd(int(sr), int(target_sr))
    return resample_poly(wav, target_sr // g, sr // g).astype(np.float32)


def dump_waveforms(outputs: Sequence[Any], dump_dir: str | Path, prefix: str,
                   target_sr: int | None = None) -> list[Path]:
    """Each {"waveform", "sample_rate"} output -> dump_dir/{prefix}_{i}_pred.wav at target_sr (default: its own
    rate)."""
    import soundfile as sf  # lazy: heavy

    dump_dir = Path(dump_dir)
    dump_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for i, out in enumerate(outputs):
        if not isinstance(out, dict) or "waveform" not in out:
            raise S2STError(f"output {i} is not a waveform; only speech outputs can be dumped")
        rate = int(out.get("sample_rate") or target_sr or 16000)
        target = int(target_sr or rate)
        path = dump_dir / f"{prefix}_{i}_pred.wav"
        sf.write(str(path), resample(to_numpy(out["waveform"]), rate, target), target)
        written.append(path)
    return written
