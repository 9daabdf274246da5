"""BLEU's tokenizer (setting bleu_tokenize): auto by target language, any sacrebleu tokenizer by name, in the
signature, refused with one line before any test runs when unknown or not installed."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from helpers import BENCH_TEST, write_case
from pytest_s2st.quality.translation import corpus_scores, parse_tokenize, resolve_tokenize

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

REFS_ZH = ["今天天气很好。", "我们明天早上在车站见面。", "这是一个小测试。"]
HYPS_ZH = ["今天天气不错。", "我们明天在车站见面。", "这是一个很小的测试。"]
HAS_MECAB = importlib.util.find_spec("MeCab") is not None and importlib.util.find_spec("ipadic") is not None


def _cli(tmp_path, hyps, refs, tokenize):
    (tmp_path / "ref.txt").write_text("\n".join(refs) + "\n", encoding="utf-8")
    (tmp_path / "hyp.txt").write_text("\n".join(hyps) + "\n", encoding="utf-8")
    cli = subprocess.run([sys.executable, "-m", "sacrebleu", str(tmp_path / "ref.txt"), "-i", str(tmp_path / "hyp.txt"),
                          "-m", "bleu", "-tok", tokenize, "-f", "json"], capture_output=True, text=True, check=True)
    return json.loads(cli.stdout)[0] if cli.stdout.lstrip().startswith("[") else json.loads(cli.stdout)


def test_chinese_bleu_equals_sacrebleus_command_line_with_tok_zh(tmp_path):
    theirs = _cli(tmp_path, HYPS_ZH, REFS_ZH, "zh")
    ours = corpus_scores(HYPS_ZH, REFS_ZH, "zh")["bleu"]
    assert round(ours["value"], 1) == theirs["score"] and ours["signature"] == theirs["signature"]
    assert "|tok:zh|" in ours["signature"] and 10 < ours["value"] < 100
    # 13a sees each unspaced sentence as one word and its full stop: no 4-gram in common, BLEU 0
    assert corpus_scores(HYPS_ZH, REFS_ZH, "13a")["bleu"]["value"] == 0.0


@pytest.mark.parametrize("value, language, expected", [
    ("auto", "zh", "zh"), ("auto", "zh-TW", "zh"), ("auto", "cmn", "zh"), ("auto", "Chinese", "zh"),
    ("auto", "en", "13a"), ("auto", "es", "13a"), ("auto", None, "13a"),
    ("char", "zh", "char"), ("13a", "ja", "13a"),  # an explicit tokenizer is the user's choice, whatever the language
])
def test_auto_picks_by_target_language(value, language, expected):
    assert resolve_tokenize(value, language) == expected


@pytest.mark.skipif(HAS_MECAB, reason="MeCab and ipadic are installed here")
@pytest.mark.parametrize("language", ["ja", "ja-JP", "jpn"])
def test_auto_refuses_japanese_without_mecab(language):
    with pytest.raises(ValueError, match=r"BLEU's tokenizer for it \(auto, from x\) is sacrebleu's ja-mecab, which "
                                         r"needs MeCab and ipadic \(pip install 'sacrebleu\[ja\]'\), not installed"):
        resolve_tokenize("auto", language, "x")


def test_the_setting_accepts_sacrebleus_names_only():
    assert parse_tokenize(" zh ") == "zh" and parse_tokenize("auto") == "auto" and parse_tokenize("char") == "char"
    with pytest.raises(ValueError, match=r"must be auto \(by target language\) or a sacrebleu tokenizer \(none, zh, "
                                         r"13a, .*\), got '13A'"):
        parse_tokenize("13A")
    if not HAS_MECAB:
        with pytest.raises(ValueError, match="sacrebleu's ja-mecab tokenizer needs MeCab and ipadic"):
            parse_tokenize("ja-mecab")


# ---------------------------------------------------------------- through pytest

TEXT_PY = '''
HYPS = {hyps!r}

def build_mt():
    """A stand-in MT stage: sample i's translation, as text."""
    return lambda sample: {{"text": HYPS[int(sample["id"])]}}
