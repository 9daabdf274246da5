"""The repository's own timing targets (wall-clock ratios: plugin import vs torch, our session vs upstream,
the measurement passes' costs, the load generator's overhead, runtime false alarms).

Enforced by default, as `make bench` runs them on a quiet machine. On a shared CI runner the neighbours move
clocks by tens of percent, so there the job sets S2ST_TIMING_TARGETS=report: a missed target becomes a
TimingTargetMissed warning (listed in pytest's warnings summary) and the run gates on what is stable there
(FLOPs, instruction counts, tensor bytes, equality with upstream). Nothing here imports torch.

Two kinds of benchmark live here: the MODELS' (test_inference.py, test_service.py: what `make bench` runs)
and opt-in groups (OPT_IN), each a marker deselected unless `-m` names a marker expression: the tool's own
self-benchmarks (`selfbench`: load-generator overhead, memory and transport, the session vs upstream,
measurement cost, import time; `make selfbench`, CI runs it), the compare's false-alarm and detection rates
(`power`, hundreds of processes: `make bench-power`) and the full-size models (`fullsize`: `make bench-full`, `make bench-full-stream`).
Deselected, not skipped: the default run lists how many it left out, and `-m` runs them as they are.
"""
from __future__ import annotations

import os
import warnings

import pytest

MODE_ENV = "S2ST_TIMING_TARGETS"
MODES = ("enforce", "report")


OPT_IN = {  # marker -> the benchmark modules it marks
    "selfbench": {"test_loadgen_overhead", "test_measurement_cost", "test_plugin_import", "test_vs_upstream",
                  "test_client_memory", "test_transport"},  # the tool itself, not a model
    "power": {"test_compare_power", "test_ab_power", "test_versions_power"},  # ~25 + ~10 min: the compare's false-alarm and detection rates
    "fullsize": {"test_full_size", "test_full_size_stream"},  # GB models, minutes per sample
}
DESCRIPTIONS = {
    "selfbench": "benchmarks pytest-s2st itself, not a model (make selfbench: -m selfbench)",
    "power": "the runtime compare's false-alarm and detection rates, hundreds of processes (make bench-power: -m power)",
    "fullsize": "full-size models at the released architectures' sizes (make bench-full: -m fullsize)",
}


def pytest_configure(config):
    for marker, text in DESCRIPTIONS.items():
        config.addinivalue_line("markers", f"{marker}: {text}; deselected unless -m selects")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    opt_in = []
    for item in items:  # before -m selects, so `-m selfbench` / `-m "not selfbench"` see these marks
        module = getattr(item, "module", None)
        name = module.__name__.rsplit(".", 1)[-1] if module is not None else ""
        for marker, modules in OPT_IN.items():
            if name in modules:
                item.add_marker(getattr(pytest.mark, marker))
                opt_in.append(item)
    if config.getoption("markexpr") or not opt_in:  # -m given: pytest's own selection decides
        return
    config.hook.pytest_deselected(items=opt_in)
    items[:] = [item for item in items if item not in opt_in]


class TimingTargetMissed(UserWarning):
    """A wall-clock target missed where targets are reported only."""


@pytest.fixture
def timing_target(request):
    """``timing_target(ok, message)``: fail with the message unless ok (enforce), or warn (report)."""
    mode = os.environ.get(MODE_ENV, "enforce")
    if mode not in MODES:
        pytest.fail(f"{MODE_ENV}={mode!r} (environment): expected one of {', '.join(MODES)}", pytrace=False)

    def check(ok: bool, message: str) -> None:
        if ok:
            return
        if mode == "enforce":
            pytest.fail(f"timing target missed: {message}", pytrace=False)
        warnings.warn(TimingTargetMissed(f"{request.node.nodeid}: timing target missed (reported only, "
                                         f"{MODE_ENV}=report): {message}"), stacklevel=2)

    return check
