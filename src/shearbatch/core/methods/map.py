"""MAP per realization (damped Newton, L-BFGS or Adam) plus a Laplace approximation.

For one realization, with the physical parameters theta = T(x) of an
unconstrained vector x and V(x) = -log p(T(x), d) (the posterior density in
the physical parameters, WITHOUT the log-Jacobian of T):

    x* = argmin V(x)                       (theta* = T(x*) is the posterior mode in theta)
    Sigma = H^{-1},  H = d^2 V / dx^2 (x*)  (Laplace approximation)

At the mode the gradient vanishes, so H = J^T H_theta J (J = dT/dx): the
Gaussian N(x*, H^-1) mapped through T has, to first order, the covariance
H_theta^-1 of the Laplace approximation in the physical parameters, while its
draws stay inside every support. For g (no transform) both are exact. (The
potential with the Jacobian, which NUTS samples, would put the mode of a
bounded prior's latent elsewhere: measured m = -0.02 at S/N 30 with a
U(-0.9, 0.9) shear prior.)

The written posterior is ``num_samples`` draws of N(x*, Sigma), mapped to the
constrained space. Draws come in antithetic pairs (x* + L^-T eps, x* - L^-T eps
with H = L L^T), so the draw mean of every unconstrained latent (g1, g2 among
them) equals the mode exactly and the draw std estimates the Laplace width.

The optimiser stops per realization when the relative decrease of U in one
step falls below ``tol`` (|U_k - U_{k+1}| <= tol max(1, |U_{k+1}|)) or after
``num_steps``, or when a step fails to decrease U (the float resolution of U is
reached; ``converged`` is then true unless the step budget ran out); under :func:`shearbatch.core.batching.batched` a converged lane is frozen
while others continue, and nothing couples lanes (no global-norm clipping, no
stopping on a summed loss).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ..flags import flag
from .base import Diagnosis, Draws, Method

__all__ = ["Laplace", "MapSettings", "OptResult", "default_tol", "laplace", "method", "optimize"]


class OptResult(NamedTuple):
    x: jax.Array  # (D,) mode, unconstrained
    potential: jax.Array  # U(x)
    grad_norm: jax.Array  # |dU/dx| at x
    n_steps: jax.Array
    converged: jax.Array


class MapSettings(NamedTuple):
    """``inference.map_config`` (see the schema for meanings and defaults)."""

    optimizer: str
    num_steps: int
    learning_rate: float
    tol: float | None
    num_samples: int


#: a MAP fit is converged when the Newton decrement at its end, g^T H^-1 g / 2 (the
#: predicted log-density gain still to be had, whatever the dtype, optimiser or
#: parameter scale), is below this: the mode is then within 0.014 posterior sigma
DECREMENT_TOL = 1e-4


def default_tol(dtype, optimizer: str = "newton") -> float:
    """Newton: half-decrement tolerance (log-density units) 1e-10 in float64, 1e-7 in
    float32. L-BFGS: relative-decrease tolerance 1e-12 / 1e-6. Adam (noisy steps):
    relative change of the last step 1e-9 / 1e-6."""
    x64 = jnp.dtype(dtype) == jnp.float64
    if optimizer == "newton":
        return 1e-10 if x64 else 1e-7
    if optimizer == "adam":
        return 1e-9 if x64 else 1e-6
    return 1e-12 if x64 else 1e-6


#: largest change of any unconstrained coordinate in one Newton step. Far from the mode
#: the quadratic model can send a step along the nearly flat shear / shape ridge of a
#: many-galaxy realization (g up, every e down) to where bounded shapes sit at their
#: support's edge and their gradients vanish; measured at Level 1 (M = 8, S/N 400): 3 of
#: 128 fits stuck there without the cap, 1 with it (a mode genuinely on the bound). Near
#: the mode steps are far smaller, so the cap leaves the answer and the quadratic
#: convergence unchanged.
MAX_STEP = 0.5


def _newton_step_dir(grad: jax.Array, hess: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Saddle-free Newton direction ``p = -|H|^-1 g`` and the decrement ``g^T |H|^-1 g``.

    ``|H|`` has H's eigenvectors and the absolute values of its eigenvalues
    (floored at 1e-12 of the largest), so ``p`` is a descent direction even
    where H is not positive definite.
    """
    w, v = jnp.linalg.eigh(0.5 * (hess + hess.T))
    aw = jnp.abs(w)
    aw = jnp.maximum(aw, 1e-12 * jnp.max(aw))
    coef = (v.T @ grad) / aw
    return -(v @ coef), jnp.sum(coef * (v.T @ grad))


