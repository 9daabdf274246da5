"""Reading benchmark datasets: the upstream fairseq npy and raw (wav2vec2 tsv) formats and text jsonl,
each checked (writing, random generation, subsets and stats: dataset_make.py).

A sample is ``{"id": ..., "net_input": {"src_tokens": array|tensor, "src_lengths": array|tensor}}``;
one without an id (upstream's generate_random_dataset writes none) gets its index as id.
Upstream files hold torch tensors: ``dataset_make.save_npy_dataset(..., torch_tensors=True)`` writes them so.
Reading an npy dataset never executes pickled code: object arrays go through a restricted
unpickler (safe_unpickle.py) whose allow-list only rebuilds containers, numbers, strings,
numpy arrays and CPU torch tensors; this module bounds what it is given (header, size, opcodes).
What the loaders read from outside is bounded by ``LIMITS``; a crossed bound, like any bad input, is one S2STError line.
"""
from __future__ import annotations

import io
import itertools
import math
import os
import pickletools
import re
import stat
import struct
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .errors import S2STError
from .pipelines.callable import raised
from .safe_unpickle import unpickle as _unpickle
from .workload import REQUIRED_FIELDS, load_workload

DATASET_KINDS = ("npy", "raw", "text")

_MIB = 2**20


@dataclass(frozen=True)
class Limits:
    """Bounds on what the dataset loaders read from outside; every loader checks them here."""

    samples: int = 100_000  # samples in one dataset: npy objects, manifest entries, jsonl items
    line_chars: int = 65_536  # one tsv manifest or jsonl line
    text_bytes: int = 64 * _MIB  # one tsv manifest or jsonl file
    npy_bytes: int = 8192 * _MIB  # one npy file (a long 500-sample fbank subset is ~0.5 GiB)
    npy_header_bytes: int = 10_000  # the npy header dict (numpy's own default cap)
    pickle_ops: int = 5_000_000  # opcodes of an npy's pickle: each may build an object (memory)
    audio_bytes: int = 2048 * _MIB  # one audio file of a raw dataset
    audio_samples: int = 2**28  # frames x channels of one audio file (~4.7 h at 16 kHz)
    audio_samples_total: int = 2**30  # the same, summed over a raw dataset (4 GiB as float32)


LIMITS = Limits()

# universal newlines, as fairseq's text-mode reads see them (not str.splitlines: U+2028 etc.)
_LINES = re.compile(r"\r\n|\r|\n")


# what a structural npy error adds: the format expected, the command that makes one, and the way around a file
NPY_SCHEMA = ("expected the upstream npy format, a list of {'id': str|int, 'net_input': {'src_tokens': array "
              "(frames, features), 'src_lengths': [frames]}} (make one: s2st-dataset random --n 8 --feat-dim 80 --out "
              "data.npy); a model of your own takes plain inputs with no file: s2st_benchmark(my_model, inputs)")


def _over(where: Any, what: str, value: Any, field: str) -> S2STError:
    return S2STError(f"{where}: {what} ({value}) exceeds LIMITS.{field} = {getattr(LIMITS, field)}")


def _show(value: Any, limit: int = 4200) -> str:
    """Outside text in a message: kept on one line (non-printables escaped) and cut short."""
    text = str(value)
    if not text.isprintable():
        text = repr(text)[1:-1]
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _quote(text: str, limit: int = 60) -> str:
    """Outside text quoted in a message: repr keeps it on one line."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + "..."


def _reason(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300]


def _regular_size(path: Path, what: str, field: str) -> int:
    """Size of a regular file within LIMITS.<field>; FIFOs and devices are refused (a read
    could hang or never end)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        raise S2STError(f"{_show(path)}: {what} not found") from None
    except (OSError, ValueError) as e:  # ValueError: a NUL in the path
        raise S2STError(f"{_show(path)}: cannot read {what}: {_reason(e)}") from None
    if not stat.S_ISREG(st.st_mode):
        raise S2STError(f"{_show(path)}: {what} is not a regular file")
    if st.st_size > getattr(LIMITS, field):
        raise _over(_show(path), f"{what} size", f"{st.st_size} bytes", field)
    return st.st_size


