"""Offline scorers on real speech: espeak-ng is the system under test, pocketsphinx and Resemblyzer
score it, assess() judges. Models load once per test session (session-scoped scorer).

Thresholds (chosen from measurements on these voices, see the report): error-rate increase 0.2
(noise at 10 dB SNR raised mean WER by ~0.5; an identical candidate by exactly 0), speaker drop
0.1 (same voice 0.85-0.92 to its anchor; en-us+f3 instead of en-us+klatt2 0.45-0.6; noise -0.25),
duration change 20% (truncation to half: 50%).
"""
from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from pytest_s2st.quality import FAIL, INCONCLUSIVE, PASS, Policy, assess, pcm_sha256
from pytest_s2st.quality.scorers import (PocketSphinxASR, Scorer, WhisperDirASR, error_rate, get_scorer,
                                         normalize_text)
from espeak_runs import ANCHOR_TEXT, EN_ITEMS, VOICES, ZH_ITEMS, espeak, make_run, records

LIMITS = {"max_error_rate_increase": 0.2, "max_speaker_drop": 0.1, "max_duration_change_pct": 20}


@pytest.fixture(scope="session")
def world(tmp_path_factory):
    """Anchors, the scorer (models loaded once), and the baseline runs it has scored."""
    import torch

    torch.set_num_threads(1)  # Resemblyzer runs on torch
    root = tmp_path_factory.mktemp("quality")
    for voice, by_lang in VOICES.items():
        espeak(ANCHOR_TEXT, by_lang["en"], root / "anchors" / f"{voice}.wav")  # not a sentence of the runs
    cache = root / "espeak"
    scorer = get_scorer(str(root / "anchors"), None)
    base = make_run(root / "base", EN_ITEMS, cache=cache)
    zh = make_run(root / "zh", ZH_ITEMS, cache=cache)
    policy = Policy.from_mapping({"scorer_id": scorer.scorer_id, **LIMITS}, "test")
    return {"root": root, "cache": cache, "scorer": scorer, "base": base, "zh": zh, "policy": policy}


def candidate(world, name, **kw):
    return make_run(world["root"] / name, kw.pop("items", EN_ITEMS), cache=world["cache"], **kw)


def noisy(rid, pcm, rate, snr_db=10.0):
    rng = np.random.default_rng(int(hashlib.sha256(rid.encode()).hexdigest()[:8], 16))
    x = pcm.astype(np.float64)
    noise = rng.normal(0.0, np.sqrt(np.mean(x ** 2) / 10 ** (snr_db / 10)), len(x))
    return np.clip(x + noise, -32768, 32767).astype(np.int16)


def test_scores_are_bound_to_the_pcm_and_identity_to_the_models(world):
    scorer, base = world["scorer"], world["base"]
    scores = scorer.score_run(base)
    recs = {r["id"]: r for r in records(base)}
    assert sorted(scores) == sorted(recs)  # warm-up scored too
    for rid, s in scores.items():
        assert s.pcm_sha256 == recs[rid]["pcm_sha256"] == pcm_sha256(base / "wav" / f"{rid}.wav")
        assert 0.0 <= s.error_rate and s.extra["error_metric"] == "wer" and s.extra["transcript"] is not None
        assert 0.75 < s.speaker_similarity <= 1.0  # same voice as the anchor
    ident = scorer.identity()
    assert set(ident["asr"]["en"]["model_sha256"]) >= {"en-us.lm.bin", "cmudict-en-us.dict"}
    assert len(ident["speaker"]["pretrained.pt"]) == 64 and set(ident["speaker"]["anchors_sha256"]) == {"ryan", "aiden"}
    assert scorer.scorer_id.startswith("s2st-") and scorer.scorer_id == Scorer(world["root"] / "anchors").scorer_id
    # another anchor recording is another scorer identity: scores under it do not count
    espeak(ANCHOR_TEXT + " again", "en-us+klatt2", world["root"] / "anchors2" / "ryan.wav")
    other = Scorer({"ryan": world["root"] / "anchors2" / "ryan.wav", "aiden": world["root"] / "anchors" / "aiden.wav"})
    assert other.scorer_id != scorer.scorer_id
    cand = candidate(world, "same-other-scorer")
    frozen_other = Policy.from_mapping({**world["policy"].to_dict(), "scorer_id": other.scorer_id}, "t")
    v = assess(base, cand, frozen_other, scorer.score_runs(base, cand))
    assert v.status == INCONCLUSIVE and v.reasons == [f"scorer identity {scorer.scorer_id!r} is not the frozen {other.scorer_id!r}"]


