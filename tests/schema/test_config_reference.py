"""One schema, documented from itself: docs/config.md is generated from the schema and
must not be stale; unknown keys are reported first with a did-you-mean; the shipped
configs comment every block."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from shearbatch.cli import bias_run
from shearbatch.schema import ConfigError, parse_config
from shearbatch.schema.reference import reference_markdown, undocumented

ROOT = Path(__file__).resolve().parents[2]
REGEN = "python -m shearbatch.schema.reference > docs/config.md"


def test_docs_config_md_is_not_stale():
    on_disk = (ROOT / "docs" / "config.md").read_text()
    assert on_disk == reference_markdown(), f"docs/config.md is stale: run `{REGEN}`"


def test_every_key_has_a_description():
    assert undocumented() == [], f"add a docstring under these fields, then `{REGEN}`"


def test_reference_names_every_key_with_its_unit_and_default():
    text = reference_markdown()
    assert "| `pixel_scale` | number > 0 | arcsec / pixel | **required** |" in text
    assert "| `batch_size` | integer >= 1 | count | `16` |" in text
    assert "| `sigma` | number > 0 or null | image units per pixel | null |" in text
    # truncated-normal bounds are documented as min / max
    tn = text.split("### `TruncatedNormal`", 1)[1]
    assert "| `min` |" in tn and "| `max` |" in tn


def test_generator_runs_as_the_documented_command():
    out = subprocess.run([sys.executable, "-m", "shearbatch.schema.reference"],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert out == reference_markdown()


def _level0():
    return yaml.safe_load((ROOT / "configs" / "level0.yaml").read_text())


def _error(mutate) -> str:
    raw = _level0()
    mutate(raw)
    with pytest.raises(ConfigError) as err:
        parse_config(raw)
    return str(err.value)


def test_misspelled_key_is_reported_first_with_did_you_mean():
    msg = _error(lambda r: r["gal"].update(half_light_radiu=r["gal"].pop("half_light_radius")))
    assert msg.startswith("gal.half_light_radiu: unknown key (did you mean half_light_radius?)")
    assert "+1 more: gal.half_light_radius" in msg  # the missing key is still named


@pytest.mark.parametrize(
    ("mutate", "start"),
    [
        (lambda r: r["inference"].update(nuts_config={"warmpu": 3}),
         "inference.nuts_config.warmpu: unknown key (did you mean warmup?)"),
        (lambda r: r.update(campagn={}), "campagn: unknown key (did you mean campaign?)"),
        (lambda r: r["gal"].update(flux={"type": "LogNormal", "meen": 1, "sigma": 0.1}),
         "gal.flux.meen: unknown key (did you mean mean?)"),
        (lambda r: r["gal"].update(flux={"type": "TruncatedNormal", "sigma": 1, "lower": 0.1}),
         "gal.flux.lower: unknown key (known: max, mean, min, sigma, type)"),
        (lambda r: r.update(simulation={"gal": {"flxu": 2}}),
         "simulation.gal.flxu: unknown key (did you mean flux?)"),
    ],
)  # fmt: skip
def test_unknown_keys_suggest_the_known_ones(mutate, start):
    assert _error(mutate).startswith(start)


@pytest.mark.parametrize(
    ("key", "shown"),
    [("\n", "'\\n'"), ("a\tb", "'a\\tb'"), (" x", "' x'"), ("", "''"), ("a\x00", "'a\\x00'")],
)  # fmt: skip
def test_a_key_no_line_can_show_is_quoted_on_one_line(key, shown):
    # a YAML key may hold a newline or a tab ("\n": 1 is valid YAML); the error still
    # fits on one line and names the key so that it can be found in the file
    msg = _error(lambda r: r["image"].update({key: 1}))
    assert "\n" not in msg and msg.isprintable()
    assert msg.startswith(f"image.{shown}: unknown key"), msg


def test_unknown_key_through_the_cli_is_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        (ROOT / "configs" / "level0.yaml").read_text().replace("sigma: 0.382", "sigam: 0.382")
    )
    res = CliRunner().invoke(bias_run, ["--config", str(bad), "--dry-run"])
    assert res.exit_code == 2
    # (psf.sigma is optional since a Gaussian PSF may give fwhm instead: one error only)
    assert res.output.strip() == "Error: psf.sigam: unknown key (did you mean sigma?)"


@pytest.mark.parametrize("path", sorted((ROOT / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_configs_comment_every_block(path):
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines):
        if re.match(r"^[a-z_]+:", line):  # a top-level block
            above = lines[i - 1].lstrip().startswith("#") if i else False
            assert "#" in line or above, f"{path.name}:{i + 1}: block without a comment: {line}"
