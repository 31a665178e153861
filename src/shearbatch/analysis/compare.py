r"""Estimators side by side on the same realizations (``bias_results.json``'s ``estimators``).

A campaign that ran host estimators (``inference.estimators``, :mod:`shearbatch.estimators`)
holds, per realization, the forward model's point estimate ``g_hat`` and each host
estimator's sums over the galaxies of its shear estimate ``e`` and response ``R``.
Every estimator is fitted the same way, per component, over the realizations ``i`` (the
rows a campaign's usable, complete rings give both), by the moment equations
``sum_i z_i (e_i - bar R_i ((1 + m) g_i + c)) = 0`` with the known truths as instruments,
``z_i = (g_i, 1)``, of the model

.. math:: e_i = (1 + m)\, \bar R_i g_i + c\, \bar R_i

(the forward model: ``e_i = g_hat_i``, ``R = 1``, the ordinary regression of
:func:`shearbatch.analysis.bias_fits.fit_regression`; a response estimator: ``e_i`` and the
response ``R_i`` are sums over the realization's galaxies, and ``bar R_i`` is the mean
of ``R`` over the realization's ring, the copies of its seed at its grid point (+g/-g
and rotations: the same galaxies), so a response estimate is a ratio of sums, never a
per-galaxy ratio). With +g/-g pairs and ring copies in the rows the regressors of a ring
sum to zero against its common part, so the fit is the copies' difference and mean: the
designs cancel shape and pixel noise for every estimator alike (with each copy's own
``R_i`` instead, the shape noise of a pair would leak through ``R(+g) != R(-g)``). The
equations are linear in the response, whose per-galaxy noise (FPFS's noise-bias
correction is exact on average only) would bias a least-squares fit on ``R g`` (errors
in the variables); with pairs they give FPFS's own paired estimator,
``1 + m = sum (e(+g) - e(-g)) / (2 g sum bar R)``. Where ``g`` is constant (a 1-D
grid's other component) only ``c = sum(e - R g) / sum R`` is defined.

**Errors** are a delete-one-seed jackknife (every realization of a seed, its pairs and
ring copies, left out together), computed from per-seed sums of the normal equations.
The **difference** of two estimators, ``m_A - m_B`` and ``c_A - c_B``, is jackknifed with
the same deletions: the estimators measured the same galaxies and noise, so their errors
are correlated and the difference's error is far smaller than either's.

Each estimator gets the requirement's criteria on |m| and |c| (no coverage or SBC: a
response estimator has no posterior intervals) and a verdict by the same three-valued
rule (:func:`shearbatch.analysis.verdict.criteria`), and its cost per galaxy: the forward
model's device seconds per realization (``runtime_s``) over its galaxies, a host
estimator's CPU seconds per galaxy on one worker core.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import numpy as np

from .. import estimators as est
from .bias_fits import Fit, SeedSums, complete_rings, group_sums
from .result import Acceptance, Cost, Difference, ErrorReport, EstimatorResult, Estimators
from .verdict import criteria, overall

__all__ = [
    "EstimatorSums",
    "HostSums",
    "compare_estimators",
    "compare_merge",
    "compare_part",
    "fit_response",
    "present",
]


def present(df: Any) -> list[str]:
    """The host estimators with values in table ``df``."""
    return [n for n in est.names()
            if f"{n}_e1" in df.columns and np.isfinite(df[f"{n}_e1"].to_numpy(float)).any()]  # fmt: skip


def _sums(e: np.ndarray, r: np.ndarray, g: np.ndarray, grp: np.ndarray, ng: int) -> np.ndarray:
    """Per-seed sums (ng, 5) of the moment equations' pieces: R g^2, R g, R, e g, e."""
    parts = np.stack([r * g * g, r * g, r, e * g, e], axis=1)
    out = np.zeros((ng, 5))
    np.add.at(out, grp, parts)
    return out


