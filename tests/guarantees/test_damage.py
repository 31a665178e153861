"""Damaged files are found, never counted (issue 36 item 2), and deleting a record's
checksums is no way around them (issue 44 item 1).

A small campaign (16 x 16 stamps) is made once by the real ``bias-run``; each test damages
one kind of file in a copy of it, then checks that ``bias-extract`` marks the realization
``corrupt`` with a reason, that ``bias-stats`` fits without it, and that the same
``bias-run`` command run again redoes it (its draws bit-identical to the clean run's) and
leaves every other realization's files bit-for-bit and mtime unchanged. A record without
checksums reads as before only in a campaign whose ``campaign.json`` says it was written
before checksums existed (:func:`tests.conftest.as_before_checksums` makes one).
"""

import json
import re
import shutil

import netCDF4
import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from shearbatch._version import code_version
from shearbatch.cli import bias_extract, bias_run, bias_stats
from shearbatch.io import inspect_realization, integrity, read_posterior
from shearbatch.io.writer import dumps_json
from tests.conftest import as_before_checksums, write_config

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
    # the code version that wrote it, in each record and in the manifest with its format
    assert json.loads(raw)["code"] == code_version()
    assert set(code_version()) == {"commit", "dirty", "fingerprint"}
    man = json.loads((root / "campaign.json").read_text())
    assert man["code"] == code_version() and man[integrity.FORMAT_KEY] == integrity.RECORD_FORMAT


@pytest.mark.parametrize("same_code", [False, True], ids=["method-code-differs", "same-code"])
def test_extract_reports_a_campaign_written_by_several_code_versions(camp, tmp_path, same_code,
                                                                     caplog):  # fmt: skip
    """Realizations recorded as written at another commit (dirty): bias-extract names the
    commits and counts in one line, and says whether the method code (its fingerprint)
    differs, so results may; summary.csv says which row came from which."""
    root = camp[2]
    other = {"commit": "f" * 40, "dirty": True,
             "fingerprint": code_version()["fingerprint"] if same_code else "0" * 16}  # fmt: skip
    moved = sorted(p.parent for p in root.glob("*_s1/convergence.json"))
    for d in moved:
        _reseal(d, lambda conv: conv.update(code=other))
    out, df = _extract(root, tmp_path / "s.csv")
    assert f"ok {N}, failed 0, incomplete 0, corrupt 0" in out, out  # sealed again: whole
    lines = [r.getMessage() for r in caplog.records if "code versions" in r.getMessage()]
    assert len(lines) == 1 and "\n" not in lines[0], lines  # one line, a warning
    line = lines[0]
    here = code_version()["commit"]
    here = f"{here[:12]}{'+dirty' if code_version()['dirty'] else ''}" if here else "no git commit"
    assert f"{here} x{N - len(moved)}, ffffffffffff+dirty x{len(moved)}" in line, line
    if same_code:
        assert f"the same method code (fingerprint {other['fingerprint']})" in line, line
    else:
        assert "the method code differs" in line and "do not fit them together" in line, line
    assert (df.loc[[d.name for d in moved], "code_commit"] == "f" * 40).all()
    assert df.loc[[d.name for d in moved], "code_dirty"].all()
    assert (df["code_fingerprint"] == other["fingerprint"]).sum() == (
        N if same_code else len(moved)
    )


def _extract(root, out):
    res = CliRunner().invoke(bias_extract, ["--input-dir", str(root), "--output", str(out)])
    assert res.exit_code == 0, res.output
    return res.output, pd.read_csv(out).set_index("run_id")


def _flip_a_draw(nc):
    """The last mantissa bit of one g1 draw flipped: still a finite, plausible draw."""
    g1 = read_posterior(nc)["g1"]
    data = bytearray(nc.read_bytes())
    at = bytes(data).find(np.float64(g1[0, 7]).tobytes())
    assert at > 0 and bytes(data).count(g1[0, :8].tobytes()) == 1
    data[at] ^= 0x01
    nc.write_bytes(bytes(data))
    assert np.isfinite(read_posterior(nc)["g1"]).all()


def _edit_record(d, edit):
    """``edit`` (a function of the parsed record) applied to ``d``'s convergence.json, as
    JSON of its own layout (no longer sealed)."""
    p = d / "convergence.json"
    conv = json.loads(p.read_text())
    edit(conv)
    p.write_text(json.dumps(conv))


def _reseal(d, edit):
    """``edit`` applied to ``d``'s convergence.json and the record sealed again, as the
    writer seals it (its own checksum recomputed: a record another version wrote)."""
    p = d / "convergence.json"
    conv = json.loads(p.read_text())
    edit(conv)
    conv["checksums"]["record"] = "0" * 8
    p.write_text(integrity.seal(dumps_json(conv)))


@pytest.mark.parametrize(("drop", "reason"), [
    (("checksums",), r"^convergence\.json: no checksums key \(its code key says"),
    (("checksums", "code"), r"^convergence\.json: no checksums key \(campaign\.json: "
                            r"record_format 2, written with them\)$"),
    ((), r"^convergence\.json: checksums is not a mapping"),
], ids=["checksums", "checksums-and-code", "checksums-null"])  # fmt: skip
def test_flipped_byte_with_the_checksums_deleted(camp, tmp_path, drop, reason):
    """Deleting a damaged realization's checksums from its record (or its code version
    too, or nulling them) does not get it counted in a campaign this version wrote: it is
    corrupt, named, left out and redone."""
    _flip_a_draw(camp[2] / RID / "posterior.nc")

    def strip(conv):
        for k in drop:
            del conv[k]
        if not drop:
            conv["checksums"] = None

    _edit_record(camp[2] / RID, strip)
    _found_excluded_redone(camp, tmp_path, reason)


