"""Offline quality scorers whose models ship inside their packages: nothing is downloaded.

- ASR: pocketsphinx 5 (en-US model in the wheel) -> WER via jiwer. Other languages need a
  pluggable backend (``WhisperDirASR`` over a local model dir); without one, error_rate is None
  with the reason, and a policy that gates error rate makes the verdict INCONCLUSIVE.
- Speaker: Resemblyzer 0.1.4 VoiceEncoder (pretrained.pt in the wheel), cosine between the
  utterance and the voice's anchor recording.
Scoring runs on finished run dirs, after collection, in whatever process calls it (s2st-assess
--score, or the plugin after the load phase): it is never inside a timed region. Models load once
per Scorer; ``get_scorer`` keeps one Scorer per configuration for the process.
"""
from __future__ import annotations

import hashlib
import importlib.metadata as md
import json
import time
import unicodedata
import warnings
from dataclasses import dataclass, field
from math import gcd
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol

import numpy as np

from ..errors import S2STError
from ..runs import load_run
from .scored import UTTERANCE
from .scored import metrics as scored_metrics
from .scorefile import Score, Scores, pcm_sha256, read_wav

ASR_RATE = 16000  # both pocketsphinx's en-US model and Resemblyzer expect 16 kHz
NORMALIZER = "nfkc-lower-strip-punct-v1"  # bumping this changes scorer_id: it changes every WER


def normalize_language(language: Any) -> str:
    lang = str(language or "").strip().lower().replace("_", "-")
    if lang.startswith(("zh", "cmn", "chinese", "mandarin")):
        return "zh"
    if lang.startswith(("en", "english")):
        return "en"
    return lang or "unknown"


def normalize_text(text: str, language: str) -> str:
    """Case, width and punctuation do not count as errors; zh is compared per character."""
    text = unicodedata.normalize("NFKC", text).lower()
    text = "".join(" " if unicodedata.category(ch).startswith(("P", "S")) else ch for ch in text)
    if language == "zh":
        return "".join(text.split())
    return " ".join(text.split())


def error_rate(reference: str, hypothesis: str, language: str) -> tuple[float, str]:
    """(rate, "wer"|"cer"): WER for space-delimited languages, CER for Chinese."""
    import jiwer  # lazy: optional

    ref, hyp = normalize_text(reference, language), normalize_text(hypothesis, language)
    if not ref:
        raise ValueError("reference text is empty after normalisation")
    if language == "zh":
        return float(jiwer.cer(ref, hyp)), "cer"
    return float(jiwer.wer(ref, hyp)), "wer"


from ..assets import sha256_file as _sha256_file  # noqa: E402


def _version(*dists: str) -> str | None:
    for dist in dists:
        try:
            return md.version(dist)
        except md.PackageNotFoundError:
            continue
    return None


