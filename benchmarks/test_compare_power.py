"""The power of the comparison itself: false alarms on A/A, detections on A/B, with a CPU hog beside it.

On a shared 2-core machine with a busy-loop process running next to the runs, as on a CI runner:
- 21 runs of code A and 20 runs of code B (B does 10 % more work: 11 instead of 10 matmul+tanh
  steps of a fixed 64x64 numpy workload per call), each a separate process, as CI runs are. Runs are
  interleaved (A0 B0 A1 B1 ... A20) so drift falls on both.
- 20 A/A comparisons (A_i against A_i+1) and 20 A/B comparisons (A_i against B_i), each judged three
  ways by the plugin's own compare (judging.regressions with --s2st-compare-fail limits):
    instructions:1%      the valgrind instruction count of the forward (measure/instructions.py);
    runtime_s:5% plain   today's plain percentage threshold on the mean runtime (CompareLimit.exceeded);
    runtime_s:5% signif  the same limit, failed only on a significant slowdown (significance.py).
Each run times 40 rounds (8 samples x 5 repeats); the FLOPs and memory passes are off.

Asserted (stable on any machine): the instruction count raises 0 false alarms and detects 20/20;
significance raises no more false alarms than the plain threshold. The runtime rates are printed.

    .venv/bin/python -m pytest -p no:cacheprovider benchmarks/test_compare_power.py -m power -s   (make bench-power)
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_s2st.judging import regressions
from pytest_s2st.rows import compared_rows, rows_from
from pytest_s2st.settings import CompareLimit

# ~6 min (instruction count) + ~2 x 10 min (runtime between runs) on a 2-core VM: marked `power` by
# benchmarks/conftest.py, so only `-m power` (make bench-power) selects it

PAIRS = 20
WORK_A, WORK_B = 10, 11   # +10 % work
SAMPLES, REPEAT = 8, 5    # 40 timed rounds per run
RUN_TIMEOUT_S = 600

MODEL_PY = '''
import numpy as np

def build(steps=10, size=64):
    a = np.random.default_rng(0).standard_normal((size, size)) / size
    def forward(sample):
        x = a
        for _ in range(steps):
            x = np.tanh(x @ a)
        return float(x[0, 0])
    return forward
'''

RUN_PY = '''
"""One CI run: measure the case (40 timed rounds, the instruction pass), write the Measurement JSON."""
import json, sys
from pytest_s2st.cases import load_case
from pytest_s2st.datasets import load_dataset
from pytest_s2st.measure.device import resolve_device
from pytest_s2st.pipelines.base import build_pipeline
from pytest_s2st.runner import RunSettings, measure_pipeline

config, out = sys.argv[1], sys.argv[2]
case = load_case(config, {}, lambda key: None)
pipeline = build_pipeline(case.model_type, case.config.stages, device="cpu", config_path=case.config.path)
samples = load_dataset(case.config.general["dataset_path"], "npy", case.settings["dataset_size"])
s = case.settings
settings = RunSettings(device=resolve_device("cpu"), repeat=s["repeat"], warmup=s["warmup"], memory="off",
                       flops="off", tensor_memory="off", threads=1, instructions="callgrind", case=case.to_dict())
m = measure_pipeline(pipeline, samples, settings, case_id=case.case_id)
m.info["identity"] = "power::" + case.case_id  # both codes are the same benchmark, as in CI
with open(out, "w") as f:
    json.dump(m.to_dict(), f)
'''

HOG = "while True:\n    pass\n"


def _dataset(path: Path) -> None:
    import numpy as np

    arr = np.empty(SAMPLES, dtype=object)
    for i in range(SAMPLES):
        arr[i] = {"id": i, "net_input": {"src_tokens": np.zeros((1, 4, 8), np.float32), "src_lengths": np.array([4])}}
    np.save(path, arr, allow_pickle=True)


def checkout(root: Path, steps: int) -> Path:
    """One checkout's code: the model file and its config, under the same names in A and B."""
    root.mkdir(parents=True)
    (root / "model.py").write_text(MODEL_PY)
    _dataset(root / "data.npy")
    (root / "power.yaml").write_text(
        "general:\n  name: power\n  model_type: callable\n  dataset_path: data.npy\n"
        f"  dataset_size: {SAMPLES}\n  repeat: {REPEAT}\n  warmup: 1\n"
        f"stage1:\n  entry: model.py:build\n  steps: {steps}\n")
    return root / "power.yaml"


def ci_run(runner: Path, config: Path, out: Path) -> dict:
    env = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(runner), str(config), str(out)], capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S, env={**os.environ, **env})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


