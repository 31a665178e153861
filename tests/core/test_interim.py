"""The interim shear model (inference.shear_model: interim) and its population fit.

- The premise: an elliptical galaxy of intrinsic shape e sheared by g is the same image as
  the unsheared galaxy of observed shape compose(e, g) (the renderer, to rounding).
- The per-galaxy log target of the interim model sums to the potential NumPyro computes.
- The pipeline through the real CLIs (level2.yaml shrunk to 4 galaxies of 16x16, paired,
  3 seeds): posterior.nc keeps per-galaxy draws and per-galaxy importance weights on the
  galaxy axis with the interim and population priors beside them; bias-extract fits g per
  realization and writes the population sidecar; bias-stats pools it per grid point; a
  realization run alone gives the same draws and weights as in its batch.
- Bad input: the interim model with a method that cannot fit it (vi) is refused (exit 2).

The campaign tests compile an interim program (about 1-2 minutes on the shared 2-core
CPU): they are ``slow`` (``pytest -m slow tests/core/test_interim.py``).
"""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
import xarray as xr
from click.testing import CliRunner

import shearbatch
from shearbatch.analysis.partials import index_path
from shearbatch.analysis.streamed import PartialSource
from shearbatch.cli import bias_extract, bias_run, bias_stats
from shearbatch.core import population as pop
from shearbatch.core.generate import render_stamps
from shearbatch.core.methods.map import galaxy_log_target
from shearbatch.core.posterior import build_posterior
from shearbatch.schema import load_config
from shearbatch.spec import run_spec
from tests.conftest import write_config

LEVEL2 = "configs/level2.yaml"
E_SIGMA = load_config(LEVEL2).inference.interim_e_sigma  # the config's interim prior width
EDITS = {"image.n_objects": 4, "inference.shear_model": "interim",
         "inference.map_config.num_samples": 200, "campaign.rotations": 1}  # fmt: skip


@pytest.fixture(scope="module")
def interim_cfg(module_tmp):
    from pathlib import Path

    return write_config(module_tmp / "interim.yaml", EDITS, base=Path(LEVEL2))


def test_interim_image_is_the_sheared_image(interim_cfg):
    spec = run_spec(load_config(interim_cfg))
    assert spec.population is not None and spec.model.shear[0].fixed
    assert spec.model.fields.e1.kind == "normal" and spec.model.fields.e1.args == (0.0, E_SIGMA)
    rng = np.random.default_rng(0)
    m = spec.model.image.n_objects
    params = {"flux": jnp.asarray(rng.uniform(0.5, 2, m)), "hlr": jnp.asarray(rng.uniform(0.2, 0.4, m)),
              "e1": jnp.asarray(rng.normal(0, 0.2, m)), "e2": jnp.asarray(rng.normal(0, 0.2, m)),
              "dx": jnp.asarray(rng.normal(0, 0.3, m)), "dy": jnp.asarray(rng.normal(0, 0.3, m))}  # fmt: skip
    g = jnp.asarray([0.05, -0.03])
    sheared = render_stamps(spec.population, params, g)
    eps = pop.compose(jnp.stack([params["e1"], params["e2"]], -1), g)
    observed = render_stamps(spec.model, {**params, "e1": eps[:, 0], "e2": eps[:, 1]},
                             jnp.zeros(2))  # fmt: skip
    np.testing.assert_allclose(observed, sheared, atol=1e-12 * float(jnp.max(sheared)))


def test_galaxy_log_target_sums_to_the_potential(interim_cfg):
    spec = run_spec(load_config(interim_cfg))
    post = build_posterior(spec.model)
    assert set(post.sites) == {"flux", "hlr", "e1", "e2", "dx", "dy"}  # no shear site
    m, im = spec.model.image.n_objects, spec.model.image
    obs = jnp.asarray(np.random.default_rng(1).normal(0, spec.model.noise_sigma, (m, im.ny, im.nx)))
    x = post.x0 + 0.1 * jnp.asarray(np.random.default_rng(2).normal(size=post.x0.shape))
    per = galaxy_log_target(post, x, obs)
    assert per.shape == (m,)
    assert float(jnp.sum(per)) == pytest.approx(-float(post.potential_fn(x, obs)), rel=1e-12)
    # galaxy j's term depends on galaxy j only
    x2 = x.reshape(6, m).at[:, 1].add(0.05).ravel()  # sites are sorted, each (M,)
    d = np.asarray(galaxy_log_target(post, x2, obs) - per)
    assert d[1] != 0 and np.all(d[[0, 2, 3]] == 0)


