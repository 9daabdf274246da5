"""The tensor peak of a fixed Qwen3-TTS forward, counted by hand from the configuration (issue 17, item 5).

The forward: the 12 Hz speech tokenizer's decoder (``Qwen3TTSTokenizerV2Decoder.forward``) on F codec frames,
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
