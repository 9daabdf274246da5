"""Full-size random-weight fairseq models: the released architectures at their released sizes, offline.

``stage_full(out)`` writes, with fixed seeds and the same fairseq-train path as the tiny models
(:mod:`.fairseq_tiny`), an S2T (``s2t_transformer_s``, LibriSpeech's 10k unigram vocabulary), an MT
(``transformer`` base, a 37k joined BPE vocabulary as Vaswani et al.'s WMT'14 En-De), a TTS
(``tts_transformer`` as the LJSpeech recipe, + HiFi-GAN V1, the released LJSpeech vocoder's config),
a FastSpeech2 (the LJSpeech recipe, + the same HiFi-GAN), an S2UT (``s2ut_transformer_fisher``, 100
units) + the released unit HiFi-GAN with duration predictor (``hubert_base_100_lj``'s config), speech
and token datasets of realistic lengths, and one config per model type. Same seed -> same SHA256.

``SPECS`` holds each model's released parameter count and where it is published; ``param_counts()``
builds each model on the meta device (no weights, no memory) and counts its parameters, so a test
can hold every build against the released number without building GBs.

Imports torch/fairseq lazily.
"""
from __future__ import annotations

import json
import math
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..assets import sha256_file
from ..pipelines.fairseq_runtime import quiet_fairseq
from . import fairseq_tiny as tiny
from .cache import build_once, cache_root, dist_version, source_key

SEED = 1
FEAT_DIM = 80
N_SAMPLES = 3
SPEECH_FRAMES = (400, 600)  # 4-6 s of 10 ms filterbank frames per speech sample
TEXT_TOKENS = 24            # source tokens per MT/TTS sample (a ~6 s sentence)
S2T_MAX_TOKENS = 40         # a random decoder never ends a hypothesis: this bounds S2T, MT and S2UT outputs
S2UT_MAX_UNITS = 100        # reduced units (~25 per second of speech)
# tts_transformer: decoder steps per output, 4 frames each (800 frames: 9.3 s at 22.05 kHz, hop 256)
TTS_FRAMES = 200
FS2_FRAMES_PER_TOKEN = 8    # FastSpeech2: the duration predictor is pinned (~10 phones per second)
UNIT_FRAMES = 2             # the unit vocoder's duration predictor is pinned: each reduced unit lasts 2 frames

# the released LJSpeech HiFi-GAN (V1 of Kong et al. 2020), as fairseq's TTS hub models ship it
HIFIGAN_V1 = {"resblock": "1", "upsample_rates": [8, 8, 2, 2], "upsample_kernel_sizes": [16, 16, 4, 4],
              "upsample_initial_channel": 512, "resblock_kernel_sizes": [3, 7, 11],
              "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]], "model_in_dim": FEAT_DIM,
              "sampling_rate": 22050}
# the released unit HiFi-GAN with duration predictor (speech_to_speech/vocoder/code_hifigan/hubert_base_100_lj)
CODE_HIFIGAN = {
    "resblock": "1", "upsample_rates": [5, 4, 4, 2, 2], "upsample_kernel_sizes": [11, 8, 8, 4, 4],
    "upsample_initial_channel": 512, "resblock_kernel_sizes": [3, 7, 11],
    "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]], "num_embeddings": 100, "embedding_dim": 128,
    "model_in_dim": 128, "segment_size": 8960, "code_hop_size": 320, "f0": False, "num_mels": 80,
    "num_freq": 1025, "n_fft": 1024, "hop_size": 256, "win_size": 1024, "dur_prediction_weight": 1.0,
    "dur_predictor_params": {"encoder_embed_dim": 128, "var_pred_hidden_dim": 128, "var_pred_kernel_size": 3,
                             "var_pred_dropout": 0.5},
    "sampling_rate": 16000, "fmin": 0, "fmax": 8000,
}

_TRAIN = tiny._TRAIN


