"""The dispatch pass against known truths: live tensor bytes of graphs with known intermediate sizes, FLOPs equal
to torch.utils.flop_counter.FlopCounterMode on every model of the embedded default, real sessions."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from helpers import BENCH_TEST, write_case
from pytest_s2st.measure.attention_flops import FORMULAS as EXTRA_FORMULAS
from pytest_s2st.measure.record import Metric
from pytest_s2st.measure.tensor_memory import (TENSOR_METHOD, measure_tensor_memory, probe_call, run_probed)
from pytest_s2st.measurement import StageResult, aggregate

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

N = 1000  # float32 elements: 4000 bytes per intermediate


def chain(x):
    y = x * 2      # +4000 (y)
    z = y + 1      # +4000 (y, z alive: 8000)
    del y          # -4000
    w = z * 3      # +4000 (z, w alive: 8000)
    return w       # z dies on return


def test_chain_peak_is_two_intermediates_exactly_every_time():
    x = torch.ones(N)
    peaks = []
    for _ in range(5):
        out, metric = measure_tensor_memory(chain, x)
        assert torch.equal(out, torch.full((N,), 9.0))
        assert metric.method == TENSOR_METHOD and metric.reason is None
        peaks.append(metric.details["peak_bytes"])
    assert peaks == [2 * N * 4] * 5
    assert metric.value == 2 * N * 4 / 2**20 and metric.details["storages"] == 3


def test_matmul_graph_known_sizes():
    # a (64, 32) @ w (32, 128) -> h (64, 128) float32 = 32768 B; relu -> r 32768 B (h still alive);
    # r @ v (128, 16) -> o (64, 16) = 4096 B while h and r are alive: peak 69632 B
    torch.manual_seed(0)
    a, w, v = torch.randn(64, 32), torch.randn(32, 128), torch.randn(128, 16)

    def f(a):
        h = a @ w
        r = torch.relu(h)
        return r @ v

    _, metric = measure_tensor_memory(f, a)
    assert metric.details["peak_bytes"] == 32768 + 32768 + 4096


def test_views_and_weights_are_not_allocations():
    x = torch.ones(N)
    lin = torch.nn.Linear(N, 4)
    with torch.no_grad():
        _, metric = measure_tensor_memory(lambda t: t.view(10, 100).t()[:3], x)
        assert metric.value == 0.0 and metric.details["peak_bytes"] == 0  # a measured 0: only views
        _, metric = measure_tensor_memory(lin, x[None])  # weight.t() is a view of a weight: only the output counts
        assert metric.details["peak_bytes"] == 4 * 4


def test_in_place_resize_counts_the_growth():
    def f(x):
        out = torch.empty(0)
        torch.add(x, 1, out=out)  # resizes out's storage to 4000 B in place
        return out

    _, metric = measure_tensor_memory(f, torch.ones(N))
    assert metric.details["peak_bytes"] == N * 4


def test_numpy_only_is_missing_not_zero():
    out, metric = measure_tensor_memory(lambda a: a * 2, np.ones(3))
    assert list(out) == [2, 2, 2]
    assert metric.value is None and "no torch operation" in metric.reason


def test_one_pass_gives_both_and_the_call_runs_once():
    calls = []

    def f(x):
        calls.append(1)
        return chain(x)

    _, flops, tensors = probe_call(f, (torch.ones(N),), {}, flops=True, tensors=True)
    assert calls == [1] and flops.value == 0 and tensors.details["peak_bytes"] == 8000
    _, flops, tensors = probe_call(f, (torch.ones(N),), {}, flops=False, tensors=True)
    assert flops is None and tensors.details["peak_bytes"] == 8000


def _attention_and_conv(x):
    """mm, addmm, bmm, conv and SDPA with a list-valued argument (conv's stride): every formula path of the probe."""
    torch.manual_seed(0)
    lin, conv = torch.nn.Linear(16, 16), torch.nn.Conv1d(4, 8, 3, stride=2)
    q = lin(x).view(2, 8, 8)
    a = torch.bmm(q, q.transpose(1, 2)) @ torch.ones(8, 8)
    s = torch.nn.functional.scaled_dot_product_attention(q[None], q[None], q[None])
    return conv(q.transpose(1, 2).reshape(2, 4, 16)).sum() + a.sum() + s.sum()


@pytest.mark.parametrize("grad", [False, True], ids=["inference_mode", "autograd"])
def test_both_handler_paths_count_like_flop_counter_mode(grad):
    """The unwrapped handler (used while torch._dynamo is not loaded) and torch's dynamo-disabled wrapper around the
    same handler (used once it is) give FlopCounterMode's counts and the same tensor peak."""
    from pytest_s2st.measure import tensor_memory as tm

    x = torch.randn(8, 16)
    with torch.inference_mode(not grad):
        with FlopCounterMode(display=False) as reference:
            _attention_and_conv(x)
        results = []
        for cls in (tm._probe_class(), tm._fast_class):
            probe = cls()
            probe.start(((x,), {}))
            with probe:
                _attention_and_conv(x)
            results.append((dict(probe.by_op), probe.peak))
    assert results[0] == results[1]
    ours = {str(k): v for k, v in results[0][0].items()}
    # the CPU SDPA kernel has no formula in torch (FlopCounterMode: 0); attention_flops counts it on top
    assert ours.pop("aten._scaled_dot_product_flash_attention_for_cpu") > 0
    assert ours == {str(k): v for k, v in reference.get_flop_counts()["Global"].items()} and reference.get_total_flops() > 0


def test_a_fresh_process_takes_the_unwrapped_handler_and_a_compiled_function_still_counts():
    code = ("import sys, torch\nfrom pytest_s2st.measure.tensor_memory import run_probed\n"
            "f = lambda x: x @ x\nx = torch.ones(4, 4)\n_, p = run_probed(f, (x,), {})\n"
            "print(type(p).__name__, sum(p.by_op.values()), 'torch._dynamo' in sys.modules)\n"
            "g = torch.compile(f, backend='eager')\ng(x)\n_, p = run_probed(g, (x,), {})\n"
            "print(type(p).__name__, sum(p.by_op.values()))")
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["UnwrappedDispatchProbe", "128", "False", "DispatchProbe", "128"]


def test_cascade_takes_the_max_of_its_stages():
    a, b = StageResult("a"), StageResult("b")
    a.metrics["tensor_peak_mib"] = Metric(3.0, TENSOR_METHOD)
    b.metrics["tensor_peak_mib"] = Metric(5.0, TENSOR_METHOD)
    total = aggregate([a, b])["tensor_peak_mib"]
    assert total.value == 5.0 and total.details["over_stages"] == "max"


def _staged_pipelines(staged):
    from pytest_s2st.cases import known_model_types
    from pytest_s2st.config import load_config
    from pytest_s2st.datasets import load_dataset
    from pytest_s2st.pipelines.base import build_pipeline
    from pytest_s2st.tiny import fairseq_tiny

    for path in fairseq_tiny.default_configs(staged):
        cfg = load_config(path, known_model_types=known_model_types())
        pipeline = build_pipeline(cfg.model_type, cfg.stages, device="cpu", config_path=path)
        yield cfg.case_id, pipeline, load_dataset(cfg.general["dataset_path"], "npy")


@pytest.mark.usefixtures("one_thread")
def test_flops_equal_flop_counter_mode_on_every_default_model(staged):
    """Exactly FlopCounterMode's counts, plus the attention kernels it has no formula for, on every stage of every embedded-default fairseq model, every
    sample; and the tensor peak of the same sample is the same byte count run after run."""
    checked = []
    for case_id, pipeline, samples in _staged_pipelines(staged):
        inputs = [pipeline.prepare_sample(s) for s in samples]
        for stage in pipeline.stages:
            stage.forward(inputs[0])  # warm-up, as the runner does
            outputs = []
            for x in inputs:
                reference = FlopCounterMode(display=False)
                with reference:
                    outputs.append(stage.forward(x))
                _, probe = run_probed(stage.forward, (x,), {})
                _, again = run_probed(stage.forward, (x,), {})
                # torch's formulas give torch's counts; the attention kernels torch has no formula for
                # (attention_flops: FlopCounterMode says 0 for them) are counted on top
                ours = {str(k): v for k, v in probe.by_op.items()}
                extra = {k: ours.pop(k) for k in list(ours) if k in EXTRA_FORMULAS}
                assert ours == {str(k): v for k, v in reference.get_flop_counts()["Global"].items()}, (case_id, stage.name)
                assert sum(probe.by_op.values()) == reference.get_total_flops() + sum(extra.values()), (case_id, stage.name)
                assert not probe.uncounted, (case_id, stage.name, dict(probe.uncounted))
                assert probe.peak == again.peak > 0, (case_id, stage.name, probe.peak, again.peak)
            checked.append(f"{case_id}/{stage.name}")
            inputs = [stage.to_next_input(o) for o in outputs]
        pipeline.close()
    assert len(checked) >= 10, checked  # 7 model types, cascades per stage


def saved_rows(pytester) -> dict:
    files = sorted(pytester.path.glob(".benchmarks/*/*.json"))
    assert files, "no benchmark JSON saved"
    return {b["name"]: b["extra_info"]["s2st"] for b in json.loads(files[-1].read_text())["benchmarks"]}


FAST = ["-p", "no:cacheprovider", "--s2st-warmup=0", "--benchmark-disable-gc", "--s2st-memory=off"]


def test_session_shows_saves_budgets_and_compares_tensor_peak(pytester):
    # build_linear: Linear(80 -> hidden, no bias) on (20, 80) float32 under inference_mode: the as_tensor input is
    # the sample's own buffer (pre-existing) and the output (20, hidden) float32 is the one new storage
    case = write_case(pytester.path, "lin", ["build_linear"])
    pytester.makepyfile(test_bench=BENCH_TEST + '''

import pytest

@pytest.mark.s2st_budget(tensor_peak_mib=1e-6)
def test_over(s2st_pipeline, s2st_dataset, s2st_benchmark):
    s2st_benchmark(s2st_pipeline, s2st_dataset)
''')
    result = pytester.runpytest(*FAST, f"--s2st-config={case}", "--benchmark-autosave")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*tensor_peak_mib: measured * > budget 1e-06 (method torch_dispatch_storages)*", "*tensor peak*"])
    row = saved_rows(pytester)["test_inference[callable-lin]"]["metrics"]["tensor_peak_mib"]
    assert row["method"] == TENSOR_METHOD and row["value"] == 20 * 32 * 4 / 2**20

    # twice the hidden size: twice the output bytes -> a tensor-memory regression fails the compared session
    case.write_text(case.read_text().replace("entry: models.py:build_linear", "entry: models.py:build_linear\n  hidden: 64"))
    result = pytester.runpytest(*FAST, f"--s2st-config={case}", "-k", "test_inference", "--benchmark-compare",
                                "--s2st-compare-fail=tensor_peak_mib:1%")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*tensor_peak_mib*"])


def test_tensor_memory_off_is_missing_with_reason(pytester):
    case = write_case(pytester.path, "lin", ["build_linear"])
    pytester.makepyfile(test_bench=BENCH_TEST)
    result = pytester.runpytest(*FAST, f"--s2st-config={case}", "--s2st-tensor-memory=off", "--benchmark-autosave")
    result.assert_outcomes(passed=1)
    row = saved_rows(pytester)["test_inference[callable-lin]"]["metrics"]["tensor_peak_mib"]
    assert row["value"] is None and "--s2st-tensor-memory=off" in row["reason"]


def test_tensor_peak_cells_show_kib_below_one_mib():
    from pytest_s2st.metrics import format_value

    assert format_value("tensor_peak_mib", 35075 / 2**20) == "34.3 KiB"  # a tiny S2T beam search, not "0.0 MiB"
    assert format_value("tensor_peak_mib", 3.25) == "3.2 MiB"
    assert format_value("tensor_peak_mib", 0.0) == "0.0 KiB" and format_value("tensor_peak_mib", None) == "n/a"


def test_sparse_outputs_are_reported_untracked_not_a_crash():
    dense = torch.eye(50)

    def f(x):
        sparse = x.to_sparse()          # no storage: not counted, said in details
        return (sparse * 2).to_dense()  # 50*50 float32 = 10000 B

    out, metric = measure_tensor_memory(f, dense)
    assert torch.equal(out, 2 * dense)
    assert metric.details["untracked_outputs"] >= 1 and metric.details["peak_bytes"] >= 10000
