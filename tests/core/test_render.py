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


# Static groups (stamp, pixel scale) with the half-light radii they hold: each stamp
# is large enough that the profile has fallen to <~1e-2 of its peak at the edge.
GROUPS = {
    "48x48@0.3": ((48, 48, 0.3), (0.2, 1.5)),
    "33x32@0.3": ((33, 32, 0.3), (0.2, 0.8)),
    "47x47@0.2": ((47, 47, 0.2), (0.2, 0.8)),
    "64x64@0.2": ((64, 64, 0.2), (0.2, 1.0)),
    "64x64@0.1": ((64, 64, 0.1), (0.2, 0.5)),
}
PSF_SIGMAS = (0.2, 0.3, 0.4, 0.5, 0.6, 0.8)


@functools.cache
def comparison(profile, group):
    """(ours - GalSim default, ours - converged GalSim, default - converged), / peak."""
    (nx, ny, scale), hlr = GROUPS[group]
    cases = make_cases(sorted(GROUPS).index(group), 12, hlr=hlr, psf=PSF_SIGMAS)
    ours = draw_cases(cases, profile=profile, nx=nx, ny=ny, scale=scale)
    rows = []
    for case, image in zip(cases, ours, strict=True):
        kw = {"nx": nx, "ny": ny, "scale": scale, "profile": profile}
        default = galsim_image(case, **kw)
        converged = galsim_image(case, gsparams=ACCURATE_GSPARAMS, **kw)
        peak = default.max()
        rows.append(
            (
                np.abs(image - default).max() / peak,
                np.abs(image - converged).max() / peak,
                np.abs(default - converged).max() / peak,
            )
        )
    return np.array(rows)


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_matches_galsim_exponential(group):
    err = comparison("exponential", group)
    assert err[:, 1].max() <= TOL  # converged GalSim
    # Default drawImage: within 1e-6 plus GalSim's own error there (see corner test).
    assert np.all(err[:, 0] <= TOL + err[:, 2])


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_matches_galsim_gaussian(group):
    err = comparison("gaussian", group)
    assert err[:, 1].max() <= TOL
    assert np.all(err[:, 0] <= TOL + err[:, 2])


def test_matches_galsim_default_where_it_is_converged():
    """Where GalSim's default drawImage is itself converged (to 1e-7), we match it to 1e-6.

    Only exponential cases qualify: for Gaussian galaxies GalSim's defaults
    (maxk_threshold 1e-3 on both Gaussians) leave errors of 2e-7 to 3e-6 of the peak.
    """
    errs = np.concatenate(
        [comparison(p, g) for p in ("exponential", "gaussian") for g in sorted(GROUPS)]
    )
    converged = errs[:, 2] < 1e-7
    assert converged.sum() >= 40
    assert errs[converged, 0].max() <= TOL


def test_galsim_default_is_the_accuracy_limit_near_psf_sigma_equal_pixel():
    """Exponential, hlr 0.2", PSF sigma = pixel = 0.3": GalSim's default (maxk_threshold
    1e-3, no folding when maxk < pi/scale) is off by ~4e-5 of the peak; we match the
    converged GalSim to < 1e-6."""
    case = make_cases(0, 1, hlr=(0.2, 0.2), psf=(0.3,))[0]
    kw = {"nx": 32, "ny": 32, "scale": 0.3, "profile": "exponential"}
    ours = draw_cases([case], **kw)[0]
    default = galsim_image(case, **kw)
    converged = galsim_image(case, gsparams=ACCURATE_GSPARAMS, **kw)
    peak = converged.max()
    assert np.abs(default - converged).max() / peak > 1e-5
    assert np.abs(ours - converged).max() / peak <= TOL


@pytest.mark.parametrize(("nx", "ny"), [(32, 32), (33, 33), (32, 33)])
def test_centre_convention_matches_galsim_for_odd_and_even_stamps(nx, ny):
    case = make_cases(7, 1, hlr=(0.4, 0.4), psf=(0.5,))[0]
    case["offset"] = np.array([0.5, -0.25])
    kw = {"nx": nx, "ny": ny, "scale": 0.25, "profile": "exponential"}
    ours = draw_cases([case], **kw)[0]
    reference = galsim_image(case, gsparams=ACCURATE_GSPARAMS, **kw)
    assert ours.shape == (ny, nx)
    assert np.abs(ours - reference).max() <= TOL * reference.max()


