"""``bias-stats``' figures (under ``plots/``) and its self-contained HTML report, from a
:class:`~shearbatch.analysis.result.BiasResult` and the campaign behind it. Every file is
written atomically (:mod:`shearbatch.io.atomic`)."""

from __future__ import annotations

import io
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..analysis.result import BiasResult
from ..io import atomic
from ..io.layout import COMMANDS_FILE, FIGURES, PLOTS
from .inputs import campaign_config
from .stamps import stamps_png

__all__ = ["stats_plots", "write_report"]

logger = logging.getLogger("shearbatch")


def _png(fig: Any, dpi: int) -> bytes:
    """A figure as PNG bytes (written by :func:`shearbatch.io.atomic.write_bytes`)."""
    buf = io.BytesIO()
    fig.savefig(buf, dpi=dpi, format="png")
    return buf.getvalue()


def write_report(
    res: BiasResult,
    digest: Any,
    plot_dir: Path | None,
    posterior_dir: str | Path | None,
    path: Path,
    command: Sequence[str] = (),
) -> Path:
    """``bias-stats --report``: one self-contained HTML file (analysis/report_text.py); ``command``
    is the bias-stats command line quoted as provenance. With the campaign root
    (``posterior_dir``) it embeds the config as run and the stamps (data, model,
    residual) of up to three used realizations of distinct seeds."""
    from ..analysis import report_text
    from ..analysis.summary_table import posterior_attrs
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
            figures.append(stamps_png(root, ids, plot_dir / FIGURES[0]))
        except Exception as err:  # a figure must not cost the report
            logger.warning("report: no stamps (%s: %s)", type(err).__name__, err)
    if plot_dir is not None:
        figures += sorted((p for p in plot_dir.glob("*.png") if p.name != FIGURES[0]),
                          key=lambda p: (p.name not in order, order.index(p.name)
                                         if p.name in order else 0, p.name))  # fmt: skip
    commands = []
    if root is not None and (root / COMMANDS_FILE).is_file():
        commands = (root / COMMANDS_FILE).read_text().splitlines()[-20:]
    prov = report_text.provenance(list(command), attrs, commands)
    config = {"text": cfg_text, "source": cfg_from} if cfg_text else None
    text = report_text.render_report(res, figures, digest.failures, prov, config=config)
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
