"""Stage 3 numerics: m and c, their errors, coverage and simulation-based calibration.

Per shear component, ``g_hat = (1 + m) g_true + c`` with ``g_hat`` the
per-realization point estimate (posterior mean, median or mode). Every
estimator below is a smooth function of per-group sums ``S_k`` (a group = the
realizations sharing one seed, i.e. one galaxy and one noise field reused at
every grid point), so the delete-one-group jackknife and the group bootstrap
are cheap array operations on the ``(G, p)`` matrix of group sums:

- jackknife: ``theta_(k) = f(S - S_k)``,
  ``Cov = (G - 1) / G * sum_k (theta_(k) - mean)(theta_(k) - mean)^T``;
- bootstrap: ``theta_b = f(sum_k n_bk S_k)`` with multinomial counts ``n_b ~ Mult(G, 1/G)``,
  ``Cov = cov_b(theta_b)``.

Both need ``G >= 2`` independent seeds; with one seed there is no error (``None``).

Estimators (:func:`fit_regression`, :func:`fit_paired`, :func:`fit_offset`), with
weights ``w_i`` (:func:`weights_for`):

- ``weights="none"`` (default): ``w_i = 1``, ordinary least squares. The weights
  cannot correlate with the estimate, so the estimator is unbiased whenever the
  point estimates are;
- ``weights="inverse-variance"``: ``w_i = 1 / sigma_i^2`` with ``sigma_i`` the
  posterior std. Biased at low S/N, where the posterior width depends on the
  realization's own noise and so correlates with its estimate (the Laplace
  width is the curvature at the realization's own mode): realizations
  scattered one way get more weight than those scattered the other way
  (issue 12: ``m1 = -0.026`` weighted vs ``-0.011`` unweighted on the same
  low-S/N files; with ``std = 0.005 + 0.5 |g_hat|`` and true ``m = 0``,
  ``m = -0.21 +- 0.013`` weighted vs ``0.00 +- 0.005`` unweighted, see
  tests/analysis/test_bias_fits.py).

- grid regression: ``b = (S_w S_wxy - S_wx S_wy) / (S_w S_wxx - S_wx^2)``,
  ``a = (S_wy - b S_wx) / S_w``, ``m = b - 1``, ``c = a``;
- paired (+g / -g sharing seed and noise): ``D = (g_hat(+) - g_hat(-)) / 2``,
  ``A = (g_hat(+) + g_hat(-)) / 2``, ``1 + m = sum w g D / sum w g^2`` (least
  squares of ``D = (1 + m) g`` through the origin; a single pair gives
  ``m = (g_hat(+) - g_hat(-)) / (2 g) - 1``) and ``c = sum w A / sum w``;
- constant truth (e.g. ``g2 = 0`` everywhere): the slope is undefined, ``m`` is
  reported as ``None`` with a reason and ``c = sum w (g_hat - g_true) / sum w``.

Ring designs (``rotations`` R = 2 or 4 copies per seed with the intrinsic shapes
rotated by k 180 / R degrees): both estimators are sums over rows, so a seed's
group sum adds its R copies and the shape of each galaxy cancels inside it to
first order (sum_k R(k) e = 0 for the spin-2 rotations); the jackknife and
bootstrap resample whole seeds, so the errors see the cancelled scatter, not the
shape noise. Only complete rings enter the fit (:func:`complete_rings`: a seed's
copies at a grid value with every rotation present, both signs when paired):
one missing copy would leave that galaxy's shape uncancelled.

Coverage (:func:`coverage`): fraction ``f`` of realizations with
``q_lo <= g_true <= q_hi`` for the central 68% (q16-q84) and 95% (q025-q975)
posterior intervals. Two-sided test: ``f`` outside ``[p - z se, p + z se]``,
``se = sqrt(p (1 - p) / n)`` with ``n`` the number of independent seeds, fails
(too low: intervals too narrow or biased; too high: too wide). SBC
(:func:`sbc`): ranks ``r = #{draws < g_true} / #draws`` are Uniform(0, 1) when
truths are drawn from the inference prior (Talts et al. 2018); chi-square test
on equal-width bins and Kolmogorov-Smirnov. Both need ``min_seeds``
independent seeds, else they are ``inconclusive`` ("too few to test").
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
from scipy import stats as st

from .result import Coverage, ErrorReport, SbcTest

__all__ = [
    "WEIGHTS",
    "Fit",
    "GroupErrors",
    "SeedSums",
    "complete_rings",
    "coverage",
    "coverage_counts",
    "error_label",
    "error_report",
    "fit_offset",
    "fit_paired",
    "fit_regression",
    "group_errors",
    "group_sums",
    "has_pairs",
    "merge_group_sums",
    "n_independent",
    "offset_from_sums",
    "offset_terms",
    "pair_table",
    "paired_from_sums",
    "paired_terms",
    "regression_from_sums",
    "regression_terms",
    "sbc",
    "weights_for",
]

logger = logging.getLogger(__name__)

#: bootstrap counts drawn at once (resamples x seeds): bounds the bootstrap's memory
BOOT_CHUNK_CELLS = 8_000_000
#: weighting schemes of the estimators; ``none`` is the default (see the module docstring)
WEIGHTS = ("none", "inverse-variance")


class Fit(NamedTuple):
    """An estimate of (m, c) with its errors; ``m`` is ``None`` when undefined.

    ``m_err`` / ``c_err`` / ``cov`` come from ``error_method`` (``jackknife`` or
    ``bootstrap`` over ``n_groups`` seeds; ``none`` with a single seed, when
    they are ``None``). ``cov`` is the 2x2 covariance of ``(m, c)``.
    """

    m: float | None
    c: float
    m_err: float | None
    c_err: float | None
    error_method: str
    errors: ErrorReport
    """Every error computed (jackknife, bootstrap), as ``fits.<g>.errors`` writes them."""
    n: int
    n_groups: int
    m_reason: str = ""
    boot: np.ndarray | None = None  # (B, 2) bootstrap draws of (m, c)
    cov: np.ndarray | None = None  # (2, 2) covariance of (m, c) from error_method
    weights: str = "none"


def weights_for(std: np.ndarray | None, n: int, weights: str = "none") -> np.ndarray:
    """Per-row weights: ones (``none``) or ``1 / std^2`` (``inverse-variance``).

    Raises ``ValueError`` for an unknown scheme, or for ``inverse-variance``
    when a std is missing, non-finite or not > 0.
    """
    if weights == "none":
        return np.ones(n)
    if weights != "inverse-variance":
        raise ValueError(f"unknown weights {weights!r}; use {' or '.join(WEIGHTS)}")
    s = None if std is None else np.asarray(std, dtype=float)
    if s is None or s.shape != (n,) or not (np.all(np.isfinite(s)) and np.all(s > 0)):
        raise ValueError("weights inverse-variance: posterior std missing, non-finite or <= 0")
    return 1.0 / s**2


def group_sums(terms: np.ndarray, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(labels (G,), sums (G, p))``: the ``(n, p)`` per-row terms summed over each group
    label, the labels sorted (the order every estimator's resamples follow, so sums of
    disjoint groups computed apart and merged by :func:`merge_group_sums` give the same
    numbers as the whole table)."""
    labels, inv = np.unique(groups, return_inverse=True)
    out = np.zeros((len(labels), terms.shape[1]))
    np.add.at(out, inv, terms)
    return labels, out


