"""model_type Qwen3TTS on a tiny random model built offline and loaded by qwen-tts's own loader.

Needs the qwen extra (qwen-tts 0.1.1); nothing is downloaded.
"""
from __future__ import annotations

import json
import shutil
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from pytest_s2st import assets
from pytest_s2st.config import load_config
from pytest_s2st.errors import S2STError
from pytest_s2st.pipelines.base import build_pipeline, known_model_types
from pytest_s2st.pipelines.qwen3tts import normalize_language
from pytest_s2st.service.synthesizers import pipeline_synthesizer
from pytest_s2st.tiny import qwen_tiny

REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / "configs" / "qwen3tts-tiny.yaml"
FRAME = 1920  # samples per codec frame at 24 kHz (12.5 Hz)
EN = {"id": "en", "text": "The library stays open late on Thursdays.", "language": "en", "voice": "Vivian", "seed": 7}
ZH = {"id": "zh", "text": "清晨的码头上，渔船一艘接一艘地靠岸。", "language": "zh", "voice": "Ryan", "seed": 7}


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory) -> Path:
    """Built once per session through the cache entry point, by two callers at once: one build."""
    cache = tmp_path_factory.getbasetemp() / "qwen3tts-cache" / "tiny"
    builds: list[Path] = []
    real_build = qwen_tiny.build_tiny_qwen3tts

    def counting_build(out_dir, seed=qwen_tiny.SEED):
        builds.append(Path(out_dir))
        return real_build(out_dir, seed)

    results: list[Path] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(qwen_tiny, "build_tiny_qwen3tts", counting_build)
        threads = [threading.Thread(target=lambda: results.append(qwen_tiny.tiny_qwen3tts_dir(cache)))
                   for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert results == [cache, cache]
    assert len(builds) == 1 and builds[0] != cache  # built in a temporary sibling, renamed into place
    return cache


@pytest.fixture(scope="module")
def pipeline(tiny_dir, monkeypatch_module):
    """The shipped example config, its ${QWEN3TTS_DIR} pointing at the tiny model."""
    monkeypatch_module.setenv("QWEN3TTS_DIR", str(tiny_dir))
    cfg = load_config(CONFIG, known_model_types=known_model_types())
    pipe = build_pipeline(cfg.model_type, cfg.stages, device="cpu", config_path=cfg.path)
    yield pipe
    pipe.close()


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


def _run(pipe, sample) -> dict:
    out = pipe.stages[0].forward(pipe.prepare_sample(sample))
    return out


def _stage(path, **extra) -> list[dict]:
    return [{"model_type": "Qwen3TTS", "path": str(path), "max_new_tokens": 10, **extra}]


# --- the builder ----------------------------------------------------------------------------


def test_same_seed_same_files_other_seed_other_weights(tiny_dir, tmp_path):
    again = qwen_tiny.build_tiny_qwen3tts(tmp_path / "again", seed=qwen_tiny.SEED)
    first = json.loads((tiny_dir / "model-assets.json").read_text())
    assert (again / "model-assets.json").read_bytes() == (tiny_dir / "model-assets.json").read_bytes()
    assert assets.check_manifest(again) == {k: v["sha256"] for k, v in first.items()}
    for name in ("config.json", "generation_config.json", "model.safetensors", "vocab.json", "merges.txt",
                 "tokenizer_config.json", "speech_tokenizer/config.json", "speech_tokenizer/model.safetensors",
                 "speech_tokenizer/preprocessor_config.json"):
        assert name in first, name

    other = json.loads((qwen_tiny.build_tiny_qwen3tts(tmp_path / "other", seed=1) / "model-assets.json").read_text())
    assert other["model.safetensors"]["sha256"] != first["model.safetensors"]["sha256"]
    assert other["speech_tokenizer/model.safetensors"]["sha256"] != first["speech_tokenizer/model.safetensors"]["sha256"]
    assert other["vocab.json"] == first["vocab.json"]  # the tokenizer depends on the corpus only


def test_build_refuses_a_non_empty_directory(tmp_path):
    (tmp_path / "x.txt").write_text("x")
    with pytest.raises(FileExistsError):
        qwen_tiny.build_tiny_qwen3tts(tmp_path)


def test_a_relative_model_path_is_the_yaml_folders_whatever_the_working_directory(tmp_path, monkeypatch):
    """stage1.path as the module's docstring promises: resolved against the YAML's folder, as fairseq's `path`
    and every other file key are (it was left to the working directory)."""
    (tmp_path / "cfg").mkdir()
    yaml = tmp_path / "cfg" / "q.yaml"
    yaml.write_text("general:\n  model_type: Qwen3TTS\nstage1:\n  path: ../models/qwen\n  manifest: m.json\n")
    monkeypatch.chdir(tmp_path)  # from here ../models/qwen is another folder
    stage = load_config(yaml, known_model_types=known_model_types()).stages[0]
    assert stage["path"] == str(tmp_path / "models" / "qwen") and stage["manifest"] == str(tmp_path / "cfg" / "m.json")


def test_config_carries_the_loader_constraints(tiny_dir):
    cfg = json.loads((tiny_dir / "config.json").read_text())
    assert cfg["model_type"] == "qwen3_tts" and cfg["tts_model_type"] == "custom_voice"
    assert "model_type" not in cfg["speaker_encoder_config"]  # "" there breaks loading
    talker = cfg["talker_config"]
    assert talker["vocab_size"] == qwen_tiny.CODEBOOK + 1024
    assert sum(talker["rope_scaling"]["mrope_section"]) == talker["head_dim"] // 2
    assert talker["code_predictor_config"]["num_code_groups"] == talker["num_code_groups"] == 16
    codec = json.loads((tiny_dir / "speech_tokenizer" / "config.json").read_text())
    assert codec["model_type"] == "qwen3_tts_tokenizer_12hz"
    dec = codec["decoder_config"]
    assert int(np.prod(dec["upsample_rates"] + dec["upsampling_ratios"])) == FRAME == codec["decode_upsample_rate"]


def test_text_tokenizer_gives_the_3_and_5_token_prompts(tiny_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_dir))
    assert len(tok("<|im_start|>assistant\n")["input_ids"]) == 3
    assert len(tok("<|im_end|>\n<|im_start|>assistant\n")["input_ids"]) == 5
    ids = tok(f"<|im_start|>assistant\n{ZH['text']}<|im_end|>\n<|im_start|>assistant\n")["input_ids"]
    assert tok.decode(ids[3:-5]) == ZH["text"]  # what generate slices out is exactly the text
    cfg = json.loads((tiny_dir / "config.json").read_text())
    assert tok.convert_tokens_to_ids("<|im_start|>") == cfg["im_start_token_id"]
    assert tok.convert_tokens_to_ids("<|tts_pad|>") == cfg["tts_pad_token_id"]


