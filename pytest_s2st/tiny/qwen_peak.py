"""The tensor peaks of fixed Qwen3-TTS forwards, counted by hand from the configuration (issue 17, item 5).

``talker_prefill_peak``: the talker's prefill over T positions with a KV cache (float32), below.

``codec_decode_peak``: the 12 Hz speech tokenizer's decoder (``Qwen3TTSTokenizerV2Decoder.forward``) on F codec frames,
the last step of every ``generate_custom_voice`` request. Measured with the dispatch pass
(pytest_s2st.measure.tensor_memory: live bytes of storages created during the call), it sets the request's
tensor peak, on the tiny model and at full size: the talker and the code predictor hold a few MiB at most
(KV cache, hidden states, logits) while the decoder's last upsampling block holds several tensors of
``channels x 1920 F`` samples.

Where the peak falls: in the last residual unit (dilation 9) of a decoder block, while its first causal
convolution runs. qwen-tts's ``ResidualUnit.forward`` keeps its input for ``+ residual`` and its SnakeBeta
output in ``hidden_state`` while ``conv1`` runs; ``CausalConvNet.forward`` pads (a new tensor, 54 samples
longer), then convolves. Around the block, ``Decoder.forward`` still holds the upsampled latent in ``hidden``
(its loop runs on ``wav``) and the block's input in ``wav`` until the block returns. Every other moment of
the forward holds less (the SnakeBeta inside holds 3 block-sized tensors, the transposed convolution
about 3.3), so the count is that moment's sum, maximised over the blocks (the last one for the released
and the tiny configurations: it has the most channel x samples).

What the count leaves out, and why the measured peak still equals it to the byte: the per-channel SnakeBeta
tensors (``exp(alpha)``, ``exp(beta)``, ``1/(beta+eps)``: C elements each) are dead by then; a kernel's
internal scratch is not seen by the dispatch pass at all. tests/test_qwen_peak.py checks equality on the
tiny model, benchmarks/test_full_size.py at full size; a difference means qwen-tts or torch changed what is
alive at that moment.

A whole request's peak is this one plus what generation leaves alive when the decode starts
(``decode_carry_bytes``). Nothing here imports torch: the configuration is read by attribute or key.
"""
from __future__ import annotations

import math
from typing import Any

# fixed by qwen-tts's code, not by the configuration
RESIDUAL_KERNEL = 7               # ResidualUnit.conv1: CausalConvNet(dim, dim, kernel_size=7, dilation=d)
RESIDUAL_DILATIONS = (1, 3, 9)    # DecoderBlock: one residual unit per dilation
CODE_BYTES = 8                    # codec codes are int64


def _get(config: Any, key: str) -> Any:
    return config[key] if isinstance(config, dict) else getattr(config, key)


def codec_decode_peak(decoder_config: Any, frames: int, dtype_bytes: int = 4) -> dict[str, Any]:
    """The decoder's tensor peak on ``frames`` codec frames (batch 1): {"bytes", "block" (the decoder block
    where it falls), "terms" (bytes per tensor alive at that moment)}. ``decoder_config``: the speech
    tokenizer's decoder_config (a dict, or the config object); ``dtype_bytes``: 4 for float32."""
    if frames < 1:
        raise ValueError(f"frames must be >= 1, got {frames}")
    latent = _get(decoder_config, "latent_dim")
    ratios = list(_get(decoder_config, "upsampling_ratios"))
    rates = list(_get(decoder_config, "upsample_rates"))
    width = _get(decoder_config, "decoder_dim")
    pad = (RESIDUAL_KERNEL - 1) * max(RESIDUAL_DILATIONS)  # the causal conv's left padding (stride 1: no extra)
    upsampled = frames * math.prod(ratios)                 # latent frames after the ConvNeXt upsampling stack
    best: dict[str, Any] | None = None
    for i, rate in enumerate(rates):
        channels = width // 2 ** (i + 1)       # block i's output channels
        samples = upsampled * math.prod(rates[: i + 1])  # block i's output samples (the transposed conv trims to it)
        terms = {
            # Decoder.forward's `hidden`: the upsample stack's output, (latent_dim, F * prod(upsampling_ratios))
            "upsampled_latent": latent * upsampled,
            # Decoder.forward's `wav` while block i runs: the block's input, 2C channels at samples / rate
            "block_input": 2 * channels * samples // rate,
            # the residual unit's input, kept for `hidden_state + residual`
            "residual": channels * samples,
            # act1 (SnakeBeta) output: the unit's `hidden_state` while conv1 runs
            "snake_output": channels * samples,
            # F.pad's output inside CausalConvNet: (kernel - 1) * dilation samples of left padding
            "padded": channels * (samples + pad),
            # conv1's output (stride 1, same length)
            "conv_output": channels * samples,
        }
        terms = {k: v * dtype_bytes for k, v in terms.items()}
        total = sum(terms.values())
        if best is None or total > best["bytes"]:
            best = {"bytes": total, "block": i, "terms": terms}
    assert best is not None
    return best