@pytest.fixture(scope="module")
def campaign(module_tmp, interim_cfg):
    camp, csv = module_tmp / "camp", module_tmp / "summary.csv"
    res = CliRunner().invoke(bias_run, ["--config", interim_cfg, "--n-realizations", "3",
                                        "--batch-size", "6", "--no-progress", "--output-dir",
                                        str(camp)])  # fmt: skip
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(bias_extract, ["--input-dir", str(camp), "--output", str(csv),
                                            "--workers", "1", "--no-progress"])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "summary.partials.json" in res.output
    return camp, csv


@pytest.mark.slow  # a compiled interim campaign: ~1-2 min on the shared CPU
def test_posterior_nc_keeps_per_galaxy_draws_and_weights(campaign):
    camp, _ = campaign
    d = camp / "g1_+0.0200_g2_+0.0000_s0"
    with xr.open_datatree(d / "posterior.nc", engine="netcdf4") as tree:
        post, stats, attrs = tree["posterior"].ds, tree["sample_stats"].ds, dict(tree.attrs)
        assert "g1" not in post and post["e1"].dims == ("chain", "draw", "galaxy")
        assert post["e1"].shape == (1, 200, 4)
        lw = stats["interim_log_weight"]
        assert lw.dims == ("chain", "draw", "galaxy")
        # -inf only for a draw outside |e| < 1 (the proposal's tails reach it), else finite
        r2 = post["e1"].values ** 2 + post["e2"].values ** 2
        assert np.all(np.isfinite(lw.values) | ((lw.values == -np.inf) & (r2 >= 1)))
        assert np.mean(np.isfinite(lw.values)) > 0.9
    assert attrs["shear_model"] == "interim"
    assert json.loads(attrs["interim_prior_e1"]) == {"kind": "normal", "args": [0.0, E_SIGMA]}
    assert json.loads(attrs["population_prior_e1"])["kind"] == "truncnormal"
    conv = json.loads((d / "convergence.json").read_text())
    assert conv["point_estimate"] == "population" and conv["shear_model"] == "interim"
    frac = conv["importance"]["ess_fraction"]
    assert len(frac) == 4 and all(0 < f <= 1 for f in frac)


@pytest.mark.slow  # a compiled interim campaign: ~1-2 min on the shared CPU
def test_extract_fits_each_realization_and_stats_pool_per_grid_point(campaign, module_tmp):
    camp, csv = campaign
    df = pd.read_csv(csv)
    assert len(df) == 6 and set(df["point_estimate"]) == {"population"}
    assert set(df["shear_model"]) == {"interim"} and set(df["pop_n_galaxies"]) == {4}
    assert np.all(np.isfinite(df[["g1_mean", "g1_std", "g2_mean", "g2_std"]].to_numpy()))
    assert np.all(df["g1_mean"] == df["g1_mode"]) and np.all(df["g1_std"] > 0)
    # the per-realization column is the maximum of that realization's own likelihood
    z = PartialSource(index_path(csv)).arrays()
    assert z.eps.shape == (24, 200, 2) and z.log_base.shape == (24, 200)
    row = df.iloc[0]
    sel = z.run_id == row["run_id"]
    lp = pop.shape_log_prior(*[_prior(p) for p in json.loads(z.population)])
    f = pop.fit(z.eps[sel], z.log_base[sel], lp)
    np.testing.assert_allclose(f.g, row[["g1_mean", "g2_mean"]].to_numpy(float), atol=3e-6)
    out = module_tmp / "stats"
    res = CliRunner().invoke(bias_stats, ["--input", str(csv), "--output-dir", str(out),
                                          "--level", "level_2", "--no-plots"])  # fmt: skip
    assert res.exit_code in (1, 3), res.output  # 3 seeds decide little
    r = json.loads((out / "bias_results.json").read_text())
    assert r["estimator"] == "pooled paired" and r["point_estimate"] == "population"
    # POP_WEIGHTS_COLLAPSED is a warning: the realization is used (and counted)
    assert r["n_used"] == 6 and len(r["population"]["grid_points"]) == 2
    assert r["population"]["n_galaxies"] == 24
    flags = df["flags"].astype(object).fillna("").astype(str)  # all-NaN: none flagged
    n_warn = int(flags.str.contains("POP_WEIGHTS_COLLAPSED").sum())
    assert r["warnings"] == ({"POP_WEIGHTS_COLLAPSED": n_warn} if n_warn else {})
    assert r["m1_err"] > 0 and r["fits"]["g1"]["n_groups"] == 3
    assert "population estimator pooled per grid point: 24 galaxies" in res.output
    # the Python API pools the same galaxies
    api = shearbatch.open_campaign(camp).stats(level="level_2").to_json()
    assert api["estimator"] == "pooled paired" and api["m1"] == pytest.approx(r["m1"], rel=1e-9)
    # the pooled +g estimate is the maximum over the 12 galaxies at +g
    plus = df.loc[df["g1_true"] > 0, "run_id"].to_numpy()
    fp = pop.fit(z.eps[np.isin(z.run_id, plus)], z.log_base[np.isin(z.run_id, plus)], lp)
    gp = next(p for p in r["population"]["grid_points"] if p["g1_true"] > 0)
    assert gp["g1"] == pytest.approx(fp.g[0], abs=1e-9)


