"""bias-run with MAP + Laplace, through the real CLI: recovery, splitting, batch invariance,
failures as data, resume, compile-once and the persistent compilation cache."""

import json
import os
import subprocess
import sys
from pathlib import Path

import arviz as az
import jax
import numpy as np
import pytest
import xarray as xr
from click.testing import CliRunner

import shearbatch.engine.loop as engine
from shearbatch.campaign import plan_campaign
from shearbatch.cli import bias_run
from shearbatch.io import find_realization_dirs, read_json, read_posterior
from shearbatch.schema import load_config
from shearbatch.spec import run_spec
from tests.conftest import OPTIMIZER_SD_TOL, count_calls, run_engine, write_config

GRID = ["-0.05", "-0.02", "0", "0.02", "0.05"]
# campaign A: the grid at g2 = -0.01, seeds 3 and 4, batches of 8 (the last one padded)
A_ARGS = ["--shear-grid", *GRID, "--g2-true", "-0.01", "--n-realizations", "2",
          "--base-seed", "3", "--batch-size", "8"]  # fmt: skip


def bias_run_ok(args, expect=0):
    res = CliRunner().invoke(bias_run, [*args, "--x64", "--no-progress"])
    assert res.exit_code == expect, res.output
    return res


def posterior_means(out: Path) -> dict[str, tuple[float, float]]:
    means = {}
    for d in find_realization_dirs(out):
        post = read_posterior(d / "posterior.nc")
        means[d.name] = (float(post["g1"].mean()), float(post["g2"].mean()))
    return means


def posterior_sds(out: Path) -> dict[str, tuple[float, float]]:
    sds = {}
    for d in find_realization_dirs(out):
        post = read_posterior(d / "posterior.nc")
        sds[d.name] = (float(post["g1"].std()), float(post["g2"].std()))
    return sds


@pytest.fixture(scope="module")
def quiet_cfg(module_tmp):
    """Level 0 with noise 1e-8: sigma(g) ~ 2e-7, so 1e-5 tests the engine, not the noise."""
    return write_config(module_tmp / "level0_quiet.yaml", {"image.noise.sigma": 1e-8})


@pytest.fixture(scope="module")
def campaign_a(module_tmp, quiet_cfg):
    out = module_tmp / "a"
    bias_run_ok(
        [
            "--config",
            quiet_cfg,
            *A_ARGS,
            "--output-dir",
            str(out),
        ]
    )
    return out


def test_level0_map_recovers_the_grid(campaign_a):
    dirs = find_realization_dirs(campaign_a)
    assert len(dirs) == 10
    for d in dirs:
        truth = read_json(d / "truth.json")
        conv = read_json(d / "convergence.json")
        post = read_posterior(d / "posterior.nc")
        assert conv["status"] == "ok" and conv["optimizer"]["converged"]
        # the pixel noise moves the mode by ~1 posterior sd (~2e-7 here): 5 sd
        for c in ("g1", "g2"):
            assert abs(post[c].mean() - truth[c]) <= 5 * post[c].std(), (c, post[c].std())
        assert truth["g2"] == -0.01


def test_each_file_holds_only_its_own_realization(campaign_a):
    means = posterior_means(campaign_a)
    truths = {d.name: read_json(d / "truth.json")["g1"] for d in find_realization_dirs(campaign_a)}
    # every estimate is nearest to its own truth, and no two realizations share values
    for rid, (g1, _) in means.items():
        nearest = min(truths.values(), key=lambda t: abs(t - g1))
        assert nearest == truths[rid]
    assert len({m for m in means.values()}) == len(means)
    for d in find_realization_dirs(campaign_a):
        with xr.open_dataset(d / "posterior.nc") as root:
            assert root.attrs["run_id"] == d.name
            assert root.attrs["g1_true"] == truths[d.name]


def test_level0_noise_1e6_is_within_laplace_errors(module_tmp):
    """At the shipped noise (1e-6) sigma(g) ~ 1.7e-5: errors are consistent with it."""
    out = module_tmp / "noisy"
    bias_run_ok(
        [
            "--config",
            "configs/level0.yaml",
            *A_ARGS,
            "--output-dir",
            str(out),
        ]
    )
    z = []
    for d in find_realization_dirs(out):
        post, truth = read_posterior(d / "posterior.nc"), read_json(d / "truth.json")
        std = read_json(d / "convergence.json")["laplace"]["std_unconstrained"]
        z += [
            (post["g1"].mean() - truth["g1"]) / std[0],
            (post["g2"].mean() - truth["g2"]) / std[1],
        ]
    assert np.max(np.abs(z)) < 5.0, z


