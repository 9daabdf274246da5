"""outcome.py without pytest sessions: each gate judges its own evidence, merge() keeps the worst verdict."""
from __future__ import annotations

from pytest_s2st.outcome import GATES, ItemFacts, item_verdict, merge
from pytest_s2st.measure.record import Metric
from pytest_s2st.quality.verdict import FAIL, INCONCLUSIVE, PASS, Verdict
from pytest_s2st.runner import Measurement, StageResult


def row(runtime: float | None) -> Measurement:
    metric = Metric(runtime, "timer") if runtime is not None else Metric.missing("timer", "not timed")
    return Measurement("case", "callable", [StageResult("stage1", {"runtime_s": metric})])


def test_nothing_to_judge_is_no_verdict():
    assert item_verdict(ItemFacts("t.py::test")) is None
    assert item_verdict(ItemFacts("t.py::test", measurement=row(1.0))) is None


def test_worst_first_reasons_in_gate_order():
    facts = ItemFacts("t.py::test", budgets=[{"runtime_s": 0.5}, {"flops": 1}], gate={"min_bleu": 10},
                      measurement=row(1.0))
    verdict = item_verdict(facts)
    assert verdict.status == FAIL
    assert verdict.reasons[0].startswith("runtime_s: measured 1 > budget 0.5")  # budgets first (GATES order)
    assert verdict.reasons[1].startswith("flops: no value to check against budget 1")
    assert verdict.reasons[2].startswith("s2st_gate(min_bleu=10) not judged: s2st_benchmark(model, inputs)")


def test_a_budget_over_nothing_measured_is_inconclusive():
    verdict = item_verdict(ItemFacts("t.py::test", budgets=[{"runtime_s": 1}]))
    assert verdict.status == INCONCLUSIVE and "measured nothing" in verdict.reasons[0]


def test_merge_keeps_a_speedup_only_when_everything_passed():
    fast = Verdict(PASS, [], speedup={"c1": 2.0})
    assert merge([fast, Verdict(PASS)]).speedup == {"c1": 2.0}
    assert merge([fast, Verdict(INCONCLUSIVE, ["why"])]).speedup is None
    assert [g.__name__ for g in GATES] == ["budget_gate", "translation_gate", "service_gate", "ab_gate",
                                           "unmeasured_gate"]
