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
    assert "elementwise" in metric.details["note"] and "count 0 by convention" in metric.details["note"]


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
    assert str(err.value) == "--s2st-flops=fvcore: unknown method, expected one of torch, torch-strict, papi, off"


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


# --- attention: every kernel torch dispatches to, against the count by hand --------------------------------------
# Truth for attention on (B, Hq, L, E) queries, (B, Hkv, S, E) keys, (B, Hkv, S, Ev) values: QKᵀ is 2·B·Hq·L·S·E,
# AV is 2·B·Hq·L·S·Ev (GQA: every query head does the work). Causal counts the full L×S square (torch's
# flop_counter convention for flash/efficient), so it is the same number.

def attention_truth(b, hq, length, s, e, ev):
    return 2 * b * hq * length * s * e + 2 * b * hq * length * s * ev


SDPA_CASES = [  # (B, Hq, Hkv, L, S, E, Ev, causal)
    (1, 4, 4, 50, 50, 16, 16, False),   # the 640,000
    (3, 2, 2, 7, 11, 8, 8, False),      # cross-attention, L != S
    (2, 8, 2, 9, 9, 16, 16, True),      # GQA as Qwen3 uses it (8 query heads over 2 key/value heads), causal
    (2, 4, 4, 13, 13, 8, 24, True),     # value width != key width
]


@pytest.mark.parametrize("b,hq,hkv,length,s,e,ev,causal", SDPA_CASES)
def test_sdpa_on_cpu_counts_the_flash_kernel_by_formula(b, hq, hkv, length, s, e, ev, causal):
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = torch.randn(b, hq, length, e), torch.randn(b, hkv, s, e), torch.randn(b, hkv, s, ev)
    call = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=hq != hkv)
    out, metric = count_flops("torch", call, q, k, v)
    truth = attention_truth(b, hq, length, s, e, ev)
    assert metric.value == truth and "partial" not in metric.details, metric.details
    # the CPU flash kernel takes equal key and value widths; torch sends the others to the math path (bmm)
    assert list(metric.details["by_op"]) == (["aten._scaled_dot_product_flash_attention_for_cpu"] if e == ev
                                             else ["aten.bmm"])
    if (b, hq, length, e) == (1, 4, 50, 16):
        assert truth == 640_000
    # the math backend decomposes into bmm, which torch's own formulas count: the same number
    if not causal or length == s:
        with sdpa_kernel([SDPBackend.MATH]):
            math_out, math_metric = count_flops("torch", call, q, k, v)
        torch.testing.assert_close(math_out, out, atol=1e-5, rtol=1e-4)
        assert math_metric.value == truth, math_metric.details["by_op"]


def test_sdpa_backward_on_cpu_counted_as_torch_counts_the_cuda_backward():
    import torch.nn.functional as F

    b, h, length, e = 2, 3, 10, 8
    q, k, v = (torch.randn(b, h, length, e, requires_grad=True) for _ in range(3))

    def step(q, k, v):
        F.scaled_dot_product_attention(q, k, v).sum().backward()

    _, metric = count_flops("torch", step, q, k, v)
    # forward QKᵀ, AV; backward: QKᵀ recomputed, dP = dO·Vᵀ, dV = Pᵀ·dO, dQ = dS·K, dK = dSᵀ·Q: 7 matmuls of 2·b·h·L·L·E
    assert metric.value == 7 * 2 * b * h * length * length * e, metric.details["by_op"]
    assert "aten._scaled_dot_product_flash_attention_for_cpu_backward" in metric.details["by_op"]


def mha_truth(lq, lk, e, ffn=0):
    """nn.MultiheadAttention: q, k, v and out projections (2·rows·E·E each) + 4·L·S·E attention, per item."""
    return sum(2 * a * e * e * 2 + 2 * c * e * e * 2 + 4 * a * c * e for a, c in zip(lq, lk)) + sum(4 * a * e * ffn for a in lq)


@pytest.mark.parametrize("self_attention", [True, False])
def test_multihead_attention_fast_path_counts_like_its_decomposition(self_attention):
    torch.manual_seed(0)
    e, heads, b, length, s = 40, 4, 2, 30, 30 if self_attention else 17
    mha = torch.nn.MultiheadAttention(e, heads, batch_first=True).eval()
    x, kv = torch.randn(b, length, e), torch.randn(b, s, e)
    call = (lambda x: mha(x, x, x, need_weights=False)[0]) if self_attention else (
        lambda x: mha(x, kv, kv, need_weights=False)[0])
    with torch.no_grad():
        _, fast = count_flops("torch", call, x)
    mha.train()  # the composite path: linear/bmm/SDPA parts, counted op by op
    _, slow = count_flops("torch", call, x)
    truth = mha_truth([length] * b, [s] * b, e)
    assert slow.value == truth, slow.details["by_op"]
    assert fast.value == truth, fast.details["by_op"]
    if self_attention:  # the fused kernel is what eval reaches (the 0)
        assert list(fast.details["by_op"]) == ["aten._native_multi_head_attention"]


