"""Config loader: upstream merge, strict YAML, env expansion, path resolution, overrides."""
from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from pytest_s2st.config import load_config
from pytest_s2st.errors import S2STError

KNOWN = ["S2T", "MT", "TTS", "S2S", "S2UT", "2StageS2ST", "3StageS2ST"]

# upstream configs/3StageS2ST.yaml as published (stage2 repeated), values made concrete
UPSTREAM_3STAGE = """\
general:
  dataset_path: $npy_dataset
  cpu: True
  model_type: 3StageS2ST
  max_len_a: 2
  max_len_b: 500
  dataset_size: 1

stage1:
  data: $data_bin_stage1
  task: speech_to_text
  path: $checkpoint_stage1
  config_yaml: config.yaml
  max_len_a: 2
  max_len_b: 500

stage2:
  data: $data_bin_stage2
  task: translation
  path: $checkpoint_stage2
  config_yaml: config.yaml


stage2:
  data: $data_bin_stage3
  task: text_to_speech
  path: $checkpoint_stage3
  config_yaml: config.yaml
"""


def write(tmp_path: Path, text: str, name: str = "case.yaml") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def load(p, **kw):
    return load_config(p, known_model_types=KNOWN, **kw)


def error_of(p, **kw) -> str:
    with pytest.raises(S2STError) as ei:
        load(p, **kw)
    msg = str(ei.value)
    assert "\n" not in msg
    return msg


@pytest.fixture
def upstream_env(monkeypatch):
    for var in ("npy_dataset", "data_bin_stage1", "data_bin_stage2", "data_bin_stage3",
                "checkpoint_stage1", "checkpoint_stage2", "checkpoint_stage3"):
        monkeypatch.setenv(var, f"/abs/{var}")


def test_upstream_duplicate_stage2_is_rejected_with_both_lines(tmp_path, upstream_env):
    p = write(tmp_path, UPSTREAM_3STAGE)
    assert error_of(p) == f"{p}:24: duplicate key 'stage2' (first at line 17)"


def test_duplicate_nested_key_is_rejected(tmp_path):
    p = write(tmp_path, """\
        general:
          model_type: S2T
          dataset_size: 1
          dataset_size: 2
        """)
    assert error_of(p) == f"{p}:4: duplicate key 'dataset_size' (first at line 3)"


def test_upstream_merge_fixed_3stage(tmp_path, upstream_env):
    text = UPSTREAM_3STAGE.replace("stage2:\n  data: $data_bin_stage3", "stage3:\n  data: $data_bin_stage3")
    cfg = load(write(tmp_path, text, "3StageS2ST.yaml"))
    assert cfg.model_type == "3StageS2ST"
    assert cfg.case_id == "3StageS2ST-3StageS2ST"
    assert [s["task"] for s in cfg.stages] == ["speech_to_text", "translation", "text_to_speech"]
    # every stage is general updated with its own section
    assert all(s["dataset_size"] == 1 and s["cpu"] is True and s["max_len_b"] == 500 for s in cfg.stages)
    assert cfg.stages[2]["path"] == "/abs/checkpoint_stage3"
    assert cfg.stages[1]["data"] == "/abs/data_bin_stage2"
    assert cfg.stages[0]["config_yaml"] == "config.yaml"  # left for fairseq to resolve against data
    assert "task" not in cfg.general
    assert cfg.quality is None
    # stages are independent deep copies
    cfg.stages[0]["nested_probe"] = 1
    assert "nested_probe" not in cfg.stages[1]


def test_stage_overrides_general_and_deep_copy(tmp_path):
    p = write(tmp_path, """\
        general:
          model_type: S2UT
          opts: {beam: 5}
          max_len_b: 10
        stage1:
          max_len_b: 100000
        stage2:
          dur_prediction: true
        """)
    cfg = load(p)
    assert cfg.stages[0]["max_len_b"] == 100000
    assert cfg.stages[1]["max_len_b"] == 10
    assert cfg.stages[1]["dur_prediction"] is True and "dur_prediction" not in cfg.stages[0]
    cfg.stages[0]["opts"]["beam"] = 1
    assert cfg.stages[1]["opts"]["beam"] == 5 and cfg.general["opts"]["beam"] == 5


def test_no_stage_sections_gives_no_stages(tmp_path):
    cfg = load(write(tmp_path, "general: {model_type: MT}\n"))
    assert cfg.stages == []


