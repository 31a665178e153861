"""Stage 3 as a whole: a summary table -> fits, coverage, SBC and the acceptance verdict.

:func:`analyze` selects the usable rows (status ``ok`` and passed convergence;
the others are counted by reason), fits ``g_hat = (1 + m) g_true + c`` per
component with the estimator of :mod:`shearbatch.analysis.stats` on the chosen
point estimate (``mean``, ``median`` or ``mode``) and weights (``none`` by
default; ``inverse-variance`` is biased at low S/N), measures coverage and
(when the truths were drawn from the prior) SBC, and judges the level's
acceptance criteria with the three-valued rule of
:mod:`shearbatch.analysis.verdict`. Each criterion is reported as ``{name,
value, err, threshold, z, status, n_needed, passed, error_method, reason}``
with ``status`` ``pass`` | ``fail`` | ``inconclusive``; the campaign's
``verdict`` is ``FAIL`` if any fails, else ``INCONCLUSIVE`` if any is
inconclusive, else ``PASS`` (``passed`` is true only for ``PASS``).

- ``|m1|, |m2|, |c1|, |c2|``: ``pass`` when ``|x| + q sigma <= max_abs``,
  ``fail`` when ``|x| - q sigma > max_abs``, else ``inconclusive`` with the
  realizations needed; ``q = t_{G-1}(Phi(z))`` is the Student-t quantile for an
  error estimated from ``G`` seeds (14.0 with 2 seeds at ``z = 2``, 2.07 with 40;
  :mod:`shearbatch.analysis.verdict`), reported as the criterion's ``quantile``
  and ``dof``. An undefined ``m`` (constant truth in that component)
  is not a criterion; with both undefined (one shear value only) :func:`analyze`
  refuses the table (``ValueError``: ``bias-stats`` exits 2), and :func:`criteria`
  alone reports ``|m|`` as ``inconclusive``.
- coverage (68% and 95%, per component): two-sided binomial band at
  ``coverage_z``; SBC: chi-square p-value >= ``sbc_p_min``. Both need
  ``min_seeds`` independent seeds, else ``inconclusive`` ("too few to test").
- fraction converged >= ``min_frac_converged`` (a count: pass or fail).

Default criteria per level live in :data:`ACCEPTANCE`; :func:`load_acceptance`
reads overrides from YAML.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

from ..core.priors import PRIOR_PULL_MAX, campaign_pull
from ..schema import requirements as rq
from .stats import (
    WEIGHTS,
    Fit,
    complete_rings,
    coverage,
    error_label,
    fit_offset,
    fit_paired,
    fit_regression,
    has_pairs,
    n_independent,
    pair_table,
    sbc,
)
from .verdict import decide, overall, plan, quantile

__all__ = [
    "ACCEPTANCE",
    "LEVELS",
    "POINT_ESTIMATES",
    "analyze",
    "criteria",
    "current_columns",
    "load_acceptance",
    "usable_rows",
]

logger = logging.getLogger(__name__)

LEVELS = ("level_0", "level_1", "level_2")
#: Per-realization point estimates: summary.csv columns ``g1_<point>``, ``g2_<point>``
#: (``mode``: the MAP / Laplace centre from convergence.json's ``mode``).
POINT_ESTIMATES = ("mean", "median", "mode")
#: summary.csv columns of older versions still read: old name -> current name
LEGACY_COLUMNS = {"estimate": "point_estimate"}


def current_columns(df: Any) -> Any:
    """``df`` (a summary table) with the columns of older versions renamed to their
    current names (:data:`LEGACY_COLUMNS`; the same frame when there is none)."""
    old = {k: v for k, v in LEGACY_COLUMNS.items() if k in df.columns and v not in df.columns}
    return df.rename(columns=old) if old else df


#: Default acceptance per level (the old --level names; the presets, with their sources, are
#: :data:`shearbatch.schema.requirements.REQUIREMENTS`): |m| and |c| ceilings (per
#: component) judged at ``z`` standard errors (2.0: one-sided ~97.7%), coverage inside its
#: two-sided ``coverage_z`` binomial band, ``min_seeds`` independent seeds to test coverage
#: or SBC, minimum fraction of the complete realizations usable, SBC p-value floor.
ACCEPTANCE: dict[str, dict[str, float]] = {lev: rq.criteria_of(lev) for lev in LEVELS}
REQUIRED_COLUMNS = ("run_id", "g1_true", "g2_true", "g1_mean", "g2_mean", "g1_std", "g2_std",
                    "status", "passed_convergence", "seed")  # fmt: skip
COVERAGE_LEVELS = {"0.68": ("q16", "q84"), "0.95": ("q025", "q975")}
M_UNDEFINED = "m undefined: need at least two distinct g_true values"


def _ok_converged(df: Any) -> tuple[Any, Any]:
    status = df["status"].fillna("").astype(str)
    conv = df["passed_convergence"].astype(str).str.lower().isin(["true", "1", "1.0"])
    return status, conv


def prior_report(use: Any) -> dict[str, Any]:
    """Median predicted pull of the shear prior on the estimates (-m it causes), per
    component, and whether the campaign is prior-dominated (pull > PRIOR_PULL_MAX)."""
    out: dict[str, Any] = {"threshold": PRIOR_PULL_MAX}
    pulls = {}
    for c in ("g1", "g2"):
        col = f"prior_shrinkage_{c}"
        v = use[col].to_numpy(float) if col in use else np.array([])
        pulls[c] = v[np.isfinite(v)]
        out[f"shrinkage_{c}"] = campaign_pull({c: pulls[c]})
    pull = campaign_pull(pulls)
    out["dominated"] = pull is not None and pull > PRIOR_PULL_MAX
    return out


#: below this matched-filter S/N a point estimate of the joint mode is reported as carrying
#: noise bias (of order (S/N)^-2; measured per method: :data:`MEASURED`)
NOISE_BIAS_SNR = 50.0
#: where the published measurements the notes point to live: the documentation page and
#: its sections (the values, each with its command and commit, are kept there and in
#: results/validation/, so re-measuring never edits this module)
MEASURED = "docs/validation.md"
MEASURED_NOISE_BIAS = f"{MEASURED}, 'Noise bias and planning'"
MEASURED_LEVELS = f"{MEASURED}, 'Levels 1 and 2'"


def noise_bias_note(use: Any) -> dict[str, Any] | None:
    """For campaigns at low S/N (median below :data:`NOISE_BIAS_SNR`): the expected order
    of the joint mode's noise bias (MAP), or the warning that averaged posterior means
    (NUTS, VI) are no unbiased shear estimator there; each names the page where the
    measured values are."""
    if "point_estimate" not in use or "snr" not in use or not len(use):
        return None
    estimates = set(use["point_estimate"].dropna().astype(str))
    snr = use["snr"].to_numpy(float)
    snr = snr[np.isfinite(snr)]
    if not snr.size or np.median(snr) >= NOISE_BIAS_SNR or len(estimates) != 1:
        return None
    med = float(np.median(snr))
    if estimates == {"population"}:  # the interim model's marginal likelihood: no such note
        return None
    if estimates != {"mode"}:  # posterior means / medians (NUTS, VI)
        return {"median_snr": med, "expected_order": None,
                "message": "per-realization posterior means (or medians) of g marginalise the "
                           "intrinsic ellipticity: where it is a free latent their average "
                           f"is not an unbiased shear estimator at survey S/N (median {med:.3g})"
                           "; NUTS's and VI's measured m for one exponential galaxy: "
                           f"{MEASURED_NOISE_BIAS}; the survey configs use the joint mode "
                           "(--method map); the population estimator (inference.shear_model: "
                           "interim) pools marginal likelihoods instead "
                           "(docs/results/population_estimator.md)"}  # fmt: skip
    return {"median_snr": med, "expected_order": med**-2,
            "message": f"MAP estimates are joint modes: noise bias of order (S/N)^-2 = "
                       f"{med**-2:.1g} at the median S/N {med:.3g}; measured m for one "
                       f"galaxy per realization against S/N: {MEASURED_NOISE_BIAS}; it can be "
                       "far larger with many small galaxies sharing one shear: "
                       f"{MEASURED_LEVELS}; the population estimator (inference.shear_model: "
                       "interim) integrates the nuisances instead "
                       "(docs/results/population_estimator.md)"}  # fmt: skip


def design_report(use: Any) -> dict[str, Any]:
    """The campaign's design as the fit sees it: pairs, rotations per seed, the error
    groups (seeds) and the rings left out of the fit because a copy is missing."""
    nrot = use["n_rotations"].to_numpy(float) if "n_rotations" in use.columns else np.array([])
    nrot = nrot[np.isfinite(nrot)]
    _, incomplete = complete_rings(use)
    pairs = "pair_sign" in use.columns and bool(use["pair_sign"].isin([1, -1]).any())
    return {"paired": pairs, "rotations": int(nrot.max()) if nrot.size else 1,
            "error_groups": "seed", "incomplete_rings_left_out": incomplete}  # fmt: skip


def warning_counts(use: Any) -> dict[str, int]:
    """``{flag: realizations}`` of the warning flags (:data:`shearbatch.core.flags.WARNINGS`)
    among the USED rows (e.g. ``POP_WEIGHTS_COLLAPSED``: a galaxy's population weights
    collapsed; the realization is kept)."""
    from ..core import flags as fl

    if "flags" not in use:
        return {}
    names = use["flags"].map(lambda v: v.split("|") if isinstance(v, str) else [])
    return {n: int(names.apply(lambda fs, n=n: n in fs).sum()) for n in fl.names(fl.WARNINGS)
            if names.apply(lambda fs, n=n: n in fs).any()}  # fmt: skip


def pd_numeric(col: Any) -> np.ndarray:
    """A column as floats (unparseable cells become NaN)."""
    import pandas as pd

    return pd.to_numeric(col, errors="coerce").to_numpy(float)


def usable_rows(df: Any, point: str = "mean") -> tuple[Any, dict[str, int]]:
    """The ``ok`` rows that pass convergence with finite truths and ``point`` estimates,
    and ``{why excluded: count}``."""
    status, conv = _ok_converged(df)
    cols = ["g1_true", "g2_true", f"g1_{point}", f"g2_{point}"]
    finite = np.isfinite(df[cols].to_numpy(float)).all(1)
    why = {f"status {s}": int((status == s).sum()) for s in sorted(set(status)) if s != "ok"}
    why["did not pass convergence"] = int(((status == "ok") & ~conv).sum())
    why["non-finite truth or estimate"] = int(((status == "ok") & conv & ~finite).sum())
    keep = (status == "ok").to_numpy() & conv.to_numpy() & finite
    if "flags" in df:  # every excluded row counted by each of its named flags
        names = df.loc[~keep, "flags"].dropna().astype(str)
        for flag in sorted({f for v in names for f in v.split("|") if f}):
            why[f"flag {flag}"] = int(names.str.split("|").apply(lambda fs, f=flag: f in fs).sum())
    return df[keep].reset_index(drop=True), {k: v for k, v in why.items() if v}


def resolve_point(df: Any, point: str) -> str:
    """``auto``: the mode for campaigns of a joint-mode method (MAP; the mean of Laplace
    draws mapped through a bounded support's transform is not the MAP, and is measurably
    more biased: docs/validation.md, 'Shear prior'), the posterior mean otherwise."""
    if point != "auto":
        return point
    est = set(df["point_estimate"].dropna().astype(str)) if "point_estimate" in df else set()
    has_mode = "g1_mode" in df and df["g1_mode"].notna().any()
    return "mode" if est == {"mode"} and has_mode else "mean"


def _check_point(df: Any, point: str) -> None:
    """``ValueError`` when the ``point`` columns are absent or empty where the mean is not."""
    if point not in POINT_ESTIMATES:
        raise ValueError(f"unknown point estimate {point!r}; use {', '.join(POINT_ESTIMATES)}")
    cols = [f"g1_{point}", f"g2_{point}"]
    missing = [c for c in cols if c not in df.columns]
    old = " (convergence.json without a mode: an older bias-run)" if point == "mode" else ""
    if missing:
        raise ValueError(f"point estimate {point}: missing columns: {', '.join(missing)}; "
                         "re-run bias-extract or use --point mean")  # fmt: skip
    status, conv = _ok_converged(df)
    has_mean = np.isfinite(df[["g1_mean", "g2_mean"]].to_numpy(float)).all(1)
    empty = (status == "ok").to_numpy() & conv.to_numpy() & has_mean & ~np.isfinite(
        df[cols].to_numpy(float)).all(1)  # fmt: skip
    if empty.any():
        raise ValueError(f"point estimate {point}: {', '.join(cols)} empty in {int(empty.sum())} "
                         f"converged row(s){old}; use --point mean or median")  # fmt: skip


def _col(df: Any, name: str) -> np.ndarray | None:
    return df[name].to_numpy(float) if name in df.columns else None


def fit_component(
    df: Any,
    comp: str,
    estimator: str,
    n_boot: int = 1000,
    seed: int = 0,
    *,
    point: str = "auto",
    weights: str = "none",
) -> Fit:
    """``(m, c)`` of component ``comp`` (``"g1"``/``"g2"``) on usable rows."""
    t, h, s = (
        df[f"{comp}_true"].to_numpy(float),
        df[f"{comp}_{point}"].to_numpy(float),
        _col(df, f"{comp}_std"),
    )
    groups = df["seed"].astype(str).to_numpy()
    kw = {"weights": weights, "n_boot": n_boot, "seed": seed}
    if np.ptp(t) <= 1e-12:
        why = f"{comp}_true is constant ({t[0]:g}) over the campaign: slope undefined"
        return fit_offset(t, h, s, groups, reason=why, **kw)
    if estimator == "paired":
        ip, im = pair_table(df["pair_id"].to_numpy(object), df["pair_sign"].to_numpy(float))
        sp = None if s is None else s[ip]
        sm = None if s is None else s[im]
        if np.all(t[ip] > 0) and np.allclose(t[ip], -t[im]):
            return fit_paired(t[ip], h[ip], h[im], sp, sm, groups[ip], **kw)
        logger.info("%s: truth not flipped within pairs; using the grid regression", comp)
    return fit_regression(t, h, s, groups, **kw)


def _criterion(
    name: str,
    value: Any,
    threshold: Any,
    status: str,
    *,
    err: float | None = None,
    z: float | None = None,
    n_needed: int | None = None,
    error_method: str | None = None,
    reason: str = "",
    quantile: float | None = None,
    dof: int | None = None,
    planning: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One criterion; ``quantile`` / ``dof``: the Student-t bound of an m or c criterion,
    ``planning``: its :func:`shearbatch.analysis.verdict.plan` (None for the others)."""
    p = planning or {}
    return {"name": name, "value": value, "err": err, "threshold": threshold, "z": z,
            "status": status, "n_needed": n_needed, "passed": status == "pass",
            "error_method": error_method, "reason": reason, "quantile": quantile,
            "dof": dof, "detected": p.get("detected"),
            "n_pass_if_zero": p.get("n_pass_if_zero")}  # fmt: skip


