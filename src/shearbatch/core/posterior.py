"""One realization's posterior as pure functions of a flat unconstrained vector.

Built from the model of :mod:`shearbatch.core.model` with NumPyro's own
machinery (a ``trace`` of the model for the latent sites and their supports,
``biject_to`` for the transforms, ``potential_energy`` for U), so every method
works on:

- ``potential_fn(x, obs)``: U(x) = -log p(x, d) in unconstrained space,
  including the log-Jacobian of each support transform (what HMC samples);
- ``mode_fn(x, obs)``: -log p(T(x), d), the log posterior density in the
  physical parameters without the transforms' Jacobian: its minimiser over x
  is the posterior mode in the physical parameters (what a MAP estimate is),
  whereas U's is shifted by the Jacobian of each bounded support (e.g. a
  ``Uniform`` prior on g: m = -0.02 at S/N 30, measured);
- ``constrain_fn(x)``: ``{site: value}`` on the constrained space;
- ``x0``: deterministic initial point, every latent at its prior mean (the same
  for every realization, so it never depends on the batch);
- ``hessian(f)``: ``(x, obs) -> d^2 f / dx^2`` for ``f`` = ``potential_fn`` or
  ``mode_fn``. For the shear model (:func:`build_posterior`) it uses the
  block-arrow sparsity of one realization: galaxy j's latents meet only
  their own stamp, their own prior and the shear, so H[(j, k), (j', k')] = 0
  for j != j'. One Hessian-vector product per *colour* (a per-galaxy site: all
  M galaxies at once, ``H (sum_j e_(j,k))`` has galaxy j's entries of column
  (j, k) in galaxy j's rows; a shear site: its own column, which by symmetry is
  also its row) gives the whole matrix: 2 + 6 products whatever M, where
  ``jax.hessian`` needs 2 + 6M (curvature-based colouring, as in sparse
  automatic differentiation, e.g. Gebremedhin et al. 2005, SIAM Rev. 47, 629).

The model is traced abstractly (``jax.eval_shape``): NumPyro's
``initialize_model`` would run it eagerly, which compiled ~200 small XLA
programs per process (+20 s on the 2-core CPU, measured) for the same result.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from numpyro.distributions import Normal, biject_to
from numpyro.handlers import block, seed, substitute, trace
from numpyro.infer.initialization import init_to_uniform
from numpyro.infer.util import log_density, potential_energy

from .block_arrow import Layout
from .model import SHEAR_SITES, make_model
from .priors import prior_mean

#: the observed site of the pixel likelihood (core/model.py)
LIKELIHOOD_SITE = "obs"

__all__ = [
    "LIKELIHOOD_SITE",
    "Posterior",
    "arrow_hessian",
    "arrow_layout",
    "build_posterior",
    "galaxy_posterior",
    "posterior_of",
]


class Posterior(NamedTuple):
    """potential_fn(x, obs) -> scalar (with the Jacobian); mode_fn(x, obs) -> scalar
    (without); constrain_fn(x) -> {site: value}; x0: (D,) initial point;
    sites: {site: shape}; model: the NumPyro model; hessian(f) -> (x, obs) -> (D, D) (dense:
    tests and benchmarks); layout: where the block-arrow Hessian's blocks sit
    (:class:`shearbatch.core.block_arrow.Layout`; None: not block-arrow, the dense algebra)."""

    potential_fn: Callable[[jax.Array, jax.Array], jax.Array]
    mode_fn: Callable[[jax.Array, jax.Array], jax.Array]
    constrain_fn: Callable[[jax.Array], dict[str, jax.Array]]
    x0: jax.Array
    sites: dict[str, tuple[int, ...]]
    model: Callable[..., Any]
    hessian: Callable[[Callable], Callable] = jax.hessian
    layout: Layout | None = None
    #: (x, obs) -> (mean, sd) of the Gaussian pixel likelihood (site ``obs``), (M, H, W)
    #: each; None when the model has no such site (Gauss-Newton then does not apply)
    image_fn: Callable[[jax.Array, jax.Array], tuple[jax.Array, jax.Array]] | None = None
    #: mode_fn / potential_fn without that likelihood (priors, support factors and, for
    #: potential_fn, the transforms' Jacobian): what Gauss-Newton adds exactly
    prior_mode_fn: Callable[[jax.Array, jax.Array], jax.Array] | None = None
    prior_potential_fn: Callable[[jax.Array, jax.Array], jax.Array] | None = None
    #: the problem (:class:`shearbatch.spec.Problem`) :func:`build_posterior` built it from;
    #: None for :func:`posterior_of`'s
    problem: Any = None

    def prior_part(self, objective: Callable) -> Callable | None:
        """The likelihood-free part of ``objective`` (``mode_fn`` or ``potential_fn``)."""
        if objective is self.mode_fn:
            return self.prior_mode_fn
        if objective is self.potential_fn:
            return self.prior_potential_fn
        return None


def build_posterior(problem) -> Posterior:
    """The flat-vector posterior of one realization of ``problem``; every latent
    starts at its prior mean."""
    im = problem.image
    dummy = jax.ShapeDtypeStruct((im.n_objects, im.ny, im.nx), jnp.result_type(float))
    priors = dict(zip(SHEAR_SITES, problem.shear, strict=True)) | problem.fields._asdict()
    post = posterior_of(make_model(problem), dummy, {k: prior_mean(p) for k, p in priors.items()})
    return post._replace(
        hessian=arrow_hessian(post.x0, post.sites, im.n_objects),
        layout=arrow_layout(post.x0, post.sites, im.n_objects),
        problem=problem,
    )


def galaxy_posterior(post: Posterior) -> Posterior:
    """The posterior of ONE galaxy of ``post``'s problem (the same model with one object:
    6 latents, data (1, H, W)), for a model whose galaxies are independent (no shear
    latent: the interim model). Its ``potential_fn`` on galaxy j's latents and stamp is
    galaxy j's term of ``post``'s potential (its stamp's likelihood, its priors, its
    transforms' Jacobian), so M such lanes sample the M-galaxy posterior galaxy by galaxy
    (tests/core/test_interim_nuts.py)."""
    p = post.problem
    if p is None:
        raise ValueError("galaxy_posterior: a posterior from build_posterior is needed")
    if not all(s.fixed for s in p.shear):
        raise ValueError("galaxy_posterior: the galaxies share a shear latent (joint model)")
    return build_posterior(p._replace(image=p.image._replace(n_objects=1)))


def _layout(x0: jax.Array, sites: dict[str, tuple[int, ...]], m: int):
    """Per flat index: its colour and its galaxy (-1 for a shear / scalar site), in the
    order of ``ravel_pytree`` (sorted site names)."""
    colour, galaxy = [], []
    for name in sorted(sites):
        shape = sites[name]
        if shape == ():
            colour.append(len(set(colour)))
            galaxy.append(-1)
        elif shape == (m,):
            colour += [len(set(colour))] * m
            galaxy += list(range(m))
        else:  # not the shear model's layout
            return None
    if len(colour) != x0.shape[0]:
        return None
    return np.asarray(colour), np.asarray(galaxy)


def arrow_layout(x0: jax.Array, sites: dict[str, tuple[int, ...]], m: int) -> Layout | None:
    """Where the blocks of the block-arrow Hessian of M galaxies sharing a shear sit in
    the flat vector (:mod:`shearbatch.core.block_arrow`); None when ``sites`` are not that
    layout (then :func:`shearbatch.core.block_arrow.dense_layout` applies)."""
    lay = _layout(x0, sites, m)
    if lay is None or not np.any(lay[1] >= 0):
        return None
    colour, galaxy = lay
    shared = np.flatnonzero(galaxy < 0)
    per = colour[galaxy >= 0]
    local_colour = np.unique(per)  # one colour per galaxy site, in flat order
    local = np.stack([np.flatnonzero((colour == c) & (galaxy >= 0)) for c in local_colour], 1)
    # local[j, s]: galaxy j's latent of site s (sites store their M values in galaxy order)
    return Layout(shared, local, colour[shared], local_colour, int(colour.max()) + 1)


def arrow_hessian(x0: jax.Array, sites: dict[str, tuple[int, ...]], m: int):
    """``hessian(f)`` for the block-arrow posterior of M galaxies sharing a shear (see the
    module docstring); ``jax.hessian`` when colouring saves nothing (M = 1)."""
    lay = _layout(x0, sites, m)
    if lay is None or len(set(lay[0].tolist())) >= x0.shape[0]:
        return jax.hessian
    colour, galaxy = lay
    n_col = int(colour.max()) + 1
    tangents = np.eye(n_col)[colour].T  # (C, D): indicator of each colour
    shared = galaxy < 0
    same = (galaxy[:, None] == galaxy[None, :]) & ~shared[None, :]  # (i, l): one galaxy
    from_col = shared[None, :] | same  # H[i, l] = Hv_{colour(l)}[i]: l shared, or one galaxy
    from_row = shared[:, None] & ~shared[None, :]  # H[i, l] = H[l, i] = Hv_{colour(i)}[l]

    def hessian(f: Callable) -> Callable:
        grad = jax.grad(f)

        def hess(x: jax.Array, obs: jax.Array) -> jax.Array:
            t = jnp.asarray(tangents, x.dtype)
            hv = jax.vmap(lambda v: jax.jvp(lambda y: grad(y, obs), (x,), (v,))[1])(t)  # (C, D)
            by_col = hv[colour, :].T  # [i, l] = Hv_{colour(l)}[i]
            by_row = hv[colour, :]  # [i, l] = Hv_{colour(i)}[l]
            zero = jnp.zeros((), x.dtype)
            return jnp.where(from_col, by_col, jnp.where(from_row, by_row, zero))

        return hess

    return hessian


def posterior_of(model, obs: jax.ShapeDtypeStruct, init: dict[str, float]) -> Posterior:
    """The flat-vector posterior of any NumPyro ``model(obs)`` (``obs``: the data's shape and
    dtype); ``init`` gives each latent site's (constrained) starting value."""
    latent: dict[str, tuple[Any, tuple[int, ...]]] = {}
    gaussian: list[bool] = []

    def _trace(obs):  # abstract evaluation only: records each latent site's support and shape
        tr = trace(substitute(seed(model, 0), substitute_fn=init_to_uniform)).get_trace(obs)
        for name, site in tr.items():
            if site["type"] == "sample" and not site["is_observed"]:
                latent[name] = (site["fn"].support, tuple(jnp.shape(site["value"])))
        lik = tr.get(LIKELIHOOD_SITE, {}).get("fn")
        gaussian.append(isinstance(getattr(lik, "base_dist", lik), Normal))
        return jnp.zeros(())

    jax.eval_shape(_trace, obs)
    transforms = {k: biject_to(sup) for k, (sup, _) in latent.items()}
    sites = {k: shape for k, (_, shape) in latent.items()}
    z0 = {k: transforms[k].inv(jnp.broadcast_to(init[k], sh)) for k, sh in sites.items()}
    x0, unravel = ravel_pytree(z0)

    @jax.jit  # traced once per signature; grad/hessian/vmap reuse its jaxpr (fast tracing)
    def potential_fn(x: jax.Array, obs: jax.Array) -> jax.Array:
        pe = potential_energy(model, (obs,), {}, unravel(x))
        return jnp.where(jnp.isnan(pe), jnp.inf, pe)

    def constrain_fn(x: jax.Array) -> dict[str, jax.Array]:
        z = unravel(x)
        return {k: transforms[k](v) for k, v in z.items()}

    @jax.jit
    def mode_fn(x: jax.Array, obs: jax.Array) -> jax.Array:
        lp = -log_density(model, (obs,), {}, constrain_fn(x))[0]
        return jnp.where(jnp.isnan(lp), jnp.inf, lp)

    post = Posterior(potential_fn, mode_fn, constrain_fn, x0, sites, model)
    if not gaussian[0]:
        return post
    prior_model = block(model, hide=[LIKELIHOOD_SITE])

    def image_fn(x: jax.Array, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        tr = trace(substitute(model, data=constrain_fn(x))).get_trace(obs)
        fn = tr[LIKELIHOOD_SITE]["fn"]
        base = getattr(fn, "base_dist", fn)
        return base.loc, jnp.broadcast_to(base.scale, jnp.shape(base.loc))

    @jax.jit
    def prior_potential_fn(x: jax.Array, obs: jax.Array) -> jax.Array:
        return potential_energy(prior_model, (obs,), {}, unravel(x))

    @jax.jit
    def prior_mode_fn(x: jax.Array, obs: jax.Array) -> jax.Array:
        return -log_density(prior_model, (obs,), {}, constrain_fn(x))[0]

    return post._replace(
        image_fn=image_fn, prior_mode_fn=prior_mode_fn, prior_potential_fn=prior_potential_fn
    )