def test_transformer_encoder_fast_path_on_nested_tensors_counts_true_lengths():
    torch.manual_seed(0)
    e, ffn = 32, 64
    layer = torch.nn.TransformerEncoderLayer(e, 4, dim_feedforward=ffn, batch_first=True)
    encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=True).eval()
    x = torch.randn(3, 10, e)
    pad = torch.zeros(3, 10, dtype=torch.bool)
    pad[1, 6:], pad[2, 3:] = True, True  # lengths 10, 6, 3: the fast path packs them into a nested tensor
    import warnings

    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's prototype warning for nested tensors
        _, nested = count_flops("torch", lambda x: encoder(x, src_key_padding_mask=pad), x)
        _, dense = count_flops("torch", encoder, x)
    assert list(nested.details["by_op"]) == ["aten._transformer_encoder_layer_fwd"]
    assert nested.value == 2 * mha_truth([10, 6, 3], [10, 6, 3], e, ffn) == 659_712
    assert dense.value == 2 * mha_truth([10] * 3, [10] * 3, e, ffn)


def test_matmul_arithmetic_without_a_formula_is_partial_never_a_silent_zero():
    from pytest_s2st.report import missing_notes, render_table
    from pytest_s2st.rows import Row

    a, x = torch.randn(6, 5), torch.randn(5)
    out, metric = count_flops("torch", lambda a, x: torch.mv(a, x) + (a @ a.T).sum(), a, x)
    assert metric.details["uncounted"] == {"aten.mv": 1} and metric.details["partial"] is True
    assert metric.value == 2 * 6 * 5 * 6  # the mm is counted; the value is a lower bound
    _, strict = count_flops("torch-strict", torch.mv, a, x)
    assert strict.value is None and "aten.mv x1" in strict.reason and "torch-strict" in strict.reason
    row = Row("m", "m", {"flops": metric.to_dict()})
    assert ">=360 partial" in render_table([row])[2]
    assert missing_notes([row]) == ["m: flops partial (a lower bound): no FLOP formula for aten.mv x1 (calls)"]


def test_nested_operands_of_shape_formulas_are_uncounted_not_miscounted():
    import torch.nn.functional as F

    qs = [torch.randn(l, 4, 8) for l in (5, 7)]  # (L_i, H, E) items
    q = torch.nested.nested_tensor(qs, layout=torch.jagged).transpose(1, 2)
    _, metric = count_flops("torch", lambda q: F.scaled_dot_product_attention(q, q, q), q)
    assert metric.details.get("partial") is True and metric.details["uncounted"], metric.details


def test_the_arithmetic_rule_names_contractions_and_spares_elementwise_ops():
    from pytest_s2st.measure.attention_flops import has_arithmetic

    for op in ("aten.mv", "aten.dot", "aten._int_mm", "aten.mkldnn_convolution", "aten._thnn_fused_lstm_cell",
               "aten.linalg_solve_ex", "aten._fft_r2c", "aten._triton_scaled_dot_attention", "npu.npu_fusion_attention",
               "aten.mkldnn_rnn_layer", "aten._cdist_forward", "aten.slow_conv_transpose2d"):
        assert has_arithmetic(op), op
    for op in ("aten.add", "aten.mul", "aten._softmax", "aten.native_layer_norm", "aten.sum", "aten.copy_",
               "aten.index_select", "aten.embedding", "aten.mean", "aten.gelu", "aten.cat", "aten.bernoulli_"):
        assert not has_arithmetic(op), op


def test_npu_fusion_attention_layouts_count_like_sdpa():
    from pytest_s2st.measure.attention_flops import npu_fusion_attention

    b, n, s, d = 2, 4, 9, 16
    truth = attention_truth(b, n, s, s, d, d)
    t = torch.empty(b, n, s, d)
    assert npu_fusion_attention(t, t, t, n, "BNSD") == truth
    assert npu_fusion_attention(t.transpose(1, 2), t.transpose(1, 2), t.transpose(1, 2), n, "BSND") == truth
    bsh = torch.empty(b, s, n * d)
    assert npu_fusion_attention(bsh, bsh, bsh, n, "BSH") == truth
    assert npu_fusion_attention(bsh.transpose(0, 1), bsh.transpose(0, 1), bsh.transpose(0, 1), n, "SBH") == truth
    gqa_kv = torch.empty(b, s, 2 * d)  # 2 key/value heads under 4 query heads
    assert npu_fusion_attention(bsh, gqa_kv, gqa_kv, n, "BSH") == truth
    assert npu_fusion_attention(torch.empty(s, n, d), t, t, n, "TND") is None  # lengths elsewhere: uncounted


def test_bilinear_is_counted_and_other_trilinear_calls_are_uncounted():
    """nn.Bilinear reaches aten._trilinear, which torch's registry has no formula for: it counted 0 without a
    note. Its F.bilinear pattern is counted as ATen computes it (x1·W_o, then a dot with x2, per output unit);
    any other _trilinear call is listed uncounted (partial), never a silent 0."""
    layer = torch.nn.Bilinear(5, 7, 3)
    x1, x2 = torch.randn(4, 5), torch.randn(4, 7)
    with torch.no_grad():
        out, metric = count_flops("torch", layer, x1, x2)
    assert torch.allclose(out, layer(x1, x2))
    assert metric.value == 2 * 4 * 3 * 7 * (5 + 1) and not metric.details.get("partial"), metric.details
    assert list(metric.details["by_op"]) == ["aten._trilinear"]
    a = torch.randn(2, 3)
    _, other = count_flops("torch", lambda t: torch._trilinear(t, t, t, [], [], [], [1]), a)
    assert other.details["uncounted"] == {"aten._trilinear": 1} and other.details["partial"] is True
