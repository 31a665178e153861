"""The interim model's Student-t proposal (``inference.map_config.proposal: student_t``).

- Its log q is the density of its draws: the shipped sampler's draws (antithetic normals
  scaled by sqrt(nu / chi2_nu) per galaxy), mapped through a Cholesky factor, with
  self-normalised importance weights ``p / q`` against an exactly Gaussian target recover
  the target's mean and variance within their Monte Carlo standard error; the Laplace
  (Gaussian) log q used with the same t draws fails that same check (the weighted
  variance comes out nu / (nu - 2) times too wide). The t log density is scipy's.
- ``interim_fit`` with the t proposal at the target's mode (``proposal_centre: target``)
  on a tiny Level 2 model (3 galaxies): a realization alone gives the draws and weights it
  gives in a batch; it and the default (Laplace at the MAP) agree on the interim
  posterior's widths (each weighted) within MCSE; the record names the proposal and
  reports the weighted std. At exact Newton's default tol; the slow tier repeats them at
  configs/level2.yaml's 1e-5 (alone against batch there: the draws to 2 sqrt(2 tol) sd).
- The config key: bad values are refused with one line naming the key (exit 2 through
  bias-run), the joint model ignores it (its draws are Laplace's), and at its default it
  leaves the config hash as it was before the key existed.
"""

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from click.testing import CliRunner
from scipy import stats as st

from shearbatch.cli import bias_run
from shearbatch.core.methods import map as mm
from shearbatch.schema import load_config
from shearbatch.schema.config import config_hash
from tests.conftest import write_config

LEVEL2 = Path("configs/level2.yaml")
E_SIGMA = load_config(LEVEL2).inference.interim_e_sigma  # the config's interim prior width
NU = 5.0
K = 20_000  # draws of the density check (10,000 antithetic pairs)


