"""Damaged files are found, never counted (issue 36 item 2).

A small campaign (16 x 16 stamps) is made once by the real ``bias-run``; each test damages
one kind of file in a copy of it, then checks that ``bias-extract`` marks the realization
``corrupt`` with a reason, that ``bias-stats`` fits without it, and that the same
``bias-run`` command run again redoes it (its draws bit-identical to the clean run's) and
leaves every other realization's files bit-for-bit and mtime unchanged.
"""

import json
import re
import shutil

import netCDF4
import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from shearbatch.cli import bias_extract, bias_run, bias_stats
from shearbatch.io import integrity, read_posterior
from tests.conftest import write_config

GRID = ["-0.02", "0.02", "0.05"]
N_REAL = 2
N = len(GRID) * N_REAL
RID = "g1_+0.0200_g2_+0.0000_s1"  # the damaged one


def _run_args(config, out):
    return ["--config", config, "--shear-grid", *GRID, "--n-realizations", str(N_REAL),
            "--batch-size", "8", "--x64", "--no-progress", "--output-dir", str(out)]  # fmt: skip


@pytest.fixture(scope="module")
def clean(module_tmp):
    config = write_config(module_tmp / "level0_16.yaml", {"image.size_x": 16, "image.size_y": 16})
    root = module_tmp / "clean"
    res = CliRunner().invoke(bias_run, _run_args(config, root))
    assert res.exit_code == 0, res.output
    return config, root


@pytest.fixture
def camp(clean, tmp_path):
    config, root = clean
    copy = tmp_path / "camp"
    shutil.copytree(root, copy)
    return config, root, copy


