#!/usr/bin/env python3
"""Issue 57 item 4, "names that say what they hold": the mechanical module renames.

For each entry of :data:`RENAMES` it ``git mv``s the module, writes a deprecation shim at
the old path where that path was public (:data:`RENAMES`' third field), and rewrites every
reference to the old module in ``src/``, ``tests/``, ``bench/``, ``docs/`` and ``ci/`` (and
the top-level ``Makefile`` and ``README.md``):

- Python imports, resolved per file (so ``from .stats import`` is rewritten in
  ``analysis/`` and ``app/``, where it names a renamed module, and left alone in ``cli/``,
  where ``cli/stats.py`` keeps its command's name): ``from .arrow import X``,
  ``from ..core.flags import X``, ``from shearbatch.settings import X``,
  ``from ..core import flags as fl``, ``import shearbatch.process``. Where a module was
  imported under its own name (``from shearbatch.core import arrow``), the name is
  renamed where it is used in that scope (``arrow.factor`` -> ``block_arrow.factor``);
- dotted names anywhere (code, strings, docstrings, Markdown): ``shearbatch.core.arrow``,
  ``core.arrow.factor``, ``{PKG}.app.stats``, :mod:`~shearbatch.analysis.extract` ...;
  relative Sphinx roles in docstrings (:mod:`.extract` in ``app/__init__.py``);
- file paths: ``core/arrow.py``, ``src/shearbatch/process.py``, ``app/stats.py:run_stats``,
  and the bare names of the top-level and uniquely named modules (``process.py``,
  ``settings.py``, ``arrow.py``, ``flags.py``);
- the layer table of ``bench/layer_walk.py`` (the base layer's module names).

Then ``ruff check --select I --fix`` re-sorts the imports of the Python files it changed and
``ruff format`` re-wraps them (the tree is ``ruff format``-clean, so only the renamed lines move).

Left alone: the shims, the files of :data:`KEEP_FILES` (a test of the shims) and any line
that says "deprecated alias" (docs/design.md names the shims by their old paths).

It is idempotent: a module already moved is not moved again, a shim is never rewritten,
and no pattern matches a new name, so running it on a renamed tree changes nothing (it
prints ``0 files changed``). Re-run it after merging a branch written against the old
names; ``--check`` exits 1 when anything is left to do (without changing anything).

    python ci/rename_modules.py            # apply
    python ci/rename_modules.py --check    # exit 1 if a rename or a reference is left
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PKG = "shearbatch"
SRC = REPO / "src"

#: (old module, new module, shim at the old path). A shim is kept where the old path is
#: public: ``shearbatch.settings.StrictModel`` is what docs/design.md and
#: ``core.methods``' autodoc tell a method's author to derive from, and the documented
#: way to write a method (tests/core/test_method_plugin.py) imports ``core.arrow`` and
#: ``core.flags``. The others were only ever imported inside the package.
RENAMES: list[tuple[str, str, bool]] = [
    # block-arrow Hessian algebra, not Apache Arrow
    ("shearbatch.core.arrow", "shearbatch.core.block_arrow", True),
    # failure flags (bits) and the convergence gate, not JAX or command-line flags
    ("shearbatch.core.flags", "shearbatch.core.failure_flags", True),
    # the strict pydantic base model (StrictModel, Positive, Count), not user settings
    ("shearbatch.settings", "shearbatch.strict_model", True),
    # the JAX flags, the workers' environment, the compilation cache's place
    ("shearbatch.process", "shearbatch.jax_setup", False),
    # stage 3 numerics: m and c fits, group errors, coverage, SBC
    ("shearbatch.analysis.stats", "shearbatch.analysis.bias_fits", False),
    # stage 2: the scan of a campaign and summary.csv (its rows, read and write)
    ("shearbatch.analysis.extract", "shearbatch.analysis.summary_table", False),
    # the report's text: the HTML page and bias-stats' printed summary (no files)
    ("shearbatch.analysis.report", "shearbatch.analysis.report_text", False),
    # the application layer's stages 2 and 3 (Options -> run_* -> Outcome)
    ("shearbatch.app.extract", "shearbatch.app.extract_stage", False),
    ("shearbatch.app.stats", "shearbatch.app.stats_stage", False),
    # the figures, stamps and HTML report written by bias-stats (files)
    ("shearbatch.app.report", "shearbatch.app.report_files", False),
]

#: test modules named after a renamed module, renamed with it
TEST_RENAMES: list[tuple[str, str]] = [
    ("tests/core/test_arrow.py", "tests/core/test_block_arrow.py"),
    ("tests/analysis/test_stats.py", "tests/analysis/test_bias_fits.py"),
]

#: module names unique enough in this repository that ``name.py`` alone means the module
BARE_FILE_NAMES = ("arrow", "flags", "settings", "process")

#: exact edits of one file: (path, old text, new text)
LITERAL_EDITS: list[tuple[str, str, str]] = [
    (
        "bench/layer_walk.py",
        '("base", {"_version", "settings", "process"})',
        '("base", {"_version", "_deprecated", "strict_model", "settings", "jax_setup"})',
    ),
]

SCOPE_DIRS = ("src", "tests", "bench", "docs", "ci")
SCOPE_FILES = ("Makefile", "README.md")
SUFFIXES = {".py", ".md", ".rst", ".txt", ".sh", ".toml", ".cfg", ".yaml", ".yml", ".ipynb"}
SKIP_PARTS = {"__pycache__", "_build", ".ipynb_checkpoints"}
#: files about the old names themselves, never rewritten
KEEP_FILES = ("tests/top/test_deprecated_modules.py",)
#: a line naming a deprecated alias keeps the old name (docs/design.md's module map)
KEEP_LINE = "deprecated alias"
SHIM_MARKER = "# deprecation shim written by ci/rename_modules.py"
OLD = {old: new for old, new, _ in RENAMES}


def module_path(dotted: str) -> Path:
    return SRC.joinpath(*dotted.split(".")).with_suffix(".py")


def shim_text(old: str, new: str) -> str:
    return f'''"""Deprecated: :mod:`{old}` was renamed :mod:`{new}` (issue 57); import that.

