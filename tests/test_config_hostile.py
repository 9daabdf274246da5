"""Hostile input through the path users run (pytest with the plugin): every section and key family of a config
with a typo or a wrong type, references files a careless user saves, $S2ST_CACHE_DIR, marker keywords, inputs
generators and models that exit. Each ends in one line naming the file, key or value -- a config's at configure
time (exit 4, no test ran), a test's in that test -- with no traceback and no frame of the plugin's."""
from __future__ import annotations

import json
import re

import pytest

from helpers import BENCH_TEST, write_case

FAST = ["-p", "no:cacheprovider", "--s2st-warmup=0"]
FRAME = re.compile(r"\.py:\d+: in |^E\s", re.M)  # a traceback entry, or pytest's "E   " exception lines

TEXT_MODEL = '''
def build_text():
    """Text out, whatever comes in: BLEU/chrF are scored against the references."""
    return lambda sample: {"text": "the cat sleeps in the house"}
'''


def one_line(result, *fragments: str) -> str:
    """The line holding every fragment; the output has no traceback and no frame."""
    text = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in text and not FRAME.search(text), text
    lines = [line for line in text.splitlines() if all(f in line for f in fragments)]
    assert lines, f"no line with {fragments!r} in:\n{text}"
    return lines[0]


def usage_error(pytester, *args) -> object:
    """A run that must stop at configure: exit 4, and no test ran."""
    pytester.makepyfile(test_bench=BENCH_TEST)
    result = pytester.runpytest_subprocess(*FAST, *args)
    text = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, text
    assert not re.search(r"\d+ (passed|failed|error)", text), text
    return result


def text_case(root, general_extra: str = "", extra: str = ""):
    """A callable case whose one stage writes text, over the 3-sample data.npy; ``extra``: more sections."""
    cfg = write_case(root, "txt", ["build_text"], general_extra=general_extra)
    with open(root / "models.py", "a") as f:
        f.write(TEXT_MODEL)
    if extra:
        cfg.write_text(cfg.read_text() + extra)
    return cfg


# ------------------------------------------------------------------ typos: every section, did you mean


@pytest.mark.parametrize("general, extra, where, fragment", [
    ("", "qualty:\n  min_bleu: 1\n", "txt.yaml:7", "unknown top-level key 'qualty' (did you mean 'quality'?)"),
    ("dataset_sise: 2\n", "", "txt.yaml:5", "unknown key general.dataset_sise (did you mean 'dataset_size'?)"),
    ("referenses: refs.txt\n", "", "txt.yaml:5", "unknown key general.referenses (did you mean 'references'?)"),
    ("serves_speach: false\n", "", "txt.yaml:5", "unknown key general.serves_speach (did you mean 'serves_speech'?)"),
    ("target_lnag: en\n", "", "txt.yaml:5", "unknown key general.target_lnag (did you mean 'target_lang'?)"),
    ("targets: {rft: 1}\n", "", "txt.yaml:5 (general.targets)", "unknown key 'rft' (did you mean 'rtf'?)"),
    ("", "quality:\n  min_blue: 1\n", "txt.yaml:8", "unknown key 'min_blue' (did you mean 'min_bleu'?)"),
    ("", "quality:\n  asr_model_dri: whisper\n", "txt.yaml:8",
     "unknown key 'asr_model_dri' (did you mean 'asr_model_dir'?)"),
    ("", "serve:\n  strem: true\n", "txt.yaml:8 (serve.strem)", "unknown key 'strem' (did you mean 'stream'?)"),
])
def test_a_typo_in_any_config_section_stops_the_session_with_what_it_meant(pytester, general, extra, where, fragment):
    cfg = text_case(pytester.path, general, extra)
    result = usage_error(pytester, f"--s2st-config={cfg}")
    one_line(result, where, fragment)


def test_a_typo_of_a_factory_argument_errors_the_cases_tests_naming_its_line(pytester):
    """Stage keys are the factory's (or fairseq's) own: checked when the case is built, with the closest name."""
    cfg = write_case(pytester.path, "st", ["build_numpy"], stage_extra="scael: 2\n")
    pytester.makepyfile(test_bench=BENCH_TEST)
    result = pytester.runpytest_subprocess(*FAST, f"--s2st-config={cfg}")
    result.assert_outcomes(errors=1)
    one_line(result, "st.yaml:7 (stage1.scael)", "takes no argument 'scael' (did you mean 'scale'?)")


