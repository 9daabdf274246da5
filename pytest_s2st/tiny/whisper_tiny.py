"""A tiny random Whisper, built offline, that ``WhisperProcessor`` / ``WhisperForConditionalGeneration``
load with ``local_files_only=True``: the model dir ``quality.asr_model_dir`` (scorers.WhisperDirASR) names.

``build_tiny_whisper(out_dir, seed)`` writes what a released Whisper checkpoint ships -- config.json,
generation_config.json, model.safetensors, the GPT-2-style byte-level BPE tokenizer files
(vocab.json, merges.txt, added_tokens.json, special_tokens_map.json, tokenizer_config.json) and
preprocessor_config.json -- with every size shrunk, plus model-assets.json. Nothing is downloaded:
the BPE is trained here on a small en + zh corpus with the ``tokenizers`` package. Same seed -> same
SHA256 of every file. ``tiny_whisper_dir()`` builds once into a cache shared by processes.

What has to hold for transformers' Whisper generate() to run it (transformers 4.57):
- the tokenizer knows Whisper's special tokens: <|endoftext|>, <|startoftranscript|>, one
  <|xx|> per language, <|translate|>, <|transcribe|>, <|startoflm|>, <|startofprev|>, <|nospeech|>,
  <|notimestamps|> (ids after the BPE vocabulary, in the released order);
- generation_config carries lang_to_id, task_to_id, is_multilingual, no_timestamps_token_id and
  decoder_start_token_id (generate builds the prompt <|startoftranscript|><|zh|><|transcribe|>
  <|notimestamps|> from them);
- max_source_positions = 1500: the feature extractor always pads to 30 s (3000 frames, halved by the
  encoder's strided conv); the decoder's max_target_positions bounds prompt + generated tokens.

Random weights transcribe into garbage text: the dir exists to run the path end to end, not to score.
Imports torch/transformers/tokenizers lazily.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..assets import MANIFEST_NAME, write_manifest
from .cache import build_once, cache_root, dist_version, source_key

SEED = 0
LANGUAGES = ("en", "zh")  # <|en|>, <|zh|>: the languages the gate needs an ASR for
SPECIALS = ("<|endoftext|>", "<|startoftranscript|>", *(f"<|{lang}|>" for lang in LANGUAGES), "<|translate|>",
            "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nospeech|>", "<|notimestamps|>")
BPE_VOCAB = 400
MAX_LENGTH = 24  # tokens generate() may produce, prompt included: bounded work per utterance
MAX_TARGET_POSITIONS = 32
# GPT-2's pre-tokenizer split, which Whisper's tokenizer uses
GPT2_SPLIT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
CORPUS = (
    "the weather is nice today",
    "she bought three red apples at the market",
    "i would like a cup of coffee",
    "the children are playing in the park",
    "Turn left after the second bridge, and you will see a blue gate next to an old bakery.",
    "今天天气很好",
    "我们明天早上在车站见面",
    "清晨的码头上，渔船一艘接一艘地靠岸，海鸥在桅杆之间来回盘旋。",
    "你好世界，这是一个离线运行的小型语音模型测试。",
)


def _train_tokenizer(out: Path) -> Any:
    """Byte-level BPE on CORPUS saved as vocab.json + merges.txt, loaded as a WhisperTokenizer with the
    special tokens added after the vocabulary; saved with save_pretrained. Returns the tokenizer."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import WhisperTokenizer

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(GPT2_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=BPE_VOCAB, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer=trainer)
    vocab_dir = out / ".bpe"
    vocab_dir.mkdir(parents=True)
    vocab, merges = tok.model.save(str(vocab_dir))
    whisper = WhisperTokenizer(vocab, merges, unk_token="<|endoftext|>", bos_token="<|endoftext|>",
                               eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                               model_max_length=MAX_TARGET_POSITIONS)
    whisper.add_special_tokens({"additional_special_tokens": list(SPECIALS[1:])})
    for path in vocab_dir.iterdir():
        path.unlink()
    vocab_dir.rmdir()
    return whisper


