"""The plugin never breaks pytest's own commands, and every option value round-trips.

One table-driven test over every setting (settings.SETTINGS) and every source it may come from:
the command line, the ini file and the config's ``general`` section. Zero, empty-ish and false
values are values, never "unset".
"""
from __future__ import annotations

import json

import pytest

from pytest_s2st.settings import SETTINGS

from helpers import write_case

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

# setting -> (text as typed, value expected after parsing, JSON-compared); chosen to differ from the default
VALUES = {
    "model_type": ("callable", "callable"),
    "dataset_path": ("data.npy", "data.npy"),  # compared by file name: each source resolves it against its own folder
    "dataset_type": ("text", "text"),
    "dataset_size": ("1", 1),
    "repeat": ("3", 3),
    "warmup": ("0", 0),
    "device": ("auto", "auto"),
    "threads": ("2", 2),
    "memory": ("off", "off"),
    "flops": ("off", "off"),
    "tensor_memory": ("off", "off"),
    "instructions": ("callgrind", "callgrind"),
    "bleu_tokenize": ("zh", "zh"),
    "min_rounds": ("4", 4),
    "runtime_protocol": ("upstream", "upstream"),
    "target_precision": ("0.5", 0.5),
    "max_time": ("2.5", 2.5),
    "dump_dir": ("dumps", "dumps"),
    "compare_fail": ("flops:1%", ["flops:1%"]),
    "strict": ("true", True),
    "processes": ("3", 3),  # not in the round trip: it starts xdist workers (tests/test_ab.py covers flag and ini)
    "ab_base": ("origin/main", "origin/main"),  # not in the round trip: it checks a revision out (test_code_versions)
    "ab_pairs": ("3", 3),
    "ab_round_s": ("0.25", 0.25),
    "ab_estimator": ("median-again", "median-again"),  # registered by _an_estimator below: the name must be known
    "summary": ("ab.md", "ab.md"),
    "isolate": ("true", True),
    "concurrency": ("3,5", [3, 5]),
    "endpoint": ("http://127.0.0.1:9/v1/audio/speech", "http://127.0.0.1:9/v1/audio/speech"),
    "workload": ("wl.jsonl", "wl.jsonl"),
    "requests": ("5", 5),
    "max_audio_s": ("7.5", 7.5),
    "request_timeout": ("2.5", 2.5),
    "protocol": ("openai", "openai"),
    "extra_body": ('{"stream": false}', {"stream": False}),
    "sample_rate": ("16000", 16000),
    "request_rate": ("2.5", 2.5),
    "burstiness": ("0.5", 0.5),
    "evidence_dir": ("ev", "ev"),
    "baseline": ("base", "base"),
    "quality": ("scores.json", "scores.json"),
    "plot": ("plots", "plots"),
    "shard": ("1/1", [1, 1]),  # one shard of one: keeps every case
    "history": ("hist.sqlite", "hist.sqlite"),
    "history_fail": ("flops:percent:0.05", [["flops", "percent", 0.05]]),
    "history_window": ("7", 7),
    "level_parts": ("2", 2),
    "level_parts_wait": ("7.5", 7.5),
}
PATHS = {"dataset_path", "dump_dir", "workload"}


@pytest.fixture(autouse=True)
def _an_estimator(monkeypatch):
    """A second A/B estimator for --s2st-ab-estimator's sample value (the package ships only the median)."""
    import copy

    from pytest_s2st.ab import estimators

    again = copy.copy(estimators.DEFAULT)
    again.name = "median-again"
    monkeypatch.setitem(estimators.ESTIMATORS, again.name, again)

PROBE = '''
import json
from pytest_s2st.session import session_of

def test_probe(s2st_case, request):
    state = session_of(request.config)
    out = {name: state.option(name) for name in state.explicit} | {"case": s2st_case.settings}
    with open("resolved.json", "w") as fh:
        json.dump(out, fh, default=str)
'''


def _normal(name: str, value):
    if name == "compare_fail":
        return [str(v) for v in value]
    if name == "concurrency":
        return list(value)
    if name in PATHS and isinstance(value, str):
        return value.rsplit("/", 1)[-1]
    return value


def test_the_table_covers_every_setting():
    assert set(VALUES) == {s.name for s in SETTINGS}
    for s in SETTINGS:
        assert VALUES[s.name][1] != (list(s.default) if isinstance(s.default, tuple) else s.default), s.name


