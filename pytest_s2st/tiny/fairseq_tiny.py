"""Tiny but real fairseq models, built offline the way fairseq-train saves them.

``stage_all(out)`` writes, with fixed seeds, an S2T, an MT, a TTS (+ HiFi-GAN), an S2S
(s2spect, + HiFi-GAN) and an S2UT model (+ CodeHiFiGAN with a duration predictor), a tiny HuBERT
with k-means centroids, a FastSpeech2 TTS (+ HiFi-GAN), a speech npy dataset, token npy and text
jsonl datasets, a raw (tsv + wav) dataset, and one ready-to-run config per model type (the upstream
seven, plus HubertUnits, TTS-FastSpeech2 and 2StageS2ST-FastSpeech2). Same
seed -> same SHA256 of every file. ``default_configs()`` stages once into a cache dir shared by
processes.

Imports torch/fairseq lazily: this module is only imported when staging is asked for.
"""
from __future__ import annotations

import json
import math
import os
import time
from argparse import Namespace
from pathlib import Path
from typing import Any

from ..assets import sha256_file
from ..pipelines.fairseq_runtime import hubert_safe_globals, quiet_fairseq
from .cache import build_once, cache_root, dist_version, source_key

SEED = 1
FEAT_DIM = 80
N_SAMPLES = 3
DATASET_SIZE = 2  # what the staged configs benchmark (general.dataset_size)
TTS_FRAMES = 40  # TTS/S2S stage arg max_target_positions: the EOS never fires, so exactly this many frames
MODEL_TYPES = ("S2T", "MT", "TTS", "S2S", "S2UT", "2StageS2ST", "3StageS2ST")
EXTRA_TYPES = ("HubertUnits",)  # staged too, but not part of the upstream seven
FS2_CONFIGS = ("TTS-FastSpeech2", "2StageS2ST-FastSpeech2")  # extra configs: the same types, FastSpeech2 as TTS
FS2_FRAMES_PER_TOKEN = 4  # the FastSpeech2 duration predictor is pinned: every input token lasts this many frames

EN_WORDS = "hello world this is a tiny test of speech models running offline".split()
ES_WORDS = "hola mundo esta es una prueba pequena de modelos del habla hoy".split()
EN_TEXTS = ["hello world", "this is a tiny test", "speech models running offline"]
ES_TEXTS = ["hola mundo", "esta es una prueba pequena", "modelos del habla hoy"]

# small transformer dims shared by every text/speech model
_TINY = ["--encoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32", "--encoder-attention-heads", "2",
         "--decoder-embed-dim", "16", "--decoder-ffn-embed-dim", "32", "--decoder-attention-heads", "2"]
_CONV = ["--conv-kernel-sizes", "5,5", "--conv-channels", "16"]
_TRAIN = ["--optimizer", "adam", "--lr", "0.0005", "--lr-scheduler", "inverse_sqrt",
          "--max-tokens", "4000", "--cpu", "--no-progress-bar", "--num-workers", "0"]

TTS_FEATURES = {
    "type": "spectrogram+melscale+log", "sample_rate": 22050, "n_fft": 1024, "n_mels": FEAT_DIM,
    "win_len_t": 1024 / 22050, "hop_len_t": 256 / 22050, "f_min": 0, "f_max": 8000,
    "window_fn": "hann", "eps": 1.0e-5,
}
# FastSpeech2's pitch/energy embeddings bucket the predictions between these (normalised) bounds
FS2_FEATURES = dict(TTS_FEATURES, pitch_min=-4.0, pitch_max=4.0, energy_min=-4.0, energy_max=4.0)
S2S_FEATURES = dict(TTS_FEATURES, sample_rate=16000, win_len_t=0.025, hop_len_t=0.01, n_fft=512)


def _hifigan_cfg(upsample: list[int], sr: int) -> dict:
    return {"resblock": "1", "upsample_rates": upsample, "upsample_kernel_sizes": [2 * u for u in upsample],
            "upsample_initial_channel": 16, "resblock_kernel_sizes": [3], "resblock_dilation_sizes": [[1, 3, 5]],
            "model_in_dim": FEAT_DIM, "sampling_rate": sr}


