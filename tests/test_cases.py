"""Case <-> JSON: what pytest resolved is exactly what a server process receives."""
from __future__ import annotations

import json

import pytest

from helpers import write_case, write_tone_case
from pytest_s2st.cases import Case, load_case, settings_from_json, settings_to_json
from pytest_s2st.settings import SETTINGS, compare_limits


def no_ini(name):
    return None


def round_trip(case: Case) -> Case:
    return Case.from_dict(json.loads(json.dumps(case.to_dict())))


def test_round_trip_is_exact(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = write_case(tmp_path, "rt", ["build_numpy", "build_numpy"], general_extra="""\
        concurrency: [1, 4]
        targets: {ttfa_s: 0.5}
        opts: {nested: [1, 2]}
        """)
    with path.open("a") as f:
        f.write("quality:\n  baseline: base.yaml\n  max_speaker_drop: 0.1\n  scorer_id: resemblyzer-0.1.4\n")
    explicit = {"threads": 3, "compare_fail": compare_limits("flops:1%,runtime_s:0.123456789s"), "repeat": 2}
    case = load_case(path, explicit, no_ini)
    back = round_trip(case)
    assert back == case
    assert back.settings["concurrency"] == (1, 4) and back.settings["compare_fail"] == explicit["compare_fail"]
    assert back.config.path == path and back.config.quality["baseline"] == str(tmp_path / "base.yaml")
    assert back.config.stages[1]["entry"] == f"{tmp_path / 'models.py'}:build_numpy"
    assert back.config.where("general.concurrency") == case.config.where("general.concurrency")
    d = case.to_dict()
    assert d["settings"]["concurrency"] == [1, 4] and d["path"] == str(path)  # JSON types, not tuples / Paths
    assert set(d) == {"path", "case_id", "model_type", "general", "stages", "quality", "serve", "lines", "settings"}


def test_round_trip_needs_no_yaml(tmp_path):
    """from_dict resolves nothing and reads nothing: the YAML may be gone."""
    case = load_case(write_tone_case(tmp_path), {}, no_ini)
    d = json.loads(json.dumps(case.to_dict()))
    case.config.path.unlink()
    assert Case.from_dict(d) == case and Case.from_dict(d).serves_speech


def test_every_default_setting_survives_json():
    defaults = {s.name: s.default for s in SETTINGS}
    assert settings_from_json(json.loads(json.dumps(settings_to_json(defaults)))) == defaults


def test_yaml_values_json_lacks_become_text(tmp_path):
    p = tmp_path / "d.yaml"
    p.write_text("general:\n  model_type: callable\n  released: 2024-01-02\n  codes: {1: one}\nstage1:\n  entry: m.py:f\n")
    d = load_case(p, {}, no_ini).to_dict()
    assert d["general"]["released"] == "2024-01-02" and d["general"]["codes"] == {"1": "one"}
    json.dumps(d)


def test_bad_setting_in_json_is_a_value_error():
    with pytest.raises(ValueError, match="must be an integer > 0"):
        settings_from_json({"threads": 0})


@pytest.mark.parametrize("value, words", [("[[1.0e16, 1.0e16], {a: 1}]", "must be a path (text), got list"),
                                          ("'" + "x" * 5000 + "'", "cannot be read: OSError"),
                                          ("nowhere.npy", "does not exist")])
def test_a_dataset_path_that_is_no_path_is_one_line_naming_its_key(tmp_path, value, words):
    """A list, or a name too long for the file system, went to Path.exists() and raised a traceback (found by
    tests/test_fuzz_config.py); each is one line naming the file and key."""
    from pytest_s2st.errors import S2STError

    cfg = write_case(tmp_path, "x", ["build_numpy"])
    cfg.write_text(cfg.read_text().replace("dataset_path: data.npy", f"dataset_path: {value}"))
    with pytest.raises(S2STError) as err:
        load_case(cfg, {}, lambda name: None)
    assert words in str(err.value) and "dataset_path" in str(err.value) and "\n" not in str(err.value)
