"""One output root, one campaign (issue 25): every plan-defining setting is part of the
campaign's identity, the config as run is frozen in the root, ``--set`` overrides any key,
the campaign may grow, bias-extract reports directories that are not in the plan, and the
dry run estimates disk (and with --pilot, time). Through the real click commands.

One tiny Level 0 campaign (16x16 stamps, MAP) is run once for the module; every other
check plans against it (the refusals come before any computation)."""

import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml
from click.testing import CliRunner

from shearbatch.app import PlanError, RunOptions, parse_sets, plan_run
from shearbatch.cli import bias_extract, bias_run

ROOT = Path(__file__).resolve().parents[2]
LEVEL0 = str(ROOT / "configs" / "level0.yaml")
SNR30 = str(ROOT / "configs" / "survey_snr30.yaml")
#: the tiny stamps, given the way a user would: --set
SMALL = ["--set", "image.size_x=16", "--set", "image.size_y=16"]


def invoke(cmd, args):
    return CliRunner().invoke(cmd, [str(a) for a in args])


def one_line_error(res, needle):
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0], res.output
    assert "Traceback" not in res.output


def base(root, *extra, grid=("0.01", "0.02"), n=2):
    return ["--config", LEVEL0, *SMALL, "--shear-grid", *grid, "--n-realizations", n,
            "--batch-size", 2, "--output-dir", root, "--no-progress", *extra]  # fmt: skip


def snapshot(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*")}


@pytest.fixture(scope="module")
def camp(module_tmp):
    """4 realizations (g1 0.01, 0.02 x seeds 0, 1), then grown to 3 seeds (2 more)."""
    root = module_tmp / "camp"
    res = invoke(bias_run, base(root))
    assert res.exit_code == 0, res.output
    first = json.loads((root / "campaign.json").read_text())
    grown = invoke(bias_run, base(root, n=3))
    return root, first, res, grown


def test_the_manifest_and_the_frozen_config_record_the_campaign_as_run(camp):
    root, first, _, _ = camp
    assert first["plan"]["shear_grid"] == [0.01, 0.02] and first["plan"]["rotations"] == 1
    keys = {o["key"]: (o["value"], o["source"]) for o in first["overrides"]}
    assert keys["image.size_x"] == (16, "--set image.size_x=16")
    assert keys["campaign.shear_grid"] == ([0.01, 0.02], "--shear-grid")
    frozen = yaml.safe_load((root / "config.yaml").read_text())
    assert frozen["image"]["size_x"] == 16 and frozen["campaign"]["shear_grid"] == [0.01, 0.02]
    assert frozen["gal"] == yaml.safe_load(Path(LEVEL0).read_text())["gal"]


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--shear-grid", "0.05", "--n-realizations", "5"], "--shear-grid / campaign.shear_grid"),
        (["--shear-grid-g2", "-0.02", "0.02"], "--shear-grid-g2 / campaign.shear_grid_g2"),
        (["--g2-true", "0.01"], "--g2-true / campaign.g2"),
        (["--base-seed", "7"], "--base-seed / campaign.base_seed"),
        (["--paired"], "--paired/--no-paired / campaign.paired"),
        (["--rotations", "2"], "--rotations / campaign.rotations"),
        (["--shear-from-prior"], "design"),
        (["--g1-true", "0.01"], "design (--g1-true single / --shear-grid grid"),
        (["--set", "gal.half_light_radius=0.6"],
         "--config (config hash): gal.half_light_radius is 0.6 here, 0.5 in "),
        (["--method", "vi"], "--method / inference.method"),
    ],
    ids=["shear_grid", "shear_grid_g2", "g2", "base_seed", "paired", "rotations", "design",
         "single", "config", "method"],
)  # fmt: skip
def test_another_campaign_in_the_root_exits_2_naming_the_setting(camp, extra, named):
    root = camp[0]
    before = snapshot(root)
    args = base(root)
    for flag in ("--shear-grid", "--n-realizations"):  # the extra flags replace the base's
        if flag in extra:
            i = args.index(flag)
            del args[i : i + (3 if flag == "--shear-grid" else 2)]
    if "--shear-from-prior" in extra or "--g1-true" in extra:
        i = args.index("--shear-grid")
        del args[i : i + 3]
        if "--g1-true" in extra:
            i = args.index("--n-realizations")
            del args[i : i + 2]
    res = invoke(bias_run, [*args, *extra])  # not a dry run: refused before computing
    one_line_error(res, named)
    assert "campaign.json (another campaign)" in res.output and "--overwrite" in res.output
    assert snapshot(root) == before  # nothing written or touched


def test_the_issues_mixing_command_names_shear_grid(camp):
    root = camp[0]
    before = snapshot(root)
    res = invoke(bias_run, ["--config", LEVEL0, *SMALL, "--shear-grid", "0.05",
                            "--n-realizations", "5", "--output-dir", root])  # fmt: skip
    one_line_error(res, "shear_grid")
    assert snapshot(root) == before


