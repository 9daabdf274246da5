"""What a model type can do is declared in its registry row (pipelines.base.ModelType), not found by comparing
model_type strings: a toy type registered here that streams and needs only {id, text} is accepted by the text
dataset, the references check and s2st-serve --stream; one that does not stream is refused before it loads."""
from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from pytest_s2st.cases import load_case
from pytest_s2st.cli import serve
from pytest_s2st.datasets import dataset_count, load_dataset
from pytest_s2st.errors import S2STError
from pytest_s2st.pipelines import base

RATE = 8000


class ToyStage:
    name = "toy"

    def forward(self, x):
        return {"waveform": np.zeros(len(x["text"]) * 10, np.float32), "sample_rate": RATE}

    def to_next_input(self, output):
        return output


class ToyPipeline:
    model_type = "Toy"

    def __init__(self):
        self.stages = [ToyStage()]

    def prepare_sample(self, sample):
        return {"text": sample["text"]}

    def stream(self, x, emit, chunk_frames, left_context_frames):
        emit(self.stages[0].forward(x)["waveform"], RATE)

    def assets(self):
        return {}

    def close(self):
        pass


def build_toy(stages, *, model_type, device, config_path):
    return ToyPipeline()


@pytest.fixture
def toy(monkeypatch, tmp_path):
    """Types Toy (streams, needs id and text) and ToyWhole (does not stream); a config of each, a text dataset
    of {id, text} only and one reference line per sample."""
    monkeypatch.setattr(base, "MODEL_TYPES", dict(base.MODEL_TYPES))
    target = f"{__name__}:build_toy"
    base.register("Toy", target, serves_speech=True, streaming=True, text_fields=("id", "text"), stages=(1, 1))
    base.register("ToyWhole", target, serves_speech=True, text_fields=("id", "text"), stages=(1, 1))
    data = tmp_path / "texts.jsonl"
    data.write_text("".join(json.dumps({"id": f"s{i}", "text": f"hello {i}"}) + "\n" for i in range(2)))
    (tmp_path / "refs.txt").write_text("hola 0\nhola 1\n")
    configs = {}
    for name in ("Toy", "ToyWhole"):
        configs[name] = tmp_path / f"{name}.yaml"
        configs[name].write_text(f"general:\n  model_type: {name}\n  dataset_type: text\n  dataset_path: texts.jsonl\n"
                                 "  references: refs.txt\nstage1:\n  stage_name: toy\n")
    return data, configs


def test_the_text_dataset_asks_for_the_fields_the_type_declares(toy):
    data, _ = toy
    assert base.text_fields("Toy") == ("id", "text")
    assert [s["text"] for s in load_dataset(data, "text", text_fields=base.text_fields("Toy"))] == ["hello 0", "hello 1"]
    assert dataset_count(data, "text", base.text_fields("Toy")) == 2
    with pytest.raises(S2STError, match=r"texts.jsonl:1: missing field 'language'"):
        load_dataset(data, "text", text_fields=base.text_fields("Qwen3TTS"))
    with pytest.raises(S2STError, match=r"texts.jsonl:1: missing field 'language'"):
        load_dataset(data, "text")  # no type said: the whole workload format


def test_fields_the_type_does_not_need_are_still_checked_when_there(toy, tmp_path):
    path = tmp_path / "seeded.jsonl"
    path.write_text(json.dumps({"id": "a", "text": "hi", "seed": -1}) + "\n")
    with pytest.raises(S2STError, match=r"field 'seed' must be an integer"):
        load_dataset(path, "text", text_fields=base.text_fields("Toy"))


def test_the_case_loads_with_its_references_checked_against_the_toy_dataset(toy):
    _, configs = toy
    case = load_case(configs["Toy"], {}, lambda name: None)
    assert case.model_type == "Toy" and case.serves_speech


