"""The CI files are real: the workflow validates against GitHub's schema, .ci/run calls the README's command."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_workflow_validates_against_githubs_schema():
    exe = shutil.which("check-jsonschema") or str(Path(sys.executable).parent / "check-jsonschema")
    out = subprocess.run([exe, "--builtin-schema", "vendor.github-workflows", str(ROOT / ".github/workflows/ci.yml")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_workflow_runs_tests_and_benchmarks_and_keeps_the_json():
    steps = yaml.safe_load((ROOT / ".github/workflows/ci.yml").read_text())["jobs"]["cpu"]["steps"]
    runs = " ".join(s.get("run", "") for s in steps)
    assert "make test" in runs and "make bench" in runs and "--benchmark-autosave" in runs and "--benchmark-compare" in runs
    assert any(s.get("uses", "").startswith("actions/upload-artifact") for s in steps)


def test_ci_run_is_executable_and_calls_the_readme_test_command():
    script = ROOT / ".ci/run"
    assert os.access(script, os.X_OK)
    assert "make test" in script.read_text()
    readme = (ROOT / "README.md").read_text()
    assert "make test" in readme and "make bench" in readme


def test_every_option_is_documented_in_the_readme():
    from pytest_s2st.settings import SETTINGS

    readme = (ROOT / "README.md").read_text()
    for setting in SETTINGS:
        assert setting.flag in readme, setting.flag
        assert setting.ini in readme, setting.ini
    for marker in ("s2st_budget", "s2st_models", "s2st_gate"):
        assert marker in readme


def test_workflow_passes_the_security_linter():
    """zizmor (offline): every action pinned to a commit, no persisted checkout credentials."""
    exe = shutil.which("zizmor") or str(Path(sys.executable).parent / "zizmor")
    out = subprocess.run([exe, "--offline", "--min-severity", "medium", str(ROOT / ".github/workflows/ci.yml")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_workflow_uploads_the_hidden_benchmark_folder_and_installs_cpu_torch():
    steps = yaml.safe_load((ROOT / ".github/workflows/ci.yml").read_text())["jobs"]["cpu"]["steps"]
    upload = next(s for s in steps if s.get("uses", "").startswith("actions/upload-artifact"))
    # upload-artifact v4 leaves dot-folders out unless asked: .benchmarks would upload nothing
    assert upload["with"]["path"] == ".benchmarks" and upload["with"]["include-hidden-files"] is True
    for step in steps:
        if "make test" in step.get("run", "") or "make bench" in step.get("run", ""):
            assert "TORCH_INDEX=https://download.pytorch.org/whl/cpu" in step["run"], step["run"]
    assert all("@" in s["uses"] and len(s["uses"].split("@")[1].split()[0]) == 40 for s in steps if "uses" in s)
