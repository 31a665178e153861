"""Stage 2: scan a campaign directory and build the summary table.

A *realization directory* is any directory under the campaign root that holds
``truth.json``, ``posterior.nc`` or ``convergence.json`` (or a temporary file
of one of them left by a killed job); nested layouts (one sub-directory per
SLURM task, per level, ...) are found too. Each one becomes one row of
``summary.csv`` (:data:`SUMMARY_COLUMNS`) with a ``status``:

- ``ok``: all three files readable and ``convergence.json`` says ``ok``;
- ``failed``: ``convergence.json`` says ``failed`` (its ``reason`` is copied);
- ``incomplete``: a file is missing (``convergence.json`` is written last, so
  a directory without it was interrupted);
- ``corrupt``: a file exists but cannot be read, or is damaged: its size or a
  checksum recorded in ``convergence.json`` disagrees (:mod:`shearbatch.io.integrity`:
  each posterior variable's shape, dtype and CRC, the whole file's, ``truth.json``'s and
  the record's own), the record has no checksums in a campaign whose ``campaign.json``
  does not predate them, ``posterior.nc``'s run_id, seed or true shear contradicts
  ``truth.json``, or a draw of g1 or g2 is not finite; ``reason`` says which.

Only what a file states is written: the posterior columns of a non-``ok`` row
stay empty. Posterior summaries use every draw of every chain: mean, median,
std, the quantiles q at 0.025, 0.16, 0.84, 0.975, and the SBC rank
``rank = #{draws < g_true} / #draws``. ``g1_mode``, ``g2_mode`` are
``convergence.json``'s ``mode`` (the MAP for MAP, the Laplace centre for NUTS and
VI; ``map_estimate`` in files of older versions); empty when a file predates it.
``point_estimate`` is the statistic that stands for the realization (``mode``,
``mean`` or ``population``: :mod:`shearbatch.core.convergence`).

Design columns: ``seed`` (the group: every realization of a seed shares its
galaxies, and the errors of ``bias-stats`` resample seeds), ``pair_id`` and
``pair_sign`` (+g/-g twins sharing galaxy and noise), ``rotation`` and
``n_rotations`` (ring designs: copy k of n with the intrinsic shapes rotated by
k * 180 / n degrees; empty without rotations).

``code_commit``, ``code_dirty``, ``code_fingerprint``: the code version that wrote the
realization (its record's ``code``: :func:`shearbatch._version.code_version`); empty in a
record from before it was recorded.

``passed_convergence`` comes from the one convergence gate of
:mod:`shearbatch.core.failure_flags`: the realization's own flags (written by
``bias-run``), with the threshold gates (R-hat, ESS, divergences, E-BFMI)
re-evaluated against the thresholds given here (``--convergence-config``;
the defaults are ``bias-run``'s). ``flags`` lists every flag by name,
``|``-joined.
"""

from __future__ import annotations

import io
import json
import logging
import math
import multiprocessing
import zipfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from .. import jax_setup
from ..core import failure_flags as fl
from ..core.convergence import Convergence
from ..core.failure_flags import DEFAULT_THRESHOLDS, Thresholds
from ..core.population_np import PriorSpec
from ..estimators import columns as estimator_columns
from ..estimators import row_of as estimator_row
from ..io import POSTERIOR, atomic, find_realization_dirs, inspect_realization, integrity

__all__ = [
    "DEFAULT_THRESHOLDS",
    "QUANTILES",
    "STATUSES",
    "SUMMARY_COLUMNS",
    "Thresholds",
    "compact_draws",
    "convergence_flags",
    "extract_campaign",
    "find_realization_dirs",
    "load_thresholds",
    "map_cpu_only",
    "plan_chunks",
    "population_arrays",
    "posterior_attrs",
    "read_realization",
    "read_summary",
    "status_counts",
    "summary_frame",
    "summary_text",
    "trusted_checksums",
    "write_population",
    "write_summary",
]

logger = logging.getLogger(__name__)

