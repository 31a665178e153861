"""The installed package's version, in a module of its own: the modules that record it
(writer, manifest, engine, CLI) import it from here, not from the package's
``__init__``, whose lazy attributes import the API (which would close an import cycle).

:func:`code_version` is the code that writes a realization, recorded in each
``convergence.json`` (``code``) and in ``campaign.json``: the git commit of the checkout the
package runs from, whether the package's files differ from it, and a fingerprint of the
code that computes a result. Computed once per process (two ``git`` calls and one read of
the package's ``.py`` files: a few milliseconds).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

__all__ = ["RESULTS_CODE_EXCLUDED", "__version__", "code_version"]

logger = logging.getLogger(__name__)

try:
    __version__ = version("shearbatch")
except PackageNotFoundError:  # pragma: no cover - source tree without install
    __version__ = "0.0.0+unknown"

#: what the method-code fingerprint leaves out: the package's parts that do not compute a
#: realization's result (reading and summarising results, the command line, storage) and
#: this module; every other ``.py`` file of the package is in it, comments included
RESULTS_CODE_EXCLUDED = ("analysis/", "app/", "cli/", "io/", "_version.py", "__main__.py")

_PACKAGE = Path(__file__).resolve().parent


def _git(*args: str) -> str | None:
    """``git -C <package dir> args``'s output, None when git fails or is absent; read-only
    (``GIT_OPTIONAL_LOCKS=0``: no index refresh written, so concurrent tasks do not
    contend for its lock)."""
    try:
        out = subprocess.run(["git", "-C", str(_PACKAGE), *args], capture_output=True,
                             text=True, timeout=30, check=True,
                             env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"})  # fmt: skip
    except (OSError, subprocess.SubprocessError) as err:
        logger.debug("git %s: %s", " ".join(args), err)
        return None
    return out.stdout


def fingerprint(root: Path = _PACKAGE) -> str:
    """16 hex digits of the SHA-256 of the package's results code (its ``.py`` files but
    :data:`RESULTS_CODE_EXCLUDED`, each with its path relative to ``root``)."""
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(RESULTS_CODE_EXCLUDED):
            continue
        h.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


@functools.cache
def code_version() -> dict[str, Any]:
    """``{"commit", "dirty", "fingerprint"}`` of the running package, once per process:

    - ``commit``: HEAD of the git checkout holding the package (40 hex digits), None when
      the package is not a tracked file of a git checkout (an installed wheel) or git is
      absent;
    - ``dirty``: whether the package's files (tracked or untracked, not ignored) differ
      from that commit; None without a commit;
    - ``fingerprint``: :func:`fingerprint`, what tells two versions whose results may
      differ apart (two commits with the same fingerprint compute the same results).
    """
    commit = dirty = None
    if _git("ls-files", "--error-unmatch", "--", "__init__.py") is not None:
        status = _git("status", "--porcelain=v2", "--branch", "--untracked-files=normal",
                      "--", ".")  # fmt: skip
        if status is not None:
            heads = [ln.split()[2] for ln in status.splitlines() if ln.startswith("# branch.oid ")]
            if heads and heads[0] != "(initial)":
                commit = heads[0]
                dirty = any(not ln.startswith("#") for ln in status.splitlines() if ln.strip())
    out = {"commit": commit, "dirty": dirty, "fingerprint": fingerprint()}
    if dirty:
        logger.info("shearbatch runs from %s with uncommitted changes to its files "
                    "(recorded: dirty, method-code fingerprint %s)", _PACKAGE, out["fingerprint"])  # fmt: skip
    else:
        logger.debug("shearbatch code version: %s", out)
    return out
