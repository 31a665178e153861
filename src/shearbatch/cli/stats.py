"""``bias-stats``: m and c with errors, coverage, SBC and the acceptance verdict."""

from __future__ import annotations

from typing import Any

import click

from ..app import StageError, StatsOptions, run_stats
from .options import (
    _Command,
    _example,
    _fail,
    _given_args,
    _help,
    _setup_logging,
    _write_failed,
)
from .params import _version_option

__all__ = ["bias_stats"]


@click.command(
    cls=_Command,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog=_example(
        "bias-stats --input results/survey_snr30 --requirement lsst-project",
        "bias-stats --input results/c/summary.csv --output-dir results/c/stats \\",
        "           --posterior-dir results/c --report results/c/report.html",
    ),
)
@click.option(
    "--input",
    "input_path",
    required=True,
    help="A campaign directory (bias-run's --output-dir: its summary.csv is reused when newer "
    "than every realization file, else extracted there first; bias_results.json, plots/ and "
    "report.html are written there), or a summary.csv from bias-extract.",
)
@click.option(
    "--output-dir",
    default=None,
    help=_help(
        "Where bias_results.json and plots/ go.",
        default="the campaign directory of --input; required for a summary.csv",
    ),
)
@click.option(
    "--requirement",
    default=None,
    metavar="NAME",
    help=_help(
        "Acceptance requirement: a preset of docs/requirements.md (level0, survey_snr30, "
        "lsst-project, desc-srd-y10, euclid, ...).",
        default="the campaign config's campaign.requirement (its frozen config.yaml or "
        "campaign.json), else level0",
    ),
)
@click.option(
    "--level",
    default=None,
    help=_help(
        "Alias of --requirement: level_0 | level_1 | level_2 are level0 | level1 | level2.",
        default="none",
    ),
)
@click.option(
    "--target-sigma-m",
    type=float,
    default=None,
    metavar="X",
    help=_help(
        "Also print (and write under planning) the realizations for a standard error "
        "X of m, from this campaign's scatter and design.",
        default="none",
    ),
)
@click.option(
    "--include-unplanned",
    is_flag=True,
    help=_help(
        "Use summary rows whose in_plan is false (directories not in the campaign's plan).",
        default="off: left out and counted",
    ),
)
@click.option(
    "--posterior-dir",
    default=None,
    help=_help(
        "Campaign root (bias-run's --output-dir): reads posterior.nc of the worst "
        "realizations (failing convergence first, then largest R-hat, then largest "
        "|estimate - truth| / std; one per seed) for their diagnostic plot, and the config "
        "as run and a few stamps for the report.",
        default="the campaign directory of --input; none for a summary.csv",
    ),
)
@click.option(
    "--acceptance-config",
    default=None,
    help=_help(
        "YAML whose acceptance.<requirement> (or its level_k alias) overrides the "
        "requirement's criteria (max_abs_m, max_abs_c, z, coverage_z, min_seeds, ...).",
        default="none",
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
        "Also write one self-contained HTML report (verdict, requirement, m and c with errors "
        "and methods, planning, coverage, SBC, failures by flag, the figures and stamps, the "
        "config as run, provenance) to send to a colleague.",
        default="<campaign directory>/report.html for a campaign directory, else none",
    ),
)
@click.option("-v", "--verbose", is_flag=True, help=_help("Debug logging.", default="off"))
@_version_option()
def bias_stats(**kw: Any) -> int:
    """Stage 3: m and c with errors, coverage, SBC and the verdict against a requirement.

    Each of m1, m2, c1, c2 PASSes when |x| + q sigma <= threshold, FAILs when
    |x| - q sigma > threshold, and is INCONCLUSIVE otherwise; q is the Student-t
    quantile, with seeds - 1 degrees of freedom, at the one-sided probability of
    z (default 2): 14.0 with 2 seeds, 2.07 with 40. The planning lines give the
    realizations to PASS if the true bias were 0, from the campaign's own scatter.
    Coverage and SBC need min_seeds independent seeds (default 20). Verdict: FAIL if
    any criterion fails, else INCONCLUSIVE if any is (or the campaign is unfinished),
    else PASS. Exit status: 0 PASS, 1 FAIL, 3 INCONCLUSIVE, 2 bad input, 4 an output could not be
    written.
    """
    _setup_logging(kw["verbose"])
    args = {k: v for k, v in kw.items() if k not in ("input_path", "verbose")}
    opts = StatsOptions(input=kw["input_path"], command=tuple(_given_args()), **args)
    try:
        done = run_stats(opts)
    except StageError as err:
        raise _fail(str(err)) from None
    except OSError as err:  # an output could not be written: one line, exit 4
        return _write_failed(err)
    for line in done.lines():
        click.echo(line)
    return done.exit_code
