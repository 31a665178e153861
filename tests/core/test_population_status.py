"""The pooled fit's own status and numerical error (core/population_np.py, NumPy only).

- A well-posed toy: converged, its numerical error (the Newton step left at its end) below
  1e-6 in g and far below its statistical error.
- Stopped early (``max_steps=1``): ``max_steps``, not converged, numerical error large.
- A wall of zero likelihood across the path to the maximum (``log L = -inf`` beyond
  ``g1 = 0.01``): the line search shrinks the step to nothing short of the maximum;
  reported ``line_search_failed``, not converged (the fit used to call this converged: the
  step had fallen below ``tol``).
- Derivatives that disagree with the value (a prior whose gradient has the wrong sign):
  the line search finds no point at least as likely; ``line_search_failed`` (the fit used
  to call a failed line search converged whenever the Hessian was negative definite).
"""

import numpy as np
import pytest

from shearbatch.core import population_np as pnp
from shearbatch.spec import Prior

TRUTH = (0.03, -0.02)
PRIOR = (Prior("normal", (0.0, 0.2)), Prior("normal", (0.0, 0.2)))


def toy(seed=0, n=400, k=64, g=TRUTH):
    """Draws of the observed ellipticity of N(0, 0.2) shapes sheared by ``g`` (reduced
    shear, complex notation), spread by 0.05 of measurement noise; flat log-weights."""
    rng = np.random.default_rng(seed)
    e = rng.normal(0.0, 0.2, (3 * n, 2))
    e = e[np.sum(e * e, axis=1) < 0.6][:n]
    ec, gc = e[:, 0] + 1j * e[:, 1], complex(*g)
    eps = (ec + gc) / (1.0 + np.conj(gc) * ec)
    eps = np.stack([eps.real, eps.imag], axis=-1)[:, None, :]
    eps = eps + 0.05 * rng.normal(size=(n, k, 2))
    return eps, np.zeros((n, k))


def test_a_well_posed_fit_is_converged_with_a_tiny_numerical_error():
    eps, base = toy()
    f = pnp.fit(eps, base, pnp.ShapePrior(*PRIOR))
    assert f.status == "converged" and f.converged
    assert np.all(f.g_num_err < 1e-6)
    assert f.decrement < 1e-6 and np.all(f.g_num_err < 1e-4 * f.err)
    assert 0 < f.last_step < 1e-10


def test_a_fit_stopped_early_says_so_and_reports_a_large_numerical_error():
    eps, base = toy()
    full = pnp.fit(eps, base, pnp.ShapePrior(*PRIOR))
    f = pnp.fit(eps, base, pnp.ShapePrior(*PRIOR), max_steps=1)
    assert f.status == "max_steps" and not f.converged and f.n_steps == 1
    assert np.max(f.g_num_err) > 1e-6
    # the estimate of the error is the distance actually left to the maximum
    left = np.abs(f.g - full.g)
    np.testing.assert_allclose(f.g_num_err, left, rtol=0.1, atol=1e-9)


def test_a_wall_across_the_path_is_a_failed_line_search_not_converged(monkeypatch):
    eps, base = toy()
    real = pnp.evaluate

    def walled(g, *args, **kw):  # log L_i = -inf for g1 > 0.01 (the maximum is at 0.03)
        ev = real(g, *args, **kw)
        if float(np.asarray(g)[0]) > 0.01:
            ev = ev._replace(terms=np.full_like(ev.terms, -np.inf))
        return ev

    monkeypatch.setattr(pnp, "evaluate", walled)
    f = pnp.fit(eps, base, pnp.ShapePrior(*PRIOR))
    assert f.g[0] <= 0.01
    assert f.status == "line_search_failed" and not f.converged
    assert np.max(f.g_num_err) > 1e-3  # the maximum of the quadratic model is past the wall


class _WrongGradient(pnp.ShapePrior):
    """A prior whose reported first derivatives have the wrong sign (its value is right)."""

    def __call__(self, e1, e2, order=0):
        lp, (a1, a2), aa = super().__call__(e1, e2, order)
        if order:
            a1, a2 = -a1, -a2
        return lp, (a1, a2), aa


