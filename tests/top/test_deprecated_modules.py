"""The module paths renamed in issue 57 that were public keep working, with a warning:
``shearbatch.settings`` (now :mod:`shearbatch.strict_model`), ``shearbatch.core.arrow``
(:mod:`shearbatch.core.block_arrow`) and ``shearbatch.core.flags``
(:mod:`shearbatch.core.failure_flags`), the three a method's author imports
(docs/design.md, tests/core/test_method_plugin.py). Each is a shim written by
ci/rename_modules.py: importing it warns and gives the new module itself
(shearbatch._deprecated.moved), names outside ``__all__`` included."""

import importlib
import sys

import pytest

RENAMED = [
    ("shearbatch.settings", "shearbatch.strict_model", ["StrictModel", "Positive", "Count"]),
    ("shearbatch.core.arrow", "shearbatch.core.block_arrow", ["Arrow", "Layout", "factor"]),
    ("shearbatch.core.flags", "shearbatch.core.failure_flags", ["flag", "Gates", "FATAL"]),
]


@pytest.mark.parametrize(("old", "new", "names"), RENAMED)
def test_an_old_path_warns_and_gives_the_new_modules_objects(old, new, names):
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} is deprecated: import {new}"):
        shim = importlib.import_module(old)
    module = importlib.import_module(new)
    assert set(shim.__all__) == set(module.__all__)
    for name in names:
        assert getattr(shim, name) is getattr(module, name)


def test_no_module_of_the_package_imports_an_old_path():
    """ci/rename_modules.py --check: nothing left to rename or rewrite."""
    import subprocess
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "ci" / "rename_modules.py"
    out = subprocess.run([sys.executable, str(script), "--check"], capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
