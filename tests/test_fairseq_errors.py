"""Bad fairseq inputs -> one S2STError line naming the file or key; nothing half-loaded."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("fairseq")

import torch  # noqa: E402

from pytest_s2st.config import load_config  # noqa: E402
from pytest_s2st.errors import S2STError  # noqa: E402
from pytest_s2st.pipelines import base  # noqa: E402



@pytest.fixture
def work(staged, tmp_path) -> Path:
    """A private copy of the staged tree, free to break."""
    dst = tmp_path / "w"
    shutil.copytree(staged, dst)
    return dst


def stages_of(config: Path) -> tuple[str, list[dict]]:
    cfg = load_config(config, known_model_types=base.known_model_types())
    return cfg.model_type, cfg.stages


def build_error(config: Path, edit=None, model_type: str | None = None) -> str:
    mt, stages = stages_of(config)
    if edit:
        edit(stages)
    with pytest.raises(S2STError) as info:
        base.build_pipeline(model_type or mt, stages, device="cpu", config_path=config)
    msg = str(info.value)
    assert "\n" not in msg and "Traceback" not in msg
    assert info.value.__cause__ is None  # raised "from None": no chained traceback for the user
    return msg


def test_missing_checkpoint(work):
    (work / "s2t" / "checkpoint.pt").unlink()
    msg = build_error(work / "configs" / "S2T.yaml")
    assert "checkpoint not found" in msg and str(work / "s2t" / "checkpoint.pt") in msg and "stage1" in msg


def test_missing_path_key(work):
    msg = build_error(work / "configs" / "S2T.yaml", lambda st: st[0].pop("path"))
    assert "'path'" in msg and "stage1" in msg


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty"])
def test_corrupt_checkpoint(work, damage):
    ckpt = work / "mt" / "checkpoint.pt"
    data = ckpt.read_bytes()
    ckpt.write_bytes({"truncated": data[: len(data) // 2], "garbage": os.urandom(4096), "empty": b""}[damage])
    msg = build_error(work / "configs" / "MT.yaml")
    assert f"cannot read checkpoint {ckpt}" in msg
    assert ("corrupt or truncated" in msg) or ("weights_only" in msg)


def test_checkpoint_with_foreign_pickle_global_is_refused_and_not_run(work, tmp_path):
    """weights_only stays on: a pickled callable is refused, never executed."""
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    ckpt = work / "s2t" / "checkpoint.pt"
    torch.save({"model": {}, "cfg": None, "evil": Evil()}, ckpt)
    msg = build_error(work / "configs" / "S2T.yaml")
    assert "cannot read checkpoint" in msg and str(ckpt) in msg
    assert "weights_only=True" in msg and "system" in msg  # names the refused global
    assert not marker.exists()


def test_checkpoint_of_another_task(work):
    def use_mt_checkpoint(stages):
        stages[0]["path"] = str(work / "mt" / "checkpoint.pt")

    msg = build_error(work / "configs" / "S2T.yaml", use_mt_checkpoint)
    assert "'translation' checkpoint" in msg and str(work / "mt" / "checkpoint.pt") in msg
    assert "speech_to_text" in msg


def test_unit_checkpoint_in_a_spectrogram_stage(work):
    def use_s2ut_checkpoint(stages):
        stages[0]["path"] = str(work / "s2ut" / "checkpoint.pt")

    msg = build_error(work / "configs" / "S2S.yaml", use_s2ut_checkpoint)
    assert "predicts units" in msg and "s2s" in msg


def test_stage_task_that_cannot_run_the_model_type(work):
    msg = build_error(work / "configs" / "TTS.yaml", model_type="S2T")
    assert "task 'text_to_speech' cannot run the s2t stage" in msg


def test_data_dir_without_config_yaml(work):
    (work / "s2t" / "config.yaml").unlink()
    msg = build_error(work / "configs" / "S2T.yaml")
    assert f"data config not found: {work / 's2t' / 'config.yaml'}" in msg


def test_empty_config_yaml(work):
    (work / "tts" / "config.yaml").write_text("")
    msg = build_error(work / "configs" / "TTS.yaml")
    assert str(work / "tts" / "config.yaml") in msg and "empty" in msg


def test_data_dir_without_dict(work):
    (work / "tts" / "dict.txt").unlink()
    msg = build_error(work / "configs" / "TTS.yaml")
    assert f"dictionary not found: {work / 'tts' / 'dict.txt'}" in msg


def test_mt_data_dir_without_target_dict(work):
    (work / "mt" / "dict.es.txt").unlink()
    msg = build_error(work / "configs" / "3StageS2ST.yaml")
    assert f"dictionary not found: {work / 'mt' / 'dict.es.txt'}" in msg and "stage2 (mt)" in msg


def test_missing_data_dir(work):
    shutil.rmtree(work / "s2ut")
    msg = build_error(work / "configs" / "S2UT.yaml")
    assert "data dir not found" in msg or "checkpoint not found" in msg
    assert str(work / "s2ut") in msg


def test_ensemble_path_refused(work):
    def ensemble(stages):
        p = str(work / "s2t" / "checkpoint.pt")
        stages[0]["path"] = f"{p}:{p}"

    msg = build_error(work / "configs" / "S2T.yaml", ensemble)
    assert "ensemble" in msg and "not supported" in msg


def test_vocoder_files_missing(work):
    (work / "vocoder" / "code_hifigan.pt").unlink()
    msg = build_error(work / "configs" / "S2UT.yaml")
    assert "'vocoder'" in msg and "stage2 (vocoder)" in msg


def test_vocoder_cfg_not_json(work):
    (work / "vocoder" / "code_hifigan.json").write_text("{not json")
    msg = build_error(work / "configs" / "S2UT.yaml")
    assert f"cannot read vocoder_cfg {work / 'vocoder' / 'code_hifigan.json'}" in msg


def test_tts_vocoder_checkpoint_missing(work):
    (work / "tts" / "hifigan.pt").unlink()
    msg = build_error(work / "configs" / "TTS.yaml")
    assert "vocoder checkpoint not found: 'hifigan.pt'" in msg and str(work / "tts" / "config.yaml") in msg


def test_cascade_with_too_few_stages(work):
    msg = build_error(work / "configs" / "2StageS2ST.yaml", lambda st: st.pop())
    assert "2StageS2ST needs 2 stage(s)" in msg and "tts" in msg


def test_bad_samples(staged):
    config = staged / "configs" / "S2T.yaml"
    mt, stages = stages_of(config)
    pipe = base.build_pipeline(mt, stages, device="cpu", config_path=config)
    with pytest.raises(S2STError, match="takes speech features, got a text sample"):
        pipe.prepare_sample({"id": "x", "text": "hello"})
    with pytest.raises(S2STError, match="src_tokens"):
        pipe.prepare_sample({"id": 0, "net_input": {"src_lengths": np.array([3])}})
    with pytest.raises(S2STError, match="got list"):
        pipe.prepare_sample([1, 2, 3])


def test_dump_refuses_text_outputs(tmp_path):
    from pytest_s2st.dump import dump_waveforms

    with pytest.raises(S2STError, match="output 0 is not a waveform"):
        dump_waveforms([{"text": "hola"}], tmp_path, "p", 16000)


def test_hubert_km_of_another_dimension(work):
    np.save(work / "hubert" / "km.npy", np.zeros((10, 7), dtype=np.float32))
    msg = build_error(work / "configs" / "HubertUnits.yaml")
    assert f"{work / 'hubert' / 'km.npy'}: centroids of shape (10, 7)" in msg and "feature dim 16" in msg


def test_hubert_checkpoint_missing(work):
    (work / "hubert" / "checkpoint.pt").unlink()
    msg = build_error(work / "configs" / "HubertUnits.yaml")
    assert "'hubert_ckpt_path': file not found" in msg and "stage1 (hubert)" in msg


def run_error(config: Path, sample, edit=None) -> str:
    """Built fine; running the sample fails with one S2STError line."""
    mt, stages = stages_of(config)
    if edit:
        edit(stages)
    pipe = base.build_pipeline(mt, stages, device="cpu", config_path=config)
    with pytest.raises(S2STError) as info:
        pipe.run(sample)
    msg = str(info.value)
    assert "\n" not in msg and "Traceback" not in msg
    assert info.value.__cause__ is None
    return msg


@pytest.mark.parametrize("model_type, frames, need", [("TTS", 1, 4), ("TTS", 3, 4), ("S2S", 2, 3)])
def test_griffin_lim_on_too_few_frames(staged, model_type, frames, need):
    """A model bounded to fewer frames than Griffin-Lim's reflect padding needs (n_fft//2//hop + 2):
    one line naming the stage, the config and the frame count, not fairseq's bare RuntimeError."""
    pytest.importorskip("librosa")
    config = staged / "configs" / f"{model_type}.yaml"
    data = "tokens_tts_es.npy" if model_type == "TTS" else "speech.npy"
    sample = np.load(staged / "data" / data, allow_pickle=True)[0]

    def bound(n):
        return lambda stages: stages[0].update(vocoder="griffin_lim", max_target_positions=n)

    msg = run_error(config, sample, bound(frames))
    role = model_type.lower()
    assert msg.startswith(f"{config}: stage1 ({role}): the model emitted {frames} frame(s)")
    assert f"Griffin-Lim needs at least {need}" in msg
    assert msg.endswith(f"the output was cut at max_target_positions {frames}: raise it")
    mt, stages = stages_of(config)  # one frame more than the boundary: it runs
    bound(need)(stages)
    out = base.build_pipeline(mt, stages, device="cpu", config_path=config).run(sample)
    hop = 256 if model_type == "TTS" else 160
    assert out["waveform"].size == (need - 1) * hop


