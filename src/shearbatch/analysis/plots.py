"""Figures of a bias campaign; each function returns a matplotlib Figure (the CLI saves them).

Figures are built on :class:`matplotlib.figure.Figure` directly (Agg canvas),
so nothing here touches pyplot's global state or the user's backend.

- :func:`residual_figure`: ``g_hat - g_true`` (``g_hat`` the point estimate the
  fit used) against ``g_true`` per component, the fitted line ``m g_true + c``
  with its ±1σ band from the reported error method's covariance of ``(m, c)``
  (jackknife or bootstrap over seeds, named in the legend); a component whose
  truth is constant is drawn against the other component's truth with its
  offset ``c`` (leakage view).
- :func:`coverage_figure`: observed coverage per credible level and component
  with the expected value, its two-sided binomial band and the test's status
  (pass, fail, or inconclusive with too few independent seeds).
- :func:`rank_figure`: histograms of the truth's rank among the draws (SBC;
  a PIT histogram when the truths were not drawn from the prior), with the uniform
  99% band drawn per independent seed (:func:`seed_band`).
- :func:`diagnostics_figure`: per-method diagnostics of the worst
  realizations (:data:`WORST_RULE`), read from their ``posterior.nc``: trace and
  rank plots per chain for NUTS; draws against the Laplace / guide Gaussian for
  MAP and VI.
- :func:`stamps_figure`: data in units of the noise (asinh stretch), and, after
  a run, the model at the estimate and the residual.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from scipy import stats as st

from ..core.convergence import Convergence
from ..io import POSTERIOR
from .bias_fits import Fit, error_label
from .result import Coverages, Sbc

__all__ = [
    "WORST_RULE",
    "coverage_figure",
    "diagnostics_figure",
    "merge_worst",
    "rank_figure",
    "residual_figure",
    "seed_band",
    "stamps_figure",
    "trace_figure",
    "worst_converged",
    "worst_rows",
]

logger = logging.getLogger(__name__)


def _figure(w: float, h: float) -> Figure:
    fig = Figure(figsize=(w, h), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _pm(v: float | None, e: float | None) -> str:
    if v is None:
        return "undefined"
    return f"{v:.2e} ± {e:.1e}" if e is not None and np.isfinite(e) else f"{v:.2e}"


def residual_figure(
    df: Any,
    fits: Mapping[str, Fit],
    estimator: str = "regression",
    *,
    point: str = "mean",
    weights: str = "none",
    n_total: int | None = None,
) -> Figure:
    """``g_hat - g_true`` vs ``g_true`` with the fitted ``m g + c`` line and its band, per component.

    ``g_hat`` is the ``point`` estimate (column ``<comp>_<point>``) the fit used;
    the band is ``±1σ`` of the line, ``sqrt(var_m g^2 + 2 cov_mc g + var_c)``,
    from the covariance of the error method that produced the reported errors
    (named in the legend). ``n_total``: the usable rows when ``df`` is a sample of them
    (whole seeds: :data:`shearbatch.analysis.bias.SAMPLE_ROWS`), named in the legend.
    """
    fig = _figure(11, 4.2)
    axes = fig.subplots(1, 2)
    for ax, comp in zip(axes, ("g1", "g2"), strict=True):
        f = fits[comp]
        other = "g2" if comp == "g1" else "g1"
        xcol = f"{comp}_true" if f.m is not None else f"{other}_true"
        x = df[xcol].to_numpy(float)
        d = df[f"{comp}_{point}"].to_numpy(float) - df[f"{comp}_true"].to_numpy(float)
        s = df[f"{comp}_std"].to_numpy(float) if f"{comp}_std" in df.columns else None
        span = np.ptp(x) if np.ptp(x) > 0 else 1.0
        jitter = (np.random.default_rng(0).uniform(-1, 1, x.size)) * 0.01 * span
        shown = f"n={len(d)}" if n_total in (None, len(d)) else \
            f"{len(d)} of n={n_total}, whole seeds sampled"  # fmt: skip
        ax.errorbar(x + jitter, d, yerr=s, fmt="o", ms=3, lw=0.8, alpha=0.6, color="C0",
                    label=f"realizations ({shown}): posterior {point}, ±1σ posterior")  # fmt: skip
        xs = np.linspace(x.min() - 0.05 * span, x.max() + 0.05 * span, 100)
        m = 0.0 if f.m is None else f.m
        line = m * xs + f.c
        how = error_label(f)
        if f.cov is not None:
            # the constant-truth fit has no slope: its line is flat in the other truth
            xm = xs if f.m is not None else np.zeros_like(xs)
            var = f.cov[0, 0] * xm**2 + 2 * f.cov[0, 1] * xm + f.cov[1, 1]
            sd = np.sqrt(np.maximum(var, 0.0))
            ax.fill_between(xs, line - sd, line + sd, color="C3", alpha=0.25,
                            label=f"fit ±1σ band ({how})")  # fmt: skip
        label = (
            f"{estimator} fit of the posterior {point}, weights {weights}:\n"
            f" m{comp[1]} = {_pm(f.m, f.m_err)}, c{comp[1]} = {_pm(f.c, f.c_err)}\n ({how})"
        )
        ax.plot(xs, line, color="C3", lw=1.5, label=label)
        ax.axhline(0.0, color="k", lw=0.6, ls=":")
        ax.set_xlabel(xcol)
        ax.set_ylabel(f"{comp} {point} − {comp}_true")
        title = f"{comp}: g_hat = (1 + m) g_true + c, g_hat = posterior {point}"
        if f.m is None:
            title = f"{comp}: truth constant → m undefined; offset c vs {other}_true"
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=7, loc="best")
        ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    return fig


def coverage_figure(cov: Coverages) -> Figure:
    """Observed coverage of the central 68% / 95% intervals with the expected value and band."""
    fig = _figure(6.5, 4.2)
    ax = fig.subplots()
    items = [(c, lev, r) for c, levels in cov.items() for lev, r in levels.items()]
    for i, (_, _, r) in enumerate(items):
        if not r.tested:
            ax.text(i, 0.5, f"skipped:\n{r.skipped or ''}", ha="center", fontsize=7)
            continue
        lo, hi = r.band
        ax.add_patch(_rect(i - 0.3, lo, 0.6, hi - lo))
        ax.hlines(r.expected, i - 0.3, i + 0.3, color="k", lw=1.2)
        status = r.status or ("pass" if r.passed else "fail")
        color = {"pass": "C2", "fail": "C3"}.get(status, "C1")
        ax.plot(i, r.observed, "o", color=color, ms=8)
        n_eff = r.n_eff if r.n_eff is not None else r.n
        note = f"{r.observed:.2f} {status}\n(n={r.n}, n_eff={n_eff})"
        if status == "inconclusive":
            note += "\ntoo few seeds"
        dy = -36 if r.observed > 0.85 else -8  # keep the note inside the axes
        ax.annotate(note, (i, r.observed), xytext=(8, dy), textcoords="offset points",
                    fontsize=7)  # fmt: skip
    ax.set_xticks(range(len(items)), [f"{c} {float(lev):.0%}" for c, lev, _ in items])
    ax.set_xlim(-0.6, len(items) - 0.4)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("fraction of truths inside the central interval")
    ax.set_title("Posterior coverage: observed (dot: green pass, red fail, orange too few seeds),\n"
                 "expected (line), two-sided binomial band (shaded; n_eff = independent seeds)",
                 fontsize=9)  # fmt: skip
    return fig


def _rect(x: float, y: float, w: float, h: float) -> Any:
    from matplotlib.patches import Rectangle

    return Rectangle((x, y), w, h, color="0.8", zorder=0)


def rank_figure(ranks: Any, sbc_res: Sbc, n_bins: int | None = None) -> Figure:
    """Histogram of ``rank_g{1,2}`` with the uniform expectation and its 99% binomial band.

    ``ranks``: a table with ``rank_g1``, ``rank_g2`` (and ``seed``) columns, or per
    component ``(distinct finite ranks, their counts, independent seeds)`` (a table
    measured in parts: :class:`shearbatch.analysis.bias.TableDigest`)."""
    fig = _figure(10, 3.8)
    axes = fig.subplots(1, 2)
    applied = sbc_res.skipped is None
    for ax, comp in zip(axes, ("g1", "g2"), strict=True):
        vals, counts, n_seeds = _rank_counts(ranks, comp)
        n = int(counts.sum())
        if n == 0:
            ax.text(0.5, 0.5, "no ranks", ha="center", transform=ax.transAxes)
            continue
        bins = n_bins or int(np.clip(n // 5, 2, 20))
        ax.hist(np.clip(vals, 0, 1), bins=bins, range=(0, 1), weights=counts, color="C0",
                alpha=0.7, edgecolor="w")  # fmt: skip
        p = 1.0 / bins
        lo, hi, k = seed_band(n, n_seeds, p)
        label = "uniform: 99% band" + (f" per independent seed ({n / k:.0f} seeds, "
                                       f"{k:.2g} realizations each)" if k > 1 else "")  # fmt: skip
        ax.axhspan(lo, hi, color="0.8", zorder=0, label=label)
        ax.axhline(n * p, color="k", lw=1, label="uniform expectation")
        test = getattr(sbc_res, comp) if applied else None
        pv = f", χ² p = {test.p_value:.3f}" if test is not None and test.p_value is not None else ""
        kind = "SBC rank" if applied else "rank of truth (PIT; not SBC)"
        ax.set_title(f"{comp}: {kind}{pv}", fontsize=10)
        ax.set_xlabel(f"fraction of posterior draws below {comp}_true")
        ax.set_ylabel("realizations")
        ax.legend(fontsize=8)
    if not applied:
        fig.suptitle(f"SBC skipped: {sbc_res.skipped}", fontsize=8)
    return fig


def _rank_counts(ranks: Any, comp: str) -> tuple[np.ndarray, np.ndarray, Any]:
    """``(distinct finite ranks, counts, seeds)`` of a component (seeds: an array of labels,
    a count, or None: one per rank)."""
    if isinstance(ranks, Mapping):
        got = ranks.get(comp)
        if got is None:
            return np.zeros(0), np.zeros(0, dtype=np.int64), None
        return got
    col = f"rank_{comp}"
    if col not in ranks.columns:
        return np.zeros(0), np.zeros(0, dtype=np.int64), None
    r = ranks[col].to_numpy(float)
    fin = np.isfinite(r)
    vals, counts = np.unique(r[fin], return_counts=True)
    seeds = ranks["seed"].astype(str).to_numpy()[fin] if "seed" in ranks.columns else None
    return vals, counts, seeds


def seed_band(n: int, seeds: np.ndarray | int | None, p: float, level: float = 0.99) -> tuple:
    """``(lo, hi, per_seed)``: the central ``level`` band of a rank-histogram bin count
    (probability ``p`` per realization) drawn per independent seed.

    A seed's realizations (its grid points, pair twins and rotations share the galaxy and
    the noise) have correlated ranks, so a bin count varies more than a binomial over the
    ``n`` rows (``seeds``: their seed labels, or how many there are): up to ``per_seed`` times more when a seed's realizations share one rank.
    The band is that limit, ``per_seed * Binomial(G, p)`` over the ``G`` seeds
    (``per_seed = n / G``), which never understates the scatter of positively correlated
    ranks; one realization per seed gives the plain binomial band.
    """
    if seeds is None:
        g = n
    elif isinstance(seeds, int | np.integer):
        g = max(int(seeds), 1)
    else:
        g = max(len(np.unique(seeds)), 1)
    k = n / g
    lo, hi = st.binom.ppf([(1 - level) / 2, (1 + level) / 2], g, p)
    return k * lo, k * hi, k


#: what "worst" means, printed on the diagnostics figure and in bias-stats --help
WORST_RULE = (
    "worst = failing convergence first, then the largest R-hat - 1, then the largest "
    "pull |g_mean - g_true| / g_std summed over g1 and g2; one realization per seed"
)


def worst_converged(df: Any, k: int = 3) -> list[str]:
    """Run ids of the ``k`` worst-converged ok realizations (:data:`WORST_RULE`).

    Order: not passing convergence first, then the largest R-hat, then the
    smallest bulk ESS, then the largest pull ``|g_hat - g_true| / std``; at most one
    realization per seed (a seed's grid points share its galaxy and noise, so the same
    seed would fill every row).
    """
    return list(worst_rows(df, k)["run_id"])


def worst_rows(df: Any, k: int = 3) -> Any:
    """The rows of :func:`worst_converged` (``run_id``, ``seed``, ``key``: larger is worse,
    ``g1_true``, ``g2_true``), worst first; of a table in parts, :func:`merge_worst`."""
    import pandas as pd

    cols = ["run_id", "seed", "key", "g1_true", "g2_true"]
    ok = df[df["status"].astype(str) == "ok"]
    if ok.empty:
        return pd.DataFrame({c: [] for c in cols})
    passed = ok["passed_convergence"].astype(str).str.lower().eq("true")
    key = np.zeros(len(ok))
    key += np.where(passed, 0.0, 1e12)
    for comp in ("g1", "g2"):
        if f"rhat_{comp}" in ok.columns:
            key += 1e6 * np.nan_to_num(ok[f"rhat_{comp}"].to_numpy(float) - 1.0)
        pull = np.abs(ok[f"{comp}_mean"].to_numpy(float) - ok[f"{comp}_true"].to_numpy(float))
        with np.errstate(divide="ignore", invalid="ignore"):  # a zero width: the largest pull
            key += np.nan_to_num(pull / ok[f"{comp}_std"].to_numpy(float))
    seeds = ok["seed"].astype(str).to_numpy() if "seed" in ok.columns else None
    table = pd.DataFrame({"run_id": ok["run_id"].to_numpy(object),
                          "seed": seeds if seeds is not None else np.arange(len(ok)).astype(str),
                          "key": key, "g1_true": ok["g1_true"].to_numpy(float),
                          "g2_true": ok["g2_true"].to_numpy(float)})  # fmt: skip
    return merge_worst([table], k, seeds is not None)


def merge_worst(tables: Sequence[Any], k: int = 3, by_seed: bool = True) -> Any:
    """The ``k`` worst of :func:`worst_rows`' tables (parts sharing no seed), one per seed."""
    import pandas as pd

    table = pd.concat(list(tables), ignore_index=True)
    order = np.argsort(-table["key"].to_numpy(float), kind="stable")
    seeds = table["seed"].astype(str).to_numpy()
    out, seen = [], set()
    for i in order:
        s = seeds[i] if by_seed else i
        if s in seen:
            continue
        seen.add(s)
        out.append(i)
        if len(out) == k:
            break
    return table.iloc[out].reset_index(drop=True)