def test_exponential_scale_radius_matches_galsim():
    assert galsim.Exponential(half_light_radius=1.0).scale_radius == pytest.approx(
        1.0 / HLR_TO_R0_EXP, rel=1e-12
    )


@pytest.mark.parametrize("profile", ["exponential", "gaussian"])
def test_flux_is_conserved_in_a_large_stamp(profile):
    image = draw_galaxy(
        profile=profile,
        flux=2.5,
        half_light_radius=0.5,
        e1=0.3,
        e2=-0.2,
        g1=0.1,
        g2=0.05,
        offset=(0.3, -0.2),
        psf_sigma=0.4,
        nx=96,
        ny=96,
        scale=0.25,
    )
    assert float(jnp.sum(image)) == pytest.approx(2.5, rel=1e-6)


def test_vmap_batch_equals_each_stamp_drawn_alone():
    cases = make_cases(3, 4, hlr=(0.3, 0.9), psf=(0.3, 0.6))
    kw = {"profile": "exponential", "nx": 24, "ny": 25, "scale": 0.3}
    batch = draw_cases(cases, **kw)
    for case, image in zip(cases, batch, strict=True):
        alone = draw_galaxy(**{k: case[k] for k in PARAMS}, **kw)
        # another vmap width may round the FFT's last bits differently: 1e-12 of the peak
        np.testing.assert_allclose(image, np.asarray(alone), rtol=0, atol=1e-12 * image.max())


def test_jit_traces_once_for_new_parameter_values():
    traces = []

    @jax.jit
    def draw(g1, g2):
        traces.append(1)
        return draw_galaxy(
            flux=1.0, half_light_radius=0.5, g1=g1, g2=g2, psf_sigma=0.4, nx=16, ny=16, scale=0.3
        )

    first = draw(0.1, 0.0)
    second = draw(-0.2, 0.3)
    assert len(traces) == 1
    assert not np.allclose(first, second)


def test_output_dtype_follows_inputs():
    kw = {"nx": 16, "ny": 16, "scale": 0.3}
    f64 = draw_galaxy(flux=1.0, half_light_radius=0.5, psf_sigma=0.4, **kw)
    f32 = draw_galaxy(
        flux=jnp.float32(1.0),
        half_light_radius=jnp.float32(0.5),
        offset=jnp.zeros(2, jnp.float32),
        psf_sigma=jnp.float32(0.4),
        **kw,
    )
    assert f64.dtype == jnp.float64
    assert f32.dtype == jnp.float32
    # float32 rounding (eps 1.2e-7) grown by the FFT's log2 N stages and the profile's
    # arithmetic: ~1e-6 of the peak; 1e-5 leaves a CPU's other rounding room
    np.testing.assert_allclose(np.asarray(f32), np.asarray(f64), atol=1e-5 * float(f64.max()))


def _loss(params, weights):
    image = draw_galaxy(
        profile="exponential",
        flux=params[0],
        half_light_radius=params[1],
        e1=params[2],
        e2=params[3],
        g1=params[4],
        g2=params[5],
        offset=params[6:8],
        psf_sigma=params[8],
        nx=24,
        ny=24,
        scale=0.3,
    )
    return jnp.sum(image * weights)


def test_gradient_matches_central_finite_differences():
    params = jnp.array([1.3, 0.6, 0.2, -0.1, 0.05, 0.12, 0.3, -0.2, 0.45])
    weights = jax.random.normal(jax.random.PRNGKey(1), (24, 24))
    assert_grad_matches_central_differences(jax.jit(_loss), params, weights)


