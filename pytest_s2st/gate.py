"""The quality gate as pytest-s2st runs it (pytest-free): which policy, which baseline, which scores.

Policy: the config's `quality:` section (minus the keys below), overridden by the s2st_gate marker.
Plugin keys in `quality:`: `baseline` (a baseline config run in the same session, in paired AB/BA
order), `anchors` (per-voice anchor WAVs for speaker similarity), `asr_model_dir` (a local
Whisper-style model dir for languages pocketsphinx lacks).
"""
from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any, Mapping

from .errors import S2STError
from .inputs import closest, show
from .quality.policy import Policy
from .quality.scored import SCORED_METRICS, needs_scores

PLUGIN_KEYS = ("baseline", "anchors", "asr_model_dir")


def gate_policy(quality: Mapping[str, Any] | None, marker_kwargs: Mapping[str, Any] | None,
                where: str) -> Policy | None:
    if not quality and not marker_kwargs:
        return None
    if quality is not None and not isinstance(quality, Mapping):
        raise S2STError(f"{where}: quality must be a mapping, got {type(quality).__name__}")

    known = quality_keys()
    for key in list(quality or {}) + list(marker_kwargs or {}):
        if key not in known:
            raise S2STError(f"{where}: unknown key {show(repr(key))}{closest(key, known)}; "
                            f"known: {', '.join(sorted(known))}")
    for key in marker_kwargs or {}:
        if key in PLUGIN_KEYS:  # files, resolved against the config's folder: no marker keyword
            raise S2STError(f"{where}: {key} is a key of the config's quality: section (a path resolved against "
                            "its folder), not an s2st_gate keyword")
    check_plugin_keys(quality or {}, lambda key: f"{where} ({key})")
    merged = {k: v for k, v in (quality or {}).items() if k not in PLUGIN_KEYS}
    merged.update(marker_kwargs or {})
    return Policy.from_mapping(merged, where)


def quality_keys() -> list[str]:
    """Every key a config's quality: section may hold: the policy's and the plugin's."""
    return [f.name for f in fields(Policy)] + list(PLUGIN_KEYS)


def check_plugin_keys(quality: Mapping[str, Any], where: Any) -> None:
    """baseline and asr_model_dir are paths (non-empty strings); anchors a path or a mapping voice -> path.
    ``where(key)`` names the key's place (file:line). A number here was a TypeError deep in a scorer."""
    def is_path(value: Any) -> bool:
        return isinstance(value, str) and bool(value.strip()) and "\x00" not in value

    for key in PLUGIN_KEYS:
        value = quality.get(key)
        if value is None:
            continue
        if key == "anchors" and isinstance(value, Mapping):
            bad = next(((v, p) for v, p in value.items() if not isinstance(v, str) or not is_path(p)), None)
            if bad is None and value:
                continue
            got = "an empty mapping" if not value else f"voice {show(repr(bad[0]))}: {show(repr(bad[1]), 80)}"
            raise S2STError(f"{where(key)}: anchors must be a folder of <voice>.wav or a mapping voice -> WAV path; "
                            f"got {got}")
        if not is_path(value):
            what = "a folder of <voice>.wav or a mapping voice -> WAV path" if key == "anchors" else \
                "the path of a baseline config" if key == "baseline" else \
                "the path of a local Whisper-style model folder"
            got = "an empty string" if value == "" else f"{type(value).__name__} {show(repr(value), 80)}"
            raise S2STError(f"{where(key)}: {key} must be {what}; got {got}")


def gate_signature() -> str:
    """The s2st_gate marker's signature: every Policy key, in field order (the scored ones from quality/scored.py)."""
    return f"s2st_gate({', '.join(f'{f.name}=' for f in fields(Policy))})"


