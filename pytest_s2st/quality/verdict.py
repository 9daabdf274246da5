"""Offline assessment of a candidate run against a baseline run under a frozen policy.

INCONCLUSIVE: evidence missing or unbound (record, WAV or score missing for an id either side
recorded, warm-ups included; a hash that does not bind score -> WAV -> record; another scorer;
a metric a threshold needs is unavailable; no baseline; policy fingerprint differs between runs).
FAIL: evidence complete and a frozen threshold crossed. PASS: otherwise; only then a speedup.
The checks are quality/checks.py's table, RUN_CHECKS, run in order (the order of the reasons).
Everything here reads finished files (through ``pytest_s2st.runs``): no model runs, no clock is read,
nothing is timed.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..inputs import finite
from ..runs import SUMMARY, load_run
from . import checks
from .checks import SNR_CAP_DB, pcm_snr_db, snr_db  # noqa: F401  (callers import them from here)
from .findings import PCM, Findings, RunContext
from .policy import Policy
from .scorefile import Scores

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
                lines.append(f"  {name}: mean |change| {_f(m.get('change_mean'))}%, "
                             f"signed {_f(m.get('signed_mean_pct'))}% "
                             f"(worst {m.get('worst_id')} {_f(m.get('worst_change'))}%)")
                continue
            lines.append(f"  {name}: baseline {_f(m.get('baseline_mean'))}, candidate {_f(m.get('candidate_mean'))}, "
                         f"change {_f(m.get('change_mean'))} (worst {m.get('worst_id')} {_f(m.get('worst_change'))})")
        for level, t in sorted(self.metrics.get("timing", {}).items()):
            for name, m in t.items():
                lines.append(f"  {level} {name}: baseline {_f(m.get('baseline'))}, candidate {_f(m.get('candidate'))}")
        if self.speedup is not None:
            metric = self.metrics.get("speed_metric")
            lines.append("  speedup (" + str(metric) + "): "
                         + ", ".join(f"{k} {v:.3f}x" for k, v in sorted(self.speedup.items())))
        return "\n".join(lines)


def _f(value: Any) -> str:
    value = finite(value)
    return "n/a" if value is None else f"{value:.4g}"


def assess(baseline_dir: str | Path, candidate_dir: str | Path, policy: Policy | None,
           scores: Scores | None = None) -> Verdict:
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
    run_checks = list(checks.RUN_CHECKS)  # the table (quality/checks.py), in order: the order of the reasons
    findings = Findings(policy)
    context = RunContext(base, cand, policy, scores, keep_pcm=any(PCM in c.reads(policy) for c in run_checks))
    for check in run_checks:
        check.judge(context, findings)
    if findings.missing:
        return Verdict(INCONCLUSIVE, findings.missing, findings.metrics)
    if findings.crossed:
        return Verdict(FAIL, findings.crossed, findings.metrics)
    return Verdict(PASS, [], findings.metrics, findings.speedup)


__all__ = ["Verdict", "assess", "PASS", "FAIL", "INCONCLUSIVE", "EXIT_CODES"]
