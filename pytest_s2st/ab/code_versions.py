"""The code-version A/B (``--s2st-ab-base REF``): the base's benchmarks against the head's, in warm worker processes
taking turns round by round (versions/; its pytest glue plugin_versions.py); ``ab_record`` folds what the workers timed
into the paired change."""
from __future__ import annotations

from typing import Protocol, Sequence

from .estimators import DEFAULT, Estimator
from .mode import ABMode
from .record import ABRecord
from .stopping import held


class Compared(Protocol):
    """What the record reads of the driver's result (versions.driver.Compared, which the driver imports this
    package to make: a Protocol here keeps the arrow one way)."""
    sets: Sequence[tuple[Sequence[float], Sequence[float]]]  # each worker pair's (base rounds, head rounds)
    own_sets: Sequence[tuple[Sequence[float], Sequence[float]]] | None  # the same less each round's wait
    stopped: str | None
    word_confidence: float | None  # the looks' level when the rounds stopped early: the word must hold there too
    missing: str | None
    calls: int | None


class CodeVersions(ABMode):
    name = "code versions"
    against = "the base"
    legend = ("ratio: median of the paired head/base round ratios (a warm worker process per side, taking turns "
              "round by round, ABBA; each round less its wait for a CPU) [its 95% interval; with several worker "
              "pairs, widened to hold each pair's median]; slower/faster "
              "when the interval excludes 1 and the ratio is past 2%; other columns: the head (its change from "
              "the base), or, stacked, each side and the change")

    def title(self, record: ABRecord) -> str:
        return f"A/B of code versions (base {record.details.get('base')} -> head)"


MODE = CodeVersions()


def ab_record(compared: "Compared", base: str, base_sha: str | None, head_sha: str | None, round_s: float,
              estimator: Estimator = DEFAULT) -> ABRecord:
    """The paired change over every worker pair's rounds (``compared``: versions.driver.Compared) of ``base`` (the
    ref as given) against the head, by ``estimator`` (--s2st-ab-estimator); no verdict when a side is missing."""
    details = {"base": base, "base_sha": base_sha, "head_sha": head_sha, "worker_pairs": len(compared.sets),
               "rounds_s": [list(s) for s in compared.sets],
               "rounds_own_s": [list(s) for s in compared.own_sets] if compared.own_sets else None,
               "stopped": compared.stopped or "every round run", "word_confidence": compared.word_confidence}
    several = len(compared.sets) > 1
    method = (f"{estimator.statistic} of paired head/base round ratios (each round's own time: wall less the time its "
              "thread waited for a CPU), base and head in warm worker processes (each importing its own tree, all on "
              "one CPU while timing) taking turns round by round, ABBA"
              f"{', worker pairs interleaved' if several else ''}; "
              f"95% {estimator.sets_interval if several else estimator.interval}; the rounds stop early once that "
              "interval at 1 - 5 %/K for K looks (Bonferroni) holds neither 1 +- 2 % nor a percent runtime limit, "
              "and a change past one once its 95% interval is within 2% of its ratio; after an early stop the word "
              "must hold at the looks' level too (ab/stopping.py)")
    if compared.missing is not None:
        return ABRecord(None, None, None, "no verdict (a side is missing)", 0, compared.calls, round_s, method,
                        missing=compared.missing, mode=MODE.name, estimator=estimator.name, details=details)
    # each round less the time its thread waited for a CPU (a neighbour's share of a loaded runner), where every
    # round has that reading (Linux): at load 8 the wall-time ratios of one pair's rounds spread x0.70-x1.62, their
    # own times x0.87-x1.18 (docs/records/measurement.md)
    sets = compared.own_sets or compared.sets
    change = estimator.pair_sets(sets)
    if compared.word_confidence is not None:
        change = held(change, estimator.pair_sets(sets, compared.word_confidence))
    return ABRecord(change.ratio, change.low, change.high, change.word, change.pairs, compared.calls, round_s, method,
                    timing="own time (wall less run-queue wait)" if compared.own_sets else "wall time",
                    mode=MODE.name, estimator=estimator.name, details=details)
