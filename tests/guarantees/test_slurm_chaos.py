"""The ``slurm`` tier, faults: a short chaos soak through the real SLURM and two
campaigns on one scheduler (issue 36).

- :func:`bench.chaos_slurm.soak`, small (32 realizations over 4 array tasks), one fault
  of each kind: ``scancel`` of a task (then re-submitted alone) and of the whole array
  (then re-submitted), ``scontrol requeue`` of a running task, a time limit (SIGTERM
  through ``--signal``, then the kill), the node drained and resumed, the output
  filesystem (a tmpfs) full for a while. Every realization ends complete and
  bit-identical to an uninterrupted array's, no temporary or claims file is left, none
  is written twice, and bias-stats gives the same bias_results.json.
- :func:`bench.chaos_slurm.two_campaigns`: two campaigns of different configs at once,
  each under its own root with its own compilation cache, and the first submitted a
  second time while it runs: nothing crosses roots, nothing is computed twice.

Needs root (the tmpfs) and a running SLURM (``ci/start_slurm.sh``); skipped otherwise
(``SHEARBATCH_REQUIRE_SLURM=1``: a failure).
"""

import os
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm

ROOT = Path(__file__).resolve().parents[2]


def _chaos():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import chaos_slurm
    finally:
        sys.path.remove(str(ROOT / "bench"))
    why = chaos_slurm.slurm_up()
    if why is None and os.geteuid() != 0:
        why = "the soak mounts a tmpfs: root needed"
    if why:
        if os.environ.get("SHEARBATCH_REQUIRE_SLURM") == "1":
            pytest.fail(why)
        pytest.skip(why)
    return chaos_slurm


def test_short_chaos_soak_one_fault_of_each_kind(tmp_path):
    chaos = _chaos()
    os.chmod(tmp_path, 0o755)
    rec = chaos.soak(tmp_path, n=8, tasks=4, throttle=2, batch=4, faults_per_kind=1, seed=1,
                     gap=(3.0, 6.0), aim_s=5.0, timeout=900)  # fmt: skip
    ch, cmp = rec["chaos"], rec["compare"]
    assert rec["faults"] == dict.fromkeys(chaos.KINDS, 1), ch["events"]
    assert cmp["statuses"] == {"done": 32}, cmp
    assert not cmp["mismatched"] and cmp["bit_identical"] == 32, cmp["mismatched"]
    assert not ch["written_twice"], ch["written_twice"]
    assert rec["leftovers"] == {"tmp_files": [], "claims_file": False, "stray_dirs": [],
                                "unexpected_files": []}, rec["leftovers"]  # fmt: skip
    assert not rec["stats_diff"], rec["stats_diff"]
    assert "32 of 32 planned" in rec["extract"]["chaos"], rec["extract"]
    assert rec["ok"]


def test_two_campaigns_and_a_second_submission_on_one_scheduler(tmp_path):
    chaos = _chaos()
    os.chmod(tmp_path, 0o755)
    rec = chaos.two_campaigns(tmp_path)
    assert rec["overlap"]["A+B"], rec  # the two campaigns' tasks ran at the same time
    for camp, n in (("A", 24), ("B", 10)):
        r = rec[camp]
        assert r["planned"] == n and r["statuses"] == {"done": n}, (camp, r)
        assert r["leftovers"] == {"tmp_files": [], "claims_file": False, "stray_dirs": [],
                                  "unexpected_files": []}, (camp, r["leftovers"])  # fmt: skip
        assert len(r["config_hashes"]) == 1, (camp, r["config_hashes"])
        # one compile per campaign, in its own cache
        assert len(r["markers"]) == 1 and r["compiled_by"] == 1, (camp, r)
        # nothing computed or written twice (A: two submissions of the same campaign)
        assert not r["written_twice"], (camp, r["written_twice"])
        assert r["logs"]["computed_in_landed_batches"] == n, (camp, r["logs"])
        assert r["logs"]["written_by_finished_runs"] == n, (camp, r["logs"])
        # nothing in a root changed once its own arrays had left the queue
        assert not r["changed_after_end"], (camp, r["changed_after_end"])
    assert rec["A"]["config_hashes"] != rec["B"]["config_hashes"]
    assert rec["A"]["markers"] != rec["B"]["markers"]
