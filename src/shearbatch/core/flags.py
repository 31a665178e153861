"""Deprecated: :mod:`shearbatch.core.flags` was renamed :mod:`shearbatch.core.failure_flags` (issue 57); import that.

This module re-exports it and warns on import; it will be removed in a later release.
"""

# deprecation shim written by ci/rename_modules.py
import warnings
from typing import Any

from . import failure_flags as _new
from .failure_flags import *  # noqa: F403
from .failure_flags import __all__  # noqa: F401

warnings.warn(
    "shearbatch.core.flags is deprecated: import shearbatch.core.failure_flags",
    DeprecationWarning,
    stacklevel=2,
)


def __getattr__(name: str) -> Any:  # the names failure_flags does not list in __all__
    return getattr(_new, name)
