"""Every line of the package is at most 120 characters; a longer one is named by file:line."""
from __future__ import annotations

from pathlib import Path

import pytest_s2st

ROOT = Path(pytest_s2st.__file__).parent
LIMIT = 120


def long_lines(root: Path, limit: int = LIMIT) -> list[str]:
    """'pytest_s2st/x.py:12 (131 characters)' for each line over ``limit`` (characters, not bytes)."""
    out = []
    for path in sorted(root.rglob("*.py")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if len(line) > limit:
                out.append(f"{path.relative_to(root.parent).as_posix()}:{number} ({len(line)} characters)")
    return out


def test_no_line_over_120_characters():
    offenders = long_lines(ROOT)
    assert not offenders, "lines over 120 characters:\n" + "\n".join(offenders)


def test_the_check_names_file_and_line(tmp_path):
    # the checker itself must be able to fail: a line of 121 characters (not bytes: "·" is two in UTF-8)
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "m.py").write_text("x = 1\n" + "#" * 121 + "\n" + "# " + "·" * 118 + "\n", encoding="utf-8")
    assert long_lines(package) == ["pkg/m.py:2 (121 characters)"]