def judge(old: dict, new: dict) -> dict[str, bool]:
    """Did each gate flag new against old? The plugin's own compare on the saved and current rows."""
    rows = rows_from("power", "power", new)
    compared = compared_rows({"fullname": "power", "extra_info": {"s2st": old}})  # as a saved run is read
    instructions = regressions(rows, compared, [CompareLimit("instructions", 1.0, True)])
    significant = regressions(rows, compared, [CompareLimit("runtime_s", 5.0, True)])
    plain = CompareLimit("runtime_s", 5.0, True).exceeded(old["metrics"]["runtime_s"]["value"],
                                                          new["metrics"]["runtime_s"]["value"])
    return {"instructions:1%": bool(instructions), "runtime_s:5% plain": plain is not None,
            "runtime_s:5% significance": bool(significant)}


def test_compare_power_with_a_cpu_hog(tmp_path, benchmark, timing_target):
    runner = tmp_path / "ci_run.py"
    runner.write_text(RUN_PY)
    config_a, config_b = checkout(tmp_path / "A", WORK_A), checkout(tmp_path / "B", WORK_B)
    hog = subprocess.Popen([sys.executable, "-c", HOG], stdin=subprocess.DEVNULL)
    start = time.perf_counter()
    runs_a, runs_b = [], []
    try:
        for i in range(PAIRS + 1):
            runs_a.append(ci_run(runner, config_a, tmp_path / f"a{i}.json"))
            if i < PAIRS:
                runs_b.append(ci_run(runner, config_b, tmp_path / f"b{i}.json"))
    finally:
        hog.kill()
        hog.wait(timeout=10)
    wall_s = time.perf_counter() - start

    for run in runs_a + runs_b:
        assert run["metrics"]["instructions"]["value"], run["metrics"]["instructions"]
        assert run["metrics"]["runtime_s"]["details"]["rounds"] == SAMPLES * REPEAT
    aa = [judge(runs_a[i], runs_a[i + 1]) for i in range(PAIRS)]
    ab = [judge(runs_a[i], runs_b[i]) for i in range(PAIRS)]
    gates = list(aa[0])
    false_alarms = {g: sum(r[g] for r in aa) for g in gates}
    detected = {g: sum(r[g] for r in ab) for g in gates}
    counts_a = [r["metrics"]["instructions"]["value"] for r in runs_a]
    counts_b = [r["metrics"]["instructions"]["value"] for r in runs_b]
    spread_a = (max(counts_a) - min(counts_a)) / min(counts_a)
    instr_change = sum(counts_b) / len(counts_b) / (sum(counts_a) / len(counts_a)) - 1

    lines = [f"compare power: {PAIRS} A/A and {PAIRS} A/B (+10 % work), {SAMPLES * REPEAT} rounds per run, "
             f"CPU hog beside, {len(runs_a) + len(runs_b)} runs in {wall_s:.0f} s",
             f"{'gate':<28}{'false alarms (A/A)':>20}{'detected (A/B)':>16}"]
    lines += [f"{g:<28}{false_alarms[g]:>14}/{PAIRS:<5}{detected[g]:>10}/{PAIRS:<5}" for g in gates]
    lines.append(f"instruction counts: A spread {spread_a:.2e} (max-min)/min over {len(counts_a)} runs, "
                 f"B/A {100 * instr_change:+.2f} %")
    print("\n" + "\n".join(lines))
    benchmark.extra_info.update(false_alarms=false_alarms, detected=detected, pairs=PAIRS, wall_s=wall_s,
                                instruction_spread_aa=spread_a, instruction_change_ab=instr_change)
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)  # the record above is the result

    assert false_alarms["instructions:1%"] == 0 and detected["instructions:1%"] == PAIRS, lines
    timing_target(false_alarms["runtime_s:5% significance"] <= false_alarms["runtime_s:5% plain"], "; ".join(lines))


# --- the runtime verdict between runs: several processes per side (significance.compare_runs) ---------------------
RUNS = 5  # processes per side; the verdicts at 3 and at 1 run per side are read from the first 3 / first 1


def side(runs: list[dict]) -> dict:
    """A side of RUNS repeat processes, folded as `s2st-merge --repeats` folds them."""
    from pytest_s2st.distribute import fold_repeats

    return fold_repeats([{"fullname": "power", "extra_info": {"s2st": m}} for m in runs])


