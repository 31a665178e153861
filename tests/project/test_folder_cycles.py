"""No import cycle between the package's folders, not only between its files.

The nodes are the package's folders (``core``, ``io``, ``engine``, ``analysis`` ...) and
its top-level modules (``spec``, ``campaign``, ``jax_setup`` ...); a module of one imports a
module of the other (any import statement, deferred ones included: the graph of
tests/project/test_import_cycles.py) gives an edge. Before issue 46, ``io/writer.py ->
runtime.py -> exported.py -> io/atomic.py`` and ``core/generate.py -> exported.py`` made
``core``, ``io``, ``runtime`` and ``exported`` one cycle although no two files imported
each other. The layers of bench/layer_walk.py (the order of docs/design.md's map) are
checked too: no import goes up a layer.
"""

from tests.project.test_import_cycles import LW, PKG, SRC, cycles, import_graph

folder_graph, node_of = LW.folder_graph, LW.node_of


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
    lw = LW
    nodes = {node_of(m) for m in import_graph()}
    assert nodes - set(lw.RANK) == set(), "not in any layer of bench/layer_walk.py"
    assert lw.climbs(lw.import_graph(SRC)) == []
