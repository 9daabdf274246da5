"""What a run check of the verdict is given (``RunContext``) and what it writes (``Findings``); ``RunCheck``.

``s2st-assess`` (verdict.assess) runs every check of ``checks.RUN_CHECKS`` in order over one context and one
Findings. A reason a check appends to ``Findings.missing`` makes the verdict INCONCLUSIVE (evidence missing or
unbound), one in ``Findings.crossed`` FAIL (evidence complete, a threshold crossed); the verdict prints them in the
order the checks wrote them. ``Findings.metrics`` is the verdict's metrics JSON; ``Findings.speedup`` its speedup
(given on a PASS only).

The context holds the two runs, the policy and the scores; the per-request facts (every id, each WAV read once and
bound to its record, the scores by id, the ids with complete evidence both sides, the duration changes) are filled
by the "requests" check, so checks after it read them instead of reading the run dirs again.
Nothing here reads a clock or loads a model.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

from ..errors import S2STError
from ..inputs import finite, is_regular_file, show
from ..runs import Run
from .policy import Policy
from .scored import UTTERANCE
from .scored import metrics as scored_metrics
from .scorefile import Scores, pcm_digest, read_wav

# What a check reads (RunCheck.reads): the request records, the WAVs' facts (hash, seconds), the scores, the
# samples. PCM is the one that changes anything: the context then keeps each WAV's samples from its one read.
RECORDS, WAVS, SCORES, PCM = "records", "wavs", "scores", "pcm"
BASELINE, CANDIDATE = "baseline", "candidate"


def mean(values: list[float]) -> float | None:
    """The mean, or None when it is not a finite number (inputs.finite: 1e308 values overflow)."""
    return finite(math.fsum(values) / len(values)) if all(finite(v) is not None for v in values) else None


@dataclass(frozen=True)
class WavFacts:
    """One WAV as read once: the sha256 of its int16 samples, its seconds, the samples when a check reads PCM."""

    pcm_sha256: str
    seconds: float
    samples: Any = None


@dataclass
class RunContext:
    """The two runs and what every check shares, computed once per verdict."""

    base: Run
    cand: Run
    policy: Policy
    scores: Scores | None
    keep_pcm: bool = False  # some check reads PCM under this policy: keep the samples of the one read
    ids: list[str] = field(default_factory=list)  # every id either side recorded, sorted (warm-ups included)
    # side -> id -> the facts of its WAV, read and bound to its request record (the "requests" check)
    wavs: dict[str, dict[str, WavFacts]] = field(default_factory=lambda: {BASELINE: {}, CANDIDATE: {}})
    # scored metric -> id -> side -> value, from scores bound to the WAVs
    quality: dict[str, dict[str, dict[str, float]]] = field(
        default_factory=lambda: {m.name: {} for m in scored_metrics(UTTERANCE)})
    paired: list[str] = field(default_factory=list)  # ids whose evidence is complete on both sides, sorted
    durations: dict[str, float | None] = field(default_factory=dict)  # id -> candidate vs baseline seconds, %
    _read: dict[Any, WavFacts | str | None] = field(default_factory=dict, repr=False)  # by path: read once

    def run(self, side: str) -> Run:
        return self.base if side == BASELINE else self.cand

    def wav_facts(self, side: str, rid: str) -> WavFacts | str | None:
        """The id's WAV on ``side``: its facts, None when there is no file, a reason when it is unreadable."""
        wav = self.run(side).wav(rid)
        if wav not in self._read:
            if not is_regular_file(wav):  # a FIFO or device named like a WAV is no WAV (and could block a read)
                self._read[wav] = None
            else:
                try:  # one bounded read (scorefile.read_wav): the digest and the duration of the same bytes
                    data, rate = read_wav(wav, dtype="int16")
                    self._read[wav] = WavFacts(pcm_digest(data), len(data) / rate, data if self.keep_pcm else None)
                except S2STError as exc:  # a corrupt WAV is no evidence; the finding names its path once
                    self._read[wav] = f"unreadable ({str(exc).removeprefix(f'{show(os.fspath(wav))}: ')})"
        return self._read[wav]

    def pcm(self, side: str, rid: str) -> Any:
        """The int16 samples of the id's WAV on ``side``: kept from its one read, else read now (bounded)."""
        facts = self._read.get(self.run(side).wav(rid))
        if isinstance(facts, WavFacts) and facts.samples is not None:
            return facts.samples
        return read_wav(self.run(side).wav(rid), dtype="int16")[0]


class Findings:
    """What the checks write: reasons (``missing``: INCONCLUSIVE, ``crossed``: FAIL), metrics, the speedup."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.missing: list[str] = []
        self.crossed: list[str] = []
        self.metrics: dict[str, Any] = {"policy": policy.to_dict(), "policy_fingerprint": policy.fingerprint(),
                                        "speed_metric": policy.speed_metric, "quality": {}, "timing": {}}
        self.speedup: dict[str, float] | None = None  # "c<concurrency>" -> baseline mean / candidate mean

    def gate_deltas(self, name: str, deltas: dict[str, float], limit: float | None, fmt: str, unit: str = "") -> None:
        """deltas: id -> change where larger is worse, into metrics["quality"][name] (already there).
        Gate the mean or each, per policy.aggregate."""
        if not deltas:
            return
        unusable = sorted(rid for rid, d in deltas.items() if finite(d) is None)
        if unusable:  # a change that overflowed is no evidence: never crossed, never passed
            if limit is not None:
                self.missing.append(f"{name} not a finite number for {', '.join(unusable[:5])} (missing evidence)")
            return
        worst = max(deltas, key=lambda k: deltas[k])
        avg = mean(list(deltas.values()))
        if avg is None:
            if limit is not None:
                self.missing.append(f"{name}: the mean is not a finite number (missing evidence)")
            return
        self.metrics["quality"][name].update(change_mean=avg, worst_id=worst, worst_change=deltas[worst])
        if limit is None:
            return
        if self.policy.aggregate == "each":
            for rid, d in sorted(deltas.items()):
                if d > limit:
                    self.crossed.append(f"{name} {fmt.format(d)}{unit} > {limit:g}{unit} ({rid})")
        elif avg > limit:
            self.crossed.append(f"{name} {fmt.format(avg)}{unit} > {limit:g}{unit} "
                                f"(mean of {len(deltas)}; worst {worst} {fmt.format(deltas[worst])}{unit})")


class RunCheck:
    """One check of the verdict over a baseline and a candidate run dir (an entry of ``checks.RUN_CHECKS``).

    ``name``: unique in the table. ``reads(policy)``: what it reads under this policy (RECORDS, WAVS, SCORES, PCM;
    PCM keeps the samples of each WAV's one read for it). ``judge(context, findings)``: appends its reasons to
    ``findings.missing`` / ``findings.crossed`` and its numbers to ``findings.metrics``; it raises only S2STError
    (one line). A check after "requests" reads the per-request facts from the context."""

    name: str = ""

    def reads(self, policy: Policy) -> frozenset[str]:
        return frozenset({RECORDS})

    def judge(self, context: RunContext, findings: Findings) -> None:
        raise NotImplementedError


__all__ = ["RunCheck", "RunContext", "Findings", "WavFacts", "mean", "RECORDS", "WAVS", "SCORES", "PCM",
           "BASELINE", "CANDIDATE"]