@pytest.mark.parametrize("source", ["cli", "ini", "config"])
def test_every_setting_round_trips(pytester, source):
    written = {"model_type", "dataset_path"}  # write_case's general section has them already, with these values
    settings = [s for s in SETTINGS if s.name not in ("processes", "ab_base")]
    general = "".join(f"{s.name}: {VALUES[s.name][0]!r}\n" for s in settings
                      if s.per_case and s.name not in written) if source == "config" else ""
    general = general.replace("'3,5'", "[3, 5]")
    cfg = write_case(pytester.path, "np", ["build_numpy"], general_extra=general)
    pytester.makepyfile(test_probe=PROBE)
    args = ["-p", "no:cacheprovider", f"--s2st-config={cfg}", "--benchmark-compare"]
    if source == "cli":
        for s in settings:
            args += [s.flag] if s.parse.__name__ == "boolean" else [s.flag, VALUES[s.name][0]]
    elif source == "ini":
        pytester.makeini("[pytest]\n" + "".join(f"{s.ini} = {VALUES[s.name][0]}\n" for s in settings))
    else:  # config: the per-case settings; the others are session-wide and come from the command line
        for s in settings:
            if not s.per_case:
                args += [s.flag] if s.parse.__name__ == "boolean" else [s.flag, VALUES[s.name][0]]
    result = pytester.runpytest(*args)
    result.assert_outcomes(passed=1)
    resolved = json.loads((pytester.path / "resolved.json").read_text())
    for s in settings:
        got = resolved["case"][s.name]
        assert _normal(s.name, got) == VALUES[s.name][1], (source, s.name, got)


@pytest.mark.parametrize("args", [["--help"], ["--markers"], ["--fixtures"], ["--version"], ["--co"],
                                  ["--co", "-q", "--s2st-concurrency=1,2"]])
def test_pytest_commands_work_with_the_plugin_loaded(pytester, args):
    write_case(pytester.path, "np", ["build_numpy"])
    pytester.makepyfile(test_x="def test_inference(s2st_pipeline, s2st_dataset, s2st_benchmark):\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)
    output = result.stdout.str() + result.stderr.str()
    assert result.ret == 0, output
    assert "Traceback (most recent call last)" not in output and "INTERNALERROR" not in output
    if args == ["--help"]:
        out = result.stdout.str()
        assert "speech-model benchmarks (pytest-s2st)" in out and "--s2st-compare-fail=LIMITS" in out
        assert "flops:1%" in out  # a literal % in a help text reaches the screen, not argparse's formatter


@pytest.mark.parametrize("name", sorted(VALUES))
def test_every_setting_survives_the_case_json_a_server_or_valgrind_child_reads(name):
    """A resolved case travels as JSON (Case.to_dict -> s2st-serve, the instruction-count child): each
    parsed value must come back as itself through settings_from_json, whatever its type."""
    from pytest_s2st.cases import settings_from_json, settings_to_json
    from pytest_s2st.settings import BY_NAME

    parsed = BY_NAME[name].parse(VALUES[name][0])
    back = settings_from_json(json.loads(json.dumps(settings_to_json({name: parsed}))))
    assert back == {name: parsed}


def test_run_settings_are_filled_from_the_table_by_field_name():
    """plugin._run_settings builds RunSettings.from_settings: every field named like a setting takes that setting's
    resolved value (no hand-copied keyword list); the rest is what the table cannot hold."""
    from dataclasses import fields

    from pytest_s2st.runner import RunSettings
    from pytest_s2st.settings import BY_NAME

    given = {"device", "seed", "case", "fill_time", "isolate_model", "instructions_model", "instructions_baseline",
             "start_rss_mib", "start_what", "ab_mode"}
    # ^ resolved or derived (the callables a child re-creates; the A/B mode a call chooses), not table settings
    names = {f.name for f in fields(RunSettings)}
    assert names - given <= set(BY_NAME), names - given - set(BY_NAME)  # a field no setting fills
    settings = {name: BY_NAME[name].parse(text) for name, (text, _) in VALUES.items()}
    run = RunSettings.from_settings(settings, device="resolved device", fill_time=True)
    assert {name: getattr(run, name) for name in names - given} == {name: settings[name] for name in names - given}
    assert run.runtime_protocol == "upstream" and run.device == "resolved device" and run.fill_time is True
    assert not hasattr(run, "protocol")  # the service's --s2st-protocol (openai) is no run setting