def test_cache_dir_follows_s2st_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("S2ST_CACHE_DIR", str(tmp_path))
    d = qwen_tiny.default_cache_dir()
    assert d.parent == tmp_path and d.name == f"qwen3tts-tiny-{qwen_tiny.cache_key()}"
    monkeypatch.delenv("S2ST_CACHE_DIR")
    assert qwen_tiny.default_cache_dir().parent == Path.home() / ".cache" / "pytest-s2st"


def test_cached_dir_is_reused_without_rebuilding(tiny_dir, monkeypatch):
    def fail(*a, **k):
        raise AssertionError("rebuilt a complete cache")

    monkeypatch.setattr(qwen_tiny, "build_tiny_qwen3tts", fail)
    assert qwen_tiny.tiny_qwen3tts_dir(tiny_dir) == tiny_dir


# --- the pipeline ---------------------------------------------------------------------------


def test_pipeline_shape(pipeline, tiny_dir):
    assert pipeline.model_type == "Qwen3TTS"
    assert pipeline.streaming is False
    assert [s.name for s in pipeline.stages] == ["tts"]
    got = pipeline.assets()
    manifest = json.loads((tiny_dir / "model-assets.json").read_text())
    assert got == {str(tiny_dir / rel): e["sha256"] for rel, e in manifest.items()}
    assert got[str(tiny_dir / "model.safetensors")] == assets.sha256_file(tiny_dir / "model.safetensors")


def test_english_and_chinese_with_two_voices(pipeline):
    outs = {}
    for sample in (EN, ZH, dict(EN, voice="Ryan")):
        out = _run(pipeline, sample)
        wav = out["waveform"]
        assert out["sample_rate"] == 24000
        assert isinstance(wav, np.ndarray) and wav.dtype == np.float32 and wav.ndim == 1
        assert 0 < wav.size <= 25 * FRAME and wav.size % FRAME == 0  # max_new_tokens: 25 in the config
        assert np.isfinite(wav).all() and wav.std() > 1e-3 and np.abs(wav).max() <= 1.0  # audible, not clipped
        outs[sample["id"] + sample["voice"]] = wav
    en_v, zh_r, en_r = outs["enVivian"], outs["zhRyan"], outs["enRyan"]
    assert not np.array_equal(en_v[: zh_r.size], zh_r[: en_v.size])  # text matters
    assert not np.array_equal(en_v[: en_r.size], en_r[: en_v.size])  # voice matters


def test_same_seed_same_waveform_other_seed_other_waveform(pipeline):
    a, b = _run(pipeline, EN)["waveform"], _run(pipeline, EN)["waveform"]
    assert np.array_equal(a, b)
    c = _run(pipeline, dict(EN, seed=EN["seed"] + 1))["waveform"]
    assert not np.array_equal(a[: c.size], c[: a.size])


