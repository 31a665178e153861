"""The pooled marginal likelihood in NumPy (core/population_np.py) against its JAX form.

- For each population prior a config can give (normal, truncated normal, uniform, flat, a
  log-normal read as its base normal), with missing draws (NaN ellipticity, NaN and -inf
  log-weights): the same per-galaxy log L_i, gradient and Hessian as JAX's automatic
  derivatives, and the same fit (estimate to 1e-12 in g, curvature to 1e-9 relative, the
  same steps and ESS, the same status and numerical error).
- Blocks, threads, a float32 copy read through ``index``: the same per-galaxy results.
- A galaxy without support at the start is left out, as the docstring of both says (the
  JAX form's gradient is NaN then, and its fit stops: measured here, not relied on).
- The pooled per-grid-point fit of analysis/pooled.py (NumPy, a block at a time) against
  the JAX fit and JAX per-galaxy derivatives on the same galaxies: estimates to 1e-12,
  the jackknife m and c errors to 1e-9 relative.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

from shearbatch.analysis import pooled
from shearbatch.core import population as pop
from shearbatch.core import population_np as pnp
from shearbatch.spec import Prior

PRIORS = {
    "normal": (Prior("normal", (0.0, 0.2)), Prior("normal", (0.0, 0.2))),
    "truncnormal": (Prior("truncnormal", (0.0, 0.26, -0.9, 0.9)),) * 2,
    "uniform": (Prior("uniform", (-0.95, 0.95)),) * 2,
    "flat": (Prior("flat", ()),) * 2,
    "lognormal": (Prior("lognormal", (0.3, 0.2)), Prior("normal", (0.0, 0.3))),
}


def draws(seed=0, n=150, k=40, g=(0.03, -0.02)):
    """Observed-ellipticity draws around sheared N(0, 0.2) shapes, random log-weights, and a
    few missing draws (NaN ellipticity, NaN and -inf log-weight)."""
    rng = np.random.default_rng(seed)
    e = rng.normal(0.0, 0.2, (3 * n, 2))
    e = e[np.sum(e * e, axis=1) < 0.6][:n]
    eps = np.asarray(pop.compose(jnp.asarray(e), jnp.asarray(g)))[:, None, :]
    eps = eps + 0.05 * rng.normal(size=(n, k, 2))
    base = rng.normal(0.0, 0.5, (n, k))
    base[0, :5] = -np.inf
    base[1, 3] = np.nan
    eps[2, 4, 0] = np.nan
    return eps, base


_JAX = {}


def jax_reference(g, eps, base, lp):
    """Per-galaxy ``log L_i`` (N,), gradient (N, 2) and Hessian (N, 2, 2) at ``g`` by JAX's
    automatic derivatives of core.population (compiled: its eager galaxy_derivatives
    compiles op by op, ~10 s per shape on the shared CPU)."""
    if lp not in _JAX:
        f = pop._galaxy_terms
        _JAX[lp] = tuple(jax.jit(h, static_argnums=3) for h in (f, jax.jacfwd(f),
                                                                 jax.hessian(f)))  # fmt: skip
    with jax.enable_x64(True):
        bad = ~(np.all(np.isfinite(eps), axis=-1) & ~np.isnan(base))
        args = (jnp.asarray(g, jnp.float64), jnp.asarray(np.where(bad[..., None], 0.0, eps)),
                jnp.asarray(np.where(bad, -np.inf, base)), lp)  # fmt: skip
        return tuple(np.asarray(h(*args), float) for h in _JAX[lp])


@pytest.mark.parametrize("kind", sorted(PRIORS))
def test_numpy_fit_and_derivatives_equal_the_jax_ones(kind):
    eps, base = draws()
    lp, prior = pop.shape_log_prior(*PRIORS[kind]), pnp.ShapePrior(*PRIORS[kind])
    want, got = pop.fit(eps, base, lp), pnp.fit(eps, base, prior)
    assert want.converged and got.converged
    assert got.status == want.status == "converged"
    np.testing.assert_allclose(got.g_num_err, want.g_num_err, rtol=0, atol=1e-12)
    assert max(got.g_num_err) < 1e-9 and got.decrement < 1e-6 and want.decrement < 1e-6
    np.testing.assert_allclose(got.g, want.g, rtol=0, atol=1e-12)
    np.testing.assert_allclose(got.cov, want.cov, rtol=1e-9)
    assert got.n_steps == want.n_steps and got.n_galaxies == want.n_galaxies == len(eps)
    assert got.log_l == pytest.approx(want.log_l, rel=1e-12)
    np.testing.assert_allclose(got.ess, want.ess, rtol=1e-9)
    np.testing.assert_array_equal(got.n_draws, want.n_draws)
    np.testing.assert_array_equal(got.collapsed, want.collapsed)
    for g in (want.g, np.array([-0.2, 0.15])):  # at the maximum and far from it
        terms, grad, hess = jax_reference(g, eps, base, lp)
        ev = pnp.evaluate(g, eps, base, prior, order=2)
        np.testing.assert_allclose(ev.terms, terms, rtol=1e-12, atol=1e-12)
        scale = np.abs(hess).max()
        np.testing.assert_allclose(ev.grad, grad, rtol=0, atol=1e-10 * scale)
        np.testing.assert_allclose(ev.hess, hess, rtol=0, atol=1e-10 * scale)


def test_weights_select_galaxies_as_in_jax():
    eps, base = draws(seed=1)
    lp, prior = pop.shape_log_prior(*PRIORS["normal"]), pnp.ShapePrior(*PRIORS["normal"])
    w = (np.arange(len(eps)) % 3 != 0).astype(float)
    want, got = pop.fit(eps, base, lp, weight=w), pnp.fit(eps, base, prior, weight=w)
    np.testing.assert_allclose(got.g, want.g, rtol=0, atol=1e-12)
    np.testing.assert_allclose(got.cov, want.cov, rtol=1e-9)
    assert got.n_galaxies == want.n_galaxies == int(w.sum())


def test_blocks_threads_and_float32_rows_read_through_an_index_agree():
    eps, base = draws(seed=2, n=300, k=60)
    prior = pnp.ShapePrior(*PRIORS["truncnormal"])
    e32, b32 = eps.astype(np.float32), base.astype(np.float32)
    idx = np.flatnonzero(np.arange(300) % 2 == 1)
    g = [0.02, 0.01]
    want = pnp.evaluate(g, np.asarray(e32[idx], float), np.asarray(b32[idx], float), prior, 2)
    for threads in (1, 2):
        got = pnp.evaluate(g, e32, b32, prior, 2, index=idx, threads=threads)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)  # the same blocks: bit for bit
    f = pnp.fit(e32, b32, prior, index=idx, threads=2)
    np.testing.assert_array_equal(f.g, pnp.fit(e32[idx], b32[idx], prior).g)


def test_a_galaxy_without_support_is_left_out():
    """Uniform population on [-0.6, 0.6]: galaxy 3's draws all sit beyond its edge, so its
    L_i is 0. The NumPy fit leaves it out and equals the fit without it."""
    eps, base = draws(seed=3)
    eps = eps.copy()
    rng = np.random.default_rng(9)
    eps[3] = np.array([0.75, 0.0]) + 0.01 * rng.normal(size=(eps.shape[1], 2))
    pr = (Prior("uniform", (-0.6, 0.6)),) * 2
    prior = pnp.ShapePrior(*pr)
    # only galaxy 3 lacks support at g = 0 (and the others keep it near the estimate)
    terms = pnp.evaluate([0.0, 0.0], eps, base, prior).terms
    assert not np.isfinite(terms[3]) and np.isfinite(np.delete(terms, 3)).all()
    f = pnp.fit(eps, base, prior)
    rest = np.delete(np.arange(len(eps)), 3)
    alone = pnp.fit(eps[rest], base[rest], prior)
    assert f.converged and f.n_galaxies == len(eps) - 1
    np.testing.assert_allclose(f.g, alone.g, rtol=0, atol=1e-12)
    assert np.all(np.isnan(f.galaxy_grad[3])) and np.isfinite(np.delete(f.galaxy_grad, 3, 0)).all()
    # the JAX form's gradient is NaN with such a galaxy in the arrays (weight 0 or not)
    _, grad_hess, _, _ = pop._functions(pop.shape_log_prior(*pr))
    with jax.enable_x64(True):
        w = jnp.ones(len(eps)).at[3].set(0.0)
        gr = grad_hess(jnp.zeros(2), jnp.asarray(eps), jnp.asarray(base), w)[1]
    assert not np.all(np.isfinite(np.asarray(gr)))


def _jax_pooled(use, population, paired):
    """The pooled fit as analysis/pooled.py computed it before NumPy: core.population.fit and
    galaxy_derivatives (JAX) on each grid point's galaxies, one Newton step per seed."""
    lp = pop.shape_log_prior(*population.priors)
    rows = use.set_index(use["run_id"].astype(str))
    rid = population.run_id.astype(str)
    truth = rows.loc[rid, ["g1_true", "g2_true"]].to_numpy(float).round(12)
    seeds = rows.loc[rid, "seed"].astype(str).to_numpy()
    est, jk = {}, {}
    for p in sorted({tuple(t) for t in truth}):
        sel = np.all(truth == p, axis=1)
        f = pop.fit(population.eps[sel], population.log_base[sel], lp)
        est[p] = f.g
        e, b = population.eps[sel], population.log_base[sel]
        _, grad, hess = jax_reference(f.g, np.asarray(e, float), np.asarray(b, float), lp)
        for s in sorted(set(seeds)):
            mine = seeds[sel] == s
            h_rest = hess.sum(0) - hess[mine].sum(0)
            jk.setdefault(s, {})[p] = f.g + np.linalg.solve(h_rest, grad[mine].sum(0))
    return est, jk


