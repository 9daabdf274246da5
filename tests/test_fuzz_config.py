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
from pytest_s2st.errors import S2STError
from pytest_s2st.settings import SETTINGS

COUNTS: dict[str, dict[str, int]] = {}
SETTINGS_FUZZ = settings(max_examples=300, deadline=None, database=None,
                         suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

KEYS = ["model_type", "name", "dataset_path", "dataset_type", "targets", "serves_speech", "target_sr", "entry",
        "path", "data", "vocoder", "cpu", "quality", "baseline", "anchors", "workload", "concurrency", "${X}"] + \
       [s.name for s in SETTINGS]
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
