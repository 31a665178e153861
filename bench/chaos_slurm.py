"""Chaos soak through a real SLURM: scheduler faults against an emitted array, and the
result set must equal an uninterrupted array's exactly.

A Level 0 MAP campaign (float64, small stamps, 4 shears x N seeds) is emitted with
``bias-run --emit-sbatch`` twice: once into a plain directory, submitted with ``sbatch``
and left alone (the *clean* run, the reference), and once into a root on its own small
``tmpfs`` (mounted here; root needed), submitted and hit, at random times drawn from
``--seed``, with the faults users meet through the scheduler:

- ``scancel_task``: ``scancel <job>_<i>`` of a running task, then the task re-submitted
  alone (``sbatch --array=<i>``) after 0-3 s, while the cancelled one may still stop;
- ``scancel_array``: ``scancel`` of every job of the campaign, then the whole script
  re-submitted after 1-5 s;
- ``requeue``: ``scontrol requeue <job>_<i>`` of a running task (SLURM kills it and runs
  the same index again);
- ``time_limit``: the running task's ``TimeLimit`` set to 1 minute: the script's
  ``--signal=TERM@50`` sends SIGTERM at SLURM's next time-limit check, the limit kills;
- ``drain``: the node set to ``DRAIN`` (running tasks go on, nothing new starts) and back
  to ``RESUME`` 3-10 s later;
- ``disk_full``: the output filesystem filled to the last byte by a filler file for
  3-10 s (writes fail with ENOSPC: the task exits 4, its realization absent).

Every ``disk_full`` and half the task kills (drawn per fault) wait, up to ``--aim`` seconds,
for a task in its computing-and-writing phase (its log shows the engine started and not
ended), the others hit any running task (most of a Level 0 task's life is its start-up:
planning, the compile lock, loading the programs); each event records the phase it hit.
Whenever no job of the campaign is left in the queue and realizations are missing, the
script is re-submitted as a user would (``Re-submitting re-runs only what is missing``).
Checked at the end:

- every planned realization ``done`` (:func:`shearbatch.io.realization_status`), nothing
  extra, and bit-identical to the clean run: every posterior.nc variable, truth.json, and
  convergence.json but for its timing (``runtime_s``), batch placement (``batch``, which
  batch and lane it ran in) and the campaign's output directory;
- no temporary file (``*.tmp``, under the cache too), no ``.claims``, no stray directory;
- no realization written twice (a convergence.json never changes once seen);
- ``bias-extract`` + ``bias-stats`` give the same ``bias_results.json`` as the clean run's
  (all but the paths and timings in it).

Recorded: faults by kind with their targets, how the interrupted task runs ended
(SLURM's jobcomp log), realizations redone (claimed by a task run that a fault ended
before it wrote them, then done by another: from polling the claims file), realizations
computed twice (in batches that landed, from the task logs, beyond the plan), wall time
against the clean run. ``results/benchmarks/chaos_slurm.json`` and ``.png``::

    ci/start_slurm.sh
    .venv/bin/python bench/chaos_slurm.py [--n-realizations 512] [--tasks 16] [--faults 7]

``tests/guarantees/test_slurm_chaos.py`` (the ``slurm`` tier) runs :func:`soak` small, one fault
of each kind, and :func:`two_campaigns`.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

import _harness as h
from bench_slurm import config
from chaos import complete

BIN = Path(sys.executable).parent
GRID = ("-0.05", "-0.02", "0.02", "0.05")
KINDS = ("scancel_task", "scancel_array", "requeue", "time_limit", "drain", "disk_full")
ACTIVE = ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "SUSPENDED",
          "RESIZING", "REQUEUE_HOLD", "REQUEUE_FED", "SIGNALING", "STAGE_OUT")  # fmt: skip
#: convergence.json fields that legitimately differ between two runs of one realization
TIMING = ("runtime_s", "batch")


def env() -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if k != "SHEARBATCH_CACHE_DIR"}
    e["PATH"] = f"{BIN}:/usr/sbin:{e.get('PATH', '/usr/bin:/bin')}"
    return e


def sh(cmd: list[str], ok=(0,), timeout: float = 120) -> str:
    out = subprocess.run(cmd, capture_output=True, text=True, env=env(), timeout=timeout,
                         check=False)  # fmt: skip
    if out.returncode not in ok:
        raise RuntimeError(f"{' '.join(cmd)}: exit {out.returncode}: {out.stderr.strip()[-2000:]}")
    return out.stdout


def slurm_up() -> str | None:
    """Why no SLURM can be used here, or None."""
    if shutil.which("sbatch", path=env()["PATH"]) is None:
        return "sbatch not found (start a local SLURM with ci/start_slurm.sh)"
    ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, env=env())
    if "UP" not in ping.stdout:
        return f"slurmctld not answering: {ping.stdout.strip() or ping.stderr.strip()}"
    return None


def node() -> str:
    return sh(["sinfo", "-h", "-N", "-o", "%N"]).split()[0]


def submit(script: Path, *extra: str) -> str:
    return sh(["sbatch", "--parsable", *extra, str(script)]).strip().split(";")[0]


def queue(job_ids: list[str]) -> dict[str, tuple[str, float]]:
    """``{"<job>_<i>": (state, elapsed s)}`` of the array tasks of ``job_ids`` in squeue."""
    if not job_ids:
        return {}
    out = subprocess.run(["squeue", "-h", "-r", "-j", ",".join(job_ids), "-o", "%i|%T|%M"],
                         capture_output=True, text=True, env=env(), check=False).stdout  # fmt: skip
    res = {}
    for line in out.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 3 and parts[1] in ACTIVE:
            res[parts[0]] = (parts[1], _secs(parts[2]))
    return res


def _secs(text: str) -> float:
    days, _, rest = text.rpartition("-")
    parts = [int(p) for p in rest.split(":") if p.isdigit()]
    s = 0
    for p in parts:
        s = 60 * s + p
    return s + 86400 * (int(days) if days else 0)


def wait_gone(job_ids: list[str], timeout: float) -> None:
    t0 = time.perf_counter()
    while queue(job_ids):
        if time.perf_counter() - t0 > timeout:
            raise TimeoutError(f"SLURM jobs {job_ids} not finished after {timeout:.0f} s")
        time.sleep(0.5)


# --------------------------------------------------------------------------- the campaign


def emit(cfg: Path, root: Path, script: Path, *, n: int, tasks: int, throttle: int,
         batch: int, name: str = "chaos", grid=GRID) -> Path:  # fmt: skip
    """The array script of the campaign (bias-run --emit-sbatch), no stats job."""
    sh([str(BIN / "bias-run"), "--config", str(cfg), "--shear-grid", *grid,
        "--n-realizations", str(n), "--batch-size", str(batch), "--x64",
        "--output-dir", str(root), "--emit-sbatch", str(script), "--sbatch-tasks", str(tasks),
        "--sbatch-throttle", str(throttle), "--sbatch-time", "00:10:00",
        "--sbatch-line=--job-name=" + name, "--sbatch-line=--signal=TERM@50",
        "--sbatch-line=--open-mode=append", "--no-sbatch-stats"])  # fmt: skip
    return script


def analyse(root: Path, out: Path) -> dict[str, Any]:
    """bias-extract + bias-stats of ``root`` into ``out``; bias_results.json (parsed)."""
    out.mkdir(parents=True, exist_ok=True)
    ex = sh([str(BIN / "bias-extract"), "--input-dir", str(root), "--output",
             str(out / "summary.csv"), "--no-progress"])  # fmt: skip
    sh([str(BIN / "bias-stats"), "--input", str(out / "summary.csv"), "--output-dir",
        str(out / "stats"), "--level", "level_0"], ok=(0, 1, 3))  # fmt: skip
    res = json.loads((out / "stats" / "bias_results.json").read_text())
    line = next((x for x in ex.splitlines() if x.startswith("campaign:")), "")
    return {"results": res, "extract": line}


def _strip(obj: Any, roots: tuple[str, ...]) -> Any:
    """``obj`` without timings and with the campaign roots' paths made relative."""
    if isinstance(obj, dict):
        return {k: _strip(v, roots) for k, v in obj.items()
                if not re.search(r"(^|_)(wall|time|runtime|elapsed|seconds|timestamp|"
                                 r"created|date)(_|$)", k)}  # fmt: skip
    if isinstance(obj, list):
        return [_strip(v, roots) for v in obj]
    if isinstance(obj, str):
        for r in roots:
            obj = obj.replace(r, "<root>")
    return obj


