"""Offline assessment of a candidate run against a baseline run under a frozen policy.

INCONCLUSIVE: evidence missing or unbound (record, WAV or score missing for an id either side
recorded, warm-ups included; a hash that does not bind score -> WAV -> record; another scorer;
a metric a threshold needs is unavailable; no baseline; policy fingerprint differs between runs).
FAIL: evidence complete and a frozen threshold crossed. PASS: otherwise; only then a speedup.
Everything here reads finished files (through ``pytest_s2st.runs``): no model runs, no clock is read,
nothing is timed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import S2STError
from ..inputs import finite, is_regular_file, show
from ..runs import SUMMARY, Run, level_name, load_run, request_metrics
from .policy import Policy
from .scored import CORPUS, FLOOR, UTTERANCE, WORSE, gated, needs_scores
from .scored import metrics as scored_metrics
from .scorefile import SIDES, Scores, pcm_digest, read_wav

PASS, FAIL, INCONCLUSIVE = "PASS", "FAIL", "INCONCLUSIVE"
EXIT_CODES = {PASS: 0, FAIL: 1, INCONCLUSIVE: 2}


@dataclass
class Verdict:
    status: str
    reasons: list[str] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    speedup: dict[str, float] | None = None  # "c<concurrency>" -> baseline mean / candidate mean; PASS only

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.status]

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "reasons": list(self.reasons), "speedup": self.speedup, "metrics": self.metrics}

    def format(self) -> str:
        lines = [f"s2st-assess: {self.status}"]
        lines += [f"  - {r}" for r in self.reasons]
        q = self.metrics.get("quality", {})
        for name, m in q.items():
            if "mean_db" in m:
                lines.append(f"  {name}: mean {_f(m.get('mean_db'))} dB (worst {m.get('worst_id')} "
                             f"{_f(m.get('worst_db'))} dB)")
                continue
            if "signed_mean_pct" in m:
                lines.append(f"  {name}: mean |change| {_f(m.get('change_mean'))}%, signed {_f(m.get('signed_mean_pct'))}% "
                             f"(worst {m.get('worst_id')} {_f(m.get('worst_change'))}%)")
                continue
            lines.append(f"  {name}: baseline {_f(m.get('baseline_mean'))}, candidate {_f(m.get('candidate_mean'))}, "
                         f"change {_f(m.get('change_mean'))} (worst {m.get('worst_id')} {_f(m.get('worst_change'))})")
        for level, t in sorted(self.metrics.get("timing", {}).items()):
            for name, m in t.items():
                lines.append(f"  {level} {name}: baseline {_f(m.get('baseline'))}, candidate {_f(m.get('candidate'))}")
        if self.speedup is not None:
            metric = self.metrics.get("speed_metric")
            lines.append("  speedup (" + str(metric) + "): " + ", ".join(f"{k} {v:.3f}x" for k, v in sorted(self.speedup.items())))
        return "\n".join(lines)


def _f(value: Any) -> str:
    value = finite(value)
    return "n/a" if value is None else f"{value:.4g}"


def _wav_facts(run: Run, rid: str, cache: dict) -> tuple[str, float] | str | None:
    """(pcm_sha256, seconds) of the id's WAV, None when there is no file, a reason when it is unreadable."""
    wav = run.wav(rid)
    if wav not in cache:
        if not is_regular_file(wav):  # a FIFO or device named like a WAV is no WAV (and could block a read)
            cache[wav] = None
        else:
            try:  # one bounded read (scorefile.read_wav): the digest and the duration of the same bytes
                data, rate = read_wav(wav, dtype="int16")
                cache[wav] = (pcm_digest(data), len(data) / rate)
            except S2STError as exc:  # a corrupt WAV is no evidence
                cache[wav] = f"unreadable ({exc})"
    return cache[wav]


def _mean(values: list[float]) -> float | None:
    """The mean, or None when it is not a finite number (inputs.finite: 1e308 values overflow)."""
    return finite(math.fsum(values) / len(values)) if all(finite(v) is not None for v in values) else None


