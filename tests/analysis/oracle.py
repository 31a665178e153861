"""A plain reference for the numbers stage 3 reports (issue 56), written from their
definitions in docs/statistics.md and the docstrings of ``analysis/bias_fits.py`` and
``analysis/verdict.py``, not from ``analysis/bias.py``: loops over rows, rings, pairs and
seeds, each estimator recomputed from the rows it is about (no per-seed sums, no
"total minus one seed").

- **Usable rows** (statistics.md, first paragraph): rows in the campaign's plan
  (``in_plan`` not false), status ``ok``, passing convergence, finite truths and point
  estimates (both components: a row enters both fits or neither).
- **Point estimate**: ``g{1,2}_<point>``; ``auto`` is the mode when every usable-scope
  row's ``point_estimate`` is ``mode`` and the table has modes, else the mean
  (``bias-stats --point`` help).
- **Rings** (statistics.md, "Ring designs"): a ring is a seed's copies at one grid value,
  keyed by ``pair_id`` without its ``_r<k>`` suffix when paired, else by the true shear;
  only complete rings (every rotation ``0 .. R-1``, both signs of each when paired)
  enter the fit; the others are counted. **Ring averaging**: each complete ring is
  reduced to its copies' weighted mean at each shear value (the weight is the sum of its
  copies' weights), and the fits below run over those means: the rotation cancels
  what is odd in e inside the ring.
- **Pairs**: a pair id with exactly one +1 and one -1 row; ``D = (g_hat(+) - g_hat(-)) /
  2``, ``A = (g_hat(+) + g_hat(-)) / 2``, ``1 + m = sum w g D / sum w g^2``, ``c = sum w
  A / sum w`` (bias_fits.py); a pair weighs ``4 / (std_+^2 + std_-^2)`` with inverse-variance
  weights. The estimator (``auto``) is the paired one when the usable rows hold a pair.
- **Regression**: weighted least squares of ``g_hat`` on ``g_true``, ``g_hat = (1 + m)
  g_true + c``, computed centred (``b = sum w (x - xbar)(y - ybar) / sum w (x - xbar)^2``);
  a component whose truth is constant over the fitted rows has no slope: ``m`` is None
  and ``c`` the weighted mean offset. A component is fitted by the paired estimator only
  when every pair's +g truth in it is > 0 and its -g truth the negative (what bias.py
  does, not said in docs/statistics.md: see :func:`component_kind`); the regression
  otherwise.
- **Errors over seeds** (statistics.md: "the jackknife and bootstrap resample whole
  seeds"): delete-one-seed jackknife, each replicate refitted on the rows of the other
  seeds, ``Var = (G - 1) / G sum_k (theta_k - mean)^2`` (None with one seed or a
  non-finite replicate); the group bootstrap, ``theta_b`` refitted with each seed's rows
  counted ``n_bk`` times, ``n_b ~ Mult(G, 1/G)`` drawn by ``numpy.random.default_rng(seed)``
  with the seeds in sorted label order (the draw bias_fits.group_errors documents), std with
  ``ddof = 1`` over the finite resamples. Reported: the jackknife for the regression and
  the offset, the bootstrap for the paired estimator (statistics.md: "jackknife errors
  over seeds (bootstrap for the paired estimator)"); the other when that one is missing.
- **Coverage** (bias_fits.py, :func:`coverage`): over every usable row, the fraction with
  ``q_lo <= g_true <= q_hi`` (q16-q84 for 0.68, q025-q975 for 0.95); binomial
  ``se = sqrt(p (1 - p) / n_seeds)`` with ``n_seeds`` the distinct seeds of the usable
  rows; pass inside ``[p - z se, p + z se]`` clipped to [0, 1], ``inconclusive`` below
  ``min_seeds`` seeds.
- **Verdict of m and c** (statistics.md, "A verdict that accounts for its errors"):
  PASS when ``|x| + q sigma <= T``, FAIL when ``|x| - q sigma > T``, else INCONCLUSIVE,
  ``q = t_{G-1}(Phi(z))`` with ``G`` the seeds of the fit.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
from scipy import stats as st

COMPONENTS = ("g1", "g2")
LEVELS = {"0.68": ("q16", "q84"), "0.95": ("q025", "q975")}
RING_SUFFIX = re.compile(r"_r\d+$")


class Refused(ValueError):
    """A table stage 3 cannot measure: nothing left to fit, or no slope in either
    component (``str``: the words measure_bias's ``ValueError`` holds)."""


def _says_true(v: Any) -> bool:
    return v is True or str(v).lower() in ("true", "1", "1.0")


def _says_false(v: Any) -> bool:
    return v is False or str(v).strip().lower() in ("false", "0", "0.0")


def _num(v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def resolve_point(records: list[dict], columns: list[str], point: str) -> str:
    if point != "auto":
        return point
    kinds = {str(r["point_estimate"]) for r in records
             if "point_estimate" in r and isinstance(r["point_estimate"], str)}  # fmt: skip
    has_mode = "g1_mode" in columns and any(math.isfinite(_num(r["g1_mode"])) for r in records)
    return "mode" if kinds == {"mode"} and has_mode else "mean"


def usable_rows(df: Any, point: str) -> tuple[list[dict], dict[str, int], str]:
    """``(usable rows, {why excluded: count}, point)`` of a summary table."""
    records = df.to_dict("records")
    if "in_plan" in df.columns:
        records = [r for r in records if not _says_false(r["in_plan"])]
    point = resolve_point(records, list(df.columns), point)
    keep, why = [], {}
    for r in records:
        status = "" if r["status"] is None or (isinstance(r["status"], float)
                                                and math.isnan(r["status"])) else str(r["status"])  # fmt: skip
        if status != "ok":
            why[f"status {status}"] = why.get(f"status {status}", 0) + 1
        elif not _says_true(r["passed_convergence"]):
            why["did not pass convergence"] = why.get("did not pass convergence", 0) + 1
        elif not all(math.isfinite(_num(r[f"{c}_{x}"])) for c in COMPONENTS
                     for x in ("true", point)):  # fmt: skip
            why["non-finite truth or estimate"] = why.get("non-finite truth or estimate", 0) + 1
        else:
            keep.append(r)
    return keep, why, point


def _sign(r: dict) -> float:
    s = _num(r.get("pair_sign", math.nan))
    return s if s in (1.0, -1.0) else 0.0


def ring_key(r: dict) -> tuple:
    seed = str(r["seed"])
    if _sign(r) != 0.0 and "pair_id" in r:
        pid = r["pair_id"] if isinstance(r["pair_id"], str) else ""
        return (seed, "id", RING_SUFFIX.sub("", pid))
    return (seed, "truth", round(_num(r["g1_true"]), 12), round(_num(r["g2_true"]), 12))


def complete_rings(rows: list[dict]) -> tuple[list[dict], int]:
    """The rows of complete rings and the number of incomplete rings."""
    rotated = [r for r in rows if math.isfinite(_num(r.get("n_rotations", math.nan)))
               and _num(r["n_rotations"]) > 1]  # fmt: skip
    if not rotated or "rotation" not in rows[0]:
        return list(rows), 0
    rings: dict[tuple, list[dict]] = {}
    for r in rows:
        rings.setdefault(ring_key(r), []).append(r)
    kept, incomplete = [], 0
    for members in rings.values():
        n_rot = {_num(r["n_rotations"]) for r in members}
        assert len(n_rot) == 1, "a ring whose copies disagree on n_rotations"
        big_r = n_rot.pop()
        big_r = int(big_r) if math.isfinite(big_r) and big_r > 1 else 1
        paired = _sign(members[-1]) != 0.0
        need = {(k, s) for k in range(big_r) for s in ((1.0, -1.0) if paired else (0.0,))}
        have = {(int(_num(r["rotation"])), _sign(r)) for r in members
                if math.isfinite(_num(r["rotation"]))}  # fmt: skip
        if need <= have:
            kept += members
        else:
            incomplete += 1
    return kept, incomplete


def pairs(rows: list[dict]) -> list[tuple[dict, dict]]:
    """The complete +g/-g pairs: ids with exactly one row of each sign."""
    by_id: dict[str, dict[float, list[dict]]] = {}
    for r in rows:
        pid = r.get("pair_id")
        if isinstance(pid, str) and pid and _sign(r) != 0.0:
            by_id.setdefault(pid, {1.0: [], -1.0: []})[_sign(r)].append(r)
    return [(v[1.0][0], v[-1.0][0]) for v in by_id.values()
            if len(v[1.0]) == 1 and len(v[-1.0]) == 1]  # fmt: skip


def _weight(std: float, weights: str) -> float:
    if weights == "none":
        return 1.0
    assert math.isfinite(std) and std > 0, "inverse-variance weights need a finite std > 0"
    return 1.0 / std**2


# ----------------------------------------------------------------- ring averaging: cells


def regression_cells(rows: list[dict], comp: str, point: str, weights: str) -> list[tuple]:
    """Each complete ring's copies at one shear value averaged: ``(seed, x, ybar, W, n)``,
    ``W`` the sum of the copies' weights."""
    cells: dict[tuple, list] = {}
    for r in rows:
        key = (*ring_key(r), _sign(r))
        w = _weight(_num(r[f"{comp}_std"]), weights)
        c = cells.setdefault(key, [str(r["seed"]), _num(r[f"{comp}_true"]), 0.0, 0.0, 0])
        assert c[1] == _num(r[f"{comp}_true"]), "copies of one shear value with other truths"
        c[2] += w * _num(r[f"{comp}_{point}"])
        c[3] += w
        c[4] += 1
    return [(s, x, wy / w, w, n) for s, x, wy, w, n in cells.values()]


def paired_cells(prs: list[tuple[dict, dict]], comp: str, point: str, weights: str) -> list:
    """Each complete ring's pairs averaged: ``(seed, g, Dbar, Abar, W, n_pairs)``."""
    cells: dict[tuple, list] = {}
    for p, q in prs:
        g = _num(p[f"{comp}_true"])
        hp, hm = _num(p[f"{comp}_{point}"]), _num(q[f"{comp}_{point}"])
        if weights == "none":
            w = 1.0
        else:
            sp, sm = _num(p[f"{comp}_std"]), _num(q[f"{comp}_std"])
            w = _weight(math.sqrt((sp**2 + sm**2) / 4.0), weights)
        c = cells.setdefault(ring_key(p), [str(p["seed"]), g, 0.0, 0.0, 0.0, 0])
        assert c[1] == g, "pairs of one ring with other truths"
        c[2] += w * (hp - hm) / 2.0
        c[3] += w * (hp + hm) / 2.0
        c[4] += w
        c[5] += 1
    return [(s, g, wd / w, wa / w, w, n) for s, g, wd, wa, w, n in cells.values()]


# ------------------------------------------------------------- the estimators on cells
# ``mult``: how many times each seed's cells count (1 when absent; 0: deleted)


def regression(cells: list[tuple], mult: dict[str, float]) -> np.ndarray:
    sw = sx = sy = 0.0
    for s, x, y, w, _ in cells:
        k = mult.get(s, 1.0) * w
        sw, sx, sy = sw + k, sx + k * x, sy + k * y
    xbar, ybar = sx / sw, sy / sw
    sxy = sxx = 0.0
    for s, x, y, w, _ in cells:
        k = mult.get(s, 1.0) * w
        sxy += k * (x - xbar) * (y - ybar)
        sxx += k * (x - xbar) ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        b = np.float64(sxy) / np.float64(sxx)
    return np.array([b, ybar - b * xbar])


def offset(cells: list[tuple], mult: dict[str, float]) -> np.ndarray:
    num = den = 0.0
    for s, x, y, w, _ in cells:
        k = mult.get(s, 1.0) * w
        num, den = num + k * (y - x), den + k
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.array([np.float64(num) / np.float64(den)])


def paired(cells: list[tuple], mult: dict[str, float]) -> np.ndarray:
    sgd = sgg = sa = sw = 0.0
    for s, g, d, a, w, _ in cells:
        k = mult.get(s, 1.0) * w
        sgd, sgg, sa, sw = sgd + k * g * d, sgg + k * g * g, sa + k * a, sw + k
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.array([np.float64(sgd) / np.float64(sgg), np.float64(sa) / np.float64(sw)])


def jackknife(cells: list[tuple], fn: Any) -> np.ndarray | None:
    """Delete-one-seed jackknife std of ``fn``'s estimate."""
    seeds = sorted({c[0] for c in cells})
    g = len(seeds)
    if g < 2:
        return None
    reps = np.array([fn(cells, {s: 0.0}) for s in seeds])
    if not np.all(np.isfinite(reps)):
        return None
    mean = reps.mean(axis=0)
    var = (g - 1) / g * ((reps - mean) ** 2).sum(axis=0)
    return np.sqrt(var)


def bootstrap(cells: list[tuple], fn: Any, n_boot: int, seed: int) -> np.ndarray | None:
    """Group-bootstrap std of ``fn``'s estimate (seeds drawn with replacement)."""
    seeds = sorted({c[0] for c in cells})
    g = len(seeds)
    if g < 2 or n_boot < 1:
        return None
    counts = np.random.default_rng(seed).multinomial(g, np.full(g, 1.0 / g), size=n_boot)
    reps = np.array([fn(cells, dict(zip(seeds, map(float, n), strict=True))) for n in counts])
    reps = reps[np.all(np.isfinite(reps), axis=1)]
    return reps.std(axis=0, ddof=1) if len(reps) > 1 else None


# ------------------------------------------------------------------------- the analysis


def component_kind(fit_rows: list[dict], prs: list, comp: str, estimator: str) -> str:
    """``offset`` (constant truth), ``paired`` or ``regression``. The paired estimator
    needs, in this component, every pair's +g truth > 0 and its -g truth the negative
    (bias.py's rule: e.g. a 2-D grid point (0, 0.02) fits g1 by the regression)."""
    t = [_num(r[f"{comp}_true"]) for r in fit_rows]
    if max(t) - min(t) <= 1e-12:
        return "offset"
    if estimator == "paired":
        tp = np.array([_num(p[f"{comp}_true"]) for p, _ in prs])
        tm = np.array([_num(q[f"{comp}_true"]) for _, q in prs])
        if np.all(tp > 0) and np.allclose(tp, -tm):
            return "paired"
    return "regression"


def fit_component(fit_rows: list[dict], prs: list, comp: str, kind: str, point: str,
                  weights: str, n_boot: int, seed: int) -> dict[str, Any]:  # fmt: skip
    if kind == "paired":
        cells = paired_cells(prs, comp, point, weights)
        fn, n = paired, len(prs)
    else:
        cells = regression_cells(fit_rows, comp, point, weights)
        fn, n = (offset if kind == "offset" else regression), len(fit_rows)
    est = fn(cells, {})
    jk, bs = jackknife(cells, fn), bootstrap(cells, fn, n_boot, seed)
    prefer = ("bootstrap", "jackknife") if kind == "paired" else ("jackknife", "bootstrap")
    errs = {"jackknife": jk, "bootstrap": bs}
    method = next((k for k in prefer if errs[k] is not None), "none")
    err = errs.get(method)
    out = {"kind": kind, "n": n, "n_groups": len({c[0] for c in cells}), "error_method": method,
           "jackknife": jk, "bootstrap": bs}  # fmt: skip
    if kind == "offset":
        out.update(
            m=None, c=float(est[0]), m_err=None, c_err=None if err is None else float(err[0])
        )
    else:
        out.update(m=float(est[0]) - 1.0, c=float(est[1]),
                   m_err=None if err is None else float(err[0]),
                   c_err=None if err is None else float(err[1]))  # fmt: skip
    return out


def coverage(use: list[dict], comp: str, level: str, n_seeds: int, z: float,
             min_seeds: int) -> dict[str, Any]:  # fmt: skip
    lo_c, hi_c = (f"{comp}_{q}" for q in LEVELS[level])
    if not use:
        return {"skipped": "no rows"}
    if lo_c not in use[0] or hi_c not in use[0]:
        return {"skipped": "posterior quantile columns missing"}
    lo = [_num(r[lo_c]) for r in use]
    hi = [_num(r[hi_c]) for r in use]
    if not all(math.isfinite(v) for v in lo + hi):
        return {"skipped": "posterior quantiles missing"}
    if not all(b > a for a, b in zip(lo, hi, strict=True)):
        return {"skipped": "zero-width posterior intervals (point estimates)"}
    inside = sum(1 for r, a, b in zip(use, lo, hi, strict=True)
                 if a <= _num(r[f"{comp}_true"]) <= b)  # fmt: skip
    p = float(level)
    f = inside / len(use)
    se = math.sqrt(p * (1 - p) / n_seeds)
    band = [max(0.0, p - z * se), min(1.0, p + z * se)]
    if n_seeds < min_seeds:
        status = "inconclusive"
    elif f < band[0] or f > band[1]:
        status = "fail"
    else:
        status = "pass"
    return {"observed": f, "n": len(use), "n_inside": inside, "n_eff": n_seeds, "se": se,
            "band": band, "status": status}  # fmt: skip


def verdict(x: float, err: float | None, threshold: float, z: float, n_groups: int) -> str:
    if err is None or n_groups < 2:
        return "inconclusive"
    q = float(st.t.ppf(st.norm.cdf(z), n_groups - 1))
    if abs(x) + q * err <= threshold:
        return "pass"
    if abs(x) - q * err > threshold:
        return "fail"
    return "inconclusive"


def stage3(df: Any, *, acceptance: dict[str, float], point: str = "auto",
           estimator: str = "auto", weights: str = "none", n_boot: int = 1000,
           seed: int = 0) -> dict[str, Any]:  # fmt: skip
    """What stage 3 reports of ``df``, by the definitions above."""
    use, excluded, point = usable_rows(df, point)
    if not use:
        raise Refused("no usable rows")
    n_seeds = len({str(r["seed"]) for r in use})
    fit_rows, incomplete = complete_rings(use)
    if not fit_rows:
        raise Refused("no complete rings among the usable rows")
    prs = pairs(fit_rows)
    if estimator == "auto":
        estimator = "paired" if pairs(use) else "regression"
    fits = {}
    for comp in COMPONENTS:
        kind = component_kind(fit_rows, prs, comp, estimator)
        fits[comp] = fit_component(fit_rows, prs, comp, kind, point, weights, n_boot, seed)
    if all(f["m"] is None for f in fits.values()):
        raise Refused("g1_true and g2_true are each constant over the usable rows")
    cov = {c: {lev: coverage(use, c, lev, n_seeds, acceptance["coverage_z"],
                             int(acceptance["min_seeds"])) for lev in LEVELS}
           for c in COMPONENTS}  # fmt: skip
    crit = {}
    for comp, f in fits.items():
        for q, thr in (("m", acceptance["max_abs_m"]), ("c", acceptance["max_abs_c"])):
            if f[q] is not None:
                crit[f"|{q}{comp[1]}|"] = verdict(f[q], f[f"{q}_err"], thr, acceptance["z"],
                                                  f["n_groups"])  # fmt: skip
    return {"point": point, "estimator": estimator, "n_used": len(use), "n_seeds": n_seeds,
            "excluded": excluded, "incomplete_rings": incomplete, "fits": fits,
            "coverage": cov, "criteria": crit}  # fmt: skip


def pooled_line(grid_points: list[dict], comp: str, paired: bool) -> tuple[float | None, float]:
    """``(m, c)`` of the population estimator from its grid points' pooled estimates
    (``bias_results.json``'s ``population.grid_points``: ``g1_true``, ``g1``, ...), by
    analysis/pooled.py's docstring: per component ``G_hat = (1 + m) g_true + c`` over the
    grid points, unweighted; a paired grid (each +g1 point with its -g1 twin at the same
    g2) fits g1 by ``1 + m = sum_p g D / sum_p g^2``, ``D = (G_hat(+) - G_hat(-)) / 2``,
    ``c`` the mean of ``A = (G_hat(+) + G_hat(-)) / 2``; a constant truth gives ``c``
    alone, the mean offset."""
    t = [float(p[f"{comp}_true"]) for p in grid_points]
    h = [float(p[comp]) for p in grid_points]
    if max(t) - min(t) <= 1e-12:
        return None, sum(y - x for x, y in zip(t, h, strict=True)) / len(t)
    if paired and comp == "g1":
        sgd = sgg = sa = 0.0
        plus = [p for p in grid_points if p["g1_true"] > 0]
        for p in plus:
            (q,) = [q for q in grid_points if q["g1_true"] == -p["g1_true"]
                    and q["g2_true"] == p["g2_true"]]  # fmt: skip
            g, d, a = p["g1_true"], (p["g1"] - q["g1"]) / 2.0, (p["g1"] + q["g1"]) / 2.0
            sgd, sgg, sa = sgd + g * d, sgg + g * g, sa + a
        return sgd / sgg - 1.0, sa / len(plus)
    xbar, ybar = sum(t) / len(t), sum(h) / len(h)
    b = sum((x - xbar) * (y - ybar) for x, y in zip(t, h, strict=True)) / sum(
        (x - xbar) ** 2 for x in t
    )
    return b - 1.0, ybar - b * xbar
