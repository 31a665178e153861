"""MAP per realization (L-BFGS or Adam) plus a Laplace approximation.

For one realization with potential U(x) = -log p(x, d) in unconstrained space:

    x* = argmin U(x)                       (optax L-BFGS with zoom line search, or Adam)
    Sigma = H^{-1},  H = d^2 U / dx^2 (x*)  (Laplace approximation)

The written posterior is ``num_samples`` draws of N(x*, Sigma), mapped to the
constrained space. Draws come in antithetic pairs (x* + L^-T eps, x* - L^-T eps
with H = L L^T), so the draw mean of every unconstrained latent (g1, g2 among
them) equals the mode exactly and the draw std estimates the Laplace width.

The optimiser stops per realization when the relative decrease of U in one
step falls below ``tol`` (|U_k - U_{k+1}| <= tol max(1, |U_{k+1}|)) or after
``num_steps``, or when a step fails to decrease U (the float resolution of U is
reached; ``converged`` is then true unless the step budget ran out); under :func:`shearbatch.batch.batched` a converged lane is frozen
while others continue, and nothing couples lanes (no global-norm clipping, no
stopping on a summed loss).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from ..batch import InferenceModel, batched
from ..config import MapConfig

__all__ = ["MapResult", "OptResult", "default_tol", "fit", "optimize", "run"]


class OptResult(NamedTuple):
    x: jax.Array  # (D,) mode, unconstrained
    potential: jax.Array  # U(x)
    grad_norm: jax.Array  # |dU/dx| at x
    n_steps: jax.Array
    converged: jax.Array


class MapResult(NamedTuple):
    opt: OptResult
    std: jax.Array  # (D,) Laplace std of the unconstrained latents
    laplace_ok: jax.Array  # Hessian finite and positive definite
    samples: dict[str, jax.Array]  # {site: (S, *shape)} constrained draws
    log_q: jax.Array  # (S,) log density of each draw under the Laplace Gaussian (+ const)


def default_tol(dtype) -> float:
    """Relative-decrease tolerance: 1e-12 in float64, 1e-6 in float32."""
    return 1e-12 if jnp.dtype(dtype) == jnp.float64 else 1e-6


def optimize(
    x0: jax.Array,
    obs: jax.Array,
    potential_fn,
    *,
    num_steps: int,
    optimizer: str = "lbfgs",
    learning_rate: float = 0.1,
    tol: float | None = None,
) -> OptResult:
    """Minimise ``potential_fn(x, obs)`` from ``x0`` for ONE realization."""
    fun = functools.partial(lambda x, o: potential_fn(x, o), o=obs)
    tol = default_tol(x0.dtype) if tol is None else tol
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
        _, _, f, i, done = c
        return (i < num_steps) & ~done & jnp.isfinite(f)

    def body(c):
        x, state, f, i, _ = c
        value, grad = value_and_grad(x, state=state)
        if optimizer == "lbfgs":
            updates, state = opt.update(grad, state, x, value=value, grad=grad, value_fn=fun)
        else:
            updates, state = opt.update(grad, state, x)
        x_new = optax.apply_updates(x, updates)
        f_new = fun(x_new) if optimizer != "lbfgs" else optax.tree_utils.tree_get(state, "value")
        small = jnp.abs(f - f_new) <= tol * jnp.maximum(1.0, jnp.abs(f_new))
        stalled = f_new > f  # at the float resolution of U: no further progress possible
        return x_new, state, f_new, i + 1, small | stalled

    init = (x0, opt.init(x0), f0, jnp.asarray(0), jnp.asarray(False))
    x, _, f, n, done = jax.lax.while_loop(cond, body, init)
    grad = jax.grad(fun)(x)
    return OptResult(x, f, jnp.linalg.norm(grad), n, done & jnp.isfinite(f) & (n < num_steps))


def fit(
    rng_key: jax.Array, obs: jax.Array, *, model: InferenceModel, settings: MapConfig
) -> MapResult:
    """MAP + Laplace for ONE realization (batch it with :func:`run`)."""
    x0 = model.x0.astype(obs.dtype)
    opt = optimize(
        x0,
        obs,
        model.potential_fn,
        num_steps=settings.num_steps,
        optimizer=settings.optimizer,
        learning_rate=settings.learning_rate,
        tol=settings.tol,
    )
    hess = jax.hessian(model.potential_fn)(opt.x, obs)
    hess = 0.5 * (hess + hess.T)
    chol = jnp.linalg.cholesky(hess)
    ok = jnp.all(jnp.isfinite(chol)) & jnp.all(jnp.isfinite(hess))
    d = x0.shape[0]
    eye = jnp.eye(d, dtype=x0.dtype)
    linv_t = jax.scipy.linalg.solve_triangular(chol.T, eye, lower=False)  # L^-T
    std = jnp.sqrt(jnp.sum(linv_t * linv_t, axis=1))  # sqrt diag(L^-T L^-1)
    half = (settings.num_samples + 1) // 2
    eps = jax.random.normal(rng_key, (half, d), x0.dtype)
    eps = jnp.concatenate([eps, -eps], axis=0)[: settings.num_samples]
    xs = opt.x[None, :] + eps @ linv_t.T
    samples = jax.vmap(model.constrain_fn)(xs)
    log_q = -0.5 * jnp.sum(eps * eps, axis=1) + jnp.sum(jnp.log(jnp.diag(chol)))
    return MapResult(opt, std, ok, samples, log_q)


def run(keys: jax.Array, obs: jax.Array, *, model: InferenceModel, settings: MapConfig) -> MapResult:
    """Batched MAP + Laplace: ``keys`` (B, 2), ``obs`` (B, M, H, W)."""
    return make_program(model, settings)(keys, obs)


def make_program(model: InferenceModel, settings: MapConfig):
    """The jitted, vmapped program (build once per campaign and reuse it)."""
    return batched(functools.partial(fit, model=model, settings=settings))
