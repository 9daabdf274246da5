"""Service benchmarks: the reference server around each speech-producing case, at every concurrency level.

    pytest benchmarks/test_service.py --s2st-concurrency 1,4,8 [--s2st-plot plots/]

TTFA, RTF, latency percentiles, throughput and error rate per level; every request's record and WAV
kept under --s2st-evidence-dir.
"""
import pytest


@pytest.mark.s2st_models("TTS", "Qwen3TTS")
def test_service(s2st_service, s2st_workload, s2st_concurrency, s2st_load):
    s2st_load(s2st_service, s2st_workload, concurrency=s2st_concurrency)
