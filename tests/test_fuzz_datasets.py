"""Fuzzing the dataset loaders with hypothesis: whatever the input, it loads into samples the rest of
the tool can use, or it is one S2STError line; never another exception, never a hang.

Raw tsv manifests (odd unicode, tabs, huge numbers, binary), npy files (object arrays of random
structures, numeric arrays, truncated and mutated files, random bytes) and text jsonl.
Examples per run: see EXAMPLES; ``--hypothesis-show-statistics`` lists the outcomes.
"""
from __future__ import annotations

import io
import json
import pickle
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, reject, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from pytest_s2st import dataset_make as dm
from pytest_s2st import datasets as ds
from pytest_s2st.errors import S2STError

torch = pytest.importorskip("torch")
sf = pytest.importorskip("soundfile")

EXAMPLES = {"raw": 200, "npy_structures": 200, "npy_bytes": 300, "jsonl": 200}
HANG_S = 10  # one load slower than this counts as a hang
FUZZ = dict(deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def loads_or_one_line(load, *args, **kw):
    """Runs a loader; returns its samples, or None after checking its error is one S2STError line."""
    start = time.monotonic()
    try:
        samples = load(*args, **kw)
    except S2STError as exc:
        msg = str(exc)
        assert msg and msg.splitlines() == [msg], repr(msg)
        assert str(args[0]) in msg, msg  # names the file
        event("refused: " + msg.split(": ", 2)[-1][:40])
        samples = None
    assert time.monotonic() - start < HANG_S, "a loader took too long"
    return samples


def usable(samples: list[dict]) -> None:
    """What the plugin and s2st-dataset do with loaded samples works on them."""
    assert samples and all(isinstance(s, dict) for s in samples)
    ids = {hash(s["id"]) for s in samples}
    assert ids
    stats = dm.dataset_stats(samples)
    assert stats["n"] == len(samples) and stats["min_len"] >= 1
    subsets = dm.make_subsets(samples, n=2, ref_ids={s["id"] for s in samples})
    assert all(len(v) == min(2, len(samples)) for v in subsets.values())
    event(f"loaded {len(samples)} samples")


# ------------------------------------------------------------------ raw tsv manifests

AUDIO = ["a.wav", "stereo.wav", "empty.wav", "rate8k.wav", "junk.wav", "missing.wav", "sub", "../x/a.wav"]
odd_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=30)  # tabs, U+2028, NUL, ...
frames = st.one_of(st.integers(-10**30, 10**30).map(str), odd_text,
                   st.sampled_from(["10", "8", "0", "", "1e3", "\u0663", "1_0", " 10", "+10", "9" * 5000]))
entry = st.builds(lambda path, n, extra, sep: sep.join([path, n, *extra]),
                  st.one_of(st.sampled_from(AUDIO), odd_text), frames,
                  st.lists(odd_text, max_size=2), st.sampled_from(["\t", "\t", " ", "\t\t"]))
good_entry = st.sampled_from(["a.wav\t10", "stereo.wav\t8", "sub/../a.wav\t10", "", " "])
manifest = st.one_of(
    st.builds(lambda root, lines, nl: (nl.join([root, *lines]) + nl).encode(),
              st.one_of(st.sampled_from([".", "", "~", "~\x00x"]), odd_text),
              st.lists(st.one_of(entry, odd_text), max_size=6),
              st.sampled_from(["\n", "\r\n", "\r", "\u2028"])),
    st.builds(lambda lines, nl: nl.join([".", *lines]).encode(),  # mostly valid: reaches the audio reads
              st.lists(st.one_of(good_entry, good_entry, good_entry, entry), min_size=1, max_size=5),
              st.sampled_from(["\n", "\r\n", "\r"])),
    st.binary(max_size=200),
)


@pytest.fixture(scope="module")
def audio_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("fuzz_raw")
    sf.write(str(d / "a.wav"), np.linspace(-1, 1, 10, dtype=np.float32), 16000)
    sf.write(str(d / "stereo.wav"), np.zeros((8, 2), np.float32), 16000)
    sf.write(str(d / "empty.wav"), np.zeros(0, np.float32), 16000)
    sf.write(str(d / "rate8k.wav"), np.zeros(8, np.float32), 8000)
    (d / "junk.wav").write_bytes(b"RIFF\x00\x00\x00\x00WAVEnot really")
    (d / "sub").mkdir()
    return d


@settings(max_examples=EXAMPLES["raw"], **FUZZ)
@given(content=manifest, size=st.one_of(st.none(), st.integers(1, 4)))
def test_fuzz_raw_manifest(audio_dir, content, size):
    tsv = audio_dir / "m.tsv"
    tsv.write_bytes(content)
    samples = loads_or_one_line(ds.load_raw_dataset, tsv, size=size)
    if samples is not None:
        usable(samples)
        for s in samples:
            tokens = s["net_input"]["src_tokens"]
            assert tokens.dtype == np.float32 and tokens.shape == (1, s["net_input"]["src_lengths"][0])


