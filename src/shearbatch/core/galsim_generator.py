r"""An independent generator: the stamps drawn by GalSim (``simulation.renderer: galsim``).

The truths and the noise are exactly those of the JAX generator
(:func:`shearbatch.core.generate.simulate`) for the same seeds: it draws the
batch, and the noise field of each stamp is recovered as
``noisy - render_jax(truths)`` (exact to the rounding of the clean image).
Only the noiseless image changes: each galaxy is drawn by GalSim,

.. code-block:: python

    gal = profile(flux, half_light_radius).shear(g1=e1, g2=e2).shear(g1=g1, g2=g2)
    psf = (Gaussian(sigma) | Moffat(beta, fwhm, trunc)).shear(g1=psf_e1, g2=psf_e2)
    Convolve(gal, psf).drawImage(nx, ny, scale=scale, offset=(dx, dy))

with converged ``GSParams``. ``profile`` can be one the inference model lacks:

- ``exponential``, ``gaussian``: the JAX renderer's profiles (the two generators
  then agree to rendering accuracy, ~1e-7 of the peak);
- ``sersic`` (``profile_args = (n,)``): ``galsim.Sersic(n, half_light_radius)``;
- ``bulgedisk`` (``profile_args = (bulge_fraction, bulge_hlr_ratio)``): an
  exponential disk of half-light radius ``half_light_radius`` and flux
  ``(1 - f) flux`` plus a de Vaucouleurs bulge (Sersic n = 4) of half-light
  radius ``ratio * half_light_radius`` and flux ``f flux``, sharing centre,
  intrinsic ellipticity and shear.

A realization's stamps depend only on its seed and problem (GalSim draws each
stamp alone; truths and noise are the JAX generator's, itself batch-invariant),
so they are identical across batch sizes.

GalSim is an optional dependency (``pip install shearbatch[galsim]``); the
config layer refuses ``renderer: galsim`` without it.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from .generate import FIELDS, SimBatch, render_stamps, simulate, stamp_snr

__all__ = ["JAX_PROFILES", "galsim_image", "simulate_galsim"]

#: Galaxy profiles the JAX renderer (and so the inference model) can draw.
JAX_PROFILES = ("exponential", "gaussian")


@functools.cache
def _gsparams():
    import galsim

    # Converged drawing (the settings of the renderer's oracle tests).
    return galsim.GSParams(folding_threshold=1e-7, maxk_threshold=1e-10, kvalue_accuracy=1e-12)


def _galaxy(profile: str, args: tuple[float, ...], flux: float, hlr: float):
    import galsim

    gs = _gsparams()
    if profile == "exponential":
        return galsim.Exponential(half_light_radius=hlr, flux=flux, gsparams=gs)
    if profile == "gaussian":
        return galsim.Gaussian(half_light_radius=hlr, flux=flux, gsparams=gs)
    if profile == "sersic":
        return galsim.Sersic(n=args[0], half_light_radius=hlr, flux=flux, gsparams=gs)
    if profile == "bulgedisk":
        frac, ratio = args
        disk = galsim.Exponential(half_light_radius=hlr, flux=(1.0 - frac) * flux, gsparams=gs)
        bulge = galsim.DeVaucouleurs(half_light_radius=ratio * hlr, flux=frac * flux, gsparams=gs)
        return galsim.Add([disk, bulge], gsparams=gs)
    raise ValueError(f"unknown galaxy profile for GalSim: {profile!r}")


def _psf(psf):
    import galsim

    gs = _gsparams()
    if psf.profile == "moffat":
        p = galsim.Moffat(beta=psf.beta, fwhm=psf.fwhm, trunc=psf.trunc, gsparams=gs)
    else:
        p = galsim.Gaussian(sigma=psf.sigma, gsparams=gs)
    return p.shear(g1=psf.e1, g2=psf.e2) if (psf.e1 or psf.e2) else p


def galsim_image(problem, params: dict[str, float], g: tuple[float, float]) -> np.ndarray:
    """Noiseless GalSim stamp (H, W) of one galaxy with fields ``params`` sheared by ``g``."""
    import galsim

    im = problem.image
    gal = _galaxy(problem.profile, tuple(problem.profile_args), params["flux"], params["hlr"])
    gal = gal.shear(g1=params["e1"], g2=params["e2"]).shear(g1=g[0], g2=g[1])
    obj = galsim.Convolve(gal, _psf(problem.psf), gsparams=_gsparams())
    offset = (params["dx"], params["dy"])
    return obj.drawImage(nx=im.nx, ny=im.ny, scale=im.scale, offset=offset).array


@functools.cache
def _jax_clean(problem):
    """Batched JAX render of the truths (to recover the JAX generator's noise field)."""
    return jax.jit(jax.vmap(functools.partial(render_stamps, problem)))


def simulate_galsim(
    problem,
    seeds: Sequence[int],
    g: Sequence[tuple[float, float]],
    quarters: Sequence[int] | None = None,
    streams: Sequence[int] | None = None,
) -> SimBatch:
    """Like :func:`shearbatch.core.generate.simulate` (ring copies included), the clean
    stamps drawn by GalSim."""
    jax_problem = problem._replace(profile="exponential", profile_args=(), renderer="jax")
    if problem.profile in JAX_PROFILES:
        jax_problem = jax_problem._replace(profile=problem.profile)
    sim = simulate(jax_problem, seeds, g, quarters, streams)
    noise = np.asarray(sim.images) - np.asarray(_jax_clean(jax_problem)(sim.params, sim.g))
    params = {k: np.asarray(sim.params[k], dtype=np.float64) for k in FIELDS}
    g_np = np.asarray(sim.g, dtype=np.float64)
    b, m = noise.shape[:2]
    clean = np.empty(noise.shape, dtype=np.float64)
    for i in range(b):
        for j in range(m):
            clean[i, j] = galsim_image(
                problem, {k: float(params[k][i, j]) for k in FIELDS}, tuple(g_np[i])
            )
    dtype = sim.images.dtype
    images = jnp.asarray(clean.astype(dtype) + noise.astype(dtype))
    snr = stamp_snr(jnp.asarray(clean), problem.noise_sigma).astype(dtype)
    return SimBatch(images, sim.noise_sigma, sim.g, sim.params, snr)