def _files(root, skip):
    """(bytes, mtime_ns) of every file of every realization but ``skip``."""
    return {p: (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(root.glob("*/*")) if p.parent.name != skip}  # fmt: skip


def _found_excluded_redone(camp, tmp_path, reason: str, rid: str = RID):
    """bias-extract: ``rid`` corrupt, its reason matching ``reason``; bias-stats fits the
    others only; a resume redoes ``rid`` (bit-identical draws) and nothing else."""
    config, clean_root, root = camp
    out = tmp_path / "summary.csv"
    res = CliRunner().invoke(bias_extract, ["--input-dir", str(root), "--output", str(out)])
    assert res.exit_code == 0, res.output
    assert f"ok {N - 1}, failed 0, incomplete 0, corrupt 1" in res.output, res.output
    row = pd.read_csv(out).set_index("run_id").loc[rid]
    assert row["status"] == "corrupt", row["reason"]
    assert re.search(reason, row["reason"]), row["reason"]
    assert pd.isna(row["g1_mean"]) and pd.isna(row["passed_convergence"])

    st = tmp_path / "stats"
    res = CliRunner().invoke(bias_stats, ["--input", str(out), "--output-dir", str(st), "--no-plots"])  # fmt: skip
    assert res.exit_code in (0, 1, 3), res.output
    results = json.loads((st / "bias_results.json").read_text())
    assert (results["n_corrupt"], results["n_used"]) == (1, N - 1)

    before = _files(root, rid)
    res = CliRunner().invoke(bias_run, _run_args(config, root))
    assert res.exit_code == 0, res.output
    assert _files(root, rid) == before  # the untouched realizations: bit-for-bit, not rewritten
    got, want = read_posterior(root / rid / "posterior.nc"), read_posterior(clean_root / rid / "posterior.nc")  # fmt: skip
    assert all(np.array_equal(got[k], want[k]) for k in ("g1", "g2"))
    sums = [json.loads((r / rid / "convergence.json").read_text())["checksums"] for r in (root, clean_root)]  # fmt: skip
    assert sums[0]["variables"] == sums[1]["variables"]  # deterministic from the data
    res = CliRunner().invoke(bias_extract, ["--input-dir", str(root), "--output", str(tmp_path / "b.csv")])  # fmt: skip
    assert f"ok {N}, failed 0, incomplete 0, corrupt 0" in res.output, res.output


def test_clean_campaign_records_checksums_and_reads_ok(clean):
    _, root = clean
    raw = (root / RID / "convergence.json").read_bytes()
    sums = json.loads(raw)["checksums"]
    assert list(json.loads(raw))[-1] == "checksums" and list(sums)[-1] == "record"
    assert sums["algorithm"] == "crc32"
    assert sums["record"] == integrity.record_checksum(raw, sums["record"])
    assert sums["truth.json"] == integrity.crc((root / RID / "truth.json").read_bytes())
    assert sums["posterior.nc"] == integrity.file_checksum(root / RID / "posterior.nc")
    g1 = read_posterior(root / RID / "posterior.nc")["g1"]
    assert sums["variables"]["posterior/g1"] == integrity.array_checksum(g1)
    assert {"posterior/g2", "observed_data/obs"} <= set(sums["variables"])


def test_old_records_without_checksums_read_ok(camp, tmp_path):
    _, _, root = camp
    for p in root.glob("*/convergence.json"):
        conv = json.loads(p.read_text())
        del conv["checksums"]
        p.write_text(json.dumps(conv))
    res = CliRunner().invoke(bias_extract, ["--input-dir", str(root), "--output", str(tmp_path / "s.csv")])  # fmt: skip
    assert res.exit_code == 0 and f"ok {N}, failed 0, incomplete 0, corrupt 0" in res.output


def test_truncated_posterior(camp, tmp_path):
    nc = camp[2] / RID / "posterior.nc"
    nc.write_bytes(nc.read_bytes()[:-16])
    _found_excluded_redone(camp, tmp_path, r"posterior\.nc.*(truncated|bytes)")


def test_flipped_byte_in_a_draw(camp, tmp_path):
    nc = camp[2] / RID / "posterior.nc"
    g1 = read_posterior(nc)["g1"]
    data = bytearray(nc.read_bytes())
    at = bytes(data).find(np.float64(g1[0, 7]).tobytes())
    assert at > 0 and bytes(data).count(g1[0, :8].tobytes()) == 1
    data[at] ^= 0x01  # the last bit of the mantissa: still a finite, plausible draw
    nc.write_bytes(bytes(data))
    assert np.isfinite(read_posterior(nc)["g1"]).all()
    _found_excluded_redone(camp, tmp_path, r"posterior/g1 checksum mismatch")


@pytest.mark.parametrize("lie", ["shape", "batch_size", "checksum"])
def test_convergence_json_lies(camp, tmp_path, lie):
    p = camp[2] / RID / "convergence.json"
    conv = json.loads(p.read_text())
    var = conv["checksums"]["variables"]["posterior/g1"]
    if lie == "shape":  # two chains of half the draws
        var["shape"] = [2, var["shape"][1] // 2]
    elif lie == "batch_size":
        conv["batch_size"] += 1
    else:
        var["crc32"] = f"{(int(var['crc32'], 16) + 1) % 2**32:08x}"
    p.write_text(json.dumps(conv, indent=1))  # valid JSON, another layout
    _found_excluded_redone(camp, tmp_path, r"convergence\.json: checksum mismatch")


def test_empty_truth_json(camp, tmp_path):
    (camp[2] / RID / "truth.json").write_text("")
    _found_excluded_redone(camp, tmp_path, r"truth\.json unreadable")


def test_truth_json_disagrees_with_the_plan(camp, tmp_path):
    p = camp[2] / RID / "truth.json"
    truth = json.loads(p.read_text())
    truth["g1"] = 0.03
    p.write_text(json.dumps(truth))
    _found_excluded_redone(camp, tmp_path, r"truth\.json: checksum mismatch")


def test_truth_json_disagrees_without_checksums(camp, tmp_path):
    """A record written before checksums: g1 of truth.json is compared with posterior.nc's
    g1_true by bias-extract and with the campaign's plan by the resume."""
    d = camp[2] / RID
    conv = json.loads((d / "convergence.json").read_text())
    del conv["checksums"]
    (d / "convergence.json").write_text(json.dumps(conv))
    truth = json.loads((d / "truth.json").read_text())
    truth["g1"] = 0.03
    (d / "truth.json").write_text(json.dumps(truth))
    _found_excluded_redone(camp, tmp_path, r"g1_true is 0\.02; truth\.json: g1 is 0\.03")


def test_nan_draws(camp, tmp_path):
    with netCDF4.Dataset(camp[2] / RID / "posterior.nc", "a") as ds:
        ds["posterior"]["g1"][0, :3] = np.nan
    _found_excluded_redone(camp, tmp_path, r"posterior/g1 holds 3 non-finite value")
