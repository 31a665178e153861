"""Stage 3: a summary table -> m and c with errors, coverage, SBC and a verdict against a
requirement, as a :class:`~shearbatch.analysis.result.BiasResult`.

:func:`measure_bias` runs these named steps, each a function of this module (or of the
one it names):

0. :class:`Settings`: the options (estimator, point estimate, weights, resamples, SBC,
   target sigma_m), each checked there and nowhere else (:class:`BadSetting` names it);
   the requirement comes chosen and resolved
   (:func:`shearbatch.app.stats.choose_requirement`), or as a name resolved here;
1. :func:`prepare_table`: the current column names, the columns every step needs;
2. :func:`~shearbatch.analysis.scope.scope`: the rows judged (``in_plan`` false: left
   out unless ``include_unplanned``) and whether the campaign is unfinished;
3. :func:`choose_point`: the per-realization point estimate (``mean``, ``median`` or
   ``mode``; ``auto``: the mode for a MAP campaign, the mean otherwise) and its columns;
4. :func:`check_truths`, :func:`usable_rows`: finite truths in every ``ok`` row; the
   ``ok`` rows that pass convergence, the others counted by reason;
5. :func:`choose_estimator`: ``regression`` (least squares of the estimate on g_true,
   jackknife over seeds) or ``paired`` (+g/-g twins, bootstrap over seeds);
6. :func:`fit_bias`: ``g_hat = (1 + m) g_true + c`` per component
   (:mod:`shearbatch.analysis.stats`), or for an interim-model campaign the population
   estimator pooled per grid point (:mod:`shearbatch.analysis.pooled`);
7. :func:`measure_coverage`: 68% and 95% intervals, per component, over seeds;
8. :func:`calibrate`: simulation-based calibration, when the truths were drawn from the
   prior (or forced);
9. :func:`judge`: each criterion three-valued (:func:`shearbatch.analysis.verdict.criteria`)
   and the verdict; INCONCLUSIVE for an unfinished campaign;
10. the notes (:func:`design_report`, :func:`warning_counts`, :func:`prior_report`,
    :func:`noise_bias_note`) and the planning
    (:func:`shearbatch.analysis.verdict.planning`).

``bias-stats`` and :meth:`shearbatch.api.Campaign.stats` both reach it through
:func:`shearbatch.app.run_stats`.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, NamedTuple

import numpy as np

from ..core.priors import PRIOR_PULL_MAX, campaign_pull
from ..schema import requirements as rq
from .result import BiasResult, Criterion, Requirement
from .scope import scope
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
from .verdict import criteria, overall, planning

__all__ = [
    "ESTIMATORS",
    "POINT_ESTIMATES",
    "SBC_MODES",
    "BadSetting",
    "BiasAnalysis",
    "Settings",
    "calibrate",
    "check_truths",
    "choose_estimator",
    "choose_point",
    "current_columns",
    "fit_bias",
    "judge",
    "measure_bias",
    "measure_coverage",
    "noise_bias_note",
    "prepare_table",
    "usable_rows",
]

logger = logging.getLogger(__name__)

#: Per-realization point estimates: summary.csv columns ``g1_<point>``, ``g2_<point>``
#: (``mode``: the MAP / Laplace centre from convergence.json's ``mode``).
POINT_ESTIMATES = ("mean", "median", "mode")
#: The estimators ``bias-stats --estimator`` names (``auto``: paired when there are pairs).
ESTIMATORS = ("regression", "paired", "auto")
#: ``--sbc`` / ``--no-sbc`` / neither
SBC_MODES = ("auto", "on", "off")
#: summary.csv columns of older versions still read: old name -> current name
LEGACY_COLUMNS = {"estimate": "point_estimate"}
REQUIRED_COLUMNS = ("run_id", "g1_true", "g2_true", "g1_mean", "g2_mean", "g1_std", "g2_std",
                    "status", "passed_convergence", "seed")  # fmt: skip
COVERAGE_LEVELS = {"0.68": ("q16", "q84"), "0.95": ("q025", "q975")}
M_UNDEFINED = "m undefined: need at least two distinct g_true values"


class BadSetting(ValueError):
    """A stage-3 setting out of its range: ``option`` names it (``estimator``, ``point``,
    ``weights``, ``n_boot``, ``sbc_mode``, ``target_sigma_m``), ``reason`` says why;
    ``str(err)`` is ``"<option>: <reason>"``; ``bias-stats`` names the flag instead."""

    def __init__(self, option: str, reason: str) -> None:
        super().__init__(f"{option}: {reason}")
        self.option, self.reason = option, reason


@dataclasses.dataclass(frozen=True)
class Settings:
    """How a summary table is measured (``bias-stats``' options): every rule on a setting
    is here, checked once when the record is made (:class:`BadSetting`)."""

    estimator: str = "auto"
    """``regression``, ``paired`` or ``auto`` (:func:`choose_estimator`)."""
    point: str = "auto"
    """``mean``, ``median``, ``mode`` or ``auto`` (:func:`choose_point`)."""
    weights: str = "none"
    """``none`` or ``inverse-variance``."""
    n_boot: int = 1000
    """Bootstrap resamples of the paired estimator, >= 2."""
    sbc_mode: str = "auto"
    """``on``, ``off`` or ``auto`` (:func:`calibrate`)."""
    seed: int = 0
    """Of the bootstrap."""
    include_unplanned: bool = False
    target_sigma_m: float | None = None
    """Also plan the realizations for this standard error of m (> 0)."""

    def __post_init__(self) -> None:
        if self.target_sigma_m is not None and not self.target_sigma_m > 0:
            raise BadSetting("target_sigma_m", f"must be > 0, got {self.target_sigma_m}")
        if self.estimator not in ESTIMATORS:
            raise BadSetting("estimator",
                             f"unknown {self.estimator!r}; use regression, paired or auto")  # fmt: skip
        if self.point not in (*POINT_ESTIMATES, "auto"):
            raise BadSetting("point", f"unknown {self.point!r}; use "
                             f"{', '.join(POINT_ESTIMATES)} or auto")  # fmt: skip
        if self.weights not in WEIGHTS:
            raise BadSetting("weights", f"unknown {self.weights!r}; use {' or '.join(WEIGHTS)}")
        if self.n_boot < 2:
            raise BadSetting("n_boot", f"must be >= 2, got {self.n_boot}")
        if self.sbc_mode not in SBC_MODES:
            raise BadSetting("sbc_mode", f"unknown {self.sbc_mode!r}; use {', '.join(SBC_MODES)}")


class BiasAnalysis(NamedTuple):
    """What :func:`measure_bias` returns: the result, the :class:`Fit` per component
    (for the residual figure) and the usable rows (for the figures and the report)."""

    result: BiasResult
    fits: dict[str, Fit]
    usable: Any


def current_columns(df: Any) -> Any:
    """``df`` (a summary table) with the columns of older versions renamed to their
    current names (:data:`LEGACY_COLUMNS`; the same frame when there is none)."""
    old = {k: v for k, v in LEGACY_COLUMNS.items() if k in df.columns and v not in df.columns}
    return df.rename(columns=old) if old else df


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
    """``ValueError`` when the ``point`` columns are absent or empty where the mean is not
    (the name is checked by :class:`Settings`)."""
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


# --------------------------------------------------------------------------- the steps


def prepare_table(df: Any) -> Any:
    """Step 1: ``df`` with current column names; ``ValueError`` for a missing required
    column."""
    df = current_columns(df)
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"missing columns: {', '.join(missing)}")
    return df


def choose_point(df: Any, point: str = "auto") -> str:
    """Step 3: the point estimate (:func:`resolve_point`), its columns checked."""
    point = resolve_point(df, point)
    _check_point(df, point)
    return point


def check_truths(df: Any) -> None:
    """Step 4: ``ValueError`` when an ``ok`` row's truth is not a finite number."""
    status = df["status"].fillna("").astype(str)
    for c in ("g1_true", "g2_true"):
        bad = (status == "ok").to_numpy() & ~np.isfinite(pd_numeric(df[c]))
        if bad.any():
            raise ValueError(f"{c}: not a finite number in {int(bad.sum())} ok row(s) (e.g. "
                             f"{df['run_id'][bad].iloc[0]}); re-run bias-extract")  # fmt: skip


def choose_estimator(use: Any, estimator: str = "auto") -> str:
    """Step 5: ``auto`` is ``paired`` when the usable rows hold complete +g/-g pairs, else
    ``regression``; ``ValueError`` for ``paired`` without pairs (the name is checked by
    :class:`Settings`)."""
    pairs = "pair_id" in use.columns and "pair_sign" in use.columns and has_pairs(
        use["pair_id"].to_numpy(object), use["pair_sign"].to_numpy(float))  # fmt: skip
    if estimator == "auto":
        return "paired" if pairs else "regression"
    if estimator == "paired" and not pairs:
        raise ValueError("estimator paired: no complete +g/-g pairs (pair_id, pair_sign)")
    return estimator


def fit_bias(
    use: Any,
    estimator: str,
    *,
    point: str,
    weights: str = "none",
    n_boot: int = 1000,
    seed: int = 0,
    population: Any = None,
) -> tuple[dict[str, Fit], str, dict[str, Any] | None]:
    """Step 6: ``(fits, estimator, pooled)``: the :class:`Fit` per component on the
    complete rings of the usable rows; with ``population`` (an interim-model campaign)
    the population estimator pooled per grid point, its estimator ``pooled <kind>`` and
    its report (else None). ``ValueError`` when m is undefined in both components."""
    ring, _ = complete_rings(use)
    pooled = None
    if population is not None and set(use.get("point_estimate", [])) == {"population"}:
        from .pooled import FIT_COLUMNS, pooled_fits
        from .streamed import PartialSource, streamed_fits

        # the complete rings' rows with the pooled fit's columns alone: a copy of every
        # column would hold the whole table once more while the fit streams (issue 43)
        rows = use.loc[ring, [c for c in FIT_COLUMNS if c in use.columns]]
        fit = streamed_fits if isinstance(population, PartialSource) else pooled_fits
        fits, pooled = fit(rows.reset_index(drop=True), population, estimator == "paired")
        estimator = f"pooled {'paired' if pooled['paired'] else 'regression'}"
    else:
        rows = use[ring].reset_index(drop=True)
        fits = {c: fit_component(rows, c, estimator, n_boot, seed, point=point, weights=weights)
                for c in ("g1", "g2")}  # fmt: skip
    if all(f.m is None for f in fits.values()):
        raise ValueError(f"g1_true and g2_true are each constant over the usable rows: "
                         f"{M_UNDEFINED}")  # fmt: skip
    return fits, estimator, pooled


def measure_coverage(use: Any, acc: dict[str, Any]) -> dict[str, Any]:
    """Step 7: ``{component: {level: coverage}}`` of the 68% and 95% intervals over the
    seeds (:func:`shearbatch.analysis.stats.coverage`)."""
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
                                      seeds, int(acc["min_seeds"]))  # fmt: skip
    return cov