def load_16k(wav_path: str | Path) -> np.ndarray:
    """Mono float32 at 16 kHz (polyphase resampling: exact rational ratio, deterministic)."""
    data, rate = read_wav(wav_path, dtype="float32", always_2d=True)
    mono = data.mean(axis=1)
    if rate != ASR_RATE:
        from scipy.signal import resample_poly  # lazy: heavy

        g = gcd(ASR_RATE, rate)
        mono = resample_poly(mono, ASR_RATE // g, rate // g).astype(np.float32)
    return mono


class ASRBackend(Protocol):
    name: str

    def unavailable(self, language: str) -> str | None:
        """None when this backend can transcribe the language, else why not."""

    def identity(self) -> dict[str, Any]:
        """Package versions and model-file digests that this backend's transcripts depend on."""

    def transcribe(self, wav16k: np.ndarray, language: str) -> str: ...


class PocketSphinxASR:
    """pocketsphinx 5.x with the en-US acoustic model, LM and dictionary shipped in the wheel."""

    name = "pocketsphinx-en-us"

    def __init__(self) -> None:
        self._decoder = None
        self.init_s: float | None = None

    def unavailable(self, language: str) -> str | None:
        if language != "en":
            return f"pocketsphinx ships only an en-US model, not {language!r}"
        try:
            # lazy: optional
            import pocketsphinx  # noqa: F401
        except ImportError:
            return ("pocketsphinx is not installed (install the quality extra: pip install -e '.[quality]' in the "
                    "pytest-s2st clone)")
        return None

    def _model_dir(self) -> Path:
        from pocketsphinx import get_model_path  # lazy: optional

        return Path(get_model_path()) / "en-us"

    def identity(self) -> dict[str, Any]:
        root = self._model_dir()
        files = sorted(p for p in root.rglob("*") if p.is_file())
        return {"backend": self.name, "pocketsphinx": _version("pocketsphinx"),
                "model_sha256": {str(p.relative_to(root)): _sha256_file(p) for p in files}}

    def _load(self):
        if self._decoder is None:
            from pocketsphinx import Decoder  # lazy: optional

            t0 = time.perf_counter()
            self._decoder = Decoder(samprate=ASR_RATE, loglevel="FATAL")
            self.init_s = time.perf_counter() - t0
        return self._decoder

    def transcribe(self, wav16k: np.ndarray, language: str) -> str:
        decoder = self._load()
        pcm = (np.clip(wav16k, -1.0, 1.0) * 32767).astype("<i2").tobytes()
        decoder.start_utt()
        decoder.process_raw(pcm, full_utt=True)
        decoder.end_utt()
        hyp = decoder.hyp()
        return hyp.hypstr if hyp is not None else ""


class WhisperDirASR:
    """A Whisper-style model already on disk (config.json, weights, processor files), run through
    transformers with local_files_only: for languages pocketsphinx lacks (zh). Absent dir or package ->
    a clear reason; a dir that does not load -> one S2STError line naming it. The model loads once per
    instance (``loads`` counts it; get_scorer keeps one instance per configuration for the process).
    Greedy decoding (the dir's generation_config), so a transcript is the same run to run. Audio longer
    than the feature extractor's window (30 s for Whisper) is transcribed window by window and joined,
    never silently cut at the first window."""

    name = "whisper-dir"

    def __init__(self, model_dir: str | Path | None, languages: tuple[str, ...] = ("zh",)) -> None:
        self.model_dir = Path(model_dir).expanduser() if model_dir else None
        self.languages = tuple(languages)
        self._model = None
        self.init_s: float | None = None
        self.loads = 0

    def unavailable(self, language: str) -> str | None:
        if language not in self.languages:
            return f"{self.name} is configured for {', '.join(self.languages)}, not {language!r}"
        if self.model_dir is None:
            return (f"no ASR backend for {language!r}: no local Whisper-style model dir given "
                    "(quality.asr_model_dir in the config, or s2st-assess --asr-model-dir)")
        if not (self.model_dir / "config.json").is_file():
            return f"no ASR backend for {language!r}: {self.model_dir} has no config.json (not a local model dir)"
        try:
            # lazy: optional
            import transformers  # noqa: F401
        except ImportError:
            return f"no ASR backend for {language!r}: transformers is not installed for {self.model_dir}"
        return None

    def identity(self) -> dict[str, Any]:
        if self.model_dir is None or not self.model_dir.is_dir():
            return {"backend": self.name, "model_dir": None}
        files = sorted(p for p in self.model_dir.rglob("*") if p.is_file())
        return {"backend": self.name, "transformers": _version("transformers"),
                "model_sha256": {str(p.relative_to(self.model_dir)): _sha256_file(p) for p in files}}

    def _load(self):
        if self._model is None:
            from transformers import WhisperForConditionalGeneration, WhisperProcessor  # lazy: heavy

            t0 = time.perf_counter()
            try:
                proc = WhisperProcessor.from_pretrained(self.model_dir, local_files_only=True)
                model = WhisperForConditionalGeneration.from_pretrained(self.model_dir, local_files_only=True).eval()
            except (OSError, ValueError, KeyError, TypeError) as exc:
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise S2STError(f"quality.asr_model_dir {self.model_dir}: not a loadable Whisper model dir: "
                                f"{first[:300]}") from None
            self._model = (proc, model)
            self.loads += 1
            self.init_s = time.perf_counter() - t0
        return self._model

    def transcribe(self, wav16k: np.ndarray, language: str) -> str:
        import torch  # lazy: heavy

        proc, model = self._load()
        window = int(getattr(proc.feature_extractor, "n_samples", 30 * ASR_RATE))
        texts = []
        for start in range(0, max(len(wav16k), 1), window):
            piece = wav16k[start:start + window]
            feats = proc(piece, sampling_rate=ASR_RATE, return_tensors="pt", return_attention_mask=True)
            try:
                with torch.no_grad():
                    ids = model.generate(feats.input_features, attention_mask=feats.attention_mask,
                                         language=language, task="transcribe")
            except ValueError as exc:  # e.g. a language the model's generation_config does not know
                raise S2STError(f"quality.asr_model_dir {self.model_dir}: cannot transcribe {language!r}: "
                                f"{str(exc).splitlines()[0][:300]}") from None
            texts.append(proc.batch_decode(ids, skip_special_tokens=True)[0].strip())
        return " ".join(t for t in texts if t)


class ResemblyzerSpeaker:
    """Resemblyzer's VoiceEncoder; anchors: voice -> recording of that voice (not from the runs)."""

    name = "resemblyzer-voiceencoder"

    def __init__(self, anchors: Mapping[str, Path]) -> None:
        self.anchors = dict(anchors)
        self._encoder = None
        self._anchor_emb: dict[str, np.ndarray] = {}
        self.init_s: float | None = None
        self.last_s = 0.0  # seconds of the last utterance embedding

    @staticmethod
    def _module():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # its scipy.ndimage.morphology import
            import resemblyzer  # lazy: heavy
        return resemblyzer

    def _weights(self) -> Path:
        return Path(self._module().__file__).parent / "pretrained.pt"

    def identity(self) -> dict[str, Any]:
        return {"backend": self.name, "resemblyzer": _version("resemblyzer"), "librosa": _version("librosa"),
                "webrtcvad": _version("webrtcvad-wheels", "webrtcvad"), "torch": _version("torch"),
                "pretrained.pt": _sha256_file(self._weights()),
                "anchors_sha256": {v: _sha256_file(p) for v, p in sorted(self.anchors.items())}}

    def _embed(self, wav16k: np.ndarray) -> np.ndarray:
        if self._encoder is None:
            t0 = time.perf_counter()
            self._encoder = self._module().VoiceEncoder("cpu", verbose=False)
            self._encoder.embed_utterance(np.zeros(ASR_RATE, np.float32) + 1e-3 * np.sin(np.arange(ASR_RATE)))
            self.init_s = time.perf_counter() - t0  # includes librosa/numba first-call compilation
        # already 16 kHz: volume-normalise, trim silences
        wav = self._module().preprocess_wav(wav16k.astype(np.float32))
        if len(wav) < ASR_RATE // 10:
            raise ValueError("less than 0.1 s of voiced audio")
        return self._encoder.embed_utterance(wav)

    def similarity(self, wav16k: np.ndarray, voice: str | None) -> tuple[float | None, str | None]:
        if voice is None or voice not in self.anchors:
            return None, (f"no anchor recording for voice {voice!r} "
                          f"(anchors: {', '.join(sorted(self.anchors)) or 'none'})")
        if voice not in self._anchor_emb:  # once per voice, with the model load: not per-utterance cost
            self._anchor_emb[voice] = self._embed(load_16k(self.anchors[voice]))
        t0 = time.perf_counter()
        emb = self._embed(wav16k)
        self.last_s = time.perf_counter() - t0
        a = self._anchor_emb[voice]
        return float(np.dot(emb, a) / (np.linalg.norm(emb) * np.linalg.norm(a))), None


def anchors_from(spec: str | Path | Mapping[str, str | Path] | None) -> dict[str, Path]:
    """A dir of <voice>.wav, or a mapping voice -> wav."""
    if spec is None:
        return {}
    if isinstance(spec, Mapping):
        out = {str(v): Path(p) for v, p in spec.items()}
    else:
        root = Path(spec)
        if not root.is_dir():
            raise S2STError(f"{root}: voice anchor dir does not exist")
        out = {p.stem: p for p in sorted(root.glob("*.wav"))}
    for voice, path in out.items():
        if not path.is_file():
            raise S2STError(f"voice anchor {voice!r}: {path} does not exist")
    return out


@dataclass
class Costs:
    """Seconds spent scoring: one-off model loads and per-utterance work (cache hits excluded)."""

    asr_init_s: float | None = None
    speaker_init_s: float | None = None
    asr_s: list[float] = field(default_factory=list)
    speaker_s: list[float] = field(default_factory=list)
    audio_s: list[float] = field(default_factory=list)


@dataclass
class Utterance:
    """What a per-utterance backend scores: one response's audio (mono, 16 kHz) and its request."""

    wav16k: np.ndarray
    text: str | None
    language: str
    voice: str | None


class ErrorRateBackend:
    """error_rate (quality/scored.py backend "asr"): WER/CER of an ASR transcript against the request's text."""

    def __init__(self, asr: Mapping[str, ASRBackend], costs: Costs) -> None:
        self.asr = asr
        self.costs = costs

    def identity(self) -> dict[str, Any]:
        return {lang: b.identity() for lang, b in sorted(self.asr.items())}

    def score(self, u: Utterance) -> tuple[float | None, str | None, dict[str, Any]]:
        backend = self.asr.get(u.language)
        why = (backend.unavailable(u.language) if backend is not None
               else f"no ASR backend configured for {u.language!r}")
        if why is None and not (u.text or "").strip():
            why = "the request record has no reference text"
        if why is not None:
            return None, why, {}
        t0 = time.perf_counter()
        hyp = backend.transcribe(u.wav16k, u.language)
        self.costs.asr_s.append(time.perf_counter() - t0)
        self.costs.audio_s.append(len(u.wav16k) / ASR_RATE)
        self.costs.asr_init_s = getattr(backend, "init_s", None)
        er, metric = error_rate(u.text or "", hyp, u.language)
        return er, None, {"error_metric": metric, "transcript": hyp}


class SpeakerBackend:
    """speaker_similarity (backend "speaker"): Resemblyzer cosine against the voice's anchor recording."""

    def __init__(self, speaker: ResemblyzerSpeaker, costs: Costs) -> None:
        self.speaker = speaker
        self.costs = costs

    def identity(self) -> dict[str, Any]:
        return self.speaker.identity()

    def score(self, u: Utterance) -> tuple[float | None, str | None, dict[str, Any]]:
        try:
            sim, why = self.speaker.similarity(u.wav16k, u.voice)
        except ValueError as exc:
            return None, f"speaker embedding failed: {exc}", {}
        if sim is not None:
            self.costs.speaker_s.append(self.speaker.last_s)
            self.costs.speaker_init_s = self.speaker.init_s
        return sim, why, {}


# quality/scored.py's per-utterance backend name -> its factory (the Scorer being built): each returns an
# object with identity() (what its scores depend on: part of scorer_id under its name) and
# score(Utterance) -> (value or None, reason when None, extra keys for the score file)
BACKENDS: dict[str, Callable[["Scorer"], Any]] = {
    "asr": lambda scorer: ErrorRateBackend(scorer.asr, scorer.costs),
    "speaker": lambda scorer: SpeakerBackend(scorer.speaker, scorer.costs),
}


class Scorer:
    def __init__(self, anchors: str | Path | Mapping[str, str | Path] | None = None,
                 asr: Mapping[str, ASRBackend] | None = None, asr_model_dir: str | Path | None = None) -> None:
        self.anchors = anchors_from(anchors)
        self.asr: dict[str, ASRBackend] = dict(asr) if asr is not None else {
            "en": PocketSphinxASR(), "zh": WhisperDirASR(asr_model_dir)}
        self.speaker = ResemblyzerSpeaker(self.anchors)
        self.costs = Costs()
        # one backend per per-utterance metric of the table, in table order
        self.backends = {m.backend: BACKENDS[m.backend](self) for m in scored_metrics(UTTERANCE)}
        self._cache: dict[tuple, Score] = {}
        self._identity: dict[str, Any] | None = None

    def identity(self) -> dict[str, Any]:
        if self._identity is None:
            self._identity = {
                "scorer": "pytest-s2st offline scorer v1", "normalizer": NORMALIZER, "jiwer": _version("jiwer"),
                "resample": f"scipy.signal.resample_poly to {ASR_RATE} Hz (scipy {_version('scipy')})",
                **{name: backend.identity() for name, backend in self.backends.items()},
            }
        return self._identity

    @property
    def scorer_id(self) -> str:
        canonical = json.dumps(self.identity(), sort_keys=True, separators=(",", ":"))
        return "s2st-" + hashlib.sha256(canonical.encode()).hexdigest()[:16]

    def score_wav(self, rid: str, wav_path: str | Path, text: str | None, language: Any, voice: str | None) -> Score:
        digest = pcm_sha256(wav_path)
        lang = normalize_language(language)
        key = (digest, text, lang, voice)
        if key in self._cache:  # the same PCM scored before (e.g. an unchanged candidate): same answer
            cached = self._cache[key]
            return Score(rid, digest, dict(cached.values), dict(cached.extra))
        utterance = Utterance(load_16k(wav_path), text, lang, voice)
        extra: dict[str, Any] = {"language": lang, "voice": voice, "reference": text}
        values: dict[str, float | None] = {}
        for metric in scored_metrics(UTTERANCE):
            value, why, more = self.backends[metric.backend].score(utterance)
            values[metric.name] = value
            extra.update(more)
            if value is None:
                extra[f"{metric.name}_reason"] = why or "no reason given"
        score = Score(rid, digest, values, extra)
        self._cache[key] = score
        return score

    def score_run(self, run_dir: str | Path) -> dict[str, Score]:
        """Every completed request of a run dir, warm-ups included; WAV-less ids are left out
        (the verdict reports them missing)."""
        run = load_run(run_dir)
        if run.problem:
            raise S2STError(f"cannot score: {run.problem}")
        out: dict[str, Score] = {}
        for rid, rec in sorted(run.records.items()):
            wav = run.wav(rid)
            if rec.get("status") == "ok" and wav.is_file():
                out[rid] = self.score_wav(rid, wav, rec.get("text"), rec.get("language"), rec.get("voice"))
        return out

    def score_runs(self, baseline_dir: str | Path, candidate_dir: str | Path) -> Scores:
        base, cand = self.score_run(baseline_dir), self.score_run(candidate_dir)
        return Scores(self.scorer_id, base, cand, self.identity())


_ASR: dict[tuple, ASRBackend] = {}


def asr_backend(language: str, asr_model_dir: str | Path | None = None) -> ASRBackend:
    """The offline ASR for ASR-BLEU in ``language``, one per configuration for the process (models load once):
    pocketsphinx's shipped en-US model for en, else the local Whisper-style dir quality.asr_model_dir names
    (without one: unavailable, with the reason)."""
    key = (language, None if language == "en" else str(asr_model_dir))
    if key not in _ASR:
        _ASR[key] = PocketSphinxASR() if language == "en" else WhisperDirASR(asr_model_dir, languages=(language,))
    return _ASR[key]


_SCORERS: dict[str, Scorer] = {}


def get_scorer(anchors: str | Path | Mapping[str, str | Path] | None = None,
               asr_model_dir: str | Path | None = None) -> Scorer:
    """One Scorer (models loaded once) per configuration for the life of the process."""
    key = json.dumps([str(anchors) if not isinstance(anchors, Mapping)
                      else sorted((str(k), str(v)) for k, v in anchors.items()),
                      str(asr_model_dir)])
    if key not in _SCORERS:
        _SCORERS[key] = Scorer(anchors, asr_model_dir=asr_model_dir)
    return _SCORERS[key]


__all__ = ["Scorer", "get_scorer", "PocketSphinxASR", "WhisperDirASR", "ResemblyzerSpeaker", "error_rate",
           "normalize_text", "normalize_language", "anchors_from"]
