"""Staging of tiny real fairseq models: determinism, cache, configs, the s2st-stage script."""
from __future__ import annotations

import hashlib
import re
import threading
import time
import zipfile
from pathlib import Path

import pytest
import yaml

pytest.importorskip("fairseq")

from pytest_s2st.cli import stage as stage_cli  # noqa: E402
from pytest_s2st.tiny import fairseq_tiny  # noqa: E402

REPO = Path(__file__).resolve().parent.parent



def _hashes(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_cli_restage_is_byte_identical(staged, tmp_path, capsys):
    """Same seed, another directory, through the console script: every file has the same SHA256."""
    out = tmp_path / "again"
    assert stage_cli.main([str(out), "--no-qwen"]) == 0  # the fairseq part; Qwen has its own determinism test
    printed = capsys.readouterr().out
    first, second = _hashes(staged), _hashes(out)
    assert sorted(first) == sorted(second)
    assert [k for k in first if first[k] != second[k]] == []
    for name in ("s2t/checkpoint.pt", "mt/checkpoint.pt", "tts/checkpoint.pt", "tts/hifigan.pt",
                 "s2s/checkpoint.pt", "s2ut/checkpoint.pt", "vocoder/code_hifigan.pt",
                 "hubert/checkpoint.pt", "hubert/km.npy", "fastspeech2/checkpoint.pt", "fastspeech2/hifigan.pt"):
        assert first[name] in printed, name  # the script prints what it wrote, with hashes
    assert "configs/3StageS2ST.yaml" in printed
    lines = printed.splitlines()
    files = [ln for ln in lines if ln.startswith(("dataset ", "config "))]
    models = [ln for ln in lines if ln.endswith((".pt", ".npy")) and not ln.startswith(("dataset ", "config "))]
    assert len(files) >= 16 and len(models) == 12
    for table in (files, models):  # the path column starts at one offset, however long a name (was: shifted)
        assert len({ln.rindex(" ") for ln in table}) == 1, table
    for name in fairseq_tiny.FS2_CONFIGS:
        assert f"configs/{name}.yaml" in printed


def test_checkpoints_do_not_embed_the_build_path(staged):
    ckpts = sorted(staged.glob("*/checkpoint.pt"))
    assert len(ckpts) == 7
    for ckpt in ckpts:
        with zipfile.ZipFile(ckpt) as z:
            pkl = z.read(next(n for n in z.namelist() if n.endswith("/data.pkl")))
        assert str(staged).encode() not in pkl, ckpt
        assert str(staged.parent).encode() not in pkl, ckpt


def test_another_seed_gives_other_weights(staged, tmp_path):
    ckpt = fairseq_tiny.build_mt(tmp_path, seed=fairseq_tiny.SEED + 1)
    assert fairseq_tiny.sha256_file(ckpt) != fairseq_tiny.sha256_file(staged / "mt" / "checkpoint.pt")


def _get(cfg, key):
    return cfg[key] if isinstance(cfg, dict) else getattr(cfg, key)


def test_checkpoints_are_fairseq_train_checkpoints(staged):
    import torch

    from pytest_s2st.pipelines.fairseq_files import allow_fairseq_globals

    allow_fairseq_globals()
    expect = {"s2t": ("speech_to_text", "s2t_transformer"), "mt": ("translation", "transformer"),
              "tts": ("text_to_speech", "tts_transformer"), "s2s": ("speech_to_speech", "s2spect_transformer"),
              "s2ut": ("speech_to_speech", "s2ut_transformer"), "hubert": ("hubert_pretraining", "hubert"),
              "fastspeech2": ("text_to_speech", "fastspeech2")}
    torch.serialization.add_safe_globals(fairseq_tiny.hubert_safe_globals())
    for name, (task, arch) in expect.items():
        state = torch.load(staged / name / "checkpoint.pt", map_location="cpu", weights_only=True)
        assert {"args", "cfg", "model", "criterion", "optimizer_history", "task_state", "extra_state",
                "last_optimizer_state"} <= set(state), name
        task_cfg, model_cfg = state["cfg"]["task"], state["cfg"]["model"]  # dicts, or Namespaces (legacy)
        assert _get(task_cfg, "_name") == task
        assert _get(model_cfg, "_name" if name == "hubert" else "arch") == arch
        assert _get(task_cfg, "data") == name  # stored relative to the staging root
        size = (staged / name / "checkpoint.pt").stat().st_size
        assert 20_000 < size < 1_000_000, (name, size)
    voc = torch.load(staged / "vocoder" / "code_hifigan.pt", map_location="cpu", weights_only=True)
    assert set(voc) == {"generator"}


def test_dataset_is_upstream_npy_layout(staged):
    """np.save'd list of {id, net_input} holding torch tensors, as upstream data_utils writes it."""
    import numpy as np
    import torch

    data = np.load(staged / "data" / "speech.npy", allow_pickle=True)
    assert len(data) == fairseq_tiny.N_SAMPLES
    for i, sample in enumerate(data):
        tokens, lengths = sample["net_input"]["src_tokens"], sample["net_input"]["src_lengths"]
        assert sample["id"] == i
        assert isinstance(tokens, torch.Tensor) and tokens.dtype == torch.float32 and tokens.dim() == 3
        assert tokens.shape[0] == 1 and tokens.shape[2] == fairseq_tiny.FEAT_DIM
        assert lengths.tolist() == [tokens.shape[1]] and lengths.dtype == torch.int64
    tokens = np.load(staged / "data" / "tokens_mt_en.npy", allow_pickle=True)
    assert all(s["net_input"]["src_tokens"].dtype == torch.int64 for s in tokens)
    assert (staged / "data" / "text_en.jsonl").read_text().count("\n") == 3


def test_npy_tensors_pickle_reproducibly(tmp_path):
    """torch's own pickling keys storages by memory address; save_npy_dataset must not."""
    import numpy as np
    import torch

    def write(name):
        x = torch.arange(12, dtype=torch.float32).view(1, 3, 4) * 0.5  # fresh storages each time
        return fairseq_tiny.save_npy_dataset([{"id": 0, "net_input": {"src_tokens": x[:, 1:],
                                                                        "src_lengths": torch.tensor([2])}}],
                                             tmp_path / name).read_bytes()

    assert write("a.npy") == write("b.npy")
    back = np.load(tmp_path / "a.npy", allow_pickle=True)[0]["net_input"]["src_tokens"]
    assert back.tolist() == (torch.arange(12, dtype=torch.float32).view(1, 3, 4) * 0.5)[:, 1:].tolist()


def test_configs_are_upstream_layout_and_resolve(staged):
    paths = fairseq_tiny.default_configs(staged)
    assert [p.stem for p in paths] == list(fairseq_tiny.MODEL_TYPES)
    stages_per_type = {"S2T": 1, "MT": 1, "TTS": 1, "S2S": 1, "S2UT": 2, "2StageS2ST": 2, "3StageS2ST": 3}
    for p in paths:
        cfg = yaml.safe_load(p.read_text())
        assert cfg["general"]["name"] == "tiny"
        assert cfg["general"]["model_type"] == p.stem
        assert sorted(k for k in cfg if k.startswith("stage")) == [
            f"stage{i}" for i in range(1, stages_per_type[p.stem] + 1)]
        assert (p.parent / cfg["general"]["dataset_path"]).is_file()
        for key, stage in cfg.items():
            for k in ("data", "path", "vocoder_cfg") + (("vocoder",) if p.stem == "S2UT" and key == "stage2" else ()):
                if k in stage:
                    assert (p.parent / stage[k]).exists(), (p.name, key, k)
    hub = yaml.safe_load((staged / "configs" / "HubertUnits.yaml").read_text())  # staged beside the seven
    assert hub["general"]["dataset_type"] == "raw"
    for key in ("hubert_ckpt_path", "hubert_km_path"):
        assert (staged / "configs" / hub["stage1"][key]).is_file()
    tsv = (staged / "configs" / hub["general"]["dataset_path"]).read_text().splitlines()
    assert all((staged / "data" / tsv[0] / row.split("\t")[0]).is_file() for row in tsv[1:])
    three = yaml.safe_load(paths[-1].read_text())
    assert [three[f"stage{i}"]["task"] for i in (1, 2, 3)] == ["speech_to_text", "translation", "text_to_speech"]


def test_fastspeech2_is_staged_beside_the_seven(staged):
    """A FastSpeech2 TTS with its own data dir and HiFi-GAN, and two extra configs (not in default_configs)."""
    assert "fastspeech2" not in "".join(str(p) for p in fairseq_tiny.default_configs(staged))
    for name in ("checkpoint.pt", "config.yaml", "dict.txt", "hifigan.json", "hifigan.pt"):
        assert (staged / "fastspeech2" / name).is_file(), name
    features = yaml.safe_load((staged / "fastspeech2" / "config.yaml").read_text())["features"]
    assert {"pitch_min", "pitch_max", "energy_min", "energy_max"} <= set(features)  # its variance bins need them
    assert (staged / "fastspeech2" / "dict.txt").read_bytes() == (staged / "tts" / "dict.txt").read_bytes()
    manifest = (staged / "MANIFEST.json").read_text()
    assert '"fastspeech2/checkpoint.pt"' in manifest and '"TTS-FastSpeech2"' in manifest
    tts = yaml.safe_load((staged / "configs" / "TTS-FastSpeech2.yaml").read_text())
    two = yaml.safe_load((staged / "configs" / "2StageS2ST-FastSpeech2.yaml").read_text())
    assert (tts["general"]["model_type"], two["general"]["model_type"]) == ("TTS", "2StageS2ST")
    assert tts["general"]["name"] == two["general"]["name"] == "tiny-fastspeech2"
    assert tts["general"]["dataset_path"] == "../data/tokens_tts_es.npy"
    assert tts["stage1"]["path"] == two["stage2"]["path"] == "../fastspeech2/checkpoint.pt"
    assert two["stage1"] == yaml.safe_load((staged / "configs" / "2StageS2ST.yaml").read_text())["stage1"]
    for doc in (tts, two):
        for stage in (v for k, v in doc.items() if k.startswith("stage")):
            assert (staged / "configs" / stage["path"]).is_file() and (staged / "configs" / stage["data"]).is_dir()


def test_cache_second_call_does_not_rebuild(staged, monkeypatch):
    before = {p: p.stat().st_mtime_ns for p in staged.rglob("*") if p.is_file()}

    def boom(*a, **k):
        raise AssertionError("staged again")

    monkeypatch.setattr(fairseq_tiny, "stage_all", boom)
    paths = fairseq_tiny.default_configs(staged)
    assert all(p.is_file() for p in paths)
    assert {p: p.stat().st_mtime_ns for p in staged.rglob("*") if p.is_file()} == before


def test_cache_racing_workers_stage_once(tmp_path, monkeypatch):
    calls = []

    def fake_stage_all(out, seed=fairseq_tiny.SEED):
        calls.append(out)
        time.sleep(0.2)  # long enough for every racer to arrive while the first one builds
        (out / "configs").mkdir(parents=True)
        (out / "MANIFEST.json").write_text("{}")
        return {}

    monkeypatch.setattr(fairseq_tiny, "stage_all", fake_stage_all)
    target = tmp_path / "cache"
    results = []
    threads = [threading.Thread(target=lambda: results.append(fairseq_tiny.default_configs(target)))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    assert len(results) == 4 and all(r == results[0] for r in results)
    assert (target / "MANIFEST.json").is_file()
    assert [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name] == []


def test_cache_replaces_an_incomplete_directory(tmp_path, monkeypatch):
    target = tmp_path / "cache"
    (target / "s2t").mkdir(parents=True)  # a killed build: files but no MANIFEST.json
    (target / "s2t" / "checkpoint.pt").write_bytes(b"half")

    def fake_stage_all(out, seed=fairseq_tiny.SEED):
        out.mkdir(parents=True)
        (out / "MANIFEST.json").write_text("{}")
        return {}

    monkeypatch.setattr(fairseq_tiny, "stage_all", fake_stage_all)
    fairseq_tiny.default_configs(target)
    assert (target / "MANIFEST.json").is_file() and not (target / "s2t").exists()


def test_default_cache_dir_follows_env_and_versions(monkeypatch, tmp_path):
    monkeypatch.setenv("S2ST_CACHE_DIR", str(tmp_path))
    d = fairseq_tiny.default_cache_dir()
    assert d.parent == tmp_path and d.name.startswith("fairseq-0.12.3.1-torch")
    monkeypatch.delenv("S2ST_CACHE_DIR")
    assert fairseq_tiny.default_cache_dir().parent == Path.home() / ".cache" / "pytest-s2st"


def test_repo_upstream_configs_have_placeholders_and_stage3():
    files = {p.name: yaml.safe_load(p.read_text()) for p in (REPO / "configs").glob("*.yaml")}
    for name in ("S2T.yaml", "2StageS2ST.yaml", "3StageS2ST.yaml", "DirectS2U.yaml"):
        assert name in files
        assert "${" in (REPO / "configs" / name).read_text()
    three = files["3StageS2ST.yaml"]
    assert [three[f"stage{i}"]["task"] for i in (1, 2, 3)] == ["speech_to_text", "translation", "text_to_speech"]
    s2u = files["DirectS2U.yaml"]
    assert s2u["general"]["model_type"] == "S2UT" and s2u["stage2"]["dur_prediction"] is True
    assert s2u["stage1"]["target_code_size"] == 100 and s2u["stage1"]["beam"] == 10


def test_cli_refuses_an_unusable_out(tmp_path, capsys):
    target = tmp_path / "file"
    target.write_text("x")
    assert stage_cli.main([str(target)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"s2st-stage: error: {target}: exists and is not a directory"


def test_cache_failure_leaves_nothing_and_says_where(tmp_path, monkeypatch):
    from pytest_s2st.errors import S2STError

    def failing(out, seed=fairseq_tiny.SEED):
        (out / "s2t").mkdir(parents=True)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fairseq_tiny, "stage_all", failing)
    target = tmp_path / "cache"
    with pytest.raises(S2STError, match="cannot stage the tiny fairseq models there: No space left on device"):
        fairseq_tiny.default_configs(target)
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")] == []


def test_cli_also_stages_the_tiny_qwen3tts_with_its_manifest(tmp_path, capsys):
    from pytest_s2st.assets import check_manifest

    out = tmp_path / "all"
    assert stage_cli.main([str(out)]) == 0
    assert re.search(r"^config +Qwen3TTS +configs/Qwen3TTS.yaml$", capsys.readouterr().out, re.M)
    check_manifest(out / "qwen3tts")  # every file's size and SHA256 as listed
    text = (out / "configs" / "Qwen3TTS.yaml").read_text()
    assert "path: ../qwen3tts" in text
    # nothing in OUT points into the clone: the workload is copied beside the other datasets (issue 32 item 7)
    assert "dataset_path: ../data/workload-default.jsonl" in text and not re.search(r"^\s*\w+: /", text, re.M)
    from pytest_s2st.workload import DEFAULT_WORKLOAD

    assert (out / "data" / "workload-default.jsonl").read_bytes() == DEFAULT_WORKLOAD.read_bytes()


def test_qwen_tts_import_prints_no_flash_attn_banner():
    """qwen_tts prints a flash-attn banner on stdout at its first import: s2st-stage, s2st-serve and the tiny
    builders import it inside quiet_banner, which drops it (stdout stays the tool's own)."""
    pytest.importorskip("qwen_tts")
    code = ("from pytest_s2st.pipelines.qwen3tts import quiet_banner\n"
            "with quiet_banner():\n    import qwen_tts\nprint('done')")
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "done\n" and "flash-attn" not in done.stderr
    loud = subprocess.run([sys.executable, "-c", "import qwen_tts"], capture_output=True, text=True, timeout=300)
    assert "flash-attn is not installed" in loud.stdout  # what is dropped: still printed without quiet_banner
