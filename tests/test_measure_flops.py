"""count_flops against known truths: Linear stacks (2*m*n*k each), calls with no torch op, PAPI without a PMU."""
from __future__ import annotations

import sys
import types

import numpy as np
import pytest
import torch

from pytest_s2st.errors import S2STError
from pytest_s2st.measure.flops import TORCH_METHOD, count_flops

torch.set_num_threads(1)


def linear_stack() -> torch.nn.Sequential:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(24, 40, bias=False),
        torch.nn.ReLU(),
        torch.nn.Linear(40, 12, bias=True),
        torch.nn.Tanh(),
        torch.nn.Linear(12, 7, bias=True),
    )


def analytic_linear_flops(model: torch.nn.Module, rows: int) -> int:
    """2*m*n*k per Linear for an input of `rows` rows: m=rows, k=in_features, n=out_features (bias adds ignored)."""
    return sum(2 * rows * m.in_features * m.out_features for m in model.modules() if isinstance(m, torch.nn.Linear))


@pytest.mark.parametrize("shape", [(9, 24), (3, 5, 24)])
def test_linear_stack_exact(shape):
    model = linear_stack()
    x = torch.randn(*shape)
    rows = int(np.prod(shape[:-1]))
    with torch.no_grad():
        out, metric = count_flops("torch", model, x)
        expected_out = model(x)
    assert torch.equal(out, expected_out)
    assert metric.method == TORCH_METHOD and metric.reason is None
    assert metric.value == analytic_linear_flops(model, rows)
    assert sum(metric.details["by_op"].values()) == metric.value
    assert "elementwise" in metric.details["note"]


def test_batched_matmul_exact():
    a, b = torch.randn(4, 6, 10), torch.randn(4, 10, 3)
    out, metric = count_flops("torch", torch.matmul, a, b)
    assert out.shape == (4, 6, 3)
    assert metric.value == 2 * 4 * 6 * 10 * 3


def test_counts_one_call_only():
    model = linear_stack()
    calls = []

    def fn(x):
        calls.append(1)
        return model(x)

    _, metric = count_flops("torch", fn, torch.randn(2, 24))
    assert calls == [1] and metric.value == analytic_linear_flops(model, 2)


def test_elementwise_only_torch_counts_zero_with_note():
    # A real measured 0 under this counter's definition (ops ran, none of them matmul/conv/SDPA): said in details.
    out, metric = count_flops("torch", lambda t: (t * 2 + 1).relu(), torch.ones(8))
    assert float(out.sum()) == 24.0
    assert metric.value == 0 and metric.details["dispatched_ops"] >= 3
    assert "elementwise ops count 0" in metric.details["note"]


def test_pure_numpy_is_missing_not_zero():
    a = np.arange(12.0).reshape(3, 4)
    out, metric = count_flops("torch", lambda m: m @ m.T, a)
    np.testing.assert_array_equal(out, a @ a.T)
    assert metric.value is None
    assert metric.reason == "no torch operation was dispatched; the torch counter only sees torch ops"


