"""Bad input ends in one clear line naming the file, key or value at fault — never a traceback."""
from __future__ import annotations

import os

import pytest

from helpers import BENCH_TEST, write_case

FAST = ["-p", "no:cacheprovider", "--s2st-warmup=0"]


def assert_one_clear_line(result, *fragments: str) -> None:
    text = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in text, text
    lines = [line for line in text.splitlines() if all(f in line for f in fragments)]
    assert lines, f"no line with {fragments!r} in:\n{text}"


def run_usage(pytester, *args):
    pytester.makepyfile(test_bench=BENCH_TEST)
    result = pytester.runpytest_subprocess(*FAST, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + result.stderr.str()
    return result


@pytest.mark.parametrize("flag, value, fragment", [
    ("--s2st-repeat", "0", "must be an integer > 0"),
    ("--s2st-device", "tpu", "must be one of auto, cpu, cuda, npu"),
    ("--s2st-memory", "rss", "must be one of vmhwm, memory_profiler, off"),
    ("--s2st-dataset-size", "-3", "must be an integer >= 0"),
    ("--s2st-compare-fail", "peak_delta_mib=10", "expected metric:limit"),
    ("--s2st-compare-fail", "speed:5%", "unknown metric 'speed'"),
    ("--s2st-endpoint", "http://127.0.0.1:99999", "port is not a number in 1-65535"),
    ("--s2st-endpoint", "ftp://127.0.0.1:8000", "endpoint 'ftp://127.0.0.1:8000'"),
    ("--s2st-max-audio-s", "inf", "must be a number > 0"),
])
def test_bad_option_value_is_a_usage_error(pytester, flag, value, fragment):
    result = run_usage(pytester, f"{flag}={value}")
    assert_one_clear_line(result, flag, fragment)


def test_bad_ini_value_is_a_usage_error(pytester):
    pytester.makeini("[pytest]\ns2st_threads = many\n")
    result = run_usage(pytester)
    assert_one_clear_line(result, "s2st_threads", "must be an integer > 0, got 'many'")


def test_missing_config(pytester):
    result = run_usage(pytester, "--s2st-config=nope.yaml")
    assert_one_clear_line(result, "nope.yaml")


def test_unreadable_config(pytester):
    if os.geteuid() == 0:
        cfg = pytester.path / "dir.yaml"
        cfg.mkdir()  # root reads any file: a directory is the unreadable config here
    else:
        cfg = write_case(pytester.path, "x", ["build_numpy"])
        cfg.chmod(0)
    result = run_usage(pytester, f"--s2st-config={cfg}")
    assert_one_clear_line(result, "dir.yaml" if os.geteuid() == 0 else "x.yaml")


def test_yaml_syntax_error_names_file_and_line(pytester):
    cfg = pytester.path / "broken.yaml"
    cfg.write_text("general:\n  model_type: callable\n  dataset_path: [unclosed\nstage1:\n  entry: a:b\n")
    result = run_usage(pytester, f"--s2st-config={cfg}")
    assert_one_clear_line(result, "broken.yaml:", "YAML syntax error")


def test_duplicate_key_names_file_and_line(pytester):
    cfg = pytester.path / "dup.yaml"
    cfg.write_text("general:\n  model_type: callable\nstage1:\n  entry: a:b\nstage1:\n  entry: c:d\n")
    result = run_usage(pytester, f"--s2st-config={cfg}")
    assert_one_clear_line(result, "dup.yaml:5", "duplicate key 'stage1'", "line 3")


def test_stage_not_a_mapping(pytester):
    cfg = pytester.path / "list.yaml"
    cfg.write_text("general:\n  model_type: callable\nstage1:\n  - entry\n")
    result = run_usage(pytester, f"--s2st-config={cfg}")
    assert_one_clear_line(result, "list.yaml", "stage1 must be a mapping")


def test_unknown_model_type_lists_known_ones(pytester):
    cfg = pytester.path / "mt.yaml"
    cfg.write_text("general:\n  model_type: S2X\nstage1:\n  entry: a:b\n")
    result = run_usage(pytester, f"--s2st-config={cfg}")
    assert_one_clear_line(result, "mt.yaml", "unknown model_type 'S2X'", "callable")


def test_missing_dataset(pytester):
    cfg = write_case(pytester.path, "x", ["build_numpy"])
    cfg.write_text(cfg.read_text().replace("data.npy", "missing.npy"))
    result = run_usage(pytester, f"--s2st-config={cfg}")
    assert_one_clear_line(result, "x.yaml", "dataset_path", "missing.npy does not exist")


def test_dataset_size_negative_in_config(pytester):
    cfg = write_case(pytester.path, "x", ["build_numpy"], general_extra="dataset_size: -1\n")
    result = run_usage(pytester, f"--s2st-config={cfg}")
    assert_one_clear_line(result, "x.yaml:", "general.dataset_size", "must be an integer >= 0, got -1")


def test_unwritable_dump_dir(pytester):
    blocker = pytester.path / "file"
    blocker.write_text("not a directory")
    cfg = write_case(pytester.path, "x", ["build_numpy"])
    result = run_usage(pytester, f"--s2st-config={cfg}", f"--s2st-dump-dir={blocker}/sub")
    assert_one_clear_line(result, "dump dir", "is not writable")


@pytest.mark.parametrize("entry, fragment", [
    ("no_such_module:build", "cannot be imported: ModuleNotFoundError"),
    ("models.py:NOT_CALLABLE", "is not callable"),
    ("models.py:not_a_factory_value", "returned int, not a callable"),
    ("models.py:nothing_here", "has no attribute 'nothing_here'"),
])
def test_bad_entry_errors_the_test_with_one_line(pytester, entry, fragment):
    cfg = write_case(pytester.path, "x", ["build_numpy"])
    cfg.write_text(cfg.read_text().replace("models.py:build_numpy", entry))
    pytester.makepyfile(test_bench=BENCH_TEST)
    result = pytester.runpytest_subprocess(*FAST, f"--s2st-config={cfg}")
    result.assert_outcomes(errors=1)
    assert_one_clear_line(result, "x.yaml (stage1.entry)", fragment)


def test_budget_marker_with_unknown_metric(pytester):
    cfg = write_case(pytester.path, "x", ["build_numpy"])
    pytester.makepyfile(test_budget='''
import pytest

@pytest.mark.s2st_budget(latency=1.0)
def test_b(s2st_pipeline, s2st_dataset, s2st_benchmark):
    s2st_benchmark(s2st_pipeline, s2st_dataset)

def test_other_tests_still_run():
    pass
''')
    result = pytester.runpytest_subprocess(*FAST, f"--s2st-config={cfg}")
    result.assert_outcomes(errors=1, passed=1)
    assert_one_clear_line(result, "s2st_budget: unknown metric 'latency'", "runtime_s")


def test_bad_npy_structure_errors_with_the_file(pytester):
    import numpy as np

    cfg = write_case(pytester.path, "x", ["build_numpy"])
    np.save(pytester.path / "data.npy", np.array([{"id": 0, "source": [1, 2]}], dtype=object), allow_pickle=True)
    pytester.makepyfile(test_bench=BENCH_TEST)
    result = pytester.runpytest_subprocess(*FAST, f"--s2st-config={cfg}")
    result.assert_outcomes(errors=1)
    assert_one_clear_line(result, "data.npy", "net_input")


def test_the_published_upstream_3stage_config_is_refused_with_file_and_line(pytester):
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("fairseq")
    published = Path(spec.origin).parent / "examples/speech_to_speech/benchmarking/configs/3StageS2ST.yaml"
    assert published.is_file(), published  # shipped by the fairseq wheel
    result = run_usage(pytester, f"--s2st-config={published}")
    assert_one_clear_line(result, "3StageS2ST.yaml:", "duplicate key 'stage2'")


def test_model_type_and_dataset_path_flags_override_the_config(pytester):
    import json

    cfg = write_case(pytester.path, "x", ["build_linear"])
    cfg.write_text(cfg.read_text().replace("  dataset_path: data.npy\n", ""))
    pytester.makepyfile(test_bench=BENCH_TEST)
    ok = pytester.runpytest_subprocess(*FAST, f"--s2st-config={cfg}", f"--s2st-dataset-path={pytester.path / 'data.npy'}",
                                       "--benchmark-json=out.json")
    ok.assert_outcomes(passed=1)
    assert json.loads((pytester.path / "out.json").read_text())["benchmarks"][0]["extra_info"]["s2st"]["samples"] == 3
    bad = run_usage(pytester, f"--s2st-config={cfg}", "--s2st-model-type=S2X")
    assert_one_clear_line(bad, "unknown model_type 'S2X'")


@pytest.mark.parametrize("how", ["flag", "ini"])
def test_evidence_dir_that_is_a_file_names_where_it_came_from(pytester, how):
    (pytester.path / "taken").write_text("a file, not a folder\n")
    if how == "ini":
        pytester.makeini("[pytest]\ns2st_evidence_dir = taken\n")
        result = run_usage(pytester)
        assert_one_clear_line(result, "ini s2st_evidence_dir", "taken is not a directory")
    else:
        result = run_usage(pytester, "--s2st-evidence-dir", str(pytester.path / "taken"))
        assert_one_clear_line(result, "--s2st-evidence-dir", "taken is not a directory")


def test_target_sr_that_is_not_a_rate_is_a_usage_error(pytester):
    cfg = write_case(pytester.path, "np", ["build_speech"], general_extra="target_sr: fast\n")
    result = run_usage(pytester, f"--s2st-config={cfg}")
    assert_one_clear_line(result, "np.yaml:5 (general.target_sr)", "target_sr must be a sample rate", "'fast'")


def test_dump_dir_error_names_the_flag_it_came_from(pytester):
    (pytester.path / "taken").write_text("a file\n")
    cfg = write_case(pytester.path, "np", ["build_speech"], general_extra="dump_dir: elsewhere\n")
    result = run_usage(pytester, f"--s2st-config={cfg}", "--s2st-dump-dir", str(pytester.path / "taken"))
    assert_one_clear_line(result, "--s2st-dump-dir", "taken is not writable")
    assert "general.dump_dir" not in result.stdout.str() + result.stderr.str()


@pytest.mark.parametrize("model_type, stages, wanted", [
    ("3StageS2ST", ["build_linear", "build_second"], "takes 3 stage section(s) (stage1, stage2, stage3), the config has 2"),
    ("2StageS2ST", ["build_linear"], "takes 2 stage section(s)"),
    ("TTS", ["build_linear", "build_second"], "takes 1 stage section(s) (stage1), the config has 2"),
])
def test_a_cascade_with_the_wrong_number_of_stages_stops_the_session(pytester, model_type, stages, wanted):
    """A config error is a usage error before collection (exit 4), not a fixture error per test."""
    cfg = write_case(pytester.path, "casc", stages)
    cfg.write_text(cfg.read_text().replace("model_type: callable", f"model_type: {model_type}"))
    result = run_usage(pytester, f"--s2st-config={cfg}")
    assert_one_clear_line(result, "casc.yaml", f"model_type {model_type} {wanted}")


REFUSING_PY = '''
from pytest_s2st.errors import S2STError

def build_refusing():
    def forward(sample):
        raise S2STError("stage1: the model emitted 1 frame(s); Griffin-Lim needs at least 4")
    return forward
'''


def test_a_models_one_line_refusal_is_one_line_not_a_traceback(pytester):
    (pytester.path / "refusing.py").write_text(REFUSING_PY)
    cfg = write_case(pytester.path, "ref", ["build_numpy"])
    cfg.write_text(cfg.read_text().replace("models.py:build_numpy", "refusing.py:build_refusing"))
    pytester.makepyfile(test_bench=BENCH_TEST)
    result = pytester.runpytest_subprocess(*FAST, f"--s2st-config={cfg}")
    result.assert_outcomes(failed=1)
    assert_one_clear_line(result, "Griffin-Lim needs at least 4")
    text = result.stdout.str()
    assert "raise S2STError" not in text and "runner.py" not in text, text  # no frames, just the line


@pytest.mark.parametrize("value, fragment", [("{file}", "is not a folder"),
                                             ("{dir}\nsub", "holds a control character (a line break?)")])
def test_a_cache_dir_that_is_no_folder_is_one_line(pytester, monkeypatch, value, fragment):
    """No --s2st-config: the embedded demo is staged under $S2ST_CACHE_DIR. A regular file there, or a line
    break pasted into the variable, is one line naming the variable (it was NotADirectoryError's traceback,
    and the line break was blamed on the s2st_config ini)."""
    (pytester.path / "file").write_text("x")
    monkeypatch.setenv("S2ST_CACHE_DIR", value.format(file=pytester.path / "file", dir=pytester.path))
    pytester.makepyfile(test_bench=BENCH_TEST)
    result = pytester.runpytest_subprocess(*FAST)
    assert result.ret == pytest.ExitCode.USAGE_ERROR  # at configure: it was a collection error's traceback (exit 2)
    assert_one_clear_line(result, "$S2ST_CACHE_DIR", fragment)
    text = result.stdout.str() + result.stderr.str()
    assert "NotADirectoryError" not in text and "s2st_config (ini)" not in text


@pytest.mark.parametrize("value", ["-1", "0", "nan"])
def test_benchmark_max_time_that_is_no_duration_is_a_usage_error(pytester, value):
    """pytest-benchmark takes --benchmark-max-time -1 silently; for an s2st benchmark it means its max_time."""
    result = run_usage(pytester, "--benchmark-max-time", value)
    assert_one_clear_line(result, "--benchmark-max-time", "must be a number > 0")


def test_a_negative_benchmark_warmup_is_a_usage_error(pytester):
    """pytest-benchmark takes --benchmark-warmup-iterations=-5 silently; for an s2st benchmark it is its warm-up."""
    result = run_usage(pytester, "--benchmark-warmup-iterations=-5")
    assert_one_clear_line(result, "--benchmark-warmup-iterations", "must be an integer >= 0, got -5")


def test_a_plot_dir_that_is_a_file_is_a_usage_error_and_a_plot_of_nothing_says_so(pytester):
    pytester.makefile(".png", plots="not a folder")
    result = run_usage(pytester, "--s2st-plot", "plots.png")
    assert_one_clear_line(result, "--s2st-plot", "plots.png is not a directory")
    pytester.makepyfile(test_fn="def f(x):\n    return x\n\ndef test_fn(s2st_benchmark):\n    s2st_benchmark(f, [1, 2])\n")
    done = pytester.runpytest_subprocess(*FAST, "test_fn.py", "--s2st-plot", "plots")
    assert done.ret == 0
    assert_one_clear_line(done, "plot: nothing written: --s2st-plot draws service benchmarks")


@pytest.mark.parametrize("args, fragment", [
    (["--s2st-ab-pairs", "0"], "--s2st-ab-pairs: must be an integer > 0"),
    (["--s2st-ab-pairs", "33"], "must be an integer in 1-32"),
    (["--s2st-ab-round-s", "nan"], "must be a number > 0"),
    (["--s2st-ab-base", "main"], "is not inside a git repository"),
    (["--s2st-ab-base", "main", "--s2st-processes", "2"], "drop --s2st-processes"),
])
def test_bad_code_version_options_are_usage_errors(pytester, args, fragment):
    result = run_usage(pytester, *args)
    assert_one_clear_line(result, fragment)


def test_a_gate_on_a_callable_without_references_is_inconclusive_never_passed(pytester):
    pytester.makepyfile(test_gate='''
import pytest

def translate(text):
    return text.upper()

@pytest.mark.s2st_gate(min_bleu=50)
def test_translate(s2st_benchmark):
    s2st_benchmark(translate, ["hola mundo", "buenos dias"])
''')
    done = pytester.runpytest_subprocess(*FAST)
    assert done.ret == 0
    assert_one_clear_line(done, "s2st_gate(min_bleu=50) not judged: s2st_benchmark(model, inputs) of your own callable")
    assert "1 inconclusive" in done.stdout.str()
    strict = pytester.runpytest_subprocess(*FAST, "--s2st-strict")
    assert strict.ret == 1
