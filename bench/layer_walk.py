"""How the package's layers import one another, counted from the source (issue 46).

Reads every ``.py`` file under ``src/shearbatch`` with :mod:`ast` (every ``import`` and
``from ... import`` statement wherever it sits: module level, in a function, under
``if TYPE_CHECKING``) and resolves each to the package module it loads (a name imported
from a package is an edge to the package's ``__init__``; a submodule imported from a
package, ``from . import campaign``, an edge to that submodule). No code of the package
is imported or run. Then it counts:

1. **Folder cycles.** Nodes: each subpackage folder (``core``, ``io``, ``engine`` ...)
   and each top-level module file (``spec``, ``runtime`` ...), ``shearbatch/__init__.py``
   as ``shearbatch``. An edge a -> b when a module of a imports a module of b (a != b).
   A cycle is a strongly connected component of more than one node (Tarjan). Module
   cycles (file to file) are counted the same way on the module graph.
2. **Climbs.** Every node has a layer (:data:`LAYERS`, bottom first: the order of
   docs/design.md's package-layout map). A climb is a module import edge (distinct
   ``importer -> imported`` pair of modules) from a lower layer to a higher one.
3. **The static walks from app/runner.py to the writer, and from app/stats_stage.py to
   bias_results.json.** The modules on some import path from ``shearbatch.app.runner`` to
   ``shearbatch.io.writer`` (from ``shearbatch.app.stats_stage`` to ``shearbatch.io.atomic``,
   which writes ``bias_results.json``; reachable from the first and reaching the second,
   both included): their number, their files, and the climbs among the edges between them.
4. **The call walks** (``--calls``: runs a tiny Level 0 campaign, 2 realizations, MAP,
   one seed at two shears, in this process, through ``bias-run``'s click command, then
   ``bias-stats --no-plots`` on it): from the moment ``shearbatch.app.runner.run`` (for
   ``bias-stats``: ``shearbatch.app.stats_stage.run_stats``) is entered until it returns, every
   call from one function of the package to another in the main thread
   (``sys.setprofile``; the writer threads and processes are not seen; calls made while
   JAX traces a program are). "Stops": the distinct functions called (``module:qualname``)
   and their files; a climb: a distinct ``caller -> callee`` pair of functions whose
   callee's layer is above its caller's (callbacks included: a function of the engine
   handed to core and called there is a climb). ``--calls`` takes a minute or two on the
   2-core CPU.

Usage: ``python bench/layer_walk.py [--calls] [--json]``.
"""

from __future__ import annotations

import argparse
import ast
import json
from pathlib import Path

PKG = "shearbatch"
SRC = Path(__file__).resolve().parents[1] / "src" / PKG

#: the layers, bottom first: a node imports only nodes of its own layer or below. A node of
#: the package not listed here is reported (and counted at layer -1) so it cannot hide.
LAYERS: list[tuple[str, set[str]]] = [
    ("base", {"_version", "_deprecated", "strict_model", "settings", "jax_setup"}),
    ("core", {"core", "render"}),
    ("io", {"io"}),
    ("schema", {"estimators", "schema"}),
    ("spec", {"spec"}),
    ("campaign", {"campaign", "slurm"}),
    # before issue 46 the engine was four loose modules at the package root
    ("engine", {"engine", "exported", "records", "runtime"}),
    ("analysis", {"analysis"}),
    ("app", {"app", "api"}),
    ("cli", {"cli", "__main__", PKG}),
]
RANK = {node: i for i, (_, nodes) in enumerate(LAYERS) for node in nodes}


