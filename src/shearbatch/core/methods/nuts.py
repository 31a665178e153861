"""NUTS for batches: independent samplers per realization x chain, in lockstep.

For one realization, ``chains`` NUTS samplers (NumPyro's functional
``hmc(potential_fn, algo="NUTS")`` -> ``init_kernel`` / ``sample_kernel``)
run on that realization's potential U(x) = -log p(x, d), each with its own
step size and mass-matrix adaptation (Stan-style windowed warmup: dual
averaging of the step size towards ``target_accept``, Welford estimate of the
(diagonal or dense) inverse mass matrix) and its own key. The chains are
vmapped, and :func:`shearbatch.core.batching.batched` vmaps realizations, so the
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

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.infer.hmc import hmc
from pydantic import field_validator

from ...strict_model import Count, StrictModel
from .. import block_arrow
from ..diagnostics import bfmi, ess_bulk, ess_tail, per_site, rhat
from ..failure_flags import Gates, flag
from . import map as map_
from .base import Diagnosis, Draws, Method
from .interim import per_galaxy

__all__ = [
    "MapInit",
    "NutsConfig",
    "NutsInfo",
    "NutsSettings",
    "fit",
    "interim_batch_report",
    "interim_diagnose",
    "lockstep_efficiency",
    "method",
    "run_chains",
    "settings_of",
]


class MapInit(StrictModel):
    """NUTS's start at each realization's MAP/Laplace fit (``map_config``'s optimiser)."""

    enabled: bool = True
    """Start each realization's chains at its MAP and sample in Laplace-whitened coordinates."""
    num_steps: Count = 500
    """[iterations] Optimiser steps of the MAP start."""


class NutsConfig(StrictModel):
    """NUTS settings (``method: nuts``)."""

    warmup: Count = 500
    """[iterations] Warmup (adaptation) iterations per chain."""
    samples: Count = 1000
    """[draws] Kept draws per chain."""
    chains: Count = 4
    """[count] Independent chains per realization."""
    dense_mass: bool = False
    """Dense (true) or diagonal inverse mass matrix."""
    target_accept: float = 0.8
    """[probability, in (0, 1)] Target acceptance of the step-size adaptation."""
    max_tree_depth: Count = 10
    """[doublings] Tree-depth cap of warmup (and of sampling unless max_tree_depth_sampling)."""
    # A cap on the sampling phase's tree depth. Lanes run in lockstep, so every
    # vectorised iteration costs the deepest tree of the batch; a cap never biases
    # NUTS (it stays a valid MCMC kernel), it can only lower ESS, which the
    # convergence thresholds check. See docs/design.md, "NUTS on large batches".
    max_tree_depth_sampling: Count | None = None
    """[doublings] Tree-depth cap of the sampling phase (null: max_tree_depth); 3 for big batches."""
    # False: keep the initial inverse mass matrix (the Laplace covariance with
    # map_init) and adapt the step size only.
    adapt_mass_matrix: bool = True
    """False: keep the initial (Laplace) mass matrix and adapt the step size only."""
    map_init: MapInit = MapInit()
    """Start at the MAP (section inference.nuts_config.map_init)."""

    @field_validator("target_accept")
    @classmethod
    def _prob(cls, v: float) -> float:
        if not 0 < v < 1:
            raise ValueError("must be in (0, 1)")
        return v


class NutsInfo(NamedTuple):
    """NUTS's record of one fit (:class:`~.base.Info`), read by :func:`diagnose` and
    :func:`batch_report`."""

    warmup_n_steps: jax.Array  # (chains, warmup) leapfrog steps of each warmup iteration
    map_ok: jax.Array  # the MAP / Laplace start was valid


class NutsSettings(NamedTuple):
    """``inference.nuts_config`` flattened for the sampler, plus the MAP settings of
    ``map_init`` (``inference.map_config`` with ``map_init.num_steps``)."""

    warmup: int
    samples: int
    chains: int
    dense_mass: bool
    target_accept: float
    max_tree_depth: int
    max_tree_depth_sampling: int | None
    adapt_mass_matrix: bool
    map_init: bool
    map_settings: map_.MapConfig

    @property
    def sampling_depth(self) -> int:
        return self.max_tree_depth_sampling or self.max_tree_depth


def _init(obs, model, settings: NutsSettings):
    """(centre, scale_fn, start spread, ok): the affine map x = centre + scale_fn(z) the
    chains run through.

    With ``map_init`` the map is the realization's Laplace fit (scale_fn(z) has
    covariance H^-1 for z ~ N(0, I), from the Hessian's blocks: O(M) per evaluation,
    :func:`shearbatch.core.block_arrow.apply_scale`), so z is approximately N(0, I) whatever
    the posterior's scale; without it (or where the fit failed) scale_fn(z) = 0.1 z.
    """
    dtype = obs.dtype
    x0 = model.x0.astype(dtype)
    if not settings.map_init:
        return x0, lambda z: 0.1 * z, 0.1, jnp.asarray(True)
    layout = map_.layout_of(model)
    lap = map_.laplace(obs, model, settings.map_settings, model.potential_fn)
    ok = lap.ok & jnp.all(jnp.isfinite(lap.opt.x))
    fac = block_arrow.fallback(lap.factor, ok, 0.1)

    def scale_fn(z):
        return block_arrow.apply_scale(fac, z, layout)

    return jnp.where(ok, lap.opt.x, x0), scale_fn, 1.0, ok


def run_chains(potential, keys, starts, inv_mass, settings: NutsSettings):
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


def fit(rng_key: jax.Array, obs: jax.Array, posterior, settings: NutsSettings) -> Draws:
    """``chains`` NUTS samplers on ONE realization."""
    k_init, k_chains = jax.random.split(rng_key)
    centre, scale_fn, spread, ok = _init(obs, posterior, settings)
    starts = spread * jax.random.normal(k_init, (settings.chains, centre.shape[0]), obs.dtype)

    def potential(z):
        return posterior.potential_fn(centre + scale_fn(z), obs)

    (zw, div, nst, step, energy, acc, pot), warm_steps = run_chains(
        potential, jax.random.split(k_chains, settings.chains), starts, None, settings
    )
    samples = jax.vmap(jax.vmap(lambda w: posterior.constrain_fn(centre + scale_fn(w))))(zw)
    depth_used = jnp.ceil(jnp.log2(nst.astype(obs.dtype) + 1.0)).astype(jnp.int32)
    stats = {
        "diverging": div,
        "tree_depth": depth_used,
        "n_steps": nst,
        "step_size": step,
        "energy": energy,
        "acceptance_rate": acc,
        "lp": -pot,
    }
    info = NutsInfo(warmup_n_steps=warm_steps, map_ok=ok)
    return Draws(samples, stats, posterior.constrain_fn(centre), info)


def diagnose(draws: Draws, settings: NutsSettings) -> Diagnosis:
    """R-hat, bulk/tail ESS for every latent, divergences, E-BFMI, tree-depth hits.

    Non-finite draws or energies (a failed realization) give null statistics, not errors.
    """
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        st, post = draws.stats, draws.samples
        div = np.asarray(st["diverging"])
        depth = np.asarray(st["tree_depth"])
        r, eb, et = (per_site(f, post) for f in (rhat, ess_bulk, ess_tail))
        bf = bfmi(np.asarray(st["energy"]))
        frac = int(div.sum()) / div.size

        def worst(d, fn):
            x = np.concatenate([np.ravel(np.asarray(v, dtype=float)) for v in d.values()])
            return float(fn(x)) if np.any(np.isfinite(x)) else None

        gates = Gates(rhat=r, ess_bulk=eb, ess_tail=et, divergences=int(div.sum()),
                      divergence_frac=frac, bfmi=bf)  # fmt: skip
        diag = {
            "rhat_max": worst(r, np.nanmax),
            "ess_bulk_min": worst(eb, np.nanmin),
            "ess_tail_min": worst(et, np.nanmin),
            "tree_depth_max_hits": int(np.sum(depth >= settings.sampling_depth)),
            "mean_tree_depth": float(depth.mean()),
            "step_size": np.asarray(st["step_size"])[:, -1],
            "acceptance_rate": float(np.mean(np.asarray(st["acceptance_rate"]))),
            "map_init_ok": bool(draws.info.map_ok),
        }
    flags = 0
    if frac >= 1.0:
        flags |= flag("ALL_DIVERGENT")
    if all(np.all(np.ptp(np.asarray(v), axis=1) == 0) for v in post.values()):
        flags |= flag("CHAINS_STUCK")
    return Diagnosis(dict(st), diag, flags, gates)


def batch_report(
    draws: Draws, settings: NutsSettings, lockstep: int | None = None
) -> dict[str, Any]:
    """Lockstep efficiency of the batch (warmup and sampling) and sampling tree depths;
    ``lockstep``: realizations whose samplers run in one vectorised loop (a chunk of
    lanes: :func:`shearbatch.core.batching.batched`), default the whole batch."""

    def eff(n):  # (B, C, T) per-chain leapfrog counts, grouped by chunks of realizations
        n = np.asarray(n)
        b = n.shape[0]
        group = min(lockstep or b, b)
        steps = [n[i : i + group].reshape(-1, n.shape[-1]) for i in range(0, b, group)]
        useful = sum(float(s.sum()) for s in steps)
        executed = sum(s.shape[0] * float(s.max(axis=0).sum()) for s in steps)
        return useful / executed if executed > 0 else 1.0

    depth = np.asarray(draws.stats["tree_depth"])
    q50, q90, q99 = (int(v) for v in np.percentile(depth, [50, 90, 99]))
    rep: dict[str, Any] = {
        "lockstep_efficiency": {
            "warmup": eff(draws.info.warmup_n_steps),
            "sampling": eff(draws.stats["n_steps"]),
        },
        "sampling_tree_depth_p99": q99,
    }
    if rep["lockstep_efficiency"]["sampling"] < 0.5 and settings.max_tree_depth_sampling is None:
        rep["hint"] = (
            f"sampling tree depth: median {q50}, p90 {q90}, p99 {q99}; every lane waits for "
            "the deepest: capping inference.nuts_config.max_tree_depth_sampling bounds that "
            "cost (docs/design.md: NUTS on large batches)"
        )
    return rep


def lockstep_efficiency(n_steps) -> float:
    """Useful / executed leapfrog steps of lanes run in lockstep.

    ``n_steps``: (lanes, iterations). Each vectorised iteration costs the
    slowest lane's steps for every lane.
    """
    n = np.asarray(n_steps, dtype=float)
    executed = n.shape[0] * n.max(axis=0).sum()
    return float(n.sum() / executed) if executed > 0 else 1.0


def interim_diagnose(draws: Draws, settings: NutsSettings) -> Diagnosis:
    """:func:`diagnose` of an interim realization (every galaxy its own chains:
    :func:`~.interim.per_galaxy`; every statistic per galaxy), with each
    galaxy's summary under ``per_galaxy`` (R-hat: max over its latents; bulk and tail ESS
    of e1 / e2: the smaller; divergences; tree-depth hits) and the realization's under
    ``galaxies`` (the worst galaxy of each). A galaxy whose transitions all diverged or
    whose chains never moved fails the realization (``ALL_DIVERGENT`` / ``CHAINS_STUCK``)."""
    ok = np.asarray(draws.info.map_ok)
    info = draws.info._replace(map_ok=bool(np.all(ok)))
    base = diagnose(draws._replace(info=info), settings)
    d, g = dict(base.diagnostics), base.gates
    div = np.asarray(draws.stats["diverging"])  # (C, S, M)
    depth = np.asarray(draws.stats["tree_depth"])
    m = div.shape[-1]

    def by_galaxy(rec, sites, fn):  # NaN (constant or non-finite draws) propagates
        return fn(np.asarray([rec[s] for s in sites], float), axis=0)

    sites = sorted(draws.samples)
    per = {
        "rhat_max": by_galaxy(g.rhat, sites, np.max),
        "ess_bulk_e": by_galaxy(g.ess_bulk, ("e1", "e2"), np.min),
        "ess_tail_e": by_galaxy(g.ess_tail, ("e1", "e2"), np.min),
        "ess_bulk_min": by_galaxy(g.ess_bulk, sites, np.min),
        "divergences": div.sum(axis=(0, 1)),
        "tree_depth_max_hits": np.sum(depth >= settings.sampling_depth, axis=(0, 1)),
        "map_init_ok": ok,
    }

    def worst(x, fn):
        x = np.asarray(x, float)
        return float(fn(x)) if np.all(np.isfinite(x)) else None  # NaN: a failed galaxy

    d["per_galaxy"] = {k: np.asarray(v).tolist() for k, v in per.items()}
    d["galaxies"] = {
        "n": m,
        "rhat_max": worst(per["rhat_max"], np.max),
        "ess_bulk_e_min": worst(per["ess_bulk_e"], np.min),
        "ess_tail_e_min": worst(per["ess_tail_e"], np.min),
        "with_divergences": int(np.sum(per["divergences"] > 0)),
        "map_init_failed": int(np.sum(~ok)),
    }
    flags = base.flags
    if np.any(div.all(axis=(0, 1))):
        flags |= flag("ALL_DIVERGENT")
    moved = [np.any(np.ptp(np.asarray(v), axis=1) > 0, axis=0) for v in draws.samples.values()]
    if not np.all(np.any(moved, axis=0)):  # a galaxy none of whose latents moved
        flags |= flag("CHAINS_STUCK")
    return Diagnosis(base.sample_stats, d, flags, g)


def interim_batch_report(
    draws: Draws, settings: NutsSettings, lockstep: int | None = None
) -> dict[str, Any]:
    """:func:`batch_report` of a batch of interim realizations: every galaxy's chains are
    lanes of the vectorised loop (B, chain x galaxy lanes per realization)."""
    n = np.asarray(draws.stats["n_steps"])  # (B, C, S, M)
    b, c, s, m = n.shape
    warm = np.asarray(draws.info.warmup_n_steps)  # (B, M, C, W)
    stats = {"n_steps": np.moveaxis(n, -1, 2).reshape(b, c * m, s),
             "tree_depth": np.asarray(draws.stats["tree_depth"])}  # fmt: skip
    info = draws.info._replace(warmup_n_steps=warm.reshape(b, m * c, warm.shape[-1]))
    return batch_report(Draws(draws.samples, stats, draws.mode, info), settings, lockstep)


def settings_of(cfg: NutsConfig, map_config: map_.MapConfig) -> NutsSettings:
    """``cfg`` (``inference.nuts_config``) flattened for the sampler, with ``map_config``
    (``inference.map_config``, ``map_init``'s step budget in place of its own) for the
    MAP start."""
    map_settings = map_config.model_copy(update={"num_steps": cfg.map_init.num_steps})
    nc = {k: getattr(cfg, k) for k in NutsConfig.model_fields if k != "map_init"}
    return NutsSettings(**nc, map_init=cfg.map_init.enabled, map_settings=map_settings)


def method(cfg: NutsConfig, *, map_config: map_.MapConfig) -> Method:
    """Batched independent NUTS with the settings ``cfg`` (``inference.nuts_config``),
    started at the MAP of ``map_config`` (``inference.map_config``). Its interim variant:
    every galaxy its own sampler (:func:`~.interim.per_galaxy`)."""
    s = settings_of(cfg, map_config)

    def fit_one(key, obs, post):
        return fit(key, obs, post, s)

    interim = Method(
        "nuts",
        per_galaxy(fit_one),
        lambda draws: interim_diagnose(draws, s),
        lambda draws, lockstep=None: interim_batch_report(draws, s, lockstep),
    )
    return Method(
        "nuts",
        fit_one,
        lambda draws: diagnose(draws, s),
        lambda draws, lockstep=None: batch_report(draws, s, lockstep),
        interim=interim,
    )
