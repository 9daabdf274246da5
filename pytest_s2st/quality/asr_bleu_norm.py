"""The text normalisers ASR-BLEU applies to both sides (transcripts and references) before sacrebleu.

An ASR writes lower-case words: no punctuation, no digits ("twenty five", not "25"). A reference written as
text ("Dr. Smith paid $25.") scored raw against it loses every punctuation token, every capital and every
number. fairseq's S2ST evaluation pre-processes English references with the text cleaner of
keithito/tacotron (examples/speech_to_speech/docs/direct_s2st_discrete_units.md, "Text normalization");
its asr_bleu scripts then compare the ``strip().lower()``-ed transcripts with the references as given.

* ``fairseq-asr-bleu-en-v1`` (target language en): tacotron's ``english_cleaners`` re-implemented here
  (behaviour copied, not code; unidecode and inflect are not dependencies): fold to ASCII letters (NFKD,
  accents dropped, a few letters spelled out), lower-case, numbers to words (thousands separators dropped,
  ``$3.50`` -> "three dollars fifty cents", ``3.14`` -> "three point fourteen", ``21st`` -> "twenty-first",
  1001-2999 read as years: ``1999`` -> "nineteen ninety-nine", ``2005`` -> "two thousand five", ``1900`` ->
  "nineteen hundred"; other numbers as inflect's ``number_to_words(n, andword='')``), the 18 title
  abbreviations (``dr.`` -> doctor, ``st.`` -> saint, ...), then what an ASR cannot write removed: every
  character that is not a letter or a digit becomes a space, except an apostrophe inside a word ("don't").
  Where tacotron's cleaner keeps punctuation, this one drops it: an ASR transcript never has any, so kept
  it would only count as misses. Where it crashes (numbers of 36 digits or more) or mangles (unidecode
  spells ``£`` "PS", so its pounds rule never fires), this reads the digits one by one / says "pounds".
* ``nfkc-lower-nopunct-v1`` (any other language): NFKC, lower-case, the same punctuation removal (marks
  kept: they are letters in many scripts); digits stay digits (no number words are guessed).

Both are idempotent, never raise, and grow a text by at most ``GROWTH`` times (a digit becomes a word).
Pytest-free and import-light (``re``, ``unicodedata``).
"""
from __future__ import annotations

import re
import unicodedata

ENGLISH = "fairseq-asr-bleu-en-v1"
OTHER = "nfkc-lower-nopunct-v1"
# len(normalise(x)) <= GROWTH * len(x) + GROWTH: NFKD makes one character at most 18, and "㊲" (a circled 37)
# two digits, read in triples with their scale words: 17 of them are 417 characters, the most found per character
GROWTH = 32

# ---------------------------------------------------------------- English: tacotron's english_cleaners

# letters NFKD does not decompose into ASCII, as unidecode spells them
_LETTERS = str.maketrans({"ß": "ss", "æ": "ae", "Æ": "AE", "œ": "oe", "Œ": "OE", "ø": "o", "Ø": "O", "đ": "d",
                          "Đ": "D", "ł": "l", "Ł": "L", "þ": "th", "Þ": "TH", "ð": "d", "Ð": "D", "ı": "i",
                          "ħ": "h", "Ħ": "H", "ŋ": "ng", "Ŋ": "NG", "ĸ": "q",
                          "\u2018": "'", "\u2019": "'", "\u02bc": "'", "\u2032": "'"})

