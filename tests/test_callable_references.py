"""s2st_benchmark(fn, inputs, references=[...]): a callable's text outputs scored by BLEU/chrF and judged by an
s2st_gate marker, through pytest with the plugin; and docs/writing.md's examples (references=, the text dataset
format) run as written."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from helpers import BENCH_TEST

FAST = ["-p", "no:cacheprovider", "--s2st-warmup=0"]
DOCS = Path(__file__).resolve().parents[1] / "docs" / "writing.md"
SENTENCES = ["the cat sleeps in the house", "it is very sunny here today"]  # 6 words: every n-gram order has matches


def docs_block(tag: str) -> str:
    match = re.search(rf"^<!-- {re.escape(tag)} -->\n```[a-z]*\n(.*?)^```$", DOCS.read_text(), re.S | re.M)
    assert match, f"docs/writing.md has no block tagged {tag!r}"
    return match.group(1)


def no_traceback(result) -> str:
    text = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in text and not re.search(r"\.py:\d+: in ", text), text
    return text


def saved(pytester) -> dict:
    return {b["name"]: b["extra_info"]["s2st"] for b in json.loads((pytester.path / "out.json").read_text())["benchmarks"]}


def test_the_documented_example_passes_its_gate_with_bleu_100(pytester):
    """Identical hypotheses and references: every n-gram precision 1, no brevity penalty: BLEU = chrF = 100."""
    pytester.makepyfile(test_translate=docs_block("example: references"))
    result = pytester.runpytest_subprocess(*FAST, "--s2st-strict", "--benchmark-json=out.json")
    result.assert_outcomes(passed=1)
    no_traceback(result)
    row = saved(pytester)["test_translate"]
    assert row["metrics"]["bleu"]["value"] == pytest.approx(100.0)
    assert row["metrics"]["chrf"]["value"] == pytest.approx(100.0)
    assert row["metrics"]["bleu"]["details"]["references"] == "s2st_benchmark(references=)"
    assert row["verdict"]["status"] == "PASS" and row["translation_gate"]["status"] == "PASS"


def test_a_wrong_translation_fails_the_gate(pytester):
    """No word of the hypotheses is in the references: unigram precision 0, so BLEU = 0 < 50."""
    pytester.makepyfile(test_translate=docs_block("example: references").replace(
        '"the cat sleeps in the house"', '"una frase sin traducir nunca"', 1).replace(
        '"it is very sunny here today"', '"otra frase sin traducir jamas"', 1))
    result = pytester.runpytest_subprocess(*FAST)
    result.assert_outcomes(failed=1)
    assert "bleu 0.00 < 50 (min_bleu)" in no_traceback(result)


BAD_CALLS = '''
import pytest

def translate(text):
    return text

def speak(text):
    return {"waveform": [0.0] * 8, "sample_rate": 8000}

@pytest.mark.s2st_gate(min_bleu=1)
def test_not_text(s2st_benchmark):
    s2st_benchmark(speak, ["a b c d"], references=["a b c d"])

@pytest.mark.s2st_gate(max_bleu_drop=1)
def test_drop(s2st_benchmark):
    s2st_benchmark(translate, ["a b c d"], references=["a b c d"])

def test_length(s2st_benchmark):
    s2st_benchmark(translate, ["a", "b", "c"], references=["a", "b"])

def test_string(s2st_benchmark):
    s2st_benchmark(translate, ["a"], references="a")

def test_numbers(s2st_benchmark):
    s2st_benchmark(translate, ["a", "b"], references=["a", 2])

def test_two_lines(s2st_benchmark):
    s2st_benchmark(translate, ["a"], references=["a\\nb"])

def test_pipeline(s2st_pipeline, s2st_dataset, s2st_benchmark):
    s2st_benchmark(s2st_pipeline, s2st_dataset, references=["x"])
'''


def test_bad_references_are_one_line_and_an_unscorable_gate_is_inconclusive(pytester):
    from helpers import write_case

    cfg = write_case(pytester.path, "np", ["build_numpy"])
    pytester.makepyfile(test_calls=BAD_CALLS)
    result = pytester.runpytest_subprocess(*FAST, f"--s2st-config={cfg}", "-rA", "--benchmark-json=out.json")
    outcomes = result.parseoutcomes()
    assert (outcomes.get("failed"), outcomes.get("inconclusive"), outcomes.get("passed")) == (5, 2, None), outcomes
    text = no_traceback(result)
    where = "s2st_benchmark(model, inputs): references="
    for line in (f"test_length: {where} has 2 item(s) for 3 input(s): one reference translation per input",
                 f"test_string: {where} must be a list of strings, one reference translation per input; got str 'a'",
                 "test_numbers: s2st_benchmark(model, inputs): references[1] is a int, expected a string",
                 "test_two_lines: s2st_benchmark(model, inputs): references[0] holds a line break",
                 "references= scores your own callable's outputs; the case's pipeline takes its references from the "
                 "config (general.references)",
                 "min_bleu: bleu unavailable for the candidate: the model's outputs are not text (a str, or "
                 "{'text': str}); the last stage returned dict",
                 "max_bleu_drop: no baseline to compare bleu with (a callable's references= give no baseline scores)"):
        assert line in text, line
    rows = saved(pytester)
    assert rows["test_not_text"]["metrics"]["bleu"]["value"] is None  # n/a with its reason, never a silent 0
    assert rows["test_drop"]["metrics"]["bleu"]["value"] == pytest.approx(100.0)  # 4 words: one 4-gram, matched
    assert "test_length" not in rows  # refused before anything was measured
    strict = pytester.runpytest_subprocess(*FAST, f"--s2st-config={cfg}", "--s2st-strict", "test_calls.py::test_drop")
    strict.assert_outcomes(failed=1)


def test_the_documented_text_dataset_runs_and_scores(pytester):
    for name in ("sentences.jsonl", "refs.txt", "mt.py", "mt.yaml"):
        (pytester.path / name).write_text(docs_block(f"file: {name}"))
    pytester.makepyfile(test_bench=BENCH_TEST)
    result = pytester.runpytest_subprocess(*FAST, "--s2st-config=mt.yaml", "--benchmark-json=out.json")
    result.assert_outcomes(passed=1)
    no_traceback(result)
    row = saved(pytester)["test_inference[callable-phrases]"]
    assert row["samples"] == 2
    assert row["metrics"]["bleu"]["value"] == pytest.approx(100.0) and row["metrics"]["chrf"]["value"] == pytest.approx(100.0)
    bad = pytester.path / "sentences.jsonl"
    bad.write_text(bad.read_text().replace('"seed": 2', '"seed": -2'))
    refused = pytester.runpytest_subprocess(*FAST, "--s2st-config=mt.yaml")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR  # the references check reads the dataset's count at configure
    assert "sentences.jsonl:2: field 'seed' must be an integer in [0, 2**63), got -2" in no_traceback(refused)
