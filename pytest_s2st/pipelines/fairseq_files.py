"""What a fairseq stage reads from disk, checked before fairseq sees it: its task's files, its checkpoint
(torch.load with weights_only, one line when refused), and the fbank features of a raw waveform.

Imported lazily through the registry with the fairseq pipelines: torch is imported here at module level.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
from argparse import Namespace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import S2STError
from .fairseq_args import ROLE_TASK

def allow_fairseq_globals() -> None:
    """fairseq checkpoints pickle argparse.Namespace (cfg.model of legacy archs); allow-list exactly that."""
    torch.serialization.add_safe_globals([argparse.Namespace])


def _fbank_backend_problem() -> str:
    """Why neither PyKaldi nor torchaudio computed fbank: torchaudio missing, or installed but not loading
    (PyPI's torchaudio is a CUDA build whose compiled libraries fail beside CPU torch)."""
    if importlib.util.find_spec("torchaudio") is None:
        return "needs torchaudio or PyKaldi (pip install torchaudio)"
    try:
        importlib.import_module("torchaudio.compliance.kaldi")
    except Exception as exc:  # noqa: BLE001  (any load failure is the answer we report)
        return (f"needs torchaudio, which is installed but does not load ({one_line(exc)}): a build for another "
                "torch; `make install` removes its compiled libraries (docs/install.md)")
    return "needs torchaudio or PyKaldi: torchaudio loads, but fairseq's fbank returned nothing"


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def _load_failure(exc: BaseException) -> str:
    text = str(exc)
    if "Weights only load failed" in text:
        lines = [ln.strip() for ln in text.splitlines()[1:] if ln.strip()]
        refused = next((ln for ln in lines if "GLOBAL" in ln), None)
        if refused:  # a pickled global that is not allow-listed: refused, never run
            refused = refused.split(" Please use ")[0].replace("WeightsUnpickler error: ", "")
            return f"refused by torch.load(weights_only=True): {refused}"
        detail = next((ln for ln in lines if "Unsupported" in ln), lines[-1] if lines else "")
        return f"corrupt or truncated (weights-only unpickler: {detail})"
    return f"corrupt or truncated ({one_line(exc)})"


def _load_yaml_mapping(path: Path, where: str) -> dict:
    import yaml  # lazy: heavy

    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise S2STError(f"{where}: cannot read {path}: {one_line(exc)}") from None
    if not isinstance(data, dict):
        raise S2STError(f"{where}: {path} is empty or not a mapping")
    return data


def check_stage_files(role: str, ns: Namespace, where: str) -> None:
    """Refuse, with one line, what would otherwise end in a fairseq traceback."""
    task = getattr(ns, "task", None)
    if not isinstance(task, str) or not task.startswith(ROLE_TASK[role]):
        raise S2STError(f"{where}: task {task!r} cannot run the {role} stage (needs {ROLE_TASK[role]})")
    if role in ("s2s", "s2u") and bool(getattr(ns, "target_is_code", False)) != (role == "s2u"):
        need = "true" if role == "s2u" else "false"
        raise S2STError(f"{where}: target_is_code must be {need} for the {role} stage")
    path = getattr(ns, "path", None)
    if not path:
        raise S2STError(f"{where}: key 'path' (the checkpoint) is not set")
    if ":" in str(path):
        raise S2STError(f"{where}: path {path!r} names an ensemble; loading several models is not supported")
    if not Path(path).is_file():
        raise S2STError(f"{where}: checkpoint not found: {path}")
    data = getattr(ns, "data", None)
    if not data or not Path(data).is_dir():
        raise S2STError(f"{where}: data dir not found: {data!r} (key 'data')")
    data = Path(data)
    if role == "mt":
        langs = [getattr(ns, "source_lang", None), getattr(ns, "target_lang", None)]
        if None in langs and not list(data.glob("dict.*.txt")):
            raise S2STError(f"{where}: {data} has no dict.<lang>.txt")
        for lang in filter(None, langs):
            if not (data / f"dict.{lang}.txt").is_file():
                raise S2STError(f"{where}: dictionary not found: {data / f'dict.{lang}.txt'}")
        return
    cfg_path = data / (getattr(ns, "config_yaml", None) or "config.yaml")
    if not cfg_path.is_file():
        raise S2STError(f"{where}: data config not found: {cfg_path} (keys 'data', 'config_yaml')")
    cfg = _load_yaml_mapping(cfg_path, where)
    if role in ("s2t", "tts"):
        vocab = data / cfg.get("vocab_filename", "dict.txt")
        if not vocab.is_file():
            raise S2STError(f"{where}: dictionary not found: {vocab} (vocab_filename in {cfg_path})")
    if role in ("tts", "s2s") and getattr(ns, "vocoder", None) in ("hifigan", "code_hifigan"):
        voc = cfg.get("vocoder")
        if not isinstance(voc, dict):
            raise S2STError(f"{where}: vocoder {ns.vocoder!r} needs a 'vocoder' section in {cfg_path}")
        for key in ("checkpoint", "config"):
            f = Path(str(voc.get(key, "")))
            if not (f.is_file() or (data / f).is_file()):
                raise S2STError(f"{where}: vocoder {key} not found: {voc.get(key)!r} (vocoder.{key} in {cfg_path})")


def data_files(role: str, ns: Namespace, task: Any) -> list[Path]:
    """The data-dir files that shape the model's behaviour (data config, dictionaries): assets too."""
    data = Path(ns.data)
    if role == "mt":
        langs = (getattr(task.cfg, "source_lang", None), getattr(task.cfg, "target_lang", None))
        return [data / f"dict.{lang}.txt" for lang in langs if lang and (data / f"dict.{lang}.txt").is_file()]
    cfg_path = data / (getattr(ns, "config_yaml", None) or "config.yaml")
    files = [cfg_path]
    if role in ("s2t", "tts"):
        files.append(data / task.data_cfg.vocab_filename)
    return [f for f in files if f.is_file()]


def read_checkpoint(role: str, ns: Namespace, where: str, arg_overrides: dict | None) -> dict:
    """Load the checkpoint once (weights_only on) and check it was trained for this stage's task."""
    from fairseq import checkpoint_utils  # lazy: heavy

    allow_fairseq_globals()
    try:
        state = checkpoint_utils.load_checkpoint_to_cpu(ns.path, arg_overrides)
    except Exception as exc:  # truncated zip, not a torch file, a pickle global not allow-listed
        raise S2STError(f"{where}: cannot read checkpoint {ns.path}: {_load_failure(exc)}") from None
    if not isinstance(state, dict) or "model" not in state:
        raise S2STError(f"{where}: {ns.path} is not a fairseq checkpoint (no 'model' key)")
    cfg = state.get("cfg")  # a DictConfig after load_checkpoint_to_cpu; cfg.task a Namespace for legacy tasks
    task_cfg = cfg.get("task") if hasattr(cfg, "get") else None
    if task_cfg is None and state.get("args") is not None:
        task_cfg = state["args"]
    get = task_cfg.get if hasattr(task_cfg, "get") else (lambda k, default=None: getattr(task_cfg, k, default))
    ckpt_task = get("_name") or get("task") if task_cfg is not None else None
    if isinstance(ckpt_task, str) and not ckpt_task.startswith(ROLE_TASK[role]):
        raise S2STError(f"{where}: {ns.path} is a {ckpt_task!r} checkpoint, "
                        f"the {role} stage needs {ROLE_TASK[role]} (task {ns.task!r})")
    if role in ("s2s", "s2u") and task_cfg is not None and bool(get("target_is_code", False)) != (role == "s2u"):
        kind = "units" if get("target_is_code", False) else "spectrograms"
        raise S2STError(f"{where}: {ns.path} predicts {kind}; the {role} stage needs "
                        f"{'units' if role == 's2u' else 'spectrograms'}")
    return state


def librosa_compat() -> None:
    """fairseq 0.12 calls librosa.filters.mel positionally, which librosa >= 0.10 refuses; Griffin-Lim
    then fails. Re-bind fairseq's get_mel_filters to a wrapper that imports librosa only when called (as
    fairseq's own does: only Griffin-Lim builds mel filters, so no other config pays librosa's and numba's
    import) and calls it with keywords where librosa needs them (same filters)."""
    from fairseq.data.audio import audio_utils  # lazy: heavy
    from fairseq.models.text_to_speech import vocoder  # lazy: heavy

    original = audio_utils.get_mel_filters
    if getattr(original, "s2st_compat", False):
        return

    def get_mel_filters(sample_rate, n_fft, n_mels, f_min, f_max):
        try:
            import librosa  # lazy: optional
        except ImportError:  # fairseq's own ImportError ("Please install librosa") then names the fix
            return original(sample_rate, n_fft, n_mels, f_min, f_max)
        params = inspect.signature(librosa.filters.mel).parameters
        if all(p.kind != p.KEYWORD_ONLY for p in params.values()):
            return original(sample_rate, n_fft, n_mels, f_min, f_max)
        basis = librosa.filters.mel(sr=sample_rate, n_fft=n_fft, n_mels=n_mels, fmin=f_min, fmax=f_max)
        return torch.from_numpy(basis).float()

    get_mel_filters.s2st_compat = True
    audio_utils.get_mel_filters = vocoder.get_mel_filters = get_mel_filters


def waveform_features(data_cfg: Any, wav: Any, sample_rate: int, where: str) -> torch.Tensor:
    """A raw waveform -> what fairseq's SpeechToTextDataset makes of a .wav entry
    (get_features_or_waveform): the waveform itself when the data config sets use_audio_input,
    else get_fbank's path (the config's waveform transforms on 16-bit-scaled audio, Kaldi log-mel
    fbank through PyKaldi or torchaudio) and then the config's feature transforms. Returns [1, T, C]
    features (or a [1, N] waveform)."""
    from fairseq.data.audio import audio_utils  # lazy: heavy
    from fairseq.data.audio.feature_transforms import CompositeAudioFeatureTransform  # lazy: heavy
    from fairseq.data.audio.waveform_transforms import CompositeAudioWaveformTransform  # lazy: heavy

    wav = np.asarray(wav, dtype=np.float32).reshape(1, -1)
    if data_cfg.use_audio_input:
        if sample_rate != data_cfg.use_sample_rate:  # fairseq would resample with sox; we never resample silently
            raise S2STError(f"{where}: the model takes {data_cfg.use_sample_rate} Hz audio, the dataset is "
                            f"{sample_rate} Hz (set general.sample_rate or resample the dataset)")
        x = torch.from_numpy(wav[0].copy())
        if data_cfg.standardize_audio():
            x = torch.nn.functional.layer_norm(x, x.shape)
        return x.view(1, -1)
    n_bins = data_cfg.input_feat_per_channel
    wav = wav * 2 ** 15  # get_fbank reads with normalization=False: Kaldi fbank expects 16-bit sample values
    transforms = CompositeAudioWaveformTransform.from_config_dict(data_cfg.get_waveform_transforms("test", False))
    if transforms is not None:
        wav, sample_rate = transforms(wav, sample_rate)
    try:
        feats = audio_utils._get_kaldi_fbank(wav, sample_rate, n_bins)
        if feats is None:
            feats = audio_utils._get_torchaudio_fbank(wav, sample_rate, n_bins)
    except (OSError, RuntimeError) as exc:  # a torchaudio built for another torch raises OSError, not ImportError
        raise S2STError(f"{where}: computing the {n_bins}-dim fbank features the model takes from raw audio "
                        f"failed: {one_line(exc)}") from None
    if feats is None:
        raise S2STError(f"{where}: the model takes {n_bins}-dim log-mel fbank features; computing them from raw "
                        f"audio {_fbank_backend_problem()}, or use an npy feature dataset")
    transforms = CompositeAudioFeatureTransform.from_config_dict(data_cfg.get_feature_transforms("test", False))
    if transforms is not None:
        feats = transforms(feats)
    return torch.from_numpy(np.ascontiguousarray(feats, dtype=np.float32)).unsqueeze(0)
