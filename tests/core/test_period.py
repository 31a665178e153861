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

from shearbatch import spec
from shearbatch.core import period
from shearbatch.core.generate import _draw_params, render_stamps
from shearbatch.core.psf import psf_kwargs
from shearbatch.core.render import draw_galaxy
from shearbatch.schema import load_config
from tests.conftest import LEVEL0, write_config

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


@pytest.mark.parametrize(("key", "value"), [("fft_size", 128), ("alias_band", 0.0)])
def test_a_fixed_period_or_alias_band_is_kept(tmp_path, key, value):
    cfg = load_config(write_config(tmp_path / "c.yaml", {f"image.{key}": value}))
    run = spec.run_spec(cfg)
    assert getattr(run.model.image, key) == getattr(run.truth.image, key) == value


def _galaxies_beyond(p, other, seed: int, tol: float) -> tuple[int, np.ndarray]:
    """How many of 256 JAX generator galaxies (``seed``) ``p``'s renderer draws more than
    ``tol`` sigma_noise away from ``other``'s at some pixel, and the largest differences."""
    m = 256
    p = p._replace(image=p.image._replace(n_objects=m))
    other = other._replace(image=other.image._replace(n_objects=m))
    params = _draw_params(p, jax.random.PRNGKey(seed))
    g = jnp.array([0.05, -0.03])
    diff = jnp.abs(render_stamps(p, params, g) - render_stamps(other, params, g))
    per_galaxy = np.asarray(diff.max(axis=(1, 2))) / p.noise_sigma
    return int(np.sum(per_galaxy > tol)), np.sort(per_galaxy)[-12:]


@pytest.mark.parametrize("name", CONFIGS)
def test_chosen_period_renders_within_1e3_sigma_of_a_generous_one(problems, name):
    """The JAX generator's galaxies, rendered by the model's code at the chosen period and at
    twice the default: at most 1% of the galaxies may differ by more than 1e-3 sigma at some
    pixel, which is what the rule promises (256 draws: 10 or more would have probability
    3e-4 at a true 1%)."""
    p = problems[name]
    generous = p._replace(image=p.image._replace(fft_size=2 * period.default_fft_size(p)))
    n, worst = _galaxies_beyond(p, generous, 7, 1e-3)
    assert n <= 9, worst


G = (0.04, -0.02)  # the lensing shear of the galaxies below


def _some_galaxies(seed: int, k: int, hlr: tuple[float, float]) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"flux": rng.uniform(0.5, 2.0, k), "hlr": rng.uniform(*hlr, k),
            "e1": rng.uniform(-0.6, 0.6, k), "e2": rng.uniform(-0.6, 0.6, k),
            "dx": rng.uniform(-1, 1, k), "dy": rng.uniform(-1, 1, k)}  # fmt: skip


def _draw(p, gal: dict[str, np.ndarray], alias_band: float = 0.0) -> np.ndarray:
    """draw_galaxy of ``gal`` sheared by G with ``p``'s PSF, stamp and period."""
    im = p.image

    def one(f, h, e1, e2, dx, dy):
        return draw_galaxy(profile=p.profile, flux=f, half_light_radius=h, e1=e1, e2=e2,
                           g1=G[0], g2=G[1], offset=(dx, dy), **psf_kwargs(p.psf),
                           nx=im.nx, ny=im.ny, scale=im.scale, fft_size=im.fft_size,
                           alias_band=alias_band)  # fmt: skip

    return np.asarray(jax.jit(jax.vmap(one))(*(jnp.asarray(gal[k]) for k in period._FIELDS)))


@pytest.mark.parametrize("name", CONFIGS)
def test_numpy_spectrum_is_the_renderer(problems, name):
    """wrap_errors' NumPy spectrum, inverse-transformed at a period, equals draw_galaxy at
    that period (float64) to rounding: the period is measured on the model's own image."""
    p = problems[name]
    im = p.image
    gal = _some_galaxies(3, 3, (0.2, 0.6))
    n = im.fft_size
    mine = np.fft.irfft2(period._spectra(p, gal, np.asarray(G), n), s=(n, n))[:, : im.ny, : im.nx]
    ref = _draw(p, gal)
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


@pytest.mark.parametrize("name", CONFIGS)
def test_chosen_alias_band_renders_within_1e4_sigma_of_every_alias(problems, name):
    """The JAX generator's galaxies (another seed than the choice's draws), rendered by the
    model's code with the chosen alias band and with every alias: at most 1% may differ by
    more than 1e-4 sigma at some pixel (256 draws: 10 or more would have probability 3e-4
    at a true 1%). Level 2's small PSF leaves a band to drop (the point of it)."""
    p = problems[name]
    if name == "level2":
        assert p.image.alias_band > 0
    every = p._replace(image=p.image._replace(alias_band=0.0))
    n, worst = _galaxies_beyond(p, every, 11, period.ALIAS_TOLERANCE)
    assert n <= 9, worst


@pytest.mark.parametrize("band", [0.5, 0.8, 0.9])
def test_alias_errors_are_the_renderers_left_out_terms(problems, band):
    """alias_errors' image of the left-out alias terms equals draw_galaxy with every alias
    minus draw_galaxy with the band (to rounding): the band is measured on the model's own
    image."""
    p = problems["level2"]
    gal = _some_galaxies(5, 4, (0.05, 0.4))
    mine = period.alias_errors(p, gal, G, p.image.fft_size, [band])[0]
    every, banded = _draw(p, gal), _draw(p, gal, band)
    ref = np.abs(every - banded).max(axis=(1, 2))
    assert ref.max() > 1e-9 * every.max()  # the band leaves something out
    assert np.abs(mine - ref).max() < 1e-12 * every.max()
