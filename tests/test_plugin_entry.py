"""One plugin: pytest_s2st.plugin brings the service fixtures along, so `-p no:s2st` disables all of pytest-s2st."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ("s2st_benchmark", "s2st_case", "s2st_service", "s2st_workload", "s2st_load")


def _fixtures(tmp_path: Path, *args: str, autoload: bool = True) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    if not autoload:
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    out = subprocess.run([sys.executable, "-m", "pytest", "--fixtures", "-p", "no:cacheprovider", *args],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode in (0, 5), out.stdout + out.stderr
    return out.stdout


def _declared_entry_points() -> list[str]:
    text = (ROOT / "pyproject.toml").read_text()
    section = text.split("[project.entry-points.pytest11]", 1)[1].split("\n[", 1)[0]
    return re.findall(r"^(\w+)\s*=", section, re.M)


def test_the_one_entry_point_brings_the_service_fixtures(tmp_path):
    assert _declared_entry_points() == ["s2st"]
    # what the entry point loads, loaded alone (no other plugin autoloaded): every fixture of both modules
    shown = _fixtures(tmp_path, "-p", "pytest_benchmark.plugin", "-p", "pytest_s2st.plugin", autoload=False)
    for name in FIXTURES:
        assert re.search(rf"^{name}\b", shown, re.M), name
    # -p no:s2st_service still drops only the service part
    shown = _fixtures(tmp_path, "-p", "pytest_benchmark.plugin", "-p", "pytest_s2st.plugin", "-p", "no:s2st_service",
                      autoload=False)
    assert re.search(r"^s2st_benchmark\b", shown, re.M) and not re.search(r"^s2st_service\b", shown, re.M)


def test_p_no_s2st_disables_the_whole_plugin(tmp_path):
    installed = {ep.name for ep in metadata.entry_points(group="pytest11") if ep.value.startswith("pytest_s2st.")}
    if installed != {"s2st"}:
        pytest.skip(f"the installed metadata declares {sorted(installed)}: reinstall (make install) to test the "
                    "one entry point pyproject.toml now declares")
    shown = _fixtures(tmp_path, "-p", "no:s2st")
    assert not [name for name in FIXTURES if re.search(rf"^{name}\b", shown, re.M)]
    assert all(re.search(rf"^{name}\b", _fixtures(tmp_path), re.M) for name in FIXTURES)
