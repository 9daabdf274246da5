"""The chained series: paired ratios multiplied along the commits, anchored to the absolute values, and its changes
read from the ratios -- on hand-made ratio histories with known intervals, and on a real one: pytest sessions of
--s2st-ab-base HEAD~1 over commits of a git repository, kept with --s2st-history, as the CI recipe runs them."""
from __future__ import annotations

import math
import os
import random
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import BUSY_BENCH as BENCH
from helpers import git as _git
from helpers import git_repo as _repo

from pytest_s2st.cli import history as cli
from pytest_s2st.history.chain import Link, chain
from pytest_s2st.history.judge import absolute_key, judge
from pytest_s2st.history.records import PAIRED
from pytest_s2st.history.store import SeriesKey, open_store


def _links(kind: str, seed: int, n: int = 30, se: float = 0.003, true_se: float | None = None) -> list[Link]:
    """A +10 % commit at 10, a +2 % x 5 creep at 20-24 (1-based), the rest A/A; each ratio's interval +-1.96 se."""
    rng, out, parent = random.Random(seed), [], "c0"
    for i in range(1, n + 1):
        true = 1.0
        if kind in ("step", "both") and i == 10:
            true = 1.10
        if kind in ("creep", "both") and 20 <= i <= 24:
            true = 1.02
        r = true * math.exp(rng.gauss(0, true_se or se))
        out.append(Link(f"c{i}", parent, r, r * math.exp(-1.96 * se), r * math.exp(1.96 * se), 0.01))
        parent = f"c{i}"
    return out


@pytest.mark.parametrize("se", [0.003, 0.005])
def test_a_step_is_found_at_its_commit_a_creep_as_one_change_and_aa_gives_none(se):
    steps = [chain(_links("step", s, se=se)).changes for s in range(100)]
    assert all([(c.index, c.last) for c in found] == [(9, 9)] for found in steps)
    assert all(found[0].worse and found[0].ratio == pytest.approx(1.10, abs=0.02) for found in steps)
    creeps = [chain(_links("creep", s, se=se)).changes for s in range(100)]
    assert sum(any(c.index <= 20 and c.last >= 22 and c.ratio > 1.07 for c in found) for found in creeps) >= 95
    assert sum(bool(chain(_links("aa", s, se=se)).changes) for s in range(100)) == 0


def test_intervals_that_claim_too_much_are_widened_by_the_ratios_own_scatter():
    """Ratios scattered twice as wide as their intervals say: A/A alarms stay rare; the +10 % step is still found."""
    assert sum(bool(chain(_links("aa", s, true_se=0.006)).changes) for s in range(100)) <= 1
    assert sum(any(c.index == 9 for c in chain(_links("step", s, true_se=0.006)).changes) for s in range(100)) == 100


def test_the_chain_multiplies_the_ratios_and_is_anchored_to_the_absolute_values():
    links = [Link("a", "root", 1.0, absolute=2.0), Link("b", "a", 1.1, absolute=2.4), Link("c", "b", 1.0, absolute=2.0)]
    done = chain(links)
    # relative levels 1, 1.1, 1.1; anchored: geometric mean equal to the absolute one's (2.0 * 2.4 * 2.0) ** (1/3)
    assert done.values[1] / done.values[0] == pytest.approx(1.1) and done.values[2] == pytest.approx(done.values[1])
    assert math.prod(done.values) == pytest.approx(2.0 * 2.4 * 2.0)
    assert done.pieces == [(0, 3)]
    # a run measured against a commit that is not its predecessor starts a new piece
    assert chain(links[:2] + [Link("d", "zzz", 1.0, absolute=2.0)]).pieces == [(0, 2), (2, 3)]


def test_the_band_accumulates_the_ratios_uncertainty():
    se = 0.01
    links = [Link(f"c{i}", f"c{i - 1}", 1.0, math.exp(-1.96 * se), math.exp(1.96 * se)) for i in range(1, 5)]
    done = chain(links)
    width = [math.log(h / v) / 1.96 for h, v in zip(done.highs, done.values)]
    per = math.hypot(se, 0.002)
    assert width == pytest.approx([per * math.sqrt(k) for k in range(1, 5)], rel=1e-6)


