"""The on-disk layout of a campaign: file names and what "complete" means.

``<output-dir>/<run_id>/`` holds ``truth.json``, ``posterior.nc`` and
``convergence.json``. Every file is written to a temporary name
(``.<name>.<host>.<pid>.<random>.tmp``) in the same directory and renamed into place;
``convergence.json`` is written last (and removed first when a directory is
redone), so a directory holding a readable one is complete. Nothing else in
the package knows these names.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "CONVERGENCE",
    "FILES",
    "POSTERIOR",
    "TRUTH",
    "find_realization_dirs",
    "realization_status",
]

POSTERIOR, TRUTH, CONVERGENCE = "posterior.nc", "truth.json", "convergence.json"
FILES = (TRUTH, POSTERIOR, CONVERGENCE)


def realization_status(
    output_dir: str | Path, run_id: str, expect: Mapping[str, Any] | None = None
) -> str:
    """``"done"`` (complete, status ok), ``"failed"``, ``"incomplete"``, ``"absent"``, or
    ``"other"``: complete, but its ``convergence.json`` records a campaign-defining
    setting (a key of ``expect``: config hash, method, precision) with another value, so
    it is not this campaign's result and a resume redoes it."""
    d = Path(output_dir) / run_id
    if not d.exists():
        return "absent"
    conv = d / CONVERGENCE
    if not conv.is_file():
        return "incomplete"
    try:
        rec = json.loads(conv.read_text())
        status = rec.get("status")
    except (OSError, ValueError, AttributeError):
        return "incomplete"
    if expect and any(rec.get(k) is not None and rec[k] != v for k, v in expect.items()):
        return "other"
    if status == "ok" and (d / POSTERIOR).is_file() and (d / TRUTH).is_file():
        return "done"
    return "failed" if status == "failed" else "incomplete"


def find_realization_dirs(root: str | Path) -> list[Path]:
    """Every realization directory under ``root`` (sorted): one holding any of
    :data:`FILES` or a temporary file of one; the search stops inside one."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        names = set(filenames)
        if any(f in names or any(n.startswith(f".{f}.") for n in names) for f in FILES):
            found.append(Path(dirpath))
            dirnames[:] = []
        else:
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
    return sorted(found)