def test_torch_not_importable_is_missing_with_reason(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.flop_counter", None)
    out, metric = count_flops("torch", lambda: "ran")
    assert out == "ran"
    assert metric.value is None and "torch is not importable" in metric.reason


def _papi_works_here() -> bool:
    from pypapi import events, papi_low

    if not papi_low.is_initialized():
        papi_low.library_init()
    es = papi_low.create_eventset()
    try:
        papi_low.add_event(es, events.PAPI_DP_OPS)
        return True
    except Exception:
        return False
    finally:
        papi_low.cleanup_eventset(es)
        papi_low.destroy_eventset(es)


def test_papi_real_library_here():
    calls = []

    def work():
        calls.append(1)
        a = np.ones((64, 64))
        return float((a @ a).sum())

    out, metric = count_flops("papi", work)
    assert out == 64.0**3 and calls == [1]
    assert metric.method == "papi"
    if _papi_works_here():  # a machine that exposes FP counters: a real, positive count
        assert metric.value > 0 and set(metric.details["by_event"]) == {"PAPI_SP_OPS", "PAPI_DP_OPS"}
    else:  # these VMs: no PMU, add_event fails with PAPI_EMISC -> null with PAPI's reason, never 0
        assert metric.value is None
        assert "PAPI" in metric.reason and "add_event" in metric.reason
    # A second count must start afresh (the failed/used eventset was released).
    _, again = count_flops("papi", work)
    assert (again.value is None) == (metric.value is None) and again.reason == metric.reason


def test_papi_not_installed_is_missing_with_reason(monkeypatch):
    for name in ("pypapi", "pypapi.papi_low", "pypapi.events"):
        monkeypatch.setitem(sys.modules, name, None)
    out, metric = count_flops("papi", lambda x: x + 1, 1)
    assert out == 2
    assert metric.value is None and metric.method == "papi"
    assert "python-papi is not importable" in metric.reason


def _fake_papi(monkeypatch, counts, log):
    """A stand-in for pypapi whose counters work, to check the success path's arithmetic and clean-up."""
    low = types.ModuleType("pypapi.papi_low")
    low.is_initialized = lambda: 1
    low.library_init = lambda: log.append("init")
    low.create_eventset = lambda: 7
    low.add_event = lambda es, code: log.append(("add", es, code))
    low.start = lambda es: log.append(("start", es))
    low.stop = lambda es: log.append(("stop", es)) or list(counts)
    low.cleanup_eventset = lambda es: log.append(("cleanup", es))
    low.destroy_eventset = lambda es: log.append(("destroy", es))
    events = types.ModuleType("pypapi.events")
    events.PAPI_SP_OPS, events.PAPI_DP_OPS = 101, 102
    pkg = types.ModuleType("pypapi")
    pkg.papi_low, pkg.events = low, events
    for name, mod in (("pypapi", pkg), ("pypapi.papi_low", low), ("pypapi.events", events)):
        monkeypatch.setitem(sys.modules, name, mod)


def test_papi_success_path_sums_sp_and_dp(monkeypatch):
    log = []
    _fake_papi(monkeypatch, [300, 45], log)
    out, metric = count_flops("papi", lambda: "ran")
    assert out == "ran"
    assert metric.value == 345 and metric.details["by_event"] == {"PAPI_SP_OPS": 300, "PAPI_DP_OPS": 45}
    assert log == [("add", 7, 101), ("add", 7, 102), ("start", 7), ("stop", 7), ("cleanup", 7), ("destroy", 7)]


def test_papi_exception_in_fn_propagates_and_releases(monkeypatch):
    log = []
    _fake_papi(monkeypatch, [1, 1], log)

    def boom():
        raise RuntimeError("model failed")

    with pytest.raises(RuntimeError, match="model failed"):
        count_flops("papi", boom)
    assert log[-3:] == [("stop", 7), ("cleanup", 7), ("destroy", 7)]


def test_off_runs_fn_once_and_reports_missing():
    calls = []
    out, metric = count_flops("off", lambda: calls.append(1) or "ran")
    assert out == "ran" and calls == [1]
    assert metric.value is None and metric.reason == "FLOP counting disabled (--s2st-flops=off)"


def test_unknown_method_is_one_line_error():
    with pytest.raises(S2STError) as err:
        count_flops("fvcore", lambda: None)
    assert "--s2st-flops=fvcore" in str(err.value) and "\n" not in str(err.value)


# --- known truths for the call, the record and every PAPI stage (added from a mutation-testing pass) ------


def test_torch_counter_passes_args_and_kwargs_and_prints_nothing(capsys):
    a, b = torch.ones(2, 3), torch.ones(3, 4)
    out, metric = count_flops("torch", lambda x, y, *, scale: torch.mm(x, y) * scale, a, b, scale=2.0)
    assert torch.equal(out, torch.full((2, 4), 6.0))
    assert metric.value == 2 * 2 * 3 * 4
    assert capsys.readouterr().out == ""  # display=False: no table on stdout


def test_ops_inside_the_counter_keep_their_keyword_arguments():
    # aten.zeros gets dtype as a keyword: the op counter must forward it, or the model computes something else.
    out, metric = count_flops("torch", lambda n: torch.zeros(n, dtype=torch.float64), 3)
    assert out.dtype == torch.float64 and metric.value == 0
    out, _ = count_flops("torch", lambda t: t.sum(dim=0, keepdim=True), torch.ones(2, 3))
    assert out.shape == (1, 3) and torch.equal(out, torch.full((1, 3), 2.0))


def test_dispatched_ops_are_counted_one_each():
    # mul, add, relu: three aten ops
    _, metric = count_flops("torch", lambda t: (t * 2 + 1).relu(), torch.ones(8))
    assert metric.details["dispatched_ops"] == 3


def test_missing_torch_records_name_method_and_exception(monkeypatch):
    out, metric = count_flops("torch", lambda: "ran")  # no torch op ran
    assert out == "ran" and metric.method == TORCH_METHOD and metric.value is None
    monkeypatch.setitem(sys.modules, "torch.utils.flop_counter", None)
    out, metric = count_flops("torch", lambda a, *, b: a + b, 1, b=2)
    assert out == 3 and metric.method == TORCH_METHOD
    assert metric.reason.startswith("torch is not importable (ModuleNotFoundError: ")


def test_off_and_unknown_method_records():
    out, metric = count_flops("off", lambda a, *, b: a * b, 6, b=7)
    assert out == 42 and metric.method == "off" and metric.to_dict() == {
        "value": None, "method": "off", "reason": "FLOP counting disabled (--s2st-flops=off)"}
    with pytest.raises(S2STError) as err:
        count_flops("fvcore", lambda: None)
    assert str(err.value) == "--s2st-flops=fvcore: unknown method, expected one of torch, papi, off"


def test_papi_not_installed_passes_args_and_names_the_exception(monkeypatch):
    for name in ("pypapi", "pypapi.papi_low", "pypapi.events"):
        monkeypatch.setitem(sys.modules, name, None)
    out, metric = count_flops("papi", lambda a, *, b: a - b, 5, b=2)
    assert out == 3
    assert metric.reason.startswith("python-papi is not importable (ModuleNotFoundError: ")


def test_papi_success_record_and_call_arguments(monkeypatch):
    log = []
    _fake_papi(monkeypatch, [7, 0], log)
    out, metric = count_flops("papi", lambda a, *, b: a + b, 1, b=2)
    assert out == 3
    assert metric.to_dict() == {"value": 7, "method": "papi", "details": {
        "by_event": {"PAPI_SP_OPS": 7, "PAPI_DP_OPS": 0},
        "note": "hardware counters: whole thread, every FP instruction"}}


def _failing_papi(monkeypatch, fail: str, log, disabled: str | None = "no PMU"):
    """The fake PAPI with one stage raising; get_component_info describes the CPU component."""
    _fake_papi(monkeypatch, [1, 2], log)
    low = sys.modules["pypapi.papi_low"]
    if fail == "library_init":
        low.is_initialized = lambda: 0

    def boom(*_):
        log.append(("raise", fail))
        raise RuntimeError(f"{fail} broke")

    setattr(low, fail, boom)
    low.get_component_info = lambda i: types.SimpleNamespace(
        name=f"perf_event#{i}", num_cntrs=0, disabled=1 if disabled else 0, disabled_reason=disabled)
    return low


@pytest.mark.parametrize("fail, stage", [("library_init", "library_init"), ("create_eventset", "create_eventset"),
                                         ("add_event", "add_event(PAPI_SP_OPS)"), ("start", "start")])
def test_papi_setup_failure_names_the_stage_runs_fn_once_and_releases(monkeypatch, fail, stage):
    log = []
    _failing_papi(monkeypatch, fail, log)
    calls = []
    out, metric = count_flops("papi", lambda a, *, b: calls.append(1) or a + b, 1, b=2)
    assert out == 3 and calls == [1]
    assert metric.value is None and metric.method == "papi"
    assert metric.reason == (f"PAPI {stage} failed (RuntimeError: {fail} broke); "
                             "PAPI component perf_event#0: 0 hardware counters, disabled (no PMU)")
    released = [e for e in log if e[0] in ("stop", "cleanup", "destroy")]
    if fail in ("library_init", "create_eventset"):
        assert released == []  # no eventset was made: nothing to free
    else:  # an eventset exists but never started: freed, not stopped
        assert released == [("cleanup", 7), ("destroy", 7)]


def test_papi_cpu_state_without_a_disabled_reason_and_when_it_cannot_tell(monkeypatch):
    log = []
    low = _failing_papi(monkeypatch, "start", log, disabled=None)
    _, metric = count_flops("papi", lambda: None)
    assert metric.reason == "PAPI start failed (RuntimeError: start broke); PAPI component perf_event#0: 0 hardware counters"

    def no_info(i):
        raise RuntimeError("no component")

    low.get_component_info = no_info
    _, metric = count_flops("papi", lambda: None)
    assert metric.reason == "PAPI start failed (RuntimeError: start broke)"


def test_papi_stop_failure_keeps_the_result_and_releases_without_a_second_stop(monkeypatch):
    log = []
    _failing_papi(monkeypatch, "stop", log)
    out, metric = count_flops("papi", lambda: "ran")
    assert out == "ran"
    assert metric.to_dict() == {"value": None, "method": "papi", "reason": "PAPI stop failed (RuntimeError: stop broke)"}
    assert [e for e in log if e[0] in ("raise", "cleanup", "destroy")] == [
        ("raise", "stop"), ("cleanup", 7), ("destroy", 7)]
