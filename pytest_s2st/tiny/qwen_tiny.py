"""A tiny random Qwen3-TTS CustomVoice model, built offline, that qwen-tts's own loader accepts.

``build_tiny_qwen3tts(out_dir, seed)`` writes the directory layout of a released checkpoint
(config.json, generation_config.json, model.safetensors, Qwen2 tokenizer files, speech_tokenizer/)
with every size shrunk, plus model-assets.json. Same seed -> same SHA256 of every file.
``tiny_qwen3tts_dir()`` builds once into a cache shared by processes (file lock, atomic rename).

What has to hold for the package to load and run it (found by reading qwen-tts 0.1.1 and loading the result):
- ``<|im_start|>assistant\\n`` must tokenise to exactly 3 tokens and
  ``<|im_end|>\\n<|im_start|>assistant\\n`` to 5 (generate slices ``[:, :3]`` and ``[:, 3:-5]``);
- talker vocab = codebook size + 1024 (the top 1024 ids are suppressed except codec EOS);
  mrope_section sums to head_dim / 2; talker and code predictor both have 16 code groups;
- save_pretrained writes ``"model_type": ""`` into speaker_encoder_config, which then fails to
  load: the key is stripped;
- codebooks start at zero (exact silence): they are randomised, with a small SnakeBeta alpha.

Imports torch/transformers/qwen_tts lazily: only called when staging is asked for.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..assets import MANIFEST_NAME, write_manifest
from ..pipelines.qwen3tts import quiet_banner
from .cache import build_once, cache_root, dist_version, source_key

SEED = 0
SAMPLE_RATE = 24000
CODEBOOK = 2048
NUM_CODE_GROUPS = 16
OUTPUT_GAIN = 0.01

# Released CustomVoice speakers and languages; ids follow the published layout (languages from
# 2050, speakers from 2301). Dialect speakers switch Chinese to their dialect id.
SPEAKERS = ("vivian", "serena", "uncle_fu", "dylan", "eric", "ryan", "aiden", "ono_anna", "sohee")
DIALECTS = {"dylan": "beijing_dialect", "eric": "sichuan_dialect"}
LANGUAGES = ("chinese", "english", "german", "italian", "portuguese", "spanish", "japanese", "korean",
             "french", "russian", "beijing_dialect", "sichuan_dialect")
CODEC_IDS = {"codec_pad_id": 2148, "codec_bos_id": 2149, "codec_eos_token_id": 2150, "codec_think_id": 2154,
             "codec_nothink_id": 2155, "codec_think_bos_id": 2156, "codec_think_eos_id": 2157}

SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|tts_pad|>", "<|tts_text_bos|>", "<|tts_text_eod|>")
# Qwen2's pre-tokenizer split
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
TEXT_VOCAB = 400
CORPUS = (
    "assistant user system",
    "The library on the corner stays open late on Thursdays, so I usually finish my reading there.",
    "Turn left after the second bridge, and you will see a blue gate next to an old bakery.",
    "Hello world, this is a tiny test of speech models running offline.",
    "清晨的码头上，渔船一艘接一艘地靠岸，海鸥在桅杆之间来回盘旋。",
    "请在下周三之前把修改后的预算表发给我，我们周四上午一起核对。",
    "你好世界，这是一个离线运行的小型语音模型测试。",
)


def _train_text_tokenizer(out: Path) -> dict[str, int]:
    """Byte-level BPE trained on CORPUS, saved as Qwen2 tokenizer files; returns the special ids."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import Qwen2TokenizerFast

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=TEXT_VOCAB, special_tokens=list(SPECIALS), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    # "assistant" repeated so that it becomes a single token (the 3/5-token constraint)
    tok.train_from_iterator(list(CORPUS) + ["assistant\n"] * 50, trainer=trainer)
    hf = Qwen2TokenizerFast(tokenizer_object=tok, bos_token=None, eos_token="<|endoftext|>",
                            pad_token="<|endoftext|>", unk_token=None, add_prefix_space=False, errors="replace",
                            model_max_length=32768, clean_up_tokenization_spaces=False)
    hf.save_pretrained(out)
    tok.model.save(str(out))  # vocab.json + merges.txt, the files a Qwen2 checkpoint ships
    for prompt, n in (("<|im_start|>assistant\n", 3), ("<|im_end|>\n<|im_start|>assistant\n", 5)):
        got = hf(prompt)["input_ids"]
        if len(got) != n:
            raise RuntimeError(f"tiny tokenizer: {prompt!r} -> {len(got)} tokens, qwen-tts needs {n}")
    return {s: tok.token_to_id(s) for s in SPECIALS} | {"vocab": tok.get_vocab_size()}


