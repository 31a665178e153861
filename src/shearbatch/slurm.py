"""SLURM array tasks: which slice of the plan a task runs, and sbatch script generation.

A campaign split over an array of ``K`` tasks: task ``p`` (its *position* in the
array's index set, 0-based) runs slice ``p`` of ``K`` of the plan
(:func:`shearbatch.campaign.array_slice`). The position comes from SLURM's
environment: for ``--array=a-b:s`` (offset, stepped or plain ranges) SLURM sets
``SLURM_ARRAY_TASK_MIN=a``, ``MAX``, ``STEP=s`` and ``COUNT``, and the task
with id ``i`` is at position ``(i - a) / s``. A list that is not a range
(``--array=1,3,5``) gets ``STEP=1`` from SLURM (22.05), so the id alone cannot
tell the position; such a task needs the index set itself (``--array-indices``,
which the scripts written by :func:`sbatch_script` pass).

:func:`sbatch_script` writes the array job for a campaign (resources, setup
lines, the ``bias-run`` invocation, which reads the campaign's frozen
``config.yaml``) and :func:`stats_script` the dependent job that runs
``bias-extract`` and ``bias-stats`` (verdict and report) once the array has
finished. :func:`allocated_cpus` is what a job may use (``SLURM_CPUS_PER_TASK``,
else the affinity mask).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .io.layout import MANIFEST

__all__ = [
    "STATS_VERDICTS",
    "ArrayError",
    "SbatchOptions",
    "allocated_cpus",
    "array_position",
    "parse_indices",
    "sbatch_script",
    "stats_script",
]

_ENV = ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_MAX",
        "SLURM_ARRAY_TASK_STEP", "SLURM_ARRAY_TASK_COUNT")  # fmt: skip


class ArrayError(ValueError):
    """This task's place in its array cannot be determined (the message names why)."""


def parse_indices(spec: str) -> list[int]:
    """The sorted index set of an sbatch ``--array`` value: ``0-15%4``, ``1,3,5``,
    ``0-8:2``, ``10-13``, or a mix (``1,4-6``); the ``%T`` throttle is ignored."""
    body = spec.strip().split("%", 1)[0]
    out: set[int] = set()
    for part in body.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*(?::\s*(\d+)\s*)?)?", part)
        if not m:
            raise ArrayError(f"not an array index set: {spec!r} (e.g. 0-15, 1,3,5, 0-8:2)")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        step = int(m.group(3)) if m.group(3) is not None else 1
        if hi < lo or step < 1:
            raise ArrayError(f"not an array index set: {spec!r} (range {part.strip()!r})")
        out.update(range(lo, hi + 1, step))
    return sorted(out)


def array_position(
    env: Mapping[str, str], indices: Sequence[int] | None = None
) -> tuple[int, int] | None:
    """``(position, count)`` of this array task, or ``None`` outside an array.

    ``indices``: the array's index set when known (e.g. ``--array-indices``);
    otherwise it is derived from ``SLURM_ARRAY_TASK_MIN/MAX/STEP/COUNT``, which
    describe ranges only. Raises :class:`ArrayError` naming the variables.
    """
    raw = env.get("SLURM_ARRAY_TASK_ID")
    if raw is None:
        return None
    vals: dict[str, int] = {}
    for name in _ENV:
        if env.get(name) not in (None, ""):
            try:
                vals[name] = int(env[name])
            except ValueError:
                raise ArrayError(f"{name}={env[name]!r}: not an integer") from None
    tid = vals["SLURM_ARRAY_TASK_ID"]
    if indices is not None:
        if tid not in indices:
            raise ArrayError(
                f"SLURM_ARRAY_TASK_ID={tid} is not in --array-indices {','.join(map(str, indices))}"
            )
        return list(indices).index(tid), len(indices)
    lo = vals.get("SLURM_ARRAY_TASK_MIN", 0)
    step = vals.get("SLURM_ARRAY_TASK_STEP", 1)
    hi = vals.get("SLURM_ARRAY_TASK_MAX")
    count = vals.get("SLURM_ARRAY_TASK_COUNT")
    if hi is None and count is None:
        raise ArrayError(
            "SLURM_ARRAY_TASK_ID is set but neither SLURM_ARRAY_TASK_COUNT nor "
            "SLURM_ARRAY_TASK_MAX: pass --array-task-id and --array-task-count"
        )
    if step < 1:
        raise ArrayError(f"SLURM_ARRAY_TASK_STEP={step}: must be >= 1")
    n_range = (hi - lo) // step + 1 if hi is not None else count
    if count is None:
        count = n_range
    where = (f"SLURM_ARRAY_TASK_ID={tid} (MIN={lo}, MAX={hi}, STEP={step}, "
             f"COUNT={count})")  # fmt: skip
    if count != n_range or (tid - lo) % step or not lo <= tid <= lo + step * (count - 1):
        raise ArrayError(
            f"{where}: the array's indices are not a range a-b[:s], so this task cannot tell "
            f"its place; pass the index set with --array-indices (as the script from "
            f"--emit-sbatch does) or use --array-task-id/--array-task-count"
        )
    return (tid - lo) // step, count