def _read_realization(d: Path) -> tuple[dict[str, np.ndarray], dict[str, Any], Convergence]:
    """``(g draws (chain, draw), root attrs, convergence record)`` of one realization."""
    import json

    import xarray as xr

    with xr.open_datatree(Path(d) / POSTERIOR, engine="netcdf4") as tree:
        g = {s: np.asarray(tree["posterior"][s].values, float) for s in ("g1", "g2")}
        attrs = dict(tree.attrs)
    conv_path = Path(d) / "convergence.json"
    raw = json.loads(conv_path.read_text()) if conv_path.is_file() else {}
    return g, attrs, Convergence.from_json(raw)


def _rank_lines(ax: Any, x: np.ndarray, bins: int = 20) -> None:
    """Rank plot: histogram per chain of the ranks of its draws among all draws."""
    ranks = st.rankdata(x.ravel()).reshape(x.shape)
    edges = np.linspace(0, x.size, bins + 1)
    for ch in range(x.shape[0]):
        counts, _ = np.histogram(ranks[ch], edges)
        ax.step(np.arange(bins), counts, where="mid", lw=1, label=f"chain {ch}")
    expect = x.shape[1] / bins
    lo, hi = st.binom.ppf([0.005, 0.995], x.shape[1], 1.0 / bins)
    ax.axhspan(lo, hi, color="0.85", zorder=0, label="uniform: 99% band")
    ax.axhline(expect, color="k", lw=0.8)
    ax.set_xlabel("rank bin (all chains pooled)")
    ax.set_ylabel("draws")


