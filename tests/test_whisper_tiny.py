"""The Whisper-style quality.asr_model_dir path (scorers.WhisperDirASR) on a tiny random Whisper built
offline (tiny/whisper_tiny.py): nothing downloaded, zh CER and en WER through it on real espeak-ng
speech, deterministic run to run, the model loaded once. Random weights give garbage transcripts: the
numbers are checked for being numbers, not for being good."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from pytest_s2st.errors import S2STError
from pytest_s2st.quality.scorers import Scorer, WhisperDirASR, get_scorer
from pytest_s2st.tiny.whisper_tiny import build_tiny_whisper
from espeak_runs import EN_ITEMS, ZH_ITEMS, make_run, records


@pytest.fixture(scope="session")
def whisper_dir(tmp_path_factory):
    return build_tiny_whisper(tmp_path_factory.mktemp("whisper") / "tiny")


@pytest.fixture(scope="session")
def speech(tmp_path_factory):
    root = tmp_path_factory.mktemp("whisper-runs")
    cache = root / "espeak"
    return {"zh": make_run(root / "zh", ZH_ITEMS, cache=cache), "en": make_run(root / "en", EN_ITEMS[:2], cache=cache)}


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    """Any attempt to reach the Hub fails instead of downloading."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


def test_build_is_offline_deterministic_and_loads_with_local_files_only(whisper_dir, tmp_path):
    from transformers import WhisperForConditionalGeneration, WhisperProcessor

    again = build_tiny_whisper(tmp_path / "again")
    manifest = json.loads((whisper_dir / "model-assets.json").read_text())
    assert manifest == json.loads((again / "model-assets.json").read_text())  # same seed, same bytes
    assert {"config.json", "generation_config.json", "model.safetensors", "vocab.json", "merges.txt",
            "preprocessor_config.json", "tokenizer_config.json"} <= set(manifest)
    other = json.loads((build_tiny_whisper(tmp_path / "seed1", seed=1) / "model-assets.json").read_text())
    assert other["model.safetensors"] != manifest["model.safetensors"] and other["vocab.json"] == manifest["vocab.json"]
    proc = WhisperProcessor.from_pretrained(whisper_dir, local_files_only=True)
    model = WhisperForConditionalGeneration.from_pretrained(whisper_dir, local_files_only=True)
    gen = model.generation_config
    assert set(gen.lang_to_id) == {"<|en|>", "<|zh|>"} and gen.task_to_id["transcribe"] == proc.tokenizer.convert_tokens_to_ids("<|transcribe|>")
    assert proc.tokenizer.decode(proc.tokenizer("今天天气很好").input_ids, skip_special_tokens=True) == "今天天气很好"


def transcripts(scores):
    return {rid: (s.error_rate, s.extra.get("error_metric"), s.extra.get("transcript")) for rid, s in scores.items()}


def test_zh_cer_and_en_wer_through_the_whisper_dir_once_loaded_and_deterministic(whisper_dir, speech):
    asr = WhisperDirASR(whisper_dir, languages=("en", "zh"))
    scorer = Scorer(asr={"en": asr, "zh": asr})
    zh, en = scorer.score_run(speech["zh"]), scorer.score_run(speech["en"])
    assert sorted(zh) == sorted(r["id"] for r in records(speech["zh"])) and len(zh) == 3  # warm-up scored too
    for scores, metric in ((zh, "cer"), (en, "wer")):
        for s in scores.values():
            assert s.extra["error_metric"] == metric and isinstance(s.extra["transcript"], str)
            assert isinstance(s.error_rate, float) and 0.0 <= s.error_rate < math.inf
            assert "error_rate_reason" not in s.extra
    assert asr.loads == 1 and asr.init_s is not None and asr.init_s > 0  # one load for both languages, 6 WAVs
    assert scorer.identity()["asr"]["zh"]["model_sha256"]["model.safetensors"]
    # a fresh scorer with its own load: the same transcripts and rates
    fresh = WhisperDirASR(whisper_dir, languages=("en", "zh"))
    again = Scorer(asr={"en": fresh, "zh": fresh})
    assert transcripts(again.score_run(speech["zh"])) == transcripts(zh)
    assert transcripts(again.score_run(speech["en"])) == transcripts(en)
    assert fresh.loads == 1


def test_the_gate_scorer_for_a_dir_is_one_per_process_and_loads_once(whisper_dir, speech, tmp_path):
    """get_scorer (what the gate and s2st-assess call) keeps ONE scorer per configuration: zh goes
    through the dir, en stays on pocketsphinx, and the Whisper model loads once however often it is asked."""
    scorer = get_scorer(None, str(whisper_dir))
    assert get_scorer(None, str(whisper_dir)) is scorer
    zh = scorer.asr["zh"]
    first = scorer.score_run(speech["zh"])
    second_run = make_run(tmp_path / "zh2", list(reversed(ZH_ITEMS)), warmups=0, cache=tmp_path / "espeak")
    second = get_scorer(None, str(whisper_dir)).score_run(second_run)
    assert all(s.extra["error_metric"] == "cer" for s in [*first.values(), *second.values()])
    assert zh.loads == 1 and isinstance(zh, WhisperDirASR)
    assert scorer.asr["en"].name == "pocketsphinx-en-us"


def test_audio_past_the_window_is_transcribed_window_by_window(whisper_dir):
    asr = WhisperDirASR(whisper_dir, languages=("en",))
    proc, model = asr._load()
    calls = []
    real = model.generate

    def counting(features, **kw):
        calls.append(tuple(features.shape))
        return real(features, **kw)

    model.generate = counting
    wav = (0.1 * np.sin(np.arange(65 * 16000) / 7.0)).astype(np.float32)  # 65 s: windows of 30, 30, 5 s
    text = asr.transcribe(wav, "en")
    assert len(calls) == 3 and all(shape == (1, 80, 3000) for shape in calls)
    assert isinstance(text, str) and asr.loads == 1


def test_a_dir_that_does_not_load_or_a_language_it_lacks_is_one_line(whisper_dir, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{}")
    asr = WhisperDirASR(broken, languages=("zh",))
    assert asr.unavailable("zh") is None  # looks like a model dir until it is loaded
    with pytest.raises(S2STError) as exc:
        asr.transcribe(np.zeros(16000, np.float32), "zh")
    msg = str(exc.value)
    assert msg.startswith(f"quality.asr_model_dir {broken}: not a loadable Whisper model dir: ") and "\n" not in msg
    assert asr.loads == 0
    lacking = WhisperDirASR(whisper_dir, languages=("fr",))
    with pytest.raises(S2STError, match=r"cannot transcribe 'fr'"):
        lacking.transcribe(np.zeros(16000, np.float32), "fr")
    assert "quality.asr_model_dir" in WhisperDirASR(None).unavailable("zh")
    assert "has no config.json" in WhisperDirASR(tmp_path).unavailable("zh")
