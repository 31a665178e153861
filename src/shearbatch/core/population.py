r"""Shear from a population of per-galaxy posteriors sampled under an interim prior.

Each galaxy ``i`` has been inferred WITHOUT shear: its latents are its
*observed* (sheared) ellipticity ``eps`` and nuisances ``nu`` (flux, size,
position), under an interim prior ``pi(eps, nu)``, and K draws
``(eps_ik, nu_ik)`` represent that posterior (exactly, or through importance
weights, below). With the population's intrinsic-shape prior ``p_e`` and the
reduced-shear composition (complex notation, ``g`` and ``e`` reduced shears)

.. math:: \epsilon = \frac{e + g}{1 + g^* e}, \qquad
          e(\epsilon, g) = \frac{\epsilon - g}{1 - g^* \epsilon}, \qquad
          \Big|\frac{\partial e}{\partial \epsilon}\Big|
          = \frac{(1 - |g|^2)^2}{|1 - g^* \epsilon|^4},

the marginal likelihood of a shear ``g`` shared by the galaxies is, up to a
factor independent of ``g`` (the interim evidence of each galaxy),

.. math:: \log L(g) = \sum_i \Big[\log \frac{1}{K} \sum_k w_{ik}(g)
          + \frac{1}{2}\Big(\sum_j P_{ij}^2 - \frac{1}{J}\Big)\Big], \qquad
          w_{ik}(g) = p_e\big(e(\epsilon_{ik}, g)\big)
                      \Big|\frac{\partial e}{\partial \epsilon}\Big|_{ik}
                      \frac{p_\nu(\nu_{ik})}{\pi(\epsilon_{ik}, \nu_{ik})}
                      \, r_{ik},

the importance-sampling estimate of :math:`\int p(d_i | \epsilon, \nu)\,
p(\epsilon | g)\, p_\nu(\nu)\, d\epsilon\, d\nu` (nuisances integrated, not
profiled), with the delta-method correction of the log's finite-draw bias
(``P_ij``: the normalised weight of galaxy i's antithetic pair j of draws, J pairs;
:func:`shearbatch.core.population_np.correction`).
``r_ik = 1`` for exact posterior draws (NUTS); for draws from an
approximation ``q`` (MAP + Laplace) ``r_ik = p(d | x_ik) pi(x_ik) / q(x_ik)``
(up to a constant), which corrects the approximation exactly as K grows. Every
``g``-independent factor enters through one per-draw ``log_base`` =
``log(p_nu / pi * r)``; ``p_e`` enters through a callable (JAX), so that
``d log L / dg`` and the Hessian are exact (automatic differentiation).

The estimate :func:`fit` is the maximum of ``log L`` over ``|g| < 1``
(damped Newton on the two components from ``g = 0``) and its error the
inverse curvature ``(-H)^-1`` there. Averaging per-galaxy posterior means of
``g`` is NOT this estimator: with shape noise their average responds to ``g``
by ``1 - 0.12`` (tests/core/test_population.py), the maximum of the pooled
likelihood by 1.

Per galaxy, the effective sample size of the normalised weights at the
estimate, ``ESS_i = (sum_k w_ik)^2 / sum_k w_ik^2``, says whether K draws
represent ``L_i``; a galaxy whose ``ESS_i < COLLAPSE_FRAC K`` has *collapsed*
weights (flag ``POP_WEIGHTS_COLLAPSED``): its ``L_i`` rests on a few draws (an
interim prior too narrow, or a Laplace approximation far from the posterior).

:func:`fit` computes in float64 whatever the process's flags (inside a
``jax.enable_x64`` scope, which is thread-local and restored on exit).

The pipeline (``bias-extract``'s per-realization fit, ``bias-stats``' pooled fit) uses the
NumPy form of this estimator, :mod:`shearbatch.core.population_np` (the derivatives
written out, no JAX: no accelerator in reader processes, no compile, memory bounded by
blocks of galaxies); tests/core/test_population_np.py holds it to this module's results.
Unlike it, a galaxy without support makes this module's gradient NaN even at weight 0
(``0 * nan`` in the automatic derivative), which stops :func:`fit`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

# one definition of the result and of the collapse threshold for both forms of the fit
from .population_np import COLLAPSE_FRAC, PopulationFit, fit_status

__all__ = [
    "COLLAPSE_FRAC",
    "PopulationFit",
    "compose",
    "decompose",
    "ess",
    "fit",
    "galaxy_derivatives",
    "log_jacobian",
    "log_likelihood",
    "log_weights",
    "shape_log_prior",
]

logger = logging.getLogger(__name__)

LogPrior = Callable[[jax.Array, jax.Array], jax.Array]


def _cmul(a1, a2, b1, b2):
    return a1 * b1 - a2 * b2, a1 * b2 + a2 * b1


def _cdiv(a1, a2, b1, b2):
    den = b1 * b1 + b2 * b2
    return (a1 * b1 + a2 * b2) / den, (a2 * b1 - a1 * b2) / den


def compose(e: jax.Array, g: jax.Array) -> jax.Array:
    """Observed ellipticity ``(e + g) / (1 + g* e)`` of intrinsic ``e`` (..., 2) sheared by ``g``."""
    e1, e2 = e[..., 0], e[..., 1]
    g1, g2 = g[..., 0], g[..., 1]
    d1, d2 = _cmul(g1, -g2, e1, e2)
    return jnp.stack(_cdiv(e1 + g1, e2 + g2, 1.0 + d1, d2), axis=-1)


def decompose(eps: jax.Array, g: jax.Array) -> jax.Array:
    """Intrinsic ellipticity ``(eps - g) / (1 - g* eps)`` of observed ``eps`` (..., 2)."""
    p1, p2 = eps[..., 0], eps[..., 1]
    g1, g2 = g[..., 0], g[..., 1]
    d1, d2 = _cmul(g1, -g2, p1, p2)
    return jnp.stack(_cdiv(p1 - g1, p2 - g2, 1.0 - d1, -d2), axis=-1)


def log_jacobian(eps: jax.Array, g: jax.Array) -> jax.Array:
    """``log |de/deps| = 2 log(1 - |g|^2) - 4 log |1 - g* eps|`` (the map is conformal)."""
    p1, p2 = eps[..., 0], eps[..., 1]
    g1, g2 = g[..., 0], g[..., 1]
    d1, d2 = _cmul(g1, -g2, p1, p2)
    return 2.0 * jnp.log1p(-(g1 * g1 + g2 * g2)) - 2.0 * jnp.log((1.0 - d1) ** 2 + d2 * d2)


def shape_log_prior(e1_prior: Any, e2_prior: Any) -> LogPrior:
    """``log p_e(e1, e2)`` of a config's intrinsic-shape priors (:class:`shearbatch.spec.Prior`):
    the product of the two components' densities, restricted to ``|e| < 1`` as the model
    restricts it (unnormalised: a constant does not move the maximum). A truncated
    component is evaluated by its untruncated density, so that every galaxy's ``L_i(g)``
    is smooth in ``g`` (see ``_shape_log_prior``)."""
    key = tuple((p.kind, tuple(float(a) for a in p.args)) for p in (e1_prior, e2_prior))
    if key not in _PRIORS:  # one function per prior: fit()'s compiled programs are reused
        _PRIORS[key] = _shape_log_prior(e1_prior, e2_prior)
    return _PRIORS[key]


_PRIORS: dict[tuple, LogPrior] = {}


def _shape_log_prior(e1_prior: Any, e2_prior: Any) -> LogPrior:
    from .priors import to_distribution

    # a truncated prior is evaluated by its untruncated density (its shape inside the
    # support; a constant does not move the maximum): with the hard edge, a galaxy's
    # importance estimate of L_i(g) jumps as its draws cross the edge and is 0 where none
    # is inside, which walls the pooled fit in (measured at Level 2 on a 2-D grid,
    # docs/results/population_estimator.md); the mass the untruncated density puts beyond
    # the edge (5e-4 per component at Level 2's 0.9 = 3.5 sigma) is what it changes
    smooth = [getattr(d, "base_dist", d) for d in map(to_distribution, (e1_prior, e2_prior))]

    def log_pe(e1: jax.Array, e2: jax.Array) -> jax.Array:
        out = jnp.zeros(jnp.broadcast_shapes(jnp.shape(e1), jnp.shape(e2)), jnp.result_type(e1))
        for d, x in zip(smooth, (e1, e2), strict=True):
            inside = d.support(x)
            out = out + jnp.where(inside, d.log_prob(jnp.where(inside, x, 0.0)), -jnp.inf)
        return jnp.where(e1 * e1 + e2 * e2 < 1.0, out, -jnp.inf)

    return log_pe


def log_weights(g: jax.Array, eps: jax.Array, log_base: jax.Array, log_pe: LogPrior) -> jax.Array:
    """``log w_ik(g)`` (N, K) of draws ``eps`` (N, K, 2) with per-draw ``log_base`` (N, K).

    A draw with ``log_base = -inf`` (missing, or outside the interim support) weighs 0.
    """
    e = decompose(eps, g)
    lw = log_pe(e[..., 0], e[..., 1]) + log_jacobian(eps, g) + log_base
    return jnp.where(jnp.isfinite(log_base), lw, -jnp.inf)


def _delta_terms(lw, k):
    """``log (1/K) sum_k w_k`` (N,) of log weights ``lw`` (N, K) plus its delta-method
    correction over the antithetic pairs (0 without support)."""
    lse = jax.nn.logsumexp(lw, axis=-1)
    ok = jnp.isfinite(lse)
    p = jnp.exp(lw - jnp.where(ok, lse, 0.0)[..., None])
    n, h = p.shape[-1], (p.shape[-1] + 1) // 2
    pairs = p[..., :h].at[..., : n - h].add(p[..., h:])
    corr = 0.5 * (jnp.sum(pairs * pairs, axis=-1) - 1.0 / h)
    return lse - jnp.log(jnp.maximum(k, 1)) + jnp.where(ok, corr, 0.0)


def _galaxy_terms(g, eps, log_base, log_pe):
    """Per galaxy (N,) the corrected ``log (1/K_i) sum_k w_ik(g)`` as
    :func:`shearbatch.core.population_np.evaluate` computes it with its default correction
    (:data:`~shearbatch.core.population_np.DEFAULT_CORRECTION`, ``"halves"``): the
    delta-corrected estimate of all the draws T and of each half of them (T_a, T_b, whole
    antithetic pairs), combined as ``2 T - (T_a + T_b) / 2`` where both halves have support."""
    from .population_np import half_columns

    lw = log_weights(g, eps, log_base, log_pe)
    valid = jnp.isfinite(log_base)
    t = _delta_terms(lw, jnp.sum(valid, axis=-1))
    cols = half_columns(lw.shape[-1])
    if cols is None:
        return t
    ta, tb = (_delta_terms(lw[..., c], jnp.sum(valid[..., c], axis=-1)) for c in cols)
    ok = jnp.isfinite(t) & jnp.isfinite(ta) & jnp.isfinite(tb)
    safe = jnp.where(ok, 2.0 * t - 0.5 * (jnp.where(ok, ta, 0.0) + jnp.where(ok, tb, 0.0)), 0.0)
    return jnp.where(ok, safe, t)


def log_likelihood(
    g: jax.Array,
    eps: jax.Array,
    log_base: jax.Array,
    log_pe: LogPrior,
    weight: jax.Array | None = None,
) -> jax.Array:
    """``sum_i weight_i log (1/K) sum_k w_ik(g)``; ``weight`` (N,) 0/1 selects galaxies
    (the jackknife drops a seed's galaxies with it); default every galaxy."""
    terms = _galaxy_terms(g, eps, log_base, log_pe)
    if weight is None:
        return jnp.sum(terms)
    return jnp.sum(jnp.where(weight > 0, weight * terms, 0.0))


def ess(log_w: jax.Array) -> jax.Array:
    """Effective sample size ``(sum w)^2 / sum w^2`` per row of ``log_w`` (..., K); 0 when
    every weight is 0."""
    mx = jnp.max(log_w, axis=-1, keepdims=True)
    w = jnp.exp(log_w - jnp.where(jnp.isfinite(mx), mx, 0.0))
    s1, s2 = jnp.sum(w, axis=-1), jnp.sum(w * w, axis=-1)
    return jnp.where(s2 > 0, s1 * s1 / jnp.where(s2 > 0, s2, 1.0), 0.0)


def galaxy_derivatives(g: Any, eps: Any, log_base: Any, log_pe: LogPrior) -> tuple:
    """Per-galaxy gradient (N, 2) and Hessian (N, 2, 2) of ``log L_i`` at ``g`` (float64).

    With them, dropping a group ``s`` of galaxies moves the maximum ``g_hat`` of the
    full likelihood (where ``sum_i grad_i = 0``) by one Newton step,
    ``g_hat_(s) = g_hat + (H - H_s)^-1 G_s`` (``H_s``, ``G_s``: the group's sums): the
    linearised delete-one-group jackknife, exact to ``O(1 / groups^2)`` of the shift.
    """
    with jax.enable_x64(True):
        eps = jnp.asarray(eps, jnp.float64)
        base = jnp.asarray(log_base, jnp.float64)
        bad = ~(jnp.all(jnp.isfinite(eps), axis=-1) & ~jnp.isnan(base))
        base = jnp.where(bad, -jnp.inf, base)
        eps = jnp.where(bad[..., None], 0.0, eps)

        def terms(gg):
            return _galaxy_terms(gg, eps, base, log_pe)

        gg = jnp.asarray(g, jnp.float64)
        grad = jax.jacfwd(terms)(gg)
        hess = jax.jacfwd(jax.jacfwd(terms))(gg)
        return np.asarray(grad, float), np.asarray(hess, float)


def _functions(log_pe: LogPrior):
    def f(g, eps, base, weight):
        return log_likelihood(g, eps, base, log_pe, weight)

    grad_hess = jax.jit(lambda g, eps, base, w: (f(g, eps, base, w),
                                                 jax.grad(f)(g, eps, base, w),
                                                 jax.hessian(f)(g, eps, base, w)))  # fmt: skip
    value = jax.jit(f)
    terms = jax.jit(lambda g, eps, base: _galaxy_terms(g, eps, base, log_pe))
    weights = jax.jit(lambda g, eps, base: log_weights(g, eps, base, log_pe))
    return value, grad_hess, terms, weights


_CACHE: dict[int, Any] = {}


def fit(
    eps: Any,
    log_base: Any,
    log_pe: LogPrior,
    *,
    weight: Any = None,
    g0: Any = (0.0, 0.0),
    max_steps: int = 60,
    tol: float = 1e-10,
) -> PopulationFit:
    """Maximum of :func:`log_likelihood` over ``|g| < 1`` and its curvature.

    ``eps`` (N, K, 2) and ``log_base`` (N, K) as in :func:`log_weights` (NaN draws count
    as missing); ``weight`` (N,) selects galaxies. Galaxies whose ``L_i(g0)`` is 0 (no
    draw in the population's support) are left out (and counted). Damped Newton:
    the Newton step when ``H`` is negative definite, else a gradient step; halved
    until ``log L`` does not decrease and ``|g| < 1``; stops when the step is below
    ``tol`` (in ``g``), when the halving finds no such point, or after ``max_steps``:
    the result's ``status``, ``g_num_err`` and ``decrement``
    (:func:`shearbatch.core.population_np.fit_status`) say which, and how far from the
    maximum it stopped.
    """
    with jax.enable_x64(True):  # float64 whatever the caller's flags (a thread-local scope)
        return _fit(eps, log_base, log_pe, weight, g0, max_steps, tol)


def _fit(eps, log_base, log_pe, weight, g0, max_steps, tol) -> PopulationFit:
    key = id(log_pe)
    if key not in _CACHE or _CACHE[key][0] is not log_pe:
        _CACHE[key] = (log_pe, _functions(log_pe))
    value, grad_hess, terms, weights_fn = _CACHE[key][1]
    dtype = jnp.float64
    eps = jnp.asarray(eps, dtype)
    base = jnp.asarray(log_base, dtype)
    bad = ~(jnp.all(jnp.isfinite(eps), axis=-1) & ~jnp.isnan(base))
    base = jnp.where(bad, -jnp.inf, base)
    eps = jnp.where(bad[..., None], 0.0, eps)
    n = eps.shape[0]
    w = jnp.ones(n, dtype) if weight is None else jnp.asarray(weight, dtype)
    g = jnp.asarray(g0, dtype)
    ok = jnp.isfinite(terms(g, eps, base))
    if not bool(jnp.all(ok | (w == 0))):
        logger.info("population fit: %d galaxies without support at g0 left out",
                    int(jnp.sum(~ok & (w > 0))))  # fmt: skip
    w = jnp.where(ok, w, 0.0)
    ll, gr, h = grad_hess(g, eps, base, w)
    steps, stopped, last = 0, "max_steps", 0.0
    while steps < max_steps:
        steps += 1
        hn = np.asarray(h, float)
        grn = np.asarray(gr, float)
        try:
            neg_def = bool(np.all(np.linalg.eigvalsh(hn) < 0))
        except np.linalg.LinAlgError:
            neg_def = False
        if neg_def:
            step = -np.linalg.solve(hn, grn)
        else:  # far from the maximum: a gradient step of at most 0.05 in g
            step = grn * min(1.0, 0.05 / max(float(np.linalg.norm(grn)), 1e-300))
        t = 1.0
        while True:
            trial = jnp.asarray(np.asarray(g, float) + t * step, dtype)
            inside = float(jnp.sum(trial * trial)) < 1.0
            if inside:
                val = value(trial, eps, base, w)
                if bool(jnp.isfinite(val)) and float(val) >= float(ll) - 1e-12 * abs(float(ll)):
                    break
            t *= 0.5
            if t < 1e-12:
                break
        if t < 1e-12:  # no point at least as likely along the step: g stays
            stopped = "line_search"
            break
        moved = t * float(np.linalg.norm(step))
        g = trial
        ll, gr, h = grad_hess(g, eps, base, w)
        last = moved
        if moved < tol:
            stopped = "small_step"
            break
    status, num, dec = fit_status(stopped, np.asarray(gr, float), np.asarray(h, float))
    hn = np.asarray(h, float)
    try:
        cov = np.linalg.inv(-hn)
        if not np.all(np.linalg.eigvalsh(-hn) > 0):
            cov = np.full((2, 2), np.nan)
    except np.linalg.LinAlgError:
        cov = np.full((2, 2), np.nan)
    lw = weights_fn(g, eps, base)
    e_s = np.asarray(ess(lw), float)
    k = np.asarray(jnp.sum(jnp.isfinite(base), axis=-1))
    return PopulationFit(np.asarray(g, float), cov, float(ll), steps, status == "converged",
                         e_s, k, e_s < COLLAPSE_FRAC * k, int(jnp.sum(w > 0)), status=status,
                         g_num_err=num, decrement=dec, last_step=float(last))  # fmt: skip
