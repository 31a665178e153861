"""The three-valued acceptance rule, the realizations a decision needs, the Student-t bound for
an error estimated from few seeds, and the seed example's verdict through the real CLIs
(6 realizations, 2 seeds: too few to test coverage, too few to decide m or c at survey S/N)."""

import itertools
import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

from shearbatch.analysis.verdict import EXIT_CODES, decide, n_needed, overall, quantile
from shearbatch.cli import bias_extract, bias_run, bias_stats
from shearbatch.io import find_realization_dirs
from tests.conftest import SEED_IDS

T, Z, N = 1e-3, 2.0, 100


@pytest.mark.parametrize(
    "x, err, status",
    [
        (2e-4, 4e-4, "pass"),  # |x| + 2 sigma = 1.0e-3 <= T: the boundary passes
        (-2e-4, 3e-4, "pass"),  # the sign does not matter
        (2e-4, 4.01e-4, "inconclusive"),
        (8e-4, 2e-4, "inconclusive"),  # below T, but T is within 2 sigma
        (1.1e-3, 2e-4, "inconclusive"),  # above T, but T is within 2 sigma
        (1.5e-3, 2.4e-4, "fail"),  # |x| - 2 sigma = 1.02e-3 > T
        (-3e-3, 1e-4, "fail"),
        (1e-3, 0.0, "pass"),  # exactly on the threshold with no error
    ],
)
def test_three_valued_rule(x, err, status):
    got, need, why = decide(x, err, T, Z, N)
    assert got == status
    assert (need is not None) is (status == "inconclusive")
    assert bool(why) is (status == "inconclusive")


def test_no_error_is_inconclusive_never_pass():
    for err in (None, math.nan, math.inf):
        status, need, why = decide(0.0, err, T, Z, N)
        assert (status, need) == ("inconclusive", None) and "no error" in why


def test_n_needed_scales_as_one_over_sqrt_n():
    """N_needed = N (z sigma / gap)^2; at N_needed the rescaled sigma just decides. An
    estimate within z sigma of zero is not extrapolated: the realizations to PASS if the
    true bias were 0 (gap = T); a detected one below T: to PASS if it stays there."""
    x, err = 6e-4, 4e-4  # 0.6e-3 + 0.8e-3 > T: inconclusive; |x| < 2 sigma: not detected
    status, need, why = decide(x, err, T, Z, N)
    assert status == "inconclusive" and "to PASS if the true bias is 0" in why
    assert need == pytest.approx(N * (Z * err / T) ** 2) and need == 64
    sigma_then = err * math.sqrt(N / need)
    assert decide(0.0, sigma_then, T, Z, need)[0] == "pass"
    assert decide(0.0, sigma_then * 1.01, T, Z, need)[0] == "inconclusive"
    x, err = 6e-4, 2.5e-4  # detected (|x| > 2 sigma), |x| + 2 sigma > T
    status, need, why = decide(x, err, T, Z, N)
    assert status == "inconclusive" and "to PASS if it stays at the estimate" in why
    assert need == pytest.approx(N * (Z * err / (T - x)) ** 2, abs=1) and need == 157
    assert decide(x, err * math.sqrt(N / need), T, Z, need)[0] == "pass"
    # above the threshold and detected: the realizations that would confirm the FAIL
    x, err = 1.2e-3, 4e-4
    status, need, why = decide(x, err, T, Z, N)
    assert status == "inconclusive" and "confirm a FAIL" in why
    assert need == pytest.approx(N * (Z * err / (x - T)) ** 2) and need == 1600
    assert decide(x, err * math.sqrt(N / need) * 0.999, T, Z, need)[0] == "fail"
    # on the threshold no N decides
    assert n_needed(T, err, T, Z, N) is None
    assert decide(T, err, T, Z, N) == ("inconclusive", None, decide(T, err, T, Z, N)[2])


def test_quantile_is_student_t_over_the_seeds():
    """q = t_{G-1}(Phi(z)): 1 dof (2 seeds) is Cauchy, tan(pi (Phi(z) - 1/2)); -> z for many."""
    p = 0.5 * (1 + math.erf(Z / math.sqrt(2)))
    assert quantile(Z, 2) == pytest.approx(math.tan(math.pi * (p - 0.5)), rel=1e-9)
    assert quantile(Z, 2) == pytest.approx(13.97, abs=0.01)
    qs = [quantile(Z, g) for g in (2, 3, 5, 10, 40, 10**6)]
    assert all(a > b for a, b in itertools.pairwise(qs))
    assert qs[-1] == pytest.approx(Z, abs=1e-5) and quantile(Z, None) == Z
    assert quantile(Z, 1) == math.inf


