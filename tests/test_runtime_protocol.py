"""The runtime protocol (runner.PROTOCOLS): which inputs each stage has seen when the timed rounds begin.

warm: every stage has met each distinct input shape; upstream: fairseq get_metrics.py's order (the whole
chain warmed on sample 0, earlier stages pre-generating every sample, the last stage meeting each new
shape inside the timed pass). The call logs are exact; the one timing test uses a model that sleeps
40 ms on the first call of a shape, far above scheduler noise.
"""
from __future__ import annotations

import json
import time

import numpy as np
import pytest

from pytest_s2st.measure.device import resolve_device
from pytest_s2st.runner import DEFAULT_MIN_ROUNDS, RunSettings, first_of_each_shape, measure_pipeline, shape_key

from helpers import BENCH_TEST

OFF = dict(memory="off", flops="off", tensor_memory="off")
LENGTHS = [3, 5, 3, 7]  # sample 0 and 2 share a shape


class Recorder:
    """A stage logging (stage, input length) per call; ``marks`` holds the log's length when timing began."""

    def __init__(self, name, log, scale=1, cold_s=0.0, warm_s=0.0):
        self.name, self.log, self.scale = name, log, scale
        self.cold_s, self.warm_s, self.seen = cold_s, warm_s, set()

    def forward(self, x):
        self.log.append((self.name, len(x)))
        if len(x) not in self.seen:
            self.seen.add(len(x))
            time.sleep(self.cold_s)  # a shape-sensitive model: the first call of a shape is slow
        else:
            time.sleep(self.warm_s)
        return np.zeros(len(x) * self.scale, np.float32)

    def to_next_input(self, out):
        return out


class Chain:
    model_type = "callable"

    def __init__(self, *stages):
        self.stages = list(stages)

    def prepare_sample(self, sample):
        return sample

    def assets(self):
        return {}

    def close(self):
        pass


def run(protocol, stages, lengths=LENGTHS, **kw):
    log = stages[0].log
    marks = {}

    def drive(rounds):
        marks["timing"] = len(log)
        rounds.run_all()
        marks["after"] = len(log)
        return "time.perf_counter"

    settings = RunSettings(device=resolve_device("cpu"), warmup=2, runtime_protocol=protocol, **{**OFF, **kw})
    samples = [np.ones(n, np.float32) for n in lengths]
    m = measure_pipeline(Chain(*stages), samples, settings, case_id="rec", drive_timing=drive)
    return m, log[:marks["timing"]], log[marks["timing"]:marks["after"]], log[marks["after"]:]


def test_shape_keys_tell_lengths_and_dtypes_apart_and_ignore_values():
    assert shape_key(np.zeros(3)) == shape_key(np.ones(3))
    assert shape_key(np.zeros(3)) != shape_key(np.zeros(4))
    assert shape_key(np.zeros(3, np.float32)) != shape_key(np.zeros(3, np.float64))
    assert shape_key({"text": "abc", "seed": 1}) == shape_key({"text": "xyz", "seed": 2})
    assert shape_key({"text": "abc"}) != shape_key({"text": "abcd"})
    assert shape_key([1, 2, 3]) != shape_key([1, 2])
    assert first_of_each_shape([np.zeros(3), np.zeros(5), np.zeros(3), np.zeros(7)]) == [0, 1, 3]


def test_warm_protocol_shows_every_stage_each_shape_before_timing():
    log: list = []
    m, before, timed, after = run("warm", [Recorder("s1", log, 2), Recorder("s2", log)])
    assert {n for s, n in before if s == "s1"} == {3, 5, 7}
    assert {n for s, n in before if s == "s2"} == {6, 10, 14}  # the second stage's own inputs
    # the last untimed calls are the shape pass: one per distinct shape per stage, right before timing
    assert before[-6:] == [("s1", 3), ("s1", 5), ("s1", 7), ("s2", 6), ("s2", 10), ("s2", 14)]
    assert m.info["warmed_shapes"] == [3, 3] and m.info["runtime_protocol"] == "warm"
    assert len(timed) == 2 * DEFAULT_MIN_ROUNDS  # 4 samples, at least 5 rounds: the dataset is cycled
    assert not after
    runtime = m.metric("runtime_s").to_dict()
    assert runtime["details"]["protocol"] == "warm" and len(runtime["details"]["rounds_s"]) == DEFAULT_MIN_ROUNDS


def test_upstream_protocol_is_get_metrics_order():
    # get_metrics.py on a cascade: model.warm_up(dataset[0], repeat=2) through the chain, compute_metrics'
    # generate_*_outputs of every earlier stage over all samples, then benchmark_run_time (stage-major there,
    # one round per sample here: the same calls, each timed once), then max_memory and count_flops
    log: list = []
    m, before, timed, after = run("upstream", [Recorder("s1", log, 2), Recorder("s2", log)])
    assert before == [("s1", 3), ("s2", 6)] * 2 + [("s1", n) for n in LENGTHS]
    assert timed == [c for n in LENGTHS for c in (("s1", n), ("s2", 2 * n))]  # samples x repeat rounds
    assert after == [("s1", n) for n in LENGTHS] + [("s2", 2 * n) for n in LENGTHS]  # the FLOP pass (memory off)
    assert m.info["runtime_protocol"] == "upstream" and "warmed_shapes" not in m.info
    assert m.metric("runtime_s", "s2").details["protocol"] == "upstream"
    assert [s.name for s in m.stages] == ["s1", "s2"] and len(m.outputs) == len(LENGTHS)


