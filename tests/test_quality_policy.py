"""The frozen policy: validation with one-line errors, canonical fingerprint, JSON/YAML files."""
from __future__ import annotations

import json

import pytest

from pytest_s2st.errors import S2STError
from pytest_s2st.quality.policy import Policy

FULL = {"scorer_id": "s2st-abc", "min_improvement_pct": 10, "max_error_rate_increase": 0.05,
        "max_speaker_drop": 0.1, "max_duration_change_pct": 15, "max_ttfa_regression_pct": 5}


def test_round_trip_and_fingerprint_are_canonical():
    p = Policy.from_mapping(FULL, "p")
    assert p.max_error_rate_increase == 0.05 and p.min_improvement_pct == 10.0
    assert Policy.from_mapping(p.to_dict(), "again") == p
    # int vs float and key order do not change the fingerprint; any threshold does
    same = Policy.from_mapping(dict(reversed(list({**FULL, "min_improvement_pct": 10.0}.items()))), "p2")
    assert same.fingerprint() == p.fingerprint() and len(p.fingerprint()) == 64
    for key, value in [("max_speaker_drop", 0.11), ("scorer_id", "s2st-abd"), ("aggregate", "each"),
                       ("speed_metric", "ttfa_s"), ("max_ttfa_regression_pct", None)]:
        assert Policy.from_mapping({**FULL, key: value}, "p").fingerprint() != p.fingerprint(), key


def test_unset_thresholds_are_not_gated():
    p = Policy.from_mapping({"max_duration_change_pct": 20}, "p")
    assert p.thresholds() == {"max_duration_change_pct": 20.0} and p.scorer_id is None


@pytest.mark.parametrize("data, message", [
    ({**FULL, "max_wer": 0.1}, "where.json: unknown policy key 'max_wer'"),
    ({**FULL, "max_speaker_drop": -0.1}, "where.json: max_speaker_drop must be >= 0, got -0.1"),
    ({**FULL, "max_speaker_drop": "0.1"}, "where.json: max_speaker_drop must be a finite number, got '0.1'"),
    ({**FULL, "min_improvement_pct": True}, "where.json: min_improvement_pct must be a finite number, got True"),
    ({**FULL, "scorer_id": ""}, "where.json: scorer_id must be a non-empty string"),
    ({"max_error_rate_increase": 0.05}, "where.json: scorer_id is required when max_error_rate_increase is set"),
    ({**FULL, "speed_metric": "flops"}, "where.json: speed_metric must be one of rtf, ttfa_s, got 'flops'"),
    ([1, 2], "where.json: policy must be a mapping, got list"),
])
def test_bad_policy_names_where_and_key(data, message):
    with pytest.raises(S2STError) as e:
        Policy.from_mapping(data, "where.json")
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_load_json_and_yaml(tmp_path):
    (tmp_path / "p.json").write_text(json.dumps(FULL))
    (tmp_path / "p.yaml").write_text("".join(f"{k}: {v}\n" for k, v in FULL.items()))
    assert Policy.load(tmp_path / "p.json") == Policy.load(tmp_path / "p.yaml") == Policy.from_mapping(FULL, "x")
    (tmp_path / "bad.yaml").write_text("max_speaker_drop: [1\n")
    with pytest.raises(S2STError, match=r"bad.yaml: cannot read policy: not valid YAML"):
        Policy.load(tmp_path / "bad.yaml")
    (tmp_path / "neg.yaml").write_text("max_speaker_drop: -1\n")
    with pytest.raises(S2STError, match=r"neg.yaml: max_speaker_drop must be >= 0"):
        Policy.load(tmp_path / "neg.yaml")
    with pytest.raises(S2STError, match=r"missing.json: policy not found"):
        Policy.load(tmp_path / "missing.json")
