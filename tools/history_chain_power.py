"""The chained history against the absolute one on a real 30-commit history, at a known load.

A git repository of a small model (CPU work and a Linear layer, in proportion to a factor) gets COMMITS commits:
no-ops (a comment) but for a +10 % step at commit 10 and a +2 % x 5 creep at commits 20-24. On every commit after
the first, beside LOAD busy loops, one pytest session runs as docs/ci/history.yml does: `pytest --s2st-ab-base
HEAD~1 --s2st-history=DB`, so each run keeps the head's absolute runtime and its paired ratio against its parent.
Then both series are judged (pytest_s2st.history.judge): the absolute mean and own mean (binary segmentation) and
the chained paired ratios. Each session's load (1-minute average) and the A/B's own ratio are printed; the
sessions' JSON documents (--benchmark-json) are kept in OUT for a re-import.
Usage: python tools/history_chain_power.py LOAD OUT [COMMITS]"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pytest_s2st.history.judge import absolute_key, judge
from pytest_s2st.history.records import PAIRED
from pytest_s2st.history.store import SeriesKey, open_store

MODEL = '''
import torch

torch.manual_seed(0)
FACTOR = {factor!r}
layer = torch.nn.Linear(80, 100)
frames = torch.randn(50, 80)


@torch.inference_mode()
def model(x):
    total = 0
    for i in range(int(120_000 * FACTOR)):
        total += i
    layer(frames)
    return x
'''
BENCH = '''
from model import model


def test_model(s2st_benchmark):
    s2st_benchmark(model, [1, 2, 3, 4])
'''
NAME = "test_bench.py::test_model"


def factors(commits: int) -> list[float]:
    """The true runtime factor of each commit (1-based): +10 % at 10, then +2 % at each of 20-24."""
    out, level = [], 1.0
    for i in range(1, commits + 1):
        if i == 10:
            level *= 1.10
        if 20 <= i <= 24:
            level *= 1.02
        out.append(level)
    return out


def git(root: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "b@example.com",
           "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "b@example.com"}
    return subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True, text=True).stdout


def main() -> None:
    load, out = int(sys.argv[1]), Path(sys.argv[2])
    commits = int(sys.argv[3]) if len(sys.argv) > 3 else 30
    out.mkdir(parents=True, exist_ok=True)
    db = out / "history.sqlite"
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(load)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            repo = Path(tmp)
            (repo / "test_bench.py").write_text(BENCH)
            git(repo, "init", "-q", "-b", "main")
            previous = None
            for i, factor in enumerate(factors(commits), start=1):
                (repo / "model.py").write_text(MODEL.format(factor=factor) + f"# commit {i}\n")
                git(repo, "add", "-A")
                what = "no-op" if factor == previous else f"x{factor / previous:.3f}" if previous else "first"
                git(repo, "commit", "-qm", f"commit {i}: {what}")
                previous = factor
                if i == 1:
                    continue
                started = time.monotonic()
                done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                       "--s2st-ab-base", "HEAD~1", f"--s2st-history={db}",
                                       f"--benchmark-json={out / f'run-{i:02d}.json'}", "test_bench.py"],
                                      cwd=repo, env=env, capture_output=True, text=True, timeout=900)
                saved = json.loads((out / f"run-{i:02d}.json").read_text()) if done.returncode in (0, 1) else {}
                ab = (saved.get("benchmarks") or [{}])[0].get("extra_info", {}).get("s2st", {}).get("ab", {})
                print(f"commit {i:2d} ({what:6s}) load {os.getloadavg()[0]:4.1f}: A/B x{ab.get('ratio') or 0:.3f} "
                      f"[{ab.get('low') or 0:.3f}, {ab.get('high') or 0:.3f}] {ab.get('word')} "
                      f"({time.monotonic() - started:.0f} s, exit {done.returncode})", flush=True)
    finally:
        for p in busy:
            p.kill()
    report(db, commits)


def report(db: Path, commits: int) -> None:
    paired = SeriesKey(NAME, "total", "runtime_s", PAIRED)
    with open_store(db, create=False) as store:
        for key in (SeriesKey(NAME, "total", "runtime_s", "mean"), SeriesKey(NAME, "total", "runtime_s", "own mean"),
                    paired):
            anchor = absolute_key(key)
            judged = judge(key, store.series(key), anchor=store.series(anchor) if anchor else None)
            runs = [e.run.subject or "" for e in judged.valued]
            found = [f"{'worse' if c.worse else 'better'} x{c.ratio:.3f} at {runs[c.index].split(':')[0]}"
                     + (f"-{runs[c.last].split(':')[0].split()[-1]}" if c.last not in (None, c.index) else "")
                     for c in judged.changes]
            print(f"{key.statistic:13s} {len(judged.values)} runs: {'; '.join(found) or 'no change point'}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "report":
        report(Path(sys.argv[2]), 30)
    else:
        main()