def test_batch_invariance_across_order_and_companions(module_tmp, quiet_cfg, campaign_a):
    out = module_tmp / "b"
    bias_run_ok(
        [
            "--config",
            quiet_cfg,
            "--shear-grid",
            "0.05",
            "0.03",
            "-0.02",
            "0",
            "-0.05",
            "0.02",
            "--g2-true",
            "-0.01",
            "--n-realizations",
            "2",
            "--base-seed",
            "3",
            "--batch-size",
            "8",
            "--output-dir",
            str(out),
        ]
    )
    common = sorted(d.name for d in find_realization_dirs(campaign_a))
    for rid in common:
        a = read_posterior(campaign_a / rid / "posterior.nc")
        b = read_posterior(out / rid / "posterior.nc")
        assert a.keys() == b.keys()
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])  # bit-identical
        ca = read_json(campaign_a / rid / "convergence.json")
        cb = read_json(out / rid / "convergence.json")
        assert (
            ca["batch"]["lane"] != cb["batch"]["lane"]
            or ca["batch"]["index"] != cb["batch"]["index"]
        )


def test_batch_of_one_agrees_with_batch_of_eight(module_tmp, quiet_cfg, campaign_a):
    out = module_tmp / "single"
    bias_run_ok(
        [
            "--config",
            quiet_cfg,
            "--shear-grid",
            "-0.05",
            "0.05",
            "--g2-true",
            "-0.01",
            "--n-realizations",
            "1",
            "--base-seed",
            "3",
            "--batch-size",
            "1",
            "--output-dir",
            str(out),
        ]
    )
    one, eight, sd = posterior_means(out), posterior_means(campaign_a), posterior_sds(out)
    assert len(one) == 2
    for rid, (g1, g2) in one.items():
        assert read_json(out / rid / "convergence.json")["batch"]["size"] == 1
        # another lane count: the same mode to the optimizer's tolerance, in posterior sd
        assert abs(g1 - eight[rid][0]) <= OPTIMIZER_SD_TOL * sd[rid][0]
        assert abs(g2 - eight[rid][1]) <= OPTIMIZER_SD_TOL * sd[rid][1]


def test_posterior_nc_opens_with_arviz_and_datatree(campaign_a):
    path = find_realization_dirs(campaign_a)[0] / "posterior.nc"
    idata = az.from_netcdf(path)
    assert {"posterior", "sample_stats", "observed_data"} <= set(idata.groups())
    assert idata.posterior["g1"].dims == ("chain", "draw")
    assert idata.observed_data["obs"].dims == ("galaxy", "y", "x")
    summary = az.summary(idata, var_names=["g1", "g2"], kind="stats")
    assert summary.shape[0] == 2
    tree = xr.open_datatree(path)
    assert tree["posterior"]["g2"].dims == ("chain", "draw")
    for group in ("posterior", "sample_stats", "observed_data"):
        assert not [d for d in tree[group].dims if "_dim_" in d]
    assert tree.attrs["inference_method"] == "map" and tree.attrs["batch_size"] == 8
    assert {"seed", "g1_true", "g2_true", "config_hash", "shearbatch_version"} <= set(tree.attrs)


def test_single_realization_goes_to_its_run_id_directory(module_tmp, quiet_cfg):
    out = module_tmp / "one"
    bias_run_ok(
        [
            "--config",
            quiet_cfg,
            "--g1-true",
            "0.02",
            "--g2-true",
            "-0.01",
            "--seed",
            "42",
            "--run-id",
            "r0001",
            "--output-dir",
            str(out),
        ]
    )
    # the campaign root: manifest, commands and the frozen config as run (config.yaml)
    assert sorted(os.listdir(out)) == ["campaign.json", "commands.txt", "config.yaml", "r0001"]
    assert sorted(os.listdir(out / "r0001")) == ["convergence.json", "posterior.nc", "truth.json"]
    truth = read_json(out / "r0001" / "truth.json")
    assert (truth["g1"], truth["g2"], truth["seed"], truth["run_id"]) == (0.02, -0.01, 42, "r0001")


def test_resume_skips_complete_and_overwrite_redoes(module_tmp, quiet_cfg):
    out = module_tmp / "resume"
    args = [
        "--config",
        quiet_cfg,
        "--shear-grid",
        "0.01",
        "--n-realizations",
        "2",
        "--batch-size",
        "2",
        "--output-dir",
        str(out),
    ]
    bias_run_ok(args)
    stamp = {p: p.stat().st_mtime_ns for p in out.rglob("*.json")}
    (out / "g1_+0.0100_g2_+0.0000_s1" / "convergence.json").unlink()  # make one incomplete
    res = bias_run_ok(args)
    assert "wrote 1 ok" in res.output
    for p, t in stamp.items():
        if "s0" in p.parent.name:
            assert p.stat().st_mtime_ns == t  # the complete one was not touched
    res = bias_run_ok([*args, "--overwrite"])
    assert "wrote 2 ok" in res.output


