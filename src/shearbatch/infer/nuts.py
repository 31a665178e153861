"""NUTS for batches: independent samplers per realization x chain, in lockstep.

For one realization, ``chains`` NUTS samplers (NumPyro's functional
``hmc(potential_fn, algo="NUTS")`` -> ``init_kernel`` / ``sample_kernel``)
run on that realization's potential U(x) = -log p(x, d), each with its own
step size and mass-matrix adaptation (Stan-style windowed warmup: dual
averaging of the step size towards ``target_accept``, Welford estimate of the
(diagonal or dense) inverse mass matrix) and its own key. The chains are
vmapped, and :func:`shearbatch.batch.batched` vmaps realizations, so the
program is B x C independent samplers in lockstep. This is not one joint chain
over the concatenated latents (whose step size would shrink with B and whose
divergences and tree depth would be shared by every realization).

Whitening (``map_init.enabled``): each realization's own MAP x* and Laplace
covariance H^-1 = L L^T define x = x* + L z, and the chains sample z, in
which a near-Gaussian posterior is close to N(0, I) whatever its physical
scale (g has a width of ~1e-5 at Level 0). The mass matrix starts at the
identity (= the Laplace covariance in x) and is adapted in z, where the
Stan-style regularisation of the Welford estimate (which shrinks towards
1e-3 x I, i.e. assumes unit-scale latents) is harmless; in x it swamped
variances of ~1e-10 and forced step sizes of ~0.003. Chain k starts at
z = eps_k (one Laplace standard deviation from the mode, so R-hat can still
see chains that disagree). The affine map has a constant Jacobian, so the
target is unchanged; draws are mapped back to x, then constrained.

Lockstep cost: in one vectorised NUTS iteration every lane waits for the lane
with the deepest tree. ``lockstep_efficiency`` = sum over lanes and iterations
of the leapfrog steps each lane needed / (lanes x the steps of the slowest
lane), per batch; recorded for warmup and sampling separately.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from numpyro.infer.hmc import hmc

from ..batch import InferenceModel, batched
from ..config import MapConfig, NutsConfig
from . import map as map_

__all__ = ["NutsResult", "fit", "lockstep_efficiency", "make_program", "run_chains"]


class NutsResult(NamedTuple):
    samples: dict[str, jax.Array]  # {site: (C, S, *shape)} constrained draws
    diverging: jax.Array  # (C, S)
    n_steps: jax.Array  # (C, S) leapfrog steps per iteration
    tree_depth: jax.Array  # (C, S)
    step_size: jax.Array  # (C, S)
    energy: jax.Array  # (C, S)
    accept_prob: jax.Array  # (C, S)
    potential: jax.Array  # (C, S) U at each draw (lp = -U)
    warmup_n_steps: jax.Array  # (C, W)
    map_ok: jax.Array  # the MAP/Laplace initialisation was valid


def _init(obs, model: InferenceModel, settings: NutsConfig):
    """(centre, L, start spread, ok): the affine map x = centre + L z the chains run through.

    With ``map_init`` the map is the realization's Laplace fit (L the Cholesky
    factor of H^-1), so z is approximately N(0, I) whatever the posterior's scale.
    """
    d = model.x0.shape[0]
    dtype = obs.dtype
    eye = jnp.eye(d, dtype=dtype)
    x0 = model.x0.astype(dtype)
    if not settings.map_init.enabled:
        return x0, eye, 0.1, jnp.asarray(True)
    mi = settings.map_init
    lap = map_.laplace(obs, model=model, settings=MapConfig(num_steps=mi.num_steps))
    ok = lap.ok & jnp.all(jnp.isfinite(lap.scale))
    return jnp.where(ok, lap.opt.x, x0), jnp.where(ok, lap.scale, 0.1 * eye), 1.0, ok


def run_chains(potential, keys, starts, inv_mass, settings: NutsConfig):
    """NUTS chains on one potential, vmapped over (keys, starts): warmup, then draws.

    Returns ``(z, diverging, num_steps, step_size, energy, accept_prob,
    potential_energy)``, each (chains, samples, ...), and the warmup's
    num_steps (chains, warmup).
    """
    init_kernel, sample_kernel = hmc(potential_fn=potential, algo="NUTS")
    depth = (settings.max_tree_depth, settings.max_tree_depth_sampling or settings.max_tree_depth)

    def one_chain(key, x_start):
        state = init_kernel(
            x_start,
            settings.warmup,
            inverse_mass_matrix=inv_mass,
            adapt_mass_matrix=settings.adapt_mass_matrix,
            dense_mass=settings.dense_mass,
            target_accept_prob=settings.target_accept,
            max_tree_depth=depth,
            rng_key=key,
        )

        def warm(s, _):
            s = sample_kernel(s)
            return s, s.num_steps

        def draw(s, _):
            s = sample_kernel(s)
            return s, (
                s.z,
                s.diverging,
                s.num_steps,
                s.adapt_state.step_size,
                s.energy,
                s.accept_prob,
                s.potential_energy,
            )

        state, warm_steps = jax.lax.scan(warm, state, None, length=settings.warmup)
        _, out = jax.lax.scan(draw, state, None, length=settings.samples)
        return out, warm_steps

    return jax.vmap(one_chain)(keys, starts)


def fit(
    rng_key: jax.Array, obs: jax.Array, *, model: InferenceModel, settings: NutsConfig
) -> NutsResult:
    """``chains`` NUTS samplers on ONE realization (batch it with :func:`make_program`)."""
    k_init, k_chains = jax.random.split(rng_key)
    centre, scale, spread, ok = _init(obs, model, settings)
    starts = spread * jax.random.normal(k_init, (settings.chains, centre.shape[0]), obs.dtype)

    def potential(z):
        return model.potential_fn(centre + scale @ z, obs)

    (zw, div, nst, step, energy, acc, pot), warm_steps = run_chains(
        potential, jax.random.split(k_chains, settings.chains), starts, None, settings
    )
    samples = jax.vmap(jax.vmap(lambda w: model.constrain_fn(centre + scale @ w)))(zw)
    depth_used = jnp.ceil(jnp.log2(nst.astype(obs.dtype) + 1.0)).astype(jnp.int32)
    return NutsResult(samples, div, nst, depth_used, step, energy, acc, pot, warm_steps, ok)


def lockstep_efficiency(n_steps) -> float:
    """Useful / executed leapfrog steps of lanes run in lockstep.

    ``n_steps``: (lanes, iterations). Each vectorised iteration costs the
    slowest lane's steps for every lane.
    """
    import numpy as np

    n = np.asarray(n_steps, dtype=float)
    executed = n.shape[0] * n.max(axis=0).sum()
    return float(n.sum() / executed) if executed > 0 else 1.0


def make_program(model: InferenceModel, settings: NutsConfig):
    """The jitted, vmapped NUTS program (build once per campaign and reuse it)."""
    return batched(functools.partial(fit, model=model, settings=settings))
