"""Sphinx configuration of the shearbatch documentation (MyST Markdown, furo theme).

Build: ``make docs`` (``sphinx-build -W --keep-going -b html docs docs/_build/html``,
warnings are errors). The API reference is autodoc of the package's docstrings.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))  # a clean clone builds without an install too
os.environ.setdefault("JAX_PLATFORMS", "cpu")  # importing the package never needs a GPU

from shearbatch._version import __version__  # noqa: E402

project = "shearbatch"
author = "shearbatch developers"
copyright = "shearbatch developers"
release = version = __version__

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "**.ipynb_checkpoints"]

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "undoc-members": False}
napoleon_google_docstring = False
napoleon_numpy_docstring = True

html_theme = "furo"
html_title = f"shearbatch {version}"
