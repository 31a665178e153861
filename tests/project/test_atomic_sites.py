"""Every file the package writes goes through the one atomic-write primitive
(:mod:`shearbatch.io.atomic`: temporary file, fsync, rename), read from the source (ast):
a call that writes a file any other way must be one of the few listed here, each with the
reason it is not a replace-style write. A new ``path.write_text(...)``,
``open(path, "w")``, ``fig.savefig(path)``, ``df.to_csv(path)`` or ``os.replace`` outside
io/atomic.py fails this test."""

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "src" / "shearbatch"

#: (module, enclosing function, call) -> why it does not go through io/atomic
ALLOWED = {
    ("io/claims.py", "claim", "os.open"): "the .claims lock file: byte-range locks on one "
    "inode, which a rename would break; nothing is ever written into it",
    ("app/runner.py", "record_command", "open"): "commands.txt: one short O_APPEND line per "
    "process; a rewrite-and-rename would lose the lines of array tasks appending together",
    ("app/runner.py", "compile_first", ".touch"): "the compile marker: an empty file whose "
    "existence is its content (whole or absent by construction)",
    ("engine/runtime.py", "compile_lock", "open"): "the compilation cache's lock file (flock), "
    "never written",
    ("io/writer.py", "_write_netcdf4", ".Dataset"): "netCDF4 writes the temporary file "
    "that atomic.put_with hands it (write_posterior_nc), or a template's sentinel file "
    "(atomic.temporary_path, read and removed at once)",
    ("analysis/summary_table.py", "write_population", ".ZipFile"): "into the temporary file of "
    "atomic.replacing",
    ("analysis/summary_table.py", "write_population", ".open"): "members of that archive",
    ("io/partials.py", "write_partial", ".Dataset"): "netCDF4 writes the temporary file of "
    "atomic.replacing (the partial; its checksum record after it, through atomic)",
    ("app/preview.py", "preview", ".savefig"): "into the temporary file of atomic.replacing",
    ("app/stamps.py", "render", ".savefig"): "into the temporary file of atomic.replacing",
    ("app/report_files.py", "_png", ".savefig"): "into memory (BytesIO), then atomic.write_bytes",
    ("analysis/parts.py", "_split", "open"): "bias-stats' seed parts of a summary.csv, in a "
    "private temporary folder (tempfile.mkdtemp) read back and removed by the same process",
    ("analysis/parts.py", "close", "shutil.rmtree"): "removes that temporary folder",
}

_WRITE_MODES = {"w", "wb", "wt", "w+", "w+b", "a", "ab", "at", "a+", "a+b", "x", "xb",
                "r+", "r+b", "rb+"}  # fmt: skip
_PATH_WRITERS = {"write_text", "write_bytes", "touch", "savefig", "to_netcdf", "to_parquet",
                 "to_feather", "to_hdf", "to_json", "to_csv", "savez", "savez_compressed",
                 "save", "symlink_to", "hardlink_to"}  # fmt: skip
_OS_WRITERS = {"replace", "rename", "link", "symlink", "mkfifo", "truncate"}
_CREATE_FLAGS = {"O_CREAT", "O_WRONLY", "O_TRUNC", "O_APPEND", "O_TMPFILE"}


def _name(func: ast.expr) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        if isinstance(func.value, ast.Name) and func.value.id in ("os", "shutil", "np"):
            return f"{func.value.id}.{func.attr}"
        return f".{func.attr}"
    return ""


def _receiver(func: ast.expr) -> str:
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return func.value.id
    return ""


def _writes(call: ast.Call) -> bool:
    name = _name(call.func)
    if _receiver(call.func) == "atomic":
        return False
    modes = [a.value for a in call.args[1:2] if isinstance(a, ast.Constant)]
    modes += [k.value.value for k in call.keywords
              if k.arg == "mode" and isinstance(k.value, ast.Constant)]  # fmt: skip
    if any(isinstance(m, str) and m in _WRITE_MODES for m in modes):
        return True  # open, zipfile.ZipFile, netCDF4.Dataset, ZipFile.open ... for writing
    if name == "os.open":
        return any(isinstance(n, ast.Attribute) and n.attr in _CREATE_FLAGS
                   for a in call.args[1:] for n in ast.walk(a))  # fmt: skip
    if name.startswith("shutil.") or (name.startswith("os.") and name[3:] in _OS_WRITERS):
        return True
    if name in ("np.save", "np.savez", "np.savez_compressed", "np.savetxt"):
        return True
    if name.startswith(".") and name[1:] in _PATH_WRITERS:
        # to_csv() / to_json() without a path return text
        if (
            name in (".to_csv", ".to_json")
            and not call.args
            and not any(k.arg == "path_or_buf" for k in call.keywords)
        ):
            return False
        return True
    return False


def write_sites() -> dict[tuple[str, str, str], int]:
    """``(module, enclosing function, call) -> line`` of every call that writes a file."""
    found: dict[tuple[str, str, str], int] = {}
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        if rel == "io/atomic.py":
            continue

        def visit(node: ast.AST, func: str, rel: str = rel) -> None:
            for child in ast.iter_child_nodes(node):
                inner = func
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                    inner = child.name
                if isinstance(child, ast.Call) and _writes(child):
                    found.setdefault((rel, func, _name(child.func)), child.lineno)
                visit(child, inner)

        visit(ast.parse(path.read_text(), str(path)), "<module>")
    return found


def test_every_file_is_written_through_io_atomic():
    stray = sorted(f"{m}:{line} in {f}(): {c}" for (m, f, c), line in write_sites().items()
                   if (m, f, c) not in ALLOWED)  # fmt: skip
    assert not stray, ("files written without shearbatch.io.atomic (route them through it, "
                       f"or list them in ALLOWED with the reason): {stray}")  # fmt: skip


def test_the_scan_sees_a_plain_write():
    src = "def f(p, df, fig):\n    p.write_text('x')\n    df.to_csv(p)\n    fig.savefig(p)\n"
    src += "    open(p, 'w')\n    os.replace(p, p)\n    atomic.write_text(p, 'x')\n"
    src += "    df.to_csv(index=False)\n    open(p)\n"
    calls = [n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Call)]
    assert sum(_writes(c) for c in calls) == 5
