"""What ``bias-stats`` writes besides ``bias_results.json``: its figures and the HTML report."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .runner import COMMANDS_FILE

__all__ = ["stats_plots", "write_report"]

logger = logging.getLogger("shearbatch")


def write_report(
    res: dict[str, Any],
    df: Any,
    plot_dir: Path | None,
    posterior_dir: str | None,
    path: Path,
    command: Sequence[str] = (),
) -> Path:
    """``bias-stats --report``: one self-contained HTML file (analysis/report.py); ``command``
    is the bias-stats command line quoted as provenance."""
    import xarray as xr

    from ..analysis import report
    from ..io import POSTERIOR, find_realization_dirs

    attrs = []
    if posterior_dir is not None:
        for d in find_realization_dirs(posterior_dir)[:500]:  # provenance, not statistics
            if (d / POSTERIOR).is_file():
                with xr.open_datatree(d / POSTERIOR, engine="netcdf4") as tree:
                    attrs.append(dict(tree.attrs))
    order = ["residuals.png", "coverage.png", "ranks.png", "worst_diagnostics.png"]
    figures = []
    if plot_dir is not None:
        figures = sorted(plot_dir.glob("*.png"), key=lambda p: (p.name not in order,
                         order.index(p.name) if p.name in order else 0, p.name))  # fmt: skip
    commands = []
    if posterior_dir is not None and (Path(posterior_dir) / COMMANDS_FILE).is_file():
        commands = (Path(posterior_dir) / COMMANDS_FILE).read_text().splitlines()[-20:]
    prov = report.provenance(list(command), attrs, commands)
    text = report.render_report(res, figures, report.failures_by_flag(df), prov)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def stats_plots(df, use, res, fits, out: Path, posterior_dir: str | None) -> Path:
    """``bias-stats``'s figures under ``out/plots`` (residuals, coverage, SBC ranks, and with
    ``posterior_dir`` the diagnostics of the worst realizations); returns that folder."""
    from ..analysis import plots
    from ..io import POSTERIOR, find_realization_dirs

    d = out / "plots"
    d.mkdir(parents=True, exist_ok=True)
    # the population estimator: the per-realization maxima (g_mode) in the residual figure
    point = "mode" if res["point_estimate"] == "population" else res["point_estimate"]
    figs = {
        "residuals.png": plots.residual_figure(
            use, fits, res["estimator"], point=point, weights=res["weights"]
        ),
        "coverage.png": plots.coverage_figure(res["coverage"]),
        "ranks.png": plots.rank_figure(use, res["sbc"]),
    }
    if posterior_dir is not None and res["point_estimate"] == "population":
        logger.info("--posterior-dir: no per-realization g posterior to plot (interim model)")
    elif posterior_dir is not None:
        worst = plots.worst_converged(df)
        where = {p.name: p for p in find_realization_dirs(posterior_dir)}
        found = [w for w in worst if w in where and (where[w] / POSTERIOR).is_file()]
        if found:
            truth = df.set_index("run_id")
            figs["worst_diagnostics.png"] = plots.diagnostics_figure(
                [where[w] for w in found],
                [(float(truth.at[w, "g1_true"]), float(truth.at[w, "g2_true"])) for w in found],
            )
        else:
            logger.warning("--posterior-dir: none of the worst realizations %s found", worst)
    for name, fig in figs.items():
        fig.savefig(d / name, dpi=110)
    return d
