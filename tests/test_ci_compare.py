"""Two CI runs from two clones, as the workflow does them: the first saves its benchmark JSON, the JSON is
carried over as the artifact would be (``.benchmarks`` uploaded with hidden files, downloaded into the
second checkout's ``.benchmarks``), and the second compares with ``--s2st-compare-fail``.

Every run is a separate ``python -m pytest benchmarks`` process in its own clone folder (different
rootdirs, configs at different absolute paths, one spelled with a space and one with ``=``). A change
that doubles the model's work must fail the second run on FLOPs and on the instruction count; the
same code twice must pass.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import BENCH_TEST, make_dataset

MODELS_PY = '''
def build(layers=1):
    """A tiny torch model whose work grows with `layers` (each one 16 80x80 matmuls: enough instructions,
    ~1.5 M, that the few hundred the allocator's state moves between clones stay far below 1 %)."""
    import torch
    torch.manual_seed(0)
    weight = torch.randn(80, 80) / 80
    def forward(sample):
        x = torch.as_tensor(sample["net_input"]["src_tokens"], dtype=torch.float32)
        with torch.inference_mode():
            for _ in range(16 * layers):
                x = torch.tanh(x @ weight)
        return float(x.sum())
    return forward
'''
CONFIG = "general:\n  name: tiny\n  model_type: callable\n  dataset_path: data.npy\nstage1:\n  entry: models.py:build\n  layers: {layers}\n"
RUN_TIMEOUT_S = 900


def git(cwd: Path, *args: str) -> str:
    cmd = ["git", "-c", "user.name=ci", "-c", "user.email=ci@example.invalid", "-c", "init.defaultBranch=main",
           "-c", "commit.gpgsign=false", *args]
    return subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, text=True, timeout=60).stdout


def commit_layers(origin: Path, layers: int) -> None:
    (origin / "benchmarks" / "ci.yaml").write_text(CONFIG.format(layers=layers))
    git(origin, "add", "-A")
    git(origin, "commit", "-q", "-m", f"model with {layers} layer(s)")


def clone(origin: Path, dest: Path) -> Path:
    git(origin.parent, "clone", "-q", str(origin), str(dest))
    return dest


def carry_artifact(src: Path, dest: Path) -> None:
    """upload-artifact (path: .benchmarks, include-hidden-files) then download-artifact (path: .benchmarks)."""
    saved = sorted((src / ".benchmarks").glob("*/*.json"))
    assert saved, f"the first run saved no benchmark JSON under {src / '.benchmarks'}"
    shutil.copytree(src / ".benchmarks", dest / ".benchmarks")


def ci_run(checkout: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "benchmarks", "--s2st-warmup=1",
           "--s2st-instructions=callgrind", "--benchmark-autosave", *args]
    return subprocess.run(cmd, cwd=checkout, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)


@pytest.fixture(scope="module")
def origin(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("origin") / "repo"
    (repo / "benchmarks").mkdir(parents=True)
    (repo / "benchmarks" / "test_inference.py").write_text(BENCH_TEST)
    (repo / "benchmarks" / "models.py").write_text(MODELS_PY)
    make_dataset(repo / "benchmarks" / "data.npy", n=2, frames=8)
    (repo / ".gitignore").write_text(".benchmarks/\n")
    git(repo, "init", "-q")
    commit_layers(repo, 1)
    return repo


def test_second_ci_run_fails_on_doubled_work_and_passes_on_the_same_code(origin, tmp_path):
    first = clone(origin, tmp_path / "run1" / "checkout")
    same = clone(origin, tmp_path / "run2-same" / "work" / "checkout")  # the same commit, another folder
    commit_layers(origin, 2)
    doubled = clone(origin, tmp_path / "run2-doubled" / "checkout")
    assert "layers: 2" in (doubled / "benchmarks" / "ci.yaml").read_text()

    # run 1 spells the config with a space (pytest then counts it as a test path when picking the rootdir)
    run1 = ci_run(first, "--s2st-config", str(first / "benchmarks" / "ci.yaml"))
    assert run1.returncode == 0, run1.stdout[-3000:] + run1.stderr[-2000:]
    assert "instructions n/a" not in run1.stdout, run1.stdout[-3000:]
    limits = "--s2st-compare-fail=flops:1%,instructions:1%"

    carry_artifact(first, doubled)
    run2 = ci_run(doubled, "--s2st-config=benchmarks/ci.yaml", "--benchmark-compare", limits)
    out = run2.stdout
    assert run2.returncode == 1, out[-4000:] + run2.stderr[-2000:]
    assert "no counterpart" not in out, out[-4000:]
    flops = [line for line in out.splitlines() if "flops regressed +100.00%" in line]
    instructions = [line for line in out.splitlines() if "instructions regressed" in line]
    assert flops and instructions, out[-4000:]
    change = float(instructions[0].split("regressed ")[1].split("%")[0])
    assert 30 < change < 110, instructions[0]  # more work in the matmuls, the Python around them fixed

    carry_artifact(first, same)
    run3 = ci_run(same, "--s2st-config=benchmarks/ci.yaml", "--benchmark-compare", limits)
    assert run3.returncode == 0, run3.stdout[-4000:] + run3.stderr[-2000:]
    assert "regressed" not in run3.stdout and "no counterpart" not in run3.stdout, run3.stdout[-4000:]
    # the compare table was printed: the saved run was found and matched
    assert any("FLOPs" in line for line in run3.stdout.splitlines()), run3.stdout[-4000:]
    assert any(line.split()[:1] == ["change"] and "+0.0%" in line for line in run3.stdout.splitlines()), run3.stdout[-4000:]
