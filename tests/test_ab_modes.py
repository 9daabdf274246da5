"""A/B modes (pytest_s2st/ab/): a mode registered through the public registry reaches the tables with its own
title and legend; the A/B record and the measurement come back from their dicts unchanged."""
from __future__ import annotations

import json

import pytest

from helpers import SLOW_FAST
from pytest_s2st.ab import MODES, ABMode, ABRecord, markdown_ab, mode_of, register, terminal_tables
from pytest_s2st.ab.record import IN_PROCESS, record_of
from pytest_s2st.measure.record import Metric
from pytest_s2st.measurement import Measurement, StageResult


class Lockstep(ABMode):
    """A third mode, as a new module would define it: two worker processes in lockstep."""

    name = "lockstep (test)"
    legend = "ratio: the toy mode's legend, under its table"

    def title(self, record: ABRecord) -> str:
        return f"A/B of {record.details.get('workers')} workers in lockstep"


@pytest.fixture
def lockstep():
    mode = Lockstep()
    register(mode)
    yield mode
    MODES.pop(mode.name)


def _row(record: ABRecord, before: float = 0.001, after: float = 0.002) -> dict:
    return {"metrics": {"runtime_s": {"value": after, "method": "timer"}, "flops": {"value": 200.0, "method": "torch"}},
            "baseline": {"metrics": {"runtime_s": {"value": before, "method": "timer"},
                                     "flops": {"value": 100.0, "method": "torch"}}},
            "ab": record.to_dict()}


def _toy_record(**given) -> ABRecord:
    return ABRecord(2.0, 1.9, 2.1, "slower", 40, 4, 0.1, "toy method", timing="wall time", mode="lockstep (test)",
                    details={"workers": 2, **given})


def test_a_registered_mode_titles_its_own_table_and_prints_its_legend(lockstep):
    in_process = ABRecord(1.0, 0.99, 1.01, "same", 30, 1, 0.1, "paired", timing="wall time")
    tables = terminal_tables([("test_toy", _row(_toy_record())), ("test_plain", _row(in_process, 0.001, 0.001)),
                              ("test_no_ab", {"metrics": {}})])
    assert [title for title, _ in tables] == ["A/B of 2 workers in lockstep", "A/B in one process (baseline -> candidate)"]
    toy = tables[0][1]
    assert toy[-1] == lockstep.legend and not any("test_plain" in line for line in toy)
    assert any(line.startswith("test_toy") and "x2.000 [1.900, 2.100]" in line and "slower" in line for line in toy)
    assert any(line.startswith("ratio: median of the paired candidate/baseline round ratios") for line in tables[1][1])

    lines = markdown_ab([("test_toy", _row(_toy_record()), "FAIL")])
    assert lines[0] == "### s2st: A/B of 2 workers in lockstep" and lockstep.legend in lines
    assert "| test_toy | 1.000 ms | 2.000 ms | x2.000 [1.900, 2.100] | slower | **FAIL** | +100.0% |" in lines


def test_a_mode_renders_its_own_rows_when_it_overrides_render(lockstep, monkeypatch):
    monkeypatch.setattr(Lockstep, "render", lambda self, records, width=120: [f"{name}: own row" for name, _ in records])
    assert terminal_tables([("test_toy", _row(_toy_record()))]) == [
        ("A/B of 2 workers in lockstep", ["test_toy: own row", lockstep.legend])]


def test_rows_of_one_mode_under_different_titles_get_a_table_each(lockstep):
    tables = terminal_tables([("a", _row(_toy_record())), ("b", _row(_toy_record(workers=4))), ("c", _row(_toy_record()))])
    assert [title for title, _ in tables] == ["A/B of 2 workers in lockstep", "A/B of 4 workers in lockstep"]


def test_the_two_built_in_modes_and_a_record_of_no_known_mode():
    assert set(MODES) >= {IN_PROCESS, "code versions"}
    assert all(isinstance(mode, ABMode) and name == mode.name for name, mode in MODES.items())
    versions = ABRecord.from_dict({"mode": "code versions", "base": "origin/main", "ratio": None})
    assert MODES["code versions"].title(versions) == "A/B of code versions (base origin/main -> head)"
    assert MODES["code versions"].against == "the base" and MODES[IN_PROCESS].against == "the baseline"
    assert mode_of(ABRecord.from_dict({"mode": "gone"})) is MODES[IN_PROCESS]  # as before modes had names
    assert record_of({"ab": "not a record"}) is None and record_of({}) is None


IN_PROCESS_KEYS = ["ratio", "low", "high", "word", "pairs", "calls_per_round", "round_target_s", "timing", "method"]


