"""Injected numerical failures: the batch completes, each broken realization is failed with
named flags, its companions are bit-identical to a clean run, and bias-stats excludes the
failures, counts them by flag and fails the verdict when too many failed.

One 12-lane Level 0 batch (16x16 stamps, MAP): g1 = 0.02, 0.05 and 0.99 (|g| near 1)
with seeds 0-3. The 0.02 lanes are broken through the engine's ``simulate_fn``: NaN data,
no galaxy (zero flux: noise only), the galaxy moved to the stamp's corner, absurd noise
(1e3 times the model's sigma). A stamp without noise is the fifth case. A campaign with
pixel noise 1e6 (posteriors as wide as the prior) is run through the CLI.
"""

import json

import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from shearbatch.campaign import plan_campaign
from shearbatch.cli import bias_extract, bias_run, bias_stats
from shearbatch.core.generators import simulate
from shearbatch.engine import loop as engine
from shearbatch.io import read_json, read_posterior
from shearbatch.schema import load_config
from shearbatch.spec import run_spec
from tests.conftest import run_engine, write_config

SMALL = {"image.size_x": 16, "image.size_y": 16}
BROKEN = {
    "g1_+0.0200_g2_+0.0000_s0": ("nan", {"NONFINITE_DATA"}),  # (any of these flags)
    "g1_+0.0200_g2_+0.0000_s1": ("no galaxy", {"DATA_MISFIT", "HESSIAN_NOT_PD"}),
    "g1_+0.0200_g2_+0.0000_s2": ("off stamp", {"DATA_MISFIT"}),
    "g1_+0.0200_g2_+0.0000_s3": ("absurd noise", {"DATA_MISFIT"}),
    "g1_+0.0500_g2_+0.0000_s0": ("no noise", {"DATA_MISFIT"}),
}


def injecting(spec, realizations):
    sim = engine.generate(spec, realizations)
    images = np.array(sim.images)
    sigma = spec.truth.noise_sigma
    rng = np.random.default_rng(7)
    for i, r in enumerate(realizations):
        kind = BROKEN.get(r.run_id, (None,))[0]
        if kind == "nan":
            images[i, 0, 3, 5] = np.nan
        elif kind == "no galaxy":
            images[i] = sigma * rng.standard_normal(images[i].shape)
        elif kind == "off stamp":
            images[i] = np.roll(images[i], (8, 8), axis=(-2, -1))
        elif kind == "absurd noise":
            images[i] += 1e3 * sigma * rng.standard_normal(images[i].shape)
        elif kind == "no noise":
            clean = simulate(spec.truth._replace(noise_sigma=0.0), [r.seed], [(r.g1, r.g2)])
            images[i] = np.asarray(clean.images[0])
    return sim._replace(images=jnp.asarray(images))


@pytest.fixture(scope="module")
def runs(module_tmp):
    spec = run_spec(load_config(write_config(module_tmp / "c.yaml", SMALL)))
    plan = plan_campaign([0.02, 0.05, 0.99], n_realizations=4)
    out = {}
    for name, sim in (("clean", None), ("broken", injecting)):
        root = module_tmp / name
        report = run_engine(spec, plan, output_dir=root, batch_size=12, simulate_fn=sim)
        out[name] = (root, report)
    return spec, plan, out


def test_broken_lanes_fail_with_named_flags(runs):
    out = runs[2]
    root, report = out["broken"]
    assert len(report.failed) == len(BROKEN) and set(report.failed) == set(BROKEN)
    for rid, (kind, expect) in BROKEN.items():
        conv = read_json(root / rid / "convergence.json")
        assert conv["status"] == "failed", (kind, conv["flag_names"])
        assert expect & set(conv["flag_names"]), (kind, conv["flag_names"], conv["reason"])
    misfit = read_json(root / "g1_+0.0200_g2_+0.0000_s2" / "convergence.json")
    assert "chi2/N" in misfit["reason"] and misfit["chi2_per_pixel"] > 4


