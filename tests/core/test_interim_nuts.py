"""NUTS for the interim model (inference.shear_model: interim, method: nuts).

- A galaxy lane's potential (the one-galaxy posterior on that galaxy's stamp) is that
  galaxy's term of the M-galaxy interim posterior (methods/map.py: galaxy_log_target).
- On one galaxy, NUTS's draws agree with the MAP path's importance-reweighted Laplace
  draws (mean and sd of e1, e2 within their Monte Carlo errors).
- The pipeline through the real CLIs (level2.yaml shrunk to 4 galaxies, paired, 2 seeds):
  posterior.nc keeps draws and interim_log_weight (= -log pi(e)) on (chain, draw, galaxy);
  convergence.json carries per-galaxy R-hat / ESS / divergences and their worst values;
  bias-extract fits g per realization and writes the population sidecar; bias-stats pools
  it; a galaxy run alone as one lane gives the draws it has in its batch.

The NUTS tests compile interim NUTS programs (minutes on the shared 2-core CPU): they are
``slow`` (``pytest -m slow tests/core/test_interim_nuts.py``).
"""

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
import xarray as xr
from click.testing import CliRunner
from scipy import stats as st

from shearbatch.analysis.partials import index_path
from shearbatch.analysis.streamed import PartialSource
from shearbatch.campaign import plan_campaign
from shearbatch.cli import bias_extract, bias_run, bias_stats
from shearbatch.core import methods
from shearbatch.core.batching import realization_keys
from shearbatch.core.compare import agreement
from shearbatch.core.diagnostics import ess_bulk
from shearbatch.core.methods import nuts
from shearbatch.core.methods.base import Draws
from shearbatch.core.methods.map import galaxy_log_target
from shearbatch.core.posterior import build_posterior, galaxy_posterior
from shearbatch.engine.loop import generate, inference_program
from shearbatch.schema import load_config
from shearbatch.spec import run_spec
from tests.conftest import OPTIMIZER_SD_TOL, write_config

LEVEL2 = Path(__file__).resolve().parents[2] / "configs" / "level2.yaml"
NUTS = {"inference.shear_model": "interim", "inference.method": "nuts",
        "inference.nuts_config.warmup": 150, "inference.nuts_config.samples": 200,
        "campaign.rotations": 1}  # fmt: skip
E_SIGMA = load_config(LEVEL2).inference.interim_e_sigma  # the config's interim prior width


def _spec(module_tmp, name, edits):
    return run_spec(load_config(write_config(module_tmp / name, edits, base=LEVEL2)))


def test_a_galaxy_lane_samples_that_galaxys_term_of_the_posterior(module_tmp):
    spec = _spec(module_tmp, "m4.yaml", {**NUTS, "image.n_objects": 4})
    post = build_posterior(spec.model)
    one = galaxy_posterior(post)
    assert one.x0.shape == (6,) and set(one.sites) == set(post.sites)
    m, im = 4, spec.model.image
    obs = jnp.asarray(np.random.default_rng(1).normal(0, spec.model.noise_sigma, (m, im.ny, im.nx)))
    x = post.x0 + 0.2 * jnp.asarray(np.random.default_rng(2).normal(size=post.x0.shape))
    per = galaxy_log_target(post, x, obs)
    lanes = x.reshape(6, m).T  # sites sorted, each (M,): galaxy j's 6 latents
    for j in range(m):
        u = float(one.potential_fn(lanes[j], obs[j : j + 1]))
        assert u == pytest.approx(-float(per[j]), rel=1e-12)
    joint = build_posterior(run_spec(load_config(write_config(
        module_tmp / "joint.yaml", {"image.n_objects": 4, "inference.shear_model": "joint"}, base=LEVEL2))).model)  # fmt: skip
    with pytest.raises(ValueError, match="shear"):
        galaxy_posterior(joint)


def _mcse_close(a, b, se, k=4.0):
    assert abs(a - b) <= k * se, (a, b, se)


