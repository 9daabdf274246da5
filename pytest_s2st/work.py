"""What work a saved benchmark row measured, and whether two rows measured the same (pytest-free, no torch).

A compare gives a verdict only between rows that measured the same work: a saved row of another config with 500
samples under the same test id once read ``x0.000, faster``. The model's code, its weights and its config's values
may differ: catching that change is what a compare is for. The work is what must not:

- the model kind and the files it is built from, by name (``model_type``, the model files' names from ``assets``;
  their hashes are the version under test and may differ). Not the config file's name: the test id already
  names the case, and a later session's config may live elsewhere (tests/test_translation_quality.py compares a
  case of same.yaml with its later.yaml),
- the inputs: how many samples, and a hash of their content (``inputs_sha256``, runner.measure_pipeline),
- how it was timed: the runtime protocol, the device kind and the thread count.

A field one row lacks (a run saved before it existed, a test's own callable with no config) is not compared.
The runtime statistic (mean/median) is checked where the runtime is judged (judging.runtime_statistic).
"""
from __future__ import annotations

import hashlib
import os
from typing import Any, Mapping

from .inputs import show

# (label said in a difference, how to read it from a row's extra_info.s2st)
WORK_FIELDS = ("model_type", "model files", "samples", "inputs_sha256", "runtime_protocol", "device",
               "threads")
# machine_info keys whose difference leaves no runtime, memory or instruction count comparable (pytest-benchmark's
# compare only warns); a different Python version is said, not refused
MACHINE_KINDS = ("machine", "system", "python_implementation")
MACHINE_NOTED = ("python_version",)


def _basename(path: Any) -> str | None:
    return os.path.basename(path) if isinstance(path, str) and path else None


def work_of(s2st: Mapping[str, Any]) -> dict[str, Any]:
    """The work fields a row carries (those it lacks are absent)."""
    out: dict[str, Any] = {}
    if isinstance(s2st.get("model_type"), str):
        out["model_type"] = s2st["model_type"]
    assets = s2st.get("assets")
    if isinstance(assets, Mapping) and assets:
        out["model files"] = sorted({_basename(k) or str(k) for k in assets})
    for key in ("samples", "threads"):
        if isinstance(s2st.get(key), int) and not isinstance(s2st.get(key), bool):
            out[key] = s2st[key]
    for key in ("inputs_sha256", "runtime_protocol"):
        if isinstance(s2st.get(key), str):
            out[key] = s2st[key]
    device = s2st.get("device")
    name = device.get("name") if isinstance(device, Mapping) else None
    if isinstance(name, str):
        out["device"] = name.split(":")[0]  # the kind: cuda:0 and cuda:1 are alike, cpu and cuda are not
    return out


def _text(value: Any) -> str:
    if isinstance(value, list):
        value = ",".join(map(str, value))
    text = str(value)
    return show(text[:12] if len(text) == 64 else text, 60)  # a sha256: its first 12 hex digits say it


def differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """'samples 500 -> 3' for each work field both rows carry and that differs."""
    return [f"{key} {_text(old[key])} -> {_text(new[key])}" for key in WORK_FIELDS
            if key in old and key in new and old[key] != new[key]]


def machine_differences(old: Any, new: Any) -> tuple[list[str], list[str]]:
    """(kinds that differ: no verdict, others said) between two runs' machine_info."""
    old = old if isinstance(old, Mapping) else {}
    new = new if isinstance(new, Mapping) else {}
    said = lambda keys: [f"{k} {show(str(old.get(k)), 40)} -> {show(str(new.get(k)), 40)}"  # noqa: E731
                         for k in keys if old.get(k) != new.get(k)]
    return said(MACHINE_KINDS), said(MACHINE_NOTED)


# --- the inputs' fingerprint ------------------------------------------------------------------------------------

def inputs_fingerprint(samples: Any) -> str | None:
    """sha256 of the samples' content (arrays by dtype, shape and bytes; mappings by sorted key), or None when a
    sample holds something it cannot read the same way twice (an object of no known kind)."""
    digest = hashlib.sha256()
    try:
        for sample in samples:
            _feed(digest, sample, 0)
    except _Unreadable:
        return None
    return digest.hexdigest()


class _Unreadable(Exception):
    pass


def _feed(digest: Any, value: Any, depth: int) -> None:
    if depth > 32:
        raise _Unreadable
    if value is None or isinstance(value, (bool, int, float, str)):
        digest.update(f"{type(value).__name__}:{value!r};".encode("utf-8", "surrogatepass"))
    elif isinstance(value, (bytes, bytearray)):
        digest.update(b"bytes:%d;" % len(value) + bytes(value))
    elif isinstance(value, Mapping):
        digest.update(b"map:%d;" % len(value))
        for key in sorted(value, key=repr):
            _feed(digest, key, depth + 1)
            _feed(digest, value[key], depth + 1)
    elif isinstance(value, (list, tuple)):
        digest.update(b"seq:%d;" % len(value))
        for item in value:
            _feed(digest, item, depth + 1)
    elif hasattr(value, "detach") and hasattr(value, "cpu") and hasattr(value, "numpy"):  # a torch tensor
        _feed(digest, value.detach().cpu().numpy(), depth + 1)
    elif hasattr(value, "dtype") and hasattr(value, "shape") and hasattr(value, "tobytes"):  # numpy
        if getattr(value.dtype, "hasobject", False):
            _feed(digest, value.tolist(), depth + 1)
        else:
            digest.update(f"array:{value.dtype.str}:{tuple(value.shape)};".encode())
            digest.update(value.tobytes())
    else:
        raise _Unreadable
