"""The results history at scale: 1,000 commits x 50 benchmarks (3 parts x 5-6 metrics each) in SQLite, then the
trend site; prints the database size, the append and site times, the page weights and how long headless Chromium
takes to render the heaviest page. Usage: python tools/history_scale.py [RUNS] [BENCHMARKS] [FOLDER]"""
from __future__ import annotations

import math
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

from pytest_s2st.history.records import Document, Point, Run, Verdict
from pytest_s2st.history.site import write_site
from pytest_s2st.history.store import open_store

METRICS = [("runtime_s", "mean"), ("rss_rise_mib", ""), ("peak_delta_mib", ""), ("tensor_peak_mib", ""), ("flops", ""),
           ("bleu", "")]
PARTS = ["total", "stage1", "stage2"]


def build(db: Path, runs: int, benchmarks: int) -> float:
    rng = random.Random(0)
    start = time.perf_counter()
    with open_store(db) as store:
        for i in range(runs):
            run = Run(key=f"run-{i}", run_time=f"2026-01-01T00:00:00+00:00#{i:06d}", machine="ci", commit=f"{i:040x}",
                      branch="main", commit_time=f"2026-01-01T00:00:00+00:00#{i:06d}")
            points = []
            for b in range(benchmarks):
                for part in PARTS:
                    for metric, stat in METRICS:
                        if metric == "bleu" and part != "total":
                            continue
                        v = (1.1 if i > runs // 2 else 1.0) * (b + 1) * math.exp(rng.gauss(0, 0.01))
                        points.append(Point(f"tests/test_m.py::test_{b}", part, metric, v, stat, v * 0.98, v * 1.02, 5))
            store.append(Document(run, points, [Verdict(f"tests/test_m.py::test_{b}", "gate", "PASS")
                                                for b in range(benchmarks)]))
    return time.perf_counter() - start


def main() -> None:
    runs, benchmarks = (int(a) for a in (sys.argv[1:3] if len(sys.argv) > 2 else (1000, 50)))
    folder = Path(sys.argv[3] if len(sys.argv) > 3 else "/tmp/s2st-history-scale")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    db = folder / "history.sqlite"
    took = build(db, runs, benchmarks)
    print(f"append: {runs} runs x {benchmarks} benchmarks in {took:.1f} s; database {db.stat().st_size / 2**20:.1f} MiB")
    start = time.perf_counter()
    with open_store(db) as store:
        pages = write_site(store, folder / "site")
    took = time.perf_counter() - start
    sizes = sorted(p.stat().st_size for p in pages)
    print(f"site: {len(pages)} pages in {took:.1f} s; page sizes median {sizes[len(sizes) // 2] / 1024:.0f} KiB, "
          f"largest {sizes[-1] / 1024:.0f} KiB; all {sum(sizes) / 2**20:.1f} MiB")
    browser = shutil.which("chromium") or shutil.which("google-chrome")
    if browser:
        heaviest = max(pages, key=lambda p: p.stat().st_size)
        start = time.perf_counter()
        subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", f"--screenshot={folder / 'shot.png'}",
                        "--window-size=1100,900", heaviest.resolve().as_uri()], capture_output=True, timeout=300)
        print(f"chromium: the largest page rendered in {time.perf_counter() - start:.1f} s (process start included)")


if __name__ == "__main__":
    main()