def _scaled(n_used: int, n_seeds: int, min_seeds: int) -> int:
    """Realizations for ``min_seeds`` seeds at the campaign's realizations per seed."""
    return math.ceil(n_used * min_seeds / max(n_seeds, 1))


def criteria(
    fits: dict[str, Fit],
    cov: dict[str, Any],
    sbc_res: dict[str, Any],
    frac: float,
    acc: dict,
    n_used: int | None = None,
) -> list[dict[str, Any]]:
    """Acceptance criteria, each ``{name, value, err, threshold, z, status, n_needed, ...}``."""
    out = []
    z = acc["z"]
    n_used = n_used if n_used is not None else max(f.n for f in fits.values())
    for comp, f in fits.items():
        k = comp[1]
        for q, x, err, thr in (("m", f.m, f.m_err, acc["max_abs_m"]),
                               ("c", f.c, f.c_err, acc["max_abs_c"])):  # fmt: skip
            if x is None:
                continue  # undefined: not a criterion (both undefined: analyze() refuses)
            status, need, why = decide(x, err, thr, z, n_used, f.n_groups)
            out.append(_criterion(f"|{q}{k}|", abs(x), thr, status, err=err, z=z,
                                  n_needed=need, error_method=error_label(f), reason=why,
                                  quantile=quantile(z, f.n_groups),
                                  dof=max(f.n_groups - 1, 0),
                                  planning=plan(x, err, thr, z, n_used, f.n_groups)))  # fmt: skip
    for comp, levels in cov.items():
        for lev, r in levels.items():
            if "observed" not in r:
                continue
            need = _scaled(r["n"], r["n_eff"], r["min_seeds"]) if r["status"] == "inconclusive" \
                else None  # fmt: skip
            out.append(_criterion(f"coverage {comp} {float(lev):.0%}", r["observed"], r["band"],
                                  r["status"], err=r["se"], z=r["z"], n_needed=need,
                                  error_method=f"binomial over {r['n_eff']} seeds",
                                  reason=r["reason"]))  # fmt: skip
    for comp, r in sbc_res.items():
        if not isinstance(r, dict) or "skipped" in r:
            continue
        thr, p = acc["sbc_p_min"], r.get("p_value")
        if r.get("status") == "inconclusive":
            status, why = "inconclusive", r["reason"]
            need = _scaled(r["n"], r["n_eff"], r["min_seeds"])
        else:
            status, why, need = (
                ("pass", "", None) if p >= thr else ("fail", "ranks not uniform", None)
            )
        r["status"] = status
        out.append(_criterion(f"SBC {comp} uniformity p", p, thr, status, n_needed=need,
                              error_method=f"chi-square over {r['n']} ranks", reason=why))  # fmt: skip
    thr = acc["min_frac_converged"]
    out.append(_criterion("fraction converged", frac, thr, "pass" if frac >= thr else "fail"))
    return out


