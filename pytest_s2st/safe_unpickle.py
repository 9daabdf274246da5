"""The restricted unpickler of npy datasets: a pickle may rebuild only plain containers, numbers, strings,
numpy arrays and CPU torch tensors (``ALLOWED_GLOBALS``), never run code; the numpy states it builds are
checked first (numpy trusts them: a malformed one can crash the process). datasets.py bounds what reaches
it (the npy header, the file size, the pickle's opcodes and claimed lengths) and reads the samples out.
"""
from __future__ import annotations

import collections
import io
import math
import pickle
import re
import zipfile
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .errors import S2STError
from .inputs import show


def _reason(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300]


REFUSED = "only plain containers, numbers, strings, numpy arrays and torch tensors are allowed"


def _np_core():
    try:
        # lazy: optional
        import numpy._core as core  # numpy >= 2
    except ImportError:  # pragma: no cover - numpy 1.x
        import numpy.core as core  # lazy: optional
    return core


def _torch():
    try:
        import torch  # lazy: optional
    except ImportError:
        raise S2STError("holds torch tensors; install torch to read it") from None
    return torch


class _Refused(Exception):
    def __init__(self, name: str, where: str = ""):
        super().__init__(name, where)
        self.name, self.where = name, where


class _Token:
    """Stands for numpy.ndarray in a pickle: _reconstruct takes it, but calling it builds nothing
    (ndarray(shape) would allocate any size a few pickle bytes ask for)."""

    __slots__ = ()


_NDARRAY = _Token()


def _reconstruct(subtype: Any, shape: Any, dtype: Any) -> np.ndarray:
    # what pickling an ndarray writes: _reconstruct(ndarray, (0,), b"b"), then its state fills it
    if subtype is not _NDARRAY or shape != (0,):
        raise ValueError("numpy _reconstruct only rebuilds an empty ndarray, filled by its pickled state")
    return _np_core().multiarray._reconstruct(np.ndarray, shape, dtype)


def _dtype(obj: Any, align: Any = False, copy: Any = False) -> np.dtype:
    # always a fresh dtype: BUILD then sets its state, which must never reach numpy's shared ones
    if not isinstance(align, bool) or not isinstance(copy, bool):
        raise ValueError("numpy dtype takes a boolean align and copy")
    return np.dtype(obj, align=align, copy=True)


def _latin1_encode(obj: Any, encoding: Any = "utf-8", errors: Any = "strict") -> bytes:
    # protocol-2 pickles carry bytes as _codecs.encode(text, "latin1"); nothing else is needed
    if not isinstance(obj, str) or encoding not in ("latin1", "latin-1") or errors != "strict":
        raise ValueError("_codecs.encode is only allowed as pickle's latin1 carrier of bytes")
    return obj.encode("latin1")


def _bytearray(*args: Any) -> bytearray:
    # pickled bytearrays carry their bytes; bytearray(n) would allocate n bytes from a tiny pickle
    if args and not isinstance(args[0], (bytes, str)):
        raise ValueError("bytearray is only rebuilt from the bytes it holds")
    return bytearray(*args)


def _check_storage_zip(b: bytes) -> None:
    # torch writes its zip records stored: a deflated one could inflate far beyond the file
    try:
        infos = zipfile.ZipFile(io.BytesIO(b)).infolist()
    except Exception as e:  # zipfile raises BadZipFile, ValueError, struct.error, ...
        raise ValueError(f"a torch storage is not a readable zip archive ({_reason(e)})") from None
    if any(i.compress_type != zipfile.ZIP_STORED or i.file_size > len(b) for i in infos):
        raise ValueError("a torch storage holds a compressed or oversized zip record")


def _load_storage_from_bytes(b: Any):
    # Replaces torch.storage._load_from_bytes, which calls torch.load(weights_only=False).
    torch = _torch()
    if not isinstance(b, bytes):
        raise ValueError(f"torch storage bytes are a {type(b).__name__}")
    if b[:4] == b"PK\x03\x04":  # how torch.load tells its zip format
        _check_storage_zip(b)
    try:
        storage = torch.load(io.BytesIO(b), weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as e:  # weights_only refused a global inside the storage bytes
        m = re.search(r"GLOBAL (\S+)", str(e))
        raise _Refused(m.group(1) if m else "a global", " inside a torch storage") from None
    if not isinstance(storage, torch.storage.TypedStorage):
        raise ValueError(f"torch storage bytes hold a {type(storage).__name__}")
    return storage


def _rebuild_tensor(storage: Any, offset: Any, size: Any, stride: Any, requires_grad: Any,
                    backward_hooks: Any, metadata: Any = None):
    # torch._utils._rebuild_tensor_v2 for a view within its storage (a 0-stride view could make
    # 10**12 elements of one), without hooks
    torch = _torch()
    if not isinstance(storage, torch.storage.TypedStorage):
        raise ValueError(f"a tensor's storage is a {type(storage).__name__}")
    if not isinstance(backward_hooks, dict) or backward_hooks:
        raise ValueError("a tensor carries backward hooks")
    if metadata or not isinstance(requires_grad, bool):  # metadata: conj/neg bits of complex views
        raise ValueError("a tensor carries metadata, or a requires_grad that is not a bool")
    t = torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad, collections.OrderedDict())
    held = storage._untyped_storage.nbytes() // max(1, t.element_size())
    if t.numel() > held:
        raise ValueError(f"a tensor of {t.numel()} elements views a storage of {held}")
    return t


