"""Deprecated: :mod:`shearbatch.core.arrow` was renamed :mod:`shearbatch.core.block_arrow` (issue 57); import that.

This module re-exports it and warns on import; it will be removed in a later release.
"""

# deprecation shim written by ci/rename_modules.py
import warnings
from typing import Any

from . import block_arrow as _new
from .block_arrow import *  # noqa: F403
from .block_arrow import __all__  # noqa: F401

warnings.warn(
    "shearbatch.core.arrow is deprecated: import shearbatch.core.block_arrow",
    DeprecationWarning,
    stacklevel=2,
)


def __getattr__(name: str) -> Any:  # the names block_arrow does not list in __all__
    return getattr(_new, name)
