"""The package has no import cycle, deferred (function-level) imports included.

Every ``import`` and ``from ... import`` statement of every module under
``src/shearbatch`` is read with :mod:`ast` (wherever it sits: module level, inside a
function, under ``if TYPE_CHECKING``), resolved to the package module it loads, and
the graph of those edges must have no cycle. A name imported from a package
(``from ..io import POSTERIOR``) is an edge to the package's ``__init__``; a submodule
imported from a package (``from . import campaign``) is an edge to that submodule.
"""

from pathlib import Path

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[2]


def _layer_walk():
    """bench/layer_walk.py: the one reader of the package's import graph (its
    ``import_graph``, ``cycles``, ``folder_graph`` and layers), shared with these tests."""
    return load_script("bench/layer_walk.py")


LW = _layer_walk()
PKG, SRC = LW.PKG, LW.SRC
cycles = LW.cycles


def import_graph() -> dict[str, set[str]]:
    """module -> the package modules its import statements load."""
    return LW.import_graph(SRC)


def test_the_checker_finds_cycles_deferred_imports_included():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(g) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_function_level_and_relative_imports():
    g = import_graph()
    # engine/loop.py imports core's batching at module level; campaign.py the generators
    # and the CLI most modules inside their functions (function level): all are edges
    assert f"{PKG}.core.batching" in g[f"{PKG}.engine.loop"]
    assert f"{PKG}.core.generators" in g[f"{PKG}.campaign"]
    assert f"{PKG}.schema" in g[f"{PKG}.cli.run"]
    assert f"{PKG}.core.generate" in g[f"{PKG}.core.galsim_generator"]


def test_the_package_has_no_import_cycle():
    found = cycles(import_graph())
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)
