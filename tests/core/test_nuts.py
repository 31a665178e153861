"""NUTS for batches: independent vmapped samplers per realization x chain.

All tests share one config (24x24 stamps of the Level 0 galaxy, noise 1e-3, flux and
offset free) so that they share compiled programs.
"""

import jax.numpy as jnp
import numpy as np
import pytest
from click.testing import CliRunner

import shearbatch.core.methods.nuts as nuts
import shearbatch.engine.loop as engine
from shearbatch.campaign import plan_campaign
from shearbatch.cli import bias_run
from shearbatch.core.generate import render_stamps
from shearbatch.io import find_realization_dirs, read_json, read_posterior
from shearbatch.schema import load_config
from shearbatch.spec import run_spec
from tests.conftest import count_calls, run_engine, write_config

GRID = ["0.03", "-0.02"]
B4_ARGS = ["--shear-grid", *GRID, "--g2-true", "0.01", "--n-realizations", "2",
           "--base-seed", "7", "--batch-size", "4"]  # fmt: skip


@pytest.fixture(scope="module")
def cfg_path(module_tmp):
    return write_config(
        module_tmp / "nuts.yaml",
        {
            # 16x16 stamps of a 0.3" galaxy (light inside +-5 px): half the cost of 24x24
            "image.size_x": 16,
            "image.size_y": 16,
            "gal.half_light_radius": 0.3,
            "image.noise.sigma": 1e-3,
            "gal.flux": {"type": "LogNormal", "mean": 1.0, "sigma": 2.0},
            "gal.position": {
                "type": "Uniform",
                "x_min": 7.5,
                "x_max": 8.5,
                "y_min": 7.5,
                "y_max": 8.5,
            },
            "inference.method": "nuts",
            # 1000 draws per chain: at 250, rank-normalised R-hat exceeded 1.01 for 9.4% of
            # (realization, site) pairs of correctly converged chains (64 pairs, 8 seeds), so
            # "R-hat <= 1.01 in every realization" would fail by chance half of the time.
            "inference.nuts_config": {"warmup": 250, "samples": 1000, "chains": 4},
        },
    )


def run(cfg_path, out, *args, expect=0):
    res = CliRunner().invoke(
        bias_run, ["--config", cfg_path, "--output-dir", str(out), "--x64", "--no-progress", *args]
    )
    assert res.exit_code == expect, res.output
    return res


@pytest.fixture(scope="module")
def batch4(module_tmp, cfg_path):
    run(cfg_path, module_tmp / "b4", *B4_ARGS)
    return module_tmp / "b4"


@pytest.fixture(scope="module")
def laplace(module_tmp, cfg_path):
    run(cfg_path, module_tmp / "map", "--method", "map", *B4_ARGS)
    return module_tmp / "map"


def test_noisy_level0_converges_covers_and_matches_laplace(batch4, laplace):
    dirs = find_realization_dirs(batch4)
    assert len(dirs) == 4
    for d in dirs:
        conv, truth = read_json(d / "convergence.json"), read_json(d / "truth.json")
        post = read_posterior(d / "posterior.nc")
        assert conv["status"] == "ok"
        assert post["g1"].shape == (4, 1000) and post["flux"].shape == (4, 1000, 1)
        for site in ("g1", "g2"):
            assert conv["rhat"][site] <= 1.01 and conv["ess_bulk"][site] >= 400, conv
            lo, hi = np.quantile(post[site], [0.005, 0.995])
            assert lo < truth[site] < hi
            lap_std = read_json(laplace / d.name / "convergence.json")["laplace"]["posterior_std"][
                site
            ]
            assert abs(post[site].std() / lap_std - 1) < 0.2
        assert {"bfmi", "divergences", "divergence_frac", "tree_depth_max_hits", "ess_tail"} <= set(
            conv
        )
        assert len(conv["bfmi"]) == 4 and conv["batch"]["lockstep_efficiency"]["sampling"] > 0


def test_sample_stats_are_written(batch4):
    import xarray as xr

    d = find_realization_dirs(batch4)[0]
    with xr.open_dataset(d / "posterior.nc", group="sample_stats") as ss:
        assert {
            "diverging",
            "tree_depth",
            "n_steps",
            "step_size",
            "energy",
            "acceptance_rate",
            "lp",
        } <= set(ss.data_vars)
        assert ss["diverging"].dims == ("chain", "draw")


def test_same_batch_size_different_companions_is_bit_identical(module_tmp, cfg_path, batch4):
    out = module_tmp / "b4_other"
    # g1=-0.02 seeds 7, 8 again, now with other companions and in other lanes
    run(
        cfg_path,
        out,
        "--shear-grid",
        "0.05",
        "-0.02",
        "--g2-true",
        "0.01",
        "--n-realizations",
        "2",
        "--base-seed",
        "7",
        "--batch-size",
        "4",
    )
    for rid in ("g1_-0.0200_g2_+0.0100_s7", "g1_-0.0200_g2_+0.0100_s8"):
        a, b = (
            read_posterior(batch4 / rid / "posterior.nc"),
            read_posterior(out / rid / "posterior.nc"),
        )
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])


