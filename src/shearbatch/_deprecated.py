"""Old module paths that keep working after a rename, with a warning (issue 57).

A shim left at the old path (written by ``ci/rename_modules.py``) calls :func:`moved`, which
warns and puts the new module in ``sys.modules`` under the old name: every name of the new
module, in ``__all__`` or not, is then the same object under both paths.
"""

from __future__ import annotations

import importlib
import sys
import warnings

__all__ = ["moved"]


def moved(old: str, new: str) -> None:
    """Make the module ``old`` (being imported) the module ``new``, with a
    ``DeprecationWarning`` that names both."""
    warnings.warn(f"{old} is deprecated: import {new}", DeprecationWarning, stacklevel=3)
    sys.modules[old] = importlib.import_module(new)
