"""bias-run under kills, signals, time limits and full disks, with the background writers
running: the real CLI in subprocesses, real signals, a tiny Level 0 campaign (16x16 stamps,
48 realizations in batches of 4, so the writers are busy most of the time)."""

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from shearbatch.io import read_posterior, realization_status
from tests.conftest import run_engine, write_config

N = 48
BIAS_RUN = [sys.executable, "-c", "from shearbatch.cli import bias_run; bias_run()"]


@pytest.fixture(scope="module")
def tiny_cfg(module_tmp):
    return write_config(module_tmp / "tiny.yaml", {"image.size_x": 16, "image.size_y": 16})


def args(cfg, out, *extra):
    return ["--config", cfg, "--shear-grid", "0.01", "0.02", "0.03", "--n-realizations", "16",
            "--batch-size", "4", "--x64", "--no-progress", "--output-dir", str(out), *extra]  # fmt: skip


def start(cmd, log: Path, env=None, prefix=()):
    fh = open(log, "w")
    p = subprocess.Popen([*(prefix or BIAS_RUN), *cmd], stdout=fh, stderr=subprocess.STDOUT,
                         env={**os.environ, **(env or {})}, umask=0o022)  # fmt: skip
    p.log, p.fh = log, fh
    return p


def finish(p, timeout=300):
    try:
        rc = p.wait(timeout)
    finally:
        p.fh.close()
    return rc, p.log.read_text()


def run(cmd, log: Path, **kw):
    return finish(start(cmd, log, **kw))


def wait_for(pred, p, timeout=120.0):
    t0 = time.monotonic()
    while not pred():
        assert p.poll() is None, p.log.read_text()
        assert time.monotonic() - t0 < timeout, "condition not reached"
        time.sleep(0.005)


def states(out: Path) -> dict[str, str]:
    if not out.exists():
        return {}
    return {d.name: realization_status(out, d.name) for d in out.iterdir()
            if d.is_dir() and not d.name.startswith(".")}  # fmt: skip


def n_done(out: Path) -> int:
    return sum(s == "done" for s in states(out).values())


def tmp_files(out: Path) -> list[Path]:
    return [p for p in out.rglob("*") if p.name.endswith(".tmp")]


@pytest.fixture(scope="module")
def reference(module_tmp, tiny_cfg):
    out = module_tmp / "reference"
    rc, log = run(args(tiny_cfg, out), module_tmp / "reference.log")
    assert rc == 0, log
    assert n_done(out) == N
    return out


def assert_same_results(out: Path, ref: Path) -> None:
    """Exactly the uninterrupted result set, MAP bit-identical, nothing left over."""
    assert states(out) == dict.fromkeys(states(ref), "done")
    assert not tmp_files(out)
    for d in (d for d in ref.iterdir() if d.is_dir()):
        a = json.loads((out / d.name / "convergence.json").read_text())["mode"]
        b = json.loads((d / "convergence.json").read_text())["mode"]
        assert a == b
        np.testing.assert_array_equal(
            read_posterior(out / d.name / "posterior.nc")["g1"],
            read_posterior(d / "posterior.nc")["g1"],
        )


@pytest.mark.parametrize("moment", ["before the first batch", "writers busy", "half done"])
def test_sigkill_anywhere_then_resume_gives_the_uninterrupted_result(
    tmp_path, tiny_cfg, reference, moment
):
    out = tmp_path / "out"
    p = start(args(tiny_cfg, out), tmp_path / "killed.log")
    cond = {
        "before the first batch": lambda: "campaign:" in p.log.read_text(),
        "writers busy": lambda: out.exists() and bool(tmp_files(out)),
        "half done": lambda: n_done(out) >= N // 2,
    }[moment]
    wait_for(cond, p)
    p.kill()
    finish(p)
    assert set(states(out).values()) <= {"done", "incomplete"}
    before = {d: (out / d / "convergence.json").stat().st_mtime_ns
              for d, s in states(out).items() if s == "done"}  # fmt: skip
    rc, log = run(args(tiny_cfg, out), tmp_path / "resume.log")
    assert rc == 0, log
    assert f"already complete: {len(before)}" in log
    assert_same_results(out, reference)
    for d, t in before.items():  # nothing complete was redone
        assert (out / d / "convergence.json").stat().st_mtime_ns == t
    for f in out.rglob("*"):  # group- and world-readable under umask 022
        assert f.stat().st_mode & 0o044 == 0o044, f


