"""``bias-stats``' figures (under ``plots/``) and its self-contained HTML report, from a
:class:`~shearbatch.analysis.result.BiasResult` and the campaign behind it. Every file is
written atomically (:mod:`shearbatch.io.atomic`)."""

from __future__ import annotations

import io
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from ..analysis.result import BiasResult
from ..io import atomic
from ..io.layout import COMMANDS_FILE, FIGURES, PLOTS
from .inputs import campaign_config

__all__ = ["stats_plots", "write_report"]

logger = logging.getLogger("shearbatch")


def _png(fig: Any, dpi: int) -> bytes:
    """A figure as PNG bytes (written by :func:`shearbatch.io.atomic.write_bytes`)."""
    buf = io.BytesIO()
    fig.savefig(buf, dpi=dpi, format="png")
    return buf.getvalue()


def _stamps_png(root: Path, run_ids: Sequence[str], cfg: dict[str, Any], path: Path) -> Path:
    """Data, model at the estimate and residual of a few realizations (the data from their
    posterior.nc, the model rendered from the campaign's config at each one's estimate).

    The one part of ``bias-stats`` that runs JAX (the forward model's renderer, imported
    here and only here): JAX is set up as an entry point sets it (precision, the campaign's
    compilation cache) and restored after, without the engine."""
    import numpy as np
    import xarray as xr

    from .. import process
    from ..analysis.plots import stamps_figure
    from ..io import POSTERIOR, TRUTH, find_realization_dirs, read_json
    from ..schema import current_config
    from ..spec import run_spec
    from .preview import models_at_estimate

    where = {p.name: p for p in find_realization_dirs(root)}
    images, reals, homes = [], [], []
    for rid in run_ids:
        d = where[rid]
        with xr.open_dataset(d / POSTERIOR, group="observed_data", engine="netcdf4") as ds:
            images.append(np.asarray(ds["obs"].values, float))
        t = read_json(d / TRUTH)
        reals.append(_Real(rid, float(t["g1"]), float(t["g2"])))
        homes.append(d.parent)
    # the campaign's precision, and its compilation cache when it has one: the model's
    # constants (PSF tables, reference S/N) are computed op by op, each op a compiled
    # program that bias-run compiled and cached already (measured at Level 2 on the 2-core
    # CPU: 18 s without the cache, 7 s with it)
    # On a GPU node JAX would start here (this process's only use of it) taking 75% of the
    # GPU's memory up front for three stamps: it takes what it uses unless told otherwise
    cache = process.default_cache_dir(root)
    cache = cache if Path(cache).is_dir() else "off"
    x64 = str((cfg.get("inference") or {}).get("precision", "float64")) == "float64"
    lazy = {"XLA_PYTHON_CLIENT_PREALLOCATE": os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE",
                                                            "false")}  # fmt: skip
    with process.scoped_environ(lazy):
        saved = process.flag_values()
        try:
            process.configure_flags(x64, None if cache == "off" else cache)
            logger.info("%s", process.backend_line(x64, cache))
            spec = run_spec(current_config().model_validate(cfg))  # validated when run
            models = np.concatenate([models_at_estimate(_Where(spec, h), [r])
                                     for h, r in zip(homes, reals, strict=True)])  # fmt: skip
        finally:
            process.set_flags(saved)
    fig = stamps_figure(np.stack(images), list(run_ids), spec.model.noise_sigma, models)
    return atomic.write_bytes(path, _png(fig, dpi=90))


class _Real(NamedTuple):  # what models_at_estimate reads of a planned realization
    run_id: str
    g1: float
    g2: float


class _Where(NamedTuple):  # what models_at_estimate reads of a plan
    spec: Any
    output_dir: Path


