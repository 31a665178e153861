"""Planning that answers "how many realizations": the realizations to PASS if the true bias
were 0 from the measured scatter, a FAIL estimate only for a detected bias, a target
sigma_m; an unfinished campaign is INCONCLUSIVE, and rows outside the plan are left out.

The synthetic tables have a scatter known in closed form: every seed is observed at
g_true = -0.02 and +0.02 (no pair columns: the grid regression, jackknife over seeds),
its response is 1 + m + s (-1)^k (seed k), so the slope of each seed is exact and the
delete-one-seed jackknife of m over G seeds is exactly s / sqrt(G - 1).
"""

import json
import math

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from shearbatch.analysis import bias
from shearbatch.analysis.verdict import n_needed, plan, quantile
from shearbatch.cli import bias_stats

G_ABS = 0.02


def known_table(n_seeds: int, m: float, s: float, c_scatter: float = 1e-3) -> pd.DataFrame:
    """m1 = ``m`` exactly (even G), jackknife sigma_m1 = s / sqrt(G - 1) exactly."""
    rows = []
    for k in range(n_seeds):
        eps, c = s * (-1) ** k, c_scatter * (-1) ** k
        for gt in (-G_ABS, G_ABS):
            rows.append({"run_id": f"r{k}_{gt:+.2f}", "seed": k, "g1_true": gt, "g2_true": 0.0,
                         "g1_mean": (1 + m + eps) * gt + c, "g2_mean": c, "g1_std": 0.01,
                         "g2_std": 0.01, "status": "ok", "passed_convergence": True})  # fmt: skip
    return pd.DataFrame(rows)


def test_sigma_m_of_the_known_table_is_exact():
    res, _, _ = bias.measure_bias(known_table(40, 0.0, 0.05), requirement="survey_snr30")
    assert res.m1 == pytest.approx(0.0, abs=1e-12)
    assert res.m1_err == pytest.approx(0.05 / math.sqrt(39), rel=1e-9)
    assert res.requirement.name == "survey_snr30" and res.n_used == 80


def test_pass_if_zero_and_target_sigma_m_are_checkable_by_hand():
    """sigma_m = 0.05 / sqrt(39) = 8.0064e-3 at 80 realizations (40 seeds), T = 5e-3:
    pass if 0 needs 80 (q sigma / T)^2 with q -> 2 at many seeds: >= 821 (the z = 2 answer
    80 * 10.256 = 820.5), <= 80 (q_40 sigma / T)^2; sigma_m = 1e-3 needs 80 * 8.0064^2 =
    5128.2 -> 5129."""
    sigma, thr = 0.05 / math.sqrt(39), 5e-3
    res, _, _ = bias.measure_bias(known_table(40, 0.0, 0.05), requirement="survey_snr30",
                                  target_sigma_m=1e-3)  # fmt: skip
    p = res.planning
    m1 = next(c for c in p.criteria if c.name == "|m1|")
    assert m1.n_pass_if_zero == n_needed(0.0, sigma, thr, 2.0, 80, 40)
    assert 821 <= m1.n_pass_if_zero <= math.ceil(80 * (quantile(2.0, 40) * sigma / thr) ** 2)
    assert not m1.detected and m1.n_confirm_fail is None
    assert p.n_for_target == {"m1": 5129, "m2": None}
    assert p.design == "unpaired, no rings" and p.realizations_per_seed == 2
    crit = res.criterion("|m1|")
    assert crit.n_pass_if_zero == m1.n_pass_if_zero and crit.detected is False
    assert any("sigma_m1 = 0.001: ~5129 realizations (~2565 seeds)" in ln for ln in p.lines)


def test_issue_example_half_a_sigma_from_zero_gives_no_fail_estimate(tmp_path):
    """m1 = 0.00519 +- 0.010 over 100 seeds (200 realizations) against |m| < 0.005: 0.5 sigma
    from zero, above the threshold. It used to print "~2252539 realizations to confirm a
    FAIL"; now the realizations to PASS if m1 were 0: 200 (q 0.01 / 0.005)^2, 3200 at q = 2."""
    s = 0.010 * math.sqrt(99)  # jackknife sigma_m = s / sqrt(99) = 0.010
    df = known_table(100, 0.00519, s)
    csv = tmp_path / "summary.csv"
    df.to_csv(csv, index=False)
    res = CliRunner().invoke(bias_stats, ["--input", str(csv), "--output-dir", str(tmp_path / "o"),
                                          "--requirement", "survey_snr30", "--no-plots"])  # fmt: skip
    assert res.exit_code == 3, res.output
    assert "confirm a FAIL" not in res.output
    r = json.loads((tmp_path / "o" / "bias_results.json").read_text())
    m1 = next(c for c in r["criteria"] if c["name"] == "|m1|")
    assert m1["value"] == pytest.approx(0.00519) and m1["err"] == pytest.approx(0.010)
    assert m1["status"] == "inconclusive" and m1["detected"] is False
    need = m1["n_pass_if_zero"]
    assert 3200 <= need <= math.ceil(200 * (quantile(2.0, 100) * 0.010 / 0.005) ** 2)
    assert m1["n_needed"] == need and "to PASS if the true bias is 0" in m1["reason"]
    assert f"~{need} realizations to PASS < 0.005 if the true value is 0" in res.output
    # the same estimate, detected (sigma 10x smaller, above the threshold): a FAIL estimate
    p = plan(0.0069, 0.001, 0.005, 2.0, 200, 100)
    assert p.detected and p.n_confirm_fail == n_needed(0.0069, 0.001, 0.005, 2.0, 200, 100)