def calibrate(use: Any, sbc_mode: str = "auto", min_seeds: int = 20) -> dict[str, Any]:
    """Step 8: SBC per component when ``sbc_mode`` is ``on``, or ``auto`` and every truth
    was drawn from the prior; else ``{"skipped": why}``."""
    seeds = use["seed"].astype(str).to_numpy()
    prior = "truth_from_prior" in use.columns and bool(
        use["truth_from_prior"].astype(str).str.lower().eq("true").all())  # fmt: skip
    if sbc_mode == "on" or (sbc_mode == "auto" and prior):
        return {c: sbc(use[f"rank_{c}"].to_numpy(float), groups=seeds, min_seeds=min_seeds)
                if f"rank_{c}" in use.columns else {"skipped": f"rank_{c} column missing"}
                for c in ("g1", "g2")}  # fmt: skip
    if sbc_mode == "off":
        return {"skipped": "disabled (--no-sbc)"}
    return {"skipped": "truths were not drawn from the inference prior (a shear grid); "
                       "use --sbc to force"}  # fmt: skip


def judge(
    fits: dict[str, Fit],
    cov: dict[str, Any],
    sbc_res: dict[str, Any],
    n_used: int,
    sc: dict[str, Any],
    acc: dict[str, Any],
) -> tuple[list[Criterion], str, str | None]:
    """Step 9: ``(criteria, verdict, verdict of the complete ones)``. The fraction
    converged is over the complete realizations (missing work is not a convergence
    failure); an unfinished campaign is INCONCLUSIVE, judged on its complete ones too
    (else that verdict is None)."""
    frac = n_used / max(sc["n_complete"], 1)
    crit = criteria(fits, cov, sbc_res, frac, acc, n_used)
    verdict = overall(c.status for c in crit)
    if sc["unfinished"]:  # never a verdict on missing work
        return crit, "INCONCLUSIVE", verdict
    return crit, verdict, None


