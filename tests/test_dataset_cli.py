"""s2st-dataset: subsets from a real fairseq speech_to_text subset or an npy, random data, stats."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from pytest_s2st.cli.dataset import main
from pytest_s2st.dataset_make import dataset_stats, save_npy_dataset
from pytest_s2st.datasets import load_npy_dataset

FEAT = 8
# (id, frames): distinct lengths except one tie (utt3/utt7), in no particular order
UTTS = [("utt0", 12), ("utt1", 30), ("utt2", 7), ("utt3", 19), ("utt4", 25), ("utt5", 9), ("utt6", 41),
        ("utt7", 19), ("utt8", 15)]
STATS_RE = re.compile(r"(\S+) dataset stats : num_samples=(\d+) max_len = (\d+) min_len = (\d+) avg_len = (\S+)")
UPSTREAM_REL = "examples/speech_to_speech/benchmarking/data_utils.py"  # shipped inside the fairseq wheel


def run(capsys, *argv) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def stats_of(out: str) -> dict[str, tuple]:
    return {m[1]: (int(m[2]), int(m[3]), int(m[4]), float(m[5])) for m in STATS_RE.finditer(out)}


def expect(lengths: list[int]) -> tuple:
    return len(lengths), max(lengths), min(lengths), sum(lengths) / len(lengths)


def lengths(samples: list[dict]) -> list[int]:
    return [int(np.asarray(s["net_input"]["src_lengths"]).reshape(-1)[0]) for s in samples]


@pytest.fixture(scope="module")
def s2t_dir(tmp_path_factory) -> Path:
    """A speech_to_text data dir as fairseq reads it: config.yaml, dict, test.tsv, .npy filterbanks."""
    pytest.importorskip("fairseq")
    d = tmp_path_factory.mktemp("s2t")
    (d / "fbank").mkdir()
    (d / "config.yaml").write_text(yaml.safe_dump({"input_channels": 1, "input_feat_per_channel": FEAT,
                                                   "vocab_filename": "dict.txt", "audio_root": str(d)}))
    (d / "dict.txt").write_text("hello 1\nworld 1\n")
    rng = np.random.RandomState(7)
    rows = ["id\taudio\tn_frames\ttgt_text\tspeaker"]
    for uid, t in UTTS:
        np.save(d / "fbank" / f"{uid}.npy", rng.randn(t, FEAT).astype(np.float32))
        rows.append(f"{uid}\tfbank/{uid}.npy\t{t}\thello world\tspk0")
    (d / "test.tsv").write_text("\n".join(rows) + "\n")
    return d


def out_files(out: Path, token: str = "") -> dict[str, Path]:
    return {k: out / f"{k}_dataset{token}w_ids.npy" for k in ("random", "short", "long")}


# ------------------------------------------------------------------ subsets from a fairseq subset


def test_subsets_from_fairseq_subset(s2t_dir, tmp_path, capsys):
    rc, out, err = run(capsys, "subsets", "--data", s2t_dir, "--subset", "test", "--task", "speech_to_text",
                       "--n", 4, "--dataset-save-token", "tk", "--out", tmp_path / "o")
    assert rc == 0, err
    files = out_files(tmp_path / "o", "_tk_")
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == sorted(p.name for p in files.values())
    by_id = dict(UTTS)
    subsets = {k: load_npy_dataset(p) for k, p in files.items()}
    for kind, samples in subsets.items():
        assert len(samples) == 4
        for s in samples:  # features and lengths are the ones on disk, batch of one
            feats = np.load(s2t_dir / "fbank" / f"{s['id']}.npy")
            assert tuple(s["net_input"]["src_tokens"].shape) == (1, *feats.shape)
            np.testing.assert_array_equal(s["net_input"]["src_tokens"][0].numpy(), feats)
            assert lengths([s]) == [by_id[s["id"]]]
            assert s["tgt_text"] == "hello world"  # the manifest's reference, kept for the quality gate
    all_lengths = sorted(by_id.values())
    assert lengths(subsets["short"]) == all_lengths[:4]
    assert lengths(subsets["long"]) == all_lengths[::-1][:4]
    random_ids = [s["id"] for s in subsets["random"]]
    assert len(set(random_ids)) == 4 and set(random_ids) <= set(by_id)
    stats = stats_of(out)
    assert stats["test"] == expect(list(by_id.values()))
    for kind, samples in subsets.items():
        assert stats[kind] == expect(lengths(samples))


def test_subsets_match_upstream_data_utils(s2t_dir, tmp_path, capsys):
    """Upstream's own script on the same dir: same stats line, same short/long subsets."""
    import importlib.util

    upstream = Path(importlib.util.find_spec("fairseq").origin).parent / UPSTREAM_REL
    assert upstream.is_file(), upstream
    up = tmp_path / "up"
    up.mkdir()
    proc = subprocess.run([sys.executable, str(upstream), str(s2t_dir), "--subset", "test", "--task",
                           "speech_to_text", "--config-yaml", "config.yaml", "--cpu", "--dataset-save-dir", str(up)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rc, out, err = run(capsys, "subsets", "--data", s2t_dir, "--subset", "test", "--task", "speech_to_text",
                       "--out", tmp_path / "ours")
    assert rc == 0, err
    upstream_line = next(line for line in proc.stdout.splitlines() if "dataset stats" in line)
    assert upstream_line in out.splitlines()
    ours, theirs = out_files(tmp_path / "ours"), out_files(up)
    for kind in ("short", "long"):
        a, b = load_npy_dataset(ours[kind]), load_npy_dataset(theirs[kind])
        assert [s["id"] for s in a] == [s["id"] for s in b]
        for x, y in zip(a, b):
            for key in ("src_tokens", "src_lengths"):
                assert x["net_input"][key].equal(y["net_input"][key])
    # upstream draws 500 with replacement; ours draws without: every sample once here
    assert sorted(s["id"] for s in load_npy_dataset(ours["random"])) == sorted(u for u, _ in UTTS)


def test_subsets_from_fairseq_with_ref_dataset(s2t_dir, tmp_path, capsys):
    ref = save_npy_dataset([{"id": u, "net_input": {"src_tokens": np.zeros((1, 1)), "src_lengths": np.array([1])}}
                            for u in ("utt1", "utt2", "utt6", "nope")], tmp_path / "ref.npy")
    rc, out, err = run(capsys, "subsets", "--data", s2t_dir, "--subset", "test", "--task", "speech_to_text",
                       "--ref-dataset", ref, "--out", tmp_path / "o")
    assert rc == 0, err
    for path in out_files(tmp_path / "o").values():
        assert sorted(s["id"] for s in load_npy_dataset(path)) == ["utt1", "utt2", "utt6"]
    assert stats_of(out)["test"] == expect([30, 7, 41])


def test_subsets_from_fairseq_are_byte_identical(s2t_dir, tmp_path, capsys):
    for name in ("a", "b"):
        rc, _, err = run(capsys, "subsets", "--data", s2t_dir, "--subset", "test", "--task", "speech_to_text",
                         "--n", 5, "--out", tmp_path / name)
        assert rc == 0, err
    for a, b in zip(out_files(tmp_path / "a").values(), out_files(tmp_path / "b").values()):
        assert a.read_bytes() == b.read_bytes(), a.name


def test_subsets_from_translation_subset(tmp_path, capsys):
    """A task whose dataset has no ids (translation): the sample index is the id, no config.yaml needed."""
    pytest.importorskip("fairseq")
    from fairseq.data import Dictionary, indexed_dataset

    texts = {"en": ["hello world", "a b c d e f", "hello", "a b"], "es": ["hola", "x y", "hola x", "y"]}
    for lang, lines in texts.items():
        vocab = Dictionary()
        for w in sorted({w for line in lines for w in line.split()}):
            vocab.add_symbol(w)
        vocab.save(str(tmp_path / f"dict.{lang}.txt"))
        prefix = str(tmp_path / f"valid.en-es.{lang}")
        builder = indexed_dataset.make_builder(prefix + ".bin", "mmap", vocab_size=len(vocab))
        for line in lines:
            builder.add_item(vocab.encode_line(line, add_if_not_exist=False, append_eos=True).int())
        builder.finalize(prefix + ".idx")
    rc, out, err = run(capsys, "subsets", "--data", tmp_path, "--subset", "valid", "--task", "translation",
                       "--n", 2, "--out", tmp_path / "o")
    assert rc == 0, err
    src_lens = [len(line.split()) + 1 for line in texts["en"]]  # + eos
    short = load_npy_dataset(tmp_path / "o" / "short_datasetw_ids.npy")
    assert [s["id"] for s in short] == [2, 3] and lengths(short) == [2, 3]
    assert stats_of(out)["valid"] == expect(src_lens)


# ------------------------------------------------------------------ subsets from an npy, random, stats


def test_random_then_stats(tmp_path, capsys):
    rc, out, err = run(capsys, "random", "--n", 6, "--feat-dim", 5, "--min-len", 3, "--max-len", 9,
                       "--out", tmp_path / "r.npy")
    assert rc == 0, err
    samples = load_npy_dataset(tmp_path / "r.npy")
    assert [s["id"] for s in samples] == list(range(6))
    for s in samples:
        t = lengths([s])[0]
        assert 3 <= t <= 9 and s["net_input"]["src_tokens"].shape == (1, t, 5)
    st = dataset_stats(samples)
    assert stats_of(out)["random"] == (6, st["max_len"], st["min_len"], st["avg_len"])
    rc, out, err = run(capsys, "stats", tmp_path / "r.npy")
    assert rc == 0, err
    assert list(stats_of(out).values()) == [(6, st["max_len"], st["min_len"], st["avg_len"])]
    rc, _, err = run(capsys, "random", "--n", 2, "--out", tmp_path / "d")  # default D = 80, .npy appended
    assert rc == 0, err
    assert load_npy_dataset(tmp_path / "d.npy")[0]["net_input"]["src_tokens"].shape[2] == 80


def test_random_is_deterministic(tmp_path, capsys):
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        assert run(capsys, "random", "--n", 5, "--seed", seed, "--out", tmp_path / f"{name}.npy")[0] == 0
    assert (tmp_path / "a.npy").read_bytes() == (tmp_path / "b.npy").read_bytes()
    assert (tmp_path / "a.npy").read_bytes() != (tmp_path / "c.npy").read_bytes()


def test_subsets_from_npy(tmp_path, capsys):
    assert run(capsys, "random", "--n", 20, "--feat-dim", 3, "--min-len", 1, "--max-len", 60,
               "--out", tmp_path / "in.npy")[0] == 0
    samples = load_npy_dataset(tmp_path / "in.npy")
    ref_ids = [1, 4, 5, 9, 11, 12, 17, 30]  # 30 is not in the input
    save_npy_dataset([samples[i] if i < 20 else {"id": i, "net_input": samples[0]["net_input"]} for i in ref_ids],
                     tmp_path / "ref.npy")
    rc, out, err = run(capsys, "subsets", "--npy", tmp_path / "in.npy", "--ref-dataset", tmp_path / "ref.npy",
                       "--n", 3, "--dataset-save-token", "x", "--out", tmp_path / "o")
    assert rc == 0, err
    kept = [s for s in samples if s["id"] in ref_ids]
    files = out_files(tmp_path / "o", "_x_")
    short, long_, rand = (load_npy_dataset(files[k]) for k in ("short", "long", "random"))
    assert lengths(short) == sorted(lengths(kept))[:3]
    assert lengths(long_) == sorted(lengths(kept), reverse=True)[:3]
    assert len(rand) == 3 and {s["id"] for s in rand} <= set(ref_ids)
    assert stats_of(out)[str(tmp_path / "in.npy")] == expect(lengths(kept))
    # the same seed writes the same bytes; another seed draws another random subset
    for name, seed in (("same", 1), ("other", 2)):
        assert run(capsys, "subsets", "--npy", tmp_path / "in.npy", "--n", 5, "--seed", seed,
                   "--out", tmp_path / name)[0] == 0
    assert run(capsys, "subsets", "--npy", tmp_path / "in.npy", "--n", 5, "--out", tmp_path / "again")[0] == 0
    for kind in ("random", "short", "long"):
        assert out_files(tmp_path / "same")[kind].read_bytes() == out_files(tmp_path / "again")[kind].read_bytes()
    assert out_files(tmp_path / "same")["random"].read_bytes() != out_files(tmp_path / "other")["random"].read_bytes()


# ------------------------------------------------------------------ one file for upstream and for us

UPSTREAM_SCRIPT = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("upstream_data_utils", sys.argv[1])
du = importlib.util.module_from_spec(spec)
spec.loader.exec_module(du)
# upstream's random dataset, built and saved by upstream's own functions
dataset, _avg = du.generate_random_dataset(3, 12, D=4, dataset_size=5)
du.save_dataset_npy(dataset, sys.argv[2])
out = {"keys": sorted(dataset[0]), "stats": du.get_dataset_stats(dataset)}
try:  # a file s2st-dataset wrote, read the way get_metrics.py reads it
    ours = du.load_dataset_npy(sys.argv[3])
    out.update(our_sizes=[list(s["net_input"]["src_tokens"].size()) for s in ours],
               our_sums=[float(s["net_input"]["src_tokens"].double().sum()) for s in ours],
               our_stats=du.get_dataset_stats(ours))
except Exception as e:
    out["our_error"] = f"{type(e).__name__}: {e}"
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def upstream(tmp_path_factory) -> dict:
    """Upstream data_utils (shipped in the fairseq wheel) in a subprocess: it writes its random
    dataset and reads one that s2st-dataset random wrote."""
    import importlib.util
    import json

    pytest.importorskip("fairseq")
    d = tmp_path_factory.mktemp("upstream")
    ours = d / "ours.npy"
    assert main(["random", "--n", "4", "--feat-dim", "3", "--min-len", "2", "--max-len", "7", "--out", str(ours)]) == 0
    script = Path(importlib.util.find_spec("fairseq").origin).parent / UPSTREAM_REL
    proc = subprocess.run([sys.executable, "-c", UPSTREAM_SCRIPT, str(script), str(d / "theirs.npy"), str(ours)],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return {"theirs": d / "theirs.npy", "ours": ours, **json.loads(proc.stdout.strip().splitlines()[-1])}


def test_stats_of_upstreams_own_random_dataset(upstream, tmp_path, capsys):
    """Upstream's random samples have no id: stats and subsets work, the index is the id."""
    assert upstream["keys"] == ["net_input"]
    rc, out, err = run(capsys, "stats", upstream["theirs"])
    assert rc == 0, err
    assert list(stats_of(out).values()) == [(5, *upstream["stats"])]
    assert [s["id"] for s in load_npy_dataset(upstream["theirs"])] == [0, 1, 2, 3, 4]
    rc, out, err = run(capsys, "subsets", "--npy", upstream["theirs"], "--n", 2, "--out", tmp_path / "o")
    assert rc == 0, err
    short = load_npy_dataset(out_files(tmp_path / "o")["short"])
    assert lengths(short) == sorted(lengths(load_npy_dataset(upstream["theirs"])))[:2]


def test_random_dataset_is_read_by_upstream_and_by_us(upstream):
    """Upstream get_metrics.py: np.load(allow_pickle=True), then src_tokens.size(); same values as ours."""
    torch = pytest.importorskip("torch")
    assert "our_error" not in upstream  # was: TypeError: 'int' object is not callable
    ours = load_npy_dataset(upstream["ours"])
    assert upstream["our_sizes"] == [list(s["net_input"]["src_tokens"].shape) for s in ours]
    assert upstream["our_sums"] == [float(s["net_input"]["src_tokens"].double().sum()) for s in ours]
    st = dataset_stats(ours)
    assert upstream["our_stats"] == [st["max_len"], st["min_len"], st["avg_len"]]
    theirs = np.load(upstream["ours"], allow_pickle=True)  # in this process too: the values themselves
    for a, b in zip(ours, theirs):
        assert a["id"] == b["id"]
        for key in ("src_tokens", "src_lengths"):
            assert isinstance(b["net_input"][key], torch.Tensor)
            assert torch.equal(a["net_input"][key], b["net_input"][key])


class _SystemCall:
    def __init__(self, cmd: str):
        self.cmd = cmd

    def __reduce__(self):
        import os

        return (os.system, (self.cmd,))


@pytest.mark.parametrize("command", ["stats", "subsets"])
def test_malicious_npy_is_refused_in_one_line_and_not_run(command, tmp_path, capsys):
    import os

    marker = tmp_path / "marker"
    evil = np.empty(1, dtype=object)
    evil[:] = [{"id": 0, "net_input": {"src_tokens": _SystemCall(f"touch {marker}"), "src_lengths": np.array([1])}}]
    np.save(tmp_path / "evil.npy", evil, allow_pickle=True)
    argv = ["stats", tmp_path / "evil.npy"] if command == "stats" else [
        "subsets", "--npy", tmp_path / "evil.npy", "--out", tmp_path / "o"]
    rc, out, err = run(capsys, *argv)
    assert rc == 2
    assert err.splitlines() == [f"s2st-dataset: error: {tmp_path / 'evil.npy'}: refused to unpickle "
                                f"'{os.system.__module__}.system': only plain containers, numbers, strings, "
                                "numpy arrays and torch tensors are allowed"]
    assert not marker.exists() and not (tmp_path / "o").exists()


# ------------------------------------------------------------------ bad input: one line, exit 2


def _bad_npy(tmp_path: Path) -> Path:
    """A valid npy header over a truncated pickle of samples."""
    p = save_npy_dataset([{"id": 0, "net_input": {"src_tokens": np.zeros((1, 4, 2)), "src_lengths": np.array([4])}}],
                         tmp_path / "bad.npy")
    p.write_bytes(p.read_bytes()[:-40])
    return p


def _not_npy(tmp_path: Path) -> Path:
    p = tmp_path / "text.npy"
    p.write_text("id\taudio\n")
    return p


def _no_config(tmp_path: Path, s2t_dir: Path) -> Path:
    d = tmp_path / "noconf"
    d.mkdir()
    (d / "dict.txt").write_text((s2t_dir / "dict.txt").read_text())
    (d / "test.tsv").write_text((s2t_dir / "test.tsv").read_text())
    return d


BAD = {
    "missing data dir": (lambda t, d: ["subsets", "--data", t / "nowhere", "--subset", "test", "--task",
                                       "speech_to_text", "--out", t / "o"], "nowhere"),
    "no config.yaml": (lambda t, d: ["subsets", "--data", _no_config(t, d), "--subset", "test", "--task",
                                     "speech_to_text", "--out", t / "o"], "config.yaml"),
    "unknown subset": (lambda t, d: ["subsets", "--data", d, "--subset", "nosuch", "--task", "speech_to_text",
                                     "--out", t / "o"], "nosuch"),
    "unknown task": (lambda t, d: ["subsets", "--data", d, "--subset", "test", "--task", "speech_to_nowhere",
                                   "--out", t / "o"], "speech_to_nowhere"),
    "no task": (lambda t, d: ["subsets", "--data", d, "--subset", "test", "--out", t / "o"], "--task"),
    "malformed npy subsets": (lambda t, d: ["subsets", "--npy", _bad_npy(t), "--out", t / "o"], "bad.npy"),
    "malformed npy stats": (lambda t, d: ["stats", _bad_npy(t)], "bad.npy"),
    "not an npy": (lambda t, d: ["subsets", "--npy", _not_npy(t), "--out", t / "o"], "text.npy"),
    "missing npy": (lambda t, d: ["stats", t / "absent.npy"], "absent.npy"),
    "n zero subsets": (lambda t, d: ["subsets", "--data", d, "--subset", "test", "--task", "speech_to_text",
                                     "--n", "0", "--out", t / "o"], "--n"),
    "n negative random": (lambda t, d: ["random", "--n", "-3", "--out", t / "r.npy"], "--n"),
    "n not a number": (lambda t, d: ["random", "--n", "many", "--out", t / "r.npy"], "--n"),
    "max below min": (lambda t, d: ["random", "--n", "2", "--min-len", "9", "--max-len", "3",
                                    "--out", t / "r.npy"], "--max-len"),
    "random out dir missing": (lambda t, d: ["random", "--n", "2", "--out", t / "no" / "r.npy"], "no"),
    "ref matches nothing": (lambda t, d: ["subsets", "--data", d, "--subset", "test", "--task", "speech_to_text",
                                          "--ref-dataset", save_npy_dataset(
                                              [{"id": "zz", "net_input": {"src_tokens": np.zeros(1),
                                                                          "src_lengths": np.array([1])}}],
                                              t / "ref.npy"), "--out", t / "o"], "ref.npy"),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_input_is_one_line_exit_2(case, s2t_dir, tmp_path, capsys):
    make_argv, named = BAD[case]
    rc, out, err = run(capsys, *make_argv(tmp_path, s2t_dir))
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("s2st-dataset") and named in lines[0], lines[0]
    assert "Traceback" not in err
    assert not (tmp_path / "o").exists()  # nothing half-written


def test_subsets_of_a_translation_task_carry_the_decoded_targets(tmp_path, capsys):
    """A binarised translation split holds no raw text: its target tokens are decoded with the task's target
    dictionary into each sample's tgt_text (the reference the BLEU gate reads)."""
    pytest.importorskip("fairseq")
    from pytest_s2st.tiny.fairseq_tiny import EN_TEXTS, ES_TEXTS, _binarize_pair, _write_dict

    d = tmp_path / "mt"
    d.mkdir()
    _write_dict(d / "dict.en.txt", sorted({w for t in EN_TEXTS for w in t.split()}))
    _write_dict(d / "dict.es.txt", sorted({w for t in ES_TEXTS for w in t.split()}))
    _binarize_pair(d, "en", "es", EN_TEXTS, ES_TEXTS)
    rc, out, err = run(capsys, "subsets", "--data", d, "--subset", "valid", "--task", "translation",
                       "--out", tmp_path / "o")
    assert rc == 0, err
    samples = load_npy_dataset(tmp_path / "o" / "short_datasetw_ids.npy")
    assert sorted(s["tgt_text"] for s in samples) == sorted(ES_TEXTS)