def test_identical_candidate_passes(world):
    cand = candidate(world, "same", ttfa=0.25, rtf=0.4)
    before = len(world["scorer"].costs.asr_s)
    v = assess(world["base"], cand, world["policy"], world["scorer"].score_runs(world["base"], cand))
    assert v.status == PASS, v.reasons
    assert v.metrics["quality"]["error_rate increase"]["change_mean"] == 0.0
    assert v.speedup == {"c1": pytest.approx(2.0)}
    assert len(world["scorer"].costs.asr_s) == before  # same PCM, same text: scored once per process


def test_noise_fails_error_rate(world):
    cand = candidate(world, "noisy", transform=noisy)
    v = assess(world["base"], cand, world["policy"], world["scorer"].score_runs(world["base"], cand))
    assert v.status == FAIL
    assert any(r.startswith("error_rate increase ") for r in v.reasons), v.reasons
    assert not any(r.startswith("duration") for r in v.reasons)


def test_truncation_fails_duration(world):
    cand = candidate(world, "cut", transform=lambda rid, pcm, rate: pcm[: len(pcm) // 2])
    v = assess(world["base"], cand, world["policy"], world["scorer"].score_runs(world["base"], cand))
    assert v.status == FAIL
    assert any(r.startswith("duration change 50.0% > 20%") for r in v.reasons), v.reasons


def test_other_voice_fails_speaker_similarity(world):
    swapped = {**VOICES, "ryan": {"en": "en-us+f3"}}  # the model answered ryan's requests in another voice
    cand = candidate(world, "swap", voice_map=swapped)
    v = assess(world["base"], cand, world["policy"], world["scorer"].score_runs(world["base"], cand))
    assert v.status == FAIL
    assert any(r.startswith("speaker_similarity drop ") for r in v.reasons), v.reasons
    assert not any(r.startswith("duration") for r in v.reasons)
    drops = {rid: d for rid, d in _speaker_drops(world, cand).items()}
    ryan = [r["id"] for r in records(cand) if r["voice"] == "ryan"]
    aiden = [r["id"] for r in records(cand) if r["voice"] == "aiden"]
    assert min(drops[r] for r in ryan) > 0.1 and max(abs(drops[r]) for r in aiden) == 0.0


def _speaker_drops(world, cand):
    s = world["scorer"].score_runs(world["base"], cand)
    return {rid: s.baseline[rid].speaker_similarity - s.candidate[rid].speaker_similarity for rid in s.candidate}


def test_zh_without_asr_backend_is_inconclusive_when_error_rate_is_gated(world):
    zh = world["zh"]
    cand = candidate(world, "zh-same", items=ZH_ITEMS)
    scores = world["scorer"].score_runs(zh, cand)
    s = scores.candidate["c1-r0"]
    assert s.error_rate is None and s.speaker_similarity is not None
    assert s.reason("error_rate").startswith("no ASR backend for 'zh': no local Whisper-style model dir given")
    v = assess(zh, cand, world["policy"], scores)
    assert v.status == INCONCLUSIVE and any(r.startswith("error_rate unavailable for baseline c1-r0: no ASR backend") for r in v.reasons)
    ungated = Policy.from_mapping({k: v for k, v in world["policy"].to_dict().items() if k != "max_error_rate_increase"}, "t")
    assert assess(zh, cand, ungated, scores).status == PASS
    # a tampered score on real scores: unbound evidence
    data = scores.to_dict()
    data["candidate"][1]["pcm_sha256"] = hashlib.sha256(b"other audio").hexdigest()
    from pytest_s2st.quality.scorefile import scores_from_mapping

    v = assess(zh, cand, ungated, scores_from_mapping(json.loads(json.dumps(data)), "t"))
    assert v.status == INCONCLUSIVE and "is bound to pcm_sha256" in v.reasons[0]


def test_asr_backends_say_why_they_cannot_help(tmp_path):
    assert PocketSphinxASR().unavailable("en") is None
    assert PocketSphinxASR().unavailable("zh") == "pocketsphinx ships only an en-US model, not 'zh'"
    assert "no local Whisper-style model dir given" in WhisperDirASR(None).unavailable("zh")
    assert f"{tmp_path} has no config.json" in WhisperDirASR(tmp_path).unavailable("zh")


def test_error_rate_normalisation():
    assert normalize_text("Hello, World!  It's 'fine'.", "en") == "hello world it s fine"
    assert error_rate("Hello, world!", "hello world", "en") == (0.0, "wer")
    assert error_rate("今天，天气很好。", "今天天气很坏", "zh") == (pytest.approx(1 / 6), "cer")