def _solve(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(m, c) from summed pieces ``s`` (..., 5): ``sum z (e - R (a g + c)) = 0`` for the
    instruments ``z = (g, 1)``."""
    det = s[..., 0] * s[..., 2] - s[..., 1] ** 2
    a = (s[..., 3] * s[..., 2] - s[..., 4] * s[..., 1]) / det
    c = (s[..., 0] * s[..., 4] - s[..., 1] * s[..., 3]) / det
    return a - 1.0, c


def _offset(e: np.ndarray, r: np.ndarray, g0: float, grp: np.ndarray, ng: int) -> np.ndarray:
    """Per-seed sums (ng, 2) of (e - R g0, R) for the offset-only fit."""
    out = np.zeros((ng, 2))
    np.add.at(out, grp, np.stack([e - r * g0, r], axis=1))
    return out


def _jack(full: np.ndarray, per: np.ndarray, fn) -> tuple[np.ndarray, np.ndarray]:
    """(estimate, jackknife replicates (ng, ...)) of ``fn`` over the summed pieces."""
    return np.asarray(fn(full)), np.asarray(fn(full[None, :] - per))


def _err(reps: np.ndarray) -> np.ndarray:
    n = reps.shape[0]
    return np.sqrt((n - 1) / n * np.sum((reps - reps.mean(axis=0)) ** 2, axis=0))


def ring_ids(df: Any) -> np.ndarray:
    """Each row's ring (:func:`shearbatch.analysis.bias_fits.complete_rings`' key): its seed
    and pair id without the ``_r<k>`` suffix when paired, else its seed and true shear."""
    n = len(df)
    sign = df["pair_sign"].to_numpy(float) if "pair_sign" in df.columns else np.zeros(n)
    paired = np.isin(np.where(np.isfinite(sign), sign, 0.0), (1.0, -1.0))
    pid = df["pair_id"].fillna("").astype(str).to_numpy() if "pair_id" in df.columns else None
    truth = df[["g1_true", "g2_true"]].to_numpy(float).round(12)
    seeds = df["seed"].astype(str).to_numpy()
    keys = [f"{sd}|{re.sub(r'_r[0-9]+$', '', pid[i])}" if pr and pid is not None
            else f"{sd}|{truth[i][0]!r}|{truth[i][1]!r}"
            for i, (sd, pr) in enumerate(zip(seeds, paired, strict=True))]  # fmt: skip
    return np.unique(np.asarray(keys), return_inverse=True)[1]


def ring_mean(r: np.ndarray, rings: np.ndarray) -> np.ndarray:
    """``r`` averaged over each row's ring."""
    tot = np.bincount(rings, weights=r)
    cnt = np.bincount(rings)
    return (tot / cnt)[rings]


def fit_response(e: np.ndarray, r: np.ndarray, g: np.ndarray,
                 groups: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool]:  # fmt: skip
    """``((m, c), jackknife replicates (n_seeds, 2), slope defined)`` of one component."""
    _, grp = np.unique(groups, return_inverse=True)
    ng = int(grp.max()) + 1
    if np.ptp(g) > 1e-12:
        s = _sums(e, r, g, grp, ng)

        def fn(x):
            return np.stack(_solve(x), axis=-1)

        est_, reps = _jack(s.sum(axis=0), s, fn)
        return est_, reps, True
    s = _offset(e, r, float(g[0]), grp, ng)

    def fn0(x):
        return np.stack([np.full(x.shape[:-1], np.nan), x[..., 0] / x[..., 1]], axis=-1)

    est_, reps = _jack(s.sum(axis=0), s, fn0)
    return est_, reps, False


def _fit(theta: np.ndarray, reps: np.ndarray, slope: bool, n: int, comp: str) -> Fit:
    err = _err(reps)
    ng = reps.shape[0]
    method = "jackknife" if ng >= 2 else "none"
    why = "" if slope else f"{comp}_true is constant over the campaign: slope undefined"
    return Fit(m=float(theta[0]) if slope else None, c=float(theta[1]),
               m_err=float(err[0]) if slope and ng >= 2 else None,
               c_err=float(err[1]) if ng >= 2 else None, error_method=method, errors=ErrorReport.of(),
               n=n, n_groups=ng, m_reason=why)  # fmt: skip