def _diff(a: Any, b: Any, where: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{where}.{k}" for k in set(a) ^ set(b)]
        for k in set(a) & set(b):
            out += _diff(a[k], b[k], f"{where}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True))
                for d in _diff(x, y, f"{where}[{i}]")]  # fmt: skip
    same = a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a)
                      and math.isnan(b))  # fmt: skip
    return [] if same else [where or "."]


def netcdf(path: Path) -> dict[str, Any]:
    """Every group's variables (arrays) and attributes of a posterior.nc, but the groups'
    ``created_at`` (the write's time)."""
    import netCDF4

    out: dict[str, Any] = {}
    with netCDF4.Dataset(path) as ds:
        for gname, g in [("", ds), *ds.groups.items()]:
            out[f"{gname}/attrs"] = {k: np.asarray(g.getncattr(k)).tolist() for k in g.ncattrs()
                                     if k != "created_at"}  # fmt: skip
            for vname, v in g.variables.items():
                v.set_auto_mask(False)
                out[f"{gname}/{vname}"] = np.asarray(v[...])
                out[f"{gname}/{vname}/attrs"] = {k: np.asarray(v.getncattr(k)).tolist()
                                                 for k in v.ncattrs()}  # fmt: skip
    return out


def compare(ref: Path, got: Path, run_ids: list[str]) -> dict[str, Any]:
    """Realization by realization, ``got`` against ``ref``: status; every posterior.nc
    variable bit for bit and every attribute (but the write time); truth.json; and
    convergence.json but its timing (``runtime_s``), batch placement (``batch``), paths
    and the CRCs that cover the write time (the whole file's, the record's own)."""
    from shearbatch.io import realization_status

    statuses: Counter[str] = Counter()
    mismatched: dict[str, list[str]] = {}
    roots = (str(ref), str(got))
    for rid in run_ids:
        st = realization_status(got, rid)
        statuses[st] += 1
        if st != "done":
            continue
        why = []
        a, b = netcdf(ref / rid / "posterior.nc"), netcdf(got / rid / "posterior.nc")
        why += [f"posterior.nc {k}" for k in set(a) ^ set(b)]
        for k in set(a) & set(b):
            x, y = a[k], b[k]
            if isinstance(x, np.ndarray):
                same = x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()
            else:
                same = not _diff(x, y)
            if not same:
                why.append(f"posterior.nc {k}")
        for name in ("truth.json", "convergence.json"):
            x, y = (json.loads((d / rid / name).read_text()) for d in (ref, got))
            for k in TIMING:
                x.pop(k, None), y.pop(k, None)
            for rec in (x, y):
                sums = rec.get("checksums") or {}
                sums.pop("record", None), sums.pop("posterior.nc", None)
            why += [f"{name}{d}" for d in _diff(_strip(x, roots), _strip(y, roots))]
        if why:
            mismatched[rid] = sorted(why)
    return {"statuses": dict(statuses), "mismatched": mismatched,
            "bit_identical": statuses["done"] - len(mismatched)}  # fmt: skip


