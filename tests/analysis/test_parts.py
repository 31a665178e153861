"""Stage 3 over a summary table in parts sharing no seed (analysis/parts.py, issue 43):
the parts' per-seed sums merged in seed order give the whole table's result, bit for bit
(the same sums in the same order, so the same bootstrap resamples), and bias-stats splits
a table larger than a part without leaving its temporary folder behind."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from shearbatch.analysis import bias, bias_fits
from shearbatch.analysis.parts import InMemory, SummaryParts, _seed_key, open_table
from shearbatch.analysis.summary_table import read_summary
from shearbatch.cli import bias_stats

from .test_compare import _table as host_table


def _campaign(n_seeds: int = 60, seed: int = 3) -> pd.DataFrame:
    """A paired 2-D ring design (two rotations) with everything stage 3 reads: quantiles,
    ranks drawn from the prior (SBC), flags and failures, S/N, an unfinished realization,
    a broken ring; seeds labelled out of order so that their label order is not the
    file's."""
    rng = np.random.default_rng(seed)
    rows = []
    labels = rng.permutation(np.arange(1000, 1000 + 7 * n_seeds, 7))
    for s in labels:
        shared = rng.normal(0, 0.01, 2)
        for g1, g2 in ((0.02, 0.0), (0.0, 0.02), (0.014, 0.014)):
            for sign in (1, -1):
                for rot in (0, 1):
                    g = np.array([g1, g2]) * sign
                    est = g * 1.003 + 2e-4 + shared * (1 - 2 * rot) + rng.normal(0, 3e-3, 2)
                    sd = 3e-3 * (1 + 0.1 * rng.random(2))
                    row = {"run_id": f"s{s}_{g1}_{g2}_{sign}_r{rot}", "seed": int(s),
                           "pair_id": f"p{g1}_{g2}_s{s}_r{rot}", "pair_sign": sign,
                           "rotation": rot, "n_rotations": 2,
                           "g1_true": g[0], "g2_true": g[1], "status": "ok",
                           "passed_convergence": True, "method": "map",
                           "point_estimate": "mode", "snr": 20 + 30 * rng.random(),
                           "truth_from_prior": True,
                           "flags": "POP_WEIGHTS_COLLAPSED" if rng.random() < 0.05 else ""}  # fmt: skip
                    for k, c in enumerate(("g1", "g2")):
                        row.update({f"{c}_mean": est[k], f"{c}_median": est[k],
                                    f"{c}_mode": est[k], f"{c}_std": sd[k],
                                    f"{c}_q16": est[k] - sd[k], f"{c}_q84": est[k] + sd[k],
                                    f"{c}_q025": est[k] - 2 * sd[k],
                                    f"{c}_q975": est[k] + 2 * sd[k],
                                    f"rank_{c}": rng.integers(0, 201) / 200})  # fmt: skip
                    rows.append(row)
    df = pd.DataFrame(rows)
    df.loc[3, ["status", "flags"]] = ["failed", "OPT_NOT_CONVERGED"]
    df.loc[17, "passed_convergence"] = False
    df.loc[40, "status"] = "incomplete"
    return df


def _parts(tmp_path, df: pd.DataFrame, n: int) -> SummaryParts:
    path = tmp_path / "summary.csv"
    df.to_csv(path, index=False)
    return SummaryParts(path, n, tmp=tmp_path)


def _whole(tmp_path, df: pd.DataFrame) -> InMemory:
    path = tmp_path / "summary.csv"
    df.to_csv(path, index=False)
    return InMemory(read_summary(path))


@pytest.mark.parametrize("estimator", ["paired", "regression"])
def test_parts_give_the_whole_tables_result_bit_for_bit(tmp_path, estimator, monkeypatch):
    monkeypatch.setattr(bias_fits, "BOOT_CHUNK_CELLS", 60 * 7)  # the bootstrap in chunks too
    df = _campaign()
    whole = bias.measure_bias(_whole(tmp_path, df), estimator=estimator, n_boot=200)
    with _parts(tmp_path, df, 5) as parts:
        assert all(len(f) for f in parts.frames())  # every part holds rows
        split = bias.measure_bias(parts, estimator=estimator, n_boot=200)
    a, b = whole.result.to_json(), split.result.to_json()
    assert a == b  # m, c, both errors, coverage, SBC, exclusions, warnings, notes
    assert json.dumps(a) == json.dumps(b)  # and in the same key order
    assert a["n_failed"] == 1 and a["scope"]["unfinished"]
    assert a["design"]["incomplete_rings_left_out"] >= 1  # the broken rings, counted once
    assert a["sbc"]["g1"]["n_eff"] == 60 and a["warnings"]
    # the figures' and the report's inputs: the same counts and the worst rows
    assert whole.digest.failures == split.digest.failures
    assert whole.digest.worst["run_id"].tolist() == split.digest.worst["run_id"].tolist()
    for c in ("g1", "g2"):
        for x, y in zip(whole.digest.ranks[c], split.digest.ranks[c], strict=True):
            np.testing.assert_array_equal(x, y)
    assert len(whole.digest.sample) == len(split.digest.sample) == whole.result.n_used