STATUSES = ("ok", "failed", "incomplete", "corrupt")
QUANTILES = {"q025": 0.025, "q16": 0.16, "q84": 0.84, "q975": 0.975}
SUMMARY_COLUMNS = [
    # SHINE's columns, in SHINE's order
    "run_id", "g1_true", "g2_true", "g1_mean", "g1_median", "g1_std", "g2_mean", "g2_median",
    "g2_std", "rhat_g1", "rhat_g2", "ess_g1", "ess_g2", "divergences", "divergence_frac",
    "passed_convergence", "seed",
    # ours
    "status", "method",
    *[f"g{i}_{q}" for i in (1, 2) for q in QUANTILES],
    "g1_mode", "g2_mode",
    "ess_tail_g1", "ess_tail_g2", "rank_g1", "rank_g2", "pair_id", "pair_sign",
    "rotation", "n_rotations",
    "batch_size", "runtime_s", "reason", "flags", "truth_from_prior",
    "point_estimate", "precision", "snr", "prior_shrinkage_g1", "prior_shrinkage_g2", "path",
    "config_hash", "code_commit", "code_dirty", "code_fingerprint",
    # the interim model's population fit (core/population.py)
    "shear_model", "pop_n_galaxies", "pop_ess_min", "pop_n_collapsed", "is_ess_min",
    "pop_khat_max", "pop_n_khat_high",
    # False: a directory that is not in the campaign's plan (analysis/progress.py); empty
    # without a campaign.json
    "in_plan",
    # host estimators beside the method (<name>_e1, _e2, _r11, _r22, ...: shearbatch.estimators)
    *estimator_columns(),
]  # fmt: skip


def load_thresholds(path: str | Path | None) -> Thresholds:
    """Thresholds from a YAML file (top level or under ``convergence:``); defaults otherwise.

    Raises ``ValueError`` (one line naming the key) for unknown keys or non-numbers.
    """
    if path is None:
        return DEFAULT_THRESHOLDS
    import yaml

    with open(path) as fh:
        doc = yaml.safe_load(fh) or {}
    if not isinstance(doc, dict):
        raise ValueError("expected a mapping")
    if "convergence" in doc:
        sec = doc["convergence"]
    else:  # a bare thresholds file, or an acceptance file without a convergence section
        other = "acceptance" in doc or any(str(k).startswith("level_") for k in doc)
        sec = {} if other else doc
    if not isinstance(sec, dict):
        raise ValueError("convergence: expected a mapping")
    out = {}
    for k, v in sec.items():
        if k not in Thresholds._fields:
            raise ValueError(f"convergence.{k}: unknown key; use {', '.join(Thresholds._fields)}")
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise ValueError(f"convergence.{k}: must be a number, got {v!r}")
        out[k] = float(v)
    return Thresholds(**out)


def convergence_flags(
    conv: Convergence | Mapping[str, Any], th: Thresholds = DEFAULT_THRESHOLDS
) -> int:
    """A realization's flags with its threshold gates re-evaluated against ``th``."""
    if not isinstance(conv, Convergence):
        conv = Convergence.from_json(conv)
    return conv.flags_under(th)


class Damaged(ValueError):
    """A posterior.nc that reads but is damaged (:func:`shearbatch.io.integrity.dataset_problem`)."""


def _read_nc(
    path: Path,
    wanted: Mapping[str, Sequence[str]] | Callable[[dict], Mapping | None],
    check: Callable[[Any], str | None] | None = None,
) -> tuple[dict[str, Any], dict]:
    """``(root attrs, {name: (dims, float64 array)})`` of the variables ``wanted`` (``{group:
    [names]}``, or a function of the root attrs giving it, None for none) of a posterior.nc,
    read with netCDF4 directly (xarray costs ~50x more per file); values decoded as
    xarray decodes them (``_FillValue`` and masked values as NaN). ``check``: called on the
    open dataset first; a reason it returns raises :class:`Damaged`."""
    import netCDF4

    out = {}
    with netCDF4.Dataset(path, "r") as ds:
        if check is not None and (why := check(ds)):
            raise Damaged(why)
        attrs = {k: ds.getncattr(k) for k in ds.ncattrs()}
        if callable(wanted):
            wanted = wanted(attrs) or {}
        for group, names in wanted.items():
            if not names:
                continue
            grp = ds.groups[group]
            for name in names:
                var = grp.variables[name]
                data = np.ma.filled(np.ma.asarray(var[...], dtype=np.float64), np.nan)
                out[name] = (tuple(var.dimensions), data)
    return attrs, out


