"""The scored quality metrics: one table that the policy, score files, scorers, the gate and the verdict read.

A scored metric is a number an independent scorer gives the output (an ASR's error rate, a speaker
verifier's cosine, sacrebleu's BLEU of the translations), never something measured on a clock. Each row says

* ``name``: the score's field: a score file's key (``per="utterance"``: one value per request's audio,
  bound to its PCM hash, needing a frozen ``scorer_id``) or a benchmark row's metric (``per="corpus"``:
  one value for the case's translations, against its reference translations);
* ``thresholds``: the policy keys that gate it, each with its rule: ``WORSE`` (the most the candidate may get
  worse than the baseline: an increase for lower-is-better, a drop for higher-is-better) or ``FLOOR`` (the
  candidate's own value may not be below it);
* ``higher_is_better``: the direction;
* ``backend``: which scorer produces it (``scorers.BACKENDS`` for per-utterance metrics);
* ``upper``: the top of the metric's scale (sacrebleu: 100), past which a threshold is refused;
* ``later``: added after policies were first saved: left out of a policy's dict (and fingerprint) while
  unset, so policies saved before it keep theirs.

Adding a scorer (e.g. UTMOS, a per-utterance MOS predictor): a row here and its backend in scorers.py.
The Policy fields, the score file's keys, the verdict's deltas, the ``s2st_gate`` marker's signature
and help, and --s2st-quality's help all follow from this table. Importing it loads nothing.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

WORSE = "worse"  # the candidate may be at most this much worse than the baseline
FLOOR = "floor"  # the candidate's own value may not be below this
UTTERANCE, CORPUS = "utterance", "corpus"


@dataclass(frozen=True)
class ScoredMetric:
    name: str
    thresholds: Mapping[str, str]
    higher_is_better: bool
    backend: str
    per: str = UTTERANCE
    upper: float | None = None
    later: bool = True
    fmt: str = "{:.3f}"
    help: str = ""
    units: str = ""  # what a threshold is in, for the marker's help

    @property
    def change_label(self) -> str:
        """How a verdict names the candidate getting worse: "error_rate increase", "bleu drop"."""
        return f"{self.name} {'drop' if self.higher_is_better else 'increase'}"

    def worse_by(self, baseline: float, candidate: float) -> float:
        """How much worse the candidate is (negative: better)."""
        return (baseline - candidate if self.higher_is_better else candidate - baseline) + 0.0  # +0.0: no "-0"


SCORED_METRICS: tuple[ScoredMetric, ...] = (
    ScoredMetric("error_rate", {"max_error_rate_increase": WORSE}, higher_is_better=False, backend="asr",
                 later=False, units="absolute WER (en) / CER (zh)",
                 help="ASR transcript of each response against its request's text (jiwer over pocketsphinx / a "
                      "local Whisper dir)"),
    ScoredMetric("speaker_similarity", {"max_speaker_drop": WORSE}, higher_is_better=True, backend="speaker",
                 later=False, units="cosine",
                 help="Resemblyzer cosine of each response against its voice's anchor recording"),
    ScoredMetric("bleu", {"min_bleu": FLOOR, "max_bleu_drop": WORSE}, higher_is_better=True, backend="sacrebleu",
                 per=CORPUS, upper=100.0, fmt="{:.2f}", units="a sacrebleu score",
                 help="corpus BLEU of the last text stage against the reference translations"),
    ScoredMetric("chrf", {"min_chrf": FLOOR, "max_chrf_drop": WORSE}, higher_is_better=True, backend="sacrebleu",
                 per=CORPUS, upper=100.0, fmt="{:.2f}", units="a sacrebleu score",
                 help="corpus chrF of the last text stage against the reference translations"),
    ScoredMetric("asr_bleu", {"min_asr_bleu": FLOOR, "max_asr_bleu_drop": WORSE}, higher_is_better=True,
                 backend="asr+sacrebleu", per=CORPUS, upper=100.0, fmt="{:.2f}", units="a sacrebleu score",
                 help="corpus BLEU of the output speech's ASR transcripts against the reference translations "
                      "(fairseq's asr_bleu)"),
    ScoredMetric("asr_chrf", {"min_asr_chrf": FLOOR, "max_asr_chrf_drop": WORSE}, higher_is_better=True,
                 backend="asr+sacrebleu", per=CORPUS, upper=100.0, fmt="{:.2f}", units="a sacrebleu score",
                 help="corpus chrF of the output speech's ASR transcripts against the reference translations"),
)

BY_NAME: dict[str, ScoredMetric] = {m.name: m for m in SCORED_METRICS}
BY_KEY: dict[str, tuple[ScoredMetric, str]] = {k: (m, rule) for m in SCORED_METRICS for k, rule in m.thresholds.items()}


def metrics(per: str | None = None) -> tuple[ScoredMetric, ...]:
    return tuple(m for m in SCORED_METRICS if per is None or m.per == per)


def threshold_keys(per: str | None = None) -> tuple[str, ...]:
    """Every policy key of the scored metrics (of one kind), in table order."""
    return tuple(k for m in metrics(per) for k in m.thresholds)


def later_keys() -> tuple[str, ...]:
    return tuple(k for m in SCORED_METRICS if m.later for k in m.thresholds)


def gated(policy: Any, per: str | None = None) -> dict[str, float]:
    """The scored-metric thresholds a policy sets: key -> limit."""
    return {k: getattr(policy, k) for k in threshold_keys(per) if getattr(policy, k, None) is not None}


def needs_scores(policy: Any) -> bool:
    """Whether the policy gates a per-utterance score (so the gate must score, or be given, the audio)."""
    return bool(gated(policy, UTTERANCE))


def score_fields() -> tuple[str, ...]:
    """The keys every score-file entry carries (null when unavailable)."""
    return tuple(m.name for m in metrics(UTTERANCE))


__all__ = ["ScoredMetric", "SCORED_METRICS", "BY_NAME", "BY_KEY", "WORSE", "FLOOR", "UTTERANCE", "CORPUS",
           "metrics", "threshold_keys", "later_keys", "gated", "needs_scores", "score_fields"]
