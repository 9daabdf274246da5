"""Qwen3-TTS 12Hz-0.6B CustomVoice at its released sizes, random weights, built offline.

``build(out_dir, seed)`` writes the same directory layout as the tiny builder (qwen_tiny.write_model:
config.json, generation_config.json, model.safetensors, Qwen2 tokenizer files, speech_tokenizer/,
model-assets.json) with every dimension of the released checkpoint; same seed -> same SHA256.
``param_counts()`` counts the parameters on the meta device (no memory, no weights).

Released values (public copies of the released config.json files, cross-checked against ports of
the model and its model card):
- talker: 28 layers, hidden 1024, intermediate 3072, 16 heads / 8 KV heads, head_dim 128,
  mrope_section [24, 20, 20] (interleaved), rope_theta 1e6, codec vocab 3072, text vocab 151936 x 2048
  (the text embedding, then a 2048 -> 2048 -> 1024 projection), 16 code groups;
- code predictor: 5 layers, hidden 1024, intermediate 3072, 16 heads / 8 KV heads, head_dim 128, vocab 2048;
- 12 Hz speech tokenizer decoder: latent 1024, codebook_dim 512, codebook 2048, decoder_dim 1536,
  hidden 512, intermediate 1024, 8 layers of 16 heads x 64, sliding window 72, upsample [8,5,4,3] x [2,2];
  encoder: Mimi at its published defaults (hidden 512, 8 layers, 32 quantisers of which 16 are used).
The released checkpoint's sizes: Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice's file list on the Hub shows
model.safetensors 1.81 GB (bfloat16: 905 M parameters, the Hub's "0.9B params"); its float32
speech_tokenizer/model.safetensors is 651 MB (a public model card of a compressed derivative, which
also gives the text embedding as 622 MB = 151936 x 2048 x 2 B, i.e. decimal MB): 163 M stored values.

Not released-identical, on purpose: the text tokenizer is the tiny builder's locally trained BPE
(Qwen2's 151k-token vocabulary cannot be built offline; the embedding keeps all 151936 rows, so the
parameter count and the per-token cost are the released ones), and speaker/language ids follow the
tiny builder's layout. The talker is stored in bfloat16 (as released), the codec in float32.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ..assets import MANIFEST_NAME, sha256_file
from ..pipelines.qwen3tts import quiet_banner
from .cache import build_once, cache_root, dist_version, source_key
from .qwen_tiny import codec_config, main_config, write_model

SEED = 0
TEXT_VOCAB = 151936
TALKER = dict(
    hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
    head_dim=128, max_position_embeddings=32768, text_hidden_size=2048, rope_theta=1000000,
    rope_scaling={"interleaved": True, "mrope_section": [24, 20, 20], "rope_type": "default"},
)
CODE_PREDICTOR = dict(
    hidden_size=1024, intermediate_size=3072, num_hidden_layers=5, num_attention_heads=16, num_key_value_heads=8,
    head_dim=128, max_position_embeddings=65536, rope_theta=1000000,
)
CODEC_DECODER = dict(
    codebook_size=2048, codebook_dim=512, latent_dim=1024, decoder_dim=1536, hidden_size=512,
    intermediate_size=1024, num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=16, head_dim=64,
    num_quantizers=16, sliding_window=72, upsample_rates=[8, 5, 4, 3], upsampling_ratios=[2, 2],
    max_position_embeddings=8000, rope_theta=10000, layer_scale_initial_scale=0.01, rms_norm_eps=1e-5,
)
CODEC_ENCODER = dict(frame_rate=12.5, num_quantizers=32, codebook_size=2048)  # Mimi's published defaults otherwise
TALKER_DTYPE = "bfloat16"

# The released checkpoint's parameters, from its published byte sizes (see the module docstring).
RELEASED = {"talker": 1.81e9 / 2, "speech_tokenizer_stored": 651e6 / 4}
RELEASED_SOURCE = ("model.safetensors 1.81 GB bfloat16 (the Hub's file list of Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice); "
                   "speech_tokenizer/model.safetensors 651 MB float32 (a public card of a compressed derivative)")
# ids of the specials of the tokenizer the builder trains (qwen_tiny.SPECIALS order); only the
# config's token ids depend on them, never a parameter count
_META_IDS = {"<|endoftext|>": 0, "<|im_start|>": 1, "<|im_end|>": 2, "<|tts_pad|>": 3, "<|tts_text_bos|>": 4,
             "<|tts_text_eod|>": 5, "vocab": TEXT_VOCAB}


def _main(ids: dict[str, int]) -> Any:
    return main_config(ids, TALKER, CODE_PREDICTOR, text_vocab_size=TEXT_VOCAB, tts_model_size="0b6")


def _codec() -> Any:
    return codec_config(CODEC_ENCODER, CODEC_DECODER)


def _stored(model: Any) -> int:
    """Elements a checkpoint file holds: parameters and persistent buffers (Mimi's codebooks are buffers)."""
    return sum(t.numel() for t in model.state_dict().values())


def param_counts() -> dict[str, int]:
    """Parameter counts of the full-size build, counted on the meta device (no memory is allocated,
    nothing is initialised): "talker" (talker + code predictor + text embedding), "text_embedding",
    "code_predictor" (the part of "talker" that predicts codebooks 2-16 of each frame),
    "speech_tokenizer" (its parameters) and "speech_tokenizer_stored" (parameters and persistent
    buffers: what its model.safetensors holds), "total" (talker + speech_tokenizer_stored)."""
    import torch

    with quiet_banner():  # qwen_tts prints a flash-attn banner on import
        from qwen_tts.core.models import Qwen3TTSForConditionalGeneration
        from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Model

    with torch.device("meta"):
        talker = Qwen3TTSForConditionalGeneration(_main(_META_IDS))
        codec = Qwen3TTSTokenizerV2Model(_codec())
    t = _stored(talker)
    return {"talker": t, "text_embedding": talker.talker.get_text_embeddings().weight.numel(),
            "code_predictor": _stored(talker.talker.code_predictor),
            "speech_tokenizer": sum(p.numel() for p in codec.parameters()),
            "speech_tokenizer_stored": _stored(codec), "total": t + _stored(codec)}


def build(out_dir: Path, seed: int = SEED) -> dict[str, dict[str, Any]]:
    """Write the full-size model into out_dir (created; must be empty or absent). Returns its asset
    manifest entry as the tiny builders give them: {"qwen3tts": {"path", "sha256", "bytes", "build_s"}}
    (sha256: of its model-assets.json, which names every file's SHA256), plus "params"."""
    t0 = time.perf_counter()
    out = write_model(Path(out_dir), seed, _main, _codec(), talker_dtype=TALKER_DTYPE)
    manifest = out / MANIFEST_NAME
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    return {"qwen3tts": {"path": str(out), "sha256": sha256_file(manifest), "bytes": size,
                         "build_s": round(time.perf_counter() - t0, 3), "params": param_counts()}}


def cache_key() -> str:
    from . import qwen_tiny

    return (f"{dist_version('qwen-tts')}-tf{dist_version('transformers')}-torch{dist_version('torch')}-"
            f"{source_key(__file__)}-{source_key(qwen_tiny.__file__)}")


def full_qwen3tts_dir(cache_dir: Path | None = None, seed: int = SEED) -> Path:
    """Build once into cache_dir (default: under the shared cache) and return it (file lock, atomic rename)."""
    target = Path(cache_dir) if cache_dir is not None else cache_root() / f"qwen3tts-full-{cache_key()}"
    if seed != SEED and cache_dir is None:
        target = target.with_name(f"{target.name}-seed{seed}")
    return build_once(target, MANIFEST_NAME, lambda tmp: build(tmp, seed=seed), "the full-size Qwen3-TTS")
