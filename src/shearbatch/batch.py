"""The ONLY place where realizations are batched.

Everything numerical is written for one realization: a flat unconstrained
parameter vector ``x`` (shape (D,)) and that realization's stamps ``obs``
(shape (M, H, W)). :func:`batched` vmaps such a function over a leading
realization axis of every argument and jits it, so one compiled program serves
every batch of a campaign (same batch size, same config).

Each realization's RNG key derives from its own seed, never from its position
in the batch, so its result does not depend on its companions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree
from numpyro.distributions import biject_to
from numpyro.handlers import seed, trace
from numpyro.infer.util import potential_energy

from .config import Config
from .model import make_model
from .priors import galaxy_params, to_distribution

__all__ = [
    "InferenceModel",
    "batched",
    "build_inference_model",
    "pad_to",
    "realization_keys",
]


class InferenceModel(NamedTuple):
    """One realization's posterior, as pure functions of (x, obs).

    potential_fn(x, obs) -> scalar, minus the log joint density in unconstrained space
    (including the log-Jacobian); constrain_fn(x) -> {site: value} on the constrained
    space; x0: (D,) deterministic initial point (prior means); sites: {site: shape}.
    """

    potential_fn: Callable[[jax.Array, jax.Array], jax.Array]
    constrain_fn: Callable[[jax.Array], dict[str, jax.Array]]
    x0: jax.Array
    sites: dict[str, tuple[int, ...]]
    model: Callable[..., Any]


def build_inference_model(cfg: Config) -> InferenceModel:
    """Trace the single-realization model once (abstractly) and expose flat-vector functions.

    The initial point is every latent's prior mean (mapped to the unconstrained
    space), the same for every realization, so it never depends on the batch.
    """
    model = make_model(cfg)
    im = cfg.image
    dummy = jax.ShapeDtypeStruct((im.n_objects, im.size_y, im.size_x), jnp.result_type(float))
    latent: dict[str, tuple[Any, tuple[int, ...], Any]] = {}

    def _trace(obs):  # abstract evaluation only: records each latent site's support/shape/mean
        tr = trace(seed(model, 0)).get_trace(obs)
        for name, site in tr.items():
            if site["type"] == "sample" and not site["is_observed"]:
                fn = site["fn"]
                latent[name] = (fn.support, tuple(jnp.shape(site["value"])), fn)
        return jnp.zeros(())

    jax.eval_shape(_trace, dummy)
    transforms = {k: biject_to(sup) for k, (sup, _, _) in latent.items()}
    sites = {k: shape for k, (_, shape, _) in latent.items()}
    z0 = {
        k: transforms[k].inv(jnp.broadcast_to(_prior_mean(cfg, k), shape))
        for k, shape in sites.items()
    }
    x0, unravel = ravel_pytree(z0)

    @jax.jit  # traced once per signature; grad/hessian/vmap reuse its jaxpr (fast tracing)
    def potential_fn(x: jax.Array, obs: jax.Array) -> jax.Array:
        pe = potential_energy(model, (obs,), {}, unravel(x))
        return jnp.where(jnp.isnan(pe), jnp.inf, pe)

    def constrain_fn(x: jax.Array) -> dict[str, jax.Array]:
        z = unravel(x)
        return {k: transforms[k](v) for k, v in z.items()}

    return InferenceModel(potential_fn, constrain_fn, x0, sites, model)


def _prior_mean(cfg: Config, site: str) -> jax.Array:
    """Prior mean of a latent site, from the config (concrete, batch independent)."""
    if site in ("g1", "g2"):
        p = getattr(cfg.gal.shear, site)
    else:
        p = galaxy_params(cfg)[site]
    return jnp.asarray(to_distribution(p).mean)


def batched(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``jit(vmap(fn))`` over the leading realization axis of every argument."""
    return jax.jit(jax.vmap(fn))


def realization_keys(seeds: Sequence[int], rng_seed: int = 0) -> jax.Array:
    """Per-realization inference keys, (B, 2): ``fold_in(PRNGKey(seed), rng_seed)``.

    The generator derives its keys with ``split(PRNGKey(seed))``, so inference
    randomness never reuses the data's.
    """
    base = jax.vmap(jax.random.PRNGKey)(jnp.asarray(seeds, dtype=jnp.uint32))
    return jax.vmap(lambda k: jax.random.fold_in(k, 1_000_003 + rng_seed))(base)


def pad_to(items: Sequence[Any], size: int) -> list[Any]:
    """Pad a short batch by repeating its last item (padding lanes are never written)."""
    if not items:
        raise ValueError("cannot pad an empty batch")
    return list(items) + [items[-1]] * (size - len(items))
