"""posterior.nc from a per-structure template (io/nctemplate.py): every file is byte for byte
what netCDF4 writes, a wrong template is caught before it writes a file, and a value a
template does not take (or a structure whose template fails) is written by netCDF4."""

import datetime as dt
import logging

import arviz as az
import numpy as np
import pytest
import xarray as xr

from shearbatch.io import integrity, nctemplate, write_realization
from shearbatch.io import writer as w


class Clock(dt.datetime):
    """``datetime.now`` of the writer, one second later at each call (created_at)."""

    t = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)

    @classmethod
    def now(cls, tz=None):
        cls.t += dt.timedelta(seconds=1)
        return cls.t


@pytest.fixture
def fresh(monkeypatch):
    """No template made yet, and the file's time under the test's control."""
    monkeypatch.setattr(w, "_TEMPLATES", {})
    monkeypatch.setattr(w, "datetime", Clock)
    return w._TEMPLATES


def level0(seed: int, run_id: str | None = None, n_draw: int = 40):
    """A Level 0-like file: g1, g2 without a galaxy dimension, one observed stamp."""
    rng = np.random.default_rng(seed)
    post = {"g1": rng.normal(size=(2, n_draw)), "g2": rng.normal(size=(2, n_draw))}
    post["g1"][0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    stats = {"lp": rng.normal(size=(2, n_draw)), "diverging": rng.random((2, n_draw)) < 0.5,
             "n_steps": rng.integers(0, 9, (2, n_draw)).astype(np.int32)}  # fmt: skip
    attrs = {"inference_method": "map", "run_id": run_id or f"g1_+0.0100_g2_+0.0000_s{seed}",
             "seed": seed, "g1_true": 0.01, "g2_true": -0.0, "batch_size": 4,
             "config_hash": "c0ffee" * 4, "dtype": "float64", "flag": seed % 2 == 0}  # fmt: skip
    return post, stats, rng.normal(size=(1, 9, 7)), attrs


def level2(seed: int, n_gal: int = 3):
    """A Level 2-like file: per-galaxy latents and a per-galaxy sample statistic."""
    rng = np.random.default_rng(seed)
    post = {k: rng.normal(size=(1, 30)).astype(np.float32) for k in ("g1", "g2")}
    post |= {k: rng.normal(size=(1, 30, n_gal)).astype(np.float32) for k in ("e1", "e2")}
    post["e1"][0, 0] = [np.nan, -0.0, np.inf][:n_gal] + [0.0] * (n_gal - 3)
    stats = {"interim_log_weight": rng.normal(size=(1, 30, n_gal)).astype(np.float32),
             "diverging": rng.random((1, 30)) < 0.1}  # fmt: skip
    attrs = {"inference_method": "nuts", "run_id": f"r{seed}" * (1 + seed % 3), "seed": 2**40 + seed,
             "g1_true": -0.02, "g2_true": 0.05, "batch_size": 8, "shear_model": "interim",
             "interim_prior_e1": '{"kind": "normal", "args": [0.0, 0.3]}'}  # fmt: skip
    return post, stats, rng.normal(size=(n_gal, 6, 5)), attrs


def both_ways(tmp_path, name, content, monkeypatch):
    """The file as this writer writes it (templates on) and as netCDF4 alone writes it, at
    the same time stamp: (template bytes, netCDF4 bytes, the checksums of each)."""
    t = Clock.t
    got = w.write_posterior_nc(tmp_path / f"{name}.t.nc", *content)
    Clock.t = t
    monkeypatch.setattr(w, "TEMPLATES", False)
    want = w.write_posterior_nc(tmp_path / f"{name}.n.nc", *content)
    monkeypatch.setattr(w, "TEMPLATES", True)
    new, old = ((tmp_path / f"{name}.{k}.nc").read_bytes() for k in "tn")
    return new, old, got, want


def _templates(cache) -> list:
    return [t for t in cache.values() if t is not None]


@pytest.mark.parametrize("make", [level0, level2])
def test_every_file_is_netcdf4_s_bytes(tmp_path, fresh, monkeypatch, make):
    netcdf = []
    real = w._write_netcdf4
    monkeypatch.setattr(w, "_write_netcdf4", lambda *a: netcdf.append(1) or real(*a))
    for seed in range(6):
        new, old, got, want = both_ways(tmp_path, str(seed), make(seed), monkeypatch)
        assert new == old, seed
        assert got == want  # the variables' checksums and the file's, from the bytes in memory
        assert got["posterior"] == integrity.file_checksum(tmp_path / f"{seed}.t.nc")
    assert _templates(fresh), "no template was made"
    if make is level0:  # one structure: its first file and the template's two sentinel files
        assert len(fresh) == 1
        assert len(netcdf) == 6 + 3  # written by netCDF4 (the comparisons' own 6 aside)
    else:  # a run_id of another length is another structure
        assert len(fresh) == 3


def test_a_template_file_reads_back_as_netcdf4_s(tmp_path, fresh):
    write_realization(tmp_path / "a", **_realization(level0(1)))
    write_realization(tmp_path / "b", **_realization(level0(2)))
    assert _templates(fresh)  # b is written from the template
    post, stats, obs, attrs = level0(2)
    tree = xr.open_datatree(tmp_path / "b" / "posterior.nc")
    try:
        np.testing.assert_array_equal(tree["posterior"]["g1"].values, post["g1"])
        assert np.signbit(tree["posterior"]["g1"].values[0, 3])
        assert tree["sample_stats"]["diverging"].dtype == bool
        np.testing.assert_array_equal(tree["sample_stats"]["diverging"], stats["diverging"])
        np.testing.assert_array_equal(tree["observed_data"]["obs"].values, obs)
        assert tree.attrs["run_id"] == attrs["run_id"] and tree.attrs["seed"] == 2
        assert tree.attrs["flag"] == 1 and np.signbit(tree.attrs["g2_true"])
        assert tree["posterior"].attrs["created_at"] == Clock.t.isoformat(timespec="seconds")
    finally:
        tree.close()
    idata = az.from_netcdf(tmp_path / "b" / "posterior.nc")
    assert idata.posterior["g2"].dims == ("chain", "draw")


def _realization(content):
    post, stats, obs, attrs = content
    return {"posterior": post, "sample_stats": stats, "observed": obs, "attrs": attrs,
            "truth": {"run_id": attrs["run_id"]}, "convergence": {"status": "ok"}}  # fmt: skip


def test_a_wrong_template_is_caught_by_its_first_file_and_netcdf4_writes(
    tmp_path, fresh, monkeypatch, caplog
):
    real = nctemplate.build

    def off_by_one(specs, write, seed=0):  # the g2 data one byte off
        tpl = real(specs, write, seed)
        at, n = tpl.spans[1]
        tpl.spans[1] = (at + 1, n)
        return tpl

    monkeypatch.setattr(nctemplate, "build", off_by_one)
    with caplog.at_level(logging.INFO, logger="shearbatch.io.writer"):
        for seed in range(3):
            new, old, _, _ = both_ways(tmp_path, str(seed), level0(seed), monkeypatch)
            assert new == old
    assert list(fresh.values()) == [None]  # that structure is netCDF4's from then on
    why = [r.getMessage() for r in caplog.records if "template" in r.getMessage()]
    assert len(why) == 1 and "first file differs from netCDF4's" in why[0]


def test_a_patch_at_a_wrong_offset_or_a_missed_checksum_is_told(tmp_path, fresh, monkeypatch):
    content = level0(0)
    w.write_posterior_nc(tmp_path / "first.nc", *content)
    (tpl,) = _templates(fresh)
    root, groups = w._content(*level0(5), "2026-01-01T00:00:09+00:00")
    values = w._fields(root, groups)
    monkeypatch.setattr(w, "TEMPLATES", False)
    w._write_netcdf4(str(tmp_path / "want.nc"), root, groups)
    want = (tmp_path / "want.nc").read_bytes()
    assert tpl.render(values).tobytes() == want
    for i in range(len(tpl.spans)):  # any value one byte off: other bytes
        spans = list(tpl.spans)
        spans[i] = (spans[i][0] + 1, spans[i][1])
        assert nctemplate.Template(tpl.base, spans, tpl.sums).render(values).tobytes() != want
    assert tpl.sums  # the attributes' blocks carry checksums: each one is needed
    for i in range(len(tpl.sums)):
        sums = tpl.sums[:i] + tpl.sums[i + 1 :]
        assert nctemplate.Template(tpl.base, tpl.spans, sums).render(values).tobytes() != want


def test_build_refuses_files_it_cannot_explain():
    specs = [nctemplate.field_spec(np.arange(6.0)), nctemplate.field_spec("abc")]

    def write(values, extra=b""):
        body = b"HEAD" + nctemplate.encode(values[0]).tobytes() + b"...." + values[1].encode()
        return body + (b"end" if values[1] != nctemplate.sentinels(specs, 0)[1] else extra)

    with pytest.raises(nctemplate.TemplateError, match="length depends"):
        nctemplate.build(specs, write)
    with pytest.raises(nctemplate.TemplateError, match="no metadata checksum"):
        nctemplate.build(specs, lambda v: write(v, b"END"))  # a difference that is no value
    assert nctemplate.build(specs, lambda v: write(v, b"end")).spans == [(4, 48), (56, 3)]
    twice = lambda v: write(v, b"end") + nctemplate.encode(v[0]).tobytes()  # noqa: E731
    with pytest.raises(nctemplate.TemplateError, match="found 2 times"):
        nctemplate.build(specs, twice)


def test_values_a_template_does_not_take_are_written_by_netcdf4(tmp_path, fresh, monkeypatch):
    post, stats, obs, attrs = level0(3)
    attrs["run_id"] = "r\u00e9sum\u00e9"  # not ASCII: netCDF's NC_STRING
    for i in range(2):
        new, old, _, _ = both_ways(tmp_path, str(i), (post, stats, obs, attrs), monkeypatch)
        assert new == old
    assert fresh == {}
    spec = nctemplate.field_spec
    assert spec(np.zeros((2, 0))) is None and spec(np.array(["a"], object)) is None
    assert spec(np.zeros(3, ">f8")) is None and spec(np.zeros((4, 4))[:, ::2]) is None
    assert spec("") is None and spec(True) is None and spec(2**63) is None
    assert spec(np.zeros((2, 3), np.float32)) == ("a", "<f4", (2, 3)) and spec("ab") == ("s", 2)


def test_the_checksum_is_hdf5_s_lookup3():
    rng = np.random.default_rng(0)
    for n in (*range(1, 30), 255, 1024):
        buf = np.frombuffer(rng.bytes(n + 3), np.uint8).copy()
        assert nctemplate.lookup3(buf, 3, n + 3) == nctemplate.lookup3_py(buf[3:].tobytes())
    assert nctemplate.lookup3_py(b"") == 0xDEADBEEF
    assert nctemplate._hdf5_lookup3() is not None  # the C one is used here
