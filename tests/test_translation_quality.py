"""Translation quality: references, sacrebleu BLEU/chrF of text outputs, ASR-BLEU, the policy keys and the gate."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import yaml

from helpers import BENCH_TEST
from pytest_s2st.errors import S2STError
from pytest_s2st.quality.policy import Policy
from pytest_s2st.quality.translation import (asr_bleu, corpus_scores, judge_translation, measure_translation,
                                             references_for)

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

HYPS = ["the cat sat on the mat", "hola mundo", "a quick brown fox jumps", "Hello, World!"]
REFS = ["the cat is on the mat", "hola mundo hoy", "the quick brown fox jumped", "hello world"]


def test_scores_equal_sacrebleus_command_line(tmp_path):
    (tmp_path / "ref.txt").write_text("\n".join(REFS) + "\n")
    (tmp_path / "hyp.txt").write_text("\n".join(HYPS) + "\n")
    cli = subprocess.run([sys.executable, "-m", "sacrebleu", str(tmp_path / "ref.txt"), "-i", str(tmp_path / "hyp.txt"),
                          "-m", "bleu", "chrf", "-f", "json"], capture_output=True, text=True, check=True)
    theirs = {d["name"]: d for d in json.loads(cli.stdout)}
    ours = corpus_scores(HYPS, references_for([{}] * 4, tmp_path / "ref.txt", "test")[0])
    assert round(ours["bleu"]["value"], 1) == theirs["BLEU"]["score"]
    assert round(ours["chrf"]["value"], 1) == theirs["chrF2"]["score"]
    assert ours["bleu"]["signature"] == theirs["BLEU"]["signature"]
    assert ours["chrf"]["signature"] == theirs["chrF2"]["signature"]
    assert 0 < ours["bleu"]["value"] < 100


def test_references_come_from_the_file_else_the_samples(tmp_path):
    samples = [{"tgt_text": " uno "}, {"tgt_text": "dos"}]
    assert references_for(samples, None, "x") == (["uno", "dos"], "dataset tgt_text")
    (tmp_path / "r.txt").write_text("one\ntwo\nthree\n")
    assert references_for(samples, tmp_path / "r.txt", "x")[0] == ["one", "two"]
    (tmp_path / "short.txt").write_text("one\n")
    with pytest.raises(S2STError, match=r"short.txt \(x\): 1 reference line\(s\) for 2 sample\(s\)"):
        references_for(samples, tmp_path / "short.txt", "x")
    with pytest.raises(S2STError, match="not a regular file"):
        references_for(samples, tmp_path, "x")  # a directory: one line, never a read


def test_a_references_file_in_utf16_is_named_not_scored(tmp_path):
    """UTF-16 without a BOM is valid UTF-8 full of NULs: it scored BLEU 0.00 and failed the gate; now one line."""
    (tmp_path / "r16.txt").write_bytes("one\ntwo\n".encode("utf-16-le"))
    with pytest.raises(S2STError, match=r"r16.txt:1 \(references file, x\): holds NUL bytes.*UTF-16"):
        references_for([{}, {}], tmp_path / "r16.txt", "x")
    (tmp_path / "bom.txt").write_bytes("one\ntwo\n".encode("utf-8-sig"))  # a UTF-8 BOM is fine
    assert references_for([{}, {}], tmp_path / "bom.txt", "x")[0] == ["one", "two"]


def test_no_references_leave_no_scores_and_the_gate_inconclusive():
    names, outputs = ["mt"], [[{"text": "hola"}, {"text": "mundo"}]]
    assert measure_translation([{}, {}], names, outputs, None, "x") == {}
    policy = Policy.from_mapping({"min_bleu": 10}, "p")
    missing = {"bleu": {"value": None, "reason": "no reference translations: sample 0 has no 'tgt_text'"}}
    status, reasons, _ = judge_translation(policy, missing, None)
    assert status == "INCONCLUSIVE" and reasons == [
        "min_bleu: bleu unavailable for the candidate: no reference translations: sample 0 has no 'tgt_text'"]


@pytest.mark.parametrize("mapping, message", [
    ({"min_bleux": 1}, "unknown policy key 'min_bleux' (did you mean 'min_bleu'?)"),
    ({"max_bleu_drop": 101}, "max_bleu_drop must be <= 100 (a sacrebleu score), got 101"),
    ({"min_chrf": -1}, "min_chrf must be >= 0, got -1"),
    ({"max_chrf_drop": float("nan")}, "max_chrf_drop must be a finite number, got nan"),
    ({"min_bleu": "20"}, "min_bleu must be a finite number, got '20'"),
])
def test_translation_keys_follow_the_policy_rules(mapping, message):
    with pytest.raises(S2STError) as info:
        Policy.from_mapping(mapping, "p.yaml")
    assert message in str(info.value)


def test_unset_translation_keys_keep_old_fingerprints():
    old = Policy.from_mapping({"max_duration_change_pct": 20}, "p")
    assert "min_bleu" not in old.to_dict()
    assert Policy.from_mapping({"max_duration_change_pct": 20, "min_bleu": 1}, "p").fingerprint() != old.fingerprint()


def _metrics(bleu, chrf=50.0, sig="nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"):
    return {"bleu": {"value": bleu, "details": {"signature": sig}}, "chrf": {"value": chrf, "details": {"signature": "c"}}}


def test_the_gate_fails_a_drop_passes_within_and_compares_like_with_like():
    policy = Policy.from_mapping({"max_bleu_drop": 5, "min_chrf": 40}, "p")
    assert judge_translation(policy, _metrics(60), _metrics(62))[0] == "PASS"
    status, reasons, metrics = judge_translation(policy, _metrics(40, 30), _metrics(62))
    assert status == "FAIL" and reasons == ["bleu drop 22.00 > 5 (max_bleu_drop; baseline 62.00, candidate 40.00)",
                                            "chrf 30.00 < 40 (min_chrf)"]
    assert metrics["bleu"] == {"candidate": 40, "baseline": 62, "drop": 22}
    status, reasons, _ = judge_translation(policy, _metrics(60), _metrics(62, sig="tok:intl"))
    assert status == "INCONCLUSIVE" and "scored differently" in reasons[0]
    status, reasons, _ = judge_translation(policy, _metrics(60), None)
    assert status == "INCONCLUSIVE" and reasons == ["max_bleu_drop: no baseline to compare bleu with (quality.baseline)"]


def test_service_runs_with_translation_keys_are_inconclusive(tmp_path):
    from pytest_s2st.quality.checks import Bindings
    from pytest_s2st.quality.findings import Findings, RunContext

    policy = Policy.from_mapping({"min_bleu": 1}, "p")
    findings = Findings(policy)

    class _Run:
        path = tmp_path

        def saved_policy(self):
            return None

    Bindings().judge(RunContext(_Run(), _Run(), policy, None), findings)
    assert any("a service run holds no reference translations" in m for m in findings.missing)


class _HandASR:
    """A hand-built ASR: the transcript is written in the waveform's length (one known text per length)."""

    name = "hand"

    def __init__(self, texts):
        self.texts = texts

    def unavailable(self, language):
        return None if language == "es" else f"no {language}"

    def identity(self):
        return {"backend": self.name, "texts": self.texts}

    def transcribe(self, wav16k, language):
        return self.texts[len(wav16k)]