def _ellipses(ax: Any, centre: np.ndarray, cov: np.ndarray) -> None:
    """1 and 2 sigma (Mahalanobis) contours of N(centre, cov)."""
    vals, vecs = np.linalg.eigh(cov)
    t = np.linspace(0, 2 * np.pi, 200)
    circle = np.stack([np.cos(t), np.sin(t)])
    for n, ls in ((1, "-"), (2, "--")):
        pts = vecs @ (n * np.sqrt(np.maximum(vals, 0))[:, None] * circle)
        ax.plot(centre[0] + pts[0], centre[1] + pts[1], "C3", ls=ls, lw=1.2,
                label=f"{n}σ of the method's Gaussian")  # fmt: skip


def diagnostics_figure(
    dirs: Sequence[Path], truths: Sequence[tuple[float, float]], rule: str = WORST_RULE
) -> Figure:
    """Per-method diagnostics of a few realizations, one row each, values relative to the truth.

    Chains (NUTS): trace and rank plot of g1 and g2 per chain. One chain of
    independent draws (MAP's Laplace draws, VI's guide draws): histograms of g1
    and g2 against the method's Gaussian, and the g1-g2 draws against its 1 and
    2 sigma ellipses, with the truth.
    """
    n = max(len(dirs), 1)
    fig = _figure(15, 3.1 * n + 0.6)
    axes = np.atleast_2d(fig.subplots(n, 4))
    for row, d, (t1, t2) in zip(axes, dirs, truths, strict=False):
        g, attrs, conv = _read_realization(d)
        method = str(attrs.get("inference_method", conv.method or "?"))
        t = {"g1": t1, "g2": t2}
        name = Path(d).name
        if g["g1"].shape[0] > 1:
            for j, comp in enumerate(("g1", "g2")):
                ax = row[2 * j]
                for ch in range(g[comp].shape[0]):
                    ax.plot(g[comp][ch] - t[comp], lw=0.5, alpha=0.8, label=f"chain {ch}")
                ax.axhline(0.0, color="k", ls="--", lw=1, label="truth")
                ax.set_xlabel("draw")
                ax.set_ylabel(f"{comp} − {comp}_true")
                ax.set_title(f"{name} ({method}): {comp} trace per chain", fontsize=8, loc="left")
                _rank_lines(row[2 * j + 1], g[comp])
                row[2 * j + 1].set_title(f"{comp} rank plot (flat if chains agree)", fontsize=8)
            row[0].legend(fontsize=6, loc="upper right")
            row[1].legend(fontsize=6, loc="lower right")
        else:
            x = np.stack([g["g1"].ravel() - t1, g["g2"].ravel() - t2])
            # MAP: the Laplace Gaussian sits at the mode; VI: the guide at its own mean
            laplace = conv.point_estimate == "mode"  # a mode estimate with its Laplace draws
            mode = conv.mode if laplace else {}
            centre = np.array([mode.get("g1", t1 + x[0].mean()) - t1,
                               mode.get("g2", t2 + x[1].mean()) - t2])  # fmt: skip
            cov = np.cov(x)
            kind = "Laplace" if laplace else "guide"
            for j, comp in enumerate(("g1", "g2")):
                ax = row[j]
                ax.hist(x[j], bins=40, density=True, color="C0", alpha=0.6, label="draws")
                sd = np.sqrt(cov[j, j])
                xs = np.linspace(x[j].min(), x[j].max(), 200)
                ax.plot(xs, st.norm.pdf(xs, centre[j], sd), "C3", lw=1.2,
                        label=f"{kind} Gaussian (centre {'mode' if mode else 'mean'})")  # fmt: skip
                ax.axvline(0.0, color="k", ls="--", lw=1, label="truth")
                ax.set_xlabel(f"{comp} − {comp}_true")
                ax.set_ylabel("density")
                ax.set_title(f"{name} ({method}): {comp}, pull {centre[j] / sd:+.2f}σ",
                             fontsize=8, loc="left")  # fmt: skip
                ax.legend(fontsize=6)
            ax = row[2]
            ax.scatter(x[0], x[1], s=2, alpha=0.3, label="draws")
            _ellipses(ax, centre, cov)
            ax.plot(0.0, 0.0, "k*", ms=10, label="truth")
            ax.set_xlabel("g1 − g1_true")
            ax.set_ylabel("g2 − g2_true")
            ax.set_title(f"draws vs the {kind} ellipses", fontsize=8)
            ax.legend(fontsize=6)
            ax = row[3]
            ax.set_axis_off()
            lines = [f"{name}", f"method: {method} (independent draws, one 'chain':",
                     "  no trace or R-hat to show)", f"draws: {x.shape[1]}",
                     f"status: {conv.status or '?'}  flags: "
                     f"{', '.join(conv.flag_names) or 'none'}"]  # fmt: skip
            for j, comp in enumerate(("g1", "g2")):
                lines.append(f"{comp}: truth {t[comp]:+.4f}, std {np.sqrt(cov[j, j]):.2e}")
            ax.text(0.0, 0.95, "\n".join(lines), va="top", fontsize=8, family="monospace",
                    transform=ax.transAxes)  # fmt: skip
        for ax in row:
            if ax.axison:
                ax.ticklabel_format(style="sci", scilimits=(-3, 3))
    fig.suptitle(f"Diagnostics of the {len(dirs)} worst realization(s); {rule}", fontsize=9)
    return fig


