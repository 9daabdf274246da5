"""--s2st-processes N: every benchmark timed in N fresh xdist workers taking turns, saved and compared as one side
of N runs (as s2st-merge --repeats folds them)."""
from __future__ import annotations

import json

SAVED_TEST = '''
import os, time

DELAY = float(os.environ.get("S2ST_TEST_DELAY", "0"))

def model(x):
    if DELAY:
        time.sleep(DELAY)
    return sum(range(2000))

def test_model(s2st_benchmark):
    s2st_benchmark(model, list(range(4)))
'''


def test_three_processes_are_one_side_of_three_runs_and_a_slower_side_fails(pytester, monkeypatch):
    pytester.makepyfile(test_saved=SAVED_TEST)
    first = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--s2st-processes=3", "--benchmark-autosave",
                                          "--benchmark-json=side.json")
    first.assert_outcomes(passed=3)  # one test, three workers
    assert "xdist workers on" not in first.stdout.str()  # they take turns: no contention warning
    rows = json.loads((pytester.path / "side.json").read_text())["benchmarks"]
    assert len(rows) == 1
    runtime = rows[0]["extra_info"]["s2st"]["metrics"]["runtime_s"]
    assert len(runtime["details"]["runs_s"]) == 3 and len(runtime["details"]["rounds_s"]) == 15
    assert len(runtime["details"]["waited_s"]) == 15  # each round's run-queue wait kept beside it
    assert runtime["value"] == sum(runtime["details"]["runs_s"]) / 3
    assert len(rows[0]["stats"]["data"]) == 15  # pytest-benchmark's own stats hold every run's rounds
    monkeypatch.setenv("S2ST_TEST_DELAY", "0.005")
    second = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--s2st-processes=3", "--benchmark-compare",
                                           "--s2st-compare-fail=runtime_s:5%")
    assert second.ret == 1
    second.stdout.fnmatch_lines(["*x* ?*, *? slower (3/3 runs)*", "*runtime_s regressed*", "*3 passed, 1 regressed*"])


def test_processes_refuses_what_cannot_be_a_side(pytester):
    pytester.makepyfile(test_saved=SAVED_TEST)
    one = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--s2st-processes=1")
    assert one.ret == 4 and "--s2st-processes 1: needs 2 or more processes" in one.stderr.str()
    both = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--s2st-processes=2", "-n", "2")
    assert both.ret == 4 and "sets the xdist workers itself" in both.stderr.str()
    pytester.makeini("[pytest]\ns2st_processes = many\n")
    bad = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert bad.ret == 4 and "ini s2st_processes" in bad.stderr.str()