def text_lines(path: Path, what: str, encoding: str) -> list[str]:
    """The lines of a bounded text file (size and each line's length)."""
    _regular_size(path, what, "text_bytes")
    try:
        with open(path, "rb") as f:
            data = f.read(LIMITS.text_bytes + 1)  # + 1: a file that grew since stat() is still caught
        text = data.decode(encoding)
    except UnicodeDecodeError as e:  # the line, and what the bytes likely are: Latin-1 / cp1252 or UTF-16
        line = data[: e.start].count(b"\n") + 1
        raise S2STError(f"{_show(path)}:{line}: cannot read {what}: not UTF-8 text (byte 0x{data[e.start]:02x} at "
                        f"offset {e.start}: Latin-1, cp1252 or UTF-16?); save it as UTF-8") from None
    except OSError as e:
        raise S2STError(f"{_show(path)}: cannot read {what}: {_reason(e)}") from None
    if len(data) > LIMITS.text_bytes:
        raise _over(_show(path), f"{what} size", f"over {LIMITS.text_bytes} bytes", "text_bytes")
    lines = _LINES.split(text)
    for n, line in enumerate(lines, 1):
        if len(line) > LIMITS.line_chars:
            raise _over(f"{_show(path)}:{n}", "line length", f"{len(line)} characters", "line_chars")
    return lines


# ---------------------------------------------------------------- bounded npy reading (the unpickler: safe_unpickle.py)

def _read_npy_header(f: Any, path: Path) -> tuple[tuple, np.dtype]:
    """(shape, dtype) from the header, its length bounded before numpy parses it."""
    fmt = np.lib.format
    try:
        version = fmt.read_magic(f)
        if version not in ((1, 0), (2, 0), (3, 0)):
            raise ValueError(f"unsupported .npy format version {version}")
        raw = f.read(2 if version == (1, 0) else 4)
        (length,) = struct.unpack("<H" if version == (1, 0) else "<I", raw)
    except (ValueError, OSError, struct.error) as e:
        raise S2STError(f"{path}: not a .npy file: {_reason(e)}") from None
    if length > LIMITS.npy_header_bytes:
        raise _over(path, "npy header length", f"{length} bytes", "npy_header_bytes")
    f.seek(-len(raw), io.SEEK_CUR)
    try:  # version 3 (utf-8 header) has no public reader; numpy 2 keeps it in _format_impl
        impl = getattr(np.lib, "_format_impl", fmt)
        shape, _fortran, dtype = impl._read_array_header(f, version, max_header_size=LIMITS.npy_header_bytes)
    except Exception as e:  # literal_eval and dtype parsing raise ValueError, SyntaxError, TypeError, ...
        raise S2STError(f"{path}: not a .npy file: {_reason(e)}") from None
    return tuple(shape), dtype


class _Clamped:
    """Reads clamped to the bytes left in the file: a length a pickle claims allocates nothing."""

    def __init__(self, f: Any, end: int):
        self.f, self.end = f, end

    def read(self, n: int = -1) -> bytes:
        left = max(0, self.end - self.f.tell())
        return self.f.read(left if n is None or n < 0 else min(n, left))

    def readline(self) -> bytes:
        return self.f.readline(max(0, self.end - self.f.tell()))

    def tell(self) -> int:
        return self.f.tell()


def _scan_pickle(f: Any, end: int, path: Path) -> None:
    """Walks the pickle's opcodes without building anything: every length it claims must fit in
    the file (the unpickler allocates claimed lengths up front), and their number is bounded."""
    start = f.tell()
    reader = _Clamped(f, end)
    try:
        for ops, (op, arg, _pos) in enumerate(pickletools.genops(reader), 1):
            if ops > LIMITS.pickle_ops:
                raise _over(path, "pickle opcodes", f"more than {LIMITS.pickle_ops}", "pickle_ops")
            if op.name == "FRAME" and arg > end - reader.tell():
                raise ValueError(f"a pickle frame of {arg} bytes runs past the end of the file")
    except S2STError:
        raise
    except Exception as e:  # genops raises ValueError on truncation, bad opcodes, bad literals
        raise S2STError(f"{path}: cannot unpickle npy contents: {type(e).__name__}: {_reason(e)}") from None
    f.seek(start)


