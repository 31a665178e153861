"""Variational inference per realization (NumPyro SVI with an autoguide).

For one realization, maximise the ELBO

    L(phi) = E_{q_phi(z)} [log p(z, d) - log q_phi(z)]

with Adam on the guide's parameters phi: ``AutoNormal`` (mean-field Gaussian in
the unconstrained space, default) or ``AutoMultivariateNormal`` (full
covariance). ``num_samples`` draws from the fitted guide are written as the
posterior (one chain). The guide object is built once from the single
realization model; every realization has its own parameters phi (the program is
vmapped by :func:`shearbatch.batch.batched`), its own key and its own data.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
from numpyro.infer import SVI, Trace_ELBO
from numpyro.infer.autoguide import AutoMultivariateNormal, AutoNormal
from numpyro.infer.initialization import init_to_mean

from ..batch import InferenceModel, batched
from ..config import ViConfig

__all__ = ["ViResult", "fit", "make_program"]


class ViResult(NamedTuple):
    samples: dict[str, jax.Array]  # {site: (S, *shape)}
    losses: jax.Array  # (num_steps,) negative ELBO per step
    final_loss: jax.Array  # mean negative ELBO over the last 10% of steps
    rel_change: jax.Array  # |mean(last 10%) - mean(previous 10%)| / max(1, |final|)


def _svi(model: InferenceModel, settings: ViConfig) -> SVI:
    guide_cls = AutoNormal if settings.guide == "normal" else AutoMultivariateNormal
    guide = guide_cls(model.model, init_loc_fn=init_to_mean())
    schedule = optax.cosine_decay_schedule(settings.learning_rate, settings.num_steps, alpha=0.1)
    return SVI(model.model, guide, optax.adam(schedule), Trace_ELBO())


def fit(rng_key: jax.Array, obs: jax.Array, *, svi: SVI, settings: ViConfig) -> ViResult:
    """SVI for ONE realization (batch it with :func:`make_program`)."""
    k_init, k_fit, k_draw = jax.random.split(rng_key, 3)
    state = svi.init(k_init, obs)

    def step(state, _):
        state, loss = svi.update(state, obs)
        return state, loss

    state = state._replace(rng_key=k_fit)
    state, losses = jax.lax.scan(step, state, None, length=settings.num_steps)
    params = svi.get_params(state)
    samples = svi.guide.sample_posterior(k_draw, params, sample_shape=(settings.num_samples,))
    n = max(1, settings.num_steps // 10)
    last = jnp.mean(losses[-n:])
    prev = jnp.mean(losses[-2 * n : -n]) if settings.num_steps >= 2 * n else last
    rel = jnp.abs(last - prev) / jnp.maximum(1.0, jnp.abs(last))
    return ViResult(samples, losses, last, rel)


def make_program(model: InferenceModel, settings: ViConfig, example_obs: jax.Array):
    """The jitted, vmapped SVI program; the guide is set up once on ``example_obs``."""
    svi = _svi(model, settings)
    svi.init(jax.random.PRNGKey(0), example_obs)  # concrete prototype trace, outside vmap
    return batched(functools.partial(fit, svi=svi, settings=settings))