def _code_hifigan_cfg() -> dict:
    # the released unit-HiFi-GAN key set, shrunk; 320 samples per unit frame at 16 kHz
    return {
        "resblock": "1", "upsample_rates": [10, 8, 4], "upsample_kernel_sizes": [20, 16, 8],
        "upsample_initial_channel": 16, "resblock_kernel_sizes": [3], "resblock_dilation_sizes": [[1, 3, 5]],
        "num_embeddings": 100, "embedding_dim": 16, "model_in_dim": 16, "segment_size": 8960,
        "code_hop_size": 320, "f0": False, "num_workers": 0, "dur_prediction_weight": 1.0,
        "dur_predictor_params": {"encoder_embed_dim": 16, "var_pred_hidden_dim": 16,
                                 "var_pred_kernel_size": 3, "var_pred_dropout": 0.5},
        "sampling_rate": 16000, "n_fft": 1024, "num_mels": 80, "hop_size": 256, "win_size": 1024,
        "fmin": 0, "fmax": 8000,
    }



def _quiet(fn):
    """Builders run under quiet_fairseq() when called on their own, too."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with quiet_fairseq():
            return fn(*args, **kwargs)

    return wrapper




def _seed(seed: int) -> None:
    import random

    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _write_yaml(path: Path, data: dict) -> None:
    import yaml

    path.write_text(yaml.safe_dump(data, sort_keys=False))


def _write_dict(path: Path, words: list[str]) -> None:
    path.write_text("".join(f"{w} 1\n" for w in words))


def save_npy_dataset(samples: list[dict], path: Path) -> Path:
    """The upstream npy layout (np.save of a list of {id, net_input}) with torch tensors, as
    upstream data_utils writes it, but reproducible; one writer for this and s2st-dataset."""
    from ..dataset_make import save_npy_dataset as save

    return save(samples, path, torch_tensors=True)


def _relativize(obj: Any, root: str) -> Any:
    """Absolute paths under the build dir -> relative: a checkpoint must not depend on where it was built."""
    if isinstance(obj, str):
        if obj == root:
            return "."
        return obj[len(root) + 1:] if obj.startswith(root + os.sep) else obj
    if isinstance(obj, dict):
        return type(obj)((k, _relativize(v, root)) for k, v in obj.items())
    if isinstance(obj, list):
        return [_relativize(v, root) for v in obj]
    if isinstance(obj, Namespace):  # cfg.model of legacy archs
        return Namespace(**_relativize(vars(obj), root))
    return obj


def _save_like_fairseq_train(argv: list[str], ckpt: Path, root: Path, seed: int,
                             model_overrides: dict | None = None, mutate=None) -> None:
    """fairseq-train's path: parse -> omegaconf -> task -> model/criterion -> Trainer -> save."""
    import torch
    from fairseq import checkpoint_utils, options, tasks, utils
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.trainer import Trainer

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, input_args=argv + ["--seed", str(seed)])
    for k, v in (model_overrides or {}).items():  # arch attributes without a command-line flag
        setattr(args, k, v)
    cfg = convert_namespace_to_omegaconf(args)
    _seed(seed)
    task = tasks.setup_task(cfg.task)
    model = task.build_model(cfg.model)
    criterion = task.build_criterion(cfg.criterion)
    if mutate is not None:
        with torch.no_grad():
            mutate(model)
    trainer = Trainer(cfg, task, model, criterion)
    trainer.consolidate_optimizer()
    # Trainer.save_checkpoint, with the two non-deterministic fields normalised: the wall-clock
    # meters ("metrics", "previous_training_time") and the absolute build paths in cfg.
    state = utils.move_to_cpu(trainer.state_dict())
    state["extra_state"].update({
        "train_iterator": {"epoch": 1, "iterations_in_epoch": 0, "shuffle": True},
        "val_loss": None, "metrics": {}, "previous_training_time": 0.0,
    })
    state = _relativize(state, str(root))
    checkpoint_utils.torch_persistent_save(state, str(ckpt))


