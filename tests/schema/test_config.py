"""Strict config schema: SHINE-shaped YAML loads; bad values name their key path."""

import copy

import pytest
import yaml

from shearbatch.schema import (
    ConfigError,
    Fixed,
    LogNormal,
    config_hash,
    load_config,
    parse_config,
)

LEVEL0 = "configs/level0.yaml"


@pytest.fixture(scope="module")
def raw():
    with open(LEVEL0) as fh:
        return yaml.safe_load(fh)


def _with(raw, path, value):
    r = copy.deepcopy(raw)
    node = r
    keys = path.split(".")
    for k in keys[:-1]:
        node = node.setdefault(k, {})
    node[keys[-1]] = value
    return r


def test_level0_matches_the_issue():
    cfg = load_config(LEVEL0)
    assert cfg.image.pixel_scale == 0.263
    assert (cfg.image.size_x, cfg.image.size_y, cfg.image.n_objects) == (48, 48, 1)
    assert cfg.psf.sigma == 0.382
    assert cfg.gal.type == "Exponential"
    assert cfg.gal.flux == Fixed(value=1.0)
    assert cfg.gal.half_light_radius == Fixed(value=0.5)
    assert cfg.image.noise.sigma == 1e-6
    assert cfg.gal.shear.type == "UniformDisk"  # flat: the prior cannot decide m
    assert cfg.inference.precision == "float64"
    assert cfg.inference.method == "map"


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("gal.half_light_radius", -1, "gal.half_light_radius: must be > 0"),
        ("gal.flux", 0, "gal.flux: must be > 0"),
        ("gal.foo", 1, "gal.foo: unknown key"),
        ("image.pixel_scale", -0.2, "image.pixel_scale: must be > 0"),
        ("image.size_x", -48, "image.size_x: must be >= 1"),
        ("image.noise.sigma", -1.0, "image.noise.sigma: must be > 0"),
        ("image.size_y", "big", "image.size_y:"),
        ("psf.sigma", 0, "psf.sigma: must be > 0"),
        ("psf", {"type": "Gaussian"}, "psf: a Gaussian PSF needs exactly one of sigma and fwhm"),
        ("psf", {"sigma": 0.3, "fwhm": 0.7}, "psf: a Gaussian PSF needs exactly one of"),
        ("psf", {"sigma": 0.3, "beta": 3.0}, "psf: beta: only for type Moffat"),
        ("psf", {"type": "Moffat", "fwhm": 0.7}, "psf: a Moffat PSF needs fwhm and beta"),
        ("psf", {"type": "Moffat", "sigma": 0.3, "beta": 3}, "psf: sigma: a Moffat PSF is sized"),
        ("psf", {"type": "Moffat", "fwhm": 0.7, "beta": 1.2}, "psf: beta: must be > 1.5"),
        ("psf", {"type": "Moffat", "fwhm": 0.7, "beta": 3, "trunc": 0.5}, "psf: trunc: must be >"),
        ("psf", {"type": "Moffat", "fwhm": 0.7, "beta": 3, "e1": 0.9, "e2": 0.5}, "psf: |e| must"),
        ("psf", {"type": "Moffat", "fwhm": 0.7, "beta": 3, "trunc": 3, "e1": 0.7}, "psf: |e| must"),
        ("psf", {"type": "Airy", "fwhm": 0.7}, "psf.type:"),
        ("gal.flux", {"type": "Uniform", "min": 2, "max": 1}, "gal.flux: min must be < max"),
        ("gal.flux", {"type": "Cauchy", "sigma": 1}, "gal.flux: unknown distribution 'Cauchy'"),
        ("gal.flux", {"type": "Normal", "sigma": 1}, "gal.flux: prior must have positive support"),
        (
            "gal.shear",
            {"type": "G1G2", "g1": {"type": "Normal", "sigma": -1}, "g2": 0.0},
            "gal.shear.g1.sigma: must be > 0",
        ),
        ("gal.shear", {"type": "G1G2", "g1": 0.0, "g2": 1.5}, "gal.shear.g2: |g| must be < 1"),
        ("gal.shear", {"type": "G1G2", "g2": 0.0}, "gal.shear: g1: required with type G1G2"),
        ("gal.shear", {"g1": 0.0}, "gal.shear: g1: only with type G1G2"),
        ("image.noise", {"sigma": 1e-3, "snr": 30}, "image.noise: give exactly one of"),
        ("inference.precision", "float16", "inference.precision:"),
        (
            "inference.map_config.learnig_rate",
            0.1,
            "inference.map_config.learnig_rate: unknown key",
        ),
        ("inference.method", "hmc", "inference.method: unknown method 'hmc'"),
        ("inference.map_config.num_steps", 0, "inference.map_config.num_steps: must be >= 1"),
        (
            "inference.nuts_config.max_tree_depth_sampling",
            0,
            "inference.nuts_config.max_tree_depth_sampling: must be >= 1",
        ),
        (
            "inference.nuts_config.map_init.num_steps",
            0,
            "inference.nuts_config.map_init.num_steps: must be >= 1",
        ),
        (
            "gal.shear",
            {"type": "G1G2", "g1": {"type": "Normal", "sigma": float("inf")}, "g2": 0.0},
            "gal.shear.g1.sigma: must be > 0",
        ),
        ("inference.nuts_config.adapt_mass_matrix", "maybe", "inference.nuts_config.adapt_mass"),
        ("campaign.shear_grid", [0.1, 1.0], "campaign.shear_grid: |g| must be < 1"),
        ("campaign.batch_size", 0, "campaign.batch_size: must be >= 1"),
        ("simulation.psf", {"sigma": -0.4}, "simulation.psf.sigma: must be > 0"),
        ("simulation.gal", {"typo": 1}, "simulation.gal.typo: unknown key"),
    ],
)
def test_bad_values_name_the_key_path(raw, path, value, message):
    with pytest.raises(ConfigError) as err:
        parse_config(_with(raw, path, value))
    text = str(err.value)
    assert text.startswith(message), text
    assert "\n" not in text


