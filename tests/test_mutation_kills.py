"""Known-truth tests added from a mutation-testing pass (mutmut) over the measurement and verdict code:
each pins a number, a comparison or a record field that no other fast unit test checked.

Metric records: what the saved JSON of every measured number holds.
"""
from __future__ import annotations

from pytest_s2st.measure.record import Metric


def test_metric_to_dict_has_only_what_is_set():
    assert Metric(1.5, "vmhwm").to_dict() == {"value": 1.5, "method": "vmhwm"}
    assert Metric.missing("off", "disabled").to_dict() == {"value": None, "method": "off", "reason": "disabled"}
    details = {"baseline_rss_mib": 3.0}
    out = Metric(0, "torch", details=details).to_dict()
    assert out == {"value": 0, "method": "torch", "details": {"baseline_rss_mib": 3.0}}
    out["details"]["baseline_rss_mib"] = 9.0
    assert details == {"baseline_rss_mib": 3.0}  # a copy: the record is not changed through its dict


def test_metric_from_dict_round_trip_and_defaults():
    for m in (Metric(2.0, "papi", None, {"by_event": {"PAPI_SP_OPS": 2}}), Metric.missing("none", "no device")):
        assert Metric.from_dict(m.to_dict()) == m
    assert Metric.from_dict({}) == Metric(None, "?", None, {})
    assert Metric.from_dict({"value": 4, "method": "m", "details": None}) == Metric(4, "m", None, {})


# --- assess() on hand-made run dirs: tones of known length, timestamps with known TTFA / RTF ---------------
#
# Every number below is a binary fraction (0.125, 0.375, ...), so means, changes and limits compare exactly:
# a value AT a limit passes, a value past it fails.

import json  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import soundfile as sf  # noqa: E402

from pytest_s2st.errors import S2STError  # noqa: E402
from pytest_s2st.quality import FAIL, INCONCLUSIVE, PASS, Policy, assess, pcm_sha256  # noqa: E402
from pytest_s2st.quality.scorefile import scores_from_mapping  # noqa: E402
from pytest_s2st.quality.verdict import Verdict  # noqa: E402


def tone_run(out: Path, items: list[dict], policy: Policy | None = None) -> Path:
    """A run dir: items are {"id", "seconds", "rate", "ttfa", "rtf", ...record overrides}; a WAV of
    `seconds` of a 440 Hz tone at `rate` per id (none when seconds is None)."""
    (out / "wav").mkdir(parents=True, exist_ok=True)
    lines = []
    for i, item in enumerate(items):
        item = {"seconds": 1.0, "rate": 16000, "ttfa": 0.5, "rtf": 0.5, **item}
        rid, seconds, rate = item.pop("id"), item.pop("seconds"), item.pop("rate")
        ttfa, rtf = item.pop("ttfa"), item.pop("rtf")
        rec = {"id": rid, "concurrency": int(rid[1:].split("-")[0]), "warmup": "-w" in rid, "status": "ok",
               "error": None, "send_t": 100.0 + 10 * i, "audio_seconds": seconds or 1.0}
        rec.update(first_audio_t=rec["send_t"] + ttfa, done_t=rec["send_t"] + rtf * rec["audio_seconds"])
        if seconds is not None:
            n = int(round(seconds * rate))
            pcm = (8000 * np.sin(2 * np.pi * 440 * np.arange(n) / rate)).astype(np.int16)
            sf.write(str(out / "wav" / f"{rid}.wav"), pcm, rate, subtype="PCM_16")
            rec["pcm_sha256"] = pcm_sha256(out / "wav" / f"{rid}.wav")
        rec.update(item)
        lines.append(json.dumps(rec))
    (out / "requests.jsonl").write_text("\n".join(lines) + "\n")
    summary = {"concurrency": 1, "summary": {}}
    if policy is not None:
        summary["policy"] = policy.to_dict()
    (out / "summary.json").write_text(json.dumps(summary))
    return out