def merge_group_sums(
    parts: list[tuple[np.ndarray, np.ndarray]], p: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per-group sums of disjoint sets of groups (each ``(labels, sums)`` of
    :func:`group_sums`), merged in label order; a label in two parts is summed."""
    parts = [(lab, s) for lab, s in parts if len(lab)]
    if not parts:
        return np.empty(0, dtype=object), np.zeros((0, p))
    labels = np.concatenate([lab for lab, _ in parts])
    sums = np.concatenate([s for _, s in parts])
    if len(parts) == 1:
        return labels, sums
    uniq, inv = np.unique(labels, return_inverse=True)
    if len(uniq) == len(labels):
        order = np.argsort(labels, kind="stable")
        return labels[order], sums[order]
    out = np.zeros((len(uniq), p))
    np.add.at(out, inv, sums)
    return uniq, out


@dataclasses.dataclass(frozen=True, eq=False)
class SeedSums:
    """One estimator's per-seed sums over rows holding whole seeds (:func:`group_sums`:
    ``labels`` sorted, ``sums`` ``(G, p)``), or why they could not be formed (``error``:
    the ``ValueError``'s message, raised again by :meth:`total`, i.e. only when a fit needs
    them). :meth:`merge` of parts sharing no seed is :func:`merge_group_sums` (associative:
    the rows are copied, never added); the first error in part order wins."""

    labels: np.ndarray
    sums: np.ndarray
    error: str | None = None

    @classmethod
    def empty(cls) -> SeedSums:
        """No seed: the identity of :meth:`merge`."""
        return cls(np.empty(0, dtype=object), np.zeros((0, 0)))

    @classmethod
    def of(cls, terms: Callable[[], np.ndarray], groups: np.ndarray) -> SeedSums:
        """:func:`group_sums` of the per-row ``terms()`` (a ``ValueError`` kept as ``error``)."""
        try:
            return cls(*group_sums(terms(), groups))
        except ValueError as err:
            return cls(np.empty(0, dtype=object), np.zeros((0, 0)), str(err))

    def merge(self, other: SeedSums) -> SeedSums:
        if self.error is not None:
            return self
        if other.error is not None:
            return other
        if not len(other.labels):
            return self
        if not len(self.labels):
            return other
        return SeedSums(*merge_group_sums([(self.labels, self.sums),
                                           (other.labels, other.sums)], self.sums.shape[1]))  # fmt: skip

    def total(self, p: int) -> np.ndarray:
        """The ``(G, p)`` per-seed sums (``ValueError`` with the kept message)."""
        if self.error is not None:
            raise ValueError(self.error)
        return merge_group_sums([(self.labels, self.sums)], p)[1]


def _group_sums(terms: np.ndarray, groups: np.ndarray) -> np.ndarray:
    return group_sums(terms, groups)[1]


def regression_terms(
    g_true: np.ndarray, g_hat: np.ndarray, std: np.ndarray | None, weights: str = "none"
) -> np.ndarray:
    """Per-row terms ``(w, w x, w y, w x^2, w x y)`` of :func:`fit_regression`."""
    x, y = np.asarray(g_true, float), np.asarray(g_hat, float)
    w = weights_for(std, x.size, weights)
    return np.stack([w, w * x, w * y, w * x * x, w * x * y], axis=1)


def offset_terms(
    g_true: np.ndarray, g_hat: np.ndarray, std: np.ndarray | None, weights: str = "none"
) -> np.ndarray:
    """Per-row terms ``(w, w (g_hat - g_true))`` of :func:`fit_offset`."""
    d = np.asarray(g_hat, float) - np.asarray(g_true, float)
    w = weights_for(std, d.size, weights)
    return np.stack([w, w * d], axis=1)


def paired_terms(
    g_plus: np.ndarray,
    hat_plus: np.ndarray,
    hat_minus: np.ndarray,
    std_plus: np.ndarray | None = None,
    std_minus: np.ndarray | None = None,
    weights: str = "none",
) -> np.ndarray:
    """Per-pair terms ``(w g D, w g^2, w, w A)`` of :func:`fit_paired`."""
    g = np.asarray(g_plus, float)
    dd = (np.asarray(hat_plus, float) - np.asarray(hat_minus, float)) / 2.0
    aa = (np.asarray(hat_plus, float) + np.asarray(hat_minus, float)) / 2.0
    both = None
    if std_plus is not None and std_minus is not None:
        both = np.sqrt((np.asarray(std_plus) ** 2 + np.asarray(std_minus) ** 2) / 4.0)
    w = weights_for(both, g.size, weights)
    return np.stack([w * g * dd, w * g * g, w, w * aa], axis=1)


@dataclasses.dataclass(frozen=True, eq=False)
class GroupErrors:
    """:func:`group_errors`: each method's standard errors ``(q,)`` and covariance
    ``(q, q)`` (None when it could not be formed), the finite bootstrap draws ``(B, q)``
    and their number ``B``."""

    jackknife: np.ndarray | None
    jackknife_cov: np.ndarray | None
    bootstrap: np.ndarray | None
    bootstrap_cov: np.ndarray | None
    boot: np.ndarray
    n_boot: int

    def std(self, method: str) -> np.ndarray | None:
        """The standard errors of ``method`` (``jackknife``, ``bootstrap``; None: ``none``
        or not formed)."""
        return {"jackknife": self.jackknife, "bootstrap": self.bootstrap}.get(method)

    def cov(self, method: str) -> np.ndarray | None:
        """The covariance of ``method`` (None: ``none`` or not formed)."""
        return {"jackknife": self.jackknife_cov, "bootstrap": self.bootstrap_cov}.get(method)


def group_errors(
    sums: np.ndarray,
    fn: Callable[[np.ndarray], np.ndarray],
    *,
    n_boot: int = 1000,
    seed: int = 0,
) -> GroupErrors:
    """Jackknife (delete-one-group) and group-bootstrap errors of ``fn(S)``.

    ``sums`` is ``(G, p)``; ``fn`` maps ``(..., p)`` totals to ``(..., q)`` estimates.
    Both need ``G >= 2`` (one seed resampled is always itself) and finite replicates;
    otherwise that method's errors are None.
    """
    g = sums.shape[0]
    total = sums.sum(axis=0)
    q = np.atleast_1d(fn(total)).shape[-1]
    none = GroupErrors(None, None, None, None, np.zeros((0, q)), 0)
    if g < 2:
        return none
    jk_std = jk_cov = None
    with np.errstate(divide="ignore", invalid="ignore"):
        jk = fn(total[None, :] - sums)
    if np.all(np.isfinite(jk)):
        dev = jk - jk.mean(axis=0)
        jk_cov = (g - 1) / g * dev.T @ dev
        jk_std = np.sqrt(np.diag(jk_cov))
    rng = np.random.default_rng(seed)
    # the resamples' counts a chunk at a time (~64 MB): the same draws in the same order as
    # one (n_boot, G) array, which at field scale (10**5 seeds) would be gigabytes
    step = max(1, BOOT_CHUNK_CELLS // g)
    pvals = np.full(g, 1.0 / g)
    totals = np.concatenate([rng.multinomial(g, pvals, size=min(step, n_boot - i)) @ sums
                             for i in range(0, n_boot, step)]) if n_boot else np.zeros((0, sums.shape[1]))  # fmt: skip
    with np.errstate(divide="ignore", invalid="ignore"):
        boot = fn(totals)
    ok = np.all(np.isfinite(boot), axis=1)
    bs_std = bs_cov = None
    if ok.sum() > 1:
        bs_cov = np.atleast_2d(np.cov(boot[ok].T, ddof=1))
        bs_std = np.sqrt(np.diag(bs_cov))
    return GroupErrors(jk_std, jk_cov, bs_std, bs_cov, boot[ok], int(ok.sum()))


def _chosen(errs: GroupErrors, prefer: str) -> str:
    """``prefer`` when it exists, else the other method, else ``none``."""
    for method in (prefer, "bootstrap", "jackknife"):
        if errs.std(method) is not None:
            return method
    return "none"


def error_report(jackknife: Any, bootstrap: Any, n_boot: int, g: int, weights: str) -> ErrorReport:
    """``fits.<g>.errors``: each method's standard errors (a list, or one number for the
    constant-truth fit's c; None when not formed), the bootstrap draws, the seeds and the
    weights."""
    return ErrorReport.of(jackknife=jackknife, bootstrap=bootstrap, n_boot=n_boot, n_groups=g,
                          weights=weights, weighted=weights != "none")  # fmt: skip


def _report(errs: GroupErrors, g: int, weights: str) -> ErrorReport:
    jk, bs = (
        None if e is None else [float(x) for x in e] for e in (errs.jackknife, errs.bootstrap)
    )
    return error_report(jk, bs, errs.n_boot, g, weights)


def _finish(est: np.ndarray, errs: GroupErrors, prefer: str, n: int, g: int, weights: str) -> Fit:
    """A :class:`Fit` from ``est = (1 + m, c)`` and the errors of the chosen method."""
    chosen = _chosen(errs, prefer)
    shift = np.array([1.0, 0.0])
    cov = errs.cov(chosen)
    m_err = None if cov is None else float(np.sqrt(cov[0, 0]))
    c_err = None if cov is None else float(np.sqrt(cov[1, 1]))
    return Fit(float(est[0]) - 1.0, float(est[1]), m_err, c_err, chosen, _report(errs, g, weights),
               n, g, "", errs.boot - shift, cov, weights)  # fmt: skip


def fit_regression(
    g_true: np.ndarray,
    g_hat: np.ndarray,
    std: np.ndarray | None = None,
    groups: np.ndarray | None = None,
    *,
    weights: str = "none",
    errors: str = "jackknife",
    n_boot: int = 1000,
    seed: int = 0,
) -> Fit:
    """Least squares of ``g_hat`` on ``g_true`` (``weights``: see :func:`weights_for`).

    ``groups`` are the seeds (default: every row its own group); ``errors``
    picks the reported error (``jackknife`` or ``bootstrap``; both are kept in
    ``Fit.errors``).
    """
    x = np.asarray(g_true, float)
    groups = np.arange(x.size) if groups is None else np.asarray(groups)
    sums = _group_sums(regression_terms(x, g_hat, std, weights), groups)
    return regression_from_sums(sums, x.size, weights=weights, errors=errors, n_boot=n_boot,
                                seed=seed)  # fmt: skip


def regression_from_sums(
    sums: np.ndarray,
    n: int,
    *,
    weights: str = "none",
    errors: str = "jackknife",
    n_boot: int = 1000,
    seed: int = 0,
) -> Fit:
    """:func:`fit_regression` from its per-seed sums (``(G, 5)``, label order) over ``n``
    rows."""

    def fn(s: np.ndarray) -> np.ndarray:
        b = (s[..., 0] * s[..., 4] - s[..., 1] * s[..., 2]) / (
            s[..., 0] * s[..., 3] - s[..., 1] ** 2
        )
        a = (s[..., 2] - b * s[..., 1]) / s[..., 0]
        return np.stack([b, a], axis=-1)

    est = fn(sums.sum(axis=0))
    errs = group_errors(sums, fn, n_boot=n_boot, seed=seed)
    return _finish(est, errs, errors, n, sums.shape[0], weights)


def fit_offset(
    g_true: np.ndarray,
    g_hat: np.ndarray,
    std: np.ndarray | None = None,
    groups: np.ndarray | None = None,
    *,
    weights: str = "none",
    errors: str = "jackknife",
    n_boot: int = 1000,
    seed: int = 0,
    reason: str = "",
) -> Fit:
    """Constant truth: ``m`` undefined (``None`` with ``reason``), ``c`` the mean offset."""
    n = np.asarray(g_true).size
    groups = np.arange(n) if groups is None else np.asarray(groups)
    sums = _group_sums(offset_terms(g_true, g_hat, std, weights), groups)
    return offset_from_sums(sums, n, weights=weights, errors=errors, n_boot=n_boot, seed=seed,
                            reason=reason)  # fmt: skip


def offset_from_sums(
    sums: np.ndarray,
    n: int,
    *,
    weights: str = "none",
    errors: str = "jackknife",
    n_boot: int = 1000,
    seed: int = 0,
    reason: str = "",
) -> Fit:
    """:func:`fit_offset` from its per-seed sums (``(G, 2)``, label order) over ``n`` rows."""

    def fn(s: np.ndarray) -> np.ndarray:
        return (s[..., 1] / s[..., 0])[..., None]

    errs = group_errors(sums, fn, n_boot=n_boot, seed=seed)
    chosen = _chosen(errs, errors)
    c = float(fn(sums.sum(axis=0))[0])
    std = errs.std(chosen)
    c_err = None if std is None else float(std[0])
    cov = None if c_err is None else np.diag([0.0, c_err**2])
    jk, bs = (None if e is None else float(e[0]) for e in (errs.jackknife, errs.bootstrap))
    rep = error_report(jk, bs, errs.n_boot, sums.shape[0], weights)
    boot = np.stack([np.zeros(len(errs.boot)), errs.boot[:, 0]], axis=1)
    return Fit(None, c, None, c_err, chosen, rep, n, sums.shape[0], reason, boot, cov,
               weights)  # fmt: skip


def has_pairs(pair_id: np.ndarray, pair_sign: np.ndarray) -> bool:
    """True when at least one pair id has both a +1 and a -1 row."""
    return len(pair_table(pair_id, pair_sign)[0]) > 0


def pair_table(pair_id: np.ndarray, pair_sign: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row indices ``(plus, minus)`` of the complete pairs (ids with exactly one row of each
    sign: a non-empty text id, ``pair_sign`` +1 or -1), in the order of their ids (vectorised:
    no Python object per row, which a field-scale table would hold in memory)."""
    import pandas as pd

    ids = pd.Series(np.asarray(pair_id, dtype=object))
    sign = np.asarray(pair_sign, dtype=float)
    text = ids.map(lambda v: isinstance(v, str) and v != "").to_numpy(bool)
    rows = np.flatnonzero(text & np.isin(sign, (1.0, -1.0)))
    codes, names = pd.factorize(ids.to_numpy()[rows])
    plus = sign[rows] == 1.0
    n_plus = np.bincount(codes[plus], minlength=len(names))
    n_minus = np.bincount(codes[~plus], minlength=len(names))
    at_plus = np.zeros(len(names), dtype=int)
    at_minus = np.zeros(len(names), dtype=int)
    at_plus[codes[plus]] = rows[plus]  # exactly one row where the id is kept
    at_minus[codes[~plus]] = rows[~plus]
    good = np.flatnonzero((n_plus == 1) & (n_minus == 1))
    good = good[np.argsort(np.asarray(names, dtype=object)[good], kind="stable")]
    return at_plus[good].astype(int), at_minus[good].astype(int)