def write_report(
    res: BiasResult,
    digest: Any,
    plot_dir: Path | None,
    posterior_dir: str | Path | None,
    path: Path,
    command: Sequence[str] = (),
) -> Path:
    """``bias-stats --report``: one self-contained HTML file (analysis/report.py); ``command``
    is the bias-stats command line quoted as provenance. With the campaign root
    (``posterior_dir``) it embeds the config as run and the stamps (data, model,
    residual) of up to three used realizations of distinct seeds."""
    from ..analysis import report
    from ..analysis.extract import posterior_attrs
    from ..io import POSTERIOR, find_realization_dirs

    root = None if posterior_dir is None else Path(posterior_dir)
    attrs = []
    if root is not None:
        for d in find_realization_dirs(root)[:500]:  # provenance, not statistics
            if (d / POSTERIOR).is_file():  # the root attrs (netCDF4: ~1 ms, xarray ~30 ms)
                try:
                    attrs.append(posterior_attrs(d / POSTERIOR))
                except (OSError, ValueError) as err:  # a damaged file: counted as corrupt
                    logger.debug("report: %s unreadable (%s)", d / POSTERIOR, err)
    order = list(FIGURES)
    figures = []
    cfg, cfg_text, cfg_from = campaign_config(root)
    if root is not None and cfg is not None and digest.stamp_runs and plot_dir:
        ids = digest.stamp_runs
        try:
            figures.append(_stamps_png(root, ids, cfg, plot_dir / FIGURES[0]))
        except Exception as err:  # a figure must not cost the report
            logger.warning("report: no stamps (%s: %s)", type(err).__name__, err)
    if plot_dir is not None:
        figures += sorted((p for p in plot_dir.glob("*.png") if p.name != FIGURES[0]),
                          key=lambda p: (p.name not in order, order.index(p.name)
                                         if p.name in order else 0, p.name))  # fmt: skip
    commands = []
    if root is not None and (root / COMMANDS_FILE).is_file():
        commands = (root / COMMANDS_FILE).read_text().splitlines()[-20:]
    prov = report.provenance(list(command), attrs, commands)
    config = {"text": cfg_text, "source": cfg_from} if cfg_text else None
    text = report.render_report(res, figures, digest.failures, prov, config=config)
    return atomic.write_text(path, text)


def stats_plots(digest: Any, res: BiasResult, fits: dict[str, Any], out: Path,
                posterior_dir: str | Path | None) -> Path:  # fmt: skip
    """``bias-stats``'s figures under ``out/plots`` (residuals, coverage, SBC ranks, and with
    ``posterior_dir`` the diagnostics of the worst realizations, one per seed); returns
    that folder."""
    from ..analysis import plots
    from ..io import POSTERIOR, find_realization_dirs

    d = out / PLOTS
    d.mkdir(parents=True, exist_ok=True)
    # the population estimator: the per-realization maxima (g_mode) in the residual figure
    point = "mode" if res.point_estimate == "population" else res.point_estimate
    _, residuals, coverage, ranks, worst_name = FIGURES
    figs = {
        residuals: plots.residual_figure(
            digest.sample,
            fits,
            res.estimator,
            point=point,
            weights=res.weights,
            n_total=digest.n_used,
        ),
        coverage: plots.coverage_figure(res.coverage),
        ranks: plots.rank_figure(digest.ranks, res.sbc),
    }
    if posterior_dir is not None and res.point_estimate == "population":
        logger.info("--posterior-dir: no per-realization g posterior to plot (interim model)")
    elif posterior_dir is not None:
        rows = digest.worst
        worst = list(rows["run_id"].astype(str))
        where = {p.name: p for p in find_realization_dirs(posterior_dir)}
        found = [i for i, w in enumerate(worst) if w in where and (where[w] / POSTERIOR).is_file()]
        if found:
            figs[worst_name] = plots.diagnostics_figure(
                [where[worst[i]] for i in found],
                [(float(rows["g1_true"].iloc[i]), float(rows["g2_true"].iloc[i])) for i in found],
            )
        else:
            logger.warning("--posterior-dir: none of the worst realizations %s found", worst)
    for name, fig in figs.items():
        atomic.write_bytes(d / name, _png(fig, dpi=110))
    return d