def test_parts_merge_the_host_estimators_sums(tmp_path):
    df = host_table(n_seeds=80).assign(status="ok", passed_convergence=True, g1_std=0.01,
                                       g2_std=0.01, g1_mean=lambda d: d["g1_mode"],
                                       g2_mean=lambda d: d["g2_mode"])  # fmt: skip
    whole = bias.measure_bias(_whole(tmp_path, df), requirement="level2", n_boot=50)
    with _parts(tmp_path, df, 4) as parts:
        split = bias.measure_bias(parts, requirement="level2", n_boot=50)
    side, other = whole.result.to_json()["estimators"], split.result.to_json()["estimators"]
    assert side["results"]["anacal"]["m1_err"] > 0
    for name in ("map", "anacal"):  # a mean cost: its sum's rounding depends on the parts
        a, b = side["results"][name].pop("cost"), other["results"][name].pop("cost")
        assert a["s_per_galaxy"] == pytest.approx(b["s_per_galaxy"], rel=1e-12)
    assert side == other  # m, c, their jackknife errors and the differences, exactly


def test_the_residual_sample_takes_whole_seeds_the_same_way_in_parts(tmp_path, monkeypatch):
    monkeypatch.setattr(bias, "SAMPLE_ROWS", 200)
    df = _campaign()
    whole = bias.measure_bias(_whole(tmp_path, df))
    with _parts(tmp_path, df, 3) as parts:
        split = bias.measure_bias(parts)
    s = whole.digest.sample
    assert 100 < len(s) < 400 and len(s) < whole.result.n_used
    keys = ["seed", "g1_true", "g2_true", "g1_mode"]
    pd.testing.assert_frame_equal(s.sort_values(keys).reset_index(drop=True),
                                  split.digest.sample.sort_values(keys).reset_index(drop=True))  # fmt: skip
    # whole seeds: every sampled seed keeps all its usable rows
    per = whole.usable.groupby("seed").size()
    got = s.groupby("seed").size()
    assert (got == per[got.index]).all()


def test_bad_input_is_counted_over_every_part(tmp_path):
    df = _campaign()
    df.loc[[5, 200, 400, 600], "g1_mode"] = np.nan  # converged rows without a mode
    with _parts(tmp_path, df, 4) as parts, pytest.raises(ValueError) as err:
        bias.measure_bias(parts, point="mode")
    assert "empty in 4 converged row(s)" in str(err.value)
    with _parts(tmp_path, df.assign(status="failed"), 4) as parts:
        with pytest.raises(ValueError, match="no usable rows"):
            bias.measure_bias(parts)


def test_a_seed_written_as_a_float_lands_in_one_part():
    assert _seed_key("12") == _seed_key("12.0") == _seed_key(" 12 ") == "12"
    assert _seed_key("1e3") == "1e3" and _seed_key("-4.0") == "-4"


def test_bias_stats_splits_a_large_table_and_cleans_up(tmp_path, monkeypatch):
    df = _campaign()
    src = tmp_path / "summary.csv"
    df.to_csv(src, index=False)
    runner = CliRunner()
    whole = runner.invoke(bias_stats, ["--input", str(src), "--output-dir",
                                       str(tmp_path / "whole"), "--no-plots"])  # fmt: skip
    assert whole.exit_code in (0, 1, 3), whole.output
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setenv("SHEARBATCH_STATS_PART_BYTES", str(src.stat().st_size // 4))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # TMPDIR read again
    table = open_table(src)
    assert isinstance(table, SummaryParts) and table.n_parts == 5
    table.close()
    split = runner.invoke(bias_stats, ["--input", str(src), "--output-dir",
                                       str(tmp_path / "split")])  # fmt: skip
    assert split.exit_code == whole.exit_code, split.output
    a = json.loads((tmp_path / "whole" / "bias_results.json").read_text())
    b = json.loads((tmp_path / "split" / "bias_results.json").read_text())
    assert a == b
    assert sorted(p.name for p in (tmp_path / "split" / "plots").glob("*.png")) == [
        "coverage.png", "ranks.png", "residuals.png"]  # fmt: skip
    assert list(tmp.iterdir()) == []  # the parts' folder is gone


def test_the_bootstrap_in_chunks_draws_the_same_resamples():
    """The resamples' counts drawn a chunk at a time (bounded memory at 10**5 seeds) are
    the same draws: the bootstrap's std agrees with one (n_boot, G) array to rounding."""
    rng = np.random.default_rng(1)
    sums = rng.normal(1.0, 0.3, size=(3000, 3))

    def fn(s):
        return s[..., :2] / s[..., 2:3]

    one = bias_fits.group_errors(sums, fn, n_boot=400, seed=3)
    old = bias_fits.BOOT_CHUNK_CELLS
    try:
        bias_fits.BOOT_CHUNK_CELLS = 3000 * 7
        chunked = bias_fits.group_errors(sums, fn, n_boot=400, seed=3)
    finally:
        bias_fits.BOOT_CHUNK_CELLS = old
    np.testing.assert_allclose(chunked.boot, one.boot, rtol=1e-12)
    assert chunked.n_boot == one.n_boot == 400