def _never_eos(model) -> None:
    # a random decoder rarely predicts EOS; make that "never" so max_target_positions bounds the output
    model.decoder.eos_proj.weight.zero_()
    model.decoder.eos_proj.bias.fill_(-20.0)


def _pin_durations(model) -> None:
    # a random duration predictor gives 0-1 frames per token (too few for a vocoder): make it a constant
    proj = model.encoder.var_adaptor.duration_predictor.proj
    proj.weight.zero_()
    proj.bias.fill_(math.log(1 + FS2_FRAMES_PER_TOKEN))  # FastSpeech2 emits round(exp(x) - 1) frames


def _save_vocoder(model, cfg: dict, cfg_path: Path, ckpt: Path) -> None:
    import torch

    cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")
    torch.save({"generator": model.state_dict()}, str(ckpt))


# ---------------------------------------------------------------- builders, one per model


@_quiet
def build_dataset(out: Path, seed: int) -> dict[str, Path]:
    """Speech npy dataset in the upstream layout (list of {id, net_input: {src_tokens [1,T,80] float32,
    src_lengths [1]}}, torch tensors) plus text jsonl datasets."""
    import numpy as np
    import torch

    d = out / "data"
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.RandomState(seed)
    samples = []
    for i in range(N_SAMPLES):
        t = int(rng.randint(40, 81))
        feats = rng.randn(1, t, FEAT_DIM).astype(np.float32)
        samples.append({"id": i, "net_input": {"src_tokens": torch.from_numpy(feats),
                                               "src_lengths": torch.tensor([t])},
                        "tgt_text": EN_TEXTS[i]})  # the reference an S2T model should produce
    save_npy_dataset(samples, d / "speech.npy")
    for lang, texts in (("en", EN_TEXTS), ("es", ES_TEXTS)):
        lines = [json.dumps({"id": f"{lang}{i}", "text": t, "language": lang, "seed": seed})
                 for i, t in enumerate(texts)]
        (d / f"text_{lang}.jsonl").write_text("\n".join(lines) + "\n")
    (d / "refs_es.txt").write_text("\n".join(ES_TEXTS) + "\n")  # references of the en->es cascade (3StageS2ST)
    return {"speech": d / "speech.npy", "text_en": d / "text_en.jsonl", "text_es": d / "text_es.jsonl",
            "refs_es": d / "refs_es.txt"}


@_quiet
def build_s2t(out: Path, seed: int) -> Path:
    d = out / "s2t"
    d.mkdir(parents=True, exist_ok=True)
    _write_yaml(d / "config.yaml", {"input_channels": 1, "input_feat_per_channel": FEAT_DIM,
                                    "vocab_filename": "dict.txt"})
    _write_dict(d / "dict.txt", EN_WORDS)
    argv = [str(d), "--task", "speech_to_text", "--arch", "s2t_transformer", "--config-yaml", "config.yaml",
            "--criterion", "label_smoothed_cross_entropy", "--encoder-layers", "1", "--decoder-layers", "1",
            "--max-target-positions", "12", *_TINY, *_CONV, *_TRAIN]
    _save_like_fairseq_train(argv, d / "checkpoint.pt", out, seed)
    return d / "checkpoint.pt"


def _binarize_pair(d: Path, src: str, tgt: str, src_texts: list[str], tgt_texts: list[str]) -> None:
    """A tiny binarised valid split, as fairseq-preprocess writes it: the language pair is then
    inferred from the file names (upstream 3StageS2ST.yaml gives no source_lang/target_lang)."""
    from fairseq.data import Dictionary, indexed_dataset

    for lang, texts in ((src, src_texts), (tgt, tgt_texts)):
        vocab = Dictionary.load(str(d / f"dict.{lang}.txt"))
        prefix = str(d / f"valid.{src}-{tgt}.{lang}")
        builder = indexed_dataset.make_builder(prefix + ".bin", "mmap", vocab_size=len(vocab))
        for text in texts:
            builder.add_item(vocab.encode_line(text, add_if_not_exist=False, append_eos=True).int())
        builder.finalize(prefix + ".idx")