def decode_carry_bytes(talker_hidden: int, num_code_groups: int, frames: int, dtype_bytes: int = 4) -> int:
    """What a generate_custom_voice request keeps alive when its decode starts (batch 1, F frames), as
    measured on the tiny model: the talker's last hidden state of every step (F + 1 steps, the first one the
    prefill's last position), the codes three times (int64: the talker's stacked codes, the speech tokenizer's
    pad_sequence batch and its clamp) and a few scalars (audio lengths, the stop index: 64 bytes at most)."""
    return (frames + 1) * talker_hidden * dtype_bytes + 3 * frames * num_code_groups * CODE_BYTES + 64


def talker_prefill_peak(talker_config: Any, positions: int) -> dict[str, Any]:
    """The tensor peak of the talker's prefill (``Qwen3TTSTalkerForConditionalGeneration.forward`` on
    ``inputs_embeds`` of T >= 2 positions, batch 1, ``use_cache=True``, SDPA attention, float32 weights):
    {"bytes", "moment" ("mlp" or "logits"), "terms"}. ``talker_config``: the talker_config (dict or object).

    Two moments compete, both counted from qwen-tts's and transformers' code and measured equal to the byte:
    the last decoder layer's MLP at ``act(gate) * up`` (the full-size talker's peak: its 3 x intermediate
    dominates) and the codec head's logits over all T positions (the tiny talker's: its vocabulary of 3072 is
    48 x its hidden size). Attention's own moment (q, k, v and RoPE's temporaries) holds less for both. The KV
    cache is DynamicCache's: every layer's rotated k and v, copied into the cache by ``torch.cat`` onto an empty
    tensor, alive to the end. In bfloat16 RMSNorm's float32 copies add terms not counted here."""
    if positions < 2:
        raise ValueError(f"positions must be >= 2 (one position is a decode step, not a prefill), got {positions}")
    t = positions
    hidden, inter, vocab = (_get(talker_config, k) for k in ("hidden_size", "intermediate_size", "vocab_size"))
    layers, head_dim = _get(talker_config, "num_hidden_layers"), _get(talker_config, "head_dim")
    kv = _get(talker_config, "num_key_value_heads") * head_dim
    f32 = 4
    cache = 2 * layers * kv * t * f32  # DynamicCache: k and v of every layer, (1, kv heads, T, head_dim) each
    mlp = {
        "kv_cache": cache,
        # the model's `position_embeddings`: cos and sin of the 3 mrope sections, (3, 1, T, head_dim) each
        "rope_cos_sin": 2 * 3 * t * head_dim * f32,
        "cache_position": t * 8,  # torch.arange over the T positions (int64)
        # the last layer's input, held by the model's loop variable (the first layer's is the caller's input)
        "layer_input": t * hidden * f32 if layers > 1 else 0,
        "residual": t * hidden * f32,       # input + attention output: the MLP's residual
        "normed": t * hidden * f32,         # post_attention_layernorm's output, the MLP's input
        "act_gate": t * inter * f32,        # act_fn(gate_proj(x)) (gate_proj's output died when act_fn returned)
        "up": t * inter * f32,              # up_proj(x)
        "product": t * inter * f32,         # act_gate * up
    }
    logits = {
        "kv_cache": cache,
        "normed": t * hidden * f32,         # the final norm's output (the last hidden state)
        "logits": t * vocab * f32,          # codec_head over all T positions
    }
    a, b = sum(mlp.values()), sum(logits.values())
    return ({"bytes": a, "moment": "mlp", "terms": mlp} if a >= b else
            {"bytes": b, "moment": "logits", "terms": logits})