def runtime_verdicts(old: list[dict], new: list[dict]) -> dict[str, bool]:
    from pytest_s2st.significance import compare_rounds

    flagged = {}
    limit = [CompareLimit("runtime_s", 5.0, True)]
    for k in (1, 3, RUNS):
        a, b = side(old[:k]), side(new[:k])
        rows = rows_from("power", "power", b["extra_info"]["s2st"])
        flagged[f"runtime_s:5%, {k} run{'s' if k > 1 else ''} per side"] = bool(regressions(rows, compared_rows(a), limit))
    # what compare did before: a bootstrap over the rounds of one run per side
    before = compare_rounds(old[0]["metrics"]["runtime_s"]["details"]["rounds_s"],
                            new[0]["metrics"]["runtime_s"]["details"]["rounds_s"])
    plain = limit[0].exceeded(old[0]["metrics"]["runtime_s"]["value"], new[0]["metrics"]["runtime_s"]["value"])
    flagged["(before) rounds bootstrap, 1 run per side"] = before.word == "slower" and plain is not None
    return flagged


@pytest.mark.parametrize("hog", [False, True], ids=["quiet", "cpu-hog"])
def test_runtime_verdict_between_runs(tmp_path, benchmark, timing_target, hog):
    """20 A/A and 20 A/B (+10 % work) comparisons of sides of RUNS separate processes each (41 sides,
    interleaved A0 B0 A1 B1 ... run by run), judged by --s2st-compare-fail=runtime_s:5% at 1, 3 and RUNS runs per
    side; with and without a busy-loop process beside them. No instruction count (it is the first benchmark's)."""
    runner = tmp_path / "ci_run.py"
    runner.write_text(RUN_PY.replace('instructions="callgrind"', 'instructions="off"'))
    config_a, config_b = checkout(tmp_path / "A", WORK_A), checkout(tmp_path / "B", WORK_B)
    hog_proc = subprocess.Popen([sys.executable, "-c", HOG], stdin=subprocess.DEVNULL) if hog else None
    start = time.perf_counter()
    sides_a: list[list[dict]] = [[] for _ in range(PAIRS + 1)]
    sides_b: list[list[dict]] = [[] for _ in range(PAIRS)]
    try:
        for i in range(PAIRS + 1):
            for r in range(RUNS):
                sides_a[i].append(ci_run(runner, config_a, tmp_path / f"a{i}-{r}.json"))
                if i < PAIRS:
                    sides_b[i].append(ci_run(runner, config_b, tmp_path / f"b{i}-{r}.json"))
    finally:
        if hog_proc is not None:
            hog_proc.kill()
            hog_proc.wait(timeout=10)
    wall_s = time.perf_counter() - start
    aa = [runtime_verdicts(sides_a[i], sides_a[i + 1]) for i in range(PAIRS)]
    ab = [runtime_verdicts(sides_a[i], sides_b[i]) for i in range(PAIRS)]
    gates = list(aa[0])
    false_alarms = {g: sum(r[g] for r in aa) for g in gates}
    detected = {g: sum(r[g] for r in ab) for g in gates}
    means = [m["metrics"]["runtime_s"]["value"] for s in sides_a for m in s]
    spread = (max(means) - min(means)) / min(means)
    b_over_a = (sum(m["metrics"]["runtime_s"]["value"] for s in sides_b for m in s) / (PAIRS * RUNS)) / (
        sum(means) / len(means))
    lines = [f"runtime verdict between runs ({'CPU hog beside' if hog else 'no hog'}): {PAIRS} A/A and {PAIRS} A/B "
             f"(+10 % work), sides of {RUNS} processes x {SAMPLES * REPEAT} rounds, {len(means) + PAIRS * RUNS} "
             f"processes in {wall_s:.0f} s; A run means spread {100 * spread:.1f} % (max-min)/min, B/A {b_over_a:.3f}",
             f"{'gate':<44}{'false alarms (A/A)':>20}{'detected (A/B)':>16}"]
    lines += [f"{g:<44}{false_alarms[g]:>14}/{PAIRS:<5}{detected[g]:>10}/{PAIRS:<5}" for g in gates]
    print("\n" + "\n".join(lines))
    benchmark.extra_info.update(false_alarms=false_alarms, detected=detected, pairs=PAIRS, runs_per_side=RUNS,
                                hog=hog, wall_s=wall_s, run_mean_spread=spread, b_over_a=b_over_a)
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)  # the record above is the result
    assert false_alarms["runtime_s:5%, 1 run per side"] == detected["runtime_s:5%, 1 run per side"] == 0, lines
    timing_target(false_alarms[f"runtime_s:5%, {RUNS} runs per side"] <= 1, "; ".join(lines))
