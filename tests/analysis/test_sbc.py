"""Simulation-based calibration through the real CLIs: shears drawn from the inference prior
give uniform ranks for a correct model and non-uniform ranks for a misspecified one."""

import json

import pytest
from click.testing import CliRunner

from shearbatch.cli import bias_extract, bias_run, bias_stats
from shearbatch.io import find_realization_dirs
from tests.conftest import write_config

# SBC needs a proper prior to draw truths from (the default flat UniformDisk prior is proper
# too, but its shears reach |g| ~ 1); the truths and the model share this one
SBC_PRIOR = {
    "type": "G1G2",
    "g1": {"type": "Normal", "mean": 0.0, "sigma": 0.05},
    "g2": {"type": "Normal", "mean": 0.0, "sigma": 0.05},
}

N = 150


def _sbc(tmp, name, edits):
    cfg = write_config(
        tmp / f"{name}.yaml", {"image.noise.sigma": 1e-4, "gal.shear": SBC_PRIOR, **edits}
    )
    runs = tmp / name
    r = CliRunner().invoke(
        bias_run,
        [
            "--config",
            cfg,
            "--shear-from-prior",
            "--n-realizations",
            str(N),
            "--batch-size",
            "75",
            "--base-seed",
            "100",
            "--x64",
            "--no-progress",
            "--output-dir",
            str(runs),
        ],
    )
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(
        bias_extract,
        [
            "--input-dir",
            str(runs),
            "--output",
            str(tmp / f"{name}.csv"),
            "--no-progress",
            "--workers",
            "1",
        ],
    )
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(
        bias_stats,
        [
            "--input",
            str(tmp / f"{name}.csv"),
            "--output-dir",
            str(tmp / f"{name}_stats"),
            "--no-plots",
        ],
    )
    return json.loads((tmp / f"{name}_stats" / "bias_results.json").read_text())


@pytest.fixture(scope="module")
def calibrated(module_tmp):
    return _sbc(module_tmp, "good", {})


def test_prior_drawn_truths_are_recorded_and_sbc_runs(module_tmp, calibrated):
    truth = json.loads(
        find_realization_dirs(module_tmp / "good")[0].joinpath("truth.json").read_text()
    )
    assert truth["truth_from_prior"] is True
    for comp in ("g1", "g2"):
        assert calibrated["sbc"][comp]["p_value"] > 1e-3, calibrated["sbc"]
        # one seed per realization: 150 independent seeds >= min_seeds, so the gate is tested
        assert calibrated["sbc"][comp]["n_eff"] == N
    crit = {c["name"]: c for c in calibrated["criteria"]}
    for comp in ("g1", "g2"):
        c = crit[f"SBC {comp} uniformity p"]
        assert c["status"] == ("pass" if c["value"] >= c["threshold"] else "fail")
        assert crit[f"coverage {comp} 68%"]["status"] in ("pass", "fail")  # tested, not too few


@pytest.mark.slow
def test_misspecified_model_fails_sbc(module_tmp):
    res = _sbc(module_tmp, "bad", {"psf.sigma": 0.4011, "simulation": {"psf": {"sigma": 0.382}}})
    assert res["sbc"]["g1"]["p_value"] < 1e-3, res["sbc"]
    assert not res["passed"] and res["verdict"] == "FAIL"
    assert (
        next(c for c in res["criteria"] if c["name"] == "SBC g1 uniformity p")["status"] == "fail"
    )