def _read_npy(path: Path) -> np.ndarray:
    _regular_size(path, "dataset file", "npy_bytes")
    try:
        f = open(path, "rb")
    except OSError as e:
        raise S2STError(f"{path}: cannot read dataset file: {_reason(e)}") from None
    with f:
        end = os.fstat(f.fileno()).st_size
        shape, dtype = _read_npy_header(f, path)
        count = math.prod(shape)
        if count > LIMITS.samples:
            raise _over(path, "objects in the npy header's shape", count, "samples")
        if not dtype.hasobject:  # plain numbers: not samples, and no need to read them
            raise S2STError(f"{path}: expected a list of samples, got a {_show(dtype, 200)} array of shape {shape}; "
                            f"{NPY_SCHEMA}")
        _scan_pickle(f, end, path)
        array = _unpickle(f, path)
    if not isinstance(array, np.ndarray) or array.shape != shape:
        raise S2STError(f"{path}: npy contents do not match their header (shape {shape})")
    return array


# ---------------------------------------------------------------- structure checks


def _check_size(size: int | None, path: Path) -> None:
    """None or 0: every sample (upstream's ``if dataset_size:``); else a positive integer."""
    if size is None:
        return
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 0:
        raise S2STError(f"{path}: dataset_size must be an integer >= 0 (0: all samples), got {size!r}")


def _as_sample_list(data: Any, path: Path) -> list:
    if isinstance(data, np.ndarray):
        if data.dtype.hasobject and data.ndim == 0:
            data = data.item()
        elif data.dtype.hasobject and data.ndim == 1:
            return list(data)
        else:
            raise S2STError(
                f"{path}: expected a list of samples, got a {_show(data.dtype, 200)} array of shape {data.shape}; "
                f"{NPY_SCHEMA}"
            )
    if isinstance(data, (list, tuple)):
        if len(data) > LIMITS.samples:
            raise _over(path, "samples", len(data), "samples")
        return list(data)
    raise S2STError(f"{path}: expected a list of samples, got {type(data).__name__}; {NPY_SCHEMA}")


def _id_problem(sample_id: Any) -> str | None:
    # ids are hashed and compared (ref-dataset filters) and written to reports: plain scalars only
    if isinstance(sample_id, str):
        try:
            sample_id.encode("utf-8")
        except UnicodeEncodeError:
            return "holds a lone surrogate, not valid Unicode text"
        return None
    if isinstance(sample_id, (bytes, int, float, np.number, np.bool_, np.bytes_)):
        return None
    if isinstance(sample_id, np.ndarray) and sample_id.ndim == 0 and sample_id.dtype.kind in "biufSU":
        return None
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(sample_id, torch.Tensor) and sample_id.ndim == 0:
        return None
    return f"is a {type(sample_id).__name__}, expected a string or a number"


def _array_problem(key: str, value: Any) -> str | None:
    if isinstance(value, np.ndarray):
        kind, n = value.dtype.kind, value.size
    else:
        torch = sys.modules.get("torch")
        if torch is None or not isinstance(value, torch.Tensor):
            return f"is a {type(value).__name__}, expected a numpy array or torch tensor"
        dt, n = value.dtype, value.numel()
        kind = "c" if dt.is_complex else "f" if dt.is_floating_point else "b" if dt == torch.bool else "i"
    if key == "src_lengths":  # upstream reads it with .item(): exactly one integer
        if kind not in "iu" or n != 1:
            return f"must hold one integer, got {n} of {value.dtype}"
        if int(value.reshape(-1)[0]) <= 0:
            return f"must be positive, got {int(value.reshape(-1)[0])}"
        return None
    if kind not in "iuf":
        return f"holds {_show(value.dtype, 200)}, expected numbers"
    if value.ndim == 0 or n == 0:
        return f"is empty (shape {tuple(value.shape)})"
    return None


REFERENCE_KEY = "tgt_text"  # a sample's reference translation (quality/translation.py)
TOKENS_KEY = "target"  # or its target tokens (fairseq's collaters' name), decoded by the pipeline's dictionary