def _newton(x0, fun, *, num_steps: int, tol: float, hess_fn=None) -> tuple[OptResult, jax.Array]:
    """Damped Newton with Armijo backtracking; returns the result and H at the last iterate
    (``hess_fn(x)``, default ``jax.hessian(fun)``).

    Stops when half the Newton decrement, ``g^T H^-1 g / 2`` (the predicted
    decrease of U to the optimum, in log-density units), is <= ``tol``.
    """
    grad_fn = jax.grad(fun)
    hess_fn = jax.hessian(fun) if hess_fn is None else hess_fn
    d = x0.shape[0]

    def cond(c):
        return (c[3] < num_steps) & ~c[4] & jnp.isfinite(c[1])

    def body(c):
        x, f, _, i, _, _ = c
        g, h = grad_fn(x), hess_fn(x)
        p, dec = _newton_step_dir(g, h)
        p = p * jnp.minimum(1.0, MAX_STEP / jnp.max(jnp.abs(p)))  # p = 0: MAX_STEP / 0 = inf -> 1
        small = 0.5 * dec <= tol
        slope = jnp.dot(g, p)

        def bt_cond(b):
            t, fn, k = b
            return (k < 30) & ~(fn <= f + 1e-4 * t * slope)

        def bt_body(b):
            t, _, k = b
            return 0.5 * t, fun(x + 0.5 * t * p), k + 1

        f_full = fun(x + p)
        # in the quadratic regime (predicted gain < 1e-3) the full Newton step is taken even
        # when rounding hides its decrease (float32: U ~ 500 resolves only ~3e-5)
        quad = (0.5 * dec < 1e-3) & jnp.isfinite(f_full) & (f_full <= f + 1e-3)
        t, f_new, _ = jax.lax.while_loop(bt_cond, bt_body, (1.0, f_full, 0))
        t = jnp.where(quad, 1.0, t)
        f_new = jnp.where(quad, f_full, f_new)
        ok = ((f_new <= f + 1e-4 * t * slope) | quad) & ~small
        x_new = jnp.where(ok, x + t * p, x)
        f_new = jnp.where(ok, f_new, f)
        gn = jnp.linalg.norm(g)
        return x_new, f_new, gn, i + 1, small | ~ok, (h, small)

    init = (
        x0,
        fun(x0),
        jnp.asarray(jnp.inf, x0.dtype),
        jnp.asarray(0),
        jnp.asarray(False),
        (jnp.zeros((d, d), x0.dtype), jnp.asarray(False)),
    )
    x, f, gn, n, _, (h, converged) = jax.lax.while_loop(cond, body, init)
    return OptResult(x, f, gn, n, converged & jnp.isfinite(f)), h


def optimize(
    x0: jax.Array,
    obs: jax.Array,
    potential_fn,
    *,
    num_steps: int,
    optimizer: str = "newton",
    learning_rate: float = 0.1,
    tol: float | None = None,
) -> OptResult:
    """Minimise ``potential_fn(x, obs)`` from ``x0`` for ONE realization."""
    fun = functools.partial(lambda x, o: potential_fn(x, o), o=obs)
    tol = default_tol(x0.dtype, optimizer) if tol is None else tol
    if optimizer == "newton":
        return _newton(x0, fun, num_steps=num_steps, tol=tol)[0]
    if optimizer == "lbfgs":
        opt = optax.lbfgs()
        value_and_grad = optax.value_and_grad_from_state(fun)
    else:
        schedule = optax.cosine_decay_schedule(learning_rate, num_steps, alpha=1e-3)
        opt = optax.adam(schedule)

        def value_and_grad(x, state):
            del state
            return jax.value_and_grad(fun)(x)

    f0 = fun(x0)

    def cond(c):
        _, _, f, i, done, _ = c
        return (i < num_steps) & ~done & jnp.isfinite(f)

    def body(c):
        x, state, f, i, _, _ = c
        value, grad = value_and_grad(x, state=state)
        if optimizer == "lbfgs":
            updates, state = opt.update(grad, state, x, value=value, grad=grad, value_fn=fun)
        else:
            updates, state = opt.update(grad, state, x)
        x_new = optax.apply_updates(x, updates)
        f_new = fun(x_new) if optimizer != "lbfgs" else optax.tree_utils.tree_get(state, "value")
        small = jnp.abs(f - f_new) <= tol * jnp.maximum(1.0, jnp.abs(f_new))
        if optimizer != "lbfgs":  # Adam is not monotone: it runs its whole step budget
            return x_new, state, f_new, i + 1, jnp.asarray(False), small
        stalled = f_new > f  # at the float resolution of U: no further progress possible
        return x_new, state, f_new, i + 1, small | stalled, small

    init = (x0, opt.init(x0), f0, jnp.asarray(0), jnp.asarray(False), jnp.asarray(False))
    x, _, f, n, done, small = jax.lax.while_loop(cond, body, init)
    grad = jax.grad(fun)(x)
    if optimizer != "lbfgs":  # converged: the last step changed U by less than the tolerance
        return OptResult(x, f, jnp.linalg.norm(grad), n, small & jnp.isfinite(f))
    return OptResult(x, f, jnp.linalg.norm(grad), n, done & jnp.isfinite(f) & (n < num_steps))


