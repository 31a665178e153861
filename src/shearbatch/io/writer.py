"""Per-realization output files, written atomically, and reading them back.

``<output-dir>/<run_id>/``:

- ``truth.json``: true g1, g2, seed, run_id, per-galaxy truths, noise sigma.
- ``posterior.nc``: ArviZ InferenceData layout in netCDF4 (one group each):
  ``posterior`` (``g1``, ``g2`` with dims exactly (chain, draw); per-galaxy
  latents with dims (chain, draw, galaxy)), ``sample_stats`` (chain, draw; a per-galaxy
  statistic, e.g. ``interim_log_weight``, (chain, draw, galaxy)),
  ``observed_data`` (``obs`` with dims (galaxy, y, x)); ``chain``, ``draw`` and
  ``galaxy`` coordinate variables; ``units`` and ``long_name`` on the variables
  of :mod:`shearbatch.io.variables`; float variables carry ``_FillValue = NaN``
  (what xarray writes). Root attrs: inference_method, run_id, seed, g1_true,
  g2_true, batch_size, shearbatch version, config hash. The bytes are those netCDF4
  writes (measured ~2.5x cheaper per file than building an xarray DataTree,
  ``bench/bench_throughput.py``); the file reads back with ``xarray.open_datatree``
  and ``arviz.from_netcdf`` exactly as before. Every file of one structure (the same
  variables, shapes, dtypes, attribute names, types and lengths) but the first of each
  in a process is made from a template of that structure instead (:mod:`.nctemplate`:
  netCDF-C's bytes with the file's values and HDF5's metadata checksums put in, ~0.1
  ms instead of netCDF-C and HDF5's ~1.5-2 ms of creating and closing the file); the
  template is kept only if it gives the first file's bytes exactly, netCDF4 writes
  the rest (values a template does not take: non-ASCII text, empty arrays, ...).
  Written once, from memory, its whole-file checksum computed from the same bytes.
- ``convergence.json``: a :class:`~shearbatch.core.convergence.Convergence` record
  (method-aware diagnostics and ``status``, "ok" or "failed" with a ``reason``);
  strict JSON (non-finite numbers become null). A record gets ``checksums`` of the three
  files (:mod:`.integrity`: each posterior variable's bytes, the whole posterior.nc,
  truth.json, the record itself), by which damaged files are told on read.

Every file goes to a temporary name ``.<name>.<host>.<pid>.<random>.tmp`` in the
same directory, created with the user's umask, and is renamed into place;
``convergence.json`` is written last (and removed first when a directory is
redone), so a directory holding it is complete. A write that fails removes what
it wrote of that realization (it is then absent, not half there). A process
killed mid-write leaves its temporary file behind; :func:`clean_orphans` removes
those whose host is this one and whose pid is no longer alive (provably not in
use by a running writer).

:class:`WriterPool` writes in background threads (or spawned processes) through a
bounded queue, so the engine computes the next batch while this one is written.
"""

from __future__ import annotations

import concurrent.futures as cf
import gc
import json
import logging
import math
import multiprocessing
import os
import queue
import signal
import sys
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import numpy as np

from .._version import __version__
from ..core.convergence import Convergence
from . import atomic, integrity, nctemplate
from .integrity import array_checksum
from .layout import CONVERGENCE, FILES, POSTERIOR, TRUTH
from .variables import VARIABLES

__all__ = [
    "RawJSON",
    "Record",
    "SerialWriter",
    "Sink",
    "WriteError",
    "WriterPool",
    "clean_orphans",
    "dumps_json",
    "raw_json",
    "read_json",
    "read_posterior",
    "to_strict_json",
    "write_json",
    "write_realization",
    "write_record",
]

logger = logging.getLogger(__name__)

#: netCDF-C and HDF5 are not thread-safe: one netCDF file is written at a time per process
_NC_LOCK = threading.Lock()