def _run(repo: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=600)


WORK = '''
WORK = {work}


def model(x):
    total = 0
    for i in range(WORK):  # fixed CPU work: under load its own time (wall less run-queue wait) stays put
        total += i
    return x
'''


# --- a real history: pytest --s2st-ab-base HEAD~1 --s2st-history on each commit ----------------------------------

def test_a_real_chain_of_ab_sessions_keeps_each_ratio_against_its_parent_and_check_fails_on_the_slower_commit(
        tmp_path):
    repo = _repo(tmp_path / "repo", {"model.py": WORK.format(work=40_000), "test_bench.py": BENCH})
    db = tmp_path / "h.sqlite"
    ab = ("--s2st-ab-base", "HEAD~1", "--s2st-ab-pairs", "1", "--s2st-min-rounds", "6", "--s2st-ab-round-s", "0.01",
          f"--s2st-history={db}")
    shas = [_git(repo, "rev-parse", "HEAD").strip()]
    for message, work in (("a comment", 40_000), ("the slower model", 60_000)):
        (repo / "model.py").write_text(WORK.format(work=work) + f"# {message}\n")
        _git(repo, "commit", "-qam", message)
        shas.append(_git(repo, "rev-parse", "HEAD").strip())
        done = _run(repo, *ab, f"--benchmark-json={tmp_path / 'ab.json'}")
        assert "kept in" in done.stdout, done.stdout[-3000:] + done.stderr[-2000:]
    # the A/B session's --benchmark-json: the head's rounds as a pytest-benchmark row, read as github-action-benchmark's
    # pytest extraction (src/extract.ts) reads it: fullname, stats.ops (iter/sec), stats.stddev, stats.mean,
    # stats.rounds; the base's measurement and the paired ratio in extra_info
    import json

    [row] = json.loads((tmp_path / "ab.json").read_text())["benchmarks"]
    stats = row["stats"]
    assert row["fullname"] == "test_bench.py::test_model" and row["name"] == "test_model"
    assert stats["rounds"] >= 6 and stats["ops"] == pytest.approx(1 / stats["mean"]) and stats["stddev"] >= 0
    assert row["extra_info"]["s2st"]["ab"]["mode"] == "code versions"
    assert row["extra_info"]["s2st"]["baseline"]["metrics"]["runtime_s"]["value"] > 0  # the base's side
    assert row["extra_info"]["s2st"]["ab"]["ratio"] == pytest.approx(1.5, abs=0.2)
    with sqlite3.connect(db) as conn:
        runs = conn.execute("SELECT commit_id, base_commit, subject FROM s2st_runs ORDER BY id").fetchall()
    assert runs == [(shas[1], shas[0], "a comment"), (shas[2], shas[1], "the slower model")]
    key = SeriesKey("test_bench.py::test_model", "total", "runtime_s", PAIRED)
    with open_store(db) as store:
        entries = store.series(key)
        assert [e.point.value for e in entries] == [pytest.approx(1.0, abs=0.1), pytest.approx(1.5, abs=0.2)]
        assert all(e.point.low <= e.point.value <= e.point.high and e.point.low < e.point.high for e in entries)
        judged = judge(key, entries, anchor=store.series(absolute_key(key)))
    # one change, worse, over the slower commit. The no-op commit's A/B (0.01 s rounds, one pair) may read it
    # x1.03 with a tight interval under load: a stretch over both commits is then the stronger one (seen in CI:
    # index 0, last 1), or that commit is a change of its own (seen in CI too). The history shows what the A/Bs
    # read; a change anywhere else only where the A/B itself read its commit off 1. (The attribution on seeded
    # histories is this file's other tests'.)
    covering = [c for c in judged.changes if c.index <= 1 <= (c.last if c.last is not None else c.index)]
    assert len(covering) == 1 and covering[0].worse, judged.changes
    for other in (c for c in judged.changes if c not in covering):
        point = entries[other.index].point
        assert not point.low <= 1 <= point.high, (judged.changes, point)
    assert judged.values[1] / judged.values[0] == pytest.approx(entries[1].point.value)  # the chain steps by the ratio
    assert cli.main(["--db", str(db), "check"]) == 1
