"""``bias-run``'s options on how it runs: method, array slice, dry run, output, precision,
cache (:func:`shearbatch.cli.run_options.run_options` collects them)."""

from __future__ import annotations

import click

from ..core.methods import names as method_names
from .options import _help

_X64_HELP = (
    "Precision of generation and inference: --x64 float64 (set once per run by shearbatch.runtime), --no-x64 float32 "
    "(faster, half the memory; measured safe for MAP from S/N 15 to 1.2e5, see docs/validation.md)."
)
_CACHE_HELP = (
    "Directory of JAX's persistent compilation cache, so later runs and SLURM array tasks "
    "skip compilation (array tasks that start together take turns to compile: one compiles, "
    "the others read); 'off' disables it."
)


@click.option(
    "--method",
    default=None,
    help=_help(
        f"Inference method, one of the registered methods ({', '.join(method_names())}; "
        "each one's settings: inference.<method>_config in docs/config.md).",
        config="inference.method",
    ),
)
@click.option(
    "--estimators",
    default=None,
    help=_help(
        "Host estimators beside the method on the same realizations, comma-separated "
        "(anacal: AnaCal's FPFS, pip install 'shearbatch[anacal]'); 'none' for none.",
        config="inference.estimators",
    ),
)
@click.option(
    "--array-task-id",
    type=int,
    default=None,
    help=_help(
        "This task's slice of the plan, 0-based (with --array-task-count).",
        default="the task's place in its SLURM array (from SLURM_ARRAY_TASK_ID, _MIN, _STEP: "
        "--array=10-13 and --array=0-4:2 work), else 0",
    ),
)
@click.option(
    "--array-task-count",
    type=int,
    default=None,
    help=_help(
        "Tasks in the array; each runs a contiguous slice of the plan, in batches of the "
        "campaign's lane count (never its slice size: one compiled program for all tasks).",
        default="$SLURM_ARRAY_TASK_COUNT, else 1",
    ),
)
@click.option(
    "--array-indices",
    default=None,
    metavar="LIST",
    help=_help(
        "The SLURM array's index set when it is not a range (--array=1,3,5: SLURM's variables "
        "cannot tell a task its place): the task with SLURM_ARRAY_TASK_ID i takes the slice "
        "at i's place in LIST. Scripts from --emit-sbatch pass it when needed.",
        default="none: ranges need nothing",
    ),
)
@click.option(
    "--dry-run",
    is_flag=True,
    help=_help(
        "Print the plan (batches, what this array task runs, what is already "
        "complete) and the disk it will take (measured from a realization already in "
        "--output-dir, else from the posterior's shapes), and exit; nothing is computed "
        "or written.",
        default="off",
    ),
)
@click.option(
    "--pilot",
    is_flag=True,
    help=_help(
        "A dry run that also compiles the campaign's program and times one batch of it: "
        "the wall-time estimate of this task (compile time reported apart). Writes no "
        "realization (the compilation cache is filled, so the run then starts warm).",
        default="off",
    ),
)
@click.option(
    "--preview",
    default=None,
    metavar="PNG",
    help=_help("Also write a PNG of the first stamps this task simulates.", default="none"),
)
@click.option(
    "--overwrite",
    is_flag=True,
    help=_help(
        "Redo complete realizations too.", default="off: they are skipped, so a re-run resumes"
    ),
)
@click.option(
    "--progress/--no-progress",
    default=None,
    help=_help("Progress bar.", default="on when stderr is a terminal"),
)
@click.option(
    "--x64/--no-x64",
    default=None,
    help=_help(_X64_HELP, config="inference.precision"),
)
@click.option(
    "--cache-dir",
    default=None,
    help=_help(_CACHE_HELP, default="$SHEARBATCH_CACHE_DIR, else <output-dir>/.jax-cache"),
)
def _execution() -> None:
    """Holder of the options above (the method, the slice of the plan and how the run proceeds; click keeps them in ``__click_params__``)."""
