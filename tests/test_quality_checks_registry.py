"""The verdict's run checks (quality/checks.py): a check defined here, as a module of its own would define it
(clipping: too many candidate samples at full scale), registered through the public table, reaches the real
verdict of two espeak-ng run dirs; without it the verdict is unchanged."""
from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from pytest_s2st.quality import FAIL, PASS, Policy, assess
from pytest_s2st.quality.checks import RUN_CHECKS, register_run_check
from pytest_s2st.quality.findings import CANDIDATE, PCM, Findings, RunCheck, RunContext
from pytest_s2st.quality.scorefile import scores_from_mapping

from espeak_runs import EN_ITEMS, make_run, scores_for

POLICY = Policy.from_mapping({"scorer_id": "sid-1", "max_error_rate_increase": 0.1, "max_duration_change_pct": 20,
                              "min_improvement_pct": 5}, "test")
CLIPPED = "c1-r1"


class Clipping(RunCheck):
    """FAIL when more than ``max_pct`` % of a candidate WAV's samples sit at int16 full scale."""

    name = "clipping (test)"

    def __init__(self, max_pct: float = 1.0) -> None:
        self.max_pct = max_pct

    def reads(self, policy: Policy) -> frozenset[str]:
        return frozenset({PCM})

    def judge(self, context: RunContext, findings: Findings) -> None:
        shares = {}
        for rid in sorted(context.wavs[CANDIDATE]):  # the candidate WAVs read and bound by the requests check
            pcm = context.pcm(CANDIDATE, rid)
            shares[rid] = 100.0 * float(np.mean((pcm >= 32767) | (pcm <= -32768))) if len(pcm) else 0.0
        findings.metrics["clipping"] = {"n": len(shares), "worst_pct": max(shares.values(), default=None)}
        for rid, pct in shares.items():
            if pct > self.max_pct:
                findings.crossed.append(f"clipping: {pct:.1f}% of samples at full scale > {self.max_pct:g}% ({rid})")


def _loud(rid, pcm, rate):
    """One candidate utterance driven into the rails."""
    return np.clip(pcm.astype(np.int64) * 40, -32768, 32767).astype(np.int16) if rid == CLIPPED else pcm


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A baseline, a clean twice-as-fast candidate and a clipped twice-as-fast candidate (same durations)."""
    root = tmp_path_factory.mktemp("clip")
    cache = root / "espeak"
    base = make_run(root / "base", EN_ITEMS, policy=POLICY, cache=cache)
    clean = make_run(root / "clean", EN_ITEMS, policy=POLICY, cache=cache, ttfa=0.25, rtf=0.4)
    loud = make_run(root / "loud", EN_ITEMS, policy=POLICY, cache=cache, ttfa=0.25, rtf=0.4, transform=_loud)
    return base, clean, loud


@pytest.fixture
def table():
    """RUN_CHECKS as it was, back after the test."""
    saved = list(RUN_CHECKS)
    yield RUN_CHECKS
    RUN_CHECKS[:] = saved


def _verdict(base, cand):
    v = assess(base, cand, POLICY, scores_from_mapping(scores_for(base, cand), "test"))
    return v.to_dict(), v.format(), v.exit_code


def test_every_check_has_its_own_name_and_the_requests_check_fills_the_context_first():
    names = [c.name for c in RUN_CHECKS]
    assert all(names) and len(set(names)) == len(names)
    assert names.index("requests") < min(names.index(n) for n in ("quality", "duration", "snr"))


def test_a_registered_check_fails_the_clipped_candidate_with_its_reason(runs, table):
    base, clean, loud = runs
    before = {"clean": _verdict(base, clean), "loud": _verdict(base, loud)}
    assert before["loud"][0]["status"] == PASS and "clipping" not in before["loud"][1]  # no check, no clipping

    register_run_check(Clipping(max_pct=1.0))
    data, text, code = _verdict(base, loud)
    assert data["status"] == FAIL and code == 1 and data["speedup"] is None
    pcm, _ = sf.read(str(loud / "wav" / f"{CLIPPED}.wav"), dtype="int16")
    share = 100.0 * np.mean(np.abs(pcm.astype(np.int32)) >= 32767)
    assert data["reasons"] == [f"clipping: {share:.1f}% of samples at full scale > 1% ({CLIPPED})"]
    assert text.splitlines()[:2] == ["s2st-assess: FAIL", f"  - {data['reasons'][0]}"]
    assert data["metrics"].pop("clipping") == {"n": len(EN_ITEMS) + 1, "worst_pct": share}
    assert data["metrics"] == before["loud"][0]["metrics"]  # the other checks wrote what they wrote before

    data, text, code = _verdict(base, clean)  # espeak-ng's own peaks stay under the limit: the verdict of before
    assert 0.0 <= data["metrics"].pop("clipping")["worst_pct"] < 1.0
    assert (data, text, code) == before["clean"]

    table.remove(table[-1])  # unregistered: the clipped candidate's verdict is the one of before
    assert _verdict(base, loud) == before["loud"]


def test_registering_replaces_by_name_or_goes_before_a_named_check(table):
    first, stricter = Clipping(max_pct=1.0), Clipping(max_pct=0.1)
    register_run_check(first)
    register_run_check(stricter)
    assert first not in table and table[-1] is stricter
    table.remove(stricter)
    register_run_check(stricter, before="timing")
    assert [c.name for c in table][-2:] == ["clipping (test)", "timing"]
    with pytest.raises(ValueError, match="no run check named 'nope'"):
        register_run_check(type("Other", (Clipping,), {"name": "other"})(), before="nope")