def leftovers(root: Path, run_ids: list[str]) -> dict[str, Any]:
    """Temporary files (anywhere under the root, the cache included), the claims file,
    directories outside the plan, unexpected files in realization directories."""
    from shearbatch.io.layout import FILES

    want = set(run_ids)
    tmp = sorted(str(p.relative_to(root)) for p in root.rglob("*.tmp"))
    stray = sorted(p.name for p in root.glob("g1_*") if p.name not in want)
    extra = sorted(str(p.relative_to(root)) for rid in want for p in (root / rid).glob("*")
                   if (root / rid).is_dir() and p.name not in FILES)  # fmt: skip
    return {"tmp_files": tmp, "claims_file": (root / ".claims").exists(),
            "stray_dirs": stray, "unexpected_files": extra}  # fmt: skip


def task_logs(log_dir: Path) -> dict[str, Any]:
    """From every task log (appended across requeues): task runs started, SIGTERMs seen,
    write errors (ENOSPC among them), realizations computed in batches that landed,
    realizations written by task runs that finished, realizations found claimed by another
    task run, and those taken over once released unfinished."""
    pats = {
        "task_runs": (r"array task \d+ of \d+ takes", None),
        "sigterm_seen": (r"SIGTERM: no new batch", None),
        "write_errors": (r"^Error: ", None),
        "no_space_left": (r"No space left on device", None),
        "computed_in_landed_batches": (r"batch \d+/\d+: (\d+) realization", int),
        "written_by_finished_runs": (r"^wrote (\d+) ok", int),
        "found_claimed": (r"overlapping slices: (\d+) realization", int),
        "taken_over": (r"(\d+) realization\(s\) another bias-run held were released", int),
    }
    out: dict[str, Any] = dict.fromkeys(pats, 0)
    errors: Counter[str] = Counter()
    for log in log_dir.glob("*.out"):
        text = log.read_text(errors="replace")
        for key, (pat, conv) in pats.items():
            found = re.findall(pat, text, re.M)
            out[key] += sum(int(x) for x in found) if conv else len(found)
        for line in re.findall(r"^(?:Error: .*|\w*Error: .*|.*WARNING shearbatch: .*)$", text,
                               re.M):  # fmt: skip
            line = re.sub(r"^\S+ \S+ WARNING ", "WARNING ", line)
            line = re.sub(r"/\S+", "<path>", line)
            errors[re.sub(r"\d+(\.\d+)?", "N", line)[:160]] += 1
    out["messages"] = dict(errors.most_common(15))
    return out


def jobcomp(job_ids: list[str]) -> dict[str, int]:
    """How SLURM says the task runs of ``job_ids`` ended (its jobcomp text log)."""
    path = Path("/var/log/slurm/jobcomp.log")
    if not path.is_file():
        return {}
    ids = set(job_ids)
    states: Counter[str] = Counter()
    for line in path.read_text(errors="replace").splitlines():
        f = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
        arr = f.get("ArrayJobId") or f.get("JobId")
        if arr in ids or f.get("JobId") in ids:
            states[f.get("JobState", "?")] += 1
    return dict(states)


# --------------------------------------------------------------------------- the runs


