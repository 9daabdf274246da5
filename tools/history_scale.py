"""The results history at scale, through the commands users run: RUNS saved runs (pytest-benchmark JSON, as
--benchmark-json / --benchmark-autosave write them) of BENCHMARKS benchmarks each -- inference rows made from a
real code-version A/B row (a stage, every metric with its method and interval, the paired ratio, the rounds) and
service rows (one concurrency level each, every statistic) -- imported with `s2st-history import`, then the site
with `s2st-history site`. Prints the series per run, the files' size, the import and site times (whole processes,
with the load they ran at), the page weights, and how long headless Chromium takes for the heaviest page.
Usage: python tools/history_scale.py TEMPLATE.json [RUNS] [BENCHMARKS] [FOLDER]
TEMPLATE.json: any saved run of a code-version A/B (e.g. tools/history_chain_power.py's run-02.json)."""
from __future__ import annotations

import copy
import json
import math
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

from pytest_s2st.metrics import BY_NAME, SERVICE_METRICS

SERVICE_EVERY = 8  # one benchmark in 8 is a service level (c1, c4, c16 in turn)


def _scaled(metrics: dict, factor: float, exact: float) -> None:
    """Measured metrics times ``factor`` (noise included); deterministic counts times ``exact`` (no noise)."""
    for name, m in metrics.items():
        if isinstance(m.get("value"), (int, float)) and m.get("value"):
            m["value"] *= exact if BY_NAME[name].exact else factor


def _service_row(b: int, level: int, rng: random.Random, factor: float) -> dict:
    summary: dict = {}
    for metric in SERVICE_METRICS:
        base = (b + 1) * factor * math.exp(rng.gauss(0, 0.02))
        summary[metric.name] = ({s: base * (1 + i * 0.3) for i, s in enumerate(metric.stats)} if metric.stats
                                else base)
    return {"group": None, "name": f"test_service[c{level}]", "fullname": f"tests/test_service.py::test_{b}[c{level}]",
            "params": {"c": level}, "param": f"c{level}", "options": {}, "stats": {"mean": 1.0, "rounds": 1},
            "extra_info": {"s2st_service": {"concurrency": level, "summary": summary,
                                            "verdict": {"status": "PASS", "reasons": []}}}}


def documents(template: dict, runs: int, benchmarks: int):
    row = template["benchmarks"][0]
    rng = random.Random(0)
    for i in range(runs):
        doc = {k: copy.deepcopy(v) for k, v in template.items() if k != "benchmarks"}
        when = f"2026-01-{1 + i // 40:02d}T{(i % 40) // 2:02d}:{(i % 2) * 30:02d}:00+00:00"
        doc["datetime"] = when
        doc["commit_info"] = {**template.get("commit_info", {}), "id": f"{i:040x}", "time": when, "branch": "main",
                              "dirty": False, "subject": f"commit {i}"}
        factor = 1.1 if i >= runs // 2 else 1.0  # a +10 % step half way
        rows = []
        for b in range(benchmarks):
            if b % SERVICE_EVERY == SERVICE_EVERY - 1:
                rows.append(_service_row(b, (1, 4, 16)[(b // SERVICE_EVERY) % 3], rng, factor))
                continue
            new = copy.deepcopy(row)
            new["name"], new["fullname"] = f"test_{b}", f"tests/test_m.py::test_{b}"
            s2st = new["extra_info"]["s2st"]
            noise = factor * (b + 1) * math.exp(rng.gauss(0, 0.01))
            _scaled(s2st["metrics"], noise, factor * (b + 1))
            for stage in s2st.get("stages") or []:
                _scaled(stage["metrics"], noise, factor * (b + 1))
            s2st["stages"] = (s2st.get("stages") or []) + [copy.deepcopy(st) | {"name": "stage2"}
                                                           for st in s2st.get("stages") or []]
            if isinstance(s2st.get("ab"), dict):
                s2st["ab"].update(ratio=(1.1 if i == runs // 2 else 1.0) * math.exp(rng.gauss(0, 0.003)),
                                  base_sha=f"{i - 1:040x}")
                s2st["ab"]["low"], s2st["ab"]["high"] = s2st["ab"]["ratio"] * 0.995, s2st["ab"]["ratio"] * 1.005
            rows.append(new)
        doc["benchmarks"] = rows
        yield doc


def timed(argv: list[str]) -> tuple[float, str]:
    load = os.getloadavg()[0]
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True)
    took = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"{argv}: exit {done.returncode}: {done.stderr[-2000:]}")
    return took, f"load {load:.1f} -> {os.getloadavg()[0]:.1f}"


def main() -> None:
    template = json.loads(Path(sys.argv[1]).read_text())
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    benchmarks = int(sys.argv[3]) if len(sys.argv) > 3 else 50
    folder = Path(sys.argv[4] if len(sys.argv) > 4 else "/tmp/s2st-history-scale")
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "runs").mkdir(parents=True)
    for i, doc in enumerate(documents(template, runs, benchmarks)):
        (folder / "runs" / f"{i:05d}.json").write_text(json.dumps(doc))
    size = sum(p.stat().st_size for p in (folder / "runs").iterdir())
    print(f"{runs} saved runs x {benchmarks} benchmarks: {size / 2**20:.0f} MiB of JSON")
    db = folder / "history.sqlite"
    cli = [sys.executable, "-m", "pytest_s2st.cli.history", "--db", str(db)]
    took, load = timed(cli + ["import", str(folder / "runs")])
    import sqlite3

    with sqlite3.connect(db) as conn:
        series = conn.execute("SELECT COUNT(*) FROM (SELECT DISTINCT benchmark, part, metric, statistic FROM "
                              "s2st_points)").fetchone()[0]
    print(f"import: {took:.1f} s ({load}); {series} series, all in every run: "
          f"database {db.stat().st_size / 2**20:.0f} MiB")
    took, load = timed(cli + ["site", str(folder / "site")])
    pages = [p for p in (folder / "site").rglob("*.html")]
    sizes = sorted(p.stat().st_size for p in pages)
    print(f"site: {len(pages)} pages in {took:.1f} s ({load}); page sizes median {sizes[len(sizes) // 2] / 1024:.0f} "
          f"KiB, largest {sizes[-1] / 1024:.0f} KiB; all {sum(sizes) / 2**20:.1f} MiB")
    browser = shutil.which("chromium") or shutil.which("google-chrome")
    if browser:
        heaviest = max(pages, key=lambda p: p.stat().st_size)
        start = time.perf_counter()
        subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", f"--screenshot={folder / 'shot.png'}",
                        "--window-size=1100,900", heaviest.resolve().as_uri()], capture_output=True, timeout=300)
        print(f"chromium: the largest page ({heaviest.name}) rendered in {time.perf_counter() - start:.1f} s "
              "(process start included)")


if __name__ == "__main__":
    main()