@dataclass(frozen=True)
class Spec:
    """One full-size model: how fairseq-train builds it and what the released checkpoint has."""
    name: str
    released: int | None      # parameters of the released checkpoint (None: not published)
    source: str               # where that number (or the config) is published
    vocab: int = 0            # dictionary size incl. fairseq's 4 specials (0: no dictionary)
    argv: tuple[str, ...] = ()
    vocoder: dict | None = None
    notes: str = ""
    extra: dict = field(default_factory=dict)


SPECS: dict[str, Spec] = {
    "s2t": Spec("s2t", 30_000_000,
                "fairseq examples/speech_to_text/docs/librispeech_example.md: s2t_transformer_s, 30M "
                "(librispeech_transformer_s.pt, unigram vocabulary of 10000)", vocab=10_000,
                argv=("--task", "speech_to_text", "--arch", "s2t_transformer_s", "--config-yaml", "config.yaml",
                      "--criterion", "label_smoothed_cross_entropy", "--share-decoder-input-output-embed",
                      "--max-target-positions", str(S2T_MAX_TOKENS))),
    "mt": Spec("mt", 65_000_000,
               "Vaswani et al. 2017, Table 3: Transformer base, 65M (WMT'14 En-De, 37000 shared BPE tokens); "
               "fairseq arch transformer (= transformer_wmt_en_de)", vocab=37_000,
               argv=("--task", "translation", "--source-lang", "en", "--target-lang", "es", "--arch", "transformer",
                     "--share-all-embeddings", "--criterion", "label_smoothed_cross_entropy",
                     "--max-source-positions", "1024", "--max-target-positions", str(S2T_MAX_TOKENS))),
    "tts": Spec("tts", 54_000_000,
                "fairseq examples/speech_synthesis/docs/ljspeech_example.md: tts_transformer, 54M "
                "(ljspeech_transformer_phn)", vocab=75,
                argv=("--task", "text_to_speech", "--arch", "tts_transformer", "--config-yaml", "config.yaml",
                      "--criterion", "tacotron2", "--n-frames-per-step", "4", "--encoder-normalize-before",
                      "--decoder-normalize-before")),
    "hifigan": Spec("hifigan", 13_920_000,
                    "Kong et al. 2020 (HiFi-GAN), Table 1: V1 generator, 13.92M; the LJSpeech vocoder of "
                    "fairseq's TTS hub models uses V1's config", vocoder=HIFIGAN_V1),
    "fastspeech2": Spec("fastspeech2", 41_000_000,
                        "fairseq examples/speech_synthesis/docs/ljspeech_example.md: fastspeech2, 41M "
                        "(ljspeech_fastspeech2_phn)", vocab=75,
                        argv=("--task", "text_to_speech", "--arch", "fastspeech2", "--config-yaml", "config.yaml",
                              "--criterion", "fastspeech2", "--n-frames-per-step", "1")),
    "s2ut": Spec("s2ut", None,
                 "fairseq examples/speech_to_speech/docs/direct_s2st_discrete_units.md: s2ut_transformer_fisher, "
                 "100 units (the recipe; no parameter count published)",
                 argv=("--task", "speech_to_speech", "--arch", "s2ut_transformer_fisher", "--config-yaml",
                       "config.yaml", "--target-is-code", "--target-code-size", "100", "--vocoder", "code_hifigan",
                       "--criterion", "speech_to_unit", "--share-decoder-input-output-embed",
                       "--max-target-positions", str(S2UT_MAX_UNITS))),
    "code_hifigan": Spec("code_hifigan", None,
                         "fairseq examples/speech_to_speech/docs/direct_s2st_discrete_units.md: unit HiFi-GAN "
                         "hubert_base_100_lj config.json (= speech-resynthesis hubert100_dw1.0.json; no parameter "
                         "count published)", vocoder=CODE_HIFIGAN),
}


def _dict_words(n: int) -> list[str]:
    """n - 4 synthetic symbols: fairseq's Dictionary adds <s>, <pad>, </s>, <unk> to reach n."""
    return [f"w{i}" for i in range(n - 4)]


