"""The on-disk layout of a campaign: file names and what "complete" means.

``<output-dir>/<run_id>/`` holds ``truth.json``, ``posterior.nc`` and
``convergence.json``. Every file is written to a temporary name
(``.<name>.<host>.<pid>.<random>.tmp``) in the same directory and renamed into place;
``convergence.json`` is written last (and removed first when a directory is
redone). What "complete" means is :func:`inspect_realization`, the one definition
that the resume of ``bias-run`` and ``bias-extract`` share.

Stages 2 and 3 write into the campaign root (or where ``--output`` / ``--output-dir``
say): :data:`SUMMARY` (``bias-extract``'s table) and its population sidecar
(:func:`population_path`), :data:`BIAS_RESULTS`, :data:`REPORT` and the figures
(:data:`FIGURES`) under :data:`PLOTS` (``bias-stats``). Nothing else in the package knows
these names; every file is written by :mod:`shearbatch.io.atomic`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from ..core.convergence import Convergence
from . import integrity

__all__ = [
    "BIAS_RESULTS",
    "COMMANDS_FILE",
    "CONVERGENCE",
    "FIGURES",
    "FILES",
    "MANIFEST",
    "PLOTS",
    "POSTERIOR",
    "REPORT",
    "SUMMARY",
    "TRUTH",
    "Inspection",
    "campaign_manifest",
    "find_realization_dirs",
    "inspect_planned",
    "inspect_realization",
    "netcdf_problem",
    "population_path",
    "realization_status",
]

POSTERIOR, TRUTH, CONVERGENCE = "posterior.nc", "truth.json", "convergence.json"
FILES = (TRUTH, POSTERIOR, CONVERGENCE)
#: the campaign manifest (:mod:`.manifest`), in the directory holding its realizations
MANIFEST = "campaign.json"
#: bias-run appends its command line here, under the output root (provenance of a report)
COMMANDS_FILE = "commands.txt"

#: stage 2 (``bias-extract``): the summary table, one row per realization
SUMMARY = "summary.csv"
#: stage 3 (``bias-stats``): the typed result (:class:`shearbatch.analysis.result.BiasResult`),
#: the self-contained HTML report and the folder of figures
BIAS_RESULTS, REPORT, PLOTS = "bias_results.json", "report.html", "plots"
#: ``bias-stats``' figures under :data:`PLOTS`, in the report's order
FIGURES = ("stamps.png", "residuals.png", "coverage.png", "ranks.png", "worst_diagnostics.png")


def population_path(summary: str | Path) -> Path:
    """The population sidecar of a summary table: ``summary.csv`` -> ``summary.population.npz``."""
    p = Path(summary)
    return p.with_name(p.stem + ".population.npz")


class Inspection(NamedTuple):
    """What a realization directory holds, by the one definition of "complete" that the
    resume of ``bias-run`` and ``bias-extract`` share (:func:`inspect_realization`)."""

    status: str
    """``"done"``, ``"failed"``, ``"incomplete"``, ``"corrupt"`` or ``"absent"``."""
    reason: str
    """Why it is not done (empty when done)."""
    truth: dict[str, Any] | None
    """``truth.json``, parsed (None when missing or unreadable)."""
    convergence: Convergence | None
    """``convergence.json``'s record (None when missing or unreadable)."""


_HDF5 = b"\x89HDF\r\n\x1a\n"


def netcdf_problem(path: str | Path) -> str | None:
    """Why ``path`` is not a whole netCDF file, from its size and header alone (no full
    read: microseconds), or None. netCDF-4 files are HDF5 files whose superblock records
    the end-of-file address, so a truncated file is told by its size; a netCDF classic
    file is only checked for its signature."""
    p = Path(path)
    try:
        size = p.stat().st_size
        with open(p, "rb") as fh:
            head = fh.read(96)
    except OSError as err:
        return f"unreadable ({err.strerror})"
    if head[:3] == b"CDF" and len(head) >= 4 and head[3] in (1, 2, 5):
        return None
    if not head.startswith(_HDF5):
        return f"not a netCDF file (no HDF5 or CDF signature; {size} bytes)"
    version = head[8] if len(head) > 8 else -1
    if version in (0, 1):  # offsets' size at byte 13; base address after 24 (v1: 28) bytes
        so, base_at = (head[13] if len(head) > 13 else 0), 24 + 4 * version
    elif version in (2, 3):  # offsets' size at byte 9; base address at byte 12
        so, base_at = (head[9] if len(head) > 9 else 0), 12
    else:
        return f"truncated or unknown HDF5 superblock (version {version}; {size} bytes)"
    eof_at = base_at + 2 * so  # base, free-space/extension, end-of-file addresses
    if so not in (2, 4, 8) or len(head) < eof_at + so:
        return f"truncated ({size} bytes)"
    base = int.from_bytes(head[base_at : base_at + so], "little")
    eof = int.from_bytes(head[eof_at : eof_at + so], "little")
    if size < base + eof:
        return f"truncated ({size} of {base + eof} bytes)"
    return None


#: campaign.json path -> ((inode, mtime, size), what :func:`campaign_manifest` gives)
_MANIFESTS: dict[str, tuple[tuple[int, int, int], dict[str, Any] | str]] = {}


