"""Estimators, errors, coverage and SBC on synthetic summary tables with known m, c and noise.

Tolerances come from the statistics: an estimate must lie within 3 of its own
reported errors of the truth (p ~ 0.003 per check) and the mean reported error
must match the scatter over R repeats within 20% (the scatter's own relative
uncertainty is 1 / sqrt(2 R) = 5% for R = 200).
"""

import numpy as np
import pandas as pd
import pytest

from shearbatch.analysis import acceptance, stats

M_TRUE, C_TRUE, SIGMA = 0.01, 3e-4, 1e-3
GRID = np.array([-0.05, -0.02, 0.02, 0.05])


def grid_table(rng, n_seeds=40, sigma=SIGMA, paired=False, width_scale=1.0):
    """A summary table: every seed at every grid point (paired: +|g| and -|g| per seed).

    Each seed carries a shared noise term (the same galaxy and noise field at every
    grid point) plus independent noise, both Gaussian: the posterior std is the
    total sigma of one row.
    """
    rows = []
    grid = np.unique(np.abs(GRID)) if paired else GRID
    for seed in range(n_seeds):
        shared = rng.normal(0, sigma / np.sqrt(2))
        for g in grid:
            for sign in (1, -1) if paired else (1,):
                gt = sign * g
                noise1 = shared + rng.normal(0, sigma / np.sqrt(2))
                n2 = rng.normal(0, sigma)
                g1 = (1 + M_TRUE) * gt + C_TRUE + noise1
                g2 = C_TRUE + n2
                s = sigma * width_scale
                rows.append({
                    "run_id": f"r{seed}_{gt}", "seed": seed, "g1_true": gt, "g2_true": 0.0,
                    "g1_mean": g1, "g2_mean": g2, "g1_std": s, "g2_std": s,
                    "g1_q16": g1 - s, "g1_q84": g1 + s, "g1_q025": g1 - 1.96 * s,
                    "g1_q975": g1 + 1.96 * s, "g2_q16": g2 - s, "g2_q84": g2 + s,
                    "g2_q025": g2 - 1.96 * s, "g2_q975": g2 + 1.96 * s,
                    "status": "ok", "passed_convergence": True,
                    "pair_id": f"p{g}_s{seed}" if paired else "", "pair_sign": sign if paired else 0,
                })  # fmt: skip
    return pd.DataFrame(rows)


@pytest.mark.parametrize("estimator", ["regression", "paired"])
def test_estimators_recover_m_and_c_with_honest_errors(estimator):
    rng = np.random.default_rng(1)
    paired = estimator == "paired"
    ms, cs, merr, cerr = [], [], [], []
    for _ in range(200):
        df = grid_table(rng, n_seeds=30, paired=paired)
        res, _, _ = acceptance.analyze(df, estimator=estimator, n_boot=300)
        assert res["estimator"] == estimator
        ms.append(res["m1"])
        cs.append(res["c1"])
        merr.append(res["m1_err"])
        cerr.append(res["c1_err"])
    ms, cs, merr, cerr = map(np.asarray, (ms, cs, merr, cerr))
    # one realization of the campaign: within 3 of its own errors
    assert abs(ms[0] - M_TRUE) < 3 * merr[0]
    assert abs(cs[0] - C_TRUE) < 3 * cerr[0]
    # unbiased over repeats (3 standard errors of the mean)
    assert abs(ms.mean() - M_TRUE) < 3 * ms.std() / np.sqrt(ms.size)
    assert abs(cs.mean() - C_TRUE) < 3 * cs.std() / np.sqrt(cs.size)
    # reported errors match the scatter within 20%
    assert np.sqrt(np.mean(merr**2)) == pytest.approx(ms.std(ddof=1), rel=0.2)
    assert np.sqrt(np.mean(cerr**2)) == pytest.approx(cs.std(ddof=1), rel=0.2)
    # the constant component: m undefined with a reason, c its mean offset
    assert res["m2"] is None and "constant" in res["m2_reason"]
    assert abs(res["c2"] - C_TRUE) < 3 * res["c2_err"]


