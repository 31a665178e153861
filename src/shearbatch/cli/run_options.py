"""``bias-run``'s options: the click decorators, verbatim, collected by :func:`run_options`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from ..core.methods import names as method_names
from .options import BATCH_SIZE, _help, _version_option

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
    "--config",
    "--shine-config",
    "config_path",
    default=None,
    help="YAML config: image, psf, gal, inference, campaign (every key: docs/config.md). "
    "--shine-config is an alias: it reads SHINE-style configs (the same GalSim-like sections). "
    "[required, except with --show-config CONFIG]",
)
@click.option(
    "--show-config",
    is_flag=False,
    flag_value="",
    default=None,
    metavar="[CONFIG]",
    help="Print the resolved config as YAML (every default filled in, the flags given here "
    "applied) and exit; CONFIG defaults to --config. [default: off]",
)
@click.option(
    "--set",
    "set_values",
    multiple=True,
    metavar="KEY.PATH=VALUE",
    help=_help(
        "Set any config key, repeatable (GalSim's convention): --set image.noise.snr=15 "
        "--set gal.half_light_radius.mean=0.6. VALUE is YAML (a number, a word, null, "
        "[0.01, 0.02]); applied to the config before the flags and validated by the schema "
        "like the file; recorded in campaign.json (overrides) and the frozen config.yaml.",
        default="none",
    ),
)
@click.option(
    "--g1-true",
    type=float,
    default=None,
    help=_help(
        "Single realization: its true g1 (with --seed, --run-id).",
        default="none: a campaign from the shear grid",
    ),
)
@click.option(
    "--g2-true",
    type=float,
    default=None,
    help=_help(
        "True g2 of a single realization, or of every grid point without --shear-grid-g2.",
        config="campaign.g2",
    ),
)
@click.option(
    "--seed",
    type=int,
    default=None,
    help=_help("Single realization: its seed.", config="campaign.base_seed"),
)
@click.option(
    "--run-id",
    default=None,
    help=_help(
        "Single realization: its directory name under --output-dir.",
        default="g1_<g1>_g2_<g2>_s<seed>",
    ),
)
@click.option(
    "--shear-grid",
    type=float,
    multiple=True,
    help=_help(
        "Campaign: true g1 values, space- or comma-separated (-0.05 0.05 or "
        "-0.05,0.05); replaces the config's grid and turns SBC off.",
        config="campaign.shear_grid",
    ),
)
@click.option(
    "--shear-grid-g2",
    type=float,
    multiple=True,
    help=_help(
        "Campaign: true g2 values; the grid is every (g1, g2) pair of the two lists, so "
        "bias-stats measures m1, c1, m2 and c2. Without it g2 is constant "
        "(--g2-true) and m2 is undefined.",
        config="campaign.shear_grid_g2",
    ),
)
@click.option(
    "--n-realizations",
    type=int,
    default=None,
    help=_help(
        "Realizations (seeds base_seed, base_seed + 1, ...) per grid point.",
        config="campaign.n_realizations",
    ),
)
@click.option(
    "--base-seed",
    type=int,
    default=None,
    help=_help(
        "Seed of realization 0 (the same seeds at every grid point).", config="campaign.base_seed"
    ),
)
@click.option(
    "--paired/--no-paired",
    default=None,
    help=_help(
        "+g/-g twins sharing seed, galaxy and noise (the paired estimator cancels the noise).",
        config="campaign.paired",
    ),
)
@click.option(
    "--rotations",
    type=int,
    default=None,
    help=_help(
        "Ring design: 1, 2 or 4 copies per seed with every intrinsic shape rotated by "
        "k*180/rotations degrees (shape-noise cancellation; run ids end in _r<k>).",
        config="campaign.rotations",
    ),
)
@click.option(
    "--shear-from-prior",
    is_flag=True,
    default=None,
    help=_help(
        "SBC: draw each realization's true shear from the inference prior (no grid).",
        config="campaign.shear_from_prior",
    ),
)
@click.option(
    "--batch-size",
    type=BATCH_SIZE,
    default=None,
    metavar="N|auto",
    help=_help(
        "Realizations per compiled batch (lanes of one jit(vmap) program). auto: the most "
        "lanes that fit the memory budget by XLA's memory analysis of the compiled program "
        "(logged with why); a batch that does not fit runs in lane chunks that do.",
        config="campaign.batch_size",
    ),
)
@click.option(
    "--memory-budget",
    default=None,
    metavar="SIZE",
    help=_help(
        "Device memory one batch may use, e.g. 2GiB or 500MB (also $SHEARBATCH_MEMORY_BUDGET).",
        default="80% of the GPU's free memory; on a CPU of the available RAM",
    ),
)
@click.option(
    "--output-dir",
    default=None,
    help=_help(
        "Campaign root: one directory per realization is written under it.",
        config="campaign.output_dir",
    ),
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
def _options() -> None:
    """Holder of the options above (click keeps them in ``__click_params__``)."""


def run_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """``f`` with every ``bias-run`` option (as if decorated by each), in ``--help``'s order."""
    f.__click_params__ = [*getattr(f, "__click_params__", []), *_options.__click_params__]  # type: ignore[attr-defined]
    return f
