"""The tree keeps its design: no import circles, the engine free of UI and torch, the dashboard
on the engine's public API, and rooms of a readable size.

Imports are read with ``ast`` from the source (function-level imports included), so a circle
hidden inside a function counts. ``from pkg import name`` points at ``pkg.name`` when that is a
module of the tree, else at ``pkg`` itself.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("taps_core", "dashboard", "app_pages", "benchmarks", "validation")
ENGINE_FORBIDDEN = ("streamlit", "plotly", "torch", "kaleido")
MAX_TOP_MODULES = 8  # modules directly under taps_core/
MAX_FILE_LINES = 800
MAX_FUNCTION_LINES = 120
# functions over the bound: none left (issue 19); a new one fails the test
KNOWN_LONG_FUNCTIONS: set[str] = set()


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _sources(root: Path = ROOT) -> dict[str, Path]:
    files = [root / "app.py"]
    for top in PRODUCT:
        files += sorted((root / top).rglob("*.py"))
    return {_module_name(f, root): f for f in files}


def _imported(node: ast.AST, module: str, is_package: bool) -> list[str]:
    """Dotted names one import statement brings in (relative imports resolved)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:
        anchor = module.split(".")
        anchor = anchor if is_package else anchor[:-1]
        anchor = anchor[: len(anchor) - (node.level - 1)]
        base = ".".join([*anchor, base] if base else anchor)
    return [base, *(f"{base}.{a.name}" for a in node.names)]


def import_graph(root: Path = ROOT) -> nx.DiGraph:
    """Module -> module it imports, over the product's own modules under ``root``."""
    sources = _sources(root)
    g = nx.DiGraph()
    g.add_nodes_from(sources)
    for module, path in sources.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            names = _imported(node, module, path.name == "__init__.py")
            if isinstance(node, ast.ImportFrom):
                base, members = names[0], names[1:]
                targets = [m for m in members if m in sources] or [base]
                if len(targets) < len(members):  # names defined in base, besides submodules
                    targets.append(base)
            else:
                targets = names
            for t in targets:
                g.add_edge(module, t)
    return g


@pytest.fixture(scope="module")
def graph() -> nx.DiGraph:
    return import_graph()


def test_no_import_circle_anywhere(graph):
    own = graph.subgraph(_sources())
    circles = [sorted(c) for c in nx.strongly_connected_components(own) if len(c) > 1]
    loops = [m for m in own if own.has_edge(m, m)]
    assert not circles and not loops, f"import circles: {circles} {loops}"


def _folder(module: str) -> str:
    """The engine folder (``taps_core.search``) or top-level module a module lives in."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "taps_core" else parts[0]


def test_no_circle_between_the_engines_folders(graph):
    """Floors, not only modules: ``plan/`` may not import ``search/`` while ``search/``
    imports ``plan/``, even through different files."""
    folders = nx.DiGraph()
    for a, b in graph.edges:
        if a.startswith("taps_core") and b.startswith("taps_core") and _folder(a) != _folder(b):
            folders.add_edge(_folder(a), _folder(b))
    circles = [sorted(c) for c in nx.strongly_connected_components(folders) if len(c) > 1]
    assert not circles, f"folders importing each other: {circles}"


def test_the_engine_imports_no_ui_and_no_torch(graph):
    bad = [
        (m, t)
        for m, t in graph.edges
        if m.startswith("taps_core") and t.split(".")[0] in ENGINE_FORBIDDEN
    ]
    assert not bad, f"engine imports UI/torch: {bad}"


def test_the_dashboard_uses_the_engines_api_not_its_solver(graph):
    bad = [
        (m, t)
        for m, t in graph.edges
        if m.split(".")[0] in ("dashboard", "app_pages", "app")
        and t.startswith("taps_core.solver")
    ]
    assert not bad, f"the dashboard reaches into the solver: {bad}"


def test_the_engines_top_floor_is_small():
    top = sorted(p.name for p in (ROOT / "taps_core").glob("*.py"))
    assert len(top) <= MAX_TOP_MODULES, f"{len(top)} modules directly under taps_core/: {top}"


def test_no_file_and_no_function_is_too_long():
    long_files, long_functions = [], []
    for path in _sources().values():
        text = path.read_text()
        rel = path.relative_to(ROOT)
        if text.count("\n") > MAX_FILE_LINES:
            long_files.append(f"{rel}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES and f"{rel}:{node.name}" not in KNOWN_LONG_FUNCTIONS:
                    long_functions.append(f"{rel}:{node.lineno} {node.name}: {n} lines")
    assert not long_files, f"files over {MAX_FILE_LINES} lines: {long_files}"
    assert not long_functions, f"functions over {MAX_FUNCTION_LINES} lines: {long_functions}"


def test_the_graph_sees_function_level_imports_and_circles(tmp_path):
    """The check itself: a circle closed by an import inside a function is found."""
    pkg = tmp_path / "taps_core"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from taps_core.b import f\n")
    (pkg / "b.py").write_text("def f():\n    from taps_core import a\n    return a\n")
    (tmp_path / "app.py").write_text("")
    g = import_graph(tmp_path)
    assert g.has_edge("taps_core.a", "taps_core.b") and g.has_edge("taps_core.b", "taps_core.a")
    circles = [c for c in nx.strongly_connected_components(g) if len(c) > 1]
    assert circles == [{"taps_core.a", "taps_core.b"}]