def test_griffin_lim_after_an_early_end_of_sequence(staged):
    """Fewer frames than the length limit: the decoder stopped itself, so raising the limit is no advice."""
    pytest.importorskip("librosa")
    import torch

    config = staged / "configs" / "TTS.yaml"
    mt, stages = stages_of(config)
    stages[0].update(vocoder="griffin_lim", max_target_positions=40)
    pipe = base.build_pipeline(mt, stages, device="cpu", config_path=config)
    vocoder = pipe.stages[0].generator.vocoder
    with pytest.raises(S2STError) as info:
        vocoder(torch.zeros(1, 1, 80))  # the guard runs before the forward: the mel width does not matter
    msg = str(info.value)
    assert "the model emitted 1 frame(s)" in msg and "predicted end-of-sequence after 1 frame(s)" in msg
    assert "max_target_positions 40" in msg and "raise it" not in msg


def test_raw_audio_without_an_fbank_backend(staged, monkeypatch):
    """No PyKaldi, no torchaudio: refused in one line saying what the model takes."""
    from fairseq.data.audio import audio_utils

    from pytest_s2st.datasets import load_dataset

    monkeypatch.setattr(audio_utils, "_get_torchaudio_fbank", lambda *a, **k: None)  # as on ImportError
    sample = load_dataset(staged / "data" / "raw.tsv", "raw", 1)[0]
    config = staged / "configs" / "S2T.yaml"
    mt, stages = stages_of(config)
    pipe = base.build_pipeline(mt, stages, device="cpu", config_path=config)
    with pytest.raises(S2STError) as info:
        pipe.prepare_sample(sample)
    msg = str(info.value)
    assert msg.startswith(f"{config}: stage1 (s2t): the model takes 80-dim log-mel fbank features")
    assert "torchaudio" in msg and "\n" not in msg

    def broken(*a, **k):
        raise OSError("libtorchaudio.so: undefined symbol")  # a torchaudio built for another torch

    monkeypatch.setattr(audio_utils, "_get_torchaudio_fbank", broken)
    with pytest.raises(S2STError, match="fbank features the model takes from raw audio failed: OSError: libtorch"):
        pipe.prepare_sample(sample)


