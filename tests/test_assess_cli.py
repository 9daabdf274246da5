"""s2st-assess: exit codes 0 / 1 / 2, one-line errors, and no scorer loaded unless --score."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_s2st.cli.assess import main
from pytest_s2st.quality import Policy
from espeak_runs import ANCHOR_TEXT, EN_ITEMS, VOICES, espeak, make_run, scores_for

POLICY = Policy.from_mapping({"scorer_id": "sid-1", "max_error_rate_increase": 0.1, "max_speaker_drop": 0.1,
                              "max_duration_change_pct": 20}, "test")


@pytest.fixture
def runs(tmp_path):
    base = make_run(tmp_path / "base", EN_ITEMS[:2], policy=POLICY, cache=tmp_path / "es")
    cand = make_run(tmp_path / "cand", EN_ITEMS[:2], policy=POLICY, cache=tmp_path / "es", ttfa=0.25, rtf=0.4)
    (tmp_path / "policy.json").write_text(json.dumps(POLICY.to_dict()))
    return tmp_path, base, cand


def _write(path: Path, data) -> str:
    path.write_text(json.dumps(data))
    return str(path)


def test_pass_fail_inconclusive_exit_codes(runs, capsys):
    tmp, base, cand = runs
    good = _write(tmp / "good.json", scores_for(base, cand))
    args = ["--baseline", str(base), "--candidate", str(cand), "--policy", str(tmp / "policy.json")]
    assert main(args + ["--quality", good, "--json", str(tmp / "v.json")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("s2st-assess: PASS") and "speedup (rtf): c1 2.000x" in out
    assert json.loads((tmp / "v.json").read_text())["speedup"] == {"c1": pytest.approx(2.0)}
    bad = _write(tmp / "bad.json", scores_for(base, cand, er={("candidate", "c1-r1"): 0.9}))
    assert main(args + ["--quality", bad]) == 1
    out = capsys.readouterr().out
    assert out.startswith("s2st-assess: FAIL\n  - error_rate increase 0.217 > 0.1 (mean of 3; worst c1-r1 0.650)")
    assert "speedup" not in out
    assert main(args) == 2  # the policy gates scores and none were given
    assert "INCONCLUSIVE\n  - no quality scores given" in capsys.readouterr().out
    # without --policy: the policy saved with the baseline run is the frozen one
    assert main(["--baseline", str(base), "--candidate", str(cand), "--quality", good]) == 0


def test_bad_input_is_one_line_and_exit_2(runs, capsys):
    tmp, base, cand = runs
    (tmp / "broken.json").write_text("{not json")
    rc = main(["--baseline", str(base), "--candidate", str(cand), "--quality", str(tmp / "broken.json")])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith(f"s2st-assess: {tmp / 'broken.json'}: cannot read scores file: not valid JSON") and err.count("\n") == 1
    _write(tmp / "p.json", {"max_speaker_drop": -1})
    assert main(["--baseline", str(base), "--candidate", str(cand), "--policy", str(tmp / "p.json")]) == 2
    assert "p.json: max_speaker_drop must be >= 0" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:  # argument syntax: argparse's usage error
        main(["--candidate", str(cand)])
    assert e.value.code == 2


def test_assess_reads_files_only_no_scorer_is_imported(runs):
    """Assessment with a scores file never loads a model: scoring is a separate, offline step."""
    tmp, base, cand = runs
    good = _write(tmp / "good.json", scores_for(base, cand))
    code = ("import sys; from pytest_s2st.cli.assess import main; "
            f"rc = main(['--baseline', {str(base)!r}, '--candidate', {str(cand)!r}, '--quality', {good!r}]); "
            "print(rc, sorted(m for m in ('torch', 'pocketsphinx', 'resemblyzer', 'librosa', 'jiwer') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1]).stdout
    assert out.strip().splitlines()[-1] == "0 []"


def test_score_option_scores_both_runs(runs, capsys):
    tmp, base, cand = runs
    for voice, by_lang in VOICES.items():
        espeak(ANCHOR_TEXT, by_lang["en"], tmp / "anchors" / f"{voice}.wav")
    import torch

    from pytest_s2st.quality.scorers import get_scorer

    torch.set_num_threads(1)  # Resemblyzer runs on torch

    frozen = get_scorer(str(tmp / "anchors"), None).scorer_id  # identity only: hashes, no model load
    _write(tmp / "p2.json", {**POLICY.to_dict(), "scorer_id": frozen})
    args = ["--baseline", str(base), "--candidate", str(cand), "--policy", str(tmp / "p2.json"), "--score",
            "--anchors", str(tmp / "anchors"), "--write-scores", str(tmp / "scores.json")]
    rc = main(args)
    out = capsys.readouterr().out
    # the saved policies carry scorer_id sid-1: judged under p2 the runs are inconclusive, as they must be
    assert rc == 2 and "policy fingerprint mismatch: baseline run saved" in out
    saved = json.loads((tmp / "scores.json").read_text())
    assert saved["scorer_id"] == frozen and {s["id"] for s in saved["candidate"]} == {"c1-w0", "c1-r0", "c1-r1"}
    for run in (base, cand):
        s = json.loads((run / "summary.json").read_text())
        s["policy"] = {**POLICY.to_dict(), "scorer_id": frozen}
        (run / "summary.json").write_text(json.dumps(s))
    assert main(args) == 0 and "PASS" in capsys.readouterr().out


def test_print_scorer_id_matches_the_scorer_the_gate_uses(capsys):
    from pytest_s2st.cli.assess import main
    from pytest_s2st.quality.scorers import get_scorer

    assert main(["--print-scorer-id"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first == get_scorer().scorer_id and first.startswith("s2st-")


def test_an_output_file_it_cannot_write_is_one_line_after_the_verdict(runs, capsys):
    tmp, base, cand = runs
    good = _write(tmp / "good.json", scores_for(base, cand))
    args = ["--baseline", str(base), "--candidate", str(cand), "--policy", str(tmp / "policy.json"), "--quality", good]
    for target in (tmp / "missing" / "v.json", tmp):  # a folder that is not there; a directory
        assert main(args + ["--json", str(target)]) == 2  # was: an OSError traceback after the verdict
        out = capsys.readouterr()
        assert out.out.startswith("s2st-assess: PASS")  # what was measured is still printed
        assert out.err.count("\n") == 1 and out.err.startswith(f"s2st-assess: --json {target}: ")
