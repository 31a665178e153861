"""A realization claimed by another bias-run that then dies unfinished is not lost.

What a cancelled, requeued or timed-out SLURM task leaves behind for a moment: its
process still holds its claims while it stops (5 s grace for SIGTERM, up to SLURM's
KillWait), and the task re-submitted meanwhile finds them held. Before, that task
skipped them and ended: they stayed undone until yet another submission (found by the
chaos soak through SLURM, bench/chaos_slurm.py). Now it does its own, waits for the
claims to be released (app.runner.CLAIM_WAIT_S) and computes those left unfinished;
those its holder completed are skipped, never redone.
"""

import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import write_config

BIN = Path(sys.executable).parent
HOLD = """
import sys
from shearbatch.io import claims
with claims.claim(sys.argv[1], sys.argv[2:]) as cl:
    print(len(cl.mine), flush=True)
    sys.stdin.readline()  # held until the test has seen bias-run find them held
"""


def test_claims_released_unfinished_are_taken_over(tmp_path):
    cfg = write_config(tmp_path / "small.yaml", {"image.size_x": 16, "image.size_y": 16})
    root = tmp_path / "camp"
    root.mkdir()
    ids = ["g1_+0.0200_g2_+0.0000_s0", "g1_+0.0200_g2_+0.0000_s1"]
    # another process claims two of the four realizations, then exits without them
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(root), *ids],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert holder.stdout.readline().strip() == "2"
    t0 = time.perf_counter()
    run = subprocess.Popen(
        [str(BIN / "bias-run"), "--config", str(cfg), "--shear-grid", "0.01", "0.02",
         "--n-realizations", "2", "--batch-size", "2", "--output-dir", str(root),
         "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    # the holder lets go only once bias-run has found its claims held, however long
    # bias-run takes to start on a loaded machine (a fixed 4 s hold raced with it)
    seen = []
    for line in run.stderr:
        seen.append(line)
        if "overlapping slices" in line:
            break
    holder.communicate("\n", timeout=60)
    stdout, rest = run.communicate(timeout=600)
    stderr = "".join(seen) + rest
    assert run.returncode == 0, stderr
    assert "overlapping slices: 2 realization(s)" in stderr, stderr
    assert "2 realization(s) another bias-run held were released unfinished" in stderr
    assert "wrote 4 ok" in stdout and "skipped" not in stdout, stdout
    assert len(list(root.glob("g1_*/convergence.json"))) == 4
    assert time.perf_counter() - t0 < 120


def test_an_unwritable_commands_file_is_one_line_and_exit_4(tmp_path):
    """A task that starts while the disk is full fails on its first write, the append to
    commands.txt: one line and exit 4 (an output could not be written), as for a
    realization, not a traceback and exit 1 (found by the chaos soak's full disk)."""
    cfg = write_config(tmp_path / "small.yaml", {"image.size_x": 16, "image.size_y": 16})
    root = tmp_path / "camp"
    (root / "commands.txt").mkdir(parents=True)  # open(..., "a") fails as on ENOSPC
    out = subprocess.run(
        [str(BIN / "bias-run"), "--config", str(cfg), "--shear-grid", "0.01",
         "--n-realizations", "1", "--batch-size", "1", "--output-dir", str(root),
         "--no-progress"],
        capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    assert out.returncode == 4, out.stderr
    assert "Traceback" not in out.stderr
    assert "Error: cannot write" in out.stderr and "commands.txt" in out.stderr, out.stderr