GATE_TYPO = '''
import pytest

def translate(text):
    return text

@pytest.mark.s2st_gate(min_blue=1)
def test_gated(s2st_benchmark):
    s2st_benchmark(translate, ["a b c d"], references=["a b c d"])

def test_other():
    pass
'''


@pytest.mark.parametrize("with_config", [False, True])
def test_a_gate_marker_typo_names_the_test_file_not_the_config(pytester, with_config):
    """s2st_gate(min_blue=1) was reported as an unknown key of the config's quality section (which had none)."""
    pytester.makepyfile(test_gate=GATE_TYPO)
    args = [f"--s2st-config={text_case(pytester.path)}"] if with_config else []
    result = pytester.runpytest_subprocess(*FAST, "test_gate.py", *args)
    result.assert_outcomes(errors=1, passed=1)
    line = one_line(result, "test_gate.py:6 (s2st_gate of test_gated)", "unknown key 'min_blue' (did you mean 'min_bleu'?)")
    assert "quality" not in line.split("known:")[0] and "txt.yaml" not in line


@pytest.mark.parametrize("kwargs, fragment", [
    ("min_bleu='high'", "min_bleu must be a finite number, got 'high'"),
    ("min_bleu=float('nan')", "min_bleu must be a finite number, got nan"),
    ("min_bleu=101", "min_bleu must be <= 100"),
    ("asr_model_dir='w'", "asr_model_dir is a key of the config's quality: section"),
])
def test_a_bad_gate_marker_value_errors_that_test_only(pytester, kwargs, fragment):
    pytester.makepyfile(test_gate=GATE_TYPO.replace("min_blue=1", kwargs))
    result = pytester.runpytest_subprocess(*FAST, "test_gate.py")
    result.assert_outcomes(errors=1, passed=1)
    one_line(result, "test_gate.py:6 (s2st_gate of test_gated)", fragment)


# ------------------------------------------------------------------ wrong types of the keys the plugin reads


@pytest.mark.parametrize("general, extra, where, fragment", [
    ("references: [a, b]\n", "", "txt.yaml:5 (general.references)", "got list ['a', 'b']"),
    ("references: ''\n", "", "txt.yaml:5 (general.references)", "got an empty string"),
    ("references: 7\n", "", "txt.yaml:5 (general.references)", "must be the path of a text file"),
    ("target_lang: 5\n", "", "txt.yaml:5 (general.target_lang)", "must be a language code (e.g. en), got int 5"),
    ("", "quality:\n  asr_model_dir: 42\n", "txt.yaml:8 (quality.asr_model_dir)",
     "asr_model_dir must be the path of a local Whisper-style model folder; got int 42"),
    ("", "quality:\n  baseline: [a.yaml]\n", "txt.yaml:8 (quality.baseline)", "baseline must be the path of a baseline config"),
    ("", "quality:\n  anchors: {ryan: 1}\n", "txt.yaml:8 (quality.anchors)", "got voice 'ryan': 1"),
    ("", "quality:\n  anchors: {}\n", "txt.yaml:8 (quality.anchors)", "got an empty mapping"),
    ("", "quality:\n  anchors: true\n", "txt.yaml:8 (quality.anchors)", "got bool True"),
])
def test_a_key_of_the_wrong_type_is_a_usage_error_naming_its_line(pytester, general, extra, where, fragment):
    """general.references as a list and quality.asr_model_dir: 42 were a TypeError traceback after the run."""
    cfg = text_case(pytester.path, general, extra)
    result = usage_error(pytester, f"--s2st-config={cfg}")
    one_line(result, where, fragment)


def test_a_bad_config_named_by_the_ini_is_a_usage_error_too(pytester):
    cfg = text_case(pytester.path, "references: [a]\n")
    pytester.makeini(f"[pytest]\ns2st_config = {cfg.name}\n")
    result = usage_error(pytester)
    one_line(result, "txt.yaml:5 (general.references)", "got list")


# ------------------------------------------------------------------ references files: read before any test runs