class _Judge:
    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.missing: list[str] = []
        self.crossed: list[str] = []
        self.metrics: dict[str, Any] = {"policy": policy.to_dict(), "policy_fingerprint": policy.fingerprint(),
                                        "speed_metric": policy.speed_metric, "quality": {}, "timing": {}}

    def gate_deltas(self, name: str, deltas: dict[str, float], limit: float | None, fmt: str, unit: str = "") -> None:
        """deltas: id -> change where larger is worse. Gate the mean or each, per policy.aggregate."""
        if not deltas:
            return
        unusable = sorted(rid for rid, d in deltas.items() if finite(d) is None)
        if unusable:  # a change that overflowed is no evidence: never crossed, never passed
            if limit is not None:
                self.missing.append(f"{name} not a finite number for {', '.join(unusable[:5])} (missing evidence)")
            return
        worst = max(deltas, key=lambda k: deltas[k])
        mean = _mean(list(deltas.values()))
        if mean is None:
            if limit is not None:
                self.missing.append(f"{name}: the mean is not a finite number (missing evidence)")
            return
        self.metrics["quality"][name].update(change_mean=mean, worst_id=worst, worst_change=deltas[worst])
        if limit is None:
            return
        if self.policy.aggregate == "each":
            for rid, d in sorted(deltas.items()):
                if d > limit:
                    self.crossed.append(f"{name} {fmt.format(d)}{unit} > {limit:g}{unit} ({rid})")
        elif mean > limit:
            self.crossed.append(f"{name} {fmt.format(mean)}{unit} > {limit:g}{unit} "
                                f"(mean of {len(deltas)}; worst {worst} {fmt.format(deltas[worst])}{unit})")


def assess(baseline_dir: str | Path, candidate_dir: str | Path, policy: Policy | None, scores: Scores | None = None) -> Verdict:
    base, cand = load_run(baseline_dir), load_run(candidate_dir)
    if base.problem:
        return Verdict(INCONCLUSIVE, [f"no baseline: {base.problem}"])
    if cand.problem:
        return Verdict(INCONCLUSIVE, [f"no candidate: {cand.problem}"])
    if policy is None:
        saved = base.saved_policy()
        if saved is None:
            return Verdict(INCONCLUSIVE, ["no frozen policy: none given and none saved with the baseline run"])
        policy = Policy.from_mapping(saved, f"{base.path}/{SUMMARY}: policy")
    judge = _Judge(policy)
    _judge_bindings(judge, base, cand, scores)
    quality, durations, snrs = _judge_ids(judge, base, cand, scores)
    _judge_quality(judge, quality, durations)
    _judge_snr(judge, snrs)
    speedup = _judge_timing(judge, base, cand)
    if judge.missing:
        return Verdict(INCONCLUSIVE, judge.missing, judge.metrics)
    if judge.crossed:
        return Verdict(FAIL, judge.crossed, judge.metrics)
    return Verdict(PASS, [], judge.metrics, speedup)


def _judge_bindings(judge: _Judge, base: Run, cand: Run, scores: Scores | None) -> None:
    """Both runs saved under the frozen policy; scores from the frozen scorer, present when gated."""
    policy = judge.policy
    for label, run in (("baseline", base), ("candidate", cand)):
        saved = run.saved_policy()
        if saved is not None:
            fp = Policy.from_mapping(saved, f"{run.path}/{SUMMARY}: policy").fingerprint()
            if fp != policy.fingerprint():
                judge.missing.append(f"policy fingerprint mismatch: {label} run saved {fp[:12]}, judged under {policy.fingerprint()[:12]}")

    translation = list(gated(policy, CORPUS))
    if translation:  # run dirs hold speech and the request's own text, no reference translations
        judge.missing.append(f"{', '.join(translation)}: a service run holds no reference translations, so no "
                             "BLEU/chrF (translation thresholds are judged on s2st_benchmark cases)")
    if scores is not None and policy.scorer_id is not None and scores.scorer_id != policy.scorer_id:
        judge.missing.append(f"scorer identity {scores.scorer_id!r} is not the frozen {policy.scorer_id!r}")
    if needs_scores(policy) and scores is None:
        judge.missing.append(f"no quality scores given, and the policy gates {', '.join(gated(policy, UTTERANCE))}")
    judge.metrics["scorer_id"] = scores.scorer_id if scores is not None else None


def _judge_ids(judge: _Judge, base: Run, cand: Run, scores: Scores | None
               ) -> tuple[dict, dict[str, float], dict[str, float | None]]:
    """Every id either side recorded -> (quality: metric -> id -> side -> value, duration change % by id,
    PCM SNR of candidate vs baseline by id when the policy gates it)."""
    sides = {"baseline": base, "candidate": cand}
    ids = sorted(set(base.records) | set(cand.records))
    judge.metrics["ids"] = len(ids)
    wav_cache: dict = {}
    durations: dict[str, float] = {}
    snrs: dict[str, float | None] = {}
    quality: dict[str, dict[str, dict[str, float]]] = {m.name: {} for m in scored_metrics(UTTERANCE)}
    for rid in ids:
        usable = True
        facts = {}
        for side in SIDES:
            wav, ok = _judge_side(judge, sides[side], side, rid, scores, wav_cache, quality)
            usable = usable and ok
            if wav is not None:
                facts[side] = wav
        if usable and len(facts) == 2:
            if facts["baseline"][1] > 0:
                durations[rid] = finite((facts["candidate"][1] - facts["baseline"][1]) / facts["baseline"][1] * 100.0)
            elif judge.policy.max_duration_change_pct is not None:  # no change % from 0 s: unavailable, not 0
                judge.missing.append(f"duration change unavailable for {rid}: the baseline WAV is empty")
            if judge.policy.min_snr_db is not None:
                snrs[rid] = pcm_snr_db(base.wav(rid), cand.wav(rid))
    return quality, durations, snrs


