"""Chaos soak through a real SLURM: scheduler faults against an emitted array, each fault
counted only once SLURM (or the task's own log) shows its effect, and the result set
must equal an uninterrupted array's exactly.

A Level 0 campaign (float64, 16x16 stamps, 4 shears x N seeds; fitted by VI of
``--vi-steps`` steps at S/N 152, :func:`chaos_config`, so that a task's engine computes
for tens of seconds rather than its start-up being most of its life) is emitted with
``bias-run --emit-sbatch`` twice: once into a plain directory, submitted with ``sbatch``
and left alone (the *clean* run, the reference), and once into a root on its own small
``tmpfs`` (mounted here; root needed), submitted and hit, at times and on targets drawn
from ``--seed``, with the faults users meet through the scheduler. Each fault is recorded
with its target, the time it was issued and the command's exit status, then with its
**effect**, read back from SLURM (its jobcomp log, ``/var/log/slurm/jobcomp.log``: how
each task run ended; ``scontrol show job`` / ``node``) and from the task's log, which
is kept outside the tmpfs (``sbatch --output``) so that a full disk cannot swallow it.
A fault takes effect when:

- ``scancel_task`` (``scancel <job>_<i>`` of a running task, re-submitted alone,
  ``sbatch --array=<i>``, 0-3 s later): that task run ended ``CANCELLED``;
- ``scancel_array`` (``scancel`` of every job of the campaign with a task running, the
  whole script re-submitted 1-5 s later; only when every running task has written a
  batch and none is the target of a fault still awaiting its effect, a drain's among
  them): the running task runs ended ``CANCELLED``;
- ``requeue`` (``scontrol requeue <job>_<i>`` of a running task): SLURM ended the run
  by requeueing it (jobcomp logs the run as ``PENDING``, the task's log shows ``DUE TO
  JOB REQUEUE``) and counts a restart (``Restarts`` >= 1); whether it ran again (after
  SLURM's 2-minute hold) is recorded too, and no ``scancel`` of the array comes while a
  requeued task waits to;
- ``time_limit`` (the running task's end time set to now, ``scontrol update
  EndTime=``, a few seconds before slurmctld's time-limit check, which runs every 30 s
  on a phase learnt from a probe job before the clean run and from every TIMEOUT seen;
  without a phase, at a task with more than a period of batches left): the run ended
  ``TIMEOUT`` and its log shows the engine's ``SIGTERM: no new batch`` after the fault.
  Aimed at a task whose engine is computing (its log shows the campaign started and the
  batches left would outlast the check), never at one still starting;
- ``drain`` (the node set to ``DRAIN`` while campaign tasks compute on it, then
  ``RESUME`` once at least 3-10 s have passed, one of those runs has ended and a job
  needing the CPU it freed, the drain probe ``sbatch --wrap true``, has waited 5 s; at
  most 180 s): read after the fact from jobcomp, a drained run was running when the drain
  came (its end not before the command) and ended while the node was drained, no other
  fault in force on it (no disk fill is injected during a drain, nor a drain during a
  fill; a run that a fault issued meanwhile targeted, or any run ended under a fill, is
  recorded as ``ended_by_another_fault``, not counted), and the probe (or a campaign task
  pending then for the node: ``Resources``, ``Priority``, ``ReqNodeNotAvail``, not the
  throttle or a requeue's begin time) started only after the ``RESUME``: the CPU the
  drained run freed was refused to a new job. A drain does not stop running work in
  SLURM; what it changes is that nothing replaces a run that ends. The node's state
  right after the command is recorded, not counted;
- ``disk_full`` (the output filesystem filled to the last byte by a filler file for
  3-10 s, while a task's engine is computing and writing; never during a drain): the log
  of a task run that was computing and had written a batch at the fill shows the
  engine's ``Error: cannot write ... No space left on device`` after the fill and that
  run ended failed (other runs that met it are recorded, not counted). bias-run exits 4 then (before the trap kept bias-run's status, SLURM
  logged exit status 1 when the script's EXIT trap, the task's ``bias-extract``, failed in
  turn on the still-full disk), so the exit status is recorded, not required.

Every fault hits running work: its target runs (for ``scancel_array``, every run it
cancels; for ``disk_full``, a run computing) have each written at least one complete
realization directory and still hold claims on more. A realization that becomes complete
is credited to the process that held its claim at the soak's last poll of the claims
file (its byte-range locks name the holder's pid), and that process to its SLURM job
(``SLURM_JOB_ID`` in /proc/<pid>/environ: the soak runs as root on the node). The log's
``batch i/n`` lines are recorded too (``batches_written``, ``realizations_computed``)
but are not the evidence: a batch line comes once the batch is handed to the background
writer. Each target's complete realizations, claims held and age (``elapsed_s``,
squeue's) are recorded with the fault.

A command that failed, or hit a task that had already ended, is recorded but not
counted. The soak keeps injecting (the kind furthest from its count first; time-limit
faults whenever slurmctld's check is near and a task computes) until every kind has
taken effect ``--min-effects`` times; a kind is not injected again while a fault of it
awaits its effect, and no fault hits the target of a fault awaiting its effect. If the
campaign completes, or ``--max-wall`` s pass, before every count is reached, injection
stops and the run FAILS (exit 1, ``effects_met`` false). Whenever no job of the campaign
is left in the queue and realizations are missing, the script is re-submitted as a user
would (``Re-submitting re-runs only what is missing``). Checked at the end:

- every planned realization ``done`` (:func:`shearbatch.io.realization_status`), nothing
  extra, and bit-identical to the clean run: every posterior.nc variable, truth.json, and
  convergence.json but for its timing (``runtime_s``), batch placement (``batch``, which
  batch and lane it ran in) and the campaign's output directory;
- no temporary file (``*.tmp``, under the cache too), no ``.claims``, no stray directory;
- no realization written twice (a convergence.json never changes once seen);
- ``bias-extract`` + ``bias-stats`` give the same ``bias_results.json`` as the clean run's
  (all but the paths and timings in it).

Recorded: every fault (kind, target, issued time, command, effect: state and evidence),
issued and effective counts per kind, how all task runs ended (jobcomp), realizations
redone (claimed by a task run that a fault ended before it wrote them, then done by
another: from polling the claims file), realizations computed twice (in batches that
landed, from the task logs, beyond the plan), the time-limit check's phase, wall time
against the clean run. The task logs of the chaos run are on the work directory, not the
tmpfs; the campaign's compilation cache is its root's own (compiled under the faults)
unless ``--warm-cache``. ``results/benchmarks/chaos_slurm.json`` and ``.png``::

    ci/start_slurm.sh
    .venv/bin/python bench/chaos_slurm.py [--n-realizations 400] [--tasks 16] [--min-effects 5]

``tests/guarantees/test_slurm_chaos.py`` (the ``slurm`` tier) runs :func:`soak` small,
until one fault of each kind has taken effect (``warm_cache``: one compilation cache for
both runs; ``release_requeued``: a requeued task runs again at once), checks each effect
against SLURM's jobcomp log itself, and runs :func:`two_campaigns`.
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
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import yaml

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
#: SLURM's jobcomp text log (ci/start_slurm.sh: no accounting database, so no sacct)
JOBCOMP = Path("/var/log/slurm/jobcomp.log")


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
         batch: int, name: str = "chaos", grid=GRID, cache: Path | None = None) -> Path:  # fmt: skip
    """The array script of the campaign (bias-run --emit-sbatch), no stats job; ``cache``:
    the compilation cache (default: the root's own)."""
    sh([str(BIN / "bias-run"), "--config", str(cfg), "--shear-grid", *grid,
        "--n-realizations", str(n), "--batch-size", str(batch), "--x64",
        "--output-dir", str(root), "--emit-sbatch", str(script), "--sbatch-tasks", str(tasks),
        "--sbatch-throttle", str(throttle), "--sbatch-time", "00:30:00",
        "--sbatch-line=--job-name=" + name, "--sbatch-line=--signal=TERM@50",
        "--sbatch-line=--open-mode=append", "--no-sbatch-stats",
        *(["--cache-dir", str(cache)] if cache else [])])  # fmt: skip
    return script


def chaos_config(path: Path, stamp: int, vi_steps: int) -> Path:
    """The soak's campaign: :func:`bench_slurm.config` (Level 0, ``stamp`` x ``stamp``)
    fitted by VI of ``vi_steps`` steps at S/N 152 (noise sigma 1e-3, where VI's ELBO settles;
    at Level 0's S/N 1.5e5 it does not and every fit is flagged). A realization then costs
    ~0.03 s per 1,000 steps on a quiet core, so that a task computes long enough for
    slurmctld's time-limit check to catch it, with files as small as MAP's; 0: Level 0's
    MAP (a realization in ~10 ms: most of a task's life is its start-up)."""
    config(path, stamp)
    if vi_steps:
        raw = yaml.safe_load(path.read_text())
        raw["image"]["noise"]["sigma"] = 1.0e-3
        raw["inference"]["method"] = "vi"
        raw["inference"]["vi_config"] = {"num_steps": vi_steps}
        path.write_text(yaml.safe_dump(raw))
    return path


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
    path = JOBCOMP
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


# --------------------------------------------------------------------------- SLURM's record

#: slurmctld checks the running jobs' time limits every 30 s (PERIODIC_TIMEOUT)
TICK_S = 30.0
#: the state each kind of fault must end in to count (see the module's docstring)
EXPECTED = {"scancel_task": "CANCELLED", "scancel_array": "CANCELLED", "requeue": "REQUEUED",
            "time_limit": "TIMEOUT", "drain": "REFUSED", "disk_full": "ENOSPC"}  # fmt: skip
#: a drain lasts until a drained run ended and a job was refused this long, or this long
DRAIN_REFUSE_S, DRAIN_MAX_S = 5.0, 180.0
SIGTERM_SEEN = "SIGTERM: no new batch"
NO_SPACE = "No space left on device"


def epoch(text: str) -> float:
    """SLURM's ``2026-11-28T06:41:22`` (local time) in seconds since the epoch."""
    return datetime.fromisoformat(text).timestamp()


def iso(t: float) -> str:
    return datetime.fromtimestamp(t).isoformat(timespec="seconds")


def run_cmd(cmd: list[str]) -> tuple[int, str]:
    """A scheduler command whose failure is recorded, not raised: (exit status, stderr)."""
    out = subprocess.run(cmd, capture_output=True, text=True, env=env(), check=False,
                         timeout=60)  # fmt: skip
    return out.returncode, out.stderr.strip()[-500:]


def parse_jobcomp(line: str) -> dict[str, str]:
    return dict(kv.split("=", 1) for kv in line.split() if "=" in kv)


def jobcomp_brief(e: dict[str, str]) -> str:
    keys = ("JobId", "ArrayJobId", "ArrayTaskId", "JobState", "StartTime", "EndTime", "ExitCode")
    return " ".join(f"{k}={e.get(k, '')}" for k in keys)


class Jobcomp:
    """SLURM's jobcomp text log, read as it grows: one line per task run's end (state,
    start and end time, exit code), by the run's own job id."""

    def __init__(self, path: Path = JOBCOMP):
        self.path = path
        self.off = path.stat().st_size if path.is_file() else 0
        self.runs: dict[str, list[dict[str, str]]] = {}

    def poll(self) -> None:
        if not self.path.is_file():
            return
        with open(self.path, "rb") as f:
            f.seek(self.off)
            data = f.read()
        cut = data.rfind(b"\n") + 1
        self.off += cut
        for line in data[:cut].decode(errors="replace").splitlines():
            e = parse_jobcomp(line)
            if "JobId" in e and "EndTime" in e:
                self.runs.setdefault(e["JobId"], []).append(e)

    def entries(self, key: str) -> list[dict[str, str]]:
        """The runs of ``key``: an array task ``<array job>_<index>`` (matched on SLURM's
        ArrayJobId and ArrayTaskId: the raw job id of an array's last task is the array's
        own) or a plain job id."""
        self.poll()
        if "_" not in key:
            return self.runs.get(key, [])
        arr, idx = key.rsplit("_", 1)
        return [e for runs in self.runs.values() for e in runs
                if (e.get("ArrayJobId"), e.get("ArrayTaskId")) == (arr, idx)]  # fmt: skip

    def end(self, key: str, at: float, until: float | None = None) -> dict[str, str] | None:
        """How SLURM ended the run of ``key`` that was running at ``at`` (or started by
        ``until``, or had just ended: a fault that came too late); None: not ended yet."""
        for e in self.entries(key):
            try:
                start, end = epoch(e["StartTime"]), epoch(e["EndTime"])
            except (KeyError, ValueError):
                continue
            if start <= (until or at) + 1 and end >= at - 2:
                return e
        return None

    def later(self, key: str, after: float) -> dict[str, str] | None:
        """A run of ``key`` that started after ``after`` and has ended (a requeued task's
        next run)."""
        for e in self.entries(key):
            with contextlib.suppress(KeyError, ValueError):
                if epoch(e["StartTime"]) > after:
                    return e
        return None


class Ticks:
    """When slurmctld checks time limits: every ~:data:`TICK_S` s from the last check seen
    (a job's TIMEOUT end time, whole seconds; the check runs within that second). The
    period is a little over 30 s on a busy controller (its loop sleeps between checks):
    estimated from the checks seen, and the prediction's slack grows with the periods
    since the last one."""

    def __init__(self) -> None:
        self.at: list[float] = []  # the checks seen
        self.seen: list[dict[str, Any]] = []  # every TIMEOUT seen: predicted against seen

    def period(self) -> float:
        if len(self.at) < 2:
            return TICK_S
        span = self.at[-1] - self.at[0]
        k = round(span / TICK_S)
        return span / k if k else TICK_S

    def next(self, now: float) -> tuple[float, float] | None:
        """The next check after ``now`` and its uncertainty (s); None: none seen yet."""
        if not self.at:
            return None
        per = self.period()
        k = max(1, math.ceil((now - self.at[-1]) / per))
        return self.at[-1] + k * per, min(1.0 + 0.25 * k, 10.0)  # up to ~0.25 s per period seen

    def learn(self, end: float, what: str) -> None:
        pred = None
        if self.at:
            per = self.period()
            pred = self.at[-1] + per * max(1, round((end - self.at[-1]) / per))
        self.seen.append({"what": what, "at": iso(end),
                          "off_s": None if pred is None else round(end - pred, 1)})  # fmt: skip
        if not self.at or end > self.at[-1]:
            self.at.append(end)


def start_probe(timeout: float = 300) -> dict[str, Any]:
    """A one-CPU ``sleep`` job, running (or the error): :func:`probe_tick`'s subject,
    started before the clean run takes the CPUs."""
    job = submit_wrap("sleep 600", "--job-name=chaos-tick", "--time=15", "--output=/dev/null")
    t0 = time.perf_counter()
    while not any(st == "RUNNING" for st, _ in queue([job]).values()):
        if time.perf_counter() - t0 > timeout:
            run_cmd(["scancel", job])
            return {"job": job, "error": "the probe never ran"}
        time.sleep(0.2)
    return {"job": job}


def probe_tick(ticks: Ticks, probe: dict[str, Any], timeout: float = 90) -> dict[str, Any]:
    """The phase of slurmctld's time-limit check: the running probe job's end time set
    to now, it ends TIMEOUT at the next check (within 30 s). Run beside the clean run's
    start-up."""
    if "error" in probe:
        return probe
    jc, job, t0 = Jobcomp(), probe["job"], time.perf_counter()
    out = dict(probe)
    try:
        at = time.time()
        out["command"] = run_cmd(["scontrol", "update", f"JobId={job}", f"EndTime={iso(at)}"])
        while (e := jc.end(job, at)) is None:
            if time.perf_counter() - t0 > timeout:
                out["error"] = "the probe's end never logged"
                return out
            time.sleep(0.2)
        out["jobcomp"] = jobcomp_brief(e)
        if e.get("JobState") == "TIMEOUT":
            ticks.learn(epoch(e["EndTime"]), f"probe {job}")
            out["waited_s"] = round(epoch(e["EndTime"]) - math.floor(at), 1)
        return out
    finally:
        run_cmd(["scancel", job])


def submit_wrap(cmd: str, *extra: str) -> str:
    return sh(["sbatch", "--parsable", *extra, "--wrap", cmd]).strip().split(";")[0]


class TaskRun:
    """A running task as the soak sees it: squeue's line and its log's last run."""

    def __init__(self, task: str, state: str, elapsed: float, job: str, log: Path | None):
        self.task, self.state, self.elapsed, self.job, self.log = task, state, elapsed, job, log
        self.phase, self.left_s, self.batches = "starting", None, None
        text = log.read_text(errors="replace") if log is not None and log.is_file() else ""
        self.offset = len(text.encode())
        last = text.rfind("array task ")
        tail = text[last:] if last >= 0 else ""
        # what this run has written (its engine logs a batch once its files are written)
        # and how many of its batches are left: a fault hits running work only when this
        # run has written >= 1 batch and has >= 1 to come
        landed = [(int(i), int(n), int(k)) for i, n, k in re.findall(
            r"^\S+ \S+ INFO shearbatch\.engine[\w.]*: batch (\d+)/(\d+): (\d+) realization",
            tail, re.M)]  # fmt: skip
        self.written = len(landed)
        self.written_realizations = sum(k for *_, k in landed)
        self.batches_left = landed[-1][1] - landed[-1][0] if landed else None
        # from the soak's Watch (the claims file): complete realization directories this
        # run's processes wrote, and the claims they still hold; None until attached
        self.on_disk: int | None = None
        self.claims_left: int | None = None
        if "campaign: " in tail and not re.search(r"campaign done|^Error: |SIGTERM", tail, re.M):
            self.phase = "computing"
            eng = r"^(\S+ \S+) INFO shearbatch\.engine[\w.]*: "  # the engine's loggers
            start = re.search(eng + "campaign: ", tail, re.M)
            done = re.findall(eng + r"batch (\d+)/(\d+): ", tail, re.M)
            if start and len(done) >= 3:  # the batches left at the pace of the last ones
                k, n = int(done[-1][1]), int(done[-1][2])
                j = max(1, len(done) - 6)  # the first batch (its programs' load) left out
                pace = (_logtime(done[-1][0]) - _logtime(done[j - 1][0])) / (len(done) - j)
                self.batches = (k, n)
                self.left_s = (n - k) * pace

    @property
    def working(self) -> bool:
        """Running work: this run has written >= 1 complete realization and holds >= 1
        claim more (from the claims file, :meth:`Watch.work`); without those, its log's
        batch lines (>= 1 batch computed and handed to the writer, >= 1 left)."""
        if self.on_disk is not None:
            return self.on_disk >= 1 and (self.claims_left or 0) >= 1
        return self.written >= 1 and (self.batches_left or 0) >= 1

    def brief(self) -> dict[str, Any]:
        return {"task": self.task, "job": self.job, "elapsed_s": self.elapsed,
                "phase": self.phase, "batches_done": self.batches,
                "batches_written": self.written,
                "realizations_computed": self.written_realizations,
                "realizations_written": self.on_disk, "claims_held": self.claims_left,
                "batches_left": self.batches_left,
                "left_s": None if self.left_s is None else round(self.left_s, 1),
                "log": self.log.name if self.log else None, "log_offset": self.offset}  # fmt: skip


def _logtime(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def segment(log: Path | None, offset: int) -> str:
    """What the task's log gained after ``offset`` (bytes)."""
    if log is None or not log.is_file():
        return ""
    with open(log, "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


def lines(text: str, *needles: str) -> list[str]:
    return [ln.strip()[:240] for ln in text.splitlines() if any(n in ln for n in needles)]


def squeue_tasks(job_ids: list[str], log_dir: Path) -> list[TaskRun]:
    """The active array tasks of ``job_ids`` (squeue), each with its log's state."""
    if not job_ids:
        return []
    out = subprocess.run(["squeue", "-h", "-r", "-j", ",".join(job_ids), "-o", "%i|%T|%M|%A"],
                         capture_output=True, text=True, env=env(), check=False).stdout  # fmt: skip
    res = []
    for line in out.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 4 or parts[1] not in ACTIVE:
            continue
        task, state, el, job = parts
        log = None
        if state == "RUNNING" and "_" in task:
            arr, idx = task.rsplit("_", 1)
            log = next(iter(log_dir.glob(f"*_{arr}_{idx}.out")), None)
        res.append(TaskRun(task, state, _secs(el), job, log if state == "RUNNING" else None))
    return res


# --------------------------------------------------------------------------- the runs


def slurm_job_of(pid: int) -> str | None:
    """The ``SLURM_JOB_ID`` of process ``pid`` (its environment; root reads any), or None."""
    try:
        env_ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for kv in env_:
        if kv.startswith(b"SLURM_JOB_ID="):
            return kv.split(b"=", 1)[1].decode()
    return None


class Watch(threading.Thread):
    """Polls the root: convergence.json mtimes (a change = written twice) and the claims
    (which task runs held each realization: more than one = redone after a fault)."""

    def __init__(self, root: Path, run_ids: list[str], every: float = 0.3):
        super().__init__(daemon=True)
        self.root, self.ids, self.every = root, run_ids, every
        self.seen: dict[str, int] = {}
        self.rewritten: set[str] = set()
        self.holders: dict[str, set[int]] = {}
        self.holder: dict[str, int] = {}  # not yet complete -> pid holding its claim now
        self.by_pid: dict[int, int] = {}  # pid -> complete realizations it wrote
        self.job_of: dict[int, str | None] = {}  # pid -> its SLURM_JOB_ID (/proc environ)
        self.curve: list[tuple[float, int]] = []
        self.t0 = time.perf_counter()
        self.halt = threading.Event()

    def poll(self) -> None:
        from shearbatch.io import claims

        now = complete(self.root)
        for rid, mt in now.items():
            if rid in self.seen and self.seen[rid] != mt:
                self.rewritten.add(rid)
            if rid not in self.seen and (pid := self.holder.get(rid)):
                # written by the process that held its claim when last polled
                self.by_pid[pid] = self.by_pid.get(pid, 0) + 1
            self.seen.setdefault(rid, mt)
        todo = [r for r in self.ids if r not in now]
        held = {r: p for r, p in claims.held(self.root, todo).items() if p}
        for rid, pid in held.items():
            self.holders.setdefault(rid, set()).add(pid)
            if pid not in self.job_of:
                self.job_of[pid] = slurm_job_of(pid)
        self.holder = held
        self.curve.append((round(time.perf_counter() - self.t0, 2), len(now)))

    def work(self, job: str) -> tuple[int, int]:
        """(complete realizations written, claims held) by the live run of SLURM job
        ``job`` (its processes that hold claims now)."""
        pids = {p for p in self.holder.values() if self.job_of.get(p) == job}
        return sum(self.by_pid.get(p, 0) for p in pids), sum(
            p in pids for p in self.holder.values()
        )

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
    """The chaos run: submit, inject faults until each kind has taken effect
    ``min_effects`` times (module docstring), re-submit whenever the queue is empty and
    work is missing."""

    def __init__(self, script: Path, root: Path, fs: Path | None, logs: Path,
                 run_ids: list[str], rng: random.Random, *, gap: tuple[float, float],
                 min_effects: int, ticks: Ticks, max_wall: float,
                 lead: tuple[float, float] = (1.5, 6.0), release_requeued: bool = False,
                 log=print):  # fmt: skip
        self.release_requeued = release_requeued
        self.script, self.root, self.fs, self.logs, self.ids = script, root, fs, logs, run_ids
        self.rng, self.gap, self.min, self.ticks = rng, gap, min_effects, ticks
        self.max_wall, self.lead, self.log = max_wall, lead, log
        self.jobs: list[str] = []
        self.events: list[dict[str, Any]] = []  # submissions, resumes, unfills
        self.faults: list[dict[str, Any]] = []  # every fault issued, with its effect
        self.pending: list[dict[str, Any]] = []  # faults awaiting their effect
        self.later: list[tuple[float, str, Any]] = []  # (time, what, arg)
        self.busy: set[str] = set()  # drain / disk_full in force
        self.resubmits: Counter[str] = Counter()
        self.stopped: str | None = None  # why injection stopped before every count was met
        self.jc = Jobcomp()
        self.t0 = time.perf_counter()
        self.node = node()

    def t(self) -> float:
        return round(time.perf_counter() - self.t0, 2)

    def note(self, kind: str, **kw: Any) -> None:
        ev = {"t": self.t(), "kind": kind, "complete": len(complete(self.root)), **kw}
        self.events.append(ev)
        self.log(f"{ev['t']:8.1f} s  {kind:14s} {ev['complete']:5d} complete  "
                 + " ".join(f"{k}={v}" for k, v in kw.items()))  # fmt: skip

    def submit(self, why: str, *extra: str) -> None:
        job = submit(self.script, f"--output={self.logs}/%x_%A_%a.out", *extra)
        self.jobs.append(job)
        self.resubmits[why] += 1
        self.note("submit", job=job, why=why, array=extra[0] if extra else "script")

    # ------------------------------------------------------------------ counts

    def effective(self, kind: str) -> int:
        return sum(1 for f in self.faults if f["kind"] == kind and (f["effect"] or {}).get("ok"))

    def need(self) -> dict[str, int]:
        return {k: self.min - self.effective(k) for k in KINDS}

    def met(self) -> bool:
        return all(v <= 0 for v in self.need().values())

    def held(self) -> set[str]:
        """The tasks (``<job>_<i>``) that a fault awaiting its effect targets."""
        out = set()
        for f in self.pending:
            tg = f["target"]
            out |= {tg["task"]} if "task" in tg else {r["task"] for r in tg.get("running", [])}
        return out

    # ------------------------------------------------------------------ faults

    def fault(self, kind: str, target: dict[str, Any], command: list[str], at: float,
              rc: int = 0, err: str = "", **extra: Any) -> dict[str, Any]:  # fmt: skip
        f = {"kind": kind, "t": self.t(), "issued": iso(at), "complete": len(complete(self.root)),
             "target": target, "command": " ".join(command), "rc": rc, "stderr": err,
             "effect": None, "_at": at, **extra}  # fmt: skip
        self.faults.append(f)
        self.pending.append(f)
        what = target.get("task") or ",".join(r["task"] for r in target.get("running", []))
        self.log(f"{f['t']:8.1f} s  {kind:14s} {f['complete']:5d} complete  target={what} "
                 f"rc={rc}" + (f" ({err})" if rc else ""))  # fmt: skip
        return f

    def task_fault(self, kind: str, run: TaskRun, tick: float | None = None) -> None:
        at = time.time()
        if kind == "scancel_task":
            cmd = ["scancel", run.task]
        elif kind == "requeue":
            cmd = ["scontrol", "requeue", run.task]
        else:  # time_limit: the run's end is now; slurmctld's next check times it out
            cmd = ["scontrol", "update", f"JobId={run.task}", f"EndTime={iso(at)}"]
        rc, err = run_cmd(cmd)
        extra = {"check_at": iso(tick), "check_in_s": round(tick - at, 1)} if tick else {}
        self.fault(kind, run.brief(), cmd, at, rc, err, **extra)
        if kind == "scancel_task":
            idx = run.task.rsplit("_", 1)[1]
            self.later.append((time.perf_counter() + self.rng.uniform(0, 3), "resubmit_task", idx))

    def scancel_array(self, running: list[TaskRun]) -> None:
        active = sorted({j.split("_")[0] for j in queue(self.jobs)})
        at = time.time()
        cmd = ["scancel", *active]
        rc, err = run_cmd(cmd)
        self.fault("scancel_array", {"jobs": active, "running": [r.brief() for r in running]},
                   cmd, at, rc, err)  # fmt: skip
        self.later.append((time.perf_counter() + self.rng.uniform(1, 5), "resubmit", None))

    def drain(self, working: list[TaskRun]) -> None:
        """The node drained while ``working`` runs compute on it; resumed once one of them
        has ended and a job submitted then (the drain probe, needing the CPU that run
        freed) has waited while drained for :data:`DRAIN_REFUSE_S` s, or after
        :data:`DRAIN_MAX_S` s. The effect is read after the fact (:meth:`resolve`)."""
        at = time.time()
        cmd = ["scontrol", "update", f"NodeName={self.node}", "State=DRAIN", "Reason=chaos"]
        rc, err = run_cmd(cmd)
        hold = self.rng.uniform(3, 10)
        self.busy.add("drain")
        f = self.fault("drain", {"node": self.node, "running": [r.brief() for r in working]},
                       cmd, at, rc, err, hold_s=round(hold, 1), node_state=node_state(self.node),
                       probe=None, _pending={})  # fmt: skip
        self.later.append((time.perf_counter() + hold, "resume", f))

    def drain_over(self, f: dict[str, Any]) -> bool:
        """Whether the drain of ``f`` may end: a drained run ended, then the probe job
        (and any campaign task pending) was refused for :data:`DRAIN_REFUSE_S` s."""
        now = time.time()
        if now - f["_at"] > DRAIN_MAX_S or f["rc"] != 0:
            return True
        targets = {r["task"] for r in f["target"]["running"]}
        out = subprocess.run(["squeue", "-h", "-r", "-j", ",".join(self.jobs), "-o", "%i|%T|%r"],
                             capture_output=True, text=True, env=env(), check=False).stdout  # fmt: skip
        rows = [ln.strip().split("|") for ln in out.splitlines() if ln.count("|") == 2]
        running = {t for t, st, _ in rows if st == "RUNNING"}
        if not targets - running:
            return False  # every drained run still computes: nothing could be refused yet
        for t, st, why in rows:  # campaign tasks waiting while the node is drained
            # (waiting for the node: not for the array's throttle, a requeued task's begin
            # time or a hold)
            if st == "PENDING" and why.startswith(("Resources", "Priority", "ReqNodeNotAvail")):
                f["_pending"].setdefault(t, {"reason": why, "seen": iso(now)})
        if f["probe"] is None:  # a one-CPU job the freed CPU would run at once, undrained
            f["probe"] = {"job": submit_wrap("true", "--job-name=chaos-drain-probe", "--time=2",
                                             "--output=/dev/null"),
                          "submitted": iso(now), "_t": now}  # fmt: skip
            f["ended_target_seen"] = iso(now)
            return False
        return now - f["probe"]["_t"] >= DRAIN_REFUSE_S

    def disk_full(self, computing: list[TaskRun], running: list[TaskRun]) -> None:
        assert self.fs is not None
        offsets = {p.name: p.stat().st_size for p in self.logs.glob("*.out")}
        filler = self.fs / "filler"
        at = time.time()
        fill(filler)
        hold = self.rng.uniform(3, 10)
        free = os.statvfs(self.fs)
        self.busy.add("disk_full")
        self.later.append((time.perf_counter() + hold, "unfill", filler))
        self.fault("disk_full", {"running": [r.brief() for r in running],
                                 "computing": [r.task for r in computing],
                                 "free_bytes": free.f_bavail * free.f_frsize},
                   ["fill", str(filler)], at, hold_s=round(hold, 1), _offsets=offsets,
                   _until=at + hold)  # fmt: skip

    def settle(self, f: dict[str, Any], effect: dict[str, Any]) -> None:
        effect["t"] = self.t()
        f["effect"] = effect
        self.pending.remove(f)
        if f["kind"] == "requeue" and effect["ok"] and self.release_requeued:
            self.later.append((time.perf_counter() + 1, "release", f))
        if f["kind"] == "time_limit" and effect.get("state") == "TIMEOUT":
            self.ticks.learn(epoch(effect["_end"]), f"TIMEOUT of {f['target']['task']}")
        n = self.effective(f["kind"])
        self.log(f"{self.t():8.1f} s  {f['kind']:14s} issued at {f['t']:.1f} s: "
                 f"{'EFFECT' if effect['ok'] else 'no effect'} {effect['state']} "
                 f"({n}/{self.min})")  # fmt: skip

    # ------------------------------------------------------------------ effects

    def resolve(self, f: dict[str, Any]) -> dict[str, Any] | None:
        """The fault's effect, or None while SLURM has not said yet."""
        kind, at, tg, now = f["kind"], f["_at"], f["target"], time.time()
        if f["rc"] != 0:
            return {"ok": False, "state": "command failed", "evidence": {"stderr": f["stderr"]}}
        if kind in ("scancel_task", "requeue", "time_limit"):
            e = self.jc.end(tg["task"], at)
            wait = 90 + (f.get("check_in_s") or 0)
            if e is None:
                if now - at < wait:
                    return None
                return {"ok": False, "state": "no end logged", "evidence": {}}
            seg = segment(self.logs / tg["log"], tg["log_offset"]) if tg["log"] else ""
            st, ev = e["JobState"], {"jobcomp": jobcomp_brief(e)}
            if kind == "scancel_task":
                ev["log"] = lines(seg, "CANCELLED AT")
                return {"ok": st == "CANCELLED", "state": st, "evidence": ev}
            if kind == "requeue":
                n = restarts(tg["task"])
                ev["log"], ev["restarts"] = lines(seg, "DUE TO JOB REQUEUE"), n
                ok = st in ("PENDING", "REQUEUED", "REQUEUE_HOLD") and (n or 0) >= 1
                return {"ok": ok, "state": "REQUEUED" if ok else st, "evidence": ev}
            seen = SIGTERM_SEEN in seg  # time_limit: the engine's line, a moment after
            if st == "TIMEOUT" and not seen and now - epoch(e["EndTime"]) < 20:
                return None
            ev["log"] = lines(seg, "DUE TO TIME LIMIT", "SIGTERM")
            ev["sigterm_seen"] = seen
            return {"ok": st == "TIMEOUT" and seen, "state": st, "evidence": ev,
                    "_end": e["EndTime"]}  # fmt: skip
        if kind == "scancel_array":
            ends = {r["task"]: self.jc.end(r["task"], at) for r in tg["running"]}
            if any(e is None for e in ends.values()) and now - at < 90:
                return None
            states = {k: e["JobState"] if e else "no end logged" for k, e in ends.items()}
            logs = [ln for r in tg["running"] if r["log"]
                    for ln in lines(segment(self.logs / r["log"], r["log_offset"]),
                                    "CANCELLED AT")]  # fmt: skip
            ok = bool(states) and all(s == "CANCELLED" for s in states.values())
            return {"ok": ok, "state": "CANCELLED" if ok else ",".join(sorted(set(states.values()))),
                    "evidence": {"states": states, "log": logs,
                                 "jobcomp": [jobcomp_brief(e) for e in ends.values() if e]}}  # fmt: skip
        if kind == "drain":  # after the fact, from jobcomp: who ran, ended, waited
            if "_resumed" not in f:
                return None
            resumed = f["_resumed"]
            # another fault in force while drained: a disk fill (any run), or one aimed at
            # a drained run (the soak injects neither; a run either ended is not counted)
            during = [g for g in getattr(self, "faults", []) if g is not f
                      and at - 1 <= g.get("_at", 0) <= resumed + 1]  # fmt: skip
            filled = any(g["kind"] == "disk_full" for g in during)
            hit = {g["target"].get("task") for g in during}
            hit |= {r["task"] for g in during for r in g["target"].get("running", [])}
            ran, ended, other = {}, {}, {}
            for r in tg["running"]:
                e = self.jc.end(r["task"], at)
                # the run that was running on the node when the drain came (whole seconds)
                if e is None or epoch(e["EndTime"]) < math.floor(at):
                    continue
                ran[r["task"]] = jobcomp_brief(e)
                if epoch(e["EndTime"]) <= resumed + 1:  # its run ended while drained
                    if filled or r["task"] in hit:
                        other[r["task"]] = e["JobState"]
                    else:
                        ended[r["task"]] = e["JobState"]
            refused = {}  # jobs submitted or pending while drained, started after RESUME
            waiting = dict(f["_pending"])
            if f["probe"] is not None:
                waiting[f["probe"]["job"]] = {"reason": "drain probe",
                                              "seen": f["probe"]["submitted"]}  # fmt: skip
            unseen = []
            for key, w in waiting.items():
                runs = self.jc.entries(key)
                # its run after it was seen waiting (one cancelled while waiting never ran)
                ran_at = [e for e in runs if epoch(e["StartTime"]) >= epoch(w["seen"]) - 1
                          and (e["JobState"], e["StartTime"]) != ("CANCELLED", e["EndTime"])]  # fmt: skip
                e = ran_at[0] if ran_at else None
                if e is None:
                    unseen.append(key)
                elif epoch(e["StartTime"]) >= resumed - 1:
                    refused[key] = {**w, "jobcomp": jobcomp_brief(e)}
            if unseen and now - resumed < 600:
                return None  # a waiting job's run has not ended yet
            ok = bool(ended) and bool(refused)
            return {"ok": ok, "state": "REFUSED" if ok else
                    ("no job refused" if ended else "drained run ended by another fault"
                     if other else "no drained run ended"),
                    "evidence": {"node_state_at_command": f["node_state"],
                                 "ran_across_drain": ran, "ended_while_drained": ended,
                                 "ended_by_another_fault": other,
                                 "refused_while_drained": refused, "never_ran": unseen,
                                 "drained_s": f.get("drained_s")}}  # fmt: skip
        if kind == "disk_full":
            hits, others = {}, {}
            aimed = set(tg["computing"])  # runs that had written a batch and computed on
            for p in self.logs.glob("*.out"):
                seg = segment(p, f["_offsets"].get(p.name, 0))
                met = [ln for ln in lines(seg, NO_SPACE) if ln.startswith("Error: ")]
                if met:  # the engine's own line (not JAX's warning about its cache)
                    m = re.fullmatch(r".*_(\d+)_(\d+)\.out", p.name)
                    key = f"{m[1]}_{m[2]}" if m else ""
                    (hits if key in aimed else others)[p.name] = met
            if not hits:
                if now < f["_until"] + 10:
                    return None
                return {"ok": False, "state": "no writer met the full disk" if not others
                        else "only runs not aimed at met the full disk",
                        "evidence": {"others_met_it": others}}  # fmt: skip
            ends = {}
            for name in hits:  # the run that met it: started by the end of the fill
                arr, idx = re.fullmatch(r".*_(\d+)_(\d+)\.out", name).groups()
                ends[name] = self.jc.end(f"{arr}_{idx}", at, until=f["_until"])
            codes = {k: e.get("ExitCode") if e else None for k, e in ends.items()}
            ok = any(c not in (None, "0:0") for c in codes.values())  # a run stopped on it
            if not ok and any(e is None for e in ends.values()) and now < f["_until"] + 90:
                return None
            return {"ok": ok, "state": "ENOSPC" if ok else "ENOSPC, the run went on",
                    "evidence": {"log": hits, "exit_codes": codes, "others_met_it": others,
                                 "jobcomp": [jobcomp_brief(e) for e in ends.values() if e]}}  # fmt: skip
        raise AssertionError(kind)

    def close(self) -> None:
        """After the run: what became of requeued runs and of the runs a drain saw."""
        for f in self.faults:
            eff = f["effect"] or {}
            if f["kind"] == "requeue" and eff.get("ok"):
                again = self.jc.later(f["target"]["task"], f["_at"])
                eff["evidence"]["ran_again"] = jobcomp_brief(again) if again else None
            if f["kind"] == "drain" and f.get("probe"):
                run_cmd(["scancel", f["probe"]["job"]])  # if it still waits
                f["probe"].pop("_t", None)
            for k in [k for k in f if k.startswith("_")]:
                del f[k]
            eff.pop("_end", None)

    # ------------------------------------------------------------------ the loop

    def step(self, next_at: float) -> bool:
        """Inject one fault if one is due and has a target; True if one was."""
        need = self.need()
        pend = Counter(f["kind"] for f in self.pending)
        now = time.time()
        snap = squeue_tasks(self.jobs, self.logs)
        for r in snap:
            if r.state == "RUNNING" and getattr(self, "watch", None) is not None:
                r.on_disk, r.claims_left = self.watch.work(r.job)
        held = self.held()
        every = [r for r in snap if r.state == "RUNNING"]  # all the array's cancel would end
        running = [r for r in every if r.task not in held]
        # every fault hits running work: a run that has written >= 1 complete realization
        # and holds >= 1 claim more (TaskRun.working)
        working = [r for r in running if r.working]
        computing = [r for r in running if r.phase == "computing" and r.working]
        nxt = self.ticks.next(now)
        # the time limit whenever slurmctld's check is near (but surely after the fault)
        # and a task computes with batches enough left to outlast it; the tasks that could
        # be hit are spared meanwhile
        keep: list[TaskRun] = []
        if need["time_limit"] > 0 and not pend["time_limit"] and nxt is None:
            # no check seen yet (the probe failed): a task with batches enough left to
            # outlast a whole period; its TIMEOUT then gives the phase
            far = [r for r in computing if r.left_s is not None and r.left_s >= TICK_S + 10]
            if far and "disk_full" not in self.busy and not pend["disk_full"]:
                self.task_fault("time_limit", self.rng.choice(far))
                return True
        if need["time_limit"] > 0 and not pend["time_limit"] and nxt is not None:
            tick, slack = nxt
            dt = tick - now
            keep = [r for r in computing if r.left_s is not None and r.left_s >= dt + slack + 4]
            lo, hi = max(self.lead[0], slack + 0.5), self.lead[1] + slack
            if (keep and lo <= dt <= hi and "disk_full" not in self.busy
                    and not pend["disk_full"]):  # fmt: skip
                self.task_fault("time_limit", self.rng.choice(keep), tick)
                return True
            if dt > hi + 10:
                keep = []
        if time.perf_counter() < next_at:
            return False
        kill = [r for r in working if r not in keep]
        others = [f for f in self.pending if f["kind"] != "drain"]
        # a requeued task waiting to run again is not cancelled with the array
        requeued = {f["target"]["task"] for f in self.faults if f["kind"] == "requeue"
                    and (f["effect"] or {}).get("ok") and time.time() - f["_at"] < 200}  # fmt: skip
        waiting = any(r.task in requeued and r.state != "RUNNING" for r in snap)
        opts = [k for k, ok in (
            ("scancel_task", bool(kill)),
            ("requeue", bool(kill)),
            # every run the array's cancel ends (all running, none a pending fault's
            # target: a drain's runs are held until its effect is read) has written a batch
            ("scancel_array", bool(every) and all(r.working for r in every)
             and not (held & {r.task for r in every}) and not others
             and not keep and not waiting and "drain" not in self.busy),
            # no disk fill during a drain (a drained run it ended would count for the drain)
            ("drain", "drain" not in self.busy and bool(working) and not pend["disk_full"]
             and "disk_full" not in self.busy),
            ("disk_full", self.fs is not None and "disk_full" not in self.busy
             and "drain" not in self.busy
             and bool(computing) and not pend["time_limit"] and not keep),
        ) if ok and need[k] > 0 and not pend[k]]  # fmt: skip
        if not opts:
            return False
        top = max(need[k] for k in opts)
        kind = self.rng.choice([k for k in opts if need[k] == top])
        if kind in ("scancel_task", "requeue"):
            self.task_fault(kind, self.rng.choice(kill))
        elif kind == "scancel_array":
            self.scancel_array(every)
        elif kind == "drain":
            self.drain(working)
        else:
            self.disk_full(computing, running)
        return True

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
                if arg is not None and not self.drain_over(arg):
                    self.later.append((now + 1, "resume", arg))
                    continue
                sh(["scontrol", "update", f"NodeName={self.node}", "State=RESUME"])
                self.busy.discard("drain")
                if arg is not None:
                    arg["_resumed"] = time.time()
                    arg["resumed"] = iso(arg["_resumed"])
                    arg["drained_s"] = round(arg["_resumed"] - arg["_at"], 1)
                self.note("resume")
            elif what == "unfill":
                Path(arg).unlink(missing_ok=True)
                self.busy.discard("disk_full")
                self.note("unfill")
            elif what == "release":  # once SLURM holds the requeued task for its begin time
                self.release(arg)

    def release(self, f: dict[str, Any]) -> None:
        """A requeued task runs again now rather than after SLURM's 2-minute hold: once
        its old run is gone and it waits for its begin time (``scontrol update
        StartTime=now``; earlier, the requeue's end re-sets the hold)."""
        task = f["target"]["task"]
        out = subprocess.run(["squeue", "-h", "-j", task, "-o", "%T|%r"], capture_output=True,
                             text=True, env=env(), check=False).stdout.strip()  # fmt: skip
        if out == "PENDING|BeginTime":
            rc, err = run_cmd(["scontrol", "update", f"JobId={task}", "StartTime=now"])
            f["released"] = {"t": self.t(), "rc": rc, "stderr": err}
        elif out and time.time() - f["_at"] < 90:
            self.later.append((time.perf_counter() + 1, "release", f))

    def run(self, timeout: float) -> dict[str, Any]:
        watch = self.watch = Watch(self.root, self.ids)
        watch.start()
        self.submit("first submission")
        next_at = time.perf_counter() + self.rng.uniform(*self.gap)
        last_step = 0.0
        try:
            while True:
                if time.perf_counter() - self.t0 > timeout:
                    raise TimeoutError(f"chaos soak not done after {timeout:.0f} s")
                self.deferred()
                for f in list(self.pending):
                    if (eff := self.resolve(f)) is not None:
                        self.settle(f, eff)
                injecting = self.stopped is None and not self.met()
                if injecting and time.perf_counter() - self.t0 > self.max_wall:
                    self.stopped = (f"{self.max_wall:.0f} s (max_wall) passed before every kind "
                                    f"took effect {self.min} times")  # fmt: skip
                    self.log(f"STOPPED: {self.stopped}")
                    injecting = False
                if injecting and time.perf_counter() - last_step > 0.4:
                    last_step = time.perf_counter()
                    if self.step(next_at):
                        next_at = time.perf_counter() + self.rng.uniform(*self.gap)
                if not self.later and not self.busy and not queue(self.jobs):
                    n = len(complete(self.root))
                    if n < len(self.ids):
                        self.submit(f"queue empty, {len(self.ids) - n} missing")
                    elif not self.pending:
                        if injecting:
                            self.stopped = ("the campaign completed before every kind took "
                                            f"effect {self.min} times")  # fmt: skip
                            self.log(f"STOPPED: {self.stopped}")
                        break
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
        self.close()
        wall = time.perf_counter() - self.t0
        # redone: claimed by more than one task run (the first was ended by a fault)
        redone = sorted(r for r, pids in watch.holders.items() if len(pids) > 1)
        return {"wall_s": wall, "jobs": self.jobs, "events": self.events, "faults": self.faults,
                "stopped": self.stopped, "resubmits": dict(self.resubmits),
                "ticks": self.ticks.seen, "written_twice": sorted(watch.rewritten),
                "redone": redone, "claimed_by": {r: len(p) for r, p in watch.holders.items()},
                "curve": watch.curve[:: max(1, len(watch.curve) // 400)]}  # fmt: skip


def node_state(name: str) -> dict[str, str]:
    """The node's state as ``scontrol show node`` and ``sinfo`` say it."""
    text = sh(["scontrol", "show", "node", name], ok=(0, 1))
    m = re.search(r"\bState=(\S+)", text)
    return {"scontrol": m[1] if m else "?",
            "sinfo": sh(["sinfo", "-h", "-n", name, "-o", "%T"], ok=(0, 1)).strip()}  # fmt: skip


def restarts(job: str) -> int | None:
    """``Restarts`` of ``scontrol show job`` (how often SLURM requeued it)."""
    m = re.search(r"\bRestarts=(\d+)", sh(["scontrol", "show", "job", job], ok=(0, 1)))
    return int(m[1]) if m else None


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


def soak(work: Path, *, n: int = 400, tasks: int = 16, throttle: int = 2, batch: int = 4,
         stamp: int = 16, vi_steps: int = 60000, min_effects: int = 5, seed: int = 0,
         gap: tuple[float, float] = (2.0, 6.0), fs_mb: int = 0, timeout: float = 7200,
         max_wall: float = 3600, warm_cache: bool = False, release_requeued: bool = False,
         keep: bool = False, lead: tuple[float, float] = (1.5, 6.0),
         log=print) -> dict[str, Any]:  # fmt: skip
    """The clean run and the chaos run of one campaign under ``work``, and the checks.
    ``vi_steps``: the campaign's workload (:func:`chaos_config`); ``fs_mb``: the chaos
    root's tmpfs size (0: sized from the clean run); ``max_wall``: seconds of injection
    before the soak gives up on the counts (and fails); ``warm_cache``: one compilation
    cache (outside the tmpfs) for both runs, so that the chaos run compiles nothing (no
    compile under the faults: shorter); ``release_requeued``: a requeued task may run again
    at once (``scontrol update StartTime=now``) instead of after SLURM's 2-minute hold."""
    rng = random.Random(seed)
    cfg = chaos_config(work / "level0.yaml", stamp, vi_steps)
    kw = dict(n=n, tasks=tasks, throttle=throttle, batch=batch,
              cache=work / "jax-cache" if warm_cache else None)  # fmt: skip
    clean_root = work / "clean"
    emit(cfg, clean_root, work / "clean.sbatch", **kw)
    log(f"clean run: {4 * n} realizations, {tasks} tasks, throttle {throttle}")
    ticks, probe = Ticks(), start_probe()
    prober = threading.Thread(target=lambda: probe.update(probe_tick(ticks, probe)), daemon=True)
    prober.start()
    clean = clean_run(work / "clean.sbatch", clean_root, timeout)
    prober.join()
    run_ids = planned_ids(clean_root)
    log(f"clean run: {clean['complete']} complete in {clean['wall_s']:.1f} s; time-limit check "
        f"probe: {probe}")  # fmt: skip
    used = sum(p.stat().st_size for p in clean_root.rglob("*") if p.is_file())
    fs = work / "fs"
    size = fs_mb or max(64, math.ceil(2.5 * used / 2**20))
    mount_tmpfs(fs, size)
    logs = work / "chaos_logs"  # outside the tmpfs: a full disk must not swallow the evidence
    logs.mkdir()
    try:
        root = fs / "camp"
        emit(cfg, root, work / "chaos.sbatch", **kw)
        log(f"chaos run: until each kind of fault took effect {min_effects} times, on a "
            f"{size} MB tmpfs")  # fmt: skip
        chaos = Soak(work / "chaos.sbatch", root, fs, logs, run_ids, rng, gap=gap,
                     min_effects=min_effects, ticks=ticks, max_wall=max_wall, lead=lead,
                     release_requeued=release_requeued, log=log).run(timeout)  # fmt: skip
        chaos["jobcomp"] = jobcomp(chaos["jobs"])
        chaos["logs"] = task_logs(logs)
        chaos["tick_probe"] = probe
        faults = chaos.pop("faults")
        rec = {
            "campaign": {"realizations": len(run_ids), "tasks": tasks, "throttle": throttle,
                         "batch_size": batch, "stamp": stamp,
                         "method": f"vi ({vi_steps} steps)" if vi_steps else "map",
                         "dtype": "float64", "seed": seed, "tmpfs_mb": size,
                         "fault_gap_s": list(gap), "min_effects": min_effects,
                         "max_wall_s": max_wall, "time_limit_lead_s": list(lead),
                         "warm_cache": warm_cache, "release_requeued": release_requeued},
            "clean": clean,
            "chaos": chaos,
            "effects": effect_counts(faults),
            "faults": faults,
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
        umount(fs)
    c, left = rec["compare"], rec["leftovers"]
    rec["effects_met"] = all(v["effective"] >= min_effects for v in rec["effects"].values())
    rec["nothing_lost"] = (c["statuses"] == {"done": len(run_ids)} and not c["mismatched"]
                           and not chaos["written_twice"] and not rec["stats_diff"]
                           and not left["tmp_files"] and not left["claims_file"]
                           and not left["stray_dirs"] and not left["unexpected_files"])  # fmt: skip
    rec["ok"] = rec["effects_met"] and rec["nothing_lost"]
    return rec


def effect_counts(faults: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per kind: faults issued, faults that took effect, and what the others came to."""
    out = {}
    for k in KINDS:
        mine = [f for f in faults if f["kind"] == k]
        eff = [f for f in mine if f["effect"] and f["effect"]["ok"]]
        out[k] = {"issued": len(mine), "effective": len(eff),
                  "no_effect": dict(Counter(f["effect"]["state"] if f["effect"] else "unresolved"
                                            for f in mine if f not in eff))}  # fmt: skip
    return out


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
             "time_limit": ("s", "C4"), "drain": ("v", "C0"), "disk_full": ("D", "C5")}  # fmt: skip
    for kind, (mk, col) in marks.items():
        fs = [f for f in rec["faults"] if f["kind"] == kind]
        eff = [f for f in fs if f["effect"] and f["effect"]["ok"]]
        miss = [f for f in fs if f not in eff]
        cnt = rec["effects"][kind]
        if eff:
            ax.plot([f["t"] for f in eff], [f["complete"] for f in eff], mk, color=col, ms=6,
                    alpha=0.85, label=f"{kind} ({cnt['effective']} of {cnt['issued']})")  # fmt: skip
        if miss:
            ax.plot([f["t"] for f in miss], [f["complete"] for f in miss], mk, ms=6, mfc="none",
                    color=col, alpha=0.6, label=None if eff else f"{kind} (0 of {len(fs)})")  # fmt: skip
    sub = [e for e in ch["events"] if e["kind"] == "submit"]
    ax.plot([e["t"] for e in sub], [e["complete"] for e in sub], "|", color="C7", ms=8,
            label=f"sbatch ({len(sub)})")  # fmt: skip
    ax.set_xlabel("seconds since the first sbatch (hollow: a fault without its effect)")
    ax.set_ylabel("complete realizations")
    ax.legend(fontsize=7, loc="lower right", ncol=2)
    ok = "yes" if rec["nothing_lost"] else "NO"
    eff = sum(v["effective"] for v in rec["effects"].values())
    iss = sum(v["issued"] for v in rec["effects"].values())
    ax.set_title(f"{n} realizations, {eff} of {iss} faults took effect through SLURM: "
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
    lines_ = [
        f"task runs: clean {rec['clean']['logs']['task_runs']}, chaos {lg['task_runs']}",
        f"bit-identical: {rec['compare']['bit_identical']} / {n}",
        f"rescheduled (claimed by >1 run): {len(ch['redone'])}",
        f"computed in landed batches: {lg['computed_in_landed_batches']}",
        f"written twice: {len(ch['written_twice'])}",
        f"tmp / claims / stray left: {len(left['tmp_files'])} / "
        f"{int(left['claims_file'])} / {len(left['stray_dirs'])}",
        f"bias_results.json differences: {len(rec['stats_diff'])}",
        "effective / issued:",
        *(f"  {k:13s} {v['effective']} / {v['issued']}" for k, v in rec["effects"].items()),
    ]  # fmt: skip
    bx.text(0.03, 0.97, "\n".join(lines_), transform=bx.transAxes, va="top", fontsize=7,
            family="monospace")  # fmt: skip
    bx.set_title("wall: clean vs chaos", fontsize=10)


def main(argv: list[str] | None = None) -> int:
    ap = h.parser(__doc__, "chaos_slurm", repeats=1)
    ap.add_argument("--n-realizations", type=int, default=400, help="per shear (4 shears)")
    ap.add_argument("--tasks", type=int, default=16)
    ap.add_argument("--throttle", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--stamp", type=int, default=16)
    ap.add_argument("--vi-steps", type=int, default=60000,
                    help="the campaign's workload: VI steps per realization (0: MAP)")  # fmt: skip
    ap.add_argument("--min-effects", type=int, default=5,
                    help="faults of each of the 6 kinds that must take effect")  # fmt: skip
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gap", type=float, nargs=2, default=(2.0, 6.0), help="s between faults")
    ap.add_argument("--max-wall", type=float, default=3600,
                    help="s of injection before the soak gives up on the counts (and fails)")  # fmt: skip
    ap.add_argument("--warm-cache", action="store_true",
                    help="start the chaos root with the clean run's compiled programs")  # fmt: skip
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
                   batch=args.batch_size, stamp=args.stamp, vi_steps=args.vi_steps,
                   min_effects=args.min_effects,
                   seed=args.seed, gap=tuple(args.gap), max_wall=args.max_wall,
                   warm_cache=args.warm_cache, keep=args.keep)  # fmt: skip
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    rec = json.loads(json.dumps(rec).replace(str(work), "<work>"))
    ch, c = rec["chaos"], rec["compare"]
    for k, v in rec["effects"].items():
        print(f"{k:14s} issued {v['issued']:3d}  took effect {v['effective']:3d}  "
              f"no effect: {v['no_effect']}")  # fmt: skip
    print(f"resubmits: {ch['resubmits']}; stopped: {ch['stopped']}")
    print(f"clean {rec['clean']['wall_s']:.1f} s, chaos {ch['wall_s']:.1f} s; statuses "
          f"{c['statuses']}; bit-identical {c['bit_identical']}; mismatched {len(c['mismatched'])}"
          f"; written twice {len(ch['written_twice'])}; redone {len(ch['redone'])}; leftovers "
          f"{rec['leftovers']}; stats diff {rec['stats_diff']}")  # fmt: skip
    print(
        f"EVERY KIND TOOK EFFECT {args.min_effects} TIMES: {'yes' if rec['effects_met'] else 'NO'}"
    )
    print(f"EXACT UNINTERRUPTED RESULT SET: {'yes' if rec['nothing_lost'] else 'NO'}")
    h.write_json({"info": info, "settings": h.settings(args), **rec}, args.out, draw=draw)
    return 0 if rec["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