def test_asr_bleu_is_fairseqs_procedure_on_a_hand_built_case():
    import sacrebleu

    transcripts = {1600: "  Hola Mundo ", 3200: "ESTA es una prueba", 4800: "modelos del HABLA"}
    refs = ["hola mundo", "esta es una prueba pequena ", "modelos del habla hoy"]
    # 22.05 kHz waveforms are resampled to 16 kHz first: 2205 samples -> 1600
    waves = [(np.zeros(2205, np.float32), 22050), (np.zeros(3200, np.float32), 16000), (np.zeros(4800), 16000)]
    ours = asr_bleu(waves, refs, _HandASR(transcripts), "es")
    # examples/speech_to_speech/asr_bleu: transcribe_audiofile -> strip().lower(); run_asr_bleu lowers again;
    # the references as read (stripped: these are normalised already, so Spanish's normaliser, lower-case and
    # no punctuation, leaves both sides as they are; tests/test_asr_bleu_normalise.py covers raw references);
    # sacrebleu.corpus_bleu at its defaults
    hyps = [t.strip().lower().lower() for t in (transcripts[1600], transcripts[3200], transcripts[4800])]
    theirs = sacrebleu.corpus_bleu(hyps, [[r.strip() for r in refs]])
    assert ours["transcripts"] == ["hola mundo", "esta es una prueba", "modelos del habla"]
    assert ours["asr_bleu"]["value"] == pytest.approx(theirs.score, abs=1e-9) and 0 < theirs.score < 100
    assert ours["asr_chrf"]["value"] == pytest.approx(sacrebleu.corpus_chrf(hyps, [[r.strip() for r in refs]]).score)
    other = asr_bleu(waves, refs, _HandASR({**transcripts, 1600: "hola"}), "es")
    assert other["scorer_id"] != ours["scorer_id"]  # the ASR's identity is part of the score's id
    from pytest_s2st.quality.translation import NoReferences

    with pytest.raises(NoReferences, match="no ASR for ASR-BLEU: no en"):
        asr_bleu(waves, refs, _HandASR(transcripts), "en")


