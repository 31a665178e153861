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

pytestmark = pytest.mark.slurm

ROOT = Path(__file__).resolve().parent.parent


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


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
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