def test_unfinished_campaign_is_inconclusive_never_a_convergence_fail(tmp_path):
    """Half the planned realizations not started: fraction converged is over the complete
    ones (it used to FAIL at 0.5), the verdict INCONCLUSIVE with "unfinished"."""
    df = known_table(40, 0.0, 1e-4, c_scatter=1e-6)
    df = pd.concat([df, pd.DataFrame({"run_id": [f"n{i}" for i in range(80)],
                                      "status": "incomplete",
                                      "reason": "not started (planned in campaign.json)"})])  # fmt: skip
    csv = tmp_path / "summary.csv"
    df.to_csv(csv, index=False)
    res = CliRunner().invoke(bias_stats, ["--input", str(csv), "--output-dir", str(tmp_path / "o"),
                                          "--requirement", "survey_snr30", "--no-plots"])  # fmt: skip
    assert res.exit_code == 3, res.output
    r = json.loads((tmp_path / "o" / "bias_results.json").read_text())
    frac = next(c for c in r["criteria"] if c["name"] == "fraction converged")
    assert frac["status"] == "pass" and frac["value"] == 1.0
    assert r["scope"]["unfinished"] and r["verdict"] == "INCONCLUSIVE"
    assert r["scope"]["message"] == "unfinished: 80 of 160 planned realizations complete"
    assert "verdict: INCONCLUSIVE (exit 3) unfinished: 80 of 160 planned" in res.output
    assert "[FAIL]" not in res.output


def test_rows_outside_the_plan_are_left_out_unless_asked(tmp_path):
    """10 realizations of another grid (in_plan false, with a planted bias) left out and
    counted; --include-unplanned uses them."""
    df = known_table(40, 0.0, 0.05)
    df["in_plan"] = True
    extra = known_table(10, 0.3, 0.05)
    extra["run_id"] = "x" + extra["run_id"]
    extra["seed"] += 1000
    extra["in_plan"] = False
    csv = tmp_path / "summary.csv"
    pd.concat([df, extra]).to_csv(csv, index=False)
    res = CliRunner().invoke(bias_stats, ["--input", str(csv), "--output-dir", str(tmp_path / "o"),
                                          "--no-plots"])  # fmt: skip
    r = json.loads((tmp_path / "o" / "bias_results.json").read_text())
    assert r["n_used"] == 80 and r["m1"] == pytest.approx(0.0, abs=1e-12)
    assert r["scope"]["unplanned_dropped"] == 20
    assert "left out 20 realization(s) not in the campaign's plan" in res.output
    res = CliRunner().invoke(bias_stats, ["--input", str(csv), "--output-dir", str(tmp_path / "a"),
                                          "--no-plots", "--include-unplanned"])  # fmt: skip
    r = json.loads((tmp_path / "a" / "bias_results.json").read_text())
    assert r["n_used"] == 100 and r["m1"] > 0.01 and r["scope"]["unplanned_dropped"] == 0


def test_c_without_rings_points_to_rings():
    res, _, _ = bias.measure_bias(known_table(40, 0.0, 0.05, c_scatter=0.02),
                                  requirement="lsst-project")  # fmt: skip
    assert any("--rotations 2" in n for n in res.planning.notes)


def test_rank_band_is_drawn_per_independent_seed():
    """100 seeds x 4 grid points sharing each seed's rank (uniform): a bin's count leaves
    the per-seed 99% band in about 1% of draws; the binomial band over the 400 rows
    (what the figure drew before) is left far more often."""
    from scipy import stats as st

    from shearbatch.analysis.plots import seed_band

    rng = np.random.default_rng(3)
    seeds = np.repeat(np.arange(100), 4)
    lo, hi, k = seed_band(400, seeds, 0.1)
    assert k == 4 and (lo, hi) == tuple(4 * st.binom.ppf([0.005, 0.995], 100, 0.1))
    assert seed_band(400, np.arange(400), 0.1)[:2] == tuple(st.binom.ppf([0.005, 0.995], 400, 0.1))
    naive = st.binom.ppf([0.005, 0.995], 400, 0.1)
    counts = np.array([np.histogram(np.repeat(rng.uniform(size=100), 4), 10, (0, 1))[0]
                       for _ in range(2000)])  # fmt: skip
    outside = np.mean((counts < lo) | (counts > hi))
    assert outside < 0.02  # the band's nominal 1% (a binomial CI over 20,000 bins: +-0.2%)
    assert np.mean((counts < naive[0]) | (counts > naive[1])) > 0.1


def test_worst_realizations_are_one_per_seed():
    from shearbatch.analysis.plots import worst_converged

    df = known_table(5, 0.0, 0.05)
    df["passed_convergence"] = [False, False] + [True] * 8  # seed 0's two grid points
    worst = worst_converged(df, k=3)
    seeds = df.set_index("run_id").loc[worst, "seed"].tolist()
    assert len(worst) == 3 and len(set(seeds)) == 3 and seeds[0] == 0


def test_the_report_says_unfinished_and_shows_the_planning_lines():
    from shearbatch.analysis import report_text

    df = known_table(40, 0.0, 0.05)
    df = pd.concat([df, pd.DataFrame({"run_id": ["n0", "n1"], "status": "incomplete"})])
    res, _, _ = bias.measure_bias(df, requirement="desc-srd-y10", target_sigma_m=1e-3)
    html = report_text.render_report(res, [], report_text.failures_by_flag(df), {"command": "x"})
    assert "INCONCLUSIVE</span> — unfinished: 80 of 82 planned realizations complete" in html
    assert "requirement <b>desc-srd-y10</b>" in html and "arXiv:1809.01669" in html
    assert "sigma_m1 = 0.001: ~5129 realizations" in html and "<h2>Planning</h2>" in html
