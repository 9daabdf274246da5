"""Dataset loaders: safe npy (numpy and upstream torch formats), raw tsv, generation, subsets."""
from __future__ import annotations

import io
import os
import pickle

import numpy as np
import pytest

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
    assert ds.dataset_stats(loaded) == {"n": 3, "max_len": 7, "min_len": 5, "avg_len": 6.0}


def test_numpy_only_npy_loads_with_size(tmp_path):
    samples = [np_sample(i, 3 + i) for i in range(5)]
    samples[2]["id"] = np.int64(2)
    samples[3]["net_input"]["src_tokens"] = np.arange(6, dtype=np.int64).reshape(1, 6)  # MT-style token ids
    p = ds.save_npy_dataset(samples, tmp_path / "np")
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
    p = ds.save_npy_dataset([np_sample(0, 2), {"id": 1}], tmp_path / "half.npy")
    assert len(ds.load_npy_dataset(p, size=1)) == 1
    assert raises_line(ds.load_npy_dataset, p) == f"{p}: sample 1 has no net_input"


@pytest.mark.parametrize("bad, expected", [
    ({"net_input": {"src_tokens": np.zeros(1), "src_lengths": np.array([1])}}, "sample 3 has no id"),
    ({"id": 3}, "sample 3 has no net_input"),
    ({"id": 3, "net_input": [1]}, "sample 3 has a net_input that is a list"),
    ({"id": 3, "net_input": {"src_tokens": np.zeros(1)}}, "sample 3 has no net_input.src_lengths"),
    ({"id": 3, "net_input": {"src_lengths": np.array([1])}}, "sample 3 has no net_input.src_tokens"),
    ({"id": 3, "net_input": {"src_tokens": [0.0], "src_lengths": np.array([1])}},
     "sample 3 net_input.src_tokens is a list, expected a numpy array or torch tensor"),
    ("not a sample", "sample 3 is a str, not a dict"),
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
        f"{numeric}: expected a list of samples, got a float32 array of shape (2, 3)")
    empty = tmp_path / "empty.npy"
    np.save(empty, np.empty(0, dtype=object), allow_pickle=True)
    assert raises_line(ds.load_npy_dataset, empty) == f"{empty}: dataset is empty"
    truncated = tmp_path / "trunc.npy"
    good = ds.save_npy_dataset([np_sample(0, 50)], tmp_path / "good.npy").read_bytes()
    truncated.write_bytes(good[: len(good) // 2])
    assert raises_line(ds.load_npy_dataset, truncated).startswith(f"{truncated}: cannot unpickle npy contents")


@pytest.mark.parametrize("size", [0, -1, True, 1.5, "3"])
def test_bad_size(tmp_path, size):
    p = ds.save_npy_dataset([np_sample(0, 2)], tmp_path / "s.npy")
    assert raises_line(ds.load_npy_dataset, p, size=size) == f"{p}: dataset_size must be a positive integer, got {size!r}"


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
    assert ds.dataset_stats(samples) == {"n": 2, "max_len": 1600, "min_len": 800, "avg_len": 1200.0}


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
    samples = ds.generate_random_dataset(20, feat_dim=8, min_len=3, max_len=6, seed=4)
    assert [s["id"] for s in samples] == list(range(20))
    lengths = set()
    for s in samples:
        t = int(s["net_input"]["src_lengths"][0])
        lengths.add(t)
        assert 3 <= t <= 6
        assert s["net_input"]["src_tokens"].shape == (1, t, 8)
        assert s["net_input"]["src_tokens"].dtype == np.float32
    assert len(lengths) > 1
    stats = ds.dataset_stats(samples)
    assert stats["n"] == 20 and stats["min_len"] == min(lengths) and stats["max_len"] == max(lengths)


def test_generated_npy_is_deterministic(tmp_path):
    a = ds.save_npy_dataset(ds.generate_random_dataset(5, seed=1), tmp_path / "a.npy")
    b = ds.save_npy_dataset(ds.generate_random_dataset(5, seed=1), tmp_path / "b.npy")
    c = ds.save_npy_dataset(ds.generate_random_dataset(5, seed=2), tmp_path / "c.npy")
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()
    loaded = ds.load_npy_dataset(a)
    for got, want in zip(loaded, ds.generate_random_dataset(5, seed=1)):
        np.testing.assert_array_equal(got["net_input"]["src_tokens"], want["net_input"]["src_tokens"])


@pytest.mark.parametrize("kw", [dict(n=0), dict(n=2, feat_dim=0), dict(n=2, min_len=10, max_len=5), dict(n=2, min_len=0)])
def test_generate_bad_args(kw):
    raises_line(ds.generate_random_dataset, **kw)


def test_dataset_stats_empty():
    assert raises_line(ds.dataset_stats, []) == "dataset_stats: dataset is empty"


def test_make_subsets():
    samples = [np_sample(i, t, d=1) for i, t in enumerate([5, 1, 9, 3, 7, 2, 8])]
    subsets = ds.make_subsets(samples, n=3, seed=7)
    lens = {k: [int(s["net_input"]["src_lengths"][0]) for s in v] for k, v in subsets.items()}
    assert lens["short"] == [1, 2, 3]
    assert lens["long"] == [9, 8, 7]
    rand_ids = [s["id"] for s in subsets["random"]]
    assert len(rand_ids) == 3 and len(set(rand_ids)) == 3
    assert rand_ids == [s["id"] for s in ds.make_subsets(samples, n=3, seed=7)["random"]]
    draws = {tuple(s["id"] for s in ds.make_subsets(samples, n=3, seed=k)["random"]) for k in range(10)}
    assert len(draws) > 1  # the seed matters
    everything = ds.make_subsets(samples, n=500)
    assert all(len(v) == 7 for v in everything.values())
    assert raises_line(ds.make_subsets, samples, n=0) == "make_subsets: n must be positive, got 0"


def test_make_subsets_ref_ids():
    samples = [np_sample(i, i + 1, d=1) for i in range(6)]
    for s, name in zip(samples, ["test_a", "test_b", "c", "d", "e", "f"]):
        s["id"] = name
    subsets = ds.make_subsets(samples, n=10, ref_ids={"a", "dev_c", "e"})  # upstream id matching rules
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
