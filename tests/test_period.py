"""The renderer period and alias band chosen from the pixel noise (core/period.py,
``image.fft_size: null``, ``image.alias_band: null``).

What a user depends on: a survey-noise campaign gets a small FFT period whose wrap-around
is far below its noise (checked with the JAX generator's own galaxies and renderer against
a generous period), and an alias band whose left-out alias terms are ten times further
below it (checked against the renderer with every alias); a config that fixes ``fft_size``
or ``alias_band`` keeps it, and the NumPy spectrum the choices are measured with is the
renderer's.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import LEVEL0, write_config
from shearbatch import spec
from shearbatch.core import period
from shearbatch.core.generate import _draw_params, render_stamps
from shearbatch.core.psf import psf_kwargs
from shearbatch.core.render import draw_galaxy
from shearbatch.schema import load_config

ROOT = LEVEL0.parent.parent

CONFIGS = ("level2", "survey_snr30")


@pytest.fixture(scope="module")
def problems():
    return {c: spec.problem(load_config(ROOT / "configs" / f"{c}.yaml")) for c in CONFIGS}


def test_survey_configs_get_small_periods_level0_keeps_the_oracle(problems):
    for name, p in problems.items():
        default = period.default_fft_size(p)
        assert p.image.fft_size < default, name
        assert p.image.fft_size >= max(p.image.nx, p.image.ny)
    # Level 0 (noise 1e-6 of a unit flux): a period whose wrap-around is below 1e-3 sigma,
    # i.e. 1e-9 of the flux, well inside the renderer's 4e-7-of-peak GalSim agreement
    p0 = spec.problem(load_config(ROOT / "configs" / "level0.yaml"))
    gal = {k: np.array([period._sample(f, np.random.default_rng(0), 1)[0]])
           for k, f in zip(period._FIELDS, p0.fields, strict=True)}  # fmt: skip
    err = period.wrap_errors(p0, gal, (0.1, 0.0), [p0.image.fft_size], 192)
    assert err.max() < 1e-3 * p0.noise_sigma


def test_fixed_fft_size_is_kept(tmp_path):
    cfg = load_config(write_config(tmp_path / "c.yaml", {"image.fft_size": 128}))
    run = spec.run_spec(cfg)
    assert run.model.image.fft_size == run.truth.image.fft_size == 128


@pytest.mark.parametrize("name", CONFIGS)
def test_chosen_period_renders_within_1e3_sigma_of_a_generous_one(problems, name):
    """The JAX generator's galaxies, rendered by the model's code at the chosen period and at
    twice the default: at most 1% of the galaxies may differ by more than 1e-3 sigma at some
    pixel, which is what the rule promises (256 draws: 10 or more would have probability
    3e-4 at a true 1%)."""
    p = problems[name]
    m = 256
    p = p._replace(image=p.image._replace(n_objects=m))
    params = _draw_params(p, jax.random.PRNGKey(7))
    generous = p._replace(image=p.image._replace(fft_size=2 * period.default_fft_size(p)))
    g = jnp.array([0.05, -0.03])
    diff = jnp.abs(render_stamps(p, params, g) - render_stamps(generous, params, g))
    per_galaxy = np.asarray(diff.max(axis=(1, 2))) / p.noise_sigma
    assert np.sum(per_galaxy > 1e-3) <= 9, np.sort(per_galaxy)[-12:]


@pytest.mark.parametrize("name", CONFIGS)
def test_numpy_spectrum_is_the_renderer(problems, name):
    """wrap_errors' NumPy spectrum, inverse-transformed at a period, equals draw_galaxy at
    that period (float64) to rounding: the period is measured on the model's own image."""
    p = problems[name]
    im = p.image
    rng = np.random.default_rng(3)
    gal = {"flux": rng.uniform(0.5, 2.0, 3), "hlr": rng.uniform(0.2, 0.6, 3),
           "e1": rng.uniform(-0.6, 0.6, 3), "e2": rng.uniform(-0.6, 0.6, 3),
           "dx": rng.uniform(-1, 1, 3), "dy": rng.uniform(-1, 1, 3)}  # fmt: skip
    g = (0.04, -0.02)
    n = im.fft_size
    mine = np.fft.irfft2(period._spectra(p, gal, np.asarray(g), n), s=(n, n))[:, : im.ny, : im.nx]

    @jax.jit
    def draw(f, h, e1, e2, dx, dy):
        return draw_galaxy(profile=p.profile, flux=f, half_light_radius=h, e1=e1, e2=e2,
                           g1=g[0], g2=g[1], offset=(dx, dy), **psf_kwargs(p.psf),
                           nx=im.nx, ny=im.ny, scale=im.scale, fft_size=n)  # fmt: skip

    ref = np.asarray(jax.vmap(draw)(*(jnp.asarray(gal[k]) for k in period._FIELDS)))
    assert np.abs(mine - ref).max() < 1e-12 * ref.max()