def posterior_attrs(path: str | Path) -> dict[str, Any]:
    """The root attributes of a posterior.nc (what ``xarray.open_datatree(path).attrs``
    holds), read with netCDF4 alone."""
    return _read_nc(Path(path), {})[0]


def _axes(dims: tuple[str, ...], want: tuple[str, ...]) -> tuple[int, ...]:
    return tuple(dims.index(d) for d in want)


def interim_draws(
    path: Path, check: Callable[[Any], str | None] | None = None
) -> dict[str, Any] | None:
    """An interim-model posterior.nc's per-galaxy draws: ``eps`` (M, K, 2) observed
    ellipticities, ``log_base`` (M, K) ``interim_log_weight``, and the population's
    intrinsic-shape priors ``population`` (e1, e2); None for the joint model."""

    def wanted(attrs: dict) -> dict | None:
        if attrs.get("shear_model") != "interim":
            return None
        return {"posterior": ["e1", "e2"], "sample_stats": ["interim_log_weight"]}

    attrs, v = _read_nc(path, wanted, check)
    if not v:
        return None
    order = ("galaxy", "chain", "draw")
    e = [np.transpose(v[s][1], _axes(v[s][0], order)) for s in ("e1", "e2")]
    lw = np.transpose(v["interim_log_weight"][1], _axes(v["interim_log_weight"][0], order))
    m = e[0].shape[0]
    eps = np.stack([x.reshape(m, -1) for x in e], axis=-1)
    pops = tuple(PriorSpec(json.loads(attrs[f"population_prior_{c}"])) for c in ("e1", "e2"))
    return {"eps": eps, "log_base": lw.reshape(m, -1), "population": pops}


def compact_draws(d: Mapping[str, Any]) -> dict[str, Any]:
    """What the pooled fit keeps of a realization's :func:`interim_draws`: ``eps`` as float32
    and ``log_base`` as float32 less each galaxy's maximum (a per-galaxy constant does not
    move the fit), the rows :func:`write_population` writes (half the bytes of the float64
    draws). Idempotent: compact draws come back unchanged."""
    from ..core.population_np import relative_log_weights

    return {"eps": np.asarray(d["eps"], np.float32),
            "log_base": relative_log_weights(d["log_base"], axis=1),
            "population": d["population"]}  # fmt: skip


