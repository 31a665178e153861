"""A campaign report as ONE self-contained HTML file (``bias-stats --report FILE``).

Everything is inline (CSS, figures as base64 PNG ``data:`` URIs), so the file
can be mailed to a colleague and opened anywhere without the campaign
directory: the verdict and the requirement it was judged against (with its source);
m and c with their errors and the error method; every acceptance criterion; the
planning lines (realizations to PASS if the true bias were 0, from the campaign's own
scatter); coverage; SBC; failures and exclusions by flag; the figures (stamps of a few
realizations: data, model at the estimate, residual); the config as run (YAML); and
the provenance (commands, versions, config hashes, machine).
"""

from __future__ import annotations

import base64
import html
import math
import platform
import shlex
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from .result import BiasResult, Design, GridPoint, Prior, Scope

__all__ = ["failures_by_flag", "provenance", "render_report"]

_CSS = """
body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
h1{font-size:1.5em} h2{font-size:1.15em;border-bottom:1px solid #ccc;margin-top:1.6em}
table{border-collapse:collapse;margin:.5em 0} td,th{border:1px solid #ccc;padding:.25em .6em;
text-align:left;font-variant-numeric:tabular-nums} th{background:#f3f3f3}
.verdict{display:inline-block;padding:.3em .8em;border-radius:4px;color:#fff;font-weight:bold}
.PASS{background:#2a7d2a} .FAIL{background:#b22} .INCONCLUSIVE{background:#c77a00}
.pass{color:#2a7d2a} .fail{color:#b22} .inconclusive{color:#c77a00}
figure{margin:1em 0} figure img{max-width:100%;border:1px solid #ddd}
figcaption{font-size:.9em;color:#555} code,pre{background:#f6f6f6}
pre{padding:.5em;overflow-x:auto;white-space:pre-wrap} td code{white-space:pre-wrap}
"""

_CAPTIONS = {
    "stamps.png": "A few realizations of distinct seeds: the data, the model at the "
    "estimate and the residual (data − model) / σ, in units of the pixel noise.",
    "residuals.png": "Residuals of the per-realization point estimate against the truth, with "
    "the fitted line m g_true + c and its ±1σ band (error method in the legend).",
    "coverage.png": "Observed coverage of the central 68% / 95% posterior intervals against "
    "the expected value and its two-sided binomial band.",
    "ranks.png": "Rank of the truth among the posterior draws (SBC when the truths were drawn "
    "from the prior, a PIT histogram otherwise); the 99% band is widened by the design "
    "effect of realizations that share a seed.",
    "worst_diagnostics.png": "Per-method diagnostics of the worst realizations, one per seed "
    "(the rule is in the figure's title).",
}


def _esc(v: Any) -> str:
    return html.escape(str(v))


def _num(v: Any, fmt: str = ".3e") -> str:
    return "–" if v is None else format(v, fmt)


