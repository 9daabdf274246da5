"""Runtime changes judged against the rounds' spread (significance.py), on hand-made rounds."""
from __future__ import annotations

import numpy as np
import pytest

from pytest_s2st.judging import insignificant, regressions
from pytest_s2st.report import render_compare
from pytest_s2st.rows import Row, SavedRow
from pytest_s2st.settings import compare_limits
from pytest_s2st.significance import (CANNOT_TELL, FASTER, MIN_ROUNDS, SAME, SLOWER, TOO_FEW, compare_rounds,
                                      compare_runs)


def noisy(mean: float, n: int = 20, spread: float = 0.05, seed: int = 1) -> list[float]:
    rng = np.random.default_rng(seed)
    return list(mean * (1 + spread * rng.standard_normal(n)))


def test_a_clear_slowdown_is_slower_with_an_interval_around_the_ratio():
    c = compare_rounds(noisy(1.0), noisy(1.5, seed=2))
    assert c.word == SLOWER and c.significant
    assert c.low < c.ratio < c.high and c.low > 1.3 and c.high < 1.7


def test_a_clear_speedup_is_faster():
    assert compare_rounds(noisy(1.0), noisy(0.5, seed=2)).word == FASTER


def test_the_same_distribution_is_no_significant_change():
    c = compare_rounds(noisy(1.0, seed=3), noisy(1.0, seed=4))
    assert c.word == SAME and not c.significant and c.low < 1 < c.high


def test_a_tiny_real_shift_inside_the_noise_threshold_is_not_claimed():
    # 1 % slower with almost no spread: the interval excludes 1, but 1 % is below the 2 % noise threshold
    c = compare_rounds(noisy(1.0, spread=1e-4), noisy(1.01, spread=1e-4, seed=2))
    assert c.low > 1 and c.word == SAME


def test_too_few_rounds_says_so_and_claims_nothing():
    c = compare_rounds([1.0] * (MIN_ROUNDS - 1), [3.0] * 10)
    assert c.word == TOO_FEW and c.low is None and c.ratio == pytest.approx(3.0)
    assert "need 5" in c.describe()


def test_same_rounds_same_interval():
    assert compare_rounds(noisy(1.0), noisy(1.2, seed=5)) == compare_rounds(noisy(1.0), noisy(1.2, seed=5))


def _row(rounds, runs=None):
    details = {"rounds_s": rounds} if runs is None else {"rounds_s": rounds, "runs_s": runs}
    return {"runtime_s": {"value": float(np.mean(rounds if runs is None else runs)), "details": details},
            "flops": {"value": 10.0}}


def test_compare_fail_on_runtime_needs_a_significant_slowdown_between_runs():
    limits = compare_limits("runtime_s:5%")
    noise = ([1.0, 0.8, 1.2], [1.1, 0.88, 1.32])     # exactly +10 %, inside a 20 % spread between runs
    real = ([1.0, 1.01, 0.99], [1.5, 1.52, 1.49])    # +50 %, runs within 1 % of each other
    for (old, new), fails in ((noise, False), (real, True)):
        rows, compared = [Row("t", "f::t", _row(noisy(1.0), new), key="k")], {"k": SavedRow.from_metrics(_row(noisy(1.0), old))}
        assert bool(regressions(rows, compared, limits)) is fails
        assert bool(insignificant(rows, compared, limits)) is not fails
    rows, compared = [Row("t", "f::t", _row(noisy(1.0), real[1]), key="k")], {"k": SavedRow.from_metrics(_row(noisy(1.0), real[0]))}
    assert "slower" in render_compare(rows, compared)[2]


# --- between runs: the interval from both sides' per-run means ----------------------------------------------------

def test_the_interval_between_runs_is_welch_t_on_log_means_by_hand():
    # logs of the run means: old {-d, 0, d}, new {c-d, c, c+d}: equal variances d², n = 3 per side, so
    # se = d·sqrt(2/3) and Welch's degrees of freedom are exactly 4 (t = 2.776)
    c, d = 0.08, 0.02
    old, new = np.exp([-d, 0.0, d]), np.exp([c - d, c, c + d])
    change = compare_runs(old, new)
    half = 2.776 * d * np.sqrt(2 / 3)
    assert change.low == pytest.approx(np.exp(c - half), rel=1e-9)
    assert change.high == pytest.approx(np.exp(c + half), rel=1e-9)
    assert change.ratio == pytest.approx(new.mean() / old.mean()) and change.word == SLOWER
    assert change.runs == (3, 3) and change.describe().endswith("slower (3/3 runs)")


