"""Stage 3 numerics: m and c, their errors, coverage and simulation-based calibration.

Per shear component, ``g_hat = (1 + m) g_true + c`` with ``g_hat`` the
posterior mean. Every estimator below is a smooth function of per-group sums
``S_k`` (a group = the realizations sharing one seed, i.e. one galaxy and one
noise field reused at every grid point), so the delete-one-group jackknife
and the group bootstrap are cheap array operations on the ``(G, p)`` matrix of
group sums:

- jackknife: ``theta_(k) = f(S - S_k)``, ``var = (G - 1) / G * sum_k (theta_(k) - mean)^2``;
- bootstrap: ``theta_b = f(sum_k n_bk S_k)`` with multinomial counts ``n_b ~ Mult(G, 1/G)``,
  ``var = var_b(theta_b)``.

Estimators (:func:`fit_regression`, :func:`fit_paired`, :func:`fit_offset`):

- grid regression, weighted least squares with ``w_i = 1 / sigma_i^2`` (``sigma_i``
  the posterior std; ``w_i = 1`` when the stds are not all finite and > 0):
  ``b = (S_w S_wxy - S_wx S_wy) / (S_w S_wxx - S_wx^2)``, ``a = (S_wy - b S_wx) / S_w``,
  ``m = b - 1``, ``c = a``;
- paired (+g / -g sharing seed and noise): ``D = (g_hat(+) - g_hat(-)) / 2``,
  ``A = (g_hat(+) + g_hat(-)) / 2``, ``1 + m = sum w g D / sum w g^2`` (least
  squares of ``D = (1 + m) g`` through the origin; a single pair gives
  ``m = (g_hat(+) - g_hat(-)) / (2 g) - 1``) and ``c = sum w A / sum w``;
- constant truth (e.g. ``g2 = 0`` everywhere): the slope is undefined, ``m`` is
  reported as ``None`` with a reason and ``c = sum w (g_hat - g_true) / sum w``.

Coverage (:func:`coverage`): fraction ``f`` of realizations with
``q_lo <= g_true <= q_hi`` for the central 68% (q16-q84) and 95% (q025-q975)
posterior intervals, against the central ``1 - 2 Phi(-z)`` interval of
``Binomial(n, p) / n``. SBC (:func:`sbc`): ranks ``r = #{draws < g_true} /
#draws`` are Uniform(0, 1) when truths are drawn from the inference prior
(Talts et al. 2018); chi-square test on equal-width bins and Kolmogorov-Smirnov.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
from scipy import stats as st

__all__ = [
    "Fit",
    "coverage",
    "fit_offset",
    "fit_paired",
    "fit_regression",
    "group_errors",
    "has_pairs",
    "pair_table",
    "sbc",
]

logger = logging.getLogger(__name__)


class Fit(NamedTuple):
    """An estimate of (m, c) with its errors; ``m`` is ``None`` when undefined."""

    m: float | None
    c: float
    m_err: float | None
    c_err: float
    error_method: str
    errors: dict[str, Any]
    n: int
    n_groups: int
    m_reason: str = ""
    boot: np.ndarray | None = None  # (B, 2) bootstrap draws of (m, c), for error bands


def _weights(std: np.ndarray | None, n: int) -> tuple[np.ndarray, bool]:
    """``1 / std^2`` when every std is finite and > 0, else ones."""
    if std is not None and np.all(np.isfinite(std)) and np.all(std > 0):
        return 1.0 / np.asarray(std, dtype=float) ** 2, True
    return np.ones(n), False


def _group_sums(terms: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """``(G, p)`` sums of the ``(n, p)`` per-row terms over each group label."""
    _, inv = np.unique(groups, return_inverse=True)
    out = np.zeros((inv.max() + 1, terms.shape[1]))
    np.add.at(out, inv, terms)
    return out


def group_errors(
    sums: np.ndarray,
    fn: Callable[[np.ndarray], np.ndarray],
    *,
    n_boot: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """Jackknife (delete-one-group) and group-bootstrap standard errors of ``fn(S)``.

    ``sums`` is ``(G, p)``; ``fn`` maps ``(..., p)`` totals to ``(..., q)`` estimates.
    Returns ``{"jackknife": std (q,) | None, "bootstrap": std (q,), "boot": (B, q)}``;
    the jackknife needs ``G >= 2``.
    """
    g = sums.shape[0]
    total = sums.sum(axis=0)
    out: dict[str, Any] = {"jackknife": None}
    if g >= 2:
        jk = fn(total[None, :] - sums)
        out["jackknife"] = np.sqrt((g - 1) / g * np.sum((jk - jk.mean(axis=0)) ** 2, axis=0))
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(g, np.full(g, 1.0 / g), size=n_boot)
    with np.errstate(divide="ignore", invalid="ignore"):
        boot = fn(counts @ sums)
    ok = np.all(np.isfinite(boot), axis=1)
    out["boot"] = boot[ok]
    out["bootstrap"] = np.std(boot[ok], axis=0, ddof=1) if ok.sum() > 1 else None
    out["n_boot"] = int(ok.sum())
    return out


def _finish(
    est: np.ndarray, errs: dict[str, Any], prefer: str, n: int, g: int, weighted: bool
) -> Fit:
    chosen = prefer if errs.get(prefer) is not None else "bootstrap"
    err = errs[chosen]
    rep = {
        k: (None if errs[k] is None else [float(x) for x in errs[k]])
        for k in ("jackknife", "bootstrap")
    }
    rep.update(n_boot=errs["n_boot"], n_groups=g, weighted=weighted)
    return Fit(float(est[0]) - 1.0, float(est[1]), float(err[0]), float(err[1]),
               chosen, rep, n, g, "", errs["boot"] - np.array([1.0, 0.0]))  # fmt: skip


def fit_regression(
    g_true: np.ndarray,
    g_hat: np.ndarray,
    std: np.ndarray | None = None,
    groups: np.ndarray | None = None,
    *,
    errors: str = "jackknife",
    n_boot: int = 1000,
    seed: int = 0,
) -> Fit:
    """Weighted least squares of ``g_hat`` on ``g_true``; errors by seed group.

    ``groups`` are the seeds (default: every row its own group); ``errors``
    picks the reported error (``jackknife`` or ``bootstrap``; both are kept in
    ``Fit.errors``).
    """
    x, y = np.asarray(g_true, float), np.asarray(g_hat, float)
    w, weighted = _weights(std, x.size)
    groups = np.arange(x.size) if groups is None else np.asarray(groups)
    terms = np.stack([w, w * x, w * y, w * x * x, w * x * y], axis=1)

    def fn(s: np.ndarray) -> np.ndarray:
        b = (s[..., 0] * s[..., 4] - s[..., 1] * s[..., 2]) / (
            s[..., 0] * s[..., 3] - s[..., 1] ** 2
        )
        a = (s[..., 2] - b * s[..., 1]) / s[..., 0]
        return np.stack([b, a], axis=-1)

    sums = _group_sums(terms, groups)
    est = fn(sums.sum(axis=0))
    errs = group_errors(sums, fn, n_boot=n_boot, seed=seed)
    return _finish(est, errs, errors, x.size, sums.shape[0], weighted)


def fit_offset(
    g_true: np.ndarray,
    g_hat: np.ndarray,
    std: np.ndarray | None = None,
    groups: np.ndarray | None = None,
    *,
    errors: str = "jackknife",
    n_boot: int = 1000,
    seed: int = 0,
    reason: str = "",
) -> Fit:
    """Constant truth: ``m`` undefined (``None`` with ``reason``), ``c`` the weighted mean offset."""
    d = np.asarray(g_hat, float) - np.asarray(g_true, float)
    w, weighted = _weights(std, d.size)
    groups = np.arange(d.size) if groups is None else np.asarray(groups)
    sums = _group_sums(np.stack([w, w * d], axis=1), groups)

    def fn(s: np.ndarray) -> np.ndarray:
        return (s[..., 1] / s[..., 0])[..., None]

    errs = group_errors(sums, fn, n_boot=n_boot, seed=seed)
    chosen = errors if errs.get(errors) is not None else "bootstrap"
    c = float(fn(sums.sum(axis=0))[0])
    c_err = float(errs[chosen][0]) if errs[chosen] is not None else math.nan
    rep = {k: (None if errs[k] is None else float(errs[k][0])) for k in ("jackknife", "bootstrap")}
    rep.update(n_boot=errs["n_boot"], n_groups=sums.shape[0], weighted=weighted)
    boot = np.stack([np.zeros(len(errs["boot"])), errs["boot"][:, 0]], axis=1)
    return Fit(None, c, None, c_err, chosen, rep, d.size, sums.shape[0], reason, boot)


def has_pairs(pair_id: np.ndarray, pair_sign: np.ndarray) -> bool:
    """True when at least one pair id has both a +1 and a -1 row."""
    return len(pair_table(pair_id, pair_sign)[0]) > 0


def pair_table(pair_id: np.ndarray, pair_sign: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row indices ``(plus, minus)`` of the complete pairs (ids with exactly one row of each sign)."""
    plus: dict[Any, list[int]] = {}
    minus: dict[Any, list[int]] = {}
    for i, (pid, s) in enumerate(zip(pair_id, pair_sign, strict=True)):
        if isinstance(pid, str) and pid and s in (1, -1):
            (plus if s == 1 else minus).setdefault(pid, []).append(i)
    ids = sorted(k for k in plus if len(plus[k]) == 1 and len(minus.get(k, [])) == 1)
    return (np.array([plus[k][0] for k in ids], dtype=int),
            np.array([minus[k][0] for k in ids], dtype=int))  # fmt: skip


