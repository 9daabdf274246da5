"""The power of the runtime verdicts that need no saved runs of their own, measured through pytest as users run it:

1. the in-process A/B (``s2st_benchmark(candidate, inputs, baseline=base)``, rounds alternating ABBA): one pytest
   session of TRIALS tests per change (A/A, +5 %, +10 %, x2 work), each test an independent A/B as a CI job would
   run it, judged by its own verdict word and by ``--s2st-compare-fail=runtime_s:5%``;
2. one run per side between processes (``--benchmark-compare`` of one saved run, the gross rule,
   significance.GROSS): TRIALS A/A, A-vs-x2 and A-vs-x10 pairs of separate pytest processes, interleaved.

Each with and without a busy-loop process beside it (2 cores: the hog takes one). The model is numpy (one
thread): STEPS matmul+tanh steps of a 128x128 matrix per call, the candidate doing more steps.

    .venv/bin/python -m pytest -p no:cacheprovider benchmarks/test_ab_power.py -m power -s   (make bench-power)
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_s2st.judging import runtime_change, saved_counterpart
from pytest_s2st.rows import compared_rows, rows_from

TRIALS = 20
PAIRS = int(os.environ.get("S2ST_POWER_PAIRS", "0"))  # ABBA pairs per A/B test (0: the default, ab.inprocess.AB_MIN_PAIRS)
STEPS = 20
CHANGES = {"aa": STEPS, "plus5": STEPS + 1, "plus10": STEPS + 2, "x2": 2 * STEPS}  # candidate's steps
HOG = "while True:\n    pass\n"
ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

MODEL_PY = '''
import os
import numpy as np

A = np.random.default_rng(0).standard_normal((128, 128)) / 128

def model(steps):
    def forward(sample):
        x = A
        for _ in range(steps):
            x = np.tanh(x @ A)
        return float(x[0, 0])
    return forward
'''

AB_TEST = '''
import pytest
from model import model

CHANGES = {changes!r}

@pytest.mark.parametrize("trial", range({trials}))
@pytest.mark.parametrize("change", list(CHANGES))
def test_ab(s2st_benchmark, change, trial):
    s2st_benchmark(model(CHANGES[change]), list(range(4)), baseline=model({steps}))
'''

RUN_TEST = '''
import os
from model import model

def test_model(s2st_benchmark):
    s2st_benchmark(model(int(os.environ["POWER_STEPS"])), list(range(4)))
'''


def _pytest(cwd: Path, *args: str, steps: int | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, **ENV, **({"POWER_STEPS": str(steps)} if steps is not None else {})}
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                           "--s2st-flops=off", "--s2st-tensor-memory=off", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=1800)


def _hog(on: bool):
    return subprocess.Popen([sys.executable, "-c", HOG], stdin=subprocess.DEVNULL) if on else None


def _stop(proc) -> None:
    if proc is not None:
        proc.kill()
        proc.wait(timeout=10)


def in_process(tmp: Path, hog: bool) -> dict:
    tmp.mkdir(exist_ok=True)
    (tmp / "model.py").write_text(MODEL_PY)
    (tmp / "test_power_ab.py").write_text(AB_TEST.format(changes=CHANGES, trials=TRIALS, steps=STEPS))
    proc, start = _hog(hog), time.perf_counter()
    try:
        done = _pytest(tmp, "--s2st-compare-fail=runtime_s:5%", "--benchmark-json=ab.json",
                       *([f"--s2st-min-rounds={PAIRS}"] if PAIRS else []))
    finally:
        _stop(proc)
    wall = time.perf_counter() - start
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
    out: dict = {c: {"slower": 0, "faster": 0, "gate": 0, "ratios": []} for c in CHANGES}
    for bench in json.loads((tmp / "ab.json").read_text())["benchmarks"]:
        s2st = bench["extra_info"]["s2st"]
        change = bench["params"]["change"]
        ab = s2st["ab"]
        out[change]["ratios"].append(ab["ratio"])
        out[change]["slower"] += ab["word"] == "slower"
        out[change]["faster"] += ab["word"] == "faster"
        out[change]["gate"] += s2st.get("verdict", {}).get("status") == "FAIL"
        out[change]["pairs"] = ab["pairs"]
    out["wall_s"] = wall
    return out


def between_processes(tmp: Path, hog: bool) -> dict:
    """TRIALS A/A and TRIALS A/x2 comparisons of one saved run per side (A0 B0 A1 B1 ... A_TRIALS)."""
    tmp.mkdir(exist_ok=True)
    (tmp / "model.py").write_text(MODEL_PY)
    (tmp / "test_power_run.py").write_text(RUN_TEST)
    runs_a, runs_b, runs_c = [], [], []
    proc, start = _hog(hog), time.perf_counter()
    try:
        for i in range(TRIALS + 1):
            for steps, runs, name in ((STEPS, runs_a, f"a{i}"), (2 * STEPS, runs_b, f"b{i}"),
                                      (10 * STEPS, runs_c, f"c{i}")):
                if not name.startswith("a") and i == TRIALS:
                    continue
                done = _pytest(tmp, f"--benchmark-json={name}.json", steps=steps)
                assert done.returncode == 0, done.stdout[-3000:]
                runs.append(json.loads((tmp / f"{name}.json").read_text())["benchmarks"][0])
    finally:
        _stop(proc)
    wall = time.perf_counter() - start

    def judge(old: dict, new: dict):
        row = rows_from("t", "t", new["extra_info"]["s2st"])[0]
        compared = compared_rows(old)
        return runtime_change(saved_counterpart(row, compared), row.metrics)

    aa = [judge(runs_a[i], runs_a[i + 1]) for i in range(TRIALS)]
    ab = [judge(runs_a[i], runs_b[i]) for i in range(TRIALS)]
    ac = [judge(runs_a[i], runs_c[i]) for i in range(TRIALS)]
    return {"aa_words": sum(c.word in ("slower", "faster") for c in aa), "x2_slower": sum(c.word == "slower" for c in ab),
            "x10_slower": sum(c.word == "slower" for c in ac), "x10_own": [_ratio(runs_a[i], runs_c[i]) for i in range(TRIALS)],
            "aa_max_log": max(abs(math.log(c.ratio)) for c in aa), "x2_min_ratio": min(c.ratio for c in ab),
            "aa_ratios": [c.ratio for c in aa], "x2_ratios": [c.ratio for c in ab], "wall_s": wall,
            "aa_own": [_ratio(runs_a[i], runs_a[i + 1]) for i in range(TRIALS)],
            "x2_own": [_ratio(runs_a[i], runs_b[i]) for i in range(TRIALS)]}


def _own_mean(run: dict) -> float:
    from pytest_s2st.measure.runqueue import own_times

    details = run["extra_info"]["s2st"]["metrics"]["runtime_s"]["details"]
    own = own_times(details["rounds_s"], details.get("waited_s"))
    assert own is not None, "no run-queue readings (not Linux?)"
    return sum(own) / len(own)


def _ratio(old: dict, new: dict) -> float:
    """The ratio of the runs' own mean round times (run-queue wait taken out)."""
    return _own_mean(new) / _own_mean(old)