'''


def _zh_case(root, name, extra=""):
    (root / "mt.py").write_text(TEXT_PY.format(hyps=HYPS_ZH), encoding="utf-8")
    (root / "refs.txt").write_text("\n".join(REFS_ZH) + "\n", encoding="utf-8")
    write_case(root, name, [])
    body = (root / f"{name}.yaml").read_text()
    body += "  references: refs.txt\n  target_lang: zh\n" + extra + "stage1:\n  entry: mt.py:build_mt\n"
    body += "quality:\n  min_bleu: 20\n"
    (root / f"{name}.yaml").write_text(body, encoding="utf-8")
    return f"--s2st-config={name}.yaml"


def test_a_chinese_case_is_scored_with_tok_zh_and_its_gate_uses_it(pytester, tmp_path):
    pytester.makepyfile(test_bench=BENCH_TEST)
    result = pytester.runpytest("-p", "no:cacheprovider", "--s2st-warmup=0", "--s2st-flops=off", "--s2st-memory=off",
                                "--benchmark-json=out.json", _zh_case(pytester.path, "auto"),
                                _zh_case(pytester.path, "spaced", "  bleu_tokenize: 13a\n"), "-v")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*test_inference?callable-auto? PASSED*", "*test_inference?callable-spaced? FAILED*",
                                 "*bleu 0.00 < 20 (min_bleu)*"])
    rows = {b["name"]: b["extra_info"]["s2st"] for b in json.loads((pytester.path / "out.json").read_text())["benchmarks"]}
    bleu = rows["test_inference[callable-auto]"]["metrics"]["bleu"]
    theirs = _cli(tmp_path, HYPS_ZH, REFS_ZH, "zh")
    assert round(bleu["value"], 1) == theirs["score"] and bleu["details"]["signature"] == theirs["signature"]
    assert rows["test_inference[callable-auto]"]["translation_gate"]["status"] == "PASS"
    assert "|tok:13a|" in rows["test_inference[callable-spaced]"]["metrics"]["bleu"]["details"]["signature"]


@pytest.mark.parametrize("where, args, line", [
    ("config", [], "*bad.yaml:* (general.bleu_tokenize): must be auto (by target language) or a sacrebleu tokenizer*"
                   "got 'tok13a'"),
    ("flag", ["--s2st-bleu-tokenize=tok13a"], "*--s2st-bleu-tokenize*must be auto (by target language) or a "
                                              "sacrebleu tokenizer*got 'tok13a'"),
])
def test_an_unknown_tokenizer_is_one_line_before_any_test_runs(pytester, where, args, line):
    extra = "  bleu_tokenize: tok13a\n" if where == "config" else ""
    pytester.makepyfile(test_bench=BENCH_TEST)
    result = pytester.runpytest("-p", "no:cacheprovider", _zh_case(pytester.path, "bad", extra), *args)
    assert result.ret == 4
    output = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in output and "test_inference" not in output
    pytest.LineMatcher(output.splitlines()).fnmatch_lines([line])


@pytest.mark.skipif(HAS_MECAB, reason="MeCab and ipadic are installed here")
def test_a_japanese_case_without_mecab_is_refused_naming_its_target_lang(pytester):
    pytester.makepyfile(test_bench=BENCH_TEST)
    _zh_case(pytester.path, "ja")
    config = pytester.path / "ja.yaml"
    config.write_text(config.read_text().replace("target_lang: zh", "target_lang: ja"), encoding="utf-8")
    result = pytester.runpytest("-p", "no:cacheprovider", "--s2st-config=ja.yaml")
    assert result.ret == 4
    said = [line for line in (result.stdout.str() + result.stderr.str()).splitlines() if "ja-mecab" in line]
    assert len(said) == 1 and said[0].endswith(
        "ja.yaml:6 (general.target_lang): target language 'ja': BLEU's tokenizer for it (auto, from "
        "--s2st-bleu-tokenize (default)) is sacrebleu's ja-mecab, which needs MeCab and ipadic (pip install "
        "'sacrebleu[ja]'), not installed: install them, or set bleu_tokenize to another sacrebleu tokenizer (e.g. char)")
    # the way out it names works: a tokenizer that needs nothing more
    result = pytester.runpytest("-p", "no:cacheprovider", "--s2st-config=ja.yaml", "--s2st-bleu-tokenize=char",
                                "--s2st-warmup=0", "--s2st-flops=off", "--s2st-memory=off")
    result.assert_outcomes(passed=1)  # char: BLEU over characters, as zh splits Chinese; min_bleu 20 passes


@pytest.mark.skipif(HAS_MECAB, reason="MeCab and ipadic are installed here")
def test_a_tokenizer_sacrebleu_cannot_build_leaves_bleu_missing_with_the_reason():
    """Past the configure-time check (a case JSON from elsewhere, a module removed since): BLEU is n/a with
    sacrebleu's own first line, never a 13a score in its place; chrF needs no tokenizer and is kept."""
    from pytest_s2st.quality.translation import measure_translation

    ours = corpus_scores(HYPS_ZH, REFS_ZH, "ja-mecab")
    assert ours["bleu"]["value"] is None and ours["bleu"]["reason"].startswith(
        "sacrebleu cannot build BLEU tokenizer 'ja-mecab' (bleu_tokenize): Japanese tokenization requires extra")
    assert ours["chrf"] == corpus_scores(HYPS_ZH, REFS_ZH, "zh")["chrf"] and ours["chrf"]["value"] > 0
    samples = [{"tgt_text": r} for r in REFS_ZH]
    scores = measure_translation(samples, ["mt"], [[{"text": h} for h in HYPS_ZH]], None, "x", tokenize="ja-mecab")
    assert scores["bleu"]["value"] is None and scores["bleu"]["reason"] == ours["bleu"]["reason"]
    assert scores["chrf"]["value"] == ours["chrf"]["value"] and "reason" not in scores["chrf"]
