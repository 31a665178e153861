"""``bias-stats``: m and c with errors, coverage, SBC and the acceptance verdict."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import click

from ..app.stats import stats_plots, write_report
from .options import (
    _check_out_path,
    _Command,
    _example,
    _fail,
    _given_args,
    _help,
    _setup_logging,
    _version_option,
)

__all__ = ["bias_stats"]

logger = logging.getLogger("shearbatch")


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

    from ..analysis import acceptance, extract, stats
    from ..analysis.verdict import EXIT_CODES
    from ..io import to_strict_json

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
    df = acceptance.current_columns(df)  # older summary.csv column names
    sbc_mode = {None: "auto", True: "on", False: "off"}[kw["sbc"]]
    population = None
    pop_path = extract.population_path(src)
    interim = "point_estimate" in df and (df["point_estimate"] == "population").any()
    if pop_path.is_file() and interim:
        from ..analysis.pooled import load_population

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
    plot_dir = stats_plots(df, use, res, fits, out, kw["posterior_dir"]) if kw["plots"] else None
    text = json.dumps(to_strict_json(res), indent=2, allow_nan=False)
    (out / "bias_results.json").write_text(text + "\n")
    _print_stats(res, out, plot_dir)
    if kw["report"] is not None:
        path = write_report(res, df, plot_dir, kw["posterior_dir"], Path(kw["report"]),
                            command=_given_args())  # fmt: skip
        click.echo(f"report: {path}")
    return EXIT_CODES[res["verdict"]]


def _print_stats(res: dict[str, Any], out: Path, plot_dir: Path | None) -> None:
    from ..analysis.verdict import EXIT_CODES
    from ..core import flags as fl

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