def test_jackknife_and_bootstrap_agree_on_a_large_table():
    df = grid_table(np.random.default_rng(2), n_seeds=400)
    _, fits, _ = acceptance.analyze(df, estimator="regression", n_boot=2000)
    for comp in ("g1", "g2"):
        e = fits[comp].errors
        jk = np.atleast_1d(e["jackknife"])
        bs = np.atleast_1d(e["bootstrap"])
        np.testing.assert_allclose(bs, jk, rtol=0.25)
    assert fits["g1"].error_method == "jackknife"
    assert fits["g1"].n_groups == 400


def test_auto_picks_paired_when_pairs_exist_and_paired_without_pairs_is_bad_input():
    rng = np.random.default_rng(3)
    res, _, _ = acceptance.analyze(grid_table(rng, n_seeds=5, paired=True), estimator="auto")
    assert res["estimator"] == "paired"
    res, _, _ = acceptance.analyze(grid_table(rng, n_seeds=5), estimator="auto")
    assert res["estimator"] == "regression"
    with pytest.raises(ValueError, match="no complete"):
        acceptance.analyze(grid_table(rng, n_seeds=5), estimator="paired")


@pytest.mark.parametrize("scale, ok", [(1.0, True), (0.5, False)])
def test_coverage_of_gaussian_posteriors(scale, ok):
    rng = np.random.default_rng(5)
    n = 2000
    truth = rng.normal(0, 0.05, n)
    mean = truth + rng.normal(0, SIGMA, n)
    s = SIGMA * scale
    for level, z in ((0.68, 0.9945), (0.95, 1.96)):
        r = stats.coverage(truth, mean - z * s, mean + z * s, level)
        assert r["passed"] is ok, r
        lo, hi = r["band"]
        assert lo < level < hi


def test_coverage_skipped_for_point_estimates():
    t = np.zeros(5)
    assert "skipped" in stats.coverage(t, t, t, 0.68)


def test_sbc_uniform_ranks_pass_and_biased_ranks_fail():
    rng = np.random.default_rng(6)
    assert stats.sbc(rng.uniform(size=500))["p_value"] > 1e-3
    assert stats.sbc(rng.beta(2, 2, size=500))["p_value"] < 1e-3
    assert "skipped" in stats.sbc(np.array([0.5]))


def test_exclusions_are_counted_with_reasons():
    df = grid_table(np.random.default_rng(7), n_seeds=5)
    df.loc[0, "status"] = "failed"
    df.loc[1, "status"] = "incomplete"
    df.loc[2, "status"] = "corrupt"
    df.loc[3, "passed_convergence"] = False
    res, _, use = acceptance.analyze(df)
    assert res["excluded"] == {
        "status corrupt": 1, "status failed": 1, "status incomplete": 1,
        "did not pass convergence": 1,
    }  # fmt: skip
    assert res["n_used"] == len(df) - 4 == len(use)
    assert res["n_failed"] == res["n_incomplete"] == 1


@pytest.mark.parametrize(
    "kw, msg",
    [({"level": "level_9"}, "unknown level"), ({"estimator": "x"}, "unknown estimator")],
)
def test_bad_input_raises_one_line(kw, msg):
    with pytest.raises(ValueError, match=msg):
        acceptance.analyze(grid_table(np.random.default_rng(8), n_seeds=3), **kw)


def test_missing_columns_and_no_usable_rows():
    df = grid_table(np.random.default_rng(9), n_seeds=3)
    with pytest.raises(ValueError, match="missing columns: g1_std"):
        acceptance.analyze(df.drop(columns=["g1_std"]))
    df["status"] = "failed"
    with pytest.raises(ValueError, match="no usable rows"):
        acceptance.analyze(df)