def measure_bias(
    df: Any,
    *,
    requirement: str | Requirement = "level0",
    acceptance: dict[str, float] | None = None,
    population: dict[str, Any] | None = None,
    settings: Settings | None = None,
    **options: Any,
) -> BiasAnalysis:
    """The whole stage-3 analysis of a summary table (the steps of the module docstring).

    ``requirement``: a :class:`~shearbatch.analysis.result.Requirement` already chosen and
    resolved (:func:`shearbatch.app.stats.choose_requirement`: used as it is, ``chosen``
    included), or the name of a preset of :data:`shearbatch.schema.requirements.REQUIREMENTS`
    or an alias (``level_0``...), resolved here (``requirement.chosen`` is then left for the
    caller). ``acceptance``: overrides of its criteria
    (:func:`shearbatch.analysis.verdict.load_acceptance`). ``population``
    (:func:`shearbatch.analysis.pooled.load_population`): an interim-model campaign's
    draws. ``settings``: a :class:`Settings`, or its fields as keyword ``options``
    (``estimator``, ``point``, ``weights``, ``n_boot``, ``sbc_mode``, ``seed``,
    ``include_unplanned``, ``target_sigma_m``: the realizations for that standard error of
    m added to the ``planning`` section).

    Raises ``ValueError`` (one line) on bad input: missing columns, unknown requirement,
    a setting out of range (:class:`BadSetting`), no usable rows, ``paired`` without pairs,
    ``mode`` without modes, ``inverse-variance`` without finite stds, m undefined in
    both components.
    """
    if settings is not None and options:
        raise TypeError("measure_bias: give settings or its fields, not both")
    st = settings if settings is not None else Settings(**options)
    if isinstance(requirement, Requirement):
        req = requirement
    else:
        name = rq.resolve(requirement)
        info = rq.REQUIREMENTS[name]
        req = Requirement(name, info["for"], info["source"])
    name, weights, n_boot, seed = req.name, st.weights, st.n_boot, st.seed
    df = prepare_table(df)
    df, sc = scope(df, st.include_unplanned)
    point = choose_point(df, st.point)
    acc = {**rq.criteria_of(name), **(acceptance or {})}
    check_truths(df)
    use, excluded = usable_rows(df, point)
    if len(use) == 0:
        raise ValueError(f"no usable rows (excluded: {excluded or 'none'})")
    estimator = choose_estimator(use, st.estimator)
    fits, estimator, pooled = fit_bias(use, estimator, point=point, weights=weights,
                                       n_boot=n_boot, seed=seed, population=population)  # fmt: skip
    cov = measure_coverage(use, acc)
    sbc_res = calibrate(use, st.sbc_mode, int(acc["min_seeds"]))
    crit, verdict, of_complete = judge(fits, cov, sbc_res, len(use), sc, acc)
    design = design_report(use)
    status = df["status"].fillna("").astype(str)
    n_seeds = n_independent(use["seed"].astype(str).to_numpy(), len(use))
    bias: dict[str, Any] = {}
    for comp, f in fits.items():
        k = comp[1]
        bias.update({f"m{k}": f.m, f"m{k}_err": f.m_err, f"c{k}": f.c, f"c{k}_err": f.c_err,
                     f"m{k}_reason": f.m_reason or None})  # fmt: skip
    result = BiasResult.build(
        level=rq.alias_of(name) or name, estimator=estimator,
        point_estimate="population" if pooled is not None else point, weights=weights,
        requirement=req,
        n_realizations=len(df), n_ok=int((status == "ok").sum()),
        n_failed=int((status == "failed").sum()),
        n_incomplete=int((status == "incomplete").sum()),
        n_corrupt=int((status == "corrupt").sum()), n_used=len(use), n_seeds=n_seeds,
        excluded=excluded, **bias,
        fits={c: {"error_method": f.error_method, "error_label": error_label(f), "n": f.n,
                  "n_groups": f.n_groups, "weights": f.weights, "errors": f.errors}
              for c, f in fits.items()},
        design=design, warnings=warning_counts(use), population=pooled, coverage=cov,
        sbc=sbc_res, acceptance=acc, z=acc["z"], criteria=tuple(crit),
        prior=prior_report(use), noise_bias=noise_bias_note(use), verdict=verdict,
        scope=sc, verdict_of_complete=of_complete,
        planning=planning(crit, fits, design, len(use), n_seeds, st.target_sigma_m),
    )  # fmt: skip
    from .compare import compare_estimators  # host estimators beside the method (issue 45)

    method = str(use["method"].iloc[0]) if "method" in use.columns else "method"
    frac = len(use) / max(sc["n_complete"], 1)
    if (side := compare_estimators(use, point, acc, frac, method)) is not None:
        result = result.replace(estimators=side)
    return BiasAnalysis(result, fits, use)