@pytest.mark.slow  # a compiled interim campaign: ~1-2 min on the shared CPU
def test_describe_warns_that_map_interim_draws_are_proposal_draws(campaign):
    camp, _ = campaign
    with pytest.warns(UserWarning, match="proposal draws"):
        df = shearbatch.open_campaign(camp).describe("g1_+0.0200_g2_+0.0000_s0")
    assert {"mean", "sd"} <= set(df.columns)


def _prior(d):
    from shearbatch.spec import Prior

    return Prior(d["kind"], tuple(float(a) for a in d["args"]))


@pytest.mark.slow  # a compiled interim campaign: ~1-2 min on the shared CPU
def test_a_realization_alone_matches_its_batch(campaign, module_tmp, interim_cfg):
    camp, _ = campaign
    rid = "g1_-0.0200_g2_+0.0000_s1"
    alone = module_tmp / "alone"
    res = CliRunner().invoke(bias_run, ["--config", interim_cfg, "--g1-true", "-0.02",
                                        "--seed", "1", "--run-id", rid, "--no-progress",
                                        "--output-dir", str(alone)])  # fmt: skip
    assert res.exit_code == 0, res.output
    got, want = ({}, {})
    for out, d in ((got, alone / rid), (want, camp / rid)):
        with xr.open_datatree(d / "posterior.nc", engine="netcdf4") as tree:
            out["e1"] = tree["posterior"].ds["e1"].values
            out["lw"] = tree["sample_stats"].ds["interim_log_weight"].values
    sd = want["e1"].std(axis=1, keepdims=True)
    np.testing.assert_allclose(got["e1"], want["e1"], atol=1e-6 * float(sd.min()))
    # log-weights (-inf: a draw outside |e| < 1) against each galaxy's own spread
    fin = np.isfinite(want["lw"])
    np.testing.assert_array_equal(np.isfinite(got["lw"]), fin)
    spread = min(float(np.std(w[f])) for w, f in zip(want["lw"][0].T, fin[0].T, strict=True))
    np.testing.assert_allclose(got["lw"][fin], want["lw"][fin], atol=1e-6 * spread, rtol=0)


def test_interim_with_another_method_is_refused(interim_cfg, tmp_path):
    res = CliRunner().invoke(bias_run, ["--config", interim_cfg, "--method", "vi",
                                        "--output-dir", str(tmp_path / "x"), "--dry-run"])  # fmt: skip
    assert res.exit_code == 2, res.output
    assert "shear_model" in res.output and len(res.output.strip().splitlines()) == 1


def test_jax_flags_untouched_by_the_population_fit():
    before = jax.config.jax_enable_x64
    lp = pop.shape_log_prior(_prior({"kind": "normal", "args": [0, 0.2]}),
                             _prior({"kind": "normal", "args": [0, 0.2]}))  # fmt: skip
    f = pop.fit(np.full((3, 1, 2), [0.1, 0.0]), np.zeros((3, 1)), lp)
    assert f.g.dtype == np.float64 and jax.config.jax_enable_x64 == before
