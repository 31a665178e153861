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

Initialisation (``map_init.enabled``): each realization's own MAP x* and
Laplace covariance H^-1. Chain k starts at x* + L^-T eps_k (one Laplace
standard deviation, so R-hat can still see chains that disagree) with the
Laplace variances (diagonal or dense) as the initial inverse mass matrix,
which shortens warmup.

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
    """Centre, init scale and initial inverse mass matrix of one realization's chains."""
    d = model.x0.shape[0]
    dtype = obs.dtype
    eye = jnp.eye(d, dtype=dtype)
    if not settings.map_init.enabled:
        x0 = model.x0.astype(dtype)
        return x0, 0.1 * eye, None, jnp.asarray(True)
    mi = settings.map_init
    lap = map_.laplace(obs, model=model, settings=MapConfig(num_steps=mi.num_steps))
    ok = lap.ok & jnp.all(jnp.isfinite(lap.scale))
    scale = jnp.where(ok, lap.scale, 0.1 * eye)
    cov = scale @ scale.T
    inv_mass = cov if settings.dense_mass else jnp.diag(cov)
    return jnp.where(ok, lap.opt.x, model.x0.astype(dtype)), scale, inv_mass, ok


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
    centre, scale, inv_mass, ok = _init(obs, model, settings)
    d = centre.shape[0]
    eps = jax.random.normal(k_init, (settings.chains, d), obs.dtype)
    starts = centre[None, :] + eps @ scale.T
    potential = functools.partial(lambda x, o: model.potential_fn(x, o), o=obs)
    (z, div, nst, step, energy, acc, pot), warm_steps = run_chains(
        potential, jax.random.split(k_chains, settings.chains), starts, inv_mass, settings
    )
    samples = jax.vmap(jax.vmap(model.constrain_fn))(z)
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