def test_upstream_protocol_honours_an_explicit_min_rounds():
    log: list = []
    _, _, timed, _ = run("upstream", [Recorder("s1", log)], min_rounds=6)
    assert [n for _, n in timed] == [3, 5, 3, 7, 3, 5]


@pytest.mark.serial
def test_the_protocols_differ_on_a_shape_sensitive_model():
    # 40 ms on a shape's first call, 1 ms after: upstream times shapes 5 and 7 cold (2 of 4 rounds)
    log: list = []
    warm, *_ = run("warm", [Recorder("s1", log, cold_s=0.04, warm_s=0.001)])
    log2: list = []
    cold, *_ = run("upstream", [Recorder("s1", log2, cold_s=0.04, warm_s=0.001)])
    warm_s, cold_s = warm.metric("runtime_s").value, cold.metric("runtime_s").value
    assert cold_s >= 0.02  # (40 + 40 + 1 + 1) / 4 ms at least: sleeps do not end early
    assert warm_s < 0.01, warm_s  # 1 ms sleeps; 9 ms of scheduler delay per round on average before this fails


def test_protocol_reaches_the_json_and_the_table(pytester):
    from helpers import write_case

    case = write_case(pytester.path, "lin", ["build_linear"])
    pytester.makepyfile(test_bench=BENCH_TEST)
    result = pytester.runpytest("-p", "no:cacheprovider", f"--s2st-config={case}", "--s2st-memory=off",
                                "--s2st-flops=off", "--s2st-runtime-protocol=upstream", "--benchmark-json=out.json")
    result.assert_outcomes(passed=1)
    s2st = json.loads((pytester.path / "out.json").read_text())["benchmarks"][0]["extra_info"]["s2st"]
    assert s2st["runtime_protocol"] == "upstream"
    assert s2st["metrics"]["runtime_s"]["details"]["rounds"] == 3  # samples x repeat: upstream's count
    result.stdout.fnmatch_lines(["*test_inference[[]callable-lin[]]*n=3 too few*",
                                 "methods: time.perf_counter, upstream protocol*"])


def test_pytest_benchmark_round_options_are_honoured(pytester):
    from helpers import write_case

    case = write_case(pytester.path, "lin", ["build_linear"])
    pytester.makepyfile(test_bench=BENCH_TEST)
    result = pytester.runpytest("-p", "no:cacheprovider", f"--s2st-config={case}", "--s2st-memory=off",
                                "--s2st-flops=off", "--benchmark-min-rounds=7", "--benchmark-warmup-iterations=0",
                                "--benchmark-json=out.json")
    result.assert_outcomes(passed=1)
    s2st = json.loads((pytester.path / "out.json").read_text())["benchmarks"][0]["extra_info"]["s2st"]
    assert s2st["metrics"]["runtime_s"]["details"]["rounds"] == 7 and s2st["warmup"] == 0
    # --benchmark-max-time: rounds are added until it is spent, as pytest-benchmark does
    result = pytester.runpytest("-p", "no:cacheprovider", f"--s2st-config={case}", "--s2st-memory=off",
                                "--s2st-flops=off", "--benchmark-max-time=0.3", "--benchmark-json=out.json")
    result.assert_outcomes(passed=1)
    details = json.loads((pytester.path / "out.json").read_text())["benchmarks"][0]["extra_info"]["s2st"][
        "metrics"]["runtime_s"]["details"]
    assert details["rounds"] > DEFAULT_MIN_ROUNDS and details["stopped"] == "max time reached"


@pytest.mark.parametrize("flag, words", [
    ("--benchmark-warmup=off", "always warm up"),
    ("--benchmark-precision=0.05", "--s2st-target-precision"),
    ("--benchmark-min-time=0.1", "--s2st-repeat"),
])
def test_pytest_benchmark_options_without_an_s2st_meaning_are_refused_in_one_line(pytester, flag, words):
    from helpers import write_case

    case = write_case(pytester.path, "lin", ["build_linear"])
    pytester.makepyfile(test_bench=BENCH_TEST)
    result = pytester.runpytest("-p", "no:cacheprovider", f"--s2st-config={case}", "--s2st-memory=off",
                                "--s2st-flops=off", flag)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*{flag.split('=')[0]}*{words}*"])
    assert "Traceback" not in result.stdout.str()


def test_a_benchmark_option_against_its_s2st_twin_is_a_usage_error(pytester):
    pytester.makepyfile(test_bench=BENCH_TEST)
    result = pytester.runpytest("-p", "no:cacheprovider", "--benchmark-min-rounds=7", "--s2st-min-rounds=9")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*--benchmark-min-rounds 7 and --s2st-min-rounds 9 disagree*"])