def test_raw_audio_at_another_rate_into_a_waveform_model(tmp_path):
    """A data config with use_audio_input takes the waveform itself, at its use_sample_rate only."""
    from fairseq.data.audio.data_cfg import S2TDataConfig

    from pytest_s2st.pipelines.fairseq_files import waveform_features

    (tmp_path / "config.yaml").write_text("use_audio_input: true\nuse_sample_rate: 16000\nstandardize_audio: true\n")
    cfg = S2TDataConfig(tmp_path / "config.yaml")
    wav = np.random.RandomState(0).randn(1, 800).astype(np.float32)
    with pytest.raises(S2STError, match="the model takes 16000 Hz audio, the dataset is 8000 Hz"):
        waveform_features(cfg, wav, 8000, "here")
    x = waveform_features(cfg, wav, 16000, "here")
    assert x.shape == (1, 800) and abs(float(x.mean())) < 1e-5 and abs(float(x.std(unbiased=False)) - 1) < 1e-3


def test_fbank_hint_tells_a_broken_torchaudio_from_a_missing_one(monkeypatch):
    """A torchaudio that is installed but does not load (PyPI's CUDA build beside CPU torch) is named as such,
    not answered with 'pip install torchaudio' (which is what put it there)."""
    import importlib
    import importlib.util

    from pytest_s2st.pipelines import fairseq_files as fs

    real_find, real_import = importlib.util.find_spec, importlib.import_module

    def find(name, *a, **k):
        return object() if name == "torchaudio" else real_find(name, *a, **k)

    def broken(name, *a, **k):
        if name.startswith("torchaudio"):
            raise OSError("Could not load this library: /x/lib/_torchaudio.so\nmore")
        return real_import(name, *a, **k)

    monkeypatch.setattr(importlib.util, "find_spec", find)
    monkeypatch.setattr(importlib, "import_module", broken)
    hint = fs._fbank_backend_problem()
    assert "installed but does not load" in hint and "_torchaudio.so" in hint and "\n" not in hint
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a, **k: None if name == "torchaudio" else real_find(name))
    assert "pip install torchaudio" in fs._fbank_backend_problem()