@pytest.mark.slow  # two NUTS and one MAP program compiled: ~2-4 min on the shared CPU
def test_nuts_draws_agree_with_importance_reweighted_laplace_draws(module_tmp):
    """One galaxy per realization at S/N 300 (reference galaxy), two seeds: NUTS's posterior mean and sd of
    e1, e2 against the MAP path's Laplace draws weighted by their importance ratios
    p(d, x) / q(x), within 4 Monte Carlo standard errors of the difference."""
    edits = {**NUTS, "image.n_objects": 1, "image.noise.snr": 300,
             "inference.nuts_config.warmup": 300, "inference.nuts_config.samples": 500,
             "inference.map_config.num_samples": 4000}  # fmt: skip
    spec = _spec(module_tmp, "one.yaml", edits)
    plan = plan_campaign([0.02], n_realizations=2, paired=False)
    sim = generate(spec, plan)
    keys = realization_keys([r.seed for r in plan], spec.rng_seed)
    got = inference_program(spec)[1](keys, sim.images)
    inf = spec.inference  # the same settings, MAP's interim variant
    map_spec = spec._replace(inference=inf._replace(
        name="map", settings=dict(inf.sections)["map_config"], sections=()))  # fmt: skip
    lap = inference_program(map_spec)[1](keys, sim.images)
    pi = st.norm(0, E_SIGMA)
    for b in range(2):
        for s in ("e1", "e2"):
            x = np.asarray(got.samples[s][b, ..., 0])  # (chain, draw)
            mean, sd, ess = x.mean(), x.std(), ess_bulk(x)
            y = np.asarray(lap.samples[s][b, 0, :, 0])
            e = {c: np.asarray(lap.samples[c][b, 0, :, 0]) for c in ("e1", "e2")}
            log_pi = sum(pi.logpdf(v) for v in e.values())
            log_r = np.asarray(lap.stats["interim_log_weight"][b, 0, :, 0]) + log_pi  # p / q
            w = np.exp(log_r - log_r.max())
            w /= w.sum()
            ess_is = 1.0 / np.sum(w * w)
            m_is = float(np.sum(w * y))
            sd_is = float(np.sqrt(np.sum(w * (y - m_is) ** 2)))
            assert ess > 200 and ess_is > 100, (ess, ess_is)
            _mcse_close(mean, m_is, sd * np.sqrt(1 / ess + 1 / ess_is))
            _mcse_close(sd / sd_is, 1.0, np.sqrt(1 / (2 * ess) + 1 / (2 * ess_is)))
        # exact draws: the population weight divides out the interim prior only
        lw = np.asarray(got.stats["interim_log_weight"][b, ..., 0])
        want = -sum(pi.logpdf(np.asarray(got.samples[c][b, ..., 0])) for c in ("e1", "e2"))
        np.testing.assert_allclose(lw, want, rtol=1e-12)


CONV = {"rhat_max": 1.05, "ess_min": 100, "divergence_frac_max": 0.01}


@pytest.fixture(scope="module")
def campaign(module_tmp):
    cfg = write_config(module_tmp / "camp.yaml", {**NUTS, "image.n_objects": 4}, base=LEVEL2)
    camp, csv = module_tmp / "camp", module_tmp / "summary.csv"
    gates = module_tmp / "gates.yaml"
    gates.write_text(json.dumps({"convergence": CONV}))
    res = CliRunner().invoke(bias_run, ["--config", cfg, "--n-realizations", "2",
                                        "--batch-size", "4", "--no-progress", "--output-dir",
                                        str(camp)])  # fmt: skip
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(bias_extract, ["--input-dir", str(camp), "--output", str(csv),
                                            "--convergence-config", str(gates),
                                            "--workers", "1", "--no-progress"])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "summary.partials.json" in res.output
    return cfg, camp, csv


@pytest.mark.slow  # a compiled interim NUTS campaign: minutes on the shared CPU
def test_posterior_nc_and_convergence_json_per_galaxy(campaign):
    _, camp, _ = campaign
    d = camp / "g1_+0.0200_g2_+0.0000_s0"
    with xr.open_datatree(d / "posterior.nc", engine="netcdf4") as tree:
        post, stats, attrs = tree["posterior"].ds, tree["sample_stats"].ds, dict(tree.attrs)
        assert "g1" not in post and post["e1"].dims == ("chain", "draw", "galaxy")
        assert post["e1"].shape == (4, 200, 4)
        for k in ("interim_log_weight", "diverging", "tree_depth", "lp"):
            assert stats[k].dims == ("chain", "draw", "galaxy"), k
        pi = st.norm(0, E_SIGMA)
        want = -(pi.logpdf(post["e1"].values) + pi.logpdf(post["e2"].values))
        np.testing.assert_allclose(stats["interim_log_weight"].values, want, rtol=1e-12)
        div = stats["diverging"].values.sum(axis=(0, 1))
    assert attrs["shear_model"] == "interim" and attrs["inference_method"] == "nuts"
    assert json.loads(attrs["interim_prior_e1"]) == {"kind": "normal", "args": [0.0, E_SIGMA]}
    conv = json.loads((d / "convergence.json").read_text())
    assert conv["point_estimate"] == "population" and conv["method"] == "nuts"
    per, worst = conv["per_galaxy"], conv["galaxies"]
    assert all(len(v) == 4 for v in per.values()) and worst["n"] == 4
    assert per["divergences"] == div.tolist()
    assert worst["rhat_max"] == max(per["rhat_max"]) == conv["rhat_max"]
    assert worst["ess_bulk_e_min"] == min(per["ess_bulk_e"])
    assert per["ess_bulk_e"] == [min(a, b) for a, b in
                                 zip(conv["ess_bulk"]["e1"], conv["ess_bulk"]["e2"], strict=True)]  # fmt: skip
    assert 1.0 <= worst["rhat_max"] < 1.05 and worst["ess_bulk_e_min"] > 100
    assert conv["batch"]["lockstep_efficiency"]["sampling"] <= 1.0