class Laplace(NamedTuple):
    opt: OptResult
    chol: jax.Array  # (D, D) lower Cholesky factor of the Hessian, H = L L^T
    scale: jax.Array  # (D, D) L^-T: x = x* + L^-T eps has covariance H^-1
    ok: jax.Array  # Hessian finite and positive definite
    decrement: jax.Array  # g^T H^-1 g / 2 at x*: predicted distance to the mode (log density)
    #: |L^-1 g| at x*: the gradient whitened by the Laplace factor, i.e. the length of the
    #: Newton step still to go in posterior standard deviations (= sqrt(2 decrement)). The
    #: raw |g| scales with the curvature (S/N^2: ~1e-6 from rounding alone at Level 0's S/N
    #: 1e5) and has no stable value; this one means the same at every S/N and precision.
    grad_whitened: jax.Array


def laplace(obs: jax.Array, model, settings: MapSettings, objective=None) -> Laplace:
    """Mode and Laplace approximation of ONE realization's posterior (``model``: a
    :class:`shearbatch.core.posterior.Posterior`). ``objective(x, obs)`` defaults to the
    physical-parameter mode objective ``model.mode_fn``; samplers pass
    ``model.potential_fn`` (the density they sample in x, Jacobian included: its mode is
    finite even where a bounded latent's physical mode sits on a bound)."""
    objective = model.mode_fn if objective is None else objective
    hessian = model.hessian(objective)  # the model's sparsity-aware Hessian (M galaxies)
    x0 = model.x0.astype(obs.dtype)
    if settings.optimizer == "newton":
        fun = functools.partial(lambda x, o: objective(x, o), o=obs)
        tol = default_tol(x0.dtype) if settings.tol is None else settings.tol
        hess_fn = functools.partial(lambda x, o: hessian(x, o), o=obs)
        opt, hess = _newton(x0, fun, num_steps=settings.num_steps, tol=tol, hess_fn=hess_fn)
    else:
        opt = optimize(
            x0,
            obs,
            objective,
            num_steps=settings.num_steps,
            optimizer=settings.optimizer,
            learning_rate=settings.learning_rate or 0.1,
            tol=settings.tol,
        )
        hess = hessian(opt.x, obs)
    hess = 0.5 * (hess + hess.T)
    chol = jnp.linalg.cholesky(hess)
    ok = jnp.all(jnp.isfinite(chol)) & jnp.all(jnp.isfinite(hess))
    eye = jnp.eye(x0.shape[0], dtype=x0.dtype)
    scale = jax.scipy.linalg.solve_triangular(chol.T, eye, lower=False)  # L^-T
    w = scale.T @ jax.grad(objective)(opt.x, obs)  # L^-1 g: |w|^2 = g^T H^-1 g
    return Laplace(opt, chol, scale, ok, 0.5 * jnp.sum(w * w), jnp.sqrt(jnp.sum(w * w)))


