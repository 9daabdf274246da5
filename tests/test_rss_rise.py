"""The RSS rise column (issue 32 item 8): a case's peak RSS minus the process's RSS at the case's start, checked
against known allocations, so what an earlier case left resident is not counted (the whole-process peak, which
grows from case to case, stays in the JSON as peak_rss_mib)."""
from __future__ import annotations

import json

import pytest

from helpers import BENCH_TEST, make_dataset

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

RESIDENT_MIB, TRANSIENT_MIB = 160, 64
MODELS = f'''
import numpy as np

LEFT_BEHIND = []  # what an earlier case leaves resident in the process (a cache, an arena, a leak)

def build_resident():
    weights = np.ones({RESIDENT_MIB} * 2**20 // 8)  # touched: resident from the build on
    LEFT_BEHIND.append(weights)
    return lambda sample: float(weights[0])

def build_transient():
    def forward(sample):
        buf = np.ones({TRANSIENT_MIB} * 2**20 // 8)  # resident during the forward only
        return float(buf[-1])
    return forward
'''

OWN_CALLABLE = f'''
import numpy as np

def test_own(s2st_benchmark):
    kept = np.ones({RESIDENT_MIB} * 2**20 // 8)  # built by the test itself, after its setup began
    s2st_benchmark(lambda x: float(kept[0]) + x, [1.0, 2.0])
'''


def _config(root, name, factory):
    path = root / f"{name}.yaml"
    path.write_text(f"general:\n  name: {name}\n  model_type: callable\n  dataset_path: data.npy\n"
                    f"stage1:\n  entry: models.py:{factory}\n")
    return path


def test_rss_rise_is_the_case_own_memory_not_what_came_before(pytester):
    pytester.makepyfile(models=MODELS, test_bench=BENCH_TEST)
    make_dataset(pytester.path / "data.npy", n=2)
    first = _config(pytester.path, "resident", "build_resident")
    second = _config(pytester.path, "transient", "build_transient")
    result = pytester.runpytest("-p", "no:cacheprovider", f"--s2st-config={first}",
                                           f"--s2st-config={second}", "--benchmark-json=out.json")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["Name*runtime*RSS rise*peak delta*", "RSS rise: the peak RSS of the forward minus*"])
    rows = {b["extra_info"]["s2st"]["case"]: b["extra_info"]["s2st"]["metrics"]
            for b in json.loads((pytester.path / "out.json").read_text())["benchmarks"]}
    resident, transient = rows["callable-resident"], rows["callable-transient"]
    # the first case's rise holds its model (built after the case's start); the second's only its forward's buffer,
    # though the first case's 160 MiB are still resident: the whole-process peak carries them, the rise does not
    assert RESIDENT_MIB - 2 <= resident["rss_rise_mib"]["value"] <= RESIDENT_MIB + 30
    assert TRANSIENT_MIB - 2 <= transient["rss_rise_mib"]["value"] <= TRANSIENT_MIB + 30
    assert transient["peak_rss_mib"]["value"] >= resident["peak_rss_mib"]["value"] + TRANSIENT_MIB - 2
    details = transient["rss_rise_mib"]["details"]
    assert details["start"] == "before the case's model was built"
    assert details["peak_rss_mib"] - details["start_rss_mib"] == pytest.approx(transient["rss_rise_mib"]["value"])


def test_rss_rise_of_a_test_own_callable_counts_from_its_setup(pytester):
    pytester.makepyfile(test_own=OWN_CALLABLE)
    result = pytester.runpytest("-p", "no:cacheprovider", "--benchmark-json=out.json")
    result.assert_outcomes(passed=1)
    metrics = json.loads((pytester.path / "out.json").read_text())["benchmarks"][0]["extra_info"]["s2st"]["metrics"]
    assert RESIDENT_MIB - 2 <= metrics["rss_rise_mib"]["value"] <= RESIDENT_MIB + 30
    assert metrics["rss_rise_mib"]["details"]["start"] == "before the test's setup"
    assert metrics["peak_delta_mib"]["value"] < 2  # the forward itself allocates nothing


def test_rss_rise_does_not_read_an_earlier_test_garbage_as_its_start(pytester):
    """An earlier test's unreachable cycle holding 300 MiB, collected only mid-case, put the case's peak below its
    start and read the rise as 0 (seen in CI): the start is read after collecting garbage."""
    import gc

    import numpy as np

    gc.disable()
    try:
        cycle = {"array": np.ones(300 * 2**20 // 8)}
        cycle["self"] = cycle
        del cycle
        # the collection a case's own allocations trigger, made explicit: after the start reading, before the peak
        pytester.makepyfile(test_own=OWN_CALLABLE.replace("    kept =", "    __import__('gc').collect()\n    kept ="))
        result = pytester.runpytest("-p", "no:cacheprovider", "--benchmark-json=out.json")
    finally:
        gc.enable()
    result.assert_outcomes(passed=1)
    metrics = json.loads((pytester.path / "out.json").read_text())["benchmarks"][0]["extra_info"]["s2st"]["metrics"]
    assert RESIDENT_MIB - 2 <= metrics["rss_rise_mib"]["value"] <= RESIDENT_MIB + 30
