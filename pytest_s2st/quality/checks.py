"""The verdict's run checks: ONE table, ``RUN_CHECKS``, that ``s2st-assess`` (verdict.assess) runs in order.

Each entry is a ``findings.RunCheck`` (its name, what it reads, what it writes into ``findings.Findings``); the
order of the table is the order of the verdict's reasons. A new check is a module of its own with a RunCheck and
one ``register_run_check(...)`` (tests/test_quality_checks_registry.py registers a clipping check).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ..inputs import finite, show
from ..runs import SUMMARY, level_name, request_metrics
from .findings import (BASELINE, CANDIDATE, PCM, RECORDS, SCORES, WAVS, Findings, RunCheck, RunContext, WavFacts,
                       mean)
from .policy import Policy
from .scored import CORPUS, FLOOR, UTTERANCE, WORSE, gated, needs_scores
from .scored import metrics as scored_metrics
from .scorefile import SIDES, read_wav


class Bindings(RunCheck):
    """Both runs saved under the frozen policy; scores from the frozen scorer, present when gated."""

    name = "bindings"

    def reads(self, policy: Policy) -> frozenset[str]:
        return frozenset({RECORDS, SCORES})

    def judge(self, context: RunContext, findings: Findings) -> None:
        policy, scores = findings.policy, context.scores
        for label, run in ((BASELINE, context.base), (CANDIDATE, context.cand)):
            saved = run.saved_policy()
            if saved is not None:
                fp = Policy.from_mapping(saved, f"{run.path}/{SUMMARY}: policy").fingerprint()
                if fp != policy.fingerprint():
                    findings.missing.append(f"policy fingerprint mismatch: {label} run saved {fp[:12]}, "
                                            f"judged under {policy.fingerprint()[:12]}")

        translation = list(gated(policy, CORPUS))
        if translation:  # run dirs hold speech and the request's own text, no reference translations
            findings.missing.append(f"{', '.join(translation)}: a service run holds no reference translations, "
                                    "so no BLEU/chrF (translation thresholds are judged on s2st_benchmark cases)")
        if scores is not None and policy.scorer_id is not None and scores.scorer_id != policy.scorer_id:
            findings.missing.append(f"scorer identity {scores.scorer_id!r} is not the frozen {policy.scorer_id!r}")
        if needs_scores(policy) and scores is None:
            findings.missing.append(f"no quality scores given, and the policy gates "
                                    f"{', '.join(gated(policy, UTTERANCE))}")
        findings.metrics["scorer_id"] = scores.scorer_id if scores is not None else None


class Requests(RunCheck):
    """Every id either side recorded: record, WAV, hash binding, score. Fills the context's per-request facts
    (ids, wavs, quality, paired, durations) for the checks after it."""

    name = "requests"

    def reads(self, policy: Policy) -> frozenset[str]:
        return frozenset({RECORDS, WAVS, SCORES})

    def judge(self, context: RunContext, findings: Findings) -> None:
        context.ids = sorted(set(context.base.records) | set(context.cand.records))
        findings.metrics["ids"] = len(context.ids)
        for rid in context.ids:
            usable = True
            facts = {}
            for side in SIDES:
                wav, ok = self._side(context, findings, side, rid)
                usable = usable and ok
                if wav is not None:
                    facts[side] = wav
            if usable and len(facts) == 2:
                context.paired.append(rid)
                # here, not in the duration check: its reason keeps its place among this id's reasons
                if facts[BASELINE].seconds > 0:
                    change = (facts[CANDIDATE].seconds - facts[BASELINE].seconds) / facts[BASELINE].seconds
                    context.durations[rid] = finite(change * 100.0)
                elif findings.policy.max_duration_change_pct is not None:  # no change % from 0 s: unavailable
                    findings.missing.append(f"duration change unavailable for {rid}: the baseline WAV is empty")

    @staticmethod
    def _side(context: RunContext, findings: Findings, side: str, rid: str) -> tuple[WavFacts | None, bool]:
        """One id on one side: record, WAV, hash binding, score -> (WAV facts, usable)."""
        run, scores = context.run(side), context.scores
        rec = run.records.get(rid)
        if rec is None:
            findings.missing.append(f"request record {rid} missing from the {side} run")
            return None, False
        if rec.get("status") != "ok":
            msg = f"{side} request {rid} failed: {rec.get('error') or rec.get('status')}"
            (findings.crossed if side == CANDIDATE else findings.missing).append(msg)
            return None, False
        wav = context.wav_facts(side, rid)
        if wav is None or isinstance(wav, str):
            findings.missing.append(f"{side} WAV for {rid} {wav or 'missing'} ({show(str(run.wav(rid)))})")
            return None, False
        if rec.get("pcm_sha256") and rec["pcm_sha256"] != wav.pcm_sha256:
            findings.missing.append(f"{side} WAV for {rid} does not match its request record's pcm_sha256")
            return None, False
        context.wavs[side][rid] = wav
        if scores is None:
            return wav, True
        score = scores.side(side).get(rid)
        if score is None:
            findings.missing.append(f"no {side} score for {rid}")
            return wav, False
        if score.pcm_sha256 != wav.pcm_sha256:
            findings.missing.append(f"{side} score for {rid} is bound to pcm_sha256 {score.pcm_sha256[:12]}, "
                                    f"the WAV is {wav.pcm_sha256[:12]}")
            return wav, False
        for metric in scored_metrics(UTTERANCE):
            name = metric.name
            value = score.values.get(name)
            if value is None:
                if gated(findings.policy, UTTERANCE).keys() & metric.thresholds.keys():
                    findings.missing.append(f"{name} unavailable for {side} {rid}: "
                                            f"{score.reason(name) or 'no reason given'}")
            else:
                context.quality[name].setdefault(rid, {})[side] = value
        return wav, True


class ScoredQuality(RunCheck):
    """Each scored per-utterance metric (quality/scored.py): the candidate's change against the baseline, floors."""

    name = "quality"

    def reads(self, policy: Policy) -> frozenset[str]:
        return frozenset({SCORES})

    def judge(self, context: RunContext, findings: Findings) -> None:
        policy, quality = findings.policy, context.quality
        for metric in scored_metrics(UTTERANCE):
            pairs = {rid: v for rid, v in quality[metric.name].items() if len(v) == 2}
            findings.metrics["quality"][metric.change_label] = {
                "baseline_mean": mean([v[BASELINE] for v in pairs.values()]) if pairs else None,
                "candidate_mean": mean([v[CANDIDATE] for v in pairs.values()]) if pairs else None,
                "n": len(pairs),
            }
            deltas = {rid: metric.worse_by(v[BASELINE], v[CANDIDATE]) for rid, v in pairs.items()}
            worse = [getattr(policy, k) for k, rule in metric.thresholds.items() if rule == WORSE]
            findings.gate_deltas(metric.change_label, deltas, next((w for w in worse if w is not None), None),
                                 metric.fmt)
            for key, rule in metric.thresholds.items():
                if rule == FLOOR and getattr(policy, key) is not None:
                    self._floor(findings, metric, key, {rid: v[CANDIDATE] for rid, v in quality[metric.name].items()
                                                        if CANDIDATE in v})

    @staticmethod
    def _floor(findings: Findings, metric: Any, key: str, values: dict[str, float]) -> None:
        """A floor on the candidate's own per-utterance values (mean, or each per policy.aggregate)."""
        limit = getattr(findings.policy, key)
        if not values:
            findings.missing.append(f"{key}: no candidate {metric.name} scores")
            return
        below = (lambda v: v < limit) if metric.higher_is_better else (lambda v: v > limit)
        sign = "<" if metric.higher_is_better else ">"
        if findings.policy.aggregate == "each":
            for rid, v in sorted(values.items()):
                if below(v):
                    findings.crossed.append(f"{metric.name} {metric.fmt.format(v)} {sign} {limit:g} ({key}; {rid})")
            return
        avg = mean(list(values.values()))
        if avg is None:
            findings.missing.append(f"{key}: the mean {metric.name} is not a finite number (missing evidence)")
        elif below(avg):
            findings.crossed.append(f"{metric.name} {metric.fmt.format(avg)} {sign} {limit:g} "
                                    f"({key}; mean of {len(values)})")


