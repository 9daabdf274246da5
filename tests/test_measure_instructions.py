"""The instruction count (measure/instructions.py): real valgrind children on real callables.

Known truths: a pure-Python loop whose iterations each cost the same adds a count proportional to
the iterations; the same call counted in two separate children (as two CI runs) agrees to 1e-5.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings as hsettings, strategies as st

from helpers import make_dataset
from pytest_s2st.cases import load_case
from pytest_s2st.measure import instructions as instr
from pytest_s2st.measure.instructions import InstructionPass, Unavailable, count_pipeline, read_dumps

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

FAST = ["-p", "no:cacheprovider", "--s2st-warmup=1", "--benchmark-disable-gc"]

WORK_PY = '''
import numpy as np

def build_loop(n=1000):
    """Each iteration costs the same: range yields ints past the small-int cache (each one allocated),
    xor with a cached small int."""
    def forward(x):
        s = 0
        for i in range(1000, 1000 + n):
            s ^= i & 255
        return x
    return forward

def build_matmul(size=48, reps=3):
    a = np.random.default_rng(0).standard_normal((size, size))
    def forward(x):
        y = a
        for _ in range(reps):
            y = np.tanh(y @ a)
        return float(y.sum())
    return forward

def build_linear(hidden=32):
    import torch
    torch.manual_seed(0)
    layer = torch.nn.Linear(80, hidden)
    def forward(sample):
        with torch.inference_mode():
            return layer(torch.as_tensor(sample["net_input"]["src_tokens"], dtype=torch.float32)).sum().item()
    return forward

def build_boom():
    def forward(x):
        raise RuntimeError("boom in the forward")
    return forward
'''


def write(root: Path, name: str, stages: list[tuple[str, str]]) -> Path:
    (root / "work.py").write_text(WORK_PY)
    if not (root / "data.npy").exists():
        make_dataset(root / "data.npy", n=2, frames=4)
    body = f"general:\n  name: {name}\n  model_type: callable\n  dataset_path: data.npy\n"
    for i, (factory, extra) in enumerate(stages, start=1):
        body += f"stage{i}:\n  entry: work.py:{factory}\n  stage_name: s{i}\n" + extra
    path = root / f"{name}.yaml"
    path.write_text(body)
    return path


def case_dict(path: Path) -> dict:
    return load_case(path, {}, lambda key: None).to_dict()


SAMPLE = {"id": 0, "net_input": {"src_tokens": [[0.01] * 80] * 4, "src_lengths": [4]}}


def test_loop_iterations_add_a_proportional_count(tmp_path):
    n = 4000
    path = write(tmp_path, "loops", [("build_loop", f"  n: {k * n}\n") for k in (0, 1, 3)])
    counts = count_pipeline(case_dict(path), SAMPLE, warmup=1)
    empty, one, three = (counts[f"s{i}"].value for i in range(1, 4))
    per_iter = [(one - empty) / n, (three - one) / (2 * n)]
    assert per_iter[0] > 20, per_iter
    assert abs(per_iter[0] - per_iter[1]) <= 1e-3 * per_iter[0], per_iter  # linear in the iterations
    # the forward alone: an empty loop's call (a frame, a range, a return: ~2-3k Ir in CPython) is what is
    # left, not the ctypes round trips of the client requests (toggle_ir, ~3k) on top
    assert 0 < empty < 4000 and empty < counts["s1"].details["forward_ir"] - 2000, counts["s1"].details
    m = counts["s1"]
    assert m.method == "callgrind" and m.details["forward_ir"] - m.details["toggle_ir"] == m.value
    assert "CALLGRIND_ZERO_STATS" in m.details["how"] and m.details["sample"] == 0


def test_the_same_call_counted_in_two_children_agrees(tmp_path):
    """A tiny torch model then a numpy workload, each counted by two separate valgrind children."""
    path = write(tmp_path, "twice", [("build_linear", ""), ("build_matmul", "")])
    first = count_pipeline(case_dict(path), SAMPLE, warmup=1)
    second = count_pipeline(case_dict(path), SAMPLE, warmup=1)
    for name in ("s1", "s2"):
        a, b = first[name].value, second[name].value
        assert a > 10_000 and b > 10_000, (name, a, b)
        # a clean clone's CI run counted the torch model 324,759 and 323,379 Ir in two children (0.4 %)
        assert abs(a - b) / a < 1e-2, (name, a, b)


def test_pass_says_why_it_cannot_count(tmp_path):
    stage = type("S", (), {"name": "s1"})()
    assert InstructionPass("off", None, "cpu").measure(stage, [1]) is None
    m = InstructionPass("callgrind", None, "cpu").measure(stage, [1])
    assert m.value is None and "no s2st_case" in m.reason
    m = InstructionPass("callgrind", {"x": 1}, "cuda").measure(stage, [1])
    assert m.value is None and m.reason == "instructions are counted on cpu only (device is cuda)"
    m = InstructionPass("cachegrind", {"x": 1}, "cpu").measure(stage, [1])
    assert m.value is None and "unknown method" in m.reason


def test_missing_valgrind_is_one_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(Unavailable, match=r"^valgrind is not on PATH \(Debian/Ubuntu: apt-get install valgrind\)$"):
        count_pipeline({}, SAMPLE)


def test_missing_compiler_is_one_reason(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "valgrind").symlink_to(shutil.which("valgrind"))
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with pytest.raises(Unavailable, match="no C compiler"):
        count_pipeline({}, SAMPLE)


def test_shim_is_built_once(tmp_path):
    first = instr.build_shim(tmp_path)
    stamp = first.stat().st_mtime_ns
    assert instr.build_shim(tmp_path) == first and first.stat().st_mtime_ns == stamp
    assert first.parent == tmp_path and first.name.startswith("callgrind-shim-")


def test_child_failure_and_timeout_are_one_line(tmp_path):
    path = write(tmp_path, "boom", [("build_boom", "")])
    with pytest.raises(Unavailable) as err:
        count_pipeline(case_dict(path), SAMPLE, warmup=1)
    # a callable stage's failure names the user's own file:line (pipelines/callable.py)
    assert str(err.value).startswith("the valgrind child exited 2: S2STError: stage 's1': the model raised "
                                     "RuntimeError: boom in the forward (at ")
    assert str(err.value).endswith("work.py:34)") and "\n" not in str(err.value)
    with pytest.raises(Unavailable, match=r"^the valgrind child ran past 0.5 s and was killed$"):
        count_pipeline(case_dict(path), SAMPLE, timeout_s=0.5)
    unpicklable = {"f": lambda: None}
    with pytest.raises(Unavailable, match="cannot be handed to the valgrind child"):
        count_pipeline(case_dict(path), unpicklable)


def test_read_dumps_reads_labelled_totals(tmp_path):
    (tmp_path / "callgrind.out.1").write_text(
        "version: 1\ndesc: Trigger: Client Request: s2st:0:forward\nevents: Ir\nsummary: 99\nfn=x\n1 5\ntotals: 123\n")
    (tmp_path / "callgrind.out.2").write_text("desc: Trigger: Program termination\nevents: Ir\ntotals: 7\n")
    (tmp_path / "callgrind.out.3").write_text("desc: Trigger: Client Request: a b\nevents: Dr Ir\ntotals: 1 2\n")
    assert read_dumps(tmp_path) == {"s2st:0:forward": 123, "a b": 2}
    (tmp_path / "callgrind.out.4").write_text("desc: Trigger: Client Request: bad\nevents: Ir\ntotals: x\n")
    with pytest.raises(Unavailable, match="unreadable Ir total 'x'"):
        read_dumps(tmp_path)


@hsettings(max_examples=200, deadline=None)
@given(st.binary(max_size=400), st.sampled_from([b"", b"desc: Trigger: Client Request: L\n", b"events: Ir\n"]))
def test_read_dumps_fuzz(tmp_path_factory, data, prefix):
    folder = tmp_path_factory.mktemp("dump")
    (folder / "callgrind.out.1").write_bytes(prefix + data)
    try:
        out = read_dumps(folder)
    except Unavailable as exc:
        assert "\n" not in str(exc)
    else:
        assert all(isinstance(k, str) and isinstance(v, int) for k, v in out.items())


# ------------------------------------------------------------------ plugin sessions (pytester)


def saved(pytester) -> dict:
    return json.loads((pytester.path / "out.json").read_text())["benchmarks"][0]["extra_info"]["s2st"]


def test_session_counts_budgets_and_shows_method(pytester):
    cfg = write(pytester.path, "mm", [("build_matmul", ""), ("build_loop", "  n: 3000\n")])
    pytester.makepyfile(test_bench='''
import pytest

@pytest.mark.s2st_budget(instructions=1000)
def test_inference(s2st_pipeline, s2st_dataset, s2st_benchmark):
    s2st_benchmark(s2st_pipeline, s2st_dataset)
''')
    result = pytester.runpytest(*FAST, f"--s2st-config={cfg}", "--s2st-instructions=callgrind",
                                "--benchmark-json=out.json")
    result.assert_outcomes(failed=1)
    s2st = saved(pytester)
    total = s2st["metrics"]["instructions"]
    stages = [st["metrics"]["instructions"]["value"] for st in s2st["stages"]]
    assert all(v > 1000 for v in stages) and total["value"] == sum(stages)
    assert total["method"] == "callgrind" and total["details"]["over_stages"] == "sum"
    result.stdout.fnmatch_lines(["*instructions: measured * > budget 1000 (method callgrind)*"])
    result.stdout.fnmatch_lines(["*instructions*", "*callgrind*"])


def test_session_off_by_default_and_missing_valgrind_inconclusive(pytester, monkeypatch):
    cfg = write(pytester.path, "mm", [("build_matmul", "")])
    pytester.makepyfile(test_bench='''
import pytest

@pytest.mark.s2st_budget(instructions=10**12)
def test_inference(s2st_pipeline, s2st_dataset, s2st_benchmark):
    s2st_benchmark(s2st_pipeline, s2st_dataset)
''')
    result = pytester.runpytest(*FAST, f"--s2st-config={cfg}", "--benchmark-json=out.json")
    assert result.ret == 0 and result.parseoutcomes() == {"inconclusive": 1}
    assert "instructions" not in saved(pytester)["metrics"]  # off: not measured, not a 0
    result.stdout.fnmatch_lines(["*s2st INCONCLUSIVE*", "*test_inference*",
                                 "*instructions: no value to check against budget 1e+12 (not measured)"])

    bin_dir = pytester.path / "nobin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    result = pytester.runpytest(*FAST, f"--s2st-config={cfg}", "--benchmark-json=out.json",
                                "--s2st-instructions=callgrind")
    assert result.ret == 0 and result.parseoutcomes() == {"inconclusive": 1}
    m = saved(pytester)["metrics"]["instructions"]
    assert m["value"] is None and m["reason"].startswith("valgrind is not on PATH")
    result.stdout.fnmatch_lines(["*instructions n/a: valgrind is not on PATH*", "*s2st INCONCLUSIVE*",
                                 "*test_inference*", "*instructions: no value to check*(valgrind is not on PATH*"])
    result = pytester.runpytest(*FAST, f"--s2st-config={cfg}", "--s2st-instructions=cachegrind")
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*--s2st-instructions*must be one of off, callgrind*"])


# ------------------------------------------------------------------ the callable path: s2st_benchmark(fn, inputs)

LOOPS_PY = '''
import functools
import itertools


def loop_fixed(x, n):
    """n iterations that each cost the same and allocate nothing (small ints are cached), then the input back.
    No allocation: the count of a loop that frees and allocates an int per iteration depends on the state of
    CPython's allocator pools that the child's imports left (2.5 % between the two paths here)."""
    s = 0
    for _ in itertools.repeat(None, n):
        s ^= 1
    return x


def build_loop(n=1000):
    return functools.partial(loop_fixed, n=n)
'''
N = 2000
CALLABLES_TEST = f'''
import functools
import os

from loops import loop_fixed


class Loop:  # an object of a class of the test module: the child imports the module by name
    def __init__(self, n):
        self.n = n

    def __call__(self, x):
        return loop_fixed(x, self.n)


def test_case(s2st_pipeline, s2st_dataset, s2st_benchmark):  # the config path: the child builds the case
    s2st_benchmark(s2st_pipeline, s2st_dataset)


def test_partial_2n(s2st_dataset, s2st_benchmark):  # a case in the session, but the test's own callable counted
    s2st_benchmark(functools.partial(loop_fixed, n={2 * N}), s2st_dataset)


def test_partial_3n(s2st_dataset, s2st_benchmark):
    s2st_benchmark(functools.partial(loop_fixed, n={3 * N}), s2st_dataset)


def test_object(s2st_dataset, s2st_benchmark):
    s2st_benchmark(Loop({N}), s2st_dataset)


def test_closure(s2st_benchmark):
    def fn(x):
        return loop_fixed(x, {N})
    s2st_benchmark(fn, [0, 1])


def test_lambda(s2st_benchmark):
    s2st_benchmark(lambda x: loop_fixed(x, {N}), [0, 1])
'''


def instructions_by_test(pytester) -> dict[str, dict]:
    saved = json.loads((pytester.path / "out.json").read_text())["benchmarks"]
    return {b["name"].split("[")[0]: b["extra_info"]["s2st"]["metrics"]["instructions"] for b in saved}


def test_callable_path_counts_what_the_config_path_counts_and_linearly(pytester):
    """Known truths, through the plugin as users run it: the config path's count of loop_fixed(n=N) and the
    callable path's of n=2N, 3N lie on one line (each N iterations add the same count, to 1000 Ir of ~0.45 M),
    which holds only if the two paths count the same work alike; an object of the test module's class doing
    N iterations counts what the config path does, to 1 % (its own __call__ on top). A lambda and a closure
    cannot be re-created in the valgrind child: one line each, naming them."""
    (pytester.path / "loops.py").write_text(LOOPS_PY)
    make_dataset(pytester.path / "data.npy", n=2, frames=4)
    cfg = pytester.path / "loops.yaml"
    cfg.write_text(f"general:\n  name: loops\n  model_type: callable\n  dataset_path: data.npy\n"
                   f"stage1:\n  entry: loops.py:build_loop\n  n: {N}\n")
    pytester.makepyfile(test_calls=CALLABLES_TEST)
    result = pytester.runpytest(*FAST, "--s2st-flops=off", "--s2st-tensor-memory=off", "--s2st-memory=off",
                                f"--s2st-config={cfg}", "--s2st-instructions=callgrind", "--benchmark-json=out.json")
    result.assert_outcomes(passed=6)
    m = instructions_by_test(pytester)
    case, two, three, obj = (m[name]["value"] for name in ("test_case", "test_partial_2n", "test_partial_3n",
                                                            "test_object"))
    assert all(isinstance(v, int) for v in (case, two, three, obj)), m
    per_n = three - two
    assert per_n > 20 * N, m  # tens of Ir per iteration: the loop was counted, not a wrapper
    assert abs((two - case) - per_n) <= 1000, (case, two, three)  # one line through both paths
    assert abs(obj - case) <= 0.01 * case, (case, obj)
    assert m["test_partial_2n"]["method"] == "callgrind" and "forward_ir" in m["test_partial_2n"]["details"]
    for name, what in (("test_closure", "test_calls.test_closure.<locals>.fn"),
                       ("test_lambda", "test_calls.test_lambda.<locals>.<lambda>")):
        assert m[name]["value"] is None
        assert m[name]["reason"] == (f"{what} cannot be re-created in the valgrind child (not importable by name); "
                                     "define it at module level"), m[name]
    result.stdout.fnmatch_lines(["*test_lambda: instructions n/a: test_calls.test_lambda.<locals>.<lambda> cannot be*"])


GATED_TEST = '''
import functools
import os

from loops import loop_fixed

N = int(os.environ["S2ST_TEST_N"])


def test_grows(s2st_benchmark):
    s2st_benchmark(functools.partial(loop_fixed, n=N), [0, 1])


def test_lambda(s2st_benchmark):
    s2st_benchmark(lambda x: loop_fixed(x, N), [0, 1])


def test_ab(s2st_benchmark):
    s2st_benchmark(functools.partial(loop_fixed, n=2 * N), [0, 1], baseline=functools.partial(loop_fixed, n=N))
'''
LAMBDA_REASON = ("limit instructions:1% not checked: instructions n/a: test_gated.test_lambda.<locals>.<lambda> cannot "
                 "be re-created in the valgrind child (not importable by name); define it at module level")


def outcomes(result) -> dict[str, int]:
    return {k: v for k, v in result.parseoutcomes().items() if k != "deselected"}


def test_instruction_limits_on_the_callable_path(pytester, monkeypatch):
    """--s2st-compare-fail=instructions:1% through the callable path: a callable doing twice the work regresses
    (+100 %, between runs and in an in-process A/B); a lambda's limit is the test's INCONCLUSIVE in one line,
    not "1 passed" followed by "limit ... was not checked"."""
    (pytester.path / "loops.py").write_text(LOOPS_PY)
    pytester.makepyfile(test_gated=GATED_TEST)
    args = [*FAST, "--s2st-flops=off", "--s2st-tensor-memory=off", "--s2st-memory=off", "--s2st-instructions=callgrind"]
    monkeypatch.setenv("S2ST_TEST_N", str(N))
    pytester.runpytest(*args, "-k", "not ab", "--benchmark-autosave").assert_outcomes(passed=2)
    monkeypatch.setenv("S2ST_TEST_N", str(2 * N))
    gated = pytester.runpytest(*args, "-k", "not ab", "--benchmark-compare", "--s2st-compare-fail=instructions:1%")
    assert gated.ret == 1 and outcomes(gated) == {"passed": 1, "inconclusive": 1, "regressed": 1}
    gated.stdout.fnmatch_lines(["*s2st INCONCLUSIVE*", "test_gated.py::test_lambda:", f"    {LAMBDA_REASON}",
                                "*s2st regressions (--s2st-compare-fail)*",
                                "test_gated.py::test_grows: instructions regressed +*% (*), limit instructions:1%"])
    regressed = gated.stdout.str().split("s2st regressions")[1]
    assert "test_lambda" not in regressed and "not checked" not in regressed  # said once, on the test
    # the lambda alone: no "passed", one line; --s2st-strict fails on it
    alone = pytester.runpytest(*args, "-k", "lambda", "--benchmark-compare", "--s2st-compare-fail=instructions:1%")
    assert alone.ret == 0 and outcomes(alone) == {"inconclusive": 1}
    assert alone.stdout.str().count("not checked") == 1
    strict = pytester.runpytest(*args, "-k", "lambda", "--benchmark-compare", "--s2st-compare-fail=instructions:1%",
                                "--s2st-strict")
    assert strict.ret == 1
    strict.stdout.fnmatch_lines([f"*{LAMBDA_REASON}*"])
    # in one process: the baseline callable is counted by its own valgrind child
    ab = pytester.runpytest(*args, "-k", "ab", "--s2st-compare-fail=instructions:1%", "--benchmark-json=out.json")
    ab.assert_outcomes(failed=1)
    ab.stdout.fnmatch_lines(["instructions * -> * (+*%) against the baseline, limit instructions:1%*"])
    s2st = json.loads((pytester.path / "out.json").read_text())["benchmarks"][0]["extra_info"]["s2st"]
    base, cand = s2st["baseline"]["metrics"]["instructions"]["value"], s2st["metrics"]["instructions"]["value"]
    assert 1.9 < cand / base < 2.0, (base, cand)  # twice the iterations on top of the same fixed call


class Holder:  # a module-level class whose objects cannot be pickled (a lock)
    def __init__(self):
        import threading

        self.lock = threading.Lock()

    def __call__(self, x):
        return x


def test_what_can_be_re_created_and_the_one_line_reason_for_what_cannot():
    import functools
    import pickle

    assert pickle.loads(instr.pickled_callable(make_dataset)) is make_dataset  # by reference
    assert pickle.loads(instr.pickled_callable(functools.partial(make_dataset, n=2))).keywords == {"n": 2}
    assert instr.callable_name(functools.partial(make_dataset, n=2)) == "functools.partial(helpers.make_dataset)"

    def local(x):
        return x

    cases = [(local, "test_measure_instructions.test_what_can_be_re_created_and_the_one_line_reason_for_what_cannot"
                     ".<locals>.local cannot be re-created in the valgrind child (not importable by name); define it "
                     "at module level"),
             (lambda x: x, "...<lambda> cannot be re-created in the valgrind child (not importable by name); define "
                           "it at module level"),
             (Holder(), "test_measure_instructions.Holder object cannot be re-created in the valgrind child (pickle: "
                        "TypeError: cannot pickle '_thread.lock' object); define it at module level or make it "
                        "picklable")]
    for fn, said in cases:
        with pytest.raises(Unavailable) as err:
            instr.pickled_callable(fn)
        text = str(err.value)
        assert "\n" not in text and (text == said or (said.startswith("...") and text.endswith(said[3:]))), text
    # no valgrind child is started for what cannot travel: the reason comes back at once, whatever the input
    with pytest.raises(Unavailable, match=r"<locals>\.local cannot be re-created"):
        count_pipeline(None, object(), model=local)


def test_a_callable_the_child_cannot_import_is_one_line(monkeypatch):
    """Pickled by reference in the parent, but its module exists only in the parent's sys.modules: the child
    says which callable it could not re-create and why, in one line."""
    import sys
    import types

    ghost = types.ModuleType("s2st_ghost_module")
    exec("def ghost(x):\n    return x\n", ghost.__dict__)
    monkeypatch.setitem(sys.modules, "s2st_ghost_module", ghost)
    with pytest.raises(Unavailable) as err:
        count_pipeline(None, 0, model=ghost.ghost, warmup=1)
    assert str(err.value) == ("the valgrind child exited 2: RuntimeError: s2st_ghost_module.ghost cannot be re-created "
                              "in the valgrind child (ModuleNotFoundError: No module named 's2st_ghost_module'); define "
                              "it at module level of an importable module")
