"""Dataset loaders: safe npy (numpy and upstream torch formats), raw tsv, generation, subsets."""
from __future__ import annotations

import dataclasses
import io
import os
import pickle
import random

import numpy as np
import pytest

from pytest_s2st import dataset_make as dm
from pytest_s2st import datasets as ds
from pytest_s2st.errors import S2STError


def raises_line(fn, *args, **kw) -> str:
    with pytest.raises(S2STError) as ei:
        fn(*args, **kw)
    msg = str(ei.value)
    assert "\n" not in msg
    return msg


def np_sample(i: int, t: int, d: int = 4) -> dict:
    return {"id": i, "net_input": {"src_tokens": np.full((1, t, d), i, np.float32), "src_lengths": np.array([t])}}


# ------------------------------------------------------------------ malicious pickles


class _SystemCall:
    def __init__(self, cmd: str):
        self.cmd = cmd

    def __reduce__(self):
        return (os.system, (self.cmd,))


class _ExecCall:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').write('pwned')",))


def _save_objects(path, objects) -> None:
    arr = np.empty(len(objects), dtype=object)
    arr[:] = objects
    np.save(path, arr, allow_pickle=True)


def test_os_system_payload_refused_and_not_run(tmp_path):
    marker = tmp_path / "system_marker"
    p = tmp_path / "evil.npy"
    evil = {"id": 0, "net_input": {"src_tokens": _SystemCall(f"touch {marker}"), "src_lengths": np.array([1])}}
    _save_objects(p, [np_sample(0, 3), evil])
    msg = raises_line(ds.load_npy_dataset, p)
    assert msg.startswith(f"{p}: refused to unpickle '{os.system.__module__}.system': only plain containers")
    assert not marker.exists()
    # the payload is real: the unrestricted loader runs it (proves the test can fail)
    np.load(p, allow_pickle=True)
    assert marker.exists()


def test_exec_payload_refused_and_not_run(tmp_path):
    marker = tmp_path / "exec_marker"
    p = tmp_path / "evil.npy"
    _save_objects(p, [_ExecCall(str(marker))])
    assert raises_line(ds.load_npy_dataset, p) == (
        f"{p}: refused to unpickle 'builtins.exec': only plain containers, numbers, strings, "
        "numpy arrays and torch tensors are allowed"
    )
    assert not marker.exists()


@pytest.mark.parametrize("module, name", [("numpy", "load"), ("torch", "load"), ("torch.serialization", "load"),
                                          ("collections", "namedtuple"), ("builtins", "eval")])
def test_other_globals_refused(tmp_path, module, name):
    # hand-written pickle: GLOBAL module name, then call it with one string
    payload = b"\x80\x02c" + f"{module}\n{name}\n".encode() + b"X\x01\x00\x00\x00x\x85R."
    p = tmp_path / "g.npy"
    with open(p, "wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": "|O", "fortran_order": False, "shape": (1,)})
        f.write(payload)
    assert raises_line(ds.load_npy_dataset, p).startswith(f"{p}: refused to unpickle '{module}.{name}'")


def test_payload_hidden_in_torch_storage_bytes_refused(tmp_path):
    torch = pytest.importorskip("torch")
    marker = tmp_path / "storage_marker"
    inner = io.BytesIO()
    torch.save(_SystemCall(f"touch {marker}"), inner, _use_new_zipfile_serialization=False)

    class FakeStorage:
        def __reduce__(self):
            return (torch.storage._load_from_bytes, (inner.getvalue(),))

    p = tmp_path / "evil_storage.npy"
    _save_objects(p, [{"id": 0, "net_input": {"src_tokens": FakeStorage(), "src_lengths": np.array([1])}}])
    msg = raises_line(ds.load_npy_dataset, p)
    assert msg.startswith(f"{p}: refused to unpickle '{os.system.__module__}.system' inside a torch storage: only plain")
    assert not marker.exists()


# ------------------------------------------------------------------ legitimate npy files


def test_upstream_torch_npy_round_trips(tmp_path):
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(0)
    upstream = [
        {"id": f"sample_{i}", "net_input": {"src_tokens": torch.randn(1, 5 + i, 80, generator=gen),
                                            "src_lengths": torch.tensor([5 + i])}}
        for i in range(3)
    ]
    upstream[1]["net_input"]["src_tokens"] = upstream[1]["net_input"]["src_tokens"].half()
    upstream[2]["net_input"]["src_tokens"] = torch.nn.Parameter(upstream[2]["net_input"]["src_tokens"])
    p = tmp_path / "upstream.npy"
    np.save(p, upstream, allow_pickle=True)  # exactly upstream save_dataset_npy
    loaded = ds.load_npy_dataset(p)
    assert [s["id"] for s in loaded] == ["sample_0", "sample_1", "sample_2"]
    for got, want in zip(loaded, upstream):
        assert isinstance(got["net_input"]["src_tokens"], torch.Tensor)
        assert got["net_input"]["src_tokens"].dtype == want["net_input"]["src_tokens"].dtype
        assert torch.equal(got["net_input"]["src_tokens"], want["net_input"]["src_tokens"].detach())
        assert torch.equal(got["net_input"]["src_lengths"], want["net_input"]["src_lengths"])
    assert dm.dataset_stats(loaded) == {"n": 3, "max_len": 7, "min_len": 5, "avg_len": 6.0}