def test_sigterm_finishes_the_writes_in_flight_and_says_how_to_resume(tmp_path, tiny_cfg):
    out = tmp_path / "out"
    p = start(args(tiny_cfg, out), tmp_path / "term.log")
    wait_for(lambda: n_done(out) >= 8, p)
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    rc, log = finish(p, timeout=60)
    assert rc == 143, log
    assert time.monotonic() - t0 < 15
    n = n_done(out)
    assert 8 <= n < N
    assert (
        f"SIGTERM: {n} of {N} realization(s) of this task complete; re-run the same command to resume"
        in log
    )
    assert set(states(out).values()) == {"done"} and not tmp_files(out)
    assert "Traceback" not in log


def signal_after_last_check(log: str, name: str = "SIGINT") -> bool:
    """Whether the run's log shows the signal after the engine's line for its last batch
    (``next: batch k/k, the last``, logged before the check that a signal stops): only
    then may the run complete. The watchdog sets the stop event before it logs the
    signal, so a signal the last check missed is always logged after that line."""
    lines = log.splitlines()
    seen = [i for i, ln in enumerate(lines) if f"{name}: no new batch" in ln]
    assert len(seen) == 1, log  # the run saw the signal, once
    last = [i for i, ln in enumerate(lines) if "next: batch" in ln and ", the last" in ln]
    return bool(last) and last[0] < seen[0]


def test_repeated_ctrl_c_during_writes_never_hangs(tmp_path, tiny_cfg, reference):
    """Ctrl-C three times: each run stops (130) and says how to resume, unless the signal
    came after its last batch's check (the log says which), when it may complete (0);
    a run that ignores SIGINT fails here. Then the resume gives the uninterrupted result."""
    out = tmp_path / "out"
    for i in range(3):
        p = start(args(tiny_cfg, out), tmp_path / f"int{i}.log")
        done0 = n_done(out)
        wait_for(lambda d=done0: n_done(out) >= d + 2, p)
        t0 = time.monotonic()
        p.send_signal(signal.SIGINT)
        rc, log = finish(p, timeout=60)  # the old writer hung here for > 10 minutes
        assert time.monotonic() - t0 < 15
        assert "Traceback" not in log
        late = signal_after_last_check(log)
        if rc == 0:
            assert late, f"exit 0 after a Ctrl-C before the last batch's check\n{log}"
            assert n_done(out) == N and "stopped before batch" not in log, log
            break
        assert rc == 130, log
        assert "re-run the same command to resume" in log
        # stopped between batches, or abandoned by the watchdog: resumable either way
        assert "stopped before batch" in log or "abandoning it" in log, log
        assert set(states(out).values()) <= {"done", "incomplete"}
        assert n_done(out) < N, log
    rc, log = run(args(tiny_cfg, out), tmp_path / "final.log")
    assert rc == 0, log
    assert_same_results(out, reference)


def test_ctrl_c_after_the_last_batchs_check_lets_the_campaign_complete(
    tmp_path, tiny_cfg, reference
):
    """The one case where a Ctrl-C ends in exit 0: it came after the last batch's check
    (sent once the log says the last batch is next), so no batch is left to skip; the run
    finishes it and its writes within the grace, with the uninterrupted result."""
    out = tmp_path / "out"
    p = start(args(tiny_cfg, out), tmp_path / "late.log")
    wait_for(lambda: "next: batch 12/12, the last" in p.log.read_text(), p)
    p.send_signal(signal.SIGINT)
    rc, log = finish(p, timeout=60)
    assert rc == 0, log
    assert signal_after_last_check(log) and "stopped before batch" not in log
    assert "Traceback" not in log
    assert_same_results(out, reference)


def test_sigterm_while_compiling_exits_within_seconds(tmp_path, tiny_cfg):
    """The main thread is inside XLA (no persistent cache): the watchdog ends the process."""
    out = tmp_path / "out"
    p = start(args(tiny_cfg, out, "--cache-dir", "off"), tmp_path / "compile.log")
    wait_for(lambda: "campaign:" in p.log.read_text(), p)
    time.sleep(1.0)  # into the first batch's trace and compilation
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    rc, log = finish(p, timeout=60)
    assert rc == 143, log
    assert time.monotonic() - t0 < 12
    if "did not end within 5 s; abandoning it" not in log:  # compiled within the grace
        assert "batch 1/12" in log
    assert f"of {N} realization(s) of this task complete; re-run the same command" in log
    assert set(states(out).values()) <= {"done", "incomplete"}