class Record(NamedTuple):
    """What one realization's files hold (:func:`write_realization`'s arguments): the
    posterior draws and per-draw statistics, the observed stamps and root attributes of
    ``posterior.nc``, ``truth.json``, and the convergence record."""

    posterior: Mapping[str, np.ndarray]
    sample_stats: Mapping[str, np.ndarray]
    observed: np.ndarray
    attrs: Mapping[str, Any]
    truth: Mapping[str, Any]
    convergence: Convergence | Mapping[str, Any]


class WriteError(RuntimeError):
    """A realization could not be written (disk full, directory unwritable, ...): one line."""


class RawJSON(str):
    """Text already encoded as strict JSON (:func:`dumps_json`'s compact form), written as
    it is when it is a top-level value of a record :func:`dumps_json` writes: what every
    realization's record repeats (the campaign's provenance: its config, plan, versions) is
    encoded once per campaign (:func:`raw_json`), not once per file."""

    __slots__ = ()


def raw_json(obj: Any) -> RawJSON:
    """``obj`` encoded once as :func:`dumps_json` encodes a top-level value."""
    return RawJSON(_ENCODE(to_strict_json(obj)))


def to_strict_json(obj: Any) -> Any:
    """Recursively convert numpy types; NaN and +-inf become ``None``."""
    t = type(obj)  # the plain types first: exact type checks are cheap, ABC checks are not
    if t is str or t is int or t is bool or obj is None:
        return obj
    if t is float:
        return obj if math.isfinite(obj) else None
    if t is dict:
        return {k if type(k) is str else str(k): to_strict_json(v) for k, v in obj.items()}
    if t is list or t is tuple:
        return [to_strict_json(v) for v in obj]
    if isinstance(obj, Mapping):
        return {str(k): to_strict_json(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_strict_json(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return to_strict_json(obj.tolist())
    if isinstance(obj, np.bool_ | bool):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating | float):
        v = float(obj)
        return v if math.isfinite(v) else None
    return obj


# --------------------------------------------------------------------------- atomic files


def _atomic_write(path: str | Path, write, parent: bool = True) -> None:
    """``write(tmp)`` (``tmp``: a ``str``) then rename over ``path`` (:func:`.atomic.put_with`), without an
    fsync per file: kill-safe (whole or absent), and a file a crash left damaged fails its
    checksum (:mod:`.integrity`) and is redone on resume. ``parent=False``: the directory
    exists (not made again)."""
    atomic.put_with(os.fspath(path), write, durable=False, parent=parent)


def clean_orphans(directory: str | Path) -> int:
    """Remove the temporary files in ``directory`` left by killed writers of THIS host
    (their pid is dead); returns how many. Files of other hosts or of live processes
    (a concurrent task) are left alone (:func:`.atomic.remove_orphans`)."""
    return atomic.remove_orphans(directory, FILES)


def dumps_json(obj: Any) -> str:
    """Strict JSON text of ``obj`` (:func:`to_strict_json`): one top-level key per line,
    each value on its line in compact form. ``json.dumps`` with ``indent`` runs the
    pure-Python encoder; this form uses the C encoder (measured 3-4x cheaper per file)
    and stays readable by eye and by ``json.load``. A top-level value that is a
    :class:`RawJSON` is written as it is."""
    obj = to_strict_json(obj)
    if not isinstance(obj, dict) or not obj:
        return json.dumps(obj, allow_nan=False) + "\n"
    enc = _ENCODE
    items = ",\n".join(f"  {enc(k)}: {v if type(v) is RawJSON else enc(v)}"
                        for k, v in obj.items())  # fmt: skip
    return "{\n" + items + "\n}\n"


_ENCODE = json.JSONEncoder(allow_nan=False, separators=(", ", ": ")).encode


def write_json(path: Path, obj: Any, parent: bool = True) -> str:
    """Write ``obj`` (:func:`dumps_json`) atomically at ``path``; returns the text written."""
    return _write_text(path, dumps_json(obj), parent)


def _write_text(path: str | Path, text: str, parent: bool = True) -> str:
    """``text`` (UTF-8) at ``path`` as :func:`_atomic_write` writes (one descriptor: the
    temporary file's own)."""
    atomic.put_bytes(os.fspath(path), text.encode(), durable=False, parent=parent)
    return text


# --------------------------------------------------------------------------- posterior.nc


def _dims(name: str, arr: np.ndarray, lead: tuple[str, ...]) -> tuple[str, ...]:
    extra = arr.ndim - len(lead)
    if extra == 0:
        return lead
    if extra == 1:
        return (*lead, "galaxy")
    raise ValueError(f"{name}: unexpected shape {arr.shape}")


class _Var(NamedTuple):
    """One variable of ``posterior.nc`` as it is stored (:func:`_variable`)."""

    name: str
    dims: tuple[str, ...]
    data: np.ndarray
    attrs: dict[str, Any]
    fill: np.ndarray | None


class _Group(NamedTuple):
    """One group of ``posterior.nc``: its attributes, dimensions, data variables and
    coordinate variables."""

    name: str
    attrs: dict[str, Any]
    dims: dict[str, int]
    variables: list[_Var]
    coords: list[_Var]


def _variable(name: str, data: np.ndarray, dims: tuple[str, ...]) -> _Var:
    """One variable as xarray encodes it: floats with ``_FillValue = NaN``, booleans as
    int8 with ``dtype: "bool"``, integers without a fill value; ``units`` and
    ``long_name`` of :mod:`.variables`."""
    data = np.ascontiguousarray(data)
    attrs = {}
    if data.dtype == np.bool_:
        data, attrs = data.astype(np.int8), {"dtype": "bool"}
    if name in VARIABLES and name not in dims:  # units and long_name (io/variables.py)
        attrs["units"], attrs["long_name"] = VARIABLES[name]
    fill = np.array(np.nan, data.dtype) if data.dtype.kind == "f" else None
    return _Var(name, dims, data, attrs, fill)


def _put_all(var, data: np.ndarray) -> None:
    """``var[:] = data`` for a whole contiguous array, without netCDF4's Python indexing
    (``Variable._put``, the call ``__setitem__`` makes once it has computed the slices:
    a third of a small file's CPU time); ``var[:] = data`` where that is not available."""
    put = getattr(var, "_put", None)
    if put is None or data.ndim == 0:
        var[:] = data
        return
    shape = np.asarray(data.shape, dtype=np.intp)
    put(data, np.zeros_like(shape), shape, np.ones_like(shape))


def _coordinate(size: int) -> np.ndarray:
    """``0 .. size - 1`` (int64), the values of a coordinate variable (shared, read-only)."""
    arr = _COORDS.get(size)
    if arr is None:
        arr = np.arange(size, dtype=np.int64)
        arr.flags.writeable = False
        if len(_COORDS) < 64:
            _COORDS[size] = arr
    return arr


_COORDS: dict[int, np.ndarray] = {}


def _group(name: str, variables: Mapping[str, tuple[tuple[str, ...], np.ndarray]],
           coords: Mapping[str, int], attrs: Mapping[str, Any]) -> _Group:  # fmt: skip
    """Group ``name`` with its dimensions (an empty group keeps its coordinates: a method
    without sample stats), variables and coordinate variables."""
    return _Group(name, dict(attrs), {**coords, **_dim_sizes(variables)},
                  [_variable(k, arr, dims) for k, (dims, arr) in variables.items()],
                  [_variable(d, _coordinate(n), (d,)) for d, n in coords.items()])  # fmt: skip


def _dim_sizes(variables) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for k, (dims, arr) in variables.items():
        for d, n in zip(dims, arr.shape, strict=True):
            if sizes.setdefault(d, n) != n:
                raise ValueError(f"{k}: dimension {d} has size {n}, elsewhere {sizes[d]}")
    return sizes


def _content(posterior: Mapping[str, np.ndarray], sample_stats: Mapping[str, np.ndarray],
             observed: np.ndarray, attrs: Mapping[str, Any],
             created: str) -> tuple[dict[str, Any], list[_Group]]:  # fmt: skip
    """What ``posterior.nc`` holds: its root attributes and its three groups."""
    lead = ("chain", "draw")
    post = {k: (_dims(k, np.asarray(v), lead), np.asarray(v)) for k, v in posterior.items()}
    stats = {k: (_dims(k, np.asarray(v), lead), np.asarray(v)) for k, v in sample_stats.items()}
    obs = np.asarray(observed)
    n_chain, n_draw = next(iter(post.values()))[1].shape[:2]
    post_coords = {"chain": n_chain, "draw": n_draw}
    if (n_gal := _dim_sizes(post).get("galaxy")) is not None:
        post_coords["galaxy"] = n_gal
    stat_coords = {"chain": n_chain, "draw": n_draw}
    if (n_gal := _dim_sizes(stats).get("galaxy")) is not None:  # per-galaxy statistics
        stat_coords["galaxy"] = n_gal  # (the interim model's importance weights)
    group_attrs = {"created_at": created, "inference_library": "shearbatch"}
    root_attrs = {k: v for k, v in to_strict_json(dict(attrs)).items() if v is not None}
    root_attrs.setdefault("shearbatch_version", __version__)
    root_attrs = {k: int(v) if isinstance(v, bool) else v for k, v in root_attrs.items()}
    groups = [_group("posterior", post, post_coords, group_attrs),
              _group("sample_stats", stats, stat_coords, group_attrs),
              _group("observed_data", {"obs": (("galaxy", "y", "x"), obs)},
                     {"galaxy": obs.shape[0]}, group_attrs)]  # fmt: skip
    return root_attrs, groups


def _write_netcdf4(path: str, root_attrs: Mapping[str, Any], groups: list[_Group]) -> None:
    """``posterior.nc``'s content written with netCDF4 at ``path`` (not atomic by itself)."""
    import netCDF4

    with _NC_LOCK, netCDF4.Dataset(path, "w", format="NETCDF4") as ds:
        ds.set_fill_off()  # every variable is written in full: no fill pass first
        ds.set_auto_maskandscale(False)
        ds.setncatts(dict(root_attrs))
        # every group, dimension, variable and attribute is defined before any data is
        # written: netCDF-4 writes the file's metadata each time it leaves define mode, so a
        # variable written as soon as it is defined rewrites the metadata of all before it
        # (measured: 0.9 ms per Level 0 file this way, 2.8 ms the other)
        puts = []
        for g in groups:
            grp = ds.createGroup(g.name)
            grp.setncatts(g.attrs)
            for dim, size in g.dims.items():
                grp.createDimension(dim, size)
            for v in (*g.variables, *g.coords):
                var = grp.createVariable(v.name, v.data.dtype, v.dims, fill_value=v.fill)
                if v.attrs:
                    var.setncatts(v.attrs)
                puts.append((var, v.data))
        for var, data in puts:
            _put_all(var, data)


# ---------------------------------------------------------------- posterior.nc from a template


def _fields(root_attrs: Mapping[str, Any], groups: list[_Group]) -> list[Any]:
    """The values of a file that differ between files of one structure (:mod:`.nctemplate`):
    every data variable's array, then the root attributes, then each group's attributes."""
    return [*(v.data for g in groups for v in g.variables), *root_attrs.values(),
            *(x for g in groups for x in g.attrs.values())]  # fmt: skip


def _with_fields(root_attrs: Mapping[str, Any], groups: list[_Group],
                 values: list[Any]) -> tuple[dict[str, Any], list[_Group]]:  # fmt: skip
    """The content with ``values`` (:func:`_fields`' order) in place of its own."""
    it = iter(values)
    groups = [g._replace(variables=[v._replace(data=next(it)) for v in g.variables])
              for g in groups]  # fmt: skip
    root = {k: next(it) for k in root_attrs}
    return root, [g._replace(attrs={k: next(it) for k in g.attrs}) for g in groups]


def _structure(root_attrs: Mapping[str, Any], groups: list[_Group], specs: list[tuple]) -> tuple:
    """What a file's bytes depend on but its values: the key of its template. The variables'
    attributes and fill values follow from their names, dtypes and ``dtype`` attribute; the
    coordinates from the dimensions."""
    return (tuple(root_attrs), tuple(specs),
            tuple((g.name, tuple(g.attrs), tuple(g.dims.items()),
                   tuple((v.name, v.dims, tuple(v.attrs.items())) for v in g.variables))
                  for g in groups))  # fmt: skip


#: False: every posterior.nc is written by netCDF4 (for comparisons)
TEMPLATES = True
#: posterior.nc templates by structure (:func:`_structure`): a :class:`.nctemplate.Template`,
#: or None for a structure netCDF4 writes (its template could not be made, or its first
#: file differed from netCDF4's)
_TEMPLATES: dict[tuple, Any] = {}
#: the most structures a process keeps templates of (netCDF4 writes the others)
_TEMPLATES_MAX = 64
_TEMPLATE_LOCK = threading.Lock()
_FULL: list[bool] = []  # [True] once that is logged


def _first_use(key: tuple, specs: list[tuple], values: list[Any], root_attrs: dict[str, Any],
               groups: list[_Group], written: bytes, near: str) -> None:  # fmt: skip
    """The template of a structure, made (:func:`.nctemplate.build`, its sentinel files
    written next to ``near`` and removed) and kept only if it renders ``values`` as the
    bytes netCDF4 ``written``; a structure that has none is logged once."""

    def write(vals: list[Any]) -> bytes:
        root, grps = _with_fields(root_attrs, groups, vals)
        tmp = os.fspath(atomic.temporary_path(near))
        try:
            _write_netcdf4(tmp, root, grps)
            with open(tmp, "rb") as fh:
                return fh.read()
        finally:
            _unlink(tmp)

    with _TEMPLATE_LOCK:
        if key in _TEMPLATES:
            return
        if len(_TEMPLATES) >= _TEMPLATES_MAX:  # netCDF4 writes the other structures
            if not _FULL:
                _FULL.append(True)
                logger.info("posterior.nc: %d file structures in this process, the most "
                            "templates kept; netCDF4 writes the others", _TEMPLATES_MAX)  # fmt: skip
            return
        tpl = None
        try:
            tpl = nctemplate.build(specs, write)
            if not np.array_equal(tpl.render(values), np.frombuffer(written, np.uint8)):
                raise nctemplate.TemplateError("its first file differs from netCDF4's")
        except Exception as err:  # any failure: netCDF4 writes the files of this structure
            logger.debug("posterior.nc template", exc_info=True)
            tpl = None
            logger.info("posterior.nc of this structure is written by netCDF4, not from a "
                        "template: %s", err)  # fmt: skip
        _TEMPLATES[key] = tpl


def write_posterior_nc(
    path: str | Path,
    posterior: Mapping[str, np.ndarray],
    sample_stats: Mapping[str, np.ndarray],
    observed: np.ndarray,
    attrs: Mapping[str, Any],
) -> dict[str, Any]:
    """``posterior.nc`` at ``path``, atomically (:func:`_atomic_write`; the directory
    exists); returns its checksums: ``{"variables": {"<group>/<name>": ...}`` (coordinates
    aside: :func:`.integrity.array_checksum`), ``"posterior": {"bytes", "crc32"}`` (the
    whole file)}.

    The bytes are those netCDF4 writes. A file of a structure written before in this
    process is its template's bytes with its values put in (:mod:`.nctemplate`); the first
    file of each structure is written by netCDF4 and the template made then is kept only
    if it gives the same bytes (one INFO line where it does not: netCDF4 then writes every
    file of that structure, as it does a file with a value a template does not take)."""
    created = datetime.now(UTC).isoformat(timespec="seconds")
    root_attrs, groups = _content(posterior, sample_stats, observed, attrs, created)
    variables = {f"{g.name}/{v.name}": array_checksum(v.data) for g in groups for v in g.variables}
    sums: dict[str, Any] = {"variables": variables}
    path = os.fspath(path)
    key = specs = values = None
    if TEMPLATES:
        values = _fields(root_attrs, groups)
        specs = [nctemplate.field_spec(v) for v in values]
        key = None if None in specs else _structure(root_attrs, groups, specs)
    tpl = _TEMPLATES.get(key) if key is not None else None
    if tpl is not None:
        data = tpl.render(values)
        atomic.put_bytes(path, data, durable=False, parent=False)
        sums["posterior"] = integrity.bytes_checksum(data)
        return sums

    def write(tmp: str) -> None:
        _write_netcdf4(tmp, root_attrs, groups)
        with open(tmp, "rb") as fh:
            data = fh.read()
        sums["posterior"] = integrity.bytes_checksum(data)
        if key is not None and key not in _TEMPLATES:
            _first_use(key, specs, values, root_attrs, groups, data, path)

    _atomic_write(path, write, parent=False)
    return sums


def write_realization(
    directory: str | Path,
    *,
    posterior: Mapping[str, np.ndarray],
    sample_stats: Mapping[str, np.ndarray],
    observed: np.ndarray,
    attrs: Mapping[str, Any],
    truth: Mapping[str, Any],
    convergence: Convergence | Mapping[str, Any],
) -> Path:
    """Write one realization's three files atomically; ``convergence.json`` last
    (``convergence``: its record, or a mapping to write as it is but its ``checksums``:
    either is written with the ``checksums`` of the three files, :mod:`.integrity`; this
    version writes no record without them).

    On failure the files this call wrote are removed (the realization is absent or,
    if its directory held other files, incomplete) and the error propagates.
    """
    d = os.fspath(directory)  # plain strings: pathlib costs ~5 us an operation
    os.makedirs(d, exist_ok=True)
    truth_path, nc_path, conv_path = (os.path.join(d, n) for n in (TRUTH, POSTERIOR, CONVERGENCE))
    _unlink(conv_path)  # a redone directory is incomplete meanwhile
    try:
        truth_text = write_json(truth_path, truth, parent=False)
        sums = write_posterior_nc(nc_path, posterior, sample_stats, observed, attrs)
        conv = convergence.to_json() if isinstance(convergence, Convergence) else dict(convergence)
        conv.pop(integrity.KEY, None)  # last, with its own checksum last (integrity.seal)
        conv[integrity.KEY] = integrity.checksums(truth_text=truth_text, **sums)
        _write_text(conv_path, integrity.seal(dumps_json(conv)), parent=False)
    except BaseException:
        for name in (conv_path, nc_path, truth_path):
            _unlink(name)
        try:
            os.rmdir(d)  # only if nothing else is in it
        except OSError:
            pass
        raise
    return Path(d)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def write_record(directory: str | Path, record: Record | Mapping[str, Any]) -> Path:
    """:func:`write_realization` of a :class:`Record` (or of a mapping of its fields)."""
    fields = record._asdict() if isinstance(record, Record) else dict(record)
    return write_realization(directory, **fields)


def read_json(path: str | Path) -> Any:
    with open(path) as fh:
        return json.load(fh)


def read_posterior(path: str | Path) -> dict[str, np.ndarray]:
    """Posterior draws of ``posterior.nc`` as ``{name: array (chain, draw, ...)}``."""
    import xarray as xr

    with xr.open_dataset(path, group="posterior", engine="netcdf4") as ds:
        return {k: np.asarray(v.values) for k, v in ds.data_vars.items()}


# --------------------------------------------------------------------------- background writers


def describe_write_error(directory: str | Path, err: BaseException) -> str:
    """One line: what could not be written and why (free space named when low)."""
    why = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
    why = why.strip().splitlines()[0] if why.strip() else type(err).__name__
    try:
        st = os.statvfs(next(p for p in (Path(directory), *Path(directory).parents) if p.exists()))
        free = st.f_bavail * st.f_frsize
        if free < 16 << 20 and "No space left" not in why:
            why += f" (the device is full: {free // 1024} KiB free)"
    except (OSError, StopIteration):
        pass
    return f"cannot write {directory}: {why}"


def _write_job(directory: str, record: Record | Mapping[str, Any]) -> str:
    write_record(directory, record)
    return directory


def _write_group(jobs: list[tuple[str, Record | Mapping[str, Any]]]) -> list[tuple[str, Any]]:
    """Write ``jobs`` in turn: ``[(directory, None)]`` for each one written, then
    ``(directory, exception)`` for the first that failed (the rest are not tried: absent)."""
    done: list[tuple[str, Any]] = []
    for directory, record in jobs:
        try:
            write_record(directory, record)
        except Exception as err:  # reported by the parent as the write error
            done.append((directory, err))
            break
        done.append((directory, None))
    return done


def _ignore_signals() -> None:  # pragma: no cover - runs in a writer process
    from ..jax_setup import cpu_only_worker

    cpu_only_worker()  # a writer never needs a device
    # the parent decides what a signal means and stops its writers itself ...
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # ... and a writer dies with it when it is killed (Linux: PR_SET_PDEATHSIG), leaving at
    # most a temporary file that the next run removes
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)


class Sink(Protocol):
    """Where the engine sends each realization's record: :class:`WriterPool` (in the
    background) or :class:`SerialWriter` (in the calling thread)."""

    #: the directories written so far
    written: list[str]

    def submit(self, directory: str | Path, record: Record | Mapping[str, Any]) -> None:
        """Write (or queue) one realization; raises :class:`WriteError` once a write failed."""

    def flush(self) -> None:
        """Send what waits to be grouped (after each batch)."""

    def check(self) -> None:
        """Raise the :class:`WriteError` of a failed write, if any."""

    def close(self, abandon: bool = False, timeout: float | None = None) -> bool:
        """Wait for the writes in flight (the queued ones too unless ``abandon``)."""


class SerialWriter:
    """A :class:`Sink` that writes each realization in the calling thread (``bias-run
    --no-overlap``)."""

    def __init__(self) -> None:
        self.written: list[str] = []

    def submit(self, directory: str | Path, record: Record | Mapping[str, Any]) -> None:
        try:
            write_record(directory, record)
        except Exception as err:
            raise WriteError(describe_write_error(directory, err)) from err
        self.written.append(str(directory))

    def flush(self) -> None:
        pass

    def check(self) -> None:
        pass

    def close(self, abandon: bool = False, timeout: float | None = None) -> bool:
        return True


class WriterPool:
    """A :class:`Sink` that writes realizations in the background through a bounded queue.

    ``submit`` blocks while ``max_pending`` realizations are waiting (memory stays
    bounded) and raises :class:`WriteError` once any write has failed; after a
    failure the queued writes are dropped (those realizations stay absent). ``kind``:
    ``"thread"`` (netCDF writes serialised by a lock, JSON in parallel) or
    ``"process"`` (spawned processes, which import no JAX; a record is pickled).
    ``group``: process writers take this many realizations per job (the per-job cost of
    the process pool, ~0.1 ms in the caller, is paid once per group); a partial group is
    sent by :meth:`flush` (the engine calls it after each batch) or :meth:`close`.
    """

    def __init__(self, workers: int = 2, max_pending: int = 128, kind: str = "thread",
                 start: bool = False, group: int = 1):  # fmt: skip
        if kind not in ("thread", "process"):
            raise ValueError(f"writer kind must be 'thread' or 'process', got {kind!r}")
        self.kind, self.written = kind, []
        self.group, self._group = max(1, int(group)), []
        self._error: WriteError | None = None
        self._abandon = threading.Event()
        self._slots = threading.BoundedSemaphore(max(1, max_pending))
        if kind == "thread":
            # netCDF4 releases the GIL inside the HDF5 library, which is not thread-safe:
            # _NC_LOCK serialises our writes, but a netCDF file object someone left to the
            # garbage collector would be closed on whichever thread the collector runs,
            # possibly during a write (seen: a segfault in a test process). Finalise such
            # objects here, on the caller's thread, before any writer thread exists.
            gc.collect()
            self._q: queue.Queue = queue.Queue()
            self._threads = [
                threading.Thread(target=self._work, name=f"shearbatch-writer-{i}", daemon=True)
                for i in range(workers)
            ]
            for t in self._threads:
                t.start()
        else:
            ctx = multiprocessing.get_context("spawn")
            self._ex = cf.ProcessPoolExecutor(workers, mp_context=ctx, initializer=_ignore_signals)
            if start:  # spawn every worker now (not at the first writes): their interpreters
                for _ in range(workers):  # start in the background meanwhile
                    self._ex.submit(os.getpid)

    def bound(self, max_pending: int, group: int | None = None) -> None:
        """Set how many realizations may wait to be written, and ``group`` (before the
        first submit)."""
        self._slots = threading.BoundedSemaphore(max(1, max_pending))
        if group is not None:
            self.group = max(1, int(group))

    @property
    def error(self) -> WriteError | None:
        return self._error

    def check(self) -> None:
        if self._error is not None:
            raise self._error

    def submit(self, directory: str | Path, record: Record | Mapping[str, Any]) -> None:
        while not self._slots.acquire(timeout=0.1):
            self.check()
        self.check()
        if self.kind == "thread":
            self._q.put((str(directory), record))
        elif self.group == 1:
            fut = self._ex.submit(_write_job, str(directory), record)
            fut.add_done_callback(lambda f, d=str(directory): self._done(d, f.exception()))
        else:
            self._group.append((str(directory), record))
            if len(self._group) >= self.group:
                self.flush()

    def flush(self) -> None:
        """Send the partial group of realizations (process writers with ``group`` > 1)."""
        jobs, self._group = self._group, []
        if jobs:
            fut = self._ex.submit(_write_group, jobs)
            fut.add_done_callback(lambda f, jobs=jobs: self._group_done(jobs, f))

    def _group_done(self, jobs: list[tuple[str, Any]], fut: cf.Future) -> None:
        if fut.cancelled():  # close(abandon=True): never written
            for _ in jobs:
                self._slots.release()
            return
        err = fut.exception()
        done = [(d, err) for d, _ in jobs] if err is not None else fut.result()
        for d, e in done:
            self._done(d, e)
        for _ in range(len(jobs) - len(done)):  # not tried after a failure: absent
            self._slots.release()

    def _done(self, directory: str, err: BaseException | None) -> None:
        if err is None:
            self.written.append(directory)
        elif self._error is None:
            self._error = WriteError(describe_write_error(directory, err))
            self._abandon.set()
        self._slots.release()

    def _work(self) -> None:
        while (job := self._q.get()) is not None:
            if self._abandon.is_set():
                self._slots.release()
                continue
            try:
                _write_job(*job)
            except Exception as err:
                self._done(job[0], err)
            else:
                self._done(job[0], None)

    def close(self, abandon: bool = False, timeout: float | None = None) -> bool:
        """Wait for the writes in flight (all queued ones unless ``abandon``); True when
        every writer finished within ``timeout``."""
        if abandon:
            self._abandon.set()
        if self.kind == "thread":
            for _ in self._threads:
                self._q.put(None)
            for t in self._threads:
                t.join(timeout)
            return not any(t.is_alive() for t in self._threads)
        if abandon:
            for _ in self._group:
                self._slots.release()
            self._group = []
        else:
            self.flush()
        self._ex.shutdown(wait=True, cancel_futures=abandon)
        return True