def test_lines_and_where(tmp_path):
    p = write(tmp_path, """\
        general:
          model_type: S2T
          dataset_size: 3
        stage1:
          task: speech_to_text
          extra: [a, b]
        """)
    cfg = load(p)
    assert cfg.lines["general.dataset_size"] == 3
    assert cfg.lines["stage1.task"] == 5
    assert cfg.lines["stage1.extra.1"] == 6
    assert cfg.where("general.dataset_size") == f"{p}:3 (general.dataset_size)"
    assert cfg.where("stage1.nope") == f"{p} (stage1.nope)"
    assert cfg.path == p.absolute() and cfg.path.is_absolute()


def test_env_expansion_both_forms(tmp_path, monkeypatch):
    monkeypatch.setenv("S2ST_T_DIR", "/data/here")
    monkeypatch.setenv("S2ST_T_TASK", "speech_to_text")
    p = write(tmp_path, """\
        general:
          model_type: S2T
          dataset_path: ${S2ST_T_DIR}/set.npy
          note: "x-$S2ST_T_TASK-y $5"
        stage1:
          task: $S2ST_T_TASK
          nested: {list: ["$S2ST_T_TASK"]}
        """)
    cfg = load(p)
    assert cfg.general["dataset_path"] == "/data/here/set.npy"
    assert cfg.general["note"] == "x-speech_to_text-y $5"
    assert cfg.stages[0]["task"] == "speech_to_text"
    assert cfg.stages[0]["nested"] == {"list": ["speech_to_text"]}


def test_unset_env_var_names_variable_key_and_line(tmp_path, monkeypatch):
    monkeypatch.delenv("npy_dataset", raising=False)
    p = write(tmp_path, """\
        general:
          model_type: S2T
          cpu: true
          dataset_path: $npy_dataset
        """)
    assert error_of(p) == f"{p}:4: general.dataset_path: environment variable 'npy_dataset' is not set"


def test_overridden_placeholder_needs_no_env_var(tmp_path, monkeypatch):
    monkeypatch.delenv("npy_dataset", raising=False)
    p = write(tmp_path, "general:\n  model_type: S2T\n  dataset_path: $npy_dataset\nstage1: {}\n")
    cfg = load(p, overrides={"dataset_path": "/cli/set.npy"})
    assert cfg.general["dataset_path"] == cfg.stages[0]["dataset_path"] == "/cli/set.npy"


def test_unset_env_var_in_stage(tmp_path, monkeypatch):
    monkeypatch.delenv("S2ST_T_MISSING", raising=False)
    p = write(tmp_path, "general: {model_type: S2T}\nstage1:\n  path: ${S2ST_T_MISSING}/ckpt.pt\n")
    assert error_of(p) == f"{p}:3: stage1.path: environment variable 'S2ST_T_MISSING' is not set"


def test_relative_paths_resolve_against_yaml_folder(tmp_path, monkeypatch):
    sub = tmp_path / "cfgs"
    sub.mkdir()
    monkeypatch.chdir(tmp_path)  # cwd differs from the YAML folder
    monkeypatch.setenv("HOME", "/home/someone")
    p = write(sub, """\
        general:
          model_type: S2UT
          dataset_path: data/set.npy
          dump_speech_waveforms_dir: ~/wavs
          workload: /abs/w.jsonl
          entry: models/mine.py:build
          anchors: ../anchors.json
          model_dir: m
        stage1:
          data: bin
          path: ck1.pt:../ck2.pt:/abs/ck3.pt
          config_yaml: config.yaml
          task: speech_to_speech
        stage2:
          vocoder: voc/g.pt
          vocoder_cfg: voc/cfg.json
          entry: pkg.module:build
        """)
    cfg = load(p)
    g, s1, s2 = cfg.general, cfg.stages[0], cfg.stages[1]
    assert g["dataset_path"] == str(sub / "data/set.npy")
    assert g["dump_speech_waveforms_dir"] == "/home/someone/wavs"
    assert g["workload"] == "/abs/w.jsonl"
    assert g["entry"] == "models/mine.py:build"  # no key of a fairseq type: left as written (callable resolves it)
    assert g["anchors"] == str(tmp_path / "anchors.json")
    assert g["model_dir"] == str(sub / "m")
    assert s1["data"] == str(sub / "bin")
    assert s1["path"] == f"{sub / 'ck1.pt'}:{tmp_path / 'ck2.pt'}:/abs/ck3.pt"
    assert s1["config_yaml"] == "config.yaml"
    assert s1["task"] == "speech_to_speech"
    assert s2["vocoder"] == str(sub / "voc/g.pt") and s2["vocoder_cfg"] == str(sub / "voc/cfg.json")
    assert s2["entry"] == "pkg.module:build"
    assert s1["dataset_path"] == g["dataset_path"]  # inherited, already resolved