def _write_data(spec: Spec, d: Path) -> None:
    """What the task reads at build time: config.yaml and the dictionaries (the released sizes)."""
    d.mkdir(parents=True, exist_ok=True)
    words = _dict_words(spec.vocab) if spec.vocab else []
    if spec.name == "s2t":
        tiny._write_yaml(d / "config.yaml", {"input_channels": 1, "input_feat_per_channel": FEAT_DIM,
                                             "vocab_filename": "dict.txt"})
        tiny._write_dict(d / "dict.txt", words)
    elif spec.name == "mt":
        tiny._write_dict(d / "dict.en.txt", words)
        tiny._write_dict(d / "dict.es.txt", words)  # joined dictionary: --share-all-embeddings needs one
    elif spec.name in ("tts", "fastspeech2"):
        tiny._write_yaml(d / "config.yaml", {
            "features": tiny.FS2_FEATURES if spec.name == "fastspeech2" else tiny.TTS_FEATURES,
            "vocab_filename": "dict.txt",
            "vocoder": {"type": "hifigan", "config": "hifigan.json", "checkpoint": "hifigan.pt"}})
        tiny._write_dict(d / "dict.txt", words)
    elif spec.name == "s2ut":
        tiny._write_yaml(d / "config.yaml", {"input_channels": 1, "input_feat_per_channel": FEAT_DIM})


def _argv(spec: Spec, d: Path) -> list[str]:
    return [str(d), *spec.argv, *_TRAIN]


def _build_meta(spec: Spec):
    """The model on the meta device: the real fairseq classes, no storage behind any parameter."""
    import torch

    with quiet_fairseq(), tempfile.TemporaryDirectory() as tmp:
        if spec.vocoder is not None:
            with torch.device("meta"):
                return _vocoder(spec)
        from fairseq import options, tasks
        from fairseq.dataclass.utils import convert_namespace_to_omegaconf

        d = Path(tmp) / spec.name
        _write_data(spec, d)
        args = options.parse_args_and_arch(options.get_training_parser(), input_args=_argv(spec, d))
        cfg = convert_namespace_to_omegaconf(args)
        task = tasks.setup_task(cfg.task)
        with torch.device("meta"):
            return task.build_model(cfg.model)


def _vocoder(spec: Spec):
    if spec.name == "code_hifigan":
        from fairseq.models.text_to_speech.codehifigan import CodeGenerator

        return CodeGenerator(spec.vocoder)
    from fairseq.models.text_to_speech.hifigan import Generator

    return Generator(spec.vocoder)


def count_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())  # shared (tied) parameters once


def param_counts(names: tuple[str, ...] | None = None) -> dict[str, dict]:
    """{name: {"params", "released", "source"}} from meta-device builds: no weights allocated."""
    out = {}
    for name in names or tuple(SPECS):
        spec = SPECS[name]
        out[name] = {"params": count_parameters(_build_meta(spec)), "released": spec.released,
                     "source": spec.source}
    return out


# ---------------------------------------------------------------- builders


def _pin_unit_durations(model) -> None:
    """A random duration predictor gives 0-3 frames per unit: pin it (round(exp(x) - 1) frames)."""
    import torch

    with torch.no_grad():
        model.dur_predictor.proj.weight.zero_()
        model.dur_predictor.proj.bias.fill_(math.log(1 + UNIT_FRAMES))


def _pin_fs2(model) -> None:
    proj = model.encoder.var_adaptor.duration_predictor.proj
    proj.weight.zero_()
    proj.bias.fill_(math.log(1 + FS2_FRAMES_PER_TOKEN))


def _save_vocoder(spec: Spec, d: Path, stem: str, seed: int, mutate: Callable | None = None) -> Path:
    tiny._seed(seed)
    model = _vocoder(spec)
    if mutate is not None:
        mutate(model)
    tiny._save_vocoder(model, spec.vocoder, d / f"{stem}.json", d / f"{stem}.pt")
    return d / f"{stem}.pt"


