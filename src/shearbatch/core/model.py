"""The NumPyro model of ONE realization; nothing else knows about NumPyro sites.

A realization is M stamps ``d_j`` (shape (M, H, W)) sharing one shear g:

    g = (g1, g2) ~ prior(shear) restricted to |g| < 1
    theta_j ~ prior(field)     for each galaxy field given as a distribution
    d_j ~ Normal(render(theta_j, g), sigma)

Fixed fields are constants. The restriction to the unit disk (and |e| < 1 for
intrinsic ellipticities) is a factor that is 0 inside and -inf outside, so the
configured prior is respected exactly inside the disk and the potential is
finite or +inf everywhere (the renderer itself is total, so nothing raises).

Sites: ``g1``, ``g2`` (scalars); per-galaxy latents ``flux``, ``hlr``, ``e1``,
``e2``, ``dx``, ``dy`` with shape (M,) inside the ``galaxy`` plate.

Plate-able: called inside ``numpyro.plate("realization", B, dim=-2)`` with
``obs`` of shape (B, M, H, W), it is the joint model of B independent
realizations (g1, g2: (B, 1); per-galaxy latents: (B, M)); bench/bench_nuts.py
uses this for its joint-chain baseline.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist

from .generate import render_stamps
from .priors import to_distribution

__all__ = ["SHEAR_SITES", "latent_sites", "make_model"]

SHEAR_SITES = ("g1", "g2")


def latent_sites(problem) -> tuple[str, ...]:
    """Names of every latent site: the non-fixed shear components and galaxy fields."""
    shear = tuple(s for s, p in zip(SHEAR_SITES, problem.shear, strict=True) if not p.fixed)
    return shear + tuple(k for k, p in problem.fields._asdict().items() if not p.fixed)


def _disk(a: jnp.ndarray, b: jnp.ndarray) -> jnp.ndarray:
    """log of the indicator of ``a^2 + b^2 < 1``."""
    return jnp.where(a * a + b * b < 1.0, 0.0, -jnp.inf)


def make_model(problem) -> Callable[[jnp.ndarray], None]:
    """``model(obs)`` for one realization of ``problem``; ``obs`` has shape (M, H, W)."""
    fields = problem.fields._asdict()
    sigma = problem.noise_sigma
    m = problem.image.n_objects

    def _site(name, p, plate: bool):
        if p.fixed:
            return jnp.full((m,), p.args[0]) if plate else jnp.asarray(p.args[0])
        return numpyro.sample(name, to_distribution(p))

    def model(obs: jnp.ndarray) -> None:
        lead = obs.shape[:-3]  # () for one realization, (B,) under an outer realization plate
        g1 = _site("g1", problem.shear[0], plate=False)
        g2 = _site("g2", problem.shear[1], plate=False)
        numpyro.factor("g_in_unit_disk", _disk(g1, g2))
        with numpyro.plate("galaxy", m):
            params = {k: _site(k, p, plate=True) for k, p in fields.items()}
            numpyro.factor("e_in_unit_disk", _disk(params["e1"], params["e2"]))
            g = jnp.stack(
                [jnp.broadcast_to(jnp.asarray(v, obs.dtype), (*lead, 1))[..., 0] for v in (g1, g2)],
                axis=-1,
            )
            params = {
                k: jnp.broadcast_to(jnp.asarray(v, obs.dtype), (*lead, m))
                for k, v in params.items()
            }
            render = lambda p, gg: render_stamps(problem, p, gg)  # noqa: E731
            for _ in lead:
                render = jax.vmap(render)
            image = render(params, g)
            numpyro.sample("obs", dist.Normal(image, sigma).to_event(2), obs=obs)

    return model