@pytest.mark.parametrize("name", CONFIGS)
def test_measured_wrap_around_is_below_the_analytic_bound(problems, name):
    """Two independent routes: the folded NumPy images never exceed the rigorous tail bound
    (at the period and at the reference, whose own wrap-around the difference includes)."""
    p = problems[name]
    im = p.image
    gal = period._draws(p, 200)
    gal = {k: v[:24] for k, v in gal.items()}
    g = 0.05
    sizes = period.fft_candidates(max(im.nx, im.ny), 64)
    n_ref = 192
    errors = period.wrap_errors(p, gal, (g, 0.0), sizes, n_ref)
    for j in range(24):
        kw = {"nx": im.nx, "ny": im.ny, "scale": im.scale, "profile": p.profile, "psf": p.psf,
              "flux": abs(gal["flux"][j]), "hlr": gal["hlr"][j],
              "e": math.hypot(gal["e1"][j], gal["e2"][j]), "g": g,
              "offset": (gal["dx"][j], gal["dy"][j])}  # fmt: skip
        ref_bound = period.wrap_error_bound(n_ref, **kw)
        for i, n in enumerate(sizes):
            rounding = 1e-14 * kw["flux"]  # the inverse FFT's, relative to the peak
            assert errors[i, j] <= period.wrap_error_bound(n, **kw) + ref_bound + rounding, (n, j)


def test_fixed_alias_band_is_kept(tmp_path):
    cfg = load_config(write_config(tmp_path / "c.yaml", {"image.alias_band": 0.0}))
    run = spec.run_spec(cfg)
    assert run.model.image.alias_band == run.truth.image.alias_band == 0.0


@pytest.mark.parametrize("name", CONFIGS)
def test_chosen_alias_band_renders_within_1e4_sigma_of_every_alias(problems, name):
    """The JAX generator's galaxies (another seed than the choice's draws), rendered by the
    model's code with the chosen alias band and with every alias: at most 1% may differ by
    more than 1e-4 sigma at some pixel (256 draws: 10 or more would have probability 3e-4
    at a true 1%). Level 2's small PSF leaves a band to drop (the point of it)."""
    p = problems[name]
    if name == "level2":
        assert p.image.alias_band > 0
    m = 256
    p = p._replace(image=p.image._replace(n_objects=m))
    params = _draw_params(p, jax.random.PRNGKey(11))
    every = p._replace(image=p.image._replace(alias_band=0.0))
    g = jnp.array([0.05, -0.03])
    diff = jnp.abs(render_stamps(p, params, g) - render_stamps(every, params, g))
    per_galaxy = np.asarray(diff.max(axis=(1, 2))) / p.noise_sigma
    assert np.sum(per_galaxy > period.ALIAS_TOLERANCE) <= 9, np.sort(per_galaxy)[-12:]


@pytest.mark.parametrize("band", [0.5, 0.8, 0.9])
def test_alias_errors_are_the_renderers_left_out_terms(problems, band):
    """alias_errors' image of the left-out alias terms equals draw_galaxy with every alias
    minus draw_galaxy with the band (to rounding): the band is measured on the model's own
    image."""
    p = problems["level2"]
    im = p.image
    rng = np.random.default_rng(5)
    gal = {"flux": rng.uniform(0.5, 2.0, 4), "hlr": rng.uniform(0.05, 0.4, 4),
           "e1": rng.uniform(-0.6, 0.6, 4), "e2": rng.uniform(-0.6, 0.6, 4),
           "dx": rng.uniform(-1, 1, 4), "dy": rng.uniform(-1, 1, 4)}  # fmt: skip
    g = (0.04, -0.02)
    mine = period.alias_errors(p, gal, g, im.fft_size, [band])[0]

    def draw(b):
        def one(f, h, e1, e2, dx, dy):
            return draw_galaxy(profile=p.profile, flux=f, half_light_radius=h, e1=e1, e2=e2,
                               g1=g[0], g2=g[1], offset=(dx, dy), **psf_kwargs(p.psf),
                               nx=im.nx, ny=im.ny, scale=im.scale, fft_size=im.fft_size,
                               alias_band=b)  # fmt: skip

        return np.asarray(jax.jit(jax.vmap(one))(*(jnp.asarray(gal[k]) for k in period._FIELDS)))

    every, banded = draw(0.0), draw(band)
    ref = np.abs(every - banded).max(axis=(1, 2))
    assert ref.max() > 1e-9 * every.max()  # the band leaves something out
    assert np.abs(mine - ref).max() < 1e-12 * every.max()
