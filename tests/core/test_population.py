"""The population shear estimator (core/population.py), pixel-free.

- The reduced-shear composition, its inverse and its Jacobian against finite differences.
- Importance weights against the analytic marginal likelihood of a Gaussian toy (g = 0:
  Gaussian convolution) and against 2-D quadrature over the intrinsic shape (g != 0),
  within the Monte Carlo standard error of the weights.
- The combination: intrinsic shapes N(0, 0.2) per component truncated to |e| < 1, sheared
  by g1 = +-0.02 (paired: the same galaxies), no pixel noise. The maximum of the pooled
  marginal likelihood is unbiased within its jackknife error; averaging per-galaxy
  posterior means of g (flat prior on |g| < 1, by quadrature) gives m1 ~ -0.12, so a
  regression to that estimator is caught.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats as st

from shearbatch.core import population as pop
from shearbatch.spec import Prior

SIGMA_E = 0.2
G = 0.02


def normal_shapes(rng, n, sigma=SIGMA_E):
    """n intrinsic shapes, N(0, sigma) per component, truncated to the unit disk (rejection)."""
    out = np.empty((0, 2))
    while len(out) < n:
        e = rng.normal(0.0, sigma, size=(2 * n, 2))
        out = np.concatenate([out, e[np.sum(e * e, axis=1) < 1.0]])
    return out[:n]


def test_composition_inverse_and_jacobian():
    rng = np.random.default_rng(0)
    e = jnp.asarray(normal_shapes(rng, 50, 0.3))
    g = jnp.asarray([0.07, -0.04])
    eps = pop.compose(e, g)
    np.testing.assert_allclose(pop.decompose(eps, g), e, atol=1e-13)
    # complex form: (e + g) / (1 + conj(g) e)
    ec, gc = e[:, 0] + 1j * e[:, 1], complex(g[0], g[1])
    want = (ec + gc) / (1 + np.conj(gc) * ec)
    np.testing.assert_allclose(eps[:, 0] + 1j * eps[:, 1], want, atol=1e-14)
    # |de/deps| against the determinant of the autodiff Jacobian
    jac = jax.vmap(jax.jacfwd(lambda p: pop.decompose(p, g)))(eps)
    np.testing.assert_allclose(np.log(np.abs(np.linalg.det(np.asarray(jac)))),
                               pop.log_jacobian(eps, g), atol=1e-12)  # fmt: skip


def test_shape_log_prior_reads_the_config_priors():
    """The config's shape priors, a truncated one by its untruncated density."""
    lp = pop.shape_log_prior(Prior("truncnormal", (0.0, 0.26, -0.9, 0.9)),
                             Prior("normal", (0.0, 0.2)))  # fmt: skip
    x = jnp.asarray([0.1, 0.5, 0.95, 0.7])
    y = jnp.asarray([-0.2, 0.3, 0.0, 0.8])
    got = np.asarray(lp(x, y))
    # the truncated component by its untruncated density (smooth across the edge: see
    # test_a_galaxy_at_the_truncation_edge_...), up to the constant a fit does not see
    a = st.norm(0, 0.26).logpdf(np.asarray(x))
    want = a + st.norm(0, 0.2).logpdf(np.asarray(y))
    np.testing.assert_allclose(got[:3] - want[:3], (got[0] - want[0]) * np.ones(3), atol=1e-12)
    assert np.isfinite(got[2])  # beyond the truncation: finite, no wall
    assert got[3] == -np.inf  # outside the unit disk (0.7^2 + 0.8^2 > 1)


SE, SN, SI = 0.05, 0.03, 0.2  # population, measurement noise, interim prior (per component)


def toy_draws(rng, obs, k):
    """Exact posterior draws of eps given obs = eps + N(0, SN) under the interim N(0, SI)."""
    s2 = 1.0 / (1.0 / SN**2 + 1.0 / SI**2)
    mu = s2 * obs / SN**2
    eps = mu[:, None, :] + np.sqrt(s2) * rng.normal(size=(len(obs), k, 2))
    log_interim = st.norm(0, SI).logpdf(eps).sum(-1)
    log_z = st.norm(0, np.sqrt(SN**2 + SI**2)).logpdf(obs).sum(-1)  # interim evidence
    return eps, -log_interim, log_z


def _mcse_log_mean(lw):
    """Monte Carlo standard error of log mean(w) per row (delta method)."""
    w = np.exp(lw - lw.max(axis=1, keepdims=True))
    return w.std(axis=1, ddof=1) / (w.mean(axis=1) * np.sqrt(w.shape[1]))


