"""The CLI explains itself: every option's default, a worked example, --version,
--show-config, and the two-dimensional shear grid, through the real click commands."""

import re
import shlex
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from shearbatch import __version__
from shearbatch.campaign import plan_campaign
from shearbatch.cli import bias_extract, bias_run, bias_stats
from shearbatch.schema import load_config

COMMANDS = {"bias-run": bias_run, "bias-extract": bias_extract, "bias-stats": bias_stats}
LEVEL0 = "configs/level0.yaml"


def _help(cmd) -> str:
    res = CliRunner().invoke(cmd, ["--help"], terminal_width=100)
    assert res.exit_code == 0, res.output
    return res.output


def _option_help(text: str) -> dict[str, str]:
    """Option -> its help text (continuation lines joined) from the rendered --help."""
    opts: dict[str, str] = {}
    body = text.split("Options:", 1)[1].split("Example:", 1)[0]
    current = None
    for line in body.splitlines():
        m = re.match(r"^  (-\w, )?(--[\w-]+)", line)
        if m:
            current = m.group(2)
            opts[current] = line
        elif current is not None:
            opts[current] += " " + line.strip()
    return {k: re.sub(r"\s+", " ", v) for k, v in opts.items()}


@pytest.mark.parametrize("name", COMMANDS)
def test_every_option_shows_its_default_or_that_it_is_required(name):
    opts = _option_help(_help(COMMANDS[name]))
    assert "--version" in opts
    for opt, text in opts.items():
        if opt in ("--help", "--version"):
            continue
        assert "[default: " in text or "[required" in text, f"{name} {opt}: {text}"


@pytest.mark.parametrize("name", COMMANDS)
def test_help_ends_with_a_worked_example(name):
    text = _help(COMMANDS[name])
    example = text.split("Example:", 1)[1]
    assert example.strip().startswith(name), example


def test_bias_run_example_is_a_valid_command(tmp_path):
    """The example in bias-run --help plans (dry run) without an error."""
    example = _help(bias_run).split("Example:", 1)[1].strip().split("\n")
    first = " ".join(ln.strip().rstrip("\\") for ln in example[:2])
    args = shlex.split(first)[1:]
    out = tmp_path / "c"
    args[args.index("--output-dir") + 1] = str(out)
    res = CliRunner().invoke(bias_run, [*args, "--dry-run"])
    assert res.exit_code == 0, res.output
    assert "plan: 80 realizations" in res.output  # 2 x 2 (g1, g2) points x 20 seeds
    assert not out.exists()


def test_config_defaults_are_the_schemas():
    opts = _option_help(_help(bias_run))
    assert "campaign.batch_size (16 if unset)" in opts["--batch-size"]
    assert "inference.method (map if unset)" in opts["--method"]
    assert "inference.precision (float64 if unset)" in opts["--x64"]
    assert "campaign.output_dir (results if unset)" in opts["--output-dir"]


def test_precise_help_of_the_confusing_options():
    run = _option_help(_help(bias_run))
    assert "float64" in run["--x64"] and "float32" in run["--x64"]
    assert "'off'" in run["--cache-dir"] and "SHEARBATCH_CACHE_DIR" in run["--cache-dir"]
    assert "reads SHINE-style configs" in run["--config"]
    stats = _option_help(_help(bias_stats))
    assert "worst" in stats["--posterior-dir"] and "R-hat" in stats["--posterior-dir"]


@pytest.mark.parametrize("name", COMMANDS)
def test_version(name):
    res = CliRunner().invoke(COMMANDS[name], ["--version"])
    assert res.exit_code == 0, res.output
    assert f"shearbatch {__version__}" in res.output and "jax " in res.output


def test_show_config_prints_the_resolved_config_with_flags_applied(tmp_path):
    res = CliRunner().invoke(bias_run, ["--show-config", LEVEL0, "--batch-size", "3"])
    assert res.exit_code == 0, res.output
    shown = yaml.safe_load(res.output)
    assert shown["campaign"]["batch_size"] == 3
    # defaults the file does not spell out are filled in
    assert shown["inference"]["nuts_config"]["warmup"] == 500
    assert shown["image"]["noise"] == {"type": "Gaussian", "sigma": 1e-6, "snr": None}
    # and it is itself a valid config that resolves to the same thing
    path = tmp_path / "shown.yaml"
    path.write_text(res.output)
    want = load_config(LEVEL0).model_dump()
    want["campaign"]["batch_size"] = 3
    assert load_config(path).model_dump() == want


def test_show_config_uses_config_and_rejects_bad_keys(tmp_path):
    res = CliRunner().invoke(bias_run, ["--config", LEVEL0, "--show-config"])
    assert res.exit_code == 0 and "campaign:" in res.output
    bad = tmp_path / "bad.yaml"
    bad.write_text(Path(LEVEL0).read_text().replace("half_light_radius", "half_light_radiu"))
    res = CliRunner().invoke(bias_run, ["--show-config", str(bad)])
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, res.output


def test_missing_config_is_one_line():
    res = CliRunner().invoke(bias_run, ["--shear-grid", "0.02"])
    assert res.exit_code == 2 and "--config" in res.output
    assert len(res.output.strip().splitlines()) == 1


def test_two_dimensional_grid_varies_both_components():
    plan = plan_campaign([-0.05, 0.05], shear_grid_g2=[-0.02, 0.02], n_realizations=3)
    assert len(plan) == 12 and len({r.run_id for r in plan}) == 12
    pts = {(r.g1, r.g2) for r in plan}
    assert pts == {(a, b) for a in (-0.05, 0.05) for b in (-0.02, 0.02)}
    # without a g2 grid, g2 is the constant (the 1-D plan is unchanged)
    assert {r.g2 for r in plan_campaign([0.01, 0.02], g2=0.03)} == {0.03}


def test_two_dimensional_paired_twins_are_negatives_sharing_a_seed():
    plan = plan_campaign([-0.05, 0.05], shear_grid_g2=[-0.02, 0.02], paired=True)
    by_pair: dict[str, list] = {}
    for r in plan:
        by_pair.setdefault(r.pair_id, []).append(r)
    assert len(by_pair) == 2 and len(plan) == 4  # +-(0.05, 0.02) and +-(0.05, -0.02)
    for twins in by_pair.values():
        (p,) = [r for r in twins if r.pair_sign == 1]
        (m,) = [r for r in twins if r.pair_sign == -1]
        assert (p.g1, p.g2) == (-m.g1, -m.g2) and p.g1 > 0 and p.seed == m.seed


def test_g2_grid_flag_and_its_exclusions(tmp_path):
    base = ["--config", LEVEL0, "--output-dir", str(tmp_path / "o"), "--dry-run"]
    res = CliRunner().invoke(bias_run, [*base, "--shear-grid-g2", "-0.02", "0.02"])
    assert res.exit_code == 0, res.output
    assert "plan: 16 realizations" in res.output  # level0.yaml: 4 g1 values x 2 g2 x 2 seeds
    res = CliRunner().invoke(bias_run, [*base, "--shear-grid-g2", "0.02", "--g2-true", "0.01"])
    assert res.exit_code == 2 and "--g2-true and --shear-grid-g2" in res.output
    res = CliRunner().invoke(bias_run, [*base, "--shear-grid-g2", "1.5"])
    assert res.exit_code == 2 and "--shear-grid-g2: |g| must be < 1" in res.output
