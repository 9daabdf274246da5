"""assess(): PASS / FAIL / INCONCLUSIVE on run dirs of real espeak-ng speech (no scorer models here:
the scores are written by hand, bound to the real WAV hashes, so each gate is tested in isolation).
The run dirs and scores come from tests/espeak_runs.py (shared with the scorer and CLI tests).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from pytest_s2st.errors import S2STError
from pytest_s2st.quality import FAIL, INCONCLUSIVE, PASS, Policy, assess, pcm_sha256
from pytest_s2st.quality.scorefile import scores_from_mapping

from espeak_runs import EN_ITEMS, ZH_ITEMS, make_run, records, scores_for

POLICY = Policy.from_mapping({"scorer_id": "sid-1", "max_error_rate_increase": 0.1, "max_speaker_drop": 0.1,
                              "max_duration_change_pct": 20, "max_ttfa_regression_pct": 10, "min_improvement_pct": 5},
                             "test")


@pytest.fixture(scope="module")
def espeak_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("espeak")


@pytest.fixture
def pair(tmp_path, espeak_cache):
    """A baseline and a byte-identical candidate that is twice as fast (RTF and TTFA halved)."""
    base = make_run(tmp_path / "base", EN_ITEMS + ZH_ITEMS, policy=POLICY, cache=espeak_cache)
    cand = make_run(tmp_path / "cand", EN_ITEMS + ZH_ITEMS, policy=POLICY, cache=espeak_cache, ttfa=0.25, rtf=0.4)
    return base, cand


def judge(base, cand, scores: dict | None, policy=POLICY):
    return assess(base, cand, policy, scores_from_mapping(scores, "test") if scores is not None else None)


def test_identical_faster_candidate_passes_with_speedup(pair):
    base, cand = pair
    v = judge(base, cand, scores_for(base, cand))
    assert v.status == PASS and v.exit_code == 0, v.reasons
    assert v.speedup is not None and v.speedup["c1"] == pytest.approx(2.0, rel=1e-6)
    assert v.metrics["timing"]["c1"]["ttfa_s"]["change_pct"] == pytest.approx(-50.0)
    assert v.metrics["ids"] == len(EN_ITEMS + ZH_ITEMS) + 1  # warm-up counted as evidence


def test_error_rate_increase_fails_with_value_and_limit(pair):
    base, cand = pair
    v = judge(base, cand, scores_for(base, cand, er={("candidate", "c1-r2"): 0.25 + 7 * 0.12}))
    assert v.status == FAIL and v.exit_code == 1 and v.speedup is None
    assert len(v.reasons) == 1
    assert v.reasons[0].startswith("error_rate increase 0.120 > 0.1 (mean of 7; worst c1-r2 0.840)")


def test_speaker_drop_on_the_mean_aggregate(pair):
    """The default aggregate gates the MEAN drop: one bad utterance within the mean passes, a mean
    past the limit fails with the mean, the count and the worst utterance."""
    base, cand = pair
    n = len(EN_ITEMS + ZH_ITEMS) + 1  # the warm-up is scored too
    v = judge(base, cand, scores_for(base, cand, sim={("candidate", "c1-r0"): 0.85 - 0.5}))
    assert v.status == PASS, v.reasons  # mean drop 0.5 / 7 = 0.071 <= 0.1
    drop = 0.1 * n + 0.07  # one utterance so bad that the mean passes the limit
    v = judge(base, cand, scores_for(base, cand, sim={("candidate", "c1-r1"): 0.85 - drop}))
    assert v.status == FAIL and len(v.reasons) == 1
    assert v.reasons[0] == f"speaker_similarity drop {drop / n:.3f} > 0.1 (mean of {n}; worst c1-r1 {drop:.3f})"
    assert v.metrics["quality"]["speaker_similarity drop"]["change_mean"] == pytest.approx(drop / n)


def test_each_aggregate_names_the_utterance(pair):
    base, cand = pair
    policy = Policy.from_mapping({**POLICY.to_dict(), "aggregate": "each"}, "test")
    v = judge(base, cand, scores_for(base, cand, sim={("candidate", "c1-w0"): 0.6}), policy)
    # the saved policies differ from this one: evidence judged under another policy
    assert v.status == INCONCLUSIVE and all("policy fingerprint mismatch" in r for r in v.reasons)
    for run in pair:
        s = json.loads((run / "summary.json").read_text())
        s["policy"] = policy.to_dict()
        (run / "summary.json").write_text(json.dumps(s))
    v = judge(base, cand, scores_for(base, cand, sim={("candidate", "c1-w0"): 0.6}), policy)
    assert v.status == FAIL and v.reasons == ["speaker_similarity drop 0.250 > 0.1 (c1-w0)"]


def test_duration_truncation_fails_from_wavs_alone(tmp_path, espeak_cache):
    base = make_run(tmp_path / "b", EN_ITEMS, cache=espeak_cache)
    cand = make_run(tmp_path / "c", EN_ITEMS, cache=espeak_cache, transform=lambda rid, pcm, r: pcm[: len(pcm) // 2])
    policy = Policy.from_mapping({"max_duration_change_pct": 20}, "test")
    v = assess(base, cand, policy)
    assert v.status == FAIL
    assert v.reasons[0].startswith("duration change 50.0% > 20% (mean of 5")
    assert v.metrics["quality"]["duration change"]["signed_mean_pct"] == pytest.approx(-50.0, abs=0.1)


def test_ttfa_regression_and_too_little_improvement_fail(tmp_path, espeak_cache):
    base = make_run(tmp_path / "b", EN_ITEMS[:2], cache=espeak_cache)
    cand = make_run(tmp_path / "c", EN_ITEMS[:2], cache=espeak_cache, ttfa=0.6, rtf=0.78)
    policy = Policy.from_mapping({"max_ttfa_regression_pct": 10, "min_improvement_pct": 5}, "test")
    v = assess(base, cand, policy)
    assert v.status == FAIL and v.speedup is None
    assert v.reasons == ["ttfa_s regression 20.0% > 10% (c1)", "rtf improvement 2.5% < 5% (c1)"]


def test_warmups_are_evidence_but_not_timed(tmp_path, espeak_cache):
    base = make_run(tmp_path / "b", EN_ITEMS[:2], cache=espeak_cache)
    cand = make_run(tmp_path / "c", EN_ITEMS[:2], cache=espeak_cache)
    recs = records(cand)
    recs[0]["first_audio_t"] = recs[0]["send_t"] + 50.0  # a slow warm-up must not count as a TTFA regression
    (cand / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    policy = Policy.from_mapping({"max_ttfa_regression_pct": 10}, "test")
    assert recs[0]["warmup"] and assess(base, cand, policy).status == PASS
    (cand / "wav" / "c1-w0.wav").unlink()
    v = assess(base, cand, policy)
    assert v.status == INCONCLUSIVE and v.exit_code == 2 and v.speedup is None
    assert v.reasons == [f"candidate WAV for c1-w0 missing ({cand / 'wav' / 'c1-w0.wav'})"]


@pytest.mark.parametrize("damage, expected", [
    ("delete_wav", "candidate WAV for c1-r1 missing"),
    ("tamper_score", "candidate score for c1-r1 is bound to pcm_sha256 000000000000"),
    ("drop_score", "no candidate score for c1-r1"),
    ("other_scorer", "scorer identity 'sid-2' is not the frozen 'sid-1'"),
    ("drop_record", "request record c1-r1 missing from the candidate run"),
    ("truncated_last_line", "request record c1-r1 missing from the candidate run"),
    ("rewrite_wav", "candidate WAV for c1-r1 does not match its request record's pcm_sha256"),
    ("no_scores", "no quality scores given"),
])
def test_missing_or_unbound_evidence_is_inconclusive(tmp_path, espeak_cache, damage, expected):
    base = make_run(tmp_path / "b", EN_ITEMS[:2], cache=espeak_cache, policy=POLICY)
    cand = make_run(tmp_path / "c", EN_ITEMS[:2], cache=espeak_cache, policy=POLICY, ttfa=0.1, rtf=0.1)
    scores = scores_for(base, cand)
    wav = cand / "wav" / "c1-r1.wav"
    if damage == "delete_wav":
        wav.unlink()
    elif damage == "tamper_score":
        next(s for s in scores["candidate"] if s["id"] == "c1-r1")["pcm_sha256"] = "0" * 64
    elif damage == "drop_score":
        scores["candidate"] = [s for s in scores["candidate"] if s["id"] != "c1-r1"]
    elif damage == "other_scorer":
        scores["scorer_id"] = "sid-2"
    elif damage in ("drop_record", "truncated_last_line"):
        lines = (cand / "requests.jsonl").read_text().splitlines()
        keep = [x for x in lines if '"c1-r1"' not in x]
        tail = "\n" + '{"id": "c1-r1", "concurr' if damage == "truncated_last_line" else "\n"
        (cand / "requests.jsonl").write_text("\n".join(keep) + tail)
    elif damage == "rewrite_wav":
        pcm, rate = sf.read(str(wav), dtype="int16")
        sf.write(str(wav), (pcm // 2).astype(np.int16), rate, subtype="PCM_16")
    v = judge(base, cand, None if damage == "no_scores" else scores)
    assert v.status == INCONCLUSIVE and v.exit_code == 2 and v.speedup is None
    assert any(r.startswith(expected) for r in v.reasons), v.reasons


def test_missing_baseline_and_policy_mismatch(tmp_path, espeak_cache):
    cand = make_run(tmp_path / "c", EN_ITEMS[:1], cache=espeak_cache, policy=POLICY)
    v = assess(tmp_path / "nowhere", cand, POLICY)
    assert v.status == INCONCLUSIVE and v.reasons[0].startswith("no baseline:")
    base = make_run(tmp_path / "b", EN_ITEMS[:1], cache=espeak_cache, policy=POLICY)
    looser = Policy.from_mapping({**POLICY.to_dict(), "max_error_rate_increase": 0.5}, "test")
    v = judge(base, cand, scores_for(base, cand), looser)
    assert v.status == INCONCLUSIVE
    assert v.reasons == [f"policy fingerprint mismatch: {side} run saved {POLICY.fingerprint()[:12]}, "
                         f"judged under {looser.fingerprint()[:12]}" for side in ("baseline", "candidate")]
    # without --policy the baseline's saved policy is the frozen one
    assert judge(base, cand, scores_for(base, cand), None).status == FAIL  # rtf not 5% better
    bare = make_run(tmp_path / "bare", EN_ITEMS[:1], cache=espeak_cache)
    assert assess(bare, cand, None).reasons == ["no frozen policy: none given and none saved with the baseline run"]


def test_unavailable_metric_is_inconclusive_only_when_gated(pair):
    base, cand = pair
    scores = scores_for(base, cand)
    for side in ("baseline", "candidate"):
        for s in scores[side]:
            if s["id"] in ("c1-r4", "c1-r5"):  # the zh items
                s["error_rate"], s["error_rate_reason"] = None, "no ASR backend for 'zh'"
    v = judge(base, cand, scores)
    assert v.status == INCONCLUSIVE and "error_rate unavailable for baseline c1-r4: no ASR backend for 'zh'" in v.reasons
    no_er = Policy.from_mapping({k: v for k, v in POLICY.to_dict().items() if k != "max_error_rate_increase"}, "t")
    for run in pair:
        s = json.loads((run / "summary.json").read_text())
        s["policy"] = no_er.to_dict()
        (run / "summary.json").write_text(json.dumps(s))
    assert judge(base, cand, scores, no_er).status == PASS


def test_failed_candidate_request_fails_failed_baseline_request_is_inconclusive(tmp_path, espeak_cache):
    base = make_run(tmp_path / "b", EN_ITEMS[:2], cache=espeak_cache)
    cand = make_run(tmp_path / "c", EN_ITEMS[:2], cache=espeak_cache)
    policy = Policy.from_mapping({"max_duration_change_pct": 20}, "t")
    for run, status in ((cand, FAIL), (base, INCONCLUSIVE)):
        recs = records(run)
        recs[1].update(status="error", error="HTTP 500")
        (run / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
        v = assess(base, cand, policy)
        assert v.status == status and any("request c1-r0 failed: HTTP 500" in r for r in v.reasons), v.reasons


def test_missing_timestamps_make_speed_unavailable(tmp_path, espeak_cache):
    base = make_run(tmp_path / "b", EN_ITEMS[:1], cache=espeak_cache)
    cand = make_run(tmp_path / "c", EN_ITEMS[:1], cache=espeak_cache)
    recs = records(cand)
    recs[1]["done_t"] = None
    (cand / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    v = assess(base, cand, Policy())
    assert v.status == INCONCLUSIVE and v.reasons[0] == "rtf unavailable for candidate c1-r0 (timestamps missing or not finite numbers)"


def test_corrupt_records_raise_one_line(tmp_path, espeak_cache):
    base = make_run(tmp_path / "b", EN_ITEMS[:2], cache=espeak_cache)
    lines = (base / "requests.jsonl").read_text().splitlines()
    (base / "requests.jsonl").write_text("\n".join([lines[0], "{oops", *lines[1:]]) + "\n")
    with pytest.raises(S2STError, match=r"requests.jsonl:2: unreadable request record") as e:
        assess(base, base, Policy())
    assert "\n" not in str(e.value)


def test_pcm_sha256_is_the_hash_of_the_int16_samples(tmp_path):
    pcm = (np.arange(-300, 300, dtype=np.int16) * 7).astype(np.int16)
    sf.write(str(tmp_path / "a.wav"), pcm, 24000, subtype="PCM_16")
    assert pcm_sha256(tmp_path / "a.wav") == hashlib.sha256(pcm.astype("<i2").tobytes()).hexdigest()