def tone_scores(base: Path, cand: Path, er=None, sim=None, drop=()) -> dict:
    """Scores bound to the WAVs; er / sim: {(side, id): value}; drop: (side, id) pairs left unscored."""
    out = {"scorer_id": "sid-1"}
    for side, run in (("baseline", base), ("candidate", cand)):
        out[side] = [{"id": p.stem, "pcm_sha256": pcm_sha256(p),
                      "error_rate": (er or {}).get((side, p.stem), 0.25),
                      "speaker_similarity": (sim or {}).get((side, p.stem), 0.875)}
                     for p in sorted((run / "wav").glob("*.wav")) if (side, p.stem) not in drop]
    return out


def judge(base, cand, policy, scores=None):
    return assess(base, cand, policy, scores_from_mapping(scores, "t") if scores is not None else None)


TWO = [{"id": "c1-r0"}, {"id": "c1-r1", "seconds": 0.5}]
AT_LIMITS = Policy.from_mapping({"scorer_id": "sid-1", "max_error_rate_increase": 0.125, "max_speaker_drop": 0.125,
                                 "max_duration_change_pct": 0, "max_ttfa_regression_pct": 25,
                                 "min_improvement_pct": 25}, "t")


@pytest.fixture
def at_limits(tmp_path):
    """Candidate: error rate +0.125, speaker similarity -0.125, TTFA +25 %, RTF 25 % better, same audio."""
    base = tone_run(tmp_path / "b", TWO)
    cand = tone_run(tmp_path / "c", [{**it, "ttfa": 0.625, "rtf": 0.375} for it in TWO])
    scores = tone_scores(base, cand, er={("candidate", "c1-r0"): 0.375, ("candidate", "c1-r1"): 0.375},
                         sim={("candidate", "c1-r0"): 0.75, ("candidate", "c1-r1"): 0.75})
    return base, cand, scores


@pytest.mark.parametrize("aggregate", ["mean", "each"])
def test_every_gate_passes_at_its_limit(at_limits, aggregate):
    base, cand, scores = at_limits
    policy = Policy.from_mapping({**AT_LIMITS.to_dict(), "aggregate": aggregate}, "t")
    v = judge(base, cand, policy, scores)
    assert (v.status, v.reasons) == (PASS, []) and v.speedup == {"c1": 0.5 / 0.375}
    quality = {"baseline_mean": 0.25, "candidate_mean": 0.375, "n": 2,
               "change_mean": 0.125, "worst_id": "c1-r0", "worst_change": 0.125}
    assert v.metrics == {
        "policy": policy.to_dict(), "policy_fingerprint": policy.fingerprint(), "speed_metric": "rtf",
        "scorer_id": "sid-1", "ids": 2,
        "quality": {"error_rate increase": quality,
                    "speaker_similarity drop": {**quality, "baseline_mean": 0.875, "candidate_mean": 0.75},
                    "duration change": {"n": 2, "signed_mean_pct": 0.0, "change_mean": 0.0, "worst_id": "c1-r0",
                                        "worst_change": 0.0}},
        "timing": {"c1": {"ttfa_s": {"baseline": 0.5, "candidate": 0.625, "n": [2, 2], "change_pct": 25.0},
                          "rtf": {"baseline": 0.5, "candidate": 0.375, "n": [2, 2], "change_pct": -25.0}}}}
    assert v.to_dict() == {"status": PASS, "reasons": [], "speedup": {"c1": 0.5 / 0.375}, "metrics": v.metrics}


def test_every_gate_fails_just_past_its_limit(at_limits):
    base, cand, scores = at_limits
    tighter = Policy.from_mapping({"scorer_id": "sid-1", "max_error_rate_increase": 0.0625,
                                   "max_speaker_drop": 0.0625, "max_ttfa_regression_pct": 12.5,
                                   "min_improvement_pct": 50}, "t")
    v = judge(base, cand, tighter, scores)
    assert v.status == FAIL and v.speedup is None
    assert v.reasons == ["error_rate increase 0.125 > 0.0625 (mean of 2; worst c1-r0 0.125)",
                         "speaker_similarity drop 0.125 > 0.0625 (mean of 2; worst c1-r0 0.125)",
                         "ttfa_s regression 25.0% > 12.5% (c1)", "rtf improvement 25.0% < 50% (c1)"]


