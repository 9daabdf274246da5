"""The pull-request recipe users copy (docs/ci/pull-request.yml) runs as written: its A/B step, taken from the
workflow file itself, on a repository whose head is slower than its base, fails; the steps' pinned actions are
the ones the project's own ci.yml uses."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "docs" / "ci" / "pull-request.yml"

MODEL = '''
import time

DELAY = {delay}

def model(x):
    if DELAY:
        time.sleep(DELAY)
    return sum(range(2000))
'''
BENCH = '''
from model import model

def test_model(s2st_benchmark):
    s2st_benchmark(model, list(range(4)))
'''


def _step(name: str) -> dict:
    workflow = yaml.safe_load(RECIPE.read_text())
    return next(s for s in workflow["jobs"]["ab"]["steps"] if s.get("name") == name)


def _git(repo: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)


@pytest.mark.serial  # a Welch verdict over 3 fresh processes a side of ~40 us rounds: at load 8 one preempted round
# read a base run's mean x20 (843 us) and the interval [0.091, 21185]; `make test` runs it alone
def test_the_ab_step_fails_a_slower_head_against_its_base(tmp_path):
    repo = tmp_path / "project"
    repo.mkdir()
    (repo / "benchmarks").mkdir()
    (repo / "benchmarks" / "test_bench.py").write_text(BENCH)
    (repo / "benchmarks" / "model.py").write_text(MODEL.format(delay=0))
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    _git(repo, "branch", "base")
    (repo / "benchmarks" / "model.py").write_text(MODEL.format(delay=0.005))  # the pull request: 5 ms a call
    _git(repo, "commit", "-qam", "head")
    step = _step("A/B: base vs head")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHONPATH"))}
    env.update({k: str(v) for k, v in step["env"].items()})
    env.update(BASE_REF="base", ROUNDS="3", LIMITS="runtime_s:5%,flops:1%", BENCH_ARGS="",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}")
    done = subprocess.run(["bash", "-c", step["run"]], cwd=repo, env=env, capture_output=True, text=True, timeout=600)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out[-4000:]
    assert re.search(r"x\d+\.\d+ \[[\d.]+, [\d.]+\] slower \(3/3 runs\)", out), out[-4000:]
    assert "regressed: " in out and "runtime_s regressed" in out
    assert not (tmp_path / "s2st-base").exists()  # the worktree is removed before the verdict
    runs = sorted(p.name for p in (repo / ".s2st-ab").iterdir())
    assert runs == ["base-1.json", "base-2.json", "base-3.json", "base.json",
                    "head-1.json", "head-2.json", "head-3.json", "head.json"]


def test_the_recipe_pins_the_actions_the_project_uses():
    pinned = lambda text: set(re.findall(r"uses: ([\w./-]+@[0-9a-f]{40})", text))  # noqa: E731
    ours = pinned((ROOT / ".github" / "workflows" / "ci.yml").read_text())
    recipe = pinned(RECIPE.read_text())
    assert recipe and recipe <= ours  # every action pinned to a commit, the same commits as our own CI
    assert "persist-credentials: false" in RECIPE.read_text()


def test_the_project_runs_the_same_ab_step_in_its_own_ci():
    ours = yaml.safe_load((ROOT / ".github" / "workflows" / "ci.yml").read_text())["jobs"]["ab"]
    step = next(s for s in ours["steps"] if s.get("name") == "A/B: base vs head")
    assert step["run"] == _step("A/B: base vs head")["run"]
    assert ours["if"] == "github.event_name == 'pull_request'"


def test_the_recipe_validates_and_passes_the_security_linter():
    """GitHub's workflow schema (check-jsonschema) and zizmor (offline), as tests/test_ci_files.py checks ci.yml."""
    bin_dir = Path(sys.executable).parent
    checks = ([shutil.which("check-jsonschema") or str(bin_dir / "check-jsonschema"), "--builtin-schema",
               "vendor.github-workflows", str(RECIPE)],
              [shutil.which("zizmor") or str(bin_dir / "zizmor"), "--offline", "--min-severity", "medium", str(RECIPE)])
    for command in checks:
        out = subprocess.run(command, capture_output=True, text=True)
        assert out.returncode == 0, out.stdout + out.stderr
