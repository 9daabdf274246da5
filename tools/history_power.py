"""The history gate's false-alarm rate and power at a known load, measured with real pytest sessions.

For each scenario a fresh history of RUNS sessions of a small model (CPU work and a Linear layer in proportion to a
width): A/A (one width throughout) and a +10 % step half way. Beside LOAD busy loops, each session appends with
--s2st-history; then every run's own-time runtime is judged against the runs before it (the window threshold,
t at 0.999, the value's own uncertainty weighed, as --s2st-history-fail does) and the change points are found.
Usage: python tools/history_power.py LOAD [RUNS]"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from pytest_s2st.history.judge import judge
from pytest_s2st.history.store import SeriesKey, open_store

MODEL = '''
import torch

torch.manual_seed(0)
layer = torch.nn.Linear(80, {width})
frames = torch.randn(50, 80)


@torch.inference_mode()
def model(x):
    total = 0
    for i in range({width} * 1200):
        total += i
    layer(frames)
    return x


def test_model(s2st_benchmark):
    s2st_benchmark(model, [1, 2, 3, 4])
'''
KEY = SeriesKey("test_bench.py::test_model", "total", "runtime_s", "own mean")


def history(widths: list[int], folder: Path) -> list:
    db = folder / "h.sqlite"
    for width in widths:
        (folder / "test_bench.py").write_text(MODEL.format(width=width))
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--s2st-history={db}",
                        "--s2st-min-rounds=20", "test_bench.py"], cwd=folder, capture_output=True, check=True)
    with open_store(db) as store:
        return judge(KEY, store.series(KEY))


def main() -> None:
    load, runs = int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 30
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(load)]
    try:
        for name, widths in (("A/A", [100] * runs), ("+10 % step", [100] * (runs * 2 // 3) + [110] * (runs // 3))):
            with tempfile.TemporaryDirectory() as tmp:
                judged = history(widths, Path(tmp))
            step = runs * 2 // 3 if name != "A/A" else None
            alerts = [a.index for a in judged.alerts]
            worse = [c.index for c in judged.changes if c.worse]
            print(f"load {os.getloadavg()[0]:.1f} ({load} busy loops) {name}: {len(judged.values)} runs; window alerts "
                  f"at {alerts} ({len(alerts)} of {len(judged.values) - 5} runs judged); worse change points at "
                  f"{worse}" + (f"; the step is at {step}" if step else ""), flush=True)
    finally:
        for p in busy:
            p.kill()


if __name__ == "__main__":
    main()
