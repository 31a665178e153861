"""Stage 2 by partials and the streamed pooled fit (issue 43), on interim-model realizations
written by the real writer (no JAX, no compile).

- The streamed fit (galaxies read from the partials a block at a time, all grid points in
  one pass) gives the in-memory fit's estimates, curvature errors and jackknife m, c and
  errors to the fits' own numerical error: both stop within ``tol = 1e-10`` in g of the
  maximum (the streamed fit skips the in-memory fit's last sub-tolerance step), so g agrees
  to 2e-10 and m to 2e-10 / 0.02 = 1e-8, with blocks of 7 galaxies (every block split
  across realizations and grid points). Comparing at rounding would fail: the paths differ.
- Array tasks' partials cover the campaign: the reduction then reads no realization and
  writes the rows a whole extraction writes; a grown campaign is read only where it grew.
- Damage: a partial with a flipped byte, a partial left stale by a realization redone, a
  partial duplicated under another name are each found (counted), the realizations they
  held are read again or counted once, and the result is the one of clean partials.
- A partial changed after the index was written is refused by the fit, naming it.
- ``bias-extract --array-task-id`` without ``--array-task-count``: exit 2, one line.
"""

import json
import shutil

import pytest
from click.testing import CliRunner

from shearbatch.analysis import partials as ap
from shearbatch.analysis import pooled, summary_table
from shearbatch.analysis.streamed import PartialSource, streamed_fits
from shearbatch.cli import bias_extract
from shearbatch.io import partials as pio

from .test_extract_workers import interim_realization

SEEDS = 8
GRID = ((0.02, 0.0), (-0.02, 0.0), (0.02, 0.02), (-0.02, 0.02))


def _campaign(root, seeds=range(SEEDS)):
    ids = []
    for s in seeds:
        for g in GRID:
            d = interim_realization(root, seed=s, g=g)
            ids.append(d.name)
    man = root / "campaign.json"
    old = json.loads(man.read_text())["plan"]["run_ids"] if man.is_file() else []
    man.write_text(json.dumps({"plan": {"run_ids": old + ids}}))
    return ids


def _fits_in_memory(root):
    rows = summary_table.extract_campaign(root, workers=1)
    pop = pooled.from_arrays(summary_table.population_arrays(rows))
    return pooled.pooled_fits(summary_table.summary_frame(rows), pop, paired=False, threads=1)


def _fits_streamed(root, tmp, block=7):
    rows, index = ap.gather(root, summary_table.DEFAULT_THRESHOLDS, workers=1)
    idx = ap.write_index(index, tmp / "summary.partials.json")
    fits = streamed_fits(summary_table.summary_frame(rows), PartialSource(idx), paired=False,
                         threads=1, block=block)  # fmt: skip
    return fits, rows, index


TOL_G = 2e-10  # two fits that each stop within tol = 1e-10 of the maximum
TOL_M = TOL_G / 0.02  # in m (and c / 0.02): the grid's |g_true|


def _same_fits(a, b):
    (fa, ra), (fb, rb) = a, b
    for c in ("g1", "g2"):
        for key, tol in (("m", TOL_M), ("c", TOL_G), ("m_err", TOL_M), ("c_err", TOL_G)):
            x, y = getattr(fa[c], key), getattr(fb[c], key)
            if x is None:
                assert y is None, (c, key)
            else:
                assert y == pytest.approx(x, rel=0, abs=tol), (c, key)
    for pa, pb in zip(ra.grid_points, rb.grid_points, strict=True):
        for key in ("g1", "g2", "g1_err", "g2_err"):
            assert getattr(pb, key) == pytest.approx(getattr(pa, key), rel=0, abs=TOL_G), key
        for key in ("n_galaxies", "n_collapsed", "status"):
            assert getattr(pb, key) == getattr(pa, key), key
    assert ra.n_galaxies == rb.n_galaxies and ra.n_seeds == rb.n_seeds


@pytest.fixture(scope="module")
def camp(tmp_path_factory):
    root = tmp_path_factory.mktemp("partials") / "camp"
    _campaign(root)
    return root, _fits_in_memory(root)


def _fresh(camp, tmp_path):
    root = tmp_path / "camp"
    shutil.copytree(camp[0], root)
    return root