def test_instruct_reaches_the_model(pipeline):
    plain = _run(pipeline, EN)["waveform"]
    styled = _run(pipeline, dict(EN, instruct="Speak slowly and softly."))["waveform"]
    assert not np.array_equal(plain[: styled.size], styled[: plain.size])


def test_prepare_sample_maps_workload_fields(pipeline):
    x = pipeline.prepare_sample({"id": 1, "text": "hi", "language": "zh-CN", "voice": "ryan", "seed": 3})
    assert x == {"id": 1, "text": "hi", "language": "Chinese", "speaker": "ryan", "seed": 3}
    # missing/None fields take the stage defaults (the server passes None for absent fields)
    x = pipeline.prepare_sample({"id": "d", "text": "hi", "language": None, "voice": None, "seed": None})
    assert (x["language"], x["speaker"], x["seed"]) == ("Auto", "Vivian", 0)
    assert pipeline.prepare_sample(dict(EN, language="English"))["language"] == "English"


@pytest.mark.parametrize("language, expected", [("en", "English"), ("EN-us", "English"), ("zh_CN", "Chinese"),
                                                ("chinese", "Chinese"), ("ja", "Japanese"), ("auto", "Auto")])
def test_normalize_language(language, expected):
    assert normalize_language(language) == expected


@pytest.mark.parametrize(
    "sample, match",
    [
        (dict(EN, language="xx"), r"sample 'en': language 'Xx' is not supported by .*; supported: auto, chinese"),
        (dict(EN, voice="nobody"), r"sample 'en': voice 'nobody' is not supported"),
        (dict(EN, text="  "), r"sample 'en': 'text' must be a non-empty string"),
        (dict(EN, seed=-2**63 - 1), r"sample 'en': 'seed' must be an integer in \[-2\*\*63, 2\*\*63\)"),
        ({"id": 0, "net_input": {"src_tokens": None}}, r"Qwen3TTS takes text samples .* with net_input"),
    ],
)
def test_bad_samples_are_one_line(pipeline, sample, match):
    with pytest.raises(S2STError, match=match) as e:
        pipeline.prepare_sample(sample)
    assert "\n" not in str(e.value) and str(CONFIG) in str(e.value)


def test_server_synthesizer_drives_the_pipeline(pipeline):
    synth = pipeline_synthesizer(pipeline)
    wav, sr = synth({"id": "s", "text": ZH["text"], "language": "zh", "voice": "Ryan", "seed": 7})
    assert sr == 24000
    assert np.array_equal(wav, _run(pipeline, ZH)["waveform"])


# --- refusals -------------------------------------------------------------------------------


def test_flipped_byte_in_weights_is_refused_naming_the_file(tiny_dir, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(tiny_dir, copy)
    weights = copy / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0x01
    weights.write_bytes(bytes(data))
    with pytest.raises(S2STError) as e:
        build_pipeline("Qwen3TTS", _stage(copy), device="cpu", config_path=tmp_path / "c.yaml")
    msg = str(e.value)
    assert "\n" not in msg and f"{weights}: SHA256" in msg


def test_model_dir_without_manifest_is_refused(tiny_dir, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(tiny_dir, copy)
    (copy / "model-assets.json").unlink()
    with pytest.raises(S2STError, match=r"model-assets\.json: asset manifest not found"):
        build_pipeline("Qwen3TTS", _stage(copy), device="cpu", config_path=tmp_path / "c.yaml")


@pytest.mark.parametrize(
    "stage, match",
    [
        ({"model_type": "Qwen3TTS"}, r"c\.yaml \(stage1\.path\): required"),
        ({"path": "/nonexistent/qwen"}, r"c\.yaml \(stage1\.path\): model directory /nonexistent/qwen does not exist"),
        ({"path": "TINY", "dtype": "int8"}, r"\(stage1\.dtype\): 'int8' is not one of float32"),
        ({"path": "TINY", "max_new_tokens": 0}, r"\(stage1\.max_new_tokens\): must be an integer >= 1"),
        ({"path": "TINY", "speaker": "nobody"}, r"c\.yaml \(stage1\.speaker\): voice 'nobody' is not supported"),
    ],
)
def test_bad_stage_keys_are_one_line(tiny_dir, tmp_path, stage, match):
    stage = {k: (str(tiny_dir) if v == "TINY" else v) for k, v in stage.items()}
    with pytest.raises(S2STError, match=match) as e:
        build_pipeline("Qwen3TTS", [stage], device="cpu", config_path=tmp_path / "c.yaml")
    assert "\n" not in str(e.value)


def test_missing_qwen_tts_says_to_install_the_extra(tiny_dir, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "qwen_tts", None)  # import qwen_tts -> ImportError
    with pytest.raises(S2STError, match=r"needs qwen-tts .*install the qwen extra") as e:
        build_pipeline("Qwen3TTS", _stage(tiny_dir), device="cpu", config_path=tmp_path / "c.yaml")
    assert "\n" not in str(e.value)
