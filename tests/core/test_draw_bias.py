"""The pooled estimator's finite-draw bias and its delta-method correction
(:func:`shearbatch.core.population_np.correction`), against an exact answer.

A pixel-free toy whose interim posteriors are Gaussian (the Level 2 population's shape
noise, ring pairs, paired +-g): each galaxy's marginal likelihood ``L_i(g)`` is known
without draws, by Gauss-Hermite quadrature (fed to the same estimator, uncorrected), so
``m_ref`` is exact on these galaxies and this noise. The estimator under test runs on K
Student-t draws (the shipped proposal at 0.75x the posterior's scale, as a heavier-tailed
pixel posterior makes it: bench/bench_draws.py, antithetic pairs, the same random numbers at both
signs as the pipeline's paired twins), repeated ``REPS`` times with fresh draws; ``dm``'s
error is the repetitions' standard error. At K = 100 the plain log of the mean weight
moves m by several errors; with the correction (the delta method alone, and the shipped
one: delta-corrected and extrapolated over the two halves of the draws), m is the exact
answer within 3 errors and 3e-5 (this test fails if the correction is removed). The correction's derivatives are checked
against finite differences, with an odd K and missing draws (its antithetic pairing).
"""

import numpy as np
import pytest

from shearbatch.core import population_np as pnp
from shearbatch.core.methods.map import student_t_log_density
from shearbatch.spec import Prior

SE, SI, G, NU = 0.26, 0.5, 0.02, 5.0
N, K, REPS = 16_000, 100, 16
MODES = ("halves", "delta", "none")  # the shipped correction, its first stage, none
TOL = 3e-5  # issue 42: the finite-draw shift of m allowed at the shipped setting
SCALE = 0.75  # the proposal 0.75x too narrow, as a heavier-tailed pixel posterior makes it


