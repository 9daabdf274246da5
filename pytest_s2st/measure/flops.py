"""FLOPs of one call: torch's dispatch-level analytic counter, or PAPI hardware counters.

Missing evidence is a Metric with value None and the reason, never 0. The call is always run exactly once
and its result handed back, whatever the counter managed.
"""
from __future__ import annotations

from typing import Any, Callable

from pytest_s2st.errors import S2STError
from pytest_s2st.measure.record import Metric

METHODS = ("torch", "papi", "off")
TORCH_METHOD = "torch.utils.flop_counter"
TORCH_NOTE = "analytic count of matmul/conv/SDPA ops only (2*m*n*k per matmul); elementwise ops count 0"
PAPI_EVENTS = ("PAPI_SP_OPS", "PAPI_DP_OPS")


def count_flops(method: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, Metric]:
    if method == "torch":
        return _torch_flops(fn, args, kwargs)
    if method == "papi":
        return _papi_flops(fn, args, kwargs)
    if method == "off":
        return fn(*args, **kwargs), Metric.missing("off", "FLOP counting disabled (--s2st-flops=off)")
    raise S2STError(f"--s2st-flops={method}: unknown method, expected one of {', '.join(METHODS)}")


def _torch_flops(fn, args, kwargs) -> tuple[Any, Metric]:
    try:
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils.flop_counter import FlopCounterMode
    except Exception as exc:  # torch absent or broken
        return fn(*args, **kwargs), Metric.missing(TORCH_METHOD, f"torch is not importable ({type(exc).__name__}: {exc})")

    class _OpCounter(TorchDispatchMode):
        """Counts every dispatched torch op, so that 'no torch op ran' is not mistaken for 0 FLOPs."""

        def __init__(self):
            super().__init__()
            self.ops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops += 1
            return func(*args, **(kwargs or {}))

    counter = FlopCounterMode(display=False)
    ops = _OpCounter()
    with counter, ops:
        result = fn(*args, **kwargs)
    if ops.ops == 0:
        return result, Metric.missing(
            TORCH_METHOD, "no torch operation was dispatched; the torch counter only sees torch ops"
        )
    by_op = {str(op): int(n) for op, n in counter.get_flop_counts().get("Global", {}).items()}
    details = {"by_op": by_op, "dispatched_ops": ops.ops, "note": TORCH_NOTE}
    return result, Metric(int(counter.get_total_flops()), TORCH_METHOD, details=details)


def _papi_flops(fn, args, kwargs) -> tuple[Any, Metric]:
    """SP+DP floating-point operations from PAPI preset events, or None with the reason PAPI gave."""
    try:
        from pypapi import events as papi_events
        from pypapi import papi_low as papi
    except Exception as exc:
        reason = f"python-papi is not importable ({type(exc).__name__}: {exc}); install the 'papi' extra"
        return fn(*args, **kwargs), Metric.missing("papi", reason)

    eventset = None
    stage = "library_init"
    try:
        if not papi.is_initialized():
            papi.library_init()
        stage = "create_eventset"
        eventset = papi.create_eventset()
        for name in PAPI_EVENTS:
            stage = f"add_event({name})"
            papi.add_event(eventset, getattr(papi_events, name))
        stage = "start"
        papi.start(eventset)
    except Exception as exc:
        _papi_release(papi, eventset, running=False)
        reason = f"PAPI {stage} failed ({type(exc).__name__}: {exc}){_papi_cpu_state(papi)}"
        return fn(*args, **kwargs), Metric.missing("papi", reason)

    try:
        result = fn(*args, **kwargs)
    except BaseException:
        _papi_release(papi, eventset, running=True)
        raise
    try:
        counts = papi.stop(eventset)
    except Exception as exc:
        _papi_release(papi, eventset, running=False)
        return result, Metric.missing("papi", f"PAPI stop failed ({type(exc).__name__}: {exc})")
    _papi_release(papi, eventset, running=False)
    by_event = {name: int(n) for name, n in zip(PAPI_EVENTS, counts)}
    details = {"by_event": by_event, "note": "hardware counters: whole thread, every FP instruction"}
    return result, Metric(sum(by_event.values()), "papi", details=details)


def _papi_cpu_state(papi) -> str:
    """Why the CPU counters are unusable, as PAPI's perf_event component tells it (empty if it cannot)."""
    try:
        info = papi.get_component_info(0)
        state = f"; PAPI component {info.name}: {info.num_cntrs} hardware counters"
        if info.disabled:
            state += f", disabled ({info.disabled_reason})"
        return state
    except Exception:
        return ""


def _papi_release(papi, eventset, running: bool) -> None:
    """Free the eventset so that a later count can start afresh; errors here change nothing measured."""
    if eventset is None:
        return
    for step in ((papi.stop,) if running else ()) + (papi.cleanup_eventset, papi.destroy_eventset):
        try:
            step(eventset)
        except Exception:
            pass