def allocated_cpus(env: Mapping[str, str] | None = None) -> int:
    """The CPUs this process may use: ``SLURM_CPUS_PER_TASK`` inside a SLURM job, else
    the affinity mask (``os.sched_getaffinity``), never the node's count."""
    import os

    env = os.environ if env is None else env
    raw = env.get("SLURM_CPUS_PER_TASK", "")
    if raw.strip().isdigit() and int(raw) >= 1:
        return int(raw)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity call on this platform
        return 1


# --------------------------------------------------------------------------- sbatch scripts


@dataclass(frozen=True)
class SbatchOptions:
    """What the array job asks SLURM for; every field maps to one ``#SBATCH`` line."""

    tasks: int
    throttle: int | None = None  # at most this many tasks at once (%T)
    indices: tuple[int, ...] | None = None  # a custom index set (default 0..tasks-1)
    job_name: str = "shearbatch"
    time: str | None = None  # e.g. 01:00:00
    mem: str | None = None  # e.g. 8G
    cpus: int | None = None  # --cpus-per-task
    gpus: int | None = None  # --gres=gpu:N
    log_dir: str = "."
    extra: tuple[str, ...] = ()  # further #SBATCH options, e.g. "--partition=gpu"
    setup: tuple[str, ...] = ()  # shell lines run before bias-run (module load, venv)
    env: tuple[tuple[str, str], ...] = field(default=())  # exported variables

    def array_spec(self) -> str:
        idx = self.indices
        if idx is None:
            body = f"0-{self.tasks - 1}" if self.tasks > 1 else "0"
        elif list(idx) == list(range(idx[0], idx[-1] + 1)):
            body = f"{idx[0]}-{idx[-1]}" if len(idx) > 1 else str(idx[0])
        else:
            body = ",".join(map(str, idx))
        return body + (f"%{self.throttle}" if self.throttle else "")


def _header(opts: SbatchOptions, name: str, pattern: str, lines: Sequence[str]) -> list[str]:
    out = ["#!/bin/bash", f"#SBATCH --job-name={name}",
           f"#SBATCH --output={opts.log_dir.rstrip('/')}/{pattern}"]  # fmt: skip
    out += [f"#SBATCH {ln}" for ln in lines]
    for x in opts.extra:
        x = x.strip()
        out.append(x if x.startswith("#SBATCH") else f"#SBATCH {x}")
    return out


def _body(opts: SbatchOptions) -> list[str]:
    out = ["set -eo pipefail"]
    out += [f"export {k}={shlex.quote(v)}" for k, v in opts.env]
    out += list(opts.setup)
    return out