def test_before_checksums_a_record_without_them_reads_as_before(camp, tmp_path):
    """Its pre-checksum counterpart: in a campaign whose campaign.json says it was written
    before checksums existed, records without them read ok (the flipped draw cannot be
    told); one that names the code version that wrote it is not exempt."""
    _, clean_root, root = camp
    _flip_a_draw(root / RID / "posterior.nc")
    as_before_checksums(root)
    out, df = _extract(root, tmp_path / "s.csv")
    assert f"ok {N}, failed 0, incomplete 0, corrupt 0" in out, out
    _, want = _extract(clean_root, tmp_path / "clean.csv")
    # read as it is: the one-bit damage is not seen, the realization is counted
    assert df.loc[RID, "status"] == "ok" and df.loc[RID, "passed_convergence"]
    assert df.loc[RID, "g1_mean"] == pytest.approx(want.loc[RID, "g1_mean"], rel=1e-9)
    other = next(p.parent for p in sorted(root.glob("*/convergence.json")) if p.parent.name != RID)
    _edit_record(other, lambda conv: conv.update(code=code_version()))
    out, df = _extract(root, tmp_path / "s2.csv")
    assert f"ok {N - 1}, failed 0, incomplete 0, corrupt 1" in out, out
    assert df.loc[other.name, "reason"].startswith("convergence.json: no checksums key (its code")


@pytest.mark.parametrize(("manifest", "reason"), [
    ("absent", r"no campaign\.json beside it says its campaign predates checksums"),
    ("after", r"campaign\.json created 2026-11-26T15:00:49\+00:00, after checksums"),
    ("no-date", r"campaign\.json: no created_at"),
    ("unreadable", r"campaign\.json unreadable: not a JSON mapping"),
])  # fmt: skip
def test_only_a_manifest_from_before_checksums_exempts_a_record(camp, manifest, reason):
    """A campaign.json without record_format (written before this version) exempts its
    records only when created before checksums existed; no manifest, or one that cannot
    be read or tell when, exempts none (the resume's inspection and bias-extract alike)."""
    root = camp[2]
    as_before_checksums(root)
    man = root / "campaign.json"
    if manifest == "absent":
        man.unlink()
    elif manifest == "unreadable":
        man.write_text("{")
    else:
        doc = json.loads(man.read_text())
        if manifest == "after":
            doc["created_at"] = integrity.CHECKSUMS_SINCE.isoformat()
        else:
            del doc["created_at"]
        man.write_text(json.dumps(doc))
    ins = inspect_realization(root / RID)
    assert ins.status == "corrupt" and re.search(reason, ins.reason), ins.reason
    assert ins.reason.startswith("convergence.json: no checksums key (")


def test_a_campaign_from_before_checksums_grown_by_this_version_stays_one(camp, tmp_path):
    """Growing a pre-checksum campaign keeps its manifest's creation time and the absence
    of record_format: its old records still read, its new ones carry checksums and code."""
    config, _, root = camp
    as_before_checksums(root)
    created = json.loads((root / "campaign.json").read_text())["created_at"]
    before = _files(root, None)
    args = _run_args(config, root)
    args[args.index("--n-realizations") + 1] = str(N_REAL + 1)
    res = CliRunner().invoke(bias_run, args)
    assert res.exit_code == 0, res.output
    assert {p: v for p, v in _files(root, None).items() if p in before} == before  # not redone
    man = json.loads((root / "campaign.json").read_text())
    assert man["extended"] and man["created_at"] == created
    assert integrity.FORMAT_KEY not in man
    new = [json.loads(p.read_text()) for p in root.glob(f"*_s{N_REAL}/convergence.json")]
    assert len(new) == len(GRID) and all("checksums" in c and "code" in c for c in new)
    out, _ = _extract(root, tmp_path / "s.csv")
    assert f"ok {N + len(GRID)}, failed 0, incomplete 0, corrupt 0" in out, out


def test_truncated_posterior(camp, tmp_path):
    nc = camp[2] / RID / "posterior.nc"
    nc.write_bytes(nc.read_bytes()[:-16])
    _found_excluded_redone(camp, tmp_path, r"posterior\.nc.*(truncated|bytes)")


def test_flipped_byte_in_a_draw(camp, tmp_path):
    _flip_a_draw(camp[2] / RID / "posterior.nc")
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
    """A record written before checksums (in a campaign from then): g1 of truth.json is
    compared with posterior.nc's g1_true by bias-extract and with the campaign's plan by
    the resume."""
    d = camp[2] / RID
    as_before_checksums(camp[2], records=False)
    _edit_record(d, lambda conv: [conv.pop(k) for k in ("checksums", "code")])
    truth = json.loads((d / "truth.json").read_text())
    truth["g1"] = 0.03
    (d / "truth.json").write_text(json.dumps(truth))
    _found_excluded_redone(camp, tmp_path, r"g1_true is 0\.02; truth\.json: g1 is 0\.03")


def test_nan_draws(camp, tmp_path):
    with netCDF4.Dataset(camp[2] / RID / "posterior.nc", "a") as ds:
        ds["posterior"]["g1"][0, :3] = np.nan
    _found_excluded_redone(camp, tmp_path, r"posterior/g1 holds 3 non-finite value")