def assert_grad_matches_central_differences(loss, params, weights, step=1e-6):
    """jax.grad of ``loss(params, weights)`` against central finite differences."""
    grad = jax.jit(jax.grad(loss))(params, weights)
    numeric = []
    for i in range(params.size):
        delta = jnp.zeros_like(params).at[i].set(step)
        numeric.append((loss(params + delta, weights) - loss(params - delta, weights)) / (2 * step))
    np.testing.assert_allclose(np.asarray(grad), np.array(numeric), rtol=1e-6, atol=1e-8)


EXTREME = {
    "|g| > 1": {"g1": 1.5, "g2": 0.7},
    "|g| = 1": {"g1": 0.0, "g2": -1.0},
    "|e| >> 1": {"e1": -3.0, "e2": 40.0},
    "e and g at 1": {"e1": 1.0, "g1": -1.0},
    "zero size": {"half_light_radius": 0.0},
    "negative size": {"half_light_radius": -1.0},
    "zero psf": {"psf_sigma": 0.0},
    "negative psf": {"psf_sigma": -0.3},
    "huge offset": {"offset": (1e4, -3e5)},
    "huge shear": {"g1": 1e30, "g2": -1e30},
    "zero flux": {"flux": 0.0},
}


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
@pytest.mark.parametrize("profile", ["exponential", "gaussian"])
@pytest.mark.parametrize("override", list(EXTREME.values()), ids=list(EXTREME))
def test_extreme_inputs_give_finite_images_and_gradients(profile, override, dtype):
    base = {
        "flux": 1.0,
        "half_light_radius": 0.5,
        "e1": 0.1,
        "e2": 0.0,
        "g1": 0.0,
        "g2": 0.05,
        "offset": (0.1, 0.2),
        "psf_sigma": 0.4,
    }
    values = {k: jnp.asarray(v, dtype=dtype) for k, v in {**base, **override}.items()}
    draw = functools.partial(draw_galaxy, profile=profile, nx=16, ny=17, scale=0.3)
    image = draw(**values)
    assert image.dtype == dtype
    assert bool(jnp.all(jnp.isfinite(image)))
    grads = jax.grad(lambda v: jnp.sum(draw(**v) ** 2))(values)
    for name, g in grads.items():
        assert bool(jnp.all(jnp.isfinite(g))), name


def test_unknown_profile_is_rejected():
    with pytest.raises(ValueError, match="profile"):
        draw_galaxy(
            profile="sersic", flux=1.0, half_light_radius=0.5, psf_sigma=0.4, nx=8, ny=8, scale=0.3
        )


# --------------------------------------------------------------------------- PSF shapes
# Moffat and elliptical PSFs against galsim.Moffat(beta, fwhm, trunc).shear(g1=e1, g2=e2)
# (or Gaussian(sigma).shear) convolved with the galaxy, converged GSParams.

MOFFAT_BETAS = (2.5, 3.5, 4.765)
MOFFAT_GROUPS = {  # (stamp, scale, fwhm, hlr range): PSF FWHM from ~2 to ~5 pixels
    "40x40@0.2_fwhm0.9": ((40, 40, 0.2), 0.9, (0.2, 0.8)),
    "33x32@0.263_fwhm0.6": ((33, 32, 0.263), 0.6, (0.2, 0.6)),
}


@functools.cache
def galsim_moffat(beta, fwhm, trunc):
    """One GalSim Moffat per PSF: it builds its (truncated) Hankel table once (~15 s)."""
    return galsim.Moffat(beta=beta, fwhm=fwhm, trunc=trunc, gsparams=ACCURATE_GSPARAMS)


def galsim_psf_image(case, *, nx, ny, scale, profile, psf):
    cls = {"exponential": galsim.Exponential, "gaussian": galsim.Gaussian}[profile]
    gs = ACCURATE_GSPARAMS
    gal = cls(half_light_radius=case["half_light_radius"], flux=case["flux"], gsparams=gs)
    gal = gal.shear(g1=case["e1"], g2=case["e2"]).shear(g1=case["g1"], g2=case["g2"])
    if psf.get("psf_profile") == "moffat":
        p = galsim_moffat(psf["psf_beta"], psf["psf_fwhm"], psf["psf_trunc"])
    else:
        p = galsim.Gaussian(sigma=case["psf_sigma"], gsparams=gs)
    p = p.shear(g1=case["psf_e1"], g2=case["psf_e2"])
    offset = tuple(float(v) for v in case["offset"])
    return (
        galsim.Convolve(gal, p, gsparams=gs)
        .drawImage(nx=nx, ny=ny, scale=scale, offset=offset)
        .array
    )


