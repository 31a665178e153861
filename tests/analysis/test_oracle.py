"""Stage 3 against a plain reference (issue 56): ``measure_bias``, on a table whole and in
parts sharing no seed (:mod:`shearbatch.analysis.parts`, as ``bias-stats`` splits a
large ``summary.csv``), reports what :mod:`tests.analysis.oracle` computes from the
definitions in docs/statistics.md with loops over rows, rings, pairs and seeds: m and c
per component (regression, paired, constant truth), ring averaging, the delete-one-seed
jackknife and the group bootstrap, coverage with its binomial error, the exclusions and
the verdict of each m and c. To rounding (``rel 1e-9``): the two compute the same
numbers by other routes, so any disagreement is a rule, not noise.

The tables are random and irregular (hypothesis, derandomised: the same examples every
run): 1-D and 2-D shear grids of several points, unpaired or paired, rings of 1, 2 or 4
rotations, copies missing (a rotation absent), failed rows, rows that did not pass
convergence, non-finite estimates, unfinished and unplanned rows, both components (a
constant g2 too), unweighted and inverse-variance fits, split into 2 to 6 parts.

Checked to fail (issue 56's "Done when"; tests/analysis/test_parts.py passes with each):
the jackknife's ``(G - 1) / G`` replaced by ``1 / G`` in ``bias_fits.group_errors`` (m_err
0.00314 against the oracle's 0.00703 on 6 seeds); ``bias_fits.pair_table``'s -g rows rolled by
one pair (rows of other seeds: the truths no longer flip, the regression and its
jackknife are reported instead of the paired bootstrap); each pair's -g row taken from
another seed at the same grid point and rotation in ``bias.measure_part`` (m and c
unchanged, a sum; m_err 0.186 against 0.0059: the seed's noise no longer cancels).
"""

from __future__ import annotations

import io
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from shearbatch.analysis import bias
from shearbatch.analysis.parts import InMemory, open_table
from shearbatch.analysis.summary_table import read_summary

from . import oracle

REL = 1e-9
#: the criteria judged (a requirement's keys, values chosen so that m and c land on all
#: three verdicts across the examples, coverage is tested from 6 seeds)
ACCEPTANCE = {"max_abs_m": 4e-3, "max_abs_c": 3e-4, "z": 2.0, "coverage_z": 3.0,
              "min_seeds": 6, "min_frac_converged": 0.5, "sbc_p_min": 0.01}  # fmt: skip

#: + twins of the grids (paired: each also at -g; 1-D grids flip g1 alone, 2-D both)
GRIDS = {
    "1d, g2 = 0": ((0.01, 0.0), (0.02, 0.0), (0.04, 0.0)),
    "1d, g2 = 0.01, one point": ((0.02, 0.01),),
    "2d, a zero g1": ((0.02, 0.0), (0.0, 0.02), (0.014, 0.014)),
    "2d, both > 0": ((0.02, 0.01), (0.01, 0.03)),
    "2d, g2 of both signs": ((0.02, -0.01), (0.03, 0.02)),
}


def _rotate(e: np.ndarray, k: int, big_r: int) -> np.ndarray:
    """Intrinsic shape of ring copy k (spin 2: k 180 / R degrees turns e by 2 k 180 / R)."""
    a = 2 * np.pi * k / big_r
    return np.array([np.cos(a) * e[0] - np.sin(a) * e[1], np.sin(a) * e[0] + np.cos(a) * e[1]])


