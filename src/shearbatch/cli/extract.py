"""``bias-extract``: one summary row per realization directory."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import click

from ..app.stats import SUMMARY, extract_to
from .options import (
    _check_out_path,
    _Command,
    _example,
    _fail,
    _help,
    _setup_logging,
    _version_option,
)

__all__ = ["bias_extract"]

logger = logging.getLogger("shearbatch")


@click.command(
    cls=_Command,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog=_example("bias-extract --input-dir results/c    # -> results/c/summary.csv"),
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
@click.option("-v", "--verbose", is_flag=True, help=_help("Debug logging.", default="off"))
@_version_option()
def bias_extract(**kw: Any) -> int:
    """Stage 2: one summary row per realization directory (ok, failed, incomplete, corrupt).

    Directories that are not in the campaign's plan (campaign.json) are reported and
    marked in_plan = False in summary.csv.
    """
    from ..analysis import extract as ex
    from ..analysis.progress import mixed_warning
    from ..io.manifest import MANIFEST

    _setup_logging(kw["verbose"])
    root = Path(kw["input_dir"])
    if not root.is_dir():
        raise _fail(f"--input-dir: {root} is not a directory")
    if kw["workers"] is not None and kw["workers"] < 1:
        raise _fail(f"--workers: must be >= 1, got {kw['workers']}")
    out = Path(kw["output"]) if kw["output"] is not None else root / SUMMARY
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
    try:  # the one extraction, shared with bias-stats --input <campaign dir>
        rows, prog, pop_path = extract_to(root, out, th, kw["workers"], progress)
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
    if prog.unplanned:
        logger.warning("%s: not this campaign's (campaign.json's plan); summary.csv marks "
                       "them in_plan = False and bias-stats leaves them out unless "
                       "--include-unplanned", prog.unplanned_line(5))  # fmt: skip
    for msg in [*prog.problems, mixed_warning(prog.mixed)]:
        if msg:
            logger.warning("%s", msg)
    if len(prog.batch_sizes) > 1:
        logger.info("batch sizes %s (allowed: MAP agrees to < 1e-6 across batch sizes; "
                    "recorded per realization in summary.csv)", prog.batch_sizes)  # fmt: skip
    return 0