def with_psf_shapes(cases, seed, emax=0.15):
    """Cases with PSF ellipticities: the first round, the others |e_psf| <= emax."""
    rng = np.random.default_rng(seed)
    for i, case in enumerate(cases):
        mod, ang = (0.0, 0.0) if i == 0 else (rng.uniform(0.0, emax), rng.uniform(0.0, 2 * np.pi))
        case["psf_e1"], case["psf_e2"] = mod * np.cos(ang), mod * np.sin(ang)
    return cases


def psf_comparison(profile, nx, ny, scale, psf, cases):
    """max |ours - converged GalSim| / peak per case; static PSF settings in ``psf``."""
    names = [k for k in (*PARAMS, "psf_e1", "psf_e2") if k in cases[0]]
    stacked = {k: jnp.asarray(np.array([c[k] for c in cases], dtype=np.float64)) for k in names}
    draw = functools.partial(draw_galaxy, profile=profile, nx=nx, ny=ny, scale=scale, **psf)
    ours = np.asarray(jax.jit(jax.vmap(lambda p: draw(**p)))(stacked))
    err = []
    for case, image in zip(cases, ours, strict=True):
        ref = galsim_psf_image(case, nx=nx, ny=ny, scale=scale, profile=profile, psf=psf)
        err.append(np.abs(image - ref).max() / ref.max())
    return np.array(err)


@pytest.mark.parametrize("trunc", [0.0, 3.0], ids=["untruncated", "trunc3"])
@pytest.mark.parametrize("beta", MOFFAT_BETAS)
def test_moffat_psf_matches_galsim(beta, trunc):
    """Each beta on one stamp group (alternating), exponential and Gaussian galaxies."""
    group = sorted(MOFFAT_GROUPS)[MOFFAT_BETAS.index(beta) % len(MOFFAT_GROUPS)]
    (nx, ny, scale), fwhm, hlr = MOFFAT_GROUPS[group]
    cases = make_cases(int(10 * beta), 4, hlr=hlr, psf=(0.0,), gmax=0.4)
    cases = with_psf_shapes([{k: v for k, v in c.items() if k != "psf_sigma"} for c in cases], 5)
    psf = {"psf_profile": "moffat", "psf_fwhm": fwhm, "psf_beta": beta, "psf_trunc": trunc}
    for profile in ("exponential", "gaussian"):
        assert psf_comparison(profile, nx, ny, scale, psf, cases).max() <= TOL


@pytest.mark.parametrize("profile", ["exponential", "gaussian"])
def test_elliptical_gaussian_psf_matches_galsim(profile):
    cases = with_psf_shapes(make_cases(11, 6, hlr=(0.2, 0.8), psf=(0.3, 0.4, 0.5)), 6, emax=0.3)
    err = psf_comparison(profile, 40, 40, 0.2, {}, cases)
    assert err.max() <= TOL


def test_psf_ellipticity_moves_the_image():
    """A 5% PSF ellipticity changes the stamp by far more than the rendering accuracy."""
    kw = {"flux": 1.0, "half_light_radius": 0.4, "psf_profile": "moffat", "psf_fwhm": 0.8,
          "psf_beta": 3.5, "nx": 24, "ny": 24, "scale": 0.2}  # fmt: skip
    round_ = np.asarray(draw_galaxy(**kw))
    sheared = np.asarray(draw_galaxy(**kw, psf_e1=0.05))
    assert np.abs(sheared - round_).max() > 1e-3 * round_.max()


