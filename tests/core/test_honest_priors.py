"""Issue 12: the shear prior does not decide the answer, and MAP is the mode in the
physical parameters."""

import json
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from click.testing import CliRunner

from shearbatch.cli import bias_extract, bias_run, bias_stats
from shearbatch.core.methods.map import MapConfig, laplace
from shearbatch.core.posterior import posterior_of
from tests.conftest import write_config

ROOT = Path(__file__).resolve().parents[2]

SETTINGS = MapConfig(optimizer="newton", num_steps=200, num_samples=100)


def _toy(lo: float, hi: float, y: float, sd: float):
    def model(obs):
        g = numpyro.sample("g", dist.Uniform(lo, hi))
        numpyro.sample("y", dist.Normal(g, sd), obs=obs)

    return posterior_of(model, jax.ShapeDtypeStruct((), jnp.float64), {"g": 0.0})


def test_map_of_a_bounded_prior_is_the_analytic_mode():
    """U(-0.9, 0.9) prior, y ~ N(g, 0.3), y = 0.6: the posterior mode in g is 0.6 (the
    density is the likelihood inside the bounds). The potential with the logit transform's
    Jacobian, which NUTS samples, has its minimum elsewhere: the test can tell them apart."""
    post = _toy(-0.9, 0.9, 0.6, 0.3)
    obs = jnp.asarray(0.6)
    lap = jax.jit(lambda o: laplace(o, post, SETTINGS))(obs)
    mode = float(post.constrain_fn(lap.opt.x)["g"])
    # Newton stops at half-decrement <= 1e-10 (float64): within sqrt(2e-10) posterior sigma
    assert float(lap.decrement) <= 1e-10 and bool(lap.ok)
    assert abs(mode - 0.6) <= 0.3 * np.sqrt(2e-10)
    # the Laplace width mapped to g to first order is the physical width 0.3
    dg_dx = jax.grad(lambda x: post.constrain_fn(x)["g"][()])(lap.opt.x)[0]
    assert abs(float(dg_dx * lap.std[0]) - 0.3) < 1e-6
    # the Jacobian-ful potential's minimum (a grid over the unconstrained line) is far away
    xs = jnp.linspace(-3, 3, 6001)[:, None]
    u = jax.vmap(lambda x: post.potential_fn(x, obs))(xs)
    g_jac = float(post.constrain_fn(xs[int(jnp.argmin(u))])["g"])
    assert g_jac < 0.5, g_jac


PRIORS = {
    "flat": {},
    "normal": {
        "gal.shear": {
            "type": "G1G2",
            "g1": {"type": "Normal", "mean": 0.0, "sigma": 0.05},
            "g2": {"type": "Normal", "mean": 0.0, "sigma": 0.05},
        }
    },
}


@pytest.fixture(scope="module", params=sorted(PRIORS))
def campaign(request, module_tmp):
    """16x16 Level 0 at noise 3e-3 (sigma(g) ~ 0.02), paired +-0.03, 12 seeds, MAP."""
    name = request.param
    cfg = write_config(
        module_tmp / f"{name}.yaml",
        {"image.size_x": 16, "image.size_y": 16, "gal.half_light_radius": 0.3,
         "image.noise.sigma": 3e-3, **PRIORS[name]},
    )  # fmt: skip
    out = module_tmp / name
    args = ["--config", cfg, "--shear-grid", "0.03", "--paired", "--n-realizations", "12",
            "--batch-size", "24", "--x64", "--no-progress", "--output-dir", str(out / "runs")]  # fmt: skip
    res = CliRunner().invoke(bias_run, args)
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(
        bias_extract, ["--input-dir", str(out / "runs"), "--output", str(out / "s.csv")]
    )
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(
        bias_stats, ["--input", str(out / "s.csv"), "--output-dir", str(out / "st"), "--no-plots"]
    )
    assert res.exit_code in (0, 1, 3), res.output
    return name, out, res.output, json.loads((out / "st" / "bias_results.json").read_text())


def test_prior_dominated_campaign_is_flagged_and_the_default_is_not(campaign):
    name, out, text, r = campaign
    conv = json.loads(next((out / "runs").glob("*/convergence.json")).read_text())
    pull = conv["prior"]["g1"]["shrinkage"]
    if name == "flat":
        assert pull == 0.0 and not r["prior"]["dominated"]
        assert "prior-dominated" not in text
        # no prior shrinkage: m1 consistent with zero (noise bias at S/N ~ 60 is << sigma_m)
        assert abs(r["m1"]) < 3 * r["m1_err"], (r["m1"], r["m1_err"])
    else:
        assert pull > 0.05 and r["prior"]["dominated"]
        assert "WARNING prior-dominated" in text
        # the measured m is the predicted pull: m1 = -shrinkage (Gaussian prior x likelihood)
        assert abs(r["m1"] + r["prior"]["shrinkage_g1"]) < 3 * r["m1_err"] + 0.1 * pull


def test_noise_bias_note_only_for_low_snr_joint_modes():
    """bias-stats warns about the joint mode's noise bias for MAP campaigns at survey S/N
    (median S/N below NOISE_BIAS_SNR), and about the measured bias of averaged
    posterior means for NUTS/VI campaigns there; never at high S/N."""
    import pandas as pd

    from shearbatch.analysis.bias import NOISE_BIAS_SNR, noise_bias_note

    low = pd.DataFrame({"point_estimate": ["mode"] * 4, "snr": [14.0, 15.0, 16.0, 200.0]})
    note = noise_bias_note(low)
    assert note is not None and note.median_snr == 15.5
    assert abs(note.expected_order - 15.5**-2) < 1e-12 and "S/N 15.5" in note.message
    assert noise_bias_note(low.assign(snr=2 * NOISE_BIAS_SNR)) is None
    marginal = noise_bias_note(low.assign(point_estimate="mean"))
    assert marginal is not None and marginal.expected_order is None
    assert "NUTS" in marginal.message and "--method map" in marginal.message
    assert noise_bias_note(low.assign(point_estimate="mean", snr=2 * NOISE_BIAS_SNR)) is None
    # no measured number in library code: each note names the page and section holding
    # the published values, and that section exists
    for msg in (note.message, marginal.message):
        refs = re.findall(r"(docs/[\w/]+\.md), '([^']+)'", msg)
        assert refs and not re.search(r"m1? = [-+]?0\.\d", msg), msg
        for page, section in refs:
            headings = re.findall(r"^#+ (.+)$", (ROOT / page).read_text(), re.M)
            assert section in headings, (page, section)