def test_batch_of_one_is_statistically_equivalent(module_tmp, cfg_path, batch4):
    out = module_tmp / "b1"
    run(
        cfg_path,
        out,
        "--g1-true",
        "0.03",
        "--g2-true",
        "0.01",
        "--seed",
        "7",
        "--run-id",
        "g1_+0.0300_g2_+0.0100_s7",
        "--batch-size",
        "1",
    )
    rid = "g1_+0.0300_g2_+0.0100_s7"
    one, four = (
        read_posterior(out / rid / "posterior.nc"),
        read_posterior(batch4 / rid / "posterior.nc"),
    )
    c1, c4 = read_json(out / rid / "convergence.json"), read_json(batch4 / rid / "convergence.json")
    for site in ("g1", "g2"):
        mcse = np.hypot(
            one[site].std() / np.sqrt(c1["ess_bulk"][site]),
            four[site].std() / np.sqrt(c4["ess_bulk"][site]),
        )
        assert abs(one[site].mean() - four[site].mean()) < 4 * mcse


def test_broken_and_hard_neighbours_do_not_affect_the_others(
    module_tmp, cfg_path, batch4, monkeypatch
):
    """Lanes 3, 4 replaced by NaN data and by a 100x higher-S/N galaxy; lanes 1, 2 unchanged."""
    cfg = load_config(cfg_path)
    plan = plan_campaign([0.03, -0.02], g2=0.01, n_realizations=2, base_seed=7)
    broken, hard = plan[2].run_id, plan[3].run_id
    real = engine.generate

    def inject(spec, realizations):
        sim = real(spec, realizations)
        images = np.array(sim.images)
        for b, r in enumerate(realizations):
            if r.run_id == broken:
                images[b] = np.nan
            elif r.run_id == hard:
                clean = np.asarray(
                    render_stamps(spec.truth, {k: v[b] for k, v in sim.params.items()}, sim.g[b])
                )
                images[b] = 100 * clean + (images[b] - clean)  # flux x100, same noise
        return sim._replace(images=jnp.asarray(images))

    monkeypatch.setattr(engine, "generate", inject)
    out = module_tmp / "isolated"
    report = run_engine(run_spec(cfg), plan, output_dir=out, batch_size=4)
    assert report.failed == [broken]
    assert "non-finite data" in read_json(out / broken / "convergence.json")["reason"]
    hard_conv = read_json(out / hard / "convergence.json")
    assert hard_conv["status"] == "ok"
    assert (
        read_posterior(out / hard / "posterior.nc")["g1"].std()
        < 0.05 * read_posterior(batch4 / hard / "posterior.nc")["g1"].std()
    )
    for r in plan[:2]:
        a, b = (
            read_json(out / r.run_id / "convergence.json"),
            read_json(batch4 / r.run_id / "convergence.json"),
        )
        assert a["rhat"] == b["rhat"] and a["ess_bulk"] == b["ess_bulk"]
        np.testing.assert_array_equal(
            read_posterior(out / r.run_id / "posterior.nc")["g1"],
            read_posterior(batch4 / r.run_id / "posterior.nc")["g1"],
        )


def test_nuts_program_compiles_once_per_campaign_with_two_galaxies(
    module_tmp, cfg_path, monkeypatch
):
    """Also: NUTS works with n_objects > 1 (per-galaxy latents on a named galaxy axis), and
    the large-batch recipe (tree depth capped per phase, Laplace mass kept fixed) holds."""
    traces = count_calls(monkeypatch, nuts, "fit")
    cfg = load_config(cfg_path)
    nc = cfg.inference.nuts_config.model_copy(
        update={
            "warmup": 20,
            "samples": 20,
            "max_tree_depth": 4,
            "max_tree_depth_sampling": 2,
            "adapt_mass_matrix": False,
        }
    )
    cfg = cfg.model_copy(
        update={
            "inference": cfg.inference.model_copy(update={"nuts_config": nc}),
            "image": cfg.image.model_copy(update={"n_objects": 2}),
        }
    )
    plan = plan_campaign([0.01, 0.02, 0.03], n_realizations=2, base_seed=0)  # 6 = 4 + 2 padded
    report = run_engine(run_spec(cfg), plan, output_dir=module_tmp / "once", batch_size=4)
    assert len(report.batch_times) == 2 and len(traces) == 1
    post = read_posterior(module_tmp / "once" / plan[0].run_id / "posterior.nc")
    assert post["g1"].shape == (4, 20) and post["dx"].shape == (4, 20, 2)
    import xarray as xr

    with xr.open_dataset(
        module_tmp / "once" / plan[0].run_id / "posterior.nc", group="sample_stats"
    ) as ss:
        assert int(ss["n_steps"].max()) <= 3 and int(ss["tree_depth"].max()) <= 2
    conv = read_json(module_tmp / "once" / plan[0].run_id / "convergence.json")
    assert conv["batch"]["sampling_tree_depth_p99"] <= 2
