"""Translation quality of one s2st_benchmark row (pytest-free): its scores, its quality.baseline's, the gate.

The plugin calls these with plain arguments -- the case, the measurement, the s2st_gate marker's keywords and
where it was written -- and turns an S2STError into the test's one-line failure.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

from .errors import S2STError
from .gate import REFERENCES_SOURCE, gate_policy, given_reference_scores
from .measure.record import Metric
from .pipelines.base import build_pipeline
from .quality.translation import (SPEECH_METRICS, TEXT_METRICS, judge_translation, measure_speech, measure_translation,
                                  missing_metrics, no_scores_reason, run_outputs, target_language, translation_keys)
from .quality.verdict import Verdict


def score_case_row(case: Any, samples: list, measurement: Any, pipeline: Any, gate_kwargs: Mapping | None,
                   gate_where: str | None, baseline_of: Callable[[str], dict]) -> None:
    """BLEU/chrF of the case's translations and ASR-BLEU/ASR-chrF of its output speech against its references
    (after every pass, never timed) into the row; with translation thresholds in the frozen policy, the gate's
    verdict (measurement.gate). ``gate_where``: where the s2st_gate marker was written (None: no marker);
    ``baseline_of(path)``: a quality.baseline config's translation metrics (translation_baseline)."""
    where = str(case.config.path)
    scores = case_translation_scores(case, samples, [s.name for s in measurement.stages],
                                     measurement.stage_outputs, pipeline, where)
    # the marker's own keys were checked at setup (named as the test file's); what is left is the merge
    policy = gate_policy(case.config.quality, gate_kwargs,
                         f"{where} (quality)" + (f" with {gate_where}" if gate_where is not None else ""))
    measurement.quality.update({name: Metric.from_dict(m) for name, m in scores.items() if not m.get("absent")})
    if policy is None or not translation_keys(policy):
        return
    base_path = (case.config.quality or {}).get("baseline")
    baseline = baseline_of(str(base_path)) if base_path else None
    status, reasons, metrics = judge_translation(policy, scores, baseline, str(base_path or ""))
    measurement.gate = Verdict(status, reasons, {"translation": metrics})
    measurement.info["translation_gate"] = {"status": status, "reasons": reasons, "metrics": metrics,
                                            "baseline": str(base_path) if base_path else None,
                                            "policy": policy.to_dict(), "policy_fingerprint": policy.fingerprint()}


def score_given_row(quality: Mapping | None, references: list, measurement: Any, tokenize: str | None,
                    gate_kwargs: Mapping | None, where: str) -> None:
    """s2st_benchmark(fn, inputs, references=[...]): BLEU/chrF of the callable's text outputs into the row and,
    with translation thresholds in the policy (the s2st_gate marker over a case's quality: section), the verdict.
    Drop thresholds need a baseline's scores, which a callable has not: INCONCLUSIVE with the reason.
    ``quality``: the case's quality: section (None without a case); ``where`` names it, or the marker."""
    scores = given_reference_scores([s.name for s in measurement.stages], measurement.stage_outputs, references,
                                    tokenize)
    measurement.quality.update({name: Metric.from_dict(m) for name, m in scores.items()})
    policy = gate_policy(quality, gate_kwargs, where)
    if policy is None or not translation_keys(policy):
        return
    status, reasons, metrics = judge_translation(policy, scores, None)
    reasons = [r.replace("(quality.baseline)", "(a callable's references= give no baseline scores)") for r in reasons]
    measurement.gate = Verdict(status, reasons, {"translation": metrics})
    measurement.info["translation_gate"] = {"status": status, "reasons": reasons, "metrics": metrics,
                                            "baseline": None, "references": REFERENCES_SOURCE,
                                            "policy": policy.to_dict(), "policy_fingerprint": policy.fingerprint()}


def case_translation_scores(case: Any, samples: list, names: list, outputs: list, pipeline: Any, where: str) -> dict:
    """Every translation metric of a case's outputs (Metric dicts): BLEU/chrF of its last text stage, ASR-BLEU/
    ASR-chrF of its final speech; a metric it could not score carries the reason (value None)."""
    from .quality.scorers import asr_backend  # lazy: heavy

    general = case.config.general
    references = general.get("references")
    finder = getattr(pipeline, "reference_decoder", None)
    decode = finder() if callable(finder) else None
    asr_dir = (case.config.quality or {}).get("asr_model_dir")
    tokenize = case.settings.get("bleu_tokenize") or "13a"  # resolved by load_case (auto: by target language)
    scores = measure_translation(samples, names, outputs, references, where, decode, tokenize)
    scores.update(measure_speech(samples, names, outputs, references, where,
                                 target_language(general, case.config.stages),
                                 lambda lang: asr_backend(lang, asr_dir), decode, tokenize))
    for kind, speech in ((TEXT_METRICS, False), (SPEECH_METRICS, True)):  # why not, for a gate that needs them
        if not any(name in scores for name in kind):
            scores.update({name: dict(m, absent=True) for name, m in missing_metrics(
                kind, no_scores_reason(samples, names, outputs, references, where, decode, speech)).items()})
    return scores


def translation_baseline(path: str, cache: dict[str, dict], measured: Iterable[Any],
                         load_case: Callable[[str], Any]) -> dict:
    """The translation metrics of a quality.baseline config: its row when this session measured it (one of
    ``measured``), else its pipeline run untimed on its own dataset (once per session: kept in ``cache``).
    ``load_case(path)``: the config resolved as the session resolves its cases."""
    if path in cache:
        return cache[path]
    for row in measured:
        if row.info.get("config") == path and row.quality:
            cache[path] = {k: m.to_dict() for k, m in row.quality.items()}
            return cache[path]

    case = load_case(path)
    samples = case.samples(f"{path} (quality.baseline)")
    pipeline = build_pipeline(case.model_type, case.config.stages, device=case.device().name,
                              config_path=case.config.path, config_lines=case.config.lines)
    try:
        names, outputs = run_outputs(pipeline, samples)
        scores = case_translation_scores(case, samples, names, outputs, pipeline, f"{path} (quality.baseline)")
    finally:
        pipeline.close()
    cache[path] = {k: m for k, m in scores.items() if not m.get("absent")}
    return cache[path]
