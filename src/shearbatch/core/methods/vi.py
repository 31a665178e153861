"""Variational inference per realization: Gaussian guides in the unconstrained space.

For one realization with potential U(x) = -log p(x, d) (unconstrained, with the
log-Jacobian), fit q(x) = N(mu, S S^T) by maximising the ELBO with the
reparameterisation x = mu + S eps, eps ~ N(0, I):

    -ELBO(mu, S) = E_eps[ U(mu + S eps) ] - log |det S| + const

estimated with ``num_particles`` draws per step and minimised with Adam
(cosine-decayed learning rate). Guides (the same families as NumPyro's
autoguides, on the flat latent vector):

- ``normal`` (default): S diagonal, ``S = diag(exp(log_sd))`` (AutoNormal's family);
- ``mvn``: S lower triangular with positive diagonal (AutoMultivariateNormal's).

Both start from the realization's own MAP and Laplace covariance (mu = x*,
S S^T = H^-1), so VI only has to correct the Gaussian approximation; starting
from a fixed prior-scale guide makes the scale converge slowly and noisily
(measured: std 2x too large after SHINE's default 5000 steps at lr 1e-3).

``num_samples`` draws from the fitted guide are written as the posterior. The
loss is flat (converged) when the mean loss of the last 10% of steps differs
from that of the previous 10% by less than 3 standard errors.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ...strict_model import Count, Positive, StrictModel
from ..failure_flags import flag
from . import map as map_
from .base import Diagnosis, Draws, Method

__all__ = ["ViConfig", "ViInfo", "ViSettings", "fit", "method"]

#: the ELBO is flat (converged) when its last 10% and previous 10% differ by fewer
#: standard errors than this
MAX_TREND_Z = 3.0


class ViConfig(StrictModel):
    """VI settings (``method: vi``); the Laplace start uses ``inference.map_config``."""

    guide: Literal["normal", "mvn"] = "normal"
    """Gaussian guide on the unconstrained latents: mean-field (normal) or full-rank (mvn)."""
    num_steps: Count = 5000
    """[iterations] SVI steps."""
    learning_rate: Positive = 0.001
    """[step size] Adam learning rate."""
    num_samples: Count = 1000
    """[draws] Guide draws written as the posterior."""
    num_particles: Count = 1
    """[count] ELBO particles per step."""


class ViSettings(NamedTuple):
    """What a VI fit reads: its own section and the MAP settings of its Laplace start."""

    vi: ViConfig
    map_settings: map_.MapConfig


class ViInfo(NamedTuple):
    """VI's record of one fit (:class:`~.base.Info`), read by :func:`diagnose`."""

    losses: jax.Array  # (num_steps,) the loss (-ELBO) at every step
    final_loss: jax.Array  # mean loss of the last 10% of steps
    trend_z: jax.Array  # |last 10% - previous 10%| / its standard error
    laplace_ok: jax.Array  # the Laplace start was valid


def _scale_matrix(params: dict[str, jax.Array], guide: str) -> jax.Array:
    if guide == "normal":
        return jnp.diag(jnp.exp(params["log_sd"]))
    tril = jnp.tril(params["tril"], k=-1)
    return tril + jnp.diag(jnp.exp(params["log_diag"]))


def _init_params(lap: map_.Laplace, guide: str, layout) -> dict[str, jax.Array]:
    d = lap.opt.x.shape[0]
    fallback = 0.1 * jnp.eye(d, dtype=lap.opt.x.dtype)
    if guide == "normal":  # the Laplace marginal widths, from the Hessian's blocks (O(M))
        sd = jnp.where(lap.ok, lap.std, 0.1)
        return {"mu": lap.opt.x, "log_sd": jnp.log(sd)}
    # the full-rank guide is a dense D x D factor by definition: its start is the dense
    # Laplace covariance
    c = jnp.where(lap.ok, jnp.linalg.cholesky(map_.covariance(lap, layout)), fallback)
    c = jnp.where(jnp.all(jnp.isfinite(c)), c, fallback)
    return {"mu": lap.opt.x, "tril": jnp.tril(c, k=-1), "log_diag": jnp.log(jnp.diag(c))}