@pytest.mark.parametrize("g", [(0.0, 0.0), (0.05, -0.03)])
def test_importance_weights_match_the_marginal_likelihood(g):
    """L_i(g) = int N(obs_i; eps, SN) p_e(e(eps, g)) |de/deps| deps from K = 4000 interim
    draws, against the analytic convolution (g = 0) or quadrature over e (g != 0,
    int N(obs_i; compose(e, g), SN) p_e(e) de), within 4 MCSE per galaxy."""
    rng = np.random.default_rng(1)
    n, k = 12, 4000
    e = rng.normal(0, SE, size=(n, 2))
    obs = np.asarray(pop.compose(jnp.asarray(e), jnp.asarray(g))) + rng.normal(0, SN, (n, 2))
    eps, base, log_z = toy_draws(rng, obs, k)
    lp = pop.shape_log_prior(Prior("normal", (0.0, SE)), Prior("normal", (0.0, SE)))
    gg = jnp.asarray(g)
    lw = np.asarray(pop.log_weights(gg, jnp.asarray(eps), jnp.asarray(base), lp))
    terms = np.asarray(pop._galaxy_terms(gg, jnp.asarray(eps), jnp.asarray(base), lp))
    got = terms + log_z
    if g == (0.0, 0.0):
        want = st.norm(0, np.sqrt(SN**2 + SE**2)).logpdf(obs).sum(-1)
    else:
        ax = np.linspace(-8 * SE, 8 * SE, 321)
        e1, e2 = np.meshgrid(ax, ax, indexing="ij")
        grid = np.stack([e1.ravel(), e2.ravel()], axis=-1)
        eps_grid = np.asarray(pop.compose(jnp.asarray(grid), gg))
        prior = st.norm(0, SE).pdf(grid).prod(-1) * (ax[1] - ax[0]) ** 2
        like = st.norm(0, SN).pdf(obs[:, None, :] - eps_grid[None]).prod(-1)
        want = np.log(like @ prior)
    mcse = _mcse_log_mean(lw)
    assert np.all(mcse < 0.05)  # the test has resolution
    np.testing.assert_array_less(np.abs(got - want), 4 * mcse + 1e-9)
    # the summed log-likelihood is the sum of the per-galaxy terms
    total = pop.log_likelihood(gg, jnp.asarray(eps), jnp.asarray(base), lp)
    assert float(total) == pytest.approx(terms.sum(), rel=1e-12)
    # ESS of exact posterior draws reweighted to a narrower population: a fraction of K
    e_s = np.asarray(pop.ess(jnp.asarray(lw)))
    assert np.all((e_s > 0.1 * k) & (e_s <= k))


