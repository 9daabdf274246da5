"""Fuzzing the config loader (hypothesis): any YAML either loads as a case or is one S2STError line.

Two generators: arbitrary text (syntax errors, tabs, odd unicode, anchors) and well-formed YAML of
random structure over the keys the loader knows (wrong types, nesting, duplicates by aliasing).
"""
from __future__ import annotations

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_s2st.cases import load_case
from pytest_s2st.gate import gate_policy, given_references, quality_keys
from pytest_s2st.errors import S2STError
from pytest_s2st.settings import SETTINGS

from helpers import make_dataset

COUNTS: dict[str, dict[str, int]] = {}
SETTINGS_FUZZ = settings(max_examples=300, deadline=None, database=None,
                         suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.fixture(autouse=True)
def _in_tmp_path(tmp_path, monkeypatch):
    """A fuzzed dump_dir that loads ("fast", "1,2") is created where it points, relative to the working
    directory: here, not in the checkout (they left folders such as "None" in the repository root)."""
    monkeypatch.chdir(tmp_path)

KEYS = ["model_type", "name", "dataset_path", "dataset_type", "targets", "serves_speech", "target_sr", "entry",
        "path", "data", "vocoder", "cpu", "quality", "baseline", "anchors", "workload", "concurrency", "${X}",
        "references", "target_lang", "referenses", "ttfa_s", "rtf"] + [s.name for s in SETTINGS]
# the quality: section: every policy and plugin key, a few typos of them
QUALITY_KEYS = quality_keys() + ["min_blue", "asr_model_dri", "Baseline", ""]
scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
                    st.text(max_size=20), st.sampled_from(["callable", "TTS", "S2UT", "3StageS2ST", "../x", "~",
                                                           "$HOME", "${NOPE}", "a:b.py:c", "1,2", "fast"]))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.sampled_from(KEYS), inner, max_size=4)),
                      max_leaves=12)
sections = st.dictionaries(st.sampled_from(["general", "stage1", "stage2", "stage3", "quality", "stage4", "extra"]),
                           st.one_of(st.dictionaries(st.sampled_from(KEYS), values, max_size=6), values), max_size=5)


def _load(path) -> str:
    try:
        load_case(path, {}, lambda name: None)
        return "loaded"
    except S2STError as exc:
        message = str(exc)
        assert message and "\n" not in message.strip(), message  # one line
        assert str(path) in message or "environment variable" in message or "ini option" in message, message
        return "refused"


def _count(name: str, outcome: str) -> None:
    COUNTS.setdefault(name, {}).update({outcome: COUNTS.get(name, {}).get(outcome, 0) + 1})


@SETTINGS_FUZZ
@given(text=st.text(max_size=300))
def test_any_text_is_a_case_or_one_line(tmp_path, text):
    path = tmp_path / "fuzz.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    _count("text", _load(path))


@SETTINGS_FUZZ
@given(doc=sections)
def test_any_structure_is_a_case_or_one_line(tmp_path, doc):
    path = tmp_path / "fuzz.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8", errors="surrogatepass")
    _count("structure", _load(path))


@SETTINGS_FUZZ
@given(general=st.dictionaries(st.sampled_from(KEYS), values, max_size=5), stage=st.dictionaries(st.sampled_from(KEYS), values, max_size=3))
def test_a_valid_case_with_random_keys_is_a_case_or_one_line(tmp_path, general, stage):
    """Starting from a valid callable case, random general/stage keys: many load, the rest are one line."""
    doc = {"general": {"model_type": "callable", **{k: v for k, v in general.items() if k != "model_type"}},
           "stage1": {"entry": "m.py:f", **stage}}
    path = tmp_path / "fuzz.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8", errors="surrogatepass")
    _count("valid+random", _load(path))


@SETTINGS_FUZZ
@given(quality=st.dictionaries(st.sampled_from(QUALITY_KEYS), values, max_size=5),
       references=st.one_of(st.none(), values, st.sampled_from(["refs.txt", "missing.txt", "", "dir", "latin.txt"])))
def test_a_valid_case_with_a_random_quality_section_and_references_is_a_case_or_one_line(tmp_path, quality, references):
    """The quality section's keys and types (asr_model_dir: 42 was a TypeError after the run) and
    general.references of any type, or naming a good, missing, Latin-1 file or a folder: a case or one line."""
    (tmp_path / "refs.txt").write_text("a\nb\nc\n")
    (tmp_path / "latin.txt").write_bytes(b"caf\xe9\nb\nc\n")
    (tmp_path / "dir").mkdir(exist_ok=True)
    make_dataset(tmp_path / "data.npy")
    general = {"model_type": "callable", "dataset_path": "data.npy"}
    if references is not None:
        general["references"] = references
    doc = {"general": general, "stage1": {"entry": "m.py:f"}, "quality": quality}
    path = tmp_path / "fuzz.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8", errors="surrogatepass")
    outcome = _load(path)
    if isinstance(references, str) and references in ("refs.txt", "missing.txt", "dir", "latin.txt", ""):
        assert outcome == "refused" or references == "refs.txt", references  # only the good file loads
    _count("quality+references", outcome)


@SETTINGS_FUZZ
@given(kwargs=st.dictionaries(st.sampled_from(QUALITY_KEYS), values, max_size=4))
def test_any_gate_marker_keywords_are_a_policy_or_one_line(kwargs):
    """s2st_gate(**kwargs) as the plugin checks it at setup: a Policy, or one line naming the marker."""
    where = "test_x.py:3 (s2st_gate of test_x)"
    try:
        gate_policy(None, kwargs, where)
        _count("marker", "loaded")
    except S2STError as exc:
        assert str(exc).startswith(where) and "\n" not in str(exc), str(exc)
        _count("marker", "refused")


@SETTINGS_FUZZ
@given(references=values, count=st.integers(1, 4))
def test_any_references_argument_is_a_list_of_strings_or_one_line(references, count):
    where = "test_x.py::test_x: s2st_benchmark(model, inputs)"
    try:
        out = given_references(references, count, where)
    except S2STError as exc:
        assert str(exc).startswith(where) and "\n" not in str(exc), str(exc)
        _count("references=", "refused")
        return
    assert len(out) == count and all(isinstance(r, str) and "\n" not in r for r in out)
    _count("references=", "loaded")


def test_a_huge_config_is_refused_without_reading_it(tmp_path):
    path = tmp_path / "huge.yaml"
    with open(path, "wb") as fh:
        fh.truncate(8 * 1024 * 1024)
    with pytest.raises(S2STError, match=r"huge.yaml: config file is \d+ bytes, over the \d+ one may have"):
        load_case(path, {}, lambda name: None)


@pytest.fixture(scope="module", autouse=True)
def report_counts():
    yield
    print("\nconfig fuzz examples:", COUNTS)
