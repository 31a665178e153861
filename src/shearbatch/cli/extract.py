"""``bias-extract``: one summary row per realization directory."""

from __future__ import annotations

import logging
import sys
from typing import Any

import click

from ..app import ExtractOptions, StageError, extract_slice, run_extract, run_verify
from ..app.extract_stage import EXIT_DAMAGED
from .options import (
    _Command,
    _example,
    _fail,
    _help,
    _setup_logging,
    _write_failed,
)
from .params import _version_option

__all__ = ["bias_extract"]

logger = logging.getLogger("shearbatch")


@click.command(
    cls=_Command,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog=_example(
        "bias-extract --input-dir results/c    # -> results/c/summary.csv",
        "bias-extract --input-dir results/c --verify    # -> results/c/summary.verified.json",
    ),
)
@click.option(
    "--input-dir",
    required=True,
    help="Campaign root (bias-run's --output-dir; nested layouts are scanned).",
)
@click.option(
    "--output",
    default=None,
    help=_help("Summary table to write (CSV, one row each).", default="<input-dir>/summary.csv"),
)
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
    "--workers",
    type=int,
    default=None,
    help=_help(
        "Reader processes.",
        default="the CPUs allocated: $SLURM_CPUS_PER_TASK, else the affinity mask",
    ),
)
@click.option(
    "--progress/--no-progress",
    default=None,
    help=_help("Progress bar.", default="on when stderr is a terminal"),
)
@click.option(
    "--array-task-id",
    type=int,
    default=None,
    help=_help(
        "Write only this array task's partial (partials/task-I-of-N.nc: the completed "
        "realizations of bias-run's slice I of N, their summary rows and per-galaxy draws); "
        "bias-extract without it then reduces the partials, reading only what they lack.",
        default="off: the reduction",
    ),
)
@click.option(
    "--array-task-count",
    type=int,
    default=None,
    help=_help("Tasks in the array (with --array-task-id).", default="none"),
)
@click.option(
    "--array-indices",
    default=None,
    metavar="SPEC",
    help=_help(
        "The SLURM array's index set (as bias-run's): this task's slice from "
        "SLURM_ARRAY_TASK_ID; what the emitted array script passes.",
        default="none",
    ),
)
@click.option(
    "--verify",
    is_flag=True,
    help=_help(
        "The scrub: read every file of every realization again against the checksums in its "
        "convergence.json, whatever partials and summary.csv say, and print each damage "
        "found (realization, file, what differs; 'after extraction' when a partial trusted "
        "it whole). Writes only its record beside --output (summary.verified.json, read by "
        "bias-stats); exit 1 when damage is found.",
        default="off",
    ),
)
@click.option("-v", "--verbose", is_flag=True, help=_help("Debug logging.", default="off"))
@_version_option()
def bias_extract(**kw: Any) -> int:
    """Stage 2: one summary row per realization directory (ok, failed, incomplete, corrupt).

    Directories that are not in the campaign's plan (campaign.json) are reported and
    marked in_plan = False in summary.csv.

    Exit status: 0 done; 2 bad input; 4 an output could not be written; with --verify, 1
    damage found (0: none).
    """
    _setup_logging(kw["verbose"])
    progress = kw["progress"] if kw["progress"] is not None else sys.stderr.isatty()
    opts = ExtractOptions(input_dir=kw["input_dir"], output=kw["output"], workers=kw["workers"],
                          convergence_config=kw["convergence_config"], progress=progress,
                          array_task_id=kw["array_task_id"],
                          array_task_count=kw["array_task_count"],
                          array_indices=kw["array_indices"], verify=kw["verify"])  # fmt: skip
    if opts.verify:
        try:
            rep = run_verify(opts)
        except StageError as err:
            raise _fail(str(err)) from None
        except OSError as err:  # its record could not be written: one line, exit 4
            return _write_failed(err)
        for line in rep.lines():
            click.echo(line)
        return EXIT_DAMAGED if rep.n_damaged else 0
    if any(x is not None for x in (opts.array_task_id, opts.array_task_count,
                                   opts.array_indices)):  # fmt: skip
        try:
            path, n = extract_slice(opts)
        except StageError as err:
            raise _fail(str(err)) from None
        except OSError as err:
            return _write_failed(err)
        click.echo(f"{n} realization(s) -> {path}")
        return 0
    try:  # the one extraction, shared with bias-stats --input <campaign dir>
        done = run_extract(opts)
    except StageError as err:
        raise _fail(str(err)) from None
    except OSError as err:  # an output could not be written: one line, exit 4
        return _write_failed(err)
    for line in done.lines():
        click.echo(line)
    for msg in done.warnings():
        logger.warning("%s", msg)
    for msg in done.notes():
        logger.info("%s", msg)
    return 0
