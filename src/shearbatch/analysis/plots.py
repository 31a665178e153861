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
  a PIT histogram when the truths were not drawn from the prior).
- :func:`trace_figure`: trace and g1-g2 pair plots of a few realizations,
  read from their ``posterior.nc``.
- :func:`stamps_figure`: the simulated stamps of a few realizations (what the
  generator makes, before any inference).
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

from ..io import POSTERIOR
from .stats import Fit, error_label

__all__ = ["coverage_figure", "rank_figure", "residual_figure", "stamps_figure", "trace_figure"]

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
) -> Figure:
    """``g_hat - g_true`` vs ``g_true`` with the fitted ``m g + c`` line and its band, per component.

    ``g_hat`` is the ``point`` estimate (column ``<comp>_<point>``) the fit used;
    the band is ``±1σ`` of the line, ``sqrt(var_m g^2 + 2 cov_mc g + var_c)``,
    from the covariance of the error method that produced the reported errors
    (named in the legend).
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
        ax.errorbar(x + jitter, d, yerr=s, fmt="o", ms=3, lw=0.8, alpha=0.6, color="C0",
                    label=f"realizations (n={len(d)}): posterior {point}, ±1σ posterior")  # fmt: skip
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


def coverage_figure(cov: Mapping[str, Mapping[str, Any]]) -> Figure:
    """Observed coverage of the central 68% / 95% intervals with the expected value and band."""
    fig = _figure(6.5, 4.2)
    ax = fig.subplots()
    items = [(c, lev, r) for c, levels in cov.items() for lev, r in levels.items()]
    for i, (_, _, r) in enumerate(items):
        if "observed" not in r:
            ax.text(i, 0.5, f"skipped:\n{r.get('skipped', '')}", ha="center", fontsize=7)
            continue
        lo, hi = r["band"]
        ax.add_patch(_rect(i - 0.3, lo, 0.6, hi - lo))
        ax.hlines(r["expected"], i - 0.3, i + 0.3, color="k", lw=1.2)
        status = r.get("status", "pass" if r["passed"] else "fail")
        color = {"pass": "C2", "fail": "C3"}.get(status, "C1")
        ax.plot(i, r["observed"], "o", color=color, ms=8)
        note = f"{r['observed']:.2f} {status}\n(n={r['n']}, n_eff={r.get('n_eff', r['n'])})"
        if status == "inconclusive":
            note += "\ntoo few seeds"
        dy = -36 if r["observed"] > 0.85 else -8  # keep the note inside the axes
        ax.annotate(note, (i, r["observed"]), xytext=(8, dy), textcoords="offset points",
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


def rank_figure(df: Any, sbc_res: Mapping[str, Any], n_bins: int | None = None) -> Figure:
    """Histogram of ``rank_g{1,2}`` with the uniform expectation and its 99% binomial band."""
    fig = _figure(10, 3.8)
    axes = fig.subplots(1, 2)
    applied = "skipped" not in sbc_res
    for ax, comp in zip(axes, ("g1", "g2"), strict=True):
        col = f"rank_{comp}"
        r = df[col].to_numpy(float) if col in df.columns else np.array([])
        r = r[np.isfinite(r)]
        if r.size == 0:
            ax.text(0.5, 0.5, "no ranks", ha="center", transform=ax.transAxes)
            continue
        bins = n_bins or int(np.clip(r.size // 5, 2, 20))
        ax.hist(np.clip(r, 0, 1), bins=bins, range=(0, 1), color="C0", alpha=0.7, edgecolor="w")
        p = 1.0 / bins
        lo, hi = st.binom.ppf([0.005, 0.995], r.size, p)
        ax.axhspan(lo, hi, color="0.8", zorder=0, label="uniform: 99% band")
        ax.axhline(r.size * p, color="k", lw=1, label="uniform expectation")
        res = sbc_res.get(comp, {}) if applied else {}
        pv = f", χ² p = {res['p_value']:.3f}" if "p_value" in res else ""
        kind = "SBC rank" if applied else "rank of truth (PIT; not SBC)"
        ax.set_title(f"{comp}: {kind}{pv}", fontsize=10)
        ax.set_xlabel(f"fraction of posterior draws below {comp}_true")
        ax.set_ylabel("realizations")
        ax.legend(fontsize=8)
    if not applied:
        fig.suptitle(f"SBC skipped: {sbc_res['skipped']}", fontsize=8)
    return fig


def worst_converged(df: Any, k: int = 3) -> list[str]:
    """Run ids of the ``k`` worst-converged ok realizations.

    Order: not passing convergence first, then the largest R-hat, then the
    smallest bulk ESS, then the largest pull ``|g_hat - g_true| / std``.
    """
    ok = df[df["status"].astype(str) == "ok"].copy()
    if ok.empty:
        return []
    passed = ok["passed_convergence"].astype(str).str.lower().eq("true")
    key = np.zeros(len(ok))
    key += np.where(passed, 0.0, 1e12)
    for comp in ("g1", "g2"):
        if f"rhat_{comp}" in ok.columns:
            key += 1e6 * np.nan_to_num(ok[f"rhat_{comp}"].to_numpy(float) - 1.0)
        pull = np.abs(ok[f"{comp}_mean"].to_numpy(float) - ok[f"{comp}_true"].to_numpy(float))
        key += np.nan_to_num(pull / ok[f"{comp}_std"].to_numpy(float))
    order = np.argsort(-key, kind="stable")[:k]
    return ok["run_id"].to_numpy(object)[order].tolist()


def trace_figure(dirs: Sequence[Path], truths: Sequence[tuple[float, float]]) -> Figure:
    """Trace of g1 and g2 (per chain) and their pair plot, one row per realization."""
    import xarray as xr

    fig = _figure(12, 3.0 * max(len(dirs), 1))
    axes = np.atleast_2d(fig.subplots(max(len(dirs), 1), 3))
    for row, d, (t1, t2) in zip(axes, dirs, truths, strict=False):
        with xr.open_dataset(Path(d) / POSTERIOR, group="posterior", engine="netcdf4") as ds:
            g = {s: np.asarray(ds[s].values, float) for s in ("g1", "g2")}
        for ax, comp, t in ((row[0], "g1", t1), (row[1], "g2", t2)):
            for ch in range(g[comp].shape[0]):
                ax.plot(g[comp][ch] - t, lw=0.5, alpha=0.8, label=f"chain {ch}")
            ax.axhline(0.0, color="k", ls="--", lw=1, label="truth")
            ax.set_title(f"{Path(d).name}: {comp} trace", fontsize=9, loc="right")
            ax.set_xlabel("draw")
            ax.set_ylabel(f"{comp} − {comp}_true")
            ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
        row[0].legend(fontsize=7, loc="upper right")
        row[2].scatter(g["g1"].ravel() - t1, g["g2"].ravel() - t2, s=2, alpha=0.3)
        row[2].plot(0.0, 0.0, "r*", ms=12, label="truth")
        row[2].set_xlabel("g1 − g1_true")
        row[2].set_ylabel("g2 − g2_true")
        row[2].set_title("pair plot (all chains)", fontsize=9, loc="right")
        row[2].legend(fontsize=7)
        row[2].ticklabel_format(style="sci", scilimits=(-3, 3))
    return fig


def stamps_figure(images: np.ndarray, titles: Sequence[str], noise_sigma: float) -> Figure:
    """Simulated stamps, one panel per (realization, galaxy): ``images`` is (B, M, H, W)."""
    images = np.asarray(images)
    b, m = images.shape[:2]
    panels = [
        (images[i, j], f"{titles[i]}" + (f" #{j}" if m > 1 else ""))
        for i in range(b)
        for j in range(m)
    ]
    ncol = min(4, len(panels))
    nrow = -(-len(panels) // ncol)
    fig = _figure(3.0 * ncol, 3.0 * nrow + 0.4)
    axes = np.atleast_1d(fig.subplots(nrow, ncol)).ravel()
    for ax, (img, title) in zip(axes, panels, strict=False):
        im = ax.imshow(img, origin="lower", cmap="viridis", interpolation="nearest")
        ax.set_title(title, fontsize=7)
        ax.set_xticks([])
        ax.set_yticks([])
        fig.colorbar(im, ax=ax, shrink=0.8)
    for ax in axes[len(panels) :]:
        ax.set_axis_off()
    fig.suptitle(f"simulated stamps (pixel values; noise sigma {noise_sigma:g})", fontsize=9)
    return fig