def fit_paired(
    g_plus: np.ndarray,
    hat_plus: np.ndarray,
    hat_minus: np.ndarray,
    std_plus: np.ndarray | None = None,
    std_minus: np.ndarray | None = None,
    groups: np.ndarray | None = None,
    *,
    weights: str = "none",
    n_boot: int = 1000,
    seed: int = 0,
) -> Fit:
    """Paired estimator over complete +g/-g pairs; bootstrap errors over seeds.

    Pairs that share a seed (same galaxy and noise at several |g|) are
    resampled together (``groups``); with one pair per seed this is the plain
    bootstrap over pairs. The jackknife is kept in ``Fit.errors`` too. With
    ``inverse-variance`` weights a pair weighs ``4 / (std_+^2 + std_-^2)``.
    """
    n = np.asarray(g_plus).size
    groups = np.arange(n) if groups is None else np.asarray(groups)
    terms = paired_terms(g_plus, hat_plus, hat_minus, std_plus, std_minus, weights)
    sums = _group_sums(terms, groups)
    return paired_from_sums(sums, n, weights=weights, n_boot=n_boot, seed=seed)


def paired_from_sums(
    sums: np.ndarray, n: int, *, weights: str = "none", n_boot: int = 1000, seed: int = 0
) -> Fit:
    """:func:`fit_paired` from its per-seed sums (``(G, 4)``, label order) over ``n`` pairs."""

    def fn(s: np.ndarray) -> np.ndarray:
        return np.stack([s[..., 0] / s[..., 1], s[..., 3] / s[..., 2]], axis=-1)

    est = fn(sums.sum(axis=0))
    errs = group_errors(sums, fn, n_boot=n_boot, seed=seed)
    return _finish(est, errs, "bootstrap", n, sums.shape[0], weights)


