"""fairseq pipelines for the seven upstream model types (behaviour of upstream benchmarking/core.py).

Processing (S2T, MT), SpeechGeneration (TTS, S2S), S2UT (speech -> units -> CodeHiFiGAN) and the
cascades (S2T -> TTS, S2T -> MT -> TTS). Each stage is loaded through fairseq's own code
(``tasks.setup_task``, ``checkpoint_utils.load_model_ensemble[_and_task]``, ``build_generator``);
the stage namespace is built like upstream get_metrics.py: fairseq's speech-generation parser
defaults (default task text_to_speech, so its defaults leak into every stage, as upstream) updated
with the merged general + stageN dict.

Imported lazily through the registry: torch and fairseq are imported here at module level.
"""
from __future__ import annotations

import argparse
import ast
import copy
import json
from argparse import Namespace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch

from ..errors import S2STError
from ..assets import sha256_file
from ..measure.device import backend_of
from .fairseq_runtime import quiet_fairseq

# stage role -> task family it must run (stage task and checkpoint task are both checked)
ROLE_TASK = {"s2t": "speech_to_text", "mt": "translation", "tts": "text_to_speech",
             "s2s": "speech_to_speech", "s2u": "speech_to_speech", "hubert": "hubert_pretraining"}
LAYOUTS = {
    "S2T": ("s2t",), "MT": ("mt",), "TTS": ("tts",), "S2S": ("s2s",), "S2UT": ("s2u", "vocoder?"),
    "2StageS2ST": ("s2t", "tts"), "3StageS2ST": ("s2t", "mt", "tts"),
    "HubertUnits": ("hubert", "vocoder?"),
}
SPEECH_IN = ("s2t", "s2u", "s2s")  # roles whose model reads speech features
_BASE_NS: Namespace | None = None


# ---------------------------------------------------------------- namespaces and checks


def _base_namespace() -> Namespace:
    """Upstream make_parser() parsed with ['', '--config', ...]: fairseq's own defaults."""
    global _BASE_NS
    if _BASE_NS is None:
        with quiet_fairseq():  # importing fairseq warns (torch.jit.script, hydra): keep -W error runs alive
            from fairseq import options

            parser = options.get_speech_generation_parser()
            parser.add_argument("--target-is-code", action="store_true", default=False)
            parser.add_argument("--config", type=str)
            parser.add_argument("--model-type", default="S2U")
            parser.add_argument("--dataset-path", type=str)
            parser.add_argument("--dataset-type", type=str, default="npy")
            parser.add_argument("--read-using-sf", type=str, default=False)
            parser.add_argument("--dataset-size", default=None, type=int)
            parser.add_argument("--dump-speech-waveforms-dir", default=None, type=str)
            parser.add_argument("--dump-waveform-file-prefix", default="", type=str)
            parser.add_argument("--feat-dim", default=80, type=int)
            parser.add_argument("--target-sr", default=16000, type=int)
            options.add_generation_args(parser)
            _BASE_NS = options.parse_args_and_arch(parser, input_args=[""])
    return copy.deepcopy(_BASE_NS)


# stage keys this project reads that are no fairseq argument: the unit vocoder's and the HuBERT unit extractor's
OWN_STAGE_KEYS = frozenset({"vocoder", "vocoder_cfg", "dur_prediction", "hubert_ckpt_path", "hubert_km_path",
                            "hubert_layer", "max_chunk", "normalize_waveform"})
_KNOWN_KEYS: frozenset | None = None


def known_stage_keys() -> frozenset:
    """Every name a stage section may use: fairseq's speech-generation parser (common, dataset, generation
    arguments), the arguments of every task a stage runs (ROLE_TASK), and OWN_STAGE_KEYS."""
    global _KNOWN_KEYS
    if _KNOWN_KEYS is None:
        import logging

        was = logging.root.manager.disable
        logging.disable(logging.INFO)  # fairseq's task modules log install hints (tensorboardX) on import
        try:
            keys = set(vars(_base_namespace())) | OWN_STAGE_KEYS
            with quiet_fairseq():
                from fairseq.tasks import TASK_REGISTRY

                for task in sorted(set(ROLE_TASK.values())):
                    parser = argparse.ArgumentParser(conflict_handler="resolve", add_help=False)
                    TASK_REGISTRY[task].add_args(parser)
                    keys |= {action.dest for action in parser._actions}
        finally:
            logging.disable(was)
        _KNOWN_KEYS = frozenset(keys)
    return _KNOWN_KEYS