def gate_help() -> str:
    """The s2st_gate marker's help: what it does, then each scored metric's keys (quality/scored.py)."""
    scored = "; ".join(f"{'/'.join(m.thresholds)}: {m.name} "
                       f"({m.units}, {'per utterance' if m.per == 'utterance' else 'of the case'})"
                       for m in SCORED_METRICS)
    return ("quality gate: the frozen policy, over the config's `quality:` section, of a service benchmark (s2st_load; "
            "the candidate judged against the baseline) or of an s2st_benchmark case (its translations' scores): "
            "PASS passes, FAIL fails, missing evidence is INCONCLUSIVE. Scored metrics: " + scored + ".")


REFERENCES_SOURCE = "s2st_benchmark(references=)"


def given_references(references: Any, count: int, where: str) -> list[str]:
    """``s2st_benchmark(fn, inputs, references=[...])``: one reference translation per input, in input order
    (a string each, one line); one S2STError line otherwise."""
    from .datasets import reference_problem  # lazy: heavy

    if isinstance(references, (str, bytes)) or not isinstance(references, (list, tuple)):
        raise S2STError(f"{where}: references= must be a list of strings, one reference translation per input; "
                        f"got {type(references).__name__} {show(repr(references), 80)}")
    if len(references) != count:
        raise S2STError(f"{where}: references= has {len(references)} item(s) for {count} input(s): one reference "
                        "translation per input, in input order")
    for i, reference in enumerate(references):
        problem = reference_problem(reference)
        if problem:
            raise S2STError(f"{where}: references[{i}] {problem}")
    return [r.strip() for r in references]


def given_reference_scores(stage_names: list, stage_outputs: list, references: list[str],
                           tokenize: str | None = None) -> dict[str, dict]:
    """BLEU / chrF (Metric dicts) of the last stage whose every output is text -- a str, or {"text": str} as the
    config pipelines return it -- against ``references``; each metric missing, with the reason, when no stage
    outputs text (a gate on it is then INCONCLUSIVE, never a pass). ``tokenize``: BLEU's (bleu_tokenize; auto: 13a,
    a callable has no target language)."""
    from .quality.translation import TEXT_METRICS, missing_metrics, resolve_tokenize, score_outputs  # lazy: plugin load

    as_text = [[{"text": o} if isinstance(o, str) else o for o in outputs] for outputs in stage_outputs]
    try:
        scores = score_outputs(stage_names, as_text, references, REFERENCES_SOURCE,
                               resolve_tokenize(tokenize or "auto", None))
    except S2STError as exc:  # sacrebleu missing
        return missing_metrics(TEXT_METRICS, str(exc))
    if scores:
        return scores
    last = next((o for o in reversed(stage_outputs[-1]) if not isinstance(o, str)), None) if stage_outputs else None
    return missing_metrics(TEXT_METRICS, "the model's outputs are not text (a str, or {'text': str}); the last stage "
                                         f"returned {type(last).__name__}, so references= scored nothing")


def baseline_from_compare(compared_mapping: Mapping[str, Mapping[str, Any]] | None, fullname: str) -> Path | None:
    """The evidence dir of the same benchmark in the run --benchmark-compare loaded."""
    for mapping in (compared_mapping or {}).values():
        saved = mapping.get(fullname)
        if saved:
            service = (saved.get("extra_info") or {}).get("s2st_service") or {}
            if service.get("evidence_dir"):
                return Path(service["evidence_dir"])
    return None


def score(policy: Policy, baseline_dir: Path, candidate_dir: Path, quality: Mapping[str, Any] | None,
          scores_file: str | None):
    """Scores for the gate: the user's file, else the offline scorers (loaded once per process)."""
    from .quality.scorefile import load_scores  # lazy: plugin load

    if scores_file:
        return load_scores(scores_file)
    if not needs_scores(policy):
        return None
    from .quality.scorers import get_scorer  # lazy: heavy

    quality = quality or {}
    scorer = get_scorer(quality.get("anchors"), quality.get("asr_model_dir"))
    return scorer.score_runs(baseline_dir, candidate_dir)