def test_pooled_fit_equals_the_jax_fit_per_grid_point():
    """6 seeds x (+g, -g) realizations of 12 galaxies (float32 sidecar arrays): the pooled
    estimates equal JAX's to 1e-12 and the jackknife errors of m and c to 1e-9."""
    rng = np.random.default_rng(4)
    rows, eps, base, rid = [], [], [], []
    for s in range(6):
        e = rng.normal(0.0, 0.2, (12, 2))
        for sign in (1, -1):
            run = f"g1_{sign * 0.02:+.4f}_s{s}"
            obs = np.asarray(pop.compose(jnp.asarray(e), jnp.asarray([sign * 0.02, 0.0])))
            eps.append(obs[:, None, :] + 0.05 * rng.normal(size=(12, 30, 2)))
            base.append(rng.normal(0.0, 0.3, (12, 30)))
            rid += [run] * 12
            rows.append({"run_id": run, "g1_true": sign * 0.02, "g2_true": 0.0, "seed": s,
                         "pair_id": f"p{s}", "pair_sign": sign})  # fmt: skip
    use = pd.DataFrame(rows)
    population = pooled.from_arrays({
        "run_id": np.asarray(rid), "galaxy": np.tile(np.arange(12), 12),
        "eps": np.concatenate(eps).astype(np.float32),
        "log_base": np.concatenate(base).astype(np.float32),
        "population": '[{"kind": "truncnormal", "args": [0.0, 0.2, -0.9, 0.9]}, '
                      '{"kind": "truncnormal", "args": [0.0, 0.2, -0.9, 0.9]}]'})  # fmt: skip
    fits, rep = pooled.pooled_fits(use, population, paired=True, threads=2)
    est, jk = _jax_pooled(use, population, paired=True)
    for gp in rep.grid_points:
        p = (gp.g1_true, gp.g2_true)
        np.testing.assert_allclose([gp.g1, gp.g2], est[p], rtol=0, atol=1e-12)
    # m1 and c1 from the paired estimator on JAX's estimates and jackknife replicates
    tp = 0.02
    d = (est[(tp, 0.0)][0] - est[(-tp, 0.0)][0]) / 2
    assert fits["g1"].m == pytest.approx(d / tp - 1.0, abs=1e-10)
    reps = np.array([[(r[(tp, 0.0)][0] - r[(-tp, 0.0)][0]) / 2 / tp,
                      (r[(tp, 0.0)][0] + r[(-tp, 0.0)][0]) / 2] for r in jk.values()])  # fmt: skip
    dev = reps - reps.mean(0)
    cov = (len(reps) - 1) / len(reps) * dev.T @ dev
    assert fits["g1"].m_err == pytest.approx(np.sqrt(cov[0, 0]), rel=1e-9)
    assert fits["g1"].c_err == pytest.approx(np.sqrt(cov[1, 1]), rel=1e-9)