def test_round_psf_fast_path_equals_the_elliptical_path():
    """psf_e given as Python zeros (separable Gaussian) or as arrays (2-D factor) and
    psf_sigma vs psf_fwhm: the same image."""
    kw = {"flux": 1.3, "half_light_radius": 0.5, "e1": 0.2, "e2": -0.1, "g1": 0.02,
          "offset": (0.2, -0.3), "nx": 20, "ny": 21, "scale": 0.25}  # fmt: skip
    fast = np.asarray(draw_galaxy(**kw, psf_sigma=0.4))
    fwhm = 0.4 * 2.0 * np.sqrt(2.0 * np.log(2.0))
    general = draw_galaxy(**kw, psf_fwhm=fwhm, psf_e1=jnp.asarray(0.0), psf_e2=jnp.asarray(0.0))
    # two code paths of the same transform: rounding, 1e-12 of the peak
    np.testing.assert_allclose(np.asarray(general), fast, rtol=0, atol=1e-12 * fast.max())


def test_numerical_hankel_table_matches_the_closed_form():
    """The truncated table (numerical Hankel transform) with a far truncation equals the
    untruncated closed form (Bessel K) to the truncation's own effect, ~T^(2 - 2 beta)."""
    from scipy.special import gamma, kv

    from shearbatch.core.psf import moffat_table

    beta, nu = 4.765, 3.765
    numeric = moffat_table(beta, 30.0, 20.0)  # T = 30: truncation effect ~ 30^-7.5 ~ 1e-11
    q = numeric.h * np.arange(1, numeric.values.size)
    norm = 2.0 ** (nu - 1) * gamma(nu)
    np.testing.assert_allclose(numeric.values[1:], q**nu * kv(nu, q) / norm, rtol=0, atol=1e-9)
    np.testing.assert_allclose(
        numeric.slopes[1:], -(q**nu) * kv(nu - 1, q) / norm, rtol=0, atol=1e-9
    )
    closed = moffat_table(beta)
    qc = closed.h * np.arange(1, closed.values.size)
    np.testing.assert_allclose(closed.values[1:], qc**nu * kv(nu, qc) / norm, rtol=1e-12)
    assert numeric.values[0] == pytest.approx(1.0, abs=1e-14) and closed.values[0] == 1.0


@pytest.mark.parametrize("trunc", [0.0, 3.0])
def test_moffat_flux_is_conserved_in_a_large_stamp(trunc):
    image = draw_galaxy(
        flux=2.5, half_light_radius=0.5, e1=0.3, g1=0.1, offset=(0.3, -0.2),
        psf_profile="moffat", psf_fwhm=0.8, psf_beta=4.765, psf_trunc=trunc, psf_e2=0.1,
        nx=96, ny=96, scale=0.25,
    )  # fmt: skip
    assert float(jnp.sum(image)) == pytest.approx(2.5, rel=1e-6)


def _moffat_loss(params, weights, trunc):
    image = draw_galaxy(
        flux=params[0], half_light_radius=params[1], e1=params[2], e2=params[3],
        g1=params[4], g2=params[5], offset=params[6:8], psf_e1=params[8], psf_e2=params[9],
        psf_profile="moffat", psf_fwhm=0.7, psf_beta=3.0, psf_trunc=trunc,
        nx=24, ny=24, scale=0.3,
    )  # fmt: skip
    return jnp.sum(image * weights)


@pytest.mark.parametrize("trunc", [0.0, 2.5])
def test_moffat_gradient_matches_central_finite_differences(trunc):
    params = jnp.array([1.3, 0.6, 0.2, -0.1, 0.05, 0.12, 0.3, -0.2, 0.04, -0.03])
    weights = jax.random.normal(jax.random.PRNGKey(2), (24, 24))
    loss = jax.jit(functools.partial(_moffat_loss, trunc=trunc))
    assert_grad_matches_central_differences(loss, params, weights)


@pytest.mark.parametrize(
    "psf",
    [
        {"psf_sigma": 0.35},
        {"psf_profile": "moffat", "psf_fwhm": 0.9, "psf_beta": 3.5, "psf_e1": 0.01},
    ],
)
def test_alias_band_gradient_matches_central_finite_differences(psf):
    """With an alias band (the alias terms on part of the grid only) the hand-written
    derivative is still the derivative of the image drawn (fixed Moffat and round Gaussian)."""

    def loss(x, weights):
        image = draw_galaxy(profile="exponential", flux=x[0], half_light_radius=x[1], e1=x[2],
                            e2=x[3], g1=x[4], g2=x[5], offset=x[6:8], **psf, nx=16, ny=16,
                            scale=0.263, fft_size=32, alias_band=0.8)  # fmt: skip
        return jnp.sum(image * weights)

    params = jnp.array([1.3, 0.3, 0.2, -0.1, 0.05, 0.12, 0.3, -0.2])
    weights = jax.random.normal(jax.random.PRNGKey(4), (16, 16))
    assert_grad_matches_central_differences(jax.jit(loss), params, weights)