def test_numbers_and_numeric_strings_are_fixed_distributions_are_latent(raw):
    r = _with(raw, "gal.flux", "1e-3")  # PyYAML reads 1e-3 as a string
    r = _with(r, "gal.half_light_radius", {"type": "LogNormal", "mean": 0.5, "sigma": 0.1})
    cfg = parse_config(r)
    assert cfg.gal.flux == Fixed(value=1e-3)
    assert isinstance(cfg.gal.half_light_radius, LogNormal)


def test_simulation_overrides_only_the_generator(raw):
    cfg = parse_config(_with(raw, "simulation", {"psf": {"sigma": 0.4011}}))
    assert cfg.psf.sigma == 0.382
    assert cfg.truth().psf.sigma == 0.4011
    assert cfg.truth().gal == cfg.gal


def test_config_hash_ignores_campaign_but_not_model(raw):
    a = parse_config(raw)
    b = parse_config(_with(raw, "campaign.batch_size", 3))
    c = parse_config(_with(raw, "psf.sigma", 0.4))
    assert config_hash(a) == config_hash(b) != config_hash(c)


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("image: {pixel_scale: [\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_config(bad)


def test_position_prior_uniform_box_or_normal_point(raw):
    from shearbatch.spec import run_spec

    raw = copy.deepcopy(raw)
    raw["image"].update(size_x=16, size_y=16)
    raw["gal"]["position"] = {"type": "Normal", "x": 8.5, "y": 7.0, "sigma": 0.3}
    fields = run_spec(parse_config(raw)).model.fields
    assert (fields.dx.kind, fields.dx.args) == ("normal", (0.5, 0.3))
    assert (fields.dy.kind, fields.dy.args) == ("normal", (-1.0, 0.3))
    raw["gal"]["position"] = {"x_min": 7.5, "x_max": 8.5, "y_min": 7.5, "y_max": 8.5}
    assert run_spec(parse_config(raw)).model.fields.dx.kind == "uniform"
    for bad, needle in (({"type": "Normal", "x": 8.0, "y": 8.0}, "needs sigma"),
                        ({"type": "Normal", "x": 8.0, "y": 8.0, "sigma": 0.0}, "sigma must be > 0"),
                        ({"type": "Normal", "x": 8, "y": 8, "sigma": 1, "x_min": 7}, "does not take x_min"),
                        ({"x_min": 7.5, "x_max": 8.5, "y_min": 7.5}, "needs y_max")):  # fmt: skip
        raw["gal"]["position"] = bad
        with pytest.raises(ConfigError, match=r"gal\.position") as err:
            parse_config(raw)
        assert needle in str(err.value)