def _build(name: str, out: Path, seed: int, mutate: Callable | None = None) -> Path:
    spec = SPECS[name]
    d = out / name
    _write_data(spec, d)
    if name == "mt":  # the language pair comes from a binarised split's file names, as fairseq-preprocess writes it
        tiny._binarize_pair(d, "en", "es", ["w1 w2 w3"], ["w4 w5 w6"])
    tiny._save_like_fairseq_train(_argv(spec, d), d / "checkpoint.pt", out, seed, mutate=mutate)
    return d / "checkpoint.pt"


def build_s2t(out: Path, seed: int) -> Path:
    return _build("s2t", out, seed)


def build_mt(out: Path, seed: int) -> Path:
    return _build("mt", out, seed)


def build_tts(out: Path, seed: int) -> tuple[Path, Path]:
    ckpt = _build("tts", out, seed, mutate=tiny._never_eos)
    return ckpt, _save_vocoder(SPECS["hifigan"], out / "tts", "hifigan", seed)


def build_fastspeech2(out: Path, seed: int) -> tuple[Path, Path]:
    ckpt = _build("fastspeech2", out, seed, mutate=_pin_fs2)
    return ckpt, _save_vocoder(SPECS["hifigan"], out / "fastspeech2", "hifigan", seed)


def build_s2ut(out: Path, seed: int) -> tuple[Path, Path]:
    ckpt = _build("s2ut", out, seed)
    v = out / "vocoder"
    v.mkdir(parents=True, exist_ok=True)
    return ckpt, _save_vocoder(SPECS["code_hifigan"], v, "code_hifigan", seed, mutate=_pin_unit_durations)


BUILDERS: dict[str, Callable] = {"s2t": build_s2t, "mt": build_mt, "tts": build_tts,
                                 "fastspeech2": build_fastspeech2, "s2ut": build_s2ut}


def build_datasets(out: Path, seed: int) -> dict[str, Path]:
    """Speech npy (4-6 s of 80-dim filterbanks per sample) and token npy datasets in the upstream layout."""
    import numpy as np
    import torch

    d = out / "data"
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.RandomState(seed)
    speech = []
    for i in range(N_SAMPLES):
        t = int(rng.randint(SPEECH_FRAMES[0], SPEECH_FRAMES[1] + 1))
        speech.append({"id": i, "net_input": {
            "src_tokens": torch.from_numpy(rng.randn(1, t, FEAT_DIM).astype(np.float32)),
            "src_lengths": torch.tensor([t])}})
    written = {"speech": tiny.save_npy_dataset(speech, d / "speech.npy")}
    for name, vocab in (("mt", SPECS["mt"].vocab), ("tts", SPECS["tts"].vocab)):
        samples = []
        for i in range(N_SAMPLES):  # word ids past the 4 specials, then </s> (= 2) as encode_line appends it
            tokens = torch.from_numpy(rng.randint(4, vocab, TEXT_TOKENS).astype(np.int64))
            tokens = torch.cat([tokens, torch.tensor([2])])
            samples.append({"id": i, "net_input": {"src_tokens": tokens.view(1, -1),
                                                   "src_lengths": torch.tensor([tokens.numel()])}})
        written[f"tokens_{name}"] = tiny.save_npy_dataset(samples, d / f"tokens_{name}.npy")
    return written