def _ids(tokenizer: Any) -> dict[str, int]:
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIALS}
    if len(set(ids.values())) != len(SPECIALS) or (
            tokenizer.unk_token_id in [v for k, v in ids.items() if k != "<|endoftext|>"]):
        raise RuntimeError(f"tiny Whisper tokenizer: special tokens did not get their own ids: {ids}")
    return ids


def _reinit(model: Any, gen: Any) -> None:
    """Matrices from one explicit generator, in name order (independent of module init order). The
    encoder's sinusoidal positions keep their fixed values, as in a released checkpoint."""
    import torch

    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if p.dim() >= 2 and "encoder.embed_positions" not in name:
                p.copy_(0.02 * torch.randn(p.shape, generator=gen))


def build_tiny_whisper(out_dir: Path, seed: int = SEED) -> Path:
    """Write the tiny Whisper into out_dir (created; must be empty or absent); return out_dir."""
    import torch
    from transformers import (GenerationConfig, WhisperConfig, WhisperFeatureExtractor,
                              WhisperForConditionalGeneration, WhisperProcessor)

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if any(out.iterdir()):
        raise FileExistsError(f"{out}: not empty")
    tokenizer = _train_tokenizer(out)
    ids = _ids(tokenizer)
    eot, sot = ids["<|endoftext|>"], ids["<|startoftranscript|>"]
    config = WhisperConfig(
        vocab_size=len(tokenizer), num_mel_bins=80, d_model=32, encoder_layers=1, decoder_layers=1,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64,
        max_source_positions=1500, max_target_positions=MAX_TARGET_POSITIONS,
        decoder_start_token_id=sot, bos_token_id=eot, eos_token_id=eot, pad_token_id=eot,
        begin_suppress_tokens=None, suppress_tokens=None,
    )
    torch.manual_seed(seed)
    model = WhisperForConditionalGeneration(config).eval()
    _reinit(model, torch.Generator().manual_seed(seed))
    model.generation_config = GenerationConfig(
        decoder_start_token_id=sot, bos_token_id=eot, eos_token_id=eot, pad_token_id=eot,
        max_length=MAX_LENGTH, do_sample=False, num_beams=1,
        is_multilingual=True,
        lang_to_id={f"<|{lang}|>": ids[f"<|{lang}|>"] for lang in LANGUAGES},
        task_to_id={"transcribe": ids["<|transcribe|>"], "translate": ids["<|translate|>"]},
        no_timestamps_token_id=ids["<|notimestamps|>"], prev_sot_token_id=ids["<|startofprev|>"],
        begin_suppress_tokens=None, suppress_tokens=None,
    )
    model.save_pretrained(out, safe_serialization=True)
    WhisperProcessor(feature_extractor=WhisperFeatureExtractor(feature_size=80),
                     tokenizer=tokenizer).save_pretrained(out)
    for name in ("config.json", "generation_config.json"):  # no build-machine details (transformers_version stays)
        path = out / name
        path.write_text(json.dumps(json.loads(path.read_text()), indent=2, sort_keys=True) + "\n")
    write_manifest(out)
    return out


def cache_key() -> str:
    """Versions that change what the builder writes, plus this builder's own source."""
    return (f"tf{dist_version('transformers')}-tok{dist_version('tokenizers')}-torch{dist_version('torch')}"
            f"-{source_key(__file__)}")


def default_cache_dir() -> Path:
    return cache_root() / f"whisper-tiny-{cache_key()}"


def tiny_whisper_dir(cache_dir: Path | None = None, seed: int = SEED) -> Path:
    """Build once into cache_dir (default: default_cache_dir()) and return it (file lock, atomic rename)."""
    target = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    if seed != SEED and cache_dir is None:
        target = target.with_name(f"{target.name}-seed{seed}")
    return build_once(target, MANIFEST_NAME, lambda tmp: build_tiny_whisper(tmp, seed=seed), "the tiny Whisper")


__all__ = ["build_tiny_whisper", "tiny_whisper_dir", "default_cache_dir", "LANGUAGES", "SEED"]