def test_a_two_seed_error_bar_cannot_fail_what_z_would():
    """0.116 +- 0.032 over 2 seeds (the S/N 30 example's c1): FAIL at z = 2, but the error has
    1 dof; with 40 seeds the same numbers FAIL."""
    x, err = 0.116, 0.032
    assert decide(x, err, 1e-4, Z, 6)[0] == "fail"  # no seed count: the normal bound
    status, need, why = decide(x, err, 1e-4, Z, 6, n_seeds=2)
    assert status == "inconclusive" and "Student-t, 1 dof" in why and need > 6
    assert decide(x, err, 1e-4, Z, 120, n_seeds=40)[0] == "fail"
    # a pass too needs the t bound: |x| + 2 sigma <= T but not |x| + 4.5 sigma
    assert decide(2e-4, 4e-4, T, Z, N)[0] == "pass"
    assert decide(2e-4, 4e-4, T, Z, 3, n_seeds=3)[0] == "inconclusive"


def test_n_needed_follows_the_seeds():
    """At N_needed (seeds scaled with the realizations) the t bound just decides, one fewer not."""
    x, err, n_used, seeds = 6e-4, 4e-4, 6, 2
    need = n_needed(x, err, T, Z, n_used, seeds)
    assert need > n_needed(x, err, T, Z, n_used)  # more than the normal-z answer
    per_seed = n_used / seeds

    def status(n: int) -> str:
        return decide(x, err * math.sqrt(n_used / n), T, Z, n, int(n / per_seed))[0]

    assert status(need) == "pass" and status(need - 1) == "inconclusive"


@pytest.mark.parametrize(
    "statuses, verdict",
    [
        (["pass", "pass"], "PASS"),
        (["pass", "inconclusive"], "INCONCLUSIVE"),
        (["inconclusive", "fail", "pass"], "FAIL"),
        (["fail"], "FAIL"),
    ],
)
def test_overall_verdict(statuses, verdict):
    assert overall(statuses) == verdict
    assert EXIT_CODES[verdict] == {"PASS": 0, "FAIL": 1, "INCONCLUSIVE": 3}[verdict]


def test_overall_rejects_unknown_status():
    with pytest.raises(ValueError, match="unknown status"):
        overall(["pass", "PASSED"])


@pytest.fixture(scope="module")
def seed_example(module_tmp):
    camp, csv = module_tmp / "camp", module_tmp / "summary.csv"
    res = CliRunner().invoke(bias_run, [
        "--config", "configs/level0.yaml", "--batch-size", "4", "--shear-grid", "0.01", "0.02",
        "0.05", "--n-realizations", "2", "--base-seed", "42", "--x64", "--no-progress",
        "--output-dir", str(camp),
    ])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in find_realization_dirs(camp)) == sorted(SEED_IDS)
    res = CliRunner().invoke(bias_extract, ["--input-dir", str(camp), "--output", str(csv)])
    assert res.exit_code == 0, res.output
    return module_tmp, csv


def test_seed_example_is_inconclusive_with_the_realizations_needed(seed_example):
    tmp, csv = seed_example
    res = CliRunner().invoke(bias_stats, ["--input", str(csv), "--output-dir", str(tmp / "st")])
    assert res.exit_code == 3, res.output
    r = json.loads((tmp / "st" / "bias_results.json").read_text())
    assert r["verdict"] == "INCONCLUSIVE" and r["passed"] is False
    assert (r["n_used"], r["n_seeds"], r["point_estimate"], r["weights"]) == (
        6,
        2,
        "mode",
        "none",
    )  # auto: mode for MAP
    crit = {c["name"]: c for c in r["criteria"]}
    assert set(crit) >= {"|m1|", "|c1|", "|c2|", "fraction converged"} and "|m2|" not in crit
    for c in r["criteria"]:
        assert c["status"] in ("pass", "fail", "inconclusive")
        assert c["passed"] is (c["status"] == "pass")
    # coverage cannot be tested with 2 seeds: inconclusive, 20 seeds x 3 grid points needed
    cov = [c for c in r["criteria"] if c["name"].startswith("coverage")]
    assert len(cov) == 4
    for c in cov:
        assert c["status"] == "inconclusive" and "too few to test" in c["reason"]
        assert c["n_needed"] == 60
        assert f"[INCONCLUSIVE] {c['name']}" in res.output
    assert res.output.count("needs ~60 realizations") == 4
    # every inconclusive m or c says how many realizations would decide it
    for name in ("|m1|", "|c1|", "|c2|"):
        c = crit[name]
        assert (
            c["err"] is not None and c["z"] == 2.0 and c["error_method"] == "jackknife over 2 seeds"
        )
        assert f"[{c['status'].upper()}] {name}" in res.output
        if c["status"] == "inconclusive":
            assert c["n_needed"] > 6 and f"~{c['n_needed']} realizations" in res.output
    assert "m1 = " in res.output and "(jackknife over 2 seeds)" in res.output
    assert "m2 = undefined" in res.output and "not a criterion" in res.output
    assert "verdict: INCONCLUSIVE (exit 3)" in res.output
    # the mode (MAP) is read from convergence.json and can be chosen
    res = CliRunner().invoke(bias_stats, ["--input", str(csv), "--output-dir", str(tmp / "mode"),
                                          "--point", "mode", "--no-plots"])  # fmt: skip
    assert res.exit_code == 3, res.output
    rm = json.loads((tmp / "mode" / "bias_results.json").read_text())
    assert rm["point_estimate"] == "mode"
    # MAP's antithetic Laplace draws have the mode as their mean
    np.testing.assert_allclose(rm["m1"], r["m1"], atol=1e-3 * r["m1_err"])