def test_streamed_fit_equals_the_in_memory_fit(camp, tmp_path):
    root = _fresh(camp, tmp_path)
    fits, _, index = _fits_streamed(root, tmp_path)
    _same_fits(camp[1], fits)
    assert fits[1].streamed and fits[1].passes >= 3
    assert index["counts"]["read"] == SEEDS * len(GRID)


def test_array_task_partials_cover_the_campaign_and_the_reduction_reads_none(camp, tmp_path):
    root = _fresh(camp, tmp_path)
    for t in range(3):
        path, n = ap.extract_slice(root, t, 3, summary_table.DEFAULT_THRESHOLDS)
        assert path.name == f"task-{t:05d}-of-00003.nc" and n > 0
        assert pio.verify(path) is None
        kept, lean = pio.Partial(path), pio.Partial(path, keep_rows=False)
        # the streamed fit's lean partial: the run ids in memory, the rows read on demand
        assert lean.run_ids == [r["run_id"] for r in kept.rows] and lean._rows is None
        assert summary_table.summary_text(lean.rows) == summary_table.summary_text(kept.rows)
    fits, rows, index = _fits_streamed(root, tmp_path)
    assert index["counts"]["from_partials"] == SEEDS * len(GRID)
    assert index["counts"]["read"] == 0
    whole = summary_table.extract_campaign(root, workers=1)
    assert summary_table.summary_text(rows) == summary_table.summary_text(whole)
    _same_fits(camp[1], fits)


def test_a_grown_campaign_is_read_only_where_it_grew(camp, tmp_path):
    root = _fresh(camp, tmp_path)
    _fits_streamed(root, tmp_path)
    _campaign(root, seeds=range(SEEDS, SEEDS + 2))
    fits, _rows, index = _fits_streamed(root, tmp_path)
    assert index["counts"]["from_partials"] == SEEDS * len(GRID)
    assert index["counts"]["read"] == 2 * len(GRID)
    _same_fits(_fits_in_memory(root), fits)