@pytest.mark.parametrize("wide", ["old", "new"])
def test_the_interval_takes_the_spread_of_both_sides(wide):
    """One side's runs agree to 0.1 %, the other's spread ±10 %: an interval built from one side's runs alone
    (the tight one) would call the 10 % shift significant. By hand: se² = (0.001² + 0.1²)/3, Welch's degrees
    of freedom 2.0004 (t = 4.303): the interval is exp(±0.10 ± 0.248) and holds 1."""
    tight, spread = [-0.001, 0.0, 0.001], [-0.1, 0.0, 0.1]
    shift = 0.1 if wide == "new" else -0.1
    old = np.exp(spread if wide == "old" else tight)
    new = np.exp(np.array(spread if wide == "new" else tight) + shift)
    change = compare_runs(old, new)
    se = np.sqrt((0.001 ** 2 + 0.1 ** 2) / 3)
    assert change.low == pytest.approx(np.exp(shift - 4.303 * se), rel=1e-3)
    assert change.high == pytest.approx(np.exp(shift + 4.303 * se), rel=1e-3)
    assert change.word == SAME and change.low < 1 < change.high


def test_the_rounds_bootstrap_takes_the_rounds_of_both_sides():
    """Within one process: the old run's rounds are all equal, the new run's spread ±50 %. The interval is the
    new side's spread, never a point (an interval resampling the old rounds alone is [ratio, ratio])."""
    old, new = [1.0] * 20, noisy(1.1, n=20, spread=0.5, seed=9)
    change = compare_rounds(old, new)
    assert change.high - change.low > 0.2 and change.low < change.ratio < change.high
    assert compare_rounds(new, old).high - compare_rounds(new, old).low > 0.1


def test_one_run_per_side_cannot_tell_and_fails_no_gate():
    limits = compare_limits("runtime_s:5%")
    rows, compared = [Row("t", "f::t", _row([1.9] * 40), key="k")], {"k": SavedRow.from_metrics(_row([1.0] * 40))}  # x1.9: below GROSS
    change = compare_runs([1.0], [1.9])
    assert change.word == CANNOT_TELL and change.low is None and not change.significant
    assert regressions(rows, compared, limits) == []
    note = insignificant(rows, compared, limits)
    assert len(note) == 1 and "x1.900, cannot tell from one run per side (need 3 runs per side" in note[0]
    assert "cannot tell (1/1 runs)" in render_compare(rows, compared)[2]
    assert "cannot tell from 2/3 runs" in compare_runs([1.0, 1.1], [1.5, 1.6, 1.7]).describe()


def _saved(path, runtime, rounds, stage_runtime):
    import json

    s2st = {"identity": "t.py::t", "metrics": {"runtime_s": {"value": runtime, "details": {"rounds_s": rounds}}},
            "stages": [{"name": "a", "metrics": {"runtime_s": {"value": stage_runtime, "details": {"rounds_s": rounds}}}},
                       {"name": "b", "metrics": {"runtime_s": {"value": 0.5, "details": {"rounds_s": rounds}}}}]}
    path.write_text(json.dumps({
        "machine_info": {"node": path.stem, "machine": "x86_64", "system": "Linux", "python_implementation": "CPython",
                         "python_version": "3.11.9"},
        "commit_info": {"id": "abc", "dirty": False, "project": "p"},
        "benchmarks": [{"fullname": "t.py::t", "name": "t", "stats": {"mean": runtime}, "extra_info": {"s2st": s2st}}],
        "datetime": "2026-01-01T00:00:00", "version": "5.3.1"}))
    return path


def test_merge_repeats_folds_the_runs_of_one_benchmark(tmp_path, capsys):
    import json

    from pytest_s2st.cli import merge as merge_cli

    paths = [_saved(tmp_path / f"r{i}.json", v, [v, v], 10 * v) for i, v in enumerate((1.0, 2.0, 6.0))]
    out = tmp_path / "merged.json"
    assert merge_cli.main([*map(str, paths), "--repeats", "-o", str(out)]) == 0
    [bench] = json.loads(out.read_text())["benchmarks"]
    s2st = bench["extra_info"]["s2st"]
    runtime = s2st["metrics"]["runtime_s"]
    assert runtime["value"] == 3.0 and runtime["details"]["runs_s"] == [1.0, 2.0, 6.0]
    assert runtime["details"]["rounds_s"] == [1.0, 1.0, 2.0, 2.0, 6.0, 6.0] and runtime["details"]["rounds"] == 6
    assert s2st["stages"][0]["metrics"]["runtime_s"]["details"]["runs_s"] == [10.0, 20.0, 60.0]
    assert s2st["stages"][1]["metrics"]["runtime_s"]["value"] == 0.5
    # without --repeats the same files are shards holding one benchmark three times: refused
    assert merge_cli.main([*map(str, paths), "-o", str(tmp_path / "m.json")]) == 2
    assert "is also in" in capsys.readouterr().err
    other = tmp_path / "other.json"
    other.write_text(paths[0].read_text().replace('"t.py::t"', '"t.py::u"'))
    assert merge_cli.main([str(paths[0]), str(other), "--repeats", "-o", str(tmp_path / "m.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "other.json: --repeats needs the same benchmarks once in every run" in err[0]