def complete_rings(df: Any) -> tuple[np.ndarray, int]:
    """Rows of complete rings of a ring design, and the number of incomplete rings.

    A ring is a seed's copies at one grid point: ``(seed, pair_id without its _r<k>
    suffix)`` when paired (``pair_sign`` +-1), else ``(seed, g1_true, g2_true)``; it is
    complete when it holds every rotation ``0 .. n_rotations - 1`` (``n_rotations`` of
    the ring's last row; and both signs of each when paired). Without a ``rotation``
    column every row is kept. Vectorised (no Python object per row).
    """
    import pandas as pd

    n = len(df)
    if "rotation" not in df.columns or "n_rotations" not in df.columns:
        return np.ones(n, dtype=bool), 0
    rot = df["rotation"].to_numpy(float)
    nrot = df["n_rotations"].to_numpy(float)
    if not np.any(np.isfinite(nrot) & (nrot > 1)):
        return np.ones(n, dtype=bool), 0
    sign = df["pair_sign"].to_numpy(float) if "pair_sign" in df.columns else np.zeros(n)
    sign = np.where(np.isfinite(sign), sign, 0.0)
    paired = np.isin(sign, (1.0, -1.0))
    truth = df[["g1_true", "g2_true"]].to_numpy(float).round(12)
    by_id = paired & ("pair_id" in df.columns)  # else the ring is keyed by its truth
    ring = np.full(n, None, dtype=object)
    if by_id.any():
        pid = df["pair_id"].fillna("").astype(str).str.replace(r"_r\d+$", "", regex=True)
        ring = np.where(by_id, pid.to_numpy(object), None)
    keys = pd.DataFrame({"seed": df["seed"].astype(str).to_numpy(), "by_id": by_id,
                         "ring": ring, "t1": np.where(by_id, 0.0, truth[:, 0]),
                         "t2": np.where(by_id, 0.0, truth[:, 1])})  # fmt: skip
    code = keys.groupby(list(keys.columns), sort=False, dropna=False).ngroup().to_numpy()
    n_keys = int(code.max()) + 1 if n else 0
    last = np.zeros(n_keys, dtype=int)
    last[code] = np.arange(n)  # the ring's last row sets what it needs, as before
    nr_last, pr_last = nrot[last], paired[last]
    n_rot = np.where(np.isfinite(nr_last) & (nr_last > 1), np.trunc(np.nan_to_num(nr_last)), 1)
    need = n_rot * np.where(pr_last, 2, 1)
    r_need = n_rot[code]
    in_need = (np.isfinite(rot) & (rot == np.trunc(np.nan_to_num(rot))) & (rot >= 0)
               & (rot < r_need) & np.where(pr_last[code], paired, sign == 0.0))  # fmt: skip
    have = pd.DataFrame({"k": code[in_need], "r": rot[in_need], "s": sign[in_need]})
    have = have.drop_duplicates()
    got = np.bincount(have["k"].to_numpy(), minlength=n_keys)
    done = got >= need
    return done[code], int(n_keys - done.sum())


