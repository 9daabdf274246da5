"""-n N vs -n 0 on the same benchmarks: wall time, and how far each case's runtime/sample moved.

    .venv/bin/python tools/xdist_contention.py       # benchmarks/test_inference.py::test_inference, -n 2 vs -n 0
    .venv/bin/python tools/xdist_contention.py --workers 4 --order parallel-first -- --s2st-repeat 3

Runs one pytest session per mode (in the order given, alternating when --rounds > 1), each saving
--benchmark-json, and prints JSON: per mode the session walls; per case the runtime/sample of each
mode (median over rounds) and the ratio parallel/serial, plus FLOPs equality (the deterministic
column must not move). Run it on a quiet machine: the numbers measure the machine as much as the code.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def session(target: str, workers: int, out: Path, extra: list[str]) -> float:
    args = [sys.executable, "-m", "pytest", target, "-q", "-p", "no:cacheprovider", f"--benchmark-json={out}"]
    args += ["-n", str(workers), "--dist", "loadgroup"] if workers else ["-n", "0"]
    t0 = time.perf_counter()
    done = subprocess.run(args + extra, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        sys.exit(f"{' '.join(args)} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}")
    return wall


def rows(path: Path) -> dict[str, dict]:
    out = {}
    for bench in json.loads(path.read_text())["benchmarks"]:
        metrics = bench["extra_info"]["s2st"]["metrics"]
        out[bench["name"]] = {"runtime_s": metrics["runtime_s"]["value"], "flops": metrics.get("flops", {}).get("value")}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="benchmarks/test_inference.py::test_inference")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--order", choices=("serial-first", "parallel-first"), default="serial-first")
    parser.add_argument("extra", nargs="*", help="more pytest arguments (after --)")
    args = parser.parse_args()
    modes = [0, args.workers] if args.order == "serial-first" else [args.workers, 0]
    walls: dict[int, list[float]] = {m: [] for m in modes}
    runtimes: dict[int, dict[str, list[float]]] = {m: {} for m in modes}
    flops: dict[int, dict[str, object]] = {m: {} for m in modes}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for mode in modes if r % 2 == 0 else modes[::-1]:
                out = Path(tmp) / f"n{mode}-{r}.json"
                walls[mode].append(session(args.target, mode, out, args.extra))
                for name, row in rows(out).items():
                    runtimes[mode].setdefault(name, []).append(row["runtime_s"])
                    flops[mode][name] = row["flops"]
    serial, parallel = 0, args.workers
    cases = {}
    for name in sorted(runtimes[serial]):
        s = statistics.median(runtimes[serial][name])
        p = statistics.median(runtimes[parallel].get(name) or [float("nan")])
        cases[name] = {"runtime_s_n0": s, f"runtime_s_n{parallel}": p, "ratio": p / s if s else None,
                       "flops_equal": flops[serial][name] == flops[parallel].get(name)}
    ratios = [c["ratio"] for c in cases.values() if c["ratio"]]
    print(json.dumps({
        "target": args.target, "rounds": args.rounds, "order": args.order,
        "wall_s": {f"n{m}": walls[m] for m in modes},
        "wall_ratio_parallel_over_serial": statistics.median(walls[parallel]) / statistics.median(walls[serial]),
        "runtime_ratio_median": statistics.median(ratios) if ratios else None,
        "runtime_ratio_range": [min(ratios), max(ratios)] if ratios else None,
        "cases": cases,
    }, indent=2))


if __name__ == "__main__":
    main()