def test_a_partial_with_a_flipped_byte_is_found_and_its_realizations_read_again(camp, tmp_path):
    root = _fresh(camp, tmp_path)
    for t in range(2):
        ap.extract_slice(root, t, 2, summary_table.DEFAULT_THRESHOLDS)
    bad = root / "partials" / "task-00001-of-00002.nc"
    data = bytearray(bad.read_bytes())
    data[len(data) // 2] ^= 0x10  # inside the draws
    bad.write_bytes(bytes(data))
    assert "CRC-32" in pio.verify(bad)
    fits, _, index = _fits_streamed(root, tmp_path)
    assert index["counts"]["damaged_partials"] == 1
    assert index["counts"]["read"] == SEEDS * len(GRID) // 2
    _same_fits(camp[1], fits)


def test_a_partial_left_stale_by_a_redone_realization_is_not_used_for_it(camp, tmp_path):
    root = _fresh(camp, tmp_path)
    ap.extract_slice(root, 0, 1, summary_table.DEFAULT_THRESHOLDS)
    # a realization redone (other data: another seed's galaxies under the same name)
    rid = "g1_+0.0200_g2_+0.0000_s3"
    shutil.rmtree(root / rid)
    other = interim_realization(tmp_path / "other", seed=99, g=(0.02, 0.0))
    shutil.copytree(other, root / rid)
    fits, rows, index = _fits_streamed(root, tmp_path)
    assert index["counts"]["stale"] == 1 and index["counts"]["read"] == 1
    _same_fits(_fits_in_memory(root), fits)
    row = next(r for r in rows if r["run_id"] == rid)
    assert row["g1_mean"] == pytest.approx(summary_table.read_realization(root / rid)["g1_mean"])


def test_a_partial_duplicated_under_another_name_is_counted_once(camp, tmp_path):
    root = _fresh(camp, tmp_path)
    src = ap.extract_slice(root, 0, 1, summary_table.DEFAULT_THRESHOLDS)[0]
    for suffix in ("", ".sum.json"):
        shutil.copy(f"{src}{suffix}", f"{root / 'partials' / 'zz-copy.nc'}{suffix}")
    fits, _, index = _fits_streamed(root, tmp_path)
    assert index["counts"]["duplicates"] == SEEDS * len(GRID)
    assert index["counts"]["read"] == 0
    assert len(index["partials"]) == 1
    _same_fits(camp[1], fits)


def test_a_partial_changed_after_the_index_is_refused_by_the_fit(camp, tmp_path):
    root = _fresh(camp, tmp_path)
    rows, index = ap.gather(root, summary_table.DEFAULT_THRESHOLDS, workers=1)
    idx = ap.write_index(index, tmp_path / "summary.partials.json")
    part = root / index["partials"][0]["path"] if not index["partials"][0]["path"].startswith(
        "/") else index["partials"][0]["path"]  # fmt: skip
    with open(part, "ab") as fh:
        fh.write(b"\0")
    with pytest.raises(ValueError, match="not the one bias-extract indexed"):
        streamed_fits(
            summary_table.summary_frame(rows), PartialSource(idx), paired=False, threads=1
        )


def test_array_task_flags_are_checked_before_anything_is_read(camp, tmp_path):
    root = _fresh(camp, tmp_path)
    res = CliRunner().invoke(bias_extract, ["--input-dir", str(root), "--array-task-id", "0"])
    assert res.exit_code == 2 and "--array-task-count" in res.output
    assert len(res.output.strip().splitlines()) == 1
    res = CliRunner().invoke(bias_extract, ["--input-dir", str(root), "--array-task-id", "3",
                                            "--array-task-count", "3"])  # fmt: skip
    assert res.exit_code == 2 and "--array-task-id" in res.output
    assert not (root / "partials").exists()
    res = CliRunner().invoke(bias_extract, ["--input-dir", str(root), "--array-task-id", "1",
                                            "--array-task-count", "3", "--workers", "1"])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert (root / "partials" / "task-00001-of-00003.nc").is_file()


def test_grid_points_that_stop_on_different_passes(camp, tmp_path, monkeypatch):
    """A grid point started at its maximum stops after one pass while the others go on:
    later passes skip its galaxies (they once indexed past the still-fitted points and
    raised IndexError on a 1,200-seed Level 2 campaign) and every point ends where the
    in-memory fit does."""
    root = _fresh(camp, tmp_path)
    start = pooled.start_points
    best = [(p.g1, p.g2) for p in camp[1][1].grid_points]

    def starts(rows, points):
        out = start(rows, points)
        for i in range(len(points) // 2, len(points)):  # the last points: at their maximum
            out[points[i]] = best[i]
        return out

    monkeypatch.setattr(pooled, "start_points", starts)
    fits, _, _ = _fits_streamed(root, tmp_path)
    _same_fits(camp[1], fits)
    steps = [p.n_steps for p in fits[1].grid_points]
    assert max(steps[len(steps) // 2 :]) < min(steps[: len(steps) // 2]), steps


def test_a_partial_netcdf_cannot_write_is_one_line_exit_4_and_leaves_nothing(
    camp, tmp_path, monkeypatch
):
    """netCDF-C reports a full disk as its own error ("NetCDF: HDF error", a RuntimeError,
    met by the chaos soak as a traceback): an array task's bias-extract says in one line
    which partial it could not write, exits 4 (as bias-run's write failures), and leaves
    neither the partial, its temporary file nor a checksum record."""
    import netCDF4

    root = _fresh(camp, tmp_path)

    real = netCDF4.Dataset

    class Full:  # a real file whose variables cannot be written (the disk filled up)
        def __init__(self, *a, **k):
            self._ds = real(*a, **k)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self._ds.close()
            return False

        def createVariable(self, *a, **k):  # netCDF4's name
            raise RuntimeError("NetCDF: HDF error")

        def __getattr__(self, name):
            return getattr(self._ds, name)

    monkeypatch.setattr(netCDF4, "Dataset", Full)
    res = CliRunner().invoke(bias_extract, ["--input-dir", str(root), "--array-task-id", "0",
                                            "--array-task-count", "2", "--no-progress"])  # fmt: skip
    assert res.exit_code == 4, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: cannot write "), res.output
    assert "task-00000-of-00002.nc" in lines[0] and "NetCDF: HDF error" in lines[0]
    assert not list((root / "partials").glob("*")) if (root / "partials").exists() else True