def _judge_side(judge: _Judge, run: Run, side: str, rid: str, scores: Scores | None, wav_cache: dict,
                quality: dict) -> tuple[tuple[str, float] | None, bool]:
    """One id on one side: record, WAV, hash binding, score -> (WAV facts, usable)."""
    rec = run.records.get(rid)
    if rec is None:
        judge.missing.append(f"request record {rid} missing from the {side} run")
        return None, False
    if rec.get("status") != "ok":
        msg = f"{side} request {rid} failed: {rec.get('error') or rec.get('status')}"
        (judge.crossed if side == "candidate" else judge.missing).append(msg)
        return None, False
    wav = _wav_facts(run, rid, wav_cache)
    if wav is None or isinstance(wav, str):
        judge.missing.append(f"{side} WAV for {rid} {wav or 'missing'} ({show(str(run.wav(rid)))})")
        return None, False
    if rec.get("pcm_sha256") and rec["pcm_sha256"] != wav[0]:
        judge.missing.append(f"{side} WAV for {rid} does not match its request record's pcm_sha256")
        return None, False
    if scores is None:
        return wav, True
    score = scores.side(side).get(rid)
    if score is None:
        judge.missing.append(f"no {side} score for {rid}")
        return wav, False
    if score.pcm_sha256 != wav[0]:
        judge.missing.append(f"{side} score for {rid} is bound to pcm_sha256 {score.pcm_sha256[:12]}, "
                             f"the WAV is {wav[0][:12]}")
        return wav, False
    for metric in scored_metrics(UTTERANCE):
        name = metric.name
        value = score.values.get(name)
        if value is None:
            if gated(judge.policy, UTTERANCE).keys() & metric.thresholds.keys():
                judge.missing.append(f"{name} unavailable for {side} {rid}: {score.reason(name) or 'no reason given'}")
        else:
            quality[name].setdefault(rid, {})[side] = value
    return wav, True


def _judge_quality(judge: _Judge, quality: dict, durations: dict[str, float]) -> None:
    policy = judge.policy
    for metric in scored_metrics(UTTERANCE):
        pairs = {rid: v for rid, v in quality[metric.name].items() if len(v) == 2}
        judge.metrics["quality"][metric.change_label] = {
            "baseline_mean": _mean([v["baseline"] for v in pairs.values()]) if pairs else None,
            "candidate_mean": _mean([v["candidate"] for v in pairs.values()]) if pairs else None,
            "n": len(pairs),
        }
        deltas = {rid: metric.worse_by(v["baseline"], v["candidate"]) for rid, v in pairs.items()}
        worse = [getattr(policy, k) for k, rule in metric.thresholds.items() if rule == WORSE]
        judge.gate_deltas(metric.change_label, deltas, next((w for w in worse if w is not None), None), metric.fmt)
        for key, rule in metric.thresholds.items():
            if rule == FLOOR and getattr(policy, key) is not None:
                _judge_floor(judge, metric, key, {rid: v["candidate"] for rid, v in quality[metric.name].items()
                                                  if "candidate" in v})
    judge.metrics["quality"]["duration change"] = {"n": len(durations),
                                                   "signed_mean_pct": _mean(list(durations.values())) if durations else None}  # None: not finite
    judge.gate_deltas("duration change", {k: abs(v) if v is not None else None for k, v in durations.items()},
                      policy.max_duration_change_pct,
                      "{:.1f}", "%")


def _judge_floor(judge: _Judge, metric: Any, key: str, values: dict[str, float]) -> None:
    """A floor on the candidate's own per-utterance values (mean, or each per policy.aggregate)."""
    limit = getattr(judge.policy, key)
    if not values:
        judge.missing.append(f"{key}: no candidate {metric.name} scores")
        return
    below = (lambda v: v < limit) if metric.higher_is_better else (lambda v: v > limit)
    sign = "<" if metric.higher_is_better else ">"
    if judge.policy.aggregate == "each":
        for rid, v in sorted(values.items()):
            if below(v):
                judge.crossed.append(f"{metric.name} {metric.fmt.format(v)} {sign} {limit:g} ({key}; {rid})")
        return
    mean = _mean(list(values.values()))
    if mean is None:
        judge.missing.append(f"{key}: the mean {metric.name} is not a finite number (missing evidence)")
    elif below(mean):
        judge.crossed.append(f"{metric.name} {metric.fmt.format(mean)} {sign} {limit:g} ({key}; mean of {len(values)})")