def _population_columns(path: Path, truth: Mapping[str, Any], conv: Convergence, check=None):
    """Summary columns of an interim-model realization: g from its own galaxies' pooled
    marginal likelihood (:func:`shearbatch.core.population_np.fit`, the NumPy form of
    :func:`shearbatch.core.population.fit`; mean = median = mode = the maximum, std from
    the curvature, Gaussian quantiles and rank), the per-galaxy ESS and Pareto k-hat of the
    weights at the estimate (``pop_khat_max``, ``pop_n_khat_high``: above
    :func:`~shearbatch.core.population_np.khat_threshold`) and the flags
    ``POP_WEIGHTS_COLLAPSED`` (a galaxy's k-hat above it) / ``POP_FIT_FAILED``. Returns ``(row, flags, draws)`` or
    None for the joint model. No JAX: this runs in bias-extract's reader processes."""
    from scipy import stats as st

    from ..core import population_np as pnp

    d = interim_draws(path, check)
    if d is None:
        return None
    prior = pnp.ShapePrior(*d["population"])
    f = pnp.fit(d["eps"], d["log_base"], prior)
    row: dict[str, Any] = {"shear_model": "interim", "point_estimate": "population",
                           "pop_n_galaxies": f.n_galaxies}  # fmt: skip
    k = np.maximum(f.n_draws, 1)
    row["pop_ess_min"] = float(np.min(f.ess / k))
    row["pop_n_collapsed"] = int(f.collapsed.sum())
    imp = conv.diagnostics.get("importance")
    imp = imp if isinstance(imp, Mapping) else {}
    row["is_ess_min"] = imp.get("min")
    # the reliability of each galaxy's weights: Pareto k-hat at the estimate (ArviZ's PSIS)
    khat = pnp.pareto_khat_at(f.g, d["eps"], d["log_base"], prior)
    high = khat > pnp.khat_threshold(f.n_draws)
    row["pop_khat_max"] = float(np.nanmax(khat)) if np.isfinite(khat).any() else math.nan
    row["pop_n_khat_high"] = int(high.sum())
    flags = fl.flag("POP_WEIGHTS_COLLAPSED") if high.any() else 0
    ok = f.converged and np.all(np.isfinite(f.err))
    if not ok:
        flags |= fl.flag("POP_FIT_FAILED")
    for i, s in enumerate(("g1", "g2")):
        g, sd = float(f.g[i]), float(f.err[i]) if ok else math.nan
        row[f"{s}_mean"] = row[f"{s}_median"] = row[f"{s}_mode"] = g
        row[f"{s}_std"] = sd
        for q, p in QUANTILES.items():
            row[f"{s}_{q}"] = g + sd * float(st.norm.ppf(p))
        if truth.get(s) is not None and ok:
            row[f"rank_{s}"] = float(st.norm.cdf((float(truth[s]) - g) / sd))
    return row, flags, d


def _posterior_columns(path: Path, truth: Mapping[str, Any], check=None) -> dict[str, Any]:
    row: dict[str, Any] = {}
    _, v = _read_nc(path, {"posterior": ["g1", "g2"]}, check)
    draws = {s: v[s][1].ravel() for s in ("g1", "g2")}
    for s, x in draws.items():
        if x.size == 0:
            raise ValueError(f"no draws of {s}")
        if why := integrity.nonfinite_problem(s, x):  # the engine writes such a one failed
            raise Damaged(why)
        row[f"{s}_mean"], row[f"{s}_median"] = float(np.mean(x)), float(np.median(x))
        row[f"{s}_std"] = float(np.std(x, ddof=1)) if x.size > 1 else math.nan
        qs = np.quantile(x, list(QUANTILES.values()))
        row.update({f"{s}_{q}": float(v) for q, v in zip(QUANTILES, qs, strict=True)})
        if truth.get(s) is not None:
            row[f"rank_{s}"] = float(np.mean(x < float(truth[s])))
    return row