class DurationChange(RunCheck):
    """The candidate WAV's seconds against the baseline's, per id with complete evidence (max_duration_change_pct)."""

    name = "duration"

    def reads(self, policy: Policy) -> frozenset[str]:
        return frozenset({WAVS})

    def judge(self, context: RunContext, findings: Findings) -> None:
        durations = context.durations
        findings.metrics["quality"]["duration change"] = {
            "n": len(durations), "signed_mean_pct": mean(list(durations.values())) if durations else None}
        findings.gate_deltas("duration change", {k: abs(v) if v is not None else None for k, v in durations.items()},
                             findings.policy.max_duration_change_pct, "{:.1f}", "%")


SNR_CAP_DB = 200.0  # bit-equal PCM: no error energy; reported as this cap, not as infinity


def snr_db(baseline: Any, candidate: Any) -> float | None:
    """10 log10(sum b^2 / sum (c - b)^2) over int16 samples, the shorter one zero-padded (missing or extra
    samples count as error); SNR_CAP_DB when equal; None when the baseline is silent (undefined)."""
    import numpy as np  # lazy: heavy

    b = np.asarray(baseline, dtype=np.float64).reshape(-1)
    c = np.asarray(candidate, dtype=np.float64).reshape(-1)
    n = max(len(b), len(c))
    b, c = np.pad(b, (0, n - len(b))), np.pad(c, (0, n - len(c)))
    signal, noise = float(np.dot(b, b)), float(np.dot(c - b, c - b))
    if signal == 0.0:
        return None
    if noise == 0.0:
        return SNR_CAP_DB
    return min(SNR_CAP_DB, 10.0 * math.log10(signal / noise))


