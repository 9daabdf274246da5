"""The tensor peaks of fixed Qwen3-TTS forwards (the 12 Hz codec decoder on F frames, the talker's prefill over T
positions) against their counts by hand (pytest_s2st.tiny.qwen_peak), on the tiny model; benchmarks/test_full_size.py
checks the same at full size."""
from __future__ import annotations

from pathlib import Path

import pytest

from pytest_s2st.tiny import qwen_peak

TINY_DECODER = dict(latent_dim=32, upsampling_ratios=[2, 2], upsample_rates=[8, 5, 4, 3], decoder_dim=64)
FULL_DECODER = dict(latent_dim=1024, upsampling_ratios=[2, 2], upsample_rates=[8, 5, 4, 3], decoder_dim=1536)


def test_count_by_hand_tiny_10_frames():
    # F = 10: the last block has C = 64 / 16 = 4 channels at L = 10 * 1920 = 19200 samples; its input 8 channels
    # at 19200 / 3 = 6400; the upsampled latent 32 channels at 10 * 4 = 40 frames. In float32:
    #   latent 32*40*4 = 5,120; block input 8*6400*4 = 204,800; residual, SnakeBeta output, conv output
    #   3 * 4*19200*4 = 921,600; padded 4*(19200+54)*4 = 308,064; total 1,439,584
    peak = qwen_peak.codec_decode_peak(TINY_DECODER, 10)
    assert peak["bytes"] == 1_439_584 and peak["block"] == 3
    assert peak["terms"] == {"upsampled_latent": 5_120, "block_input": 204_800, "residual": 307_200,
                             "snake_output": 307_200, "padded": 308_064, "conv_output": 307_200}


def test_count_by_hand_full_size_1_frame():
    # F = 1 at the released sizes: C = 1536 / 16 = 96 channels at 1920 samples; input 192 x 640; latent 1024 x 4.
    #   (4,096 + 122,880 + 3 * 184,320 + 96 * 1974) * 4 B = 869,440 * 4 = 3,477,760 (measured at full size: the same)
    assert qwen_peak.codec_decode_peak(FULL_DECODER, 1)["bytes"] == 3_477_760
    # bfloat16 halves every term; the peak grows linearly in F but for the 54 padding samples
    assert qwen_peak.codec_decode_peak(FULL_DECODER, 1, dtype_bytes=2)["bytes"] == 3_477_760 // 2
    per_frame = qwen_peak.codec_decode_peak(FULL_DECODER, 2)["bytes"] - 3_477_760
    assert per_frame == (4096 + 122_880 + 4 * 184_320) * 4


def test_count_refuses_zero_frames():
    with pytest.raises(ValueError, match="frames must be >= 1, got 0"):
        qwen_peak.codec_decode_peak(TINY_DECODER, 0)


TINY_TALKER = dict(hidden_size=64, intermediate_size=128, vocab_size=3072, num_hidden_layers=2, head_dim=16,
                   num_key_value_heads=2)
FULL_TALKER = dict(hidden_size=1024, intermediate_size=3072, vocab_size=3072, num_hidden_layers=28, head_dim=128,
                   num_key_value_heads=8)


def test_prefill_count_by_hand():
    # tiny, T = 20: the logits moment. KV cache 2 layers * (k + v) * 2 heads * 16 * 20 * 4 B = 10,240; the final
    # norm's output 20 * 64 * 4 = 5,120; logits 20 * 3072 * 4 = 245,760; total 261,120 (the MLP moment: 64,160)
    tiny = qwen_peak.talker_prefill_peak(TINY_TALKER, 20)
    assert (tiny["bytes"], tiny["moment"]) == (261_120, "logits")
    # full size, T = 20: the last layer's MLP. KV cache 28 * 2 * 8 * 128 * 20 * 4 B = 4,587,520; cos + sin
    # 2 * 3 * 20 * 128 * 4 = 61,440; cache_position 160; layer input, residual, normed 3 * 20 * 1024 * 4 = 245,760;
    # act(gate), up, product 3 * 20 * 3072 * 4 = 737,280; total 5,632,160 (the logits moment: 4,915,200)
    full = qwen_peak.talker_prefill_peak(FULL_TALKER, 20)
    assert (full["bytes"], full["moment"]) == (5_632_160, "mlp")
    with pytest.raises(ValueError, match="positions must be >= 2"):
        qwen_peak.talker_prefill_peak(TINY_TALKER, 1)


def test_carry_by_hand():
    # F = 24 frames, talker hidden 64: 25 hidden states * 64 * 4 B = 6,400; codes 3 * 24 * 16 * 8 B = 9,216; + 64
    assert qwen_peak.decode_carry_bytes(64, 16, 24) == 6_400 + 9_216 + 64


# --- measured: the dispatch pass against the count --------------------------------------------------


