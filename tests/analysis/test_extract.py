"""bias-extract on a real campaign (made by the real bias-run) with one realization in each state.

States are made from complete realizations after the run: *failed* by
rewriting ``convergence.json`` with ``status: "failed"`` (as the engine writes
for a NaN posterior), *incomplete* by deleting ``convergence.json`` (a job killed
before its last write), *corrupt* by truncating ``posterior.nc`` to half its size.
"""

import json
import shutil

import pandas as pd
import pytest
from click.testing import CliRunner

from shearbatch.analysis import summary_table
from shearbatch.cli import bias_extract, bias_run, bias_stats
from shearbatch.core import failure_flags as fl
from shearbatch.io import find_realization_dirs
from tests.conftest import as_before_checksums

GRID = ["-0.05", "-0.02", "0.02", "0.05"]


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    root = tmp_path_factory.mktemp("extract") / "camp"
    res = CliRunner().invoke(bias_run, [
        "--config", "configs/level0.yaml", "--shear-grid", *GRID, "--n-realizations", "3",
        "--batch-size", "16", "--x64", "--no-progress", "--output-dir", str(root / "task0"),
    ])  # fmt: skip
    assert res.exit_code == 0, res.output
    return root


@pytest.fixture(scope="module")
def damaged(campaign, tmp_path_factory):
    """A copy with one failed, one incomplete and one corrupt realization (nested layout)."""
    root = tmp_path_factory.mktemp("damaged") / "camp"
    shutil.copytree(campaign, root)
    task = root / "task0"
    failed = task / "g1_-0.0500_g2_+0.0000_s0"
    conv = json.loads((failed / "convergence.json").read_text())
    conv.update(status="failed", reason="injected: non-finite posterior draws of g1")
    (failed / "convergence.json").write_text(json.dumps(conv))
    (task / "g1_-0.0200_g2_+0.0000_s1" / "convergence.json").unlink()
    nc = task / "g1_+0.0200_g2_+0.0000_s2" / "posterior.nc"
    nc.write_bytes(nc.read_bytes()[: nc.stat().st_size // 2])
    return root


def test_extract_reports_each_status_and_stats_excludes_them(damaged, tmp_path):
    out = tmp_path / "summary.csv"
    res = CliRunner().invoke(bias_extract, ["--input-dir", str(damaged), "--output", str(out)])
    assert res.exit_code == 0, res.output
    assert "ok 9, failed 1, incomplete 1, corrupt 1" in res.output
    df = pd.read_csv(out, dtype={"run_id": str, "status": str})
    assert list(df.columns) == summary_table.SUMMARY_COLUMNS
    by = df.set_index("run_id")
    assert by.loc["g1_-0.0500_g2_+0.0000_s0", "status"] == "failed"
    assert "injected" in by.loc["g1_-0.0500_g2_+0.0000_s0", "reason"]
    assert by.loc["g1_-0.0200_g2_+0.0000_s1", "status"] == "incomplete"
    assert by.loc["g1_+0.0200_g2_+0.0000_s2", "status"] == "corrupt"
    bad = by[by["status"] != "ok"]
    assert bad[["g1_mean", "g1_std", "g1_q16", "rank_g1", "passed_convergence"]].isna().all().all()
    ok = by[by["status"] == "ok"]
    assert ok["passed_convergence"].all() and (ok["method"] == "map").all()
    assert ok[["g1_mean", "g1_std", "g1_q025", "g1_q975", "rank_g1", "seed"]].notna().all().all()
    # the mode is convergence.json's mode (MAP: its antithetic draws average to it)
    assert bad[["g1_mode", "g2_mode"]].isna().all().all()
    assert ok[["g1_mode", "g2_mode"]].notna().all().all()
    assert ((ok["g1_mode"] - ok["g1_mean"]).abs() < 1e-3 * ok["g1_std"]).all()
    assert (ok["g1_q025"] < ok["g1_q16"]).all() and (ok["g1_q84"] < ok["g1_q975"]).all()
    assert ok[["rhat_g1", "ess_g1", "divergences"]].isna().all().all()  # MAP: not applicable
    assert (ok["batch_size"] == 12).all()
    assert ok["path"].str.startswith("task0/").all()

    res = CliRunner().invoke(bias_stats, ["--input", str(out), "--output-dir", str(tmp_path / "st"),
                                          "--no-plots"])  # fmt: skip
    # the incomplete and the corrupt realization are work a resume redoes: the campaign is
    # unfinished (INCONCLUSIVE, exit 3), and what the complete ones say is on the same line
    assert res.exit_code == 3, res.output
    assert "excluded: status corrupt: 1, status failed: 1, status incomplete: 1" in res.output
    assert "unfinished: 1 incomplete and 1 corrupt of 12 planned realization(s)" in res.output
    results = json.loads((tmp_path / "st" / "bias_results.json").read_text())
    assert results["n_realizations"] == 12 and results["n_used"] == 9
    assert (results["n_ok"], results["n_failed"], results["n_incomplete"]) == (9, 1, 1)
    # fraction converged over the 10 complete ones (the failed one counts against it)
    frac = next(c for c in results["criteria"] if c["name"] == "fraction converged")
    assert frac["value"] == pytest.approx(0.9) and not frac["passed"]
    assert frac["status"] == "fail" and results["verdict"] == "INCONCLUSIVE"
    assert (
        "verdict: INCONCLUSIVE (exit 3) unfinished: 10 of 12 planned realizations complete"
        " (on the complete ones: FAIL)" in res.output
    )


def test_old_convergence_json_without_a_mode_leaves_the_mode_empty(campaign, tmp_path):
    d = find_realization_dirs(campaign / "task0")[0]
    conv = json.loads((d / "convergence.json").read_text())
    conv.pop("mode")
    for key in ("checksums", "code"):  # older files have neither: they read as before in a
        conv.pop(key)  # campaign from before checksums (tests/guarantees/test_damage.py)
    old = tmp_path / d.name
    as_before_checksums(tmp_path, campaign / "task0" / "campaign.json", records=False)
    shutil.copytree(d, old)
    (old / "convergence.json").write_text(json.dumps(conv))
    row = summary_table.read_realization(old)
    assert row["status"] == "ok" and row["g1_mode"] is None and row["g2_mode"] is None
    assert summary_table.read_realization(d)["g1_mode"] == conv_mode(d)


def test_older_names_of_the_point_estimate_are_still_read(campaign, tmp_path):
    """Files of older versions spell ``mode`` as ``map_estimate`` and ``point_estimate`` as
    ``estimate`` (convergence.json) and the summary column ``point_estimate`` as
    ``estimate``: they read as today's names."""
    d = find_realization_dirs(campaign / "task0")[0]
    conv = json.loads((d / "convergence.json").read_text())
    assert conv["point_estimate"] == "mode" and "estimate" not in conv
    conv["map_estimate"], conv["estimate"] = conv.pop("mode"), conv.pop("point_estimate")
    for key in ("checksums", "code"):  # older files have neither: they read as before in a
        conv.pop(key)  # campaign from before checksums (tests/guarantees/test_damage.py)
    old = tmp_path / d.name
    as_before_checksums(tmp_path, campaign / "task0" / "campaign.json", records=False)
    shutil.copytree(d, old)
    (old / "convergence.json").write_text(json.dumps(conv))
    row, new = summary_table.read_realization(old), summary_table.read_realization(d)
    assert row["status"] == "ok" and row["point_estimate"] == "mode"
    assert (row["g1_mode"], row["g2_mode"]) == (new["g1_mode"], new["g2_mode"])
    assert row["g1_mode"] == conv_mode(d)
    import pandas as pd

    from shearbatch.analysis import bias

    df = pd.DataFrame({"estimate": ["mode", "mode"], "g1_mode": [0.1, 0.2]})
    assert list(bias.current_columns(df).columns) == ["point_estimate", "g1_mode"]


def conv_mode(d):
    return json.loads((d / "convergence.json").read_text())["mode"]["g1"]


def test_parallel_reads_equal_serial_reads(campaign):
    serial = summary_table.extract_campaign(campaign, workers=1)
    parallel = summary_table.extract_campaign(campaign, workers=2, chunk=2)
    assert len(serial) == 12
    assert serial == parallel


def test_nuts_convergence_uses_the_thresholds():
    th = summary_table.Thresholds(rhat_max=1.01, ess_min=400, divergence_frac_max=0.0)
    good = {"method": "nuts", "flags": 0, "rhat": {"g1": 1.001, "g2": 1.002},
            "ess_bulk": {"g1": 900}, "ess_tail": {"g1": 800}, "divergence_frac": 0.0,
            "bfmi": [0.9, 1.0]}  # fmt: skip
    assert summary_table.convergence_flags(good, th) == 0
    bad = summary_table.convergence_flags({**good, "rhat": {"g1": 1.05, "g2": None}}, th)
    assert fl.names(bad) == ["RHAT_HIGH"]
    bad = summary_table.convergence_flags({**good, "divergence_frac": 0.01}, th)
    assert fl.names(bad) == ["DIVERGENCES"]
    # a gate bias-run set is re-evaluated against the thresholds given here
    stored = {**good, "flags": fl.flag("RHAT_HIGH"), "rhat": {"g1": 1.03, "g2": 1.0}}
    assert summary_table.convergence_flags(stored, th) == fl.flag("RHAT_HIGH")
    assert summary_table.convergence_flags(stored, th._replace(rhat_max=1.05)) == 0
    # MAP has no threshold gates: its own flags decide
    assert summary_table.convergence_flags({"method": "map", "flags": 0}, th) == 0
    opt = fl.flag("OPT_NOT_CONVERGED")
    assert summary_table.convergence_flags({"method": "map", "flags": opt}, th) == opt


def test_thresholds_yaml_and_bad_input(tmp_path, campaign):
    y = tmp_path / "c.yaml"
    y.write_text("convergence: {rhat_max: 1.05, ess_min: 100}\n")
    assert summary_table.load_thresholds(y).rhat_max == 1.05
    y.write_text("convergence: {rhat_mx: 1.05}\n")
    res = CliRunner().invoke(bias_extract, ["--input-dir", str(campaign), "--output",
                                            str(tmp_path / "s.csv"), "--convergence-config", str(y)])  # fmt: skip
    assert res.exit_code == 2 and "convergence.rhat_mx: unknown key" in res.output
    res = CliRunner().invoke(bias_extract, ["--input-dir", str(tmp_path / "nope"), "--output", "x"])
    assert res.exit_code == 2 and "--input-dir" in res.output


def test_resume_redoes_what_extract_calls_corrupt(campaign, tmp_path, caplog):
    """One definition of complete: a posterior.nc truncated to 100 bytes is ``corrupt`` to
    bias-extract, and the same bias-run command run again redoes it (and says so), and
    only it."""
    import logging
    import os

    root = tmp_path / "camp"
    shutil.copytree(campaign, root)
    task = root / "task0"
    rid = "g1_+0.0500_g2_+0.0000_s1"
    nc = task / rid / "posterior.nc"
    nc.write_bytes(nc.read_bytes()[:100])
    res = CliRunner().invoke(bias_extract, ["--input-dir", str(root), "--output", str(tmp_path / "a.csv")])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "ok 11, failed 0, incomplete 0, corrupt 1" in res.output
    row = pd.read_csv(tmp_path / "a.csv").set_index("run_id").loc[rid]
    assert row["status"] == "corrupt" and "posterior.nc truncated (100 of" in row["reason"]

    others = {p: p.stat().st_mtime_ns for p in task.glob("*/posterior.nc") if p != nc}
    with caplog.at_level(logging.INFO, logger="shearbatch"):
        res = CliRunner().invoke(bias_run, [
            "--config", "configs/level0.yaml", "--shear-grid", *GRID, "--n-realizations", "3",
            "--batch-size", "16", "--x64", "--no-progress", "--output-dir", str(task),
        ])  # fmt: skip
    assert res.exit_code == 0, res.output
    log = "\n".join(r.getMessage() for r in caplog.records)
    assert f"1 corrupt realization(s) under {task} (e.g. {rid}: posterior.nc truncated" in log
    assert "they are redone" in log and "already complete: 11; to run: 1 in 1 batch(es)" in log
    assert nc.stat().st_size > 100 and os.path.getsize(nc) == nc.stat().st_size
    assert {p: p.stat().st_mtime_ns for p in others} == others  # the others are not redone
    res = CliRunner().invoke(bias_extract, ["--input-dir", str(root), "--output", str(tmp_path / "b.csv")])  # fmt: skip
    assert "ok 12, failed 0, incomplete 0, corrupt 0" in res.output, res.output
