"""The import graph of python/snapkv has no cycles: every ``import`` statement counts, at module
level or inside a function (a function-level import that only dodges a circle at import time
is still a circle of the design). Read statically (ast), so it costs milliseconds.

A module importing ``snapkv.a.b`` also runs ``snapkv/a/__init__.py`` first; that implicit edge
is not counted (a package importing its own modules is how a package is built), only the
imports written in the files."""

import ast
import re
from pathlib import Path
from typing import Dict, List, Set

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "snapkv"

# Circles that predate this check, each with why it stays. Engine.load (public API:
# docs/serving.md) builds an engine through loading.load_engine, which constructs Engine.
KNOWN_CYCLES = [
    {"snapkv.serving.engine", "snapkv.serving.loading", "snapkv.serving.text"},
]


def modules(root: Path) -> Dict[str, Path]:
    """Dotted name -> file of every module of the package at `root`."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def import_graph(root: Path) -> Dict[str, Dict[str, List[int]]]:
    """module -> {imported module of the same package: the lines importing it}. An import of
    a module of the package that does not exist (a relative import left pointing at the old
    place by a move) is an AssertionError naming it: only running it would say so otherwise."""
    known = modules(root)
    top = root.name
    graph: Dict[str, Dict[str, List[int]]] = {}
    for name, path in known.items():
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        edges = graph.setdefault(name, {})
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = here[:len(here) - node.level + 1] if node.level else []
                module = ".".join(base + (node.module.split(".") if node.module else []))
                # `from pkg import name`: the module pkg.name if there is one, else pkg.
                targets = [f"{module}.{alias.name}" if f"{module}.{alias.name}" in known
                           else module for alias in node.names]
            for target in targets:
                if target.split(".")[0] != top:
                    continue
                assert target in known, f"{path}:{node.lineno}: no module {target}"
                if target != name:
                    edges.setdefault(target, []).append(node.lineno)
    return graph


def cycles(graph: Dict[str, Dict[str, List[int]]]) -> List[Set[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[Set[str]] = []

    def visit(v: str):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def describe(graph, component: Set[str]) -> str:
    return "; ".join(f"{a} -> {b} (line {', '.join(map(str, lines))})"
                     for a in sorted(component) for b, lines in sorted(graph[a].items())
                     if b in component)


def test_the_package_has_no_import_cycles():
    graph = import_graph(PACKAGE)
    assert "snapkv.cli.export" in graph and "snapkv.evaluation.suite" in graph
    found = cycles(graph)
    new = [c for c in found if c not in KNOWN_CYCLES]
    assert not new, "import cycles: " + " | ".join(describe(graph, c) for c in new)
    gone = [c for c in KNOWN_CYCLES if c not in found]
    assert not gone, f"no longer a cycle, remove it from KNOWN_CYCLES: {gone}"


def test_a_cycle_through_a_function_level_import_is_found(tmp_path):
    """The check itself: the circle cli/common.py <-> cli/export.py once was (a top-level
    import one way, a function-level import the other) is reported, and relative, absolute
    and `from . import module` imports all resolve."""
    package = tmp_path / "snapkv"
    (package / "cli").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "tools.py").write_text("")
    (package / "cli" / "__init__.py").write_text("from . import common, export\n")
    (package / "cli" / "common.py").write_text(
        "from .. import tools\n\n\ndef default_model():\n    from . import export\n"
        "    return export.export_models()\n")
    (package / "cli" / "export.py").write_text(
        "import snapkv.tools\nfrom .common import default_model\n")
    graph = import_graph(package)
    assert graph["snapkv.cli.common"] == {"snapkv.tools": [1], "snapkv.cli.export": [5]}
    assert graph["snapkv.cli.export"] == {"snapkv.tools": [1], "snapkv.cli.common": [2]}
    assert cycles(graph) == [{"snapkv.cli.common", "snapkv.cli.export"}]
    (package / "cli" / "common.py").write_text("from .. import tools\n")
    assert cycles(import_graph(package)) == []
    (package / "cli" / "common.py").write_text("def f():\n    from .tools import x\n")
    with pytest.raises(AssertionError, match="common.py:2: no module snapkv.cli.tools"):
        import_graph(package)


def test_every_package_is_installed():
    """pyproject.toml lists the packages setuptools installs: a package missing there works
    from the checkout and is absent from an installed wheel."""
    text = (PACKAGE.parent / "pyproject.toml").read_text()
    listed = re.search(r"^packages = \[([^\]]*)\]", text, re.M)
    assert listed, "pyproject.toml: no [tool.setuptools] packages list"
    packages = {name for name, path in modules(PACKAGE).items() if path.name == "__init__.py"}
    assert set(re.findall(r'"([\w.]+)"', listed.group(1))) == packages