def analyze(
    df: Any,
    *,
    level: str = "level_0",
    requirement: str | None = None,
    estimator: str = "auto",
    acceptance: dict[str, float] | None = None,
    sbc_mode: str = "auto",
    n_boot: int = 1000,
    seed: int = 0,
    point: str = "auto",
    weights: str = "none",
    population: dict[str, Any] | None = None,
    include_unplanned: bool = False,
    target_sigma_m: float | None = None,
) -> tuple[dict[str, Any], dict[str, Fit], Any]:
    """The whole stage-3 analysis of a summary table.

    ``requirement``: a preset of :data:`shearbatch.schema.requirements.REQUIREMENTS` (or
    an alias), judged instead of ``level`` (an alias kept for the old ``--level``).
    Rows whose ``in_plan`` is false (realization directories that are not in the
    campaign's plan) are dropped unless ``include_unplanned``; an unfinished campaign
    (rows ``incomplete`` or ``corrupt``: planned work not done) is INCONCLUSIVE, its
    fraction converged counted over the complete realizations
    (:func:`shearbatch.analysis.scope.scope`). ``target_sigma_m``: add the realizations for
    that standard error of m to the ``planning`` section.

    ``population`` (:func:`shearbatch.analysis.pooled.load_population`): for an
    interim-model campaign, m and c come from the population estimator pooled per grid
    point (:mod:`shearbatch.analysis.pooled`) instead of per-realization estimates.

    Returns ``(results, fits, usable)``: the JSON-ready ``bias_results`` dict,
    the :class:`Fit` per component and the usable rows. Raises ``ValueError``
    (one line) on bad input: missing columns, unknown level, estimator, point
    estimate or weights, no usable rows, ``paired`` without pairs, ``mode``
    without modes, ``inverse-variance`` without finite stds.
    """
    if requirement is None and level not in LEVELS:
        raise ValueError(f"unknown level {level!r}; use one of {', '.join(LEVELS)}")
    name = rq.resolve(requirement if requirement is not None else level)
    df = current_columns(df)
    if weights not in WEIGHTS:
        raise ValueError(f"unknown weights {weights!r}; use {' or '.join(WEIGHTS)}")
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"missing columns: {', '.join(missing)}")
    from .scope import scope

    df, sc = scope(df, include_unplanned)
    point = resolve_point(df, point)
    _check_point(df, point)
    acc = {**rq.criteria_of(name), **(acceptance or {})}
    min_seeds = int(acc["min_seeds"])
    status = df["status"].fillna("").astype(str)
    for c in ("g1_true", "g2_true"):
        bad = (status == "ok").to_numpy() & ~np.isfinite(pd_numeric(df[c]))
        if bad.any():
            raise ValueError(f"{c}: not a finite number in {int(bad.sum())} ok row(s) (e.g. "
                             f"{df['run_id'][bad].iloc[0]}); re-run bias-extract")  # fmt: skip
    use, excluded = usable_rows(df, point)
    if len(use) == 0:
        raise ValueError(f"no usable rows (excluded: {excluded or 'none'})")
    pairs = "pair_id" in use.columns and "pair_sign" in use.columns and has_pairs(
        use["pair_id"].to_numpy(object), use["pair_sign"].to_numpy(float))  # fmt: skip
    if estimator == "auto":
        estimator = "paired" if pairs else "regression"
    elif estimator == "paired" and not pairs:
        raise ValueError("estimator paired: no complete +g/-g pairs (pair_id, pair_sign)")
    elif estimator != "regression" and estimator != "paired":
        raise ValueError(f"unknown estimator {estimator!r}; use regression, paired or auto")
    design = design_report(use)
    ring, _ = complete_rings(use)
    pooled = None
    if population is not None and set(use.get("point_estimate", [])) == {"population"}:
        from .pooled import pooled_fits

        fits, pooled = pooled_fits(use[ring].reset_index(drop=True), population,
                                   estimator == "paired")  # fmt: skip
        estimator = f"pooled {'paired' if pooled['paired'] else 'regression'}"
    else:
        fits = {c: fit_component(use[ring].reset_index(drop=True), c, estimator, n_boot, seed,
                                 point=point, weights=weights) for c in ("g1", "g2")}  # fmt: skip
    if all(f.m is None for f in fits.values()):
        raise ValueError(f"g1_true and g2_true are each constant over the usable rows: "
                         f"{M_UNDEFINED}")  # fmt: skip
    seeds = use["seed"].astype(str).to_numpy()
    cov: dict[str, Any] = {}
    for comp in ("g1", "g2"):
        cov[comp] = {}
        for lev, (lo, hi) in COVERAGE_LEVELS.items():
            if f"{comp}_{lo}" not in use.columns or f"{comp}_{hi}" not in use.columns:
                cov[comp][lev] = {"skipped": "posterior quantile columns missing"}
                continue
            cov[comp][lev] = coverage(use[f"{comp}_true"], use[f"{comp}_{lo}"],
                                      use[f"{comp}_{hi}"], float(lev), acc["coverage_z"],
                                      seeds, min_seeds)  # fmt: skip
    prior = "truth_from_prior" in use.columns and bool(
        use["truth_from_prior"].astype(str).str.lower().eq("true").all())  # fmt: skip
    if sbc_mode == "on" or (sbc_mode == "auto" and prior):
        sbc_res = {c: sbc(use[f"rank_{c}"].to_numpy(float), groups=seeds, min_seeds=min_seeds)
                   if f"rank_{c}" in use.columns else {"skipped": f"rank_{c} column missing"}
                   for c in ("g1", "g2")}  # fmt: skip
    else:
        why = (
            "disabled (--no-sbc)"
            if sbc_mode == "off"
            else (
                "truths were not drawn from the inference prior (a shear grid); use --sbc to force"
            )
        )
        sbc_res = {"skipped": why}
    frac = len(use) / max(sc["n_complete"], 1)  # missing work is not a convergence failure
    crit = criteria(fits, cov, sbc_res, frac, acc, len(use))
    req = {"name": name, "for": rq.REQUIREMENTS[name]["for"],
           "source": rq.REQUIREMENTS[name]["source"]}  # fmt: skip
    res: dict[str, Any] = {
        "level": rq.alias_of(name) or name, "estimator": estimator, "point_estimate": point,
        "weights": weights, "requirement": req,
        "n_realizations": len(df),
        "n_ok": int((status == "ok").sum()), "n_failed": int((status == "failed").sum()),
        "n_incomplete": int((status == "incomplete").sum()),
        "n_corrupt": int((status == "corrupt").sum()), "n_used": len(use),
        "n_seeds": n_independent(seeds, len(use)), "excluded": excluded,
    }  # fmt: skip
    for comp, f in fits.items():
        k = comp[1]
        res.update({f"m{k}": f.m, f"m{k}_err": f.m_err, f"c{k}": f.c, f"c{k}_err": f.c_err})
        if f.m_reason:
            res[f"m{k}_reason"] = f.m_reason
    res["fits"] = {c: {"error_method": f.error_method, "error_label": error_label(f), "n": f.n,
                       "n_groups": f.n_groups, "weights": f.weights, "errors": f.errors}
                   for c, f in fits.items()}  # fmt: skip
    res["design"] = design
    res["warnings"] = warning_counts(use)
    if pooled is not None:
        res["population"] = pooled
        res["point_estimate"] = "population"
    res.update(coverage=cov, sbc=sbc_res, acceptance=acc, z=acc["z"], criteria=crit)
    res["prior"] = prior_report(use)
    res["noise_bias"] = noise_bias_note(use)
    res["verdict"] = overall(c["status"] for c in crit)
    res["scope"] = sc
    if sc["unfinished"]:  # judged on the complete ones, but never a verdict on missing work
        res["verdict_of_complete"] = res["verdict"]
        res["verdict"] = "INCONCLUSIVE"
    res["passed"] = res["verdict"] == "PASS"
    from .verdict import planning

    res["planning"] = planning(crit, fits, design, len(use), res["n_seeds"], target_sigma_m)
    return res, fits, use


