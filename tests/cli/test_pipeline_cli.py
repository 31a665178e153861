"""End to end through the real CLIs: bias-run -> bias-extract -> bias-stats.

A well-specified Level 0 campaign must pass its m and c criteria with tiny m and c
(its 3 seeds are too few to test coverage at the default ``min_seeds: 20``, so
the verdict is INCONCLUSIVE, exit 3, until ``min_seeds`` is lowered, when it
PASSes); the same campaign analysed with a model PSF 5% wider than the PSF that
made the data (``psf.sigma = 0.4011`` with ``simulation: {psf: {sigma: 0.382}}``)
must fail it with m many of its own errors away from zero.
"""

import json
import math
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from shearbatch.cli import bias_extract, bias_run, bias_stats

GRID = ["-0.05", "-0.02", "0.02", "0.05"]


def run_pipeline(tmp: Path, config: Path, paired: bool = False, extra_stats=()):
    camp, out = tmp / "camp", tmp / "stats"
    args = ["--config", str(config), "--shear-grid", *GRID, "--n-realizations", "3",
            "--batch-size", "16", "--x64", "--no-progress", "--output-dir", str(camp)]  # fmt: skip
    res = CliRunner().invoke(bias_run, args + (["--paired"] if paired else []))
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(
        bias_extract, ["--input-dir", str(camp), "--output", str(tmp / "s.csv")]
    )
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(bias_stats, ["--input", str(tmp / "s.csv"), "--output-dir", str(out),
                                          "--posterior-dir", str(camp), *extra_stats])  # fmt: skip
    return res, json.loads((out / "bias_results.json").read_text())


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("good")
    return (tmp, *run_pipeline(tmp, Path("configs/level0.yaml")))


@pytest.fixture(scope="module")
def misspecified(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("misspec")
    cfg = yaml.safe_load(Path("configs/level0.yaml").read_text())
    cfg["psf"]["sigma"] = 0.4011  # the model's PSF, 5% wider than the generator's
    cfg["simulation"] = {"psf": {"sigma": 0.382}}
    path = tmp / "misspec.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return run_pipeline(tmp, path)


def test_level0_campaign_passes_acceptance(good, tmp_path):
    tmp, res, r = good
    # 3 seeds: m and c pass, coverage is too few to test -> INCONCLUSIVE, exit 3
    assert res.exit_code == 3, res.output
    assert r["verdict"] == "INCONCLUSIVE" and not r["passed"]
    assert r["level"] == "level_0" and r["estimator"] == "regression"
    assert (r["point_estimate"], r["weights"], r["n_seeds"]) == (
        "mode",
        "none",
        3,
    )  # auto: the mode for MAP
    assert r["n_realizations"] == r["n_used"] == 12
    assert abs(r["m1"]) < 1e-3 and abs(r["c1"]) < 1e-4 and abs(r["c2"]) < 1e-4
    assert r["m1_err"] < 1e-3 and r["m2"] is None and "constant" in r["m2_reason"]
    status = {c["name"]: c["status"] for c in r["criteria"]}
    assert status["|m1|"] == status["|c1|"] == status["|c2|"] == "pass"
    assert {v for k, v in status.items() if k.startswith("coverage")} == {"inconclusive"}
    assert "verdict: INCONCLUSIVE (exit 3)" in res.output and "plots:" in res.output
    for line in ("m1", "c1", "m2", "c2"):
        assert f"  {line} " in res.output
    assert "(jackknife over 3 seeds)" in res.output
    plots = {p.name for p in (tmp / "stats" / "plots").iterdir()}
    assert plots == {"residuals.png", "coverage.png", "ranks.png", "worst_diagnostics.png"}
    assert r["sbc"]["skipped"]  # a shear grid is not drawn from the prior
    # with coverage decidable at 3 seeds, every criterion passes: PASS, exit 0
    acc = tmp_path / "acc.yaml"
    acc.write_text("level_0: {min_seeds: 3}\n")
    res = CliRunner().invoke(bias_stats, ["--input", str(tmp / "s.csv"), "--output-dir",
                                          str(tmp_path / "o"), "--acceptance-config", str(acc),
                                          "--no-plots"])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "verdict: PASS (exit 0)" in res.output
    assert json.loads((tmp_path / "o" / "bias_results.json").read_text())["passed"]


def test_results_json_is_strict_and_complete(good):
    tmp, _, r = good
    text = (tmp / "stats" / "bias_results.json").read_text()
    json.loads(text, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))
    for k in ("level", "estimator", "point_estimate", "weights", "n_realizations", "n_ok",
              "n_failed", "n_incomplete", "n_seeds", "m1", "m1_err", "c1", "c1_err", "m2",
              "m2_err", "c2", "c2_err", "coverage", "sbc", "criteria", "z", "verdict", "passed",
              "requirement", "planning", "scope"):  # fmt: skip
        assert k in r
    cov = r["coverage"]["g1"]["0.68"]
    assert set(cov) >= {"observed", "expected", "band", "se", "n_eff", "status", "passed"}
    keys = {"name", "value", "err", "threshold", "z", "status", "n_needed", "passed",
            "error_method", "reason", "quantile", "dof", "detected", "n_pass_if_zero"}  # fmt: skip
    assert all(set(c) == keys for c in r["criteria"])
    assert all(c["passed"] is (c["status"] == "pass") for c in r["criteria"])