def n_independent(groups: np.ndarray | None, n: int) -> int:
    """Independent trials among ``n`` rows: the distinct seeds (``n`` when ``groups`` is None)."""
    return n if groups is None else len(np.unique(np.asarray(groups)))


def _too_few(n_seeds: int, min_seeds: int) -> str:
    return f"too few to test: {n_seeds} independent seed(s) < min_seeds {min_seeds}"


def coverage(
    g_true: np.ndarray,
    q_lo: np.ndarray,
    q_hi: np.ndarray,
    level: float,
    z: float = 3.0,
    groups: np.ndarray | None = None,
    min_seeds: int = 20,
) -> Coverage:
    """Observed coverage of central ``level`` intervals ``[q_lo, q_hi]``, tested two-sided.

    Realizations sharing a seed (``groups``: one noise field reused at every
    grid point) are not independent trials, so ``n`` is the number of distinct
    seeds (the number of rows when each seed is used once): conservative when a
    seed's members are not all inside or all outside. ``status`` is ``pass``
    when the observed fraction lies in ``[p - z se, p + z se]`` (clipped to
    [0, 1]), ``se = sqrt(p (1 - p) / n)``, ``fail`` outside it (too low or too
    high), and ``inconclusive`` with fewer than ``min_seeds`` seeds. Holds only
    ``skipped`` (the reason) when the intervals are missing or have no width
    (e.g. a point estimate): not a test at all.
    """
    t, lo, hi = (np.asarray(a, float) for a in (g_true, q_lo, q_hi))
    if t.size == 0:
        return Coverage.of(skipped="no rows")
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
        return Coverage.of(skipped="posterior quantiles missing")
    if not np.all(hi > lo):
        return Coverage.of(skipped="zero-width posterior intervals (point estimates)")
    inside = (lo <= t) & (t <= hi)
    return coverage_counts(t.size, int(inside.sum()), n_independent(groups, t.size), level, z,
                           min_seeds)  # fmt: skip


