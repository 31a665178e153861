"""m and c from the population estimator pooled per grid point (interim-model campaigns).

For a campaign run with ``inference.shear_model: interim``, ``bias-extract``
writes next to ``summary.csv`` the per-galaxy draws of every usable realization
(``summary.population.npz``, :func:`shearbatch.analysis.summary_table.write_population`).
Here every galaxy of every realization that shares a true shear (one grid point:
all its seeds, ring copies included) enters ONE marginal likelihood, and the
grid point's estimate is its maximum (:func:`shearbatch.core.population.fit`):

    G_hat(p) = argmax_g sum_{i in p} log (1/K) sum_k w_ik(g).

Per component, ``g_hat = (1 + m) g_true + c`` is then fitted to the grid
points' estimates, as :mod:`shearbatch.analysis.bias_fits` does to realizations:
paired designs (+g and -g share galaxies and noise) use
``1 + m = sum_p g_p D_p / sum_p g_p^2`` with ``D = (G_hat(+) - G_hat(-)) / 2``
and ``c`` the mean of ``A = (G_hat(+) + G_hat(-)) / 2``; other grids the
unweighted least-squares line; a constant truth gives ``c`` only (the mean
offset). Errors: the delete-one-seed jackknife, each grid point's estimate
without that seed's galaxies taken one Newton step from the full estimate
(:func:`shearbatch.core.population.galaxy_derivatives`; the full likelihood's
gradient vanishes there, so the step is exact to second order in the shift), so
the shared galaxies and noise of a seed's pairs and rings stay together.

Each grid point's fit reports its own numerical error next to its statistical one
(:func:`shearbatch.core.population_np.fit_status`): its status (converged, line search
failed, step budget spent) and ``g1_num_err`` / ``g2_num_err``, the Newton step left at its
end (the distance to the likelihood's maximum; no grid is involved: Newton on the exact
derivatives); ``num_err_m`` is the larger of the two over the grid's largest ``|g_true|``,
what it could move m by. A fit not converged or with ``num_err_m`` above
:data:`NUM_ERR_M_MAX` is ``flagged`` (in ``bias_results.json`` and the printed summary).

The fits are :func:`shearbatch.core.population_np.fit` (NumPy, the galaxies of a grid
point read from the sidecar's float32 arrays a block at a time, by the CPUs this process
may use): memory beyond the sidecar's arrays does not grow with the campaign, and no
accelerator is needed.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..core import population_np as pnp
from ..core.population_np import PriorSpec
from .bias_fits import Fit, error_report, pair_table
from .result import GridPoint, Population

__all__ = [
    "FIT_COLUMNS",
    "NUM_ERR_M_MAX",
    "PopulationDraws",
    "PriorSpec",
    "assemble_fits",
    "from_arrays",
    "grid_point_report",
    "khat_counts",
    "load_population",
    "pooled_fits",
    "seed_replicates",
    "seed_sums",
    "start_points",
]

logger = logging.getLogger(__name__)

#: a grid point's fit is flagged when its numerical error could move m by more than this
NUM_ERR_M_MAX = 1e-4

#: the summary columns the pooled fits (in memory and streamed) read: the rows they are
#: given hold these alone (a row subset of the whole table would copy every column of a
#: field-scale table once more: issue 43's memory bound)
FIT_COLUMNS = ("run_id", "pair_id", "pair_sign", "g1_true", "g2_true", "seed", "g1_mean",
               "g2_mean", "pop_n_khat_high")  # fmt: skip


@dataclasses.dataclass(frozen=True, eq=False)
class PopulationDraws:
    """The used galaxies' draws in memory, what :func:`pooled_fits` fits: one entry per
    galaxy of ``run_id``, ``galaxy`` (its index in its realization), ``eps`` (G, K, 2)
    observed-ellipticity draws and ``log_base`` (G, K) (NaN-padded to the largest K), and
    the intrinsic-shape population: ``population`` (its JSON), ``priors`` and ``prior``
    (None: no population, no interim-model galaxy)."""

    run_id: np.ndarray
    galaxy: np.ndarray
    eps: np.ndarray
    log_base: np.ndarray
    population: str
    priors: tuple[PriorSpec, ...]
    prior: pnp.ShapePrior | None

    @classmethod
    def of(cls, run_id: np.ndarray, galaxy: np.ndarray, eps: np.ndarray, log_base: np.ndarray,
           population: str) -> PopulationDraws:  # fmt: skip
        """The draws with the population's ``priors`` and ``prior`` read from its JSON."""
        priors = tuple(PriorSpec(p) for p in json.loads(population))
        return cls(run_id, galaxy, eps, log_base, population, priors,
                   pnp.ShapePrior(*priors) if priors else None)  # fmt: skip