Importing this path gives that module and warns (:func:`shearbatch._deprecated.moved`); it
will be removed in a later release.
"""

{SHIM_MARKER}
from shearbatch._deprecated import moved

moved(__name__, "{new}")
'''


def is_shim(path: Path) -> bool:
    return path.is_file() and SHIM_MARKER in path.read_text()


def git(*args: str) -> None:
    subprocess.run(["git", "-C", str(REPO), *args], check=True)


# --- moves -----------------------------------------------------------------------------


def moves(check: bool) -> list[str]:
    """``git mv`` every module (and test module) not moved yet; write the shims."""
    todo = []
    pairs = [(module_path(o), module_path(n), shim) for o, n, shim in RENAMES]
    pairs += [(REPO / o, REPO / n, False) for o, n in TEST_RENAMES]
    for old, new, shim in pairs:
        if old.exists() and not is_shim(old):
            if new.exists():
                sys.exit(
                    f"both {old.relative_to(REPO)} and {new.relative_to(REPO)} exist: "
                    "merge the old module's changes into the new one by hand, then rerun"
                )
            todo.append(f"git mv {old.relative_to(REPO)} {new.relative_to(REPO)}")
            if not check:
                git("mv", str(old), str(new))
        if shim and not old.exists():
            o, n = (str(p.relative_to(SRC).with_suffix("")).replace("/", ".") for p in (old, new))
            todo.append(f"shim {old.relative_to(REPO)}")
            if not check:
                old.write_text(shim_text(o, n))
                git("add", str(old))
    return todo


# --- Python imports, resolved per file -------------------------------------------------


def package_of(path: Path) -> list[str] | None:
    """The dotted package a module under src/ belongs to (for relative imports)."""
    try:
        parts = list(path.relative_to(SRC).with_suffix("").parts)
    except ValueError:
        return None
    return parts[:-1]


def _resolve(node: ast.ImportFrom, pkg: list[str] | None) -> str | None:
    if not node.level:
        return node.module
    if pkg is None or node.level - 1 > len(pkg):
        return None
    base = pkg[: len(pkg) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _scope_names(scope: ast.AST, name: str) -> list[ast.Name] | None:
    """The Name nodes loading ``name`` in ``scope``, less those in nested functions that
    bind ``name`` themselves; None when ``scope`` itself assigns ``name``."""
    found: list[ast.Name] = []

    def binds(fn: ast.AST) -> bool:  # conservative: any binding anywhere inside
        args = fn.args  # type: ignore[attr-defined]
        every = args.posonlyargs + args.args + args.kwonlyargs
        if any(a.arg == name for a in every + [a for a in (args.vararg, args.kwarg) if a]):
            return True
        for n in ast.walk(fn):
            if isinstance(n, ast.Name) and n.id == name and not isinstance(n.ctx, ast.Load):
                return True
            if isinstance(n, ast.Import | ast.ImportFrom):
                if any((a.asname or a.name.partition(".")[0]) == name for a in n.names):
                    return True
        return False

    def visit(node: ast.AST, top: bool) -> None:
        if not top and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            if binds(node):
                return
        if isinstance(node, ast.Name) and node.id == name:
            if not isinstance(node.ctx, ast.Load):
                raise _Bound
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child, False)

    try:
        visit(scope, True)
    except _Bound:
        return None
    return found


class _Bound(Exception):
    pass


def _owner(tree: ast.AST, target: ast.AST) -> ast.AST:
    """The innermost function (or the module) whose body holds ``target``."""
    best = tree

    def walk(node: ast.AST, owner: ast.AST) -> bool:
        nonlocal best
        if node is target:
            best = owner
            return True
        inner = node if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) else owner
        return any(walk(c, inner) for c in ast.iter_child_nodes(node))

    walk(tree, tree)
    return best


def python_edits(path: Path, text: str) -> tuple[list[tuple[int, int, int, str]], list[str]]:
    """(line, start col, end col, new text) byte-offset edits of the imports of renamed
    modules, and warnings for what could not be rewritten safely."""
    try:
        tree = ast.parse(text)
    except SyntaxError as err:
        return [], [f"{path}: not parsed ({err}); its imports were not rewritten"]
    pkg = package_of(path)
    lines = text.splitlines(keepends=True)
    edits: list[tuple[int, int, int, str]] = []
    warns: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            mod = _resolve(node, pkg)
            if mod is None:
                continue
            if mod in OLD and node.module:  # from <old module> import names
                line = lines[node.lineno - 1].encode()
                head = re.compile(rb"from\s+\.*" + re.escape(node.module.encode()) + rb"\b")
                m = head.match(line, node.col_offset)
                if m:
                    last = node.module.rpartition(".")[2].encode()
                    new_last = OLD[mod].rpartition(".")[2]
                    edits.append((node.lineno, m.end() - len(last), m.end(), new_last))
                else:
                    warns.append(f"{path}:{node.lineno}: import of {mod} not rewritten")
            for alias in node.names:  # from <package> import <old module> [as x]
                full = f"{mod}.{alias.name}"
                if full not in OLD:
                    continue
                new_last = OLD[full].rpartition(".")[2]
                edits.append((alias.lineno, alias.col_offset,
                              alias.col_offset + len(alias.name.encode()), new_last))  # fmt: skip
                if alias.asname is None:
                    scope = _owner(tree, node)
                    uses = _scope_names(scope, alias.name)
                    if uses is None:
                        warns.append(
                            f"{path}:{node.lineno}: {alias.name!r} is also bound in "
                            f"its scope; its uses were not renamed to {new_last!r}"
                        )
                        continue
                    for use in uses:
                        edits.append((use.lineno, use.col_offset, use.end_col_offset, new_last))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                for old, new in OLD.items():
                    if alias.name == old or alias.name.startswith(old + "."):
                        new_name = new + alias.name[len(old) :]
                        edits.append((alias.lineno, alias.col_offset,
                                      alias.col_offset + len(alias.name.encode()), new_name))  # fmt: skip
    return edits, warns


def apply_edits(text: str, edits: list[tuple[int, int, int, str]]) -> str:
    lines = text.splitlines(keepends=True)
    for lineno, start, end, new in sorted(set(edits), reverse=True):
        b = lines[lineno - 1].encode()
        lines[lineno - 1] = (b[:start] + new.encode() + b[end:]).decode()
    return "".join(lines)


# --- text: dotted names, Sphinx roles, paths -------------------------------------------


def text_rules() -> list[tuple[re.Pattern[str], str]]:
    rules = []
    for old, new in OLD.items():
        rel_old = old.split(".", 1)[1]  # core.arrow, settings
        rel_new = new.split(".", 1)[1]
        if "." in rel_old:  # core.arrow (also inside shearbatch.core.arrow, {PKG}.core.arrow)
            rules.append((re.compile(rf"(?<![\w]){re.escape(rel_old)}(?![\w])"), rel_new))
        else:  # shearbatch.settings, {PKG}.settings: a bare ``settings`` is not the module
            rules.append(
                (
                    re.compile(
                        rf"(?<![\w.])((?:{PKG}|\{{PKG\}})\.){re.escape(rel_old)}"
                        r"(?![\w])"
                    ),
                    rf"\g<1>{rel_new}",
                )
            )
        p_old, p_new = rel_old.replace(".", "/") + ".py", rel_new.replace(".", "/") + ".py"
        if "/" in p_old:  # core/arrow.py, src/shearbatch/core/arrow.py
            rules.append((re.compile(rf"(?<![\w.-]){re.escape(p_old)}"), p_new))
        else:  # shearbatch/process.py
            rules.append((re.compile(rf"(?<={PKG}/){re.escape(p_old)}"), p_new))
        name = rel_old.rpartition(".")[2]
        if name in BARE_FILE_NAMES:  # process.py, arrow.py (but not cli/stats.py)
            new_name = rel_new.rpartition(".")[2]
            rules.append((re.compile(rf"(?<![\w./-]){name}\.py(?!\w)"), f"{new_name}.py"))
    for old, new in TEST_RENAMES:  # tests/core/test_arrow.py, core/test_arrow.py
        o, n = old.split("/", 1)[1], new.split("/", 1)[1]
        rules.append((re.compile(rf"(?<![\w.-]){re.escape(o)}"), n))
        o, n = (x.removesuffix(".py").replace("/", ".") for x in (o, n))  # core.test_arrow
        rules.append((re.compile(rf"(?<![\w]){re.escape(o)}(?![\w])"), n))
    return rules


ROLE = re.compile(r"(:[\w:]+:`~?)(\.+)([A-Za-z_]\w*)")


def relative_roles(path: Path, text: str) -> str:
    """:mod:`.extract` in a docstring of ``shearbatch.app``: the renamed module's name."""
    pkg = package_of(path)
    if pkg is None:
        return text

    def sub(m: re.Match[str]) -> str:
        dots = len(m.group(2))
        if dots - 1 > len(pkg):
            return m.group(0)
        full = ".".join([*pkg[: len(pkg) - (dots - 1)], m.group(3)])
        if full in OLD:
            return m.group(1) + m.group(2) + OLD[full].rpartition(".")[2]
        return m.group(0)

    return ROLE.sub(sub, text)


