"""Block-arrow linear algebra (core/block_arrow.py) against the dense computation: jax.hessian
and dense NumPy linear algebra, at M = 1, 2, 8 galaxies sharing a shear (12x12 stamps)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import yaml

from shearbatch.campaign import plan_campaign
from shearbatch.core import block_arrow
from shearbatch.core.methods import map as map_
from shearbatch.core.posterior import build_posterior
from shearbatch.engine.loop import generate
from shearbatch.schema import parse_config
from shearbatch.spec import run_spec
from tests.core.test_multi_galaxy import LEVEL1

SETTINGS = map_.MapConfig(optimizer="newton", num_steps=100, num_samples=10)


def spec_for(m: int):
    raw = yaml.safe_load(LEVEL1.read_text())
    raw["image"].update(size_x=12, size_y=12, n_objects=m)
    raw["gal"]["position"].update(x=6.0, y=6.0)
    raw["inference"]["method"] = "map"
    return run_spec(parse_config(raw))


@pytest.fixture(
    scope="module",
    params=[1, 2, pytest.param(8, marks=pytest.mark.slow)],  # M = 8: ~20 s more to compile
    ids=lambda m: f"M{m}",
)
def case(request):
    """One realization of M galaxies: its Laplace fit and, in one compiled program, the
    blocks and jax.hessian's dense Hessian of both objectives at a point x next to the
    mode (g != 0, H positive definite) and at the mode."""
    spec = spec_for(request.param)
    post = build_posterior(spec.model)
    layout = post.layout
    assert layout is not None and layout.local.shape == (request.param, 6)
    obs = generate(spec, plan_campaign([0.02], n_realizations=1)).images[0]

    @jax.jit
    def run(obs):
        lap = map_.laplace(obs, post, SETTINGS)
        # 1e-3 posterior sd from the mode along a random direction (farther, a bounded
        # shape near its edge can already make H indefinite: measured at 0.1 sd, M = 2)
        key = jax.random.PRNGKey(request.param)
        x = lap.opt.x + 1e-3 * lap.std * jax.random.normal(key, lap.std.shape)
        out = {"x": x, "g": jax.grad(post.mode_fn)(x, obs)}
        for name, f in (("mode", post.mode_fn), ("pot", post.potential_fn)):
            out[f"h_{name}"] = jax.hessian(f)(x, obs)
            out[f"b_{name}"] = block_arrow.blocks_fn(f, layout)(x, obs)
        out["h_star"] = jax.hessian(post.mode_fn)(lap.opt.x, obs)
        return lap, out

    lap, out = run(obs)
    assert bool(lap.ok) and float(lap.decrement) < 1e-8
    out = jax.tree.map(np.asarray, out)
    for k in ("h_mode", "h_pot", "h_star"):
        out[k] = 0.5 * (out[k] + out[k].T)
    return lap, out, layout


def test_blocks_are_the_dense_hessian(case):
    _, out, layout = case
    for name in ("mode", "pot"):
        got = np.asarray(block_arrow.to_dense(jax.tree.map(jnp.asarray, out[f"b_{name}"]), layout))
        ref = out[f"h_{name}"]
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-10 * np.abs(ref).max())


def test_newton_direction_decrement_and_laplace_match_dense_algebra(case):
    _, out, layout = case
    h, g = out["h_mode"], out["g"]
    w = np.linalg.eigvalsh(h)
    assert w.min() > 0  # the exact-Newton regime, where |H| = H
    rtol = 100 * (w.max() / w.min()) * np.finfo(float).eps
    blocks = jax.tree.map(jnp.asarray, out["b_mode"])
    p, dec = block_arrow.newton_direction(blocks, jnp.asarray(g), layout)
    p_ref = -np.linalg.solve(h, g)
    dec_ref = g @ np.linalg.solve(h, g)
    # the direction's error in the metric of H (posterior sd), and the decrement
    err = np.asarray(p) - p_ref
    assert np.sqrt(err @ h @ err) <= rtol * np.sqrt(dec_ref)
    assert abs(float(dec) - dec_ref) <= rtol * dec_ref
    # Laplace pieces at the same point: log det, covariance, marginal sd, whitened gradient
    fac, ok = block_arrow.factor(blocks)
    assert bool(ok)
    sign, logdet = np.linalg.slogdet(h)
    assert sign > 0 and abs(float(block_arrow.log_det(fac)) - logdet) <= rtol * abs(logdet)
    eye = jnp.eye(layout.size)
    f = np.asarray(jax.vmap(lambda e: block_arrow.apply_scale(fac, e, layout))(eye)).T
    # the draws' covariance F F^T is H^-1: F F^T H = I (per eigendirection)
    np.testing.assert_allclose(f @ f.T @ h, np.eye(layout.size), rtol=0, atol=rtol)
    var = np.asarray(block_arrow.variances(fac, layout))
    np.testing.assert_allclose(var, np.diag(np.linalg.inv(h)), rtol=rtol)
    wv = np.asarray(block_arrow.whiten(fac, jnp.asarray(g), layout))
    assert abs(wv @ wv - dec_ref) <= rtol * dec_ref


def test_laplace_draws_have_the_inverse_hessian_covariance(case):
    """Antithetic draws as fit() makes them: mean exactly the mode; whitened by the dense
    Hessian's Cholesky factor (z = L_H^T (x - x*)), covariance I within its sampling
    error (n / 2 independent pairs: sd sqrt(2 / n) on the diagonal, sqrt(1 / n) off it;
    5.5 sd); the reported marginal sd is sqrt diag(H^-1)."""
    lap, out, layout = case
    n = 4000
    eps = jax.random.normal(jax.random.PRNGKey(5), (n // 2, layout.size))
    eps = jnp.concatenate([eps, -eps])
    dx = np.asarray(jax.vmap(lambda e: block_arrow.apply_scale(lap.factor, e, layout))(eps))
    h = out["h_star"]
    np.testing.assert_allclose(dx.mean(0), 0.0, rtol=0, atol=1e-12 * np.abs(dx).max())
    z = dx @ np.linalg.cholesky(h)
    emp = z.T @ z / n
    sd = np.sqrt((1.0 + np.eye(layout.size)) / (n // 2))
    assert np.all(np.abs(emp - np.eye(layout.size)) <= 5.5 * sd), np.abs(emp - 1) / sd
    np.testing.assert_allclose(np.asarray(lap.std), np.sqrt(np.diag(np.linalg.inv(h))), rtol=1e-8)


def random_arrow(rng, m, k, ns, flip=None):
    """Blocks of a random positive definite arrow matrix; ``flip``: a galaxy whose block
    gets one negative eigenvalue (the whole matrix is then indefinite)."""
    a = []
    for j in range(m):
        q, _ = np.linalg.qr(rng.normal(size=(k, k)))
        w = rng.uniform(1.0, 10.0, k)
        if j == flip:
            w[0] = -2.0
        a.append(q @ np.diag(w) @ q.T)
    c = 0.1 * rng.normal(size=(m, k, ns))
    g = np.eye(ns) * (1.0 + m)
    return block_arrow.Arrow(jnp.asarray(np.stack(a)), jnp.asarray(c), jnp.asarray(g))


def synthetic_layout(m, k, ns):
    return block_arrow.Layout(np.arange(ns), ns + np.arange(m * k).reshape(m, k),
                        np.arange(ns), ns + np.arange(k), ns + k)  # fmt: skip


@pytest.mark.parametrize("m", [1, 2, 8])
def test_an_indefinite_galaxy_block_still_gives_a_descent_direction(m):
    rng = np.random.default_rng(m)
    k, ns = 6, 2
    layout = synthetic_layout(m, k, ns)
    g = jnp.asarray(rng.normal(size=ns + m * k))
    pd = random_arrow(rng, m, k, ns)
    h = np.asarray(block_arrow.to_dense(pd, layout))
    p, dec = block_arrow.newton_direction(pd, g, layout)
    # positive definite: exactly today's saddle-free |H|^-1 (= H^-1), to rounding
    w, v = np.linalg.eigh(h)
    p_old = -(v @ ((v.T @ np.asarray(g)) / np.abs(w)))
    np.testing.assert_allclose(np.asarray(p), p_old, rtol=1e-10, atol=1e-12)
    bad = random_arrow(np.random.default_rng(m), m, k, ns, flip=0)
    assert np.linalg.eigvalsh(np.asarray(block_arrow.to_dense(bad, layout))).min() < 0
    p, dec = block_arrow.newton_direction(bad, g, layout)
    slope = float(jnp.dot(g, p))
    assert slope < 0 and float(dec) > 0
    np.testing.assert_allclose(-slope, float(dec), rtol=1e-10)
    # and Cholesky reports the matrix is not positive definite (no Laplace width)
    assert not bool(block_arrow.factor(bad)[1])


# --------------------------------------------------------------------------- Gauss-Newton


@pytest.fixture(scope="module")
def level1_m2():
    spec = spec_for(2)
    post = build_posterior(spec.model)
    obs = generate(spec, plan_campaign([0.02], n_realizations=1, base_seed=3)).images[0]
    return post, obs


def test_gauss_newton_blocks_are_jtwj_plus_the_prior_hessian(level1_m2):
    """The likelihood split (mode_fn = prior part + Gaussian pixel term) and the blocks
    against the dense J^T W J (jax.jacfwd of the stamps) + jax.hessian of the prior part."""
    post, obs = level1_m2
    x = post.x0 + 0.1 * jax.random.normal(jax.random.PRNGKey(2), post.x0.shape)

    @jax.jit
    def run(x, obs):
        mu, sd = post.image_fn(x, obs)
        chi2 = 0.5 * jnp.sum(((obs - mu) / sd) ** 2) + jnp.sum(jnp.log(sd))
        const = 0.5 * np.log(2 * np.pi) * obs.size
        split = {name: (post.prior_part(f)(x, obs) + chi2 + const - f(x, obs), f(x, obs))
                 for name, f in (("mode", post.mode_fn), ("pot", post.potential_fn))}  # fmt: skip
        jac = jax.jacfwd(lambda y: post.image_fn(y, obs)[0].reshape(-1))(x)  # (P, D)
        w = (1.0 / sd**2).reshape(-1)
        dense = jac.T @ (w[:, None] * jac) + jax.hessian(post.prior_mode_fn)(x, obs)
        gn = block_arrow.gauss_newton_blocks_fn(post.image_fn, post.prior_mode_fn, post.layout)
        return split, dense, block_arrow.to_dense(gn(x, obs), post.layout)

    split, dense, got = run(x, obs)
    for name, (err, value) in split.items():
        assert abs(float(err)) < 1e-12 * abs(float(value)), name
    dense = np.asarray(dense)
    np.testing.assert_allclose(
        np.asarray(got), 0.5 * (dense + dense.T), rtol=0, atol=1e-10 * np.abs(dense).max()
    )


def test_gauss_newton_finds_the_newton_mode(level1_m2):
    """Same mode to the convergence tolerance (decrement <= 1e-10: sqrt(2e-10) sd), same
    Laplace width (the exact Hessian at the mode), in fewer steps."""
    post, obs = level1_m2
    laps = {}
    for opt in ("newton", "gauss_newton"):
        settings = map_.MapConfig(optimizer=opt, num_steps=200, num_samples=10)
        laps[opt] = jax.jit(lambda o, s=settings: map_.laplace(o, post, s))(obs)
    new, gn = laps["newton"], laps["gauss_newton"]
    for lap in (new, gn):
        assert bool(lap.ok) and bool(lap.opt.converged) and float(lap.decrement) <= 1e-10
    sd = np.asarray(new.std)
    assert np.max(np.abs(np.asarray(gn.opt.x) - np.asarray(new.opt.x)) / sd) < 2 * np.sqrt(2e-10)
    np.testing.assert_allclose(np.asarray(gn.std), sd, rtol=1e-4)
    assert int(gn.opt.n_steps) <= int(new.opt.n_steps)
