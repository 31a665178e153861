"""The chaos soaks' rules for faults into running work (issue 56), without SLURM or a run:

- bench/chaos.py reads what a bias-run has computed from its log's engine lines (recorded
  as computed: a batch line comes once the batch is handed to the background writer; the
  kill rule itself counts complete realizations whose claim that process held);
- bench/chaos_slurm.py's ``TaskRun`` calls a run "working" only once its log shows >= 1
  batch written and >= 1 left, and a drain counts only when SLURM's jobcomp log shows, after
  the fact, a drained run that was running at the command ending while the node was drained
  (no other fault in force on it) and a job waiting then for the node starting only after
  the RESUME (not the node's state right after the command), and a disk fill counts only
  the ENOSPC of a run it was aimed at.
"""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

ENGINE = "2026-11-29 01:00:{:02d},000 INFO shearbatch.engine.loop: "
LOG = (
    "array task 3 of 16 on vm\n"
    + ENGINE.format(1) + "campaign: 100 realization(s) in 25 batch(es)\n"
    + ENGINE.format(5) + "batch 1/25: 4 realization(s) in 3.10 s (simulation 0.1 s)\n"
    + ENGINE.format(9) + "batch 2/25: 4 realization(s) in 3.00 s (simulation 0.1 s)\n"
)  # fmt: skip


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import chaos
        import chaos_slurm
    finally:
        sys.path.remove(str(ROOT / "bench"))
    return chaos, chaos_slurm


def test_local_soak_reads_what_a_run_wrote(bench, tmp_path):
    chaos, _ = bench
    log = tmp_path / "A1.log"
    assert chaos.written(log) == (0, 0, 0)  # not started: never a target
    log.write_text("INFO shearbatch.app: compiling\n")
    assert chaos.written(log) == (0, 0, 0)
    log.write_text(LOG)
    assert chaos.written(log) == (2, 8, 23)
    log.write_text(LOG + ENGINE.format(30) + "batch 25/25: 4 realization(s) in 3.0 s\n")
    assert chaos.written(log)[2] == 0  # the last batch written: no running work left
    assert chaos.EXPECTED_EXIT == {"SIGKILL": -9, "SIGTERM": 143, "SIGINT": 130}


def test_slurm_task_run_working_only_after_a_batch(bench, tmp_path):
    _, cs = bench
    log = tmp_path / "chaos_7_3.out"
    log.write_text(LOG.split(ENGINE.format(5))[0])
    run = cs.TaskRun("7_3", "RUNNING", 12.0, "9", log)
    assert run.written == 0 and not run.working
    log.write_text(LOG)
    run = cs.TaskRun("7_3", "RUNNING", 20.0, "9", log)
    assert (run.written, run.written_realizations, run.batches_left) == (2, 8, 23)
    assert run.working
    b = run.brief()
    assert b["batches_written"] == 2 and b["realizations_computed"] == 8 and b["elapsed_s"] == 20
    # with the claims file's evidence attached, that decides: complete directories it wrote
    run.on_disk, run.claims_left = 0, 40  # computed, nothing on disk yet: not a target
    assert not run.working
    run.on_disk, run.claims_left = 4, 36
    assert run.working and run.brief()["realizations_written"] == 4
    run.on_disk, run.claims_left = 40, 0  # all its claims done: no work left
    assert not run.working
    # a requeued run's log goes on in the same file: only its last run counts
    log.write_text(LOG + "array task 3 of 16 on vm\n")
    assert not cs.TaskRun("7_3", "RUNNING", 1.0, "9", log).working


def _jobcomp(path: Path, *runs: tuple[str, str, str, str]) -> None:
    lines = []
    for key, state, start, end in runs:
        ids = (
            f"JobId={key}"
            if "_" not in key
            else ("JobId=99{} ArrayJobId={} ArrayTaskId={}".format(key[-1], *key.split("_")))
        )
        lines.append(f"{ids} JobState={state} StartTime=2026-11-29T01:{start} "
                     f"EndTime=2026-11-29T01:{end} ExitCode=0:0")  # fmt: skip
    path.write_text("\n".join(lines) + "\n")


def _drain(cs, tmp_path, runs, others=()):
    soak = object.__new__(cs.Soak)
    soak.faults = list(others)
    _jobcomp(tmp_path / "jobcomp.log", *runs)
    soak.jc = cs.Jobcomp(tmp_path / "nothing")
    soak.jc.path, soak.jc.off = tmp_path / "jobcomp.log", 0
    at, resumed = cs.epoch("2026-11-29T01:10:00"), cs.epoch("2026-11-29T01:10:40")
    f = {"kind": "drain", "rc": 0, "_at": at, "_resumed": resumed, "drained_s": 40.0,
         "node_state": {"scontrol": "MIXED+DRAIN", "sinfo": "draining"},
         "target": {"running": [{"task": "7_3"}]}, "_pending": {},
         "probe": {"job": "120", "submitted": "2026-11-29T01:10:30"}}  # fmt: skip
    return soak.resolve(f)


