"""Write speech outputs as WAV files ({prefix}_{i}_pred.wav, as upstream get_metrics.py does)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np


def to_numpy(wave: Any) -> np.ndarray:
    if hasattr(wave, "detach"):  # a torch tensor; no torch import needed to convert it
        wave = wave.detach().cpu().numpy()
    return np.asarray(wave, dtype=np.float32).reshape(-1)


def resample(wave: np.ndarray, rate: int, target: int) -> np.ndarray:
    """Linear-interpolation resampling: enough to listen to a dump, never used for a metric."""
    if rate == target or wave.size == 0:
        return wave
    n_out = int(round(wave.size * target / rate))
    return np.interp(np.arange(n_out) * (rate / target), np.arange(wave.size), wave).astype(np.float32)


def dump_outputs(outputs: Sequence[Any], dump_dir: str | Path, *, case_id: str, prefix: str = "",
                 target_sr: int | None = None) -> list[Path]:
    """Outputs that are speech ({"waveform", "sample_rate"}) -> WAVs under dump_dir/case_id; others skipped."""
    import soundfile as sf

    out_dir = Path(dump_dir) / case_id
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for i, output in enumerate(outputs):
        if not isinstance(output, dict) or "waveform" not in output:
            continue
        rate = int(output.get("sample_rate") or target_sr or 16000)
        target = int(target_sr or rate)
        wave = resample(to_numpy(output["waveform"]), rate, target)
        path = out_dir / f"{prefix}_{i}_pred.wav" if prefix else out_dir / f"{i}_pred.wav"
        sf.write(path, wave, target)
        written.append(path)
    return written
