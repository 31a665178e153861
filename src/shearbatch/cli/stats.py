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
    else PASS. Exit status: 0 PASS, 1 FAIL, 3 INCONCLUSIVE, 2 bad input.
    """
    import json

    import pandas as pd

    from ..analysis import acceptance, extract, stats
    from ..analysis.verdict import EXIT_CODES
    from ..app import stats as app_stats
    from ..io import to_strict_json
    from ..schema import requirements as rq

    _setup_logging(kw["verbose"])
    src = Path(kw["input_path"])
    if kw["requirement"] is not None and kw["level"] is not None:
        raise _fail("--level: an alias of --requirement; give one of them")
    flag = "--requirement" if kw["level"] is None else "--level"
    given = kw["requirement"] if kw["level"] is None else kw["level"]
    if given is not None:
        try:
            rq.resolve(given)
        except ValueError as err:
            raise _fail(f"{flag}: {err}") from None
    if kw["target_sigma_m"] is not None and not kw["target_sigma_m"] > 0:
        raise _fail(f"--target-sigma-m: must be > 0, got {kw['target_sigma_m']}")
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
    if not src.exists():
        raise _fail(f"--input: {src} not found (give a campaign directory or a summary.csv)")
    if src.is_dir() and not app_stats.is_campaign(src):
        raise _fail(f"--input: {src} is a directory but not a campaign (no campaign.json, no "
                    "realization directories); give bias-run's --output-dir, or a summary.csv "
                    "from bias-extract --input-dir DIR --output DIR/summary.csv")  # fmt: skip
    if not src.is_dir() and kw["output_dir"] is None:
        raise _fail("--output-dir: required when --input is a summary.csv")
    out = Path(kw["output_dir"]) if kw["output_dir"] is not None else src
    _check_out_path("--output-dir", out)
    if kw["posterior_dir"] is not None and not Path(kw["posterior_dir"]).is_dir():
        raise _fail(f"--posterior-dir: {kw['posterior_dir']} is not a directory")
    report = kw["report"] if kw["report"] is not None or not src.is_dir() else out / "report.html"
    if report is not None and Path(report).is_dir():
        raise _fail(f"--report: {report} is a directory")
    if src.is_dir() and not app_stats.summary_is_fresh(src / app_stats.SUMMARY, src):
        _check_out_path("--input", src)  # summary.csv will be written there
    camp_req, where = app_stats.campaign_requirement(
        app_stats.campaign_root(src, kw["posterior_dir"])
    )
    name, chosen = (rq.resolve(given), flag) if given is not None else (None, "")
    if name is None and camp_req is not None:
        try:
            name, chosen = rq.resolve(camp_req), f"campaign.requirement in {where}"
        except ValueError as err:
            raise _fail(f"campaign.requirement: {err} ({where})") from None
    if name is None:
        name, chosen = "level0", "default (no --requirement; the campaign names none)"
    try:
        acc = acceptance.load_acceptance(kw["acceptance_config"], name)
    except OSError as err:
        raise _fail(f"--acceptance-config: {err.strerror}: {err.filename}") from None
    except ValueError as err:
        raise _fail(f"--acceptance-config: {err}") from None
    try:
        inp = app_stats.resolve_input(src, kw["posterior_dir"])
    except (ValueError, OSError) as err:
        raise _fail(f"--input: {err}") from None
    if inp.extracted:
        click.echo(f"extracted {inp.summary} (none, or older than a realization file); "
                   f"campaign: {inp.progress}")  # fmt: skip
    posterior_dir = kw["posterior_dir"] or (str(inp.root) if src.is_dir() else None)
    try:
        df = pd.read_csv(inp.summary, dtype={"run_id": str, "pair_id": str, "status": str})
    except (ValueError, OSError) as err:
        raise _fail(f"--input: cannot read {inp.summary}: {err}") from None
    df = acceptance.current_columns(df)  # older summary.csv column names
    sbc_mode = {None: "auto", True: "on", False: "off"}[kw["sbc"]]
    population = None
    pop_path = extract.population_path(inp.summary)
    interim = "point_estimate" in df and (df["point_estimate"] == "population").any()
    if pop_path.is_file() and interim:
        from ..analysis.pooled import load_population

        try:
            population = load_population(pop_path)
        except (OSError, ValueError, KeyError) as err:
            raise _fail(f"--input: population sidecar {pop_path} unreadable: {err}") from None
    try:
        res, fits, use = acceptance.analyze(df, requirement=name, estimator=kw["estimator"],
                                            acceptance=acc, sbc_mode=sbc_mode,
                                            n_boot=kw["n_boot"], point=kw["point"],
                                            weights=kw["weights"], population=population,
                                            include_unplanned=kw["include_unplanned"],
                                            target_sigma_m=kw["target_sigma_m"])  # fmt: skip
    except ValueError as err:
        raise _fail(f"--input: {err}") from None
    population = None  # the sidecar's draws (the pooled fit's input) are not needed further
    res["requirement"]["chosen"] = chosen
    out.mkdir(parents=True, exist_ok=True)
    plot_dir = stats_plots(df, use, res, fits, out, posterior_dir) if kw["plots"] else None
    text = json.dumps(to_strict_json(res), indent=2, allow_nan=False)
    (out / "bias_results.json").write_text(text + "\n")
    _print_stats(res, out, plot_dir)
    if report is not None:
        path = write_report(res, df, plot_dir, posterior_dir, Path(report),
                            command=_given_args(), use=use)  # fmt: skip
        click.echo(f"report: {path}")
    return EXIT_CODES[res["verdict"]]


def _numerical_line(points: list[dict[str, Any]], limit: float) -> str:
    """One line: the pooled fits' numerical error against their statistical error, and the
    grid points flagged (not converged, or above ``limit`` in m units)."""
    import math

    def val(p: dict[str, Any], key: str) -> float:  # unknown (None, NaN): infinite
        v = p.get(key)
        return math.inf if v is None or not math.isfinite(v) else float(v)

    num = max(max(val(p, "g1_num_err"), val(p, "g2_num_err")) for p in points)
    num_m = max(val(p, "num_err_m") for p in points)
    stat = min(min(val(p, "g1_err"), val(p, "g2_err")) for p in points)
    bad = [p for p in points if p.get("flagged", not p.get("converged", False))]
    head = (f"pooled fits' numerical error: at most {num:.2g} in g ({num_m:.2g} in m units) "
            f"against statistical errors of at least {stat:.2g}; ")  # fmt: skip
    if not bad:
        return f"  {head}all {len(points)} grid point(s) converged, none above {limit:g} in m"
    what = ", ".join(f"({p['g1_true']:g}, {p['g2_true']:g}) {p.get('status', 'not converged')}"
                     f" {val(p, 'num_err_m'):.2g}" for p in bad[:4])  # fmt: skip
    more = f" and {len(bad) - 4} more" if len(bad) > 4 else ""
    return (
        f"  WARNING {head}{len(bad)} of {len(points)} grid point(s) flagged (not "
        f"converged or above {limit:g} in m): {what}{more}"
    )


def _print_stats(res: dict[str, Any], out: Path, plot_dir: Path | None) -> None:
    from ..analysis.verdict import EXIT_CODES
    from ..core import flags as fl

    def num(v: Any) -> str:
        return "-" if v is None else f"{v:.3g}"

    req, acc = res["requirement"], res["acceptance"]
    click.echo(f"requirement {req['name']} (|m| < {acc['max_abs_m']:g}, |c| < "
               f"{acc['max_abs_c']:g}): {req['chosen']}")  # fmt: skip
    sc = res.get("scope") or {}
    if sc.get("unplanned_dropped"):
        click.echo(f"  left out {sc['unplanned_dropped']} realization(s) not in the campaign's "
                   "plan (summary.csv in_plan false; --include-unplanned uses them)")  # fmt: skip
    ex = ", ".join(f"{k}: {v}" for k, v in res["excluded"].items()) or "none"
    click.echo(f"{req['name']}, estimator {res['estimator']}, point estimate "
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
        click.echo(_numerical_line(pr["grid_points"], pr.get("num_err_m_max", 1e-4)))
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
    for line in (res.get("planning") or {}).get("lines", []):
        click.echo(line)
    v = res["verdict"]
    why = ""
    if sc.get("unfinished"):
        why = f" {sc['message']} (on the complete ones: {res['verdict_of_complete']})"
    click.echo(f"verdict: {v} (exit {EXIT_CODES[v]}){why} -> {out / 'bias_results.json'}")
    if plot_dir is not None:
        click.echo(f"plots: {plot_dir}")