def random_table(rng: np.random.Generator, *, n_seeds: int, paired: bool, rotations: int,
                 grid: str, p_missing: float, p_failed: float, p_noconv: float,
                 p_nan: float, p_other: float) -> pd.DataFrame:  # fmt: skip
    """A summary table of a designed campaign with its irregularities (module docstring)."""
    one_d = grid.startswith("1d")
    points = list(GRIDS[grid])
    if not paired:  # the grid of an unpaired campaign lists its negatives itself
        points += [(-a, b) if one_d else (-a, -b) for a, b in points]
    m_true, c_true = rng.normal(0.003, 0.002, 2), rng.normal(0.0, 2e-4, 2)
    labels = rng.choice(np.arange(1, 100_000), n_seeds, replace=False)  # label order != file
    rows = []
    for s in labels:
        shape, noise = rng.normal(0, 0.05, 2), rng.normal(0, 3e-3, 2)
        for a, b in points:
            for k in range(rotations):
                suffix = f"_r{k}" if k else ""
                for sign in (1, -1) if paired else (1,):
                    g = np.array([sign * a, b if one_d else sign * b])
                    e = 0.3 * _rotate(shape, k, rotations)
                    est = (1 + m_true) * g + c_true + e + noise + rng.normal(0, 1e-3, 2)
                    sd = 2.5e-3 * (1 + rng.random(2))
                    row = {"run_id": f"g1_{g[0]:+.4f}_g2_{g[1]:+.4f}_s{s}{suffix}",
                           "seed": int(s), "g1_true": g[0], "g2_true": g[1], "status": "ok",
                           "passed_convergence": True, "method": "map",
                           "point_estimate": "mode", "in_plan": True}  # fmt: skip
                    if paired:
                        row["pair_id"] = f"p{abs(a):.4f}_{b:+.4f}_s{s}{suffix}"
                        row["pair_sign"] = sign
                    if rotations > 1 or rng.random() < 0.5:
                        row["rotation"], row["n_rotations"] = k, rotations
                    for i, c in enumerate(oracle.COMPONENTS):
                        mode = est[i] + rng.normal(0, 2e-4)  # each point estimate its own
                        row.update({f"{c}_mean": est[i], f"{c}_median": est[i] - 1e-4,
                                    f"{c}_mode": mode, f"{c}_std": sd[i],
                                    f"{c}_q16": est[i] - sd[i], f"{c}_q84": est[i] + sd[i],
                                    f"{c}_q025": est[i] - 2 * sd[i],
                                    f"{c}_q975": est[i] + 2 * sd[i]})  # fmt: skip
                    u = rng.random()
                    if u < p_missing:  # a copy absent: its ring is incomplete
                        continue
                    if u < p_missing + p_failed:
                        row.update(status="failed", passed_convergence=False)
                        for c in oracle.COMPONENTS:
                            for x in ("mean", "median", "mode", "std"):
                                row[f"{c}_{x}"] = np.nan
                    elif u < p_missing + p_failed + p_noconv:
                        row["passed_convergence"] = False
                    elif u < p_missing + p_failed + p_noconv + p_nan:  # no estimate at all
                        c = oracle.COMPONENTS[int(rng.integers(2))]
                        for x in ("mean", "median", "mode"):
                            row[f"{c}_{x}"] = np.nan
                    elif u < p_missing + p_failed + p_noconv + p_nan + p_other:
                        if rng.random() < 0.5:
                            row["status"] = "incomplete"  # unfinished: still measured
                            for c in oracle.COMPONENTS:
                                for x in ("mean", "median", "mode", "std"):
                                    row[f"{c}_{x}"] = np.nan
                        else:
                            row["in_plan"] = False  # another plan's directory: left out
                    rows.append(row)
    return pd.DataFrame(rows)


def _close(got, want, what):
    if want is None:
        assert got is None, f"{what}: {got} where the oracle has none"
        return
    assert got is not None, f"{what}: None where the oracle has {want}"
    assert got == pytest.approx(want, rel=REL, abs=1e-15), f"{what}: {got} != oracle {want}"


def assert_matches_oracle(analysis, want, label):
    """``measure_bias``'s result against :func:`oracle.stage3`'s numbers."""
    res = analysis.result.to_json()
    assert res["point_estimate"] == want["point"], label
    assert res["estimator"] == want["estimator"], label
    assert res["n_used"] == want["n_used"] and res["n_seeds"] == want["n_seeds"], label
    assert res["excluded"] == {k: v for k, v in sorted(want["excluded"].items())}, label
    assert res["design"]["incomplete_rings_left_out"] == want["incomplete_rings"], label
    for comp in oracle.COMPONENTS:
        k, f = comp[1], want["fits"][comp]
        lab = f"{label} {comp} ({f['kind']})"
        _close(res[f"m{k}"], f["m"], f"{lab} m")
        _close(res[f"c{k}"], f["c"], f"{lab} c")
        _close(res[f"m{k}_err"], f["m_err"], f"{lab} m_err")
        _close(res[f"c{k}_err"], f["c_err"], f"{lab} c_err")
        fit = analysis.fits[comp]
        assert (fit.n, fit.n_groups, fit.error_method) == (f["n"], f["n_groups"],
                                                           f["error_method"]), lab  # fmt: skip
        for method in ("jackknife", "bootstrap"):  # both kept, whichever is reported
            got, ref = getattr(fit.errors, method), f[method]
            if f["kind"] == "offset":
                _close(got, None if ref is None else float(ref[0]), f"{lab} c {method}")
            elif ref is None:
                assert got is None, f"{lab} {method}"
            else:
                _close(got[0], float(ref[0]), f"{lab} m {method}")
                _close(got[1], float(ref[1]), f"{lab} c {method}")
        for lev in oracle.LEVELS:
            got, ref = res["coverage"][comp][lev], want["coverage"][comp][lev]
            if "skipped" in ref:
                assert got.get("skipped") == ref["skipped"], f"{lab} coverage {lev}"
                continue
            for key in ("n", "n_inside", "n_eff", "status"):
                assert got[key] == ref[key], f"{lab} coverage {lev} {key}"
            for key in ("observed", "se"):
                _close(got[key], ref[key], f"{lab} coverage {lev} {key}")
            assert got["band"] == pytest.approx(ref["band"], rel=REL), f"{lab} coverage {lev}"
    statuses = {c["name"]: c["status"] for c in res["criteria"] if c["name"].startswith("|")}
    assert statuses == want["criteria"], label


