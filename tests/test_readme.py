"""The README is tested: its runnable shell blocks run, in order, in one shell, on a fresh copy of the checkout,
and every output example under them matches what that run printed (numbers and units masked), so drift fails.

Markers, an HTML comment on the line before a fenced block:
  <!-- run -->          a bash block a newcomer types: executed
  <!-- run: install --> the install block (`make install`, then activating the venv): executed whole only with
                        S2ST_README_INSTALL=1 (it downloads torch and the extras: the CI readme job); otherwise its
                        `make install` lines are left out and the copy gets a .venv whose activate script puts this
                        interpreter's environment (and the copy's own code) first on the PATH
  <!-- output -->       an output example of the run block above it: every one of its lines must appear in that
                        block's output, compared with numbers, units and runs of spaces/dashes masked
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"^<!-- (run|run: install|output) -->\n```[a-z]*\n(.*?)^```$", re.S | re.M)
from helpers import NUMBER, masked  # noqa: E402,F401  (docs/quality.md's example is matched the same way)


def blocks(text: str) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer(text)]


def test_marked_blocks_are_found_and_the_masking_keeps_words():
    found = blocks((ROOT / "README.md").read_text())
    kinds = [k for k, _ in found]
    assert kinds.count("run: install") == 1 and kinds.count("run") >= 3 and "output" in kinds
    assert kinds.index("run: install") == 0  # the quick start runs in what the install made
    assert masked("test_x    156.347 us  257.0 MiB  1.712 M  ±42.2% (8 rounds)") == "test_x # # # ±# (# rounds)"
    assert masked("x1.482 [1.401, 1.566] slower") == "# [#, #] slower"
    assert masked("-------  ---") == "--- ---" and masked("c4 S2UT-tiny") == "c4 S2UT-tiny"
    assert masked("0.4 MiB -> 0.0 MiB (<1 MiB: noise)") == masked("1 MiB -> 2 MiB (+100.0%)")
    assert masked("0.0 MiB (<1 MiB: noise)") == masked("0.0 MiB (+0.0%)") != masked("3.2 M (from 0)")


def test_page_one_is_short_and_task_oriented():
    """Page one (issue 32): at most 120 lines; install, the two commands and a first result come first, before any
    link away; the first result is one command after the install block."""
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 120
    heads = re.findall(r"^## (.+)$", text, re.M)
    assert heads[:3] == ["Install", "The two commands", "A first result: benchmark your own model"], heads
    found = blocks(text)
    assert found[0][0] == "run: install" and "make install" in found[0][1]  # what make test / make bench stamp
    first_run = next(body for kind, body in found if kind == "run")
    commands = [line for line in first_run.splitlines() if line.startswith(("pytest", "make", "python"))]
    assert commands == ["pytest test_my_model.py"]


def _fake_venv(repo: Path) -> None:
    """What the install block makes, from this interpreter: python, pytest and the console scripts on the PATH,
    importing the copy's own pytest_s2st first."""
    bin_dir = repo / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    env = f'export PYTHONPATH="{repo}${{PYTHONPATH:+:$PYTHONPATH}}"\n'
    scripts = {"python": "", "python3": "", "pytest": "-m pytest", "pytest-benchmark": "-m pytest_benchmark.cli"}
    # every console script pyproject declares, as pip would install it (no tomllib: CI runs Python 3.10 too)
    section = (repo / "pyproject.toml").read_text().split("[project.scripts]", 1)[1].split("\n[", 1)[0]
    declared = re.findall(r'^([\w-]+) = "([\w.]+):\w+"', section, re.M)
    assert declared, "pyproject.toml declares no console script"
    scripts.update({name: f"-m {module}" for name, module in declared})
    for name, module in scripts.items():
        path = bin_dir / name
        path.write_text(f'#!/bin/sh\n{env}exec "{sys.executable}" {module} "$@"\n')
        path.chmod(0o755)
    (bin_dir / "activate").write_text(f'export PATH="{bin_dir}:$PATH"\n')


def _fresh_copy(dest: Path) -> Path:
    """The checkout as a clone would have it: tracked and not-ignored files of the working tree."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    repo = dest / "pytest-s2st"
    for rel in filter(None, listed):
        src = ROOT / rel
        if src.is_file():
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            (repo / rel).write_bytes(src.read_bytes())
            (repo / rel).chmod(src.stat().st_mode)
    return repo


def test_readme_runs_as_written_and_its_outputs_are_real(tmp_path):
    install = os.environ.get("S2ST_README_INSTALL") == "1"
    repo = _fresh_copy(tmp_path)
    if not install:
        _fake_venv(repo)
    found = blocks((repo / "README.md").read_text())
    script = ["set -euo pipefail", f'cd "{repo}"']
    runs = []  # index of each executed block
    for i, (kind, body) in enumerate(found):
        if kind == "output":
            continue
        if kind == "run: install" and not install:  # the venv is faked; the block's other lines run
            body = "\n".join(line for line in body.splitlines() if not line.lstrip().startswith("make install"))
        script += [f"echo '@@block {i}@@'", body]
        runs.append(i)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHONPATH", "VIRTUAL_ENV", "S2ST_"))}
    env["COLUMNS"] = "200"  # pytest's table widths do not depend on the terminal of whoever runs the suite
    done = subprocess.run(["bash", "-c", "\n".join(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=1800)
    out = done.stdout
    assert done.returncode == 0, f"a README command failed (exit {done.returncode}):\n{out[-6000:]}\n{done.stderr[-4000:]}"
    printed = {int(m.group(1)): part for m, part in zip(re.finditer(r"^@@block (\d+)@@$", out, re.M),
                                                         re.split(r"^@@block \d+@@$", out, flags=re.M)[1:])}
    assert sorted(printed) == runs
    for i, (kind, body) in enumerate(found):
        if kind != "output":
            continue
        source = max(r for r in runs if r < i)  # the run block above it
        real = {masked(line) for line in printed[source].splitlines()}
        missing = [line for line in body.splitlines() if line.strip() and masked(line) not in real]
        assert not missing, (f"README output example {i} drifted from a real run: these lines were not printed:\n"
                             + "\n".join(missing) + f"\n--- the run printed:\n{printed[source][-5000:]}")
    assert "DEBUG:" not in out + done.stderr and "INFO:fairseq" not in out + done.stderr


def test_no_machine_specific_paths_in_what_ships():
    listed = subprocess.run(["git", "ls-files", "README.md", "docs", "configs", "pytest_s2st", "benchmarks"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split()
    found = [f"{rel}: {m.group(0)}" for rel in listed if (ROOT / rel).suffix in (".md", ".py", ".yaml", ".jsonl")
             for m in re.finditer(r"(?<![\w.])/(work|home|root|Users)/[\w./-]+", (ROOT / rel).read_text())]
    assert found == []
