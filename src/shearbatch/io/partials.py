"""Extraction partials: a share of a campaign's stage 2, summarised where it was computed.

A *partial* (``<campaign root>/partials/<name>.nc``) holds, for a set of realization
directories (an array task's slice, ``bias-extract --array-task-id``, or what a reduction
found new), their ``summary.csv`` rows and the pooled fit's per-galaxy inputs: each
interim-model galaxy's observed-ellipticity draws ``eps`` (G, K, 2) and relative log
weights ``log_base`` (G, K), float32, NaN-padded to the largest K
(:func:`shearbatch.analysis.summary_table.compact_draws`). ``bias-extract`` then reads the
partials instead of the realizations, and ``bias-stats`` streams their galaxies a block
at a time (:mod:`shearbatch.analysis.streamed`), so neither holds a campaign's draws.

**Format: netCDF-4 (HDF5).** It is already the campaign's format (``posterior.nc``), read
by xarray, h5py, netCDF tools and every language the field uses; its variables are chunked
along the galaxy axis (a block is read without the rest) and each chunk carries HDF5's
Fletcher-32 checksum, verified on every read. Zarr would add a dependency and a directory
of many small files per partial (a burden on the parallel file systems array jobs write
to); Arrow/Parquet a large dependency (pyarrow) and no native N-D arrays (the draws are
(G, K, 2)). An ``.npz`` is neither chunked nor checked.

**Self-checking.** Beside each partial, ``<name>.nc.sum.json`` records its size and CRC-32
(written after the partial is complete and in place: a partial without one was cut short).
:func:`verify` recomputes both; a mismatch, a missing or unreadable sum, or a file netCDF
cannot open makes the partial *damaged*: its realizations are read again from their
directories. Inside, each realization is tied to what it was extracted from by its
*key* (:func:`realization_key`): the CRC-32 of its ``convergence.json`` (which holds the
checksums of its ``posterior.nc`` and ``truth.json``) with the size and modification time
of those two files. A realization whose key changed (redone, resumed, repaired) is *stale*
in every partial and is read again; a realization in two partials (a copy under another
name, an overlap of slices) is counted once (:func:`shearbatch.analysis.partials.gather`).

**What each realization was trusted as.** The key (sizes and modification times) does not
see a byte changed in place with its time put back. So a partial records too, per
realization read ``ok``, the content checksums its read verified (variable
``trusted_json``, :attr:`Partial.trusted`: ``{"convergence.json": <its record checksum>,
"truth.json": <CRC>, "posterior.nc": {"bytes", "crc32"}}``, the values of its record's
``checksums`` that the file's bytes then matched; null for a row not ``ok``). The scrub,
``bias-extract --verify`` (:mod:`shearbatch.analysis.scrub`), reads every file again and
tells damage since extraction (the content no longer matches what a partial trusted) from
damage that was there before. A partial from before this variable has none (``trusted``
None): its realizations read as never trusted.
"""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import zlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from . import atomic
from .layout import CONVERGENCE, POSTERIOR, TRUTH

__all__ = [
    "FORMAT",
    "PARTIALS",
    "Partial",
    "file_crc",
    "realization_key",
    "sum_path",
    "verify",
    "write_partial",
]

logger = logging.getLogger(__name__)

#: the format tag every partial carries (attribute ``format``)
FORMAT = "shearbatch-partial/1"
#: the partials' folder under the campaign root
PARTIALS = "partials"
#: galaxies per chunk of the draw variables (~1.9 MB of eps at 200 draws)
CHUNK_GALAXIES = 1024


def sum_path(path: str | Path) -> Path:
    """The checksum record of a partial: ``<name>.nc`` -> ``<name>.nc.sum.json``."""
    p = Path(path)
    return p.with_name(p.name + ".sum.json")


def file_crc(path: str | Path, block: int = 1 << 24) -> tuple[int, int]:
    """``(size, CRC-32)`` of a file, read ``block`` bytes at a time."""
    crc, size = 0, 0
    with open(path, "rb") as fh:
        while chunk := fh.read(block):
            crc = zlib.crc32(chunk, crc)
            size += len(chunk)
    return size, crc


def realization_key(directory: str | Path) -> int | None:
    """What ties a realization to its partial: the CRC-32 of its ``convergence.json``
    bytes with the size and modification time (ns) of its ``posterior.nc`` and
    ``truth.json``; None without a ``convergence.json`` (not complete: never in a
    partial)."""
    d = Path(directory)
    try:
        crc = zlib.crc32((d / CONVERGENCE).read_bytes())
    except OSError:
        return None
    for name in (POSTERIOR, TRUTH):
        try:
            st = os.stat(d / name)
            crc = zlib.crc32(f"{st.st_size}:{st.st_mtime_ns}".encode(), crc)
        except OSError:
            crc = zlib.crc32(b"missing", crc)
    return crc