def _stages() -> dict[str, dict]:
    return {
        "s2t": {"data": "../s2t", "task": "speech_to_text", "path": "../s2t/checkpoint.pt",
                "config_yaml": "config.yaml", "max_len_a": 0, "max_len_b": S2T_MAX_TOKENS},
        "mt": {"data": "../mt", "task": "translation", "path": "../mt/checkpoint.pt",
               "source_lang": "en", "target_lang": "es", "max_len_a": 0, "max_len_b": S2T_MAX_TOKENS},
        "tts": {"data": "../tts", "task": "text_to_speech", "path": "../tts/checkpoint.pt",
                "config_yaml": "config.yaml", "vocoder": "hifigan", "max_target_positions": TTS_FRAMES},
        "fs2": {"data": "../fastspeech2", "task": "text_to_speech", "path": "../fastspeech2/checkpoint.pt",
                "config_yaml": "config.yaml", "vocoder": "hifigan"},
        "s2u": {"data": "../s2ut", "task": "speech_to_speech", "path": "../s2ut/checkpoint.pt",
                "config_yaml": "config.yaml", "max_len_b": 100000, "beam": 10, "target_is_code": True,
                "max_target_positions": 3000, "target_code_size": 100},
        "vocoder": {"vocoder": "../vocoder/code_hifigan.pt", "vocoder_cfg": "../vocoder/code_hifigan.json",
                    "dur_prediction": True},
    }


LAYOUTS = {  # config name: (model_type, dataset, stage keys)
    "S2T": ("S2T", "speech", ("s2t",)),
    "MT": ("MT", "tokens_mt", ("mt",)),
    "TTS": ("TTS", "tokens_tts", ("tts",)),
    "TTS-FastSpeech2": ("TTS", "tokens_tts", ("fs2",)),
    "S2UT": ("S2UT", "speech", ("s2u", "vocoder")),
    "3StageS2ST": ("3StageS2ST", "speech", ("s2t", "mt", "tts")),
}


def write_configs(out: Path) -> dict[str, Path]:
    c = out / "configs"
    c.mkdir(parents=True, exist_ok=True)
    s = _stages()
    paths = {}
    for name, (model_type, dataset, keys) in LAYOUTS.items():
        label = "full" if name == model_type else f"full-{name.split('-', 1)[1].lower()}"
        doc = {"general": {"name": label, "dataset_path": f"../data/{dataset}.npy", "cpu": True,
                           "model_type": model_type, "dataset_size": N_SAMPLES}}
        doc.update({f"stage{i}": dict(s[k]) for i, k in enumerate(keys, 1)})
        paths[name] = c / f"{name}.yaml"
        tiny._write_yaml(paths[name], doc)
    return paths


def stage_full(out_dir: Path, *, seed: int = SEED, qwen: bool = True) -> dict:
    """Build every full-size fairseq model, the datasets and the configs into out_dir, then (qwen=True) the
    full-size Qwen3-TTS through pytest_s2st.tiny.qwen_full when that module exists. MANIFEST.json lists
    every file's SHA256, bytes, parameter count and the released count."""
    import torch

    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    models: dict[str, dict] = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with quiet_fairseq():
            import fairseq.options  # noqa: F401  (one-time import cost, kept out of the per-model times)
            import fairseq.trainer  # noqa: F401
            datasets = build_datasets(out, seed)
            for name, build in BUILDERS.items():
                t0 = time.perf_counter()
                result = build(out, seed)
                dt = round(time.perf_counter() - t0, 3)
                paths = result if isinstance(result, tuple) else (result,)
                for key, p in zip((name, f"{name}_vocoder"), paths):
                    models[key] = {"path": str(p), "sha256": sha256_file(p), "bytes": p.stat().st_size, "build_s": dt}
    finally:
        torch.set_num_threads(threads)
    counts = param_counts()
    spec_of = {"s2t": "s2t", "mt": "mt", "tts": "tts", "tts_vocoder": "hifigan", "fastspeech2": "fastspeech2",
               "fastspeech2_vocoder": "hifigan", "s2ut": "s2ut", "s2ut_vocoder": "code_hifigan"}
    for key, m in models.items():
        m.update(counts[spec_of[key]])
    configs = write_configs(out)
    qwen_entries = stage_qwen_full(out / "qwen3tts", seed) if qwen else None
    manifest = {
        "seed": seed,
        "files": {str(Path(m["path"]).relative_to(out)): {k: m[k] for k in ("sha256", "bytes", "params", "released")}
                  for m in models.values()},
        "configs": {k: str(p.relative_to(out)) for k, p in configs.items()},
        "qwen3tts": qwen_entries,
    }
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return {"out_dir": str(out), "models": models, "datasets": {k: str(v) for k, v in datasets.items()},
            "configs": {k: str(v) for k, v in configs.items()}, "qwen3tts": qwen_entries}