def load_acceptance(path: str | None, level: str) -> dict[str, float]:
    """Overrides for the requirement ``level`` (a preset or an alias) from a YAML (``{name:
    {key: value}}``, top level or under ``acceptance:``; a preset's overrides may be given
    under its alias too); unknown names or keys raise ``ValueError`` naming the key path."""
    if path is None:
        return {}
    import yaml

    with open(path) as fh:
        doc = yaml.safe_load(fh) or {}
    sec = doc.get("acceptance", doc) if isinstance(doc, dict) else None
    if not isinstance(sec, dict):
        raise ValueError("acceptance: expected a mapping of levels")
    for lev, vals in sec.items():
        if lev == "convergence" and "acceptance" not in doc:
            continue
        if lev not in rq.names():
            raise ValueError(f"acceptance.{lev}: unknown requirement; use one of "
                             f"{', '.join(rq.names())}")  # fmt: skip
        if not isinstance(vals, dict):
            raise ValueError(f"acceptance.{lev}: expected a mapping")
        for k, v in vals.items():
            if k not in rq.CRITERIA_KEYS:
                raise ValueError(
                    f"acceptance.{lev}.{k}: unknown key; use {', '.join(rq.CRITERIA_KEYS)}"
                )
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                raise ValueError(f"acceptance.{lev}.{k}: must be a number, got {v!r}")
            if k == "min_seeds" and (v < 1 or v != int(v)):
                raise ValueError(f"acceptance.{lev}.{k}: must be an integer >= 1, got {v!r}")
            if k in ("z", "coverage_z") and v <= 0:
                raise ValueError(f"acceptance.{lev}.{k}: must be > 0, got {v!r}")
    name = rq.resolve(level)  # overrides given under the preset's name or its alias
    out: dict[str, float] = {}
    for key in (name, rq.alias_of(name)):
        vals = sec.get(key) if key else None
        out.update({k: (int(v) if k == "min_seeds" else float(v))
                    for k, v in (vals or {}).items()})  # fmt: skip
    return out