def _json_default(o: Any) -> Any:
    if hasattr(o, "item"):
        return o.item()
    return str(o)


def write_partial(
    path: str | Path,
    rows: Sequence[Mapping[str, Any]],
    keys: Sequence[int],
    context: Mapping[str, Any],
) -> Path:
    """Write ``rows`` (summary rows, their compact draws under ``_population``; ``path``
    relative to the campaign root) as a partial at ``path`` with their ``keys``
    (:func:`realization_key`) and ``context`` (what the rows depend on besides the
    realizations: the convergence thresholds), then its checksum record. The partial is
    written to a temporary name and moved into place; the record last."""
    import netCDF4

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if len(rows) != len(keys):
        raise ValueError("write_partial: one key per row")
    plain = [{k: v for k, v in r.items() if k not in ("_population", "_trusted")} for r in rows]
    trusted = json.dumps([r.get("_trusted") for r in rows]).encode()
    pops = [(i, r["_population"]) for i, r in enumerate(rows) if r.get("_population")]
    n_gal = sum(int(np.shape(p["eps"])[0]) for _, p in pops)
    k = max((int(np.shape(p["eps"])[1]) for _, p in pops), default=1)
    popjson = {json.dumps([dict(q) for q in p["population"]]) for _, p in pops}
    if len(popjson) > 1:
        raise ValueError(
            f"interim realizations with different population priors: {sorted(popjson)}"
        )
    text = json.dumps(plain, default=_json_default, allow_nan=True).encode()
    sum_path(path).unlink(missing_ok=True)  # an old record must not vouch for new bytes
    try:
        with atomic.replacing(path) as tmp:
            with netCDF4.Dataset(tmp, "w", format="NETCDF4") as ds:
                ds.setncattr("format", FORMAT)
                ds.setncattr("context", json.dumps(context, sort_keys=True))
                ds.setncattr("population", popjson.pop() if popjson else "")
                ds.createDimension("realization", len(rows))
                ds.createDimension("galaxy", n_gal)
                ds.createDimension("draw", k)
                ds.createDimension("component", 2)
                ds.createDimension("text", len(text))
                opts = {"fletcher32": True}
                v = ds.createVariable("rows_json", "u1", ("text",), chunksizes=(max(1, min(
                    len(text), 1 << 22)),), **opts)  # fmt: skip
                v[:] = np.frombuffer(text, np.uint8)
                ds.createDimension("trusted_text", len(trusted))
                v = ds.createVariable("trusted_json", "u1", ("trusted_text",), chunksizes=(
                    max(1, min(len(trusted), 1 << 22)),), **opts)  # fmt: skip
                v[:] = np.frombuffer(trusted, np.uint8)
                v = ds.createVariable("key", "u4", ("realization",), **opts)
                v[:] = np.asarray(keys, np.uint32)
                cg = max(1, min(CHUNK_GALAXIES, n_gal))
                real = ds.createVariable(
                    "realization_of", "i4", ("galaxy",), chunksizes=(cg,), **opts
                )
                gal = ds.createVariable("galaxy_index", "i4", ("galaxy",), chunksizes=(cg,), **opts)
                eps = ds.createVariable("eps", "f4", ("galaxy", "draw", "component"),
                                        chunksizes=(cg, k, 2), fill_value=False, **opts)  # fmt: skip
                lb = ds.createVariable("log_base", "f4", ("galaxy", "draw"), chunksizes=(cg, k),
                                       fill_value=False, **opts)  # fmt: skip
                at = 0
                for i, p in pops:
                    e = np.asarray(p["eps"], np.float32)
                    b = np.asarray(p["log_base"], np.float32)
                    m, kk = e.shape[0], e.shape[1]
                    if kk < k:  # NaN-padded to the largest K
                        e = np.concatenate([e, np.full((m, k - kk, 2), np.nan, np.float32)], 1)
                        b = np.concatenate([b, np.full((m, k - kk), np.nan, np.float32)], 1)
                    eps[at : at + m] = e
                    lb[at : at + m] = b
                    real[at : at + m] = i
                    gal[at : at + m] = np.arange(m, dtype=np.int32)
                    at += m
    except RuntimeError as err:  # netCDF-C's own errors (a full disk: "NetCDF: HDF error")
        raise OSError(errno.EIO, f"netCDF: {err}", str(path)) from err
    size, crc = file_crc(path)
    atomic.write_text(sum_path(path), json.dumps({"format": FORMAT, "size": size, "crc32": crc}))
    return path