def test_numpy_only_npy_loads_with_size(tmp_path):
    samples = [np_sample(i, 3 + i) for i in range(5)]
    samples[2]["id"] = np.int64(2)
    samples[3]["net_input"]["src_tokens"] = np.arange(6, dtype=np.int64).reshape(1, 6)  # MT-style token ids
    p = dm.save_npy_dataset(samples, tmp_path / "np")
    assert p == tmp_path / "np.npy" and p.exists()
    loaded = ds.load_npy_dataset(p)
    assert len(loaded) == 5
    for got, want in zip(loaded, samples):
        assert got["id"] == want["id"]
        np.testing.assert_array_equal(got["net_input"]["src_tokens"], want["net_input"]["src_tokens"])
        assert got["net_input"]["src_tokens"].dtype == want["net_input"]["src_tokens"].dtype
    assert [s["id"] for s in ds.load_npy_dataset(p, size=2)] == [0, 1]
    assert len(ds.load_npy_dataset(p, size=50)) == 5
    assert len(ds.load_dataset(p, "npy", size=3)) == 3


def test_npy_header_version_2(tmp_path):
    arr = np.empty(1, dtype=object)
    arr[:] = [np_sample(0, 2)]
    p = tmp_path / "v2.npy"
    with open(p, "wb") as f:
        np.lib.format.write_array(f, arr, version=(2, 0), allow_pickle=True)
    assert ds.load_npy_dataset(p)[0]["net_input"]["src_lengths"][0] == 2


def test_only_the_kept_samples_are_checked(tmp_path):
    p = dm.save_npy_dataset([np_sample(0, 2), {"id": 1}], tmp_path / "half.npy")
    assert len(ds.load_npy_dataset(p, size=1)) == 1
    assert raises_line(ds.load_npy_dataset, p) == f"{p}: sample 1 has no net_input; {ds.NPY_SCHEMA}"


@pytest.mark.parametrize("bad, expected", [
    ({"id": [3], "net_input": {"src_tokens": np.zeros(1), "src_lengths": np.array([1])}},
     "sample 3 id is a list, expected a string or a number"),
    ({"id": 3}, f"sample 3 has no net_input; {ds.NPY_SCHEMA}"),
    ({"id": 3, "net_input": [1]}, f"sample 3 has a net_input that is a list; {ds.NPY_SCHEMA}"),
    ({"id": 3, "net_input": {"src_tokens": np.zeros(1)}}, "sample 3 has no net_input.src_lengths"),
    ({"id": 3, "net_input": {"src_lengths": np.array([1])}}, "sample 3 has no net_input.src_tokens"),
    ({"id": 3, "net_input": {"src_tokens": [0.0], "src_lengths": np.array([1])}},
     "sample 3 net_input.src_tokens is a list, expected a numpy array or torch tensor"),
    ("not a sample", f"sample 3 is a str, not a dict; {ds.NPY_SCHEMA}"),
])
def test_wrong_structure_gives_clear_line(tmp_path, bad, expected):
    p = tmp_path / "bad.npy"
    _save_objects(p, [np_sample(i, 2) for i in range(3)] + [bad])
    assert raises_line(ds.load_npy_dataset, p) == f"{p}: {expected}"


