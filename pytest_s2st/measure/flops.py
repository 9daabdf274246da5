"""FLOPs of one call: torch's dispatch-level analytic counter, or PAPI hardware counters.

Missing evidence is a Metric with value None and the reason, never 0. The call is always run exactly once
and its result handed back, whatever the counter managed.
"""
from __future__ import annotations

from typing import Any, Callable

from pytest_s2st.errors import S2STError
from pytest_s2st.measure.record import Metric
from pytest_s2st.measure.tensor_memory import TORCH_METHOD, TORCH_NOTE, probe_call  # torch-free at import

METHODS = ("torch", "torch-strict", "papi", "off")
PAPI_EVENTS = ("PAPI_SP_OPS", "PAPI_DP_OPS")


def count_flops(method: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, Metric]:
    if method in ("torch", "torch-strict"):
        result, metric = _torch_flops(fn, args, kwargs)
        return result, strict_flops(metric) if method == "torch-strict" else metric
    if method == "papi":
        return _papi_flops(fn, args, kwargs)
    if method == "off":
        return fn(*args, **kwargs), Metric.missing("off", "FLOP counting disabled (--s2st-flops=off)")
    raise S2STError(f"--s2st-flops={method}: unknown method, expected one of {', '.join(METHODS)}")


def uncounted_text(details: dict) -> str:
    """'aten.x x3, aten.y x1': the matmul-class ops a torch count left out, with their calls."""
    return ", ".join(f"{op} x{calls}" for op, calls in (details.get("uncounted") or {}).items())


def strict_flops(metric: Metric) -> Metric:
    """--s2st-flops=torch-strict: a partial count is no count (n/a, naming what was left out)."""
    if metric.value is None or not metric.details.get("partial"):
        return metric
    return Metric.missing(metric.method, f"partial count under --s2st-flops=torch-strict: no FLOP formula for "
                                         f"{uncounted_text(metric.details)} (calls)")


def _torch_flops(fn, args, kwargs) -> tuple[Any, Metric]:
    result, metric, _ = probe_call(fn, args, kwargs, flops=True, tensors=False)
    return result, metric


def _papi_flops(fn, args, kwargs) -> tuple[Any, Metric]:
    """SP+DP floating-point operations from PAPI preset events, or None with the reason PAPI gave."""
    try:
        from pypapi import events as papi_events  # lazy: optional
        from pypapi import papi_low as papi  # lazy: optional
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