def test_durations_are_seconds_whatever_the_sample_rate(tmp_path):
    base = tone_run(tmp_path / "b", [{"id": "c1-r0", "rate": 16000}])
    cand = tone_run(tmp_path / "c", [{"id": "c1-r0", "rate": 24000, "rtf": 0.25}])
    v = assess(base, cand, Policy.from_mapping({"max_duration_change_pct": 1}, "t"))
    assert v.status == PASS and v.metrics["quality"]["duration change"]["signed_mean_pct"] == 0.0


@pytest.mark.parametrize("with_scores", [False, True])
def test_short_utterances_are_duration_gated_with_or_without_scores(tmp_path, with_scores):
    base = tone_run(tmp_path / "b", [{"id": "c1-r0", "seconds": 0.5}, {"id": "c1-r1", "seconds": 0.25}])
    cand = tone_run(tmp_path / "c", [{"id": "c1-r0", "seconds": 0.25, "rtf": 0.25},
                                     {"id": "c1-r1", "seconds": 0.125, "rtf": 0.25}])
    policy = Policy.from_mapping({"scorer_id": "sid-1", "max_duration_change_pct": 20}, "t")
    v = judge(base, cand, policy, tone_scores(base, cand) if with_scores else None)
    assert v.status == FAIL and v.reasons == ["duration change 50.0% > 20% (mean of 2; worst c1-r0 50.0%)"]
    assert v.metrics["quality"]["duration change"]["signed_mean_pct"] == -50.0


def test_unbound_ids_are_left_out_of_the_duration_change(tmp_path):
    base = tone_run(tmp_path / "b", TWO)
    cand = tone_run(tmp_path / "c", [{**it, "rtf": 0.25} for it in TWO])
    policy = Policy.from_mapping({"scorer_id": "sid-1", "max_duration_change_pct": 20}, "t")
    scores = tone_scores(base, cand, drop={("baseline", "c1-r0")})
    v = judge(base, cand, policy, scores)
    assert v.status == INCONCLUSIVE and v.reasons == ["no baseline score for c1-r0"]
    assert v.metrics["quality"]["duration change"]["n"] == 1 and v.metrics["ids"] == 2  # metrics kept
    scores = tone_scores(base, cand)
    scores["candidate"][1]["pcm_sha256"] = "ab" * 32
    v = judge(base, cand, policy, scores)
    assert v.reasons == [f"candidate score for c1-r1 is bound to pcm_sha256 abababababab, the WAV is "
                         f"{pcm_sha256(cand / 'wav' / 'c1-r1.wav')[:12]}"]
    assert v.metrics["quality"]["duration change"]["n"] == 1


def test_an_empty_baseline_wav_leaves_the_duration_change_unavailable(tmp_path):
    # No change % can be computed from 0 s: with the duration gate set that is missing evidence (it used to
    # be skipped silently, so a candidate judged only against empty baseline audio passed the gate).
    base = tone_run(tmp_path / "b", [{"id": "c1-r0", "seconds": 0.0}, {"id": "c1-r1"}])
    cand = tone_run(tmp_path / "c", [{"id": "c1-r0", "rtf": 0.25}, {"id": "c1-r1", "rtf": 0.25}])
    v = assess(base, cand, Policy.from_mapping({"max_duration_change_pct": 20}, "t"))
    assert (v.status, v.reasons) == (INCONCLUSIVE, ["duration change unavailable for c1-r0: the baseline WAV is empty"])
    assert v.metrics["quality"]["duration change"]["n"] == 1
    assert assess(base, cand, Policy()).status == PASS  # not gated: not needed