@_quiet
def build_mt(out: Path, seed: int) -> Path:
    d = out / "mt"
    d.mkdir(parents=True, exist_ok=True)
    _write_dict(d / "dict.en.txt", EN_WORDS)
    _write_dict(d / "dict.es.txt", ES_WORDS)
    _binarize_pair(d, "en", "es", EN_TEXTS, ES_TEXTS)
    argv = [str(d), "--task", "translation", "--source-lang", "en", "--target-lang", "es",
            "--arch", "transformer", "--criterion", "label_smoothed_cross_entropy",
            "--encoder-layers", "1", "--decoder-layers", "1",
            "--max-source-positions", "64", "--max-target-positions", "16", *_TINY, *_TRAIN]
    _save_like_fairseq_train(argv, d / "checkpoint.pt", out, seed)
    return d / "checkpoint.pt"


def _build_hifigan(d: Path, seed: int, upsample: list[int], sr: int) -> Path:
    from fairseq.models.text_to_speech.hifigan import Generator

    cfg = _hifigan_cfg(upsample, sr)
    _seed(seed)
    _save_vocoder(Generator(cfg), cfg, d / "hifigan.json", d / "hifigan.pt")
    return d / "hifigan.pt"


@_quiet
def build_tts(out: Path, seed: int) -> tuple[Path, Path]:
    d = out / "tts"
    d.mkdir(parents=True, exist_ok=True)
    _write_yaml(d / "config.yaml", {
        "features": TTS_FEATURES, "vocab_filename": "dict.txt",
        "vocoder": {"type": "hifigan", "config": "hifigan.json", "checkpoint": "hifigan.pt"},
    })
    _write_dict(d / "dict.txt", EN_WORDS + ES_WORDS)
    voc = _build_hifigan(d, seed, [8, 8, 4], 22050)  # 256 samples per frame = hop_len_t
    argv = [str(d), "--task", "text_to_speech", "--arch", "tts_transformer", "--config-yaml", "config.yaml",
            "--criterion", "tacotron2", "--encoder-conv-layers", "1", "--encoder-conv-kernel-size", "3",
            "--encoder-transformer-layers", "1", "--decoder-transformer-layers", "1",
            "--prenet-dim", "16", "--postnet-conv-dim", "16", "--postnet-layers", "2",
            "--postnet-conv-kernel-size", "3", *_TINY, *_TRAIN]
    _save_like_fairseq_train(argv, d / "checkpoint.pt", out, seed, mutate=_never_eos)
    return d / "checkpoint.pt", voc


@_quiet
def build_fastspeech2(out: Path, seed: int) -> tuple[Path, Path]:
    """The non-autoregressive TTS (arch fastspeech2), with the TTS's vocabulary, features and HiFi-GAN."""
    d = out / "fastspeech2"
    d.mkdir(parents=True, exist_ok=True)
    _write_yaml(d / "config.yaml", {
        "features": FS2_FEATURES, "vocab_filename": "dict.txt",
        "vocoder": {"type": "hifigan", "config": "hifigan.json", "checkpoint": "hifigan.pt"},
    })
    _write_dict(d / "dict.txt", EN_WORDS + ES_WORDS)  # = tts/dict.txt: the TTS token dataset fits both
    voc = _build_hifigan(d, seed, [8, 8, 4], 22050)
    argv = [str(d), "--task", "text_to_speech", "--arch", "fastspeech2", "--config-yaml", "config.yaml",
            "--criterion", "fastspeech2", "--encoder-layers", "1", "--decoder-layers", "1",
            "--encoder-embed-dim", "16", "--decoder-embed-dim", "16", "--encoder-attention-heads", "2",
            "--decoder-attention-heads", "2", "--fft-hidden-dim", "32", "--fft-kernel-size", "3",
            "--var-pred-n-bins", "16", "--var-pred-hidden-dim", "16", "--var-pred-kernel-size", "3",
            "--add-postnet", "--postnet-layers", "2", "--postnet-conv-dim", "16",
            "--postnet-conv-kernel-size", "3", *_TRAIN]
    _save_like_fairseq_train(argv, d / "checkpoint.pt", out, seed, mutate=_pin_durations)
    return d / "checkpoint.pt", voc


