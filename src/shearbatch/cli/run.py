"""``bias-run``: parse the options, plan (:func:`shearbatch.app.plan_run`), then run, emit a
SLURM script or print the plan; exceptions become exit codes."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import click

from .. import app
from .options import _Command, _example, _fail, _given, _given_args, _setup_logging
from .run_options import run_options

__all__ = ["bias_run"]

logger = logging.getLogger("shearbatch")


class _RunCommand(_Command):
    variadic = ("--shear-grid", "--shear-grid-g2")


def _options(kw: dict[str, Any]) -> app.RunOptions:
    """The click arguments as :class:`~shearbatch.app.RunOptions`."""
    fields = set(app.RunOptions.fields()) - {"config"}
    given = {k: v for k, v in kw.items() if k in fields}
    if given.get("pilot"):  # --pilot is a dry run that also times one batch
        given["dry_run"] = True
    return app.RunOptions.of(config=kw["config_path"], **given)


@click.command(
    cls=_RunCommand,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog=_example(
        "bias-run --config configs/level0.yaml --shear-grid -0.05 0.05 \\",
        "         --shear-grid-g2 -0.05 0.05 --n-realizations 20 --output-dir results/c",
        "bias-run --config configs/level0.yaml --show-config    # resolved config, defaults in",
    ),
)
@run_options
def bias_run(**kw: Any) -> int:
    """Stage 1: simulate and infer a campaign; one directory per realization.

    Writes <output-dir>/<run id>/{posterior.nc, truth.json, convergence.json};
    complete realizations are skipped on a re-run. Exit status: 0 success, 1 some
    realizations failed (the others are written), 2 bad input, 3 stopped by
    --time-limit / SLURM_JOB_END_TIME, 4 an output could not be written (disk full),
    5 a batch a healthy program never gives was not written (most of its galaxies'
    importance weights collapsed; resume with a smaller --batch-size), 130 / 143
    stopped by Ctrl-C / SIGTERM; after 3, 4, 5, 130 and 143 every realization is
    complete or absent and the same command resumes.

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

    \b
    One output root holds one campaign: campaign.json records its config hash,
    method, precision and plan (shear grids, design, seeds), config.yaml the config
    as run (flags and --set applied). A run that differs in any of them exits 2
    naming the setting (--overwrite replaces the campaign); a larger
    --n-realizations grows the campaign and resumes; without --config, the root's
    config.yaml is read (bias-run --output-dir ROOT resumes ROOT).
    """
    from ..engine.health import UnhealthyBatch
    from ..io import WriteError
    from ..schema import ConfigError

    _setup_logging(kw["verbose"])
    if kw["show_config"] is not None:
        return _show_config(kw)
    opts = _options(kw)
    try:
        deadline = app.deadline(opts.execution.time_limit)
        plan = app.plan_run(opts)
        if opts.slurm.emit_sbatch:
            for line in app.emit_sbatch(plan, _given(("COMMANDLINE", "ENVIRONMENT"))):
                click.echo(line)
            return 0
        _print_plan(plan)
        if opts.execution.dry_run:
            for line in app.estimate_lines(
                plan, with_pilot=opts.execution.pilot, notify=click.echo
            ):
                click.echo(line)
            if opts.execution.preview:
                app.preview_only(plan, Path(opts.execution.preview), notify=click.echo)
            return 0
        app.check_writable(plan.output_dir)
        progress = (
            opts.execution.progress if opts.execution.progress is not None else sys.stderr.isatty()
        )
        try:
            out = app.run(plan, progress=progress, deadline=deadline, command=_given_args(),
                          preview=Path(opts.execution.preview) if opts.execution.preview else None,
                          notify=click.echo)  # fmt: skip
        except WriteError as err:
            click.echo(f"Error: {err}; {app.resume_hint(plan)}", err=True)
            return 4
        except UnhealthyBatch as err:  # the batches before it are written; it is not
            hint = app.resume_hint(plan, "with a smaller --batch-size")
            click.echo(f"Error: {err}; {hint}", err=True)
            return 5
    except (ConfigError, app.PlanError) as err:
        raise _fail(str(err)) from None
    report = out.report
    click.echo(
        f"wrote {report.n_ok} ok, {report.n_failed} failed realization(s) under {plan.output_dir}"
        f" in {report.wall_s:.1f} s"
        + (f"; skipped {out.skipped} claimed by another bias-run" if out.skipped else "")
    )
    if report.stopped == "signal":
        logger.warning("%s: %s", out.signal_name, app.resume_hint(plan))
        return 128 + out.signum
    if report.stopped:
        logger.warning("time limit: %s", app.resume_hint(plan))
        return 3
    return 1 if report.n_failed else 0


def _show_config(kw: dict[str, Any]) -> int:
    """``--show-config``: the resolved config (defaults filled in, flags applied) as YAML."""
    import dataclasses

    import yaml

    from ..app.plan import frozen_path, load_with_flags
    from ..schema import ConfigError, config_hash

    path = kw["show_config"] or kw["config_path"] or frozen_path(_options(kw))
    if not path:
        raise _fail("--show-config: give a config (--show-config CONFIG or --config CONFIG)")
    try:
        opts = _options(kw)
        run = dataclasses.replace(opts.overrides, config=path)
        cfg = load_with_flags(dataclasses.replace(opts, overrides=run))
    except (ConfigError, app.PlanError) as err:
        raise _fail(str(err)) from None
    text = yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)
    click.echo(f"# {path}: resolved (defaults filled in, flags applied); config hash "
               f"{config_hash(cfg)}; every key: docs/config.md")  # fmt: skip
    click.echo(text, nl=False)
    return 0


def _print_plan(plan: app.Plan) -> None:
    from ..core.snr import reference_signal

    opts = plan.options
    cfg, mine, todo = plan.cfg, plan.mine, plan.todo
    prepared = app.prepare_plan(plan, compile=False)  # the batches, nothing compiled
    bs, batches = prepared.batch_size, prepared.batches
    done = [r for r in mine if plan.status[r.run_id] == "done"]
    tid, tcount = plan.task
    echo = click.echo if opts.execution.dry_run else logger.info
    echo(
        f"config: {plan.config_name} (hash {plan.spec.config_hash}), method: {cfg.inference.method}"
    )
    echo(
        f"plan: {len(plan.realizations)} realizations; array task {tid} of {tcount} takes "
        f"{len(mine)}; already complete: {len(done)}"
        f"{' (overwrite)' if opts.execution.overwrite and done else ''}; "
        + (
            f"to run: {len(todo)}, batch size auto (the most lanes that fit the memory budget, "
            f"chosen before the first batch)"
            if plan.auto_batch
            else f"to run: {len(todo)} in {len(batches)} batch(es) of {bs}"
        )
    )
    echo(f"output dir: {plan.output_dir}")
    model = plan.spec.model
    echo(f"precision: {plan.spec.precision}; noise sigma {model.noise_sigma:.6g} per pixel; "
         f"matched-filter S/N of the reference galaxy (prior means, unsheared): "
         f"{reference_signal(model) / model.noise_sigma:.4g}")  # fmt: skip
    if opts.execution.dry_run:
        for i, b in enumerate(batches):
            pad = bs - len(b)
            ids = " ".join(r.run_id for r in b)
            click.echo(f"batch {i + 1}: {ids}" + (f" (+{pad} padding)" if pad else ""))
        for r in done:
            click.echo(f"done (skipped): {r.run_id}")
