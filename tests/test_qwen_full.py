"""The full-size Qwen3-TTS build's configuration against the released checkpoint: counted on the meta
device (no weights, no memory), so CI stays fast."""
from __future__ import annotations

import pytest

pytest.importorskip("qwen_tts")

from pytest_s2st.tiny import qwen_full  # noqa: E402


@pytest.fixture(scope="module")
def counts():
    return qwen_full.param_counts()


def test_talker_parameter_count_is_the_released_checkpoints(counts):
    # released model.safetensors: 1.81 GB of bfloat16 -> 905 M values; 5 % is the tolerance
    assert abs(counts["talker"] / qwen_full.RELEASED["talker"] - 1) < 0.05, counts


def test_speech_tokenizer_count_is_the_released_checkpoints(counts):
    assert abs(counts["speech_tokenizer_stored"] / qwen_full.RELEASED["speech_tokenizer_stored"] - 1) < 0.05, counts


def test_text_embedding_is_151936_by_2048(counts):
    # the count the notes measured by hand: 151936 x 2048 = 311,164,928
    assert counts["text_embedding"] == 151936 * 2048


def test_counts_add_up(counts):
    assert counts["total"] == counts["talker"] + counts["speech_tokenizer_stored"]
    assert counts["speech_tokenizer"] < counts["speech_tokenizer_stored"]  # Mimi's codebooks are buffers


def test_code_predictor_count_by_hand(counts):
    # 5 layers at hidden 1024: q 1024x2048, k and v 1024x1024 each, o 2048x1024, q/k norms 2x128, MLP 3x1024x3072,
    # two layer norms 2x1024; then its final norm 1024, 15 codec embeddings 2048x1024 and 15 heads 1024x2048
    layer = 1024 * 2048 + 2 * 1024 * 1024 + 2048 * 1024 + 2 * 128 + 3 * 1024 * 3072 + 2 * 1024
    assert counts["code_predictor"] == 5 * layer + 1024 + 15 * 2048 * 1024 * 2, counts


def test_repo_config_loads_with_its_serve_section(tmp_path, monkeypatch):
    """configs/full/qwen3tts.yaml resolves its ${QWEN3TTS_FULL_DIR} path and its serve section at load."""
    from pathlib import Path

    from pytest_s2st.cases import known_model_types
    from pytest_s2st.config import load_config

    monkeypatch.setenv("QWEN3TTS_FULL_DIR", str(tmp_path))
    config = load_config(Path(__file__).resolve().parents[1] / "configs" / "full" / "qwen3tts.yaml",
                         known_model_types=known_model_types())
    assert config.model_type == "Qwen3TTS"
    assert str(tmp_path) in str(config.stages[0])
