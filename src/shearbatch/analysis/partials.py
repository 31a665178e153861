"""Stage 2 by partials: each array task extracts its share, the reduction reads what is new.

``bias-extract --array-task-id i --array-task-count n`` (:func:`extract_slice`) reads the
completed realizations of slice ``i`` of the campaign's plan (the slice ``bias-run`` ran
with the same flags) and writes them as one partial, ``partials/task-<i>-of-<n>.nc``
(:mod:`shearbatch.io.partials`). ``bias-extract`` without them (:func:`gather`) is the
reduction: it takes each realization's row from the first partial (in name order) that is
undamaged (:func:`shearbatch.io.partials.verify`), was made with the same convergence
thresholds and holds it with its current key (:func:`shearbatch.io.partials.realization_key`);
every realization no partial holds so (new, redone, or in a damaged partial) is read from
its directory and written to a new partial (``partials/extract-<crc>.nc``, at most
:data:`GROUP` realizations each, so memory holds one group's draws), so a grown campaign
is read only where it grew. A realization is counted once, in one partial: the index
``summary.partials.json`` beside ``summary.csv`` names, per partial, its size and CRC-32
and the realizations whose galaxies the pooled fit takes from it
(:class:`shearbatch.analysis.streamed.PartialSource`).
"""

from __future__ import annotations

import json
import logging
import os
import zlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..io import partials as pio
from ..io.layout import CONVERGENCE, find_realization_dirs

__all__ = ["GROUP", "context", "extract_slice", "gather", "index_path", "write_index"]

logger = logging.getLogger(__name__)

#: realizations per partial written by the reduction (~50 MB of draws at Level 2)
GROUP = 1024


def index_path(summary: str | Path) -> Path:
    """The partials index of a summary table: ``summary.csv`` -> ``summary.partials.json``."""
    p = Path(summary)
    return p.with_name(p.stem + ".partials.json")


def context(thresholds: Any) -> dict[str, Any]:
    """What a partial's rows depend on besides its realizations: the convergence
    thresholds that gated them."""
    return {"thresholds": [float(x) for x in thresholds]}


def _read_keyed(args: tuple[list[str], Any]) -> list[tuple[dict[str, Any], int | None]]:
    """``(row, key)`` per directory, the key taken before the read (a realization redone
    meanwhile then reads as stale next time, never the other way)."""
    from .summary_table import read_realization

    dirs, th = args
    out = []
    for p in dirs:
        key = pio.realization_key(p)
        keep = key is not None  # in a partial: its draws, and what its read verified
        out.append((read_realization(p, th, keep_draws=keep, trusted=keep), key))
    return out


def _read(dirs: Sequence[Path], root: Path, thresholds: Any, workers: int,
          on_progress: Callable[[int], None] | None = None, chunk: int = 64):  # fmt: skip
    """``(row, key)`` of each directory in order (``path`` relative to ``root``), read by
    ``workers`` CPU-only processes."""
    from .summary_table import map_cpu_only, plan_chunks

    chunks, parallel = plan_chunks(dirs, workers, chunk)
    it = (map_cpu_only(_read_keyed, [(c, thresholds) for c in chunks], workers) if parallel
          else (_read_keyed((c, thresholds)) for c in chunks))  # fmt: skip
    at = 0
    for part in it:
        for row, key in part:
            row["path"] = str(dirs[at].relative_to(root)) or "."
            at += 1
            yield row, key
        if on_progress is not None:
            on_progress(len(part))


def _write_group(folder: Path, name: str, done: list, ctx: Mapping[str, Any]) -> Path:
    rows = [r for r, _ in done]
    keys = [k for _, k in done]
    return pio.write_partial(folder / name, rows, keys, ctx)


def extract_slice(root: str | Path, task_id: int, task_count: int, thresholds: Any,
                  workers: int = 1) -> tuple[Path, int]:  # fmt: skip
    """Write the partial of array task ``task_id`` of ``task_count``: the completed
    realizations (with a ``convergence.json``) of that slice of the campaign's plan.
    ``(path, realizations)``. ``ValueError`` without a plan (campaign.json)."""
    from ..campaign import array_slice
    from ..io.manifest import read_manifest

    root = Path(root)
    man = read_manifest(root)
    ids = [str(r) for r in ((man or {}).get("plan") or {}).get("run_ids") or []]
    if not ids:
        raise ValueError(f"no campaign plan (campaign.json with run_ids) in {root}")
    mine = array_slice(ids, task_id, task_count)
    dirs = [root / r for r in mine if (root / r / CONVERGENCE).is_file()]
    done = [(r, k) for r, k in _read(dirs, root, thresholds, workers) if k is not None]
    name = f"task-{task_id:05d}-of-{task_count:05d}.nc"
    path = _write_group(root / pio.PARTIALS, name, done, context(thresholds))
    logger.info("array task %d/%d: %d realization(s) -> %s", task_id, task_count, len(done), path)
    return path, len(done)