def test_vocoder_kind_names_are_not_paths(tmp_path):
    p = write(tmp_path, """\
        general: {model_type: 2StageS2ST}
        stage1: {task: speech_to_text}
        stage2: {task: text_to_speech, vocoder: hifigan}
        """)
    assert load(p).stages[1]["vocoder"] == "hifigan"
    cfg = load(p, overrides={"vocoder": "griffin_lim"})
    assert [s["vocoder"] for s in cfg.stages] == ["griffin_lim", "hifigan"]
    p2 = write(tmp_path, "general: {model_type: S2UT}\nstage1: {}\nstage2: {vocoder: g_00500000}\n", name="u.yaml")
    assert load(p2).stages[1]["vocoder"] == str(tmp_path / "g_00500000")  # released unit vocoder file name


def test_overrides_win_in_every_stage(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    p = write(tmp_path, """\
        general:
          model_type: 2StageS2ST
          dataset_size: 5
          dataset_path: a.npy
        stage1: {task: speech_to_text}
        stage2: {task: text_to_speech, dataset_size: 7}
        """, name="sub.yaml")
    cfg = load(p, overrides={"dataset_size": 2, "cpu": True, "dataset_type": None, "dataset_path": "cli/b.npy"})
    assert cfg.general["dataset_size"] == 2 and cfg.general["cpu"] is True
    assert "dataset_type" not in cfg.general  # None means "flag not given"
    assert cfg.general["dataset_path"] == str(tmp_path / "cli/b.npy")
    assert cfg.stages[0]["dataset_size"] == 2 and cfg.stages[0]["cpu"] is True
    assert cfg.stages[1]["dataset_size"] == 7  # an explicit stage section still wins, as upstream
    assert cfg.where("general.dataset_size") == f"{p} (general.dataset_size)"  # YAML line no longer applies


def test_model_type_from_overrides_without_general(tmp_path):
    p = write(tmp_path, "stage1: {task: translation}\n", name="mt.yaml")
    cfg = load(p, overrides={"model_type": "MT"})
    assert cfg.model_type == "MT" and cfg.case_id == "MT-mt"
    assert cfg.stages == [{"model_type": "MT", "task": "translation"}]


def test_missing_model_type(tmp_path):
    p = write(tmp_path, "stage1: {task: translation}\n")
    msg = error_of(p)
    assert msg.startswith(f"{p}: general.model_type is required")
    assert "2StageS2ST, 3StageS2ST, MT" in msg


def test_unknown_model_type_lists_known_sorted(tmp_path):
    p = write(tmp_path, "general:\n  cpu: true\n  model_type: S2X\n")
    assert error_of(p) == f"{p}:3: unknown model_type 'S2X'; known: " + ", ".join(sorted(KNOWN))


def test_unknown_model_type_from_override(tmp_path):
    p = write(tmp_path, "general:\n  model_type: S2T\n")
    assert error_of(p, overrides={"model_type": "Nope"}).startswith(f"{p}: unknown model_type 'Nope'; known: ")


def test_case_id_uses_name(tmp_path):
    cfg = load(write(tmp_path, "general: {model_type: TTS, name: tiny-tts}\n"))
    assert cfg.case_id == "TTS-tiny-tts"
    assert load(write(tmp_path, "general: {model_type: TTS}\n", name="x.yaml")).case_id == "TTS-x"


def test_quality_kept_as_is(tmp_path):
    p = write(tmp_path, "general: {model_type: TTS}\nquality: {max_duration_change_pct: 0.02, scorer_id: $NOT_EXPANDED}\n")
    assert load(p).quality == {"max_duration_change_pct": 0.02, "scorer_id": "$NOT_EXPANDED"}


def test_quality_paths_resolved_against_yaml_folder(tmp_path, monkeypatch):
    sub = tmp_path / "cfgs"
    sub.mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", "/home/someone")
    p = write(sub, """\
        general: {model_type: TTS}
        quality:
          baseline: ../base.yaml
          anchors: anchors/
          asr_model_dir: ~/whisper
          scorer_id: s2st-abc
          max_speaker_drop: 0.1
        """)
    assert load(p).quality == {
        "baseline": str(tmp_path / "base.yaml"), "anchors": str(sub / "anchors"),
        "asr_model_dir": "/home/someone/whisper", "scorer_id": "s2st-abc", "max_speaker_drop": 0.1,
    }
    absolute = write(sub, "general: {model_type: TTS}\nquality: {anchors: /abs/anchors/}\n", name="abs.yaml")
    assert load(absolute).quality == {"anchors": "/abs/anchors/"}  # absolute ones are left as written


def test_quality_section_must_be_a_mapping(tmp_path):
    p = write(tmp_path, "general: {model_type: TTS}\nquality:\n  - baseline.yaml\n")
    assert error_of(p) == f"{p}:2: quality must be a mapping, got list"


@pytest.mark.parametrize("targets", [
    "{ttfa_s: 0}", "{rtf: -1}", "{rtf: true}", "{latency: 1.0}", "{ttfa_s: '0.5'}", "[0.5]", "0.5",
])
def test_bad_targets_are_one_line_with_file_and_line(tmp_path, targets):
    p = write(tmp_path, f"general:\n  model_type: TTS\n  targets: {targets}\n")
    msg = error_of(p)
    assert msg.startswith(f"{p}:3 (general.targets): targets must map ttfa_s and/or rtf to numbers > 0, got ")


def test_good_targets_are_kept(tmp_path):
    p = write(tmp_path, "general:\n  model_type: TTS\n  targets: {ttfa_s: 0.5, rtf: 1}\n")
    assert load(p).general["targets"] == {"ttfa_s": 0.5, "rtf": 1}


def test_model_type_declared_path_keys_resolved(tmp_path, monkeypatch):
    """fairseq's hubert_* keys are paths for the fairseq types only; an extension declares its own."""
    from pytest_s2st.pipelines import base

    monkeypatch.setitem(base.MODEL_TYPES, "Ext", base.ModelType("ext_module:build"))
    base.register("Ext", "ext_module:build", path_keys="weights")
    text = """\
        general: {model_type: %s}
        stage1:
          hubert_ckpt_path: hubert/checkpoint.pt
          hubert_km_path: ../km.npy
          weights: w.bin
        """
    known = ["HubertUnits", "callable", "Ext"]
    sub = tmp_path / "cfgs"
    sub.mkdir()
    stage = load_config(write(sub, text % "HubertUnits"), known_model_types=known).stages[0]
    assert stage["hubert_ckpt_path"] == str(sub / "hubert/checkpoint.pt")
    assert stage["hubert_km_path"] == str(tmp_path / "km.npy")
    assert stage["weights"] == "w.bin"
    assert load_config(write(sub, text % "callable"), known_model_types=known).stages[0]["hubert_km_path"] == "../km.npy"
    ext = load_config(write(sub, text % "Ext"), known_model_types=known).stages[0]
    assert ext["weights"] == str(sub / "w.bin") and ext["hubert_km_path"] == "../km.npy"
    assert base.model_type_info("Ext").path_keys == ("weights",) and base.model_type_info("nope").path_keys == ()


def test_override_model_type_picks_its_path_keys(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    p = write(tmp_path, "general: {model_type: callable, hubert_km_path: km.npy}\nstage1: {}\n")
    cfg = load_config(p, known_model_types=["callable", "HubertUnits"], overrides={"model_type": "HubertUnits"})
    assert cfg.general["hubert_km_path"] == str(tmp_path / "km.npy") == cfg.stages[0]["hubert_km_path"]


def test_stage_namespace_resolves_no_paths(tmp_path):
    """Paths are resolved once, by the loader: fairseq's namespace takes the stage's values as they are."""
    pytest.importorskip("fairseq")
    from pytest_s2st.pipelines import fairseq_args as fp

    stage = {"data": "rel/bin", "path": "ck.pt", "hubert_km_path": "km.npy", "vocoder": "voc.pt"}
    ns = fp.stage_namespace(stage, device="cpu", config_path=tmp_path / "sub" / "c.yaml")
    assert (ns.data, ns.path, ns.hubert_km_path, ns.vocoder) == ("rel/bin", "ck.pt", "km.npy", "voc.pt")
    assert ns.config == str(tmp_path / "sub" / "c.yaml") and ns.cpu is True


def test_unknown_top_level_key(tmp_path):
    p = write(tmp_path, "general: {model_type: S2T}\nstage4: {}\n")
    assert error_of(p) == (f"{p}:2: unknown top-level key 'stage4'; allowed: general, stage1, stage2, stage3, quality, "
                           "serve")


@pytest.mark.parametrize("serve, expected", [
    ("{stream: yes please}", "(serve.stream): must be true or false, got 'yes please'"),
    ("{stream: true, chunk_frames: 0}", "(serve.chunk_frames): must be an integer in 1-100000, got 0"),
    ("{stream: true, left_context_frames: -1}", "(serve.left_context_frames): must be an integer in 0-100000, got -1"),
    ("{stream: true, chunk: 4}", "(serve.chunk): unknown key 'chunk'; known: stream, chunk_frames, left_context_frames"),
    ("{strem: true}", "(serve.strem): unknown key 'strem' (did you mean 'stream'?); known: stream, chunk_frames, "
                      "left_context_frames"),
])
def test_bad_serve_section_is_one_line_naming_the_line(tmp_path, serve, expected):
    p = write(tmp_path, f"general: {{model_type: S2T}}\nstage1: {{}}\nserve: {serve}\n")
    assert error_of(p) == f"{p}:3 {expected}"


def test_serve_section_reaches_the_config_and_zero_context_is_a_value(tmp_path):
    from pytest_s2st.service.stream import StreamOptions, parse_serve

    p = write(tmp_path, "general: {model_type: S2T}\nstage1: {}\nserve: {stream: true, left_context_frames: 0}\n")
    cfg = load_config(p, known_model_types=KNOWN)
    assert cfg.serve == {"stream": True, "left_context_frames": 0}
    assert parse_serve(cfg.serve, "x") == StreamOptions(chunk_frames=12, left_context_frames=0)
    assert parse_serve({"stream": False, "chunk_frames": 4}, "x") is None


@pytest.mark.parametrize("text, expected", [
    ("general: {model_type: S2T}\nstage1: {}\n\nstage2: [a, b]\n", ":4: stage2 must be a mapping, got list"),
    ("general: {model_type: S2T}\nstage1:\n", ":2: stage1 must be a mapping, got null"),
    ("general: S2T\n", ":1: general must be a mapping, got str"),
    ("quality: 3\ngeneral: {model_type: S2T}\n", ":1: quality must be a mapping, got int"),
])
def test_sections_must_be_mappings(tmp_path, text, expected):
    p = write(tmp_path, text)
    assert error_of(p) == f"{p}{expected}"


def test_stage_gap_rejected(tmp_path):
    p = write(tmp_path, "general: {model_type: 3StageS2ST}\nstage1: {}\nstage3: {}\n")
    msg = error_of(p)
    assert msg.startswith(f"{p}:3: stage3 given without stage2")


def test_stage2_without_stage1_rejected(tmp_path):
    p = write(tmp_path, "general: {model_type: S2UT}\nstage2: {}\n")
    assert error_of(p).startswith(f"{p}:2: stage2 given without stage1")


@pytest.mark.parametrize("text", ["- a\n- b\n", "just a string\n", ""])
def test_top_level_must_be_mapping(tmp_path, text):
    p = write(tmp_path, text)
    assert error_of(p).startswith(f"{p}: top level must be a mapping")


def test_yaml_syntax_error_has_line(tmp_path):
    p = write(tmp_path, "general:\n  model_type: S2T\n  bad: [1, 2\nstage1: {}\n")
    msg = error_of(p)
    assert msg.startswith(f"{p}:4: YAML syntax error: ")


def test_missing_and_unreadable_file(tmp_path):
    missing = tmp_path / "nope.yaml"
    assert error_of(missing) == f"{missing}: config file not found"
    assert "cannot read config file" in error_of(tmp_path)  # a directory
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00bad")
    assert error_of(binary).startswith(f"{binary}: cannot read config file")


def test_unsafe_tags_are_refused(tmp_path):
    marker = tmp_path / "marker"
    p = write(tmp_path, f"general:\n  model_type: !!python/object/apply:os.system ['touch {marker}']\n")
    assert "YAML syntax error" in error_of(p)
    assert not marker.exists()


def test_yaml_merge_keys_still_work(tmp_path):
    p = write(tmp_path, """\
        general: &g
          model_type: S2T
          beam: 5
        stage1:
          <<: *g
          beam: 1
        """)
    assert load(p).stages[0]["beam"] == 1


def test_relative_path_argument_made_absolute(tmp_path, monkeypatch):
    write(tmp_path, "general: {model_type: S2T}\n")
    monkeypatch.chdir(tmp_path)
    cfg = load("case.yaml")
    assert cfg.path == tmp_path / "case.yaml"
    assert os.path.isabs(cfg.path)


def test_a_misspelt_setting_in_general_is_named_with_what_it_meant(tmp_path):
    p = write(tmp_path, "general:\n  model_type: S2T\n  dataset_sise: 2\n")
    assert error_of(p).startswith(f"{p}:3: unknown key general.dataset_sise (did you mean 'dataset_size'?)")
    kept = load(write(tmp_path, "general: {model_type: S2T, device_id: 0, warmup_updates: 4, beam: 5}\n", name="f.yaml"))
    assert kept.general["device_id"] == 0  # fairseq's own arguments pass on as before
