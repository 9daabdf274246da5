"""ASR-BLEU's text normalisers (quality/asr_bleu_norm.py): fairseq's documented English cleaner (tacotron's
english_cleaners) with punctuation removed, the generic one for other languages, and ASR-BLEU scored through
them on both sides, against sacrebleu's command line on references normalised by hand."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import unicodedata

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_s2st.quality.asr_bleu_norm import ENGLISH, GROWTH, OTHER, english, normalizer_for, other
from pytest_s2st.quality.translation import asr_bleu

# Each expectation worked out by hand from tacotron's rules (ASCII, lower-case, numbers, abbreviations), then
# every character an ASR cannot write removed; each also agreed with tacotron's own english_cleaners (unidecode
# + inflect, run outside this suite) followed by the same removal.
ENGLISH_CASES = [
    ("Hello, World!", "hello world"),
    ("Mr. & Mrs. O\u2019Brien\u2019s caf\u00e9 \u2014 na\u00efve!", "mister misess o'brien's cafe naive"),
    ("St. Louis, Ft. Worth & Co. Ltd.", "saint louis fort worth company limited"),
    ("Stra\u00dfe \u00c6sir \u0130stanbul", "strasse aesir istanbul"),
    ("'quoted' don't rock-'n'-roll", "quoted don't rock n roll"),
    ("1,234,567", "one million two hundred thirty four thousand five hundred sixty seven"),
    ("$3.50 $1.01 $0.05 $2", "three dollars fifty cents one dollar one cent five cents two dollars"),
    ("\u00a35", "five pounds"),  # unidecode spells it "PS5" and tacotron says "psfive": its pounds rule never fires
    ("3.14", "three point fourteen"),
    ("101st 1001st 12th 20th 0th 3rd", "one hundred and first one thousand and first twelfth twentieth zeroth third"),
    ("1905 1900 2000 2008 2015 1000 3000", "nineteen oh five nineteen hundred two thousand two thousand eight "
                                           "twenty fifteen one thousand three thousand"),
    ("0 007 10 115 1000001", "zero seven ten one hundred fifteen one million one"),
    ("1" + "0" * 36, "one" + " zero" * 36),  # past inflect's decillions (tacotron raises): digit by digit
    ("\uff21\uff22\uff23\uff11\uff12", "abctwelve"),  # full-width: NFKD makes them ASCII, then the number rule
    ("GRO\u1e9eE", "grosse"),  # lower-casing makes the capital sharp s an \u00df, spelled ss too: idempotent
    ("\u041c\u043e\u0441\u043a\u0432\u0430", "\u043c\u043e\u0441\u043a\u0432\u0430"),  # no transliteration
]
OTHER_CASES = [
    ("\u00a1Hola, Se\u00f1or! \u00bfQu\u00e9 tal?", "hola se\u00f1or qu\u00e9 tal"),  # accents are letters here
    ("\u4eca\u5929\uff0c\u5929\u6c14\u5f88\u597d\u3002", "\u4eca\u5929 \u5929\u6c14\u5f88\u597d"),
    ("\u0928\u092e\u0938\u094d\u0924\u0947, \u0926\u0941\u0928\u093f\u092f\u093e!",  # vowel signs and virama stay
     "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e"),
    ("\uff21\uff22\uff23 123", "abc 123"),  # digits stay digits
    ("\u1d2c\u1d2e", "ab"),  # modifier capitals: NFKC makes them capitals, lower-cased again (idempotent)
]


@pytest.mark.parametrize("raw, expected", ENGLISH_CASES)
def test_the_english_normaliser_is_tacotrons_cleaner_without_punctuation(raw, expected):
    assert english(raw) == expected


@pytest.mark.parametrize("raw, expected", OTHER_CASES)
def test_other_languages_lose_case_and_punctuation_only(raw, expected):
    assert other(raw) == expected


@pytest.mark.parametrize("language, name", [("en", ENGLISH), ("en-us", ENGLISH), ("eng", ENGLISH), ("es", OTHER),
                                            ("zh", OTHER), (None, OTHER)])
def test_the_normaliser_follows_the_target_language(language, name):
    assert normalizer_for(language) == name


def _check(normalise, text: str) -> str:
    out = normalise(text)
    assert normalise(out) == out  # idempotent: a normalised reference is left as it is
    assert len(out) <= GROWTH * len(text) + GROWTH
    assert out == " ".join(out.split())
    for i, ch in enumerate(out):  # only what an ASR writes: letters, digits, marks, an apostrophe inside a word
        assert ch == " " or unicodedata.category(ch)[0] in "LNM" or ch == "'" and 0 < i < len(out) - 1, (text, out)
    return out


NUMBERY = st.text(alphabet="0123456789.,$\u00a3 stndrhmcoflgj'-\u2019\u00e9A", max_size=80)


@settings(max_examples=300, deadline=None, database=None)  # no .hypothesis/ in the checkout
@given(st.one_of(st.text(max_size=120), NUMBERY))
def test_fuzz_the_english_normaliser(text):
    out = _check(english, text)
    assert not re.search(r"[0-9]", out)  # every ASCII digit became a word


@settings(max_examples=200, deadline=None, database=None)
@given(st.text(max_size=120))
def test_fuzz_the_other_normaliser(text):
    _check(other, text)


def test_long_inputs_stay_linear():
    """A references line may be 64 Ki characters: digit runs and dots scanned once, not once per position."""
    for text in ("1" * 65_536, "1." * 32_768, "$" + "1," * 32_767, "mr." * 21_845):
        assert len(english(text)) <= GROWTH * len(text)
    assert 24 * 17 < len(english("\u32b2" * 17)) <= GROWTH * 17  # the most growth found: circled 37s


# ---------------------------------------------------------------- ASR-BLEU through it, against sacrebleu's CLI

REFS_RAW = ["The weather is nice today.", "She bought 3 red apples at the market!", "Dr. Smith paid $25 on May 3rd.",
            "We met in 1999, at 7 o'clock."]
REFS_HAND = ["the weather is nice today", "she bought three red apples at the market",
             "doctor smith paid twenty five dollars on may third", "we met in nineteen ninety nine at seven o'clock"]
# what an ASR writes for a perfect and a flawed rendering of each (a hand-built ASR keyed by waveform length)
HEARD = {1600: "The weather is nice today", 3200: "she bought three red apples the market",
         4800: "this is a twenty five dollars on may third", 6400: "we met in nineteen ninety nine at seven o'clock"}


class _HandASR:
    name = "hand"

    def unavailable(self, language):
        return None

    def identity(self):
        return {"backend": self.name}

    def transcribe(self, wav16k, language):
        return HEARD[len(wav16k)]


def _cli_bleu(tmp_path, hyps, refs, *extra):
    (tmp_path / "ref.txt").write_text("\n".join(refs) + "\n")
    (tmp_path / "hyp.txt").write_text("\n".join(hyps) + "\n")
    cli = subprocess.run([sys.executable, "-m", "sacrebleu", str(tmp_path / "ref.txt"), "-i", str(tmp_path / "hyp.txt"),
                          "-m", "bleu", "chrf", "-f", "json", *extra], capture_output=True, text=True, check=True)
    return {d["name"]: d for d in json.loads(cli.stdout)}


def test_asr_bleu_normalises_both_sides_as_fairseq_documents(tmp_path):
    assert [english(r) for r in REFS_RAW] == REFS_HAND
    waves = [(np.zeros(n, np.float32), 16000) for n in sorted(HEARD)]
    ours = asr_bleu(waves, REFS_RAW, _HandASR(), "en")
    hyps = [HEARD[n].strip().lower() for n in sorted(HEARD)]
    assert ours["transcripts"] == hyps and ours["normalizer"] == ENGLISH
    theirs = _cli_bleu(tmp_path, hyps, REFS_HAND)
    assert round(ours["asr_bleu"]["value"], 1) == theirs["BLEU"]["score"]
    assert round(ours["asr_chrf"]["value"], 1) == theirs["chrF2"]["score"]
    assert ours["asr_bleu"]["signature"] == theirs["BLEU"]["signature"] + "|norm:" + ENGLISH
    raw = _cli_bleu(tmp_path, hyps, REFS_RAW)  # what ASR-BLEU read before: references left raw
    assert raw["BLEU"]["score"] + 20 < theirs["BLEU"]["score"] < 100, (raw["BLEU"]["score"], theirs["BLEU"]["score"])
    # the normaliser is part of the score's identity: a score from before is never compared with one from after
    spanish = asr_bleu(waves, REFS_RAW, _HandASR(), "es")
    assert spanish["normalizer"] == OTHER and spanish["scorer_id"] != ours["scorer_id"]


# ---------------------------------------------------------------- through pytest: real speech, real ASR

VOICE_PY = '''
import soundfile as sf

WAVS = {wavs!r}


def build_voice():
    """A stand-in S2ST model: sample i's translation, spoken (espeak-ng read the reference itself)."""
    def forward(sample):
        data, rate = sf.read(WAVS[int(sample["id"])], dtype="float32")
        return {{"waveform": data, "sample_rate": rate}}
    return forward