def pcm_snr_db(baseline_wav: Path, candidate_wav: Path) -> float | None:
    b, _ = read_wav(baseline_wav, dtype="int16")
    c, _ = read_wav(candidate_wav, dtype="int16")
    return snr_db(b, c)


class PcmSnr(RunCheck):
    """The candidate's PCM against the baseline's, per id with complete evidence (min_snr_db)."""

    name = "snr"

    def reads(self, policy: Policy) -> frozenset[str]:
        return frozenset({PCM}) if policy.min_snr_db is not None else frozenset()

    def judge(self, context: RunContext, findings: Findings) -> None:
        limit = findings.policy.min_snr_db
        if limit is None:
            return
        snrs = {rid: snr_db(context.pcm(BASELINE, rid), context.pcm(CANDIDATE, rid)) for rid in context.paired}
        for rid, value in sorted(snrs.items()):
            if value is None:
                findings.missing.append(f"pcm snr unavailable for {rid}: the baseline WAV is silent")
        values = {rid: v for rid, v in snrs.items() if v is not None}
        entry: dict[str, Any] = {"n": len(values), "mean_db": mean(list(values.values())) if values else None}
        findings.metrics["quality"]["pcm snr vs baseline"] = entry
        if not values:
            return
        worst = min(values, key=lambda k: values[k])
        entry.update(worst_id=worst, worst_db=values[worst])
        if findings.policy.aggregate == "each":
            for rid, v in sorted(values.items()):
                if v < limit:
                    findings.crossed.append(f"pcm snr vs baseline {v:.1f} dB < {limit:g} dB ({rid})")
        elif entry["mean_db"] < limit:
            findings.crossed.append(f"pcm snr vs baseline {entry['mean_db']:.1f} dB < {limit:g} dB "
                                    f"(mean of {len(values)}; worst {worst} {values[worst]:.1f} dB)")


