r"""The pooled marginal likelihood of :mod:`shearbatch.core.population` in NumPy, without JAX.

The same estimator, the same damped Newton and the same results (to rounding: the
two agree to ~1e-12 in ``g``, tests/core/test_population_np.py), for the places that must not
start an accelerator or pay JAX's dispatch and compile: ``bias-extract``'s reader
processes (one fit per interim-model realization) and ``bias-stats``' pooled fit per grid
point (tens of thousands of galaxies, evaluated in chunks of galaxies, so that memory
does not grow with the campaign beyond its float32 inputs).

Where :mod:`shearbatch.core.population` differentiates ``log L`` automatically, this
module writes the derivatives out. With complex ``g`` and observed ``eps``,
``W = 1 - g* eps`` and ``e = (eps - g) / W``:

.. math:: \partial_g e = -1/W, \quad \partial_{g^*} e = e\,\epsilon / W, \quad
          \partial_g\partial_{g^*} e = -\epsilon / W^2, \quad
          \partial_{g^*}^2 e = 2 e \epsilon^2 / W^2, \quad \partial_g^2 e = 0,

the real derivatives being :math:`\partial_{g_1} = \partial_g + \partial_{g^*}`,
:math:`\partial_{g_2} = i(\partial_g - \partial_{g^*})`; ``|W|^2`` has gradient
``-2 (Re(W eps*), Im(eps W*))`` and Hessian ``2 |eps|^2 I``; the population prior is a
product of one-dimensional densities (:class:`ShapePrior`: normal, uniform, flat, and a
truncated normal or log-normal by the density :func:`core.population.shape_log_prior`
uses). A galaxy's ``log L_i = log (1/K) sum_k w_k`` then has gradient ``E_p[d lw]`` and
Hessian ``E_p[d2 lw] + Cov_p[d lw]`` under its normalised weights ``p``.

The log of a mean of K weights is biased low by O(1/K), and the bias depends on ``g``:
every evaluation corrects it (``correct``, :data:`CORRECTIONS`; default
:data:`DEFAULT_CORRECTION`): the delta method over the antithetic pairs of draws
(:func:`correction`), extrapolated over the two halves of the draws (``"halves"``), with
the exact derivatives of both.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

__all__ = [
    "COLLAPSE_FRAC",
    "MAX_DECREMENT",
    "STATUSES",
    "Evaluation",
    "PopulationFit",
    "PriorSpec",
    "ShapePrior",
    "correction",
    "evaluate",
    "fit",
    "fit_status",
    "khat_threshold",
    "pair_sums",
    "pareto_khat",
    "pareto_khat_at",
    "relative_log_weights",
]

logger = logging.getLogger(__name__)

#: a galaxy's weights have collapsed when their ESS is below this fraction of its draws
COLLAPSE_FRAC = 0.1

#: how a pooled fit ended: the step fell below ``tol`` at a maximum (``H`` negative
#: definite, the remaining Newton step below :data:`MAX_DECREMENT` statistical errors);
#: the line search found no point at least as likely (or shrank the step below ``tol``
#: short of the maximum: a wall of zero likelihood, derivatives that disagree with the
#: value); or the step budget ran out
STATUSES = ("converged", "line_search_failed", "max_steps")

#: a fit whose step fell below ``tol`` is converged only if the Newton step left at its
#: end is below this many statistical errors (a true maximum leaves ~1e-8 or less:
#: Newton converges quadratically)
MAX_DECREMENT = 1e-3

#: draws per block of the evaluation (whole galaxies, at least one): its float64
#: temporaries stay in the processor's cache, and memory does not grow with the galaxies
BLOCK_DRAWS = 8_192


class PriorSpec(dict):
    """A prior read back from posterior.nc attrs or the population sidecar (``{"kind",
    "args"}``) with the attributes :func:`shearbatch.core.priors.to_distribution` reads."""

    @property
    def kind(self) -> str:
        return self["kind"]

    @property
    def args(self) -> tuple[float, ...]:
        return tuple(float(a) for a in self["args"])


class PopulationFit(NamedTuple):
    """The maximum of the pooled marginal likelihood.

    g: (2,) estimate; cov: (2, 2) inverse curvature ``(-H)^-1`` (NaN when ``H`` is not
    negative definite); log_l: ``log L(g)``; n_steps; converged: ``status ==
    "converged"``; ess: (N,) per-galaxy ESS of the weights at ``g``; n_draws: (N,)
    valid draws per galaxy; collapsed: (N,) ``ess < COLLAPSE_FRAC n_draws``;
    n_galaxies: galaxies with finite ``L_i`` that entered the fit. The NumPy fit
    (:func:`fit`) also returns each galaxy's gradient (N, 2) and Hessian (N, 2, 2) of
    ``log L_i`` at ``g`` (``galaxy_grad``, ``galaxy_hess``; NaN for a galaxy without
    support), what the delete-one-group jackknife needs; None from the JAX fit.

    The fit's own numerical error (:func:`fit_status`): ``status`` (:data:`STATUSES`);
    ``g_num_err`` (2,): ``|(-H)^-1 grad|`` per component at ``g``, the distance to the
    maximum of the quadratic model there (inf where ``H`` is not negative definite);
    ``decrement``: ``sqrt(grad^T (-H)^-1 grad)``, that distance in units of the
    statistical error (the gradient against the curvature); ``last_step``: the length of
    the last step taken (0 when none was).
    """

    g: np.ndarray
    cov: np.ndarray
    log_l: float
    n_steps: int
    converged: bool
    ess: np.ndarray
    n_draws: np.ndarray
    collapsed: np.ndarray
    n_galaxies: int
    galaxy_grad: np.ndarray | None = None
    galaxy_hess: np.ndarray | None = None
    status: str = "converged"
    g_num_err: np.ndarray | None = None
    decrement: float = math.nan
    last_step: float = math.nan

    @property
    def err(self) -> np.ndarray:
        """(2,) standard errors ``sqrt(diag cov)``."""
        return np.sqrt(np.diag(self.cov))


# --------------------------------------------------------------------------- the prior


class _Component(NamedTuple):
    kind: str  # "normal", "uniform" or "flat"
    a: float
    b: float


def relative_log_weights(log_base: Any, axis: Any) -> np.ndarray:
    """``log_base`` (float64) less each galaxy's largest finite value over ``axis`` (its
    draws), as float32: a per-galaxy constant does not move the population fit, and the
    weights keep their float32 precision whatever their scale (a galaxy without a finite
    weight is left as it is)."""
    lb = np.asarray(log_base, np.float64)
    top = np.max(np.where(np.isfinite(lb), lb, -np.inf), axis=axis, keepdims=True)
    return (lb - np.where(np.isfinite(top), top, 0.0)).astype(np.float32)


def _component(p: Any) -> _Component:
    """One component of the population prior as :func:`core.population.shape_log_prior`
    evaluates it: a truncated normal by its untruncated normal, a log-normal by its base
    normal (``getattr(d, "base_dist", d)`` of its NumPyro distribution)."""
    a = tuple(float(x) for x in p.args)
    if p.kind in ("normal", "truncnormal"):
        return _Component("normal", a[0], a[1])
    if p.kind == "lognormal":
        return _Component("normal", math.log(a[0]), a[1])
    if p.kind == "uniform":
        return _Component("uniform", a[0], a[1])
    if p.kind == "flat":
        return _Component("flat", 0.0, 0.0)
    raise TypeError(f"not a distribution: {p!r}")


class ShapePrior:
    """``log p_e(e1, e2)`` of the population's intrinsic-shape priors (two
    :class:`shearbatch.spec.Prior`-like objects with ``kind`` and ``args``), with the
    first and second derivatives of each component: the density
    :func:`shearbatch.core.population.shape_log_prior` evaluates (``-inf`` outside a
    component's support and outside ``|e| < 1``)."""

    def __init__(self, e1_prior: Any, e2_prior: Any):
        self.components = (_component(e1_prior), _component(e2_prior))

    @classmethod
    def from_json(cls, priors: Sequence[Any]) -> ShapePrior:
        """From ``[{"kind", "args"}, {"kind", "args"}]`` (the sidecar's ``population``)."""
        return cls(*(PriorSpec(p) for p in priors))

    @staticmethod
    def _one(c: _Component, x: np.ndarray, order: int):
        if c.kind == "normal":  # NumPyro's Normal.log_prob
            z = x - c.a
            z /= c.b
            lp = z * z
            lp *= -0.5
            lp -= math.log(math.sqrt(2 * math.pi) * c.b)
            if order == 0:
                return lp, None, None
            z /= -c.b
            return lp, z, -1.0 / (c.b * c.b)
        if c.kind == "uniform":
            inside = (x >= c.a) & (x <= c.b)
            lp = np.where(inside, -math.log(c.b - c.a), -np.inf)
        else:  # flat: real line
            lp = np.where(np.isfinite(x), 0.0, -np.inf)
        if order == 0:
            return lp, None, None
        return lp, np.zeros_like(x), 0.0

    def __call__(self, e1: np.ndarray, e2: np.ndarray, order: int = 0):
        """``(log p_e, (d/de1, d/de2), (d2/de1^2, d2/de2^2))`` (the derivatives None for
        ``order = 0``; the second ones are constants, floats, for every kind here)."""
        l1, a1, aa1 = self._one(self.components[0], e1, order)
        l2, a2, aa2 = self._one(self.components[1], e2, order)
        l1 += l2
        r = e1 * e1
        r += e2 * e2
        outside = r >= 1.0
        if outside.any():
            np.copyto(l1, -np.inf, where=outside)
        return l1, (a1, a2), (aa1, aa2)


# --------------------------------------------------------------------------- evaluation


def correction(p: np.ndarray) -> np.ndarray:
    r"""The delta-method correction of the finite-draw bias of ``log (1/K) sum_k w_k``
    per galaxy, from its normalised weights ``p`` (n, K): ``(sum_j P_j^2 - 1/J) / 2`` over
    the ``J`` antithetic pairs of draws, ``P_j`` a pair's weight (:func:`pair_sums`); 0 for
    a galaxy without support (a row of NaN).

    The mean of K weights, :math:`\hat S`, is unbiased for :math:`S`, but its log is
    not: :math:`E[\log \hat S] = \log S - \mathrm{Var}(\hat S) / (2 S^2) + O(K^{-2})`
    (the log's second-order Taylor expansion about :math:`S`). The draws come in
    antithetic pairs (``+z``, ``-z``), so :math:`\hat S` is the mean of ``J`` independent
    pair means, and :math:`\mathrm{Var}(\hat S)/S^2` is estimated by
    :math:`\sum_j P_j^2 - 1/J`. (The same formula over single draws,
    :math:`\sum_k p_k^2 - 1/K = 1/\mathrm{ESS} - 1/K`, ignores the pairs' cancellation
    and over-corrects.) For
    independent draws (NUTS) pairing draw ``k`` with ``k + J`` is as valid, with half the
    degrees of freedom. The bias depends on ``g``, so uncorrected it moves the pooled
    maximum by O(1/K) (bench/bench_draws.py measures it); corrected, the residual is
    O(1/K^2) where the weights' variance is finite and well estimated from the draws, which
    a Pareto k-hat below :func:`khat_threshold` says (:func:`pareto_khat`). On real Level 2
    galaxies it removes ~80% of the bias and leaves an O(1/K) remainder (-2e-4 in m at 200
    draws: bench/bench_level2_rate.py): the default correction, ``"halves"``, extrapolates
    the delta-corrected estimate over the two halves of the draws (:func:`half_columns`),
    ``2 T - (T_a + T_b) / 2``, which removes any O(1/K) remainder and leaves O(1/K^2)."""
    pp = pair_sums(np.asarray(p, np.float64))
    s2 = np.einsum("ij,ij->i", pp, pp)
    return np.where(np.isfinite(s2), 0.5 * (s2 - 1.0 / pp.shape[-1]), 0.0)


def khat_threshold(n_draws: Any) -> np.ndarray:
    """The largest Pareto k-hat at which ``n_draws`` importance draws give a reliable
    estimate: ``min(1 - 1 / log10(S), 0.7)`` (Vehtari et al. 2024, JMLR 25(72), section
    3.2.4: 0.5 at 100 draws, 0.57 at 200, 0.6 at 300, 0.67 at 1,000)."""
    s = np.maximum(np.asarray(n_draws, np.float64), 11.0)
    return np.minimum(1.0 - 1.0 / np.log10(s), 0.7)


def pareto_khat(log_w: np.ndarray) -> np.ndarray:
    """Pareto k-hat (N,) of the importance weights in each row of ``log_w`` (N, K), from
    ArviZ's Pareto-smoothed importance sampling (``arviz_stats``'s array ``psislw`` with
    ArviZ 1.x, ``arviz.psislw`` with 0.x; Vehtari et al. 2024): the shape of the
    generalised Pareto fitted to the largest weights. Above :func:`khat_threshold` the
    weights' variance is infinite or their mean unreliable. Draws of weight 0 (``-inf``)
    stay far below the tail; a row without a finite weight gets NaN."""
    lw = np.asarray(log_w, np.float64)
    top = np.max(lw, axis=-1, keepdims=True)
    ok = np.isfinite(top[..., 0])
    rel = np.maximum(lw - np.where(np.isfinite(top), top, 0.0), -745.0)
    out = np.full(lw.shape[:-1], np.nan)
    if not ok.any():
        return out
    try:  # ArviZ 1.x: the array interface of arviz-stats
        from arviz_stats.base import array_stats

        _, khat = array_stats.psislw(rel[ok], r_eff=1.0, axis=-1)
    except ImportError:  # ArviZ 0.x
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ArviZ 0.x's notice of its refactor on import
            import arviz

            _, khat = arviz.psislw(rel[ok])
    out[ok] = np.asarray(khat, np.float64)
    return out


def pareto_khat_at(
    g: Any,
    eps: np.ndarray,
    log_base: np.ndarray,
    prior: ShapePrior,
    index: np.ndarray | None = None,
) -> np.ndarray:
    """Per-galaxy Pareto k-hat (N,) of the population weights ``w_ik(g)`` at ``g``
    (:func:`pareto_khat`), a block of galaxies at a time (``index``: as :func:`evaluate`)."""
    g = np.asarray(g, np.float64)
    n = len(eps) if index is None else len(index)
    out = np.empty(n)
    per = max(1, BLOCK_DRAWS // max(1, int(np.shape(eps)[1])))
    for i in range(0, n, per):
        sl = slice(i, min(i + per, n))
        rows = sl if index is None else index[sl]
        out[sl] = pareto_khat(_block(g, eps[rows], log_base[rows], prior, -1))
    return out


class Evaluation(NamedTuple):
    """Per-galaxy ``log L_i(g)`` (N,) (``-inf`` without support), valid draws (N,), the
    ESS of the weights (N,), and with ``order = 2`` the gradient (N, 2) and Hessian
    (N, 2, 2) of ``log L_i`` (NaN without support)."""

    terms: np.ndarray
    n_draws: np.ndarray
    ess: np.ndarray
    grad: np.ndarray | None
    hess: np.ndarray | None


def _cmul(a1: np.ndarray, a2: np.ndarray, b1: np.ndarray, b2: np.ndarray):
    """``(a1 + i a2)(b1 + i b2)`` as (real, imaginary) arrays, with one temporary each."""
    re = a1 * b1
    re -= a2 * b2
    im = a1 * b2
    im += a2 * b1
    return re, im


def _block(
    g: np.ndarray,
    eps: np.ndarray,
    base: np.ndarray,
    prior: ShapePrior,
    order: int,
    correct: bool = True,
):
    """One block of galaxies: eps (n, K, 2), base (n, K) (any float type; NaN draws count
    as missing) -> per-galaxy (terms, k, ess, grad, hess); ``order = -1``: the log weights
    (n, K) alone (:func:`pareto_khat_at`). :func:`_draws` then :func:`_reduce`, written with
    in-place operations (the time is the number of passes over (n, K) arrays)."""
    lw, fin, per_draw = _draws(g, eps, base, prior, order)
    if order < 0:
        return lw
    return _reduce(g, lw, fin, per_draw, order, correct)


def _draws(g: np.ndarray, eps: np.ndarray, base: np.ndarray, prior: ShapePrior, order: int):
    """The per-draw half of :func:`_block`: ``(lw, fin, per_draw)``, each draw's log weight
    at ``g`` (n, K), whether its base weight is finite (n, K), and with ``order >= 1`` the
    draw's gradient ``(G1, G2)`` of ``log w`` and ``M = A + a a^T`` (``M11, M12, M22``)
    (None otherwise). Every value is the draw's own: a subset of the columns reduces
    (:func:`_reduce`) exactly as :func:`_block` of that subset would."""
    p1 = np.array(eps[..., 0], np.float64)
    p2 = np.array(eps[..., 1], np.float64)
    lb = np.array(base, np.float64)
    good = np.isfinite(p1)
    good &= np.isfinite(p2)
    good &= ~np.isnan(lb)
    if not good.all():  # a missing draw: weight 0 (core.population: base -inf, eps 0)
        bad = ~good
        np.copyto(lb, -np.inf, where=bad)
        np.copyto(p1, 0.0, where=bad)
        np.copyto(p2, 0.0, where=bad)
    fin = np.isfinite(lb)
    g1, g2 = float(g[0]), float(g[1])
    # W = 1 - g* eps = u - i d2;  e = (eps - g) / W  (core.population.decompose)
    u = p1 * g1
    u += p2 * g2
    np.subtract(1.0, u, out=u)
    d2 = p2 * g1
    d2 -= p1 * g2
    den = u * u
    den += d2 * d2
    n1, n2 = p1 - g1, p2 - g2
    e1 = n1 * u
    e1 -= n2 * d2
    e1 /= den
    e2 = n2 * u
    e2 += n1 * d2
    e2 /= den
    del n1, n2
    lp, (a1, a2), (aa1, aa2) = prior(e1, e2, max(order, 0))
    s = g1 * g1 + g2 * g2
    lw = np.log(den)
    lw *= -2.0
    lw += 2.0 * math.log1p(-s)
    lw += lp
    lw += lb  # -inf where the draw is missing or outside the interim support
    del lp, lb
    if order < 1:
        return lw, fin, None
    # 1/W = q1 + i q2; e eps = r1 + i r2; d e/d g* = e eps / W = c1 + i c2
    q1 = u / den
    q2 = d2 / den
    r1, r2 = _cmul(e1, e2, p1, p2)
    del e1, e2
    c1, c2 = _cmul(r1, r2, q1, q2)
    x11, x21 = c1 - q1, c2 - q2  # d e1 / d g1, d e2 / d g1
    x12 = c2
    x12 += q2  # d e1 / d g2
    x22 = c1
    x22 += q1
    x22 *= -1.0  # d e2 / d g2
    del c1, c2
    # 1/W^2 = t1 + i t2; eps / W^2 = v1 + i v2 (= -d2e/dg dg*); d2e/dg*^2 = 2 e eps^2/W^2
    t1, t2 = _cmul(q1, q2, q1, q2)
    del q1, q2
    v1, v2 = _cmul(p1, p2, t1, t2)
    del t1, t2
    b1, b2 = _cmul(r1, r2, v1, v2)
    b1 *= 2.0
    b2 *= 2.0
    del r1, r2
    # log p_e(e(g)): gradient and Hessian (the components are independent)
    G1 = a1 * x11
    G1 += a2 * x21
    G2 = a1 * x12
    G2 += a2 * x22
    v1 *= 2.0
    v2 *= 2.0
    H11 = x11 * x11
    H11 *= aa1
    H11 += aa2 * (x21 * x21)
    H11 += a1 * (b1 - v1)
    H11 += a2 * (b2 - v2)
    H12 = x11 * x12
    H12 *= aa1
    H12 += aa2 * (x21 * x22)
    H12 += a1 * b2
    H12 -= a2 * b1
    H22 = x12 * x12
    H22 *= aa1
    H22 += aa2 * (x22 * x22)
    b1 += v1
    b2 += v2
    H22 -= a1 * b1
    H22 -= a2 * b2
    del x11, x12, x21, x22, b1, b2, v1, v2
    # -2 log |W|^2: h = grad |W|^2 / |W|^2, Hessian of |W|^2 = 2 |eps|^2 I
    h1 = u * p1
    h1 -= d2 * p2
    h1 *= -2.0
    h1 /= den
    h2 = u * p2
    h2 += d2 * p1
    h2 *= -2.0
    h2 /= den
    diag = p1 * p1
    diag += p2 * p2
    diag *= 4.0
    diag /= den
    G1 -= 2.0 * h1
    G2 -= 2.0 * h2
    H11 -= diag
    H22 -= diag
    hh = h1 * h1
    hh *= 2.0
    H11 += hh
    np.multiply(h1, h2, out=hh)
    hh *= 2.0
    H12 += hh
    np.multiply(h2, h2, out=hh)
    hh *= 2.0
    H22 += hh
    del h1, h2, hh, diag
    H11 += G1 * G1
    H12 += G1 * G2
    H22 += G2 * G2
    return lw, fin, (G1, G2, H11, H12, H22)


def _reduce(
    g: np.ndarray, lw: np.ndarray, fin: np.ndarray, per_draw: Any, order: int, correct: bool = True
):
    """The per-galaxy half of :func:`_block`: (terms, k, ess, grad, hess) from
    :func:`_draws`' per-draw values (``per_draw`` may be zeroed in place where a draw has
    weight 0 and a non-finite derivative)."""
    g1, g2 = float(g[0]), float(g[1])
    s = g1 * g1 + g2 * g2
    k = np.count_nonzero(fin, axis=-1)
    amax = lw.max(axis=-1)
    amax[~np.isfinite(amax)] = 0.0
    w = lw - amax[:, None]
    np.exp(w, out=w)
    s1 = w.sum(axis=-1)
    s2 = np.einsum("ij,ij->i", w, w)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.log(s1) + amax - np.log(np.maximum(k, 1))
        ess = np.where(s2 > 0, s1 * s1 / np.where(s2 > 0, s2, 1.0), 0.0)
    if order == 0:
        if correct:
            with np.errstate(divide="ignore", invalid="ignore"):
                terms = terms + correction(w / s1[:, None])
        return terms, k, ess, None, None
    G1, G2, H11, H12, H22 = per_draw
    with np.errstate(divide="ignore", invalid="ignore"):
        w /= s1[:, None]  # normalised weights; NaN for a galaxy without support
    per_draw = (G1, G2, H11, H12, H22)
    sums = [np.einsum("ij,ij->i", w, x) for x in per_draw]
    broken = np.isfinite(terms) & ~np.all(np.isfinite(sums), axis=0)
    if broken.any():  # a non-finite derivative at a draw of weight 0: leave it out
        zero = ~np.isfinite(lw)
        for x in per_draw:
            np.copyto(x, 0.0, where=zero)
        sums = [np.einsum("ij,ij->i", w, x) for x in per_draw]
    m1, m2, e11, e12, e22 = sums
    # 2 log(1 - |g|^2): the same for every draw
    j = 1.0 - s
    grad = np.stack([m1 - 4.0 * g1 / j, m2 - 4.0 * g2 / j], axis=-1)
    jh = np.array([[g1 * g1, g1 * g2], [g1 * g2, g2 * g2]]) * (-8.0 / (j * j))
    jh -= np.eye(2) * (4.0 / j)
    hess = np.empty((len(terms), 2, 2))
    hess[:, 0, 0] = e11 - m1 * m1
    hess[:, 0, 1] = hess[:, 1, 0] = e12 - m1 * m2
    hess[:, 1, 1] = e22 - m2 * m2
    if correct:
        terms, cg, ch = _corrected(terms, w, per_draw, (m1, m2), hess)
        grad += cg
        hess += ch
    hess += jh
    return terms, k, ess, grad, hess


def pair_sums(p: np.ndarray) -> np.ndarray:
    """Per antithetic pair, the sum of its members' values: ``p`` (n, K) -> (n, ceil(K/2));
    draw ``k < ceil(K/2)`` pairs with draw ``k + ceil(K/2)`` (the order in which the
    proposals draw them, ``map.normal_eps``: the first half, then its negatives; the last
    draw of an odd K is alone)."""
    h = (p.shape[-1] + 1) // 2
    out = np.array(p[..., :h])
    out[..., : p.shape[-1] - h] += p[..., h:]
    return out


def _pair_expand(a: np.ndarray, k: int) -> np.ndarray:
    """Each draw's pair value (n, K) from the per-pair values ``a`` (n, ceil(K/2))."""
    return np.concatenate([a, a[..., : k - a.shape[-1]]], axis=-1)


def _corrected(terms, p, per_draw, mean, b):
    """The delta-method correction (:func:`correction`) added to ``terms`` and its gradient
    and Hessian in ``g``, with ``p`` the normalised weights (n, K). Over the antithetic pairs
    ``j`` (:func:`pair_sums`: ``P_j`` the pair's weight), with ``c_k = a_k - abar`` (``a_k``
    the draw's gradient of ``log w_k``, ``abar = E_p[a]``), ``M_k = A_k + a_k a_k^T``
    (``A_k`` its Hessian) and ``B = E_p[A] + Cov_p[a]`` (``b``: the galaxy's Hessian
    without the Jacobian term, common to every draw, which cancels):

    - ``d (sum_j P_j^2 / 2) = sum_k p_k P_j(k) c_k``;
    - ``d2 (...) = sum_k p_k P_j c_k c_k^T + sum_j C_j C_j^T + sum_k p_k P_j A_k - S2 B``,
      ``C_j = sum_(k in j) p_k c_k``, ``S2 = sum_j P_j^2``."""
    G1, G2, M11, M12, M22 = per_draw
    m1, m2 = mean
    n_draws = p.shape[-1]
    pp = pair_sums(p)  # P_j
    s2 = np.einsum("ij,ij->i", pp, pp)
    terms = terms + np.where(np.isfinite(s2), 0.5 * (s2 - 1.0 / pp.shape[-1]), 0.0)
    q = p * _pair_expand(pp, n_draws)  # p_k P_j(k)
    c1, c2 = G1 - m1[:, None], G2 - m2[:, None]
    r1, r2 = np.einsum("ij,ij->i", q, c1), np.einsum("ij,ij->i", q, c2)
    big1, big2 = pair_sums(p * c1), pair_sums(p * c2)  # C_j
    hess = np.empty_like(b)
    for (x, y), (cx, cy), mxy, (bx, by) in (
        ((0, 0), (c1, c1), M11 - G1 * G1, (big1, big1)),
        ((0, 1), (c1, c2), M12 - G1 * G2, (big1, big2)),
        ((1, 1), (c2, c2), M22 - G2 * G2, (big2, big2)),
    ):
        hess[:, x, y] = (np.einsum("ij,ij,ij->i", q, cx, cy) + np.einsum("ij,ij->i", bx, by)
                         + np.einsum("ij,ij->i", q, mxy) - s2 * b[:, x, y])  # fmt: skip
    hess[:, 1, 0] = hess[:, 0, 1]
    grad = np.stack([r1, r2], axis=-1)
    bad = ~np.isfinite(s2)
    grad[bad], hess[bad] = np.nan, np.nan
    return terms, grad, hess


#: the finite-draw corrections of ``log (1/K) sum_k w_k`` (``correct`` of :func:`evaluate`
#: and :func:`fit`): ``"none"``, ``"delta"`` (:func:`correction`) and ``"halves"`` (the
#: delta-corrected estimate extrapolated over the two halves of the draws:
#: :func:`half_columns`); True means :data:`DEFAULT_CORRECTION`, False ``"none"``
CORRECTIONS = ("none", "delta", "halves", "halves_plain")
DEFAULT_CORRECTION = "halves"


def correction_mode(correct: bool | str) -> str:
    """``correct`` as one of :data:`CORRECTIONS`."""
    if correct is True:
        return DEFAULT_CORRECTION
    if correct is False:
        return "none"
    if correct not in CORRECTIONS:
        raise ValueError(f"correct: {correct!r} is not one of {', '.join(CORRECTIONS)}")
    return correct


def half_columns(n_draws: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The draws (columns) of the two halves of ``n_draws`` antithetic draws, each half whole
    pairs in the proposals' order (its first members, then their twins: :func:`pair_sums`
    pairs them again); None below two pairs per half. A lone last draw (odd K) is left out."""
    h = n_draws // 2
    if h < 4:
        return None
    a = np.arange(h // 2)
    b = np.arange(h // 2, 2 * (h // 2))
    off = (n_draws + 1) // 2
    return np.concatenate([a, a + off]), np.concatenate([b, b + off])


def _corrected_block(g, eps, base, prior, order, correct):
    """:func:`_block` with the correction ``correct`` (:func:`correction_mode`): for
    ``"halves"``, ``2 T - (T_a + T_b) / 2`` of the delta-corrected estimates of all the
    draws (T) and of each half (T_a, T_b), in value, gradient and Hessian (:func:`half_columns`)."""
    mode = correction_mode(correct)
    delta = mode in ("delta", "halves")
    lw, fin, per_draw = _draws(g, eps, base, prior, order)
    cols = half_columns(np.shape(base)[-1]) if mode.startswith("halves") else None
    # the halves reduce the same per-draw values (one pass of the per-draw arithmetic, not
    # three): each as _block of its columns would, to the bit
    parts = [] if cols is None else [
        _reduce(g, lw[:, c], fin[:, c], None if per_draw is None else
                tuple(x[:, c] for x in per_draw), order, delta) for c in cols]  # fmt: skip
    out = _reduce(g, lw, fin, per_draw, order, delta)
    if cols is None:
        return out
    terms, k, ess, grad, hess = out
    # a galaxy whose halves do not both have support keeps the delta-corrected estimate
    ok = np.isfinite(terms) & np.isfinite(parts[0][0]) & np.isfinite(parts[1][0])
    with np.errstate(invalid="ignore"):
        terms = np.where(ok, 2.0 * terms - 0.5 * (parts[0][0] + parts[1][0]), terms)
        if order:
            grad = np.where(ok[:, None], 2.0 * grad - 0.5 * (parts[0][3] + parts[1][3]), grad)
            hess = np.where(ok[:, None, None], 2.0 * hess - 0.5 * (parts[0][4] + parts[1][4]),
                            hess)  # fmt: skip
    return terms, k, ess, grad, hess


def evaluate(
    g: Any,
    eps: np.ndarray,
    log_base: np.ndarray,
    prior: ShapePrior,
    order: int = 0,
    index: np.ndarray | None = None,
    threads: int = 1,
    correct: bool | str = True,
) -> Evaluation:
    """Per-galaxy ``log L_i(g)`` (and with ``order = 2`` its gradient and Hessian) of
    draws ``eps`` (N, K, 2) with per-draw ``log_base`` (N, K), in float64 whatever their
    dtype, a block of galaxies (:data:`BLOCK_DRAWS` draws) at a time; ``index``: the
    galaxies to evaluate (rows of ``eps``; default all), read a block at a time (no copy of
    the selection); ``threads``: blocks evaluated by that many threads (NumPy releases the
    GIL inside its loops; each galaxy's result is the same whatever the threads);
    ``correct``: the finite-draw bias correction and its derivatives, one of
    :data:`CORRECTIONS` (True: :data:`DEFAULT_CORRECTION`; False: the plain log of the mean
    weight)."""
    g = np.asarray(g, np.float64)
    n = len(eps) if index is None else len(index)
    terms, k, ess = np.empty(n), np.empty(n, np.int64), np.empty(n)
    grad = np.empty((n, 2)) if order else None
    hess = np.empty((n, 2, 2)) if order else None
    per = max(1, BLOCK_DRAWS // max(1, int(np.shape(eps)[1]) if np.ndim(eps) > 1 else 1))
    blocks = [slice(i, min(i + per, n)) for i in range(0, n, per)]

    def one(sl: slice) -> None:
        rows = sl if index is None else index[sl]
        t, kk, e, gr, h = _corrected_block(g, eps[rows], log_base[rows], prior, order, correct)
        terms[sl], k[sl], ess[sl] = t, kk, e
        if order:
            grad[sl], hess[sl] = gr, h

    if threads > 1 and len(blocks) > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(min(threads, len(blocks))) as ex:
            for _ in ex.map(one, blocks):
                pass
    else:
        for sl in blocks:
            one(sl)
    return Evaluation(terms, k, ess, grad, hess)


def _totals(ev: Evaluation, w: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """``(sum_i w_i log L_i, its gradient, its Hessian)`` over the galaxies with w > 0."""
    sel = w > 0
    with np.errstate(invalid="ignore"):  # 0 * -inf for a galaxy left out
        ll = float(np.sum(np.where(sel, w * ev.terms, 0.0)))
    if ev.grad is None:
        return ll, None, None
    gr = np.sum(w[sel, None] * ev.grad[sel], axis=0)
    h = np.sum(w[sel, None, None] * ev.hess[sel], axis=0)
    return ll, gr, h


def fit_status(stopped: str, grad: Any, hess: Any) -> tuple[str, np.ndarray, float]:
    """``(status, g_num_err, decrement)`` of a damped-Newton fit from how its loop stopped
    (``stopped``: ``"small_step"``, ``"line_search"`` or ``"max_steps"``) and the gradient
    (2,) and Hessian (2, 2) of ``log L`` at its end (see :class:`PopulationFit`). A loop
    that stopped on a small step is ``"converged"`` only at a maximum: ``H`` negative
    definite and the remaining Newton step below :data:`MAX_DECREMENT` statistical errors
    (else ``"line_search_failed"``: the search shrank the step to nothing short of it)."""
    gr = np.asarray(grad, np.float64)
    h = np.asarray(hess, np.float64)
    num = np.full(2, np.inf)
    dec = math.inf
    if np.all(np.isfinite(gr)) and np.all(np.isfinite(h)):
        try:
            neg_def = bool(np.all(np.linalg.eigvalsh(h) < 0))
        except np.linalg.LinAlgError:
            neg_def = False
        if neg_def:
            step = np.linalg.solve(-h, gr)
            num = np.abs(step)
            dec = math.sqrt(max(float(gr @ step), 0.0))
    if stopped == "max_steps":
        status = "max_steps"
    elif stopped == "small_step" and dec <= MAX_DECREMENT:
        status = "converged"
    else:
        status = "line_search_failed"
    return status, num, dec


def curvature_cov(h: Any) -> np.ndarray:
    """``(-H)^-1`` of a 2x2 Hessian of ``log L``; NaN unless ``-H`` is positive definite."""
    try:
        cov = np.linalg.inv(-h)
        if not np.all(np.linalg.eigvalsh(-h) > 0):
            cov = np.full((2, 2), np.nan)
    except np.linalg.LinAlgError:
        cov = np.full((2, 2), np.nan)
    return cov


class NewtonSearch:
    """The damped Newton of :func:`fit`, one trial point at a time, for a caller that
    evaluates the trials itself (:func:`fit` on arrays in memory; the streamed pooled fit,
    :mod:`shearbatch.analysis.streamed`, many grid points per pass over the partials).

    :meth:`observe` the totals ``(log L, gradient, Hessian)`` at the start, then at each
    :attr:`trial` until it is None. The step is Newton's when ``H`` is negative definite,
    else a gradient step of at most 0.05; it is halved until ``log L`` does not decrease and
    ``|g| < 1``; the search stops on a step below ``tol`` (``"small_step"``), when the
    halving finds no such point (``"line_search"``) or after ``max_steps``. With
    ``skip_small_newton``, a Newton step below ``tol`` also stops it before its trial is
    evaluated (it would move g by less than ``tol``; a pass over a campaign saved).
    ``acc`` keeps what the caller passed with the accepted point's totals."""

    def __init__(self, g0: Any, max_steps: int, tol: float, skip_small_newton: bool = False):
        self.g = np.asarray(g0, np.float64)
        self.max_steps, self.tol, self.skip = max_steps, tol, skip_small_newton
        self.steps, self.stopped, self.last = 0, "max_steps", 0.0
        self.trial: np.ndarray | None = self.g  # the start is evaluated first
        self.ll: float | None = None
        self.gr = self.h = self.acc = self.step = None
        self.t = 1.0

    def _new_step(self) -> None:
        if self.steps >= self.max_steps:
            self.trial = None
            return
        self.steps += 1
        try:
            neg_def = bool(np.all(np.linalg.eigvalsh(self.h) < 0))
        except np.linalg.LinAlgError:
            neg_def = False
        if neg_def:
            self.step = -np.linalg.solve(self.h, self.gr)
            if self.skip and float(np.linalg.norm(self.step)) < self.tol:
                self.stopped, self.trial = "small_step", None
                return
        else:  # far from the maximum: a gradient step of at most 0.05 in g
            self.step = self.gr * min(1.0, 0.05 / max(float(np.linalg.norm(self.gr)), 1e-300))
        self.t = 1.0
        self._next_trial()

    def _next_trial(self) -> None:
        while True:
            trial = self.g + self.t * self.step
            if float(np.sum(trial * trial)) < 1.0:
                self.trial = trial
                return
            self.t *= 0.5
            if self.t < 1e-12:
                self.stopped, self.trial = "line_search", None
                return

    def observe(self, val: float, gr: Any, h: Any, acc: Any = None) -> None:
        """The totals at :attr:`trial` (and what to keep with them); sets the next trial."""
        if self.ll is None:  # the start
            self.ll, self.gr, self.h, self.acc = val, gr, h, acc
            self._new_step()
            return
        if math.isfinite(val) and val >= self.ll - 1e-12 * abs(self.ll):
            moved = self.t * float(np.linalg.norm(self.step))
            self.g, self.ll, self.gr, self.h, self.acc = self.trial, val, gr, h, acc
            self.last = moved
            if moved < self.tol:
                self.stopped, self.trial = "small_step", None
                return
            self._new_step()
            return
        self.t *= 0.5
        if self.t < 1e-12:  # no point at least as likely along the step: g stays
            self.stopped, self.trial = "line_search", None
            return
        self._next_trial()


def fit(
    eps: np.ndarray,
    log_base: np.ndarray,
    prior: ShapePrior,
    *,
    weight: Any = None,
    g0: Any = (0.0, 0.0),
    max_steps: int = 60,
    tol: float = 1e-10,
    index: np.ndarray | None = None,
    threads: int = 1,
    correct: bool | str = True,
) -> PopulationFit:
    """:func:`shearbatch.core.population.fit` in NumPy: the maximum of ``sum_i weight_i
    log L_i(g)`` over ``|g| < 1`` by the same damped Newton from ``g0`` (the Newton step
    when ``H`` is negative definite, else a gradient step of at most 0.05; halved until
    ``log L`` does not decrease and ``|g| < 1``; stops when the step is below ``tol``, when
    the halving finds no such point, or after ``max_steps``: :func:`fit_status` says which,
    and the fit's numerical error), and its curvature. Galaxies without support at ``g0`` are left out (and counted).
    ``index`` selects rows of ``eps`` / ``log_base`` without copying them; ``threads``:
    see :func:`evaluate`; ``correct``: maximise the bias-corrected ``log L``
    (:func:`correction`, the default). Each trial point is evaluated with its derivatives at once (an
    accepted step, the usual case, needs them next)."""
    n = len(eps) if index is None else len(index)
    w = np.ones(n) if weight is None else np.asarray(weight, np.float64)
    g = np.asarray(g0, np.float64)

    def full(gg):
        return evaluate(gg, eps, log_base, prior, 2, index, threads, correct)

    ev = full(g)
    ok = np.isfinite(ev.terms)
    if not np.all(ok | (w == 0)):
        logger.info("population fit: %d galaxies without support at g0 left out",
                    int(np.sum(~ok & (w > 0))))  # fmt: skip
    w = np.where(ok, w, 0.0)
    ll, gr, h = _totals(ev, w)
    search = NewtonSearch(g, max_steps, tol)
    search.observe(ll, gr, h, ev)
    while search.trial is not None:
        ev_t = full(search.trial)
        val, gr_t, h_t = _totals(ev_t, w)
        search.observe(val, gr_t, h_t, ev_t)
    g, ev, ll, gr, h = search.g, search.acc, search.ll, search.gr, search.h
    steps, stopped, last = search.steps, search.stopped, search.last
    status, num, dec = fit_status(stopped, gr, h)
    cov = curvature_cov(h)
    return PopulationFit(g, cov, float(ll), steps, status == "converged", ev.ess, ev.n_draws,
                         ev.ess < COLLAPSE_FRAC * ev.n_draws, int(np.sum(w > 0)), ev.grad,
                         ev.hess, status, num, dec, float(last))  # fmt: skip
