"""Thin click layer: ``bias-run``, ``bias-extract``, ``bias-stats``.

Exit status: 0 success (``bias-stats``: verdict PASS); 1 some realizations of
a ``bias-run`` failed (the others are saved) or the ``bias-stats`` verdict is
FAIL; 2 bad input, reported as one line naming the offending flag or key,
before any computation starts; 3 the ``bias-stats`` verdict is INCONCLUSIVE
(the errors are too large, or too few independent seeds, to decide; the
console and ``bias_results.json`` give the realizations a decision needs).
``bias-run`` only: 3 stopped before the end of its slice because the next batch
would not finish before ``--time-limit`` / ``SLURM_JOB_END_TIME``; 4 an output
file could not be written (disk full, directory unwritable); 130 / 143 stopped by
SIGINT (Ctrl-C) / SIGTERM. In those four cases every realization is complete or
absent, and the same command resumes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from . import runtime
from .core.methods import INTERIM, supports_interim
from .core.methods import names as method_names

__all__ = ["bias_extract", "bias_run", "bias_stats"]

logger = logging.getLogger("shearbatch")


# --------------------------------------------------------------------------- click plumbing


def _is_number(tok: str) -> bool:
    try:
        float(tok)
    except ValueError:
        return False
    return True


class _Command(click.Command):
    """A click command with one-line errors (exit 2) and space-separated list options.

    ``variadic`` options (``--shear-grid 0.01 0.02 0.05``) take every following
    token that parses as a number (negative ones too) or a comma-separated list.
    """

    variadic: tuple[str, ...] = ()

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        out: list[str] = []
        i = 0
        while i < len(args):
            tok = args[i]
            name, eq, val = tok.partition("=")
            if name in self.variadic:
                vals = [val] if eq else []
                i += 1
                while not eq and i < len(args) and _is_number(args[i].split(",")[0] or "x"):
                    vals.append(args[i])
                    i += 1
                for v in vals or [""]:
                    for part in v.split(",") if v else [""]:
                        out += [name, part]
                continue
            out.append(tok)
            i += 1
        return super().parse_args(ctx, out)

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None, **extra: Any):
        standalone = extra.pop("standalone_mode", True)
        try:
            rv = super().main(args, prog_name, standalone_mode=False, **extra)
        except click.UsageError as err:
            click.echo(f"Error: {err.format_message()}", err=True)
            rv = 2
        except click.ClickException as err:
            click.echo(f"Error: {err.format_message()}", err=True)
            rv = err.exit_code
        except click.Abort:
            click.echo("Aborted.", err=True)
            rv = 1
        if not standalone:
            return rv
        sys.exit(rv or 0)


def _fail(msg: str) -> click.UsageError:
    return click.UsageError(msg)


def _check_out_path(flag: str, path: Path, *, is_dir: bool = True, write: bool = True) -> None:
    """One line (exit 2) when ``path`` cannot be created/written: a file where a directory
    must be (the path itself or an ancestor), or a first existing ancestor not writable."""
    if path.exists():
        if is_dir and not path.is_dir():
            raise _fail(f"{flag}: {path} exists and is not a directory")
        if not is_dir and path.is_dir():
            raise _fail(f"{flag}: {path} is a directory")
    anc = path if path.exists() and is_dir else path.parent
    while not anc.exists() and anc != anc.parent:
        anc = anc.parent
    if not anc.is_dir():
        raise _fail(f"{flag}: {anc} is not a directory")
    if write and not os.access(anc, os.W_OK | os.X_OK):
        raise _fail(f"{flag}: {anc} is not writable")


def _setup_logging(verbose: bool = False) -> None:
    level = logging.DEBUG if verbose else logging.INFO
    root = logging.getLogger("shearbatch")
    if not root.handlers:
        h = logging.StreamHandler(sys.stderr)
        h.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(h)
    root.setLevel(level)


def _given_args() -> list[str]:
    """This command's line as the user gave it (the options set on the command line, read
    from click's context, so it is also right when the command runs in-process)."""
    from click.core import ParameterSource

    ctx = click.get_current_context()
    args = [ctx.info_name or ctx.command.name or ""]
    for p in ctx.command.params:
        if not isinstance(p, click.Option) or p.name is None:
            continue
        if ctx.get_parameter_source(p.name) is not ParameterSource.COMMANDLINE:
            continue
        val = ctx.params.get(p.name)
        if p.is_flag:
            args.append(p.opts[0] if val or not p.secondary_opts else p.secondary_opts[0])
        elif p.multiple:
            args += [p.opts[0], *map(str, val)] if val else []
        elif val is not None:
            args += [p.opts[0], str(val)]
    return args


#: bias-run appends its command line here, under the output root (provenance of a report)
COMMANDS_FILE = "commands.txt"


# --------------------------------------------------------------------------- help texts


def _config_default(key: str) -> Any:
    """The schema's default of a dotted config key (``campaign.batch_size`` -> 16)."""
    from pydantic import BaseModel

    from .schema import Config

    model: Any = Config
    *parents, last = key.split(".")
    for part in parents:
        model = type(model.model_fields[part].default)
    value = model.model_fields[last].default
    return value.model_dump() if isinstance(value, BaseModel) else value


def _help(text: str, *, default: Any = None, config: str | None = None) -> str:
    """Option help ending in its default, one pattern for every option of every command.

    ``default="1000"`` -> ``[default: 1000]``; ``config="campaign.batch_size"`` ->
    ``[default: from the config: campaign.batch_size (16 if unset)]``, the schema's
    own default, so the help cannot drift from it. New options: pass one of the two.
    """
    if config is not None:
        dflt = _config_default(config)
        unset = "unset" if dflt is None else f"{dflt} if unset"
        if isinstance(dflt, list):
            unset = f"{', '.join(map(str, dflt))} if unset"
        return f"{text} [default: from the config: {config} ({unset})]"
    if default is not None:
        return f"{text} [default: {default}]"
    return text


def _example(*lines: str) -> str:
    """A command's epilog: a worked example, kept verbatim by click (``\\b``)."""
    return "\b\nExample:\n" + "\n".join(f"  {ln}" for ln in lines)


def _version_message() -> str:
    from importlib.metadata import PackageNotFoundError, version

    from . import __version__

    def v(pkg: str) -> str:
        try:
            return version(pkg)
        except PackageNotFoundError:
            return "not installed"

    deps = ", ".join(f"{p} {v(p)}" for p in ("jax", "numpyro", "arviz"))
    return f"%(prog)s (shearbatch {__version__}; {deps}; python {sys.version.split()[0]})"


def _version_option() -> Any:
    return click.version_option(
        None, "--version", message=_version_message(), help="Show the versions and exit."
    )


_X64_HELP = (
    "Precision of generation and inference: --x64 float64 (set once per run by shearbatch.runtime), --no-x64 float32 "
    "(faster, half the memory; measured safe for MAP from S/N 15 to 1.2e5, see README)."
)
_CACHE_HELP = (
    "Directory of JAX's persistent compilation cache, so later runs and SLURM array tasks "
    "skip compilation (array tasks that start together take turns to compile: one compiles, "
    "the others read); 'off' disables it."
)


# --------------------------------------------------------------------------- bias-run


class _RunCommand(_Command):
    variadic = ("--shear-grid", "--shear-grid-g2")