def test_npy_file_level_errors(tmp_path):
    missing = tmp_path / "missing.npy"
    assert raises_line(ds.load_npy_dataset, missing) == f"{missing}: dataset file not found"
    text = tmp_path / "text.npy"
    text.write_text("hello")
    assert raises_line(ds.load_npy_dataset, text).startswith(f"{text}: not a .npy file")
    numeric = tmp_path / "numeric.npy"
    np.save(numeric, np.zeros((2, 3), np.float32))
    assert raises_line(ds.load_npy_dataset, numeric) == (
        f"{numeric}: expected a list of samples, got a float32 array of shape (2, 3); {ds.NPY_SCHEMA}")
    assert "s2st-dataset random --n 8 --feat-dim 80 --out data.npy" in ds.NPY_SCHEMA
    empty = tmp_path / "empty.npy"
    np.save(empty, np.empty(0, dtype=object), allow_pickle=True)
    assert raises_line(ds.load_npy_dataset, empty) == f"{empty}: dataset is empty"
    truncated = tmp_path / "trunc.npy"
    good = dm.save_npy_dataset([np_sample(0, 50)], tmp_path / "good.npy").read_bytes()
    truncated.write_bytes(good[: len(good) // 2])
    assert raises_line(ds.load_npy_dataset, truncated).startswith(f"{truncated}: cannot unpickle npy contents")


@pytest.mark.parametrize("size", [-1, True, 1.5, "3"])
def test_bad_size(tmp_path, size):
    p = dm.save_npy_dataset([np_sample(0, 2)], tmp_path / "s.npy")
    assert raises_line(ds.load_npy_dataset, p, size=size) == (
        f"{p}: dataset_size must be an integer >= 0 (0: all samples), got {size!r}")


def test_size_zero_is_every_sample_as_upstream(tmp_path):
    p = dm.save_npy_dataset([np_sample(0, 2), np_sample(1, 3), np_sample(2, 4)], tmp_path / "s.npy")
    assert len(ds.load_npy_dataset(p, size=0)) == 3 == len(ds.load_npy_dataset(p, size=None))
    assert len(ds.load_npy_dataset(p, size=2)) == 2


def test_unknown_kind(tmp_path):
    assert raises_line(ds.load_dataset, tmp_path / "x", kind="wav") == (
        f"unknown dataset_type 'wav' for {tmp_path / 'x'}; known: npy, raw, text")


# ------------------------------------------------------------------ raw tsv datasets

def _wav(path, data, sr=16000):
    sf = pytest.importorskip("soundfile")  # installed with the dev extra
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(str(path), data, sr, subtype="FLOAT")


def test_raw_dataset(tmp_path):
    audio = tmp_path / "audio"
    mono = np.linspace(-0.5, 0.5, 1600, dtype=np.float32)
    stereo = np.stack([np.full(800, 0.25, np.float32), np.full(800, -0.75, np.float32)], axis=-1)
    _wav(audio / "a.wav", mono)
    _wav(audio / "sub" / "b.wav", stereo)
    tsv = tmp_path / "m.tsv"
    tsv.write_text("audio\na.wav\t1600\n\nsub/b.wav\t800\n")  # relative root: against the tsv folder
    samples = ds.load_raw_dataset(tsv)
    assert [s["id"] for s in samples] == [0, 1]
    a, b = (s["net_input"] for s in samples)
    assert a["src_tokens"].dtype == np.float32 and a["src_tokens"].shape == (1, 1600)
    np.testing.assert_allclose(a["src_tokens"][0], mono, atol=1e-7)
    assert a["src_lengths"].tolist() == [1600]
    assert b["src_tokens"].shape == (1, 800)
    np.testing.assert_allclose(b["src_tokens"], -0.25, atol=1e-7)  # mean of the two channels
    assert [s["id"] for s in ds.load_dataset(tsv, "raw", size=1)] == [0]
    assert dm.dataset_stats(samples) == {"n": 2, "max_len": 1600, "min_len": 800, "avg_len": 1200.0}


def test_raw_absolute_root(tmp_path):
    _wav(tmp_path / "w" / "a.wav", np.zeros(10, np.float32))
    tsv = tmp_path / "other" / "m.tsv"
    tsv.parent.mkdir()
    tsv.write_text(f"{tmp_path / 'w'}\na.wav\t10\n")
    assert ds.load_raw_dataset(tsv)[0]["net_input"]["src_lengths"].tolist() == [10]


def test_raw_wrong_rate_refused(tmp_path):
    _wav(tmp_path / "a.wav", np.zeros(80, np.float32), sr=8000)
    tsv = tmp_path / "m.tsv"
    tsv.write_text(f"{tmp_path}\na.wav\t80\n")
    assert raises_line(ds.load_raw_dataset, tsv) == (
        f"{tsv}:2: {tmp_path / 'a.wav'} is sampled at 8000 Hz, expected 16000 Hz (not resampled)")
    assert ds.load_raw_dataset(tsv, sample_rate=8000)[0]["net_input"]["src_tokens"].shape == (1, 80)


def test_raw_errors(tmp_path):
    _wav(tmp_path / "a.wav", np.zeros(10, np.float32))
    tsv = tmp_path / "m.tsv"
    tsv.write_text(f"{tmp_path}\na.wav\t10\nmissing.wav\t10\n")
    assert raises_line(ds.load_raw_dataset, tsv) == f"{tsv}:3: audio file not found: {tmp_path / 'missing.wav'}"
    assert len(ds.load_raw_dataset(tsv, size=1)) == 1  # the missing line is beyond the requested size
    (tmp_path / "junk.wav").write_bytes(b"not audio")
    tsv.write_text(f"{tmp_path}\njunk.wav\t10\n")
    assert raises_line(ds.load_raw_dataset, tsv).startswith(f"{tsv}:2: cannot read audio {tmp_path / 'junk.wav'}")
    tsv.write_text(f"{tmp_path}\n")
    assert raises_line(ds.load_raw_dataset, tsv).startswith(f"{tsv}: dataset is empty")
    tsv.write_text("")
    assert raises_line(ds.load_raw_dataset, tsv) == f"{tsv}:1: first line must be the audio root directory"
    assert raises_line(ds.load_raw_dataset, tmp_path / "no.tsv") == f"{tmp_path / 'no.tsv'}: dataset manifest not found"


# ------------------------------------------------------------------ generation, stats, subsets


def test_generate_random_dataset_shapes():
    samples = dm.generate_random_dataset(20, feat_dim=8, min_len=3, max_len=6, seed=4)
    assert [s["id"] for s in samples] == list(range(20))
    lengths = set()
    for s in samples:
        t = int(s["net_input"]["src_lengths"][0])
        lengths.add(t)
        assert 3 <= t <= 6
        assert s["net_input"]["src_tokens"].shape == (1, t, 8)
        assert s["net_input"]["src_tokens"].dtype == np.float32
    assert len(lengths) > 1
    stats = dm.dataset_stats(samples)
    assert stats["n"] == 20 and stats["min_len"] == min(lengths) and stats["max_len"] == max(lengths)


def test_generated_npy_is_deterministic(tmp_path):
    a = dm.save_npy_dataset(dm.generate_random_dataset(5, seed=1), tmp_path / "a.npy")
    b = dm.save_npy_dataset(dm.generate_random_dataset(5, seed=1), tmp_path / "b.npy")
    c = dm.save_npy_dataset(dm.generate_random_dataset(5, seed=2), tmp_path / "c.npy")
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()
    loaded = ds.load_npy_dataset(a)
    for got, want in zip(loaded, dm.generate_random_dataset(5, seed=1)):
        np.testing.assert_array_equal(got["net_input"]["src_tokens"], want["net_input"]["src_tokens"])


@pytest.mark.parametrize("kw", [dict(n=0), dict(n=2, feat_dim=0), dict(n=2, min_len=10, max_len=5), dict(n=2, min_len=0)])
def test_generate_bad_args(kw):
    raises_line(dm.generate_random_dataset, **kw)


def test_dataset_stats_empty():
    assert raises_line(dm.dataset_stats, []) == "dataset_stats: dataset is empty"


def test_make_subsets():
    samples = [np_sample(i, t, d=1) for i, t in enumerate([5, 1, 9, 3, 7, 2, 8])]
    subsets = dm.make_subsets(samples, n=3, seed=7)
    lens = {k: [int(s["net_input"]["src_lengths"][0]) for s in v] for k, v in subsets.items()}
    assert lens["short"] == [1, 2, 3]
    assert lens["long"] == [9, 8, 7]
    rand_ids = [s["id"] for s in subsets["random"]]
    assert len(rand_ids) == 3 and len(set(rand_ids)) == 3
    assert rand_ids == [s["id"] for s in dm.make_subsets(samples, n=3, seed=7)["random"]]
    draws = {tuple(s["id"] for s in dm.make_subsets(samples, n=3, seed=k)["random"]) for k in range(10)}
    assert len(draws) > 1  # the seed matters
    everything = dm.make_subsets(samples, n=500)
    assert all(len(v) == 7 for v in everything.values())
    assert raises_line(dm.make_subsets, samples, n=0) == "make_subsets: n must be positive, got 0"


def test_make_subsets_ref_ids():
    samples = [np_sample(i, i + 1, d=1) for i in range(6)]
    for s, name in zip(samples, ["test_a", "test_b", "c", "d", "e", "f"]):
        s["id"] = name
    subsets = dm.make_subsets(samples, n=10, ref_ids={"a", "dev_c", "e"})  # upstream id matching rules
    assert sorted(s["id"] for s in subsets["random"]) == ["c", "e", "test_a"]
    assert [s["id"] for s in subsets["short"]] == ["test_a", "c", "e"]


def test_numpy1_protocol2_npy_loads(tmp_path):
    # numpy 1.x wrote numpy.core.* globals; protocol 2 pickles bytes through _codecs.encode
    arr = np.empty(2, dtype=object)
    arr[:] = [np_sample(0, 3), np_sample(1, 4)]
    payload = pickle.dumps(arr, protocol=2).replace(b"cnumpy._core.", b"cnumpy.core.")
    assert b"cnumpy.core.multiarray\n_reconstruct" in payload and b"c_codecs\nencode" in payload
    p = tmp_path / "old.npy"
    with open(p, "wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": "|O", "fortran_order": False, "shape": (2,)})
        f.write(payload)
    loaded = ds.load_npy_dataset(p)
    np.testing.assert_array_equal(loaded[1]["net_input"]["src_tokens"], arr[1]["net_input"]["src_tokens"])


def test_npy_with_an_unknown_format_version_is_one_clear_line(tmp_path):
    bad = tmp_path / "g.npy"
    bad.write_bytes(b"\x93NUMPY\x07\x00garbage")
    with pytest.raises(S2STError, match=r"g.npy: not a .npy file: .*version"):
        ds.load_npy_dataset(bad)


def test_text_dataset_is_the_validated_workload_format(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"id": "a", "text": "hello", "language": "en", "voice": "v", "seed": 1}\n'
                    '{"id": "b", "text": "world", "language": "en", "voice": "v", "seed": 2}\n')
    assert [s["id"] for s in ds.load_dataset(path, "text", size=1)] == ["a"]
    path.write_text('{"id": "a", "language": "en"}\n')
    with pytest.raises(S2STError, match="t.jsonl:1"):
        ds.load_dataset(path, "text")


