"""One table of scored quality metrics (quality/scored.py): the policy, score files, scorers, the gate, the
verdict, the s2st_gate marker and --s2st-quality's help all read it, so adding a scorer is two files."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

from pytest_s2st.gate import gate_help, gate_signature
from pytest_s2st.quality.policy import Policy
from pytest_s2st.quality.scored import SCORED_METRICS, UTTERANCE, metrics, threshold_keys
from pytest_s2st.quality.scorefile import Score, scores_from_mapping
from pytest_s2st.quality.scorers import BACKENDS
from pytest_s2st.settings import BY_NAME
from espeak_runs import EN_ITEMS, make_run

ROOT = Path(__file__).resolve().parents[1]


def test_the_marker_signature_and_help_come_from_the_policy_and_the_table():
    keys = [f.name for f in fields(Policy)]
    assert gate_signature() == f"s2st_gate({', '.join(k + '=' for k in keys)})"
    assert "min_snr_db=" in gate_signature()  # the hand-written signature had drifted without it
    for metric in SCORED_METRICS:
        assert "/".join(metric.thresholds) in gate_help() and set(metric.thresholds) <= set(keys)
    help_text = BY_NAME["quality"].help
    assert all(m.name in help_text for m in metrics(UTTERANCE))


def test_every_per_utterance_metric_has_a_backend_and_a_score_field():
    assert {m.backend for m in metrics(UTTERANCE)} <= set(BACKENDS)
    score = Score("r0", "0" * 64, {"error_rate": 0.5})
    assert score.error_rate == 0.5 and score.speaker_similarity is None
    assert score.to_dict() == {"id": "r0", "pcm_sha256": "0" * 64, "error_rate": 0.5, "speaker_similarity": None}
    with pytest.raises(ValueError, match="not a scored metric: utmos"):
        Score("r0", "0" * 64, {"utmos": 3.0})
    policy = Policy.from_mapping({"scorer_id": "s", "max_speaker_drop": 0.1, "min_asr_bleu": 10}, "p")
    assert policy.thresholds() == {"max_speaker_drop": 0.1, "min_asr_bleu": 10}
    with pytest.raises(Exception, match="scorer_id is required when max_error_rate_increase is set"):
        Policy.from_mapping({"max_error_rate_increase": 0.1}, "p")
    assert set(threshold_keys()) <= {f.name for f in fields(Policy)}


# The change issue 30 walks: a new per-utterance scorer. Exactly these two files change.
ROW = '''
SCORED_METRICS += (ScoredMetric("utmos", {"max_utmos_drop": WORSE, "min_utmos": FLOOR}, higher_is_better=True,
                                backend="utmos", units="MOS, 1-5", help="a MOS predictor of each response"),)
BY_NAME = {m.name: m for m in SCORED_METRICS}
BY_KEY = {k: (m, rule) for m in SCORED_METRICS for k, rule in m.thresholds.items()}
'''
BACKEND = '''

class LoudnessMOS:
    """A stand-in MOS predictor: louder is 'better' (what a real UTMOS backend would compute instead)."""

    def identity(self):
        return {"backend": "loudness-mos v1"}

    def score(self, u):
        rms = float(np.sqrt(np.mean(np.square(u.wav16k)))) if len(u.wav16k) else 0.0
        return 1.0 + min(4.0, 40.0 * rms), None, {}


BACKENDS["utmos"] = lambda scorer: LoudnessMOS()
'''
SCRIPT = '''
import json, sys
from pytest_s2st.gate import gate_signature
from pytest_s2st.quality import Policy, assess
from pytest_s2st.quality.scorers import Scorer
from pytest_s2st.quality.scorefile import scores_from_mapping
from pytest_s2st.settings import BY_NAME
base, same, quiet = sys.argv[1:4]
scorer = Scorer(asr={})  # no ASR: error_rate unavailable (not gated), speaker: no anchors (not gated)
policy = Policy.from_mapping({"scorer_id": scorer.scorer_id, "max_utmos_drop": 0.5}, "utmos policy")
out = {"signature": gate_signature(), "help": BY_NAME["quality"].help, "mod": __import__("pytest_s2st").__file__}
for name, cand in (("same", same), ("quiet", quiet)):
    scores = scorer.score_runs(base, cand)
    out[name + "_file"] = scores.to_dict()["candidate"][0]
    v = assess(base, cand, policy, scores)
    out[name] = [v.status, v.reasons]
floor = Policy.from_mapping({"scorer_id": scorer.scorer_id, "min_utmos": 4.9}, "p")
out["floor"] = assess(base, same, floor, scorer.score_runs(base, same)).status
try:
    scores_from_mapping({"scorer_id": "s", "baseline": [{"id": "a", "pcm_sha256": "0" * 64, "error_rate": None,
                         "speaker_similarity": None}], "candidate": []}, "old.json")
except Exception as exc:
    out["old_file"] = str(exc)
print(json.dumps(out))
'''


def test_adding_a_scorer_touches_the_table_and_its_backend_only(tmp_path):
    copy = tmp_path / "src"
    shutil.copytree(ROOT / "pytest_s2st", copy / "pytest_s2st", ignore=shutil.ignore_patterns("__pycache__"))
    with open(copy / "pytest_s2st" / "quality" / "scored.py", "a") as f:
        f.write(ROW)
    with open(copy / "pytest_s2st" / "quality" / "scorers.py", "a") as f:
        f.write(BACKEND)
    changed = subprocess.run(["diff", "-rq", str(ROOT / "pytest_s2st"), str(copy / "pytest_s2st"), "-x", "__pycache__"],
                             capture_output=True, text=True).stdout.splitlines()
    assert len(changed) == 2, changed

    base = make_run(tmp_path / "base", EN_ITEMS[:2])
    same = make_run(tmp_path / "same", EN_ITEMS[:2], ttfa=0.25, rtf=0.4)
    quiet = make_run(tmp_path / "quiet", EN_ITEMS[:2], ttfa=0.25, rtf=0.4, transform=lambda rid, pcm, rate: pcm // 8)
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(base), str(same), str(quiet)], capture_output=True,
                          text=True, env={"PYTHONPATH": str(copy), "PATH": "/usr/bin:/bin"}, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert out["mod"].startswith(str(copy))
    assert "max_utmos_drop=, min_utmos=)" in out["signature"] and "utmos" in out["help"]
    assert out["same"] == ["PASS", []]
    assert out["quiet"][0] == "FAIL" and out["quiet"][1][0].startswith("utmos drop ")
    assert "> 0.5 (mean of 3" in out["quiet"][1][0]
    assert out["same_file"]["utmos"] > 1.0 and "error_rate_reason" in out["same_file"]
    assert out["floor"] == "FAIL"
    assert "missing key 'utmos' (use null when unavailable)" in out["old_file"]