_UNITS = ("", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
_TEENS = ("ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
          "nineteen")
_TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
_SCALES = ("", " thousand", " million", " billion", " trillion", " quadrillion", " quintillion", " sextillion",
           " septillion", " octillion", " nonillion", " decillion")  # inflect's range: below 10**36
_DIGIT_WORDS = ("zero",) + _UNITS[1:]
_ORDINAL_ENDS = {"one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth",
                 "nine": "ninth", "twelve": "twelfth"}

# tacotron's order; each digit pattern starts only where a run of digits starts (the same matches, linear time)
_COMMA_NUMBER = re.compile(r"(?<![0-9])[0-9][0-9,]+[0-9]")
_POUNDS = re.compile(r"£([0-9,]*[0-9]+)")
_DOLLARS = re.compile(r"\$([0-9.,]*[0-9]+)")
_DECIMAL = re.compile(r"(?<![0-9])([0-9]+)\.([0-9]+)")
_ORDINAL = re.compile(r"(?<![0-9])([0-9]+)(?:st|nd|rd|th)")
_NUMBER = re.compile(r"[0-9]+")
_ABBREVIATIONS = [(re.compile(rf"\b{short}\.", re.IGNORECASE), full) for short, full in (
    ("mrs", "misess"), ("mr", "mister"), ("dr", "doctor"), ("st", "saint"), ("co", "company"), ("jr", "junior"),
    ("maj", "major"), ("gen", "general"), ("drs", "doctors"), ("rev", "reverend"), ("lt", "lieutenant"),
    ("hon", "honorable"), ("sgt", "sergeant"), ("capt", "captain"), ("esq", "esquire"), ("ltd", "limited"),
    ("col", "colonel"), ("ft", "fort"))]


def _tens(tens: int, units: int) -> str:
    if tens == 1:
        return _TEENS[units]
    return f"{_TENS[tens]}-{_UNITS[units]}" if tens and units else _TENS[tens] or _UNITS[units]


def _cardinal(digits: str, andword: str = "") -> str:
    """inflect's number_to_words of a digit string (group 0); beyond its range, one word per digit."""
    digits = digits.lstrip("0")
    if not digits:
        return "zero"
    if len(digits) > 3 * len(_SCALES):
        return " ".join(_DIGIT_WORDS[int(d)] for d in digits)
    parts = []
    groups = [digits[max(0, end - 3):end] for end in range(len(digits), 0, -3)]
    for scale, group in reversed(list(enumerate(groups))):
        h, t, u = (int(d) for d in group.rjust(3, "0"))
        if not (h or t or u):
            continue
        words = f"{_UNITS[h]} hundred" if h else ""
        if t or u:
            words += (f" {andword} " if h and andword else " " if h else "") + _tens(t, u)
        parts.append(words + _SCALES[scale])
    if andword and len(parts) > 1 and " " not in parts[-1]:  # inflect: "one thousand and one"
        parts[-1] = f"{andword} {parts[-1]}"
    return " ".join(parts)


def _ordinal(digits: str) -> str:
    """inflect's number_to_words("21st"): the cardinal (with "and"), its last word made ordinal."""
    words = _cardinal(digits, andword="and")
    head, _, last = words.rpartition(" ")
    stem, _, tail = last.rpartition("-")
    if tail in _ORDINAL_ENDS:
        tail = _ORDINAL_ENDS[tail]
    elif tail.endswith("y"):
        tail = tail[:-1] + "ieth"
    else:
        tail += "th"
    last = f"{stem}-{tail}" if stem else tail
    return f"{head} {last}" if head else last


def _number(digits: str) -> str:
    """tacotron's _expand_number: 1001-2999 read as a year, the rest as cardinals without "and"."""
    stripped = digits.lstrip("0")
    if len(stripped) == 4 and "1000" < stripped < "3000":
        num = int(stripped)
        if num == 2000:
            return "two thousand"
        if 2000 < num < 2010:
            return "two thousand " + _UNITS[num % 100]
        if num % 100 == 0:
            return _cardinal(str(num // 100)) + " hundred"
        high, low = divmod(num, 100)  # inflect group=2, zero="oh": "nineteen oh-five"
        return f"{_tens(*divmod(high, 10))} {_tens(*divmod(low, 10)) if low >= 10 else 'oh ' + _UNITS[low]}"
    return _cardinal(digits)


def _dollars(match: re.Match) -> str:
    parts = match.group(1).split(".")
    if len(parts) > 2:
        return match.group(1) + " dollars"  # tacotron: an unexpected format
    dollars = re.sub(r"[^0-9]", "", parts[0]).lstrip("0")
    cents = re.sub(r"[^0-9]", "", parts[1]).lstrip("0") if len(parts) > 1 else ""
    unit = lambda amount, one, many: f"{amount} {one if amount == '1' else many}"  # noqa: E731
    if dollars and cents:
        return f"{unit(dollars, 'dollar', 'dollars')}, {unit(cents, 'cent', 'cents')}"
    if dollars:
        return unit(dollars, "dollar", "dollars")
    if cents:
        return unit(cents, "cent", "cents")
    return "zero dollars"


def expand_numbers(text: str) -> str:
    """tacotron's normalize_numbers (lower-case input)."""
    text = _COMMA_NUMBER.sub(lambda m: m.group(0).replace(",", ""), text)
    text = _POUNDS.sub(r"\1 pounds", text)
    text = _DOLLARS.sub(_dollars, text)
    text = _DECIMAL.sub(r"\1 point \2", text)
    text = _ORDINAL.sub(lambda m: _ordinal(m.group(1)), text)
    return _NUMBER.sub(lambda m: _number(m.group(0)), text)


def _ascii_letters(text: str) -> str:
    """unidecode's role for Latin text: accents dropped, a few letters spelled out, curly apostrophes straight
    (other scripts are left as they are: no transliteration)."""
    text = unicodedata.normalize("NFKD", text).translate(_LETTERS)
    return "".join(ch for ch in text if unicodedata.category(ch) != "Mn")


def _wordy(ch: str) -> bool:
    return unicodedata.category(ch)[0] in "LNM"  # letters, digits, marks (a vowel sign is part of its word)


def _words_only(text: str) -> str:
    """What an ASR can write: letters, digits and marks; an apostrophe inside a word ("don't") stays, every
    other character is a space; runs of spaces are one, none at either end."""
    last = len(text) - 1
    kept = [ch if _wordy(ch) or ch == "'" and 0 < i < last and _wordy(text[i - 1]) and _wordy(text[i + 1])
            else " " for i, ch in enumerate(text)]
    return " ".join("".join(kept).split())


def _settle(text: str, fold) -> str:
    """Lower-casing can un-normalise a character (İ -> i + a combining dot) and NFKD can bring a capital
    back (ℌ -> H): repeat the two until nothing changes, so normalising twice changes nothing."""
    for _ in range(4):
        again = fold(text.lower())
        if again == text:
            break
        text = again
    return text


def english(text: str) -> str:
    """``fairseq-asr-bleu-en-v1`` (see the module's docstring)."""
    text = _ascii_letters(text).lower()
    text = expand_numbers(text)
    for regex, full in _ABBREVIATIONS:
        text = regex.sub(full, text)
    return _settle(_words_only(text), lambda t: _words_only(_ascii_letters(t)))


def other(text: str) -> str:
    """``nfkc-lower-nopunct-v1``: NFKC, lower-case, punctuation and symbols removed."""
    nfkc = lambda t: _words_only(unicodedata.normalize("NFKC", t))  # noqa: E731
    return _settle(nfkc(text.lower()), nfkc)


NORMALIZERS = {ENGLISH: english, OTHER: other}


def normalizer_for(language: str | None) -> str:
    """The normaliser of a target language's ASR-BLEU: fairseq's English procedure for en, else the generic one."""
    return ENGLISH if (language or "").split("-")[0] in ("en", "eng") else OTHER


def normalize(name: str, text: str) -> str:
    return NORMALIZERS[name](text)