# ------------------------------------------------------------------ npy: random structures

shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3)
np_arrays = hnp.arrays(st.one_of(hnp.scalar_dtypes(), hnp.byte_string_dtypes(max_len=3),
                                 hnp.unicode_string_dtypes(max_len=3)), shapes)
tensors = hnp.arrays(st.sampled_from(["float32", "float64", "float16", "int64", "int32", "uint8", "bool",
                                      "complex64", "uint16"]), shapes).map(torch.tensor)
scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(), st.text(max_size=8),
                    st.binary(max_size=8), st.sampled_from([np.int64(3), np.float32(0.5), np.str_("x")]))
leaves = st.one_of(scalars, np_arrays, tensors)
values = st.recursive(leaves, lambda kids: st.one_of(
    st.lists(kids, max_size=3), st.tuples(kids, kids), st.sets(st.integers(), max_size=3),
    st.dictionaries(st.one_of(st.text(max_size=6), st.integers()), kids, max_size=3)), max_leaves=8)
lengths = st.one_of(st.integers(-2, 2**40).map(lambda t: np.array([t])),
                    st.integers(-2, 300).map(lambda t: torch.tensor([t])), np_arrays, tensors, scalars)
net_input = st.one_of(st.fixed_dictionaries({"src_tokens": st.one_of(np_arrays, tensors, scalars),
                                             "src_lengths": lengths}, optional={"x": values}), values)
some_shape = hnp.array_shapes(min_dims=1, max_dims=3)
good_tokens = st.one_of(hnp.arrays(st.sampled_from(["float32", "float16", "int64"]), some_shape),
                        hnp.arrays("float32", some_shape).map(torch.tensor))
good_lengths = st.one_of(st.integers(1, 500).map(lambda t: np.array([t])),
                         st.integers(1, 500).map(lambda t: torch.tensor([t])))
good_sample = st.fixed_dictionaries(  # mostly valid: reaches stats and subsets
    {"net_input": st.fixed_dictionaries({"src_tokens": good_tokens, "src_lengths": good_lengths})},
    optional={"id": st.one_of(st.text(max_size=6), st.integers(), st.just(np.int64(7))), "extra": values})
sample = st.one_of(good_sample, good_sample,
                   st.fixed_dictionaries({"net_input": net_input}, optional={"id": values, "extra": values}), values)


def _object_array(items: list) -> np.ndarray:
    arr = np.empty(len(items), dtype=object)
    for i, item in enumerate(items):  # one by one: a slice assignment would broadcast nested lists
        arr[i] = item
    return arr


def _write(items: list, how: str, scratch: Path) -> bytes:
    f = io.BytesIO()
    if how == "np.save":  # torch pickles its tensors the default way here (legacy storage bytes)
        np.save(f, _object_array(items), allow_pickle=True)
    elif how == "zero-d":
        arr = np.empty((), dtype=object)
        arr[()] = items
        np.save(f, arr, allow_pickle=True)
    elif how == "protocol 2":  # as numpy 1.x-era files
        arr = _object_array(items)
        np.lib.format.write_array_header_1_0(f, np.lib.format.header_data_from_array_1_0(arr))
        f.write(pickle.dumps(arr, protocol=2))
    else:  # the reproducible writer of s2st-dataset
        return dm.save_npy_dataset(items, scratch).read_bytes()
    return f.getvalue()