TALKER = dict(
    hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
    head_dim=16, max_position_embeddings=4096, text_hidden_size=32,
    rope_scaling={"interleaved": True, "mrope_section": [4, 2, 2], "rope_type": "default"},
)
CODE_PREDICTOR = dict(
    hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
    head_dim=16, max_position_embeddings=4096,
)


def main_config(ids: dict[str, int], talker_sizes: dict[str, Any] | None = None,
                predictor_sizes: dict[str, Any] | None = None, text_vocab_size: int | None = None,
                tts_model_size: str = "1b7") -> Any:
    """The CustomVoice config at the given sizes (default: the tiny ones), with the released codec-id
    layout; ``text_vocab_size`` defaults to the trained tokenizer's vocabulary."""
    with quiet_banner():  # the first qwen_tts import prints a flash-attn banner
        from qwen_tts.core.models import Qwen3TTSConfig

    languages = {name: 2050 + i for i, name in enumerate(LANGUAGES)}
    speakers = {name: 2301 + i for i, name in enumerate(SPEAKERS)}
    talker = dict(
        vocab_size=CODEBOOK + 1024, **(talker_sizes or TALKER),
        num_code_groups=NUM_CODE_GROUPS, text_vocab_size=text_vocab_size or ids["vocab"],
        spk_id=speakers, spk_is_dialect={s: DIALECTS.get(s, False) for s in SPEAKERS},
        codec_language_id=languages, **CODEC_IDS,
        code_predictor_config=dict(vocab_size=CODEBOOK, **(predictor_sizes or CODE_PREDICTOR),
                                   num_code_groups=NUM_CODE_GROUPS),
    )
    return Qwen3TTSConfig(
        talker_config=talker, speaker_encoder_config={"enc_dim": 64}, tokenizer_type="qwen3_tts_tokenizer_12hz",
        tts_model_size=tts_model_size, tts_model_type="custom_voice",
        im_start_token_id=ids["<|im_start|>"], im_end_token_id=ids["<|im_end|>"],
        tts_pad_token_id=ids["<|tts_pad|>"], tts_bos_token_id=ids["<|tts_text_bos|>"],
        tts_eos_token_id=ids["<|tts_text_eod|>"],
    )


def codec_config(encoder: dict[str, Any] | None = None, decoder: dict[str, Any] | None = None) -> Any:
    with quiet_banner():
        from qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Config

    encoder_sizes = dict(  # Mimi: 24 kHz / (8*6*5*4) / 2 = 12.5 Hz
        hidden_size=32, num_filters=8, upsampling_ratios=[8, 6, 5, 4], codebook_size=CODEBOOK, codebook_dim=16,
        num_quantizers=NUM_CODE_GROUPS, vector_quantization_hidden_dimension=16, num_hidden_layers=1,
        intermediate_size=64, num_attention_heads=2, num_key_value_heads=2, head_dim=16, upsample_groups=32,
        frame_rate=12.5,
    )
    decoder_sizes = dict(  # 1920 samples per frame: 8*5*4*3 * 2*2
        codebook_size=CODEBOOK, codebook_dim=16, hidden_size=32, latent_dim=32, num_attention_heads=2,
        num_key_value_heads=2, head_dim=16, intermediate_size=64, num_hidden_layers=1,
        num_quantizers=NUM_CODE_GROUPS, upsample_rates=[8, 5, 4, 3], upsampling_ratios=[2, 2], decoder_dim=64,
        sliding_window=72,
    )
    return Qwen3TTSTokenizerV2Config(
        encoder_config=encoder_sizes if encoder is None else encoder,
        decoder_config=decoder_sizes if decoder is None else decoder, encoder_valid_num_quantizers=NUM_CODE_GROUPS,
        input_sample_rate=SAMPLE_RATE, output_sample_rate=SAMPLE_RATE,
        decode_upsample_rate=1920, encode_downsample_rate=1920,
    )


def _randomise_codec(model: Any, gen: Any) -> None:
    """Default init leaves codebooks at zero (decodes to silence): fill them; keep SnakeBeta tame."""
    import torch

    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("embedding_sum"):
                p.copy_(torch.randn(p.shape, generator=gen))
            elif name.endswith("cluster_usage"):
                p.fill_(1.0)
            elif name.endswith(".alpha") or name.endswith(".beta"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))


