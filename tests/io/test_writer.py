"""The per-realization writer: the netCDF4 file equals what xarray writes (ArviZ layout),
umask, orphaned temporary files, and the background writer pool's failure semantics."""

import errno
import os
import stat
import subprocess
import sys
from datetime import UTC, datetime

import arviz as az
import numpy as np
import pytest
import xarray as xr

from shearbatch.io import (
    POSTERIOR,
    WriteError,
    WriterPool,
    atomic,
    clean_orphans,
    realization_status,
    write_realization,
)
from shearbatch.io import writer as w
from shearbatch.io.variables import annotate


def record(seed: int = 0, dtype=np.float64, n_gal: int = 2):
    rng = np.random.default_rng(seed)
    return {
        "posterior": {
            "g1": rng.normal(size=(2, 50)).astype(dtype),
            "g2": rng.normal(size=(2, 50)).astype(dtype),
            "flux": rng.normal(size=(2, 50, n_gal)).astype(dtype),
        },
        "sample_stats": {
            "diverging": rng.random((2, 50)) < 0.1,
            "tree_depth": rng.integers(0, 5, (2, 50)).astype(np.int32),
            "lp": rng.normal(size=(2, 50)).astype(dtype),
        },
        "observed": rng.normal(size=(n_gal, 16, 12)).astype(dtype),
        "attrs": {"inference_method": "nuts", "run_id": f"r{seed}", "seed": seed,
                  "g1_true": 0.01, "g2_true": np.float64(-0.02), "batch_size": np.int64(4),
                  "config_hash": "abc", "dtype": np.dtype(dtype).name, "note": None},
        "truth": {"run_id": f"r{seed}", "g1": 0.01},
        "convergence": {"run_id": f"r{seed}", "status": "ok", "x": float("nan")},
    }  # fmt: skip


def xarray_oracle(rec) -> xr.DataTree:
    """What the writer wrote before (xarray's DataTree.to_netcdf), built independently."""
    post = xr.Dataset(
        {k: (("chain", "draw", "galaxy")[: v.ndim], v) for k, v in rec["posterior"].items()}
    )
    post = post.assign_coords(chain=np.arange(2), draw=np.arange(50), galaxy=np.arange(2))
    stats = xr.Dataset({k: (("chain", "draw"), v) for k, v in rec["sample_stats"].items()})
    stats = stats.assign_coords(chain=np.arange(2), draw=np.arange(50))
    obs = xr.Dataset({"obs": (("galaxy", "y", "x"), rec["observed"])})
    obs = obs.assign_coords(galaxy=np.arange(rec["observed"].shape[0]))
    for ds in (post, stats, obs):
        ds.attrs.update(created_at="T", inference_library="shearbatch")
        annotate(ds)
    attrs = {k: v for k, v in w.to_strict_json(rec["attrs"]).items() if v is not None}
    attrs.setdefault("shearbatch_version", w.__version__)
    return xr.DataTree.from_dict(
        {"/": xr.Dataset(attrs=attrs), "posterior": post, "sample_stats": stats,
         "observed_data": obs}
    )  # fmt: skip


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_netcdf4_file_reads_back_exactly_like_the_xarray_written_one(tmp_path, dtype):
    rec = record(dtype=dtype)
    write_realization(tmp_path / "new", **rec)
    xarray_oracle(rec).to_netcdf(tmp_path / "old.nc", engine="netcdf4")
    # closed at the end: a file handle left to the garbage collector may be finalised on
    # a writer thread of a later test, concurrently with its netCDF write
    new = xr.open_datatree(tmp_path / "new" / POSTERIOR)
    old = xr.open_datatree(tmp_path / "old.nc")
    try:
        _same_files(new, old)
    finally:
        new.close()
        old.close()
    idata = az.from_netcdf(tmp_path / "new" / POSTERIOR)
    assert idata.posterior["flux"].dims == ("chain", "draw", "galaxy")


