"""AnaCal (FPFS) beside the forward model (issue 45): the refusals, and a small campaign
whose realizations carry FPFS's sums through bias-extract into bias-stats."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from shearbatch.cli import bias_extract, bias_run, bias_stats
from shearbatch.estimators.anacal import Settings, min_cell
from shearbatch.schema import ConfigError, parse_config
from tests.conftest import write_config

SMALL = {
    "image": {"pixel_scale": 0.263, "size_x": 12, "size_y": 12, "n_objects": 2,
              "noise": {"type": "Gaussian", "snr": 80}},
    "psf": {"type": "Moffat", "fwhm": 0.9, "beta": 3.5, "e1": 0.01, "e2": -0.005},
    "gal": {"flux": {"type": "LogNormal", "mean": 1.0, "sigma": 0.2},
            "half_light_radius": {"type": "LogNormal", "mean": 0.3, "sigma": 0.1},
            "ellipticity": {"e1": {"type": "TruncatedNormal", "sigma": 0.2, "min": -0.9, "max": 0.9},
                            "e2": {"type": "TruncatedNormal", "sigma": 0.2, "min": -0.9, "max": 0.9}},
            "position": {"type": "Normal", "x": 6.0, "y": 6.0, "sigma": 0.3}},
    "inference": {"method": "map", "estimators": ["anacal"], "anacal_config": {"cell_size": 52}},
}  # fmt: skip


def _edits(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and k in ("image", "gal", "inference"):
            out.update(_edits(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def test_without_anacal_a_config_naming_it_is_refused_in_one_line(monkeypatch, tmp_path):
    """Where anacal is not installed the schema refuses the config in one line saying how to
    install it, and bias-run exits 2 with that line."""
    monkeypatch.setitem(sys.modules, "anacal", None)  # import anacal -> ImportError
    with pytest.raises(ConfigError) as err:
        parse_config(SMALL)
    msg = str(err.value)
    assert "\n" not in msg
    assert msg == ("inference.estimators: estimator anacal: anacal is not installed "
                   "(pip install 'shearbatch[anacal]')")  # fmt: skip
    cfg = write_config(tmp_path / "c.yaml", _edits(SMALL))
    res = CliRunner().invoke(bias_run, ["--config", cfg, "--output-dir", str(tmp_path / "r"),
                                        "--dry-run"])  # fmt: skip
    assert res.exit_code == 2, res.output
    assert "pip install 'shearbatch[anacal]'" in res.output
    assert "Traceback" not in res.output


def test_a_cell_too_small_for_fpfs_is_refused_in_one_line():
    """FPFS needs >= 4 Fourier samples per kernel width: 50 px at 0.263"/px and 0.52"."""
    assert min_cell(Settings(), 0.263) == 50
    raw = {**SMALL, "inference": {**SMALL["inference"], "anacal_config": {"cell_size": 16}}}
    with pytest.raises(ConfigError) as err:
        parse_config(raw)
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith("inference.anacal_config.cell_size: 16 is too small for FPFS: it "
                          "needs >= 50 pixels")  # fmt: skip
    parse_config(SMALL)  # 52 is enough


def test_an_unknown_estimator_is_refused():
    raw = {**SMALL, "inference": {**SMALL["inference"], "estimators": ["metacal"]}}
    with pytest.raises(ConfigError, match="unknown estimator 'metacal'; use one of anacal"):
        parse_config(raw)


def test_no_estimators_keeps_the_config_hash():
    """A config without estimators hashes as before they existed (null keys are neutral)."""
    from shearbatch.schema.config import config_hash

    plain = {k: v for k, v in SMALL.items() if k != "inference"}
    a = config_hash(parse_config({**plain, "inference": {"method": "map"}}))
    b = config_hash(parse_config({**plain, "inference": {"method": "map", "estimators": None}}))
    c = config_hash(parse_config(SMALL))
    assert a == b != c


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    """A paired campaign, 4 seeds x 2 signs x 2 galaxies, MAP beside AnaCal, run -> extract
    -> stats through the CLI."""
    pytest.importorskip("anacal")
    root = tmp_path_factory.mktemp("anacal")
    cfg = write_config(root / "c.yaml", _edits(SMALL))
    runs = root / "runs"
    res = CliRunner().invoke(bias_run, ["--config", cfg, "--output-dir", str(runs),
                                        "--shear-grid", "0.02", "--g2-true", "0.0", "--paired",
                                        "--n-realizations", "4", "--batch-size", "8",
                                        "--no-progress"])  # fmt: skip
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(bias_extract, ["--input-dir", str(runs), "--output",
                                            str(root / "summary.csv"), "--no-progress"])  # fmt: skip
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(bias_stats, ["--input", str(root / "summary.csv"), "--output-dir",
                                          str(root / "stats"), "--no-plots", "--report",
                                          str(root / "report.html")])  # fmt: skip
    assert res.exit_code in (0, 1, 3), res.output
    return root, res.output


def test_each_realization_records_finite_fpfs_sums(campaign):
    root, _ = campaign
    recs = [json.loads(p.read_text()) for p in sorted((root / "runs").glob("*/convergence.json"))]
    assert len(recs) == 8
    for r in recs:
        a = r["estimators"]["anacal"]
        assert a["n"] == 2 and a["n_flagged"] == 0 and a["flags"] == 0
        assert all(np.isfinite(a[k]) for k in ("e1", "e2", "r11", "r22"))
        assert a["r11"] > 0 and a["r22"] > 0 and a["cost_s"] > 0


def test_stats_give_each_estimator_and_their_difference(campaign):
    root, printed = campaign
    import pandas as pd

    df = pd.read_csv(root / "summary.csv")
    assert np.isfinite(df["anacal_e1"]).all() and np.isfinite(df["anacal_r11"]).all()
    res = json.loads((root / "stats" / "bias_results.json").read_text())["estimators"]
    assert set(res["results"]) == {"map", "anacal"}
    for r in res["results"].values():
        assert (
            np.isfinite(r["m1"])
            and r["m1_err"] > 0
            and r["verdict"] in ("PASS", "FAIL", "INCONCLUSIVE")
        )
        assert r["m2"] is None and np.isfinite(r["c2"])  # g2 constant: no slope
        assert r["cost"]["s_per_galaxy"] > 0
    d = res["differences"]["anacal - map"]
    assert d["dm1"] == pytest.approx(res["results"]["anacal"]["m1"] - res["results"]["map"]["m1"])
    assert d["dm1_err"] > 0
    assert "anacal" in printed
    html = (root / "report.html").read_text()
    assert "Estimators on the same realizations" in html and "anacal - map" in html
