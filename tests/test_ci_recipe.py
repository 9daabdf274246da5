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

from helpers import BUSY_BENCH, BUSY_MODEL

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "docs" / "ci" / "pull-request.yml"

MODEL, BENCH = BUSY_MODEL, BUSY_BENCH



def _step(name: str) -> dict:
    workflow = yaml.safe_load(RECIPE.read_text())
    return next(s for s in workflow["jobs"]["ab"]["steps"] if s.get("name") == name)


def _git(repo: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)


@pytest.mark.serial  # a runtime verdict at +10 %: alone, not beside the suite's parallel part
@pytest.mark.parametrize("head_delay, slower", [(0.004, True), (0.0022, True), (0.002, False)], ids=["x2", "plus10", "aa"])
def test_the_ab_step_fails_a_slower_head_and_passes_the_same_code(tmp_path, head_delay, slower):
    """The step as the workflow file holds it, on a pull request whose model is x2, +10 % or A/A against its base:
    x2 and +10 % fail with `slower` on runtime alone (no instruction count), A/A passes; the junitxml and the
    markdown summary carry the verdict; the base's worktree is gone afterwards."""
    repo = tmp_path / "project"
    repo.mkdir()
    (repo / "benchmarks").mkdir()
    (repo / "benchmarks" / "test_bench.py").write_text(BENCH)
    (repo / "benchmarks" / "model.py").write_text(MODEL.format(delay=0.002))
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    _git(repo, "checkout", "-q", "-b", "pr")
    (repo / "benchmarks" / "model.py").write_text(MODEL.format(delay=head_delay))
    _git(repo, "commit", "-qam", "head", "--allow-empty")
    step = _step("A/B: base vs head")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHONPATH", "GITHUB_"))}
    env.update({k: str(v) for k, v in step["env"].items()})
    env.update(BASE_REF="main", COLUMNS="200", PATH=f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}")
    done = subprocess.run(["bash", "-c", step["run"]], cwd=repo, env=env, capture_output=True, text=True, timeout=600)
    out = done.stdout + done.stderr
    summary = (repo / ".s2st-ab" / "summary.md").read_text()
    junit = (repo / ".s2st-ab" / "junit.xml").read_text()
    assert "s2st: A/B of code versions (base main -> head)" in out, out[-4000:]
    if slower:
        assert done.returncode == 1, out[-4000:]
        assert re.search(r"FAILED benchmarks/test_bench.py::test_model - runtime_s x[\d.]+ \[[\d.]+, [\d.]+\] "
                         r"slower \(\d+ ABBA pairs\) against the base, limit runtime_s:5%", out), out[-4000:]
        assert "| slower | **FAIL** |" in summary and 'name="s2st_verdict" value="FAIL' in junit
        if head_delay == 0.004:  # decided at the first look: 1 worker pair x 10 rounds, not x 40 (ab/stopping.py)
            from pytest_s2st.ab.stopping import first_look
            from pytest_s2st.plugin_versions import version_rounds

            first = first_look(version_rounds(1, None), 1)
            assert first == 10 and f"slower ({first} ABBA pairs) against the base" in out, out[-4000:]
    else:
        assert done.returncode == 0 and "no significant change" in out, out[-4000:]
        assert "| no significant change |" in summary  # INCONCLUSIVE: a busy wait has no FLOPs for flops:1%
    assert "instructions" not in step["run"]  # runtime alone decides
    assert "s2st-ab-base" not in subprocess.run(["git", "worktree", "list"], cwd=repo, capture_output=True,
                                                 text=True).stdout


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
