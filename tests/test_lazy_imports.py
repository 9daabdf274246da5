"""Every function-local import in the package says why it is not at the top of its module.

Read from the source with ``ast`` (nothing is imported). The reason is a trailing comment on the import's first
line, or a comment line right above it: ``# lazy: heavy`` (torch, numpy, aiohttp, ... or a module importing them),
``# lazy: plugin load`` (a light module kept off ``import pytest_s2st.plugin``), ``# lazy: cycle`` (a top-level
import would close a circle) or ``# lazy: optional`` (an optional dependency that may be missing). A light import
with none of these reasons belongs at the top of its module.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest_s2st

ROOT = Path(pytest_s2st.__file__).parent
REASON = re.compile(r"#\s*lazy:\s*(heavy|plugin load|cycle|optional)\b")
# tiny/ builds test models and is left as it is
SKIPPED_FOLDERS = {"tiny"}
# files not reached yet (package-relative paths); none left: a module added here says what remains
EXEMPT: set[str] = set()


def local_imports(source: str) -> list[int]:
    """Line numbers of the imports inside a function (at any depth: methods, nested blocks, inner functions)."""
    found: list[int] = []

    def walk(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if in_function and isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append(child.lineno)
            walk(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    walk(ast.parse(source), False)
    return found


def unexplained(root: Path, exempt: set[str] = frozenset()) -> list[str]:
    """'pytest_s2st/x.py:12' for each function-local import under ``root`` without a reason."""
    out = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if relative.parts[0] in SKIPPED_FOLDERS or relative.as_posix() in exempt:
            continue
        source = path.read_text(encoding="utf-8")
        lines = source.splitlines()
        for number in local_imports(source):
            above = lines[number - 2].strip() if number > 1 else ""
            if not REASON.search(lines[number - 1]) and not (above.startswith("#") and REASON.search(above)):
                out.append(f"{path.relative_to(root.parent).as_posix()}:{number}")
    return out


def test_every_function_local_import_says_why():
    offenders = unexplained(ROOT, EXEMPT)
    assert not offenders, ("function-local imports without '# lazy: heavy|plugin load|cycle|optional' (hoist a light "
                           "one to the top of its module):\n" + "\n".join(offenders))


def test_the_exemptions_name_files_that_exist():
    # a renamed or finished module leaves the list
    assert {name for name in EXEMPT if not (ROOT / name).is_file()} == set()


def test_the_check_names_file_and_line(tmp_path):
    # the checker itself must be able to fail: a bare local import, and the accepted forms around it
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "m.py").write_text(
        "import os\n"
        "def f():\n"
        "    import json\n"  # line 3: no reason
        "    import numpy  # lazy: heavy\n"
        "    # lazy: optional\n"
        "    from torch import nn\n"
        "    import re  # lazy: habit\n"  # line 7: not one of the reasons
        "    class C:\n"
        "        def g(self):\n"
        "            import sys\n",  # line 10: a method's import counts too
        encoding="utf-8")
    assert unexplained(package) == ["pkg/m.py:3", "pkg/m.py:7", "pkg/m.py:10"]
    assert unexplained(package, {"m.py"}) == []