def _hog_name(hog: bool) -> str:
    return "CPU hog beside" if hog else "no hog"


@pytest.mark.parametrize("hog", [False, True], ids=["quiet", "cpu-hog"])
def test_in_process_ab_power(tmp_path, benchmark, timing_target, hog):
    ab = in_process(tmp_path, hog)
    lines = [f"in-process A/B power ({_hog_name(hog)}): {TRIALS} tests per change, {ab['aa']['pairs']} ABBA pairs "
             f"each, one session {ab['wall_s']:.0f} s",
             f"{'change':<10}{'slower':>8}{'faster':>8}{'runtime_s:5% FAIL':>19}  ratios (min-median-max)"]
    for change in CHANGES:
        r = sorted(ab[change]["ratios"])
        lines.append(f"{change:<10}{ab[change]['slower']:>8}{ab[change]['faster']:>8}{ab[change]['gate']:>19}  "
                     f"{r[0]:.3f}-{r[len(r) // 2]:.3f}-{r[-1]:.3f}")
    print("\n" + "\n".join(lines))
    benchmark.extra_info.update(hog=hog, in_process=ab)
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)  # the record above is the result
    assert ab["x2"]["slower"] == ab["x2"]["gate"] == TRIALS, lines  # gross changes always
    timing_target(ab["aa"]["gate"] <= 1 and ab["plus10"]["slower"] >= 19 and ab["plus5"]["slower"] >= 15,
                  "; ".join(lines))