def test_drain_counts_only_a_refusal_seen_after_the_fact(bench, tmp_path):
    _, cs = bench
    # the drained run ended while drained, the probe ran only after the RESUME: counted
    eff = _drain(cs, tmp_path, [("7_3", "COMPLETED", "09:00", "10:25"),
                                ("120", "COMPLETED", "10:41", "10:41")])  # fmt: skip
    assert eff["ok"] and eff["state"] == "REFUSED", eff
    assert list(eff["evidence"]["refused_while_drained"]) == ["120"]
    # the node drained (its state right after the command) but the run went on past the
    # RESUME and nothing was refused: not counted
    eff = _drain(cs, tmp_path, [("7_3", "COMPLETED", "09:00", "11:30"),
                                ("120", "COMPLETED", "11:30", "11:30")])  # fmt: skip
    assert eff is not None and not eff["ok"] and eff["state"] == "no drained run ended", eff
    # the probe ran while the node was still drained: not counted
    eff = _drain(cs, tmp_path, [("7_3", "COMPLETED", "09:00", "10:25"),
                                ("120", "COMPLETED", "10:31", "10:31")])  # fmt: skip
    assert not eff["ok"] and eff["state"] == "no job refused", eff
    # the drained run was no longer running when the drain came: not counted
    eff = _drain(cs, tmp_path, [("7_3", "COMPLETED", "08:00", "09:58"),
                                ("120", "COMPLETED", "10:41", "10:41")])  # fmt: skip
    assert not eff["ok"] and eff["state"] == "no drained run ended", eff
    # a disk fill in force meanwhile (the soak injects none): the run's end is not the drain's
    fill = {"kind": "disk_full", "_at": cs.epoch("2026-11-29T01:10:05"), "target": {"running": []}}
    eff = _drain(cs, tmp_path, [("7_3", "FAILED", "09:00", "10:25"),
                                ("120", "COMPLETED", "10:41", "10:41")], [fill])  # fmt: skip
    assert not eff["ok"] and eff["state"] == "drained run ended by another fault", eff
    assert eff["evidence"]["ended_by_another_fault"] == {"7_3": "FAILED"}


def test_disk_fill_counts_only_a_run_aimed_at(bench, tmp_path):
    """ENOSPC counts only in the log of a run that computed (and had written a batch) at
    the fill; another run that met it (one starting) is recorded, not counted."""
    _, cs = bench
    (tmp_path / "logs").mkdir()
    enospc = "Error: cannot write x: No space left on device\n"
    (tmp_path / "logs" / "chaos_7_5.out").write_text(enospc)
    (tmp_path / "jobcomp.log").write_text(
        "JobId=995 ArrayJobId=7 ArrayTaskId=5 JobState=FAILED StartTime=2026-11-29T01:09:50 "
        "EndTime=2026-11-29T01:10:03 ExitCode=4:0\n"
    )
    soak = object.__new__(cs.Soak)
    soak.logs, soak.faults = tmp_path / "logs", []
    soak.jc = cs.Jobcomp(tmp_path / "nothing")
    soak.jc.path, soak.jc.off = tmp_path / "jobcomp.log", 0
    at = cs.epoch("2026-11-29T01:10:00")
    f = {"kind": "disk_full", "rc": 0, "_at": at, "_until": at + 5, "_offsets": {},
         "target": {"running": [{"task": "7_3"}, {"task": "7_5"}], "computing": ["7_3"]}}  # fmt: skip
    eff = soak.resolve(f)
    assert not eff["ok"] and eff["state"] == "only runs not aimed at met the full disk", eff
    f["target"]["computing"] = ["7_5"]
    eff = soak.resolve(f)
    assert eff["ok"] and eff["state"] == "ENOSPC", eff


def test_slurm_watch_attributes_writes_to_the_job_holding_the_claim(bench, tmp_path):
    """A realization that becomes complete is credited to the process that held its claim
    at the last poll, and that process to its SLURM job (its environment)."""
    import os
    import subprocess
    import time

    _, cs = bench
    proc = subprocess.Popen(["sleep", "30"], env={**os.environ, "SLURM_JOB_ID": "4242"})
    try:
        for _ in range(100):  # once the child has exec'd (before that: the parent's environ)
            if cs.slurm_job_of(proc.pid) == "4242":
                break
            time.sleep(0.05)
        assert cs.slurm_job_of(proc.pid) == "4242"
    finally:
        proc.kill()
        proc.wait()
    assert cs.slurm_job_of(os.getpid()) in (None, os.environ.get("SLURM_JOB_ID"))
    w = cs.Watch(tmp_path, ["a", "b", "c"])
    w.holder, w.job_of, w.by_pid = {"b": 11, "c": 11}, {11: "4242", 12: "77"}, {11: 1, 12: 5}
    assert w.work("4242") == (1, 2)
    assert w.work("77") == (0, 0)  # its process holds nothing now: not a live run