class Timing(RunCheck):
    """Per concurrency level, measured requests only (warm-ups excluded): mean TTFA and mean RTF; the speedup."""

    name = "timing"

    def judge(self, context: RunContext, findings: Findings) -> None:
        policy = findings.policy
        needed = {policy.speed_metric}
        if policy.max_ttfa_regression_pct is not None:
            needed.add("ttfa_s")
        speedup: dict[str, float] = {}
        levels: dict[str, dict[str, dict[str, list[float]]]] = {}
        for side, run in ((BASELINE, context.base), (CANDIDATE, context.cand)):
            for rid, rec in run.records.items():
                if rec.get("warmup") or rec.get("status") != "ok":
                    continue
                level = level_name(rec.get("concurrency"))
                t = request_metrics(rec)
                for name in ("ttfa_s", "rtf"):
                    slot = levels.setdefault(level, {}).setdefault(name, {BASELINE: [], CANDIDATE: []})
                    if t[name] is None:
                        if name in needed:
                            findings.missing.append(f"{name} unavailable for {side} {rid} "
                                                    "(timestamps missing or not finite numbers)")
                    else:
                        slot[side].append(t[name])
        for level, by_name in sorted(levels.items()):
            out = findings.metrics["timing"].setdefault(level, {})
            for name, sides in by_name.items():
                b = mean(sides[BASELINE]) if sides[BASELINE] else None  # None also when not finite
                c = mean(sides[CANDIDATE]) if sides[CANDIDATE] else None
                out[name] = {"baseline": b, "candidate": c, "n": [len(sides[BASELINE]), len(sides[CANDIDATE])]}
                if name not in needed:
                    continue
                if b is None or c is None or b <= 0 or c <= 0:
                    findings.missing.append(f"{name} at {level}: no measured requests on the "
                                            f"{BASELINE if b is None or b <= 0 else CANDIDATE} side")
                    continue
                change_pct = finite((c - b) / b * 100.0)
                if change_pct is None or finite(b / c) is None:
                    findings.missing.append(f"{name} at {level}: the change is not a finite number "
                                            "(missing evidence)")
                    continue
                out[name]["change_pct"] = change_pct
                ttfa_limit = policy.max_ttfa_regression_pct
                if name == "ttfa_s" and ttfa_limit is not None and change_pct > ttfa_limit:
                    findings.crossed.append(f"ttfa_s regression {change_pct:.1f}% > {ttfa_limit:g}% ({level})")
                if name == policy.speed_metric:
                    speedup[level] = b / c
                    improvement = -change_pct
                    if policy.min_improvement_pct is not None and improvement < policy.min_improvement_pct:
                        findings.crossed.append(f"{name} improvement {improvement:.1f}% < "
                                                f"{policy.min_improvement_pct:g}% ({level})")
        if not speedup and not any("unavailable" in m or " at c" in m for m in findings.missing):
            findings.missing.append(f"{policy.speed_metric}: no measured (non-warm-up) requests to compare")
        findings.speedup = speedup or None


RUN_CHECKS: list[RunCheck] = [Bindings(), Requests(), ScoredQuality(), DurationChange(), PcmSnr(), Timing()]


def register_run_check(check: RunCheck, *, before: str | None = None) -> None:
    """Adds ``check`` to RUN_CHECKS: in place of the check of the same name, else before the check named
    ``before``, else last (its reasons then come after every other check's)."""
    names = [c.name for c in RUN_CHECKS]
    if check.name in names:
        RUN_CHECKS[names.index(check.name)] = check
    elif before is not None:
        if before not in names:
            raise ValueError(f"no run check named {before!r} (there are: {', '.join(names)})")
        RUN_CHECKS.insert(names.index(before), check)
    else:
        RUN_CHECKS.append(check)


__all__ = ["RUN_CHECKS", "register_run_check", "RunCheck", "RunContext", "Findings", "Bindings", "Requests",
           "ScoredQuality", "DurationChange", "PcmSnr", "Timing", "snr_db", "pcm_snr_db", "SNR_CAP_DB"]