def compare_estimators(use: Any, point: str, acc: Acceptance, frac: float,
                       method: str) -> Estimators | None:  # fmt: skip
    """The ``estimators`` section of ``bias_results.json`` (module docstring) for the
    usable rows ``use`` (the forward model's point estimate ``g<k>_<point>``), or None
    when no host estimator ran."""
    return compare_merge(compare_part(use, point, present(use)), acc, frac, method)


@dataclasses.dataclass(frozen=True, eq=False)
class HostSums:
    """One estimator's inputs over rows holding whole seeds: per component (1, 2) the
    per-seed sums of the moment equations (``slope``, 5 terms) and of the constant-truth
    offset (``offset``, 2 terms), the sum and count of its finite per-galaxy costs, and
    (a host estimator) its flagged galaxies."""

    name: str | None
    """None: the forward model."""
    slope: tuple[SeedSums, SeedSums]
    offset: tuple[SeedSums, SeedSums]
    cost: float
    n_cost: int
    n_flagged: float

    def merge(self, other: HostSums) -> HostSums:
        return HostSums(self.name,
                        tuple(a.merge(b) for a, b in zip(self.slope, other.slope, strict=True)),
                        tuple(a.merge(b) for a, b in zip(self.offset, other.offset, strict=True)),
                        self.cost + other.cost, self.n_cost + other.n_cost,
                        self.n_flagged + other.n_flagged)  # fmt: skip


@dataclasses.dataclass(frozen=True, eq=False)
class EstimatorSums:
    """What :func:`compare_merge` needs of usable rows holding whole seeds
    (:func:`compare_part`); :meth:`merge` of parts sharing no seed, in part order."""

    n: int
    n_seeds: int
    col: str
    """The forward model's point estimate column (``g<k>_<col>``)."""
    truth: tuple[tuple[float, float, float] | None, tuple[float, float, float] | None]
    """Per component, ``(min, max, first)`` of the truths (None: no row)."""
    estimators: tuple[HostSums, ...]
    """The forward model, then the host estimators."""

    def merge(self, other: EstimatorSums) -> EstimatorSums:
        from .bias_fits import merged_range as _range

        return EstimatorSums(self.n + other.n, self.n_seeds + other.n_seeds, self.col,
                             tuple(_range(a, b) for a, b in zip(self.truth, other.truth,
                                                                strict=True)),
                             tuple(a.merge(b) for a, b in zip(self.estimators,
                                                              other.estimators, strict=True)))  # fmt: skip


