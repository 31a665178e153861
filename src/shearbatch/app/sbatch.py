"""``bias-run --emit-sbatch``: the SLURM array script of a planned campaign (and its
dependent extract + stats job), built on :mod:`shearbatch.slurm`; nothing runs.

The config as run is frozen into ``<output-dir>/config.yaml`` now, and the array's
``bias-run`` reads that copy: editing or deleting the original after submission changes
nothing (and a task whose config differs from the campaign's is refused)."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..io import atomic
from .options import PlanError
from .plan import Plan
from .runner import prepare_plan

__all__ = ["NOT_IN_SCRIPT", "emit_sbatch", "run_args"]

#: bias-run options that never go into the script's bias-run line
NOT_IN_SCRIPT = {"emit_sbatch", "array_task_id", "array_task_count", "array_indices",
                 "dry_run", "preview", "progress", "output_dir", "config_path",
                 "show_config", "pilot"}  # fmt: skip


def run_args(config_path: str, output_dir: Path, given: Mapping[str, Sequence[str]]) -> list[str]:
    """This bias-run command line as given, with absolute paths, without --emit-sbatch,
    --sbatch-*, the array-task flags, --dry-run, --pilot and --preview. ``given``: option
    name -> its tokens on the command line (``{"batch_size": ["--batch-size", "8"]}``);
    ``config_path``: the config the tasks read (the campaign's frozen copy)."""
    args = ["--config", str(Path(config_path).resolve()),
            "--output-dir", str(output_dir.resolve()), "--no-progress"]  # fmt: skip
    for name, tokens in given.items():
        if name in NOT_IN_SCRIPT or name.startswith("sbatch_"):
            continue
        if name == "cache_dir" and len(tokens) == 2 and tokens[1] != "off":
            tokens = [tokens[0], str(Path(tokens[1]).resolve())]
        args += list(tokens)
    return args


def emit_sbatch(plan: Plan, given: Mapping[str, Sequence[str]]) -> list[str]:
    """Write the array script (and the dependent extract + stats job) for the campaign on
    the command line; nothing runs. Resources: ``campaign.sbatch`` with the ``--sbatch-*``
    flags merged in. Returns the lines to show the user."""
    from ..analysis.verdict import LEVELS
    from ..io.manifest import FROZEN_CONFIG, write_frozen_config
    from ..slurm import ArrayError, SbatchOptions, parse_indices, sbatch_script, stats_script

    kw = plan.options
    if kw.execution.dry_run or kw.execution.preview or kw.execution.pilot:
        raise PlanError("--emit-sbatch: does not combine with --dry-run, --pilot or --preview")
    if kw.execution.array_task_id is not None or kw.execution.array_indices is not None:
        raise PlanError("--emit-sbatch: the script's tasks find their slices; drop --array-task-*")
    conf = plan.cfg.campaign.sbatch
    if conf.level is not None and conf.level not in LEVELS:
        raise PlanError(f"--sbatch-level: unknown level {conf.level!r}; use one of "
                        f"{', '.join(LEVELS)}")  # fmt: skip
    n = len(plan.realizations)
    indices = None
    if conf.array is not None:
        try:
            indices = tuple(parse_indices(conf.array))
        except ArrayError as err:
            raise PlanError(f"--sbatch-array: {err}") from None
        if "%" in conf.array:
            raise PlanError("--sbatch-array: give the throttle with --sbatch-throttle, not %T")
        if conf.tasks is not None and conf.tasks != len(indices):
            raise PlanError(f"--sbatch-tasks: {conf.tasks} but --sbatch-array has "
                            f"{len(indices)} indices")  # fmt: skip
    # the campaign's batches, as the engine would run them: one task per batch (at most 1000)
    prepared = prepare_plan(plan, todo=plan.realizations, compile=False)
    lanes = prepared.batch_size
    tasks = len(indices) if indices else conf.tasks or min(len(prepared.batches), 1000)
    if tasks > n:
        raise PlanError(f"--sbatch-tasks: {tasks} tasks for {n} realizations (at most {n})")
    out = plan.output_dir.resolve()
    setup = tuple(conf.setup)
    if not setup and sys.prefix != sys.base_prefix:
        setup = (f"source {Path(sys.prefix) / 'bin' / 'activate'}",)
    log_dir = Path(conf.log_dir).resolve() if conf.log_dir else out / "logs"
    sb = SbatchOptions(
        tasks=tasks, throttle=conf.throttle, indices=indices,
        job_name=conf.job_name or "shearbatch", time=conf.time, mem=conf.mem,
        cpus=conf.cpus, gpus=conf.gpus, log_dir=str(log_dir), extra=tuple(conf.line),
        setup=setup,
    )  # fmt: skip
    sizes = [(i + 1) * n // tasks - i * n // tasks for i in range(tasks)]
    cache = kw.execution.cache_dir or f"{out}/.jax-cache\n(or $SHEARBATCH_CACHE_DIR)"
    each = f"{min(sizes)}" if min(sizes) == max(sizes) else f"{min(sizes)}-{max(sizes)}"
    note = (
        f"{n} realizations over {tasks} task(s), {each} each. Every task runs {lanes}-lane\n"
        f"batches (the campaign's lane count): one compiled program, shared through the\n"
        f"compilation cache {cache}. "
        f"Re-submitting this script re-runs only what is missing."
    )
    script = Path(str(kw.slurm.emit_sbatch))
    frozen = out / FROZEN_CONFIG
    note += (f"\nThe tasks read the config as run, frozen in {frozen} (not "
             f"{plan.config_name}).")  # fmt: skip
    files = {script: sbatch_script(sb, run_args(str(frozen), plan.output_dir, given),
                                   comment=note, extract_root=str(out))}  # fmt: skip
    if conf.stats:
        stats_path = script.with_name(f"{script.stem}-stats{script.suffix}")
        files[stats_path] = stats_script(sb, str(out), level=conf.level)
    for path in files:
        if path.is_dir():
            raise PlanError(f"--emit-sbatch: {path} is a directory")
    try:
        log_dir.mkdir(parents=True, exist_ok=True)
        write_frozen_config(out, plan.config_data)
    except OSError as err:
        raise PlanError(f"--output-dir: cannot write {out}: {err.strerror}") from None
    for path, text in files.items():
        atomic.write_text(path, text)
    lines = [f"wrote {frozen}: the config as run (the tasks read it)",
             f"wrote {script}: {tasks} array task(s) over {n} realizations, "
             f"{lanes}-lane batches; logs in {log_dir}"]  # fmt: skip
    if conf.stats:
        lines.append(f"wrote {stats_path}: bias-extract + bias-stats (verdict, {out}/report.html) "
                     "once the array has finished")  # fmt: skip
        lines.append(f"submit: jid=$(sbatch --parsable {script}) && "
                     f"sbatch --dependency=afterany:$jid {stats_path}")  # fmt: skip
    else:
        lines.append(f"submit: sbatch {script}")
    return lines
