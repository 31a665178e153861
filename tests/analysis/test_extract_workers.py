"""bias-extract's reader processes on a GPU node: CPU only, and no JAX at all.

- The pool's processes see ``JAX_PLATFORMS=cpu`` and ``XLA_PYTHON_CLIENT_PREALLOCATE=false``
  from their start even when the parent's environment names an accelerator
  (``JAX_PLATFORMS=cuda`` here: a process that started JAX with it would fail on this CPU
  machine, and on a GPU node take 75% of the GPU's memory), and a JAX started there runs on
  the CPU.
- Reading an interim-model realization (posterior.nc with per-galaxy draws and importance
  log-weights, written by the real writer) imports no JAX in the reader, and gives the
  summary columns and float32 draws of the former reader (xarray + the JAX fit) to 1e-12
  in g and 1e-9 relative in its standard deviation.

The probes below run in spawned processes, which import this module: it imports no JAX.
"""

import json
import os
import sys

import numpy as np
import pytest

from shearbatch import jax_setup
from shearbatch.analysis import summary_table
from shearbatch.core.convergence import Convergence
from shearbatch.io import write_realization

M, K = 6, 200
POP = {"kind": "truncnormal", "args": [0.0, 0.26, -0.9, 0.9]}


def _probe_jax(_):
    """In a reader process: its environment, and the platform a JAX started there gets."""
    env = {k: os.environ.get(k) for k in jax_setup.WORKER_ENV}
    import jax

    return env, jax.devices()[0].platform


def _probe_read(directory):
    """In a reader process: one realization read as bias-extract reads it, and whether JAX
    was imported for it."""
    row = summary_table._read_chunk(([directory], summary_table.DEFAULT_THRESHOLDS))[0]
    return "jax" in sys.modules, row


def interim_realization(root, seed=0, g=(0.02, 0.0)):
    """One interim-model realization written by the writer bias-run uses: per-galaxy draws
    of the observed ellipticity and importance log-weights (chain, draw, galaxy)."""
    rng = np.random.default_rng(seed)
    e = rng.normal(0.0, 0.26, (M, 2)) + np.asarray(g)
    e1 = e[:, 0] + 0.04 * rng.normal(size=(1, K, M))
    e2 = e[:, 1] + 0.04 * rng.normal(size=(1, K, M))
    lw = rng.normal(0.0, 0.4, (1, K, M))
    lw[0, :3, 0] = -np.inf  # draws outside the interim support
    rid = f"g1_{g[0]:+.4f}_g2_{g[1]:+.4f}_s{seed}"
    attrs = {"inference_method": "map", "run_id": rid, "seed": seed, "g1_true": g[0],
             "g2_true": g[1], "shear_model": "interim", "dtype": "float64",
             "population_prior_e1": json.dumps(POP), "population_prior_e2": json.dumps(POP)}  # fmt: skip
    conv = Convergence(run_id=rid, status="ok", flags=0, method="map",
                       point_estimate="population", shear_model="interim")  # fmt: skip
    return write_realization(root / rid, posterior={"e1": e1, "e2": e2},
                             sample_stats={"interim_log_weight": lw},
                             observed=np.zeros((M, 4, 4)), attrs=attrs,
                             truth={"g1": g[0], "g2": g[1], "seed": seed, "run_id": rid},
                             convergence=conv)  # fmt: skip


def test_reader_processes_start_no_accelerator(monkeypatch):
    monkeypatch.setenv("JAX_PLATFORMS", "cuda")  # what a GPU node's environment may hold
    monkeypatch.delenv("XLA_PYTHON_CLIENT_PREALLOCATE", raising=False)
    reports = list(summary_table.map_cpu_only(_probe_jax, [0, 1], workers=2))
    for env, platform in reports:
        assert env == {"JAX_PLATFORMS": "cpu", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
        assert platform == "cpu"
    assert os.environ["JAX_PLATFORMS"] == "cuda"  # the parent's own environment is restored
    assert "XLA_PYTHON_CLIENT_PREALLOCATE" not in os.environ


def test_an_interim_realization_is_read_without_jax_as_before(tmp_path):
    d = interim_realization(tmp_path)
    (imported, row), = summary_table.map_cpu_only(_probe_read, [str(d)], workers=1)  # fmt: skip
    assert not imported
    assert row["status"] == "ok" and row["shear_model"] == "interim"
    assert row["pop_n_galaxies"] == M
    # the former reader: xarray's decoding and the JAX fit (core/population.py)
    import xarray as xr

    from shearbatch.core import population as pop
    from shearbatch.spec import Prior

    with xr.open_dataset(d / "posterior.nc", group="posterior", engine="netcdf4") as ds:
        e = [ds[s].transpose("galaxy", "chain", "draw").values.reshape(M, -1)
             for s in ("e1", "e2")]  # fmt: skip
    with xr.open_dataset(d / "posterior.nc", group="sample_stats", engine="netcdf4") as ds:
        lw = ds["interim_log_weight"].transpose("galaxy", "chain", "draw").values.reshape(M, -1)
    eps = np.stack(e, axis=-1)
    prior = Prior("truncnormal", tuple(POP["args"]))
    f = pop.fit(eps, lw, pop.shape_log_prior(prior, prior))
    assert row["g1_mean"] == pytest.approx(f.g[0], abs=1e-12)
    assert row["g2_mean"] == pytest.approx(f.g[1], abs=1e-12)
    assert row["g1_std"] == pytest.approx(f.err[0], rel=1e-9)
    assert row["g2_std"] == pytest.approx(f.err[1], rel=1e-9)
    assert row["pop_ess_min"] == pytest.approx(float(np.min(f.ess / f.n_draws)), rel=1e-9)
    assert row["pop_n_collapsed"] == int(f.collapsed.sum())
    # the reliability flag: each galaxy's Pareto k-hat (ArviZ's PSIS) at the estimate
    from shearbatch.core import population_np as pnp

    kh = pnp.pareto_khat_at(f.g, eps, lw, pnp.ShapePrior(prior, prior))
    assert np.all(np.isfinite(kh))
    assert row["pop_khat_max"] == pytest.approx(float(np.max(kh)), abs=1e-3)
    assert row["pop_n_khat_high"] == int(np.sum(kh > pnp.khat_threshold(f.n_draws)))
    # what the sidecar keeps: the float32 draws and the float32 log-weights less their maximum
    kept = row["_population"]
    np.testing.assert_array_equal(kept["eps"], eps.astype(np.float32))
    mx = np.max(np.where(np.isfinite(lw), lw, -np.inf), axis=1, keepdims=True)
    np.testing.assert_array_equal(kept["log_base"], (lw - mx).astype(np.float32))


def test_the_sidecar_is_written_without_a_concatenated_copy_and_reads_back(tmp_path):
    rows = []
    for seed in range(3):
        d = interim_realization(tmp_path / "camp", seed=seed)
        rows.append(summary_table.read_realization(d, keep_draws=True))
    rows[1]["_population"] = {**rows[1]["_population"],  # a realization with fewer draws
                              "eps": rows[1]["_population"]["eps"][:, :150],
                              "log_base": rows[1]["_population"]["log_base"][:, :150]}  # fmt: skip
    path = summary_table.write_population(rows, tmp_path / "summary.population.npz")
    want = summary_table.population_arrays(rows)
    with np.load(path) as z:
        assert z.files == list(want)
        for k in z.files:
            np.testing.assert_array_equal(z[k], want[k])
    assert want["eps"].shape == (3 * M, K, 2) and np.isnan(want["eps"][M : 2 * M, 150:]).all()