def _or_dash(v: Any) -> Any:
    return "–" if v is None else v


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{_esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def failures_by_flag(df: Any) -> dict[str, int]:
    """Realizations per status (non-ok) and per failure flag name over the summary table."""
    counts: Counter[str] = Counter()
    for status in df["status"].astype(str):
        if status != "ok":
            counts[f"status: {status}"] += 1
    if "flags" in df.columns:  # an all-empty column is read as float NaN
        for flags in df["flags"].astype(object).where(df["flags"].notna(), ""):
            for name in filter(None, str(flags).split("|")):
                counts[name] += 1
    return dict(sorted(counts.items()))


def provenance(
    argv: Sequence[str],
    posterior_attrs: Sequence[Mapping[str, Any]] = (),
    run_commands: Sequence[str] = (),
) -> dict[str, str]:
    """Commands (this one, and the campaign's bias-run lines), versions, config hashes and
    machine of a report: ``{row label: text}``, the report's provenance table in order
    (``posterior_attrs``: the attributes of the realizations' ``posterior.nc`` files)."""

    def v(pkg: str) -> str:
        try:
            return version(pkg)
        except PackageNotFoundError:
            return "not installed"

    def values(key: str) -> list[str]:
        return sorted({str(a[key]) for a in posterior_attrs if key in a})

    return {
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": shlex.join(argv),
        "bias-run commands (the campaign's commands.txt, last 20)": "\n".join(run_commands)
        or "unknown (no --posterior-dir, or no commands.txt)",
        "versions (analysis)": ", ".join(
            f"{p} {v(p)}" for p in ("shearbatch", "jax", "numpyro", "arviz", "numpy")
        ) + f", python {sys.version.split()[0]}",
        "machine (analysis)": f"{platform.node()}: {platform.platform()}, "
        f"{platform.machine()}, {__import__('os').cpu_count()} CPU(s)",
        "config hash (runs)": ", ".join(values("config_hash")) or "unknown (no --posterior-dir)",
        "shearbatch version (runs)": ", ".join(values("shearbatch_version")) or "unknown",
        "inference method (runs)": ", ".join(values("inference_method")) or "unknown",
        "precision (runs)": ", ".join(values("dtype")) or "unknown",
        "realizations whose files were read for this": str(len(posterior_attrs)),
    }  # fmt: skip


def _figure_html(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    cap = _CAPTIONS.get(path.name, path.name)
    return (f'<figure><img alt="{_esc(path.name)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{_esc(path.name)}: {_esc(cap)}</figcaption></figure>")  # fmt: skip


def render_report(
    res: BiasResult,
    figures: Sequence[Path],
    flags: Mapping[str, int],
    prov: Mapping[str, str],
    config: Mapping[str, str] | None = None,
) -> str:
    """The whole HTML document of a ``bias-stats`` result ``res``; ``config``: ``{text,
    source}`` of the config as run (YAML)."""
    v = res.verdict
    req = res.requirement
    sc = res.scope or Scope()
    unfinished = f" — {_esc(sc.message)}" if sc.unfinished else ""
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>shearbatch report: {_esc(v)}</title><style>{_CSS}</style></head><body>",
        "<h1>Shear-bias campaign report</h1>",
        f"<p><span class='verdict {v}' id='verdict'>{_esc(v)}</span>{unfinished} "
        f"requirement <b>{_esc(req.name)}</b>: used {res.n_used} of "
        f"{res.n_realizations} realization(s) "
        f"({res.n_seeds} independent seeds); estimator {_esc(res.estimator)}, point "
        f"estimate {_esc(res.point_estimate)}, weights {_esc(res.weights)}.</p>",
        "<p>Model: g_hat = (1 + m) g_true + c, per component. A criterion PASSes when "
        f"|x| + qσ ≤ threshold, FAILs when |x| − qσ &gt; threshold (z = {res.z:g}, q its "
        "Student-t quantile with seeds − 1 degrees of freedom), and is INCONCLUSIVE "
        "otherwise.</p>",
    ]
    if req.source:
        parts.append(
            f"<p><b>Requirement {_esc(req.name)}</b> ({_esc(req.for_ or '')}"
            f"; chosen {_esc(req.chosen or '')}): {_esc(req.source)}.</p>"
        )
    if sc.unplanned_dropped:
        parts.append(
            f"<p><b>Note:</b> {sc.unplanned_dropped} realization(s) not in the "
            "campaign's plan were left out (bias-stats --include-unplanned).</p>"
        )
    if res.noise_bias is not None:
        parts.append(f"<p><b>Note:</b> {_esc(res.noise_bias.message)}</p>")
    if res.prior is not None and res.prior.dominated:
        parts.append("<p><b>Warning:</b> prior-dominated campaign: the shear prior pulls the "
                     "estimates (use the flat default prior for calibration).</p>")  # fmt: skip
    rows = []
    for k, x, err, why in res.values():
        c = res.criterion(f"|{k}|")
        status = c.status if c is not None else "not a criterion"
        value = _num(x) if x is not None else f"undefined ({_esc(why or '')})"
        rows.append([k, value, _num(err, ".2e"), _esc(res.fits.of(f"g{k[1]}").error_label),
                     f"<span class='{status}'>{_esc(status)}</span>",
                     _num(c.threshold if c is not None else None, ".3g")])  # fmt: skip
    parts += ["<h2>m and c</h2>",
              _table(["quantity", "value", "± error", "error method", "status", "threshold"],
                     rows)]  # fmt: skip
    rows = []
    for c in res.criteria:
        thr = c.threshold
        thr = f"[{thr[0]:.3g}, {thr[1]:.3g}]" if isinstance(thr, list) else f"{thr:.3g}"
        rows.append([_esc(c.name), _num(c.value, ".3g"), _num(c.err, ".2g"),
                     _esc((c.error_method or "") + (f", q = {c.quantile:.3g}"
                                                    if c.quantile else "")), thr,
                     f"<span class='{c.status}'>{_esc(c.status.upper())}</span>",
                     _esc(c.reason or "") + (f" (needs ~{c.n_needed} realizations)"
                                             if c.n_needed and "realizations"
                                             not in (c.reason or "") else "")])  # fmt: skip
    parts += ["<h2>Acceptance criteria</h2>",
              _table(["criterion", "value", "± error", "error method", "threshold", "status",
                      "note"], rows)]  # fmt: skip
    if (side := res.estimators) is not None:  # host estimators beside the method (compare.py)
        from .compare import side_by_side

        head, srows, note = side_by_side(side)
        parts += ["<h2>Estimators on the same realizations</h2>", f"<p>{_esc(note)}</p>",
                  _table(head, [[_esc(x) for x in r] for r in srows])]  # fmt: skip
    if res.planning is not None and res.planning.lines:
        parts += ["<h2>Planning</h2>",
                  f"<pre id='planning'>{_esc(chr(10).join(res.planning.lines))}</pre>"]  # fmt: skip
    rows = []
    for comp, levels in res.coverage.items():
        for lev, r in levels.items():
            if not r.tested:
                rows.append([comp, lev, "–", "–", "–", "–", _esc(r.skipped or "")])
                continue
            band = r.band or [math.nan, math.nan]
            rows.append([comp, f"{float(lev):.0%}", f"{r.observed:.3f}", f"{r.expected:.2f}",
                         f"[{band[0]:.3f}, {band[1]:.3f}]", f"{r.n} ({r.n_eff})",
                         _esc(r.status or "")])  # fmt: skip
    parts += ["<h2>Coverage</h2>",
              _table(["component", "interval", "observed", "expected", "band",
                      "n (independent seeds)", "status"], rows)]  # fmt: skip
    sbc = res.sbc
    parts.append("<h2>Simulation-based calibration</h2>")
    if sbc.skipped is not None:
        parts.append(f"<p>Skipped: {_esc(sbc.skipped)}</p>")
    else:
        rows = []
        for comp, r in sbc.items():
            crit = next((c for c in res.criteria if c.name.startswith(f"SBC {comp}")), None)
            rows.append([comp, _or_dash(r.n), _or_dash(r.n_eff), _num(r.p_value, ".3g"),
                         _num(r.ks_p_value, ".3g"),
                         _esc((crit.status if crit else None) or r.status or ""),
                         _esc(r.reason or r.skipped or "")])  # fmt: skip
        parts.append(_table(["component", "ranks", "independent seeds", "χ² p-value",
                             "KS p-value", "status", "note"], rows))  # fmt: skip
    parts.append("<h2>Failures and exclusions</h2>")
    counts = [["failed", res.n_failed], ["incomplete", res.n_incomplete],
              ["corrupt", res.n_corrupt]]  # fmt: skip
    counts += [[f"excluded: {_esc(k)}", n] for k, n in res.excluded.items()]
    counts += [[f"flag: {_esc(k)}", n] for k, n in flags.items() if not k.startswith("status")]
    parts.append(_table(["what", "realizations"], counts))
    parts.append("<h2>Figures</h2>")
    parts += [_figure_html(p) for p in figures] or ["<p>No figures (--no-plots).</p>"]
    if config:
        parts += ["<h2>Config as run</h2>", f"<p>From {_esc(config.get('source', ''))}.</p>",
                  f"<pre id='config'>{_esc(config['text'])}</pre>"]  # fmt: skip
    parts += ["<h2>Provenance</h2>",
              _table(["", ""], [[_esc(k), f"<code>{_esc(val)}</code>"] for k, val in prov.items()]),
              "</body></html>"]  # fmt: skip
    return "\n".join(parts) + "\n"


# --------------------------------------------------------------------------- the text summary


def summary_lines(res: BiasResult, results: Path | None = None,
                  plot_dir: Path | None = None) -> list[str]:  # fmt: skip
    """``bias-stats``' printed summary of ``res``: the requirement, what was used and left
    out, the notes and warnings, m and c, every criterion, the planning and the verdict
    (``-> results``, the bias_results.json written; ``plot_dir``: where the figures are)."""
    from ..core import failure_flags as fl
    from .verdict import EXIT_CODES

    def num(v: Any) -> str:
        return "-" if v is None else f"{v:.3g}"

    req, acc, sc = res.requirement, res.acceptance, res.scope or Scope()
    out = [f"requirement {req.name} (|m| < {acc.max_abs_m:g}, |c| < "
           f"{acc.max_abs_c:g}): {req.chosen}"]  # fmt: skip
    if sc.unplanned_dropped:
        out.append(f"  left out {sc.unplanned_dropped} realization(s) not in the campaign's "
                   "plan (summary.csv in_plan false; --include-unplanned uses them)")  # fmt: skip
    ex = ", ".join(f"{k}: {v}" for k, v in res.excluded.items()) or "none"
    out.append(f"{req.name}, estimator {res.estimator}, point estimate "
               f"{res.point_estimate}, weights {res.weights}: used {res.n_used} of "
               f"{res.n_realizations} realization(s) ({res.n_seeds} independent seeds); "
               f"excluded: {ex}")  # fmt: skip
    if sc.unfinished:
        out.append(_unfinished_line(res, sc))
    if (pr := res.population) is not None:
        points = pr.grid_points or []
        worst = min(p.ess_fraction_min for p in points)
        coll = sum(p.n_collapsed for p in points)
        khat = [p.n_khat_high for p in points]
        khat_s = ("" if any(k is None for k in khat) else
                  f"; {sum(khat)} with Pareto k-hat above its threshold")  # fmt: skip
        out.append(f"  population estimator pooled per grid point: {pr.n_galaxies} galaxies "
                   f"of {pr.n_seeds} seeds over {len(points)} grid point(s); "
                   f"smallest per-galaxy ESS {worst:.2g} of the draws, {coll} galaxies with "
                   f"ESS below 10% at the estimate{khat_s}")  # fmt: skip
        limit = pr.num_err_m_max if pr.num_err_m_max is not None else 1e-4
        out.append(_numerical_line(points, limit))
    for name, n in (res.warnings or {}).items():
        out.append(f"  WARNING {name} in {n} used realization(s): {fl.FLAGS[name][1]}")
    des = res.design or Design()
    if (des.rotations or 1) > 1:
        out.append(f"  ring design: {des.rotations} rotations per seed"
                   f"{', paired' if des.paired else ''}; errors resample whole seeds; "
                   f"incomplete rings left out: {des.incomplete_rings_left_out}")  # fmt: skip
    if res.noise_bias is not None:
        out.append(f"  NOTE {res.noise_bias.message}")
    pr = res.prior or Prior()
    if pr.dominated:
        out.append(f"  WARNING prior-dominated: the shear prior pulls the estimates by a median "
                   f"{max(v for v in (pr.shrinkage_g1, pr.shrinkage_g2) if v):.2g} "
                   f"(m shifted by about that much); use the flat default prior "
                   f"(gal.shear.type: UniformDisk) for calibration")  # fmt: skip
    for k, x, err, why in res.values():
        label = res.fits.of(f"g{k[1]}").error_label
        if x is None:
            out.append(f"  {k} = undefined ({why or ''}; not a criterion)")
        elif err is None:
            out.append(f"  {k} = {x:+.3e} (no error: {label})")
        else:
            out.append(f"  {k} = {x:+.3e} ± {err:.2e} ({label})")
    out.append(f"criteria (PASS: |x| + q·σ <= threshold; FAIL: |x| - q·σ > threshold; "
               f"z = {res.z:g}, q = its Student-t quantile with seeds - 1 dof):")  # fmt: skip
    for c in res.criteria:
        thr = c.threshold
        thr = f"[{thr[0]:.3g}, {thr[1]:.3g}]" if isinstance(thr, list) else f"{thr:.3g}"
        err = f" ± {c.err:.2g}" if c.err is not None else ""
        if err and c.error_method:
            err += f" ({c.error_method}"
            err += f", q = {c.quantile:.3g})" if c.quantile is not None else ")"
        line = f"  {'[' + c.status.upper() + ']':>14} {c.name:<20} {num(c.value)}{err}"
        line += f" (threshold {thr})"
        if c.status == "inconclusive":
            line += f": {c.reason}" if c.reason else ""
            if c.n_needed is not None and "realizations" not in c.reason:
                line += f"; needs ~{c.n_needed} realizations"
        elif c.status == "fail" and c.reason:
            line += f": {c.reason}"
        out.append(line)
    out += (res.planning.lines or []) if res.planning is not None else []
    if (side := res.estimators) is not None:  # host estimators beside the method (compare.py)
        from .compare import side_lines

        out += side_lines(side)
    v = res.verdict
    why = ""
    if sc.unfinished:
        why = f" {sc.message} (on the complete ones: {res.verdict_of_complete})"
    out.append(f"verdict: {v} (exit {EXIT_CODES[v]}){why}"
               + (f" -> {results}" if results is not None else ""))  # fmt: skip
    if plot_dir is not None:
        out.append(f"plots: {plot_dir}")
    return out


def _unfinished_line(res: BiasResult, sc: Scope) -> str:
    """One line of an unfinished campaign (:mod:`shearbatch.analysis.scope`): how many
    planned realizations are not done (incomplete, corrupt), and that the criteria judge the
    complete ones."""
    n_incomplete, n_corrupt = res.n_incomplete or 0, res.n_corrupt or 0
    corrupt = f" and {n_corrupt} corrupt" if n_corrupt else ""
    return (f"  unfinished: {n_incomplete} incomplete{corrupt} of {sc.n_planned} planned "
            f"realization(s) (not started, interrupted or damaged; the same bias-run command "
            f"does them): the criteria judge the {sc.n_complete} complete ones, the verdict is "
            f"INCONCLUSIVE until the campaign is finished")  # fmt: skip


def _numerical_line(points: Sequence[GridPoint], limit: float) -> str:
    """One line: the pooled fits' numerical error against their statistical error, and the
    grid points flagged (not converged, or above ``limit`` in m units)."""

    def val(v: float | None) -> float:  # unknown (None, NaN): infinite
        return math.inf if v is None or not math.isfinite(v) else float(v)

    def flagged(p: GridPoint) -> bool:  # files before the flag: not converged
        return p.flagged if p.flagged is not None else not p.converged

    num = max(max(val(p.g1_num_err), val(p.g2_num_err)) for p in points)
    num_m = max(val(p.num_err_m) for p in points)
    stat = min(min(val(p.g1_err), val(p.g2_err)) for p in points)
    bad = [p for p in points if flagged(p)]
    head = (f"pooled fits' numerical error: at most {num:.2g} in g ({num_m:.2g} in m units) "
            f"against statistical errors of at least {stat:.2g}; ")  # fmt: skip
    if not bad:
        return f"  {head}all {len(points)} grid point(s) converged, none above {limit:g} in m"
    what = ", ".join(f"({p.g1_true:g}, {p.g2_true:g}) {p.status or 'not converged'}"
                     f" {val(p.num_err_m):.2g}" for p in bad[:4])  # fmt: skip
    more = f" and {len(bad) - 4} more" if len(bad) > 4 else ""
    return (
        f"  WARNING {head}{len(bad)} of {len(points)} grid point(s) flagged (not "
        f"converged or above {limit:g} in m): {what}{more}"
    )
