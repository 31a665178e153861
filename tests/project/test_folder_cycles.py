"""No import cycle between the package's folders, not only between its files.

The nodes are the package's folders (``core``, ``io``, ``engine``, ``analysis`` ...) and
its top-level modules (``spec``, ``campaign``, ``process`` ...); a module of one imports a
module of the other (any import statement, deferred ones included: the graph of
tests/project/test_import_cycles.py) gives an edge. Before issue 46, ``io/writer.py ->
runtime.py -> exported.py -> io/atomic.py`` and ``core/generate.py -> exported.py`` made
``core``, ``io``, ``runtime`` and ``exported`` one cycle although no two files imported
each other. The layers of bench/layer_walk.py (the order of docs/design.md's map) are
checked too: no import goes up a layer.
"""

import importlib.util
from pathlib import Path

from tests.project.test_import_cycles import PKG, SRC, cycles, import_graph

ROOT = Path(__file__).resolve().parents[2]


def _layer_walk():
    spec = importlib.util.spec_from_file_location("layer_walk", ROOT / "bench" / "layer_walk.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def node_of(module: str) -> str:
    """``shearbatch.core.psf`` -> ``core``; ``shearbatch.spec`` -> ``spec``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def folder_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {node_of(m): set() for m in graph}
    for a, targets in graph.items():
        out[node_of(a)] |= {node_of(b) for b in targets} - {node_of(a)}
    return out


def test_a_cycle_through_folders_is_found_where_no_two_files_import_each_other():
    """The check can fail: io/a -> top -> core/b -> io/c is a folder cycle (io, top, core)
    with no cycle between files."""
    g = {f"{PKG}.io.a": {f"{PKG}.top"}, f"{PKG}.top": {f"{PKG}.core.b"},
         f"{PKG}.core.b": {f"{PKG}.io.c"}, f"{PKG}.io.c": set()}  # fmt: skip
    assert cycles(g) == []
    assert cycles(folder_graph(g)) == [["core", "io", "top"]]


def test_the_real_package_would_fail_with_a_folder_cycle():
    """Adding one deferred import (io/writer.py importing the engine, as before issue 46)
    to the package's own graph makes the check fail."""
    g = import_graph()
    g[f"{PKG}.io.writer"] = g[f"{PKG}.io.writer"] | {f"{PKG}.engine.runtime"}
    assert any({"engine", "io"} <= set(c) for c in cycles(folder_graph(g)))


def test_no_import_cycle_between_folders():
    found = cycles(folder_graph(import_graph()))
    assert not found, "import cycles between folders: " + "; ".join(" <-> ".join(c) for c in found)


def test_every_folder_has_a_layer_and_no_import_climbs():
    """Every folder and top-level module is in a layer of bench/layer_walk.py, and no
    import goes from a lower layer to a higher one."""
    lw = _layer_walk()
    nodes = {node_of(m) for m in import_graph()}
    assert nodes - set(lw.RANK) == set(), "not in any layer of bench/layer_walk.py"
    assert lw.modules(SRC).keys() == import_graph().keys()
    assert lw.climbs(lw.import_graph(SRC)) == []
