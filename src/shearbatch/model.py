"""The NumPyro model of ONE realization; nothing else knows about NumPyro sites.

A realization is M stamps ``d_j`` (shape (M, H, W)) sharing one shear g:

    g = (g1, g2) ~ prior(gal.shear) restricted to |g| < 1
    theta_j ~ prior(gal.<field>)     for each galaxy field given as a distribution
    d_j ~ Normal(render(theta_j, g), sigma)

Fixed fields are constants. The restriction to the unit disk (and |e| < 1 for
intrinsic ellipticities) is a factor that is 0 inside and -inf outside, so the
configured prior is respected exactly inside the disk and the potential is
finite or +inf everywhere (the renderer itself is total, so nothing raises).

Sites: ``g1``, ``g2`` (scalars); per-galaxy latents ``flux``, ``hlr``, ``e1``,
``e2``, ``dx``, ``dy`` with shape (M,) inside the ``galaxy`` plate.
"""

from __future__ import annotations

from collections.abc import Callable

import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist

from .config import Config, Fixed
from .priors import galaxy_params, to_distribution
from .simulate import render_stamps

__all__ = ["SHEAR_SITES", "latent_galaxy_sites", "make_model"]

SHEAR_SITES = ("g1", "g2")


def latent_galaxy_sites(cfg: Config) -> tuple[str, ...]:
    """Names of the per-galaxy latent sites (fields given as distributions)."""
    return tuple(k for k, p in galaxy_params(cfg).items() if not isinstance(p, Fixed))


def _disk(a: jnp.ndarray, b: jnp.ndarray) -> jnp.ndarray:
    """log of the indicator of ``a^2 + b^2 < 1``."""
    return jnp.where(a * a + b * b < 1.0, 0.0, -jnp.inf)


def make_model(cfg: Config) -> Callable[[jnp.ndarray], None]:
    """``model(obs)`` for one realization; ``obs`` has shape (M, H, W)."""
    shear = cfg.gal.shear
    fields = galaxy_params(cfg)
    sigma = cfg.image.noise.sigma
    m = cfg.image.n_objects

    def _site(name, p, plate: bool):
        if isinstance(p, Fixed):
            return jnp.full((m,), p.value) if plate else jnp.asarray(p.value)
        return numpyro.sample(name, to_distribution(p))

    def model(obs: jnp.ndarray) -> None:
        g1 = _site("g1", shear.g1, plate=False)
        g2 = _site("g2", shear.g2, plate=False)
        numpyro.factor("g_in_unit_disk", _disk(g1, g2))
        with numpyro.plate("galaxy", m):
            params = {k: _site(k, p, plate=True) for k, p in fields.items()}
            numpyro.factor("e_in_unit_disk", _disk(params["e1"], params["e2"]))
            g = jnp.stack([jnp.asarray(g1, obs.dtype), jnp.asarray(g2, obs.dtype)])
            params = {
                k: jnp.broadcast_to(jnp.asarray(v, obs.dtype), (m,)) for k, v in params.items()
            }
            image = render_stamps(cfg, params, g)
            numpyro.sample("obs", dist.Normal(image, sigma).to_event(2), obs=obs)

    return model
