"""Deprecated: :mod:`shearbatch.settings` was renamed :mod:`shearbatch.strict_model` (issue 57); import that.

This module re-exports it and warns on import; it will be removed in a later release.
"""

# deprecation shim written by ci/rename_modules.py
import warnings
from typing import Any

from . import strict_model as _new
from .strict_model import *  # noqa: F403
from .strict_model import __all__  # noqa: F401

warnings.warn(
    "shearbatch.settings is deprecated: import shearbatch.strict_model",
    DeprecationWarning,
    stacklevel=2,
)


def __getattr__(name: str) -> Any:  # the names strict_model does not list in __all__
    return getattr(_new, name)