class Watch(threading.Thread):
    """Polls the root: convergence.json mtimes (a change = written twice) and the claims
    (which task runs held each realization: more than one = redone after a fault)."""

    def __init__(self, root: Path, run_ids: list[str], every: float = 0.3):
        super().__init__(daemon=True)
        self.root, self.ids, self.every = root, run_ids, every
        self.seen: dict[str, int] = {}
        self.rewritten: set[str] = set()
        self.holders: dict[str, set[int]] = {}
        self.curve: list[tuple[float, int]] = []
        self.t0 = time.perf_counter()
        self.halt = threading.Event()

    def poll(self) -> None:
        from shearbatch.io import claims

        now = complete(self.root)
        for rid, mt in now.items():
            if rid in self.seen and self.seen[rid] != mt:
                self.rewritten.add(rid)
            self.seen.setdefault(rid, mt)
        todo = [r for r in self.ids if r not in now]
        for rid, pid in claims.held(self.root, todo).items():
            if pid:
                self.holders.setdefault(rid, set()).add(pid)
        self.curve.append((round(time.perf_counter() - self.t0, 2), len(now)))

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                self.poll()
            except OSError:
                pass
            self.halt.wait(self.every)


def clean_run(script: Path, root: Path, timeout: float) -> dict[str, Any]:
    """Submit the script once and wait: the uninterrupted reference."""
    t0 = time.perf_counter()
    job = submit(script)
    wait_gone([job], timeout)
    wall = time.perf_counter() - t0
    return {"wall_s": wall, "jobs": [job], "complete": len(complete(root)),
            "jobcomp": jobcomp([job]), "logs": task_logs(root / "logs")}  # fmt: skip