@_quiet
def build_s2s(out: Path, seed: int) -> tuple[Path, Path]:
    d = out / "s2s"
    d.mkdir(parents=True, exist_ok=True)
    _write_yaml(d / "config.yaml", {
        "input_channels": 1, "input_feat_per_channel": FEAT_DIM, "features": S2S_FEATURES,
        "vocoder": {"type": "hifigan", "config": "hifigan.json", "checkpoint": "hifigan.pt"},
    })
    voc = _build_hifigan(d, seed, [10, 8, 2], 16000)  # 160 samples per frame = 10 ms at 16 kHz
    argv = [str(d), "--task", "speech_to_speech", "--arch", "s2spect_transformer", "--config-yaml", "config.yaml",
            "--criterion", "speech_to_spectrogram", "--encoder-layers", "1", *_TINY, *_CONV, *_TRAIN]
    # decoder/prenet/postnet dims have no command-line flag for this arch
    overrides = {"decoder_transformer_layers": 1, "prenet_dim": 16, "postnet_conv_dim": 16, "postnet_layers": 2,
                 "postnet_conv_kernel_size": 3}
    _save_like_fairseq_train(argv, d / "checkpoint.pt", out, seed, model_overrides=overrides, mutate=_never_eos)
    return d / "checkpoint.pt", voc


@_quiet
def build_s2ut(out: Path, seed: int) -> tuple[Path, Path]:
    d = out / "s2ut"
    d.mkdir(parents=True, exist_ok=True)
    _write_yaml(d / "config.yaml", {"input_channels": 1, "input_feat_per_channel": FEAT_DIM})
    argv = [str(d), "--task", "speech_to_speech", "--arch", "s2ut_transformer", "--config-yaml", "config.yaml",
            "--target-is-code", "--target-code-size", "100", "--vocoder", "code_hifigan",
            "--criterion", "speech_to_unit", "--encoder-layers", "1", "--decoder-layers", "1",
            "--max-target-positions", "64", *_TINY, *_CONV, *_TRAIN]
    _save_like_fairseq_train(argv, d / "checkpoint.pt", out, seed)
    from fairseq.models.text_to_speech.codehifigan import CodeGenerator

    v = out / "vocoder"
    v.mkdir(parents=True, exist_ok=True)
    cfg = _code_hifigan_cfg()
    _seed(seed)
    _save_vocoder(CodeGenerator(cfg), cfg, v / "code_hifigan.json", v / "code_hifigan.pt")
    return d / "checkpoint.pt", v / "code_hifigan.pt"


@_quiet
def build_token_datasets(out: Path) -> dict[str, Path]:
    """Text-input datasets in the upstream npy layout: each text encoded with the model's own source
    dictionary (as Processing.encode_source / SpeechGeneration.processTextInput do), int64 tokens."""
    import torch
    from fairseq.data import Dictionary

    written = {}
    for name, dict_path, texts, refs in (("mt_en", out / "mt" / "dict.en.txt", EN_TEXTS, ES_TEXTS),
                                         ("tts_es", out / "tts" / "dict.txt", ES_TEXTS, None)):
        vocab = Dictionary.load(str(dict_path))
        samples = []
        for i, text in enumerate(texts):
            tokens = vocab.encode_line(text, add_if_not_exist=False, append_eos=True).long()
            samples.append({"id": i, "net_input": {"src_tokens": tokens.view(1, -1),
                                                   "src_lengths": torch.tensor([tokens.numel()])}})
            if refs is not None:  # the MT tokens carry their reference translation
                samples[-1]["tgt_text"] = refs[i]
        written[f"tokens_{name}"] = save_npy_dataset(samples, out / "data" / f"tokens_{name}.npy")
    return written


