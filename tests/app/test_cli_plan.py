"""bias-run's plan (shearbatch.app.plan_run) and its input checking; the command-line
contract (exit 2, one line, nothing written) through the real click command."""

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from shearbatch.app import PlanError, RunOptions, plan_run
from shearbatch.cli import bias_run
from shearbatch.schema import ConfigError
from tests.conftest import SEED_IDS

LEVEL0 = "configs/level0.yaml"
SEED_CMD = [
    "--config",
    LEVEL0,
    "--batch-size",
    "4",
    "--shear-grid",
    "0.01",
    "0.02",
    "0.05",
    "--n-realizations",
    "2",
    "--base-seed",
    "42",
    "--output-dir",
    "results/level0",
    "--dry-run",
]


def run(args, env=None):
    return CliRunner().invoke(bias_run, args, env=env)


def test_seed_command_line_as_installed_script(tmp_path):
    exe = Path(sys.executable).parent / "bias-run"
    (tmp_path / "configs").mkdir()
    (tmp_path / LEVEL0).write_text(Path(LEVEL0).read_text())
    out = subprocess.run(
        [str(exe), *SEED_CMD], capture_output=True, text=True, check=False, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    assert "plan: 6 realizations" in out.stdout
    assert "in 2 batch(es) of 4" in out.stdout
    assert all(rid in out.stdout for rid in SEED_IDS)
    assert "(+2 padding)" in out.stdout
    assert not (tmp_path / "results").exists()  # a dry run writes nothing


def test_dry_run_writes_nothing(tmp_path):
    out = tmp_path / "camp"
    args = [a if a != "results/level0" else str(out) for a in SEED_CMD]
    res = run(args)
    assert res.exit_code == 0, res.output
    assert not out.exists()


def test_shine_config_alias_and_comma_grid(tmp_path):
    res = run(
        [
            "--shine-config",
            LEVEL0,
            "--shear-grid",
            "-0.05,0.02",
            "--n-realizations",
            "1",
            "--output-dir",
            str(tmp_path),
            "--dry-run",
        ]
    )
    assert res.exit_code == 0, res.output
    assert "g1_-0.0500_g2_+0.0000_s0" in res.output and "plan: 2 realizations" in res.output


def _opts(out, **kw) -> RunOptions:
    """The seed's command (grid 0.01 0.02 0.05, 2 realizations, base seed 42, 4 lanes)."""
    seed = dict(config=LEVEL0, batch_size=4, shear_grid=(0.01, 0.02, 0.05), n_realizations=2,
                base_seed=42, output_dir=str(out), dry_run=True)  # fmt: skip
    return RunOptions.of(**{**seed, **kw})


def test_array_task_slices_from_flags_and_slurm_env(tmp_path, monkeypatch):
    seen = []
    for i in range(3):
        monkeypatch.setenv("SLURM_ARRAY_TASK_ID", str(i))
        monkeypatch.setenv("SLURM_ARRAY_TASK_COUNT", "3")
        monkeypatch.setenv("SLURM_ARRAY_TASK_MIN", "0")
        plan = plan_run(_opts(tmp_path))
        assert plan.task == (i, 3) and len(plan.mine) == 2 and len(plan.realizations) == 6
        seen += [r.run_id for r in plan.mine]
    assert seen == SEED_IDS  # contiguous slices, in plan order
    for k in ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_MIN"):
        monkeypatch.delenv(k)
    plan = plan_run(_opts(tmp_path, array_task_id=1, array_task_count=3))
    assert plan.task == (1, 3) and [r.run_id for r in plan.mine] == SEED_IDS[2:4]
    # every task compiles the campaign's lane count, whatever its share
    assert plan.batch_size == 4


def _fake_complete(root, run_id):
    """A directory that is complete by io.layout's definition (JSON files that parse, a
    whole netCDF4 file, the checksums the writer records), without running the inference."""
    import numpy as np

    from shearbatch.io import write_realization

    write_realization(root / run_id, posterior={"g1": np.zeros((1, 2)), "g2": np.zeros((1, 2))},
                      sample_stats={}, observed=np.zeros((1, 4, 4)), attrs={},
                      truth={"g1": 0.01, "g2": 0.0}, convergence={"status": "ok"})  # fmt: skip


def test_plan_skips_completed_realizations(tmp_path):
    _fake_complete(tmp_path, SEED_IDS[0])
    plan = plan_run(_opts(tmp_path))
    assert plan.status[SEED_IDS[0]] == "done"
    assert [r.run_id for r in plan.todo] == SEED_IDS[1:]
    assert len(plan_run(_opts(tmp_path, overwrite=True)).todo) == 6


def test_dry_run_reports_completed_realizations(tmp_path):
    _fake_complete(tmp_path, SEED_IDS[0])
    res = run([*SEED_CMD[:-3], "--output-dir", str(tmp_path), "--dry-run"])
    assert "already complete: 1" in res.output and "to run: 5" in res.output
    assert f"done (skipped): {SEED_IDS[0]}" in res.output


def test_plan_is_frozen(tmp_path):
    plan = plan_run(_opts(tmp_path))
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.todo = ()  # type: ignore[misc]


def test_flags_are_merged_into_the_config_and_validated_by_the_schema(tmp_path):
    plan = plan_run(_opts(tmp_path, method="VI", x64=False, rotations=2, sbatch_tasks=3))
    camp = plan.cfg.campaign
    assert (camp.batch_size, camp.n_realizations, camp.base_seed, camp.rotations) == (4, 2, 42, 2)
    assert camp.shear_grid == [0.01, 0.02, 0.05] and camp.output_dir == str(tmp_path)
    assert plan.cfg.inference.method == "vi" and plan.spec.precision == "float32"
    assert camp.sbatch.tasks == 3
    # the schema's rules, reported under the flag that set the key
    for kw, needle in [
        ({"rotations": 3}, "--rotations: must be 1, 2 or 4, got 3"),
        ({"sbatch_tasks": 0}, "--sbatch-tasks: must be >= 1, got 0"),
        ({"g2_true": 1.5, "shear_grid_g2": ()}, "--g2-true: |g| must be < 1, got 1.5"),
        ({"base_seed": -1}, "--base-seed: must be >= 0, got -1"),
        ({"rotations": 2, "shear_from_prior": True, "shear_grid": ()},
         "--rotations: a ring design needs a shear grid, not --shear-from-prior"),
    ]:  # fmt: skip
        with pytest.raises(PlanError) as err:
            plan_run(_opts(tmp_path, **kw))
        assert str(err.value) == needle
    assert not any(tmp_path.iterdir())  # planning writes nothing


@pytest.fixture
def bad_yaml(tmp_path):
    def make(text):
        p = tmp_path / "cfg.yaml"
        p.write_text(text)
        return str(p)

    return make


def _level0_with(old, new):
    return Path(LEVEL0).read_text().replace(old, new)


#: (RunOptions fields, config text or None for level 0, the one-line message's needle)
BAD_PLANS = [
    ({"config": "missing.yaml"}, None, "config file not found"),
    ({}, "image: {pixel_scale: [\n", "invalid YAML"),
    ({}, _level0_with("  flux: 1.0", "  flux: 1.0\n  colour: red"), "gal.colour: unknown key"),
    ({}, _level0_with("pixel_scale: 0.263", "pixel_scale: -0.263"), "image.pixel_scale: must be > 0"),
    ({}, _level0_with("sigma: 1.0e-6", "sigma: -1.0e-6"), "image.noise.sigma: must be > 0"),
    ({}, _level0_with("size_x: 48", "size_x: -48"), "image.size_x: must be >= 1"),
    ({"shear_grid": (0.01, 1.2)}, None, "--shear-grid: |g| must be < 1"),
    ({"shear_grid": (0.01, -1.0)}, None, "--shear-grid: |g| must be < 1"),
    ({"batch_size": 0}, None, "--batch-size: must be >= 1"),
    ({"batch_size": -3}, None, "--batch-size: must be >= 1"),
    ({"n_realizations": 0}, None, "--n-realizations: must be >= 1"),
    ({"array_task_id": 2, "array_task_count": 2}, None, "--array-task-id: 2 outside [0, 2)"),
    ({"array_task_id": -1, "array_task_count": 2}, None, "--array-task-id: -1 outside"),
    ({"method": "hmc"}, None, "--method: unknown method 'hmc'"),
    ({}, _level0_with("method: map", "method: gibbs"), "inference.method: unknown method 'gibbs'"),
]  # fmt: skip


@pytest.mark.parametrize(("kw", "yaml_text", "needle"), BAD_PLANS)
def test_bad_input_is_refused_by_the_plan_before_anything_is_written(
    tmp_path, bad_yaml, kw, yaml_text, needle
):
    out = tmp_path / "out"
    out.mkdir()
    keep = out / "keep.txt"
    keep.write_text("precious")
    cfg = bad_yaml(yaml_text) if yaml_text is not None else LEVEL0
    opts = RunOptions.of(**{"config": cfg, "output_dir": str(out), "shear_grid": (0.01,), **kw})
    with pytest.raises((PlanError, ConfigError)) as err:
        plan_run(opts)
    msg = str(err.value)
    assert needle in msg and "\n" not in msg, msg
    assert sorted(os.listdir(out)) == ["keep.txt"] and keep.read_text() == "precious"


@pytest.mark.parametrize(
    ("args", "yaml_text", "needle"),
    [
        ([], _level0_with("  flux: 1.0", "  flux: 1.0\n  colour: red"), "gal.colour: unknown key"),
        (["--batch-size", "0"], None, "--batch-size: must be >= 1"),
        (["--shear-grid", "0.01", "1.2"], None, "--shear-grid: |g| must be < 1"),
        (["--batch-size", "four"], None, "'--batch-size'"),
    ],
)
def test_bad_input_exits_2_with_one_line_and_writes_nothing(
    tmp_path, bad_yaml, args, yaml_text, needle
):
    out = tmp_path / "out"
    out.mkdir()
    keep = out / "keep.txt"
    keep.write_text("precious")
    cfg = bad_yaml(yaml_text) if yaml_text is not None else LEVEL0
    full = ["--config", cfg, "--output-dir", str(out), *args]
    res = run(full)  # not a dry run: the check must come before any computation
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1, res.output
    assert needle in lines[0], lines[0]
    assert "Traceback" not in res.output
    assert sorted(os.listdir(out)) == ["keep.txt"] and keep.read_text() == "precious"


def test_every_bias_run_option_is_a_run_option():
    """The command's options and RunOptions' fields are the same names, so no flag is
    dropped on its way to plan_run and shearbatch.run takes every option bias-run takes."""
    cli_only = {"config_path", "show_config", "verbose", "version", "help"}
    names = {p.name for p in bias_run.params} - cli_only
    assert names == set(RunOptions.fields()) - {"config"}
