"""Making benchmark datasets: writing the upstream npy format (reproducible bytes, torch tensors as upstream
writes them), random generation, stats and subsets (upstream ``data_utils.py``; what s2st-dataset makes).
Reading and checking them is datasets.py.
"""
from __future__ import annotations

import collections
import copyreg
import io
import os
import pickle
import random
import sys
from pathlib import Path
from typing import Any

import numpy as np

from .errors import S2STError


# ---------------------------------------------------------------- writing


class _StorageBytes:
    """A tensor's storage as torch.storage._load_from_bytes reads it back, in torch's zip format:
    pickling a storage the default way writes its memory address, so bytes would differ per run."""

    def __init__(self, t: Any) -> None:
        import torch  # lazy: heavy

        buf = io.BytesIO()
        storage = torch.storage.TypedStorage(wrap_storage=t.untyped_storage(), dtype=t.dtype, _internal=True)
        try:
            torch.save(storage, buf)
        except KeyError:  # uint16/32/64: no legacy storage type, so neither np.load nor we could read it
            raise S2STError(f"cannot write a {t.dtype} tensor in the upstream npy format") from None
        self.data = buf.getvalue()

    def __reduce__(self):
        import torch  # lazy: heavy

        return (torch.storage._load_from_bytes, (self.data,))


def _reduce_tensor(t: Any):
    import torch  # lazy: heavy

    t = t.detach().clone(memory_format=torch.contiguous_format)  # own storage, offset 0
    return (torch._utils._rebuild_tensor_v2,
            (_StorageBytes(t), 0, tuple(t.size()), t.stride(), False, collections.OrderedDict()))


def _with_torch_tensors(samples: list[dict]) -> list[dict]:
    try:
        import torch  # lazy: optional
    except ImportError:
        raise S2STError("writing torch tensors needs torch (pip install torch)") from None
    return [{**s, "net_input": {k: torch.tensor(v) if isinstance(v, np.ndarray) else v
                                for k, v in s["net_input"].items()}} for s in samples]


def save_npy_dataset(samples: list[dict], path: str | os.PathLike, *, torch_tensors: bool = False) -> Path:
    """np.save of an object array of samples (the upstream layout). Returns the written path.

    ``torch_tensors``: numpy arrays in net_input become torch tensors, as upstream data_utils
    writes them and get_metrics.py feeds them to models (``src_tokens.size()``). Tensors are
    pickled as torch pickles them, but reproducibly: the same samples always give the same bytes.
    Both np.load(allow_pickle=True) and load_npy_dataset read the file back.
    """
    path = Path(path)
    if path.suffix != ".npy":  # np.save would append it
        path = path.with_name(path.name + ".npy")
    if torch_tensors:
        samples = _with_torch_tensors(samples)
    array = np.empty(len(samples), dtype=object)
    for i, sample in enumerate(samples):  # one by one: a slice assignment would broadcast nested lists
        array[i] = sample
    with open(path, "wb") as f:
        try:
            np.lib.format.write_array_header_1_0(f, np.lib.format.header_data_from_array_1_0(array))
            pickler = pickle.Pickler(f, protocol=4)  # np.save's protocol
            torch = sys.modules.get("torch")
            if torch is not None:
                pickler.dispatch_table = {**copyreg.dispatch_table, torch.Tensor: _reduce_tensor}
            pickler.dump(array)
        except BaseException:  # no half-written dataset left behind
            path.unlink(missing_ok=True)
            raise
    return path


# ---------------------------------------------------------------- generation, subsets


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


def id_matches(sample_id: Any, ref_ids: set) -> bool:
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
        samples = [s for s in samples if id_matches(s["id"], ref_ids)]
    k = min(n, len(samples))
    by_len = sorted(samples, key=_length)  # stable: ties keep dataset order
    return {
        "random": random.Random(seed).sample(samples, k),
        "short": by_len[:k],
        "long": sorted(samples, key=_length, reverse=True)[:k],
    }
