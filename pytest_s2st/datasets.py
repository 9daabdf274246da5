"""Benchmark datasets: the upstream fairseq npy and raw (wav2vec2 tsv) formats, random
generation, subsets and stats (upstream ``data_utils.py``).

A sample is ``{"id": ..., "net_input": {"src_tokens": array|tensor, "src_lengths": array|tensor}}``.
Upstream files hold torch tensors; what this module creates holds numpy arrays (torch-free).
Reading an npy dataset never executes pickled code: object arrays go through a restricted
unpickler that only rebuilds containers, numbers, strings, numpy arrays and torch tensors.
"""
from __future__ import annotations

import io
import os
import pickle
import random
import re
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .errors import S2STError

DATASET_KINDS = ("npy", "raw", "text")

# ---------------------------------------------------------------- safe npy reading

_NUMPY_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"): lambda: _np_core().multiarray._reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): lambda: _np_core().multiarray._reconstruct,
    ("numpy.core.multiarray", "scalar"): lambda: _np_core().multiarray.scalar,
    ("numpy._core.multiarray", "scalar"): lambda: _np_core().multiarray.scalar,
    ("numpy.core.numeric", "_frombuffer"): lambda: _np_core().numeric._frombuffer,  # pickle protocol 5
    ("numpy._core.numeric", "_frombuffer"): lambda: _np_core().numeric._frombuffer,
    ("numpy", "ndarray"): lambda: np.ndarray,
    ("numpy", "dtype"): lambda: np.dtype,
}

_BUILTIN_GLOBALS: dict[tuple[str, str], Callable[[], Any]] = {
    ("collections", "OrderedDict"): lambda: __import__("collections").OrderedDict,
    ("builtins", "set"): lambda: set,
    ("builtins", "frozenset"): lambda: frozenset,
    ("builtins", "complex"): lambda: complex,
    ("builtins", "bytearray"): lambda: bytearray,
    ("_codecs", "encode"): lambda: __import__("_codecs").encode,  # bytes in protocol-2 pickles
}

# What pickle.dumps(torch tensor) needs; everything here only rebuilds tensor data.
_TORCH_REBUILDERS = {"_rebuild_tensor", "_rebuild_tensor_v2", "_rebuild_tensor_v3", "_rebuild_parameter"}

_REFUSED = "only plain containers, numbers, strings, numpy arrays and torch tensors are allowed"


def _np_core():
    try:
        import numpy._core as core  # numpy >= 2
    except ImportError:  # pragma: no cover - numpy 1.x
        import numpy.core as core
    return core