def fit_paired(
    g_plus: np.ndarray,
    hat_plus: np.ndarray,
    hat_minus: np.ndarray,
    std_plus: np.ndarray | None = None,
    std_minus: np.ndarray | None = None,
    groups: np.ndarray | None = None,
    *,
    n_boot: int = 1000,
    seed: int = 0,
) -> Fit:
    """Paired estimator over complete +g/-g pairs; bootstrap errors over pairs.

    Pairs that share a seed (same galaxy and noise at several |g|) are
    resampled together (``groups``); with one pair per seed this is the plain
    bootstrap over pairs. The jackknife is kept in ``Fit.errors`` too.
    """
    g = np.asarray(g_plus, float)
    dd = (np.asarray(hat_plus, float) - np.asarray(hat_minus, float)) / 2.0
    aa = (np.asarray(hat_plus, float) + np.asarray(hat_minus, float)) / 2.0
    both = None
    if std_plus is not None and std_minus is not None:
        both = np.sqrt((np.asarray(std_plus) ** 2 + np.asarray(std_minus) ** 2) / 4.0)
    w, weighted = _weights(both, g.size)
    groups = np.arange(g.size) if groups is None else np.asarray(groups)
    sums = _group_sums(np.stack([w * g * dd, w * g * g, w, w * aa], axis=1), groups)

    def fn(s: np.ndarray) -> np.ndarray:
        return np.stack([s[..., 0] / s[..., 1], s[..., 3] / s[..., 2]], axis=-1)

    est = fn(sums.sum(axis=0))
    errs = group_errors(sums, fn, n_boot=n_boot, seed=seed)
    return _finish(est, errs, "bootstrap", g.size, sums.shape[0], weighted)