@pytest.mark.parametrize("saved", [
    # the in-process A/B's record: no "mode", its keys in the order it always wrote them
    {"ratio": 1.05, "low": 1.01, "high": 1.09, "word": "slower", "pairs": 30, "calls_per_round": 8,
     "round_target_s": 0.1, "timing": "own time (wall less run-queue wait)", "method": "paired"},
    # the code-version A/B's, with a verdict and without one
    {"mode": "code versions", "base": "main", "base_sha": "a" * 40, "head_sha": "b" * 40, "worker_pairs": 2,
     "calls_per_round": 3, "round_target_s": 0.1, "rounds_s": [[[1.0], [1.1]]], "rounds_own_s": None, "method": "m",
     "ratio": 1.1, "low": 1.0, "high": 1.2, "word": "same", "pairs": 2, "timing": "wall time"},
    {"mode": "code versions", "base": "main", "base_sha": None, "head_sha": None, "worker_pairs": 0,
     "calls_per_round": None, "round_target_s": 0.1, "rounds_s": [], "rounds_own_s": None, "method": "m",
     "ratio": None, "low": None, "high": None, "word": "no verdict (a side is missing)", "pairs": 0,
     "missing": "base: exited (1) before it connected"},
])
def test_an_ab_record_comes_back_from_its_dict(saved):
    record = ABRecord.from_dict(saved)
    assert record.to_dict() == saved and ABRecord.from_dict(record.to_dict()) == record
    assert json.loads(json.dumps(record.to_dict())) == saved
    if "mode" not in saved:
        assert record.mode == IN_PROCESS and list(record.to_dict()) == IN_PROCESS_KEYS


def test_a_measurement_with_its_ab_record_comes_back_from_its_dict():
    m = Measurement("c", "callable", [StageResult("a", {"runtime_s": Metric(0.002, "timer", details={"rounds_s": [0.002]})}),
                                      StageResult("b", {"runtime_s": Metric(0.001, "timer")})])
    m.baseline = Measurement("c baseline", "callable", [StageResult("a", {"runtime_s": Metric(0.001, "timer")})])
    m.info["ab"] = _toy_record().to_dict()
    back = Measurement.from_dict(json.loads(json.dumps(m.to_dict())))
    assert back.to_dict() == m.to_dict() and record_of(back.to_dict()) == _toy_record()
    stage = m.stages[0]
    assert StageResult.from_dict(stage.to_dict()) == stage


CHOSEN_MODE = '''
import time

from pytest_s2st.ab import ABMode, register
from pytest_s2st.ab.inprocess import PairedRounds, ab_record


class Reversed(PairedRounds):
    """The in-process rounds, recorded under this mode's name."""

    def record(self, round_s):
        record = ab_record(self, round_s)
        record.mode = "chosen (test)"
        return record


class Chosen(ABMode):
    name = "chosen (test)"
    legend = "ratio: the chosen mode's legend"

    def title(self, record):
        return "A/B the test chose"

    def pair(self, candidate, baseline, context):
        assert len(context.samples) == 2 and context.settings.ab_mode == self.name
        return Reversed(candidate, baseline)


register(Chosen())
'''

CHOOSING_TEST = SLOW_FAST + '''

def test_chosen(s2st_benchmark):
    s2st_benchmark(slow, [1, 2], baseline=fast, ab_mode="chosen (test)")
'''


def test_a_test_chooses_a_registered_mode_and_the_runner_drives_its_rounds(pytester):
    """A new mode is its module and a registry entry: the runner asks the mode for its paired rounds
    (ABMode.pair), s2st_benchmark(..., ab_mode=NAME) chooses it, its table carries its title and legend."""
    pytester.makeconftest(CHOSEN_MODE)
    pytester.makepyfile(test_choose=CHOOSING_TEST)
    result = pytester.runpytest("-p", "no:cacheprovider", "--s2st-min-rounds=6", "--s2st-ab-round-s=0.01",
                                "--benchmark-json=out.json")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*s2st: A/B the test chose*", "test_chosen*slower*", "ratio: the chosen mode's legend"])
    assert "A/B in one process" not in result.stdout.str()
    ab = json.loads((pytester.path / "out.json").read_text())["benchmarks"][0]["extra_info"]["s2st"]["ab"]
    assert ab["mode"] == "chosen (test)" and ab["pairs"] >= 6 and 1.3 < ab["ratio"] < 3.0


def test_an_unknown_or_session_wide_mode_is_one_line(pytester):
    pytester.makepyfile(test_choose=CHOOSING_TEST.replace('"chosen (test)"', '"code versions"') + '''

def test_no_baseline(s2st_benchmark):
    s2st_benchmark(fast, [1], ab_mode="in one process")
''')
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines([
        "*s2st_benchmark(..., ab_mode='code versions'): not an A/B mode chosen per test; known: 'in one process'*",
        "*test_no_baseline: s2st_benchmark(..., ab_mode='in one process') times an A/B: it needs baseline=*"])
    assert "Traceback" not in result.stdout.str()