def test_seed_example_passes_when_coverage_is_not_gated(seed_example, tmp_path):
    """With min_seeds lowered to the campaign's 2 seeds and z to 1 (q = 1.84 for 1 dof) every
    criterion is decided: PASS, exit 0. At z = 2 (q = 14.0) c2 stays inconclusive."""
    _, csv = seed_example
    acc = tmp_path / "acc.yaml"
    acc.write_text("level_0: {min_seeds: 2, z: 1}\n")
    res = CliRunner().invoke(bias_stats, ["--input", str(csv), "--output-dir", str(tmp_path / "o"),
                                          "--acceptance-config", str(acc), "--no-plots"])  # fmt: skip
    r = json.loads((tmp_path / "o" / "bias_results.json").read_text())
    assert res.exit_code == 0, res.output
    assert r["verdict"] == "PASS" and r["passed"] and "verdict: PASS (exit 0)" in res.output


def test_stats_help_documents_exit_codes():
    res = CliRunner().invoke(bias_stats, ["--help"])
    assert res.exit_code == 0
    text = " ".join(res.output.split())
    assert "0 PASS, 1 FAIL, 3 INCONCLUSIVE, 2 bad input" in text
    assert "--point" in text and "--weights" in text and "biased at low S/N" in text


def test_two_seeds_at_survey_snr_are_inconclusive_never_fail(tmp_path):
    """The survey S/N 30 example (configs/survey_snr30.yaml, grid 0.01 0.02 0.05, 2 seeds,
    unpaired): c1 = -0.116 +- 0.032 over 2 seeds was a FAIL (exit 1) at z = 2; the error has
    one degree of freedom, so the verdict is INCONCLUSIVE (exit 3)."""
    camp, csv = tmp_path / "camp", tmp_path / "summary.csv"
    res = CliRunner().invoke(bias_run, [
        "--config", "configs/survey_snr30.yaml", "--shear-grid", "0.01", "0.02", "0.05",
        "--n-realizations", "2", "--base-seed", "0", "--no-paired", "--batch-size", "6",
        "--x64", "--no-progress", "--output-dir", str(camp),
    ])  # fmt: skip
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(bias_extract, ["--input-dir", str(camp), "--output", str(csv)])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(bias_stats, ["--input", str(csv), "--output-dir",
                                          str(tmp_path / "st"), "--no-plots"])  # fmt: skip
    assert res.exit_code == 3, res.output
    r = json.loads((tmp_path / "st" / "bias_results.json").read_text())
    assert r["verdict"] == "INCONCLUSIVE" and r["n_seeds"] == 2
    for c in r["criteria"]:
        if c["name"] in ("|m1|", "|c1|", "|c2|"):
            assert c["status"] == "inconclusive" and c["dof"] == 1, c
            assert c["quantile"] == pytest.approx(quantile(2.0, 2))
            # the normal z bound would have decided some of them (c1 fails at z = 2)
        assert c["status"] != "fail", c
    c1 = next(c for c in r["criteria"] if c["name"] == "|c1|")
    assert c1["value"] - 2.0 * c1["err"] > c1["threshold"]  # a FAIL at z = 2 before
    assert "verdict: INCONCLUSIVE (exit 3)" in res.output and "q = 14" in res.output


def test_forty_seeds_with_a_real_bias_still_fail(tmp_path):
    """A synthetic summary.csv of 40 seeds x 4 grid points with m1 = 0.01 planted (sigma_m
    ~1.6e-3): the Student-t bound (q = 2.07 for 39 dof) still FAILs it, exit 1."""
    from tests.analysis.test_bias_fits import M_TRUE, grid_table

    csv = tmp_path / "summary.csv"
    grid_table(np.random.default_rng(5), n_seeds=40).to_csv(csv, index=False)
    res = CliRunner().invoke(bias_stats, ["--input", str(csv), "--output-dir",
                                          str(tmp_path / "st"), "--no-plots"])  # fmt: skip
    assert res.exit_code == 1, res.output
    r = json.loads((tmp_path / "st" / "bias_results.json").read_text())
    m1 = next(c for c in r["criteria"] if c["name"] == "|m1|")
    assert m1["status"] == "fail" and m1["dof"] == 39 and r["verdict"] == "FAIL"
    assert abs(r["m1"] - M_TRUE) < 3 * r["m1_err"]
    assert "[FAIL] |m1|" in res.output and "verdict: FAIL (exit 1)" in res.output