def binomial_band(n: int, p: float, z: float = 3.0) -> tuple[float, float]:
    """Central ``1 - 2 Phi(-z)`` interval of ``Binomial(n, p) / n``."""
    tail = float(st.norm.sf(z))
    return float(st.binom.ppf(tail, n, p)) / n, float(st.binom.isf(tail, n, p)) / n


def coverage(
    g_true: np.ndarray,
    q_lo: np.ndarray,
    q_hi: np.ndarray,
    level: float,
    z: float = 3.0,
    groups: np.ndarray | None = None,
) -> dict[str, Any]:
    """Observed coverage of central ``level`` intervals ``[q_lo, q_hi]`` with its binomial band.

    Realizations sharing a seed (``groups``: one noise field reused at every
    grid point) are not independent trials, so the band is that of
    ``Binomial(n_eff, level) / n_eff`` with ``n_eff`` the number of distinct
    groups: exact when a group's members are all inside or all outside,
    conservative otherwise. Returns ``{"skipped": reason}`` when the intervals
    are missing or have no width (e.g. a point estimate).
    """
    t, lo, hi = (np.asarray(a, float) for a in (g_true, q_lo, q_hi))
    if t.size == 0:
        return {"skipped": "no rows"}
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
        return {"skipped": "posterior quantiles missing"}
    if not np.all(hi > lo):
        return {"skipped": "zero-width posterior intervals (point estimates)"}
    inside = (lo <= t) & (t <= hi)
    f = float(inside.mean())
    n_eff = t.size if groups is None else len(np.unique(np.asarray(groups)))
    band = binomial_band(n_eff, level, z)
    return {"observed": f, "expected": level, "band": list(band), "z": z, "n": int(t.size),
            "n_eff": int(n_eff),
            "n_inside": int(inside.sum()), "passed": bool(band[0] <= f <= band[1])}  # fmt: skip


def sbc(ranks: np.ndarray, n_bins: int | None = None) -> dict[str, Any]:
    """Uniformity of SBC ranks in [0, 1]: chi-square on equal bins (>= 5 expected each) and KS."""
    r = np.asarray(ranks, float)
    r = r[np.isfinite(r)]
    if r.size < 10:
        return {"skipped": f"too few ranks ({r.size} < 10)"}
    bins = n_bins or int(np.clip(r.size // 5, 2, 20))
    counts, _ = np.histogram(np.clip(r, 0.0, 1.0), bins=bins, range=(0.0, 1.0))
    chi2 = st.chisquare(counts)
    ks = st.kstest(r, "uniform")
    return {"n": int(r.size), "n_bins": bins, "counts": counts.tolist(),
            "chi2": float(chi2.statistic), "p_value": float(chi2.pvalue),
            "ks_statistic": float(ks.statistic), "ks_p_value": float(ks.pvalue)}  # fmt: skip


# --------------------------------------------------------------------------- campaign analysis
