"""fairseq pipelines for the seven upstream model types (behaviour of upstream benchmarking/core.py).

Processing (S2T, MT), SpeechGeneration (TTS, S2S), S2UT (speech -> units -> CodeHiFiGAN) and the
cascades (S2T -> TTS, S2T -> MT -> TTS). Each stage is loaded through fairseq's own code
(``tasks.setup_task``, ``checkpoint_utils.load_model_ensemble[_and_task]``, ``build_generator``);
the stage namespace is built like upstream get_metrics.py: fairseq's speech-generation parser
defaults (default task text_to_speech, so its defaults leak into every stage, as upstream) updated
with the merged general + stageN dict (fairseq_args.py); its files are checked and read by fairseq_files.py.

Imported lazily through the registry: torch and fairseq are imported here at module level.
"""
from __future__ import annotations

import ast
import json
from argparse import Namespace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch

from ..errors import S2STError
from ..assets import sha256_file
from .fairseq_args import check_stage_keys, stage_namespace
from .fairseq_files import (check_stage_files, data_files, librosa_compat, one_line, read_checkpoint,
                            waveform_features)
from .fairseq_runtime import hubert_safe_globals, quiet_fairseq

LAYOUTS = {
    "S2T": ("s2t",), "MT": ("mt",), "TTS": ("tts",), "S2S": ("s2s",), "S2UT": ("s2u", "vocoder?"),
    "2StageS2ST": ("s2t", "tts"), "3StageS2ST": ("s2t", "mt", "tts"),
    "HubertUnits": ("hubert", "vocoder?"),
}
SPEECH_IN = ("s2t", "s2u", "s2s")  # roles whose model reads speech features


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
        from fairseq import checkpoint_utils, tasks  # lazy: heavy
        from fairseq.dataclass.utils import convert_namespace_to_omegaconf  # lazy: heavy
        from fairseq_cli.generate import get_symbols_to_strip_from_output  # lazy: heavy

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
    from fairseq.models.text_to_speech.vocoder import GriffinLimVocoder  # lazy: heavy

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
        from fairseq import checkpoint_utils, tasks  # lazy: heavy

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
        from fairseq.data import data_utils  # lazy: heavy

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
        from fairseq.models.text_to_speech.vocoder import CodeHiFiGANVocoder  # lazy: heavy

        self.name = self.role = "vocoder"
        self.device = device
        for key in ("vocoder", "vocoder_cfg"):
            value = getattr(ns, key, None)
            if not value or not Path(value).is_file():
                raise S2STError(f"{where}: key {key!r}: file not found: {value!r}")
        try:
            cfg = json.loads(Path(ns.vocoder_cfg).read_text())
        except (OSError, ValueError) as exc:
            raise S2STError(f"{where}: cannot read vocoder_cfg {ns.vocoder_cfg}: {one_line(exc)}") from None
        self.dur_prediction = bool(getattr(ns, "dur_prediction", False))
        try:
            self.vocoder = CodeHiFiGANVocoder(ns.vocoder, cfg).to(device).eval()
        except Exception as exc:
            raise S2STError(f"{where}: cannot load vocoder {ns.vocoder}: {one_line(exc)}") from None
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
        from fairseq import checkpoint_utils  # lazy: heavy

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
            import joblib  # lazy: optional

            return np.asarray(joblib.load(path).cluster_centers_)
        except Exception as exc:
            raise S2STError(f"{where}: cannot read k-means model {path}: {one_line(exc)}") from None

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
                        f"{one_line(exc)}") from None


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
