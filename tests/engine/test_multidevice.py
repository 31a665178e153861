"""Several local devices: bias-run splits each batch's lanes over them (shard_map, no
communication). Two CPU devices from XLA_FLAGS in a subprocess, against one device."""

import os
import subprocess
import sys

import numpy as np
import pytest

from shearbatch.core.batching import CPU_SPLIT_ENV
from shearbatch.io import read_json, read_posterior
from tests.conftest import OPTIMIZER_SD_TOL, max_diff_sd, write_config

BIAS_RUN = [sys.executable, "-c", "from shearbatch.cli import bias_run; bias_run()"]


def run(cfg, out, batch: int, devices: int) -> str:
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    if devices > 1:
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
        env[CPU_SPLIT_ENV] = "1"  # CPU devices are not split by default (lane_mesh)
    cmd = [*BIAS_RUN, "--config", cfg, "--shear-grid", "0.01", "0.03", "--n-realizations", "4",
           "--batch-size", str(batch), "--x64", "--no-progress", "--output-dir", str(out)]  # fmt: skip
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    return res.stderr


@pytest.fixture(scope="module")
def runs(module_tmp):
    cfg = write_config(module_tmp / "tiny.yaml", {"image.size_x": 16, "image.size_y": 16})
    logs = {}
    for name, batch, devices in (("two", 4, 2), ("one_b2", 2, 1), ("one_b4", 4, 1), ("odd", 3, 2)):
        logs[name] = run(cfg, module_tmp / name, batch, devices)
    return module_tmp, logs


def test_two_devices_each_run_half_the_lanes_and_the_log_names_them(runs):
    _, logs = runs
    assert "lanes split over 2 devices: cpu:0 (cpu), cpu:1 (cpu)" in logs["two"]
    assert "batch 1 lanes per device: cpu:0 2, cpu:1 2" in logs["two"]
    assert "lanes split" not in logs["one_b4"]
    assert "batch size 3 rounded up to 4 lanes, a multiple of the 2 devices" in logs["odd"]


def test_two_devices_equal_the_single_device_run(runs):
    """Equal to one device at the per-device lane count (batch 2) to rounding (the
    sharded program is compiled on its own, so the last bits may differ: within 1e-6
    posterior sd), and within the optimizer's tolerance (OPTIMIZER_SD_TOL posterior sd)
    of one device at batch 4; an odd batch (3 -> 4 lanes) equals the even one."""
    root, _ = runs
    names = sorted(p.name for p in (root / "one_b2").iterdir() if p.is_dir())
    assert len(names) == 8 and names == sorted(
        p.name for p in (root / "two").iterdir() if p.is_dir()
    )
    for name in names:
        two = read_posterior(root / "two" / name / "posterior.nc")
        one = read_posterior(root / "one_b2" / name / "posterior.nc")
        assert max_diff_sd(two, one) < 1e-6
        odd = read_posterior(root / "odd" / name / "posterior.nc")
        np.testing.assert_array_equal(odd["g1"], two["g1"])
        a = read_json(root / "two" / name / "convergence.json")["mode"]
        b = read_json(root / "one_b4" / name / "convergence.json")["mode"]
        sd = {k: float(np.std(v)) for k, v in one.items()}
        assert all(abs(a[k] - b[k]) <= OPTIMIZER_SD_TOL * sd[k] for k in a), (a, b, sd)
