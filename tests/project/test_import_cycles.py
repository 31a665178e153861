"""The package has no import cycle, deferred (function-level) imports included.

Every ``import`` and ``from ... import`` statement of every module under
``src/shearbatch`` is read with :mod:`ast` (wherever it sits: module level, inside a
function, under ``if TYPE_CHECKING``), resolved to the package module it loads, and
the graph of those edges must have no cycle. A name imported from a package
(``from ..io import POSTERIOR``) is an edge to the package's ``__init__``; a submodule
imported from a package (``from . import campaign``) is an edge to that submodule.
"""

import ast
from pathlib import Path

PKG = "shearbatch"
SRC = Path(__file__).resolve().parents[2] / "src" / PKG


def _modules() -> dict[str, Path]:
    mods = {}
    for path in SRC.rglob("*.py"):
        parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


def import_graph() -> dict[str, set[str]]:
    """module -> the package modules its import statements load."""
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        is_pkg = path.name == "__init__.py"
        package = mod if is_pkg else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    origin = ".".join(base + ([node.module] if node.module else []))
                else:
                    origin = node.module or ""
                for a in node.names:  # a submodule of the origin, else a name in it
                    sub = f"{origin}.{a.name}"
                    targets.append(sub if sub in mods else origin)
            for t in targets:
                while t and t not in mods:  # `import shearbatch.io.layout as x`: the module
                    t = t.rpartition(".")[0]
                if t.startswith(PKG) and t != mod:
                    graph[mod].add(t)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_checker_finds_cycles_deferred_imports_included():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(g) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_function_level_and_relative_imports():
    g = import_graph()
    # engine/loop.py imports the generators at module level; the CLI imports most modules
    # inside its commands (function level): both are edges
    assert f"{PKG}.core.generators" in g[f"{PKG}.engine.loop"]
    assert f"{PKG}.schema" in g[f"{PKG}.cli.run"]
    assert f"{PKG}.core.generate" in g[f"{PKG}.core.galsim_generator"]


def test_the_package_has_no_import_cycle():
    found = cycles(import_graph())
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)