@click.command(
    cls=_RunCommand,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog=_example(
        "bias-run --config configs/level0.yaml --shear-grid -0.05 0.05 \\",
        "         --shear-grid-g2 -0.05 0.05 --n-realizations 20 --output-dir results/c",
        "bias-run --config configs/level0.yaml --show-config    # resolved config, defaults in",
    ),
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
    type=int,
    default=None,
    help=_help(
        "Realizations per compiled batch (lanes of one jit(vmap) program; memory grows with it).",
        config="campaign.batch_size",
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
        f"Inference method, one of the registered methods ({', '.join(method_names())}):"
        " map = MAP + Laplace draws, vi = variational, nuts = NUTS chains.",
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
        "complete) and exit; nothing is computed or written.",
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
def bias_run(**kw: Any) -> int:
    """Stage 1: simulate and infer a campaign; one directory per realization.

    Writes <output-dir>/<run id>/{posterior.nc, truth.json, convergence.json};
    complete realizations are skipped on a re-run. Exit status: 0 success, 1 some
    realizations failed (the others are written), 2 bad input, 3 stopped by
    --time-limit / SLURM_JOB_END_TIME, 4 an output could not be written (disk full),
    130 / 143 stopped by Ctrl-C / SIGTERM; after 3, 4, 130 and 143 every realization
    is complete or absent and the same command resumes.

    \b
    On a SLURM cluster (every array task takes its own slice of the same plan; all
    tasks share one compiled program through the cache under the output root):
      bias-run --config configs/level0.yaml --shear-grid -0.02 0.02 \\
          --n-realizations 500 --batch-size 64 --output-dir /scratch/$USER/camp \\
          --emit-sbatch camp.sbatch --sbatch-tasks 16 --sbatch-throttle 4 \\
          --sbatch-time 01:00:00 --sbatch-mem 8G
      jid=$(sbatch --parsable camp.sbatch)
      sbatch --dependency=afterany:$jid camp-stats.sbatch
    Re-submitting camp.sbatch re-runs only what is missing.
    """
    from .schema import ConfigError

    _setup_logging(kw["verbose"])
    if kw["show_config"] is not None:
        return _show_config(kw)
    if kw["config_path"] is None:
        raise _fail("Missing option '--config' / '--shine-config'.")
    deadline = _deadline(kw["time_limit"])
    try:
        job = _plan_run(kw)
        if kw["emit_sbatch"]:
            return _emit_sbatch(job, kw)
    except ConfigError as err:
        raise _fail(str(err)) from None
    _print_plan(job, kw)
    if kw["dry_run"] and not kw["preview"]:
        return 0
    if not kw["dry_run"]:
        _check_writable(job["output_dir"])
    cache_dir = kw["cache_dir"] or runtime.default_cache_dir(job["output_dir"])
    with runtime.scoped(), _StopOnSignal(lambda: _resume_hint(job)) as stop:
        cache = runtime.configure(job["spec"].precision == "float64", cache_dir)
        runtime.reset_cache_events()
        if kw["preview"]:
            _preview(job, Path(kw["preview"]))
        if kw["dry_run"]:
            return 0
        from .io import WriteError

        provenance = _write_manifest(job, kw["overwrite"])
        if job["task"][1] > 1 and job["todo"]:
            _compile_first(job, cache)

        _record_command(job)
        progress = kw["progress"] if kw["progress"] is not None else sys.stderr.isatty()
        try:
            report = run_claimed(job, kw, provenance, progress=progress, stop=stop.event,
                                 deadline=deadline)  # fmt: skip
        except WriteError as err:
            click.echo(f"Error: {err}; {_resume_hint(job)}", err=True)
            return 4
        if kw["preview"]:  # again, now with the model at each estimate and the residual
            _preview(job, Path(kw["preview"]), fitted=True)
    ev = runtime.CACHE_EVENTS
    logger.info("persistent compilation cache: %d hit(s), %d miss(es)", ev["hits"], ev["misses"])
    click.echo(
        f"wrote {report.n_ok} ok, {report.n_failed} failed realization(s) under {job['output_dir']}"
        f" in {report.wall_s:.1f} s"
        + (f"; skipped {job['skipped']} claimed by another bias-run" if job.get("skipped") else "")
    )
    if report.stopped == "signal":
        logger.warning("%s: %s", stop.name, _resume_hint(job))
        return 128 + stop.signum
    if report.stopped:
        logger.warning("time limit: %s", _resume_hint(job))
        return 3
    return 1 if report.n_failed else 0


def _record_command(job: dict[str, Any]) -> None:
    """Append this bias-run command line (time, array task, config hash) to the output
    root's commands.txt, which bias-stats --report quotes as provenance."""
    import shlex
    from datetime import UTC, datetime

    out = job["output_dir"]
    out.mkdir(parents=True, exist_ok=True)
    tid, tcount = job["task"]
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    line = (f"{stamp} task {tid}/{tcount} config_hash {job['spec'].config_hash}: "
            f"{shlex.join(_given_args())}\n")  # fmt: skip
    with open(out / COMMANDS_FILE, "a") as fh:  # one short append per process
        fh.write(line)


def _show_config(kw: dict[str, Any]) -> int:
    """``--show-config``: the resolved config (defaults filled in, flags applied) as YAML."""
    import yaml

    from .schema import ConfigError, config_hash, load_config

    path = kw["show_config"] or kw["config_path"]
    if not path:
        raise _fail("--show-config: give a config (--show-config CONFIG or --config CONFIG)")
    try:
        cfg = apply_flags(load_config(path), kw)
    except ConfigError as err:
        raise _fail(str(err)) from None
    text = yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)
    click.echo(f"# {path}: resolved (defaults filled in, flags applied); config hash "
               f"{config_hash(cfg)}; every key: docs/config.md")  # fmt: skip
    click.echo(text, nl=False)
    return 0


def _compile_first(job: dict[str, Any], cache: str) -> None:
    """Compile (or load) this campaign's generator and inference program while holding the
    cache's lock, so that array tasks starting together compile once between them: the
    first one compiles, writes the cache and leaves a marker (``.compiled-<key>``, the key
    hashing the config, method, lanes, precision, JAX version and devices); the others
    wait, see the marker and go on to read the cache (no second trace of the program)."""
    import hashlib
    import json

    import jax

    from .core.batching import pad_to, realization_keys
    from .engine import generate, inference_program, lane_chunk_for

    spec, lanes = job["spec"], job["batch_size"]
    devs = jax.devices()
    if len(jax.local_devices()) > 1:
        # the engine splits lanes over the devices with a program of its own making; a
        # warm-up of the one-device program here would compile something never used
        logger.info("%d local devices: no shared compile step, each task compiles or "
                    "reads the cache itself", len(jax.local_devices()))  # fmt: skip
        return
    what = [spec.config_hash, spec.method, spec.precision, lanes, job["lane_chunk"],
            jax.__version__, devs[0].platform, devs[0].device_kind, len(devs)]  # fmt: skip
    key = hashlib.sha256(json.dumps(what, default=str).encode()).hexdigest()[:16]
    with runtime.compile_lock(cache) as waited:
        marker = Path(cache) / f".compiled-{key}"
        if marker.exists():
            logger.info("compile lock (waited %.1f s): the cache already holds the campaign's "
                        "%d-lane programs", waited, lanes)  # fmt: skip
            return
        before = dict(runtime.CACHE_EVENTS)
        padded = pad_to(job["todo"][:lanes], lanes)
        sim = generate(spec, padded)
        keys = realization_keys([r.seed for r in padded], spec.rng_seed)
        _, program = inference_program(spec, chunk=lane_chunk_for(job["lane_chunk"], spec))
        jax.block_until_ready(sim.images)
        program.lower(keys, sim.images).compile()
        marker.touch()
        ev = runtime.CACHE_EVENTS
        logger.info("compile lock (waited %.1f s): %d cache hit(s), %d miss(es) for the "
                    "campaign's %d-lane programs", waited, ev["hits"] - before["hits"],
                    ev["misses"] - before["misses"], lanes)  # fmt: skip


#: bias-run options that never go into the script's bias-run line
_NOT_IN_SCRIPT = {"emit_sbatch", "array_task_id", "array_task_count", "array_indices",
                  "dry_run", "preview", "progress", "output_dir", "config_path",
                  "show_config"}  # fmt: skip


def _run_args(kw: dict[str, Any], output_dir: Path) -> list[str]:
    """This bias-run command line as given, with absolute paths, without --emit-sbatch,
    --sbatch-*, the array-task flags, --dry-run and --preview."""
    from click.core import ParameterSource

    ctx = click.get_current_context()
    args = ["--config", str(Path(kw["config_path"]).resolve()),
            "--output-dir", str(output_dir.resolve()), "--no-progress"]  # fmt: skip
    for p in ctx.command.params:
        name = p.name or ""
        if name in _NOT_IN_SCRIPT or name.startswith("sbatch_") or name not in kw:
            continue
        if ctx.get_parameter_source(name) not in (
            ParameterSource.COMMANDLINE,
            ParameterSource.ENVIRONMENT,
        ):
            continue
        val, opt = kw[name], p.opts[0]
        if isinstance(p, click.Option) and p.is_flag:
            if val:
                args.append(opt)
            elif p.secondary_opts:
                args.append(p.secondary_opts[0])
        elif isinstance(p, click.Option) and p.multiple:
            args += [opt, *map(str, val)] if val else []
        elif val is not None:
            args += [opt, str(Path(val).resolve()) if name == "cache_dir" and val != "off"
                     else str(val)]  # fmt: skip
    return args


def _emit_sbatch(job: dict[str, Any], kw: dict[str, Any]) -> int:
    """Write the array script (and the dependent extract + stats job) for the campaign on
    the command line; nothing runs. Options: ``--sbatch-*`` over ``campaign.sbatch``."""
    import math

    from .analysis.acceptance import LEVELS
    from .slurm import ArrayError, SbatchOptions, parse_indices, sbatch_script, stats_script

    if kw["dry_run"] or kw["preview"]:
        raise _fail("--emit-sbatch: does not combine with --dry-run or --preview")
    if kw["array_task_id"] is not None or kw["array_indices"] is not None:
        raise _fail("--emit-sbatch: the script's tasks find their slices; drop --array-task-*")
    conf = job["cfg"].campaign.sbatch
    opt = {k: kw[f"sbatch_{k}"] if kw.get(f"sbatch_{k}") not in (None, ()) else getattr(conf, k)
           for k in ("tasks", "array", "throttle", "time", "mem", "cpus", "gpus", "line",
                     "setup", "stats", "level")}  # fmt: skip
    for k in ("tasks", "throttle", "cpus", "gpus"):
        if opt[k] is not None and opt[k] < 1:
            raise _fail(f"--sbatch-{k}: must be >= 1, got {opt[k]}")
    if opt["level"] not in LEVELS:
        raise _fail(f"--sbatch-level: unknown level {opt['level']!r}; use one of "
                    f"{', '.join(LEVELS)}")  # fmt: skip
    n, lanes = len(job["plan"]), job["batch_size"]
    indices = None
    if opt["array"] is not None:
        try:
            indices = tuple(parse_indices(opt["array"]))
        except ArrayError as err:
            raise _fail(f"--sbatch-array: {err}") from None
        if "%" in opt["array"]:
            raise _fail("--sbatch-array: give the throttle with --sbatch-throttle, not %T")
        if opt["tasks"] is not None and opt["tasks"] != len(indices):
            raise _fail(f"--sbatch-tasks: {opt['tasks']} but --sbatch-array has "
                        f"{len(indices)} indices")  # fmt: skip
    tasks = len(indices) if indices else opt["tasks"] or min(math.ceil(n / lanes), 1000)
    if tasks > n:
        raise _fail(f"--sbatch-tasks: {tasks} tasks for {n} realizations (at most {n})")
    out = job["output_dir"].resolve()
    setup = tuple(opt["setup"])
    if not setup and sys.prefix != sys.base_prefix:
        setup = (f"source {Path(sys.prefix) / 'bin' / 'activate'}",)
    log_dir = Path(conf.log_dir).resolve() if conf.log_dir else out / "logs"
    sb = SbatchOptions(
        tasks=tasks, throttle=opt["throttle"], indices=indices,
        job_name=conf.job_name or "shearbatch", time=opt["time"], mem=opt["mem"],
        cpus=opt["cpus"], gpus=opt["gpus"], log_dir=str(log_dir), extra=tuple(opt["line"]),
        setup=setup,
    )  # fmt: skip
    sizes = [(i + 1) * n // tasks - i * n // tasks for i in range(tasks)]
    cache = kw["cache_dir"] or f"{out}/.jax-cache\n(or $SHEARBATCH_CACHE_DIR)"
    each = f"{min(sizes)}" if min(sizes) == max(sizes) else f"{min(sizes)}-{max(sizes)}"
    note = (
        f"{n} realizations over {tasks} task(s), {each} each. Every task runs {lanes}-lane\n"
        f"batches (the campaign's lane count): one compiled program, shared through the\n"
        f"compilation cache {cache}. "
        f"Re-submitting this script re-runs only what is missing."
    )
    script = Path(kw["emit_sbatch"])
    files = {script: sbatch_script(sb, _run_args(kw, job["output_dir"]), comment=note)}
    if opt["stats"]:
        stats_path = script.with_name(f"{script.stem}-stats{script.suffix}")
        files[stats_path] = stats_script(sb, str(out), level=opt["level"])
    for path in files:
        if path.is_dir():
            raise _fail(f"--emit-sbatch: {path} is a directory")
    log_dir.mkdir(parents=True, exist_ok=True)
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    click.echo(f"wrote {script}: {tasks} array task(s) over {n} realizations, "
               f"{lanes}-lane batches; logs in {log_dir}")  # fmt: skip
    if opt["stats"]:
        click.echo(f"wrote {stats_path}: bias-extract + bias-stats once the array has finished")
        click.echo(f"submit: jid=$(sbatch --parsable {script}) && "
                   f"sbatch --dependency=afterany:$jid {stats_path}")  # fmt: skip
    else:
        click.echo(f"submit: sbatch {script}")
    return 0


# ------------------------------------------------------------- bias-run: stopping cleanly


def _n_complete(job: dict[str, Any]) -> int:
    from .io import realization_status

    return sum(realization_status(job["output_dir"], r.run_id) in ("done", "failed")
               for r in job["mine"])  # fmt: skip


def _resume_hint(job: dict[str, Any]) -> str:
    return (f"{_n_complete(job)} of {len(job['mine'])} realization(s) of this task complete; "
            "re-run the same command to resume")  # fmt: skip


def _check_writable(output_dir: Path) -> None:
    """Create the output root and a probe file in it, before anything is computed."""
    import os
    import socket

    probe = output_dir / f".write-probe.{socket.gethostname()}.{os.getpid()}.tmp"
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise _fail(f"--output-dir: cannot write to {output_dir}: {err.strerror}") from None


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _deadline(limit: str | None) -> float | None:
    """``time.time()`` by which this run must end: ``--time-limit`` from now, else
    ``SLURM_JOB_END_TIME`` (epoch seconds), whichever is earlier; 5 s are kept for the
    writes in flight."""
    import os
    import re
    import time

    ends = []
    if limit is not None:
        text = limit.strip().lower()
        m = re.fullmatch(r"(?:(\d+)-)?(\d+):(\d+)(?::(\d+))?", text)
        if m:
            d, a, b, c = (int(x) if x else 0 for x in m.groups())
            secs = d * 86400 + (a * 3600 + b * 60 + c if m[4] else a * 60 + b)
        elif re.fullmatch(r"\d+(\.\d*)?[smhd]?", text):
            unit = text[-1] if text[-1] in _UNITS else "s"
            secs = float(text.rstrip("smhd")) * _UNITS[unit]
        else:
            raise _fail(f"--time-limit: not a duration: {limit!r} (e.g. 3600, 45m, 2h, 01:30:00)")
        if secs <= 0:
            raise _fail(f"--time-limit: must be > 0, got {limit!r}")
        ends.append(time.time() + secs)
    if env := os.environ.get("SLURM_JOB_END_TIME"):
        try:
            ends.append(float(env))
        except ValueError:
            raise _fail(f"SLURM_JOB_END_TIME: not a time in seconds: {env!r}") from None
    return min(ends) - 5.0 if ends else None


class _StopOnSignal:
    """SIGTERM / SIGINT during ``bias-run``: stop taking batches, let the writes in flight
    finish, exit ``128 + signal``.

    Python runs a signal handler only between bytecodes of the main thread, which may
    sit in a compiled JAX program for minutes; so the handler only sets ``event`` (the
    engine checks it before each batch), and a watchdog thread woken through
    ``signal.set_wakeup_fd`` (written by the C-level handler at once) ends the process
    itself with ``os._exit`` if the main thread has not returned within ``grace``
    seconds, or at a second signal. Every file is written to a temporary name and
    renamed, so an exit mid-write leaves the realization incomplete (redone on resume)
    and an orphaned temporary file that the resume removes. No exception is raised in
    the main thread: a ``KeyboardInterrupt`` inside netCDF/HDF5 (the xarray writer held
    a lock that its clean-up then waited for) is what hung Ctrl-C before.
    """

    def __init__(self, hint, grace: float = 5.0):
        import threading

        self.event, self.signum, self.name = threading.Event(), 0, ""
        self._hint, self._grace, self._returned = hint, grace, threading.Event()
        self._saved: dict[int, Any] = {}

    def __enter__(self) -> _StopOnSignal:
        import signal
        import socket
        import threading

        if threading.current_thread() is not threading.main_thread():
            return self
        self._r, self._w = socket.socketpair()
        self._w.setblocking(False)
        self._old_fd = signal.set_wakeup_fd(self._w.fileno(), warn_on_full_buffer=False)
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._saved[sig] = signal.signal(sig, self._note)
        threading.Thread(target=self._watch, name="shearbatch-signals", daemon=True).start()
        return self

    def _note(self, signum: int, frame: Any) -> None:
        pass  # the watchdog acts on the byte the C-level handler wrote for this signal

    def _watch(self) -> None:
        import os
        import signal
        import time

        self._r.settimeout(0.2)
        until, why = None, ""
        while not self._returned.is_set():
            try:
                data = self._r.recv(1)
            except TimeoutError:
                if until is not None and time.monotonic() > until:
                    why = f"{self.name}: the batch in flight did not end within {self._grace:.0f} s"
                    break
                continue
            except OSError:
                return
            if not data:
                return
            if data[0] not in (signal.SIGINT, signal.SIGTERM):
                continue
            if until is not None:
                why = f"second signal ({signal.Signals(data[0]).name})"
                break
            self.signum, self.name = data[0], signal.Signals(data[0]).name
            self.event.set()
            until = time.monotonic() + self._grace
            logger.warning("%s: no new batch; waiting up to %.0f s for the batch and the writes "
                           "in flight", self.name, self._grace)  # fmt: skip
        else:
            return
        logger.warning("%s; abandoning it. %s", why, self._hint())
        for h in logging.getLogger("shearbatch").handlers:
            h.flush()
        sys.stderr.flush()
        os._exit(128 + self.signum)

    def __exit__(self, *exc: Any) -> None:
        import signal

        self._returned.set()
        if not self._saved:
            return
        signal.set_wakeup_fd(self._old_fd)
        for sig, handler in self._saved.items():
            signal.signal(sig, handler)
        self._w.close()
        self._r.close()


def _write_manifest(job: dict[str, Any], overwrite: bool) -> dict[str, Any]:
    """Write (or check) the output root's campaign.json; the per-realization provenance."""
    from .io import manifest as mf

    root, cfg = job["output_dir"], job["cfg"].model_dump(mode="json")
    env = mf.environment()
    try:
        man, wrote = mf.write_manifest(root, config=cfg, expect=job["expect"],
                                       plan=job["plan_info"],
                                       run_ids=[r.run_id for r in job["plan"]],
                                       batch_size=job["batch_size"], env=env,
                                       replace=overwrite)  # fmt: skip
    except ValueError as err:
        raise _fail(str(err)) from None
    except OSError as err:
        raise _fail(f"--output-dir: cannot write {root}: {err.strerror}") from None
    if not wrote and (diff := mf.plan_differences(man, job["plan_info"])):
        logger.warning("plan settings %s differ from %s: bias-extract counts this campaign "
                       "against that file's plan", ", ".join(diff), root / mf.MANIFEST)  # fmt: skip
    return mf.realization_provenance(config=cfg, campaign=job["plan_info"], env=env)


def run_claimed(job: dict[str, Any], kw: dict[str, Any], provenance: dict[str, Any],
                **engine_kw: Any):  # fmt: skip
    """Claim this task's realizations and run them (``bias-run`` and ``shearbatch.run``);
    ``engine_kw``: :func:`shearbatch.engine.run_campaign`'s progress / stop / deadline."""
    from .engine import run_campaign

    with _claimed(job, kw["overwrite"]) as todo:
        return run_campaign(job["spec"], todo, output_dir=job["output_dir"],
                            batch_size=job["batch_size"], overlap=kw["overlap"],
                            lane_chunk=job["lane_chunk"], provenance=provenance,
                            **engine_kw)  # fmt: skip


@contextlib.contextmanager
def _claimed(job: dict[str, Any], overwrite: bool):
    """This task's realizations to compute, claimed (see :mod:`shearbatch.io.claims`): those
    another process holds are skipped with a warning naming the overlap, and those completed
    by another process since the plan are not redone."""
    from .io import claims, realization_status

    root, stack = job["output_dir"], contextlib.ExitStack()
    try:
        cl = stack.enter_context(claims.claim(root, [r.run_id for r in job["todo"]]))
    except OSError as err:
        raise _fail(f"--output-dir: cannot write {root}: {err.strerror}") from None
    with stack:
        if cl.others:
            pids = sorted({p for p in cl.others.values() if p})
            ids = sorted(cl.others)
            logger.warning("overlapping slices: %d realization(s) of this task are being "
                           "computed by another bias-run%s into %s (%s%s); skipped here",
                           len(ids), f" (pid {', '.join(map(str, pids))})" if pids else "", root,
                           ", ".join(ids[:3]), ", ..." if len(ids) > 3 else "")  # fmt: skip
        job["skipped"], mine = len(cl.others), set(cl.mine)
        todo = [r for r in job["todo"] if r.run_id in mine]
        if not overwrite:
            now = [r for r in todo if realization_status(root, r.run_id, job["expect"]) != "done"]
            if len(now) < len(todo):
                logger.info("%d realization(s) were completed by another process since the "
                            "plan; not redone", len(todo) - len(now))  # fmt: skip
            todo = now
        yield todo


def _preview(job: dict[str, Any], path: Path, n: int = 4, fitted: bool = False) -> None:
    """PNG of the first ``n`` realizations of this task's plan: the simulated data, and
    (``fitted``, after the run) the model at each one's estimate and the residual."""
    from .analysis.plots import stamps_figure
    from .engine import generate

    reals = job["mine"][:n]
    if fitted:
        reals = [r for r in reals if (job["output_dir"] / r.run_id / "posterior.nc").is_file()]
    if not reals:
        return
    sim = generate(job["spec"], reals)
    models = _models_at_estimate(job, reals) if fitted else None
    path.parent.mkdir(parents=True, exist_ok=True)
    fig = stamps_figure(sim.images, [r.run_id for r in reals], sim.noise_sigma, models)
    fig.savefig(path, dpi=100)
    what = "data, model at the estimate, residual" if fitted else "data"
    click.echo(f"preview of {len(reals)} realization(s) ({what}): {path}")


def _models_at_estimate(job: dict[str, Any], reals: Sequence[Any]) -> Any:
    """Noise-free model stamps (B, M, H, W) at each realization's estimate (the MAP /
    Laplace centre where recorded, else the posterior median), from its written files."""
    import json

    import jax.numpy as jnp
    import numpy as np
    import xarray as xr

    from .core.generate import FIELDS, render_stamps

    problem = job["spec"].model
    fixed = problem.fields._asdict()
    m = problem.image.n_objects
    out = []
    for r in reals:
        d = job["output_dir"] / r.run_id
        conv = json.loads((d / "convergence.json").read_text())
        mode = conv.get("map_estimate") or {}
        with xr.open_dataset(d / "posterior.nc", group="posterior", engine="netcdf4") as ds:
            draws = {k: np.asarray(v.values, float) for k, v in ds.data_vars.items()}

        def est(site: str, default: float, mode=mode, draws=draws) -> Any:
            if site in mode:
                return np.asarray(mode[site], float)
            if site in draws:
                return np.median(draws[site].reshape(-1, *draws[site].shape[2:]), axis=0)
            return np.asarray(default, float)

        params = {f: jnp.broadcast_to(jnp.asarray(est(f, fixed[f].args[0] if fixed[f].args
                                                           else 0.0)), (m,))
                  for f in FIELDS}  # fmt: skip
        g = jnp.asarray([est("g1", r.g1), est("g2", r.g2)])
        out.append(np.asarray(render_stamps(problem, params, g)))
    return np.stack(out)


#: the most realizations one campaign (one output root, one campaign.json) may plan
MAX_PLAN = 1_000_000

#: bias-run flag -> campaign key it overrides (the one place flags meet the config)
_CAMPAIGN_FLAGS = {
    "n_realizations": "n_realizations",
    "base_seed": "base_seed",
    "batch_size": "batch_size",
    "output_dir": "output_dir",
    "paired": "paired",
    "rotations": "rotations",
    "g2_true": "g2",
}


def apply_flags(cfg: Any, kw: dict[str, Any]) -> Any:
    """The config with every given ``bias-run`` flag applied over it.

    A flag that is given (not ``None``) wins over the config's ``campaign`` /
    ``inference.method``; a flag that is absent leaves the config's value.
    ``--shear-grid`` / ``--shear-grid-g2`` replace the grid's g1 / g2 values (and
    turn SBC off); ``--g2-true`` without ``--shear-grid-g2`` makes g2 constant;
    ``--shear-from-prior`` turns SBC on.
    """
    camp = {k: kw[f] for f, k in _CAMPAIGN_FLAGS.items() if kw.get(f) is not None}
    if kw.get("shear_grid"):
        camp.update(shear_grid=list(kw["shear_grid"]), shear_from_prior=False)
    if kw.get("shear_grid_g2"):
        camp.update(shear_grid_g2=list(kw["shear_grid_g2"]), shear_from_prior=False)
    elif kw.get("g2_true") is not None:
        camp["shear_grid_g2"] = None  # a constant g2 given here beats the config's g2 grid
    if kw.get("shear_from_prior"):
        camp["shear_from_prior"] = True
    inf: dict[str, Any] = {}
    if kw.get("method") is not None:
        inf["method"] = kw["method"].lower()
    if kw.get("x64") is not None:
        inf["precision"] = "float64" if kw["x64"] else "float32"
    update = {"campaign": cfg.campaign.model_copy(update=camp)}
    if "method" in inf and cfg.inference.shear_model == "interim" and not supports_interim(
            inf["method"]):  # fmt: skip
        raise _fail(f"--method: inference.shear_model interim needs method "
                    f"{' or '.join(INTERIM)}, got {inf['method']}")  # fmt: skip
    return cfg.model_copy(update={**update, "inference": cfg.inference.model_copy(update=inf)})


def _plan_run(kw: dict[str, Any]) -> dict[str, Any]:
    """Validate everything and build this task's plan; raises UsageError / ConfigError."""
    from . import campaign as cp
    from .io import realization_status
    from .schema import load_config
    from .spec import run_spec

    for flag in ("batch_size", "n_realizations"):
        if kw[flag] is not None and kw[flag] < 1:
            raise _fail(f"--{flag.replace('_', '-')}: must be >= 1, got {kw[flag]}")
    lane_chunk = str(kw.get("lane_chunk", "auto")).strip().lower()
    if lane_chunk not in ("auto", "off") and not (lane_chunk.isdigit() and int(lane_chunk) >= 1):
        raise _fail(f"--lane-chunk: auto, off or a number of lanes >= 1, got {kw['lane_chunk']!r}")
    for flag in ("base_seed", "seed"):
        if kw[flag] is not None and kw[flag] < 0:
            raise _fail(f"--{flag.replace('_', '-')}: must be >= 0, got {kw[flag]}")
    if kw.get("rotations") is not None and kw["rotations"] not in (1, 2, 4):
        raise _fail(f"--rotations: must be 1, 2 or 4, got {kw['rotations']}")
    if kw["shear_grid"] and kw["g1_true"] is not None:
        raise _fail("--g1-true and --shear-grid are exclusive (single realization vs campaign)")
    for flag in ("shear_grid", "shear_grid_g2"):
        for g in kw[flag]:
            if not abs(g) < 1:
                raise _fail(f"--{flag.replace('_', '-')}: |g| must be < 1, got {g}")
    if kw["shear_grid_g2"] and kw["g2_true"] is not None:
        raise _fail("--g2-true and --shear-grid-g2 are exclusive (constant g2 vs a g2 grid)")
    if kw["shear_grid_g2"] and kw["g1_true"] is not None:
        raise _fail("--g1-true and --shear-grid-g2 are exclusive (single realization vs campaign)")
    for flag in ("g1_true", "g2_true"):
        if kw[flag] is not None and not abs(kw[flag]) < 1:
            raise _fail(f"--{flag.replace('_', '-')}: |g| must be < 1, got {kw[flag]}")
    method = kw["method"]
    if method is not None and method.lower() not in method_names():
        raise _fail(f"--method: unknown method {method!r}; use one of {', '.join(method_names())}")
    task_id, task_count = kw["array_task_id"], kw["array_task_count"]
    if (task_id is None) != (task_count is None):
        raise _fail("--array-task-id and --array-task-count go together")
    from .slurm import ArrayError, parse_indices

    indices = None
    if kw["array_indices"] is not None:
        if task_id is not None:
            raise _fail("--array-indices and --array-task-id are exclusive")
        try:
            indices = parse_indices(kw["array_indices"])
        except ArrayError as err:
            raise _fail(f"--array-indices: {err}") from None
        if "SLURM_ARRAY_TASK_ID" not in os.environ:
            raise _fail("--array-indices: SLURM_ARRAY_TASK_ID is not set (not an array task)")
    if task_id is None:
        try:
            task_id, task_count = cp.array_task_from_env(indices)
        except ArrayError as err:
            raise _fail(str(err)) from None
    if task_count < 1:
        raise _fail(f"--array-task-count: must be >= 1, got {task_count}")
    if not 0 <= task_id < task_count:
        raise _fail(f"--array-task-id: {task_id} outside [0, {task_count})")

    cfg = apply_flags(load_config(kw["config_path"]), kw)
    camp = cfg.campaign
    output_dir = Path(camp.output_dir)
    _check_out_path("--output-dir", output_dir, write=False)  # writes: _check_writable
    n_plan = (1 if camp.shear_from_prior else len(camp.shear_grid or [])) * camp.n_realizations
    n_plan *= len(camp.shear_grid_g2 or [0])
    if camp.paired:
        n_plan *= 2
    if kw["g1_true"] is None and n_plan > MAX_PLAN:
        raise _fail(f"--n-realizations: the plan would hold {n_plan:,} realizations, more than "
                    f"the {MAX_PLAN:,} one output root may hold; split the campaign over "
                    "several --output-dir / --base-seed ranges")  # fmt: skip
    spec = run_spec(cfg)
    from .io import manifest as mf

    expect = mf.defining(spec.config_hash, spec.method, spec.precision)
    if not kw["overwrite"]:  # another campaign in the output root: refuse before anything
        try:
            mf.check_manifest(output_dir, expect)
        except ValueError as err:
            raise _fail(str(err)) from None
    if kw["g1_true"] is not None:
        seed = kw["seed"] if kw["seed"] is not None else camp.base_seed
        try:
            plan = cp.plan_single(kw["g1_true"], camp.g2, seed, kw["run_id"])
        except ValueError as err:
            raise _fail(f"--g1-true/--g2-true: {err}") from None
        if plan[0].run_id in ("", ".", "..") or "/" in plan[0].run_id:
            raise _fail(f"--run-id: not a valid directory name: {plan[0].run_id!r}")
    elif camp.shear_from_prior:
        from .core.priors import draw_shear_from_prior

        if kw["shear_grid"] or kw["shear_grid_g2"]:
            raise _fail("--shear-from-prior and --shear-grid(-g2) are exclusive")
        if camp.rotations > 1:
            raise _fail("--rotations: a ring design needs a shear grid, not --shear-from-prior")
        plan = cp.plan_from_prior(
            lambda seed: draw_shear_from_prior(spec.model.shear, seed),
            n_realizations=camp.n_realizations,
            base_seed=camp.base_seed,
        )
    else:
        if kw["run_id"] is not None or kw["seed"] is not None:
            raise _fail("--run-id/--seed are for a single realization (with --g1-true)")
        if not camp.shear_grid:
            raise _fail(
                "no shear given: use --g1-true (single) or --shear-grid "
                "(or campaign.shear_grid in the config)"
            )
        try:
            plan = cp.plan_campaign(
                camp.shear_grid,
                g2=camp.g2,
                n_realizations=camp.n_realizations,
                base_seed=camp.base_seed,
                paired=camp.paired,
                shear_grid_g2=camp.shear_grid_g2,
                rotations=camp.rotations,
                rotation_noise=camp.rotation_noise,
            )
        except ValueError as err:
            raise _fail(f"--shear-grid/--shear-grid-g2/--g2-true: {err}") from None
        if camp.shear_grid_g2 is None:
            logger.info("g2 is constant (%g): m2 will be undefined; --shear-grid-g2 (or "
                        "campaign.shear_grid_g2) varies it too", camp.g2)  # fmt: skip
    single = kw["g1_true"] is not None
    grid = not single and not camp.shear_from_prior
    plan_info = {
        "design": "single" if single else "prior" if camp.shear_from_prior else "grid",
        "shear_grid": list(camp.shear_grid) if grid else None,
        "shear_grid_g2": list(camp.shear_grid_g2) if grid and camp.shear_grid_g2 else None,
        "g2": camp.g2,
        "n_realizations": 1 if single else camp.n_realizations,
        "base_seed": plan[0].seed if single else camp.base_seed,
        "paired": camp.paired and not single,
    }
    mine = cp.array_slice(plan, task_id, task_count)
    # lanes of the compiled program: the campaign's, never this task's share or what is
    # left to do, so every array task (whatever its slice size), a resumed run and a
    # single-process run share one compiled program and give bit-identical results
    batch_size = max(1, min(camp.batch_size, len(plan)))
    status = {r.run_id: realization_status(output_dir, r.run_id, expect) for r in mine}
    if other := [k for k, v in status.items() if v == "other"]:
        logger.warning("%d complete realization(s) under %s were computed with other "
                       "campaign-defining settings (e.g. %s); they are redone", len(other),
                       output_dir, other[0])  # fmt: skip
    todo = [r for r in mine if kw["overwrite"] or status[r.run_id] != "done"]
    return {
        "cfg": cfg,
        "spec": spec,
        "plan": plan,
        "mine": mine,
        "todo": todo,
        "status": status,
        "batch_size": batch_size,
        "lane_chunk": lane_chunk,
        "output_dir": output_dir,
        "task": (task_id, task_count),
        "expect": expect,
        "plan_info": plan_info,
    }


def _print_plan(job: dict[str, Any], kw: dict[str, Any]) -> None:
    from .campaign import make_batches

    cfg, plan, mine, todo = job["cfg"], job["plan"], job["mine"], job["todo"]
    bs = job["batch_size"]
    batches = make_batches(todo, bs)
    done = [r for r in mine if job["status"][r.run_id] == "done"]
    tid, tcount = job["task"]
    echo = click.echo if kw["dry_run"] else logger.info
    echo(
        f"config: {kw['config_path']} (hash {job['spec'].config_hash}), method: {cfg.inference.method}"
    )
    echo(
        f"plan: {len(plan)} realizations; array task {tid} of {tcount} takes {len(mine)}; "
        f"already complete: {len(done)}{' (overwrite)' if kw['overwrite'] and done else ''}; "
        f"to run: {len(todo)} in {len(batches)} batch(es) of {bs}"
    )
    echo(f"output dir: {job['output_dir']}")
    model = job["spec"].model
    from .core.snr import reference_signal

    echo(f"precision: {job['spec'].precision}; noise sigma {model.noise_sigma:.6g} per pixel; "
         f"matched-filter S/N of the reference galaxy (prior means, unsheared): "
         f"{reference_signal(model) / model.noise_sigma:.4g}")  # fmt: skip
    if kw["dry_run"]:
        for i, b in enumerate(batches):
            pad = bs - len(b)
            ids = " ".join(r.run_id for r in b)
            click.echo(f"batch {i + 1}: {ids}" + (f" (+{pad} padding)" if pad else ""))
        for r in done:
            click.echo(f"done (skipped): {r.run_id}")


# --------------------------------------------------------------------------- bias-extract


@click.command(
    cls=_Command,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog=_example("bias-extract --input-dir results/c --output results/c/summary.csv"),
)
@click.option(
    "--input-dir",
    required=True,
    help="Campaign root (bias-run's --output-dir; nested layouts are scanned).",
)
@click.option("--output", required=True, help="Summary table to write (CSV, one row each).")
@click.option(
    "--convergence-config",
    default=None,
    help=_help(
        "YAML with a 'convergence:' block (rhat_max, ess_min, divergence_frac_max, "
        "bfmi_min) re-gating NUTS realizations.",
        default="built in, as spelled out in configs/acceptance.yaml",
    ),
)
@click.option(
    "--workers", type=int, default=None, help=_help("Reader processes.", default="CPU count")
)
@click.option(
    "--progress/--no-progress",
    default=None,
    help=_help("Progress bar.", default="on when stderr is a terminal"),
)
@click.option("-v", "--verbose", is_flag=True, help=_help("Debug logging.", default="off"))
@_version_option()
def bias_extract(**kw: Any) -> int:
    """Stage 2: one summary row per realization directory (ok, failed, incomplete, corrupt)."""
    from .analysis import extract as ex
    from .analysis.progress import campaign_progress, mixed_warning
    from .io.manifest import MANIFEST

    _setup_logging(kw["verbose"])
    root = Path(kw["input_dir"])
    if not root.is_dir():
        raise _fail(f"--input-dir: {root} is not a directory")
    if kw["workers"] is not None and kw["workers"] < 1:
        raise _fail(f"--workers: must be >= 1, got {kw['workers']}")
    out = Path(kw["output"])
    _check_out_path("--output", out, is_dir=False)
    try:
        th = ex.load_thresholds(kw["convergence_config"])
    except OSError as err:
        raise _fail(f"--convergence-config: {err.strerror}: {err.filename}") from None
    except ValueError as err:
        raise _fail(f"--convergence-config: {err}") from None
    progress = kw["progress"] if kw["progress"] is not None else sys.stderr.isatty()
    if not ex.find_realization_dirs(root) and not (root / MANIFEST).is_file():
        raise _fail(f"--input-dir: no realization directories under {root}")
    rows = ex.extract_campaign(root, th, workers=kw["workers"], progress=progress)
    rows, prog = campaign_progress(root, rows)
    if not rows:
        raise _fail(f"--input-dir: no realization directories under {root}")
    ex.write_summary(rows, out)
    try:
        pop_path = ex.write_population(rows, ex.population_path(out))
    except ValueError as err:
        raise _fail(f"--input-dir: {err}") from None
    counts = ex.status_counts(rows)
    conv = sum(1 for r in rows if r["status"] == "ok" and r.get("passed_convergence"))
    click.echo(
        f"{len(rows)} realization(s): "
        + ", ".join(f"{k} {v}" for k, v in counts.items())
        + f"; passed convergence {conv} -> {out}"
    )
    click.echo(f"campaign: {prog.line()}")
    if pop_path is not None:
        click.echo(f"interim model: per-galaxy draws for bias-stats' pooled fit -> {pop_path}")
    for msg in [*prog.problems, mixed_warning(prog.mixed)]:
        if msg:
            logger.warning("%s", msg)
    if len(prog.batch_sizes) > 1:
        logger.info("batch sizes %s (allowed: MAP agrees to < 1e-6 across batch sizes; "
                    "recorded per realization in summary.csv)", prog.batch_sizes)  # fmt: skip
    return 0


# --------------------------------------------------------------------------- bias-stats


@click.command(
    cls=_Command,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog=_example(
        "bias-stats --input results/c/summary.csv --output-dir results/c/stats \\",
        "           --level level_0 --posterior-dir results/c --report results/c/report.html",
    ),
)
@click.option("--input", "input_path", required=True, help="summary.csv from bias-extract.")
@click.option("--output-dir", required=True, help="Where bias_results.json and plots/ go.")
@click.option(
    "--level",
    default="level_0",
    help=_help(
        "Acceptance thresholds: level_0 | level_1 | level_2 (configs/acceptance.yaml).",
        default="level_0",
    ),
)
@click.option(
    "--posterior-dir",
    default=None,
    help=_help(
        "Campaign root (bias-run's --output-dir): reads posterior.nc of the worst "
        "realizations (failing convergence first, then largest R-hat, then largest "
        "|estimate - truth| / std) for their diagnostic plot.",
        default="none: no per-realization plots",
    ),
)
@click.option(
    "--acceptance-config",
    default=None,
    help=_help(
        "YAML whose acceptance.<level> overrides the level's criteria (max_abs_m, "
        "max_abs_c, z, coverage_z, min_seeds, ...).",
        default="built in, as spelled out in configs/acceptance.yaml",
    ),
)
@click.option(
    "--estimator",
    default="auto",
    help=_help(
        "regression (least squares of the estimate on g_true, jackknife over seeds) | "
        "paired (+g/-g twins, bootstrap over seeds) | auto (paired when the campaign "
        "has pairs).",
        default="auto",
    ),
)
@click.option(
    "--point",
    default="auto",
    help=_help(
        "Per-realization point estimate: mean | median | mode (the MAP / Laplace "
        "centre) | auto (mode for MAP campaigns, posterior mean otherwise).",
        default="auto",
    ),
)
@click.option(
    "--weights",
    default="none",
    help=_help(
        "none | inverse-variance (1/std^2: biased at low S/N, where the posterior width "
        "correlates with the estimate).",
        default="none",
    ),
)
@click.option(
    "--sbc/--no-sbc",
    default=None,
    help=_help(
        "Force simulation-based calibration on/off.",
        default="on when the true shears were drawn from the prior (bias-run --shear-from-prior)",
    ),
)
@click.option(
    "--n-boot",
    type=int,
    default=1000,
    help=_help("Bootstrap resamples (errors of the paired estimator).", default="1000"),
)
@click.option(
    "--plots/--no-plots", default=True, help=_help("Write figures under plots/.", default="on")
)
@click.option(
    "--report",
    default=None,
    metavar="HTML",
    help=_help(
        "Also write one self-contained HTML report (verdict, m and c with errors and methods, "
        "coverage, SBC, failures by flag, the figures, provenance) to send to a colleague.",
        default="none",
    ),
)
@click.option("-v", "--verbose", is_flag=True, help=_help("Debug logging.", default="off"))
@_version_option()
def bias_stats(**kw: Any) -> int:
    """Stage 3: m and c with errors, coverage, SBC and the acceptance verdict.

    Each of m1, m2, c1, c2 PASSes when |x| + q sigma <= threshold, FAILs when
    |x| - q sigma > threshold, and is INCONCLUSIVE otherwise; q is the Student-t
    quantile, with seeds - 1 degrees of freedom, at the one-sided probability of
    z (acceptance config, default 2): 14.0 with 2 seeds, 2.07 with 40. Coverage and SBC need min_seeds independent
    seeds (default 20). Verdict: FAIL if any criterion fails, else INCONCLUSIVE
    if any is, else PASS. Exit status: 0 PASS, 1 FAIL, 3 INCONCLUSIVE, 2 bad input.
    """
    import json

    import pandas as pd

    from .analysis import acceptance, extract, stats
    from .analysis.verdict import EXIT_CODES
    from .io import to_strict_json

    _setup_logging(kw["verbose"])
    src = Path(kw["input_path"])
    if not src.is_file():
        raise _fail(f"--input: {src} not found")
    if kw["level"] not in acceptance.LEVELS:
        raise _fail(
            f"--level: unknown level {kw['level']!r}; use one of {', '.join(acceptance.LEVELS)}"
        )
    if kw["estimator"] not in ("regression", "paired", "auto"):
        raise _fail(f"--estimator: unknown {kw['estimator']!r}; use regression, paired or auto")
    if kw["point"] not in (*acceptance.POINT_ESTIMATES, "auto"):
        raise _fail(
            f"--point: unknown {kw['point']!r}; use {', '.join(acceptance.POINT_ESTIMATES)} or auto"
        )
    if kw["weights"] not in stats.WEIGHTS:
        raise _fail(f"--weights: unknown {kw['weights']!r}; use {' or '.join(stats.WEIGHTS)}")
    if kw["n_boot"] < 2:
        raise _fail(f"--n-boot: must be >= 2, got {kw['n_boot']}")
    _check_out_path("--output-dir", Path(kw["output_dir"]))
    if kw["posterior_dir"] is not None and not Path(kw["posterior_dir"]).is_dir():
        raise _fail(f"--posterior-dir: {kw['posterior_dir']} is not a directory")
    if kw["report"] is not None and Path(kw["report"]).is_dir():
        raise _fail(f"--report: {kw['report']} is a directory")
    try:
        acc = acceptance.load_acceptance(kw["acceptance_config"], kw["level"])
    except OSError as err:
        raise _fail(f"--acceptance-config: {err.strerror}: {err.filename}") from None
    except ValueError as err:
        raise _fail(f"--acceptance-config: {err}") from None
    try:
        df = pd.read_csv(src, dtype={"run_id": str, "pair_id": str, "status": str})
    except (ValueError, OSError) as err:
        raise _fail(f"--input: cannot read {src}: {err}") from None
    sbc_mode = {None: "auto", True: "on", False: "off"}[kw["sbc"]]
    population = None
    pop_path = extract.population_path(src)
    if pop_path.is_file() and "estimate" in df and (df["estimate"] == "population").any():
        from .analysis.pooled import load_population

        try:
            population = load_population(pop_path)
        except (OSError, ValueError, KeyError) as err:
            raise _fail(f"--input: population sidecar {pop_path} unreadable: {err}") from None
    try:
        res, fits, use = acceptance.analyze(df, level=kw["level"], estimator=kw["estimator"],
                                            acceptance=acc, sbc_mode=sbc_mode,
                                            n_boot=kw["n_boot"], point=kw["point"],
                                            weights=kw["weights"],
                                            population=population)  # fmt: skip
    except ValueError as err:
        raise _fail(f"--input: {err}") from None
    out = Path(kw["output_dir"])
    out.mkdir(parents=True, exist_ok=True)
    plot_dir = _stats_plots(df, use, res, fits, out, kw["posterior_dir"]) if kw["plots"] else None
    text = json.dumps(to_strict_json(res), indent=2, allow_nan=False)
    (out / "bias_results.json").write_text(text + "\n")
    _print_stats(res, out, plot_dir)
    if kw["report"] is not None:
        _write_report(res, df, plot_dir, kw["posterior_dir"], Path(kw["report"]))
    return EXIT_CODES[res["verdict"]]


def _print_stats(res: dict[str, Any], out: Path, plot_dir: Path | None) -> None:
    from .analysis.verdict import EXIT_CODES
    from .core import flags as fl

    def num(v: Any) -> str:
        return "-" if v is None else f"{v:.3g}"

    ex = ", ".join(f"{k}: {v}" for k, v in res["excluded"].items()) or "none"
    click.echo(f"{res['level']}, estimator {res['estimator']}, point estimate "
               f"{res['point_estimate']}, weights {res['weights']}: used {res['n_used']} of "
               f"{res['n_realizations']} realization(s) ({res['n_seeds']} independent seeds); "
               f"excluded: {ex}")  # fmt: skip
    if pr := res.get("population"):
        worst = min(p["ess_fraction_min"] for p in pr["grid_points"])
        coll = sum(p["n_collapsed"] for p in pr["grid_points"])
        click.echo(f"  population estimator pooled per grid point: {pr['n_galaxies']} galaxies "
                   f"of {pr['n_seeds']} seeds over {len(pr['grid_points'])} grid point(s); "
                   f"smallest per-galaxy ESS {worst:.2g} of the draws, {coll} galaxies with "
                   "collapsed weights at the estimate")  # fmt: skip
    for name, n in (res.get("warnings") or {}).items():
        click.echo(f"  WARNING {name} in {n} used realization(s): {fl.FLAGS[name][1]}")
    des = res.get("design") or {}
    if des.get("rotations", 1) > 1:
        click.echo(f"  ring design: {des['rotations']} rotations per seed"
                   f"{', paired' if des['paired'] else ''}; errors resample whole seeds; "
                   f"incomplete rings left out: {des['incomplete_rings_left_out']}")  # fmt: skip
    if res.get("noise_bias"):
        click.echo(f"  NOTE {res['noise_bias']['message']}")
    pr = res.get("prior") or {}
    if pr.get("dominated"):
        click.echo(f"  WARNING prior-dominated: the shear prior pulls the estimates by a median "
                   f"{max(v for k, v in pr.items() if k.startswith('shrinkage') and v):.2g} "
                   f"(m shifted by about that much); use the flat default prior "
                   f"(gal.shear.type: UniformDisk) for calibration")  # fmt: skip
    for k in ("m1", "c1", "m2", "c2"):
        comp = f"g{k[1]}"
        if res[k] is None:
            why = res.get(f"{k}_reason", "")
            click.echo(f"  {k} = undefined ({why}; not a criterion)")
        elif res[k + "_err"] is None:
            click.echo(f"  {k} = {res[k]:+.3e} (no error: {res['fits'][comp]['error_label']})")
        else:
            click.echo(f"  {k} = {res[k]:+.3e} ± {res[k + '_err']:.2e} "
                       f"({res['fits'][comp]['error_label']})")  # fmt: skip
    click.echo(f"criteria (PASS: |x| + q·σ <= threshold; FAIL: |x| - q·σ > threshold; "
               f"z = {res['z']:g}, q = its Student-t quantile with seeds - 1 dof):")  # fmt: skip
    for c in res["criteria"]:
        thr = c["threshold"]
        thr = f"[{thr[0]:.3g}, {thr[1]:.3g}]" if isinstance(thr, list) else f"{thr:.3g}"
        err = f" ± {c['err']:.2g}" if c["err"] is not None else ""
        if err and c.get("error_method"):
            err += f" ({c['error_method']}"
            err += f", q = {c['quantile']:.3g})" if c.get("quantile") is not None else ")"
        line = f"  {'[' + c['status'].upper() + ']':>14} {c['name']:<20} {num(c['value'])}{err}"
        line += f" (threshold {thr})"
        if c["status"] == "inconclusive":
            need = c["n_needed"]
            line += f": {c['reason']}" if c["reason"] else ""
            if need is not None and "realizations" not in c["reason"]:
                line += f"; needs ~{need} realizations"
        elif c["status"] == "fail" and c["reason"]:
            line += f": {c['reason']}"
        click.echo(line)
    v = res["verdict"]
    click.echo(f"verdict: {v} (exit {EXIT_CODES[v]}) -> {out / 'bias_results.json'}")
    if plot_dir is not None:
        click.echo(f"plots: {plot_dir}")


def _write_report(
    res: dict[str, Any], df: Any, plot_dir: Path | None, posterior_dir: str | None, path: Path
) -> None:
    """``--report``: one self-contained HTML file (analysis/report.py)."""
    import xarray as xr

    from .analysis import report
    from .io import POSTERIOR, find_realization_dirs

    attrs = []
    if posterior_dir is not None:
        for d in find_realization_dirs(posterior_dir)[:500]:  # provenance, not statistics
            if (d / POSTERIOR).is_file():
                with xr.open_datatree(d / POSTERIOR, engine="netcdf4") as tree:
                    attrs.append(dict(tree.attrs))
    order = ["residuals.png", "coverage.png", "ranks.png", "worst_diagnostics.png"]
    figures = []
    if plot_dir is not None:
        figures = sorted(plot_dir.glob("*.png"), key=lambda p: (p.name not in order,
                         order.index(p.name) if p.name in order else 0, p.name))  # fmt: skip
    commands = []
    if posterior_dir is not None and (Path(posterior_dir) / COMMANDS_FILE).is_file():
        commands = (Path(posterior_dir) / COMMANDS_FILE).read_text().splitlines()[-20:]
    prov = report.provenance(_given_args(), attrs, commands)
    text = report.render_report(res, figures, report.failures_by_flag(df), prov)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    click.echo(f"report: {path}")


def _stats_plots(df, use, res, fits, out: Path, posterior_dir: str | None) -> Path:
    from .analysis import plots
    from .io import POSTERIOR, find_realization_dirs

    d = out / "plots"
    d.mkdir(parents=True, exist_ok=True)
    # the population estimator: the per-realization maxima (g_mode) in the residual figure
    point = "mode" if res["point_estimate"] == "population" else res["point_estimate"]
    figs = {
        "residuals.png": plots.residual_figure(
            use, fits, res["estimator"], point=point, weights=res["weights"]
        ),
        "coverage.png": plots.coverage_figure(res["coverage"]),
        "ranks.png": plots.rank_figure(use, res["sbc"]),
    }
    if posterior_dir is not None and res["point_estimate"] == "population":
        logger.info("--posterior-dir: no per-realization g posterior to plot (interim model)")
    elif posterior_dir is not None:
        worst = plots.worst_converged(df)
        where = {p.name: p for p in find_realization_dirs(posterior_dir)}
        found = [w for w in worst if w in where and (where[w] / POSTERIOR).is_file()]
        if found:
            truth = df.set_index("run_id")
            figs["worst_diagnostics.png"] = plots.diagnostics_figure(
                [where[w] for w in found],
                [(float(truth.at[w, "g1_true"]), float(truth.at[w, "g2_true"])) for w in found],
            )
        else:
            logger.warning("--posterior-dir: none of the worst realizations %s found", worst)
    for name, fig in figs.items():
        fig.savefig(d / name, dpi=110)
    return d
