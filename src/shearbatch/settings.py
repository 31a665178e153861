"""Deprecated: :mod:`shearbatch.settings` was renamed :mod:`shearbatch.strict_model` (issue 57); import that.

Importing this path gives that module and warns (:func:`shearbatch._deprecated.moved`); it
will be removed in a later release.
"""

# deprecation shim written by ci/rename_modules.py
from shearbatch._deprecated import moved

moved(__name__, "shearbatch.strict_model")
