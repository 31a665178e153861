"""The ``slurm`` tier: a campaign submitted to a real (single-node) SLURM.

``bias-run --emit-sbatch`` writes the array script for 16 realizations over 4
tasks, at most 2 at once, and the dependent ``bias-extract`` + ``bias-stats``
job; both are submitted with ``sbatch`` and waited for. Every realization must be
``ok``, only the first task to take the compile lock may compile (the others only
read the compilation cache under the output root), and ``bias_results.json`` must
equal that of the same campaign run in one process, and so must that of one process
with two (CPU) devices.

Run by ``.ci/run`` after the default tier, on a SLURM it starts with
``ci/start_slurm.sh``; elsewhere skipped unless ``sbatch`` answers
(``SHEARBATCH_REQUIRE_SLURM=1`` turns the skip into a failure).
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from shearbatch.slurm import parse_indices

pytestmark = pytest.mark.slurm

ROOT = Path(__file__).resolve().parents[2]


def _slurm_up() -> str | None:
    """Why the tier cannot run here, or None."""
    path = f"/usr/sbin:{os.environ.get('PATH', '')}"
    if shutil.which("sbatch", path=path) is None:
        return "sbatch not found (start a local SLURM with ci/start_slurm.sh)"
    ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True,
                          env={**os.environ, "PATH": path}, check=False)  # fmt: skip
    if "UP" not in ping.stdout:
        return f"slurmctld not answering: {ping.stdout.strip() or ping.stderr.strip()}"
    return None


def _require_slurm():
    """Skip (fail under SHEARBATCH_REQUIRE_SLURM=1) without a SLURM; bench/bench_slurm.py."""
    why = _slurm_up()
    if why:
        if os.environ.get("SHEARBATCH_REQUIRE_SLURM") == "1":
            pytest.fail(why)
        pytest.skip(why)
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import bench_slurm
    finally:
        sys.path.remove(str(ROOT / "bench"))
    return bench_slurm


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    bench_slurm = _require_slurm()
    return bench_slurm.run(tmp_path_factory.mktemp("slurm"), tasks=4, throttle=2)


def test_array_runs_every_realization_and_the_dependent_stats_job(campaign):
    assert campaign["summary_rows"] == 16 and campaign["summary_ok"] == 16, campaign
    tasks = sorted(campaign["tasks"], key=lambda t: t["task"])
    assert [t["task"] for t in tasks] == [0, 1, 2, 3]
    assert [t["takes"] for t in tasks] == [4, 4, 4, 4]
    assert all(t["ok"] == 4 and t["failed"] == 0 for t in tasks), tasks
    assert campaign["array_results"] is not None, "the dependent stats job wrote nothing"
    assert "#SBATCH --array=0-3%2" in campaign["script"]


def test_array_results_equal_a_single_process_run(campaign):
    assert campaign["array_results"] == campaign["single_results"]
    assert campaign["results_identical"]


def test_two_device_process_results_equal_a_single_process_run(campaign):
    assert campaign["multi_device_devices"] == ["CPU x2"]
    assert campaign["single_devices"] == ["CPU x1"]
    assert campaign["multi_device_results"] == campaign["single_results"]


def test_only_the_first_task_compiles(campaign):
    misses = [t["cache_misses"] for t in campaign["tasks"]]
    assert None not in misses, campaign["tasks"]
    assert sum(m > 0 for m in misses) == 1, misses  # the others only hit the cache
    assert all(t["cache_hits"] > 0 for t in campaign["tasks"] if t["cache_misses"] == 0)


@pytest.mark.parametrize("spec", ["0-4:2", "10-13", "1,3,5"])
def test_stepped_offset_and_sparse_arrays_cover_the_plan_once(tmp_path, spec):
    """The emitted script submitted with --sbatch-array SPEC (its bias-run line run as a
    --dry-run): every realization of the plan is in exactly one task's batches."""
    bench_slurm = _require_slurm()
    env = {k: v for k, v in os.environ.items() if k != "SHEARBATCH_CACHE_DIR"}
    env["PATH"] = f"{bench_slurm.BIN}:/usr/sbin:{env.get('PATH', '/usr/bin:/bin')}"
    script = tmp_path / "a.sbatch"
    out = subprocess.run(
        [str(bench_slurm.BIN / "bias-run"), "--config", str(ROOT / "configs" / "level0.yaml"),
         "--shear-grid", "0.01", "0.02", "0.05", "--n-realizations", "3", "--batch-size", "2",
         "--output-dir", str(tmp_path / "camp"), "--emit-sbatch", str(script),
         "--sbatch-array", spec, "--no-sbatch-stats"],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = script.read_text().splitlines()
    assert lines[-1].startswith("bias-run ")
    script.write_text("\n".join([*lines[:-1], lines[-1] + " --dry-run"]) + "\n")
    job = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True, text=True,
                         env=env, check=True).stdout.strip().split(";")[0]  # fmt: skip
    bench_slurm._wait([job], timeout=600)
    logs = sorted((tmp_path / "camp" / "logs").glob("*.out"))
    assert len(logs) == len(parse_indices(spec))
    seen = []
    for log in logs:
        text = log.read_text()
        assert "Error" not in text and "--array-task-id" not in text, text
        seen += [w for ln in text.splitlines() if ln.startswith("batch ") for w in ln.split()
                 if w.startswith("g1_")]  # fmt: skip
    assert len(seen) == 9 and len(set(seen)) == 9  # the whole plan, each realization once
