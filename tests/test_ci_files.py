"""The CI files are real: the workflow validates against GitHub's schema, .ci/run calls the README's command."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_workflow_validates_against_githubs_schema():
    exe = shutil.which("check-jsonschema") or str(Path(sys.executable).parent / "check-jsonschema")
    out = subprocess.run([exe, "--builtin-schema", "vendor.github-workflows", str(ROOT / ".github/workflows/ci.yml")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def _jobs() -> dict:
    return yaml.safe_load((ROOT / ".github/workflows/ci.yml").read_text())["jobs"]


def _runs(job: dict) -> str:
    return " ".join(s.get("run", "") for s in job["steps"])


def test_workflow_runs_tests_and_benchmarks_and_keeps_the_json():
    jobs = _jobs()
    assert "make test" in _runs(jobs["cpu"])
    bench = _runs(jobs["bench"])
    assert "make bench" in bench and "--benchmark-compare" in bench and "--s2st-compare-fail" in bench
    assert any(s.get("uses", "").startswith("actions/upload-artifact") for s in jobs["merge"]["steps"])


def test_benchmarks_run_in_two_shards_and_a_merge_job_compares_with_main():
    jobs = _jobs()
    bench, merge = jobs["bench"], jobs["merge"]
    assert bench["strategy"]["matrix"]["shard"] == [1, 2] and bench["strategy"]["fail-fast"] is False
    assert bench["env"]["SHARD"] == "${{ matrix.shard }}"
    assert "--s2st-shard=$SHARD/2" in _runs(bench) and "--benchmark-json=shard-$SHARD.json" in _runs(bench)
    uploads = [s for s in bench["steps"] if s.get("uses", "").startswith("actions/upload-artifact")]
    assert uploads and uploads[0]["with"]["path"] == "shard-${{ matrix.shard }}.json"
    assert merge["needs"] == "bench"
    download = next(s for s in merge["steps"] if s.get("uses", "").startswith("actions/download-artifact"))
    assert download["with"]["pattern"] == "bench-shard-*" and download["with"]["merge-multiple"] is True
    runs = _runs(merge)
    assert "s2st-merge shards/shard-1.json shards/shard-2.json -o" in runs and "pytest-benchmark compare" in runs
    # main's run is fetched by both: the shards judge their FLOPs against it, the merge job shows the comparison
    for job in (bench, merge):
        assert any(s.get("uses", "").startswith("dawidd6/action-download-artifact") for s in job["steps"])


def test_ci_run_is_executable_and_calls_the_readme_test_command():
    script = ROOT / ".ci/run"
    assert os.access(script, os.X_OK)
    assert "make test" in script.read_text()
    readme = (ROOT / "README.md").read_text()
    assert "make test" in readme and "make bench" in readme


def test_every_option_is_documented_in_the_readme():
    from pytest_s2st.settings import SETTINGS

    readme = (ROOT / "docs" / "options.md").read_text() + (ROOT / "docs" / "writing.md").read_text()
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
    jobs = _jobs()
    upload = next(s for s in jobs["merge"]["steps"] if s.get("uses", "").startswith("actions/upload-artifact"))
    # upload-artifact v4 leaves dot-folders out unless asked: .benchmarks would upload nothing
    assert upload["with"]["path"] == ".benchmarks" and upload["with"]["include-hidden-files"] is True
    assert upload["with"]["name"] == "benchmarks"  # what the next run's download-artifact asks for
    steps = [s for job in jobs.values() for s in job["steps"]]
    for step in steps:
        if "make test" in step.get("run", "") or "make bench" in step.get("run", ""):
            assert "TORCH_INDEX=https://download.pytorch.org/whl/cpu" in step["run"], step["run"]
    assert all("@" in s["uses"] and len(s["uses"].split("@")[1].split()[0]) == 40 for s in steps if "uses" in s)


def test_make_test_runs_parallel_then_the_serial_tests_alone():
    out = subprocess.run(["make", "-n", "test", "PYTEST_ARGS=-q"], capture_output=True, text=True, cwd=ROOT)
    lines = [line for line in out.stdout.splitlines() if "-m pytest tests" in line]
    assert out.returncode == 0 and len(lines) == 2, out.stdout + out.stderr
    assert "-n auto" in lines[0] and '-m "not serial"' in lines[0] and "-q" in lines[0]
    assert "-m serial" in lines[1] and "-n " not in lines[1] and "-q" in lines[1]


TIMED = '''
def test_ratio(timing_target):
    timing_target(1.7 <= 1.5, "pass 1.70x > 1.5x the timed pass")

def test_met(timing_target):
    timing_target(True, "never shown")
'''


@pytest.mark.parametrize("mode", ["enforce", "report", None])
def test_timing_targets_fail_on_a_quiet_machine_and_warn_on_the_ci_runner(pytester, monkeypatch, mode):
    """benchmarks/conftest.py in a real session: a missed wall-clock target fails by default and is a warning
    (the test passes) under S2ST_TIMING_TARGETS=report, which the bench job sets; the targets it gates on stay."""
    pytester.makeconftest((ROOT / "benchmarks" / "conftest.py").read_text())
    pytester.makepyfile(test_timed=TIMED)
    if mode is None:
        monkeypatch.delenv("S2ST_TIMING_TARGETS", raising=False)
    else:
        monkeypatch.setenv("S2ST_TIMING_TARGETS", mode)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rA")
    out = result.stdout.str()
    if mode == "report":
        assert result.parseoutcomes() == {"passed": 2, "warnings": 1}, out
        assert "TimingTargetMissed: test_timed.py::test_ratio: timing target missed (reported only" in out, out
    else:
        assert result.parseoutcomes() == {"passed": 1, "failed": 1}, out
        assert "timing target missed: pass 1.70x > 1.5x the timed pass" in out and "Traceback" not in out, out
    assert "never shown" not in out
    assert _jobs()["bench"]["env"]["S2ST_TIMING_TARGETS"] == "report"
    assert "S2ST_TIMING_TARGETS" not in _jobs()["cpu"].get("env", {})


def test_a_bad_timing_target_mode_is_one_line(pytester, monkeypatch):
    pytester.makeconftest((ROOT / "benchmarks" / "conftest.py").read_text())
    pytester.makepyfile(test_timed=TIMED)
    monkeypatch.setenv("S2ST_TIMING_TARGETS", "off")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    out = result.stdout.str()
    assert "S2ST_TIMING_TARGETS='off' (environment): expected one of enforce, report" in out and "Traceback" not in out


def test_ci_tests_the_oldest_and_the_newest_python_requires_python_admits():
    from packaging.specifiers import SpecifierSet

    try:
        import tomllib
    except ImportError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    spec = SpecifierSet(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"])
    admitted = [f"3.{minor}" for minor in range(6, 30) if f"3.{minor}" in spec]
    assert admitted and admitted[-1] != "3.29", f"requires-python {spec} has no upper bound CI could test"
    assert _jobs()["cpu"]["strategy"]["matrix"]["python"] == [admitted[0], admitted[-1]]


def test_make_bench_runs_the_models_and_selfbench_the_rest(pytester):
    """benchmarks/conftest.py in a real session: the self-benchmark modules are marked selfbench and deselected
    unless -m selects; `make bench` runs the default selection, `make selfbench` -m selfbench, and CI runs both."""
    pytester.makeconftest((ROOT / "benchmarks" / "conftest.py").read_text())
    for name in ("test_inference", "test_service", "test_compare_power", "test_loadgen_overhead", "test_full_size",
                 "test_measurement_cost", "test_plugin_import", "test_vs_upstream", "test_client_memory", "test_transport"):
        pytester.makepyfile(**{name: "def test_it():\n    pass\n"})
    plain = pytester.runpytest("-p", "no:s2st", "-p", "no:s2st_service", "--collect-only", "-q")
    assert sorted(plain.stdout.str().split("\n")[:2]) == ["test_inference.py::test_it", "test_service.py::test_it"]
    plain.stdout.fnmatch_lines(["2/10 tests collected (8 deselected)*"])
    selfbench = pytester.runpytest("-p", "no:s2st", "-p", "no:s2st_service", "--collect-only", "-q", "-m", "selfbench")
    selfbench.stdout.fnmatch_lines(["6/10 tests collected (4 deselected)*"])
    assert "test_inference.py" not in selfbench.stdout.str() and "test_compare_power" not in selfbench.stdout.str()
    for marker, module in (("power", "test_compare_power"), ("fullsize", "test_full_size")):  # opt-in, never skipped
        only = pytester.runpytest("-p", "no:s2st", "-p", "no:s2st_service", "--collect-only", "-q", "-m", marker)
        only.stdout.fnmatch_lines([f"{module}.py::test_it", "1/10 tests collected (9 deselected)*"])
    make = {t: subprocess.run(["make", "-n", t], capture_output=True, text=True, cwd=ROOT).stdout for t in ("bench", "selfbench")}
    assert "-m pytest benchmarks -v" in make["bench"] and "-m selfbench" not in make["bench"]
    assert "-m pytest benchmarks -v -m selfbench" in make["selfbench"]
    assert "make selfbench" in _runs(_jobs()["selfbench"]) and "make bench" in _runs(_jobs()["bench"])