def read_realization(
    directory: str | Path,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    keep_draws: bool = False,
    trusted: bool = False,
) -> dict[str, Any]:
    """One summary row (a dict with a subset of :data:`SUMMARY_COLUMNS`) for one directory.

    An interim-model realization (``shear_model: interim``) gets its g from the population
    fit of its own galaxies; with ``keep_draws`` what the pooled fit needs of its per-galaxy
    draws (:func:`compact_draws`) is kept under the row's ``_population`` key
    (:func:`write_population`). With ``trusted`` an ``ok`` row keeps under ``_trusted``
    the content checksums this read verified (its record's, which the files matched;
    :func:`trusted_checksums`), what a partial records for the scrub
    (:mod:`shearbatch.io.partials`)."""
    d = Path(directory)
    row: dict[str, Any] = {"run_id": d.name}

    def done(status: str, reason: str) -> dict[str, Any]:
        row["status"], row["reason"] = status, reason
        return row

    # the one definition of complete, shared with the resume (the whole posterior.nc's
    # checksum after its variables', below: a damaged variable is named)
    ins = inspect_realization(d, posterior_crc=False)
    truth = ins.truth or {}
    if truth:
        row["g1_true"], row["g2_true"], row["seed"] = (
            truth.get("g1"),
            truth.get("g2"),
            truth.get("seed"),
        )
        if truth.get("pair_id"):
            row["pair_id"], row["pair_sign"] = truth["pair_id"], truth.get("pair_sign")
        rot = truth.get("rotation")
        if isinstance(rot, Mapping):  # ring design: copy index and copies per seed
            row["rotation"], row["n_rotations"] = rot.get("index"), rot.get("n_rotations")
        if "truth_from_prior" in truth:
            row["truth_from_prior"] = bool(truth["truth_from_prior"])
    conv = ins.convergence
    if conv is not None:
        row["method"] = conv.method
        row["config_hash"], row["precision"] = conv.config_hash, conv.precision
        row["batch_size"] = conv.batch.get("size") if conv.batch is not None else None
        row["runtime_s"] = conv.runtime_s
        row["flags"] = "|".join(conv.flag_names)
        code = conv.code  # (a value of the wrong type reads as unknown)
        for k in ("commit", "dirty", "fingerprint"):
            v = code.get(k)
            row[f"code_{k}"] = v if isinstance(v, bool if k == "dirty" else str) else None
    if ins.status != "done" or conv is None:
        return done("incomplete" if ins.status == "absent" else ins.status, ins.reason)
    interim = cols = None

    def check(ds) -> str | None:  # every recorded variable, in the one netCDF open
        return integrity.dataset_problem(ds, conv.checksums, truth)

    try:
        if conv.shear_model == "interim":
            interim = _population_columns(d / POSTERIOR, truth, conv, check)
        if interim is None:
            cols = _posterior_columns(d / POSTERIOR, truth, check)
    except Damaged as err:
        return done("corrupt", str(err))
    except Exception as err:  # netCDF4/HDF5 raise many types for a damaged file
        return done("corrupt", f"posterior.nc unreadable: {type(err).__name__}: {err}")
    if why := integrity.file_problem(d / POSTERIOR, {integrity.KEY: conv.checksums}):
        return done("corrupt", why)  # damage outside the variables' data
    if cols is not None:
        row.update(cols)
    for s in ("g1", "g2"):
        if interim is None:
            row[f"{s}_mode"] = conv.site("mode", s)
        row[f"rhat_{s}"] = conv.site("rhat", s)
        row[f"ess_{s}"] = conv.site("ess_bulk", s)
        row[f"ess_tail_{s}"] = conv.site("ess_tail", s)
    row["divergences"], row["divergence_frac"] = conv.gates.divergences, conv.gates.divergence_frac
    row["point_estimate"] = conv.point_estimate
    snr = conv.snr
    row["snr"] = float(np.median(snr)) if isinstance(snr, list) and snr else None
    for s in ("g1", "g2"):
        p = conv.prior.get(s)
        row[f"prior_shrinkage_{s}"] = p.get("shrinkage") if isinstance(p, Mapping) else None
    flags = conv.flags_under(thresholds)
    if interim is not None:
        row.update(interim[0])
        flags |= interim[1]
        if keep_draws:  # for bias-stats' pooled fit (the sidecar of summary.csv)
            row["_population"] = compact_draws(interim[2])
    row["flags"] = "|".join(fl.names(flags))
    row["passed_convergence"] = (flags & ~fl.WARNINGS) == 0
    row.update(estimator_row(conv.diagnostics.get("estimators")))
    if trusted and (sums := trusted_checksums(conv.checksums)) is not None:
        row["_trusted"] = sums
    return done("ok", fl.describe(flags))


def trusted_checksums(sums: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What an ``ok`` read of a realization verified, from its record's ``checksums``
    (None without them): the record's own checksum, ``truth.json``'s and the whole
    ``posterior.nc``'s size and CRC."""
    if not isinstance(sums, Mapping):
        return None
    post = sums.get("posterior.nc")
    return {"convergence.json": sums.get("record"), "truth.json": sums.get("truth.json"),
            "posterior.nc": dict(post) if isinstance(post, Mapping) else None}  # fmt: skip


def _read_chunk(args: tuple[list[str], Thresholds]) -> list[dict[str, Any]]:
    dirs, th = args
    return [read_realization(p, th, keep_draws=True) for p in dirs]


def map_cpu_only(fn: Callable[[Any], Any], items: Sequence[Any], workers: int) -> Iterator[Any]:
    """``fn`` over ``items`` in ``workers`` spawned processes, results in order, each
    process CPU-only (:data:`shearbatch.jax_setup.WORKER_ENV`: in its environment from its
    start, so JAX reads it at import, and set again by its initializer; the readers need no
    JAX, core/population_np.py: this is the guard, not the mechanism). spawn, not fork: the caller may hold
    threads (JAX, BLAS) that fork would copy mid-lock."""
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx,
                             initializer=jax_setup.cpu_only_worker) as ex:  # fmt: skip
        with jax_setup.scoped_environ(
            jax_setup.WORKER_ENV
        ):  # the processes start as the work is submitted
            futures = [ex.submit(fn, it) for it in items]
        for f in futures:
            yield f.result()


