"""The power of the two runtime A/Bs at a known load, through pytest as users run them:

- code versions: a git repository whose base runs FORWARDS forwards a call and whose head branches run more
  (A/A, +5 %, +10 %, x2 work); each trial is ``pytest --s2st-ab-base base --s2st-compare-fail=runtime_s:5%`` on a
  head, the changes interleaved trial by trial;
- in one process: one pytest session of TRIALS tests per change, ``s2st_benchmark(head, inputs, baseline=base)``;
- one worker pair against two: A/Bs of 4 pairs x 40 rounds, each pair then judged alone and two by two.

The model is a user-style torch model: ``TransformerEncoderLayer(64, 4, 256)`` on (1, 32, 64), FORWARDS
forwards a call (3-10 ms), one thread. The load is BUSY busy-loop processes beside (1: load ~3; 6: load ~8 with
the benchmark's own processes); /proc/loadavg is read at every trial. The true ratio of each change is measured
in the same window, before and after the trials, in one process: TRUE_PAIRS pairs of TRUE_ROUND_S rounds of own
time (wall less run-queue wait) alternating ABBA, the median of their ratios. With 8 pairs of 1 s wall-time rounds
it had moved by several percent (A/A x0.970-0.973 at load 8); as now it read +10 % as x1.095-1.100 at loads 1 to 7
(docs/records/measurement.md, the machine's rhythm). The work ratio (21/20, 22/20 forwards) is the other yardstick.

    S2ST_POWER_TRIALS=20 .venv/bin/python -m pytest benchmarks/test_versions_power.py -m power -s
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

TRIALS = int(os.environ.get("S2ST_POWER_TRIALS", "20"))
FORWARDS = 20
CHANGES = {"aa": FORWARDS, "plus5": FORWARDS + 1, "plus10": FORWARDS + 2, "x2": 2 * FORWARDS}
LOADS = {"load3": 1, "load8": 6}  # busy loops beside the benchmark
ONLY = [c for c in os.environ.get("S2ST_POWER_CHANGES", "").split(",") if c]  # a subset of CHANGES
TRUE_ROUND_S, TRUE_PAIRS = 0.025, 320  # own time (wall less run-queue wait), as the A/B
ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
HOG = "while True:\n    pass\n"

MODEL_PY = '''
import torch
torch.manual_seed(0)
torch.set_num_threads(1)
LAYER = torch.nn.TransformerEncoderLayer(64, 4, 256, batch_first=True).eval()
FORWARDS = {forwards}
INPUTS = [torch.randn(1, 32, 64) for _ in range(4)]


def make(forwards):
    @torch.inference_mode()
    def model(x):
        for _ in range(forwards):
            x = LAYER(x)
        return x
    return model


model = make(FORWARDS)
'''

BENCH_PY = '''
from model import INPUTS, model


def test_model(s2st_benchmark):
    s2st_benchmark(model, INPUTS)
'''

IN_PROCESS_PY = '''
import pytest
from model import INPUTS, make

CHANGES = {changes!r}


@pytest.mark.parametrize("trial", range({trials}))
@pytest.mark.parametrize("change", list(CHANGES))
def test_ab(s2st_benchmark, change, trial):
    s2st_benchmark(make(CHANGES[change]), INPUTS, baseline=make({forwards}))
'''

TRUE_PY = '''
import json, math, os, sys, time
from model import INPUTS, make

changes, round_s, pairs = json.loads(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
base = make({forwards})
try:
    SCHED = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
except OSError:
    SCHED = None


def waited():
    return int(os.pread(SCHED, 128, 0).split()[1]) / 1e9 if SCHED is not None else 0.0


def timed(model, calls):
    """The round's own time: its wall time less the time this thread waited for a CPU (a neighbour's share)."""
    start = time.perf_counter()
    w0 = waited()
    for i in range(calls):
        model(INPUTS[i % len(INPUTS)])
    w1 = waited()
    return time.perf_counter() - start - (w1 - w0)


for f in (base,):
    timed(f, 20)
per_call = timed(base, 20) / 20
out = {{}}
for name, forwards in changes.items():
    head = make(forwards)
    calls = max(4, math.ceil(round_s / per_call / forwards * {forwards}))
    logs = []
    for p in range(pairs):
        order = (base, head) if p % 2 == 0 else (head, base)
        t = {{id(f): timed(f, calls) for f in order}}
        logs.append(math.log(t[id(head)] / t[id(base)]))
    logs.sort()
    out[name] = math.exp((logs[(pairs - 1) // 2] + logs[pairs // 2]) / 2)
print(json.dumps(out))
'''


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHONPATH"))}
    env.update(ENV, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
    return env


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=root, env=_env(), check=True, capture_output=True)


def version_repo(root: Path, changes: dict[str, int]) -> Path:
    """Branch ``base`` (FORWARDS forwards a call) and one branch per change, each one commit on top of base."""
    root.mkdir(parents=True)
    (root / "model.py").write_text(MODEL_PY.format(forwards=FORWARDS))
    (root / "test_bench.py").write_text(BENCH_PY)
    _git(root, "init", "-q", "-b", "base")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "base")
    for name, forwards in changes.items():
        _git(root, "checkout", "-q", "-b", name, "base")
        (root / "model.py").write_text(MODEL_PY.format(forwards=forwards))
        _git(root, "commit", "-qam", name, "--allow-empty")
    return root


def _load() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def _hogs(n: int) -> list:
    return [subprocess.Popen([sys.executable, "-c", HOG], stdin=subprocess.DEVNULL) for _ in range(n)]


def _stop(procs: list) -> None:
    for p in procs:
        p.kill()
        p.wait(timeout=10)


def true_ratios(root: Path, changes: dict[str, int]) -> dict[str, float]:
    (root / "true_ratio.py").write_text(TRUE_PY.format(forwards=FORWARDS))
    done = subprocess.run([sys.executable, "true_ratio.py", json.dumps(changes), str(TRUE_ROUND_S), str(TRUE_PAIRS)],
                          cwd=root, env=_env(), capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _pytest(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args], cwd=cwd,
                          env=_env(), capture_output=True, text=True, timeout=3600)


def code_versions(root: Path, changes: dict[str, int]) -> dict:
    out = {c: {"slower": 0, "faster": 0, "fail": 0, "ratios": [], "wall_s": [], "load": []} for c in changes}
    for trial in range(TRIALS):
        for name in changes:
            _git(root, "checkout", "-q", name)
            start = time.perf_counter()
            done = _pytest(root, "test_bench.py", "--s2st-ab-base", "base", "--s2st-compare-fail=runtime_s:5%",
                           "--s2st-summary=ab.json")
            out[name]["wall_s"].append(time.perf_counter() - start)
            out[name]["load"].append(_load())
            start = time.perf_counter()  # the plain run of the same head, in the same window: the A/B's cost
            plain = _pytest(root, "test_bench.py")
            out[name].setdefault("plain_s", []).append(time.perf_counter() - start)
            assert plain.returncode == 0, plain.stdout[-3000:]
            assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
            row = json.loads((root / "ab.json").read_text())[0]["s2st"]["ab"]
            out[name].setdefault("trials", []).append(
                {k: row.get(k) for k in ("ratio", "low", "high", "word", "calls_per_round", "stopped", "missing")}
                | {"pairs": [_median_ratio(b, h) for b, h in row.get("rounds_s") or []], "load": out[name]["load"][-1],
                   "rounds_s": row.get("rounds_s"), "rounds_own_s": row.get("rounds_own_s")}
                | ({"output": done.stdout[-1500:]} if row.get("ratio") is None else {}))
            out[name]["ratios"].append(row["ratio"])
            out[name]["slower"] += row["word"] == "slower"
            out[name]["faster"] += row["word"] == "faster"
            out[name]["fail"] += done.returncode == 1
    return out


def _median_ratio(base: list, head: list) -> float:
    logs = sorted(math.log(h / b) for b, h in zip(base, head))
    return math.exp((logs[(len(logs) - 1) // 2] + logs[len(logs) // 2]) / 2)


def in_process(root: Path, changes: dict[str, int]) -> dict:
    (root / "test_in_process.py").write_text(IN_PROCESS_PY.format(changes=changes, trials=TRIALS, forwards=FORWARDS))
    start, load = time.perf_counter(), _load()
    done = _pytest(root, "test_in_process.py", "--s2st-compare-fail=runtime_s:5%", "--benchmark-json=inproc.json",
                   "--s2st-flops=off", "--s2st-tensor-memory=off")
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
    out = {c: {"slower": 0, "faster": 0, "fail": 0, "ratios": [], "words": {}} for c in changes}
    for bench in json.loads((root / "inproc.json").read_text())["benchmarks"]:
        s2st, change = bench["extra_info"]["s2st"], bench["params"]["change"]
        out[change]["ratios"].append(s2st["ab"]["ratio"])
        out[change]["slower"] += s2st["ab"]["word"] == "slower"
        out[change]["faster"] += s2st["ab"]["word"] == "faster"
        out[change]["fail"] += s2st.get("verdict", {}).get("status") == "FAIL"
        out[change]["pairs"] = s2st["ab"]["pairs"]
        words = out[change]["words"]  # every word, "too few rounds" among them (own times that read 0)
        words[s2st["ab"]["word"]] = words.get(s2st["ab"]["word"], 0) + 1
    out["wall_s"], out["load"] = time.perf_counter() - start, [load, _load()]
    return out


def _lines(title: str, result: dict, truth: dict) -> list[str]:
    lines = [title, f"{'change':<8}{'true':>7}{'slower':>8}{'faster':>8}{'FAIL 5%':>9}  ratio min-median-max"
                    "   cost (A/B s / plain s, median)  rounds min-median-max"]
    for name, r in result.items():
        if not isinstance(r, dict) or "ratios" not in r:
            continue
        x = sorted(v for v in r["ratios"] if v is not None) or [math.nan]
        # an A/B with no ratio is a result, not a crash of the summary: counted, with what its record said
        none = [f"{t.get('word')} ({t.get('missing') or t.get('stopped')})" for t in r.get("trials", []) if t.get("ratio") is None]
        cost = ""
        if r.get("plain_s"):
            ab, plain = sorted(r["wall_s"]), sorted(r["plain_s"])
            cost = f"   x{ab[len(ab) // 2] / plain[len(plain) // 2]:.2f} ({ab[len(ab) // 2]:.1f}/{plain[len(plain) // 2]:.1f})"
        rounds = sorted(len(t["rounds_s"][0][0]) for t in r.get("trials", []) if t.get("rounds_s"))
        if rounds:
            cost += f"  {rounds[0]}-{rounds[len(rounds) // 2]}-{rounds[-1]}"
        lines.append(f"{name:<8}{truth.get(name, math.nan):>7.3f}{r['slower']:>8}{r['faster']:>8}{r['fail']:>9}  "
                     f"{x[0]:.3f}-{x[len(x) // 2]:.3f}-{x[-1]:.3f}{cost}"
                     + (f"  {r['words']}" if r.get("words") else "")
                     + (f"  NO RATIO in {len(none)}: {'; '.join(none)}" if none else ""))
    return lines


@pytest.mark.parametrize("mode", ["versions", "in_process"])
@pytest.mark.parametrize("load", list(LOADS))
def test_ab_power_at_load(tmp_path, benchmark, load, mode):
    changes = {c: f for c, f in CHANGES.items() if not ONLY or c in ONLY}
    root = version_repo(tmp_path / "project", changes)
    hogs = _hogs(LOADS[load])
    try:
        time.sleep(3)
        before = true_ratios(root, changes)
        result = (code_versions if mode == "versions" else in_process)(root, changes)
        after = true_ratios(root, changes)
    finally:
        _stop(hogs)
    truth = {c: math.sqrt(before[c] * after[c]) for c in changes}
    loads = [v for r in result.values() if isinstance(r, dict) for v in r.get("load", [])] or result.get("load", [])
    lines = _lines(f"{mode} at {load} ({LOADS[load]} busy loops; load median {sorted(loads)[len(loads) // 2]:.1f}), "
                   f"{TRIALS} trials a change; true ratios before {before}, after {after}", result, truth)
    print("\n" + "\n".join(lines))
    benchmark.extra_info.update(mode=mode, load=load, result=result, truth_before=before, truth_after=after)
    if os.environ.get("S2ST_POWER_OUT"):  # every trial, for a closer look: one file per mode and load
        out = Path(os.environ["S2ST_POWER_OUT"])
        out.with_name(f"{out.stem}-{mode}-{load}{out.suffix}").write_text(json.dumps(benchmark.extra_info, indent=1))
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)


# --- one worker pair against two: every pair of a 4-pair A/B judged on its own --------------------------------------

REPLAY_PAIRS, REPLAY_ROUNDS = 4, 40
DESIGNS = {"2 pairs x 20 (the old default)": [((0, 1), 20), ((2, 3), 20)],
           "1 pair x 20": [((p,), 20) for p in range(REPLAY_PAIRS)],
           "1 pair x 40 (the default of 2026-12-05)": [((p,), 40) for p in range(REPLAY_PAIRS)]}


def replay(sets: list, rounds: int) -> tuple:
    """The verdict the code-version A/B would give on these pairs' recorded own-time rounds, with its early stop
    under a 5 % limit: (change, rounds run, FAIL)."""
    from types import SimpleNamespace

    from pytest_s2st.ab.estimators import DEFAULT
    from pytest_s2st.ab.stopping import StoppingRule

    limit = SimpleNamespace(metric="runtime_s", percent=True, limit=5.0)
    rule = StoppingRule.for_limits(rounds, [limit], DEFAULT, len(sets))
    done = next((n for n in range(1, rounds + 1) if rule.settled(n, [(b[:n], h[:n]) for b, h in sets])), rounds)
    change = DEFAULT.pair_sets([(b[:done], h[:done]) for b, h in sets])
    return change, done, change.ratio is not None and change.ratio > 1.05 and change.word == "slower"


@pytest.mark.parametrize("load", list(LOADS))
def test_one_pair_against_two(tmp_path, benchmark, load):
    """Each trial is one A/B of REPLAY_PAIRS worker pairs and REPLAY_ROUNDS rounds, every round run (a limit in
    seconds never stops early); each pair is then judged on its own and two by two, as the 1-pair and 2-pair designs
    would have judged them (their early stop replayed on the recorded rounds), in rounds of 0.1 s as when it was
    recorded. A process pair's own median over 40 rounds shows how far processes differ."""
    changes = {c: f for c, f in CHANGES.items() if c != "x2" and (not ONLY or c in ONLY)}
    root = version_repo(tmp_path / "project", changes)
    hogs = _hogs(LOADS[load])
    trials = []
    try:
        time.sleep(3)
        before = true_ratios(root, changes)
        for trial in range(TRIALS):
            for name in changes:
                _git(root, "checkout", "-q", name)
                done = _pytest(root, "test_bench.py", "--s2st-ab-base", "base", "--s2st-ab-pairs", str(REPLAY_PAIRS),
                               "--s2st-min-rounds", str(REPLAY_ROUNDS), "--s2st-ab-round-s", "0.1",
                               "--s2st-compare-fail=runtime_s:1000s",
                               "--s2st-summary=ab.json")
                assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
                row = json.loads((root / "ab.json").read_text())[0]["s2st"]["ab"]
                trials.append({"change": name, "load": _load(), "rounds_own_s": row["rounds_own_s"]})
        after = true_ratios(root, changes)
    finally:
        _stop(hogs)
    from pytest_s2st.ab.estimators import DEFAULT

    loads = sorted(t["load"] for t in trials)
    lines = [f"{load}: {TRIALS} trials a change, load {loads[0]:.1f}-{loads[len(loads) // 2]:.1f}-{loads[-1]:.1f}; "
             f"true ratios before {before}, after {after}"]
    for name in changes:
        own = sorted(DEFAULT.pairs(b, h).ratio for t in trials if t["change"] == name for b, h in t["rounds_own_s"])
        lines.append(f"  {name}: each pair's own median: {own[0]:.3f}-{own[len(own) // 2]:.3f}-{own[-1]:.3f}")
    for design, groups in DESIGNS.items():
        lines.append(f"  {design}: change, A/Bs, words, FAIL at 5 %, ratio min-median-max, rounds min-median-max")
        for name in changes:
            judged = [replay([t["rounds_own_s"][p] for p in pairs], rounds)
                      for t in trials if t["change"] == name for pairs, rounds in groups]
            words: dict = {}
            for change, _, _ in judged:
                words[change.word] = words.get(change.word, 0) + 1
            ratios, used = sorted(c.ratio for c, _, _ in judged), sorted(n for _, n, _ in judged)
            k = len(judged)
            lines.append(f"    {name:<7}{k:>4} {words} {sum(f for _, _, f in judged)} "
                         f"{ratios[0]:.3f}-{ratios[k // 2]:.3f}-{ratios[-1]:.3f} {used[0]}-{used[k // 2]}-{used[-1]}")
    print("\n" + "\n".join(lines))
    benchmark.extra_info.update(load=load, trials=trials, truth_before=before, truth_after=after)
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