def compare_part(use: Any, point: str, names: list[str]) -> EstimatorSums | None:
    """What :func:`compare_merge` needs of usable rows ``use`` holding whole seeds: per
    estimator and component the per-seed sums of the moment equations, the truths' range,
    the costs' sums (``names``: the host estimators present in the whole table)."""
    if not names:
        return None
    ok = np.ones(len(use), dtype=bool)
    for n in names:
        ok &= np.isfinite(use[f"{n}_e1"].to_numpy(float)) & np.isfinite(
            use[f"{n}_r11"].to_numpy(float)
        )
    rows = use[ok].reset_index(drop=True)
    ring, _ = complete_rings(rows)
    rows = rows[ring].reset_index(drop=True)
    groups = rows["seed"].astype(str).to_numpy()
    n_gal = rows[f"{names[0]}_n"].to_numpy(float)
    col = point if f"g1_{point}" in rows.columns else "mean"
    rings = ring_ids(rows) if len(rows) else np.zeros(0, dtype=int)
    data = {None: {c: (rows[f"g{c}_{col}"].to_numpy(float), np.ones(len(rows)))
                   for c in "12"}}  # fmt: skip
    for n in names:
        data[n] = {c: (rows[f"{n}_e{c}"].to_numpy(float),
                       ring_mean(rows[f"{n}_r{c}{c}"].to_numpy(float), rings)) for c in "12"}  # fmt: skip
    truth = []
    for c in "12":
        g = rows[f"g{c}_true"].to_numpy(float)
        truth.append((g.min(), g.max(), g[0]) if len(g) else None)
    hosts = []
    for name, comps in data.items():
        slopes, offsets = [], []
        for c in "12":
            g = rows[f"g{c}_true"].to_numpy(float)
            e, r = comps[c]
            g0 = float(g[0]) if len(g) else 0.0
            slopes.append(SeedSums(*group_sums(np.stack([r * g * g, r * g, r, e * g, e], axis=1),
                                               groups)))  # fmt: skip
            offsets.append(SeedSums(*group_sums(np.stack([e - r * g0, r], axis=1), groups)))
        if name is None:
            cost = rows["runtime_s"].to_numpy(float) if "runtime_s" in rows else \
                np.full(len(rows), np.nan)  # fmt: skip
            flagged = 0.0
        else:
            cost = rows[f"{name}_cost_s"].to_numpy(float)
            flagged = float(np.nansum(rows[f"{name}_n_flagged"].to_numpy(float)))
        per = cost / n_gal
        fin = ~np.isnan(per)
        hosts.append(HostSums(name, tuple(slopes), tuple(offsets), float(per[fin].sum()),
                              int(fin.sum()), flagged))  # fmt: skip
    return EstimatorSums(len(rows), len(set(groups)), col, tuple(truth), tuple(hosts))


def compare_merge(sums: EstimatorSums | None, acc: Acceptance, frac: float,
                  method: str) -> Estimators | None:  # fmt: skip
    """The ``estimators`` section from :func:`compare_part`'s sums (of the whole table, or
    of its parts sharing no seed merged), None when no host estimator ran."""
    if sums is None:
        return None
    n = sums.n
    names = [h.name for h in sums.estimators if h.name is not None]
    reps_of: dict[str, dict[str, np.ndarray]] = {}
    fits_of: dict[str, dict[str, Fit]] = {}
    results: dict[str, EstimatorResult] = {}
    for host in sums.estimators:
        key = host.name
        name = method if key is None else key
        fits, reps_of[name] = {}, {}
        for i, c in enumerate("12"):
            truth = sums.truth[i]
            slope = truth is not None and bool(truth[1] - truth[0] > 1e-12)
            got = host.slope[i] if slope else host.offset[i]
            per = got.total(5 if slope else 2)
            theta, reps = _jack(per.sum(axis=0), per, _slope_fn if slope else _offset_fn)
            f = _fit(theta, reps, slope, n, f"g{c}")
            fits[f"g{c}"], reps_of[name][c] = f, reps
        fits_of[name] = fits
        crit = criteria(fits, None, None, frac, acc, n)
        tot, cnt = host.cost, host.n_cost
        per_gal = tot / cnt if cnt else float("nan")
        what = ("device wall seconds per realization (runtime_s) / galaxies" if key is None
                else "CPU seconds of one worker core")  # fmt: skip
        cost = Cost.of(what=what, s_per_galaxy=per_gal,
                       galaxies_per_s=1.0 / per_gal if per_gal > 0 else None)  # fmt: skip
        flagged = {} if key is None else {"n_flagged": int(host.n_flagged)}
        results[name] = EstimatorResult.of(**_values(fits), criteria=list(crit),
                                           verdict=overall(x.status for x in crit), cost=cost,
                                           **flagged)  # fmt: skip
    differences: dict[str, Difference] = {}
    for name in names:
        d: dict[str, float | None] = {}
        for c in "12":
            a, b = reps_of[name][c], reps_of[method][c]
            fa, fb = fits_of[name][f"g{c}"], fits_of[method][f"g{c}"]
            for q, i in (("m", 0), ("c", 1)):
                va, vb = getattr(fa, q), getattr(fb, q)
                if va is None or vb is None:
                    d[f"d{q}{c}"] = d[f"d{q}{c}_err"] = None
                    continue
                d[f"d{q}{c}"] = va - vb
                d[f"d{q}{c}_err"] = float(_err(a[:, i] - b[:, i])) if a.shape[0] >= 2 else None
        differences[f"{name} - {method}"] = Difference.of(**d)
    return Estimators.of(n_used=n, n_seeds=sums.n_seeds,
                         fit="e = (1 + m) R g + c R, moment equations with instruments (g, 1) "
                             "over the realizations (R: the ring's mean response); errors: "
                             "delete-one-seed jackknife",
                         forward_model=method, point_estimate=sums.col, results=results,
                         differences=differences)  # fmt: skip