def fit(
    rng_key: jax.Array, obs: jax.Array, posterior, settings: MapSettings, lap: Laplace | None = None
) -> Draws:
    """MAP + Laplace for ONE realization: ``num_samples`` antithetic Laplace draws
    (``lap``: an already computed :func:`laplace` of this realization)."""
    lap = laplace(obs, posterior, settings) if lap is None else lap
    d = lap.opt.x.shape[0]
    std = jnp.sqrt(jnp.sum(lap.scale * lap.scale, axis=1))  # sqrt diag(L^-T L^-1)
    half = (settings.num_samples + 1) // 2
    eps = jax.random.normal(rng_key, (half, d), lap.opt.x.dtype)
    eps = jnp.concatenate([eps, -eps], axis=0)[: settings.num_samples]
    xs = lap.opt.x[None, :] + eps @ lap.scale.T
    samples = jax.vmap(posterior.constrain_fn)(xs)
    log_q = -0.5 * jnp.sum(eps * eps, axis=1) + jnp.sum(jnp.log(jnp.diag(lap.chol)))
    info = {
        "potential": lap.opt.potential,
        "grad_norm_whitened": lap.grad_whitened,
        "n_steps": lap.opt.n_steps,
        "converged": lap.opt.converged,
        "decrement": lap.decrement,
        "laplace_ok": lap.ok,
        "std": std,
    }
    return Draws(
        samples={k: v[None] for k, v in samples.items()},
        stats={"laplace_log_q": log_q[None]},
        mode=posterior.constrain_fn(lap.opt.x),
        info=info,
    )


def galaxy_log_target(posterior, x: jax.Array, obs: jax.Array) -> jax.Array:
    """Per-galaxy ``log p(d_j, theta_j) + log |dT/dx|_j`` (M,) of a model whose galaxies are
    independent (the interim model: no shear site), at ONE unconstrained point ``x``.

    Every per-galaxy site's log-density (latents, the stamp's likelihood, the
    ``|e| < 1`` factor) and each transform's log-Jacobian, elementwise over the
    ``galaxy`` plate; scalar sites (fixed-shear factors, 0) are left out. The sum over
    galaxies is ``-posterior.potential_fn(x, obs)``.
    """
    from numpyro.distributions import biject_to
    from numpyro.handlers import substitute, trace

    params = posterior.constrain_fn(x)
    m = obs.shape[0]
    tr = trace(substitute(posterior.model, data=params)).get_trace(obs)
    out = jnp.zeros((m,), obs.dtype)
    for name, site in tr.items():
        if site["type"] != "sample":
            continue
        lp = site["fn"].log_prob(site["value"])
        if jnp.shape(lp) == (m,):
            out = out + lp
        if name in params:
            t = biject_to(site["fn"].support)
            v = params[name]
            out = out + jnp.broadcast_to(t.log_abs_det_jacobian(t.inv(v), v), (m,))
    return out


def _galaxy_of(posterior) -> np.ndarray:
    """(D, M) one-hot: which galaxy each flat coordinate belongs to (every site per-galaxy)."""
    from ..posterior import _layout

    m = next(iter(posterior.sites.values()))[0]
    lay = _layout(posterior.x0, posterior.sites, m)
    if lay is None or np.any(lay[1] < 0):
        raise ValueError("interim fit: every latent must be per-galaxy (no shear site)")
    return np.eye(m)[lay[1]]


