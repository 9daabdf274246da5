"""The package's import graph has no cycle, and the plugin layer sits on top of the core.

Read from the source with ``ast`` (nothing is imported): every import counts, at module level or
inside a function, since a lazy import that closes a circle is still a circle.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest_s2st

ROOT = Path(pytest_s2st.__file__).parent
PACKAGE = "pytest_s2st"
PLUGIN_LAYER = {"pytest_s2st.plugin", "pytest_s2st.plugin_service", "pytest_s2st.session",
                "pytest_s2st.benchmark_compat", "pytest_s2st.plugin_xdist", "pytest_s2st.plugin_versions",
                "pytest_s2st.plugin_history", "pytest_s2st.plugin_benchmark", "pytest_s2st.hookspec",
                "pytest_s2st.terminal"} | {m for m in (
    ".".join(p.relative_to(ROOT.parent).with_suffix("").parts) for p in ROOT.glob("plugin_*.py"))}


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _resolve(module: str, is_package: bool, level: int, name: str | None) -> str:
    base = module.split(".") if is_package else module.split(".")[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(module, is_package, node.level, node.module) if node.level else node.module or ""
                # `from pkg import sub` imports the submodule; `from pkg import name` the package
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for target in targets:
                if target in modules and target != module:
                    graph[module].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle():
    assert cycles(import_graph()) == []


def folder_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The module graph folded to rooms: a subpackage (``pytest_s2st.service``, everything under it) or a top-level
    module; an arrow where any module of one imports any module of the other."""
    def room(module: str) -> str:
        return ".".join(module.split(".")[:2])

    rooms: dict[str, set[str]] = {room(m): set() for m in graph}
    for module, targets in graph.items():
        rooms[room(module)] |= {room(t) for t in targets if room(t) != room(module)}
    return rooms


def test_no_folder_imports_a_folder_that_imports_it():
    """Folders are layers: the graph of rooms has no circle, so every folder sits above the folders it imports and
    below those importing it (a topological order exists). Ten rooms once formed one knot here (cases, config,
    settings, distribute, datasets, gate, measure/, pipelines/, quality/, service/): ``measure/isolated.py`` ran whole
    cases, ``quality/row_scores.py`` imported the gate that imports quality/, and datasets and pipelines read the
    workload format from ``service/``; those three modules now sit at the top level, where their arrows point down."""
    assert cycles(folder_graph(import_graph())) == []


def test_the_folder_graph_sees_a_circle_through_any_module_of_a_folder():
    graph = {"pytest_s2st.a.x": {"pytest_s2st.b"}, "pytest_s2st.a.y": set(), "pytest_s2st.b": {"pytest_s2st.a.y"}}
    assert cycles(graph) == [] and cycles(folder_graph(graph)) == [["pytest_s2st.a", "pytest_s2st.b"]]


def test_cycle_finder_finds_a_circle():
    # the checker itself must be able to fail
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_core_never_imports_the_plugin_layer():
    graph = import_graph()
    offenders = {m: sorted(graph[m] & PLUGIN_LAYER) for m in graph
                 if m not in PLUGIN_LAYER and graph[m] & PLUGIN_LAYER}
    assert offenders == {}


def test_plugin_modules_do_not_import_each_other():
    graph = import_graph()
    assert "pytest_s2st.plugin_service" not in graph["pytest_s2st.plugin"]
    assert "pytest_s2st.plugin" not in graph["pytest_s2st.plugin_service"]


def test_no_test_module_imports_another():
    """Shared test helpers live in helper modules (tests/helpers.py, loopback.py, espeak_runs.py, hostile.py),
    never in a test module: importing one would collect (and run) its tests' module-level code twice."""
    tests = Path(__file__).parent
    offenders = []
    for path in sorted(tests.glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{path.name}:{node.lineno} imports {n}" for n in names if n.split(".")[0].startswith("test_")]
    assert not offenders, offenders


def test_a_module_that_imports_pytest_is_pytest_glue():
    """The core is pytest-free: a module importing pytest (at any depth, lazily too) is in PLUGIN_LAYER, or named
    plugin_* (a new glue module is then judged as glue without editing this file)."""
    glue = set()
    for module, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            if any(n == "pytest" or n.startswith("pytest.") or n.startswith("_pytest") for n in names):
                glue.add(module)
    assert glue - PLUGIN_LAYER == set(), sorted(glue - PLUGIN_LAYER)
