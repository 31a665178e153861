"""The ``slurm`` tier, faults: a short chaos soak through the real SLURM and two
campaigns on one scheduler (issues 36, 44).

- :func:`bench.chaos_slurm.soak`, small (200 realizations over 2 array tasks, VI long
  enough that a task computes for tens of seconds), until one fault of each kind has
  taken effect: ``scancel`` of a task (then re-submitted alone) and of the whole array
  (then re-submitted), ``scontrol requeue`` of a running task, a time limit (the run's
  end time set to now before slurmctld's check), the node drained and resumed, the
  output filesystem (a tmpfs) full for a while. The test checks each effect itself
  against SLURM's jobcomp log and the task's log, not the soak's verdict: the task run
  ended CANCELLED; requeued (and ran again); TIMEOUT with the engine's SIGTERM line
  after the fault; a run that jobcomp shows running across the drain ended while the node
  was drained, and a job waiting then started only after the node's RESUME; the engine's
  ENOSPC error in a run it was aimed at, and that run ended failed. Every fault's target
  runs had written at least one complete realization (credited through the claims file)
  and held more. Then: every
  realization complete and bit-identical to an uninterrupted array's, no temporary or
  claims file left, none written twice, and bias-stats gives the same bias_results.json.
- :func:`bench.chaos_slurm.two_campaigns`: two campaigns of different configs at once,
  each under its own root with its own compilation cache, and the first submitted a
  second time while it runs: nothing crosses roots, nothing is computed twice.

Needs root (the tmpfs) and a running SLURM (``ci/start_slurm.sh``); skipped otherwise
(``SHEARBATCH_REQUIRE_SLURM=1``: a failure).
"""

import os
import sys
from datetime import datetime
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


def _jobcomp(path: Path) -> list[dict[str, str]]:
    """SLURM's jobcomp log, read here (not through the soak's reader)."""
    return [dict(kv.split("=", 1) for kv in ln.split() if "=" in kv)
            for ln in path.read_text(errors="replace").splitlines()]  # fmt: skip