def load_population(path: str | Path) -> PopulationDraws:
    """The population sidecar's draws (``summary.population.npz``, an older campaign's)."""
    with np.load(path, allow_pickle=False) as z:
        return from_arrays({k: z[k] for k in z.files})


def from_arrays(d: Mapping[str, np.ndarray]) -> PopulationDraws:
    """The draws of the arrays of a population sidecar
    (:func:`shearbatch.analysis.summary_table.population_arrays`: ``run_id``, ``galaxy``,
    ``eps``, ``log_base``, ``population``), with the population's ``priors`` and ``prior``
    (:class:`shearbatch.core.population_np.ShapePrior`)."""
    return PopulationDraws.of(d["run_id"], d["galaxy"], d["eps"], d["log_base"],
                              str(d["population"]))  # fmt: skip


def _estimate(comp_true: np.ndarray, comp_hat: np.ndarray, paired: bool) -> np.ndarray:
    """``(1 + m, c)`` (or ``(nan, c)`` for a constant truth) from grid-point estimates."""
    t, h = np.asarray(comp_true, float), np.asarray(comp_hat, float)
    if np.ptp(t) <= 1e-12:
        return np.array([np.nan, float(np.mean(h - t))])
    if paired:
        pos = t > 0
        tp = t[pos]
        hm = np.array([h[np.isclose(t, -x)][0] for x in tp])
        dd, aa = (h[pos] - hm) / 2.0, (h[pos] + hm) / 2.0
        return np.array([np.sum(tp * dd) / np.sum(tp * tp), float(np.mean(aa))])
    b = np.polyfit(t, h, 1)
    return np.array([b[0], b[1]])


def start_points(rows: Any, points: list) -> dict[tuple[float, float], np.ndarray]:
    """Each grid point's Newton start: the mean of its realizations' own estimates
    (``g1_mean``, ``g2_mean``: each realization's maximum, bias-extract's columns), which is
    within the statistical error of the pooled maximum, so the fit converges in one step
    fewer than from ``(0, 0)`` (the start when a point has no finite estimate); rounded to
    1e-4."""
    out = {}
    cols = [c for c in ("g1_mean", "g2_mean") if c in rows]
    truth = rows[["g1_true", "g2_true"]].to_numpy(float).round(12)
    est = (rows[cols].apply(pd.to_numeric, errors="coerce").to_numpy(float) if len(cols) == 2
           else np.full((len(rows), 2), np.nan))  # fmt: skip
    for p in points:
        sel = np.all(truth == p, axis=1) & np.all(np.isfinite(est), axis=1)
        # rounded to 1e-4: a start, not an estimate (Newton from within 1e-4 takes the same
        # passes), and one that the realizations' own fits at float32 or float64 draws give
        # alike, so the pooled fit depends on the pooled galaxies alone
        g0 = np.round(est[sel].mean(axis=0), 4) if sel.any() else np.zeros(2)
        out[p] = g0 if float(np.sum(g0 * g0)) < 0.81 else np.zeros(2)
    return out