def _reinit(model: Any, gen: Any, fan_in_scaled: bool = False) -> None:
    """Matrices from one explicit generator (1-D parameters keep their constant init). The talker
    uses a small fixed scale; the codec scales by 1/sqrt(fan-in) so that the waveform keeps an
    audible level through its stack of convolutions instead of shrinking towards zero."""
    import math

    import torch

    with torch.no_grad():
        for _, p in sorted(model.named_parameters()):
            if p.dim() >= 2:
                std = 1.0 / math.sqrt(math.prod(p.shape[1:])) if fan_in_scaled else 0.02
                p.copy_(torch.randn(p.shape, generator=gen).mul_(std))


def _strip_empty_model_type(config_path: Path) -> None:
    cfg = json.loads(config_path.read_text())
    sub = cfg.get("speaker_encoder_config", {})
    if sub.get("model_type", None) == "":
        del sub["model_type"]
    config_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def build_tiny_qwen3tts(out_dir: Path, seed: int = SEED) -> Path:
    """Write the tiny model into out_dir (created; must be empty or absent); return out_dir."""
    return write_model(out_dir, seed, lambda ids: main_config(ids), codec_config())


def write_model(out_dir: Path, seed: int, make_config: Any, codec_cfg: Any, talker_dtype: str | None = None) -> Path:
    """Tokenizer, random talker (``make_config(special ids)``), random codec, generation config and
    model-assets.json into out_dir (created; must be empty or absent). ``talker_dtype`` ("bfloat16")
    stores the talker in that dtype, as released checkpoints do; the codec stays float32."""
    import torch
    from transformers import EncodecFeatureExtractor

    with quiet_banner():  # qwen_tts prints a flash-attn banner on import
        from qwen_tts.core.models import Qwen3TTSForConditionalGeneration
        from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Model

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if any(out.iterdir()):
        raise FileExistsError(f"{out}: not empty")
    ids = _train_text_tokenizer(out)

    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    default_dtype = torch.get_default_dtype()
    if talker_dtype is not None:  # built in that dtype: no float32 copy of a GB-sized model in memory
        torch.set_default_dtype(getattr(torch, talker_dtype))
    try:
        model = Qwen3TTSForConditionalGeneration(make_config(ids)).eval()
    finally:
        torch.set_default_dtype(default_dtype)
    _reinit(model, gen)  # drawn in float32 and rounded into the parameter's dtype
    model.save_pretrained(out, safe_serialization=True)
    del model
    _strip_empty_model_type(out / "config.json")
    # sampling defaults read by Qwen3TTSModel (the released generation_config.json's keys)
    generate = {"do_sample": True, "top_k": 50, "top_p": 1.0, "temperature": 0.9, "repetition_penalty": 1.05,
                "subtalker_dosample": True, "subtalker_top_k": 50, "subtalker_top_p": 1.0,
                "subtalker_temperature": 0.9, "max_new_tokens": 8192}
    (out / "generation_config.json").write_text(json.dumps(generate, indent=2, sort_keys=True) + "\n")

    codec_dir = out / "speech_tokenizer"
    codec = Qwen3TTSTokenizerV2Model(codec_cfg).eval()
    _reinit(codec, gen, fan_in_scaled=True)
    _randomise_codec(codec, gen)
    with torch.no_grad():  # the output conv at a low gain: a waveform well inside [-1, 1], not clipped
        for p in codec.decoder.decoder[-1].parameters():
            p.mul_(OUTPUT_GAIN)
    codec.save_pretrained(codec_dir, safe_serialization=True)
    EncodecFeatureExtractor(feature_size=1, sampling_rate=SAMPLE_RATE, padding_value=0.0,
                            return_attention_mask=True).save_pretrained(codec_dir)
    write_manifest(out)
    return out


def cache_key() -> str:
    """Versions that change what the builder writes, plus this builder's own source."""
    return (f"{dist_version('qwen-tts')}-tf{dist_version('transformers')}-torch{dist_version('torch')}"
            f"-{source_key(__file__)}")


def default_cache_dir() -> Path:
    return cache_root() / f"qwen3tts-tiny-{cache_key()}"


def tiny_qwen3tts_dir(cache_dir: Path | None = None, seed: int = SEED) -> Path:
    """Build once into cache_dir (default: default_cache_dir()) and return it. Concurrent callers
    wait on a file lock; the build goes to a temporary sibling renamed into place when complete."""
    target = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    if seed != SEED and cache_dir is None:
        target = target.with_name(f"{target.name}-seed{seed}")
    return build_once(target, MANIFEST_NAME, lambda tmp: build_tiny_qwen3tts(tmp, seed=seed), "the tiny Qwen3-TTS")