def test_a_job_ending_too_soon_starts_no_batch(tmp_path, tiny_cfg):
    out = tmp_path / "out"
    env = {"SLURM_JOB_END_TIME": str(int(time.time()) + 3)}
    rc, log = run(args(tiny_cfg, out), tmp_path / "end.log", env=env)
    assert rc == 3, log
    assert f"time limit: 0 of {N} realization(s) of this task complete; re-run" in log
    assert n_done(out) == 0
    rc, log = run(args(tiny_cfg, out, "--time-limit", "soon"), tmp_path / "bad.log")
    assert rc == 2 and "--time-limit: not a duration: 'soon'" in log


def test_time_limit_stops_before_a_batch_that_cannot_finish(module_tmp, tiny_cfg):
    """Batches made slow (>= 1 s each) by a slower generator, 12 of them, 8 s allowed: the
    run stops between batches, before the limit (unless its first batch alone overran),
    every realization complete or absent."""
    import shearbatch.engine.loop as engine
    from shearbatch.campaign import plan_campaign
    from shearbatch.schema import load_config
    from shearbatch.spec import run_spec

    def slow(spec, batch):
        time.sleep(1.0)
        return engine.generate(spec, batch)

    spec = run_spec(load_config(tiny_cfg))
    plan = plan_campaign([0.01, 0.02, 0.03], n_realizations=16)
    out = module_tmp / "limited"
    deadline = time.time() + 8.0
    rep = run_engine(spec, plan, output_dir=out, batch_size=4, simulate_fn=slow,
                              deadline=deadline)  # fmt: skip
    assert rep.stopped == "time limit"
    assert 4 <= rep.n_written < N and rep.n_written == 4 * len(rep.batch_times)
    if len(rep.batch_times) > 1:
        assert time.time() <= deadline + 0.5
    assert set(states(out).values()) == {"done"} and n_done(out) == rep.n_written


@contextmanager
def tmpfs(path: Path, opts: str):
    path.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path)],
                       capture_output=True)  # fmt: skip
    if r.returncode != 0:
        yield False
        return
    try:
        yield True
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def test_a_full_disk_stops_the_run_with_one_line_and_a_later_run_resumes(
    tmp_path, tiny_cfg, reference
):
    disk = tmp_path / "disk"
    out = disk / "camp"
    with tmpfs(disk, "size=800k") as mounted:
        prefix = None
        if not mounted:  # no tmpfs here: the disk fills after 20 posterior files
            code = ("import errno, os, shearbatch.io.writer as w; real = w.write_posterior_nc; n = [0]\n"
                    "def full(*a, **k):\n    n[0] += 1\n    if n[0] > 20: raise OSError(errno.ENOSPC, "
                    "os.strerror(errno.ENOSPC))\n    return real(*a, **k)\n"
                    "w.write_posterior_nc = full\nfrom shearbatch.cli import bias_run; bias_run()")  # fmt: skip
            prefix = [sys.executable, "-c", code]
        rc, log = run(args(tiny_cfg, out), tmp_path / "full.log", prefix=prefix)
        assert rc == 4, log
        errors = [ln for ln in log.splitlines() if ln.startswith("Error:")]
        assert len(errors) == 1, log
        assert "No space left on device" in errors[0] or "the device is full" in errors[0]
        assert "re-run the same command to resume" in errors[0] and "Traceback" not in log
        assert set(states(out).values()) == {"done"} and 0 < n_done(out) < N
        assert not tmp_files(out)
        if mounted:
            subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)
            rc, log = run(args(tiny_cfg, out), tmp_path / "resume.log")
        else:
            rc, log = run(args(tiny_cfg, out), tmp_path / "resume.log")
        assert rc == 0, log
        assert_same_results(out, reference)


def test_an_unwritable_output_root_is_refused_before_any_computation(tmp_path, tiny_cfg):
    ro = tmp_path / "ro"
    with tmpfs(ro, "ro,size=1m") as mounted:
        if not mounted:
            pytest.skip("cannot mount a read-only tmpfs here")
        rc, log = run(args(tiny_cfg, ro / "camp"), tmp_path / "ro.log")
    assert rc == 2, log
    assert "--output-dir: cannot write to" in log and "Read-only file system" in log
    assert "JAX" not in log and "Traceback" not in log