def pooled_fits(
    use: Any, population: PopulationDraws, paired: bool, threads: int | None = None
) -> tuple[dict[str, Fit], Population]:
    """``({"g1": Fit, "g2": Fit}, report)`` from the galaxies of the usable rows ``use``.

    ``report`` (``bias_results.json``'s ``population``): per grid point its estimate, curvature error and galaxy count, the fit's
    status and numerical error (``flagged`` when not converged or above
    :data:`NUM_ERR_M_MAX` in m units), the smallest per-galaxy ESS fraction and the
    collapsed galaxies at the estimate; ``n_flagged`` of them.
    ``threads``: threads per fit (default: the CPUs this process may use).
    """
    if threads is None:
        from ..slurm import allocated_cpus

        threads = allocated_cpus()
    if paired and "pair_id" in use and "pair_sign" in use:  # complete pairs only: a seed's
        ip, im = pair_table(use["pair_id"].to_numpy(object), use["pair_sign"].to_numpy(float))
        use = use.iloc[np.sort(np.concatenate([ip, im]))]  # +g without its -g is left out
    rows = use.set_index(use["run_id"].astype(str))
    rid = population.run_id.astype(str)
    keep = np.asarray(pd.Index(rid).isin(rows.index))  # hashed (np.isin sorts: ~1 s here)
    if not keep.any():
        raise ValueError("population sidecar: none of its galaxies belongs to a usable row")
    rid, rows_of = rid[keep], np.flatnonzero(keep)
    eps, base = population.eps, population.log_base  # read a block at a time, not copied
    truth = rows.loc[rid, ["g1_true", "g2_true"]].to_numpy(float).round(12)
    seeds = rows.loc[rid, "seed"].astype(str).to_numpy()
    points = sorted({tuple(t) for t in truth})
    if paired and not all(any(np.allclose(q, (-p[0], p[1])) for q in points)
                          for p in points if p[0] != 0):  # fmt: skip
        logger.info("pooled fit: not every +g has its -g grid point; using the regression")
        paired = False
    uniq = sorted(set(seeds))
    prior = population.prior
    est, jk, rep = {}, {s: {} for s in uniq}, []
    g_scale = max(float(np.max(np.abs(points))), 1e-300)  # the grid's largest |g_true|
    n_khat = khat_counts(rows.loc[~rows.index.duplicated()])
    seed_ix = {s: i for i, s in enumerate(uniq)}
    seed_of = np.array([seed_ix[s] for s in seeds], np.int64)
    starts = start_points(rows.loc[~rows.index.duplicated()], points)
    for p in points:
        sel = np.all(truth == p, axis=1)
        f = pnp.fit(eps, base, prior, index=rows_of[sel], threads=threads, g0=starts[p])
        est[p] = f.g
        k = np.maximum(f.n_draws, 1)
        rep.append(grid_point_report(p, f.g, f.err, f.status, f.g_num_err, f.decrement,
                                     f.last_step, f.n_steps, f.n_galaxies,
                                     float(np.min(f.ess / k)), int(f.collapsed.sum()),
                                     n_khat, g_scale))  # fmt: skip
        grad, hess = f.galaxy_grad, f.galaxy_hess  # per galaxy, at the estimate
        ok = np.all(np.isfinite(grad), axis=1)  # galaxies without support: not in the fit
        sg, sh = seed_sums(seed_of[sel][ok], grad[ok], hess[ok], len(uniq))
        for s, g in zip(uniq, seed_replicates(f.g, sg, sh), strict=True):
            jk[s][p] = g
    fits = assemble_fits(points, est, jk, uniq, paired, int(keep.sum()))
    return fits, Population.of(grid_points=rep, paired=paired, n_galaxies=int(keep.sum()),
                               n_seeds=len(uniq), num_err_m_max=NUM_ERR_M_MAX,
                               n_flagged=sum(r.flagged for r in rep))  # fmt: skip