HUBERT_LAYER = 2
KM_CLUSTERS = 100  # = the unit vocoder's num_embeddings: HuBERT units resynthesise through it


@_quiet
def build_raw_dataset(out: Path, seed: int) -> Path:
    """A raw (wav2vec-style tsv) dataset: first line the root dir, then `relative path<TAB>frames`."""
    import numpy as np
    import soundfile as sf

    d = out / "data" / "wav"
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.RandomState(seed)
    rows = []
    for i in range(N_SAMPLES):
        n = int(rng.randint(8000, 16001))  # 0.5-1 s at 16 kHz: a chirp plus noise
        t = np.arange(n) / 16000
        wav = 0.3 * np.sin(2 * np.pi * (200 + 300 * t) * t) + 0.05 * rng.randn(n)
        sf.write(str(d / f"{i}.wav"), wav.astype(np.float32), 16000, subtype="PCM_16")
        rows.append(f"{i}.wav\t{n}")
    # the root is written relative to the tsv (absolute in upstream manifests; a relocatable cache needs this)
    (out / "data" / "raw.tsv").write_text("wav\n" + "\n".join(rows) + "\n")
    return out / "data" / "raw.tsv"


def _kmeans(feats, k: int, seed: int, iters: int = 10):
    """Plain Lloyd iterations in numpy: deterministic centroids without sklearn/joblib pickles."""
    import numpy as np

    rng = np.random.RandomState(seed)
    c = feats[rng.choice(len(feats), k, replace=len(feats) < k)].copy()
    for _ in range(iters):
        dist = (feats ** 2).sum(1, keepdims=True) - 2 * feats @ c.T + (c ** 2).sum(1)[None]
        label = dist.argmin(1)
        for j in range(k):
            if (label == j).any():
                c[j] = feats[label == j].mean(0)
    return c.astype(np.float32)


@_quiet
def build_hubert(out: Path, seed: int) -> tuple[Path, Path]:
    """A tiny HuBERT (task hubert_pretraining, 320x conv downsampling as the real one) and k-means
    centroids over its layer-HUBERT_LAYER features of the raw dataset, saved as km.npy."""
    import numpy as np
    import soundfile as sf
    import torch

    d = out / "hubert"
    d.mkdir(parents=True, exist_ok=True)
    _write_dict(d / "dict.km.txt", [str(i) for i in range(KM_CLUSTERS)])
    argv = [str(d), "--task", "hubert_pretraining", "--arch", "hubert", "--criterion", "hubert",
            "--labels", '["km"]', "--label-dir", str(d), "--sample-rate", "16000", "--label-rate", "50",
            "--encoder-layers", "2", "--encoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32",
            "--encoder-attention-heads", "2", "--final-dim", "16",
            "--conv-feature-layers", "[(16,10,5)] + [(16,3,2)] * 4 + [(16,2,2)] * 2",
            "--conv-pos", "16", "--conv-pos-groups", "4", *_TRAIN]
    _save_like_fairseq_train(argv, d / "checkpoint.pt", out, seed)
    from fairseq import checkpoint_utils

    torch.serialization.add_safe_globals(hubert_safe_globals())
    models, _, _ = checkpoint_utils.load_model_ensemble_and_task([str(d / "checkpoint.pt")])
    model = models[0].eval()
    feats = []
    with torch.no_grad():
        for wav in sorted((out / "data" / "wav").glob("*.wav")):
            x = torch.from_numpy(sf.read(str(wav), dtype="float32")[0]).view(1, -1)
            f, _ = model.extract_features(source=x, padding_mask=None, mask=False, output_layer=HUBERT_LAYER)
            feats.append(f.squeeze(0).numpy())
    np.save(d / "km.npy", _kmeans(np.concatenate(feats), KM_CLUSTERS, seed), allow_pickle=False)
    return d / "checkpoint.pt", d / "km.npy"