def test_misspecified_psf_fails_acceptance(misspecified):
    res, r = misspecified
    assert res.exit_code == 1, res.output
    assert not r["passed"] and r["verdict"] == "FAIL" and "verdict: FAIL (exit 1)" in res.output
    assert math.isfinite(r["m1"]) and abs(r["m1"]) > 10 * r["m1_err"]
    assert any(c["name"] == "|m1|" and c["status"] == "fail" for c in r["criteria"])
    assert "[FAIL] |m1|" in res.output


def test_paired_campaign_uses_the_paired_estimator(tmp_path):
    res, r = run_pipeline(tmp_path, Path("configs/level0.yaml"), paired=True)
    assert res.exit_code == 3, res.output  # 3 seeds: coverage too few to test
    assert r["estimator"] == "paired" and r["fits"]["g1"]["error_method"] == "bootstrap"
    assert abs(r["m1"]) < 1e-3 and abs(r["c1"]) < 1e-4
    status = {c["name"]: c["status"] for c in r["criteria"]}
    assert status["|m1|"] == status["|c1|"] == "pass"
    assert "(bootstrap over 3 seeds, 1000 resamples)" in res.output


def test_bad_input_exits_2(good, tmp_path):
    tmp = good[0]
    cases = [
        (["--input", str(tmp_path / "missing.csv")], "--input"),
        (["--input", str(tmp / "s.csv"), "--level", "level_7"], "--level"),
        (["--input", str(tmp / "s.csv"), "--estimator", "paired"], "no complete"),
    ]
    bad_cols = tmp_path / "bad.csv"
    bad_cols.write_text("run_id,g1_true\nx,0.1\n")
    cases.append((["--input", str(bad_cols)], "missing columns"))
    acc = tmp_path / "acc.yaml"
    acc.write_text("level_0: {max_abs_mm: 1}\n")
    cases.append((["--input", str(tmp / "s.csv"), "--acceptance-config", str(acc)], "max_abs_mm"))
    acc2 = tmp_path / "acc2.yaml"
    acc2.write_text("level_0: {min_seeds: 0}\n")
    cases.append((["--input", str(tmp / "s.csv"), "--acceptance-config", str(acc2)], "min_seeds"))
    cases.append((["--input", str(tmp / "s.csv"), "--point", "mad"], "--point"))
    cases.append((["--input", str(tmp / "s.csv"), "--weights", "ivar"], "--weights"))
    no_mode = tmp_path / "no_mode.csv"
    no_mode.write_text((tmp / "s.csv").read_text().replace("g1_mode", "g1_mode_old"))
    cases.append((["--input", str(no_mode), "--point", "mode"], "missing columns: g1_mode"))
    for args, msg in cases:
        res = CliRunner().invoke(bias_stats, [*args, "--output-dir", str(tmp_path / "o")])
        assert res.exit_code == 2, (args, res.output)
        assert msg in res.output and len(res.output.strip().splitlines()) == 1


def test_acceptance_config_overrides_the_level(good, tmp_path):
    tmp = good[0]
    acc = tmp_path / "acc.yaml"
    # a ceiling of 1e-12 judged at z = 1e-9 sigma: any nonzero m1 fails it
    acc.write_text("acceptance:\n  level_0: {max_abs_m: 1.0e-12, z: 1.0e-9}\n")
    res = CliRunner().invoke(bias_stats, ["--input", str(tmp / "s.csv"), "--output-dir",
                                          str(tmp_path / "o"), "--acceptance-config", str(acc),
                                          "--no-plots"])  # fmt: skip
    assert res.exit_code == 1 and "[FAIL] |m1|" in res.output
    r = json.loads((tmp_path / "o" / "bias_results.json").read_text())
    assert r["acceptance"]["max_abs_m"] == 1e-12 and r["z"] == 1e-9


def test_one_command_from_a_campaign_directory_to_a_report(good, tmp_path):
    """bias-stats --input <campaign dir>: extracts summary.csv there (none yet), judges
    against the config's own requirement (configs/level0.yaml names level0) and writes
    bias_results.json and report.html into the directory; a second call reuses the
    summary; a new realization file makes it stale again."""
    import os
    import shutil

    tmp = good[0]
    camp = tmp_path / "camp"
    shutil.copytree(tmp / "camp", camp)
    res = CliRunner().invoke(bias_stats, ["--input", str(camp), "--no-plots"])
    assert res.exit_code == 3, res.output
    assert f"extracted {camp / 'summary.csv'}" in res.output
    assert "requirement level0 (|m| < 0.001, |c| < 0.0001): campaign.requirement in" in res.output
    r = json.loads((camp / "bias_results.json").read_text())
    assert r["n_used"] == 12 and r["requirement"]["name"] == "level0"
    html = (camp / "report.html").read_text()
    assert "Config as run" in html and "requirement: level0" in html and "Planning" in html
    res = CliRunner().invoke(bias_stats, ["--input", str(camp), "--no-plots"])
    assert res.exit_code == 3 and "extracted" not in res.output, res.output
    one = next(p for p in camp.iterdir() if (p / "convergence.json").is_file())
    later = (camp / "summary.csv").stat().st_mtime + 5
    os.utime(one / "convergence.json", (later, later))
    res = CliRunner().invoke(bias_stats, ["--input", str(camp), "--no-plots"])
    assert f"extracted {camp / 'summary.csv'}" in res.output, res.output