def campaign_manifest(home: str | Path) -> dict[str, Any] | str | None:
    """What :func:`.integrity.unchecked_problem` reads of the ``campaign.json`` in ``home``
    (its ``record_format`` and ``created_at``), None when there is none, or a string saying
    why it cannot be read. Parsed once per process while the file is unchanged (a resume
    asks for each of its planned realizations)."""
    path = os.path.join(home, MANIFEST)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as err:
        return str(err.strerror)
    key = (st.st_ino, st.st_mtime_ns, st.st_size)
    hit = _MANIFESTS.get(path)
    if hit is not None and hit[0] == key:
        return hit[1]
    got: dict[str, Any] | str
    try:
        doc, _ = _json(Path(path))
        got = {k: doc[k] for k in (integrity.FORMAT_KEY, "created_at") if k in doc}
    except OSError as err:
        got = str(err.strerror)
    except ValueError as err:
        got = f"not a JSON mapping ({err})"
    _MANIFESTS[path] = (key, got)
    return got


def _json(path: Path) -> tuple[dict[str, Any], bytes]:
    data = path.read_bytes()
    rec = json.loads(data)
    if not isinstance(rec, dict):
        raise ValueError("not a mapping")
    return rec, data


def inspect_realization(directory: str | Path, posterior_crc: bool = True) -> Inspection:
    """The state of one realization directory: ``absent``; ``corrupt`` (a file exists but
    is unreadable: a JSON file that does not parse, a ``posterior.nc`` whose size or header
    is wrong); ``incomplete`` (a file is missing: ``convergence.json`` is written last, so
    a directory without it was interrupted); ``failed`` (``convergence.json`` says so);
    ``done`` (status ok and all three files whole). A record with ``checksums``
    (:mod:`.integrity`) is ``corrupt`` also when one of them disagrees (its own, that of
    ``truth.json``, the size and CRC of the whole ``posterior.nc``) or when ``truth.json``
    names another run id or seed than the record; a record without them is ``corrupt``
    unless its campaign (the ``campaign.json`` beside its directory) predates checksums
    (:func:`.integrity.unchecked_problem`). Cheap: the two small JSON files are
    parsed, the posterior has its header checked (:func:`netcdf_problem`) and is read once
    for its CRC, without a netCDF open (``posterior_crc=False``: not read; ``bias-extract``
    checks each variable first, to name what is damaged, then the whole file).
    ``bias-run`` redoes anything not ``done`` or ``failed``; ``bias-extract`` reads only
    what is ``done`` and reports the rest with the same status and reason."""
    d = Path(directory)
    if not d.is_dir():
        return Inspection("absent", "no directory", None, None)
    truth = conv = truth_bytes = None
    if (d / TRUTH).is_file():
        try:
            truth, truth_bytes = _json(d / TRUTH)
        except (OSError, ValueError) as err:
            return Inspection("corrupt", f"truth.json unreadable: {err}", None, None)
    if not (d / CONVERGENCE).is_file():
        return Inspection("incomplete", "convergence.json missing (interrupted)", truth, None)
    try:
        raw, raw_bytes = _json(d / CONVERGENCE)
    except (OSError, ValueError) as err:
        return Inspection("corrupt", f"convergence.json unreadable: {err}", truth, None)
    conv = Convergence.from_json(raw)
    if raw.get("status") != "ok":
        why = str(conv.reason or f"status {raw.get('status')!r}")
        return Inspection("failed", why, truth, conv)
    if truth is None:
        return Inspection("incomplete", "truth.json missing", truth, conv)
    if not (d / POSTERIOR).is_file():
        return Inspection("incomplete", "posterior.nc missing", truth, conv)
    if problem := netcdf_problem(d / POSTERIOR):
        return Inspection("corrupt", f"posterior.nc {problem}", truth, conv)
    if problem := (integrity.truth_problem(truth, run_id=conv.run_id or None, seed=conv.seed)
                   or integrity.json_problem(raw, raw_bytes, truth_bytes)
                   or integrity.unchecked_problem(raw, lambda: campaign_manifest(d.absolute().parent))
                   or (posterior_crc and integrity.file_problem(d / POSTERIOR, raw))):  # fmt: skip
        return Inspection("corrupt", problem, truth, conv)
    return Inspection("done", "", truth, conv)


def inspect_planned(
    output_dir: str | Path, run_id: str, planned: Mapping[str, Any] | None = None
) -> Inspection:
    """:func:`inspect_realization` of ``output_dir / run_id``; with ``planned`` (the
    campaign plan's ``run_id``, ``seed``, ``g1``, ``g2`` of it) a ``done`` one whose
    ``truth.json`` says otherwise is ``corrupt``."""
    ins = inspect_realization(Path(output_dir) / run_id)
    if ins.status == "done" and planned and ins.truth is not None:
        if why := integrity.truth_problem(ins.truth, **{k: planned.get(k) for k in _PLANNED}):
            return ins._replace(status="corrupt", reason=f"{why} (the campaign's plan)")
    return ins


_PLANNED = ("run_id", "seed", "g1", "g2")


def realization_status(
    output_dir: str | Path,
    run_id: str,
    expect: Mapping[str, Any] | None = None,
    planned: Mapping[str, Any] | None = None,
) -> str:
    """:func:`inspect_planned`'s status (``"done"``, ``"failed"``, ``"incomplete"``,
    ``"corrupt"``, ``"absent"``), or ``"other"``: its ``convergence.json`` records a
    campaign-defining setting (a key of ``expect``: config hash, method, precision) with
    another value, so it is not this campaign's result and a resume redoes it."""
    ins = inspect_planned(output_dir, run_id, planned)
    rec = ins.convergence
    if expect and rec and any(getattr(rec, k, None) is not None and getattr(rec, k) != v
                              for k, v in expect.items()):  # fmt: skip
        return "other"
    return ins.status


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