# ------------------------------------------------------------------ upstream's own formats


def _upstream_random_dataset(n: int, t_min: int, t_max: int, d: int) -> list[dict]:
    """upstream data_utils.generate_random_dataset(t_min, t_max, B=1, D=d, dataset_size=n) line for
    line (random.seed(1) and RandomState(30) as module globals there): no id, torch tensors."""
    torch = pytest.importorskip("torch")
    py_random, random_number_generator = random.Random(1), np.random.RandomState(30)
    t_values = [py_random.randint(t_min, t_max) for _ in range(n)]
    return [{"net_input": {"src_tokens": torch.tensor(random_number_generator.randn(1, t, d)).float(),
                           "src_lengths": torch.tensor([t])}} for t in t_values]


def test_upstream_random_dataset_without_ids_loads_with_index_ids(tmp_path):
    torch = pytest.importorskip("torch")
    dataset = _upstream_random_dataset(6, 3, 9, 4)
    p = tmp_path / "random_dataset.npy"
    np.save(p, dataset)  # upstream save_dataset_npy, exactly
    loaded = ds.load_npy_dataset(p)
    assert [s["id"] for s in loaded] == list(range(6))
    for got, want in zip(loaded, dataset):
        assert sorted(got) == ["id", "net_input"]
        for key in ("src_tokens", "src_lengths"):
            assert isinstance(got["net_input"][key], torch.Tensor)
            assert got["net_input"][key].dtype == want["net_input"][key].dtype
            assert torch.equal(got["net_input"][key], want["net_input"][key])
    lengths = [s["net_input"]["src_lengths"].item() for s in dataset]
    assert dm.dataset_stats(loaded) == {"n": 6, "max_len": max(lengths), "min_len": min(lengths),
                                        "avg_len": sum(lengths) / 6}
    assert [s["id"] for s in ds.load_npy_dataset(p, size=2)] == [0, 1]
    dataset[0]["id"] = "first"  # ids that are there stay; the index fills only the missing ones
    np.save(p, dataset)
    assert [s["id"] for s in ds.load_npy_dataset(p)][:3] == ["first", 1, 2]