def check_stage_keys(index: int, role: str, config_path: Path, lines: Mapping[str, int]) -> None:
    """A key written in the stage's own section (``stageN.key`` in the config's line map) that no fairseq
    argument and no key of this project has: refused with the closest name (upstream would ignore it, so
    ``beem: 20`` would silently run at the default beam)."""
    import difflib

    prefix = f"stage{index}."
    known = known_stage_keys()
    for dotted, line in lines.items():
        if not dotted.startswith(prefix) or "." in dotted[len(prefix):]:
            continue
        key = dotted[len(prefix):]
        if key.replace("-", "_") in known:
            continue
        close = difflib.get_close_matches(key.replace("-", "_"), sorted(known), n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else " (see fairseq's generate options)"
        raise S2STError(f"{config_path}:{line} ({dotted}): unknown key {key!r} for a fairseq {role} stage: no fairseq "
                        f"argument has that name{hint}")


def stage_namespace(stage: dict, *, device: str, config_path: Path) -> Namespace:
    """fairseq's defaults updated with the stage. Its paths arrive resolved (config.load_config,
    keys declared in pipelines.base.MODEL_TYPES): nothing is resolved here."""
    ns = _base_namespace()
    d = vars(ns)
    d.update(stage)
    d["config"] = str(config_path)
    d["cpu"] = not backend_of(device).fairseq  # a backend fairseq cannot place models on runs it on cpu
    return ns


def allow_fairseq_globals() -> None:
    """fairseq checkpoints pickle argparse.Namespace (cfg.model of legacy archs); allow-list exactly that."""
    torch.serialization.add_safe_globals([argparse.Namespace])


def _fbank_backend_problem() -> str:
    """Why neither PyKaldi nor torchaudio computed fbank: torchaudio missing, or installed but not loading
    (PyPI's torchaudio is a CUDA build whose compiled libraries fail beside CPU torch)."""
    import importlib
    import importlib.util

    if importlib.util.find_spec("torchaudio") is None:
        return "needs torchaudio or PyKaldi (pip install torchaudio)"
    try:
        importlib.import_module("torchaudio.compliance.kaldi")
    except Exception as exc:  # noqa: BLE001  (any load failure is the answer we report)
        return (f"needs torchaudio, which is installed but does not load ({_one_line(exc)}): a build for another "
                "torch; `make install` removes its compiled libraries (docs/install.md)")
    return "needs torchaudio or PyKaldi: torchaudio loads, but fairseq's fbank returned nothing"


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def _load_failure(exc: BaseException) -> str:
    text = str(exc)
    if "Weights only load failed" in text:
        lines = [ln.strip() for ln in text.splitlines()[1:] if ln.strip()]
        refused = next((ln for ln in lines if "GLOBAL" in ln), None)
        if refused:  # a pickled global that is not allow-listed: refused, never run
            refused = refused.split(" Please use ")[0].replace("WeightsUnpickler error: ", "")
            return f"refused by torch.load(weights_only=True): {refused}"
        detail = next((ln for ln in lines if "Unsupported" in ln), lines[-1] if lines else "")
        return f"corrupt or truncated (weights-only unpickler: {detail})"
    return f"corrupt or truncated ({_one_line(exc)})"


def _load_yaml_mapping(path: Path, where: str) -> dict:
    import yaml

    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise S2STError(f"{where}: cannot read {path}: {_one_line(exc)}") from None
    if not isinstance(data, dict):
        raise S2STError(f"{where}: {path} is empty or not a mapping")
    return data


def check_stage_files(role: str, ns: Namespace, where: str) -> None:
    """Refuse, with one line, what would otherwise end in a fairseq traceback."""
    task = getattr(ns, "task", None)
    if not isinstance(task, str) or not task.startswith(ROLE_TASK[role]):
        raise S2STError(f"{where}: task {task!r} cannot run the {role} stage (needs {ROLE_TASK[role]})")
    if role in ("s2s", "s2u") and bool(getattr(ns, "target_is_code", False)) != (role == "s2u"):
        need = "true" if role == "s2u" else "false"
        raise S2STError(f"{where}: target_is_code must be {need} for the {role} stage")
    path = getattr(ns, "path", None)
    if not path:
        raise S2STError(f"{where}: key 'path' (the checkpoint) is not set")
    if ":" in str(path):
        raise S2STError(f"{where}: path {path!r} names an ensemble; loading several models is not supported")
    if not Path(path).is_file():
        raise S2STError(f"{where}: checkpoint not found: {path}")
    data = getattr(ns, "data", None)
    if not data or not Path(data).is_dir():
        raise S2STError(f"{where}: data dir not found: {data!r} (key 'data')")
    data = Path(data)
    if role == "mt":
        langs = [getattr(ns, "source_lang", None), getattr(ns, "target_lang", None)]
        if None in langs and not list(data.glob("dict.*.txt")):
            raise S2STError(f"{where}: {data} has no dict.<lang>.txt")
        for lang in filter(None, langs):
            if not (data / f"dict.{lang}.txt").is_file():
                raise S2STError(f"{where}: dictionary not found: {data / f'dict.{lang}.txt'}")
        return
    cfg_path = data / (getattr(ns, "config_yaml", None) or "config.yaml")
    if not cfg_path.is_file():
        raise S2STError(f"{where}: data config not found: {cfg_path} (keys 'data', 'config_yaml')")
    cfg = _load_yaml_mapping(cfg_path, where)
    if role in ("s2t", "tts"):
        vocab = data / cfg.get("vocab_filename", "dict.txt")
        if not vocab.is_file():
            raise S2STError(f"{where}: dictionary not found: {vocab} (vocab_filename in {cfg_path})")
    if role in ("tts", "s2s") and getattr(ns, "vocoder", None) in ("hifigan", "code_hifigan"):
        voc = cfg.get("vocoder")
        if not isinstance(voc, dict):
            raise S2STError(f"{where}: vocoder {ns.vocoder!r} needs a 'vocoder' section in {cfg_path}")
        for key in ("checkpoint", "config"):
            f = Path(str(voc.get(key, "")))
            if not (f.is_file() or (data / f).is_file()):
                raise S2STError(f"{where}: vocoder {key} not found: {voc.get(key)!r} (vocoder.{key} in {cfg_path})")


def data_files(role: str, ns: Namespace, task: Any) -> list[Path]:
    """The data-dir files that shape the model's behaviour (data config, dictionaries): assets too."""
    data = Path(ns.data)
    if role == "mt":
        langs = (getattr(task.cfg, "source_lang", None), getattr(task.cfg, "target_lang", None))
        return [data / f"dict.{lang}.txt" for lang in langs if lang and (data / f"dict.{lang}.txt").is_file()]
    cfg_path = data / (getattr(ns, "config_yaml", None) or "config.yaml")
    files = [cfg_path]
    if role in ("s2t", "tts"):
        files.append(data / task.data_cfg.vocab_filename)
    return [f for f in files if f.is_file()]


def read_checkpoint(role: str, ns: Namespace, where: str, arg_overrides: dict | None) -> dict:
    """Load the checkpoint once (weights_only on) and check it was trained for this stage's task."""
    from fairseq import checkpoint_utils

    allow_fairseq_globals()
    try:
        state = checkpoint_utils.load_checkpoint_to_cpu(ns.path, arg_overrides)
    except Exception as exc:  # truncated zip, not a torch file, a pickle global not allow-listed
        raise S2STError(f"{where}: cannot read checkpoint {ns.path}: {_load_failure(exc)}") from None
    if not isinstance(state, dict) or "model" not in state:
        raise S2STError(f"{where}: {ns.path} is not a fairseq checkpoint (no 'model' key)")
    cfg = state.get("cfg")  # a DictConfig after load_checkpoint_to_cpu; cfg.task a Namespace for legacy tasks
    task_cfg = cfg.get("task") if hasattr(cfg, "get") else None
    if task_cfg is None and state.get("args") is not None:
        task_cfg = state["args"]
    get = task_cfg.get if hasattr(task_cfg, "get") else (lambda k, default=None: getattr(task_cfg, k, default))
    ckpt_task = get("_name") or get("task") if task_cfg is not None else None
    if isinstance(ckpt_task, str) and not ckpt_task.startswith(ROLE_TASK[role]):
        raise S2STError(f"{where}: {ns.path} is a {ckpt_task!r} checkpoint, "
                        f"the {role} stage needs {ROLE_TASK[role]} (task {ns.task!r})")
    if role in ("s2s", "s2u") and task_cfg is not None and bool(get("target_is_code", False)) != (role == "s2u"):
        kind = "units" if get("target_is_code", False) else "spectrograms"
        raise S2STError(f"{where}: {ns.path} predicts {kind}; the {role} stage needs "
                        f"{'units' if role == 's2u' else 'spectrograms'}")
    return state


def librosa_compat() -> None:
    """fairseq 0.12 calls librosa.filters.mel positionally, which librosa >= 0.10 refuses; Griffin-Lim
    then fails. Re-bind fairseq's get_mel_filters to a wrapper that imports librosa only when called (as
    fairseq's own does: only Griffin-Lim builds mel filters, so no other config pays librosa's and numba's
    import) and calls it with keywords where librosa needs them (same filters)."""
    import inspect

    from fairseq.data.audio import audio_utils
    from fairseq.models.text_to_speech import vocoder

    original = audio_utils.get_mel_filters
    if getattr(original, "s2st_compat", False):
        return

    def get_mel_filters(sample_rate, n_fft, n_mels, f_min, f_max):
        try:
            import librosa
        except ImportError:  # fairseq's own ImportError ("Please install librosa") then names the fix
            return original(sample_rate, n_fft, n_mels, f_min, f_max)
        params = inspect.signature(librosa.filters.mel).parameters
        if all(p.kind != p.KEYWORD_ONLY for p in params.values()):
            return original(sample_rate, n_fft, n_mels, f_min, f_max)
        basis = librosa.filters.mel(sr=sample_rate, n_fft=n_fft, n_mels=n_mels, fmin=f_min, fmax=f_max)
        return torch.from_numpy(basis).float()

    get_mel_filters.s2st_compat = True
    audio_utils.get_mel_filters = vocoder.get_mel_filters = get_mel_filters


def waveform_features(data_cfg: Any, wav: Any, sample_rate: int, where: str) -> torch.Tensor:
    """A raw waveform -> what fairseq's SpeechToTextDataset makes of a .wav entry
    (get_features_or_waveform): the waveform itself when the data config sets use_audio_input,
    else get_fbank's path (the config's waveform transforms on 16-bit-scaled audio, Kaldi log-mel
    fbank through PyKaldi or torchaudio) and then the config's feature transforms. Returns [1, T, C]
    features (or a [1, N] waveform)."""
    from fairseq.data.audio import audio_utils
    from fairseq.data.audio.feature_transforms import CompositeAudioFeatureTransform
    from fairseq.data.audio.waveform_transforms import CompositeAudioWaveformTransform

    wav = np.asarray(wav, dtype=np.float32).reshape(1, -1)
    if data_cfg.use_audio_input:
        if sample_rate != data_cfg.use_sample_rate:  # fairseq would resample with sox; we never resample silently
            raise S2STError(f"{where}: the model takes {data_cfg.use_sample_rate} Hz audio, the dataset is "
                            f"{sample_rate} Hz (set general.sample_rate or resample the dataset)")
        x = torch.from_numpy(wav[0].copy())
        if data_cfg.standardize_audio():
            x = torch.nn.functional.layer_norm(x, x.shape)
        return x.view(1, -1)
    n_bins = data_cfg.input_feat_per_channel
    wav = wav * 2 ** 15  # get_fbank reads with normalization=False: Kaldi fbank expects 16-bit sample values
    transforms = CompositeAudioWaveformTransform.from_config_dict(data_cfg.get_waveform_transforms("test", False))
    if transforms is not None:
        wav, sample_rate = transforms(wav, sample_rate)
    try:
        feats = audio_utils._get_kaldi_fbank(wav, sample_rate, n_bins)
        if feats is None:
            feats = audio_utils._get_torchaudio_fbank(wav, sample_rate, n_bins)
    except (OSError, RuntimeError) as exc:  # a torchaudio built for another torch raises OSError, not ImportError
        raise S2STError(f"{where}: computing the {n_bins}-dim fbank features the model takes from raw audio "
                        f"failed: {_one_line(exc)}") from None
    if feats is None:
        raise S2STError(f"{where}: the model takes {n_bins}-dim log-mel fbank features; computing them from raw "
                        f"audio {_fbank_backend_problem()}, or use an npy feature dataset")
    transforms = CompositeAudioFeatureTransform.from_config_dict(data_cfg.get_feature_transforms("test", False))
    if transforms is not None:
        feats = transforms(feats)
    return torch.from_numpy(np.ascontiguousarray(feats, dtype=np.float32)).unsqueeze(0)


def _is_waveform(x: torch.Tensor) -> bool:
    """[N] or [1, N] floats (a raw dataset sample); speech features are [1, T, C]."""
    return x.is_floating_point() and (x.dim() == 1 or (x.dim() == 2 and x.shape[0] == 1))


def _to_device(sample: Any, device: str) -> Any:
    if isinstance(sample, torch.Tensor):
        return sample.to(device)
    if isinstance(sample, dict):
        return {k: _to_device(v, device) for k, v in sample.items()}
    return sample


def _waveform(x: Any) -> np.ndarray:
    return x.detach().float().cpu().numpy().reshape(-1).astype(np.float32, copy=False)


# ---------------------------------------------------------------- stages


class _StageBase:
    name: str
    role: str

    def __init__(self) -> None:
        self._next: Callable[[Any], Any] | None = None
        self.asset_files: list[Path] = []

    def to_next_input(self, output: Any) -> Any:
        return output if self._next is None else self._next(output)


class ProcessingStage(_StageBase):
    """Upstream Processing: ASR / ST / MT and the speech-to-unit half of S2UT. Output {"text"} or {"units"}."""

    def __init__(self, role: str, ns: Namespace, *, device: str, where: str) -> None:
        super().__init__()
        from fairseq import checkpoint_utils, tasks
        from fairseq.dataclass.utils import convert_namespace_to_omegaconf
        from fairseq_cli.generate import get_symbols_to_strip_from_output

        self.name = self.role = role
        self.device, self.where = device, where
        self.input_rate = int(getattr(ns, "sample_rate", None) or 16000)  # a raw dataset's rate (general.sample_rate)
        check_stage_files(role, ns, where)
        state = read_checkpoint(role, ns, where, {})
        cfg = convert_namespace_to_omegaconf(ns)
        self.task = tasks.setup_task(cfg.task)
        models, _ = checkpoint_utils.load_model_ensemble(
            [ns.path], arg_overrides={}, task=self.task, suffix=cfg.checkpoint.checkpoint_suffix,
            strict=False, num_shards=cfg.checkpoint.checkpoint_shard_count, state=state)
        if len(models) > 1:
            raise S2STError(f"{where}: loading several models is not supported")
        self.model = models[0]
        if cfg.common.fp16:
            self.model.half()
        self.model.to(device).eval()
        self.model.prepare_for_inference_(cfg)
        self.generator = self.task.build_generator([self.model], cfg.generation, extra_gen_cls_kwargs={})
        self.tokenizer = self.task.build_tokenizer(cfg.tokenizer)
        self.bpe = self.task.build_bpe(cfg.bpe)
        self.remove_bpe = cfg.common_eval.post_process
        self.tgt_dict = self.task.target_dictionary
        self._strip = get_symbols_to_strip_from_output(self.generator)
        self.asset_files = [Path(ns.path), *data_files(role, ns, self.task)]

    def encode_text(self, text: str) -> dict:
        """Upstream encode_source: text -> net_input for a text-input model (MT)."""
        if self.tokenizer is not None:
            text = self.tokenizer.encode(text)
        if self.bpe is not None:
            text = self.bpe.encode(text)
        tokens = self.task.source_dictionary.encode_line(text, add_if_not_exist=False).long()
        n = tokens.size(0)
        return _to_device({"net_input": {"src_tokens": tokens.view(1, n), "src_lengths": torch.tensor([n])}},
                          self.device)

    def decode(self, hypos) -> str:
        """Upstream decode_target."""
        text = self.tgt_dict.string(hypos[0][0]["tokens"].int().cpu(), self.remove_bpe, self._strip)
        if self.bpe is not None:
            text = self.bpe.decode(text)
        if self.tokenizer is not None:
            text = self.tokenizer.decode(text)
        return text

    def decode_reference(self, tokens: Any) -> str:
        """A reference held as target tokens (fairseq S2T / MT data's ``target``) as text, the way decode() writes
        a hypothesis: this stage's target dictionary, its BPE and tokenizer; eos, pad and bos left out."""
        t = tokens if isinstance(tokens, torch.Tensor) else torch.as_tensor(np.asarray(tokens))
        ignore = set(self._strip or ()) | {self.tgt_dict.pad(), self.tgt_dict.bos()}
        text = self.tgt_dict.string(t.reshape(-1).int().cpu(), self.remove_bpe, extra_symbols_to_ignore=ignore)
        if self.bpe is not None:
            text = self.bpe.decode(text)
        if self.tokenizer is not None:
            text = self.tokenizer.decode(text)
        return text

    def forward(self, x: dict) -> dict:
        with torch.inference_mode():
            hypos = self.task.inference_step(self.generator, [self.model], x, prefix_tokens=None, constraints=None)
        text = self.decode(hypos)
        return {"units": text} if self.role == "s2u" else {"text": text}


def _guard_griffin_lim(vocoder: Any, ns: Namespace, where: str) -> None:
    """Griffin-Lim re-analyses its own iSTFT output with reflect padding of n_fft/2, which needs more
    than n_fft/2 samples, i.e. at least n_fft//2//hop + 2 frames: refuse shorter outputs in one line
    (fairseq raises a bare RuntimeError from F.pad or conv1d)."""
    from fairseq.models.text_to_speech.vocoder import GriffinLimVocoder

    if not isinstance(vocoder, GriffinLimVocoder) or not vocoder.gl_transform.n_iter:
        return
    gl = vocoder.gl_transform
    need = gl.n_fft // 2 // gl.hop_length + 2

    limit = getattr(ns, "max_target_positions", None)

    def check(_module, args):
        frames = int(args[0].shape[-2])  # (B x) T x n_mels
        if frames >= need:
            return
        head = (f"{where}: the model emitted {frames} frame(s); Griffin-Lim needs at least {need} "
                f"(n_fft {gl.n_fft}, hop {gl.hop_length})")
        if isinstance(limit, int) and frames >= limit:  # cut by the length limit
            raise S2STError(f"{head}: the output was cut at max_target_positions {limit}: raise it")
        # the decoder predicted end-of-sequence early: a longer limit changes nothing
        raise S2STError(f"{head}: the decoder predicted end-of-sequence after {frames} frame(s), below "
                        f"max_target_positions {limit}; an untrained or mismatched model stops early: "
                        "use a trained model or inputs it speaks longer on")

    vocoder.register_forward_pre_hook(check)


class SpeechGenerationStage(_StageBase):
    """Upstream SpeechGeneration: TTS (text in) and S2S (speech features in); waveform out via the task's vocoder."""

    def __init__(self, role: str, ns: Namespace, *, device: str, where: str) -> None:
        super().__init__()
        from fairseq import checkpoint_utils, tasks

        self.name = self.role = role
        self.device, self.where = device, where
        self.input_rate = int(getattr(ns, "sample_rate", None) or 16000)
        check_stage_files(role, ns, where)
        if ns.task == "speech_to_speech":
            ns.normalize_waveform = False
        if ns.vocoder == "griffin_lim":
            librosa_compat()
        overrides = ast.literal_eval(ns.model_overrides)
        state = read_checkpoint(role, ns, where, overrides)
        self.task = tasks.setup_task(ns)
        self.pre_tokenizer = self.task.build_tokenizer(ns)
        self.bpe_tokenizer = self.task.build_bpe(ns)
        self.src_dict = getattr(self.task, "src_dict", None)
        ensemble, _, _ = checkpoint_utils.load_model_ensemble_and_task(
            [ns.path], arg_overrides=overrides, task=self.task, strict=False, state=state)
        self.model = ensemble[0].to(device).eval()
        self.generator = self.task.build_generator([self.model], ns)
        vocoder = getattr(self.generator, "vocoder", None)
        if vocoder is not None:
            vocoder.to(device)
            _guard_griffin_lim(vocoder, ns, where)
        features = self.task.data_cfg.config.get("features") or {}
        self.sample_rate = int(features.get("sample_rate", 16000))
        self.asset_files = [Path(ns.path), *data_files(role, ns, self.task)]
        if ns.vocoder in ("hifigan", "code_hifigan"):
            voc = self.task.data_cfg.vocoder
            self.asset_files += [Path(voc[k]) for k in ("checkpoint", "config") if voc.get(k)]

    def encode_text(self, text: str) -> dict:
        """Upstream processTextInput."""
        from fairseq.data import data_utils

        if self.src_dict is None:
            raise S2STError(f"the {self.role} stage takes speech, not text")
        if self.pre_tokenizer is not None:
            text = self.pre_tokenizer.encode(text)
        if self.bpe_tokenizer is not None:
            text = self.bpe_tokenizer.encode(text)
        target = self.src_dict.encode_line(text, add_if_not_exist=False, append_eos=True).long()
        target = data_utils.collate_tokens([target], self.src_dict.pad(), self.src_dict.eos(),
                                           left_pad=False, move_eos_to_beginning=False)
        sample = {"net_input": {"src_tokens": target, "src_lengths": torch.tensor([target.size(1)]),
                                "prev_output_tokens": None}}
        return _to_device(sample, self.device)

    def forward(self, x: dict) -> dict:
        x["speaker"] = None
        x["target_lengths"] = None  # read by FastSpeech2's generator (non-autoregressive); None: predicted durations
        with torch.inference_mode():
            out = self.generator.generate(self.model, x)
        return {"waveform": _waveform(out[0]["waveform"]), "sample_rate": self.sample_rate}


class UnitVocoderStage(_StageBase):
    """Upstream GenerateWaveformFromCode: unit string -> CodeHiFiGAN (optionally with duration prediction)."""

    def __init__(self, ns: Namespace, *, device: str, where: str) -> None:
        super().__init__()
        from fairseq.models.text_to_speech.vocoder import CodeHiFiGANVocoder

        self.name = self.role = "vocoder"
        self.device = device
        for key in ("vocoder", "vocoder_cfg"):
            value = getattr(ns, key, None)
            if not value or not Path(value).is_file():
                raise S2STError(f"{where}: key {key!r}: file not found: {value!r}")
        try:
            cfg = json.loads(Path(ns.vocoder_cfg).read_text())
        except (OSError, ValueError) as exc:
            raise S2STError(f"{where}: cannot read vocoder_cfg {ns.vocoder_cfg}: {_one_line(exc)}") from None
        self.dur_prediction = bool(getattr(ns, "dur_prediction", False))
        try:
            self.vocoder = CodeHiFiGANVocoder(ns.vocoder, cfg).to(device).eval()
        except Exception as exc:
            raise S2STError(f"{where}: cannot load vocoder {ns.vocoder}: {_one_line(exc)}") from None
        self.sample_rate = int(cfg.get("sampling_rate", 16000))
        self.asset_files = [Path(ns.vocoder), Path(ns.vocoder_cfg)]

    def encode_units(self, units: str) -> dict:
        """Upstream format_units."""
        code = torch.LongTensor([int(u) for u in units.strip().split()]).view(1, -1)
        return {"code": code.to(self.device)}

    def forward(self, x: dict) -> dict:
        with torch.inference_mode():  # the vocoder rewrites its input dict: give it a copy
            wav = self.vocoder(dict(x), self.dur_prediction)
        return {"waveform": _waveform(wav), "sample_rate": self.sample_rate}


class HubertUnitStage(_StageBase):
    """Upstream HubertUnitExtractor (HubertFeatureReader + ApplyKmeans), working on CPU: waveform ->
    layer-`hubert_layer` features in `max_chunk` pieces -> nearest k-means centroid -> unit string."""

    def __init__(self, ns: Namespace, *, device: str, where: str) -> None:
        super().__init__()
        from fairseq import checkpoint_utils

        from .fairseq_runtime import hubert_safe_globals

        self.name = self.role = "hubert"
        self.device = device
        for key in ("hubert_ckpt_path", "hubert_km_path", "hubert_layer"):
            if getattr(ns, key, None) in (None, ""):
                raise S2STError(f"{where}: key {key!r} is not set")
        for key in ("hubert_ckpt_path", "hubert_km_path"):
            if not Path(getattr(ns, key)).is_file():
                raise S2STError(f"{where}: key {key!r}: file not found: {getattr(ns, key)}")
        ns.path, ns.task = ns.hubert_ckpt_path, "hubert_pretraining"
        torch.serialization.add_safe_globals(hubert_safe_globals())
        state = read_checkpoint("hubert", ns, where, None)
        models, _, self.task = checkpoint_utils.load_model_ensemble_and_task([ns.path], state=state)
        self.model = models[0].to(device).eval()
        self.layer = int(ns.hubert_layer)
        self.max_chunk = int(getattr(ns, "max_chunk", None) or 1600000)
        centroids = self._centroids(Path(ns.hubert_km_path), where)
        dim = self.model.encoder.embedding_dim if hasattr(self.model, "encoder") else centroids.shape[1]
        if centroids.ndim != 2 or centroids.shape[1] != dim:
            raise S2STError(f"{where}: {ns.hubert_km_path}: centroids of shape {tuple(centroids.shape)} do not "
                            f"match the model's feature dim {dim}")
        self.C = torch.from_numpy(centroids.T.copy()).float().to(device)
        self.Cnorm = (self.C ** 2).sum(0, keepdim=True)
        self.sample_rate = int(self.task.cfg.sample_rate)
        self.asset_files = [Path(ns.hubert_ckpt_path), Path(ns.hubert_km_path)]

    @staticmethod
    def _centroids(path: Path, where: str) -> np.ndarray:
        """km.npy: a [K, D] array, loaded without pickle. Anything else: upstream's joblib k-means
        model (learn_kmeans.py) -- joblib is pickle, so only for files you trust."""
        try:
            if path.suffix == ".npy":
                return np.load(path, allow_pickle=False)
            import joblib

            return np.asarray(joblib.load(path).cluster_centers_)
        except Exception as exc:
            raise S2STError(f"{where}: cannot read k-means model {path}: {_one_line(exc)}") from None

    def encode_waveform(self, wav: Any) -> dict:
        x = torch.as_tensor(np.asarray(wav, dtype=np.float32)).view(-1)
        if self.task.cfg.normalize:
            x = torch.nn.functional.layer_norm(x, x.shape)
        return {"source": x.view(1, -1).to(self.device)}

    def forward(self, x: dict) -> dict:
        source = x["source"]
        with torch.inference_mode():
            feats = []
            for start in range(0, source.size(1), self.max_chunk):
                f, _ = self.model.extract_features(source=source[:, start:start + self.max_chunk],
                                                   padding_mask=None, mask=False, output_layer=self.layer)
                feats.append(f)
            feat = torch.cat(feats, 1).squeeze(0)
            dist = feat.pow(2).sum(1, keepdim=True) - 2 * torch.matmul(feat, self.C) + self.Cnorm
            units = dist.argmin(dim=1).tolist()
        return {"units": " ".join(map(str, units))}


# ---------------------------------------------------------------- pipeline


class FairseqPipeline:
    def __init__(self, model_type: str, stages: Sequence[_StageBase]) -> None:
        self.model_type = model_type
        self.stages = list(stages)
        for prev, nxt in zip(self.stages, self.stages[1:]):
            prev._next = _bridge(prev, nxt)

    def prepare_sample(self, sample: Any) -> Any:
        """npy sample {"id", "net_input"} (features or tokens, numpy or torch) or text sample {"text"}."""
        first = self.stages[0]
        if isinstance(first, HubertUnitStage):  # raw waveform: {"net_input": {"src_tokens"}} or a bare [1, N]
            wav = sample["net_input"]["src_tokens"] if isinstance(sample, dict) and "net_input" in sample else sample
            if isinstance(wav, torch.Tensor):
                wav = wav.detach().cpu().numpy()
            if not isinstance(wav, np.ndarray) or wav.dtype.kind != "f":
                raise S2STError(f"{self.model_type}: a sample must be a float waveform; got {type(wav).__name__}")
            return first.encode_waveform(wav)
        if isinstance(sample, dict) and isinstance(sample.get("text"), str):
            if not hasattr(first, "encode_text") or (first.role in ("s2t", "s2s", "s2u")):
                raise S2STError(f"{self.model_type}: this pipeline takes speech features, got a text sample "
                                f"(id {sample.get('id')!r})")
            return first.encode_text(sample["text"])
        net_input = sample.get("net_input") if isinstance(sample, dict) else None
        if not isinstance(net_input, dict) or "src_tokens" not in net_input or "src_lengths" not in net_input:
            raise S2STError(f"{self.model_type}: a sample must be {{'net_input': {{'src_tokens', 'src_lengths'}}}} "
                            f"or {{'text'}}; got {type(sample).__name__}")
        tokens, lengths = (torch.as_tensor(np.asarray(v)) if not isinstance(v, torch.Tensor) else v
                           for v in (net_input["src_tokens"], net_input["src_lengths"]))
        tokens = tokens.float() if tokens.is_floating_point() else tokens.long()
        lengths = lengths.long().view(-1)
        if first.role in SPEECH_IN and _is_waveform(tokens):
            # a raw dataset's [1, N] waveform: computed into what the model's data config asks for
            tokens = waveform_features(first.task.data_cfg, tokens.cpu().numpy(), first.input_rate, first.where)
            lengths = torch.tensor([tokens.shape[1]])
        out = {"net_input": {"src_tokens": tokens, "src_lengths": lengths}}
        if isinstance(first, SpeechGenerationStage):
            out["net_input"]["prev_output_tokens"] = None
        if "id" in sample:
            out["id"] = sample["id"]
        return _to_device(out, first.device)

    def assets(self) -> dict[str, str]:
        return {str(p): sha256_file(p) for st in self.stages for p in st.asset_files}

    def reference_decoder(self) -> tuple[str, Callable[[Any], str]] | None:
        """(stage name, tokens -> text) with the target dictionary of the last stage that writes text (S2T, MT),
        for references a dataset holds as target tokens; None when no stage writes text (S2UT's units are not
        text)."""
        for st in reversed(self.stages):
            if isinstance(st, ProcessingStage) and st.role != "s2u":
                return st.name, st.decode_reference
        return None

    def close(self) -> None:
        for st in self.stages:
            for attr in ("model", "generator", "vocoder", "task"):
                if hasattr(st, attr):
                    setattr(st, attr, None)
        self.stages = []

    def run(self, sample: Any) -> Any:
        """The whole cascade on one sample (not what is measured; a convenience)."""
        x = self.prepare_sample(sample)
        out = None
        for i, st in enumerate(self.stages):
            out = st.forward(x)
            if i + 1 < len(self.stages):
                x = st.to_next_input(out)
        return out


def _bridge(prev: _StageBase, nxt: _StageBase) -> Callable[[Any], Any]:
    if isinstance(nxt, UnitVocoderStage):
        return lambda out: nxt.encode_units(out["units"])
    return lambda out: nxt.encode_text(out["text"])


def _build_stage(role: str, ns: Namespace, *, device: str, where: str) -> _StageBase:
    try:
        with quiet_fairseq():
            if role in ("s2t", "mt", "s2u"):
                return ProcessingStage(role, ns, device=device, where=where)
            if role in ("tts", "s2s"):
                return SpeechGenerationStage(role, ns, device=device, where=where)
            if role == "hubert":
                return HubertUnitStage(ns, device=device, where=where)
            return UnitVocoderStage(ns, device=device, where=where)
    except S2STError:
        raise
    except Exception as exc:
        raise S2STError(f"{where}: cannot load {getattr(ns, 'path', None) or getattr(ns, 'vocoder', '')}: "
                        f"{_one_line(exc)}") from None


def build(stages: list[dict], *, model_type: str, device: str, config_path: Path,
          config_lines: Mapping[str, int] | None = None) -> FairseqPipeline:
    layout = LAYOUTS[model_type]
    need = [r for r in layout if not r.endswith("?")]
    if len(stages) < len(need):
        raise S2STError(f"{config_path}: model_type {model_type} needs {len(need)} stage(s) "
                        f"({', '.join(need)}), the config has {len(stages)}")
    for i, role in enumerate(layout[:len(stages)], 1):  # every typo before any model loads
        check_stage_keys(i, role.rstrip("?"), Path(config_path), config_lines or {})
    torch.manual_seed(1)  # as upstream core.py does at import
    built = []
    for i, (role, stage) in enumerate(zip(layout, stages), 1):
        role = role.rstrip("?")
        ns = stage_namespace(stage, device=device, config_path=Path(config_path))
        built.append(_build_stage(role, ns, device=device, where=f"{config_path}: stage{i} ({role})"))
    return FairseqPipeline(model_type, built)


# dumping lives in pytest_s2st.dump; re-exported here for the fairseq pipelines' users
from ..dump import dump_waveforms, resample  # noqa: E402,F401