def test_companions_are_bit_identical_to_a_clean_run(runs):
    _, plan, out = runs
    clean, broken = out["clean"][0], out["broken"][0]
    assert out["clean"][1].n_failed == 0  # a clean run trips no check (chi2/N ~ 1)
    for r in plan:
        if r.run_id in BROKEN:
            continue
        a = read_posterior(clean / r.run_id / "posterior.nc")
        b = read_posterior(broken / r.run_id / "posterior.nc")
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])
        conv = read_json(clean / r.run_id / "convergence.json")
        assert conv["status"] == "ok" and 0.25 < conv["chi2_per_pixel"] < 4


def test_shear_near_one_is_recovered_or_failed(runs):
    """|g| = 0.99: never 'ok' with an unconverged optimizer or a wrong answer."""
    _, plan, out = runs
    root = out["clean"][0]
    for r in plan:
        if r.g1 != 0.99:
            continue
        conv = read_json(root / r.run_id / "convergence.json")
        if conv["status"] == "ok":
            assert conv["optimizer"]["converged"] and "OPT_NOT_CONVERGED" not in conv["flag_names"]
            sd = conv["laplace"]["posterior_std"]["g1"]
            assert abs(conv["mode"]["g1"] - 0.99) < 5 * sd
        else:
            assert conv["flag_names"], conv


def test_bias_stats_excludes_and_counts_by_flag(runs, module_tmp):
    root = out_root = runs[2]["broken"][0]
    csv = module_tmp / "broken.csv"
    res = CliRunner().invoke(bias_extract, ["--input-dir", str(root), "--output", str(csv)])
    assert res.exit_code == 0, res.output
    df = pd.read_csv(csv)
    assert (df["status"] == "failed").sum() == len(BROKEN)
    stats = module_tmp / "st"
    res = CliRunner().invoke(bias_stats, ["--input", str(csv), "--output-dir", str(stats),
                                          "--no-plots"])  # fmt: skip
    r = json.loads((stats / "bias_results.json").read_text())
    assert r["n_used"] == 12 - len(BROKEN) and r["n_failed"] == len(BROKEN)
    assert r["excluded"]["flag DATA_MISFIT"] >= 3 and r["excluded"]["flag NONFINITE_DATA"] == 1
    assert f"flag DATA_MISFIT: {r['excluded']['flag DATA_MISFIT']}" in res.output
    frac = next(c for c in r["criteria"] if c["name"] == "fraction converged")
    assert frac["status"] == "fail" and r["verdict"] == "FAIL" and res.exit_code == 1
    # the tolerated fraction is configurable
    acc = module_tmp / "acc.yaml"
    acc.write_text("level_0: {min_frac_converged: 0.5}\n")
    res = CliRunner().invoke(bias_stats, ["--input", str(csv), "--output-dir", str(stats),
                                          "--no-plots", "--acceptance-config", str(acc)])  # fmt: skip
    r = json.loads((stats / "bias_results.json").read_text())
    frac = next(c for c in r["criteria"] if c["name"] == "fraction converged")
    assert frac["status"] == "pass", r["criteria"]
    assert out_root.is_dir()


def test_absurd_noise_campaign_is_failed_not_prior(module_tmp):
    """Pixel noise 1e6: no posterior may pass for a measurement equal to the prior."""
    cfg = write_config(module_tmp / "noisy.yaml", {**SMALL, "image.noise.sigma": 1.0e6})
    out = module_tmp / "noisy"
    res = CliRunner().invoke(bias_run, ["--config", cfg, "--shear-grid", "0.02", "--n-realizations",
                                        "2", "--batch-size", "2", "--no-progress",
                                        "--output-dir", str(out)])  # fmt: skip
    assert res.exit_code == 1, res.output
    assert "wrote 0 ok, 2 failed" in res.output
    for d in sorted(out.glob("g1_*")):
        conv = read_json(d / "convergence.json")
        assert conv["status"] == "failed"
        assert {"UNINFORMATIVE", "HESSIAN_NOT_PD"} & set(conv["flag_names"]), conv["flag_names"]