def test_serve_streams_a_type_that_declares_it(toy):
    _, configs = toy
    args = serve.build_parser().parse_args(["--s2st-config", str(configs["Toy"]), "--port", "0", "--stream"])
    synth, identity, close, stream = serve._build(args)
    assert identity["model_type"] == "Toy" and stream is not None
    got = []
    stream[0]({"text": "hey"}, lambda wav, rate: got.append((len(wav), rate)))
    assert got == [(30, RATE)]
    close()


def test_serve_refuses_to_stream_a_type_that_does_not_before_it_loads(toy, monkeypatch):
    _, configs = toy
    monkeypatch.setitem(sys.modules, __name__, None)  # building it would fail: the refusal must come first
    args = serve.build_parser().parse_args(["--s2st-config", str(configs["ToyWhole"]), "--port", "0", "--stream"])
    with pytest.raises(S2STError, match=r"--stream / serve.stream: model_type ToyWhole has no chunked decoder$"):
        serve._build(args)


def test_hints_list_the_types_from_the_registry(toy):
    # registry order, the toys registered last; a built-in row added later changes neither assertion
    assert "Qwen3TTS" in base.streaming_types() and base.streaming_types()[-1] == "Toy"
    speech = base.speech_types()  # those that say so (registry order), then those whose case says
    assert speech[:2] == ["TTS", "Qwen3TTS"] and speech[-3:] == ["Toy", "ToyWhole", "callable"]
    assert base.one_of(["TTS", "Qwen3TTS", "callable"]) == "TTS, Qwen3TTS or callable"
    assert base.one_of(["Qwen3TTS"]) == "Qwen3TTS"


def test_path_parsing_is_the_types_own(tmp_path):
    from pytest_s2st.config import resolve_paths

    section = {"path": "a.pt:b.pt", "entry": "m.py:factory", "manifest": "x.json"}
    fairseq = resolve_paths(section, tmp_path, "S2T")
    assert fairseq["path"] == f"{tmp_path}/a.pt:{tmp_path}/b.pt" and fairseq["entry"] == "m.py:factory"
    callable_ = resolve_paths(section, tmp_path, "callable")
    assert callable_["entry"] == f"{tmp_path}/m.py:factory" and callable_["path"] == "a.pt:b.pt"
    assert resolve_paths(section, tmp_path, "Qwen3TTS")["manifest"] == f"{tmp_path}/x.json"


def test_a_fairseq_tts_case_reads_a_text_dataset_of_id_and_text_through_pytest(pytester, staged):
    """Through the plugin as users run it: the case's dataset fixture passes the model type's fields, so a TTS
    text dataset without language/voice/seed is measured (the fixture demanded all five before)."""
    from helpers import BENCH_TEST

    texts = pytester.path / "texts.jsonl"
    texts.write_text('{"id": "a", "text": "hola mundo"}\n{"id": "b", "text": "esta es una prueba"}\n')
    config = (staged / "configs" / "TTS.yaml").read_text().replace("../", f"{staged}/")
    config = config.replace(f"dataset_path: {staged}/data/tokens_tts_es.npy", f"dataset_path: {texts}\n  dataset_type: text")
    (pytester.path / "tts.yaml").write_text(config)
    pytester.makepyfile(test_bench=BENCH_TEST)
    result = pytester.runpytest("-p", "no:cacheprovider", "--s2st-config=tts.yaml", "--s2st-memory=off",
                                "--s2st-flops=off", "--benchmark-json=out.json")
    result.assert_outcomes(passed=1)
    row = json.loads((pytester.path / "out.json").read_text())["benchmarks"][0]["extra_info"]["s2st"]
    assert row["metrics"]["runtime_s"]["value"] > 0


def test_the_service_page_names_the_model_types_the_table_says_serve_speech():
    """docs/service.md lists by hand which types a service test runs on; the MODEL_TYPES rows decide it."""
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "service.md").read_text()
    sentence = page[page.index("runs on the cases a speech service can serve"):].split("\n\n", 1)[0]
    named = set(re.findall(r"`(\w+)`", sentence.split("so they are left out")[0]))
    speech = {name for name, row in base.MODEL_TYPES.items() if row.serves_speech is not False}
    assert named == speech, (named, speech)