def _same_files(new, old) -> None:
    assert new.attrs == old.attrs
    for group in ("posterior", "sample_stats", "observed_data"):
        a, b = new[group].to_dataset(), old[group].to_dataset()
        assert a.attrs["inference_library"] == "shearbatch"
        assert datetime.fromisoformat(a.attrs["created_at"]).tzinfo == UTC
        xr.testing.assert_identical(a.drop_attrs(deep=False), b.drop_attrs(deep=False))
        for k in a.variables:  # same on-disk encoding: dtype and fill value
            assert a[k].dtype == b[k].dtype
            fa, fb = a[k].encoding.get("_FillValue"), b[k].encoding.get("_FillValue")
            assert (fa is None and fb is None) or (np.isnan(fa) and np.isnan(fb))
    assert new["sample_stats"]["diverging"].dtype == bool


def test_files_honour_the_umask(tmp_path):
    code = (
        "import os, sys; os.umask(int(sys.argv[2], 8)); sys.path.insert(0, sys.argv[3]);"
        "from test_writer import record; from shearbatch.io import write_realization;"
        "write_realization(sys.argv[1], **record())"
    )
    here = os.path.dirname(__file__)
    for mask, want in (("022", 0o644), ("077", 0o600)):
        d = tmp_path / mask
        subprocess.run([sys.executable, "-c", code, str(d), mask, here], check=True)
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in d.iterdir()}
        assert modes == dict.fromkeys(("truth.json", POSTERIOR, "convergence.json"), want)
        assert stat.S_IMODE(d.stat().st_mode) == 0o777 & ~int(mask, 8)


def test_orphans_of_dead_writers_on_this_host_are_removed_and_no_others(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    pid_dead = int(dead.stdout)
    host = atomic.host_tag()
    names = {
        f".posterior.nc.{host}.{pid_dead}.0a1b2c3d.tmp": True,  # killed writer: removed
        f".truth.json.{host}.{pid_dead}.0a1b2c3e.tmp": True,
        f".posterior.nc.{host}.{os.getppid()}.0a1b2c3f.tmp": False,  # a live process
        f".posterior.nc.otherhost.{pid_dead}.0a1b2c40.tmp": False,  # another node's
        ".posterior.nc.k2j3h4.tmp": False,  # not provably ours
        "notes.tmp": False,
    }
    for n in names:
        (tmp_path / n).write_bytes(b"x")
    assert clean_orphans(tmp_path) == 2
    assert {p.name for p in tmp_path.iterdir()} == {n for n, gone in names.items() if not gone}
    assert clean_orphans(tmp_path / "absent") == 0


def test_a_failed_write_leaves_the_realization_absent(tmp_path, monkeypatch):
    def full(*a, **k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(w, "write_posterior_nc", full)
    with pytest.raises(OSError):
        write_realization(tmp_path / "r0", **record())
    assert not (tmp_path / "r0").exists()
    assert realization_status(tmp_path, "r0") == "absent"


@pytest.mark.parametrize(("kind", "group"), [("thread", 1), ("process", 1), ("process", 4)])
def test_pool_writes_everything_and_stops_at_the_first_error(tmp_path, kind, group):
    """Also with process writers taking ``group`` realizations per job: a partial group is
    sent at close, and a group whose write fails leaves the rest of it absent."""
    pool = WriterPool(workers=2, max_pending=8, kind=kind, group=group)
    for i in range(6):
        pool.submit(tmp_path / f"r{i}", record(i))
    assert pool.close() and pool.error is None
    assert sorted(os.path.basename(d) for d in pool.written) == [f"r{i}" for i in range(6)]
    assert all(realization_status(tmp_path, f"r{i}") == "done" for i in range(6))
    # a file where a realization directory should go: that write fails, the run stops
    (tmp_path / "bad").write_text("not a directory")
    pool = WriterPool(workers=1, max_pending=2 * group, kind=kind, group=group)
    with pytest.raises(WriteError, match=r"cannot write .*bad"):
        for i in range(40):
            pool.submit(tmp_path / ("bad" if i == 1 else f"s{i}"), record(i))
    pool.close()
    with pytest.raises(WriteError):
        pool.check()
    states = {realization_status(tmp_path, f"s{i}") for i in range(40) if i != 1}
    assert states <= {"done", "absent"} and "absent" in states