def test_an_exhausted_line_search_is_not_converged():
    eps, base = toy()
    f = pnp.fit(eps, base, _WrongGradient(*PRIOR), g0=(0.1, 0.1))
    assert f.status == "line_search_failed" and not f.converged
    np.testing.assert_array_equal(f.g, [0.1, 0.1])  # no step was taken
    assert f.last_step == 0.0


@pytest.mark.parametrize("stopped", ["small_step", "line_search", "max_steps"])
def test_fit_status_rules(stopped):
    h = -np.eye(2) * 1e6  # sigma_g = 1e-3
    at_max = pnp.fit_status(stopped, np.zeros(2), h)
    want = {"small_step": "converged", "line_search": "line_search_failed",
            "max_steps": "max_steps"}[stopped]  # fmt: skip
    assert at_max[0] == want and at_max[2] == 0.0
    off = pnp.fit_status(stopped, np.array([10.0, 0.0]), h)  # 1e-5 in g: 1e-2 sigma
    np.testing.assert_allclose(off[1], [1e-5, 0.0])
    assert off[2] == pytest.approx(1e-2)
    if stopped == "small_step":
        assert off[0] == "line_search_failed"
    not_concave = pnp.fit_status(stopped, np.zeros(2), np.eye(2))
    assert not_concave[0] != "converged" and np.all(np.isinf(not_concave[1]))


def _campaign(seeds=4, n=40, k=30):
    """``seeds`` x (+g, -g) realizations of ``n`` galaxies as bias-stats reads them: the
    usable rows and the population sidecar's arrays (float32)."""
    rng = np.random.default_rng(5)
    rows, eps, base, rid = [], [], [], []
    for s in range(seeds):
        for sign in (1, -1):
            run = f"g1_{sign * 0.02:+.4f}_s{s}"
            e, _ = toy(seed=100 * s + (sign > 0), n=n, k=k, g=(sign * 0.02, 0.0))
            eps.append(e)
            base.append(rng.normal(0.0, 0.3, (n, k)))
            rid += [run] * n
            rows.append({"run_id": run, "g1_true": sign * 0.02, "g2_true": 0.0, "seed": s,
                         "pair_id": f"p{s}", "pair_sign": sign})  # fmt: skip
    import json

    import pandas as pd

    from shearbatch.analysis import pooled

    pop_json = json.dumps([{"kind": "normal", "args": [0.0, 0.2]}] * 2)
    population = pooled.from_arrays({
        "run_id": np.asarray(rid), "galaxy": np.tile(np.arange(n), 2 * seeds),
        "eps": np.concatenate(eps).astype(np.float32),
        "log_base": np.concatenate(base).astype(np.float32), "population": pop_json})  # fmt: skip
    return pd.DataFrame(rows), population


def test_bias_stats_reports_each_pooled_fit_numerical_error_and_flags_a_bad_one(monkeypatch):
    from functools import partial

    from shearbatch.analysis import pooled
    from shearbatch.analysis.report_text import _numerical_line

    use, population = _campaign()
    _, rep = pooled.pooled_fits(use, population, paired=True, threads=1)
    assert rep.n_flagged == 0 and len(rep.grid_points) == 2
    for gp in rep.grid_points:
        assert gp.status == "converged" and not gp.flagged
        assert gp.g1_num_err < 1e-9 and gp.g2_num_err < 1e-9 and gp.num_err_m < 1e-6
        assert gp.g1_err > 1e-3  # the statistical error beside it
    line = _numerical_line(rep.grid_points, rep.num_err_m_max)
    assert "WARNING" not in line and "all 2 grid point(s) converged" in line

    monkeypatch.setattr(pnp, "fit", partial(pnp.fit, max_steps=1))  # stopped after one step
    _, rep = pooled.pooled_fits(use, population, paired=True, threads=1)
    assert rep.n_flagged == 2
    for gp in rep.grid_points:
        assert gp.status == "max_steps" and gp.flagged and not gp.converged
        assert gp.num_err_m == pytest.approx(max(gp.g1_num_err, gp.g2_num_err) / 0.02)
    line = _numerical_line(rep.grid_points, rep.num_err_m_max)
    assert line.startswith("  WARNING") and "2 of 2 grid point(s) flagged" in line
    assert "max_steps" in line and "\n" not in line