# ---------------------------------------------------------------- configs


def _general(model_type: str, dataset: str) -> dict:
    return {"name": "tiny", "dataset_path": dataset, "cpu": True, "model_type": model_type,
            "dataset_size": DATASET_SIZE}


def _stages() -> dict[str, dict]:
    s2t = {"data": "../s2t", "task": "speech_to_text", "path": "../s2t/checkpoint.pt",
           "config_yaml": "config.yaml", "max_len_a": 2, "max_len_b": 500}
    mt = {"data": "../mt", "task": "translation", "path": "../mt/checkpoint.pt",
          "source_lang": "en", "target_lang": "es", "max_len_a": 2, "max_len_b": 500}
    tts = {"data": "../tts", "task": "text_to_speech", "path": "../tts/checkpoint.pt",
           "config_yaml": "config.yaml", "vocoder": "hifigan", "max_target_positions": TTS_FRAMES}
    s2s = {"data": "../s2s", "task": "speech_to_speech", "path": "../s2s/checkpoint.pt",
           "config_yaml": "config.yaml", "target_is_code": False, "vocoder": "hifigan",
           "max_target_positions": TTS_FRAMES}
    s2u = {"data": "../s2ut", "task": "speech_to_speech", "path": "../s2ut/checkpoint.pt",
           "config_yaml": "config.yaml", "max_len_b": 100000, "beam": 10, "target_is_code": True,
           "max_target_positions": 3000, "target_code_size": 100}
    voc = {"vocoder": "../vocoder/code_hifigan.pt", "vocoder_cfg": "../vocoder/code_hifigan.json",
           "dur_prediction": True}
    hubert = {"hubert_ckpt_path": "../hubert/checkpoint.pt", "hubert_layer": HUBERT_LAYER,
              "hubert_km_path": "../hubert/km.npy"}
    fs2 = {"data": "../fastspeech2", "task": "text_to_speech", "path": "../fastspeech2/checkpoint.pt",
           "config_yaml": "config.yaml", "vocoder": "hifigan"}  # non-autoregressive: no frame bound needed
    return {"s2t": s2t, "mt": mt, "tts": tts, "s2s": s2s, "s2u": s2u, "vocoder": voc, "hubert": hubert,
            "fs2": fs2}


def write_configs(out: Path) -> dict[str, Path]:
    """One config per model type in the upstream general/stageN layout; paths relative to the config."""
    c = out / "configs"
    c.mkdir(parents=True, exist_ok=True)
    s = _stages()
    # text models read token npy datasets (upstream's format); data/text_*.jsonl hold the same texts
    speech, en, es = "../data/speech.npy", "../data/tokens_mt_en.npy", "../data/tokens_tts_es.npy"
    layouts = {  # config name: (model_type, dataset, stages)
        "S2T": ("S2T", speech, [s["s2t"]]),
        "MT": ("MT", en, [s["mt"]]),
        "TTS": ("TTS", es, [s["tts"]]),
        "S2S": ("S2S", speech, [s["s2s"]]),
        "S2UT": ("S2UT", speech, [s["s2u"], s["vocoder"]]),
        "2StageS2ST": ("2StageS2ST", speech, [s["s2t"], s["tts"]]),
        "3StageS2ST": ("3StageS2ST", speech, [s["s2t"], s["mt"], s["tts"]]),
        "HubertUnits": ("HubertUnits", "../data/raw.tsv", [s["hubert"], s["vocoder"]]),
        "TTS-FastSpeech2": ("TTS", es, [s["fs2"]]),
        "2StageS2ST-FastSpeech2": ("2StageS2ST", speech, [s["s2t"], s["fs2"]]),
    }
    paths = {}
    for name, (model_type, dataset, stages) in layouts.items():
        doc = {"general": _general(model_type, dataset)}
        if name != model_type:  # a variant: its own name, so its rows never merge with the type's own config
            doc["general"]["name"] = f"tiny-{name.split('-', 1)[1].lower()}"
        if model_type == "3StageS2ST":  # speech.npy's tgt_text is English (S2T's); the cascade ends in Spanish
            doc["general"]["references"] = "../data/refs_es.txt"  # (target_lang es: its MT stage's)
        elif dataset == speech and model_type != "S2T":  # speech out, against speech.npy's English tgt_text
            doc["general"]["target_lang"] = "en"  # the ASR-BLEU's language (pocketsphinx en-US)
        if dataset.endswith(".tsv"):
            doc["general"]["dataset_type"] = "raw"
            doc["general"]["read_using_sf"] = True
        doc.update({f"stage{i}": dict(st) for i, st in enumerate(stages, 1)})
        paths[name] = c / f"{name}.yaml"
        _write_yaml(paths[name], doc)
    return paths