def test_ess_and_collapse():
    lw = jnp.log(jnp.asarray([[1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]))
    np.testing.assert_allclose(pop.ess(lw), [4.0, 1.0, 0.0])


def per_galaxy_posterior_means(eps, lp, n_grid=121):
    """E[g | eps_i] per galaxy, flat prior on |g| < 1, likelihood p_e(e(eps_i, g)) |de/deps|
    (one draw, no noise), by quadrature on a grid over the disk."""
    ax = np.linspace(-0.99, 0.99, n_grid)
    g1, g2 = np.meshgrid(ax, ax, indexing="ij")
    keep = g1**2 + g2**2 < 0.99**2
    grid = jnp.asarray(np.stack([g1[keep], g2[keep]], axis=-1))

    @jax.jit
    def mean_one(p):
        lw = pop.log_weights(grid, jnp.broadcast_to(p, grid.shape), jnp.zeros(len(grid)), lp)
        w = jnp.exp(lw - jnp.max(lw))
        return jnp.sum(w[:, None] * grid, axis=0) / jnp.sum(w)

    return np.asarray(jax.lax.map(mean_one, jnp.asarray(eps)))


def jackknife(fn, n, n_blocks):
    """Delete-one-block jackknife std of fn(mask) over n items in n_blocks contiguous blocks."""
    blocks = np.arange(n) * n_blocks // n
    reps = np.array([fn(blocks != b) for b in range(n_blocks)])
    return float(np.sqrt((n_blocks - 1) / n_blocks * np.sum((reps - reps.mean(0)) ** 2)))


def test_pooled_estimate_is_unbiased_where_averaged_posterior_means_give_minus_0_12():
    """Paired +-0.02 on the same 3,000 galaxies: m1 of the pooled marginal likelihood is 0
    within 3 of its jackknife errors; m1 of averaged posterior means is -0.12 +- 0.02."""
    rng = np.random.default_rng(2)
    n = 3000
    e = jnp.asarray(normal_shapes(rng, n))
    lp = pop.shape_log_prior(Prior("normal", (0.0, SIGMA_E)), Prior("normal", (0.0, SIGMA_E)))
    eps = {s: pop.compose(e, jnp.asarray([s * G, 0.0]))[:, None, :] for s in (1, -1)}
    base = jnp.zeros((n, 1))

    def m_pooled(mask):
        w = jnp.asarray(mask, float)
        gp = pop.fit(eps[1], base, lp, weight=w).g[0]
        gm = pop.fit(eps[-1], base, lp, weight=w).g[0]
        return (gp - gm) / (2 * G) - 1.0

    full = {s: pop.fit(eps[s], base, lp) for s in (1, -1)}
    for f in full.values():
        assert f.converged and f.n_galaxies == n and np.all(np.isfinite(f.err))
        assert not f.collapsed.any()  # one draw each: ESS = 1 = K
    m = (full[1].g[0] - full[-1].g[0]) / (2 * G) - 1.0
    m_err = jackknife(m_pooled, n, 20)
    assert 0 < m_err < 0.02
    assert abs(m) < 3 * m_err, (m, m_err)
    # c (the pair's mean) and g2 are zero within their errors too
    c = 0.5 * (full[1].g[0] + full[-1].g[0])
    assert abs(c) < 3 * full[1].err[0] and abs(full[1].g[1]) < 3 * full[1].err[1]

    # averaged per-galaxy posterior means: the estimator a regression would fall back to
    means = {s: per_galaxy_posterior_means(eps[s][:, 0], lp) for s in (1, -1)}
    d = (means[1][:, 0] - means[-1][:, 0]) / (2 * G)  # per-galaxy response 1 + m
    m_mean = float(d.mean() - 1.0)
    m_mean_err = float(d.std(ddof=1) / np.sqrt(n))
    assert m_mean == pytest.approx(-0.12, abs=max(0.02, 3 * m_mean_err)), (m_mean, m_mean_err)
    assert abs(m_mean) > 5 * max(m_err, m_mean_err)  # the two estimators are told apart


def test_galaxy_derivatives_give_the_delete_one_group_refit():
    """Per-galaxy gradients sum to the likelihood's gradient (0 at the maximum), and one Newton
    step without a group reproduces the refit without it to a small fraction of its shift."""
    rng = np.random.default_rng(3)
    n, groups = 400, 20
    e = jnp.asarray(normal_shapes(rng, n))
    lp = pop.shape_log_prior(Prior("normal", (0.0, SIGMA_E)), Prior("normal", (0.0, SIGMA_E)))
    eps = pop.compose(e, jnp.asarray([G, -0.01]))[:, None, :]
    base = jnp.zeros((n, 1))
    f = pop.fit(eps, base, lp)
    grad, hess = pop.galaxy_derivatives(f.g, eps, base, lp)
    assert grad.shape == (n, 2) and hess.shape == (n, 2, 2)
    np.testing.assert_allclose(grad.sum(0), 0.0, atol=1e-8 * np.abs(grad).sum())
    np.testing.assert_allclose(np.linalg.inv(-hess.sum(0)), f.cov, rtol=1e-8)
    block = np.arange(n) * groups // n
    for b in range(3):
        mine = block == b
        step = f.g + np.linalg.solve(hess[~mine].sum(0), grad[mine].sum(0))
        refit = pop.fit(eps, base, lp, weight=jnp.asarray(~mine, float), g0=f.g).g
        shift = np.linalg.norm(refit - f.g)
        assert np.linalg.norm(step - refit) < 0.05 * shift


def test_a_galaxy_at_the_truncation_edge_does_not_wall_the_pooled_fit():
    """Level 2's population is TruncatedNormal(0, 0.26) on [-0.9, 0.9] per component. A
    galaxy whose draws sit just inside the edge at g = 0 has none inside at the true
    g1 = -0.05: with the hard edge its importance L_i(g) is 0 there and the pooled fit of
    2,000 other galaxies stopped at that galaxy's wall, near g1 = -0.005 (found at Level 2
    on a 2-D grid). The population prior is evaluated without its hard edge, so L_i is
    finite everywhere and the fit reaches the truth within its error."""
    rng = np.random.default_rng(5)
    trunc = Prior("truncnormal", (0.0, 0.26, -0.9, 0.9))
    lp = pop.shape_log_prior(trunc, trunc)
    g = jnp.asarray([-0.05, 0.0])
    n, k, noise = 2000, 20, 0.03
    e = rng.normal(0.0, 0.26, size=(4 * n, 2))
    e = e[np.all(np.abs(e) < 0.9, axis=1)][:n]  # the generator's truncation
    obs = np.asarray(pop.compose(jnp.asarray(e), g))
    draws = obs[:, None, :] + noise * rng.normal(size=(n, k, 2))  # flat interim prior
    edge = np.stack([rng.uniform(0.895, 0.899, k), np.zeros(k)], -1)[None]
    eps = jnp.asarray(np.concatenate([draws, edge]))
    base = jnp.zeros((n + 1, k))
    at_truth = pop._galaxy_terms(g, eps, base, lp)
    assert bool(jnp.all(jnp.isfinite(at_truth)))  # the edge galaxy included
    assert np.all(np.abs(np.asarray(pop.decompose(eps[-1], g))[:, 0]) > 0.9)  # beyond it
    f = pop.fit(eps, base, lp)
    assert f.converged and f.n_galaxies == n + 1 and np.all(np.isfinite(f.err))
    assert abs(f.g[0] - g[0]) < 4 * f.err[0], (f.g, f.err)
    assert abs(f.g[1]) < 4 * f.err[1]
