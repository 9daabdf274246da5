"""The quality gate as pytest-s2st runs it (pytest-free): which policy, which baseline, which scores.

Policy: the config's `quality:` section (minus the keys below), overridden by the s2st_gate marker.
Plugin keys in `quality:`: `baseline` (a baseline config run in the same session, in paired AB/BA
order), `anchors` (per-voice anchor WAVs for speaker similarity), `asr_model_dir` (a local
Whisper-style model dir for languages pocketsphinx lacks).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from .errors import S2STError
from .quality.policy import Policy
from .quality.scored import needs_scores  # noqa: F401 -- the one definition; callers import it from here too

PLUGIN_KEYS = ("baseline", "anchors", "asr_model_dir")


def gate_policy(quality: Mapping[str, Any] | None, marker_kwargs: Mapping[str, Any] | None, where: str) -> Policy | None:
    if not quality and not marker_kwargs:
        return None
    if quality is not None and not isinstance(quality, Mapping):
        raise S2STError(f"{where}: quality must be a mapping, got {type(quality).__name__}")
    from dataclasses import fields

    from .inputs import closest, show

    known = [f.name for f in fields(Policy)] + list(PLUGIN_KEYS)
    for key in list(quality or {}) + list(marker_kwargs or {}):
        if key not in known:
            raise S2STError(f"{where}: unknown key {show(repr(key))}{closest(key, known)}; "
                            f"known: {', '.join(sorted(known))}")
    merged = {k: v for k, v in (quality or {}).items() if k not in PLUGIN_KEYS}
    merged.update(marker_kwargs or {})
    return Policy.from_mapping(merged, where)


def gate_signature() -> str:
    """The s2st_gate marker's signature: every Policy key, in field order (the scored ones from quality/scored.py)."""
    from dataclasses import fields

    return f"s2st_gate({', '.join(f'{f.name}=' for f in fields(Policy))})"


def gate_help() -> str:
    """The s2st_gate marker's help: what it does, then each scored metric's keys (quality/scored.py)."""
    from .quality.scored import SCORED_METRICS

    scored = "; ".join(f"{'/'.join(m.thresholds)}: {m.name} ({m.units}, {'per utterance' if m.per == 'utterance' else 'of the case'})"
                       for m in SCORED_METRICS)
    return ("quality gate: the frozen policy, over the config's `quality:` section, of a service benchmark (s2st_load; "
            "the candidate judged against the baseline) or of an s2st_benchmark case (its translations' scores): "
            "PASS passes, FAIL fails, missing evidence is INCONCLUSIVE. Scored metrics: " + scored + ".")


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
    from .quality.scorefile import load_scores

    if scores_file:
        return load_scores(scores_file)
    if not needs_scores(policy):
        return None
    from .quality.scorers import get_scorer

    quality = quality or {}
    scorer = get_scorer(quality.get("anchors"), quality.get("asr_model_dir"))
    return scorer.score_runs(baseline_dir, candidate_dir)
