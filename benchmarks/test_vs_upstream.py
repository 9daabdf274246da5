"""One pytest-s2st session over the seven staged tiny fairseq types against fairseq's own
get_metrics.py run once per config (how upstream is used), on the same models, samples
(dataset_size 2), warm-up (2 on sample 0), repeat (1) and threads (1).

Walls are whole processes, spawn to exit, imports included. Target: ours <= 0.5x the sum of
upstream's walls, and every FLOP count upstream prints (per stage of a cascade, total of a
single-stage type) equal to ours: both count with torch's FlopCounterMode.
One alternation per run (about 1.5 min here); `python -m pytest_s2st.compare_upstream --rounds 3`
does several and reports medians.
"""
import importlib.util
from pathlib import Path

import pytest

if importlib.util.find_spec("fairseq") is None:
    pytest.skip("compares with fairseq's get_metrics.py: needs the fairseq extra", allow_module_level=True)

from pytest_s2st import compare_upstream  # noqa: E402  (torch-free)

TARGET_RATIO = 0.5
DATASET_SIZE = 2
THREADS = 1
TESTS = Path(__file__).with_name("test_inference.py")


def test_session_vs_upstream(benchmark, timing_target):
    from pytest_s2st.tiny.fairseq_tiny import default_configs  # cheap when the staging is cached

    configs = default_configs()
    compare_upstream.check_configs(configs, DATASET_SIZE)
    ours = []

    def our_session():
        ours.append(compare_upstream.run_ours(configs, tests=TESTS, dataset_size=DATASET_SIZE, threads=THREADS))

    # the row's time is our whole session; upstream runs right after it (one alternation)
    benchmark.pedantic(our_session, rounds=1, iterations=1)
    theirs = compare_upstream.run_upstream(configs, threads=THREADS)
    result = compare_upstream.summarize(ours, [theirs], configs=configs, dataset_size=DATASET_SIZE, threads=THREADS)
    benchmark.extra_info["vs_upstream"] = result

    assert result["samples"]["equal"], result["samples"]
    unequal = {kind: v["differences"] for kind, v in result["flops"].items() if not v["equal"]}
    assert not unequal, f"FLOPs differ from upstream's: {unequal}"
    timing_target(result["ratio"] <= TARGET_RATIO, (
        f"our session {result['ours_wall_s']:.1f} s is {result['ratio']:.2f}x upstream's "
        f"{result['upstream_wall_s']:.1f} s (target <= {TARGET_RATIO}x)"))