def test_no_candidate_wav_at_all_is_inconclusive(tmp_path):
    base = tone_run(tmp_path / "b", [{"id": "c1-r0"}])
    cand = tone_run(tmp_path / "c", [{"id": "c1-r0", "seconds": None, "rtf": 0.25}])
    v = assess(base, cand, Policy.from_mapping({"max_duration_change_pct": 20}, "t"))
    assert v.status == INCONCLUSIVE and v.reasons == [f"candidate WAV for c1-r0 missing ({cand / 'wav' / 'c1-r0.wav'})"]
    assert v.metrics["quality"]["duration change"] == {"n": 0, "signed_mean_pct": None}


@pytest.mark.parametrize("gated, status, reasons", [
    ("max_speaker_drop", INCONCLUSIVE, ["speaker_similarity unavailable for baseline c1-r0: no reason given"]),
    ("max_error_rate_increase", PASS, []),
])
def test_unavailable_speaker_similarity_matters_only_when_gated(tmp_path, gated, status, reasons):
    base = tone_run(tmp_path / "b", [{"id": "c1-r0"}])
    cand = tone_run(tmp_path / "c", [{"id": "c1-r0", "rtf": 0.25}])
    scores = tone_scores(base, cand, sim={("baseline", "c1-r0"): None})
    v = judge(base, cand, Policy.from_mapping({"scorer_id": "sid-1", gated: 0.1}, "t"), scores)
    assert (v.status, v.reasons) == (status, reasons)


def test_failed_request_without_error_text_names_its_status(tmp_path):
    base = tone_run(tmp_path / "b", TWO)
    cand = tone_run(tmp_path / "c", [{"id": "c1-r0", "seconds": None, "status": "timeout"}, TWO[1]])
    v = assess(base, cand, Policy())
    assert (v.status, v.reasons) == (FAIL, ["candidate request c1-r0 failed: timeout"])


def test_levels_measured_on_one_side_only(tmp_path):
    base = tone_run(tmp_path / "b", [{"id": "c1-r0"}])
    cand = tone_run(tmp_path / "c", [{"id": "c4-r0"}])
    v = assess(base, cand, Policy())
    assert v.status == INCONCLUSIVE
    assert v.reasons == ["request record c1-r0 missing from the candidate run",
                         "request record c4-r0 missing from the baseline run",
                         "rtf at c1: no measured requests on the candidate side",
                         "rtf at c4: no measured requests on the baseline side"]
    assert v.metrics["timing"]["c4"]["rtf"] == {"baseline": None, "candidate": 0.5, "n": [0, 1]}


@pytest.mark.parametrize("side", ["baseline", "candidate"])
def test_a_zero_mean_is_no_measurement(tmp_path, side):
    # done_t == send_t: RTF 0, which no speed change can be computed against
    base = tone_run(tmp_path / "b", [{"id": "c1-r0", "rtf": 0.0 if side == "baseline" else 0.5}])
    cand = tone_run(tmp_path / "c", [{"id": "c1-r0", "rtf": 0.0 if side == "candidate" else 0.5}])
    v = assess(base, cand, Policy())
    assert (v.status, v.reasons) == (INCONCLUSIVE, [f"rtf at c1: no measured requests on the {side} side"])


def test_a_missing_ttfa_does_not_stop_the_speed_comparison(tmp_path):
    base = tone_run(tmp_path / "b", [{"id": "c1-r0", "ttfa": 0.0}])
    cand = tone_run(tmp_path / "c", [{"id": "c1-r0", "rtf": 0.25}])
    v = assess(base, cand, Policy.from_mapping({"max_ttfa_regression_pct": 10}, "t"))
    assert v.reasons == ["ttfa_s at c1: no measured requests on the baseline side"]
    assert v.metrics["timing"]["c1"]["rtf"]["change_pct"] == -50.0