def _rebuild_parameter(data: Any, requires_grad: Any, backward_hooks: Any):
    torch = _torch()
    if type(data) is not torch.Tensor or not isinstance(backward_hooks, dict) or backward_hooks:
        raise ValueError("an nn.Parameter must wrap a plain tensor, without hooks")
    return torch.nn.Parameter(data, bool(requires_grad))


# Everything a pickle may name, each to what it rebuilds: numpy arrays and scalars (numpy >= 2
# writes numpy._core, 1.x numpy.core), plain containers, and exactly what pickling a CPU torch
# tensor or nn.Parameter writes. Anything else is refused.
ALLOWED_GLOBALS: dict[tuple[str, str], Callable[[], Any]] = {
    **{(m, "_reconstruct"): (lambda: _reconstruct) for m in ("numpy.core.multiarray", "numpy._core.multiarray")},
    **{(m, "scalar"): (lambda: _np_core().multiarray.scalar)
       for m in ("numpy.core.multiarray", "numpy._core.multiarray")},
    **{(m, "_frombuffer"): (lambda: _np_core().numeric._frombuffer)  # pickle protocol 5
       for m in ("numpy.core.numeric", "numpy._core.numeric")},
    ("numpy", "ndarray"): lambda: _NDARRAY,
    ("numpy", "dtype"): lambda: _dtype,
    ("collections", "OrderedDict"): lambda: collections.OrderedDict,
    ("builtins", "set"): lambda: set,
    ("builtins", "frozenset"): lambda: frozenset,
    ("builtins", "complex"): lambda: complex,
    ("builtins", "bytearray"): lambda: _bytearray,
    ("_codecs", "encode"): lambda: _latin1_encode,  # bytes in protocol-2 pickles
    ("torch._utils", "_rebuild_tensor_v2"): lambda: _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): lambda: _rebuild_parameter,
    ("torch.storage", "_load_from_bytes"): lambda: _load_storage_from_bytes,
}


def _check_dtype_state(dtype: np.dtype, state: Any) -> None:
    # numpy trusts it: a byte-swapped object dtype segfaults the next comparison (numpy 2.4).
    # The state must be the dtype's own; only the byte order of a multi-byte number may differ.
    own = dtype.__reduce__()[2]
    free = {1, 8} if dtype.kind in "Mm" else {1}  # 8: a datetime's unit, which numpy itself checks
    ok = (isinstance(state, tuple) and len(state) == len(own)
          and all(type(a) is type(b) and a == b for i, (a, b) in enumerate(zip(state, own)) if i not in free))
    if not ok or state[1] not in (("<", ">") if own[1] in ("<", ">") else (own[1],)):
        raise ValueError(f"a numpy dtype's pickled state does not match the dtype {show(dtype, 80)}")


def _check_array_state(state: Any) -> None:
    # numpy trusts it: an object array whose list is shorter than its shape segfaults (numpy 2.4)
    if not (isinstance(state, tuple) and len(state) == 5 and isinstance(state[1], tuple)
            and all(type(n) is int and n >= 0 for n in state[1]) and isinstance(state[2], np.dtype)
            and state[2].fields is None and state[2].subdtype is None):
        raise ValueError("a numpy array's pickled state is malformed")
    _version, shape, dtype, _fortran, data = state
    count = math.prod(shape)
    if dtype.hasobject:
        ok = dtype.char == "O" and isinstance(data, list) and len(data) == count
    else:
        ok = isinstance(data, bytes) and dtype.itemsize > 0 and len(data) == count * dtype.itemsize
    if not ok:
        raise ValueError(f"a numpy array's pickled data does not fit its shape {shape} and dtype {show(dtype, 80)}")


class _RestrictedUnpickler(pickle._Unpickler):
    """The pure-Python unpickler (stdlib, private name): unlike the C one, it lets BUILD (an
    object's __setstate__) be checked; only numpy arrays and dtypes, validated, are built that way."""

    dispatch = pickle._Unpickler.dispatch.copy()

    def find_class(self, module: str, name: str):
        factory = ALLOWED_GLOBALS.get((module, name))
        if factory is None:
            raise _Refused(f"{module}.{name}")
        return factory()

    def persistent_load(self, pid):
        raise _Refused(f"a persistent id ({type(pid).__name__})")

    def load_build(self):
        inst = self.stack[-2]
        if type(inst) is np.ndarray:
            _check_array_state(self.stack[-1])
        elif isinstance(inst, np.dtype):
            _check_dtype_state(inst, self.stack[-1])
        else:
            raise ValueError(f"pickled state for a {type(inst).__name__} is not allowed")
        pickle._Unpickler.load_build(self)

    dispatch[pickle.BUILD[0]] = load_build


def unpickle(f: Any, path: Path) -> Any:
    """The object a pickle stream holds, rebuilt only from ALLOWED_GLOBALS; S2STError (one line, naming
    ``path``) for anything refused or corrupt. The caller bounds the stream first (datasets._scan_pickle)."""
    try:
        return _RestrictedUnpickler(f).load()
    except _Refused as e:
        name = e.name if len(e.name) <= 200 else e.name[:200] + "..."
        raise S2STError(f"{path}: refused to unpickle {name!r}{e.where}: {REFUSED}") from None
    except S2STError as e:
        raise S2STError(f"{path}: {e}") from None
    except Exception as e:  # corrupt pickle stream, or arguments a rebuilder refuses
        raise S2STError(f"{path}: cannot unpickle npy contents: {type(e).__name__}: {_reason(e)}") from None