def scope_files() -> list[Path]:
    """The files to rewrite: the scope's files that git does not ignore (a build's
    egg-info or a venv is no source)."""
    import subprocess

    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", *SCOPE_DIRS],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout.splitlines()  # fmt: skip
    out = []
    for rel in sorted(listed):
        p = REPO / rel
        if p.is_file() and p.suffix in SUFFIXES and not SKIP_PARTS & set(p.parts):
            out.append(p)
    out += [REPO / f for f in SCOPE_FILES if (REPO / f).is_file()]
    me = Path(__file__).resolve()
    keep = {REPO / f for f in KEEP_FILES}
    return [p for p in out if p.resolve() != me and p not in keep and not is_shim(p)]


def _sub_all(rules: list[tuple[re.Pattern[str], str]], line: str) -> str:
    for pattern, repl in rules:
        line = pattern.sub(repl, line)
    return line


def rewrite(check: bool) -> tuple[list[Path], list[str]]:
    rules = text_rules()
    changed, warns = [], []
    for path in scope_files():
        text = path.read_text()
        new = text
        if path.suffix == ".py":
            edits, w = python_edits(path, new)
            warns += w
            new = relative_roles(path, apply_edits(new, edits))
        new = "".join(line if KEEP_LINE in line else _sub_all(rules, line)
                      for line in new.splitlines(keepends=True))  # fmt: skip
        rel = path.relative_to(REPO).as_posix()
        for f, old, lit in LITERAL_EDITS:
            if f == rel:
                new = new.replace(old, lit)
                if lit not in new:
                    warns.append(f"{rel}: the literal to edit was not found: {old}")
        if new != text:
            changed.append(path)
            if not check:
                path.write_text(new)
    return changed, warns


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if "
                    "anything is left to rename or rewrite")  # fmt: skip
    args = ap.parse_args(argv)
    todo = moves(args.check)
    changed, warns = rewrite(args.check)
    for line in todo:
        print(line)
    for w in warns:
        print("warning:", w, file=sys.stderr)
    py = [str(p) for p in changed if p.suffix == ".py"]
    if py and not args.check:  # imports re-sorted, lines re-wrapped where a name grew
        ruff = [sys.executable, "-m", "ruff"]
        subprocess.run([*ruff, "check", "--quiet", "--select", "I", "--fix", *py], cwd=REPO)
        subprocess.run([*ruff, "format", "--quiet", *py], cwd=REPO)
    verb = "to change" if args.check else "changed"
    print(f"{len(todo)} moves, {len(changed)} files {verb}")
    for p in changed:
        print("  ", p.relative_to(REPO))
    return 1 if args.check and (todo or changed) else 0


if __name__ == "__main__":
    sys.exit(main())