def plan_chunks(
    dirs: Sequence[Path], workers: int, chunk: int = 64
) -> tuple[list[list[str]], bool]:
    """``(chunks, parallel)``: ``dirs`` cut into chunks of at most ``chunk`` directories, and
    whether ``workers`` processes read them (more than one, and more than two chunks' worth
    of directories); in parallel a few chunks per process, so they finish together."""
    parallel = workers > 1 and len(dirs) > 2 * chunk
    if parallel:
        chunk = max(1, min(chunk, -(-len(dirs) // (4 * workers))))
    return [[str(p) for p in dirs[i : i + chunk]] for i in range(0, len(dirs), chunk)], parallel


def extract_campaign(
    root: str | Path,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    *,
    workers: int | None = None,
    progress: bool = False,
    chunk: int = 64,
    on_progress: Callable[[int], None] | None = None,
) -> list[dict[str, Any]]:
    """Rows of every realization directory under ``root``, in path order.

    Directories are read by ``workers`` processes (default: the CPUs this process may
    use, :func:`shearbatch.slurm.allocated_cpus`: ``SLURM_CPUS_PER_TASK``, else the
    affinity mask; ``1`` reads in this process; small campaigns are always read here),
    in chunks of at most ``chunk`` directories (smaller when there are few per process).
    The readers are CPU-only (:func:`map_cpu_only`) and need no JAX. ``path`` is relative
    to ``root``.
    """
    from ..slurm import allocated_cpus

    root = Path(root)
    dirs = find_realization_dirs(root)
    workers = workers or allocated_cpus()
    chunks, parallel = plan_chunks(dirs, workers, chunk)
    logger.info("found %d realization directories under %s", len(dirs), root)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(dirs), unit="dir", desc="bias-extract")

    def tick(n: int) -> None:
        if bar is not None:
            bar.update(n)
        if on_progress is not None:
            on_progress(n)

    rows: list[dict[str, Any]] = []
    if not parallel:
        for c in chunks:
            rows += _read_chunk((c, thresholds))
            tick(len(c))
    else:
        for part in map_cpu_only(_read_chunk, [(c, thresholds) for c in chunks], workers):
            rows += part
            tick(len(part))
    if bar is not None:
        bar.close()
    for r, p in zip(rows, dirs, strict=True):
        r["path"] = str(p.relative_to(root)) or "."
    return rows


def status_counts(rows: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """``{status: count}`` over :data:`STATUSES` (zeros included)."""
    out = dict.fromkeys(STATUSES, 0)
    for r in rows:
        out[r["status"]] = out.get(r["status"], 0) + 1
    return out


def write_population(rows: Sequence[Mapping[str, Any]], path: str | Path) -> Path | None:
    """The per-galaxy draws of every ``ok`` interim-model row (``_population``) in one
    ``.npz`` for ``bias-stats``' pooled fit; None (nothing written, a stale file removed)
    when there is none.

    Arrays, one entry per galaxy: ``run_id``, ``galaxy`` (index in its realization),
    ``eps`` (G, K, 2) float32 observed-ellipticity draws (NaN-padded to the largest K),
    ``log_base`` (G, K) float32 (each galaxy's maximum subtracted: a per-galaxy constant
    does not move the fit); ``population``: the intrinsic-shape priors as JSON. Written
    realization by realization into the (uncompressed, ``np.savez``) archive: no
    concatenated copy of the draws is made.
    """
    path = Path(path)
    keep = _population_rows(rows)
    if not keep:
        path.unlink(missing_ok=True)
        return None
    k = max(r["_population"]["eps"].shape[1] for r in keep)
    run_id, galaxy = _population_index(keep)
    pops = _population_json(keep)
    g = len(run_id)
    with atomic.replacing(path) as tmp, zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED,
                                                       allowZip64=True) as zf:  # fmt: skip
        for name, arr in (("run_id", run_id), ("galaxy", galaxy)):
            with zf.open(f"{name}.npy", "w", force_zip64=True) as fh:
                np.lib.format.write_array(fh, arr, allow_pickle=False)
        for name, tail in (("eps", (2,)), ("log_base", ())):
            with zf.open(f"{name}.npy", "w", force_zip64=True) as fh:
                np.lib.format.write_array_header_1_0(fh, {
                    "descr": np.lib.format.dtype_to_descr(np.dtype(np.float32)),
                    "fortran_order": False, "shape": (g, k, *tail)})  # fmt: skip
                for r in keep:
                    fh.write(_padded(_compact(r["_population"]), name, k).tobytes())
        with zf.open("population.npy", "w", force_zip64=True) as fh:
            np.lib.format.write_array(fh, np.asarray(pops), allow_pickle=False)
    return path


def _population_rows(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [r for r in rows if r.get("status") == "ok" and "_population" in r]


def _population_index(keep: Sequence[Mapping[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    run_id, galaxy = [], []
    for r in keep:
        m = r["_population"]["eps"].shape[0]
        run_id += [r["run_id"]] * m
        galaxy += list(range(m))
    return np.asarray(run_id), np.asarray(galaxy)


def _population_json(keep: Sequence[Mapping[str, Any]]) -> str:
    pops = {json.dumps([dict(p) for p in r["_population"]["population"]]) for r in keep}
    if len(pops) > 1:
        raise ValueError(f"interim realizations with different population priors: {sorted(pops)}")
    return pops.pop()


def _compact(d: Mapping[str, Any]) -> Mapping[str, Any]:
    """A row's ``_population`` as :func:`compact_draws` makes it (read_realization keeps it
    so; float64 draws, e.g. made by hand, are compacted here)."""
    return d if d["log_base"].dtype == np.float32 else compact_draws(d)


def _padded(d: Mapping[str, Any], name: str, k: int) -> np.ndarray:
    """One realization's compact ``name`` (float32), NaN-padded to ``k`` draws."""
    x = np.asarray(d[name], np.float32)
    if x.shape[1] == k:
        return np.ascontiguousarray(x)
    out = np.full((x.shape[0], k, *x.shape[2:]), np.nan, np.float32)
    out[:, : x.shape[1]] = x
    return out


def population_arrays(rows: Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray] | None:
    """The arrays :func:`write_population` writes (None without interim rows)."""
    keep = _population_rows(rows)
    if not keep:
        return None
    k = max(r["_population"]["eps"].shape[1] for r in keep)
    run_id, galaxy = _population_index(keep)
    pops = _population_json(keep)
    compact = [_compact(r["_population"]) for r in keep]
    return {"run_id": run_id, "galaxy": galaxy,
            "eps": np.concatenate([_padded(d, "eps", k) for d in compact]),
            "log_base": np.concatenate([_padded(d, "log_base", k) for d in compact]),
            "population": np.asarray(pops)}  # fmt: skip


def summary_text(rows: Sequence[Mapping[str, Any]]) -> str:
    """``summary.csv``'s text: columns :data:`SUMMARY_COLUMNS`, empty cells for unknowns,
    floats to 10 significant digits."""
    import pandas as pd

    df = pd.DataFrame(list(rows), columns=SUMMARY_COLUMNS)
    for col in ("seed", "pair_sign", "rotation", "n_rotations", "batch_size", "divergences"):
        df[col] = df[col].astype("Int64")
    for col in FLAG_COLUMNS:
        df[col] = df[col].astype("boolean")
    return df.to_csv(index=False, float_format="%.10g")


def write_summary(rows: Sequence[Mapping[str, Any]], path: str | Path) -> Path:
    """Write ``summary.csv`` (:func:`summary_text`) atomically."""
    return atomic.write_text(path, summary_text(rows))


#: summary.csv's True / False columns (:func:`summary_text` writes them as ``boolean``)
FLAG_COLUMNS = ("passed_convergence", "truth_from_prior", "in_plan", "code_dirty")
#: summary.csv's text columns (:func:`read_summary`)
TEXT_COLUMNS = (
    "run_id",
    "pair_id",
    "status",
    "method",
    "reason",
    "flags",
    "point_estimate",
    "precision",
    "path",
    "config_hash",
    "code_commit",
    "code_fingerprint",
    "shear_model",
    "estimate",
)
_ALWAYS_TEXT = ("run_id", "pair_id", "status")
_FLAG_WORDS = {"true": True, "1": True, "1.0": True, "false": False, "0": False, "0.0": False}


#: summary.csv columns of older versions still read: old name -> current name
LEGACY_COLUMNS = {"estimate": "point_estimate"}


def current_columns(df: Any) -> Any:
    """``df`` (a summary table) with the columns of older versions renamed to their
    current names (:data:`LEGACY_COLUMNS`; the same frame when there is none)."""
    old = {k: v for k, v in LEGACY_COLUMNS.items() if k in df.columns and v not in df.columns}
    return df.rename(columns=old) if old else df


def read_summary(source: str | Path | io.StringIO) -> Any:
    """A summary table (a path or a text buffer) as ``bias-stats`` reads it: a pandas
    DataFrame, :data:`TEXT_COLUMNS` as text (pandas' text type: ``str`` on pandas 3,
    ``object`` on pandas 2; an empty cell is NaN; an all-empty column other than
    ``run_id``, ``pair_id`` and ``status`` as float NaN, which is what pandas infers for
    it), :data:`FLAG_COLUMNS` as nullable booleans, the columns of older versions renamed
    (:func:`current_columns`). ``ValueError`` or ``OSError`` when
    it cannot be read.

    The text and flag columns are parsed as text (``dtype=str``), a type given, not
    inferred, so the table is the same whichever pandas reads it and however its parser
    cuts a large file into chunks (``low_memory``): as categories, a chunk whose cells are
    all empty (a run of rows of a campaign stopped by ``--time-limit``) got categories of
    another type, and pandas 3.0 failed to join the chunks (``union_categoricals``:
    "dtype of categories must be the same"); pandas 2 made an empty cell the text "nan"
    when the categories were made text. The parser shares one string object among the
    equal cells of a chunk, so a repeated status, method or config hash costs a pointer
    per row, as the categories' did. A text column whose values all look like numbers (an
    all-digit config hash) stays text."""
    import numpy as np
    import pandas as pd

    # the flag columns read as text, then as nullable booleans: a failed realization's
    # empty cell among True / False would otherwise give a column of mixed types in a
    # large table parsed in chunks (pandas' DtypeWarning); "1" / "0" (older tables) too
    df = pd.read_csv(source, dtype=dict.fromkeys((*TEXT_COLUMNS, *FLAG_COLUMNS), str))
    for col in (c for c in TEXT_COLUMNS if c in df.columns):
        if col not in _ALWAYS_TEXT and df[col].isna().all():
            df[col] = df[col].astype(float)
    for col in (c for c in FLAG_COLUMNS if c in df.columns):
        codes, words = pd.factorize(df[col])  # an empty cell: code -1, the None appended
        look = [_FLAG_WORDS.get(str(w).strip().lower()) for w in words]
        df[col] = pd.array(np.array([*look, None], dtype=object)[codes], dtype="boolean")
    return current_columns(df)


def summary_frame(rows: Sequence[Mapping[str, Any]]) -> Any:
    """The table :func:`read_summary` gives for the ``summary.csv`` of ``rows``, without
    the file: the same text, parsed (the same rounding, the same types)."""
    return read_summary(io.StringIO(summary_text(rows)))
