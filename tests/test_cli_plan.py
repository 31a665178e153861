"""bias-run's plan and its input checking, through the real click command."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import SEED_IDS
from shearbatch.cli import bias_run

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


def test_array_task_slices_from_flags_and_slurm_env(tmp_path):
    base = [*SEED_CMD[:-3], "--output-dir", str(tmp_path), "--dry-run"]
    seen = []
    for i in range(3):
        res = run(
            base,
            env={
                "SLURM_ARRAY_TASK_ID": str(i),
                "SLURM_ARRAY_TASK_COUNT": "3",
                "SLURM_ARRAY_TASK_MIN": "0",
            },
        )
        assert res.exit_code == 0, res.output
        assert f"array task {i} of 3 takes 2" in res.output
        seen += [rid for rid in SEED_IDS if rid in res.output]
    assert sorted(seen) == sorted(SEED_IDS)
    res = run([*base, "--array-task-id", "1", "--array-task-count", "3"])
    assert "array task 1 of 3 takes 2" in res.output


def test_dry_run_reports_completed_realizations(tmp_path):
    d = tmp_path / SEED_IDS[0]
    d.mkdir()
    for name in ("posterior.nc", "truth.json"):
        (d / name).write_text("x")
    (d / "convergence.json").write_text('{"status": "ok"}')
    res = run([*SEED_CMD[:-3], "--output-dir", str(tmp_path), "--dry-run"])
    assert "already complete: 1" in res.output and "to run: 5" in res.output
    assert f"done (skipped): {SEED_IDS[0]}" in res.output
    res = run([*SEED_CMD[:-3], "--output-dir", str(tmp_path), "--dry-run", "--overwrite"])
    assert "to run: 6" in res.output


@pytest.fixture
def bad_yaml(tmp_path):
    def make(text):
        p = tmp_path / "cfg.yaml"
        p.write_text(text)
        return str(p)

    return make


def _level0_with(old, new):
    return Path(LEVEL0).read_text().replace(old, new)


@pytest.mark.parametrize(
    ("args", "yaml_text", "needle"),
    [
        (["--config", "missing.yaml"], None, "config file not found"),
        ([], "image: {pixel_scale: [\n", "invalid YAML"),
        ([], _level0_with("  flux: 1.0", "  flux: 1.0\n  colour: red"), "gal.colour: unknown key"),
        (
            [],
            _level0_with("pixel_scale: 0.263", "pixel_scale: -0.263"),
            "image.pixel_scale: must be > 0",
        ),
        ([], _level0_with("sigma: 1.0e-6", "sigma: -1.0e-6"), "image.noise.sigma: must be > 0"),
        ([], _level0_with("size_x: 48", "size_x: -48"), "image.size_x: must be >= 1"),
        (["--shear-grid", "0.01", "1.2"], None, "--shear-grid: |g| must be < 1"),
        (["--shear-grid", "0.01", "-1.0"], None, "--shear-grid: |g| must be < 1"),
        (["--batch-size", "0"], None, "--batch-size: must be >= 1"),
        (["--batch-size", "-3"], None, "--batch-size: must be >= 1"),
        (["--n-realizations", "0"], None, "--n-realizations: must be >= 1"),
        (
            ["--array-task-id", "2", "--array-task-count", "2"],
            None,
            "--array-task-id: 2 outside [0, 2)",
        ),
        (["--array-task-id", "-1", "--array-task-count", "2"], None, "--array-task-id: -1 outside"),
        (["--method", "hmc"], None, "--method: unknown method 'hmc'"),
        (
            [],
            _level0_with("method: map", "method: gibbs"),
            "inference.method: unknown method 'gibbs'",
        ),
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