def _load_storage_from_bytes(b: bytes):
    # Replaces torch.storage._load_from_bytes, which calls torch.load(weights_only=False).
    import torch

    try:
        return torch.load(io.BytesIO(b), weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as e:  # weights_only refused a global inside the storage bytes
        m = re.search(r"GLOBAL (\S+)", str(e))
        raise _Refused(m.group(1) if m else "a global", " inside a torch storage") from None


def _torch_global(module: str, name: str):
    try:
        import torch
    except ImportError:
        raise S2STError("holds torch tensors; install torch to read it") from None
    if module == "torch._utils" and name in _TORCH_REBUILDERS:
        return getattr(torch._utils, name)
    if module == "torch.storage" and name == "_load_from_bytes":
        return _load_storage_from_bytes
    if module == "torch" and name == "Size":
        return torch.Size
    if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
        return getattr(torch, name)
    return None


class _RestrictedUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        key = (module, name)
        if key in _NUMPY_GLOBALS:
            return _NUMPY_GLOBALS[key]()
        if key in _BUILTIN_GLOBALS:
            return _BUILTIN_GLOBALS[key]()
        if module == "torch" or module.startswith("torch."):
            found = _torch_global(module, name)
            if found is not None:
                return found
        raise _Refused(f"{module}.{name}")

    def persistent_load(self, pid):
        raise _Refused(f"persistent id {pid!r}")


class _Refused(Exception):
    def __init__(self, name: str, where: str = ""):
        super().__init__(name, where)
        self.name, self.where = name, where


def _read_npy(path: Path) -> Any:
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        raise S2STError(f"{path}: dataset file not found") from None
    except OSError as e:
        raise S2STError(f"{path}: cannot read dataset file: {e}") from None
    with f:
        try:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
            elif version == (3, 0):  # utf-8 header: no public reader; numpy 2 keeps it in _format_impl
                impl = getattr(np.lib, "_format_impl", np.lib.format)
                shape, fortran, dtype = impl._read_array_header(f, version)
            else:
                raise ValueError(f"unsupported .npy format version {version}")
        except (ValueError, OSError, SyntaxError) as e:
            raise S2STError(f"{path}: not a .npy file: {' '.join(str(e).split())}") from None
        if not dtype.hasobject:
            return np.load(path, allow_pickle=False)
        try:
            array = _RestrictedUnpickler(f).load()
        except _Refused as e:
            raise S2STError(f"{path}: refused to unpickle {e.name!r}{e.where}: {_REFUSED}") from None
        except S2STError as e:
            raise S2STError(f"{path}: {e}") from None
        except Exception as e:  # corrupt or truncated pickle stream
            reason = " ".join(str(e).split())[:200]
            raise S2STError(f"{path}: cannot unpickle npy contents: {type(e).__name__}: {reason}") from None
    if not isinstance(array, np.ndarray) or array.shape != tuple(shape):
        raise S2STError(f"{path}: npy contents do not match their header (shape {tuple(shape)})")
    return array


# ---------------------------------------------------------------- structure checks


def _check_size(size: int | None, path: Path) -> None:
    if size is None:
        return
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size <= 0:
        raise S2STError(f"{path}: dataset_size must be a positive integer, got {size!r}")


def _as_sample_list(data: Any, path: Path) -> list:
    if isinstance(data, np.ndarray):
        if data.dtype.hasobject and data.ndim == 0:
            data = data.item()
        elif data.dtype.hasobject and data.ndim == 1:
            return list(data)
        else:
            raise S2STError(
                f"{path}: expected a list of samples, got a {data.dtype} array of shape {data.shape}"
            )
    if isinstance(data, (list, tuple)):
        return list(data)
    raise S2STError(f"{path}: expected a list of samples, got {type(data).__name__}")


def _check_samples(samples: list, path: Path) -> None:
    for i, s in enumerate(samples):
        if not isinstance(s, dict):
            raise S2STError(f"{path}: sample {i} is a {type(s).__name__}, not a dict")
        if "id" not in s:
            raise S2STError(f"{path}: sample {i} has no id")
        net_input = s.get("net_input")
        if not isinstance(net_input, dict):
            what = "no net_input" if net_input is None else f"a net_input that is a {type(net_input).__name__}"
            raise S2STError(f"{path}: sample {i} has {what}")
        for key in ("src_tokens", "src_lengths"):
            if key not in net_input:
                raise S2STError(f"{path}: sample {i} has no net_input.{key}")
            if not hasattr(net_input[key], "shape"):
                raise S2STError(
                    f"{path}: sample {i} net_input.{key} is a {type(net_input[key]).__name__}, "
                    "expected a numpy array or torch tensor"
                )


def load_npy_dataset(path: str | os.PathLike, size: int | None = None) -> list[dict]:
    """Upstream npy dataset (np.save of a list of samples), read without running pickled code.

    ``size`` keeps the first N samples (more than there are: all); only those are checked.
    """
    path = Path(path)
    _check_size(size, path)
    samples = _as_sample_list(_read_npy(path), path)
    if not samples:
        raise S2STError(f"{path}: dataset is empty")
    if size is not None:
        samples = samples[: int(size)]
    _check_samples(samples, path)
    return samples


# ---------------------------------------------------------------- raw (tsv) datasets


def load_raw_dataset(path: str | os.PathLike, size: int | None = None, sample_rate: int = 16000) -> list[dict]:
    """wav2vec2-style tsv manifest: first line the audio root, then ``relative/path.wav<TAB>frames``.

    A relative root is taken relative to the tsv's folder. Audio is read with soundfile as
    float32; stereo is averaged to mono. A file whose rate differs from ``sample_rate`` is
    refused rather than resampled, so numbers are never silently computed on resampled audio.
    Returns torch-free samples: src_tokens float32 (1, T), src_lengths np.array([T]).
    """
    path = Path(path)
    _check_size(size, path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise S2STError(f"{path}: dataset manifest not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise S2STError(f"{path}: cannot read dataset manifest: {e}") from None
    lines = text.splitlines()
    if not lines or not lines[0].strip():
        raise S2STError(f"{path}:1: first line must be the audio root directory")
    root = path.parent / os.path.expanduser(lines[0].strip())
    entries = [(n, line.split("\t")[0].strip()) for n, line in enumerate(lines[1:], start=2) if line.strip()]
    if not entries:
        raise S2STError(f"{path}: dataset is empty (no audio lines after the root)")
    if size is not None:
        entries = entries[: int(size)]
    try:
        import soundfile as sf
    except ImportError:
        raise S2STError(f"{path}: reading raw datasets needs soundfile (pip install soundfile)") from None

    samples = []
    for i, (lineno, rel) in enumerate(entries):
        wav_path = root / rel
        if not wav_path.is_file():
            raise S2STError(f"{path}:{lineno}: audio file not found: {wav_path}")
        try:
            wav, sr = sf.read(str(wav_path), dtype="float32")
        except Exception as e:  # soundfile raises LibsndfileError/RuntimeError for bad files
            raise S2STError(f"{path}:{lineno}: cannot read audio {wav_path}: {' '.join(str(e).split())}") from None
        if sr != sample_rate:
            raise S2STError(
                f"{path}:{lineno}: {wav_path} is sampled at {sr} Hz, expected {sample_rate} Hz (not resampled)"
            )
        if wav.ndim == 2:
            wav = wav.mean(-1)
        wav = np.ascontiguousarray(wav, dtype=np.float32).reshape(1, -1)
        samples.append({"id": i, "net_input": {"src_tokens": wav, "src_lengths": np.array([wav.shape[1]])}})
    return samples


def load_dataset(path: str | os.PathLike, kind: str = "npy", size: int | None = None, sample_rate: int = 16000) -> list[dict]:
    """Dispatch on dataset_type: 'npy', 'raw', or 'text' (jsonl of {id, text, language, voice, seed})."""
    if kind == "npy":
        return load_npy_dataset(path, size)
    if kind == "raw":
        return load_raw_dataset(path, size, sample_rate)
    if kind == "text":
        from .service.workload import load_workload  # the same validated format as service workloads

        _check_size(size, Path(path))
        items = load_workload(path)
        return items[:size] if size else items
    raise S2STError(f"unknown dataset_type {kind!r} for {path}; known: {', '.join(DATASET_KINDS)}")


# ---------------------------------------------------------------- writing, generation, subsets


def save_npy_dataset(samples: list[dict], path: str | os.PathLike) -> Path:
    """np.save of an object array of samples (the upstream format). Returns the written path."""
    path = Path(path)
    if path.suffix != ".npy":  # np.save would append it
        path = path.with_name(path.name + ".npy")
    array = np.empty(len(samples), dtype=object)
    array[:] = samples
    np.save(path, array, allow_pickle=True)
    return path


def generate_random_dataset(
    n: int, feat_dim: int = 80, min_len: int = 50, max_len: int = 200, seed: int = 1
) -> list[dict]:
    """Random filterbank-like samples as upstream generate_random_data_sample (B = 1):
    src_tokens float32 (1, T, feat_dim), src_lengths np.array([T]), T in [min_len, max_len]."""
    if n <= 0 or feat_dim <= 0 or min_len <= 0 or max_len < min_len:
        raise S2STError(
            f"generate_random_dataset: need n > 0, feat_dim > 0, 0 < min_len <= max_len; "
            f"got n={n}, feat_dim={feat_dim}, min_len={min_len}, max_len={max_len}"
        )
    rng = np.random.default_rng(seed)
    samples = []
    for i in range(n):
        t = int(rng.integers(min_len, max_len + 1))
        tokens = rng.standard_normal((1, t, feat_dim), dtype=np.float32)
        samples.append({"id": i, "net_input": {"src_tokens": tokens, "src_lengths": np.array([t])}})
    return samples


def _length(sample: dict) -> int:
    return int(np.asarray(sample["net_input"]["src_lengths"]).reshape(-1)[0])


def dataset_stats(samples: list[dict]) -> dict[str, Any]:
    """{"n", "max_len", "min_len", "avg_len"} from src_lengths (upstream get_dataset_stats)."""
    if not samples:
        raise S2STError("dataset_stats: dataset is empty")
    lengths = [_length(s) for s in samples]
    return {"n": len(lengths), "max_len": max(lengths), "min_len": min(lengths), "avg_len": sum(lengths) / len(lengths)}


def _id_matches(sample_id: Any, ref_ids: set) -> bool:
    # upstream load_dataset_task also matches ids with a 5-char split prefix ("test_", "dev_x")
    if sample_id in ref_ids:
        return True
    return isinstance(sample_id, str) and (sample_id[5:] in ref_ids or f"dev_{sample_id}" in ref_ids)


def make_subsets(samples: list[dict], n: int = 500, seed: int = 1, ref_ids: set | None = None) -> dict[str, list]:
    """Upstream data_utils subsets: {"random", "short", "long"}, n samples each (fewer if the
    dataset is smaller). Unlike upstream, "random" draws without replacement (no duplicates).
    ``ref_ids`` first keeps only samples whose id is in it (upstream --ref-dataset)."""
    if n <= 0:
        raise S2STError(f"make_subsets: n must be positive, got {n}")
    if ref_ids is not None:
        samples = [s for s in samples if _id_matches(s["id"], ref_ids)]
    k = min(n, len(samples))
    by_len = sorted(samples, key=_length)  # stable: ties keep dataset order
    return {
        "random": random.Random(seed).sample(samples, k),
        "short": by_len[:k],
        "long": sorted(samples, key=_length, reverse=True)[:k],
    }
