"""PSF anisotropy through the real CLI (slow tier): the additive bias c it creates.

Data: round galaxies (free flux, size, centre) at matched-filter S/N 200 through a
Moffat PSF sheared by e_psf = (0.05, 0); paired +-0.02 in g1, MAP. A model that knows
the PSF ellipticity gives c1 consistent with zero; the same campaign with the model
told a round PSF (the data's PSF in ``simulation.psf``) must detect c1 > 0 (the PSF's
elongation read as shear). Tolerances are the campaign's own (bootstrap) errors.
The full-size campaigns are results/validation/psf_anisotropy (docs/validation.md).
"""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner

from shearbatch.cli import bias_extract, bias_run, bias_stats

CONFIG = {
    "image": {"pixel_scale": 0.263, "size_x": 24, "size_y": 24, "noise": {"snr": 200}},
    "psf": {"type": "Moffat", "beta": 3.5, "fwhm": 0.8, "e1": 0.05},
    "gal": {
        "flux": {"type": "LogNormal", "mean": 1.0, "sigma": 0.1},
        "half_light_radius": {"type": "LogNormal", "mean": 0.5, "sigma": 0.1},
        "position": {"x_min": 11.5, "x_max": 12.5, "y_min": 11.5, "y_max": 12.5},
    },
    "inference": {"method": "map"},
}


def campaign(tmp, name, cfg):
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    runs, csv, stats = tmp / f"{name}_runs", tmp / f"{name}.csv", tmp / f"{name}_stats"
    res = CliRunner().invoke(bias_run, ["--config", str(path), "--shear-grid", "0.02", "--paired",
                                        "--n-realizations", "12", "--batch-size", "12", "--x64",
                                        "--no-progress", "--output-dir", str(runs)])  # fmt: skip
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(bias_extract, ["--input-dir", str(runs), "--output", str(csv)])
    assert res.exit_code == 0, res.output
    CliRunner().invoke(bias_stats, ["--input", str(csv), "--output-dir", str(stats)])
    return json.loads((stats / "bias_results.json").read_text())


@pytest.mark.slow
def test_psf_anisotropy_gives_c_only_when_the_model_ignores_it(tmp_path):
    known = campaign(tmp_path, "known", CONFIG)
    told_round = dict(CONFIG, psf={**CONFIG["psf"], "e1": 0.0}, simulation={"psf": {"e1": 0.05}})
    ignored = campaign(tmp_path, "round", told_round)
    assert known["estimator"] == ignored["estimator"] == "paired"
    assert abs(known["c1"]) < 3 * known["c1_err"]
    assert ignored["c1"] > 5 * ignored["c1_err"]
