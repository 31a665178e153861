"""Numerics against independent references: Newton/Laplace on an exact Gaussian, the
convergence statistics against ArviZ, the two prior samplers against each other, and a
float32 campaign end to end in a process where x64 is really off."""

import math
import os
import subprocess
import sys
import types
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import xarray as xr
from scipy import stats as st

from shearbatch.core import diagnostics
from shearbatch.core.methods import map as map_
from shearbatch.core.priors import draw_numpy, to_distribution
from shearbatch.io import find_realization_dirs, read_json, read_posterior
from shearbatch.spec import Prior
from tests.conftest import write_config

# --------------------------------------------------------------------------- (a) Newton, Laplace


def gaussian(eigenvalues, seed=0):
    """U(x) = (x - mu)^T A (x - mu) / 2 in 3-D, A = Q diag(eigenvalues) Q^T (non-diagonal)."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.normal(size=(3, 3)))
    a = q @ np.diag(eigenvalues) @ q.T
    mu = np.array([0.3, -1.2, 2.5]) / np.sqrt(np.asarray(eigenvalues))  # a few sigma from 0
    aj, muj = jnp.asarray(a), jnp.asarray(mu)

    def potential(x, obs=None):
        del obs
        r = x - muj
        return 0.5 * r @ aj @ r

    return a, mu, potential


@pytest.mark.parametrize(
    "eigenvalues, mode_atol, cov_rtol",
    [
        # well conditioned: exact to rounding
        ([4.0, 1.0, 0.25], 1e-10, 1e-10),
        # Level 0's scales (sigma(g) ~ 1e-5 next to O(1) latents), condition number 1e10:
        # the mode is exact to the stopping rule, 0.5 r^T A r <= tol (Mahalanobis distance
        # <= sqrt(2 tol)), and H^-1 to a backward-stable solve, 10 cond(A) eps
        ([1e10, 1e8, 1.0], None, 10 * 1e10 * np.finfo(float).eps),
    ],
    ids=["cond16", "cond1e10"],
)
def test_newton_and_laplace_are_exact_on_a_gaussian(eigenvalues, mode_atol, cov_rtol):
    a, mu, potential = gaussian(eigenvalues)
    tol = map_.default_tol(jnp.float64)
    x0 = jnp.zeros(3)
    # jitted: one compiled program each, which the persistent cache keeps between sessions
    res, hess = jax.jit(lambda x: map_._newton(x, potential, num_steps=50, tol=tol))(x0)
    # one Newton step, then the check; steps are capped at map_.MAX_STEP per coordinate,
    # so a mode farther than that from x0 takes that many more (full steps after it)
    extra = int(np.ceil(np.max(np.abs(mu)) / map_.MAX_STEP))
    assert bool(res.converged) and int(res.n_steps) <= 3 + extra
    r = np.asarray(res.x) - mu
    if mode_atol is not None:
        np.testing.assert_allclose(np.asarray(res.x), mu, rtol=0, atol=mode_atol)
    assert 0.5 * r @ a @ r <= tol
    cov = np.linalg.inv(a)
    # relative error per eigendirection: Sigma A = I
    np.testing.assert_allclose(np.linalg.inv(np.asarray(hess.G)) @ a, np.eye(3), atol=cov_rtol)

    # laplace(): the same mode, and its draws x* + F eps have covariance H^-1 = A^-1
    post = types.SimpleNamespace(
        x0=x0, potential_fn=potential, mode_fn=potential, hessian=jax.hessian
    )
    settings = map_.MapConfig(optimizer="newton", num_steps=50, num_samples=10)
    lap = jax.jit(lambda obs: map_.laplace(obs, post, settings))(jnp.zeros(()))
    assert bool(lap.ok) and bool(lap.opt.converged)
    # another compiled program: the same mode to rounding, in posterior sd (1e-6 sd; the
    # stopping rule alone allows sqrt(2 tol) = 1.4e-5 sd at the default 1e-10)
    d = np.asarray(lap.opt.x) - np.asarray(res.x)
    assert np.sqrt(d @ a @ d) <= 1e-6, d
    sigma = np.asarray(map_.covariance(lap, map_.layout_of(post)))
    np.testing.assert_allclose(sigma @ a, np.eye(3), atol=cov_rtol)
    np.testing.assert_allclose(sigma, cov, rtol=0, atol=cov_rtol * np.abs(cov).max())


# --------------------------------------------------------------------------- (b) vs ArviZ


def arviz_reference():
    """(rhat, ess, bfmi) of the installed ArviZ: 0.x (arviz) or 1.x (arviz_stats)."""
    try:
        import arviz as az

        if all(hasattr(az, f) for f in ("rhat", "ess", "bfmi")):
            return az.rhat, az.ess, az.bfmi
    except ImportError:
        pass
    try:
        import arviz_stats as azs
    except ImportError:
        pytest.skip("neither arviz (0.x) nor arviz_stats (1.x) with rhat/ess/bfmi is installed")
    if not all(hasattr(azs, f) for f in ("rhat", "ess", "bfmi")):
        pytest.skip("arviz_stats lacks rhat/ess/bfmi")
    return azs.rhat, azs.ess, azs.bfmi


def ar1(rng, rho, shape=(4, 1000)):
    e = rng.normal(size=shape)
    x = np.empty(shape)
    x[:, 0] = e[:, 0] / math.sqrt(1 - rho * rho)
    for t in range(1, shape[1]):
        x[:, t] = rho * x[:, t - 1] + e[:, t]
    return x


def draws(kind: str) -> np.ndarray:
    rng = np.random.default_rng(KINDS.index(kind) + 1)
    if kind == "iid":
        return rng.normal(size=(4, 1000))
    if kind == "ar1_0.9":
        return ar1(rng, 0.9)
    if kind == "shifted_means":  # one chain elsewhere: bulk R-hat sees it
        return rng.normal(size=(4, 1000)) + np.array([0.0, 0.0, 0.0, 1.0])[:, None]
    if kind == "ar1_shifted":
        return ar1(rng, 0.9) + np.array([0.0, 0.0, 0.0, 2.0])[:, None]
    if kind == "scaled_chain":  # same means, one chain 3x wider: only the folded R-hat sees it
        return rng.normal(size=(4, 1000)) * np.array([1.0, 1.0, 1.0, 3.0])[:, None]
    if kind == "cauchy":  # heavy tails: rank normalisation matters
        return rng.standard_cauchy(size=(4, 1000))
    raise ValueError(kind)


KINDS = ["iid", "ar1_0.9", "shifted_means", "ar1_shifted", "scaled_chain", "cauchy"]
#: R-hat: the same rank normalisation and split-R-hat formula (measured difference 0 to
#: 2e-16); 1e-6 is far below the 1.01 gate's resolution.
RHAT_ATOL = 1e-6
#: ESS: numpyro's Geyer sequence (clip at 0, running minimum) and ArviZ's (stop at the first
#: negative pair, add the next positive even lag, average non-monotone pairs, floor tau)
#: differ at the truncation lag by about one autocorrelation estimate, standard error
#: 1/sqrt(4000) = 1.6%: measured over 400 seeds per kind, at most 3.0% (iid), 0.8% (shifted
#: chains), 0.5% (AR(1)). 5% still catches a missing split, rank normalisation or fold.
ESS_RTOL = 0.05


@pytest.mark.parametrize("kind", KINDS)
def test_rhat_and_ess_agree_with_arviz(kind):
    az_rhat, az_ess, _ = arviz_reference()
    x = draws(kind)
    assert diagnostics.rhat(x) == pytest.approx(float(az_rhat(x, method="rank")), abs=RHAT_ATOL)
    for ours, method in ((diagnostics.ess_bulk, "bulk"), (diagnostics.ess_tail, "tail")):
        ref = float(az_ess(x, method=method))
        assert ours(x) == pytest.approx(ref, rel=ESS_RTOL), method


def test_the_arviz_comparison_can_fail():
    """The cases discriminate: shifted and scaled chains are flagged, iid ones not, so a
    wrong statistic (no fold, no split) would disagree with ArviZ beyond the tolerances."""
    assert diagnostics.rhat(draws("iid")) < 1.01
    assert diagnostics.rhat(draws("shifted_means")) > 1.05
    assert diagnostics.rhat(draws("scaled_chain")) > 1.05  # the folded half of R-hat
    assert diagnostics.ess_bulk(draws("ar1_0.9")) < 0.2 * diagnostics.ess_bulk(draws("iid"))


@pytest.mark.parametrize("rho", [0.0, 0.9])
def test_bfmi_agrees_with_arviz(rho):
    _, _, az_bfmi = arviz_reference()
    energy = ar1(np.random.default_rng(7), rho)  # rho = 0: iid
    ours = diagnostics.bfmi(energy)
    ref = np.asarray(az_bfmi(energy), dtype=float)
    np.testing.assert_allclose(ours, ref, rtol=1e-12)
    # the cases differ: E-BFMI ~ 2 (1 - rho), low (< 0.3 is the usual warning) for rho 0.9
    assert np.all(ours < 0.3 if rho else ours > 1.5), ours


# --------------------------------------------------------------------------- (c) prior samplers

INF = math.inf
PRIORS = {
    "normal": Prior("normal", (0.3, 2.0)),
    "lognormal": Prior("lognormal", (0.5, 0.4)),  # median 0.5
    "uniform": Prior("uniform", (-1.0, 2.0)),
    "truncnormal_one_bound": Prior("truncnormal", (0.0, 1.0, 0.5, INF)),
    "truncnormal_two_bounds": Prior("truncnormal", (0.0, 0.3, -0.2, 0.5)),
}
N_DRAWS = 4000
#: two-sample KS p-value floor. Under correct samplers p is uniform: each case fails by
#: chance with probability 1e-3 over seeds (the seeds here are fixed, so the outcome is
#: deterministic; 5 cases -> 0.5% of seed choices would fail). draw_numpy's truncnormal
#: costs ~1 ms a draw (scipy's rvs overhead), hence two truncnormal cases, not more.
KS_P_MIN = 1e-3


def numpy_draws(p, seed):
    rng = np.random.default_rng(seed)
    return np.array([draw_numpy(p, rng) for _ in range(N_DRAWS)])


def numpyro_draws(p, seed):
    # jitted: one program per prior, kept by the persistent cache (eagerly, TruncatedNormal's
    # ops compile one by one, ~5 s a session)
    sample = jax.jit(lambda key: to_distribution(p).sample(key, (N_DRAWS,)))
    return np.asarray(sample(jax.random.PRNGKey(seed)))


@pytest.mark.parametrize("name", list(PRIORS))
def test_numpy_and_numpyro_prior_samplers_agree(name):
    p = PRIORS[name]
    seed = list(PRIORS).index(name)
    a = numpy_draws(p, seed)
    b = numpyro_draws(p, seed)
    assert st.ks_2samp(a, b).pvalue > KS_P_MIN
    if p.kind == "truncnormal":
        lo, hi = p.args[2], p.args[3]
        for x in (a, b):
            assert np.all((x >= lo) & (x <= hi))


def test_the_ks_comparison_has_power():
    """Bounds read in raw units by scipy's truncnorm (which wants standardised ones), a
    classic slip, is caught at this sample size."""
    p = Prior("truncnormal", (1.0, 0.3, -INF, 1.2))
    mean, sd, lo, hi = p.args
    wrong = st.truncnorm.rvs(lo, hi, loc=mean, scale=sd, size=N_DRAWS, random_state=1)
    right = numpyro_draws(p, 1)
    assert st.ks_2samp(wrong, right).pvalue < KS_P_MIN


# --------------------------------------------------------------------------- (d) float32 end to end


def bias_run_cmd() -> list[str]:
    exe = Path(sys.executable).parent / "bias-run"
    if exe.is_file():
        return [str(exe)]
    return [sys.executable, "-c", "from shearbatch.cli import bias_run; bias_run()"]


def test_float32_campaign_end_to_end(tmp_path):
    """In a process where x64 is off: float32 files, finite draws, estimates within 4
    posterior sigma of the truth (8 comparisons: a false alarm has probability 5e-4)."""
    cfg = write_config(
        tmp_path / "f32.yaml",
        {"image.size_x": 16, "image.size_y": 16, "gal.half_light_radius": 0.3,
         "image.noise.sigma": 1e-3, "inference.map_config": {"num_samples": 400}},
    )  # fmt: skip
    out = tmp_path / "out"
    proc = subprocess.run(
        [*bias_run_cmd(), "--config", cfg, "--shear-grid", "-0.03", "0.03",
         "--g2-true", "0.01", "--n-realizations", "2", "--batch-size", "4", "--no-x64",
         "--no-progress", "--output-dir", str(out)],
        capture_output=True, text=True, check=False, env=dict(os.environ),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "x64=False" in proc.stderr
    dirs = find_realization_dirs(out)
    assert len(dirs) == 4
    for d in dirs:
        with xr.open_dataset(d / "posterior.nc") as root:
            assert root.attrs["dtype"] == "float32"
        conv = read_json(d / "convergence.json")
        assert conv["status"] == "ok" and conv["optimizer"]["converged"], conv
        truth = read_json(d / "truth.json")
        post = read_posterior(d / "posterior.nc")
        for site in ("g1", "g2"):
            g = post[site]
            assert g.dtype == np.float32 and g.shape == (1, 400)
            assert np.all(np.isfinite(g))
            sd = float(g.std())
            assert sd > 0
            assert abs(float(g.mean()) - truth[site]) < 4 * sd, (d.name, site, g.mean(), sd)


def test_per_site_statistics_of_many_galaxies_equal_each_galaxy_alone():
    """per_site computes a per-galaxy site's statistics in one vectorised call: each equals
    the statistic of that galaxy's (chain, draw) array alone, a constant or non-finite
    galaxy gives NaN without touching its neighbours."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(4, 300, 5))
    x[..., 1] = np.cumsum(x[..., 1], axis=1)  # a random walk: R-hat > 1, small ESS
    x[..., 2] = 0.7  # constant
    x[0, 3, 3] = np.nan
    for fn in (diagnostics.rhat, diagnostics.ess_bulk, diagnostics.ess_tail):
        many = diagnostics.per_site(fn, {"e1": x})["e1"]
        alone = [fn(x[..., j]) for j in range(x.shape[2])]
        assert np.isnan(many[2]) and np.isnan(many[3]) and np.isnan(alone[2]), fn.__name__
        for j in (0, 1, 4):
            assert many[j] == pytest.approx(alone[j], rel=1e-12), (fn.__name__, j)
    assert diagnostics.rhat(x[..., 1]) > 1.05  # the walk is seen