def measure_three_ways(df: pd.DataFrame, n_parts: int, tmp: Path, refused: str | None = None,
                       **settings_):  # fmt: skip
    """``measure_bias`` of the table as a DataFrame, read whole from its CSV, and split by
    seed into ``n_parts`` parts (``open_table``'s part size, as
    ``SHEARBATCH_STATS_PART_BYTES`` sets it); each refusing the table with ``refused``'s
    words when given. With the table as read back, the oracle's input."""
    path = tmp / "summary.csv"
    df.to_csv(path, index=False)
    table = read_summary(path)

    def measure(t):
        if refused is None:
            return bias.measure_bias(t, acceptance=ACCEPTANCE, **settings_)
        with pytest.raises(ValueError, match=refused):
            bias.measure_bias(t, acceptance=ACCEPTANCE, **settings_)
        return None

    out = {"frame": measure(table), "whole": measure(InMemory(table))}
    with open_table(path, part_bytes=path.stat().st_size // n_parts + 1) as parts:
        assert parts.n_parts == n_parts
        out[f"{n_parts} parts"] = measure(parts)
    return table, out


CASES = st.fixed_dictionaries({
    "seed": st.integers(0, 2**32 - 1),
    "n_seeds": st.integers(6, 24),
    "paired": st.booleans(),
    "rotations": st.sampled_from([1, 2, 4]),
    "grid": st.sampled_from(sorted(GRIDS)),
    "p_missing": st.sampled_from([0.0, 0.02, 0.06]),
    "p_failed": st.sampled_from([0.0, 0.02, 0.06]),
    "p_noconv": st.sampled_from([0.0, 0.03]),
    "p_nan": st.sampled_from([0.0, 0.03]),
    "p_other": st.sampled_from([0.0, 0.03]),
    "point": st.sampled_from(["auto", "mean", "median", "mode"]),
    "estimator": st.sampled_from(["auto", "auto", "regression"]),
    "weights": st.sampled_from(["none", "none", "inverse-variance"]),
    "n_parts": st.integers(2, 6),
})  # fmt: skip


@settings(max_examples=40, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
@given(case=CASES)
def test_measure_bias_whole_and_in_parts_agrees_with_the_oracle(case):
    case = dict(case)
    if case["grid"].startswith("1d, g2 = 0.01") and not case["paired"]:
        case["grid"] = "1d, g2 = 0"  # one +-g1 point and a constant g2: m2 undefined, m1 too
    rng = np.random.default_rng(case["seed"])
    df = random_table(rng, n_seeds=case["n_seeds"], paired=case["paired"],
                      rotations=case["rotations"], grid=case["grid"],
                      p_missing=case["p_missing"], p_failed=case["p_failed"],
                      p_noconv=case["p_noconv"], p_nan=case["p_nan"],
                      p_other=case["p_other"])  # fmt: skip
    opts = {"point": case["point"], "estimator": case["estimator"], "weights": case["weights"],
            "n_boot": 64, "seed": case["seed"] % 1000}  # fmt: skip
    try:
        want = oracle.stage3(read_summary(io.StringIO(df.to_csv(index=False))),
                             acceptance=ACCEPTANCE, **opts)  # fmt: skip
    except oracle.Refused as why:  # nothing to fit: measure_bias refuses it too, in parts too
        event(f"refused: {why}")
        with tempfile.TemporaryDirectory() as tmp:
            measure_three_ways(df, case["n_parts"], Path(tmp), refused=str(why), **opts)
        return
    event("fits: " + ", ".join(want["fits"][c]["kind"] for c in oracle.COMPONENTS))
    with tempfile.TemporaryDirectory() as tmp:
        _, got = measure_three_ways(df, case["n_parts"], Path(tmp), **opts)
    for how, analysis in got.items():
        assert_matches_oracle(analysis, want, f"{how} {case}")


def _fixed(paired=True, rotations=2, grid="2d, both > 0", n_seeds=16, seed=7, **p):
    rates = {"p_missing": 0.05, "p_failed": 0.05, "p_noconv": 0.03, "p_nan": 0.03,
             "p_other": 0.03, **p}  # fmt: skip
    return random_table(np.random.default_rng(seed), n_seeds=n_seeds, paired=paired,
                        rotations=rotations, grid=grid, **rates)  # fmt: skip


def test_the_oracle_sees_every_irregularity_and_every_fit(tmp_path):
    """The fixed case the property test's examples vary around: a paired 2-D ring design
    with every irregularity, fitted by the paired estimator in both components (bootstrap
    reported, jackknife kept), by the regression where a grid point has g1 = 0, and by
    the constant-truth offset for a constant g2."""
    df = _fixed()
    table, got = measure_three_ways(df, 4, tmp_path, n_boot=200)
    want = oracle.stage3(table, acceptance=ACCEPTANCE, n_boot=200)
    assert want["estimator"] == "paired" and want["incomplete_rings"] > 0
    assert {f["kind"] for f in want["fits"].values()} == {"paired"}
    assert set(want["excluded"]) == {"status failed", "status incomplete",
                                     "did not pass convergence",
                                     "non-finite truth or estimate"}  # fmt: skip
    assert len(table) - len(table[table["in_plan"]]) > 0  # unplanned rows were there
    for how, analysis in got.items():
        assert_matches_oracle(analysis, want, how)
    for grid, kinds in (("2d, a zero g1", ("regression", "regression")),
                        ("2d, g2 of both signs", ("paired", "regression")),
                        ("1d, g2 = 0", ("paired", "offset"))):  # fmt: skip
        table, got = measure_three_ways(_fixed(grid=grid), 3, tmp_path, n_boot=50)
        want = oracle.stage3(table, acceptance=ACCEPTANCE, n_boot=50)
        assert tuple(want["fits"][c]["kind"] for c in oracle.COMPONENTS) == kinds, grid
        for how, analysis in got.items():
            assert_matches_oracle(analysis, want, f"{grid}: {how}")


def test_ring_averaging_is_what_cancels_the_shape(tmp_path):
    """The oracle's ring averaging does what docs/statistics.md says it is for: with
    rings the intrinsic shape (0.3 e, e ~ N(0, 0.05)) cancels inside each ring, so the
    paired c's error (c is the mean of A, where a pair keeps its shape) is the noise's;
    the unrotated copies alone (no ring) carry the shape, over 3x the error."""
    ring = _fixed(p_missing=0, p_failed=0, p_noconv=0, p_nan=0, p_other=0, n_seeds=24)
    plain = ring[ring["rotation"] == 0].assign(n_rotations=1)
    err = {}
    for name, df in (("ring", ring), ("plain", plain)):
        table, got = measure_three_ways(df, 2, tmp_path, n_boot=50)
        want = oracle.stage3(table, acceptance=ACCEPTANCE, n_boot=50)
        for how, analysis in got.items():
            assert_matches_oracle(analysis, want, f"{name}: {how}")
        err[name] = want["fits"]["g2"]["c_err"]
    assert err["ring"] < err["plain"] / 3, err


def test_parts_from_the_environment_setting(tmp_path, monkeypatch):
    """``SHEARBATCH_STATS_PART_BYTES``, the setting ``bias-stats`` reads, splits the table
    as the property test's ``part_bytes`` does."""
    df = _fixed(seed=11)
    path = tmp_path / "summary.csv"
    df.to_csv(path, index=False)
    monkeypatch.setenv("SHEARBATCH_STATS_PART_BYTES", str(path.stat().st_size // 3))
    want = oracle.stage3(read_summary(path), acceptance=ACCEPTANCE, n_boot=100)
    with open_table(path) as parts:
        assert parts.n_parts == 4
        assert_matches_oracle(bias.measure_bias(parts, acceptance=ACCEPTANCE, n_boot=100),
                              want, "env parts")  # fmt: skip


def test_a_table_with_nothing_to_fit_is_refused_as_the_oracle_refuses_it(tmp_path):
    """Every ring broken (each seed's rotated copies failed) leaves nothing to fit; a
    constant truth in both components leaves no slope: the oracle refuses both, and so
    does measure_bias, whole and in parts."""
    df = _fixed(p_missing=0, p_failed=0, p_noconv=0, p_nan=0, p_other=0)
    df.loc[df["rotation"] == 1, "status"] = "failed"
    flat = _fixed(paired=False, rotations=1, grid="1d, g2 = 0", p_other=0)
    flat = flat[flat["g1_true"] == 0.02]
    for table, words in ((df, "no complete rings"), (flat, "each constant")):
        with pytest.raises(oracle.Refused, match=words) as why:
            oracle.stage3(read_summary(io.StringIO(table.to_csv(index=False))),
                          acceptance=ACCEPTANCE)  # fmt: skip
        measure_three_ways(table, 3, tmp_path, refused=str(why.value))