def test_torch_tensor_files_serve_upstream_and_us(tmp_path):
    """What s2st-dataset writes: upstream's np.load then src_tokens.size() works, and ours reads
    the same values without running pickled code."""
    torch = pytest.importorskip("torch")
    samples = dm.generate_random_dataset(4, feat_dim=3, min_len=2, max_len=6, seed=3)
    p = dm.save_npy_dataset(samples, tmp_path / "t.npy", torch_tensors=True)
    theirs = np.load(p, allow_pickle=True)  # upstream load_dataset_npy
    ours = ds.load_npy_dataset(p)
    assert len(theirs) == len(ours) == 4
    for want, up, got in zip(samples, theirs, ours):
        assert up["id"] == got["id"] == want["id"]
        bsz, src_len = up["net_input"]["src_tokens"].size()[:2]  # fairseq's SequenceGenerator
        assert (bsz, src_len) == want["net_input"]["src_tokens"].shape[:2]
        assert up["net_input"]["src_lengths"].item() == src_len  # upstream get_dataset_stats
        for key in ("src_tokens", "src_lengths"):
            assert isinstance(got["net_input"][key], torch.Tensor)
            assert torch.equal(got["net_input"][key], up["net_input"][key])
            np.testing.assert_array_equal(got["net_input"][key].numpy(), want["net_input"][key])
    again = dm.save_npy_dataset(samples, tmp_path / "again.npy", torch_tensors=True)
    assert again.read_bytes() == p.read_bytes()


def test_tensors_upstream_cannot_store_are_one_line(tmp_path):
    pytest.importorskip("torch")
    samples = [{"id": 0, "net_input": {"src_tokens": np.arange(4, dtype=np.uint16).reshape(1, 4),
                                       "src_lengths": np.array([4])}}]
    assert raises_line(dm.save_npy_dataset, samples, tmp_path / "u.npy", torch_tensors=True) == (
        "cannot write a torch.uint16 tensor in the upstream npy format")
    assert not (tmp_path / "u.npy").exists()


def _npy_with_pickle(path, payload: bytes, shape=(1,)):
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": "|O", "fortran_order": False, "shape": shape})
        f.write(payload)
    return path


@pytest.mark.parametrize("module, name", [
    ("torch._utils", "_rebuild_tensor"), ("torch._utils", "_rebuild_tensor_v3"), ("torch", "Size"),
    ("torch", "float32"), ("torch._tensor", "_rebuild_from_type_v2"), ("torch._utils", "_rebuild_qtensor"),
    ("torch._utils", "_rebuild_parameter_with_state"), ("torch.nn.modules.linear", "Linear"),
])
def test_only_the_tensor_rebuild_globals_are_allowed(tmp_path, module, name):
    pytest.importorskip("torch")
    payload = b"\x80\x02c" + f"{module}\n{name}\n".encode() + b"X\x01\x00\x00\x00x\x85R."
    p = _npy_with_pickle(tmp_path / "t.npy", payload)
    assert raises_line(ds.load_npy_dataset, p) == (
        f"{p}: refused to unpickle '{module}.{name}': only plain containers, numbers, strings, "
        "numpy arrays and torch tensors are allowed")