@pytest.mark.parametrize("content, fragments", [
    (None, ("refs.txt: references file (", "txt.yaml:5 (general.references)) not found")),
    (b"the cat\n", ("/refs.txt (", "txt.yaml:5 (general.references)): 1 reference line(s) for 3 sample(s) of ",
                    "/data.npy: one line per sample")),  # the file first: the key alone did not say which
    (b"one\ntwo\ncaf\xe9 au lait\n", ("refs.txt:3: cannot read references file", "not UTF-8 text (byte 0xe9")),
    ("one\ntwo\nthree\n".encode("utf-16-le"), ("refs.txt:1 (references file", "holds NUL bytes")),
    ("dir", ("refs.txt: references file (", "is not a regular file")),
])
def test_a_bad_references_file_stops_the_session_before_any_test(pytester, content, fragments):
    """Missing, short, Latin-1 and UTF-16 files were named only after the whole measurement had run."""
    refs = pytester.path / "refs.txt"
    if content == "dir":
        refs.mkdir()
    elif content is not None:
        refs.write_bytes(content)
    cfg = text_case(pytester.path, "references: refs.txt\n")
    result = usage_error(pytester, f"--s2st-config={cfg}")
    one_line(result, *fragments)


def test_references_as_long_as_the_samples_the_case_runs_are_enough(pytester):
    """dataset_size 1 of 3 samples: one reference line is enough, and it scores (identical text: BLEU 100)."""
    (pytester.path / "refs.txt").write_text("the cat sleeps in the house\n")
    cfg = text_case(pytester.path, "references: refs.txt\ndataset_size: 1\n")
    pytester.makepyfile(test_bench=BENCH_TEST)
    result = pytester.runpytest_subprocess(*FAST, f"--s2st-config={cfg}", "--benchmark-json=out.json")
    result.assert_outcomes(passed=1)
    metrics = json.loads((pytester.path / "out.json").read_text())["benchmarks"][0]["extra_info"]["s2st"]["metrics"]
    assert metrics["bleu"]["value"] == pytest.approx(100.0) and metrics["chrf"]["value"] == pytest.approx(100.0)
    short = usage_error(pytester, f"--s2st-config={cfg}", "--s2st-dataset-size=2")
    one_line(short, f"{pytester.path / 'refs.txt'} (", "): 1 reference line(s) for 2 sample(s) of ")


# ------------------------------------------------------------------ $S2ST_CACHE_DIR


@pytest.mark.parametrize("value, fragment", [
    ("{file}", "is not a folder; set it to a folder"),
    ("{file}/sub", "is not a folder ({file} is not a folder)"),
    ("{dir}\nsub", "holds a control character (a line break?)"),
])
def test_a_bad_cache_dir_is_a_usage_error_at_configure(pytester, monkeypatch, value, fragment):
    """It was the right line inside a collection traceback (exit 2)."""
    (pytester.path / "file").write_text("x")
    place = {"file": pytester.path / "file", "dir": pytester.path}
    monkeypatch.setenv("S2ST_CACHE_DIR", value.format(**place))
    result = usage_error(pytester)
    one_line(result, "$S2ST_CACHE_DIR", fragment.format(**place))


# ------------------------------------------------------------------ the user's code: inputs generators, sys.exit

USER_CODE = '''
import sys

def echo(x):
    return x

def inputs():
    yield "a"
    raise ValueError("the corpus ran dry")

def exits(x):
    if x == "b":
        sys.exit(0)
    return x

def test_generator(s2st_benchmark):
    s2st_benchmark(echo, inputs())

def test_exit(s2st_benchmark):
    s2st_benchmark(exits, ["a", "b"])

def test_after():
    pass
'''


def test_an_inputs_generator_that_raises_and_a_model_that_exits_are_one_line_each(pytester):
    pytester.makepyfile(test_user=USER_CODE)
    result = pytester.runpytest_subprocess(*FAST, "test_user.py")
    result.assert_outcomes(failed=2, passed=1)  # the session goes on: sys.exit(0) ended nothing but its test
    path = pytester.path / "test_user.py"
    one_line(result, "test_user.py::test_generator: s2st_benchmark(model, inputs): reading the inputs raised "
                     f"ValueError: the corpus ran dry (at {path}:8)")
    one_line(result, f"the benchmarked model called sys.exit(0) at {path}:12")