def test_alias_band_out_of_range_is_rejected():
    with pytest.raises(ValueError, match="alias_band"):
        draw_galaxy(flux=1.0, half_light_radius=0.3, psf_sigma=0.3, nx=8, ny=8, scale=0.3,
                    alias_band=1.0)  # fmt: skip


def test_moffat_gradient_is_finite_at_zero_psf_ellipticity():
    """k = 0 is on the grid: sqrt(q^2) there must not poison the gradient."""
    g = jax.grad(lambda e: jnp.sum(draw_galaxy(
        flux=1.0, half_light_radius=0.4, psf_profile="moffat", psf_fwhm=0.7, psf_beta=3.0,
        psf_e1=e, nx=12, ny=12, scale=0.3) ** 2))(jnp.asarray(0.0))  # fmt: skip
    assert bool(jnp.isfinite(g))


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
@pytest.mark.parametrize(
    "override",
    [{}, {"psf_e1": 1.5, "psf_e2": 0.7}, {"g1": 1.0, "e1": -1.0}, {"half_light_radius": 0.0}],
    ids=["plain", "|psf e| > 1", "e and g at 1", "zero size"],
)
def test_moffat_extreme_inputs_give_finite_images_and_gradients(override, dtype):
    base = {"flux": 1.0, "half_light_radius": 0.5, "e1": 0.1, "e2": 0.0, "g1": 0.0,
            "g2": 0.05, "offset": (0.1, 0.2), "psf_e1": 0.02, "psf_e2": 0.0}  # fmt: skip
    values = {k: jnp.asarray(v, dtype=dtype) for k, v in {**base, **override}.items()}
    draw = functools.partial(draw_galaxy, psf_profile="moffat", psf_fwhm=0.7, psf_beta=2.5,
                             psf_trunc=2.0, nx=16, ny=17, scale=0.3)  # fmt: skip
    image = draw(**values)
    assert image.dtype == dtype
    assert bool(jnp.all(jnp.isfinite(image)))
    grads = jax.grad(lambda v: jnp.sum(draw(**v) ** 2))(values)
    for name, g in grads.items():
        assert bool(jnp.all(jnp.isfinite(g))), name


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"psf_profile": "moffat", "psf_fwhm": 0.7}, "psf_beta"),
        ({"psf_profile": "moffat", "psf_beta": 3.0}, "psf_fwhm"),
        ({"psf_sigma": 0.3, "psf_fwhm": 0.7}, "exactly one"),
        ({}, "exactly one"),
        ({"psf_profile": "airy", "psf_fwhm": 0.7}, "psf_profile"),
        ({"psf_profile": "moffat", "psf_fwhm": 0.7, "psf_beta": 1.2}, "beta > 1.5"),
        ({"psf_profile": "moffat", "psf_fwhm": 0.7, "psf_beta": 3.0, "psf_trunc": 0.1}, "trunc"),
    ],
)
def test_bad_psf_arguments_are_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        draw_galaxy(flux=1.0, half_light_radius=0.5, nx=8, ny=8, scale=0.3, **kwargs)


def test_truncated_moffat_needs_a_concrete_fwhm():
    def f(fwhm):
        return draw_galaxy(flux=1.0, half_light_radius=0.5, psf_profile="moffat",
                           psf_fwhm=fwhm, psf_beta=3.0, psf_trunc=2.0,
                           nx=8, ny=8, scale=0.3, fft_size=16)  # fmt: skip

    with pytest.raises(ValueError, match="concrete psf_fwhm"):
        jax.jit(f)(0.7)
