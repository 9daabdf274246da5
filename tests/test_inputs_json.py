"""loads_finite against json's own reading: refused exactly when a number overflows to infinity, whatever the
spelling of the exponent, digits or strings around it (the fast probe must never let one through)."""
from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings, strategies as st

from pytest_s2st.inputs import loads_finite

NUMBER = st.from_regex(r"\A-?(0|[1-9][0-9]{0,3})(\.[0-9]{1,4})?([eE][-+]?0{0,3}[0-9]{1,4})?\Z")
LONG = st.integers(300, 320).map(lambda n: "9" * n)
TOKEN = st.one_of(NUMBER, LONG, st.sampled_from(['"e400"', '"7e400"', '"stage1"', '"a1E+0999"', "true", "null"]))


def _infinite(value) -> bool:
    if isinstance(value, list):
        return any(_infinite(v) for v in value)
    return isinstance(value, float) and math.isinf(value)


@settings(max_examples=400, deadline=None)
@given(st.lists(TOKEN, max_size=8), st.booleans())
def test_refused_exactly_when_a_number_overflows(tokens, as_bytes):
    text = "[" + ", ".join(tokens) + "]"
    truth = _infinite(json.loads(text))
    data = text.encode() if as_bytes else text
    if truth:
        with pytest.raises(ValueError, match="overflows to infinity"):
            loads_finite(data)
    else:
        assert loads_finite(data) == json.loads(text)


@pytest.mark.parametrize("text", ["[1e308]", "[1E+0307]", '{"h": "9e999"}', '["' + "1" * 400 + '"]'])
def test_finite_or_no_number_reads(text):
    assert loads_finite(text) == json.loads(text)


@pytest.mark.parametrize("text", ["[1e309]", "[-2.5E+0310]", "[1.0e0000000400]", "[" + "9" * 309 + ".0]"])
def test_overflow_refused(text):
    with pytest.raises(ValueError, match="overflows to infinity"):
        loads_finite(text)