def interim_fit(
    rng_key: jax.Array, obs: jax.Array, posterior, settings: MapSettings, e_sigma: float
) -> Draws:
    """MAP + Laplace of ONE realization of the interim model, with per-galaxy importance
    weights of the Laplace draws.

    The galaxies are independent (no shear), so the Hessian, its Cholesky factor L and
    the Laplace density ``q`` factor by galaxy: ``log q_j = -1/2 |z_j|^2 + sum log
    diag(L)_j`` with ``z = L^T (x - x*)``. Per draw k and galaxy j the sample statistic
    ``interim_log_weight`` is ``log p(d_j, x_kj) - log q_j(x_kj) - log pi(eps_kj)`` (``pi``: Normal(0, ``e_sigma``)
    per component; the
    importance ratio of the exact interim posterior to the Laplace draw, with the
    interim ellipticity prior divided out, up to a per-galaxy constant): the
    ``log_base`` of :func:`shearbatch.core.population.log_weights`. ``is_ess`` (M,) is
    the effective sample size of the Laplace importance ratios: the importance-sampling
    efficiency of the Laplace approximation, ``is_ess / num_samples``.
    """
    import numpyro.distributions as dist

    from ..population import ess

    lap = laplace(obs, posterior, settings)
    draws = fit(rng_key, obs, posterior, settings, lap)
    onehot = jnp.asarray(_galaxy_of(posterior), obs.dtype)
    half = (settings.num_samples + 1) // 2
    z = jax.random.normal(rng_key, (half, lap.opt.x.shape[0]), lap.opt.x.dtype)
    z = jnp.concatenate([z, -z], axis=0)[: settings.num_samples]
    xs = lap.opt.x[None, :] + z @ lap.scale.T
    log_q = -0.5 * (z * z) @ onehot + (jnp.log(jnp.diag(lap.chol)) @ onehot)[None, :]
    log_p = jax.vmap(lambda x: galaxy_log_target(posterior, x, obs))(xs)  # (K, M)
    log_r = jnp.where(jnp.isnan(log_p), -jnp.inf, log_p) - log_q
    samples = jax.vmap(posterior.constrain_fn)(xs)
    pi = dist.Normal(0.0, float(e_sigma))  # spec.interim_problem's prior
    log_pi = pi.log_prob(samples["e1"]) + pi.log_prob(samples["e2"])
    stats = dict(draws.stats, interim_log_weight=(log_r - log_pi)[None])
    info = dict(draws.info, is_ess=ess(log_r.T))
    return draws._replace(stats=stats, info=info)


def std_by_site(samples) -> dict[str, np.ndarray]:
    """Posterior std of each site (per galaxy for per-galaxy sites); draws (chain, draw, ...)."""
    return {k: np.std(v, axis=(0, 1)) for k, v in samples.items()}


def diagnose(draws: Draws) -> Diagnosis:
    """Optimiser record, Laplace widths and the mode of one realization."""
    info = draws.info
    flags = 0
    if not np.isfinite(info["potential"]):
        flags |= flag("NONFINITE_POTENTIAL")
    if not bool(info["laplace_ok"]):
        flags |= flag("HESSIAN_NOT_PD")
    # the decrement decides (an optimiser's own rule can stop at the float resolution of
    # a large U, e.g. a misspecified model's chi^2 of 1e7, with the mode already found)
    converged = bool(np.isfinite(info["decrement"]) and info["decrement"] <= DECREMENT_TOL)
    if not converged:
        flags |= flag("OPT_NOT_CONVERGED")
    diag = {
        "optimizer": {
            "converged": converged,
            "stopping_rule_met": bool(info["converged"]),
            "newton_decrement": float(info["decrement"]),
            "n_steps": int(info["n_steps"]),
            "grad_norm_whitened": float(info["grad_norm_whitened"]),
            "potential": float(info["potential"]),
        },
        "laplace": {
            "positive_definite": bool(info["laplace_ok"]),
            "std_unconstrained": [float(s) for s in np.asarray(info["std"])],
            "posterior_std": std_by_site(draws.samples),
        },
        "map_estimate": dict(draws.mode),
    }
    if "is_ess" in info:  # the interim model: Laplace's importance-sampling efficiency
        n = next(iter(draws.samples.values())).shape[1]
        frac = np.asarray(info["is_ess"], float) / n
        diag["importance"] = {"ess_fraction": frac.tolist(), "min": float(frac.min()),
                              "median": float(np.median(frac)), "n_draws": int(n)}  # fmt: skip
    return Diagnosis(draws.stats, diag, flags)


def settings_from(inference) -> MapSettings:
    return MapSettings(**inference["map_config"])


def method(inference) -> Method:
    """MAP + Laplace, from the plain ``inference`` settings."""
    settings = settings_from(inference)
    fit_fn = lambda key, obs, post: fit(key, obs, post, settings)  # noqa: E731
    if inference.get("shear_model") == "interim":
        e_sigma = float(inference.get("interim_e_sigma", 0.5))
        fit_fn = lambda key, obs, post: interim_fit(key, obs, post, settings, e_sigma)  # noqa: E731
    # chunks of 4 lanes: 1.8-3.1x faster than one vmap on CPU (bench/bench_chunking.py)
    return Method("map", fit_fn, diagnose, estimate="mode", cpu_chunk=4)
