"""compare_upstream reads get_metrics.py's printed lines as upstream's core.py writes them, and the upstream
baseline imports what upstream imports (librosa only for Griffin-Lim)."""
from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from pytest_s2st import compare_upstream as cu

# core.py's f-strings: S2UT.compute_metrics prints "vocoder_metrics = 0" when the config has no vocoder
S2UT_NO_VOCODER = (
    "metric_type = benchmark_run_time s2u_metrics = 0.0125 \t vocoder_metrics = 0\n"
    "metric_type = max_memory s2u_metrics = 430.5 \t vocoder_metrics = 0\n"
    "metric_type = count_flops s2u_metrics = 3436544 \t vocoder_metrics = 0\n"
    "run_time = 0.0125sec \tmemory = 430.5MiB \tflops = 3436544\n")
S2UT_VOCODER = (
    "metric_type = benchmark_run_time s2u_metrics = 0.5 \t vocoder_metrics = 0.0625\n"
    "metric_type = count_flops s2u_metrics = 3436544 \t vocoder_metrics = 4447904\n"
    "run_time = 0.5625sec \tmemory = 480.8MiB \tflops = 7884448\n")


def test_s2ut_without_a_vocoder_has_no_vocoder_stage():
    flops, _ = cu.parse_upstream(S2UT_NO_VOCODER)
    assert flops == {"total": 3436544.0, "s2u": 3436544.0}
    assert cu.parse_upstream_runtime(S2UT_NO_VOCODER) == {"total": 0.0125, "s2u": 0.0125}
    ours = {"S2UT": {"total": 3436544.0, "s2u": 3436544.0}}  # a one-stage pipeline: its stage and total
    result = cu.compare_flops(ours, {"S2UT": flops})
    assert result["S2UT"]["equal"] and not result["S2UT"]["differences"]


def test_runtime_per_stage_and_its_ratio():
    assert cu.parse_upstream_runtime(S2UT_VOCODER) == {"total": 0.5625, "s2u": 0.5, "vocoder": 0.0625}
    theirs = [cu.SideResult(1, 1, {}, {}, runtime_s={"S2UT": cu.parse_upstream_runtime(S2UT_VOCODER)})]
    ours = [cu.SideResult(1, 1, {}, {}, runtime_s={"S2UT": {"total": 0.45, "s2u": 0.4, "vocoder": 0.05}})]
    got = cu.compare_runtime(ours, theirs)["S2UT"]
    assert got["s2u"]["ratio"] == pytest.approx(0.8) and got["vocoder"]["ratio"] == pytest.approx(0.8)
    assert got["total"]["ours_s"] == 0.45 and got["total"]["upstream_s"] == 0.5625


@pytest.mark.skipif(importlib.util.find_spec("fairseq") is None, reason="needs the fairseq extra")
def test_the_upstream_baseline_imports_no_librosa_without_griffin_lim():
    code = ("import sys\nfrom pytest_s2st.pipelines import fairseq_upstream as u\nu.install_shims()\n"
            "from examples.speech_to_speech.benchmarking import get_metrics\n"
            "print(sorted(m for m in ('librosa', 'numba') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"