# ---------------------------------------------------------------- entry points


def stage_all(out_dir: Path, *, seed: int = SEED) -> dict:
    """Build every tiny model, the datasets and the configs into out_dir. Returns what was written:
    {"models": {name: {"path", "sha256", "bytes", "build_s"}}, "datasets": {...}, "configs": {...}}."""
    import torch

    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    models: dict[str, dict] = {}

    def timed(name: str, fn):
        t0 = time.perf_counter()
        result = fn(out, seed)
        dt = time.perf_counter() - t0
        paths = result if isinstance(result, tuple) else (result,)
        names = [name] if len(paths) == 1 else [name, f"{name}_km" if name == "hubert" else f"{name}_vocoder"]
        for n, p in zip(names, paths):
            models[n] = {"path": str(p), "sha256": sha256_file(p), "bytes": p.stat().st_size,
                         "build_s": round(dt, 3)}

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with quiet_fairseq():
            t0 = time.perf_counter()
            import fairseq.options  # noqa: F401  (one-time import cost, kept out of the per-model times)
            import fairseq.trainer  # noqa: F401
            import_s = round(time.perf_counter() - t0, 3)
            datasets = build_dataset(out, seed)
            timed("s2t", build_s2t)
            timed("mt", build_mt)
            timed("tts", build_tts)
            timed("s2s", build_s2s)
            timed("s2ut", build_s2ut)
            datasets.update(build_token_datasets(out))
            datasets["raw"] = build_raw_dataset(out, seed)
            timed("hubert", build_hubert)
            timed("fastspeech2", build_fastspeech2)  # each builder seeds itself: the others stay byte-identical
    finally:
        torch.set_num_threads(threads)
    configs = write_configs(out)
    manifest = {
        "seed": seed,
        "files": {str(Path(m["path"]).relative_to(out)): {"sha256": m["sha256"], "bytes": m["bytes"]}
                  for m in models.values()},
        "configs": {k: str(p.relative_to(out)) for k, p in configs.items()},
    }
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return {"out_dir": str(out), "import_s": import_s, "models": models,
            "datasets": {k: str(v) for k, v in datasets.items()},
            "configs": {k: str(v) for k, v in configs.items()}}


def cache_key() -> str:
    """Versions that change what staging writes, plus this builder's own source."""
    return f"{dist_version('fairseq-fixed')}-torch{dist_version('torch')}-{source_key(__file__)}"


def default_cache_dir() -> Path:
    return cache_root() / f"fairseq-{cache_key()}"


def default_configs(cache_dir: Path | None = None) -> list[Path]:
    """Stage once into cache_dir (default: default_cache_dir()) and return the config paths, in
    MODEL_TYPES order. Concurrent callers (pytest-xdist workers) wait on a file lock; the build goes
    to a temporary sibling that is renamed into place only when complete."""
    target = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    build_once(target, "MANIFEST.json", stage_all, "the tiny fairseq models")
    return [target / "configs" / f"{t}.yaml" for t in MODEL_TYPES]
