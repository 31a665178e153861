"""The renderer's hand-written derivative rule (core/render.py ``spectrum_of``'s custom JVP):
forward mode (what Gauss-Newton's Jacobians use) and reverse mode (gradients) are one
linear map and its transpose, so they must agree to rounding for every parameter,
including the PSF's when it is traced, on every PSF path (round Gaussian fast path,
sheared Gaussian, Moffat and truncated Moffat tables). Central differences are
test_render.py's (unchanged)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from shearbatch.core.render import draw_galaxy

PSFS = {
    "gaussian": {"psf_sigma": 0.35},
    "gaussian_e": {"psf_sigma": 0.35, "psf_e1": 0.03, "psf_e2": -0.02},
    "moffat": {"psf_profile": "moffat", "psf_fwhm": 0.9, "psf_beta": 3.5,
               "psf_e1": 0.01, "psf_e2": -0.005},
    "moffat_trunc": {"psf_profile": "moffat", "psf_fwhm": 0.9, "psf_beta": 3.5,
                     "psf_trunc": 2.7, "psf_e1": 0.01, "psf_e2": -0.005},
}  # fmt: skip
X0 = np.array([1.2, 0.4, 0.2, -0.3, 0.03, -0.02, 0.3, -0.2])


def _stamp(x, profile, psf, alias_band=0.0):
    return draw_galaxy(profile=profile, flux=x[0], half_light_radius=x[1], e1=x[2], e2=x[3],
                       g1=x[4], g2=x[5], offset=x[6:8], **psf, nx=16, ny=16, scale=0.263,
                       fft_size=32, alias_band=alias_band)  # fmt: skip


@pytest.mark.parametrize(
    ("profile", "psf", "band"),
    [("exponential", p, 0.0) for p in sorted(PSFS)]
    + [("gaussian", "gaussian", 0.0)]
    + [("exponential", "moffat", 0.8), ("exponential", "gaussian", 0.8)],
)
def test_forward_and_reverse_jacobians_agree(profile, psf, band):
    """(With an alias band too: the alias terms on part of the grid, embedded.)"""
    f = jax.jit(lambda x: _stamp(x, profile, PSFS[psf], band))
    fwd = jax.jit(jax.jacfwd(f))(jnp.asarray(X0))
    rev = jax.jit(jax.jacrev(f))(jnp.asarray(X0))
    scale = float(jnp.abs(fwd).max())
    assert float(jnp.abs(fwd - rev).max()) < 1e-12 * scale
    assert bool(jnp.all(jnp.isfinite(fwd)))


@pytest.mark.parametrize(
    "psf",
    [
        pytest.param("gaussian", marks=pytest.mark.slow),
        pytest.param("gaussian_e", marks=pytest.mark.slow),
        "moffat",
    ],
)
def test_traced_psf_parameters_have_the_same_derivatives_both_ways(psf):
    """PSF size and ellipticity traced (psf_sigma or psf_fwhm, psf_e1, psf_e2), vmapped over
    two stamps: each stamp's Jacobian by jacfwd equals jacrev's."""
    size_key = "psf_fwhm" if psf.startswith("moffat") else "psf_sigma"
    fixed = {k: v for k, v in PSFS[psf].items() if k not in (size_key, "psf_e1", "psf_e2")}

    def f(p):
        return draw_galaxy(flux=1.1, half_light_radius=0.35, e1=0.1, e2=-0.05, g1=0.02,
                           nx=16, ny=16, scale=0.263, fft_size=32, **fixed,
                           **{size_key: p[0], "psf_e1": p[1], "psf_e2": p[2]})  # fmt: skip

    p = jnp.array([[0.8 if size_key == "psf_fwhm" else 0.35, 0.03, -0.02],
                   [0.9 if size_key == "psf_fwhm" else 0.4, -0.01, 0.02]])  # fmt: skip
    fwd = jax.jit(jax.vmap(jax.jacfwd(f)))(p)
    rev = jax.jit(jax.vmap(jax.jacrev(f)))(p)
    assert float(jnp.abs(fwd - rev).max()) < 1e-12 * float(jnp.abs(fwd).max())
    assert float(jnp.abs(fwd).max()) > 0


@pytest.mark.parametrize("psf", ["gaussian_e", "moffat", "moffat_trunc"])
def test_a_fixed_psf_renders_and_differentiates_as_a_traced_one(psf):
    """A PSF given as numbers is evaluated when the program is traced (its factor on the
    alias grids is a constant of the program); the same PSF with traced ellipticity is
    computed in the program. Stamps, gradients and forward-mode Jacobians of two vmapped
    stamps agree to rounding."""
    e = jnp.array([PSFS[psf]["psf_e1"], PSFS[psf]["psf_e2"]])
    x = jnp.stack([jnp.asarray(X0), jnp.asarray(X0) * 0.9])

    def fixed(x):
        return _stamp(x, "exponential", PSFS[psf])

    def traced(x, e):
        return _stamp(x, "exponential", {**PSFS[psf], "psf_e1": e[0], "psf_e2": e[1]})

    def loss(f):
        return lambda x: jnp.sum(jnp.sin(3.0 * jax.vmap(f)(x)))

    if psf.startswith("moffat"):  # the table is read in the traced program only
        assert "gather" not in str(jax.make_jaxpr(jax.grad(loss(fixed)))(x))
        assert "gather" in str(jax.make_jaxpr(lambda x: loss(lambda y: traced(y, e))(x))(x))
    for transform in (jax.vmap, lambda f: jax.grad(loss(f)), lambda f: jax.vmap(jax.jacfwd(f))):
        a = jax.jit(transform(fixed))(x)
        b = jax.jit(lambda x, e: transform(lambda y: traced(y, e))(x))(x, e)  # noqa: B023
        assert float(jnp.abs(a - b).max()) < 1e-12 * float(jnp.abs(a).max())
