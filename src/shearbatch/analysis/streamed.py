"""The pooled population fit streamed over a campaign's partials, in bounded memory.

:func:`shearbatch.analysis.pooled.pooled_fits` holds every galaxy's draws in memory. Here
they stay in the partials (:mod:`shearbatch.io.partials`) and are read a block of
galaxies at a time. The pooled ``log L_p(g)`` of grid point ``p`` and its gradient and
Hessian are sums over its galaxies, so each pass over the partials evaluates every grid
point still being fitted at its own trial ``g`` (the galaxies of a block split by their
grid point) and adds up per point. The fit is the same damped Newton as
:func:`shearbatch.core.population_np.fit` (the same start,
:func:`~shearbatch.analysis.pooled.start_points`, steps, line search, stopping rule and
status; except that a Newton step below ``tol`` stops it without evaluating that trial: it
would move g by less than the tolerance, and the pass it costs is a quarter of the fit),
run for all grid points together, one pass per trial point: the results agree
with the in-memory fit to the rounding of the sums' order. Galaxies without support at the
start are left out as there (one bit per galaxy is what memory keeps of the campaign).

The delete-one-seed jackknife needs, per seed and grid point, the sums of its galaxies'
gradients and Hessians at the estimate: each pass accumulates them per (seed, point) with
``bincount`` (kept for the accepted point), so the jackknife costs no extra pass and no
per-galaxy arrays. Peak memory: one block's draws and its float64 temporaries
(``block`` galaxies), the per-(seed, point) sums and one byte per galaxy; not the campaign.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..core import population_np as pnp
from ..core.population_np import PriorSpec
from ..io import partials as pio
from . import pooled
from .bias_fits import Fit, pair_table
from .pooled import NUM_ERR_M_MAX, PopulationDraws
from .result import Population

__all__ = ["PartialSource", "streamed_fits"]

logger = logging.getLogger(__name__)

#: galaxies per streamed block (~19 MB of float32 draws at 200 draws; the float64
#: evaluation's temporaries are a few times that)
BLOCK_GALAXIES = 8192


class PartialSource:
    """The partials of an index (``summary.partials.json``, written by ``bias-extract``
    beside ``summary.csv``): each partial with the realizations whose galaxies it
    contributes (a realization is counted in exactly one partial). Each partial is
    checked against the size and CRC-32 the index recorded when it is opened; a changed
    one raises ``ValueError`` naming it (run bias-extract again)."""

    def __init__(self, index: str | Path):
        self.index = Path(index)
        doc = json.loads(self.index.read_text())
        if doc.get("format") != pio.FORMAT:
            raise ValueError(f"{self.index}: not a {pio.FORMAT} index")
        base = self.index.parent
        self.entries = [(base / e["path"], int(e["size"]), int(e["crc32"]),
                         np.asarray(e["use"], np.int64)) for e in doc["partials"]]  # fmt: skip

    def open(self) -> list[tuple[pio.Partial, np.ndarray]]:
        """``[(Partial, used realization indices)]``, each partial verified."""
        out = []
        for path, size, crc, use in self.entries:
            got = pio.file_crc(path) if path.is_file() else (None, None)
            if got != (size, crc):
                raise ValueError(f"partial {path} is not the one bias-extract indexed (size or "
                                 "CRC-32 changed, or missing): run bias-extract again")  # fmt: skip
            out.append((pio.Partial(path, keep_rows=False), use))
        return out

    def arrays(self) -> PopulationDraws:
        """The used galaxies' draws in memory, as an older version's population sidecar
        held them (:func:`shearbatch.analysis.pooled.load_population`), in index order: for
        small campaigns and inspection; the pooled fit streams instead."""
        run_id, galaxy, eps, base, pops = [], [], [], [], set()
        parts = self.open()
        k = max((p.n_draws for p, _ in parts), default=1)
        for part, use in parts:
            if part.population:
                pops.add(part.population)
            keep = np.isin(part.realization_of, use)
            if not keep.any():
                continue
            for _, ro, e, b in part.blocks(max(1, part.n_galaxies), keep):
                sel = np.isin(ro, use)
                e, b = np.asarray(e)[sel], np.asarray(b)[sel]
                pad = k - e.shape[1]
                if pad:
                    e = np.concatenate([e, np.full((len(e), pad, 2), np.nan, np.float32)], 1)
                    b = np.concatenate([b, np.full((len(b), pad), np.nan, np.float32)], 1)
                eps.append(e)
                base.append(b)
                run_id += [part.run_ids[i] for i in ro[sel]]
                gi = np.zeros(len(ro), np.int64)  # index within its realization
                for i in np.unique(ro):
                    at = np.flatnonzero(ro == i)
                    gi[at] = np.arange(len(at))
                galaxy.append(gi[sel])
        if len(pops) > 1:
            raise ValueError(f"partials with different population priors: {sorted(pops)}")
        return PopulationDraws.of(
            np.asarray(run_id),
            np.concatenate(galaxy) if galaxy else np.empty(0, np.int64),
            np.concatenate(eps) if eps else np.empty((0, k, 2), np.float32),
            np.concatenate(base) if base else np.empty((0, k), np.float32),
            pops.pop() if pops else "[]",
        )


def streamed_fits(
    use: Any,
    source: PartialSource,
    paired: bool,
    threads: int | None = None,
    *,
    block: int = BLOCK_GALAXIES,
    max_steps: int = 60,
    tol: float = 1e-10,
) -> tuple[dict[str, Fit], Population]:
    """:func:`shearbatch.analysis.pooled.pooled_fits` (same arguments and results) with
    the galaxies streamed from ``source``'s partials (module docstring); the report adds
    ``streamed``, ``partials`` and ``passes``."""
    if threads is None:
        from ..slurm import allocated_cpus

        threads = allocated_cpus()
    if paired and "pair_id" in use and "pair_sign" in use:  # complete pairs only
        ip, im = pair_table(use["pair_id"].to_numpy(object), use["pair_sign"].to_numpy(float))
        use = use.iloc[np.sort(np.concatenate([ip, im]))]
    rows = use.set_index(use["run_id"].astype(str))
    rows = rows.loc[~rows.index.duplicated()]
    truth_of = rows[["g1_true", "g2_true"]].to_numpy(float).round(12)
    seed_of = rows["seed"].astype(str).to_numpy()
    parts = source.open()
    pops = {p.population for p, _ in parts if p.population}
    if len(pops) > 1:
        raise ValueError(f"partials with different population priors: {sorted(pops)}")
    # per partial: each realization's grid point and seed (-1: not used)
    maps, truths, seeds = [], [], []
    for part, used in parts:
        rid = pd.Index([part.run_ids[i] for i in used])
        pos = rows.index.get_indexer(rid)
        ok = pos >= 0
        has_gal = np.bincount(part.realization_of, minlength=part.n_realizations)[used] > 0
        ok &= has_gal
        maps.append((part, used[ok], pos[ok]))
        truths.append(truth_of[pos[ok]])
        seeds.append(seed_of[pos[ok]])
    all_truth = np.concatenate(truths) if truths else np.empty((0, 2))
    if not len(all_truth):
        raise ValueError("partials: none of their galaxies belongs to a usable row")
    points = sorted({tuple(t) for t in all_truth})
    if paired and not all(any(np.allclose(q, (-p[0], p[1])) for q in points)
                          for p in points if p[0] != 0):  # fmt: skip
        logger.info("pooled fit: not every +g has its -g grid point; using the regression")
        paired = False
    uniq = sorted(set(np.concatenate(seeds)))
    seed_ix = {s: i for i, s in enumerate(uniq)}
    point_ix = {p: i for i, p in enumerate(points)}
    n_pts, n_seeds = len(points), len(uniq)
    prior = pnp.ShapePrior(*[PriorSpec(p) for p in json.loads(pops.pop())])
    # per partial and realization: point and seed index (-1: the realization is not used)
    real_point, real_seed = [], []
    for (part, used, _), tr, sd in zip(maps, truths, seeds, strict=True):
        rp = np.full(part.n_realizations, -1, np.int64)
        rs = np.full(part.n_realizations, -1, np.int64)
        rp[used] = [point_ix[tuple(t)] for t in tr]
        rs[used] = [seed_ix[s] for s in sd]
        real_point.append(rp)
        real_seed.append(rs)
    support = [None] * len(maps)  # per partial: (G,) bool, galaxies with support at g0
    starts = pooled.start_points(rows, points)
    n_khat = pooled.khat_counts(rows)
    # what mapped realizations to points and seeds is not needed by the passes: freed
    # before them (a string or two per realization; issue 43's bound)
    maps = [(part, None, None) for part, _, _ in maps]
    for part, _ in parts:
        part.run_ids = []
    del rows, truth_of, seed_of, truths, seeds, parts, all_truth
    fits = [pnp.NewtonSearch(starts[p], max_steps, tol, skip_small_newton=True)
            for p in points]  # fmt: skip
    passes = 0
    while any(f.trial is not None for f in fits):
        passes += 1
        trials = {i: f.trial for i, f in enumerate(fits) if f.trial is not None}
        sums = _pass(maps, real_point, real_seed, support, trials, prior, n_seeds, threads, block)
        for i in trials:
            s = sums[i]
            fits[i].observe(s.ll, s.gr, s.h, s)
    logger.info("streamed pooled fit: %d grid points, %d passes over %d partial(s)", n_pts,
                passes, len(maps))  # fmt: skip
    g_scale = max(float(np.max(np.abs(points))), 1e-300)
    est, jk, rep = {}, {s: {} for s in uniq}, []
    n_used = 0
    for p, f in zip(points, fits, strict=True):
        status, num, dec = pnp.fit_status(f.stopped, f.gr, f.h)
        est[p] = f.g
        a: PointTotals = f.acc
        n_used += int(a.n_galaxies)
        rep.append(
            pooled.grid_point_report(
                p,
                f.g,
                np.sqrt(np.diag(pnp.curvature_cov(f.h))),
                status,
                num,
                dec,
                f.last,
                f.steps,
                a.n_support,
                a.ess_min,
                a.n_collapsed,
                n_khat,
                g_scale,
            )
        )
        for s, g in zip(uniq, pooled.seed_replicates(f.g, a.seed_g, a.seed_h),
                        strict=True):  # fmt: skip
            jk[s][p] = g
    out = pooled.assemble_fits(points, est, jk, uniq, paired, n_used)
    return out, Population.of(grid_points=rep, paired=paired, n_galaxies=n_used,
                              n_seeds=n_seeds, num_err_m_max=NUM_ERR_M_MAX,
                              n_flagged=sum(r.flagged for r in rep), streamed=True,
                              partials=len(maps), passes=passes)  # fmt: skip


@dataclasses.dataclass
class PointTotals:
    """One grid point's totals over its galaxies at its trial g in a pass (:func:`_pass`):
    ``ll``, ``gr``, ``h`` over the galaxies with support at the start, per seed the sums of
    the galaxies' gradients and Hessians (those finite at g), the smallest ESS fraction,
    the collapsed galaxies and the galaxy counts."""

    ll: float
    gr: np.ndarray
    h: np.ndarray
    seed_g: np.ndarray
    seed_h: np.ndarray
    ess_min: float = math.inf
    n_collapsed: int = 0
    n_support: int = 0
    n_galaxies: int = 0

    @classmethod
    def zero(cls, n_seeds: int) -> PointTotals:
        return cls(0.0, np.zeros(2), np.zeros((2, 2)), np.zeros((n_seeds, 2)),
                   np.zeros((n_seeds, 2, 2)))  # fmt: skip


def _pass(maps, real_point, real_seed, support, trials, prior, n_seeds, threads, block):
    """One pass over the partials: per grid point in ``trials`` (index -> g) its
    :class:`PointTotals` at its trial g."""
    out = {i: PointTotals.zero(n_seeds) for i in trials}
    # every grid point a galaxy can belong to, not only those still fitted (points stop
    # on different passes: a partial's galaxies of a stopped point are skipped)
    n_pts = max([*trials, *(int(rp.max()) for rp in real_point if len(rp))], default=0) + 1
    active = np.zeros(n_pts, bool)
    for i in trials:
        active[i] = True
    for j, ((part, _, _), rp, rs) in enumerate(zip(maps, real_point, real_seed, strict=True)):
        gp_all = rp[part.realization_of]
        first = support[j] is None
        if first:
            support[j] = np.zeros(part.n_galaxies, bool)
        sel = (gp_all >= 0) & active[np.maximum(gp_all, 0)]
        for a, ro, eps, lb in part.blocks(block, sel):
            gp = rp[ro]
            gs = rs[ro]
            for i, g in trials.items():
                idx = np.flatnonzero(gp == i)
                if not len(idx):
                    continue
                ev = pnp.evaluate(g, eps, lb, prior, 2, idx, threads)
                if first:
                    support[j][a + idx] = np.isfinite(ev.terms)
                w = support[j][a + idx]
                o = out[i]
                with np.errstate(invalid="ignore"):
                    o.ll += float(np.sum(np.where(w, ev.terms, 0.0)))
                o.gr += ev.grad[w].sum(axis=0)
                o.h += ev.hess[w].sum(axis=0)
                fin = np.all(np.isfinite(ev.grad), axis=1)
                sg, sh = pooled.seed_sums(gs[idx][fin], ev.grad[fin], ev.hess[fin], n_seeds)
                o.seed_g += sg
                o.seed_h += sh
                k = np.maximum(ev.n_draws, 1)
                frac = ev.ess / k
                o.ess_min = min(o.ess_min, float(np.min(frac)))
                o.n_collapsed += int(np.sum(ev.ess < pnp.COLLAPSE_FRAC * ev.n_draws))
                o.n_support += int(w.sum())
                o.n_galaxies += len(idx)
    return out