class Soak:
    """The chaos run: submit, inject ``faults`` (kinds, in order) ``gap`` seconds apart,
    re-submit whenever the queue is empty and work is missing."""

    def __init__(self, script: Path, root: Path, fs: Path | None, run_ids: list[str],
                 faults: list[str], rng: random.Random, gap: tuple[float, float],
                 log=print, aim_s: float = 30.0):  # fmt: skip
        self.script, self.root, self.fs, self.ids = script, root, fs, run_ids
        self.faults, self.rng, self.gap, self.log = list(faults), rng, gap, log
        self.jobs: list[str] = []
        self.events: list[dict[str, Any]] = []
        self.later: list[tuple[float, str, Any]] = []  # (time, what, arg)
        self.busy: set[str] = set()  # drain / disk_full in force
        self.want: dict[str, dict[str, Any]] = {}  # the pending fault's wish of phase
        self.aim_s = aim_s
        self.resubmits = Counter()
        self.t0 = time.perf_counter()
        self.node = node()

    def t(self) -> float:
        return round(time.perf_counter() - self.t0, 2)

    def note(self, kind: str, **kw: Any) -> None:
        ev = {"t": self.t(), "kind": kind, "complete": len(complete(self.root)), **kw}
        self.events.append(ev)
        self.log(
            f"{ev['t']:8.1f} s  {kind:14s} {ev['complete']:5d} complete  "
            + " ".join(f"{k}={v}" for k, v in kw.items())
        )

    def submit(self, why: str, *extra: str) -> None:
        job = submit(self.script, *extra)
        self.jobs.append(job)
        self.resubmits[why] += 1
        self.note("submit", job=job, why=why, array=extra[0] if extra else "script")

    def running(self) -> list[tuple[str, float]]:
        return [(t, el) for t, (st, el) in queue(self.jobs).items() if st == "RUNNING"]

    def phase(self, task: str) -> str:
        """``computing`` once the task run's engine has started (its log's last start is
        followed by the engine's ``campaign:`` line and not yet by its end), else
        ``starting`` (start-up, planning, the compile lock, loading programs)."""
        jid, idx = task.rsplit("_", 1)
        logs = list((self.root / "logs").glob(f"*_{jid}_{idx}.out"))
        if not logs:
            return "starting"
        text = logs[0].read_text(errors="replace")
        last = text.rfind("array task ")
        tail = text[last:] if last >= 0 else ""
        return "computing" if "campaign: " in tail and "campaign done" not in tail else "starting"

    def targets(self, kind: str) -> list[tuple[str, float, str]] | None:
        """Running tasks to hit, with their phase; the fault's wish (drawn once: every
        disk_full and half the kills wait up to ``aim_s`` for a task that is computing and
        writing) narrows them; None: wait and ask again."""
        now = time.perf_counter()
        want = self.want.setdefault(
            kind, {"computing": kind == "disk_full" or self.rng.random() < 0.5, "since": now}
        )
        run = [(t, el, self.phase(t)) for t, el in self.running()]
        busy = [x for x in run if x[2] == "computing"]
        if want["computing"] and not busy and now - want["since"] < self.aim_s:
            return None
        return busy if want["computing"] and busy else run

    def inject(self, kind: str) -> str:
        """Apply one fault: ``done``; ``wait`` (nothing to hit yet: ask again soon);
        ``skip`` (not now: another kind first)."""
        rng = self.rng
        if kind in ("scancel_task", "requeue", "time_limit"):
            run = self.targets(kind)
            if not run:
                return "wait"
            task, elapsed, phase = rng.choice(sorted(run))
            if kind == "scancel_task":
                sh(["scancel", task], ok=(0, 1))
                idx = task.rsplit("_", 1)[1]
                self.later.append((time.perf_counter() + rng.uniform(0, 3), "resubmit_task", idx))
            elif kind == "requeue":
                sh(["scontrol", "requeue", task], ok=(0, 1))
            else:
                sh(["scontrol", "update", f"JobId={task}", "TimeLimit=1"], ok=(0, 1))
            self.note(kind, task=task, elapsed_s=elapsed, phase=phase)
        elif kind == "scancel_array":
            active = sorted({j.split("_")[0] for j in queue(self.jobs)})
            if not active:
                return "wait"
            sh(["scancel", *active], ok=(0, 1))
            self.later.append((time.perf_counter() + rng.uniform(1, 5), "resubmit", None))
            self.note(kind, jobs=active)
        elif kind == "drain":
            if "drain" in self.busy:
                return "skip"
            sh(["scontrol", "update", f"NodeName={self.node}", "State=DRAIN", "Reason=chaos"])
            self.busy.add("drain")
            hold = rng.uniform(3, 10)
            self.later.append((time.perf_counter() + hold, "resume", None))
            self.note(kind, hold_s=round(hold, 1), running=len(self.running()))
        elif kind == "disk_full":
            if "disk_full" in self.busy or self.fs is None:
                return "skip"
            run = self.targets(kind)
            if run is None:
                return "wait"
            filler = self.fs / "filler"
            fill(filler)
            self.busy.add("disk_full")
            hold = rng.uniform(3, 10)
            self.later.append((time.perf_counter() + hold, "unfill", filler))
            free = os.statvfs(self.fs)
            self.note(kind, hold_s=round(hold, 1), free_bytes=free.f_bavail * free.f_frsize,
                      running=len(run), computing=sum(x[2] == "computing" for x in run))  # fmt: skip
        self.want.pop(kind, None)
        return "done"

    def deferred(self) -> None:
        now = time.perf_counter()
        due = [x for x in self.later if x[0] <= now]
        self.later = [x for x in self.later if x[0] > now]
        for _, what, arg in due:
            if what == "resubmit_task":
                self.submit("after scancel of the task", f"--array={arg}")
            elif what == "resubmit":
                self.submit("after scancel of the array")
            elif what == "resume":
                sh(["scontrol", "update", f"NodeName={self.node}", "State=RESUME"])
                self.busy.discard("drain")
                self.note("resume")
            elif what == "unfill":
                Path(arg).unlink(missing_ok=True)
                self.busy.discard("disk_full")
                self.note("unfill")

    def run(self, timeout: float) -> dict[str, Any]:
        watch = Watch(self.root, self.ids)
        watch.start()
        self.submit("first submission")
        next_at = time.perf_counter() + self.rng.uniform(*self.gap)
        try:
            while True:
                if time.perf_counter() - self.t0 > timeout:
                    raise TimeoutError(f"chaos soak not done after {timeout:.0f} s")
                self.deferred()
                if self.faults and time.perf_counter() >= next_at:
                    kind = self.faults[0]
                    got = self.inject(kind)
                    if got == "done":
                        self.faults.pop(0)
                        next_at = time.perf_counter() + self.rng.uniform(*self.gap)
                    else:  # nothing to hit now: another kind first (a requeued task may
                        # wait 2 minutes for its begin time, with nothing else running)
                        self.faults.append(self.faults.pop(0))
                        next_at = time.perf_counter() + (0.1 if got == "wait" else 0.5)
                if not self.later and not queue(self.jobs):
                    n = len(complete(self.root))
                    if n >= len(self.ids) and not self.busy and not self.faults:
                        break
                    if not self.busy and n < len(self.ids):
                        self.submit(f"queue empty, {len(self.ids) - n} missing")
                    elif not self.busy:  # done before every fault was spent: the script
                        # again (its tasks find their slices complete) for the rest to hit
                        self.submit("queue empty, all complete, faults left")
                time.sleep(0.1)
        except BaseException:
            active = sorted({j.split("_")[0] for j in queue(self.jobs)})
            if active:  # nothing of this soak runs on after it
                sh(["scancel", *active], ok=(0, 1))
                wait_gone(active, 120)
            raise
        finally:
            for _, what, arg in self.later:  # never leave the node drained or the disk full
                if what == "resume":
                    sh(["scontrol", "update", f"NodeName={self.node}", "State=RESUME"], ok=(0, 1))
                elif what == "unfill":
                    Path(arg).unlink(missing_ok=True)
            watch.halt.set()
            watch.join()
        watch.poll()
        wall = time.perf_counter() - self.t0
        # redone: claimed by more than one task run (the first was ended by a fault)
        redone = sorted(r for r, pids in watch.holders.items() if len(pids) > 1)
        return {"wall_s": wall, "jobs": self.jobs, "events": self.events,
                "faults_not_applied": self.faults, "resubmits": dict(self.resubmits),
                "written_twice": sorted(watch.rewritten), "redone": redone,
                "claimed_by": {r: len(p) for r, p in watch.holders.items()},
                "curve": watch.curve[:: max(1, len(watch.curve) // 400)]}  # fmt: skip


def fill(path: Path) -> None:
    """A file that takes every free byte of its filesystem (unbuffered: the ENOSPC comes
    from the write that hits it, never from a later flush)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        st = os.statvfs(path.parent)
        with contextlib.suppress(OSError):
            os.posix_fallocate(fd, 0, max(1, st.f_bavail * st.f_frsize))
        chunk = b"\0" * 65536
        off = os.fstat(fd).st_size
        while True:  # the last blocks
            try:
                n = os.pwrite(fd, chunk, off)
                if n == 0:
                    break
                off += n
            except OSError:
                if len(chunk) == 1:
                    break
                chunk = chunk[: len(chunk) // 2]
    finally:
        os.close(fd)


def mount_tmpfs(path: Path, size_mb: int) -> None:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)],
                   check=True)  # fmt: skip


def umount(path: Path) -> None:
    for _ in range(30):  # tasks still stopping may hold it a few seconds
        if subprocess.run(["umount", str(path)], check=False, capture_output=True).returncode == 0:
            return
        time.sleep(1)
    subprocess.run(["umount", "-l", str(path)], check=False)


def soak(work: Path, *, n: int = 512, tasks: int = 32, throttle: int = 2, batch: int = 4,
         stamp: int = 16, faults_per_kind: int = 7, seed: int = 0,
         gap: tuple[float, float] = (2.0, 6.0), fs_mb: int = 0, timeout: float = 3600,
         keep: bool = False, aim_s: float = 30.0, log=print) -> dict[str, Any]:  # fmt: skip
    """The clean run and the chaos run of one campaign under ``work``, and the checks.
    ``fs_mb``: the chaos root's tmpfs size (0: sized from the clean run)."""
    rng = random.Random(seed)
    cfg = config(work / "level0.yaml", stamp)
    kw = dict(n=n, tasks=tasks, throttle=throttle, batch=batch)
    clean_root = work / "clean"
    emit(cfg, clean_root, work / "clean.sbatch", **kw)
    log(f"clean run: {4 * n} realizations, {tasks} tasks, throttle {throttle}")
    clean = clean_run(work / "clean.sbatch", clean_root, timeout)
    run_ids = planned_ids(clean_root)
    log(f"clean run: {clean['complete']} complete in {clean['wall_s']:.1f} s")
    used = sum(p.stat().st_size for p in clean_root.rglob("*") if p.is_file())
    fs = work / "fs"
    size = fs_mb or max(64, math.ceil(2.5 * used / 2**20))
    mount_tmpfs(fs, size)
    try:
        root = fs / "camp"
        emit(cfg, root, work / "chaos.sbatch", **kw)
        faults = [k for k in KINDS for _ in range(faults_per_kind)]
        rng.shuffle(faults)
        log(f"chaos run: {len(faults)} faults on a {size} MB tmpfs")
        chaos = Soak(work / "chaos.sbatch", root, fs, run_ids, faults, rng, gap, log,
                     aim_s).run(timeout)  # fmt: skip
        chaos["jobcomp"] = jobcomp(chaos["jobs"])
        chaos["logs"] = task_logs(root / "logs")
        rec = {
            "campaign": {"realizations": len(run_ids), "tasks": tasks, "throttle": throttle,
                         "batch_size": batch, "stamp": stamp, "method": "map",
                         "dtype": "float64", "seed": seed, "tmpfs_mb": size,
                         "fault_gap_s": list(gap), "aim_s": aim_s},
            "clean": clean,
            "chaos": chaos,
            "compare": compare(clean_root, root, run_ids),
            "leftovers": leftovers(root, run_ids),
        }  # fmt: skip
        a, b = analyse(clean_root, work / "clean_stats"), analyse(root, work / "chaos_stats")
        roots = (str(clean_root), str(root), str(work))
        rec["stats_diff"] = _diff(_strip(a["results"], roots), _strip(b["results"], roots))
        rec["extract"] = {"clean": a["extract"], "chaos": b["extract"]}
        rec["bias_results"] = {k: b["results"].get(k) for k in ("m1", "m1_err", "c1", "verdict")}
    finally:
        if keep and (fs / "camp").is_dir():  # the chaos root outlives its tmpfs
            shutil.copytree(fs / "camp", work / "chaos", dirs_exist_ok=True)
        elif (fs / "camp" / "logs").is_dir():
            shutil.copytree(fs / "camp" / "logs", work / "chaos_logs", dirs_exist_ok=True)
        umount(fs)
    rec["faults"] = dict(Counter(e["kind"] for e in chaos["events"] if e["kind"] in KINDS))
    c, left = rec["compare"], rec["leftovers"]
    rec["ok"] = (c["statuses"] == {"done": len(run_ids)} and not c["mismatched"]
                 and not chaos["written_twice"] and not rec["stats_diff"]
                 and not left["tmp_files"] and not left["claims_file"]
                 and not left["stray_dirs"] and not left["unexpected_files"])  # fmt: skip
    return rec


def planned_ids(root: Path) -> list[str]:
    """The campaign's planned run ids, from its manifest (campaign.json, written by the
    first task)."""
    from shearbatch.io import manifest as mf

    return list(json.loads((root / mf.MANIFEST).read_text())["plan"]["run_ids"])


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``root``: (size, mtime ns)."""
    out = {}
    for p in root.rglob("*"):
        try:
            if p.is_file():
                st = p.stat()
                out[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns)
        except FileNotFoundError:
            pass
    return out


def two_campaigns(work: Path, timeout: float = 900) -> dict[str, Any]:
    """Two campaigns of different configs (stamps 16 and 20, other shear grids), each with
    its own root and its own compilation cache under it, submitted at once (throttle 1
    each, so that one task of each runs at a time), and the first campaign submitted a
    second time right after. Records what each root holds, which tasks compiled, whether
    a root changed after its arrays had left the queue, and how many realizations each
    campaign computed and wrote (against its plan: nothing twice)."""
    a_root, b_root = work / "A", work / "B"
    emit(config(work / "a.yaml", 16), a_root, work / "a.sbatch", n=6, tasks=4, throttle=1,
         batch=3, name="campA")  # fmt: skip
    emit(config(work / "b.yaml", 20), b_root, work / "b.sbatch", n=5, tasks=2, throttle=1,
         batch=5, name="campB", grid=("-0.03", "0.03"))  # fmt: skip
    jobs = {"A1": submit(work / "a.sbatch"), "B": submit(work / "b.sbatch")}
    # the second submission of A as soon as A's first task runs
    t0 = time.perf_counter()
    while not any(st == "RUNNING" for st, _ in queue([jobs["A1"]]).values()):
        if time.perf_counter() - t0 > timeout:
            raise TimeoutError("campaign A never started")
        time.sleep(0.2)
    jobs["A2"] = submit(work / "a.sbatch")
    watches = {"A": Watch(a_root, []), "B": Watch(b_root, [])}
    for w in watches.values():
        w.start()
    ended: dict[str, dict[str, tuple[int, int]]] = {}
    overlap = {"A1+A2": False, "A+B": False}
    t0 = time.perf_counter()
    while len(ended) < 2:
        if time.perf_counter() - t0 > timeout:
            raise TimeoutError(f"jobs {jobs} not finished after {timeout:.0f} s")
        q = {k: queue([j]) for k, j in jobs.items()}
        run = {k for k, v in q.items() if any(st == "RUNNING" for st, _ in v.values())}
        overlap["A1+A2"] |= {"A1", "A2"} <= run
        overlap["A+B"] |= bool(run & {"A1", "A2"}) and "B" in run
        for camp, root, keys in (("A", a_root, ("A1", "A2")), ("B", b_root, ("B",))):
            if camp not in ended and not any(q[k] for k in keys):
                ended[camp] = snapshot(root)  # nothing may change in it from now on
        time.sleep(0.3)
    for w in watches.values():
        w.halt.set()
        w.join()
        w.poll()
    rec: dict[str, Any] = {"jobs": jobs, "overlap": overlap}
    for camp, root in (("A", a_root), ("B", b_root)):
        ids = planned_ids(root)
        done = [r for r in ids if (root / r / "convergence.json").is_file()]
        later = snapshot(root)
        cache = root / ".jax-cache"
        texts = [p.read_text(errors="replace") for p in (root / "logs").glob("*.out")]
        rec[camp] = {
            "planned": len(ids),
            "complete": len(done),
            "statuses": dict(Counter(_status(root, r) for r in ids)),
            "leftovers": leftovers(root, ids),
            "changed_after_end": sorted(k for k in set(ended[camp]) | set(later)
                                        if ended[camp].get(k) != later.get(k)),
            "markers": sorted(p.name for p in cache.glob(".compiled-*")),
            "cache_entries": sorted(p.name for p in cache.iterdir() if p.is_file()
                                    and not p.name.startswith(".")),
            "compiled_by": sum(bool(re.search(r"compile lock .*\d+ miss\(es\)", t))
                               for t in texts),
            "config_hashes": sorted({json.loads((root / r / "convergence.json").read_text())
                                     ["config_hash"] for r in done}),
            "written_twice": sorted(watches[camp].rewritten),
            "logs": task_logs(root / "logs"),
        }  # fmt: skip
    return rec


def _status(root: Path, rid: str) -> str:
    from shearbatch.io import realization_status

    return realization_status(root, rid)


# --------------------------------------------------------------------------- figure


def draw(fig, rec: dict) -> None:
    ax, bx = fig.subplots(1, 2, gridspec_kw={"width_ratios": [2.2, 1]})
    ch = rec["chaos"]
    n = rec["campaign"]["realizations"]
    if ch["curve"]:
        t, c = zip(*ch["curve"], strict=True)
        ax.plot(t, c, "-", color="0.4", lw=1, label="chaos: complete realizations")
    ax.axhline(n, color="k", lw=0.8, ls="--")
    ax.axvline(rec["clean"]["wall_s"], color="C2", lw=1, ls=":", label="clean run's wall")
    marks = {"scancel_task": ("x", "C3"), "scancel_array": ("X", "C3"), "requeue": ("^", "C1"),
             "time_limit": ("s", "C4"), "drain": ("v", "C0"), "disk_full": ("D", "C5"),
             "submit": ("|", "C7")}  # fmt: skip
    for kind, (mk, col) in marks.items():
        ev = [e for e in ch["events"] if e["kind"] == kind]
        if ev:
            lab = f"{kind} ({len(ev)})"
            ax.plot([e["t"] for e in ev], [e["complete"] for e in ev], mk, color=col, ms=6,
                    label=lab, alpha=0.85)  # fmt: skip
    ax.set_xlabel("seconds since the first sbatch")
    ax.set_ylabel("complete realizations")
    ax.legend(fontsize=7, loc="lower right", ncol=2)
    ok = "yes" if rec["ok"] else "NO"
    ax.set_title(f"{n} realizations, {sum(rec['faults'].values())} faults through SLURM: "
                 f"exact result set {ok}", fontsize=10)  # fmt: skip
    lg = ch["logs"]
    names = ["clean", "chaos"]
    vals = [rec["clean"]["wall_s"], ch["wall_s"]]
    bx.bar(names, vals, color=["C2", "C3"], width=0.5)
    for i, v in enumerate(vals):
        bx.annotate(f"{v:.0f} s", (i, v), ha="center", va="bottom", fontsize=8)
    bx.set_ylabel("wall, first sbatch to the last task's end (s)")
    bx.set_ylim(0, max(vals) * 1.9)
    left = rec["leftovers"]
    lines = [
        f"task runs: clean {rec['clean']['logs']['task_runs']}, chaos {lg['task_runs']}",
        f"bit-identical: {rec['compare']['bit_identical']} / {n}",
        f"rescheduled (claimed by >1 run): {len(ch['redone'])}",
        f"computed in landed batches: {lg['computed_in_landed_batches']}",
        f"written twice: {len(ch['written_twice'])}",
        f"tmp / claims / stray left: {len(left['tmp_files'])} / "
        f"{int(left['claims_file'])} / {len(left['stray_dirs'])}",
        f"bias_results.json differences: {len(rec['stats_diff'])}",
    ]  # fmt: skip
    bx.text(0.03, 0.97, "\n".join(lines), transform=bx.transAxes, va="top", fontsize=8,
            family="monospace")  # fmt: skip
    bx.set_title("wall: clean vs chaos", fontsize=10)


def main(argv: list[str] | None = None) -> int:
    ap = h.parser(__doc__, "chaos_slurm", repeats=1)
    ap.add_argument("--n-realizations", type=int, default=512, help="per shear (4 shears)")
    ap.add_argument("--tasks", type=int, default=32)
    ap.add_argument("--throttle", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--stamp", type=int, default=16)
    ap.add_argument("--faults", type=int, default=7, help="faults of each of the 6 kinds")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gap", type=float, nargs=2, default=(2.0, 6.0), help="s between faults")
    ap.add_argument("--aim", type=float, default=30.0,
                    help="s a fault may wait for a task that is computing")  # fmt: skip
    ap.add_argument("--keep", action="store_true", help="keep the working directory")
    args = ap.parse_args(argv)
    if why := slurm_up():
        raise SystemExit(f"chaos_slurm: {why}")
    info = h.provenance("float64")
    h.banner(info)
    info["slurm"] = sh(["sinfo", "-V"]).strip()
    work = Path(tempfile.mkdtemp(prefix="chaos_slurm_"))
    os.chmod(work, 0o755)
    try:
        rec = soak(work, n=args.n_realizations, tasks=args.tasks, throttle=args.throttle,
                   batch=args.batch_size, stamp=args.stamp, faults_per_kind=args.faults,
                   seed=args.seed, gap=tuple(args.gap), keep=args.keep,
                   aim_s=args.aim)  # fmt: skip
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    rec = json.loads(json.dumps(rec).replace(str(work), "<work>"))
    ch, c = rec["chaos"], rec["compare"]
    print(f"faults: {rec['faults']}; resubmits: {ch['resubmits']}")
    print(f"clean {rec['clean']['wall_s']:.1f} s, chaos {ch['wall_s']:.1f} s; statuses "
          f"{c['statuses']}; bit-identical {c['bit_identical']}; mismatched {len(c['mismatched'])}"
          f"; written twice {len(ch['written_twice'])}; redone {len(ch['redone'])}; leftovers "
          f"{rec['leftovers']}; stats diff {rec['stats_diff']}")  # fmt: skip
    print(f"EXACT UNINTERRUPTED RESULT SET: {'yes' if rec['ok'] else 'NO'}")
    h.write_json({"info": info, "settings": h.settings(args), **rec}, args.out, draw=draw)
    return 0 if rec["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
