"""SHINE configs load: keys of SHINE's dialect that have no effect here load with one
warning each, naming the key and saying why; a typo or an unknown key is still an error."""

import copy
import logging
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from shearbatch.cli import bias_run
from shearbatch.core.methods.map import MapConfig
from shearbatch.io import realization_status
from shearbatch.schema import ConfigError, load_config, parse_config
from shearbatch.schema.dialect import IGNORED

SHINE_L0 = Path(__file__).resolve().parents[1] / "data" / "shine_level0.yaml"
IGNORED_HERE = ("inference.map_config.learning_rate", "data_path", "output_path")


@pytest.fixture
def raw():
    return yaml.safe_load(SHINE_L0.read_text())


def dialect_warnings(caplog):
    return [r.getMessage() for r in caplog.records if "ignored (SHINE key)" in r.getMessage()]


def test_shine_level0_loads_with_one_warning_per_ignored_key(caplog):
    with caplog.at_level(logging.WARNING, logger="shearbatch"):
        cfg = load_config(SHINE_L0)
    msgs = dialect_warnings(caplog)
    assert len(msgs) == len(IGNORED_HERE), msgs
    for key in IGNORED_HERE:
        assert sum(m.startswith(f"{key}: ") for m in msgs) == 1, (key, msgs)
    lr = next(m for m in msgs if m.startswith("inference.map_config.learning_rate"))
    default = MapConfig().optimizer  # the file names none: the schema's default optimizer
    assert f"no effect with optimizer {default}" in lr
    # ignored means ignored: the same config as the file without those keys
    assert cfg.inference.map_config.learning_rate is None
    assert cfg.inference.map_config.optimizer == default and cfg.inference.rng_seed == 42


def test_learning_rate_is_kept_and_validated_with_adam(raw, caplog):
    raw["inference"]["map_config"]["optimizer"] = "adam"
    with caplog.at_level(logging.WARNING, logger="shearbatch"):
        cfg = parse_config(raw)
    assert cfg.inference.map_config.learning_rate == 0.1
    assert not any("learning_rate" in m for m in dialect_warnings(caplog))
    raw["inference"]["map_config"]["learning_rate"] = -1
    with pytest.raises(ConfigError, match=r"^inference\.map_config\.learning_rate: must be > 0"):
        parse_config(raw)


def test_nuts_map_init_learning_rate_is_ignored_with_its_reason(raw, caplog):
    raw["inference"]["nuts_config"] = {"map_init": {"enabled": True, "learning_rate": 0.01}}
    with caplog.at_level(logging.WARNING, logger="shearbatch"):
        parse_config(raw)
    (msg,) = [m for m in dialect_warnings(caplog) if "map_init" in m]
    assert msg.startswith("inference.nuts_config.map_init.learning_rate: ignored (SHINE key)")


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("gal", "flux"), {"typo": 1}, "gal.flux: "),
        (("inference", "map_config", "learnig_rate"), 0.1, "inference.map_config.learnig_rate:"),
        (("inference", "nuts_config", "map_init", "lr"), 0.1, "inference.nuts_config.map_init.lr"),
        (("shine_section",), {"a": 1}, "shine_section: unknown key"),
        (("data_path",), "obs.fits", "data_path: unknown key"),  # observed data: not here
    ],
)
def test_typos_and_unknown_keys_stay_errors(raw, path, value, message):
    r = copy.deepcopy(raw)
    node = r
    for k in path[:-1]:
        node = node.setdefault(k, {})
    node[path[-1]] = value
    with pytest.raises(ConfigError) as err:
        parse_config(r)
    assert str(err.value).startswith(message), str(err.value)


def test_every_rule_names_a_key_path():
    assert all(rule.path and all(rule.path) for rule in IGNORED)


def test_shine_level0_runs_through_bias_run_after_the_warnings(tmp_path, caplog):
    out = tmp_path / "camp"
    args = ["--config", str(SHINE_L0), "--shear-grid", "0.02", "--n-realizations", "1",
            "--batch-size", "1", "--no-progress", "--output-dir", str(out)]  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="shearbatch"):
        res = CliRunner().invoke(bias_run, args)
    assert res.exit_code == 0, res.output
    msgs = dialect_warnings(caplog)
    assert sorted(m.split(":")[0] for m in msgs) == sorted(IGNORED_HERE), msgs
    (rid,) = [p.name for p in out.iterdir() if p.is_dir()]
    assert realization_status(out, rid) == "done"


def test_flux_typo_exits_2_naming_the_key(tmp_path):
    bad = yaml.safe_load(SHINE_L0.read_text())
    bad["gal"]["flux"] = {"typo": 1}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    res = CliRunner().invoke(
        bias_run, ["--config", str(path), "--g1-true", "0.02", "--output-dir", str(tmp_path)]
    )
    assert res.exit_code == 2, res.output
    assert "gal.flux" in res.output and "typo" in res.output
    assert len([ln for ln in res.output.splitlines() if "Error" in ln]) == 1
