"""JAX flags are set in one function, never at import time: ``shearbatch.jax_setup.set_flags``
is the only caller of ``jax.config.update`` in the package, no other module names a JAX
flag (``jax_setup`` holds which flags an entry point sets and which a traced program
depends on), and no module calls
``set_flags`` (or ``jax.config.update``) in its module body; the entry points' set-up
(``engine.runtime.configure``, ``jax_setup.cpu_only_worker``, ``engine.runtime.scoped``)
calls it. Read with :mod:`ast`, nothing imported."""

import ast

from tests.project.test_import_cycles import SRC


def _calls(tree: ast.AST, name: str) -> list[ast.Call]:
    """Calls whose callee ends in ``name`` (``jax.config.update``: ``config.update``)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            parts, f = [], node.func
            while isinstance(f, ast.Attribute):
                parts.append(f.attr)
                f = f.value
            if isinstance(f, ast.Name):
                parts.append(f.id)
            if ".".join(reversed(parts)).endswith(name):
                out.append(node)
    return out


def _module_level(tree: ast.Module) -> list[ast.AST]:
    """The statements that run at import: the module body, outside functions and classes'
    methods (an ``if`` at module level included)."""
    out, todo = [], list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        out.append(node)
        todo.extend(ast.iter_child_nodes(node))
    return out


def _setters(src=SRC):
    """``{file: [(line, callee, at_import)]}`` of every flag-setting call in the package."""
    found = {}
    for path in sorted(src.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        at_import = {id(n) for n in _module_level(tree)}
        for name in ("config.update", "set_flags"):
            for call in _calls(tree, name):
                found.setdefault(path.relative_to(src).as_posix(), []).append(
                    (call.lineno, name, id(call) in at_import)
                )
    return found


def test_only_jax_setup_set_flags_updates_jax_config_and_nothing_at_import():
    found = _setters()
    updates = {f for f, calls in found.items() for _, name, _ in calls if name == "config.update"}
    assert updates == {"jax_setup.py"}, f"jax.config.update outside jax_setup.set_flags: {updates}"
    at_import = {f: [c for c in calls if c[2]] for f, calls in found.items()}
    assert not any(at_import.values()), f"JAX flags set at import time: {at_import}"


def test_the_check_finds_a_flag_set_at_import(tmp_path):
    """The check can fail: a module setting a flag in its body, another updating the config."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "a.py").write_text("import jax\njax.config.update('jax_enable_x64', True)\n")
    (pkg / "b.py").write_text("from .jax_setup import set_flags\n\ndef f():\n    set_flags({})\n")
    found = _setters(pkg)
    assert found["a.py"] == [(2, "config.update", True)]
    assert found["b.py"] == [(4, "set_flags", False)]


def _flag_names(src=SRC):
    """``{file: {flag}}`` of the JAX flag names (string constants ``jax_...``) per module."""
    found = {}
    for path in sorted(src.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if node.value.startswith("jax_") and node.value.isidentifier():
                    found.setdefault(path.relative_to(src).as_posix(), set()).add(node.value)
    return found


def test_jax_flags_are_named_in_jax_setup_alone():
    """Which flags an entry point sets, which a traced program depends on, and their
    values: all :mod:`shearbatch.jax_setup`'s; the engine calls its functions."""
    found = _flag_names()
    assert set(found) == {"jax_setup.py"}, f"JAX flags named outside jax_setup.py: {found}"
    assert {"jax_enable_x64", "jax_compilation_cache_dir"} <= found["jax_setup.py"]


def test_the_name_check_finds_a_flag_named_elsewhere(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "jax_setup.py").write_text("FLAGS = ('jax_enable_x64',)\n")
    (pkg / "runtime.py").write_text("KEYS = ['jax_compilation_cache_dir', 'jax-not-a-flag']\n")
    assert _flag_names(pkg) == {"jax_setup.py": {"jax_enable_x64"},
                                "runtime.py": {"jax_compilation_cache_dir"}}  # fmt: skip