def trace_figure(dirs: Sequence[Path], truths: Sequence[tuple[float, float]]) -> Figure:
    """Alias of :func:`diagnostics_figure` (kept for callers of the old name)."""
    return diagnostics_figure(dirs, truths)


def stamps_figure(
    images: np.ndarray,
    titles: Sequence[str],
    noise_sigma: float,
    models: np.ndarray | None = None,
) -> Figure:
    """Stamps of a few realizations in units of the pixel noise, one row each.

    ``images`` (B, M, H, W): the data; first galaxy of each realization. Pixel
    values are divided by the noise sigma and shown with an asinh stretch
    (linear within +-1 sigma), so the noise and the galaxy are both visible.
    With ``models`` (B, M, H, W, the noise-free model at each realization's
    estimate) two more columns: the model, and the residual (data - model) /
    sigma on a fixed +-4 scale (pure noise when the model fits).
    """
    from matplotlib.colors import AsinhNorm

    data = np.asarray(images)[:, 0] / noise_sigma
    mods = None if models is None else np.asarray(models)[:, 0] / noise_sigma
    ncol = 1 if mods is None else 3
    b = data.shape[0]
    fig = _figure(3.4 * ncol + 0.4, 3.0 * b + 0.6)
    axes = np.atleast_2d(fig.subplots(b, ncol)).reshape(b, ncol)
    for i in range(b):
        top = max(float(np.max(data[i])), 5.0)
        norm = AsinhNorm(linear_width=1.0, vmin=-5.0, vmax=top)
        im = axes[i, 0].imshow(data[i], origin="lower", cmap="magma", norm=norm,
                               interpolation="nearest")  # fmt: skip
        ticks = [t for t in (-3, -1, 0, 1, 3, 10, 30, 100, 300, 1000, 3000, 1e4, 3e4, 1e5)
                 if t <= top]  # fmt: skip
        fig.colorbar(im, ax=axes[i, 0], shrink=0.8, label="data / σ (asinh)", ticks=ticks,
                     format="%g")  # fmt: skip
        axes[i, 0].set_title(f"{titles[i]}: data", fontsize=7)
        if mods is not None:
            im = axes[i, 1].imshow(mods[i], origin="lower", cmap="magma", norm=norm,
                                   interpolation="nearest")  # fmt: skip
            fig.colorbar(im, ax=axes[i, 1], shrink=0.8, label="model / σ (asinh)", ticks=ticks,
                         format="%g")  # fmt: skip
            axes[i, 1].set_title("model at the estimate", fontsize=7)
            res = data[i] - mods[i]
            im = axes[i, 2].imshow(res, origin="lower", cmap="RdBu_r", vmin=-4, vmax=4,
                                   interpolation="nearest")  # fmt: skip
            fig.colorbar(im, ax=axes[i, 2], shrink=0.8, label="(data − model) / σ")
            axes[i, 2].set_title(f"residual: rms {np.sqrt(np.mean(res**2)):.2f} σ "
                                 "(1 = noise only)", fontsize=7)  # fmt: skip
        for ax in axes[i]:
            ax.set_xticks([])
            ax.set_yticks([])
    what = "data, model at the estimate, residual" if mods is not None else "simulated data"
    fig.suptitle(f"{what}; pixel values in units of the noise σ = {noise_sigma:g}", fontsize=9)
    return fig