def _t(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def _runs(jobcomp, task: str, at: float, until: float | None = None) -> list[dict[str, str]]:
    """The runs of array task ``<job>_<i>`` that spanned ``at`` (started by ``until``)."""
    arr, idx = task.rsplit("_", 1)
    return [e for e in jobcomp if (e.get("ArrayJobId"), e.get("ArrayTaskId")) == (arr, idx)
            and _t(e["StartTime"]) <= (until or at) + 1 and _t(e["EndTime"]) >= at - 2]  # fmt: skip


def _after(log: Path, offset: int) -> str:
    with open(log, "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


def check_effect(f: dict, jobcomp: list[dict[str, str]], logs: Path) -> None:
    """The effect the soak claims for fault ``f``, checked against SLURM's own record and
    the task's log (an AssertionError says what is missing)."""
    kind, tg, at = f["kind"], f["target"], _t(f["issued"])
    assert f["rc"] == 0, f
    # every fault hit running work: its target runs had written a batch, one more to come
    hit = [tg] if "task" in tg else tg["running"]
    if kind == "disk_full":
        hit = [r for r in hit if r["task"] in tg["computing"]]
    assert hit and all(r["realizations_written"] >= 1 and r["claims_held"] >= 1 for r in hit), f
    if kind in ("scancel_task", "requeue", "time_limit"):
        runs = _runs(jobcomp, tg["task"], at)
        assert runs, f"{kind}: no jobcomp record of {tg['task']} around {f['issued']}"
        seg = _after(logs / tg["log"], tg["log_offset"]) if tg["log"] else ""
        state = runs[0]["JobState"]
        if kind == "scancel_task":
            assert state == "CANCELLED", (f, runs)
        elif kind == "requeue":  # SLURM logs a requeued run as PENDING, then runs it again
            assert state == "PENDING" and f["effect"]["evidence"]["restarts"] >= 1, (f, runs)
            arr, idx = tg["task"].rsplit("_", 1)
            again = [e for e in jobcomp if (e.get("ArrayJobId"), e.get("ArrayTaskId")) == (arr, idx)
                     and _t(e["StartTime"]) > at]  # fmt: skip
            assert again, f"the requeued {tg['task']} never ran again"
        else:
            assert tg["phase"] == "computing", f  # past start-up when it was hit
            assert state == "TIMEOUT", (f, runs)
            assert "DUE TO TIME LIMIT" in seg and "SIGTERM: no new batch" in seg, seg[-3000:]
    elif kind == "scancel_array":
        assert tg["running"], f
        for r in tg["running"]:
            runs = _runs(jobcomp, r["task"], at)
            assert runs and runs[0]["JobState"] == "CANCELLED", (f, r, runs)
    elif kind == "drain":
        # not the node's state after the command: what SLURM's record shows afterwards
        assert tg["running"], f  # campaign runs computed on the node...
        resumed = _t(f["resumed"])
        spans = {r["task"]: _runs(jobcomp, r["task"], at) for r in tg["running"]}
        assert any(spans.values()), f  # ...SLURM's record has them running then...
        ended = [e for runs in spans.values() for e in runs
                 if int(at) <= _t(e["EndTime"]) <= resumed + 1]  # fmt: skip
        assert ended, (f, spans)  # ...one of them ended while the node was drained...
        assert not f["effect"]["evidence"]["ended_by_another_fault"], f  # ...not by a fill
        # ...and a job waiting then (the drain probe, or a campaign task) ran only after RESUME
        refused = []
        for key in f["effect"]["evidence"]["refused_while_drained"]:
            if "_" in key:
                arr, idx = key.rsplit("_", 1)
                runs = [e for e in jobcomp
                        if (e.get("ArrayJobId"), e.get("ArrayTaskId")) == (arr, idx)]  # fmt: skip
            else:
                runs = [e for e in jobcomp if e.get("JobId") == key]
            refused += [e for e in runs if _t(e["StartTime"]) >= resumed - 1]
        assert refused, f
    elif kind == "disk_full":
        met = {}
        for name in f["effect"]["evidence"]["log"]:
            seg = _after(logs / name, 0)
            lines = [ln for ln in seg.splitlines()
                     if ln.startswith("Error: cannot write") and "No space left on device" in ln]  # fmt: skip
            if lines:
                arr, idx = name.rsplit(".", 1)[0].split("_")[-2:]
                assert f"{arr}_{idx}" in tg["computing"], (name, f)  # a run it was aimed at
                met[name] = _runs(jobcomp, f"{arr}_{idx}", at, at + f["hold_s"])
        assert met, f
        # the run that met the full disk ended failed (bias-run exits 4, which the
        # script's EXIT trap keeps when its bias-extract fails on the full disk too)
        assert any(e["JobState"] == "FAILED" for runs in met.values() for e in runs), met
    else:
        raise AssertionError(kind)


def test_short_chaos_soak_one_effect_of_each_kind(tmp_path):
    chaos = _chaos()
    os.chmod(tmp_path, 0o755)
    rec = chaos.soak(tmp_path, n=50, tasks=2, throttle=2, batch=4, vi_steps=60000,
                     min_effects=1, seed=1, gap=(2.0, 4.0), warm_cache=True,
                     release_requeued=True, max_wall=480, timeout=1500)  # fmt: skip
    ch, cmp = rec["chaos"], rec["compare"]
    effective = {k: [f for f in rec["faults"] if f["kind"] == k and f["effect"]["ok"]]
                 for k in chaos.KINDS}  # fmt: skip
    assert all(effective.values()), (rec["effects"], ch["stopped"])
    jobcomp = _jobcomp(chaos.JOBCOMP)
    for kind, faults in effective.items():
        for f in faults:
            assert f["effect"]["state"] == chaos.EXPECTED[kind], f
            check_effect(f, jobcomp, tmp_path / "chaos_logs")
    # the counts are of effects: an issued fault without one is not counted
    for kind, v in rec["effects"].items():
        assert v["effective"] == len(effective[kind]) <= v["issued"], (kind, v)
    assert rec["effects_met"] and ch["stopped"] is None, ch["stopped"]
    # and still nothing lost
    assert cmp["statuses"] == {"done": 200}, cmp
    assert not cmp["mismatched"] and cmp["bit_identical"] == 200, cmp["mismatched"]
    assert not ch["written_twice"], ch["written_twice"]
    assert rec["leftovers"] == {"tmp_files": [], "claims_file": False, "stray_dirs": [],
                                "unexpected_files": []}, rec["leftovers"]  # fmt: skip
    assert not rec["stats_diff"], rec["stats_diff"]
    assert "200 of 200 planned" in rec["extract"]["chaos"], rec["extract"]
    assert rec["nothing_lost"] and rec["ok"]


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
