"""One pytest-s2st session over the seven staged tiny fairseq types against fairseq's own
get_metrics.py run once per config (how upstream is used), on the same models, samples
(dataset_size 2), warm-up (2 on sample 0), repeat (1) and threads (1).

Walls are whole processes, spawn to exit, imports included. Target: ours <= 0.5x the sum of
upstream's walls, and every FLOP count upstream prints (per stage of a cascade, total of a
single-stage type) equal to ours: both count with our FLOPs pass's dispatch counter (FlopCounterMode's
formulas plus the attention kernels').
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


VARIED_SIZE = 8  # speech samples of 40-80 frames: the unit vocoder meets a new input length on most of them
PARITY_ROUNDS = 3
PARITY_BAND = (0.8, 1.25)  # ours (upstream protocol) / upstream, per stage: within the machine's noise


def varied_config(tmp_path: Path) -> Path:
    """The staged S2UT (+ CodeHiFiGAN with durations) config, paths absolute, over VARIED_SIZE random samples of
    40-80 frames: the staged dataset holds 3, two of one length, and the vocoder should meet a new input length
    on most samples (what upstream times cold)."""
    from pytest_s2st.datasets import generate_random_dataset
    from pytest_s2st.tiny.fairseq_tiny import FEAT_DIM, default_configs

    source = next(c for c in default_configs() if c.stem == "S2UT")
    samples = generate_random_dataset(VARIED_SIZE, feat_dim=FEAT_DIM, min_len=40, max_len=80, seed=3)
    return compare_upstream.derive_config(source, tmp_path, dataset_size=VARIED_SIZE, samples=samples)


def test_upstream_protocol_times_what_upstream_times(tmp_path, timing_target):
    """Issue 23: per stage, our runtime per sample under --s2st-runtime-protocol upstream equals
    get_metrics.py's (ratio within PARITY_BAND, medians of interleaved rounds: ours-upstream, upstream,
    ours-warm); under the warm protocol the vocoder, which upstream times cold on each new length, is faster."""
    config = varied_config(tmp_path)
    compare_upstream.check_configs([config], VARIED_SIZE)
    ours_upstream, theirs, ours_warm = [], [], []
    for _ in range(PARITY_ROUNDS):
        ours_upstream.append(compare_upstream.run_ours([config], tests=TESTS, dataset_size=VARIED_SIZE,
                                                       threads=THREADS, protocol="upstream"))
        theirs.append(compare_upstream.run_upstream([config], threads=THREADS))
        ours_warm.append(compare_upstream.run_ours([config], tests=TESTS, dataset_size=VARIED_SIZE,
                                                   threads=THREADS, protocol="warm"))
    key = compare_upstream.config_key(config)
    same = compare_upstream.compare_runtime(ours_upstream, theirs)[key]
    warm = compare_upstream.compare_runtime(ours_warm, theirs)[key]
    ratios = {stage: round(v["ratio"], 3) for stage, v in same.items()}
    warm_ratios = {stage: round(v["ratio"], 3) for stage, v in warm.items()}
    print(f"\nper-sample runtime / upstream's: upstream protocol {ratios}; warm protocol {warm_ratios}")
    low, high = PARITY_BAND
    timing_target(all(low <= r <= high for r in ratios.values()),
                  f"upstream protocol per stage {ratios}: outside {PARITY_BAND} of upstream's")
    timing_target(warm_ratios["vocoder"] < low,
                  f"warm protocol's vocoder {warm_ratios['vocoder']}x upstream's: not below {low}")
