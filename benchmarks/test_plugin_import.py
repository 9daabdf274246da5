"""What the plugin costs when unused: the import time of pytest_s2st.plugin in a fresh interpreter.

Measured against a bare interpreter start and against `import torch` in the same run (ratios, not
absolute times: the machines are shared and noisy).
"""
import statistics
import subprocess
import sys
import time

import pytest

ROUNDS = 5


def _import_seconds(module: str) -> float:
    code = f"import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)" if module else "print(0.0)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


@pytest.fixture(scope="module")
def torch_import_s() -> float:
    return statistics.median(_import_seconds("torch") for _ in range(3))


def test_plugin_import_time(benchmark, torch_import_s, timing_target):
    samples = []

    def run():
        samples.append(_import_seconds("pytest_s2st.plugin"))

    start = time.perf_counter()
    benchmark.pedantic(run, rounds=ROUNDS, iterations=1)
    plugin_s = statistics.median(samples)
    benchmark.extra_info.update(plugin_import_s=plugin_s, torch_import_s=torch_import_s,
                                ratio_to_torch=plugin_s / torch_import_s, method="perf_counter around import in a fresh interpreter",
                                wall_s=time.perf_counter() - start)
    # target: the plugin costs a small fraction of what torch would (torch alone ~1.3 s here)
    timing_target(plugin_s < 0.25 * torch_import_s,
                  f"plugin import {plugin_s:.3f} s >= 0.25x torch's {torch_import_s:.3f} s")