def test_growing_n_realizations_resumes_and_grows_the_plan(camp):
    root, first, _, grown = camp
    assert grown.exit_code == 0, grown.output
    assert "wrote 2 ok, 0 failed" in grown.output  # seed 2 at both grid points, nothing redone
    man = json.loads((root / "campaign.json").read_text())
    assert man["plan"]["n_planned"] == 6 and man["plan"]["n_realizations"] == 3
    assert man["created_at"] == first["created_at"]
    assert man["extended"][-1]["n_realizations"] == [2, 3]
    assert yaml.safe_load((root / "config.yaml").read_text())["campaign"]["n_realizations"] == 3
    # fewer realizations: a part of the plan, nothing to do, the plan unchanged
    res = invoke(bias_run, [*base(root, n=1), "--dry-run"])
    assert res.exit_code == 0 and "to run: 0" in res.output, res.output


def test_single_realizations_of_one_config_share_a_root(tmp_path):
    """A root of --g1-true realizations takes more of them (another seed, another g1): its
    campaign is the config, not one realization's shear and seed."""
    root = tmp_path / "singles"
    one = ["--config", LEVEL0, *SMALL, "--output-dir", root, "--no-progress"]
    res = invoke(bias_run, [*one, "--g1-true", "0.01", "--seed", "3"])
    assert res.exit_code == 0, res.output
    res = invoke(bias_run, [*one, "--g1-true", "0.02", "--seed", "4", "--dry-run"])
    assert res.exit_code == 0 and "to run: 1" in res.output, res.output
    res = invoke(bias_run, [*one, "--g1-true", "0.02", "--seed", "4", "--x64", "--dry-run"])
    assert res.exit_code == 0, res.output  # level0 is float64 already: the same campaign
    res = invoke(bias_run, [*one, "--g1-true", "0.02", "--no-x64", "--dry-run"])
    one_line_error(res, "--x64/--no-x64 / inference.precision (dtype): float32 differs")


def test_without_config_the_roots_frozen_config_is_read(camp, tmp_path):
    root = camp[0]
    res = invoke(bias_run, ["--output-dir", root, "--dry-run"])
    assert res.exit_code == 0, res.output
    assert f"config: {root / 'config.yaml'}" in res.output
    assert "plan: 6 realizations" in res.output and "already complete: 6" in res.output
    res = invoke(bias_run, ["--output-dir", root, "--show-config"])
    assert res.exit_code == 0 and "  size_x: 16\n" in res.output, res.output
    # another root without config.yaml: the one-line error names both ways
    res = invoke(bias_run, ["--output-dir", tmp_path, "--dry-run"])
    one_line_error(res, "Missing option '--config'")


def test_extract_reports_directories_not_in_the_plan(camp, module_tmp):
    root = module_tmp / "strangers"
    shutil.copytree(camp[0], root)
    src = root / "g1_+0.0100_g2_+0.0000_s0"
    for seed in (7, 8):  # what a run of another grid left behind before the check existed
        shutil.copytree(src, root / f"g1_+0.0500_g2_+0.0000_s{seed}")
    res = invoke(bias_extract, ["--input-dir", root, "--no-progress"])  # --output: default
    assert res.exit_code == 0, res.output
    assert "6 of 6 planned realization(s) complete" in res.output
    assert "2 realization directories not in the plan (g1_+0.0500_g2_+0.0000_s7, " in res.output
    df = pd.read_csv(root / "summary.csv")
    assert len(df) == 8
    assert sorted(df.loc[~df["in_plan"], "run_id"]) == [f"g1_+0.0500_g2_+0.0000_s{s}"
                                                        for s in (7, 8)]  # fmt: skip
    assert df["in_plan"].sum() == 6


def test_a_root_without_manifest_leaves_in_plan_unknown(camp, module_tmp):
    root = module_tmp / "old"
    root.mkdir()
    shutil.copytree(camp[0] / "g1_+0.0100_g2_+0.0000_s0", root / "g1_+0.0100_g2_+0.0000_s0")
    res = invoke(bias_extract, ["--input-dir", root, "--no-progress"])
    assert res.exit_code == 0, res.output
    assert "not in the plan" not in res.output
    assert pd.read_csv(root / "summary.csv")["in_plan"].isna().all()


# --------------------------------------------------------------------------- --set


def plan_of(*sets, config=SNR30, **kw):
    return plan_run(RunOptions.of(config=config, set_values=sets, dry_run=True,
                               output_dir=kw.pop("output_dir", "/nonexistent/x"), **kw))  # fmt: skip


def test_set_overrides_any_key_as_yaml_before_the_schema():
    plan = plan_of("image.noise.snr=15", "campaign.shear_grid=[0.01, 0.03]", "gal.flux.mean=2")
    cfg = plan.cfg
    assert cfg.image.noise.snr == 15 and cfg.campaign.shear_grid == [0.01, 0.03]
    assert cfg.gal.flux.mean == 2.0
    assert plan.config_data["image"]["noise"] == {"type": "Gaussian", "snr": 15}
    rec = {o["key"]: o for o in plan.overrides}
    assert rec["image.noise.snr"] == {"key": "image.noise.snr", "value": 15,
                                      "source": "--set image.noise.snr=15"}  # fmt: skip
    sets = ["image.fft_size=null", "campaign.shear_grid=[1, 2]", "inference.method=map"]
    assert parse_sets(sets) == {"image.fft_size": (sets[0], None),
                                "campaign.shear_grid": (sets[1], [1, 2]),
                                "inference.method": (sets[2], "map")}  # fmt: skip