def reference_problem(text: Any) -> str | None:
    """A reference translation is one line of valid Unicode text within LIMITS.line_chars."""
    if not isinstance(text, str):
        return f"is a {type(text).__name__}, expected a string (the reference translation)"
    if len(text) > LIMITS.line_chars:
        return f"has {len(text)} characters, over LIMITS.line_chars = {LIMITS.line_chars}"
    if _LINES.search(text):
        return "holds a line break: a reference is one line"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "holds a lone surrogate, not valid Unicode text"
    return None


def _check_samples(samples: list, path: Path) -> list[dict]:
    """The samples, checked; one without an id gets its index (upstream random datasets)."""
    checked = []
    for i, s in enumerate(samples):
        if not isinstance(s, dict):
            raise S2STError(f"{path}: sample {i} is a {type(s).__name__}, not a dict; {NPY_SCHEMA}")
        if "id" not in s:
            s = {"id": i, **s}
        problem = _id_problem(s["id"])
        if problem:
            raise S2STError(f"{path}: sample {i} id {problem}")
        net_input = s.get("net_input")
        if not isinstance(net_input, dict):
            what = "no net_input" if net_input is None else f"a net_input that is a {type(net_input).__name__}"
            raise S2STError(f"{path}: sample {i} has {what}; {NPY_SCHEMA}")
        for key in ("src_tokens", "src_lengths"):
            if key not in net_input:
                raise S2STError(f"{path}: sample {i} has no net_input.{key}")
            problem = _array_problem(key, net_input[key])
            if problem:
                raise S2STError(f"{path}: sample {i} net_input.{key} {problem}")
        if REFERENCE_KEY in s:
            problem = reference_problem(s[REFERENCE_KEY])
            if problem:
                raise S2STError(f"{path}: sample {i} {REFERENCE_KEY} {problem}")
        if TOKENS_KEY in s:  # the reference as target tokens (fairseq S2T / MT data): integers, one sequence
            problem = _array_problem(TOKENS_KEY, s[TOKENS_KEY])
            if problem is None and np.asarray(s[TOKENS_KEY]).dtype.kind not in "iu":
                problem = f"holds {_show(np.asarray(s[TOKENS_KEY]).dtype, 200)}, expected integer token ids"
            if problem:
                raise S2STError(f"{path}: sample {i} {TOKENS_KEY} {problem}")
        checked.append(s)
    return checked


def load_npy_dataset(path: str | os.PathLike, size: int | None = None) -> list[dict]:
    """Upstream npy dataset (np.save of a list of samples), read without running pickled code.

    ``size`` keeps the first N samples (more than there are: all); only those are checked.
    """
    path = Path(path)
    _check_size(size, path)
    samples = _as_sample_list(_read_npy(path), path)
    if not samples:
        raise S2STError(f"{path}: dataset is empty")
    if size:  # 0 and None: all samples, as upstream's load_dataset_npy
        samples = samples[: int(size)]
    return _check_samples(samples, path)


# ---------------------------------------------------------------- raw (tsv) datasets


def _frames_check(where: str, frames: str) -> None:
    # fairseq calls int(frames), which also takes "+1", "1_0" and non-ASCII digits: no writer's output
    if not (frames.isascii() and frames.isdigit()):
        raise S2STError(f"{where}: frame count {_quote(frames)} is not a whole number")
    if len(frames) > 18 or int(frames) > LIMITS.audio_samples:  # length first: int() refuses 4300+ digits
        raise _over(where, "frame count", _show(frames, 60), "audio_samples")
    if int(frames) == 0:
        raise S2STError(f"{where}: frame count is 0: every entry needs audio")