def sbatch_script(opts: SbatchOptions, run_args: Sequence[str], *, comment: str = "",
                  extract_root: str | None = None) -> str:  # fmt: skip
    """The array job: ``#SBATCH`` lines, setup lines, then ``bias-run <run_args>``.

    Each task finds its slice from its ``SLURM_ARRAY_TASK_ID`` in the script's index
    set, which is appended as ``--array-indices`` (whatever ``--array`` the script is
    re-submitted with, e.g. ``sbatch --array=3,7`` to re-run two tasks, each runs its
    own slice of the campaign's split).
    """
    res = [f"--array={opts.array_spec()}"]
    res += [f"--time={opts.time}"] if opts.time else []
    res += [f"--mem={opts.mem}"] if opts.mem else []
    res += [f"--cpus-per-task={opts.cpus}"] if opts.cpus else []
    res += [f"--gres=gpu:{opts.gpus}"] if opts.gpus else []
    lines = _header(opts, opts.job_name, "%x_%A_%a.out", res)
    if comment:
        lines += ["", *(f"# {c}" if c else "#" for c in comment.splitlines())]
    lines += ["", *_body(opts)]
    # the script's index set, always: SLURM describes only the array a task was submitted
    # with, so a task re-submitted alone (``sbatch --array=5 camp.sbatch``, the usual way to
    # re-run a cancelled or failed task) would otherwise see MIN=MAX=5, COUNT=1 and run the
    # whole plan as "task 0 of 1" instead of its own slice
    spec = opts.array_spec().split("%")[0]
    args = [*run_args, "--array-indices", spec]
    if extract_root is not None:  # stage 2 by the array: this task's partial, when it ends
        ext = ["bias-extract", "--input-dir", extract_root, "--array-indices", spec,
               "--no-progress"]  # fmt: skip
        plan = shlex.quote(f"{extract_root}/{MANIFEST}")
        cmd = " ".join(shlex.quote(a) for a in ext) + ' --workers "${SLURM_CPUS_PER_TASK:-1}"'
        why = "this task's bias-extract failed: the stats job extracts its realizations"
        trap = f'st=$?; if [ -f {plan} ]; then {cmd} || echo "{why}" >&2; fi; exit $st'
        lines += ["# when bias-run ends (whatever its exit status, which stays the task's, even "
                  "when this fails): this", "# task's share of stage 2, its realizations' rows "
                  "and draws as one partial (bias-extract then reads only",
                  "# what no partial holds); only once the campaign has a plan (a --dry-run, or "
                  "a run refused before", "# it wrote one, leaves nothing to extract)",
                  "trap " + shlex.quote(trap) + " EXIT"]  # fmt: skip
    lines.append("bias-run " + " ".join(shlex.quote(a) for a in args))
    return "\n".join(lines) + "\n"


#: bias-stats' exit status -> what the stats job says (3: INCONCLUSIVE, which includes an
#: unfinished campaign, is a verdict: the job ends with 0)
STATS_VERDICTS = {0: "PASS", 1: "FAIL", 3: "INCONCLUSIVE (or unfinished)"}


def stats_script(
    opts: SbatchOptions,
    output_dir: str,
    *,
    level: str | None = None,
    stats_args: Sequence[str] = (),
) -> str:
    """The job to submit with ``--dependency=afterany:<array job id>``: ``bias-extract``
    (``summary.csv`` in the campaign root, its reader processes sized from the
    allocation: ``SLURM_CPUS_PER_TASK``, else the CPUs this job may run on, ``nproc``)
    then ``bias-stats --input <root>`` with its ``--report`` (``stats/`` and
    ``report.html`` in the root). bias-stats picks the campaign's requirement from the
    frozen ``<root>/config.yaml``; ``level`` (``--sbatch-level``) passes ``--level``
    instead. INCONCLUSIVE (exit 3, also what an unfinished campaign gets) is a verdict,
    not a job failure: the job ends with 0 and its log says which verdict; FAIL (1) and
    errors end it with their status. ``afterany``: a task that ends with failed
    realizations (exit 1) or was stopped still leaves the others to analyse;
    ``bias-extract`` counts them."""
    q = shlex.quote
    root = output_dir.rstrip("/")
    res = [f"--time={opts.time}"] if opts.time else []
    res += [f"--mem={opts.mem}"] if opts.mem else []
    res += [f"--cpus-per-task={opts.cpus}"] if opts.cpus else []
    lines = _header(opts, f"{opts.job_name}-stats", "%x_%j.out", res)
    lines += ["", "# bias-stats' exit status: " + ", ".join(f"{k} {v}" for k, v in
                                                      STATS_VERDICTS.items()) + ", 2 bad input;",
              "# a verdict ends this job with 0 unless it is FAIL (1) or an error."]  # fmt: skip
    lines += ["", *_body(opts)]
    lines.append('workers="${SLURM_CPUS_PER_TASK:-$(nproc)}"  # the allocation, not the node')
    lines.append(f"bias-extract --input-dir {q(root)} --output {q(root + '/summary.csv')} "
                 '--workers "$workers" --no-progress')  # fmt: skip
    stats = ["bias-stats", "--input", root, "--output-dir", f"{root}/stats",
             "--posterior-dir", root, "--report", f"{root}/report.html"]  # fmt: skip
    if level is not None:
        stats += ["--level", level]
    stats += list(stats_args)
    verdicts = [f'  {k}) echo "bias-stats verdict: {v} (exit {k}); report: {root}/report.html" ;;'
                for k, v in STATS_VERDICTS.items()]  # fmt: skip
    lines += [
        " ".join(q(a) for a in stats) + " && status=0 || status=$?",
        'case "$status" in',
        *verdicts,
        '  *) echo "bias-stats failed (exit $status)" >&2 ;;',
        "esac",
        '[ "$status" -eq 3 ] && exit 0',
        'exit "$status"',
    ]
    return "\n".join(lines) + "\n"