def test_failed_realization_is_data(module_tmp, quiet_cfg, campaign_a, monkeypatch):
    """NaN data in one lane: that realization is 'failed', its companions are bit-identical."""
    broken = "g1_+0.0000_g2_-0.0100_s3"
    real = engine.generate

    def with_broken_lane(cfg, realizations):
        sim = real(cfg, realizations)
        bad = np.array([r.run_id == broken for r in realizations])
        images = np.where(bad[:, None, None, None], np.nan, np.asarray(sim.images))
        return sim._replace(images=jax.numpy.asarray(images))

    monkeypatch.setattr(engine, "generate", with_broken_lane)
    out = module_tmp / "broken"
    res = CliRunner().invoke(
        bias_run,
        [
            "--config",
            quiet_cfg,
            *A_ARGS,
            "--x64",
            "--no-progress",
            "--output-dir",
            str(out),
        ],
    )
    assert res.exit_code == 1, res.output
    conv = read_json(out / broken / "convergence.json")
    assert conv["status"] == "failed" and "non-finite data" in conv["reason"]
    for d in find_realization_dirs(out):
        if d.name == broken:
            continue
        assert read_json(d / "convergence.json")["status"] == "ok"
        a, b = (
            read_posterior(d / "posterior.nc"),
            read_posterior(campaign_a / d.name / "posterior.nc"),
        )
        np.testing.assert_array_equal(a["g1"], b["g1"])


def test_campaign_compiles_once(module_tmp, quiet_cfg, monkeypatch):
    """Three batches (the last padded) share one traced inference program and one generator."""
    import shearbatch.core.methods.map as map_

    traces = count_calls(monkeypatch, map_, "fit")
    cfg = load_config(quiet_cfg)
    plan = plan_campaign([0.01, 0.02, 0.03, 0.04, 0.05], n_realizations=1)
    report = run_engine(run_spec(cfg), plan, output_dir=module_tmp / "once", batch_size=2)
    assert report.n_ok == 5 and len(report.batch_times) == 3
    assert len(traces) == 1


def test_second_process_hits_the_persistent_cache(tmp_path):
    """... and loads the first one's exported programs instead of tracing them
    (shearbatch/engine/exported.py; the in-process checks are tests/engine/test_exported.py)."""
    cfg = write_config(
        tmp_path / "tiny.yaml",
        {"image.size_x": 16, "image.size_y": 16, "gal.half_light_radius": 0.3},
    )
    env = {**os.environ, "SHEARBATCH_CACHE_DIR": str(tmp_path / "cache")}
    exe = Path(sys.executable).parent / "bias-run"
    logs, stored = [], []
    for i in range(2):
        out = subprocess.run(
            [
                str(exe),
                "--config",
                cfg,
                "--shear-grid",
                "0.01",
                "--x64",
                "--output-dir",
                str(tmp_path / f"o{i}"),
                "--no-progress",
            ],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        assert out.returncode == 0, out.stderr
        logs.append(
            next(ln for ln in out.stderr.splitlines() if "persistent compilation cache:" in ln)
        )
        stored.append(out.stderr)
    for program in ("inference program", "generator"):
        assert f"{program}: traced in" in stored[0] and "exported for later" in stored[0]
        assert f"{program}: loaded the program exported by an earlier process" in stored[1]
        assert f"{program}: traced in" not in stored[1]
    assert " 0 hit(s)" in logs[0]
    assert " 0 miss(es)" in logs[1] and " 0 hit(s)" not in logs[1], logs
    a = read_posterior(tmp_path / "o0" / "g1_+0.0100_g2_+0.0000_s0" / "posterior.nc")
    b = read_posterior(tmp_path / "o1" / "g1_+0.0100_g2_+0.0000_s0" / "posterior.nc")
    np.testing.assert_array_equal(a["g1"], b["g1"])
    assert (
        json.loads((tmp_path / "o1" / "g1_+0.0100_g2_+0.0000_s0" / "convergence.json").read_text())[
            "status"
        ]
        == "ok"
    )


def test_method_flag_selects_vi(module_tmp):
    cfg = write_config(
        module_tmp / "vi.yaml",
        {
            "image.noise.sigma": 1e-3,
            "inference.vi_config": {"num_steps": 300, "learning_rate": 0.003, "num_samples": 200},
        },
    )
    out = module_tmp / "vi"
    bias_run_ok(
        [
            "--config",
            cfg,
            "--method",
            "vi",
            "--shear-grid",
            "0.02",
            "-0.02",
            "--batch-size",
            "2",
            "--output-dir",
            str(out),
        ]
    )
    for d in find_realization_dirs(out):
        conv = read_json(d / "convergence.json")
        assert conv["method"] == "vi" and conv["status"] == "ok" and "elbo" in conv
        with xr.open_dataset(d / "posterior.nc") as root:
            assert root.attrs["inference_method"] == "vi"
        assert read_posterior(d / "posterior.nc")["g1"].shape == (1, 200)