def modules(src: Path = SRC) -> dict[str, Path]:
    """Dotted module name -> its file, for every module of the package."""
    out = {}
    for path in sorted(src.rglob("*.py")):
        parts = list(path.relative_to(src.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def import_graph(src: Path = SRC) -> dict[str, set[str]]:
    """module -> the package modules its import statements load."""
    mods = modules(src)
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
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


def node_of(module: str) -> str:
    """The folder or top-level module a module belongs to (``shearbatch.core.psf`` ->
    ``core``, ``shearbatch.spec`` -> ``spec``, ``shearbatch`` -> ``shearbatch``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def folder_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {node_of(m): set() for m in graph}
    for a, targets in graph.items():
        out[node_of(a)] |= {node_of(b) for b in targets} - {node_of(a)}
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
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
    return sorted(out)


def layer(module: str) -> int:
    return RANK.get(node_of(module), -1)


def climbs(graph: dict[str, set[str]], among: set[str] | None = None) -> list[tuple[str, str]]:
    """The import edges (between modules of ``among``, default all) that go up a layer."""
    return sorted((a, b) for a, targets in graph.items() for b in targets
                  if (among is None or {a, b} <= among) and layer(b) > layer(a))  # fmt: skip


def reach(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = {start}, [start]
    while todo:
        for w in graph.get(todo.pop(), ()):
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return seen


def walk(graph: dict[str, set[str]], start: str, end: str) -> set[str]:
    """The modules on some import path from ``start`` to ``end``."""
    reverse: dict[str, set[str]] = {m: set() for m in graph}
    for a, targets in graph.items():
        for b in targets:
            reverse[b].add(a)
    return reach(graph, start) & reach(reverse, end)


def counts(src: Path = SRC) -> dict:
    graph = import_graph(src)
    folders = folder_graph(graph)
    stops = walk(graph, f"{PKG}.app.runner", f"{PKG}.io.writer")
    stats = walk(graph, f"{PKG}.app.stats_stage", f"{PKG}.io.atomic")
    mods = modules(src)
    return {
        "modules": len(graph),
        "unlayered": sorted({node_of(m) for m in graph} - set(RANK)),
        "folder_cycles": cycles(folders),
        "module_cycles": cycles(graph),
        "climbs": [f"{a} -> {b}" for a, b in climbs(graph)],
        "walk_runner_to_writer": {
            "stops": len(stops),
            "files": sorted(str(mods[m].relative_to(src)) for m in stops),
            "climbs": [f"{a} -> {b}" for a, b in climbs(graph, stops)],
        },
        "walk_stats_to_results": {
            "stops": len(stats),
            "files": sorted(str(mods[m].relative_to(src)) for m in stats),
            "climbs": [f"{a} -> {b}" for a, b in climbs(graph, stats)],
        },
    }


def call_walk(workdir: Path) -> dict:
    """Run a tiny Level 0 campaign, then bias-stats on it, under a profiler (see the module
    docstring, 4.): ``{"run": walk of app.runner.run, "stats": walk of app.stats_stage.run_stats}``."""
    from shearbatch.cli import bias_run, bias_stats

    root = Path(__file__).resolve().parents[1]
    args = ["--config", str(root / "configs" / "level0.yaml"), "--n-realizations", "1",
            "--shear-grid", "0.01", "0.02", "--output-dir", str(workdir / "runs"),
            "--cache-dir", "off", "--no-progress"]  # fmt: skip
    run = _profiled(bias_run, args, f"{PKG}.app.runner:run", (0,))
    stats = _profiled(bias_stats, ["--input", str(workdir / "runs"), "--no-plots"],
                      f"{PKG}.app.stats_stage:run_stats", (0, 1, 3))  # fmt: skip
    return {"run": run, "stats": stats}


def _profiled(command, args: list[str], entry: str, ok: tuple[int, ...]) -> dict:
    """The call walk of ``command args`` from ``entry`` (``module:qualname``) until it
    returns."""
    import sys

    from click.testing import CliRunner

    files = {str(p.resolve()): str(p.relative_to(SRC)) for p in SRC.rglob("*.py")}
    calls: set[tuple[str, str]] = set()
    stops: dict[str, str] = {}
    inside = [0]

    def name(frame) -> str | None:
        mod = frame.f_globals.get("__name__", "")
        if mod != PKG and not mod.startswith(PKG + "."):
            return None
        return f"{mod}:{frame.f_code.co_qualname}"

    def prof(frame, event, arg):
        if event not in ("call", "return"):
            return
        callee = name(frame)
        if callee == entry:
            inside[0] += 1 if event == "call" else -1
            if event == "call":
                stops[callee] = files.get(str(Path(frame.f_code.co_filename).resolve()), "?")
            return
        if event != "call" or not inside[0] or callee is None or frame.f_back is None:
            return
        stops[callee] = files.get(str(Path(frame.f_code.co_filename).resolve()), "?")
        caller = name(frame.f_back)
        if caller is not None and caller != callee:
            calls.add((caller, callee))

    sys.setprofile(prof)
    try:
        res = CliRunner().invoke(command, args)
    finally:
        sys.setprofile(None)
    if res.exit_code not in ok:
        raise RuntimeError(f"{command.name} exited {res.exit_code}: {res.output}")

    def lay(fn: str) -> int:
        return layer(fn.partition(":")[0])

    up = sorted((a, b) for a, b in calls if lay(b) > lay(a))
    return {"stops": len(stops), "files": sorted(set(stops.values())),
            "climbs": [f"{a} -> {b}" for a, b in up],
            "module_climbs": sorted({f"{a.partition(':')[0]} -> {b.partition(':')[0]}"
                                     for a, b in up})}  # fmt: skip


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    ap.add_argument("--json", action="store_true", help="print the counts as JSON")
    ap.add_argument(
        "--calls",
        action="store_true",
        help="also follow the calls of a tiny Level 0 campaign (about a minute)",
    )
    opts = ap.parse_args(argv)
    res = counts()
    if opts.calls:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            res["call_walk"] = call_walk(Path(tmp))
    if opts.json:
        print(json.dumps(res, indent=1))
        return res
    w = res["walk_runner_to_writer"]
    print(f"{res['modules']} modules; layers (bottom first): "
          + " < ".join(f"{n} {{{', '.join(sorted(s))}}}" for n, s in LAYERS))  # fmt: skip
    if res["unlayered"]:
        print(f"not in any layer: {res['unlayered']}")
    print(f"folder cycles: {len(res['folder_cycles'])}")
    for c in res["folder_cycles"]:
        print("  " + " <-> ".join(c))
    print(f"module cycles: {len(res['module_cycles'])}")
    for c in res["module_cycles"]:
        print("  " + " <-> ".join(c))
    print(f"climbs (import edges up a layer), whole package: {len(res['climbs'])}")
    for c in res["climbs"]:
        print("  " + c)
    print(f"walk app/runner.py -> io/writer.py: {w['stops']} modules over "
          f"{len(w['files'])} files, {len(w['climbs'])} climbs")  # fmt: skip
    for f in w["files"]:
        print("  " + f)
    for c in w["climbs"]:
        print("  climb: " + c)
    w = res["walk_stats_to_results"]
    print(f"walk app/stats_stage.py -> io/atomic.py (bias_results.json): {w['stops']} modules over "
          f"{len(w['files'])} files, {len(w['climbs'])} climbs")  # fmt: skip
    for f in w["files"]:
        print("  " + f)
    for c in w["climbs"]:
        print("  climb: " + c)
    for key, entry in (("run", "app/runner.py:run"), ("stats", "app/stats_stage.py:run_stats")):
        if "call_walk" not in res:
            break
        c = res["call_walk"][key]
        print(f"call walk from {entry}: {c['stops']} functions over "
              f"{len(c['files'])} files, {len(c['climbs'])} climbs "
              f"({len(c['module_climbs'])} distinct module pairs)")  # fmt: skip
        for f in c["files"]:
            print("  " + f)
        for x in c["climbs"]:
            print("  climb: " + x)
    return res


if __name__ == "__main__":
    main()