'''


def _by_hand_transcripts(wavs):
    """pocketsphinx's shipped en-US model run directly on each WAV, resampled to its 16 kHz."""
    from math import gcd

    import soundfile as sf
    from pocketsphinx import Decoder
    from scipy.signal import resample_poly

    decoder, out = Decoder(samprate=16000, loglevel="FATAL"), []
    for wav in wavs:
        data, rate = sf.read(wav, dtype="float32")
        g = gcd(16000, rate)
        pcm = resample_poly(data, 16000 // g, rate // g).astype(np.float32)
        decoder.start_utt()
        decoder.process_raw((np.clip(pcm, -1, 1) * 32767).astype("<i2").tobytes(), full_utt=True)
        decoder.end_utt()
        out.append(decoder.hyp().hypstr.strip().lower() if decoder.hyp() is not None else "")
    return out


def test_a_speech_case_scores_asr_bleu_on_normalised_references(pytester, tmp_path):
    """espeak-ng speaks the four raw references (a perfect translation, rendered as speech); the plugin transcribes
    them with pocketsphinx and scores them against the raw reference file: equal to sacrebleu's CLI on the same
    transcripts and the references normalised by hand, where the raw references read far lower."""
    from espeak_runs import espeak
    from helpers import BENCH_TEST, make_dataset, write_case

    wavs = []
    for i, text in enumerate(REFS_RAW):
        espeak(text, "en-us+klatt2" if i % 2 == 0 else "en-us+klatt5", pytester.path / "wav" / f"{i}.wav")
        wavs.append(str(pytester.path / "wav" / f"{i}.wav"))
    (pytester.path / "voice.py").write_text(VOICE_PY.format(wavs=wavs))
    (pytester.path / "refs.txt").write_text("\n".join(REFS_RAW) + "\n")
    make_dataset(pytester.path / "data.npy", n=len(REFS_RAW))
    write_case(pytester.path, "voice", [])
    config = pytester.path / "voice.yaml"
    config.write_text(config.read_text() + "  references: refs.txt\n  target_lang: en\nstage1:\n  entry: voice.py:build_voice\n"
                      "quality:\n  min_asr_bleu: 1\n")
    pytester.makepyfile(test_bench=BENCH_TEST)
    result = pytester.runpytest("-p", "no:cacheprovider", "--s2st-warmup=0", "--s2st-flops=off", "--s2st-memory=off",
                                "--benchmark-json=out.json", "--s2st-config=voice.yaml")
    result.assert_outcomes(passed=1)
    row = json.loads((pytester.path / "out.json").read_text())["benchmarks"][0]["extra_info"]["s2st"]
    metric = row["metrics"]["asr_bleu"]
    hyps = _by_hand_transcripts(wavs)
    assert metric["details"]["transcripts"] == hyps and metric["details"]["normalizer"] == ENGLISH
    theirs = _cli_bleu(tmp_path, hyps, REFS_HAND)
    assert round(metric["value"], 1) == theirs["BLEU"]["score"]
    assert metric["details"]["signature"] == theirs["BLEU"]["signature"] + "|norm:" + ENGLISH
    raw = _cli_bleu(tmp_path, hyps, REFS_RAW)["BLEU"]["score"]
    assert raw + 10 < metric["value"], (raw, metric["value"], hyps)
    assert row["translation_gate"]["status"] == "PASS"


def test_the_docs_table_is_what_the_normaliser_does():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "quality.md").read_text()
    table = re.search(r"<!-- normaliser: tests/test_asr_bleu_normalise.py -->\n(.*?)\n\n", doc, re.S)
    assert table, "docs/quality.md lost its normaliser table"
    rows = re.findall(r"^\s*\| `(.+?)` \| `(.+?)` \|$", table.group(1), re.M)
    assert len(rows) >= 4
    for raw, shown in rows:
        assert english(raw) == shown, raw


def test_a_baseline_scored_before_normalisation_is_not_compared():
    """A row saved before references were normalised (no |norm: in its signature, the old scorer id) against one
    from after: INCONCLUSIVE with the reason, never a drop or a gain that is only the normaliser's."""
    from pytest_s2st.quality.policy import Policy
    from pytest_s2st.quality.translation import judge_translation

    waves = [(np.zeros(n, np.float32), 16000) for n in sorted(HEARD)]
    now = asr_bleu(waves, REFS_RAW, _HandASR(), "en")
    candidate = {"asr_bleu": {"value": now["asr_bleu"]["value"],
                              "details": {"signature": now["asr_bleu"]["signature"], "scorer_id": now["scorer_id"]}}}
    before = {"asr_bleu": {"value": 13.37, "details": {"signature": now["asr_bleu"]["signature"].split("|norm:")[0],
                                                       "scorer_id": "asrbleu-0123456789abcdef"}}}
    policy = Policy.from_mapping({"max_asr_bleu_drop": 1}, "p")
    status, reasons, _ = judge_translation(policy, candidate, before)
    assert status == "INCONCLUSIVE" and reasons == [
        f"max_asr_bleu_drop: asr_bleu transcribed by another ASR or normalised otherwise: baseline "
        f"'asrbleu-0123456789abcdef', candidate {now['scorer_id']!r}"]
    assert judge_translation(policy, candidate, candidate)[0] == "PASS"
