"""``bias-run``'s SLURM submission and run-control options (:func:`shearbatch.cli.run_options.
run_options` collects them)."""

from __future__ import annotations

import click

from .options import _help
from .params import _version_option


@click.option(
    "--emit-sbatch",
    default=None,
    metavar="FILE",
    help=_help(
        "Write a SLURM array script running this campaign (this same command, without "
        "--emit-sbatch) and FILE's -stats twin (bias-extract + bias-stats, to submit with "
        "--dependency=afterany on the array), then exit: nothing runs. Resources: the "
        "--sbatch-* options over the config's campaign.sbatch section.",
        default="none: run the campaign here",
    ),
)
@click.option(
    "--sbatch-tasks",
    type=int,
    default=None,
    help=_help("Array tasks.", config="campaign.sbatch.tasks").replace(
        "unset)]", "unset: one per batch of the plan, at most 1000)]"
    ),
)
@click.option(
    "--sbatch-array",
    default=None,
    metavar="INDICES",
    help=_help(
        "Array index set instead of 0-(tasks-1), e.g. 10-13 or 1,3,5.",
        config="campaign.sbatch.array",
    ),
)
@click.option(
    "--sbatch-throttle",
    type=int,
    default=None,
    help=_help(
        "At most this many tasks at once (the %T of --array).", config="campaign.sbatch.throttle"
    ),
)
@click.option(
    "--sbatch-time",
    default=None,
    help=_help("Time limit per task, e.g. 01:00:00.", config="campaign.sbatch.time"),
)
@click.option(
    "--sbatch-mem",
    default=None,
    help=_help("Memory per task, e.g. 8G.", config="campaign.sbatch.mem"),
)
@click.option(
    "--sbatch-cpus",
    type=int,
    default=None,
    help=_help("CPUs per task (--cpus-per-task).", config="campaign.sbatch.cpus"),
)
@click.option(
    "--sbatch-gpus",
    type=int,
    default=None,
    help=_help(
        "GPUs per task (--gres=gpu:N); one per task is the usual choice.",
        config="campaign.sbatch.gpus",
    ),
)
@click.option(
    "--sbatch-line",
    multiple=True,
    help=_help(
        "Extra #SBATCH option, repeatable, e.g. --sbatch-line=--partition=gpu.",
        config="campaign.sbatch.line",
    ),
)
@click.option(
    "--sbatch-setup",
    multiple=True,
    help=_help(
        "Shell line run before bias-run, repeatable (module load, venv activation).",
        default="campaign.sbatch.setup, else activate the virtual environment bias-run runs in",
    ),
)
@click.option(
    "--sbatch-stats/--no-sbatch-stats",
    default=None,
    help=_help(
        "Also write the dependent bias-extract + bias-stats job.", config="campaign.sbatch.stats"
    ),
)
@click.option(
    "--sbatch-level",
    default=None,
    help=_help("bias-stats --level of the dependent job.", config="campaign.sbatch.level"),
)
@click.option(
    "--overlap/--no-overlap",
    default=True,
    help=_help(
        "Write batch k in background threads while batch k+1 is computed, or (--no-overlap) "
        "each batch before the next starts.",
        default="--overlap",
    ),
)
@click.option(
    "--lane-chunk",
    default="auto",
    metavar="auto|off|N",
    help=_help(
        "Lanes evaluated together inside the compiled program: auto = the method's measured "
        "CPU chunk (MAP 4: narrow chunks keep their intermediates in cache and stop their "
        "optimiser loops on their own, 1.5-3x faster; VI the whole batch; "
        "bench/bench_chunking.py), the whole batch on GPUs; off = the whole batch. Speed "
        "only: results agree to rounding, with the same step counts.",
        default="auto",
    ),
)
@click.option(
    "--time-limit",
    default=None,
    help=_help(
        "Wall-clock budget of this run (SECONDS, 45m, 2h, HH:MM:SS or D-HH:MM:SS): no batch "
        "is started that would not end before it (exit 3; the same command resumes).",
        default="SLURM_JOB_END_TIME when set, else none",
    ),
)
@click.option("-v", "--verbose", is_flag=True, help=_help("Debug logging.", default="off"))
@_version_option()
def _submission() -> None:
    """Holder of the options above (sbatch scripts, overlap, lane chunks, time limit, verbosity; click keeps them in ``__click_params__``)."""