class _Reduce:
    """Pickles as fn(*args): crafts what a hostile file could hold, with allowed globals only."""

    def __init__(self, fn, *args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return (self.fn, self.args)


def _storage_bytes(t, deflate: bool = False) -> bytes:
    import torch
    import zipfile

    buf = io.BytesIO()
    torch.save(torch.storage.TypedStorage(wrap_storage=t.untyped_storage(), dtype=t.dtype, _internal=True), buf)
    if not deflate:
        return buf.getvalue()
    src, out = zipfile.ZipFile(io.BytesIO(buf.getvalue())), io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for info in src.infolist():
            z.writestr(info.filename, src.read(info.filename))
    return out.getvalue()


def _hostile_tensor(case: str):
    import collections

    import torch

    storage = _Reduce(torch.storage._load_from_bytes, _storage_bytes(torch.zeros(1)))
    if case == "zero-stride view":  # 10**8 elements over one stored float
        return _Reduce(torch._utils._rebuild_tensor_v2, storage, 0, (1, 10**8), (0, 0), False,
                       collections.OrderedDict())
    if case == "backward hooks":
        return _Reduce(torch._utils._rebuild_tensor_v2, storage, 0, (1, 1), (1, 1), False,
                       collections.OrderedDict([(0, 1)]))
    # a 100 KB zip record inflating to 100 MB (torch's own writer never compresses)
    deflated = _Reduce(torch.storage._load_from_bytes, _storage_bytes(torch.zeros(25_000_000), deflate=True))
    return _Reduce(torch._utils._rebuild_tensor_v2, deflated, 0, (1, 25_000_000), (25_000_000, 1), False,
                   collections.OrderedDict())


@pytest.mark.parametrize("case, expected", [
    ("ndarray called", "TypeError: '_Token' object is not callable"),
    ("bytearray(n)", "ValueError: bytearray is only rebuilt from the bytes it holds"),
    ("zero-stride view", "ValueError: a tensor of 100000000 elements views a storage of 1"),
    ("backward hooks", "ValueError: a tensor carries backward hooks"),
    ("deflated storage", "ValueError: a torch storage holds a compressed or oversized zip record"),
])
def test_allowed_globals_cannot_build_more_than_the_file_holds(tmp_path, case, expected):
    """Allowed rebuilders called with hostile arguments: each would load (uninitialised or
    expanded memory far beyond the file's size, or hooks) through an unguarded allow-list."""
    pytest.importorskip("torch")
    if case == "ndarray called":
        tokens, sample_id = _Reduce(np.ndarray, (1, 10**8)), 0
    elif case == "bytearray(n)":
        tokens, sample_id = np.zeros((1, 2), np.float32), _Reduce(bytearray, 10**8)
    else:
        tokens, sample_id = _hostile_tensor(case), 0
    p = tmp_path / "hostile.npy"
    _save_objects(p, [{"id": sample_id, "net_input": {"src_tokens": tokens, "src_lengths": np.array([1])}}])
    assert p.stat().st_size < 200_000
    assert raises_line(ds.load_npy_dataset, p) == f"{p}: cannot unpickle npy contents: {expected}"


class _ReduceState(_Reduce):
    def __init__(self, fn, args, state):
        super().__init__(fn, *args)
        self.state = state

    def __reduce__(self):
        return (self.fn, self.args, self.state)


def _array_with_state(shape, dtype, items):
    from numpy._core.multiarray import _reconstruct  # what pickling an ndarray writes

    return _ReduceState(_reconstruct, (np.ndarray, (0,), b"b"), (1, shape, dtype, False, items))


@pytest.mark.parametrize("case", ["object list shorter than the shape", "byte-swapped object dtype"])
def test_states_that_crash_numpy_are_refused(tmp_path, case):
    """numpy 2.4 trusts pickled states: np.load(allow_pickle=True), upstream's loader, segfaults on
    both; ours refuses them in one line (run in subprocesses: a regression must not kill pytest)."""
    import subprocess
    import sys

    if case == "object list shorter than the shape":
        obj, shape = _array_with_state((5,), np.dtype(object), [np_sample(0, 2)]), (5,)
        expected = "a numpy array's pickled data does not fit its shape (5,) and dtype object"
    else:
        swapped = _ReduceState(np.dtype, ("O8", False, True), (3, ">", None, None, None, -1, -1, 63))
        obj, shape = _array_with_state((1,), swapped, [np_sample(0, 2)]), (1,)
        expected = "a numpy dtype's pickled state does not match the dtype object"
    p = _npy_with_pickle(tmp_path / "crash.npy", pickle.dumps(obj, protocol=2), shape)
    ours = subprocess.run([sys.executable, "-c", "import sys\nfrom pytest_s2st import datasets as ds\n"
                           "try:\n    ds.load_npy_dataset(sys.argv[1])\nexcept ds.S2STError as e:\n    print(e)", str(p)],
                          capture_output=True, text=True, timeout=120)
    assert ours.returncode == 0, ours.stderr[-1000:]
    assert ours.stdout.splitlines() == [f"{p}: cannot unpickle npy contents: ValueError: {expected}"]
    theirs = subprocess.run([sys.executable, "-c", "import numpy as np, sys\na = np.load(sys.argv[1], allow_pickle=True)\n"
                             "print(a.dtype == np.dtype(object), a[len(a) - 1])", str(p)],
                            capture_output=True, text=True, timeout=120)
    assert theirs.returncode != 0  # -11 (SIGSEGV) with numpy 2.4: the danger is real


# ------------------------------------------------------------------ raw manifests, read as fairseq reads them


@pytest.mark.parametrize("line, expected", [
    ("a.wav\tten", "frame count 'ten' is not a whole number"),
    ("a.wav\t1.5", "frame count '1.5' is not a whole number"),
    ("a.wav\t-10", "frame count '-10' is not a whole number"),
    ("a.wav\t1_0", "frame count '1_0' is not a whole number"),
    ("a.wav\t\u0661\u0660", "frame count '\u0661\u0660' is not a whole number"),  # int() would take it
    ("a.wav\t10\tref\textra", "expected 2 tab-separated columns (audio path, frame count) and an optional third (the reference translation), got 4"),
    ("a.wav\t\t10", "frame count '' is not a whole number"),
    ("a.wav", "expected 2 tab-separated columns (audio path, frame count) and an optional third (the reference translation), got 1"),
    ("a.wav 10", "expected 2 tab-separated columns (audio path, frame count) and an optional third (the reference translation), got 1"),
    ("a.wav\t0", "frame count is 0: every entry needs audio"),
    ("a.wav\t" + "9" * 30, "frame count (" + "9" * 30 + ") exceeds LIMITS.audio_samples = 268435456"),
])
def test_raw_manifest_lines_are_read_strictly(tmp_path, line, expected):
    _wav(tmp_path / "a.wav", np.zeros(10, np.float32))
    tsv = tmp_path / "m.tsv"
    tsv.write_text(f"{tmp_path}\na.wav\t10\n{line}\n")
    assert raises_line(ds.load_raw_dataset, tsv) == f"{tsv}:3: {expected}"
    assert raises_line(ds.load_raw_dataset, tsv, size=1) == f"{tsv}:3: {expected}"  # every line is checked


def test_raw_manifest_third_column_is_the_reference_translation(tmp_path):
    _wav(tmp_path / "a.wav", np.zeros(10, np.float32))
    tsv = tmp_path / "m.tsv"
    tsv.write_text(f"{tmp_path}\na.wav\t10\thola mundo \na.wav\t10\n")
    samples = ds.load_raw_dataset(tsv)
    assert samples[0]["tgt_text"] == "hola mundo" and "tgt_text" not in samples[1]


@pytest.mark.parametrize("ref, expected", [
    (7, "is a int, expected a string (the reference translation)"),
    ("a\nb", "holds a line break: a reference is one line"),
    ("x" * 70_000, "has 70000 characters, over LIMITS.line_chars = 65536"),
])
def test_npy_reference_translations_are_checked(tmp_path, ref, expected):
    path = dm.save_npy_dataset([{"id": 0, "net_input": {"src_tokens": np.ones((1, 3), np.float32),
                                                       "src_lengths": np.array([3])}, "tgt_text": ref}],
                               tmp_path / "d.npy")
    assert raises_line(ds.load_npy_dataset, path) == f"{path}: sample 0 tgt_text {expected}"


def test_raw_header_only_wav_is_refused(tmp_path):
    _wav(tmp_path / "empty.wav", np.zeros(0, np.float32))  # a valid WAV header, no frames
    tsv = tmp_path / "m.tsv"
    tsv.write_text(f"{tmp_path}\nempty.wav\t16000\n")
    assert raises_line(ds.load_raw_dataset, tsv) == f"{tsv}:2: {tmp_path / 'empty.wav'} has no audio frames"


def test_raw_odd_paths_are_one_line(tmp_path):
    tsv = tmp_path / "m.tsv"
    tsv.write_text(f"{tmp_path}\nx\u2028y\x85.wav\t10\n")  # line breaks for str.splitlines, not for fairseq
    assert raises_line(ds.load_raw_dataset, tsv) == f"{tsv}:2: audio file not found: {tmp_path}/x\\u2028y\\x85.wav"
    tsv.write_text(f"{tmp_path}\n{'n' * 5000}.wav\t10\n")  # ENAMETOOLONG: Path.is_file() raises it
    assert raises_line(ds.load_raw_dataset, tsv).startswith(f"{tsv}:2: cannot read audio {tmp_path}/nnn")
    tsv.write_text("~\x00x\na.wav\t10\n")  # expanduser's user lookup raises ValueError on a NUL
    assert raises_line(ds.load_raw_dataset, tsv) == f"{tsv}:1: audio root '~\\x00x' is not a valid path"


# ------------------------------------------------------------------ bounds: LIMITS, one place


def _limit(monkeypatch, **kw) -> None:
    monkeypatch.setattr(ds, "LIMITS", ds.Limits(**kw))  # the others at their defaults


def test_limits_live_in_one_place():
    assert {f.name for f in dataclasses.fields(ds.Limits)} == {
        "samples", "line_chars", "text_bytes", "npy_bytes", "npy_header_bytes", "pickle_ops",
        "audio_bytes", "audio_samples", "audio_samples_total"}
    assert all(v > 0 for v in dataclasses.asdict(ds.LIMITS).values())


def test_manifest_bounds(tmp_path, monkeypatch):
    _wav(tmp_path / "a.wav", np.zeros(10, np.float32))
    tsv = tmp_path / "m.tsv"
    tsv.write_text(f".\na.wav\t10\n{'b' * 30}.wav\t10\na.wav\t10\n")
    _limit(monkeypatch, line_chars=36)
    assert raises_line(ds.load_raw_dataset, tsv) == f"{tsv}:3: line length (37 characters) exceeds LIMITS.line_chars = 36"
    _limit(monkeypatch, line_chars=100, samples=2)
    assert raises_line(ds.load_raw_dataset, tsv) == f"{tsv}: entries (more than 2) exceeds LIMITS.samples = 2"
    size = tsv.stat().st_size
    _limit(monkeypatch, samples=100, text_bytes=size - 1)
    assert raises_line(ds.load_raw_dataset, tsv) == (
        f"{tsv}: dataset manifest size ({size} bytes) exceeds LIMITS.text_bytes = {size - 1}")


def test_audio_bounds(tmp_path, monkeypatch):
    _wav(tmp_path / "a.wav", np.zeros(10, np.float32))
    _wav(tmp_path / "b.wav", np.zeros(10, np.float32))
    tsv = tmp_path / "m.tsv"
    tsv.write_text(f"{tmp_path}\na.wav\t10\nb.wav\t10\n")
    size = (tmp_path / "a.wav").stat().st_size
    _limit(monkeypatch, audio_bytes=size - 1)
    assert raises_line(ds.load_raw_dataset, tsv) == (
        f"{tsv}:2: size of {tmp_path / 'a.wav'} ({size} bytes) exceeds LIMITS.audio_bytes = {size - 1}")
    _limit(monkeypatch, audio_samples=9)
    assert raises_line(ds.load_raw_dataset, tsv) == f"{tsv}:2: frame count (10) exceeds LIMITS.audio_samples = 9"
    tsv.write_text(f"{tmp_path}\na.wav\t9\n")  # the manifest understates: the header is checked too
    assert raises_line(ds.load_raw_dataset, tsv) == (
        f"{tsv}:2: frames x channels of {tmp_path / 'a.wav'} (10) exceeds LIMITS.audio_samples = 9")
    tsv.write_text(f"{tmp_path}\na.wav\t10\nb.wav\t10\n")
    _limit(monkeypatch, audio_samples_total=15)
    assert raises_line(ds.load_raw_dataset, tsv) == (
        f"{tsv}:3: audio samples so far (20) exceeds LIMITS.audio_samples_total = 15")


def test_a_fifo_is_refused_not_waited_on(tmp_path):
    import threading

    fifo = tmp_path / "m.tsv"
    os.mkfifo(fifo)
    results = []
    for kind in ("raw", "npy", "text"):
        worker = threading.Thread(target=lambda k=kind: results.append(raises_line(ds.load_dataset, fifo, k)),
                                  daemon=True)
        worker.start()
        worker.join(timeout=10)
        assert not worker.is_alive(), f"{kind}: still reading the FIFO"
    assert all(msg.startswith(f"{fifo}: ") and msg.endswith("is not a regular file") for msg in results)
    assert len(results) == 3


def test_jsonl_bounds(tmp_path, monkeypatch):
    path = tmp_path / "t.jsonl"
    line = '{"id": "%s", "text": "hello", "language": "en", "voice": "v", "seed": 1}'
    path.write_text("\n".join(line % i for i in range(3)) + "\n")
    assert len(ds.load_dataset(path, "text")) == 3
    _limit(monkeypatch, line_chars=60)
    assert raises_line(ds.load_dataset, path, "text") == (
        f"{path}:1: line length (71 characters) exceeds LIMITS.line_chars = 60")
    _limit(monkeypatch, samples=2)
    assert raises_line(ds.load_dataset, path, "text") == f"{path}: items (more than 2) exceeds LIMITS.samples = 2"
    size = path.stat().st_size
    _limit(monkeypatch, text_bytes=100)
    assert raises_line(ds.load_dataset, path, "text") == (
        f"{path}: text dataset size ({size} bytes) exceeds LIMITS.text_bytes = 100")
    monkeypatch.undo()
    path.write_text("[" * 50_000 + "\n")  # json.loads recursion
    assert str(path) in raises_line(ds.load_dataset, path, "text")


def test_npy_bounds(tmp_path, monkeypatch):
    p = dm.save_npy_dataset([np_sample(i, 2) for i in range(3)], tmp_path / "d.npy")
    size = p.stat().st_size
    _limit(monkeypatch, npy_bytes=size - 1)
    assert raises_line(ds.load_npy_dataset, p) == (
        f"{p}: dataset file size ({size} bytes) exceeds LIMITS.npy_bytes = {size - 1}")
    _limit(monkeypatch, npy_header_bytes=100)
    assert raises_line(ds.load_npy_dataset, p) == (
        f"{p}: npy header length (118 bytes) exceeds LIMITS.npy_header_bytes = 100")
    _limit(monkeypatch, samples=2)
    assert raises_line(ds.load_npy_dataset, p) == (
        f"{p}: objects in the npy header's shape (3) exceeds LIMITS.samples = 2")
    _limit(monkeypatch, pickle_ops=20)
    assert raises_line(ds.load_npy_dataset, p) == f"{p}: pickle opcodes (more than 20) exceeds LIMITS.pickle_ops = 20"
    zero_d = tmp_path / "zero_d.npy"  # a 0-d object array holding the list: the header says 1 object
    np.save(zero_d, _zero_d([np_sample(i, 2) for i in range(3)]), allow_pickle=True)
    _limit(monkeypatch, samples=2)
    assert raises_line(ds.load_npy_dataset, zero_d) == f"{zero_d}: samples (3) exceeds LIMITS.samples = 2"


def _zero_d(obj) -> np.ndarray:
    arr = np.empty((), dtype=object)
    arr[()] = obj
    return arr


def test_pickle_length_claims_beyond_the_file_allocate_nothing(tmp_path):
    # BINBYTES8 claiming 1 TiB, and a protocol-4 FRAME claiming 1 TiB, in a 40-byte file
    for payload in (b"\x80\x04\x8e" + (2**40).to_bytes(8, "little") + b"abc.",
                    b"\x80\x04\x95" + (2**40).to_bytes(8, "little") + b"N."):
        p = _npy_with_pickle(tmp_path / "claim.npy", payload)
        msg = raises_line(ds.load_npy_dataset, p)
        assert msg.startswith(f"{p}: cannot unpickle npy contents: ValueError: "), msg