QWEN_MODULE = "pytest_s2st.tiny.qwen_full"


def stage_qwen_full(out: Path, seed: int) -> dict | None:
    """The full-size Qwen3-TTS through ``qwen_full.build(out_dir, seed)`` (its manifest entries), or None
    with one line when that module or qwen-tts is not installed."""
    import importlib
    import importlib.util

    if importlib.util.find_spec("qwen_tts") is None:
        print("qwen-tts not installed: no full-size Qwen3-TTS (pip install 'pytest-s2st[qwen]')")
        return None
    try:
        module = importlib.import_module(QWEN_MODULE)
    except ModuleNotFoundError as exc:
        if exc.name != QWEN_MODULE:
            raise
        print(f"{QWEN_MODULE} not in this version: no full-size Qwen3-TTS staged")
        return None
    return module.build(out, seed=seed)


def cache_key() -> str:
    return (f"{dist_version('fairseq-fixed')}-torch{dist_version('torch')}-{source_key(__file__)}"
            f"-{source_key(tiny.__file__)}")


def default_full_dir() -> Path:
    return cache_root() / f"fairseq-full-{cache_key()}"


S2T_ARCHS = ("s2t_transformer_xs", "s2t_transformer_s", "s2t_transformer_m")  # a cost-vs-size curve


def s2t_variant(arch: str) -> Spec:
    """The full-size S2T with another s2t_transformer size (same vocabulary, data and bounds)."""
    base = SPECS["s2t"]
    argv = tuple(arch if a == "s2t_transformer_s" else a for a in base.argv)
    return Spec("s2t", base.released if arch == "s2t_transformer_s" else None, base.source, vocab=base.vocab, argv=argv)


def stage_s2t_variant(out_dir: Path, arch: str, seed: int = SEED) -> Path:
    """One S2T of the given size plus the speech dataset and an S2T config; returns the config path."""
    out = Path(out_dir).resolve()
    spec = s2t_variant(arch)
    d = out / "s2t"
    _write_data(spec, d)
    with quiet_fairseq():
        build_datasets(out, seed)
        tiny._save_like_fairseq_train(_argv(spec, d), d / "checkpoint.pt", out, seed)
    configs = write_configs(out)
    (out / "MANIFEST.json").write_text(json.dumps({"seed": seed, "arch": arch, "params": count_parameters(
        _build_meta(spec)), "sha256": sha256_file(d / "checkpoint.pt")}, indent=2) + "\n")
    return configs["S2T"]


def s2t_variant_config(arch: str) -> Path:
    """The cached S2T of the given size (built once, like default_full_configs)."""
    if arch == "s2t_transformer_s":
        return default_full_configs()["S2T"]
    target = cache_root() / f"fairseq-{arch}-{cache_key()}"
    build_once(target, "MANIFEST.json", lambda out: stage_s2t_variant(out, arch), f"the {arch} S2T")
    return target / "configs" / "S2T.yaml"


def default_full_configs(cache_dir: Path | None = None) -> dict[str, Path]:
    """Stage the fairseq models once into cache_dir (default: default_full_dir(); ~1 GB) and return the
    config paths by name. Qwen3-TTS full size is not part of this cached build (stage it with s2st-stage)."""
    target = Path(cache_dir) if cache_dir is not None else default_full_dir()
    build_once(target, "MANIFEST.json", lambda out: stage_full(out, qwen=False), "the full-size fairseq models")
    return {name: target / "configs" / f"{name}.yaml" for name in LAYOUTS}


if __name__ == "__main__":  # python -m pytest_s2st.tiny.fairseq_full: stage into the cache, print the folder
    default_full_configs()
    print(default_full_dir())
