"""The interim model (``inference.shear_model: interim``) for any method: one wrapper.

A method that can fit the interim model gives its per-galaxy variant as
:attr:`~.base.Method.interim`: a :class:`~.base.Method` whose draws are laid out
``(chain, draw, galaxy)``, either the exact interim posterior's (:func:`per_galaxy`:
each galaxy its own fit, as NUTS does) or proposal draws with their per-galaxy log
importance ratio ``p(d_j, x) / q_j(x)`` as the statistic :data:`LOG_RATIO` (MAP +
Laplace). :func:`as_interim` turns that variant into the method the engine runs: it
divides the interim ellipticity prior ``pi`` (Normal(0, ``e_sigma``) per component,
:func:`shearbatch.spec.interim_problem`) out of every draw's weight, giving the
statistic ``interim_log_weight`` = ``log_ratio - log pi(e)`` (``-log pi(e)`` for exact
draws): the ``log_base`` of :func:`shearbatch.core.population.log_weights`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from .base import Draws, Method

__all__ = ["LOG_RATIO", "WEIGHT", "as_interim", "per_galaxy"]

#: the per-galaxy statistic a variant with proposal draws returns: each draw's log
#: importance ratio to the interim posterior, up to a per-galaxy constant (consumed by
#: :func:`as_interim`, not written)
LOG_RATIO = "interim_log_ratio"
#: the statistic :func:`as_interim` writes (posterior.nc's ``sample_stats``)
WEIGHT = "interim_log_weight"


def as_interim(method: Method, e_sigma: float) -> Method:
    """``method``'s per-galaxy variant (:attr:`~.base.Method.interim`) with the interim
    prior Normal(0, ``e_sigma``) divided out of each draw's weight (:data:`WEIGHT`)."""
    variant = method.interim
    if variant is None:
        raise ValueError(
            f"method {method.name} cannot fit the interim model (shear_model: interim)"
        )

    def reweight(draws: Draws) -> Draws:
        import numpyro.distributions as dist

        stats = dict(draws.stats)
        log_r = stats.pop(LOG_RATIO, None)
        pi = dist.Normal(0.0, float(e_sigma))  # spec.interim_problem's prior
        log_pi = pi.log_prob(draws.samples["e1"]) + pi.log_prob(draws.samples["e2"])
        stats[WEIGHT] = -log_pi if log_r is None else log_r - log_pi
        return draws._replace(stats=stats)

    def fit(rng_key: jax.Array, obs: jax.Array, posterior: Any) -> Draws:
        return reweight(variant.fit(rng_key, obs, posterior))

    fit.__wrapped__ = variant.fit  # type: ignore[attr-defined]  # its code names the program
    fit_batch = None
    if variant.fit_batch is not None:  # elementwise: the same per realization as ``fit``

        def fit_batch(keys: jax.Array, obs: jax.Array, posterior: Any, chunk: Any) -> Draws:
            return reweight(variant.fit_batch(keys, obs, posterior, chunk))

        fit_batch.__wrapped__ = variant.fit_batch  # type: ignore[attr-defined]
    return variant._replace(fit=fit, fit_batch=fit_batch, interim=None)


def per_galaxy(fit: Callable[[jax.Array, jax.Array, Any], Draws]) -> Callable[..., Draws]:
    """The interim fit of a method whose draws are exact: ``fit`` (ONE realization's)
    on each galaxy alone.

    Without a shear latent the galaxies are independent, so each is its own fit on its
    6 latents and its stamp (:func:`shearbatch.core.posterior.galaxy_posterior`: its
    stamp's likelihood and its priors). The M galaxies are vmapped, and
    :func:`shearbatch.core.batching.batched` vmaps realizations: B x M independent
    lanes (x the method's chains) in one program. Galaxy j's key is
    ``fold_in(rng_key, j)``, so its draws do not depend on the other galaxies. Draws and
    per-draw statistics are laid out ``(chain, draw, galaxy)``, the mode ``(galaxy,)``
    per site, and ``info`` has a leading galaxy axis."""

    def fit_galaxies(rng_key: jax.Array, obs: jax.Array, posterior: Any) -> Draws:
        from ..posterior import galaxy_posterior

        with jax.ensure_compile_time_eval():
            one = galaxy_posterior(posterior)
        m = obs.shape[0]
        keys = jax.vmap(lambda j: jax.random.fold_in(rng_key, j))(jnp.arange(m))
        lanes = jax.vmap(lambda k, d: fit(k, d[None], one))(keys, obs)
        last = lambda v: jnp.moveaxis(v, 0, -1)  # noqa: E731  (M, C, S) -> (C, S, M)
        samples = {k: last(v[..., 0]) for k, v in lanes.samples.items()}
        stats = {k: last(v) for k, v in lanes.stats.items()}
        mode = {k: v[:, 0] for k, v in lanes.mode.items()}
        return Draws(samples, stats, mode, lanes.info)  # info: (M, ...) per galaxy

    fit_galaxies.__wrapped__ = fit  # type: ignore[attr-defined]  # its code names the program
    return fit_galaxies