@pytest.fixture(scope="module")
def toy():
    rng = np.random.default_rng(7)
    e = rng.normal(0.0, SE, (4 * N, 2))
    e = e[np.sum(e * e, 1) < 0.8][: N // 2]
    e = np.concatenate([e, -e])  # ring pairs
    sn = 0.08 * np.exp(0.4 * rng.normal(size=(N, 1)))
    noise = sn * rng.normal(size=(N, 2))
    s2 = 1.0 / (1.0 / sn**2 + 1.0 / SI**2)
    obs = {}
    for sign in (1, -1):
        ec, gc = e[:, 0] + 1j * e[:, 1], complex(sign * G, 0.0)
        x = (ec + gc) / (1 + np.conj(gc) * ec)
        obs[sign] = np.stack([x.real, x.imag], -1) + noise
    # ring pairs whose posteriors lie 4 sds inside |eps| < 1: the quadrature is exact there
    far = np.ones(N, bool)
    for o in obs.values():
        far &= np.linalg.norm(s2 * o / sn**2, axis=1) + 4.0 * np.sqrt(s2[:, 0]) < 1.0
    far = np.tile(far[: N // 2] & far[N // 2 :], 2)
    obs = {k: o[far] for k, o in obs.items()}
    sn, s2 = sn[far], s2[far]
    prior = pnp.ShapePrior(Prior("normal", (0.0, SE)), Prior("normal", (0.0, SE)))
    return {"obs": obs, "sn": sn, "s": np.sqrt(s2), "s2": s2, "prior": prior}


def _base(t, sign, eps, log_q):
    r2 = np.sum((t["obs"][sign][:, None, :] - eps) ** 2, -1)
    log_lik = -0.5 * r2 / t["sn"] ** 2 - np.log(2 * np.pi * t["sn"] ** 2)
    return np.where(np.sum(eps * eps, -1) < 1.0, log_lik - log_q, -np.inf)


def _mu(t, sign):
    return t["s2"] * t["obs"][sign] / t["sn"] ** 2


def _m(g):
    return (g[1][0] - g[-1][0]) / (2 * G) - 1


@pytest.fixture(scope="module")
def exact(toy):
    x, w = np.polynomial.hermite.hermgauss(24)
    x1, x2 = np.meshgrid(x, x, indexing="ij")
    wq = (np.outer(w, w) / np.pi).ravel()
    z = np.sqrt(2.0) * np.stack([x1.ravel(), x2.ravel()], -1)
    g = {}
    for sign in (1, -1):
        eps = _mu(toy, sign)[:, None, :] + toy["s"][:, None] * z[None]
        log_q = -0.5 * np.sum(z * z, -1)[None] - np.log(2 * np.pi) - 2 * np.log(toy["s"])
        base = np.log(len(wq) * wq)[None] + _base(toy, sign, eps, log_q)
        g[sign] = pnp.fit(eps, base, toy["prior"], correct=False).g
    return _m(g)


@pytest.fixture(scope="module")
def shifts(toy, exact):
    """dm of the corrected and the plain estimator over REPS sets of K draws."""
    rng = np.random.default_rng(11)
    out = {mode: [] for mode in MODES}
    for _ in range(REPS):
        n = len(toy["sn"])
        z = (
            rng.normal(size=(n, K // 2, 2))
            * np.sqrt(NU / rng.chisquare(NU, (n, K // 2)))[..., None]
        )
        z = np.concatenate([z, -z], axis=1)  # antithetic pairs: k and k + K/2
        log_q = np.asarray(student_t_log_density(z, NU)) - 2 * np.log(SCALE * toy["s"])
        d = {}
        for sign in (1, -1):  # the same random numbers at both signs
            eps = _mu(toy, sign)[:, None, :] + SCALE * toy["s"][:, None] * z
            d[sign] = (eps, _base(toy, sign, eps, log_q))
        for mode in MODES:
            g = {s: pnp.fit(*d[s], toy["prior"], correct=mode).g for s in (1, -1)}
            out[mode].append(_m(g) - exact)
    return {
        c: (float(np.mean(v)), float(np.std(v, ddof=1) / np.sqrt(REPS))) for c, v in out.items()
    }


@pytest.mark.parametrize("mode", ["halves", "delta"])
def test_the_corrected_estimator_is_unbiased_at_few_draws(shifts, mode):
    dm, err = shifts[mode]
    assert abs(dm) < 3 * err + TOL, f"{mode}: dm = {dm:.2e} +- {err:.1e}"


def test_without_the_correction_few_draws_bias_m(shifts):
    # the same check on the plain log-mean-exp fails: what the correction is for
    dm, err = shifts["none"]
    assert dm < -(3 * err + TOL), f"uncorrected: dm = {dm:.2e} +- {err:.1e}"


def test_the_default_correction_is_the_shipped_one():
    assert pnp.correction_mode(True) == "halves" and pnp.correction_mode(False) == "none"


@pytest.mark.parametrize("mode", ["delta", "halves"])
@pytest.mark.parametrize("k", [12, 13])
def test_the_corrected_derivatives_are_those_of_its_value(k, mode):
    rng = np.random.default_rng(k)
    eps = rng.normal(0.0, 0.3, (20, k, 2))
    eps *= 0.9 / np.maximum(0.9, np.linalg.norm(eps, axis=-1, keepdims=True))
    base = rng.normal(0.0, 1.0, (20, k))
    base[0, 3] = -np.inf  # a missing draw
    prior = pnp.ShapePrior(Prior("normal", (0.0, SE)), Prior("normal", (0.0, SE)))
    g, h = np.array([0.03, -0.02]), 1e-5
    ev = pnp.evaluate(g, eps, base, prior, 2, correct=mode)
    np.testing.assert_array_equal(
        ev.terms, pnp.evaluate(g, eps, base, prior, 0, correct=mode).terms
    )
    if mode == "delta":
        plain = pnp.evaluate(g, eps, base, prior, 0, correct="none").terms
        np.testing.assert_allclose(ev.terms - plain, pnp.correction(_normalised(g, eps, base, prior)),
                                   rtol=1e-12, atol=1e-15)  # fmt: skip
    for i in range(2):
        d = np.zeros(2)
        d[i] = h
        up, dn = (pnp.evaluate(g + s * d, eps, base, prior, 2, correct=mode) for s in (1, -1))
        np.testing.assert_allclose((up.terms - dn.terms) / (2 * h), ev.grad[:, i], atol=1e-7)
        np.testing.assert_allclose((up.grad - dn.grad) / (2 * h), ev.hess[:, :, i], atol=1e-6)


def test_halves_extrapolate_the_delta_corrected_estimate():
    rng = np.random.default_rng(5)
    eps = rng.normal(0.0, 0.3, (10, 16, 2))
    base = rng.normal(0.0, 1.0, (10, 16))
    prior = pnp.ShapePrior(Prior("normal", (0.0, SE)), Prior("normal", (0.0, SE)))
    g = np.array([0.01, 0.02])
    a, b = pnp.half_columns(16)
    np.testing.assert_array_equal(a, [0, 1, 2, 3, 8, 9, 10, 11])  # whole pairs: j, j + 8
    np.testing.assert_array_equal(b, [4, 5, 6, 7, 12, 13, 14, 15])

    def t(cols):
        return pnp.evaluate(g, eps[:, cols], base[:, cols], prior, 0, correct="delta").terms

    want = 2.0 * t(slice(None)) - 0.5 * (t(a) + t(b))
    got = pnp.evaluate(g, eps, base, prior, 0, correct="halves").terms
    np.testing.assert_allclose(got, want, rtol=1e-13)


def _normalised(g, eps, base, prior):
    lw = pnp._block(np.asarray(g), eps, base, prior, -1)
    w = np.exp(lw - lw.max(axis=1, keepdims=True))
    return w / w.sum(axis=1, keepdims=True)


def test_pair_sums_pair_each_draw_with_its_antithetic_twin():
    p = np.arange(7.0)[None]  # K = 7: pairs (0, 4), (1, 5), (2, 6) and 3 alone
    np.testing.assert_array_equal(pnp.pair_sums(p), [[4.0, 6.0, 8.0, 3.0]])


def test_pareto_khat_reads_the_tail_and_flags_it():
    rng = np.random.default_rng(0)
    heavy = np.log1p(rng.pareto(1.0, (200, 2000)))  # generalised Pareto tail, k = 1
    light = rng.normal(0.0, 0.3, (200, 2000))  # log-normal weights: k well below 0.5
    kh, kl = pnp.pareto_khat(heavy), pnp.pareto_khat(light)
    assert np.median(kh) == pytest.approx(1.0, abs=0.1)
    # the estimate scatters by ~0.2 at 2,000 draws: ~90% above 0.70 (binomial sd 0.02)
    assert np.mean(kh > pnp.khat_threshold(2000)) > 0.8
    assert np.all(kl < pnp.khat_threshold(2000))
    assert np.isnan(pnp.pareto_khat(np.full((1, 10), -np.inf)))[0]
