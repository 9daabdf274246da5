"""The callable path without a config: s2st_benchmark(my_model, inputs) on lists, arrays and iterables; bad
inputs are one line; a project's own test that falls back to the embedded demo cases is warned about."""
from __future__ import annotations

import json

import pytest

from helpers import BENCH_TEST, write_case

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

FAST = ["-p", "no:cacheprovider", "--s2st-warmup=0", "--benchmark-disable-gc"]

OWN_TESTS = '''
import numpy as np
import torch

W = torch.ones(80, 32)

def my_model(x):                       # one input in, one output out
    with torch.inference_mode():
        return torch.as_tensor(x) @ W

def test_list(s2st_benchmark):
    s2st_benchmark(my_model, [np.ones((20, 80), np.float32)] * 3)

def test_array(s2st_benchmark):        # one input per row of the first axis
    s2st_benchmark(my_model, np.ones((4, 20, 80), np.float32))

def test_generator(s2st_benchmark):
    s2st_benchmark(my_model, (np.ones((10, 80), np.float32) for _ in range(2)))
'''


def test_own_callable_without_config(pytester):
    pytester.makepyfile(test_mine=OWN_TESTS)
    result = pytester.runpytest(*FAST, "--benchmark-json=out.json", "-W", "error::UserWarning")
    result.assert_outcomes(passed=3)
    rows = {b["name"]: b["extra_info"]["s2st"] for b in json.loads((pytester.path / "out.json").read_text())["benchmarks"]}
    assert set(rows) == {"test_list", "test_array", "test_generator"}
    # (frames, 80) @ (80, 32): 2 * frames * 80 * 32 FLOPs per input, by hand
    assert rows["test_list"]["metrics"]["flops"]["value"] == 2 * 20 * 80 * 32
    assert rows["test_array"]["metrics"]["flops"]["value"] == 2 * 20 * 80 * 32
    assert rows["test_generator"]["metrics"]["flops"]["value"] == 2 * 10 * 80 * 32
    assert [rows[n]["samples"] for n in ("test_list", "test_array", "test_generator")] == [3, 4, 2]
    assert rows["test_list"]["model_type"] == "callable" and rows["test_list"]["case"] == "test_list"
    result.stdout.fnmatch_lines(["*s2st: runtime per sample*", "test_list *"])


@pytest.mark.parametrize("call, message", [
    ("s2st_benchmark(lambda x: x, 5)", "inputs must be a list, an array (one input per row) or an iterable of inputs, got int"),
    ("s2st_benchmark(lambda x: x, {'a': 1})", "got dict"),
    ("s2st_benchmark(lambda x: x, [])", "no inputs (an empty list)"),
    ("s2st_benchmark(lambda x: x, np.array(1.0))", "inputs is a 0-d array"),
    ("s2st_benchmark(42, [1, 2])", "the model must be a callable taking one input (or s2st_pipeline), got int"),
])
def test_bad_call_is_one_line(pytester, call, message):
    pytester.makepyfile(test_bad=f"import numpy as np\n\ndef test_bad(s2st_benchmark):\n    {call}\n")
    result = pytester.runpytest(*FAST)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*test_bad.py::test_bad: s2st_benchmark(model, inputs): *{message}*"])
    assert "Traceback" not in result.stdout.str()


DEFAULT_CONFTEST = '''
from pathlib import Path
import pytest_s2st.defaults

# the embedded default, made small for the test: one callable case instead of the tiny models
pytest_s2st.defaults.default_config_paths = lambda: [Path(__file__).parent / "lin.yaml"]
'''


def test_own_test_on_embedded_default_is_warned(pytester):
    write_case(pytester.path, "lin", ["build_linear"])
    pytester.makeconftest(DEFAULT_CONFTEST)
    pytester.makepyfile(test_bench=BENCH_TEST)
    result = pytester.runpytest_subprocess(*FAST)
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines([
        "*S2STDefaultCasesWarning: test_inference runs on the 1 embedded demo case(s) (callable-lin), not on your "
        "model: no --s2st-config (nor ini s2st_config) was given.*s2st_benchmark(my_model, inputs)*"])


def test_explicit_config_is_not_warned(pytester):
    cfg = write_case(pytester.path, "lin", ["build_linear"])
    pytester.makeconftest(DEFAULT_CONFTEST)
    pytester.makepyfile(test_bench=BENCH_TEST)
    result = pytester.runpytest_subprocess(*FAST, f"--s2st-config={cfg}")
    result.assert_outcomes(passed=1)
    assert "S2STDefaultCasesWarning" not in result.stdout.str()