def khat_counts(rows: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """Per realization row (one per run_id): its true shear and ``pop_n_khat_high`` (the
    galaxies whose Pareto k-hat bias-extract found above its threshold); None without it."""
    if "pop_n_khat_high" not in rows:
        return None
    return (rows[["g1_true", "g2_true"]].to_numpy(float).round(12),
            pd.to_numeric(rows["pop_n_khat_high"], errors="coerce").to_numpy(float))  # fmt: skip


def grid_point_report(p: tuple, g: Any, err: Any, status: str, num: Any, dec: float,
                      last: float, steps: int, n_galaxies: int, ess_min: float,
                      n_collapsed: int, n_khat: Any, g_scale: float) -> GridPoint:  # fmt: skip
    """One grid point's entry of the pooled report (the in-memory and the streamed fit):
    its estimate and errors, the fit's status and numerical error, ``flagged`` (logged)
    when not converged or above :data:`NUM_ERR_M_MAX` in m units (over ``g_scale``)."""
    num = np.asarray(num, float)
    num_m = float(np.max(num)) / g_scale
    converged = status == "converged"
    flagged = not converged or not num_m <= NUM_ERR_M_MAX
    if flagged:
        logger.warning("pooled fit at g_true %s: %s, numerical error %.2g in g (%.2g in "
                       "m units)", p, status, float(np.max(num)), num_m)  # fmt: skip
    return GridPoint.of(g1_true=p[0], g2_true=p[1], g1=float(g[0]), g2=float(g[1]),
                        g1_err=float(err[0]), g2_err=float(err[1]),
                        g1_num_err=float(num[0]), g2_num_err=float(num[1]),
                        num_err_m=num_m, decrement=float(dec), last_step=float(last),
                        n_steps=steps, status=status, converged=converged, flagged=flagged,
                        n_galaxies=int(n_galaxies), ess_fraction_min=float(ess_min),
                        n_collapsed=int(n_collapsed),
                        n_khat_high=None if n_khat is None else int(np.nansum(
                            n_khat[1][np.all(n_khat[0] == p, axis=1)])))  # fmt: skip


def seed_sums(seed: np.ndarray, grad: np.ndarray, hess: np.ndarray,
              n_seeds: int) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Per seed (index ``seed`` of each galaxy), the sums of its galaxies' gradients (S, 2)
    and Hessians (S, 2, 2) of ``log L_i``: what the delete-one-seed jackknife needs."""
    sg = np.stack([np.bincount(seed, grad[:, c], n_seeds) for c in range(2)], axis=1)
    h = hess.reshape(-1, 4)
    sh = np.stack([np.bincount(seed, h[:, c], n_seeds) for c in range(4)], axis=1)
    return sg, sh.reshape(n_seeds, 2, 2)


def seed_replicates(g: np.ndarray, seed_g: np.ndarray, seed_h: np.ndarray) -> list[np.ndarray]:
    """Each seed's delete-one replicate of the estimate ``g``: one Newton step from ``g``
    without that seed's galaxies (the full gradient vanishes at ``g``)."""
    h_tot = seed_h.sum(axis=0)
    return [g + np.linalg.solve(h_tot - seed_h[j], seed_g[j]) for j in range(len(seed_g))]


def assemble_fits(points: list, est: dict[tuple[float, float], np.ndarray],
                  jk: dict[str, dict[tuple[float, float], np.ndarray]], uniq: list, paired: bool,
                  n_galaxies: int) -> dict[str, Fit]:  # fmt: skip
    """``{"g1": Fit, "g2": Fit}`` from the grid points' estimates ``est`` and their
    delete-one-seed replicates ``jk[seed][point]`` (shared by the in-memory and the streamed
    fit, :mod:`shearbatch.analysis.streamed`)."""
    fits = {}
    tr = np.array(points)
    for i, comp in enumerate(("g1", "g2")):
        use_paired = paired and comp == "g1"
        theta = _estimate(tr[:, i], [est[p][i] for p in points], use_paired)
        reps = np.array([_estimate(tr[:, i], [jk[s][p][i] for p in points], use_paired)
                         for s in uniq])  # fmt: skip
        g = len(uniq)
        cov = None
        if g >= 2 and np.all(np.isfinite(reps[:, 1])):
            dev = np.nan_to_num(reps - reps.mean(axis=0))
            cov = (g - 1) / g * dev.T @ dev
        m_undefined = not np.isfinite(theta[0])
        m_err = None if cov is None or m_undefined else float(np.sqrt(cov[0, 0]))
        c_err = None if cov is None else float(np.sqrt(cov[1, 1]))
        why = f"{comp}_true is constant over the campaign: slope undefined" if m_undefined else ""
        errs = error_report(None if cov is None else [m_err, c_err], None, 0, g, "none")
        fits[comp] = Fit(None if m_undefined else float(theta[0]) - 1.0, float(theta[1]), m_err,
                         c_err, "jackknife" if cov is not None else "none", errs,
                         n_galaxies, g, why, None, cov, "none")  # fmt: skip
    return fits
