"""The scrub, ``bias-extract --verify`` (issue 56 item 1): damage after extraction is found.

A small campaign (16 x 16 stamps) is made once by the real ``bias-run``; each test works on
a copy through the real commands (click's CliRunner). The damage that the caches cannot
see: one byte of a ``posterior.nc`` flipped in place after extraction, its modification
time put back (``os.utime``), so the realization's key (:func:`shearbatch.io.partials.
realization_key`) still holds and a rerun of ``bias-extract`` takes its row from the
partial, ``ok`` (the known gap, checked here as it stands), and ``bias-stats`` reuses
``summary.csv``. The scrub reads every file again, names the realization, the file and the
checksums that differ, says the damage came after extraction (a partial trusted the
content it no longer has), exits 1, and leaves a record that ``bias-stats`` reports.
"""

import json
import os
import re
import shutil
import zlib

import pytest
from click.testing import CliRunner

from shearbatch.analysis import scrub
from shearbatch.app import inputs
from shearbatch.cli import bias_extract, bias_run, bias_stats
from shearbatch.io import partials as pio
from tests.conftest import write_config

GRID = ["-0.02", "0.02"]
N_REAL = 2
N = len(GRID) * N_REAL
RID = "g1_+0.0200_g2_+0.0000_s1"  # the damaged one


@pytest.fixture(scope="module")
def clean(module_tmp):
    config = write_config(module_tmp / "level0_16.yaml", {"image.size_x": 16, "image.size_y": 16})
    root = module_tmp / "clean"
    res = CliRunner().invoke(bias_run, [
        "--config", config, "--shear-grid", *GRID, "--n-realizations", str(N_REAL),
        "--batch-size", "8", "--x64", "--no-progress", "--output-dir", str(root)])  # fmt: skip
    assert res.exit_code == 0, res.output
    return root


@pytest.fixture
def root(clean, tmp_path):
    copy = tmp_path / "camp"
    shutil.copytree(clean, copy)
    return copy