@pytest.mark.parametrize("hog", [False, True], ids=["quiet", "cpu-hog"])
def test_one_run_per_side_gross_power(tmp_path, benchmark, timing_target, hog):
    one = between_processes(tmp_path, hog)
    aa_own, x2_own, x10_own = sorted(one["aa_own"]), sorted(one["x2_own"]), sorted(one["x10_own"])
    lines = [f"one run per side ({_hog_name(hog)}), {3 * TRIALS + 1} processes {one['wall_s']:.0f} s: A/A words "
             f"{one['aa_words']}/{TRIALS}, x2 work slower {one['x2_slower']}/{TRIALS}, x10 work slower "
             f"{one['x10_slower']}/{TRIALS} (own x{x10_own[0]:.2f}-x{x10_own[-1]:.2f}); raw mean ratios A/A "
             f"x{min(one['aa_ratios']):.3f}-x{max(one['aa_ratios']):.3f}, x2 x{min(one['x2_ratios']):.3f}-"
             f"x{max(one['x2_ratios']):.3f}; own (run-queue wait out) A/A x{aa_own[0]:.3f}-x{aa_own[-1]:.3f}, x2 "
             f"x{x2_own[0]:.3f}-x{x2_own[-1]:.3f}"]
    print("\n" + "\n".join(lines))
    benchmark.extra_info.update(hog=hog, one_run=one)
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
    assert one["aa_words"] == 0, lines  # a gross word on identical code is a false alarm CI cannot live with
    timing_target(one["x10_slower"] == TRIALS, "; ".join(lines))  # x2 is within the drift: reported, not required


# --- two code versions in one job: the pull-request recipe (docs/ci/pull-request.yml) as users run it ----------
VERSION_TRIALS = int(os.environ.get("S2ST_POWER_VERSION_TRIALS", "10"))
VERSION_ROUNDS = int(os.environ.get("S2ST_POWER_VERSION_ROUNDS", "3"))  # processes per side


def _recipe_step() -> dict:
    import yaml

    workflow = yaml.safe_load((Path(__file__).resolve().parents[1] / "docs" / "ci" / "pull-request.yml").read_text())
    return next(s for s in workflow["jobs"]["ab"]["steps"] if s.get("name") == "A/B: base vs head")


def _version_repo(root: Path, head_steps: int) -> Path:
    """A repository whose base runs STEPS steps a call and whose head runs head_steps."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    git = lambda *a: subprocess.run(["git", *a], cwd=root, env=env, check=True, capture_output=True)  # noqa: E731
    (root / "benchmarks").mkdir(parents=True)
    (root / "benchmarks" / "model.py").write_text(MODEL_PY)
    test = RUN_TEST.replace('int(os.environ["POWER_STEPS"])', "{steps}")
    (root / "benchmarks" / "test_power_run.py").write_text(test.format(steps=STEPS))
    git("init", "-q", "-b", "main")
    git("add", "-A")
    git("commit", "-qm", "base")
    git("branch", "base")
    (root / "benchmarks" / "test_power_run.py").write_text(test.format(steps=head_steps))
    git("commit", "-qam", "head", "--allow-empty")  # A/A: the head changes nothing
    return root


@pytest.mark.parametrize("hog", [False], ids=["quiet"])
def test_code_versions_power(tmp_path, benchmark, hog):
    """VERSION_TRIALS runs of the recipe's A/B step per change (A/A and +10 % work), VERSION_ROUNDS processes a side."""
    step = _recipe_step()
    out: dict = {}
    start = time.perf_counter()
    for name, head in (("aa", STEPS), ("plus10", STEPS + 2)):
        words = []
        for trial in range(VERSION_TRIALS):
            repo = _version_repo(tmp_path / f"{name}{trial}" / "project", head)
            env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHONPATH"))}
            env.update({k: str(v) for k, v in step["env"].items()}, **ENV)
            env.update(BASE_REF="base", ROUNDS=str(VERSION_ROUNDS), LIMITS="runtime_s:5%", BENCH_ARGS="",
                       PATH=f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}")
            done = subprocess.run(["bash", "-c", step["run"]], cwd=repo, env=env, capture_output=True, text=True,
                                  timeout=900)
            assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
            words.append("slower" if " slower (" in done.stdout else "faster" if " faster (" in done.stdout else "same")
        out[name] = words
    wall = time.perf_counter() - start
    line = (f"code versions (recipe, {VERSION_ROUNDS} processes a side, {2 * VERSION_ROUNDS} per trial, "
            f"{wall:.0f} s): A/A slower {out['aa'].count('slower')}/{VERSION_TRIALS} faster "
            f"{out['aa'].count('faster')}; +10 % slower {out['plus10'].count('slower')}/{VERSION_TRIALS}")
    print("\n" + line)
    benchmark.extra_info.update(code_versions=out, rounds=VERSION_ROUNDS, wall_s=wall)
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