def verify(path: str | Path) -> str | None:
    """Why the partial at ``path`` cannot be trusted (one line), or None: its checksum
    record missing or unreadable, its size or CRC-32 not the recorded ones."""
    p = Path(path)
    try:
        rec = json.loads(sum_path(p).read_text())
        want_size, want_crc = int(rec["size"]), int(rec["crc32"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        return f"no valid checksum record ({type(err).__name__}): written incompletely"
    try:
        size, crc = file_crc(p)
    except OSError as err:
        return f"unreadable: {err}"
    if size != want_size:
        return f"size {size} bytes, recorded {want_size}"
    if crc != want_crc:
        return f"CRC-32 {crc:08x}, recorded {want_crc:08x}"
    return None


class Partial:
    """An open partial (:func:`verify` it first): its run ids, keys and context in memory
    (small), its summary rows (:attr:`rows`, parsed on demand and kept only with
    ``keep_rows``: the streamed fit needs the run ids alone, and a campaign's rows as
    Python dicts are the one thing that would grow its memory with the realizations), its
    galaxies read a block at a time (:meth:`blocks`)."""

    def __init__(self, path: str | Path, *, keep_rows: bool = True):
        import netCDF4

        self.path = Path(path)
        with netCDF4.Dataset(self.path, "r") as ds:
            if ds.getncattr("format") != FORMAT:
                raise ValueError(f"not a {FORMAT} file: format {ds.getncattr('format')!r}")
            self.context = json.loads(ds.getncattr("context"))
            self.population = ds.getncattr("population") or None
            rows = _rows(ds)
            self.keys = np.asarray(ds["key"][:], np.int64)
            self.n_galaxies = int(ds.dimensions["galaxy"].size)
            self.n_draws = int(ds.dimensions["draw"].size)
        self.run_ids: list[str] = [str(r["run_id"]) for r in rows]
        self.n_realizations = len(rows)
        self._rows: list[dict[str, Any]] | None = rows if keep_rows else None

    @property
    def realization_of(self) -> np.ndarray:
        """(G,) int32: each galaxy's realization (an index into :attr:`run_ids`), read from
        the file on each access: not kept, since a campaign's partials open together would
        otherwise hold 4 bytes per galaxy of the campaign (issue 43's memory bound)."""
        import netCDF4

        with netCDF4.Dataset(self.path, "r") as ds:
            # int32: a partial holds one array task's realizations, never 2**31 of them
            return np.asarray(ds["realization_of"][:], np.int32)

    @property
    def trusted(self) -> list[dict[str, Any] | None] | None:
        """Per row, the content checksums its extraction verified (module docstring; None
        for a row not ``ok``), read from the file on each access; None for a partial written
        before they were recorded."""
        import netCDF4

        with netCDF4.Dataset(self.path, "r") as ds:
            if "trusted_json" not in ds.variables:
                return None
            text = np.asarray(ds["trusted_json"][:], np.uint8).tobytes()
        got = json.loads(text)
        return got if isinstance(got, list) and len(got) == self.n_realizations else None

    @property
    def rows(self) -> list[dict[str, Any]]:
        """The summary rows (read again from the file when not kept)."""
        if self._rows is not None:
            return self._rows
        import netCDF4

        with netCDF4.Dataset(self.path, "r") as ds:
            return _rows(ds)

    def blocks(
        self, galaxies: int, select: np.ndarray | None = None
    ) -> Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
        """``(start, realization_of, eps, log_base)`` per block of at most ``galaxies``
        galaxies, in order; ``select`` (G,) bool: blocks without a selected galaxy are not
        read. The arrays are the block's (float32 draws; the caller selects)."""
        import netCDF4

        n = self.n_galaxies
        if n == 0:
            return
        with netCDF4.Dataset(self.path, "r") as ds:
            ds.set_auto_mask(False)
            for a in range(0, n, galaxies):
                b = min(n, a + galaxies)
                if select is not None and not select[a:b].any():
                    continue
                ro = np.asarray(ds["realization_of"][a:b], np.int32)
                yield a, ro, ds["eps"][a:b], ds["log_base"][a:b]


def _rows(ds: Any) -> list[dict[str, Any]]:
    """The partial's summary rows (JSON has no NaN-free floats: None stays None, NaN comes
    back)."""
    rows: list[dict[str, Any]] = json.loads(np.asarray(ds["rows_json"][:], np.uint8).tobytes())
    for r in rows:
        for key, val in r.items():
            if isinstance(val, float) and math.isnan(val):
                r[key] = math.nan
    return rows
