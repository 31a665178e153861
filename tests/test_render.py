"""Tests of the Fourier-space renderer against GalSim, the oracle.

GalSim's ``drawImage`` of ``Convolve(profile.shear(e).shear(g), Gaussian(psf))`` is
compared pixel by pixel with :func:`shearbatch.render.draw_galaxy` in float64. Cases
sharing static arguments (profile, stamp shape, pixel scale) are drawn in one vmapped,
jitted call, so each static group compiles once.
"""

from __future__ import annotations

import functools

import galsim
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from shearbatch.render import HLR_TO_R0_EXP, draw_galaxy

TOL = 1e-6  # max |ours - GalSim| / peak
PARAMS = ("flux", "half_light_radius", "e1", "e2", "g1", "g2", "offset", "psf_sigma")
# GalSim settings that make its own drawImage converge (no maxk truncation, fine folding).
ACCURATE_GSPARAMS = galsim.GSParams(
    folding_threshold=1e-7, maxk_threshold=1e-10, kvalue_accuracy=1e-12
)


def galsim_image(case, *, nx, ny, scale, profile, gsparams=None):
    cls = {"exponential": galsim.Exponential, "gaussian": galsim.Gaussian}[profile]
    gal = cls(half_light_radius=case["half_light_radius"], flux=case["flux"], gsparams=gsparams)
    gal = gal.shear(g1=case["e1"], g2=case["e2"]).shear(g1=case["g1"], g2=case["g2"])
    obj = galsim.Convolve(gal, galsim.Gaussian(sigma=case["psf_sigma"], gsparams=gsparams))
    offset = tuple(float(v) for v in case["offset"])
    return obj.drawImage(nx=nx, ny=ny, scale=scale, offset=offset).array


@functools.cache
def batched_draw(profile, nx, ny, scale):
    """One compiled program per static group: vmap over the numeric parameters."""
    draw = functools.partial(draw_galaxy, profile=profile, nx=nx, ny=ny, scale=scale)
    return jax.jit(jax.vmap(lambda p: draw(**p)))


def draw_cases(cases, *, profile, nx, ny, scale):
    stacked = {k: jnp.asarray(np.array([c[k] for c in cases], dtype=np.float64)) for k in PARAMS}
    return np.asarray(batched_draw(profile, nx, ny, scale)(stacked))


def make_cases(seed, n, *, hlr, psf, gmax=0.5):
    """Random cases: |e|, |g| <= gmax in all directions, offsets within half a pixel."""
    rng = np.random.default_rng(seed)
    cases = []
    for i in range(n):
        e_mod, g_mod = rng.uniform(0.0, gmax, 2)
        e_ang, g_ang = rng.uniform(0.0, 2 * np.pi, 2)
        cases.append(
            {
                "flux": float(rng.uniform(0.5, 3.0)),
                "half_light_radius": float(np.interp(i, [0, n - 1], hlr)),
                "e1": e_mod * np.cos(e_ang),
                "e2": e_mod * np.sin(e_ang),
                "g1": g_mod * np.cos(g_ang),
                "g2": g_mod * np.sin(g_ang),
                "offset": rng.uniform(-0.5, 0.5, 2),
                "psf_sigma": float(rng.choice(psf)),
            }
        )
    return cases