@pytest.mark.slow  # a compiled interim NUTS campaign: minutes on the shared CPU
def test_extract_and_stats_fit_the_population_from_nuts_draws(campaign, module_tmp):
    _, _, csv = campaign
    df = pd.read_csv(csv)
    assert len(df) == 4 and set(df["point_estimate"]) == {"population"}
    assert set(df["method"]) == {"nuts"} and set(df["pop_n_galaxies"]) == {4}
    assert np.all(np.isfinite(df[["g1_mean", "g1_std", "g2_mean", "g2_std"]].to_numpy()))
    assert df["passed_convergence"].all(), df[["run_id", "flags"]]
    z = PartialSource(index_path(csv)).arrays()
    assert z.eps.shape == (16, 800, 2) and np.all(np.isfinite(z.log_base))
    out = module_tmp / "stats"
    res = CliRunner().invoke(bias_stats, ["--input", str(csv), "--output-dir", str(out),
                                          "--level", "level_2", "--no-plots"])  # fmt: skip
    assert res.exit_code in (0, 1, 3), res.output
    r = json.loads((out / "bias_results.json").read_text())
    assert r["estimator"] == "pooled paired" and r["point_estimate"] == "population"
    assert r["n_used"] == 4 and r["population"]["n_galaxies"] == 16
    assert np.isfinite(r["m1"]) and r["m1_err"] > 0


@pytest.mark.slow  # a compiled one-lane NUTS program: ~1 min on the shared CPU
def test_a_galaxy_alone_matches_its_lane_in_the_batch(campaign):
    """Galaxy 2 of seed 1's -g realization, run alone as one lane (nuts.fit on its stamp,
    key fold_in(realization key, 2)), gives the draws and statistics it has in the batch
    of 4 realizations x 4 galaxies (measured: 2e-7 sd, 5e-9 relative)."""
    cfg, camp, _ = campaign
    spec = run_spec(load_config(cfg))
    rid, j = "g1_-0.0200_g2_+0.0000_s1", 2
    with xr.open_datatree(camp / rid / "posterior.nc", engine="netcdf4") as tree:
        samples = {k: v.values[..., j] for k, v in tree["posterior"].ds.items()}
        stats = {k: v.values[..., j] for k, v in tree["sample_stats"].ds.items()}
        stamp = jnp.asarray(tree["observed_data"].ds["obs"].values[j])
    settings = nuts.settings_of(spec.inference.settings, **dict(spec.inference.sections))
    one = galaxy_posterior(build_posterior(spec.model))
    key = jax.random.fold_in(realization_keys([1], spec.rng_seed)[0], j)
    alone = jax.jit(lambda k, d: nuts.fit(k, d[None], one, settings))(key, stamp)
    got = Draws({k: v[None, ..., 0] for k, v in alone.samples.items()},
                {k: v[None] for k, v in alone.stats.items()}, {}, {})  # fmt: skip
    want = Draws({k: v[None] for k, v in samples.items()},
                 {k: stats[k][None] for k in alone.stats}, {}, {})  # fmt: skip
    # another program shape: the lane's MAP start (its whitening centre) agrees to the
    # optimizer's tolerance, not to rounding (conftest.OPTIMIZER_SD_TOL), and every draw
    # moves with it: draws within that many posterior sd, energies and step sizes within as
    # much relative, and the same trees (leapfrog counts, divergences) exactly
    a = agreement(got, want)
    assert a.max_diff_sd <= OPTIMIZER_SD_TOL and a.max_rel_diff <= OPTIMIZER_SD_TOL, a
    assert a.flags_equal and a.max_steps_diff == 0, a


def test_interim_nuts_is_a_valid_config_and_vi_is_refused(module_tmp):
    assert methods.supports_interim("nuts") and not methods.supports_interim("vi")
    spec = _spec(module_tmp, "ok.yaml", {**NUTS})
    assert spec.method == "nuts" and spec.population is not None