def _read_manifest(path: Path) -> tuple[Path, list[tuple[int, str, str | None]]]:
    """(audio root, [(line number, relative path, reference or None)]) of a wav2vec2 tsv, each line checked
    as fairseq's FileAudioDataset reads it: two tab-separated columns, an integer frame count; plus an
    optional third column, the entry's reference translation (which fairseq's own reader refuses)."""
    lines = text_lines(path, "dataset manifest", "utf-8")
    if not lines[0].strip():
        raise S2STError(f"{_show(path)}:1: first line must be the audio root directory")
    try:
        root = path.parent / os.path.expanduser(lines[0].strip())
    except ValueError:  # "~name" with a NUL: the user lookup raises (found by fuzzing)
        raise S2STError(f"{_show(path)}:1: audio root {_quote(lines[0].strip())} is not a valid path") from None
    entries = []
    for lineno, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        where = f"{_show(path)}:{lineno}"
        items = line.strip().split("\t")
        if len(items) not in (2, 3):
            raise S2STError(f"{where}: expected 2 tab-separated columns (audio path, frame count) and an optional "
                            f"third (the reference translation), got {len(items)}")
        _frames_check(where, items[1])
        entries.append((lineno, items[0], items[2].strip() if len(items) == 3 else None))
        if len(entries) > LIMITS.samples:
            raise _over(_show(path), "entries", f"more than {LIMITS.samples}", "samples")
    if not entries:
        raise S2STError(f"{_show(path)}: dataset is empty (no audio lines after the root)")
    return root, entries


def _read_audio(where: str, wav_path: Path, sample_rate: int, sf: Any) -> np.ndarray:
    """One float32 (1, T) waveform; size, frames and rate are checked on the header, before
    any sample is decoded."""
    shown = _show(wav_path)
    try:
        st = wav_path.stat()
    except (FileNotFoundError, NotADirectoryError):
        raise S2STError(f"{where}: audio file not found: {shown}") from None
    except (OSError, ValueError) as e:  # a NUL or an over-long name
        raise S2STError(f"{where}: cannot read audio {shown}: {_reason(e)}") from None
    if not stat.S_ISREG(st.st_mode):
        raise S2STError(f"{where}: {shown} is not a regular file")
    if st.st_size > LIMITS.audio_bytes:
        raise _over(where, f"size of {shown}", f"{st.st_size} bytes", "audio_bytes")
    try:
        info = sf.info(str(wav_path))
        if info.frames <= 0:  # a header-only file: models fail on it far from here
            raise S2STError(f"{where}: {shown} has no audio frames")
        if info.frames * info.channels > LIMITS.audio_samples:
            raise _over(where, f"frames x channels of {shown}", info.frames * info.channels, "audio_samples")
        if info.samplerate != sample_rate:
            raise S2STError(f"{where}: {shown} is sampled at {info.samplerate} Hz, expected {sample_rate} Hz "
                            "(not resampled)")
        wav, _sr = sf.read(str(wav_path), dtype="float32")
    except S2STError:
        raise
    except Exception as e:  # soundfile raises LibsndfileError/RuntimeError for bad files
        raise S2STError(f"{where}: cannot read audio {shown}: {_reason(e)}") from None
    if wav.ndim == 2:
        wav = wav.mean(-1)
    if wav.size == 0:
        raise S2STError(f"{where}: {shown} has no audio frames")
    return np.ascontiguousarray(wav, dtype=np.float32).reshape(1, -1)


def load_raw_dataset(path: str | os.PathLike, size: int | None = None, sample_rate: int = 16000) -> list[dict]:
    """wav2vec2-style tsv manifest: first line the audio root, then ``relative/path.wav<TAB>frames``.

    Every line is checked (two columns, a positive integer frame count); only the audio of the
    first ``size`` entries is read. A relative root is taken relative to the tsv's folder. Audio is
    read with soundfile as float32; stereo is averaged to mono. A file whose rate differs from
    ``sample_rate`` is refused rather than resampled, so numbers are never silently computed on
    resampled audio. Returns torch-free samples: src_tokens float32 (1, T), src_lengths np.array([T]).
    """
    path = Path(path)
    _check_size(size, path)
    root, entries = _read_manifest(path)
    if size:  # 0 and None: all entries, as upstream's load_dataset_raw_to_waveforms
        entries = entries[: int(size)]
    try:
        import soundfile as sf  # lazy: optional
    except ImportError:
        raise S2STError(f"{path}: reading raw datasets needs soundfile (pip install soundfile)") from None

    samples, total = [], 0
    for i, (lineno, rel, reference) in enumerate(entries):
        wav = _read_audio(f"{_show(path)}:{lineno}", root / rel, sample_rate, sf)
        total += wav.size
        if total > LIMITS.audio_samples_total:
            raise _over(f"{_show(path)}:{lineno}", "audio samples so far", total, "audio_samples_total")
        sample = {"id": i, "net_input": {"src_tokens": wav, "src_lengths": np.array([wav.shape[1]])}}
        if reference is not None:
            sample[REFERENCE_KEY] = reference
        samples.append(sample)
    return samples