SNR_CAP_DB = 200.0  # bit-equal PCM: no error energy; reported as this cap, not as infinity


def snr_db(baseline: Any, candidate: Any) -> float | None:
    """10 log10(sum b^2 / sum (c - b)^2) over int16 samples, the shorter one zero-padded (missing or extra
    samples count as error); SNR_CAP_DB when equal; None when the baseline is silent (undefined)."""
    import numpy as np

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


def _judge_snr(judge: _Judge, snrs: dict[str, float | None]) -> None:
    limit = judge.policy.min_snr_db
    if limit is None:
        return
    for rid, value in sorted(snrs.items()):
        if value is None:
            judge.missing.append(f"pcm snr unavailable for {rid}: the baseline WAV is silent")
    values = {rid: v for rid, v in snrs.items() if v is not None}
    entry: dict[str, Any] = {"n": len(values), "mean_db": _mean(list(values.values())) if values else None}
    judge.metrics["quality"]["pcm snr vs baseline"] = entry
    if not values:
        return
    worst = min(values, key=lambda k: values[k])
    entry.update(worst_id=worst, worst_db=values[worst])
    if judge.policy.aggregate == "each":
        for rid, v in sorted(values.items()):
            if v < limit:
                judge.crossed.append(f"pcm snr vs baseline {v:.1f} dB < {limit:g} dB ({rid})")
    elif entry["mean_db"] < limit:
        judge.crossed.append(f"pcm snr vs baseline {entry['mean_db']:.1f} dB < {limit:g} dB "
                             f"(mean of {len(values)}; worst {worst} {values[worst]:.1f} dB)")


def _judge_timing(judge: _Judge, base: Run, cand: Run) -> dict[str, float] | None:
    """Per concurrency level, measured requests only (warm-ups excluded): mean TTFA and mean RTF."""
    policy = judge.policy
    needed = {policy.speed_metric}
    if policy.max_ttfa_regression_pct is not None:
        needed.add("ttfa_s")
    speedup: dict[str, float] = {}
    levels: dict[str, dict[str, dict[str, list[float]]]] = {}
    for side, run in (("baseline", base), ("candidate", cand)):
        for rid, rec in run.records.items():
            if rec.get("warmup") or rec.get("status") != "ok":
                continue
            level = level_name(rec.get("concurrency"))
            t = request_metrics(rec)
            for name in ("ttfa_s", "rtf"):
                slot = levels.setdefault(level, {}).setdefault(name, {"baseline": [], "candidate": []})
                if t[name] is None:
                    if name in needed:
                        judge.missing.append(f"{name} unavailable for {side} {rid} "
                                             "(timestamps missing or not finite numbers)")
                else:
                    slot[side].append(t[name])
    for level, by_name in sorted(levels.items()):
        out = judge.metrics["timing"].setdefault(level, {})
        for name, sides in by_name.items():
            b = _mean(sides["baseline"]) if sides["baseline"] else None  # None also when not finite
            c = _mean(sides["candidate"]) if sides["candidate"] else None
            out[name] = {"baseline": b, "candidate": c, "n": [len(sides["baseline"]), len(sides["candidate"])]}
            if name not in needed:
                continue
            if b is None or c is None or b <= 0 or c <= 0:
                judge.missing.append(f"{name} at {level}: no measured requests on the "
                                     f"{'baseline' if b is None or b <= 0 else 'candidate'} side")
                continue
            change_pct = finite((c - b) / b * 100.0)
            if change_pct is None or finite(b / c) is None:
                judge.missing.append(f"{name} at {level}: the change is not a finite number (missing evidence)")
                continue
            out[name]["change_pct"] = change_pct
            if name == "ttfa_s" and policy.max_ttfa_regression_pct is not None and change_pct > policy.max_ttfa_regression_pct:
                judge.crossed.append(f"ttfa_s regression {change_pct:.1f}% > {policy.max_ttfa_regression_pct:g}% ({level})")
            if name == policy.speed_metric:
                speedup[level] = b / c
                improvement = -change_pct
                if policy.min_improvement_pct is not None and improvement < policy.min_improvement_pct:
                    judge.crossed.append(f"{name} improvement {improvement:.1f}% < {policy.min_improvement_pct:g}% ({level})")
    if not speedup and not any("unavailable" in m or " at c" in m for m in judge.missing):
        judge.missing.append(f"{policy.speed_metric}: no measured (non-warm-up) requests to compare")
    return speedup or None


__all__ = ["Verdict", "assess", "PASS", "FAIL", "INCONCLUSIVE", "EXIT_CODES"]