@pytest.fixture(scope="module")
def npy_path(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz_npy") / "d.npy"


@settings(max_examples=EXAMPLES["npy_structures"], **FUZZ)
@given(items=st.lists(sample, max_size=4), how=st.sampled_from(["np.save", "zero-d", "protocol 2", "ours"]),
       size=st.one_of(st.none(), st.integers(1, 3)))
def test_fuzz_npy_structures(npy_path, items, how, size):
    try:
        npy_path.write_bytes(_write(items, how, npy_path.with_name("w.npy")))
    except S2STError:  # our writer refuses uint16/32/64 tensors (tested in test_datasets.py)
        reject()
    samples = loads_or_one_line(ds.load_npy_dataset, npy_path, size=size)
    if samples is not None:
        usable(samples)
        round_trip(samples, npy_path.with_name("again.npy"))


def round_trip(samples: list[dict], path: Path) -> None:
    """What loaded, s2st-dataset writes in upstream's format, and both loaders read back the same."""
    try:
        dm.save_npy_dataset(samples, path, torch_tensors=True)
    except S2STError:  # uint16/32/64 have no torch storage type upstream could read
        return
    ours, theirs = ds.load_npy_dataset(path), np.load(path, allow_pickle=True)
    for a, b, c in zip(samples, ours, theirs):
        assert a["id"] == b["id"] == c["id"] or a["id"] != a["id"]  # NaN ids
        for key in ("src_tokens", "src_lengths"):
            same = dict(rtol=0, atol=0, equal_nan=True)  # and the same dtype
            torch.testing.assert_close(b["net_input"][key], c["net_input"][key], **same)
            torch.testing.assert_close(b["net_input"][key], torch.as_tensor(a["net_input"][key]), **same)


# ------------------------------------------------------------------ npy: bytes (truncated, mutated, random)


def _seed_files(scratch: Path) -> list[bytes]:
    good = {"id": "utt", "net_input": {"src_tokens": np.ones((1, 3, 2), np.float32), "src_lengths": np.array([3])}}
    upstream = {"net_input": {"src_tokens": torch.ones(1, 3, 2), "src_lengths": torch.tensor([3])}}
    f = io.BytesIO()
    np.save(f, np.zeros((2, 3), np.float32))
    return [_write([good, good], "np.save", scratch), _write([upstream], "np.save", scratch),
            _write([upstream, good], "ours", scratch), _write([good], "protocol 2", scratch), f.getvalue()]


with tempfile.TemporaryDirectory() as _tmp:
    SEEDS = _seed_files(Path(_tmp) / "seed.npy")
mutations = st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=4)
npy_bytes = st.one_of(
    st.binary(max_size=400),
    st.builds(lambda seed, cut: seed[:cut], st.sampled_from(SEEDS), st.integers(0, 3000)),
    st.builds(lambda seed, muts: bytes(_mutate(seed, muts)), st.sampled_from(SEEDS), mutations),
    st.builds(lambda tail: b"\x93NUMPY\x01\x00" + len(tail).to_bytes(2, "little") + tail, st.binary(max_size=200)),
    st.builds(lambda header, body: SEEDS[0][:128] + body if header else SEEDS[0][:10] + body,
              st.booleans(), st.binary(max_size=300)),
)


def _mutate(seed: bytes, muts: list[tuple[int, int]]) -> bytearray:
    out = bytearray(seed)
    for pos, byte in muts:
        out[pos % len(out)] = byte
    return out


@settings(max_examples=EXAMPLES["npy_bytes"], **FUZZ)
@given(data=npy_bytes)
def test_fuzz_npy_bytes(npy_path, data):
    npy_path.write_bytes(data)
    samples = loads_or_one_line(ds.load_npy_dataset, npy_path)
    if samples is not None:
        usable(samples)


# ------------------------------------------------------------------ text jsonl

json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**80, 2**80), st.floats(allow_nan=False), odd_text),
    lambda kids: st.one_of(st.lists(kids, max_size=3), st.dictionaries(odd_text, kids, max_size=3)), max_leaves=6)
item = st.fixed_dictionaries({}, optional={k: st.one_of(odd_text, json_values)
                                           for k in ("id", "text", "language", "voice", "seed", "instruct", "x")})
good_item = st.builds(lambda i, text, seed: {"id": i, "text": text, "language": "en", "voice": "v", "seed": seed},
                      st.text(min_size=1, max_size=5), odd_text, st.integers(-1, 2**64))
jsonl_line = st.one_of(
    st.builds(json.dumps, st.one_of(good_item, item, json_values), ensure_ascii=st.booleans()),
    odd_text, st.integers(0, 3000).map(lambda n: "[" * n + "]" * (n // 2)))
valid_line = st.builds(lambda i, text, seed: json.dumps({"id": i, "text": text, "language": "en", "voice": "v",
                                                       "seed": seed}, ensure_ascii=False),
                       st.text(min_size=1, max_size=5).filter(str.strip),
                       st.text("ab \u2028\u00e9", min_size=1).filter(str.strip), st.integers(0, 2**63 - 1))
jsonl = st.one_of(st.builds(lambda lines, nl: nl.join(lines).encode(),
                            st.lists(st.one_of(valid_line, valid_line, jsonl_line), max_size=5),
                            st.sampled_from(["\n", "\r\n", "\u2028"])),
                  st.binary(max_size=200))


@settings(max_examples=EXAMPLES["jsonl"], **FUZZ)
@given(content=jsonl, size=st.one_of(st.none(), st.integers(1, 3)))
def test_fuzz_text_jsonl(npy_path, content, size):
    path = npy_path.with_name("t.jsonl")
    path.write_bytes(content)
    items = loads_or_one_line(ds.load_dataset, path, "text", size=size)
    if items is not None:
        assert items and all(isinstance(i, dict) and isinstance(i["text"], str) for i in items)
        event(f"loaded {len(items)} items")