def gather(root: str | Path, thresholds: Any, workers: int = 1,
           on_progress: Callable[[int], None] | None = None,
           folder: str | Path | None = None) -> tuple[list[dict], dict]:  # fmt: skip
    """The reduction (module docstring): ``(rows, index)``, every realization directory's
    row in path order and the index :func:`write_index` writes; ``index["counts"]`` says
    how many rows came from partials, were read, and how many partials were damaged, rows
    stale or duplicated. New partials go to ``folder`` (default ``<root>/partials``; e.g.
    beside the summary when the campaign root is read-only), whose partials are read too."""
    root = Path(root)
    home = root / pio.PARTIALS
    folder = home if folder is None else Path(folder)
    ctx = context(thresholds)
    dirs = find_realization_dirs(root)
    rel = {os.path.normpath(os.path.relpath(d, root)): d for d in dirs}
    counts = {"from_partials": 0, "read": 0, "damaged_partials": 0, "stale": 0,
              "duplicates": 0, "other_thresholds": 0}  # fmt: skip
    assigned: dict[str, tuple[int, int]] = {}
    parts: list[pio.Partial] = []
    keys: dict[str, int | None] = {}
    found = sorted(home.glob("*.nc"))
    if folder.resolve() != home.resolve():
        found += sorted(folder.glob("*.nc"))
    for path in found:
        why = pio.verify(path)
        part = None
        if why is None:
            try:
                part = pio.Partial(path)
            except Exception as err:  # netCDF4/HDF5 raise many types for a damaged file
                why = f"unreadable: {type(err).__name__}: {err}"
        if part is None:
            counts["damaged_partials"] += 1
            logger.warning("partial %s is damaged (%s): its realizations are read again", path,
                           why)  # fmt: skip
            continue
        if part.context != ctx:
            counts["other_thresholds"] += 1
            logger.info("partial %s was made with other thresholds: its realizations are read "
                        "again", path)  # fmt: skip
            continue
        pi = len(parts)
        parts.append(part)
        for i, row in enumerate(part.rows):
            r = os.path.normpath(str(row.get("path")))
            if r not in rel:
                continue  # a directory since removed
            if r in assigned:
                counts["duplicates"] += 1
                continue
            if r not in keys:
                keys[r] = pio.realization_key(rel[r])
            if keys[r] is not None and keys[r] == int(part.keys[i]):
                assigned[r] = (pi, i)
            else:
                counts["stale"] += 1
    if counts["duplicates"]:
        logger.warning("%d realization(s) found in more than one partial: each counted once",
                       counts["duplicates"])  # fmt: skip
    if counts["stale"]:
        logger.info("%d realization(s) changed since their partial was written: read again",
                    counts["stale"])  # fmt: skip
    counts["from_partials"] = len(assigned)
    if on_progress is not None and assigned:
        on_progress(len(assigned))
    fresh = [d for r, d in rel.items() if r not in assigned]
    loose: list[dict[str, Any]] = []  # rows of realizations not complete: never in a partial
    group: list = []

    def flush() -> None:
        if not group:
            return
        crc = zlib.crc32("\n".join(r["path"] for r, _ in group).encode())
        p = _write_group(folder, f"extract-{crc:08x}.nc", group, ctx)
        part = pio.Partial(p)
        pi = len(parts)
        parts.append(part)
        for i, row in enumerate(part.rows):
            assigned[os.path.normpath(row["path"])] = (pi, i)
        group.clear()

    for row, key in _read(fresh, root, thresholds, workers, on_progress):
        counts["read"] += 1
        if key is None:
            loose.append(row)
            continue
        group.append((row, key))
        if len(group) >= GROUP:
            flush()
    flush()
    rows = [parts[pi].rows[i] for pi, i in assigned.values()] + loose
    rows.sort(key=lambda r: str(r.get("path")))
    use: dict[int, list[int]] = {}
    for pi, i in assigned.values():
        use.setdefault(pi, []).append(i)
    entries = []
    for pi in sorted(use):
        rec = json.loads(pio.sum_path(parts[pi].path).read_text())
        entries.append({"path": str(parts[pi].path), "size": rec["size"], "crc32": rec["crc32"],
                        "use": sorted(use[pi])})  # fmt: skip
    return rows, {"format": pio.FORMAT, "partials": entries, "counts": counts}


def write_index(index: Mapping[str, Any], path: str | Path) -> Path | None:
    """The index at ``path`` with each partial's path relative to it; None (a stale index
    removed) when no partial holds galaxies."""
    from ..io import atomic

    path = Path(path)
    entries = []
    for e in index["partials"]:
        rel = os.path.relpath(Path(e["path"]).resolve(), path.parent.resolve())
        entries.append({**e, "path": rel})
    if not entries:
        path.unlink(missing_ok=True)
        return None
    doc = {"format": index["format"], "partials": entries, "counts": index.get("counts", {})}
    return atomic.write_text(path, json.dumps(doc))