def coverage_counts(
    n: int, n_inside: int, n_eff: int, level: float, z: float = 3.0, min_seeds: int = 20
) -> Coverage:
    """:func:`coverage` from its counts: ``n`` rows with finite, non-degenerate intervals,
    ``n_inside`` of them holding the truth, ``n_eff`` independent seeds."""
    if n == 0:
        return Coverage.of(skipped="no rows")
    f = n_inside / n
    se = math.sqrt(level * (1.0 - level) / n_eff)
    band = [max(0.0, level - z * se), min(1.0, level + z * se)]
    if n_eff < min_seeds:
        status, reason = "inconclusive", _too_few(n_eff, min_seeds)
    elif f < band[0]:
        status, reason = "fail", "coverage too low (intervals too narrow or shifted)"
    elif f > band[1]:
        status, reason = "fail", "coverage too high (intervals too wide)"
    else:
        status, reason = "pass", ""
    return Coverage.of(observed=f, expected=level, band=band, se=se, z=z, n=int(n),
                       n_eff=int(n_eff), min_seeds=int(min_seeds), n_inside=int(n_inside),
                       status=status, passed=status == "pass", reason=reason)  # fmt: skip


def sbc(
    ranks: np.ndarray,
    n_bins: int | None = None,
    groups: np.ndarray | None = None,
    min_seeds: int = 20,
    n_seeds: int | None = None,
) -> SbcTest:
    """Uniformity of SBC ranks in [0, 1]: chi-square on equal bins (>= 5 expected each) and KS.

    The test needs ``min_seeds`` independent seeds (``groups``; default: one per
    rank) and at least 10 ranks; with fewer, ``status`` is ``inconclusive``
    ("too few to test") and the statistics are computed only from 10 ranks on.
    ``status`` (``pass``/``fail`` against a p-value floor) is set by
    :func:`shearbatch.analysis.verdict.sbc_status`.
    ``n_seeds``: the independent seeds among the finite ranks, when ``groups`` is not given
    (ranks merged from parts of a table).
    """
    r = np.asarray(ranks, float)
    ok = np.isfinite(r)
    r = r[ok]
    if n_seeds is None:  # else given: the independent seeds among the finite ranks
        n_seeds = n_independent(None if groups is None else np.asarray(groups)[ok], r.size)
    out = SbcTest.of(n=int(r.size), n_eff=int(n_seeds), min_seeds=int(min_seeds))
    if n_seeds < min_seeds or r.size < 10:
        why = _too_few(n_seeds, min_seeds) if n_seeds < min_seeds else (
            f"too few to test: {r.size} ranks < 10")  # fmt: skip
        out = out.set(status="inconclusive", reason=why)
    if r.size < 10:
        return out
    bins = n_bins or int(np.clip(r.size // 5, 2, 20))
    counts, _ = np.histogram(np.clip(r, 0.0, 1.0), bins=bins, range=(0.0, 1.0))
    chi2 = st.chisquare(counts)
    ks = st.kstest(r, "uniform")
    return out.set(n_bins=bins, counts=counts.tolist(), chi2=float(chi2.statistic),
                   p_value=float(chi2.pvalue), ks_statistic=float(ks.statistic),
                   ks_p_value=float(ks.pvalue))  # fmt: skip


def error_label(fit: Fit) -> str:
    """Which error produced a fit's ``±``: ``jackknife over 20 seeds``, ``bootstrap over ...``."""
    if fit.error_method == "none":
        return f"no error: {fit.n_groups} independent seed(s)"
    label = f"{fit.error_method} over {fit.n_groups} seeds"
    if fit.error_method == "bootstrap":
        label += f", {fit.errors.n_boot or 0} resamples"
    return label


def first_given(a: Any, b: Any) -> Any:
    """``a`` unless it is None, else ``b``: the first part's value, when parts merge."""
    return a if a is not None else b


def merged_range(a: tuple[float, float, float] | None,
                 b: tuple[float, float, float] | None) -> tuple[float, float, float] | None:  # fmt: skip
    """``(min, max, first)`` of two parts' truth ranges (None: a part with no row)."""
    if a is None or b is None:
        return first_given(a, b)
    return min(a[0], b[0]), max(a[1], b[1]), a[2]