def test_warm_ups_alone_are_no_speed_evidence(tmp_path):
    base = tone_run(tmp_path / "b", [{"id": "c1-w0"}])
    cand = tone_run(tmp_path / "c", [{"id": "c1-w0", "rtf": 0.25}])
    v = assess(base, cand, Policy())
    assert (v.status, v.reasons) == (INCONCLUSIVE, ["rtf: no measured (non-warm-up) requests to compare"])
    (cand / "wav" / "c1-w0.wav").unlink()
    v = assess(base, cand, Policy())
    assert v.reasons == [f"candidate WAV for c1-w0 missing ({cand / 'wav' / 'c1-w0.wav'})",
                         "rtf: no measured (non-warm-up) requests to compare"]


def test_equal_similarity_is_a_zero_drop_not_minus_zero(tmp_path):
    base = tone_run(tmp_path / "b", [{"id": "c1-r0"}])
    cand = tone_run(tmp_path / "c", [{"id": "c1-r0", "rtf": 0.25}])
    v = judge(base, cand, Policy.from_mapping({"scorer_id": "sid-1", "max_speaker_drop": 0.1}, "t"),
              tone_scores(base, cand))
    assert v.status == PASS and str(v.metrics["quality"]["speaker_similarity drop"]["worst_change"]) == "0.0"


def test_missing_candidate_and_policy_are_inconclusive(tmp_path):
    base = tone_run(tmp_path / "b", [{"id": "c1-r0"}])
    v = assess(base, tmp_path / "nowhere", Policy())
    assert v.to_dict() == {"status": INCONCLUSIVE, "reasons": [f"no candidate: {tmp_path / 'nowhere'} is not a directory"],
                           "speedup": None, "metrics": {}}
    v = assess(base, base, None)
    assert v.status == INCONCLUSIVE and v.exit_code == 2


@pytest.mark.parametrize("side", ["b", "c"])
def test_a_bad_saved_policy_names_its_file(tmp_path, side):
    runs = {s: tone_run(tmp_path / s, [{"id": "c1-r0"}]) for s in ("b", "c")}
    summary = runs[side] / "summary.json"
    summary.write_text(json.dumps({"policy": {"bogus": 1}}))
    with pytest.raises(S2STError) as e:
        assess(runs["b"], runs["c"], None if side == "b" else Policy())
    assert str(e.value).startswith(f"{runs[side]}/summary.json: policy: unknown policy key 'bogus'")


def test_format_prints_every_number(tmp_path):
    metrics = {"speed_metric": "rtf", "quality": {
        "duration change": {"n": 2, "signed_mean_pct": -12.5, "change_mean": 12.5, "worst_id": "c1-r1",
                            "worst_change": 25.0},
        "error_rate increase": {"baseline_mean": 0.25, "candidate_mean": 0.375, "n": 2, "change_mean": 0.125,
                                "worst_id": "c1-r0", "worst_change": 0.25},
        "speaker_similarity drop": {"baseline_mean": None, "candidate_mean": None, "n": 0}},
        "timing": {"c4": {"rtf": {"baseline": 0.5, "candidate": None}},
                   "c1": {"ttfa_s": {"baseline": 0.5, "candidate": 0.625}}}}
    v = Verdict(PASS, ["r1", "r2"], metrics, {"c4": 2.0, "c1": 1.0 / 3})
    assert v.format() == "\n".join([
        "s2st-assess: PASS",
        "  - r1",
        "  - r2",
        "  duration change: mean |change| 12.5%, signed -12.5% (worst c1-r1 25%)",
        "  error_rate increase: baseline 0.25, candidate 0.375, change 0.125 (worst c1-r0 0.25)",
        "  speaker_similarity drop: baseline n/a, candidate n/a, change n/a (worst None n/a)",
        "  c1 ttfa_s: baseline 0.5, candidate 0.625",
        "  c4 rtf: baseline 0.5, candidate n/a",
        "  speedup (rtf): c1 0.333x, c4 2.000x"])
    assert Verdict(INCONCLUSIVE, ["no baseline: x"]).format() == "s2st-assess: INCONCLUSIVE\n  - no baseline: x"