def _flip_in_place(path):
    """One byte of ``path`` (the middle one) inverted in place, its size and times kept;
    ``(size, crc32 before, crc32 after)`` as 8 hex digits."""
    st = path.stat()
    data = bytearray(path.read_bytes())
    before = f"{zlib.crc32(data):08x}"
    at = len(data) // 2
    data[at] ^= 0xFF
    with open(path, "r+b") as fh:  # in place: the same inode, no rename
        fh.seek(at)
        fh.write(bytes([data[at]]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_mtime_ns == st.st_mtime_ns and path.stat().st_size == st.st_size
    return st.st_size, before, f"{zlib.crc32(data):08x}"


def _extract(root, *more):
    return CliRunner().invoke(bias_extract, ["--input-dir", str(root), "--workers", "1", *more])


def _stats(root):
    """bias-stats on the campaign's summary.csv (no report: its stamps need no checking here)."""
    res = CliRunner().invoke(bias_stats, ["--input", str(root / "summary.csv"), "--output-dir",
                                          str(root.parent / "stats"), "--no-plots"])  # fmt: skip
    assert res.exit_code in (0, 1, 3), res.output
    return res.output


def test_a_byte_flipped_after_extraction_with_its_mtime_restored_is_found(root):
    res = _extract(root)
    assert res.exit_code == 0, res.output
    assert f"ok {N}, failed 0, incomplete 0, corrupt 0" in res.output, res.output
    assert "inputs never verified (bias-extract --verify" in _stats(root)
    # the partial records what its read verified: the record's checksums, which the files matched
    sums = json.loads((root / RID / "convergence.json").read_text())["checksums"]
    (part,) = [pio.Partial(p) for p in sorted((root / pio.PARTIALS).glob("*.nc"))]
    trusted = dict(zip([r["run_id"] for r in part.rows], part.trusted, strict=True))
    assert trusted[RID] == {"convergence.json": sums["record"], "truth.json": sums["truth.json"],
                            "posterior.nc": sums["posterior.nc"]}  # fmt: skip

    nc = root / RID / "posterior.nc"
    key = pio.realization_key(root / RID)
    size, was, now = _flip_in_place(nc)
    assert (size, was) == (sums["posterior.nc"]["bytes"], sums["posterior.nc"]["crc32"])
    assert pio.realization_key(root / RID) == key  # what the caches look at did not change

    # the known gap: the rerun takes every row from the partial, the damaged one still ok
    res = _extract(root)
    assert res.exit_code == 0, res.output
    assert f"ok {N}, failed 0, incomplete 0, corrupt 0" in res.output, res.output
    assert f"{N} realization(s) from partials, 0 read" in res.output, res.output
    assert inputs.summary_is_fresh(root / "summary.csv", root)  # bias-stats would reuse it

    res = _extract(root, "--verify")
    assert res.exit_code == 1, res.output
    lines = res.output.splitlines()
    assert lines[0].startswith(f"verified {N} realization(s), every file read again against its "
                               f"checksums: {N - 1} whole, 1 damaged (1 after extraction)")  # fmt: skip
    assert lines[0].endswith(f"-> {root / 'summary.verified.json'}"), lines[0]
    whole_file = (f"damaged: {RID}/posterior.nc: {size} bytes, crc32 {now}, recorded {size} bytes, "
                  f"crc32 {was} (after extraction: {pio.PARTIALS}/{part.path.name} trusted "
                  f"{size} bytes, crc32 {was})")  # fmt: skip
    assert lines[1] == whole_file, res.output
    # then what netCDF makes of it: the variable whose bytes differ, or that none does
    assert all(ln.startswith(f"damaged: {RID}/posterior.nc: ") for ln in lines[2:]), res.output
    assert re.search(r"variable \S+: .* crc32 [0-9a-f]{8}, recorded|outside their data|netCDF "
                     "cannot read it", "\n".join(lines[2:])), res.output  # fmt: skip

    rec = json.loads((root / "summary.verified.json").read_text())
    assert rec["format"] == scrub.FORMAT and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ",
                                                          rec["verified_at"])  # fmt: skip
    assert (rec["realizations"], rec["whole"], rec["damaged"],
            rec["damaged_after_extraction"]) == (N, N - 1, 1, 1)  # fmt: skip
    assert rec["damage"][0] == {"realization": RID, "file": "posterior.nc",
                                "what": f"{size} bytes, crc32 {now}, recorded {size} bytes, "
                                        f"crc32 {was}",
                                "trusted_by": f"{pio.PARTIALS}/{part.path.name}",
                                "trusted": f"{size} bytes, crc32 {was}"}  # fmt: skip
    want = (f"inputs last verified {rec['verified_at']}: {N} realization(s), 1 damaged "
            "(1 after extraction)")  # fmt: skip
    assert want in _stats(root).splitlines()


def test_damage_before_extraction_is_not_called_after_it_and_a_whole_campaign_exits_0(root):
    res = _extract(root, "--verify")
    assert res.exit_code == 0, res.output
    assert f": {N} whole, 0 damaged (0 after extraction)" in res.output, res.output
    size, was, now = _flip_in_place(root / RID / "posterior.nc")
    for extracted in (False, True):  # never extracted; then extracted, read corrupt
        if extracted:
            res = _extract(root)
            assert f"ok {N - 1}, failed 0, incomplete 0, corrupt 1" in res.output, res.output
        res = _extract(root, "--verify")
        assert res.exit_code == 1, res.output
        assert "1 damaged (0 after extraction)" in res.output, res.output
        assert (f"damaged: {RID}/posterior.nc: {size} bytes, crc32 {now}, recorded {size} bytes, "
                f"crc32 {was} (not trusted by any extraction: damaged before it, or never "
                "extracted)") in res.output.splitlines(), res.output  # fmt: skip


def test_a_realization_removed_or_its_record_edited_after_extraction_is_found(root):
    assert _extract(root).exit_code == 0
    gone = "g1_-0.0200_g2_+0.0000_s0"
    shutil.rmtree(root / gone)
    conv = root / RID / "convergence.json"
    text = conv.read_text()
    conv.write_text(text.replace('"status": "ok"', '"status":  "ok"', 1))  # one space more
    res = _extract(root, "--verify")
    assert res.exit_code == 1, res.output
    assert f"verified {N} realization(s)" in res.output and "2 damaged (2 after extraction)" in (
        res.output)  # fmt: skip
    out = res.output.splitlines()
    assert any(
        ln.startswith(f"damaged: {gone}/directory: missing (after extraction: ") for ln in out
    )
    assert any(re.match(rf"damaged: {re.escape(RID)}/convergence.json: record checksum [0-9a-f]{{8}}, "
                        r"recorded [0-9a-f]{8} \(after extraction: .* trusted crc32 "
                        r"[0-9a-f]{8}\)$", ln) for ln in out), res.output  # fmt: skip


def test_verify_with_array_flags_is_one_line_exit_2_and_documented(clean):
    res = CliRunner().invoke(bias_extract, ["--input-dir", str(clean), "--verify",
                                            "--array-task-id", "0", "--array-task-count", "2"])  # fmt: skip
    assert res.exit_code == 2, res.output
    (line,) = [ln for ln in res.output.splitlines() if ln.startswith("Error: ")]
    assert "--verify: exclusive with --array-task-id" in line, res.output
    assert not (clean / "summary.verified.json").exists()
    helptext = " ".join(CliRunner().invoke(bias_extract, ["--help"]).output.split())
    assert "--verify" in helptext and "exit 1 when damage is found" in helptext, helptext
    assert "with --verify, 1 damage found" in helptext, helptext
