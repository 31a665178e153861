"""The generator: truths and noisy stamps for a batch of realizations.

For realization ``r`` with seed ``s``: ``key = PRNGKey(s)`` is split into a key
for the galaxy parameters and a key for the noise. Each galaxy field given as a
distribution in the (generator's) config is drawn from it; the stamp of galaxy
``j`` is

    d_j = render(flux_j, hlr_j, e_j, g_true, offset_j) + sigma * n_j,  n_j ~ N(0, 1)

The generator uses ``cfg.truth()``: the ``simulation`` section, when present,
overrides ``psf``/``gal`` for the data only (misspecification studies).

A realization's data depend only on its seed and config: every realization is
drawn by the same compiled single-realization program (``jax.lax.map`` over
the batch), never by anything that couples lanes.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .campaign import Realization
from .config import Config, Fixed
from .priors import GALAXY_FIELDS, galaxy_params, to_distribution
from .render import draw_galaxy

__all__ = ["SimBatch", "render_stamps", "simulate_batch", "truth_records"]


class SimBatch(NamedTuple):
    """Stacked observations of a batch.

    images: (B, M, H, W) noisy stamps; noise_sigma: scalar; g: (B, 2) true shear;
    params: {field: (B, M)} true per-galaxy parameters (``GALAXY_FIELDS``).
    """

    images: jax.Array
    noise_sigma: float
    g: jax.Array
    params: dict[str, jax.Array]


def render_stamps(cfg: Config, params: dict[str, jax.Array], g: jax.Array) -> jax.Array:
    """Noise-free stamps (M, H, W) of one realization's M galaxies sheared by ``g`` (2,).

    Shared by the generator and the model: ``params[f]`` has shape (M,).
    """
    im = cfg.image
    draw = functools.partial(
        draw_galaxy,
        profile=cfg.gal.type.lower(),
        psf_sigma=cfg.psf.sigma,
        nx=im.size_x,
        ny=im.size_y,
        scale=im.pixel_scale,
        fft_size=im.fft_size,
    )

    def one(flux, hlr, e1, e2, dx, dy):
        return draw(
            flux=flux,
            half_light_radius=hlr,
            e1=e1,
            e2=e2,
            g1=g[0],
            g2=g[1],
            offset=jnp.stack([dx, dy]),
        )

    return jax.vmap(one)(*(params[f] for f in GALAXY_FIELDS))


def _draw_params(cfg: Config, key: jax.Array) -> dict[str, jax.Array]:
    m = cfg.image.n_objects
    out = {}
    for i, (name, p) in enumerate(galaxy_params(cfg).items()):
        if isinstance(p, Fixed):
            out[name] = jnp.full((m,), p.value, dtype=jnp.result_type(float))
        else:
            out[name] = to_distribution(p).sample(jax.random.fold_in(key, i), (m,))
    return out


def _simulate_one(cfg: Config, seed: jax.Array, g: jax.Array):
    key = jax.random.PRNGKey(seed)
    k_par, k_noise = jax.random.split(key)
    params = _draw_params(cfg, k_par)
    clean = render_stamps(cfg, params, g)
    noise = cfg.image.noise.sigma * jax.random.normal(k_noise, clean.shape, clean.dtype)
    return clean + noise, params


_SIMULATORS: dict[str, Any] = {}


def _simulator(cfg: Config):
    """One jitted generator per config (and default float dtype), reused by every batch."""
    key = cfg.model_dump_json() + str(jnp.result_type(float))
    if key not in _SIMULATORS:
        one = functools.partial(_simulate_one, cfg.truth())
        _SIMULATORS[key] = jax.jit(lambda seeds, g: jax.lax.map(lambda a: one(*a), (seeds, g)))
    return _SIMULATORS[key]


def simulate_batch(cfg: Config, realizations: Sequence[Realization]) -> SimBatch:
    """Truth and noisy stamps for ``realizations``: images have shape (B, M, H, W)."""
    seeds = jnp.asarray([r.seed for r in realizations], dtype=jnp.uint32)
    g = jnp.asarray([[r.g1, r.g2] for r in realizations], dtype=jnp.result_type(float))
    images, params = _simulator(cfg)(seeds, g)
    return SimBatch(images, cfg.truth().image.noise.sigma, g, params)


def truth_records(
    cfg: Config, realizations: Sequence[Realization], sim: SimBatch
) -> list[dict[str, Any]]:
    """One JSON-ready truth dict per realization (for ``truth.json``)."""
    t = cfg.truth()
    params = {k: np.asarray(v) for k, v in sim.params.items()}
    out = []
    for b, r in enumerate(realizations):
        galaxies = [
            {f: float(params[f][b, j]) for f in GALAXY_FIELDS} for j in range(cfg.image.n_objects)
        ]
        rec = {
            "run_id": r.run_id,
            "g1": r.g1,
            "g2": r.g2,
            "seed": r.seed,
            "noise_sigma": sim.noise_sigma,
            "profile": t.gal.type,
            "psf": t.psf.model_dump(),
            "galaxies": galaxies,
        }
        if r.pair_id:
            rec["pair_id"], rec["pair_sign"] = r.pair_id, r.pair_sign
        rec["truth_from_prior"] = r.from_prior
        if cfg.simulation is not None:
            rec["simulation_overrides"] = cfg.simulation.model_dump(exclude_none=True)
        out.append(rec)
    return out
