"""Deprecated: :mod:`shearbatch.core.flags` was renamed :mod:`shearbatch.core.failure_flags` (issue 57); import that.

Importing this path gives that module and warns (:func:`shearbatch._deprecated.moved`); it
will be removed in a later release.
"""

# deprecation shim written by ci/rename_modules.py
from shearbatch._deprecated import moved

moved(__name__, "shearbatch.core.failure_flags")
