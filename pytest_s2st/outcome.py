"""One test's verdict (pytest-free): a table of gates, each what one kind of evidence says, merged worst-first.

The plugin gathers a test's facts (its markers' keywords, what it measured, the session's compare limits) into
an ItemFacts; each entry of GATES turns them into verdicts (none when it has nothing to judge), and merge()
keeps the worst: FAIL > INCONCLUSIVE > PASS, the reasons of every verdict that did not pass, in GATES order.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from .budget import FAIL, INCONCLUSIVE, PASS, Verdict, check_budget, parse_budget, service_lookup
from .judging import ab_limits, unmeasured_limits
from .rows import SavedRow
from .service.bench import evidence_reasons, gate_verdict


@dataclass
class ItemFacts:
    """What one test brings to its verdict."""

    nodeid: str
    budgets: list[Mapping[str, Any]] = field(default_factory=list)  # each s2st_budget marker's keywords
    gate: Mapping[str, Any] | None = None  # the s2st_gate marker's keywords; None: no marker
    measurement: Any = None                # s2st_benchmark's Measurement
    service: Mapping[str, Any] | None = None  # s2st_load's level data
    compare_fail: Sequence[Any] = ()       # --s2st-compare-fail limits
    compare_saved: bool = False            # --benchmark-compare loaded a saved run


def budget_gate(facts: ItemFacts) -> list[Verdict]:
    """s2st_budget limits against what the test measured; a budget over nothing measured is INCONCLUSIVE."""
    measurement, service = facts.measurement, facts.service
    verdicts = []
    for kwargs in facts.budgets:
        limits, stage = parse_budget(kwargs, facts.nodeid)
        if measurement is not None:
            verdicts.append(check_budget(measurement.metric, limits, stage, [s.name for s in measurement.stages]))
        elif service is not None and service.get("level_part"):
            continue  # one part of a level (--s2st-level-parts): budgets judge the merged level, on its merger
        elif service is not None:
            verdicts.append(check_budget(service_lookup(service), limits))
        else:
            verdicts.append(Verdict(INCONCLUSIVE, ["s2st_budget set but the test measured nothing "
                                                   "(call s2st_benchmark or s2st_load)"]))
    return verdicts


def translation_gate(facts: ItemFacts) -> list[Verdict]:
    """The translation thresholds of the frozen policy (row_scores.py); an s2st_gate marker on an
    s2st_benchmark test that judged nothing is INCONCLUSIVE, never a silent pass."""
    measurement = facts.measurement
    if measurement is not None and getattr(measurement, "gate", None) is not None:
        return [measurement.gate]
    if measurement is not None and facts.service is None and facts.gate is not None:
        return [Verdict(INCONCLUSIVE, [unjudged_gate(facts.gate, measurement)])]
    return []


def unjudged_gate(gate: Mapping[str, Any], measurement: Any) -> str:
    """Why an s2st_gate marker on an s2st_benchmark test judged nothing."""
    keys = ", ".join(f"{k}={v!r}" for k, v in gate.items())
    if "config" not in measurement.info and not measurement.quality:  # s2st_benchmark(fn, inputs): no references
        why = ("s2st_benchmark(model, inputs) of your own callable has no references to score: pass "
               "references=[...], one reference translation per input (docs/writing.md), or benchmark a config "
               "case with general.references (docs/quality.md)")
    else:
        why = "no translation score it names was measured for this case (its other keys judge service benchmarks)"
    return f"s2st_gate({keys}) not judged: {why}"


def service_gate(facts: ItemFacts) -> list[Verdict]:
    """A service level's evidence (failed requests, a run cut short, a level split by --s2st-level-parts not
    driven as asked) and its quality gate's saved verdict."""
    service = facts.service
    if service is None:
        return []
    reasons = list(service.get("parts_reasons") or []) + (evidence_reasons(service) if "summary" in service else [])
    verdicts = [Verdict(INCONCLUSIVE, reasons) if reasons else Verdict(PASS)]
    gate = gate_verdict(service)
    return verdicts + ([gate] if gate is not None else [])


def ab_gate(facts: ItemFacts) -> list[Verdict]:
    """An in-process A/B under --s2st-compare-fail: FAIL past a limit, INCONCLUSIVE where one could not be
    checked; without limits the A/B is reported, not judged."""
    from .ab import mode_of, record_of  # lazy: heavy

    measurement = facts.measurement
    if measurement is None or measurement.baseline is None:
        return []
    missing = measurement.info.get("ab", {}).get("missing")
    if missing:  # a code-version A/B where a side measured nothing: never a pass
        return [Verdict(INCONCLUSIVE, [f"no A/B verdict: {missing}"])]
    if not facts.compare_fail:
        return []
    s2st = measurement.to_dict()
    record = record_of(s2st)
    against = mode_of(record).against if record is not None else "the baseline"
    crossed, unchecked = ab_limits(s2st, facts.compare_fail, against)
    return [Verdict(FAIL, crossed) if crossed else Verdict(PASS)] + (
        [Verdict(INCONCLUSIVE, unchecked)] if unchecked else [])


def unmeasured_gate(facts: ItemFacts) -> list[Verdict]:
    """--benchmark-compare with --s2st-compare-fail: a limit on a metric this run could not measure (instructions
    of a lambda, FLOPs turned off) is INCONCLUSIVE, one line per limit with the metric's reason, on this test --
    not a pass followed by "not checked" in the session's regressions, which leave it out."""
    measurement = facts.measurement
    if measurement is None or measurement.baseline is not None or not facts.compare_fail or not facts.compare_saved:
        return []
    reasons = unmeasured_limits(SavedRow.from_dict(measurement.to_dict()), facts.compare_fail)
    return [Verdict(INCONCLUSIVE, reasons)] if reasons else []


Gate = Callable[[ItemFacts], list[Verdict]]
GATES: tuple[Gate, ...] = (budget_gate, translation_gate, service_gate, ab_gate, unmeasured_gate)


def item_verdict(facts: ItemFacts) -> Verdict | None:
    """Every gate's verdicts merged; None when no gate had anything to judge."""
    return merge([v for gate in GATES for v in gate(facts)])


def merge(verdicts: Sequence[Verdict]) -> Verdict | None:
    """The worst verdict (FAIL > INCONCLUSIVE > PASS) with the reasons of every one that did not pass."""
    if not verdicts:
        return None
    order = {FAIL: 0, INCONCLUSIVE: 1, PASS: 2}
    worst = min(verdicts, key=lambda v: order[v.status])
    reasons = [r for v in verdicts if v.status != PASS for r in v.reasons]
    # a speedup is reported only when everything passed
    speedup = next((v.speedup for v in verdicts if v.speedup), None) if worst.status == PASS else None
    return Verdict(worst.status, reasons, speedup=speedup)
