"""Requirements by name: one table of presets (docs/requirements.md generated from it), a
config names its own (campaign.requirement, validated), bias-stats picks it with no flag
and says where from, --level is an alias, bad names exit 2 with one line."""

import json
import os
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from shearbatch.analysis import verdict
from shearbatch.cli import bias_stats
from shearbatch.schema import ConfigError, parse_config
from shearbatch.schema import requirements as rq

ROOT = Path(__file__).resolve().parents[2]
REGEN = "python -m shearbatch.schema.requirements > docs/requirements.md"


def test_docs_requirements_md_is_not_stale():
    on_disk = (ROOT / "docs" / "requirements.md").read_text()
    assert on_disk == rq.requirements_markdown(), f"docs/requirements.md is stale: run `{REGEN}`"


def test_every_shipped_config_names_a_preset_matched_to_it():
    for path in sorted((ROOT / "configs").glob("*.yaml")):
        raw = yaml.safe_load(path.read_text())
        if "image" not in raw:  # configs/acceptance.yaml is not a campaign config
            continue
        name = raw["campaign"]["requirement"]
        assert name == path.stem and path.name in rq.REQUIREMENTS[name]["for"], path
        assert parse_config(raw).campaign.requirement == name


def test_presets_have_sources_and_the_levels_keep_their_numbers():
    for name, r in rq.REQUIREMENTS.items():
        assert r["source"] and r["for"] and set(rq.CRITERIA_KEYS) <= set(r), name
    assert rq.criteria_of("lsst-project")["max_abs_m"] == 1e-3
    assert rq.criteria_of("lsst-project")["max_abs_c"] == 1e-4
    assert rq.criteria_of("desc-srd-y10")["max_abs_m"] == 3e-3
    assert rq.criteria_of("euclid")["max_abs_m"] == 2e-3
    # the old levels, unchanged, are aliases of the level presets
    assert verdict.ACCEPTANCE["level_0"] == rq.criteria_of("level0")
    assert verdict.ACCEPTANCE["level_2"]["max_abs_m"] == 5e-3
    assert rq.resolve("level_1") == "level1"
    with pytest.raises(ValueError, match="unknown requirement 'lsst'"):
        rq.resolve("lsst")


def test_a_config_naming_an_unknown_requirement_is_one_line_naming_the_key():
    raw = yaml.safe_load((ROOT / "configs" / "survey_snr30.yaml").read_text())
    raw["campaign"]["requirement"] = "lsst-y99"
    with pytest.raises(ConfigError) as err:
        parse_config(raw)
    msg = str(err.value)
    assert msg.startswith("campaign.requirement:") and "lsst-project" in msg and "\n" not in msg


def _table(tmp: Path) -> Path:
    from tests.analysis.test_planning import known_table

    csv = tmp / "summary.csv"
    known_table(40, 0.0, 0.05).to_csv(csv, index=False)
    return csv


def _campaign(tmp: Path, requirement: str | None) -> Path:
    """A campaign root whose campaign.json records a config naming ``requirement``, with an
    up-to-date summary.csv (newer than the manifest)."""
    root = tmp / "camp"
    root.mkdir()
    camp = {"requirement": requirement} if requirement else {}
    (root / "campaign.json").write_text(json.dumps({"plan": {"n_planned": 80},
                                                    "config": {"campaign": camp}}))  # fmt: skip
    csv = _table(root)
    later = os.stat(root / "campaign.json").st_mtime + 10
    os.utime(csv, (later, later))
    return root


@pytest.mark.parametrize(
    "args, name, chosen",
    [
        (["--requirement", "euclid"], "euclid", "--requirement"),
        (["--level", "level_2"], "level2", "--level"),
        ([], "desc-srd-y10", "campaign.requirement in"),
    ],
)
def test_bias_stats_says_which_requirement_and_where_from(tmp_path, args, name, chosen):
    root = _campaign(tmp_path, "desc-srd-y10")
    res = CliRunner().invoke(bias_stats, ["--input", str(root), "--no-plots", *args])
    assert res.exit_code in (0, 1, 3), res.output
    r = json.loads((root / "bias_results.json").read_text())
    assert r["requirement"]["name"] == name and r["requirement"]["chosen"].startswith(chosen)
    thr = rq.REQUIREMENTS[name]["max_abs_m"]
    assert f"requirement {name} (|m| < {thr:g}," in res.output
    assert next(c for c in r["criteria"] if c["name"] == "|m1|")["threshold"] == thr
    if name == "level2":
        assert r["level"] == "level_2"  # the old name, for readers of bias_results.json
    # a campaign directory gets its report without --report, and no extraction was needed
    assert (root / "report.html").is_file() and "extracted" not in res.output


def test_no_requirement_anywhere_is_level0_by_default(tmp_path):
    root = _campaign(tmp_path, None)
    res = CliRunner().invoke(bias_stats, ["--input", str(root), "--no-plots"])
    r = json.loads((root / "bias_results.json").read_text())
    assert r["requirement"]["name"] == "level0" and "default" in r["requirement"]["chosen"]
    assert "requirement level0" in res.output


@pytest.mark.parametrize(
    "args, flag",
    [
        (["--requirement", "lsst-y99"], "--requirement: unknown requirement 'lsst-y99'"),
        (["--level", "level_9"], "--level: unknown requirement 'level_9'"),
        (["--requirement", "euclid", "--level", "level_0"], "--level: an alias of"),
        (["--target-sigma-m", "0"], "--target-sigma-m: must be > 0"),
    ],
)
def test_bad_requirement_flags_exit_2_before_anything_is_written(tmp_path, args, flag):
    csv = _table(tmp_path)
    res = CliRunner().invoke(bias_stats, ["--input", str(csv), "--output-dir",
                                          str(tmp_path / "o"), *args])  # fmt: skip
    assert res.exit_code == 2 and flag in res.output, res.output
    assert len(res.output.strip().splitlines()) == 1 and not (tmp_path / "o").exists()


def test_a_directory_that_is_not_a_campaign_is_refused_naming_input(tmp_path):
    (tmp_path / "empty").mkdir()
    res = CliRunner().invoke(bias_stats, ["--input", str(tmp_path / "empty")])
    assert res.exit_code == 2 and "--input:" in res.output and "bias-extract" in res.output
    assert "not a campaign" in res.output and not list((tmp_path / "empty").iterdir())


def test_acceptance_overrides_may_name_the_preset_or_its_alias(tmp_path):
    acc = tmp_path / "acc.yaml"
    acc.write_text("acceptance:\n  level_0: {z: 3}\n  euclid: {min_seeds: 5}\n")
    assert verdict.load_acceptance(str(acc), "level0") == {"z": 3.0}
    assert verdict.load_acceptance(str(acc), "euclid") == {"min_seeds": 5}
    acc.write_text("acceptance:\n  lsst: {z: 3}\n")
    with pytest.raises(ValueError, match=r"acceptance\.lsst: unknown requirement"):
        verdict.load_acceptance(str(acc), "level0")


def test_output_dir_takes_the_results_and_report_of_a_campaign_directory(tmp_path):
    root = _campaign(tmp_path, "euclid")
    out = tmp_path / "elsewhere"
    res = CliRunner().invoke(bias_stats, ["--input", str(root), "--output-dir", str(out),
                                          "--no-plots"])  # fmt: skip
    assert res.exit_code in (0, 1, 3), res.output
    assert (out / "bias_results.json").is_file() and (out / "report.html").is_file()
    assert not (root / "bias_results.json").exists() and not (root / "report.html").exists()
