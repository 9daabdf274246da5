"""A/B estimators (pytest_s2st/ab/estimators.py): the default's numbers are the old median's; an estimator
registered in the test (Hodges-Lehmann) is chosen per test with ``ab_estimator=`` and for the session with
--s2st-ab-estimator, in one process and by the code-version A/B's controller and early stop."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from helpers import BUSY_BENCH, BUSY_MODEL, SLOW_FAST
from helpers import git_repo as _repo
from pytest_s2st import ab
from pytest_s2st.ab import code_versions
from pytest_s2st.ab.estimators import DEFAULT, ESTIMATORS, Estimator, compare_pair_sets, compare_pairs
from pytest_s2st.ab.stopping import StoppingRule
from pytest_s2st.significance import SLOWER, TOO_FEW, Change

# an estimator as a conftest or plugin would define it: the Hodges-Lehmann estimate of the paired log-ratios
# (the median of their Walsh averages) and its interval from the signed-rank statistic's normal approximation
HODGES_LEHMANN = '''
import numpy as np

from pytest_s2st.ab import Estimator, register_estimator
from pytest_s2st.ab.estimators import logs_of
from pytest_s2st.significance import TOO_FEW, Change, word_of


class HodgesLehmann(Estimator):
    name = "hodges-lehmann"
    statistic = "Hodges-Lehmann estimate"
    interval = "signed-rank interval of the Walsh averages (normal approximation)"

    def pairs(self, baseline, candidate, confidence=0.95):
        logs = logs_of(baseline, candidate)
        if isinstance(logs, Change):
            return logs
        n = logs.size
        walsh = np.sort([(a + b) / 2 for i, a in enumerate(logs) for b in logs[i:]])
        ratio = float(np.exp(np.median(walsh)))
        z = {0.95: 1.959964}.get(confidence, 2.575829)  # 95 %, else at least 99 % (the early stop's looks)
        k = int(n * (n + 1) / 4 - z * (n * (n + 1) * (2 * n + 1) / 24) ** 0.5)
        if n < 6 or k < 0:
            return Change(ratio, word=TOO_FEW, pairs=n)
        low, high = float(np.exp(walsh[k])), float(np.exp(walsh[walsh.size - 1 - k]))
        return Change(ratio, low, high, word_of(ratio, low, high), pairs=n)


register_estimator(HodgesLehmann())
'''


@pytest.fixture
def registry():
    """ESTIMATORS as it was before the test (an in-process pytester session's conftest registers into it)."""
    saved = dict(ESTIMATORS)
    yield ESTIMATORS
    ESTIMATORS.clear()
    ESTIMATORS.update(saved)


@pytest.fixture
def hodges_lehmann(registry) -> Estimator:
    namespace: dict = {}
    exec(compile(HODGES_LEHMANN, "conftest.py", "exec"), namespace)  # noqa: S102 -- the conftest's text, as run
    return registry["hodges-lehmann"]


# --- the default: the median, its numbers those of the function it was (significance.compare_pairs) ----------------

BASE = [0.091713, 0.094736, 0.106025, 0.101643, 0.091883, 0.098663, 0.099581, 0.093195, 0.104692, 0.092273,
        0.097825, 0.100335]
CAND = [0.095783, 0.098207, 0.109089, 0.105931, 0.097363, 0.103125, 0.106468, 0.097482, 0.109977, 0.099739,
        0.103783, 0.104338]
OTHER = [0.091378, 0.09576, 0.110128, 0.101095, 0.091435, 0.100641, 0.097816, 0.092651, 0.10654, 0.093344,
         0.098004, 0.10168]
# (ratio, low, high, word, pairs) the old significance.compare_pairs / compare_pair_sets gave on these rounds
OLD = [
    (lambda: compare_pairs(BASE, CAND), (1.045612415835384, 1.0398963472367568, 1.0609046767186303, SLOWER, 12)),
    (lambda: compare_pairs(BASE, OTHER),
     (1.0063093765526971, 0.994608581013941, 1.0176517785504144, "no significant change", 12)),
    (lambda: compare_pairs(BASE, CAND, 0.99), (1.045612415835384, 1.0366386590103025, 1.0691597794760042, SLOWER, 12)),
    (lambda: compare_pairs(BASE[:5], CAND[:5]), (1.0421868697303307, None, None, TOO_FEW, 5)),
    (lambda: compare_pair_sets([(BASE, CAND), (BASE, OTHER)]),
     (1.0327615012847629, 1.0063093765526971, 1.045612415835384, SLOWER, 24)),
    (lambda: compare_pair_sets([(BASE, CAND), (BASE, CAND[::-1])], 0.99),
     (1.045612415835384, 1.0355891184061214, 1.0791076695417734, SLOWER, 24)),
]


@pytest.mark.parametrize("case", range(len(OLD)))
def test_the_default_gives_the_old_medians_numbers(case):
    compute, old = OLD[case]
    change = compute()
    close = lambda v: v if v is None else pytest.approx(v, rel=1e-12)  # noqa: E731
    assert (change.ratio, change.low, change.high, change.word, change.pairs) == tuple(map(close, old[:3])) + old[3:]


def test_the_default_is_the_median_and_one_registry_serves_both_modes():
    assert ab.ESTIMATORS is ESTIMATORS and ESTIMATORS["median"] is DEFAULT
    assert StoppingRule.for_limits(20).estimator is DEFAULT
    assert DEFAULT.pairs(BASE, CAND) == compare_pairs(BASE, CAND)
    assert DEFAULT.pairs(BASE, CAND[:-1] + [float("nan")]).ratio is None  # missing evidence: no ratio


def test_too_few_pairs_names_the_count_its_own_estimator_needs(hodges_lehmann):
    assert DEFAULT.pairs(BASE[:5], CAND[:5]).describe() == "x1.042, too few rounds (5 ABBA pairs, need 6)"
    # another estimator's minimum is its own: the median's 6 is not claimed for it
    assert hodges_lehmann.pairs(BASE[:3], CAND[:3]).describe() == "x1.037, too few rounds (3 ABBA pairs)"


# --- an estimator registered in the test -----------------------------------------------------------------------------

def test_a_registered_estimator_judges_the_pairs_of_both_modes_and_the_early_stop(hodges_lehmann):
    one = hodges_lehmann.pairs(BASE, CAND)
    assert isinstance(one, Change) and one.ratio != compare_pairs(BASE, CAND).ratio and one.word == SLOWER
    assert one.low < one.ratio < one.high and one.pairs == 12
    # several worker pairs: the base class pools them and widens to each pair's own estimate
    sets = hodges_lehmann.pair_sets([(BASE, CAND), (BASE, OTHER)])
    assert sets.low <= hodges_lehmann.pairs(BASE, OTHER).ratio and sets.high >= one.ratio
    # the code-version record: its ratio, its name saved, its phrases in the method
    compared = SimpleNamespace(sets=[(BASE, CAND), (BASE, OTHER)], own_sets=None, stopped=None, missing=None, calls=2,
                               word_confidence=None)
    record = code_versions.ab_record(compared, "main", "a", "b", 0.1, hodges_lehmann).to_dict()
    assert record["ratio"] == sets.ratio and record["estimator"] == "hodges-lehmann"
    assert record["method"].startswith("Hodges-Lehmann estimate of paired head/base round ratios")
    assert "95% signed-rank interval of the Walsh averages (normal approximation), widened to hold each worker " \
           "pair's own Hodges-Lehmann estimate" in record["method"]
    assert "estimator" not in code_versions.ab_record(compared, "main", "a", "b", 0.1).to_dict()  # the default's
    # the early stop looks with it, at its stricter confidence
    seen = []

    class Spy(type(hodges_lehmann)):
        def pair_sets(self, sets, confidence=0.95):
            seen.append(confidence)
            return super().pair_sets(sets, confidence)

    rule = StoppingRule.for_limits(20, (), Spy())
    rule.settled(rule.looks[0], [(BASE[:6], CAND[:6])])
    assert seen == [rule.confidence]


def test_its_rows_get_a_table_that_names_it():
    record = ab.ABRecord(1.2, 1.1, 1.3, SLOWER, 30, 1, 0.1, "hl", timing="wall time", estimator="nope")
    row = {"metrics": {"runtime_s": {"value": 0.0012}}, "baseline": {"metrics": {"runtime_s": {"value": 0.001}}},
           "ab": record.to_dict()}
    (title, lines), = ab.terminal_tables([("test_x", row)])
    assert title == "A/B in one process (baseline -> candidate), estimator nope"
    legend = " ".join(line.strip() for line in lines[2:])  # after the header and the row: wrapped
    assert legend.endswith("Estimator nope here, not the median: not registered in this session")
    assert ab.ABRecord.from_dict(record.to_dict()) == record


CHOOSING = SLOW_FAST + '''

def test_chosen(s2st_benchmark):
    s2st_benchmark(slow, [1, 2], baseline=fast, ab_estimator="hodges-lehmann")


def test_default(s2st_benchmark):
    s2st_benchmark(slow, [1, 2], baseline=fast)
'''


def _ab(pytester) -> dict:
    saved = json.loads((pytester.path / "out.json").read_text())["benchmarks"]
    return {b["name"]: b["extra_info"]["s2st"]["ab"] for b in saved}


def test_a_test_chooses_a_registered_estimator(pytester, registry):
    """A conftest registers it; s2st_benchmark(..., baseline=, ab_estimator=NAME) chooses it for that test, the
    other keeps the median (its record as before: no "estimator")."""
    pytester.makeconftest(HODGES_LEHMANN)
    pytester.makepyfile(test_choose=CHOOSING)
    result = pytester.runpytest("-p", "no:cacheprovider", "--s2st-min-rounds=6", "--s2st-ab-round-s=0.01",
                                "--benchmark-json=out.json")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*s2st: A/B in one process (baseline -> candidate), estimator hodges-lehmann*"])
    records = _ab(pytester)
    chosen, default = records["test_chosen"], records["test_default"]
    assert chosen["estimator"] == "hodges-lehmann" and "estimator" not in default
    assert chosen["method"].startswith("Hodges-Lehmann estimate of paired candidate/baseline round ratios")
    assert default["method"].startswith("median of paired candidate/baseline round ratios")
    assert chosen["pairs"] >= 6 and 1.3 < chosen["ratio"] < 3.0


def test_the_option_chooses_it_for_the_session_and_an_unknown_name_is_one_line(pytester, registry):
    pytester.makeconftest(HODGES_LEHMANN)
    pytester.makepyfile(test_choose=CHOOSING.replace(', ab_estimator="hodges-lehmann"', ""))
    result = pytester.runpytest("-p", "no:cacheprovider", "--s2st-min-rounds=6", "--s2st-ab-round-s=0.01",
                                "--s2st-ab-estimator", "hodges-lehmann", "--benchmark-json=out.json")
    result.assert_outcomes(passed=2)
    assert {name: r.get("estimator") for name, r in _ab(pytester).items()} == {
        "test_chosen": "hodges-lehmann", "test_default": "hodges-lehmann"}

    bad = pytester.runpytest("-p", "no:cacheprovider", "--s2st-ab-estimator", "nope")
    assert bad.ret == 4
    bad.stderr.fnmatch_lines(["ERROR: --s2st-ab-estimator: must be one of median, hodges-lehmann, got 'nope'"])


def test_an_unknown_estimator_or_one_without_a_baseline_fails_the_test_in_one_line(pytester):
    pytester.makepyfile(test_choose=CHOOSING.replace('"hodges-lehmann"', '"nope"') + '''

def test_no_baseline(s2st_benchmark):
    s2st_benchmark(fast, [1], ab_estimator="median")
''')
    result = pytester.runpytest("-p", "no:cacheprovider", "--s2st-min-rounds=6", "--s2st-ab-round-s=0.01")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines([
        "*s2st_benchmark(..., ab_estimator='nope'): not an A/B estimator; known: 'median'*",
        "*test_no_baseline: s2st_benchmark(..., ab_estimator='median') times an A/B: it needs baseline=*"])
    assert "Traceback" not in result.stdout.str()


def test_the_code_version_controller_judges_with_the_option(tmp_path):
    """--s2st-ab-estimator reaches the controller (the workers never get it: the base may not know it), which
    folds both sides' rounds with it and records its name."""
    repo = _repo(tmp_path / "repo", {"model.py": BUSY_MODEL.format(delay=0.001), "test_bench.py": BUSY_BENCH,
                                     "conftest.py": HODGES_LEHMANN})
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--s2st-ab-base", "main",
                           "--s2st-ab-estimator", "hodges-lehmann", "--s2st-ab-pairs", "1", "--s2st-min-rounds", "6",
                           "--s2st-ab-round-s", "0.01", "--benchmark-json=ab.json"],
                          cwd=repo, env=env, capture_output=True, text=True, timeout=600)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    record = json.loads((repo / "ab.json").read_text())["benchmarks"][0]["extra_info"]["s2st"]["ab"]
    assert record["mode"] == "code versions" and record["estimator"] == "hodges-lehmann"
    assert record["method"].startswith("Hodges-Lehmann estimate of paired head/base round ratios")
    sets = record["rounds_own_s"] or record["rounds_s"]
    assert record["ratio"] == pytest.approx(_hl_ratio(sets))
    assert "A/B of code versions (base main -> head), estimator hodges-lehmann" in out


def _hl_ratio(sets) -> float:
    """The Hodges-Lehmann ratio of the pooled pairs, as the conftest's estimator computes it."""
    logs = np.sort(np.concatenate([np.log(np.asarray(new)) - np.log(np.asarray(old)) for old, new in sets]))
    walsh = [(a + b) / 2 for i, a in enumerate(logs) for b in logs[i:]]
    return float(np.exp(np.median(walsh)))
