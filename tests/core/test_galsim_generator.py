"""The GalSim generator (``simulation.renderer: galsim``) against the JAX one.

Same seeds -> same truths and the same noise field; where the profiles agree the
stamps agree to rendering accuracy (the renderer is checked against GalSim to 1e-6
of the peak in test_render.py); profiles the model lacks (Sersic n != 1) differ.
"""

from __future__ import annotations

import copy
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from shearbatch.cli import bias_run
from shearbatch.core.generators import simulate
from shearbatch.schema import ConfigError, parse_config
from shearbatch.spec import problem, run_spec, truth_problem

pytest.importorskip("galsim")

BASE = {
    "image": {"pixel_scale": 0.263, "size_x": 20, "size_y": 20, "noise": {"sigma": 1e-3}},
    "psf": {"type": "Moffat", "fwhm": 0.7, "beta": 3.5, "e1": 0.03, "e2": -0.02},
    "gal": {
        "flux": {"type": "LogNormal", "mean": 1.0, "sigma": 0.2},
        "half_light_radius": {"type": "Uniform", "min": 0.3, "max": 0.5},
        "ellipticity": {
            "e1": {"type": "Normal", "sigma": 0.2},
            "e2": {"type": "Normal", "sigma": 0.2},
        },
        "position": {"x_min": 9.5, "x_max": 10.5, "y_min": 9.5, "y_max": 10.5},
    },
}
SEEDS = [3, 4, 5]
G = [(0.02, -0.01), (-0.03, 0.0), (0.05, 0.04)]


def config(simulation=None, **edits):
    raw = copy.deepcopy(BASE)
    raw.update(edits)
    if simulation is not None:
        raw["simulation"] = simulation
    return parse_config(raw)


@pytest.fixture(scope="module")
def pair():
    """The JAX and the GalSim generator on the same exponential galaxies (3 seeds)."""
    cfg = config({"renderer": "galsim"})
    jax_sim = simulate(problem(cfg), SEEDS, G)
    gs_sim = simulate(truth_problem(cfg), SEEDS, G)
    return cfg, jax_sim, gs_sim


def test_same_truths_and_noise_level(pair):
    _, jax_sim, gs_sim = pair
    for k, v in jax_sim.params.items():
        np.testing.assert_array_equal(np.asarray(gs_sim.params[k]), np.asarray(v))
    np.testing.assert_array_equal(np.asarray(gs_sim.g), np.asarray(jax_sim.g))
    assert gs_sim.noise_sigma == jax_sim.noise_sigma


def test_galsim_stamps_equal_the_jax_ones_where_profiles_agree(pair):
    """Noise included: identical noise draws, so the difference is rendering error only."""
    _, jax_sim, gs_sim = pair
    a, b = np.asarray(jax_sim.images), np.asarray(gs_sim.images)
    peak = (a - 0.0).max()
    assert np.abs(a - b).max() <= 1e-6 * peak
    # the noise is far above that difference: the same draw, not merely the same level
    assert jax_sim.noise_sigma > 100 * np.abs(a - b).max()
    np.testing.assert_allclose(np.asarray(gs_sim.snr), np.asarray(jax_sim.snr), rtol=1e-5)


def test_galsim_generator_is_identical_across_batch_sizes(pair):
    cfg, _, gs_sim = pair
    alone = simulate(truth_problem(cfg), SEEDS[1:2], G[1:2])
    np.testing.assert_array_equal(np.asarray(alone.images[0]), np.asarray(gs_sim.images[1]))
    reordered = simulate(truth_problem(cfg), SEEDS[::-1], G[::-1])
    np.testing.assert_array_equal(np.asarray(reordered.images[::-1]), np.asarray(gs_sim.images))


def test_sersic_n1_is_the_exponential_and_n2_is_not(pair):
    _, jax_sim, _ = pair
    a = np.asarray(jax_sim.images)
    for n, close in ((1.0, True), (2.0, False)):
        cfg = config({"renderer": "galsim", "gal": {"type": "Sersic", "n": n}})
        tp = truth_problem(cfg)
        assert (tp.profile, tp.profile_args) == ("sersic", (n,))
        b = np.asarray(simulate(tp, SEEDS, G).images)
        diff = np.abs(a - b).max() / a.max()
        assert diff <= 1e-6 if close else diff > 1e-2


def test_bulge_disk_without_bulge_is_the_exponential(pair):
    _, jax_sim, _ = pair
    cfg = config({"renderer": "galsim",
                  "gal": {"type": "BulgeDisk", "bulge_fraction": 0.0, "bulge_hlr_ratio": 0.5}})  # fmt: skip
    b = np.asarray(simulate(truth_problem(cfg), SEEDS, G).images)
    a = np.asarray(jax_sim.images)
    assert np.abs(a - b).max() <= 1e-6 * a.max()


def test_generator_psf_can_differ_from_the_model_psf():
    cfg = config({"renderer": "galsim", "psf": {"beta": 2.5}})
    assert problem(cfg).psf.beta == 3.5 and truth_problem(cfg).psf.beta == 2.5
    spec = run_spec(cfg)
    assert spec.model.renderer == "jax" and spec.truth.renderer == "galsim"
    assert spec.model.noise_sigma == spec.truth.noise_sigma


def test_snr_noise_is_the_models_for_a_sersic_generator():
    """S/N is defined on the model's reference galaxy; the data get the same pixel sigma."""
    cfg = config({"renderer": "galsim", "gal": {"type": "Sersic", "n": 2.0}},
                 image={**BASE["image"], "noise": {"snr": 50}})  # fmt: skip
    spec = run_spec(cfg)
    assert spec.truth.noise_sigma == spec.model.noise_sigma


@pytest.mark.parametrize(
    ("sim", "gal_type", "match"),
    [
        ({"gal": {"type": "Sersic", "n": 2.0}}, None, "simulation.gal.type: Sersic needs"),
        (None, "Sersic", "gal.type: the model draws"),
        ({"renderer": "galsim", "gal": {"type": "Sersic"}}, None, "n: required"),
        ({"renderer": "galsim", "gal": {"type": "Sersic", "n": 9.0}}, None, r"n: must be in"),
        ({"renderer": "galsim", "gal": {"n": 2.0}}, None, "n: only with type Sersic"),
    ],
)
def test_profile_rules_are_one_line_config_errors(sim, gal_type, match):
    raw = copy.deepcopy(BASE)
    if gal_type:
        raw["gal"]["type"], raw["gal"]["n"] = gal_type, 2.0
    if sim is not None:
        raw["simulation"] = sim
    with pytest.raises(ConfigError, match=match) as err:
        parse_config(raw)
    assert "\n" not in str(err.value)


def test_missing_galsim_is_a_one_line_exit_2(tmp_path, monkeypatch):
    import yaml

    raw = copy.deepcopy(BASE)
    raw["simulation"] = {"renderer": "galsim"}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(raw))
    monkeypatch.setitem(sys.modules, "galsim", None)  # import galsim -> ImportError
    out = tmp_path / "out"
    res = CliRunner().invoke(bias_run, ["--config", str(path), "--g1-true", "0.02", "--seed", "1",
                                        "--run-id", "r1", "--output-dir", str(out)])  # fmt: skip
    assert res.exit_code == 2, res.output
    assert "simulation.renderer" in res.output and "pip install" in res.output
    assert not out.exists()