def _snis(
    x: np.ndarray, log_w: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Self-normalised importance estimates of the mean and variance of each coordinate of
    ``x`` (K, k) with log weights ``log_w`` (K,), and their MCSE (delta method; the draws
    come in antithetic pairs i, i + K/2, whose terms are summed before squaring)."""
    w = np.exp(log_w - log_w.max())
    w = w / w.sum()
    mean = w @ x
    var = w @ (x - mean) ** 2
    half = len(x) // 2

    def mcse(f: np.ndarray, est: np.ndarray) -> np.ndarray:
        t = w[:, None] * (f - est)  # linearised terms of a ratio estimator
        return np.sqrt(np.sum((t[:half] + t[half:]) ** 2, axis=0))

    return mean, var, mcse(x, mean), mcse((x - mean) ** 2, var)


@pytest.fixture(scope="module")
def t_draws():
    """The shipped sampler's t draws of 2 galaxies x 3 coordinates, their x = x* + L^-T z
    under a fixed Cholesky factor per galaxy, and an exactly Gaussian target per galaxy
    (centre and covariance unlike the proposal's)."""
    jax.config.update("jax_enable_x64", True)
    m, k = 2, 3
    key = jax.random.PRNGKey(3)
    eps = np.asarray(mm.normal_eps(key, K, m * k, jnp.float64)).reshape(K, m, k)
    s = np.asarray(mm.student_t_scale(key, K, m, NU, jnp.float64))
    z = eps * s[:, :, None]
    rng = np.random.default_rng(0)
    chol = np.stack([np.linalg.cholesky(a @ a.T + np.eye(k)) for a in rng.normal(size=(m, k, k))])
    x_star = rng.normal(size=(m, k))
    x = x_star + np.einsum("mji,kmj->kmi", np.linalg.inv(chol), z)  # L^-T z per galaxy
    cov = np.linalg.inv(chol @ np.transpose(chol, (0, 2, 1)))  # the proposal's scale matrix
    t_mean = x_star + 0.3 * np.sqrt(np.diagonal(cov, axis1=1, axis2=2))
    t_cov = 0.8 * cov  # narrower than the proposal's scale: bounded weights
    log_p = np.stack([st.multivariate_normal(t_mean[j], t_cov[j]).logpdf(x[:, j])
                      for j in range(m)], axis=1)  # fmt: skip
    log_diag = np.log(np.diagonal(chol, axis1=1, axis2=2))
    return {"z": z, "x": x, "log_p": log_p, "log_diag": log_diag, "mean": t_mean,
            "var": np.diagonal(t_cov, axis1=1, axis2=2), "u": NU / s**2}  # fmt: skip


def _settings(proposal: str) -> mm.MapConfig:
    return mm.MapConfig(proposal=proposal, proposal_dof=NU if proposal == "student_t" else None)


def _pulls(d, proposal: str) -> tuple[np.ndarray, np.ndarray]:
    """(mean, variance) errors in MCSE of the weighted t draws with ``proposal``'s log q."""
    log_q = np.asarray(mm.proposal_log_q(jnp.asarray(d["z"]), jnp.asarray(d["log_diag"]),
                                         _settings(proposal)))  # fmt: skip
    pm, pv = [], []
    for j in range(d["x"].shape[1]):
        mean, var, se_m, se_v = _snis(d["x"][:, j], d["log_p"][:, j] - log_q[:, j])
        pm.append((mean - d["mean"][j]) / se_m)
        pv.append((var - d["var"][j]) / se_v)
    return np.concatenate(pm), np.concatenate(pv)


def test_the_sampler_draws_a_student_t(t_draws):
    u = t_draws["u"][: K // 2]  # one chi2 per galaxy per antithetic pair
    assert np.array_equal(t_draws["u"][: K // 2], t_draws["u"][K // 2 :])
    assert st.kstest(u.ravel(), st.chi2(NU).cdf).pvalue > 1e-3
    z = t_draws["z"][: K // 2, 0]  # the whitened draws of galaxy 0: |z|^2 / k ~ F(k, nu)
    assert st.kstest(np.sum(z * z, -1) / 3, st.f(3, NU).cdf).pvalue > 1e-3


def test_student_t_log_density_is_scipys():
    z = np.random.default_rng(1).standard_t(NU, size=(50, 4))
    got = np.asarray(mm.student_t_log_density(jnp.asarray(z), NU))
    want = st.multivariate_t(np.zeros(4), np.eye(4), df=NU).logpdf(z)
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_t_draws_weighted_with_their_log_q_recover_a_gaussian_target(t_draws):
    pm, pv = _pulls(t_draws, "student_t")
    # 12 pulls (2 galaxies x 3 coordinates x mean, variance), each ~ N(0, 1): 4.5 sigma
    # bounds the largest of them except with probability ~1e-4
    assert np.max(np.abs(pm)) < 4.5, pm
    assert np.max(np.abs(pv)) < 4.5, pv


def test_t_draws_weighted_with_the_gaussian_log_q_fail_the_same_check(t_draws):
    """The teeth: the Laplace log q used with t draws (the weights computed against the
    wrong proposal) over-weights the tails; the variance is then far outside its MCSE."""
    _, pv = _pulls(t_draws, "laplace")
    assert np.min(pv) > 5, pv  # every variance fails the 4.5-sigma check (measured: 11-14)


# --------------------------------------------------------------------------- interim_fit


#: configs/level2.yaml's map_config.tol (1e-5)
SHIPPED_TOL = load_config(LEVEL2).inference.map_config.tol


@pytest.fixture(
    scope="module",
    params=[pytest.param(None, id="tol_null"),
            pytest.param(SHIPPED_TOL, id="tol_shipped", marks=pytest.mark.slow)],
)  # fmt: skip
def tiny(module_tmp, request):
    """A 3-galaxy Level 2 interim model, two realizations, batched and alone, with the
    t proposal; and the same batch with the Laplace proposal. Exact Newton to its default
    1e-10 (null) or, in the slow tier, to configs/level2.yaml's 1e-5."""
    tol = request.param
    from shearbatch.campaign import plan_campaign
    from shearbatch.core.batching import batched
    from shearbatch.core.methods import get
    from shearbatch.core.posterior import build_posterior
    from shearbatch.engine.loop import batch_inputs
    from shearbatch.spec import run_spec

    jax.config.update("jax_enable_x64", True)
    out = {}
    for proposal in ("student_t", "laplace"):  # the t at the target's mode, Laplace at the MAP
        centre = "target" if proposal == "student_t" else "map"
        cfg = write_config(module_tmp / f"{proposal}_{tol}.yaml",
                           {"image.n_objects": 3, "inference.map_config.num_samples": 1000,
                            "inference.map_config.proposal": proposal,
                            "inference.map_config.proposal_dof": 5 if centre == "target" else None,
                            "inference.map_config.proposal_centre": centre,
                            # exact Newton to its default 1e-10 (null): the shipped 1e-5 stops
                            # before the last iteration washes out the float32 Gauss-Newton
                            # rounding, and two separately compiled programs then agree to
                            # within sqrt(2 tol) sd of the mode each, not to float64 rounding
                            # (test_interim_fit_with_the_t_proposal_alone_matches_its_batch)
                            "inference.map_config.tol": tol}, base=LEVEL2)  # fmt: skip
        spec = run_spec(load_config(cfg))
        post = build_posterior(spec.model)
        method = get(spec.inference)  # MAP's interim variant, wrapped (methods.interim)
        sim, keys = batch_inputs(spec, plan_campaign([0.02], n_realizations=2))

        def fit(k, o, post=post, method=method):
            return method.fit(k, o, post)

        out[proposal] = {"batch": batched(fit)(keys, sim.images), "method": method}
        if proposal == "student_t":
            out["alone"] = jax.jit(fit)(keys[1], sim.images[1])
    out["tol"] = tol
    return out


def test_interim_fit_with_the_t_proposal_alone_matches_its_batch(tiny):
    """Alone and in a batch (two separately compiled programs): at exact Newton's default
    tol the draws to 1e-6 sd and the weights to 1e-6 of their spread. At the shipped tol
    (slow tier) each fit stops within sqrt(2 tol) posterior sd of its mode (half its
    Newton decrement <= tol: the whitened step still to go bounds each coordinate's shift
    in its marginal sd), so the two proposals' centres, and the draws made from them with
    the same random numbers, agree to 2 sqrt(2 tol) = 8.9e-3 sd per element (the scales,
    the Hessians at the two centres, differ by that shift times the third derivative, a
    smaller term; the unit is the t draws' std, sqrt(nu / (nu - 2)) = 1.29 times the
    scale's, which leaves that term room); the weights are not compared
    there: a draw's log weight moves by its whitened radius times the centres' shift,
    and the t's radii have no bound."""
    b, a = tiny["student_t"]["batch"], tiny["alone"]
    assert set(b.stats) == {"interim_log_weight", "proposal_log_q"}
    for site, v in a.samples.items():
        got, want = np.asarray(v), np.asarray(b.samples[site][1])
        sd = want.std(axis=1, keepdims=True)
        if tiny["tol"] is None:
            np.testing.assert_allclose(got, want, atol=1e-6 * float(sd.min()), rtol=0)
        else:
            worst = float(np.max(np.abs(got - want) / sd))
            assert worst <= 2.0 * np.sqrt(2.0 * tiny["tol"]), (site, worst)
    if tiny["tol"] is not None:
        return
    lw_a, lw_b = (
        np.asarray(a.stats["interim_log_weight"]),
        np.asarray(b.stats["interim_log_weight"][1]),
    )
    fin = np.isfinite(lw_b)
    np.testing.assert_array_equal(np.isfinite(lw_a), fin)
    spread = min(float(np.std(w[f])) for w, f in zip(lw_b[0].T, fin[0].T, strict=True))
    np.testing.assert_allclose(lw_a[fin], lw_b[fin], atol=1e-6 * spread, rtol=0)


def _weighted_var(draws, lane: int, site: str):
    """Interim-posterior variance of ``site`` per galaxy from the weighted draws of one lane
    (log weights p / q = interim_log_weight + log pi), and its MCSE."""
    e = {s: np.asarray(draws.samples[s][lane, 0]) for s in ("e1", "e2")}
    log_pi = sum(st.norm(0, E_SIGMA).logpdf(v) for v in e.values())
    log_r = np.asarray(draws.stats["interim_log_weight"][lane, 0]) + log_pi
    x = np.asarray(draws.samples[site][lane, 0])
    out = [_snis(x[:, [j]], log_r[:, j]) for j in range(x.shape[1])]
    return np.array([o[1][0] for o in out]), np.array([o[3][0] for o in out])


@pytest.mark.parametrize("site", ["e1", "hlr"])
def test_t_and_laplace_proposals_agree_on_the_interim_posterior(tiny, site):
    for lane in (0, 1):
        vt, st_ = _weighted_var(tiny["student_t"]["batch"], lane, site)
        vl, sl = _weighted_var(tiny["laplace"]["batch"], lane, site)
        z = (vt - vl) / np.sqrt(st_**2 + sl**2)
        assert np.max(np.abs(z)) < 4.5, (site, lane, vt, vl, z)


def test_the_record_names_the_proposal_and_weights_its_std(tiny):
    lane = jax.tree.map(lambda v: v[0], tiny["student_t"]["batch"])
    d = tiny["student_t"]["method"].diagnose(lane).diagnostics
    assert d["importance"]["proposal"] == "student_t" and d["importance"]["proposal_dof"] == 5.0
    assert d["importance"]["proposal_centre"] == "target"
    assert d["laplace"]["posterior_std_weighted"] is True
    v, _ = _weighted_var(tiny["student_t"]["batch"], 0, "e1")
    np.testing.assert_allclose(d["laplace"]["posterior_std"]["e1"], np.sqrt(v), rtol=1e-9)
    # the t draws' plain spread is wider than the weighted (posterior) one
    plain = np.asarray(lane.samples["e1"]).std(axis=(0, 1))
    assert np.all(plain > np.asarray(d["laplace"]["posterior_std"]["e1"]))
    lap = jax.tree.map(lambda v: v[0], tiny["laplace"]["batch"])
    d = tiny["laplace"]["method"].diagnose(lap).diagnostics
    assert "proposal" not in d["importance"] and "posterior_std_weighted" not in d["laplace"]


# --------------------------------------------------------------------------- the config key

BAD = [
    ({"inference.map_config.proposal": "cauchy"}, "inference.map_config.proposal"),
    ({"inference.map_config.proposal": "student_t", "inference.map_config.proposal_dof": 0},
     "inference.map_config.proposal_dof"),
    ({"inference.map_config.proposal": "student_t", "inference.map_config.proposal_dof": "five"},
     "inference.map_config.proposal_dof"),
    ({"inference.map_config.proposal": "laplace", "inference.map_config.proposal_dof": 5},
     "proposal_dof"),  # Laplace: no effect
    ({"inference.map_config.proposal_centre": "mean"}, "inference.map_config.proposal_centre"),
]  # fmt: skip


@pytest.mark.parametrize(("edits", "needle"), BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_proposal_settings_are_refused_in_one_line(tmp_path, edits, needle):
    cfg = write_config(tmp_path / "bad.yaml", edits, base=LEVEL2)
    res = CliRunner().invoke(bias_run, ["--config", cfg, "--output-dir", str(tmp_path / "x"),
                                        "--dry-run", "--no-progress"])  # fmt: skip
    lines = res.output.strip().splitlines()
    assert res.exit_code == 2, res.output
    assert len(lines) == 1 and lines[0].startswith("Error: ") and needle in lines[0], res.output
    assert "Traceback" not in res.output and not (tmp_path / "x").exists()


def test_the_joint_model_ignores_the_interim_proposal(tmp_path):
    """`--set inference.shear_model=joint` on configs/level2.yaml (student_t at the target):
    accepted, and the joint fit's draws are the Laplace Gaussian's at the MAP, as always."""
    cfg = write_config(tmp_path / "joint.yaml", {"inference.shear_model": "joint"}, base=LEVEL2)
    res = CliRunner().invoke(bias_run, ["--config", cfg, "--output-dir", str(tmp_path / "x"),
                                        "--dry-run", "--no-progress"])  # fmt: skip
    assert res.exit_code == 0, res.output
    from shearbatch.core.posterior import build_posterior
    from shearbatch.spec import run_spec

    spec = run_spec(load_config(cfg))
    assert spec.inference.settings.proposal == "student_t"
    method = mm.method(spec.inference.settings)
    post = build_posterior(spec.model)
    im = spec.model.image
    obs = jax.ShapeDtypeStruct((im.n_objects, im.ny, im.nx), jnp.float64)
    out = jax.eval_shape(lambda k, o: method.fit(k, o, post), jax.random.PRNGKey(0), obs)
    assert set(out.stats) == {"laplace_log_q"} and out.info.is_ess is None
    assert method.diagnose is mm.diagnose


def test_the_key_at_its_default_keeps_the_config_hash(tmp_path):
    import hashlib
    import json

    keys = ("proposal", "proposal_dof", "proposal_centre", "gauss_newton_precision",
            "draw_precision")  # fmt: skip
    base = load_config(
        write_config(
            tmp_path / "b.yaml",
            {"inference.map_config": {"num_steps": 200, "optimizer": "gauss_newton"}},
            base=LEVEL2,
        )
    )  # without the keys
    mc0 = {"num_steps": 200, "optimizer": "gauss_newton"}
    explicit = load_config(write_config(tmp_path / "n.yaml",
                                        {"inference.map_config": {**mc0, **dict.fromkeys(keys)}},
                                        base=LEVEL2))  # fmt: skip
    data = base.model_dump(mode="json", exclude={"campaign"})  # the hash before the keys
    for key in keys:
        del data["inference"]["map_config"][key]
    if data["image"].get("alias_band", 0) is None:
        del data["image"]["alias_band"]
    for key in ("estimators", "anacal_config"):  # issue 45's keys, hash-neutral when null
        if data["inference"].get(key, 0) is None:
            del data["inference"][key]
    old = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]
    assert config_hash(base) == config_hash(explicit) == old
    hashes = {config_hash(base)}
    for i, edits in enumerate(({"proposal": "student_t"},
                               {"proposal": "student_t", "proposal_dof": 5},
                               {"proposal_centre": "target"},
                               {"gauss_newton_precision": "float32"},
                               {"draw_precision": "float32"})):  # fmt: skip
        mc = {**mc0, **edits}
        cfg = write_config(tmp_path / f"{i}.yaml", {"inference.map_config": mc}, base=LEVEL2)
        hashes.add(config_hash(load_config(cfg)))
    assert len(hashes) == 6