def _load_text_dataset(path: Path, size: int | None, fields: Sequence[str] | None) -> list[dict]:
    _check_size(size, path)
    lines = text_lines(path, "text dataset", "utf-8-sig")  # bounds first: load_workload reads it all
    if sum(1 for line in lines if line.strip()) > LIMITS.samples:
        raise _over(_show(path), "items", f"more than {LIMITS.samples}", "samples")
    try:
        items = load_workload(path, REQUIRED_FIELDS if fields is None else fields)
    except RecursionError:  # json.loads on deeply nested brackets
        raise S2STError(f"{_show(path)}: JSON nested too deeply") from None
    return items[:size] if size else items


def dataset_count(path: str | os.PathLike, kind: str = "npy", text_fields: Sequence[str] | None = None) -> int | None:
    """How many samples the dataset holds, read cheaply (an npy's header, a manifest's or jsonl's lines, each
    checked as its loader checks it): what a references file is checked against before any test runs. None
    when the npy header does not tell (a 0-d object array holding a list). ``text_fields``: as load_dataset."""
    path = Path(path)
    if kind == "npy":
        _regular_size(path, "dataset file", "npy_bytes")
        try:
            with open(path, "rb") as f:
                shape, dtype = _read_npy_header(f, path)
        except OSError as e:
            raise S2STError(f"{_show(path)}: cannot read dataset file: {_reason(e)}") from None
        return shape[0] if len(shape) == 1 and dtype.hasobject else None
    if kind == "raw":
        return len(_read_manifest(path)[1])
    if kind == "text":
        return len(_load_text_dataset(path, None, text_fields))
    raise S2STError(f"unknown dataset_type {kind!r} for {path}; known: {', '.join(DATASET_KINDS)}")


def inputs_from(inputs: Any, where: str) -> list:
    """The inputs of ``s2st_benchmark(fn, inputs)``, one model call each: a list or tuple as given, an array or
    tensor row by row along its first axis, or any other iterable (a generator) consumed once, bounded by
    LIMITS.samples."""
    if isinstance(inputs, (str, bytes, dict)) or not hasattr(inputs, "__iter__"):
        raise S2STError(f"{where}: inputs must be a list, an array (one input per row) or an iterable of "
                        f"inputs, got {type(inputs).__name__}")
    if getattr(inputs, "ndim", None) == 0:
        raise S2STError(f"{where}: inputs is a 0-d array; pass a list of inputs or an array with one input per row")
    try:
        out = list(itertools.islice(iter(inputs), LIMITS.samples + 1))
    except (Exception, SystemExit) as exc:  # the user's generator raised: one line naming their file:line
        raise S2STError(f"{where}: reading the inputs raised {raised(exc)}") from None
    if len(out) > LIMITS.samples:
        raise _over(where, "inputs", f"more than {LIMITS.samples}", "samples")
    if not out:
        raise S2STError(f"{where}: no inputs (an empty {type(inputs).__name__})")
    return out


def load_dataset(path: str | os.PathLike, kind: str = "npy", size: int | None = None, sample_rate: int = 16000,
                 text_fields: Sequence[str] | None = None) -> list[dict]:
    """Dispatch on dataset_type: 'npy', 'raw', or 'text' (jsonl of {id, text, language?, voice?, seed?}).
    ``text_fields``: the fields each text sample must have, the model type's (pipelines.base.text_fields);
    None: all of the workload format's."""
    if kind == "npy":
        return load_npy_dataset(path, size)
    if kind == "raw":
        return load_raw_dataset(path, size, sample_rate)
    if kind == "text":
        return _load_text_dataset(Path(path), size, text_fields)
    raise S2STError(f"unknown dataset_type {kind!r} for {path}; known: {', '.join(DATASET_KINDS)}")