@pytest.fixture(scope="module")
def tiny_decoder():
    """The tiny codec's decoder at the tiny builder's config (random weights: the bytes do not depend on them)."""
    pytest.importorskip("qwen_tts")
    import torch
    from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Model

    from pytest_s2st.tiny.qwen_tiny import codec_config

    torch.manual_seed(0)
    return Qwen3TTSTokenizerV2Model(codec_config()).eval().decoder


def test_tiny_config_is_the_one_counted_here(tiny_decoder):
    cfg = tiny_decoder.config
    assert {k: getattr(cfg, k) for k in TINY_DECODER} == TINY_DECODER


@pytest.mark.parametrize("frames", [1, 7, 24])
def test_decoder_tensor_peak_equals_the_count(tiny_decoder, frames):
    """The dispatch pass (what `tensor_peak_mib` reports) on the decoder alone: equal to the byte. The count
    leaves out only tensors that are dead at its moment (SnakeBeta's per-channel terms) and kernel scratch, which
    the pass does not see: tolerance 0."""
    import torch

    from pytest_s2st.measure.tensor_memory import measure_tensor_memory

    cfg = tiny_decoder.config
    codes = torch.randint(0, cfg.codebook_size, (1, cfg.num_quantizers, frames),
                          generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        wav, metric = measure_tensor_memory(tiny_decoder, codes)
    assert wav.shape[-1] == frames * 1920
    assert metric.details["peak_bytes"] == qwen_peak.codec_decode_peak(cfg, frames)["bytes"]


@pytest.fixture(scope="module")
def tiny_talker():
    """The tiny model's talker, loaded from the tiny build (float32)."""
    pytest.importorskip("qwen_tts")
    import contextlib
    import sys

    import torch

    from pytest_s2st.tiny.qwen_tiny import tiny_qwen3tts_dir

    with contextlib.redirect_stdout(sys.stderr):  # qwen_tts prints a flash-attn banner on import
        from qwen_tts.core.models import Qwen3TTSForConditionalGeneration
    model = Qwen3TTSForConditionalGeneration.from_pretrained(str(tiny_qwen3tts_dir()), dtype=torch.float32)
    return model.eval().talker


def test_tiny_talker_is_the_one_counted_here(tiny_talker):
    cfg = tiny_talker.config
    assert {k: getattr(cfg, k) for k in TINY_TALKER} == TINY_TALKER
    assert cfg._attn_implementation == "sdpa"  # the count's attention: no score matrix is materialised


@pytest.mark.parametrize("positions", [2, 20, 33])
def test_prefill_tensor_peak_equals_the_count(tiny_talker, positions):
    """The talker's prefill over T positions with a KV cache, through the dispatch pass: equal to the byte (what
    the count leaves out, SDPA's internal scratch, is not seen by the pass; tolerance 0)."""
    import torch

    from pytest_s2st.measure.tensor_memory import measure_tensor_memory

    emb = torch.randn(1, positions, tiny_talker.config.hidden_size, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        out, metric = measure_tensor_memory(tiny_talker, inputs_embeds=emb, use_cache=True)
    assert out.logits.shape == (1, positions, tiny_talker.config.vocab_size)
    assert out.past_key_values.get_seq_length() == positions
    assert metric.details["peak_bytes"] == qwen_peak.talker_prefill_peak(tiny_talker.config, positions)["bytes"]


def test_request_peak_is_the_decode_plus_what_generation_leaves(tmp_path):
    """A whole generate_custom_voice request on the tiny model: its tensor peak is set by the codec decode, over
    what generation keeps alive at that moment (decode_carry_bytes: exact but for up to 64 bytes of scalars)."""
    pytest.importorskip("qwen_tts")
    from pytest_s2st.measure.tensor_memory import measure_tensor_memory
    from pytest_s2st.pipelines.qwen3tts import build
    from pytest_s2st.tiny.qwen_tiny import tiny_qwen3tts_dir

    pipeline = build([{"path": str(tiny_qwen3tts_dir()), "max_new_tokens": 25}], device="cpu",
                     config_path=Path("tiny.yaml"))
    try:
        x = pipeline.prepare_sample({"id": "a", "text": "Hello world, this is a tiny test.", "language": "en",
                                     "seed": 7})
        out, metric = measure_tensor_memory(pipeline.stages[0].forward, x)
        inner = pipeline.model.model
        frames, rest = divmod(len(out["waveform"]), int(inner.speech_tokenizer.model.decoder.total_upsample))
        talker = inner.config.talker_config
        decode = qwen_peak.codec_decode_peak(inner.speech_tokenizer.model.decoder.config, frames)["bytes"]
        carry = qwen_peak.decode_carry_bytes(talker.hidden_size, talker.num_code_groups, frames)
    finally:
        pipeline.close()
    assert rest == 0 and frames >= 10, (frames, rest)  # a random model: EOS is possible, but not this early
    assert decode + carry - 64 <= metric.details["peak_bytes"] <= decode + carry, (metric.details, decode, carry)
