"""Stage 3 talks in records: no untyped mapping crosses a function boundary.

Issue 57 item 3: the two passes (:class:`~shearbatch.analysis.parts.PartScan`,
:class:`~shearbatch.analysis.parts.PartSums`) and every section the fold computes
(coverage, SBC, prior, noise note, design, fits and their errors, acceptance, planning,
the pooled population fit, the host estimators' comparison) are typed records. This test
reads every function signature of stage 3's modules with :mod:`ast` and fails on a
parameter or return annotated as a mapping with untyped values (``dict[str, Any]``,
``Mapping[str, Any]``, a bare ``dict`` / ``Mapping``), outside the boundaries listed in
:data:`BOUNDARIES` (each with why a mapping is the right type there). A mapping whose
values are one type (``dict[str, Fit]`` per component, ``dict[str, int]`` of counts per
label) says what it holds and is allowed.

Stage 2's modules (``summary_table``, ``partials``, ``progress``, ``scrub``) are not read:
their rows are the summary table's rows, keyed by column, the CSV's own shape.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ANALYSIS = ROOT / "src" / "shearbatch" / "analysis"

#: stage 3's modules
STAGE3 = ("bias", "bias_fits", "compare", "parts", "plots", "pooled", "report_text",
          "result", "scope", "streamed", "verdict")  # fmt: skip

#: ``module.function`` (``module.Class.method``) where a mapping is the right type
BOUNDARIES = {
    # the JSON file bias_results.json: a record written as, and read back from, its mapping
    "result.Requirement.to_json": "JSON out",
    "result.Requirement.from_json": "JSON in",
    "result.Criterion.to_json": "JSON out",
    "result.Criterion.from_json": "JSON in",
    "result.BiasResult.to_json": "JSON out",
    "result.BiasResult.from_json": "JSON in",
    "result.Section.to_json": "JSON out",
    "result.Section.from_json": "JSON in",
    "result.Section.maybe": "JSON in (a record, or its mapping read from a file)",
    # a user's YAML (or its content) of acceptance overrides, validated key by key
    "verdict.load_acceptance": "YAML in",
    # a realization's posterior.nc attributes, as the file has them
    "report_text.provenance": "netCDF attributes in",
    "plots._read_realization": "netCDF attributes in",
}

#: the mapping types an annotation can name
_MAPPINGS = {"dict", "Dict", "Mapping", "MutableMapping"}


def _untyped(ann: ast.expr | None) -> bool:
    """Whether an annotation is, or holds, a mapping with untyped values: a bare mapping
    type, or one whose value type is ``Any``."""
    if ann is None:
        return False
    nodes = list(ast.walk(ann))
    subscripted = {id(n.value) for n in nodes if isinstance(n, ast.Subscript)}
    for n in nodes:
        name = n.id if isinstance(n, ast.Name) else n.attr if isinstance(n, ast.Attribute) else None
        if name in _MAPPINGS and id(n) not in subscripted:
            return True
        if isinstance(n, ast.Subscript) and ast.unparse(n.value).split(".")[-1] in _MAPPINGS:
            args = n.slice.elts if isinstance(n.slice, ast.Tuple) else [n.slice]
            if ast.unparse(args[-1]) in ("Any", "typing.Any"):
                return True
    return False


def offenders(src: str, module: str) -> list[str]:
    """``module.qualname(param): annotation`` of each untyped mapping in ``src``'s
    signatures (boundaries excluded)."""
    out = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                walk(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{module}.{prefix}{child.name}"
                if name not in BOUNDARIES:
                    a = child.args
                    params = [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]
                    for p in filter(None, params):
                        if _untyped(p.annotation):
                            out.append(f"{name}({p.arg}): {ast.unparse(p.annotation)}")
                    if _untyped(child.returns):
                        out.append(f"{name} -> {ast.unparse(child.returns)}")
                walk(child, f"{prefix}{child.name}.")

    walk(ast.parse(src), "")
    return out


def test_the_check_finds_an_untyped_mapping_and_spares_a_typed_one():
    src = ("def a(x: dict[str, Any]) -> int: ...\n"
           "def b(x: int) -> dict | None: ...\n"
           "class C:\n    def c(self, **kw: Any) -> Mapping[str, Any]: ...\n"
           "def d(x: dict[str, Fit], y: Mapping[str, int]) -> dict[str, int]: ...\n"
           "def to_json(self) -> dict[str, Any]: ...\n")  # fmt: skip
    assert offenders(src, "m") == ["m.a(x): dict[str, Any]", "m.b -> dict | None",
                                   "m.C.c -> Mapping[str, Any]",
                                   "m.to_json -> dict[str, Any]"]  # fmt: skip


def test_every_boundary_names_a_function_that_exists():
    """A stale entry would let a new function of that name through unchecked."""
    defined = set()
    for mod in STAGE3:
        tree = ast.parse((ANALYSIS / f"{mod}.py").read_text())

        def walk(node: ast.AST, prefix: str, mod: str = mod) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                    defined.add(f"{mod}.{prefix}{child.name}")
                    walk(child, f"{prefix}{child.name}.")

        walk(tree, "")
    assert not set(BOUNDARIES) - defined


def test_no_untyped_mapping_crosses_a_function_boundary_in_stage_3():
    found = [o for mod in STAGE3 for o in offenders((ANALYSIS / f"{mod}.py").read_text(), mod)]
    assert not found, "untyped mappings in stage 3's signatures:\n" + "\n".join(found)
