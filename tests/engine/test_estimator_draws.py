"""``campaign.draws: estimator``: posterior.nc keeps only the draws the shear estimate is
made from, as float32, and everything downstream of it is unchanged.

The pooled population fit reads the interim draws as float32 with each galaxy's largest
log-weight subtracted (``analysis.summary_table.compact_draws``); a campaign that stores exactly
that must give the same summary.csv, the same pooled inputs and the same bias_results.json
as one that stores every latent in float64. Same seeds, same program: the comparison is
exact, not within a tolerance.
"""

from __future__ import annotations

import json
from pathlib import Path

import netCDF4
import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from shearbatch.analysis.partials import index_path
from shearbatch.analysis.streamed import PartialSource
from shearbatch.cli import bias_extract, bias_run, bias_stats
from tests.conftest import write_config

LEVEL2 = Path("configs/level2.yaml")
EDITS = {"image.n_objects": 4, "inference.map_config.num_samples": 200,
         "campaign.rotations": 1}  # fmt: skip
RUN_ID = "g1_+0.0200_g2_+0.0000_s0"


def _campaign(root: Path, cfg: str, draws: str) -> tuple[Path, Path, Path]:
    camp, csv, out = root / f"camp_{draws}", root / f"summary_{draws}.csv", root / f"st_{draws}"
    res = CliRunner().invoke(bias_run, ["--config", cfg, "--n-realizations", "3", "--batch-size",
                                        "6", "--no-progress", "--output-dir", str(camp),
                                        "--set", f"campaign.draws={draws}"])  # fmt: skip
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(bias_extract, ["--input-dir", str(camp), "--output", str(csv),
                                            "--workers", "1", "--no-progress"])  # fmt: skip
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(bias_stats, ["--input", str(csv), "--output-dir", str(out),
                                          "--level", "level_2", "--no-plots"])  # fmt: skip
    assert res.exit_code in (0, 1, 3), res.output
    return camp, csv, out


@pytest.fixture(scope="module")
def both(module_tmp):
    cfg = write_config(module_tmp / "interim.yaml", EDITS, base=LEVEL2)
    return {d: _campaign(module_tmp, cfg, d) for d in ("all", "estimator")}


def _variables(path: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    with netCDF4.Dataset(path) as ds:
        return {f"{g}/{n}": (v.dtype.name, v.shape) for g, grp in ds.groups.items()
                for n, v in grp.variables.items() if n not in grp.dimensions}  # fmt: skip


# two compiled interim campaigns (one compile, shared): ~15-30 s
def test_estimator_draws_keep_only_what_the_pooled_fit_reads(both):
    full = _variables(both["all"][0] / RUN_ID / "posterior.nc")
    slim = _variables(both["estimator"][0] / RUN_ID / "posterior.nc")
    assert {"posterior/flux", "posterior/hlr"} <= set(full)
    # the proposal's log density: laplace_log_q, or proposal_log_q for map_config.proposal student_t
    assert {"sample_stats/laplace_log_q", "sample_stats/proposal_log_q"} & set(full)
    assert slim == {"posterior/e1": ("float32", (1, 200, 4)),
                    "posterior/e2": ("float32", (1, 200, 4)),
                    "sample_stats/interim_log_weight": ("float32", (1, 200, 4)),
                    "observed_data/obs": full["observed_data/obs"]}  # fmt: skip
    with netCDF4.Dataset(both["estimator"][0] / RUN_ID / "posterior.nc") as ds:
        lw = ds["sample_stats/interim_log_weight"][...]
    assert np.allclose(lw.max(axis=(0, 1)), 0.0)  # each galaxy's largest weight is 1
    size = {k: (v[0] / RUN_ID / "posterior.nc").stat().st_size for k, v in both.items()}
    assert size["estimator"] < 0.5 * size["all"], size


def test_estimator_draws_give_the_same_summary_and_bias_results(both):
    a, e = (pd.read_csv(both[k][1]) for k in ("all", "estimator"))
    pd.testing.assert_frame_equal(a.drop(columns=["runtime_s"], errors="ignore"),
                                  e.drop(columns=["runtime_s"], errors="ignore"))  # fmt: skip
    za, ze = (PartialSource(index_path(both[k][1])).arrays() for k in both)
    for key in ("eps", "log_base"):
        np.testing.assert_array_equal(getattr(za, key), getattr(ze, key))
    ra, re_ = (json.loads((both[k][2] / "bias_results.json").read_text()) for k in both)
    for key in ("m1", "m1_err", "c1", "c1_err", "m2", "c2"):
        assert ra[key] == re_[key], key