def _values(fits: dict[str, Fit]) -> dict[str, float | None]:
    """m1, m1_err, c1, c1_err, m2, ... of the fits, in the section's order."""
    out: dict[str, float | None] = {}
    for c in "12":
        f = fits[f"g{c}"]
        out.update({f"m{c}": f.m, f"m{c}_err": f.m_err, f"c{c}": f.c, f"c{c}_err": f.c_err})
    return out


def _slope_fn(x: np.ndarray) -> np.ndarray:
    return np.stack(_solve(x), axis=-1)


def _offset_fn(x: np.ndarray) -> np.ndarray:
    return np.stack([np.full(x.shape[:-1], np.nan), x[..., 0] / x[..., 1]], axis=-1)


def _pm(v: Any, e: Any) -> str:
    if v is None:
        return "undefined"
    return f"{v:+.2e}" + ("" if e is None else f" ± {e:.1e}")


def side_by_side(side: Estimators) -> tuple[list[str], list[list[str]], str]:
    """``(header, rows, note)`` of the estimators' table (the report's and the printout's):
    one row per estimator and one per difference."""
    head = ["estimator", "m1", "m2", "c1", "c2", "verdict", "s per galaxy", "galaxies/s"]
    rows = []
    for name, r in (side.results or {}).items():
        cost = r.cost or Cost()
        gps = cost.galaxies_per_s
        spg = float("nan") if cost.s_per_galaxy is None else cost.s_per_galaxy
        rows.append([name] + [_pm(getattr(r, f"{q}{k}"), getattr(r, f"{q}{k}_err")) for q, k in
                              (("m", "1"), ("m", "2"), ("c", "1"), ("c", "2"))]
                    + [r.verdict, f"{spg:.3g}", "-" if gps is None else f"{gps:.3g}"])  # fmt: skip
    for name, d in (side.differences or {}).items():
        rows.append([name] + [_pm(getattr(d, f"d{q}{k}"), getattr(d, f"d{q}{k}_err"))
                              for q, k in (("m", "1"), ("m", "2"), ("c", "1"), ("c", "2"))]
                    + ["(paired error)", "", ""])  # fmt: skip
    note = (f"{side.n_used} realizations, {side.n_seeds} seeds, the same galaxies and "
            f"noise for every estimator; {side.fit}; the forward model "
            f"({side.forward_model}) by its {side.point_estimate} per realization; "
            "cost: the forward model's device seconds per realization over its galaxies, a "
            "host estimator's CPU seconds of one worker core")  # fmt: skip
    return head, rows, note


def side_lines(side: Estimators) -> list[str]:
    """The printed table of :func:`side_by_side`."""
    head, rows, note = side_by_side(side)
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows, strict=True)]
    fmt = "  " + "  ".join(f"{{:<{w}}}" for w in widths)
    return [
        "estimators on the same realizations:",
        fmt.format(*head),
        *(fmt.format(*r) for r in rows),
        f"  ({note})",
    ]