@pytest.mark.parametrize(
    ("sets", "config", "needle"),
    [
        (["image.noise.snrr=15"], SNR30,
         "--set image.noise.snrr=15: unknown key image.noise.snrr (did you mean snr?)"),
        (["imgae.size_x=16"], SNR30, "--set imgae.size_x=16: unknown key imgae (did you mean image?)"),
        (["image.noise.snr=-3"], SNR30, "--set image.noise.snr=-3: must be > 0"),
        (["image.size_x=big"], SNR30, "--set image.size_x=big: "),
        (["image.noise.snr=15"], LEVEL0, "(--set image.noise.snr=15)"),
        (["image.size_x.deep=1"], SNR30, "--set image.size_x.deep=1: image.size_x is 32"),
        (["image.noise.snr"], SNR30, "--set: expected KEY.PATH=VALUE"),
        (["image.noise.snr=[1, "], SNR30, "the value is not YAML"),
        (["image.size_x=16", "image.size_x=24"], SNR30, "image.size_x is also set by --set"),
        (["inference.method=nuts"], SNR30, "inference.method is also set by --method"),
    ],
)  # fmt: skip
def test_bad_set_items_are_one_line_naming_the_item(tmp_path, sets, config, needle):
    extra = ["--method", "map"] if "method" in needle else []
    args = ["--config", config, *[t for s in sets for t in ("--set", s)], *extra,
            "--output-dir", tmp_path / "out"]  # fmt: skip
    res = invoke(bias_run, args)  # not a dry run: refused before anything
    one_line_error(res, needle)
    assert not (tmp_path / "out").exists()


def test_set_in_the_cli_dry_run_changes_the_signal_to_noise(tmp_path):
    res = invoke(bias_run, ["--config", SNR30, "--set", "image.noise.snr=15", "--output-dir",
                            tmp_path / "o", "--dry-run"])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "matched-filter S/N of the reference galaxy (prior means, unsheared): 15" in res.output


# --------------------------------------------------------------------------- dry-run estimates


def test_dry_run_estimates_disk_from_the_shapes_and_from_written_realizations(camp, tmp_path):
    from shearbatch.app.estimate import _from_shapes, _measured

    root = camp[0]
    plan = plan_run(RunOptions.of(config=LEVEL0, set_values=tuple(SMALL[1::2]),
                               shear_grid=(0.01, 0.02), n_realizations=3, batch_size=2,
                               output_dir=str(root), dry_run=True))  # fmt: skip
    shapes, measured = _from_shapes(plan), _measured(plan)
    assert measured is not None and "median of 6 complete" in measured.source
    ratio = shapes.bytes_per_realization / measured.bytes_per_realization
    assert 0.67 < ratio < 1.5, (shapes, measured)
    # the CLI: measured where the root holds realizations, from the shapes elsewhere
    res = invoke(bias_run, [*base(root, n=3), "--dry-run"])
    assert res.exit_code == 0 and "(measured: the median of 6" in res.output, res.output
    assert "time: add --pilot for an estimate" in res.output
    res = invoke(bias_run, [*base(tmp_path / "new", n=3), "--dry-run"])
    assert "(from the posterior's shapes: " in res.output, res.output
    assert not (tmp_path / "new").exists()


def test_pilot_times_one_compiled_batch(tmp_path):
    out = tmp_path / "p"
    res = invoke(bias_run, [*base(out, n=3), "--pilot", "--cache-dir", "off"])
    assert res.exit_code == 0, res.output
    line = next(ln for ln in res.output.splitlines() if ln.startswith("pilot (2-lane batch)"))
    assert "compile " in line and "per batch (simulation" in line
    assert "time: this task's 6 realization(s) in 3 batch(es): ~" in res.output
    assert not out.exists() or not any(p for p in out.iterdir() if not p.name.startswith("."))


def test_allocated_cpus_follow_the_allocation(monkeypatch):
    from shearbatch.slurm import allocated_cpus

    assert allocated_cpus({"SLURM_CPUS_PER_TASK": "3"}) == 3
    assert allocated_cpus({}) == len(os.sched_getaffinity(0))
    assert allocated_cpus({"SLURM_CPUS_PER_TASK": ""}) == len(os.sched_getaffinity(0))


def test_plan_refusal_is_a_plan_error(camp):
    with pytest.raises(PlanError, match=r"^--base-seed / campaign.base_seed: 3 differs from 0"):
        plan_run(RunOptions.of(config=LEVEL0, set_values=tuple(SMALL[1::2]),
                            shear_grid=(0.01, 0.02), base_seed=3, output_dir=str(camp[0])))  # fmt: skip
