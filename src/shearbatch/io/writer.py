"""Per-realization output files, written atomically, and reading them back.

``<output-dir>/<run_id>/``:

- ``truth.json``: true g1, g2, seed, run_id, per-galaxy truths, noise sigma.
- ``posterior.nc``: ArviZ InferenceData layout in netCDF4 (one group each):
  ``posterior`` (``g1``, ``g2`` with dims exactly (chain, draw); per-galaxy
  latents with dims (chain, draw, galaxy)), ``sample_stats`` (chain, draw),
  ``observed_data`` (``obs`` with dims (galaxy, y, x)). Root attrs:
  inference_method, run_id, seed, g1_true, g2_true, batch_size, shearbatch
  version, config hash.
- ``convergence.json``: method-aware diagnostics and ``status`` ("ok" or
  "failed" with a ``reason``); strict JSON (non-finite numbers become null).

Every file goes to a temporary name in the same directory and is renamed into
place; ``convergence.json`` is written last (and removed first when a directory
is redone), so a directory holding it is complete.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from .. import __version__
from .layout import CONVERGENCE, POSTERIOR, TRUTH
from .variables import annotate

__all__ = ["read_json", "read_posterior", "to_strict_json", "write_json", "write_realization"]


def to_strict_json(obj: Any) -> Any:
    """Recursively convert numpy types; NaN and +-inf become ``None``."""
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


def _atomic_write(path: Path, write) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_json(path: Path, obj: Any) -> None:
    def w(tmp: str) -> None:
        with open(tmp, "w") as fh:
            json.dump(to_strict_json(obj), fh, indent=2, allow_nan=False)
            fh.write("\n")

    _atomic_write(path, w)


def _dims(name: str, arr: np.ndarray, lead: tuple[str, ...]) -> tuple[str, ...]:
    extra = arr.ndim - len(lead)
    if extra == 0:
        return lead
    if extra == 1:
        return (*lead, "galaxy")
    raise ValueError(f"{name}: unexpected shape {arr.shape}")


def _posterior_tree(
    posterior: Mapping[str, np.ndarray],
    sample_stats: Mapping[str, np.ndarray],
    observed: np.ndarray,
    attrs: Mapping[str, Any],
) -> xr.DataTree:
    post = xr.Dataset(
        {
            k: (_dims(k, np.asarray(v), ("chain", "draw")), np.asarray(v))
            for k, v in posterior.items()
        }
    )
    n_chain, n_draw = next(iter(post.data_vars.values())).shape[:2]
    coords = {"chain": np.arange(n_chain), "draw": np.arange(n_draw)}
    if "galaxy" in post.dims:
        coords["galaxy"] = np.arange(post.sizes["galaxy"])
    post = post.assign_coords(coords)
    stats = xr.Dataset(
        {k: (("chain", "draw"), np.asarray(v)) for k, v in sample_stats.items()}
    ).assign_coords(chain=coords["chain"], draw=coords["draw"])
    obs = xr.Dataset({"obs": (("galaxy", "y", "x"), np.asarray(observed))}).assign_coords(
        galaxy=np.arange(observed.shape[0])
    )
    created = datetime.now(UTC).isoformat(timespec="seconds")
    group_attrs = {"created_at": created, "inference_library": "shearbatch"}
    for ds in (post, stats, obs):
        ds.attrs.update(group_attrs)
        annotate(ds)  # units and long_name (io/variables.py)
    root_attrs = {k: v for k, v in to_strict_json(dict(attrs)).items() if v is not None}
    root_attrs.setdefault("shearbatch_version", __version__)
    root = xr.Dataset(attrs=root_attrs)
    return xr.DataTree.from_dict(
        {"/": root, "posterior": post, "sample_stats": stats, "observed_data": obs}
    )


def write_realization(
    directory: str | Path,
    *,
    posterior: Mapping[str, np.ndarray],
    sample_stats: Mapping[str, np.ndarray],
    observed: np.ndarray,
    attrs: Mapping[str, Any],
    truth: Mapping[str, Any],
    convergence: Mapping[str, Any],
) -> Path:
    """Write one realization's three files atomically; ``convergence.json`` last."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    (d / CONVERGENCE).unlink(missing_ok=True)  # a redone directory is incomplete meanwhile
    write_json(d / TRUTH, truth)
    tree = _posterior_tree(posterior, sample_stats, observed, attrs)
    _atomic_write(d / POSTERIOR, lambda tmp: tree.to_netcdf(tmp, engine="netcdf4"))
    write_json(d / CONVERGENCE, convergence)
    return d


def read_json(path: str | Path) -> Any:
    with open(path) as fh:
        return json.load(fh)


def read_posterior(path: str | Path) -> dict[str, np.ndarray]:
    """Posterior draws of ``posterior.nc`` as ``{name: array (chain, draw, ...)}``."""
    with xr.open_dataset(path, group="posterior", engine="netcdf4") as ds:
        return {k: np.asarray(v.values) for k, v in ds.data_vars.items()}