def fit(rng_key: jax.Array, obs: jax.Array, model, settings: ViSettings) -> Draws:
    """VI for ONE realization (``model``: a :class:`~shearbatch.core.posterior.Posterior`)."""
    k_fit, k_draw = jax.random.split(rng_key)
    lap = map_.laplace(obs, model, settings.map_settings, model.potential_fn)
    cfg = settings.vi
    params = _init_params(lap, cfg.guide, map_.layout_of(model))
    d = lap.opt.x.shape[0]
    dtype = lap.opt.x.dtype
    potential = jax.vmap(model.potential_fn, in_axes=(0, None))

    def loss_fn(p, key):
        s = _scale_matrix(p, cfg.guide)
        eps = jax.random.normal(key, (cfg.num_particles, d), dtype)
        xs = p["mu"][None, :] + eps @ s.T
        return jnp.mean(potential(xs, obs)) - jnp.sum(jnp.log(jnp.abs(jnp.diag(s))))

    schedule = optax.cosine_decay_schedule(cfg.learning_rate, cfg.num_steps, alpha=0.05)
    opt = optax.adam(schedule)

    def step(carry, key):
        p, st = carry
        loss, g = jax.value_and_grad(loss_fn)(p, key)
        updates, st = opt.update(g, st, p)
        return (optax.apply_updates(p, updates), st), loss

    keys = jax.random.split(k_fit, cfg.num_steps)
    (params, _), losses = jax.lax.scan(step, (params, opt.init(params)), keys)

    s = _scale_matrix(params, cfg.guide)
    eps = jax.random.normal(k_draw, (cfg.num_samples, d), dtype)
    samples = jax.vmap(model.constrain_fn)(params["mu"][None, :] + eps @ s.T)
    n = max(2, cfg.num_steps // 10)
    last, prev = losses[-n:], losses[-2 * n : -n]
    se = jnp.sqrt(jnp.var(last) / n + jnp.var(prev) / max(1, prev.shape[0]))
    trend = jnp.abs(jnp.mean(last) - jnp.mean(prev)) / jnp.maximum(se, 1e-30)
    final = jnp.mean(last)
    info = ViInfo(losses=losses, final_loss=final, trend_z=trend, laplace_ok=lap.ok)
    stats = {"final_loss": jnp.full((1, cfg.num_samples), final)}
    samples = {k: v[None] for k, v in samples.items()}
    return Draws(samples, stats, model.constrain_fn(params["mu"]), info)


def diagnose(draws: Draws) -> Diagnosis:
    """ELBO record of one realization: converged when the loss shows no trend."""
    info: ViInfo = draws.info
    z = float(info.trend_z)
    converged = bool(np.isfinite(z) and z < MAX_TREND_Z)
    flags = 0
    if not np.isfinite(info.final_loss):
        flags |= flag("NONFINITE_ELBO")
    if not converged:
        flags |= flag("ELBO_NOT_FLAT")
    diag = {
        "elbo": {
            "final_loss": float(info.final_loss),
            "trend_z": z,
            "n_steps": int(np.asarray(info.losses).shape[0]),
            "converged": converged,
            "laplace_init": bool(info.laplace_ok),
        },
        "posterior_std": map_.std_by_site(draws.samples),
    }
    return Diagnosis(draws.stats, diag, flags)


def method(cfg: ViConfig, *, map_config: map_.MapConfig) -> Method:
    """Gaussian-guide VI with the settings ``cfg`` (``inference.vi_config``), started at
    the Laplace fit of ``map_config`` (``inference.map_config``)."""
    settings = ViSettings(cfg, map_config)
    return Method("vi", lambda key, obs, post: fit(key, obs, post, settings), diagnose)