def test_a_typo_in_a_generation_argument_is_refused_with_the_closest_name(work):
    """`beem: 20` was merged into the namespace and ignored: the stage ran at fairseq's default beam. Now the
    build stops before any model loads, naming the file, the line, the key and the closest fairseq name."""
    config = work / "configs" / "S2T.yaml"
    config.write_text(config.read_text().replace("  max_len_a: 2\n", "  max_len_a: 2\n  beem: 20\n", 1))
    cfg = load_config(config, known_model_types=base.known_model_types())
    with pytest.raises(S2STError) as info:
        base.build_pipeline(cfg.model_type, cfg.stages, device="cpu", config_path=config, config_lines=cfg.lines)
    line = cfg.lines["stage1.beem"]
    assert str(info.value) == (f"{config}:{line} (stage1.beem): unknown key 'beem' for a fairseq s2t stage: no "
                               "fairseq argument has that name; did you mean 'beam'?")


def test_every_key_of_the_staged_and_upstream_configs_is_known(work):
    """The check refuses no key that the configs this project ships or stages use (fairseq's and its own)."""
    import yaml

    from pytest_s2st.pipelines.fairseq import LAYOUTS
    from pytest_s2st.pipelines.fairseq_args import check_stage_keys

    repo = Path(__file__).resolve().parents[1] / "configs"
    checked = 0
    for config in [*sorted((work / "configs").glob("*.yaml")), *sorted(repo.glob("*.yaml"))]:
        data = yaml.safe_load(config.read_text())
        layout = LAYOUTS.get(data["general"].get("model_type"))
        if layout is None:  # Qwen3TTS, callable: no fairseq stages
            continue
        lines = {f"{name}.{key}": 1 for name, section in data.items() if name.startswith("stage") for key in section}
        for i, role in enumerate(layout, 1):
            check_stage_keys(i, role.rstrip("?"), config, lines)
        checked += 1
    assert checked >= 10