# ---------------------------------------------------------------- a gated session on the staged MT model


def _mt_configs(root, staged):
    """The staged MT config as the baseline, an unchanged candidate, and one that truncates every translation
    to one token (max_len_a 0, max_len_b 1): faster, and worse. The references are the baseline's own
    translations (the tiny model is random: against them an unchanged model scores BLEU 100)."""
    from pytest_s2st.cases import load_case
    from pytest_s2st.datasets import load_dataset
    from pytest_s2st.pipelines.base import build_pipeline
    from pytest_s2st.quality.translation import run_outputs

    base = yaml.safe_load((staged / "configs" / "MT.yaml").read_text())
    case = load_case(staged / "configs" / "MT.yaml", {}, lambda key: None)
    samples = load_dataset(case.config.general["dataset_path"], "npy", case.settings["dataset_size"])
    pipeline = build_pipeline("MT", case.config.stages, device="cpu", config_path=case.config.path)
    _, outputs = run_outputs(pipeline, samples)
    pipeline.close()
    (root / "refs.txt").write_text("".join(o["text"] + "\n" for o in outputs[-1]))

    def write(name, stage_changes, quality):
        doc = json.loads(json.dumps(base))
        doc["general"]["name"] = name
        doc["general"]["references"] = str(root / "refs.txt")
        for key in ("dataset_path",):
            doc["general"][key] = str((staged / "configs" / doc["general"][key]).resolve())
        for key in ("data", "path"):
            doc["stage1"][key] = str((staged / "configs" / doc["stage1"][key]).resolve())
        doc["stage1"].update(stage_changes)
        if quality:
            doc["quality"] = quality
        (root / f"{name}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
        return root / f"{name}.yaml"

    gate = {"baseline": "base.yaml", "max_bleu_drop": 5, "max_chrf_drop": 5}
    write("later", {"max_len_a": 0, "max_len_b": 1}, None)  # "same" in a later session, its outputs cut
    later = yaml.safe_load((root / "later.yaml").read_text())
    later["general"]["name"] = "same"
    (root / "later.yaml").write_text(yaml.safe_dump(later, sort_keys=False))
    return (write("base", {}, None), write("same", {}, gate),
            write("cut", {"max_len_a": 0, "max_len_b": 1}, gate))


def _docs_block_matches(output: list[str]) -> None:
    """docs/quality.md's output example of this session: every line appears in what it printed (numbers masked,
    as the README's examples are matched)."""
    import re
    from pathlib import Path

    from helpers import masked

    doc = (Path(__file__).resolve().parents[1] / "docs" / "quality.md").read_text()
    block = re.search(r"^<!-- output: tests/test_translation_quality.py -->\n```\n(.*?)^```$", doc, re.S | re.M)
    assert block, "docs/quality.md lost its tested output example"
    shown = [masked(line) for line in output]
    for line in block.group(1).splitlines():
        assert any(masked(line) in s for s in shown), f"docs/quality.md shows {line!r}, the session did not print it"


@pytest.mark.usefixtures("one_thread")
def test_a_truncating_candidate_fails_on_bleu_and_an_unchanged_one_passes(pytester, staged):
    base, same, cut = _mt_configs(pytester.path, staged)
    pytester.makepyfile(test_bench=BENCH_TEST)
    result = pytester.runpytest("-p", "no:cacheprovider", "--s2st-warmup=0", f"--s2st-config={base}",
                                f"--s2st-config={same}", f"--s2st-config={cut}", "-v", "--benchmark-json=out.json",
                                "--s2st-memory=off", "--benchmark-save=first")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*test_inference?MT-base? PASSED*", "*test_inference?MT-same? PASSED*",
                                 "*test_inference?MT-cut? FAILED*", "*bleu drop * > 5 (max_bleu_drop; baseline 100.00*",
                                 "*Name*BLEU*chrF*"])
    _docs_block_matches(result.stdout.lines)
    rows = {b["name"]: b["extra_info"]["s2st"] for b in json.loads((pytester.path / "out.json").read_text())["benchmarks"]}
    for name in ("base", "same"):
        assert rows[f"test_inference[MT-{name}]"]["metrics"]["bleu"]["value"] == pytest.approx(100.0)
    cutrow = rows["test_inference[MT-cut]"]
    assert cutrow["metrics"]["bleu"]["value"] < 95
    assert cutrow["metrics"]["bleu"]["details"]["signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert cutrow["translation_gate"]["status"] == "FAIL"
    assert rows["test_inference[MT-same]"]["translation_gate"]["status"] == "PASS"
    assert "translation_gate" not in rows["test_inference[MT-base]"]
    # the corrupted candidate is the "faster" one: less work per sample (FLOPs: deterministic, unlike a clock)
    flops = {name: rows[f"test_inference[MT-{name}]"]["metrics"]["flops"]["value"] for name in ("same", "cut")}
    assert flops["cut"] < flops["same"] / 2, flops
    # --benchmark-compare shows the BLEU change: the same benchmark, its outputs cut in a later session
    later = pytester.runpytest("-p", "no:cacheprovider", "--s2st-warmup=0", "--s2st-config=later.yaml",
                               "--s2st-memory=off", "--s2st-flops=off", "--benchmark-compare=0001")
    later.stdout.fnmatch_lines(["*Name*BLEU*chrF*", "test_inference?MT-same?*then*100.00*", "*now*",
                                "*change*-*%*"])  # stacked within 120 columns: then / now / change


@pytest.mark.usefixtures("one_thread")
def test_missing_references_make_the_gate_inconclusive(pytester, staged):
    doc = yaml.safe_load((staged / "configs" / "TTS.yaml").read_text())
    doc["general"]["dataset_path"] = str((staged / "configs" / doc["general"]["dataset_path"]).resolve())
    for key in ("data", "path"):
        doc["stage1"][key] = str((staged / "configs" / doc["stage1"][key]).resolve())
    doc["quality"] = {"min_bleu": 10}
    (pytester.path / "tts.yaml").write_text(yaml.safe_dump(doc))
    pytester.makepyfile(test_bench=BENCH_TEST)
    result = pytester.runpytest("-p", "no:cacheprovider", "--s2st-warmup=0", "--s2st-config=tts.yaml",
                                "--s2st-flops=off", "--s2st-memory=off")
    result.stdout.fnmatch_lines(["*min_bleu: bleu unavailable for the candidate: no stage of this benchmark "
                                 "outputs text*"])
    assert result.ret == 0


@pytest.mark.usefixtures("one_thread")
def test_speech_rows_carry_asr_bleu_and_a_missing_asr_is_inconclusive(pytester, staged):
    """The staged S2UT config (speech out, speech.npy's English tgt_text, target_lang en): ASR-BLEU through
    pocketsphinx in its row; the 3StageS2ST one ends in Spanish, for which no ASR is installed: a gate on
    ASR-BLEU is INCONCLUSIVE with one line."""
    def config(name, quality=None):
        doc = yaml.safe_load((staged / "configs" / f"{name}.yaml").read_text())
        for section in [doc["general"]] + [doc[k] for k in doc if k.startswith("stage")]:
            for key in ("dataset_path", "references", "data", "path", "vocoder", "vocoder_cfg"):
                if isinstance(section.get(key), str) and section[key].startswith(".."):
                    section[key] = str((staged / "configs" / section[key]).resolve())
        if quality:
            doc["quality"] = quality
        (pytester.path / f"{name}.yaml").write_text(yaml.safe_dump(doc))
        return f"--s2st-config={name}.yaml"

    pytester.makepyfile(test_bench=BENCH_TEST)
    result = pytester.runpytest("-p", "no:cacheprovider", "--s2st-warmup=0", "--s2st-flops=off", "--s2st-memory=off",
                                "--benchmark-json=out.json", config("S2UT"), config("3StageS2ST", {"min_asr_bleu": 10}))
    result.stdout.fnmatch_lines(["Name*ASR-BLEU*", "Name*ASR-chrF*", "*min_asr_bleu: asr_bleu unavailable for the candidate: no ASR "
                                 "for ASR-BLEU: no ASR backend for 'es': no local Whisper-style model dir given*"])
    rows = {b["name"]: b["extra_info"]["s2st"] for b in json.loads((pytester.path / "out.json").read_text())["benchmarks"]}
    s2ut = rows["test_inference[S2UT-tiny]"]["metrics"]
    assert "bleu" not in s2ut  # no stage writes text
    for name in ("asr_bleu", "asr_chrf"):
        value, details = s2ut[name]["value"], s2ut[name]["details"]
        assert 0.0 <= value <= 100.0 and details["asr"] == "pocketsphinx-en-us" and details["language"] == "en"
        assert details["scorer_id"].startswith("asrbleu-") and len(details["transcripts"]) == details["n"] == 2
        assert details["references"] == "dataset tgt_text"
    three = rows["test_inference[3StageS2ST-tiny]"]
    assert three["metrics"]["bleu"]["details"]["stage"] == "mt" and three["metrics"]["asr_bleu"]["value"] is None
    assert three["translation_gate"]["status"] == "INCONCLUSIVE"


def test_target_tokens_are_decoded_with_the_pipelines_dictionary(staged):
    """A dataset holding its references as target tokens (fairseq S2T data's `target`) instead of text: decoded
    with the target dictionary of the pipeline's last text stage; S2UT's units decode to no text."""
    from pytest_s2st.dataset_make import save_npy_dataset
    from pytest_s2st.datasets import load_dataset
    from pytest_s2st.pipelines.base import build_pipeline
    from pytest_s2st.quality.translation import NoReferences
    from pytest_s2st.tiny.fairseq_tiny import EN_TEXTS

    from pytest_s2st.cases import load_case

    case = load_case(staged / "configs" / "S2T.yaml", {}, lambda key: None)
    samples = load_dataset(case.config.general["dataset_path"], "npy", 2)
    pipeline = build_pipeline("S2T", case.config.stages, device="cpu", config_path=case.config.path)
    decode = pipeline.reference_decoder()
    vocab = pipeline.stages[0].tgt_dict
    tokens = [dict({k: v for k, v in s.items() if k != "tgt_text"},
                   target=vocab.encode_line(EN_TEXTS[i], add_if_not_exist=False, append_eos=True).long())
              for i, s in enumerate(samples)]
    path = save_npy_dataset(tokens, staged / "tokens_refs.npy")
    assert references_for(load_dataset(path, "npy", 2), None, "x", decode) == (
        EN_TEXTS[:2], "dataset target tokens (decoded with s2t's target dictionary)")
    with pytest.raises(NoReferences, match="holds 'target' tokens but no stage of this pipeline writes text"):
        references_for(tokens, None, "x", None)
    bad = [dict(tokens[0], target=np.array([0.5, 1.5]))]
    with pytest.raises(S2STError, match="sample 0 target holds float64, expected integer token ids"):
        load_dataset(save_npy_dataset(bad, staged / "bad_refs.npy"), "npy", 1)
    pipeline.close()
