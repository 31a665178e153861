"""Stage 3: a summary table -> m and c with errors, coverage, SBC and a verdict against a
requirement, as a :class:`~shearbatch.analysis.result.BiasResult`.

:func:`measure_bias` runs these steps over the table's parts (a DataFrame is one part):

0. :class:`Settings`: the options (estimator, point estimate, weights, resamples, SBC,
   target sigma_m), each checked there and nowhere else (:class:`BadSetting` names it);
   the requirement comes chosen and resolved
   (:func:`shearbatch.app.stats.choose_requirement`), or as a name resolved here;
1. :func:`scan_part` per part (:func:`prepare_table`: the current column names, the
   required columns; :func:`~shearbatch.analysis.scope.scope`: the rows judged and
   whether the campaign is unfinished); then, over the whole table, the point estimate
   (``mean``, ``median`` or ``mode``; ``auto``: the mode for a MAP campaign, the mean
   otherwise) and its columns checked, and finite truths in every ``ok`` row;
2. :func:`measure_part` per part: the usable rows (:func:`usable_rows`), the complete
   rings and pairs, the per-seed sums of ``g_hat = (1 + m) g_true + c`` per component
   (:mod:`shearbatch.analysis.stats`: regression, paired, constant truth), the coverage
   and rank counts, the notes' inputs, the host estimators' sums;
3. merged in seed order: the estimator (``auto``: ``paired`` when there are +g/-g pairs),
   the fits with errors over seeds (or, for an interim-model campaign, the population
   estimator pooled per grid point, :mod:`shearbatch.analysis.pooled`), coverage, SBC
   (when the truths were drawn from the prior, or forced), :func:`judge` (each criterion
   three-valued, INCONCLUSIVE for an unfinished campaign), the notes
   (:func:`noise_bias_note`, :func:`warning_counts`) and the planning
   (:func:`shearbatch.analysis.verdict.planning`).

``bias-stats`` and :meth:`shearbatch.api.Campaign.stats` both reach it through
:func:`shearbatch.app.run_stats`.

A table may come in parts sharing no seed (:mod:`shearbatch.analysis.parts`: a
field-scale ``summary.csv`` split by seed). The steps then run per part in two passes,
:func:`scan_part` (scope, counts, the point estimate's inputs and checks) and
:func:`measure_part` (usable rows, rings, per-seed sums, coverage and rank counts, notes),
and their results are merged in seed order (``_merged_*``): the whole table's numbers, bit
for bit, in memory set by a part.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import numpy as np

from ..core.priors import PRIOR_PULL_MAX, campaign_pull
from ..schema import requirements as rq
from . import stats
from .result import BiasResult, Criterion, Requirement
from .scope import scope
from .stats import (
    WEIGHTS,
    Fit,
    complete_rings,
    error_label,
    has_pairs,
    pair_table,
)
from .verdict import criteria, overall, planning

__all__ = [
    "ESTIMATORS",
    "POINT_ESTIMATES",
    "SBC_MODES",
    "BadSetting",
    "BiasAnalysis",
    "Settings",
    "current_columns",
    "judge",
    "measure_bias",
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


@dataclasses.dataclass(frozen=True)
class BiasAnalysis:
    """What :func:`measure_bias` returns: the result, the :class:`Fit` per component
    (for the residual figure), the usable rows (a table measured whole; of a table in
    parts, the residual figure's sample of them) and the :class:`TableDigest` the
    figures and the report read. Unpacks as ``result, fits, usable``."""

    result: BiasResult
    fits: dict[str, Fit]
    usable: Any
    digest: Any = None

    def __iter__(self) -> Any:
        return iter((self.result, self.fits, self.usable))


def current_columns(df: Any) -> Any:
    """``df`` (a summary table) with the columns of older versions renamed to their
    current names (:data:`LEGACY_COLUMNS`; the same frame when there is none)."""
    old = {k: v for k, v in LEGACY_COLUMNS.items() if k in df.columns and v not in df.columns}
    return df.rename(columns=old) if old else df


def _ok_converged(df: Any) -> tuple[Any, Any]:
    status = df["status"].fillna("").astype(str)
    conv = df["passed_convergence"].astype(str).str.lower().isin(["true", "1", "1.0"])
    return status, conv


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
    snr = use["snr"].to_numpy(float)
    return noise_note(set(use["point_estimate"].dropna().astype(str)), snr[np.isfinite(snr)])


def noise_note(estimates: set[str], snr: np.ndarray) -> dict[str, Any] | None:
    """:func:`noise_bias_note` from the usable rows' point estimates and finite S/N."""
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


def _col(df: Any, name: str) -> np.ndarray | None:
    return df[name].to_numpy(float) if name in df.columns else None


# --------------------------------------------------------------------------- the steps


def prepare_table(df: Any) -> Any:
    """Step 1: ``df`` with current column names; ``ValueError`` for a missing required
    column."""
    df = current_columns(df)
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"missing columns: {', '.join(missing)}")
    return df


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

    ``df``: the table (a DataFrame), or its parts sharing no seed
    (:mod:`shearbatch.analysis.parts`: a field-scale ``summary.csv`` split by seed, each
    part read in turn); the result is the same (two passes over the parts: the first
    counts and resolves the point estimate, the second sums per seed,
    :func:`scan_part`, :func:`measure_part`).

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
    parts = df if hasattr(df, "frames") else _Whole(df)
    # pass 1: counts, the point estimate, the checks (before any sum)
    scans = [scan_part(part, st.include_unplanned) for part in parts.frames()]
    sc = merge_scope(scans, st.include_unplanned)
    point = _merged_point(scans, st.point)
    acc = {**rq.criteria_of(name), **(acceptance or {})}
    _merged_truth_check(scans)
    names = present_order(set().union(*(s["present"][point] for s in scans)))
    n_rows = sum(s["n_planned"] for s in scans)
    frac_sample = min(1.0, SAMPLE_ROWS / max(n_rows, 1))
    # pass 2: per-seed sums of every part
    single = parts.n_parts == 1
    meas = [
        measure_part(
            part,
            st.include_unplanned,
            point,
            weights,
            names,
            pooled_rows=population is not None,
            sample=frac_sample,
            keep_usable=single,
        )
        for part in parts.frames()
    ]
    excluded = _merged_excluded(meas)
    n_used = sum(m["n_used"] for m in meas)
    if n_used == 0:
        raise ValueError(f"no usable rows (excluded: {excluded or 'none'})")
    estimator = st.estimator
    pairs = any(m["has_pairs"] for m in meas)
    if estimator == "auto":
        estimator = "paired" if pairs else "regression"
    elif estimator == "paired" and not pairs:
        raise ValueError("estimator paired: no complete +g/-g pairs (pair_id, pair_sign)")
    fits, estimator, pooled = _merged_fits(meas, estimator, weights, n_boot, seed, population)
    n_seeds = sum(m["n_seeds"] for m in meas)
    cov = _merged_coverage(meas, acc, n_seeds)
    sbc_res = _merged_sbc(meas, st.sbc_mode, int(acc["min_seeds"]))
    crit, verdict, of_complete = judge(fits, cov, sbc_res, n_used, sc, acc)
    design = {"paired": any(m["design_pairs"] for m in meas),
              "rotations": max((m["rotations"] for m in meas), default=1),
              "error_groups": "seed",
              "incomplete_rings_left_out": sum(m["incomplete"] for m in meas)}  # fmt: skip
    bias: dict[str, Any] = {}
    for comp, f in fits.items():
        k = comp[1]
        bias.update({f"m{k}": f.m, f"m{k}_err": f.m_err, f"c{k}": f.c, f"c{k}_err": f.c_err,
                     f"m{k}_reason": f.m_reason or None})  # fmt: skip
    result = BiasResult.build(
        level=rq.alias_of(name) or name, estimator=estimator,
        point_estimate="population" if pooled is not None else point, weights=weights,
        requirement=req,
        n_realizations=n_rows, n_ok=sum(s["n_ok"] for s in scans),
        n_failed=sum(s["n_failed"] for s in scans),
        n_incomplete=sum(s["n_incomplete"] for s in scans),
        n_corrupt=sum(s["n_corrupt"] for s in scans), n_used=n_used, n_seeds=n_seeds,
        excluded=excluded, **bias,
        fits={c: {"error_method": f.error_method, "error_label": error_label(f), "n": f.n,
                  "n_groups": f.n_groups, "weights": f.weights, "errors": f.errors}
              for c, f in fits.items()},
        design=design, warnings=_merged_warnings(meas), population=pooled, coverage=cov,
        sbc=sbc_res, acceptance=acc, z=acc["z"], criteria=tuple(crit),
        prior=_merged_prior(meas), noise_bias=_merged_noise(meas), verdict=verdict,
        scope=sc, verdict_of_complete=of_complete,
        planning=planning(crit, fits, design, n_used, n_seeds, st.target_sigma_m),
    )  # fmt: skip
    from .compare import compare_merge  # host estimators beside the method (issue 45)

    method = next((m["method"] for m in meas if m["method"] is not None), "method")
    frac = n_used / max(sc["n_complete"], 1)
    side = compare_merge([m["compare"] for m in meas], acc, frac, method) if names else None
    if side is not None:
        result = result.replace(estimators=side)
    digest = _digest(scans, meas, n_used)
    usable = meas[0]["usable"] if single else digest.sample
    return BiasAnalysis(result, fits, usable, digest)


# ------------------------------------------------------------------ a table in parts


class _Whole:
    """A DataFrame as one part (:class:`shearbatch.analysis.parts.InMemory`'s interface)."""

    n_parts = 1

    def __init__(self, df: Any):
        self.df = df

    def frames(self) -> Any:
        yield self.df


#: at most about this many usable rows drawn in the residual figure (whole seeds, chosen
#: by a hash of the seed: the same rows however the table is split)
SAMPLE_ROWS = 20_000


def present_order(names: set[str]) -> list[str]:
    """Host estimator names in :func:`shearbatch.estimators.names`' order."""
    from .. import estimators as est

    return [n for n in est.names() if n in names]


@dataclasses.dataclass
class TableDigest:
    """What the figures and the report read of a table measured in parts, in memory that
    does not grow with it: the failures by flag (all rows), the worst-converged candidates
    (:func:`shearbatch.analysis.plots.worst_rows`), each component's distinct finite ranks
    with their counts and seeds, a sample of the usable rows (:data:`SAMPLE_ROWS`, for the
    residual figure) and the first used realizations of distinct seeds (the report's
    stamps)."""

    failures: dict[str, int]
    worst: Any
    ranks: dict[str, tuple[np.ndarray, np.ndarray, int]]
    sample: Any
    n_used: int
    stamp_runs: list[str]


def scan_part(df: Any, include_unplanned: bool = False) -> dict[str, Any]:
    """Pass 1 over a part: its scope and status counts, what resolves the point estimate
    (:func:`resolve_point`) and checks it (:func:`_check_point`, per candidate), the bad
    truths (:func:`check_truths`), the host estimators present per candidate point, the
    failures by flag and the worst-converged candidates."""
    from . import report
    from .compare import present
    from .plots import worst_rows

    df = prepare_table(df)
    out: dict[str, Any] = {"failures": report.failures_by_flag(df), "worst": worst_rows(df, 3),
                           "columns": list(df.columns)}  # fmt: skip
    df, sc = scope(df, include_unplanned)
    out.update(n_unplanned=sc["n_unplanned"], n_planned=sc["n_planned"],
               n_complete=sc["n_complete"], unfinished=sc["unfinished"])  # fmt: skip
    status, conv = _ok_converged(df)
    for s in ("ok", "failed", "incomplete", "corrupt"):
        out[f"n_{s}"] = int((status == s).sum())
    out["estimates"] = (set(df["point_estimate"].dropna().astype(str))
                        if "point_estimate" in df else set())  # fmt: skip
    out["has_mode"] = bool("g1_mode" in df and df["g1_mode"].notna().any())
    ok = (status == "ok").to_numpy()
    truth = np.isfinite(df[["g1_true", "g2_true"]].to_numpy(float)).all(1)
    has_mean = np.isfinite(df[["g1_mean", "g2_mean"]].to_numpy(float)).all(1)
    out["empty"], out["present"] = {}, {}
    for p in POINT_ESTIMATES:
        cols = [f"g1_{p}", f"g2_{p}"]
        if not all(c in df.columns for c in cols):
            out["empty"][p], out["present"][p] = None, set()
            continue
        fin = np.isfinite(df[cols].to_numpy(float)).all(1)
        out["empty"][p] = int((ok & conv.to_numpy() & has_mean & ~fin).sum())
        keep = ok & conv.to_numpy() & truth & fin
        out["present"][p] = set(present(df[keep])) if keep.any() else set()
    out["bad_truth"] = {}
    for c in ("g1_true", "g2_true"):
        bad = ok & ~np.isfinite(pd_numeric(df[c]))
        out["bad_truth"][c] = (int(bad.sum()), df["run_id"][bad].iloc[0] if bad.any() else None)
    return out


def merge_scope(scans: list[dict[str, Any]], include_unplanned: bool = False) -> dict[str, Any]:
    """:func:`~shearbatch.analysis.scope.scope`'s report of the whole table."""
    n_unplanned = sum(s["n_unplanned"] for s in scans)
    n_planned = sum(s["n_planned"] for s in scans)
    n_complete = sum(s["n_complete"] for s in scans)
    unfinished = any(s["unfinished"] for s in scans)
    message = (f"unfinished: {n_complete} of {n_planned} planned realizations complete"
               if unfinished else "")  # fmt: skip
    return {"n_unplanned": n_unplanned,
            "unplanned_dropped": n_unplanned if not include_unplanned else 0,
            "n_planned": n_planned, "n_complete": n_complete, "unfinished": unfinished,
            "message": message}  # fmt: skip


def _merged_point(scans: list[dict[str, Any]], point: str) -> str:
    """:func:`choose_point` of the whole table from its parts' scans."""
    if point == "auto":
        est = set().union(*(s["estimates"] for s in scans))
        has_mode = any(s["has_mode"] for s in scans)
        point = "mode" if est == {"mode"} and has_mode else "mean"
    cols = [f"g1_{point}", f"g2_{point}"]
    header = scans[0]["columns"] if scans else []
    missing = [c for c in cols if c not in header]
    old = " (convergence.json without a mode: an older bias-run)" if point == "mode" else ""
    if missing:
        raise ValueError(f"point estimate {point}: missing columns: {', '.join(missing)}; "
                         "re-run bias-extract or use --point mean")  # fmt: skip
    empty = sum(s["empty"][point] or 0 for s in scans)
    if empty:
        raise ValueError(f"point estimate {point}: {', '.join(cols)} empty in {empty} "
                         f"converged row(s){old}; use --point mean or median")  # fmt: skip
    return point


def _merged_truth_check(scans: list[dict[str, Any]]) -> None:
    """:func:`check_truths` of the whole table from its parts' scans."""
    for c in ("g1_true", "g2_true"):
        n = sum(s["bad_truth"][c][0] for s in scans)
        if n:
            first = next(s["bad_truth"][c][1] for s in scans if s["bad_truth"][c][0])
            raise ValueError(f"{c}: not a finite number in {n} ok row(s) (e.g. {first}); "
                             "re-run bias-extract")  # fmt: skip


def _seed_hash(seeds: np.ndarray) -> np.ndarray:
    """A uniform number in [0, 1) per seed label (the residual figure's sample)."""
    import pandas as pd

    return pd.util.hash_array(np.asarray(seeds, dtype=object)).astype(np.float64) / 2.0**64


def measure_part(
    df: Any,
    include_unplanned: bool,
    point: str,
    weights: str,
    names: list[str],
    *,
    pooled_rows: bool = False,
    sample: float = 1.0,
    keep_usable: bool = False,
) -> dict[str, Any]:
    """Pass 2 over a part holding whole seeds: its usable rows (:func:`usable_rows`), the
    per-seed sums of every estimator (:mod:`shearbatch.analysis.stats`: regression, paired
    and constant-truth, each component), the coverage and rank counts, the design,
    warning and note inputs, the host estimators' sums
    (:func:`shearbatch.analysis.compare.compare_part`), the pooled fit's rows
    (``pooled_rows``) and the residual figure's sample (the seeds hashed below
    ``sample``)."""
    from .compare import compare_part

    df, _ = scope(prepare_table(df), include_unplanned)
    use, excl = usable_rows(df, point)
    seeds_all = use["seed"].astype(str).to_numpy()
    out: dict[str, Any] = {"n_used": len(use), "excluded": excl,
                           "n_seeds": len(np.unique(seeds_all)),
                           "usable": use if keep_usable else None}  # fmt: skip
    out["has_pairs"] = bool(len(use)) and "pair_id" in use.columns and \
        "pair_sign" in use.columns and has_pairs(use["pair_id"].to_numpy(object),
                                                 use["pair_sign"].to_numpy(float))  # fmt: skip
    ring, incomplete = complete_rings(use)
    out["incomplete"] = incomplete
    rows = use[ring].reset_index(drop=True)
    groups = rows["seed"].astype(str).to_numpy()
    pairs = None
    if len(rows) and "pair_id" in rows.columns and "pair_sign" in rows.columns:
        pairs = pair_table(rows["pair_id"].to_numpy(object), rows["pair_sign"].to_numpy(float))
    fit: dict[str, Any] = {}
    for comp in ("g1", "g2"):
        t = rows[f"{comp}_true"].to_numpy(float)
        h = rows[f"{comp}_{point}"].to_numpy(float)
        s = _col(rows, f"{comp}_std")
        f: dict[str, Any] = {"n": len(t), "range": (t.min(), t.max(), t[0]) if len(t) else None}
        for kind, terms in (("regression", stats.regression_terms),
                            ("offset", stats.offset_terms)):  # fmt: skip
            try:
                f[kind] = stats.group_sums(terms(t, h, s, weights), groups)
            except ValueError as err:
                f[kind] = err
        if pairs is not None:
            ip, im = pairs
            f["n_pairs"] = len(ip)
            f["flipped"] = bool(np.all(t[ip] > 0) and np.allclose(t[ip], -t[im]))
            try:
                f["paired"] = stats.group_sums(stats.paired_terms(
                    t[ip], h[ip], h[im], None if s is None else s[ip],
                    None if s is None else s[im], weights), groups[ip])  # fmt: skip
            except ValueError as err:
                f["paired"] = err
        fit[comp] = f
    out["fit"] = fit
    out["cov"] = {}
    for comp in ("g1", "g2"):
        for lev, (lo, hi) in COVERAGE_LEVELS.items():
            if f"{comp}_{lo}" not in use.columns or f"{comp}_{hi}" not in use.columns:
                out["cov"][(comp, lev)] = None
                continue
            t, a, b = (use[f"{comp}_{x}"].to_numpy(float) for x in ("true", lo, hi))
            finite = bool(np.all(np.isfinite(a)) and np.all(np.isfinite(b)))
            out["cov"][(comp, lev)] = (len(t), finite, bool(np.all(b > a)),
                                       int(((a <= t) & (t <= b)).sum()))  # fmt: skip
    out["prior_flag"] = "truth_from_prior" in use.columns and bool(
        use["truth_from_prior"].astype(str).str.lower().eq("true").all())  # fmt: skip
    out["ranks"] = {}
    for comp in ("g1", "g2"):
        if f"rank_{comp}" not in use.columns:
            out["ranks"][comp] = None
            continue
        r = use[f"rank_{comp}"].to_numpy(float)
        fin = np.isfinite(r)
        vals, counts = np.unique(r[fin], return_counts=True)
        out["ranks"][comp] = (vals, counts, len(np.unique(seeds_all[fin])))
    nrot = use["n_rotations"].to_numpy(float) if "n_rotations" in use.columns else np.array([])
    nrot = nrot[np.isfinite(nrot)]
    out["rotations"] = int(nrot.max()) if nrot.size else 1
    out["design_pairs"] = "pair_sign" in use.columns and bool(use["pair_sign"].isin([1, -1]).any())
    out["warnings"] = warning_counts(use)
    out["shrinkage"] = {}
    for c in ("g1", "g2"):
        col = f"prior_shrinkage_{c}"
        v = use[col].to_numpy(float) if col in use else np.array([])
        out["shrinkage"][c] = v[np.isfinite(v)]
    out["estimates"] = (set(use["point_estimate"].dropna().astype(str))
                        if "point_estimate" in use else None)  # fmt: skip
    snr = use["snr"].to_numpy(float) if "snr" in use else None
    out["snr"] = None if snr is None else snr[np.isfinite(snr)]
    out["method"] = str(use["method"].iloc[0]) if "method" in use.columns and len(use) else None
    out["compare"] = compare_part(use, point, names) if names else None
    if pooled_rows:
        from .pooled import FIT_COLUMNS

        pr = rows[[c for c in FIT_COLUMNS if c in rows.columns]].copy()
        keep = np.zeros(len(pr), dtype=bool)
        if pairs is not None:
            keep[np.concatenate([pairs[0], pairs[1]])] = True
        pr["_in_pair"] = keep
        out["pooled_rows"] = pr.drop(columns=[c for c in ("pair_id", "pair_sign") if c in pr])
    cols = [c for comp in ("g1", "g2") for c in (f"{comp}_true", f"{comp}_{point}",
                                                  f"{comp}_mode", f"{comp}_std")
            if c in use.columns]  # fmt: skip
    cols = list(dict.fromkeys([*cols, "seed"]))
    pick = _seed_hash(seeds_all) < sample if sample < 1.0 else np.ones(len(use), dtype=bool)
    out["sample"] = use.loc[pick, cols].reset_index(drop=True)
    out["stamp_runs"] = _distinct_seed_runs(use, 3)
    return out


def _distinct_seed_runs(use: Any, k: int) -> list[str]:
    out, seen = [], set()
    for r, s in zip(use["run_id"].astype(str), use["seed"].astype(str), strict=True):
        if s not in seen:
            seen.add(s)
            out.append(r)
            if len(out) == k:
                break
    return out


def _merged_excluded(meas: list[dict[str, Any]]) -> dict[str, int]:
    """:func:`usable_rows`' exclusion counts of the whole table, in its order."""
    tot: dict[str, int] = {}
    for m in meas:
        for k, v in m["excluded"].items():
            tot[k] = tot.get(k, 0) + v
    fixed = ("did not pass convergence", "non-finite truth or estimate")
    keys = (sorted(k for k in tot if k.startswith("status ")) + [k for k in fixed if k in tot]
            + sorted(k for k in tot if k.startswith("flag ")))  # fmt: skip
    return {k: tot[k] for k in keys if tot[k]}


def _merged_fits(
    meas: list[dict[str, Any]],
    estimator: str,
    weights: str,
    n_boot: int,
    seed: int,
    population: Any,
) -> tuple[dict[str, Fit], str, dict[str, Any] | None]:
    """:func:`fit_bias` of the whole table from its parts' per-seed sums."""
    estimates = set().union(*(m["estimates"] or set() for m in meas if m["n_used"]))
    if population is not None and estimates == {"population"}:
        import pandas as pd

        from .pooled import pooled_fits
        from .streamed import PartialSource, streamed_fits

        # each part's rows handed over (not kept twice while the fit streams)
        rows = pd.concat([m.pop("pooled_rows") for m in meas], ignore_index=True)
        if estimator == "paired":
            rows = rows[rows["_in_pair"].to_numpy(bool)].reset_index(drop=True)
        rows = rows.drop(columns="_in_pair")
        fit = streamed_fits if isinstance(population, PartialSource) else pooled_fits
        fits, pooled = fit(rows, population, estimator == "paired")
        est = f"pooled {'paired' if pooled['paired'] else 'regression'}"
        if all(f.m is None for f in fits.values()):
            raise ValueError(f"g1_true and g2_true are each constant over the usable rows: "
                             f"{M_UNDEFINED}")  # fmt: skip
        return fits, est, pooled
    kw = {"weights": weights, "n_boot": n_boot, "seed": seed}
    fits = {}
    for comp in ("g1", "g2"):
        parts = [m["fit"][comp] for m in meas]
        n = sum(p["n"] for p in parts)
        ranges = [p["range"] for p in parts if p["range"] is not None]
        if not ranges:
            raise ValueError("no complete rings among the usable rows (a copy of every "
                             "seed's grid point is missing): nothing to fit")  # fmt: skip
        lo, hi = min(r[0] for r in ranges), max(r[1] for r in ranges)
        first = ranges[0][2]

        def sums(kind: str, p: int, parts: list[dict[str, Any]] = parts) -> np.ndarray:
            got = [q[kind] for q in parts if kind in q]
            bad = next((g for g in got if isinstance(g, Exception)), None)
            if bad is not None:
                raise bad
            return stats.merge_group_sums(got, p)[1]

        if hi - lo <= 1e-12:
            why = f"{comp}_true is constant ({first:g}) over the campaign: slope undefined"
            fits[comp] = stats.offset_from_sums(sums("offset", 2), n, reason=why, **kw)
            continue
        if estimator == "paired":
            with_pairs = [p for p in parts if "n_pairs" in p]
            if with_pairs and all(p["flipped"] for p in with_pairs):
                n_pairs = sum(p["n_pairs"] for p in with_pairs)
                fits[comp] = stats.paired_from_sums(sums("paired", 4), n_pairs, **kw)
                continue
            logger.info("%s: truth not flipped within pairs; using the grid regression", comp)
        fits[comp] = stats.regression_from_sums(sums("regression", 5), n, **kw)
    if all(f.m is None for f in fits.values()):
        raise ValueError(f"g1_true and g2_true are each constant over the usable rows: "
                         f"{M_UNDEFINED}")  # fmt: skip
    return fits, estimator, None


def _merged_coverage(meas: list[dict[str, Any]], acc: dict[str, Any], n_seeds: int) -> dict:
    """:func:`measure_coverage` of the whole table from its parts' counts."""
    cov: dict[str, Any] = {}
    for comp in ("g1", "g2"):
        cov[comp] = {}
        for lev in COVERAGE_LEVELS:
            got = [m["cov"][(comp, lev)] for m in meas]
            if any(g is None for g in got):
                cov[comp][lev] = {"skipped": "posterior quantile columns missing"}
                continue
            n = sum(g[0] for g in got)
            if n == 0:
                cov[comp][lev] = {"skipped": "no rows"}
            elif not all(g[1] for g in got if g[0]):
                cov[comp][lev] = {"skipped": "posterior quantiles missing"}
            elif not all(g[2] for g in got if g[0]):
                cov[comp][lev] = {"skipped": "zero-width posterior intervals (point estimates)"}
            else:
                cov[comp][lev] = stats.coverage_counts(
                    n, sum(g[3] for g in got), n_seeds, float(lev), acc["coverage_z"],
                    int(acc["min_seeds"]))  # fmt: skip
    return cov


def merged_ranks(
    meas: list[dict[str, Any]], comp: str
) -> tuple[np.ndarray, np.ndarray, int] | None:
    """A component's distinct finite ranks, their counts and the seeds they come from, over
    the parts (None when the table has no rank column)."""
    got = [m["ranks"][comp] for m in meas]
    if any(g is None for g in got):
        return None
    vals = np.concatenate([g[0] for g in got]) if got else np.zeros(0)
    counts = np.concatenate([g[1] for g in got]) if got else np.zeros(0, dtype=int)
    uniq, inv = np.unique(vals, return_inverse=True)
    return uniq, np.bincount(inv, weights=counts, minlength=len(uniq)).astype(np.int64), sum(
        g[2] for g in got)  # fmt: skip


def _merged_sbc(meas: list[dict[str, Any]], sbc_mode: str, min_seeds: int) -> dict[str, Any]:
    """:func:`calibrate` of the whole table from its parts' rank counts."""
    prior = all(m["prior_flag"] for m in meas if m["n_used"])
    if sbc_mode == "on" or (sbc_mode == "auto" and prior):
        out = {}
        for c in ("g1", "g2"):
            got = merged_ranks(meas, c)
            if got is None:
                out[c] = {"skipped": f"rank_{c} column missing"}
                continue
            vals, counts, n_seeds = got
            out[c] = stats.sbc(np.repeat(vals, counts), min_seeds=min_seeds, n_seeds=n_seeds)
        return out
    if sbc_mode == "off":
        return {"skipped": "disabled (--no-sbc)"}
    return {"skipped": "truths were not drawn from the inference prior (a shear grid); "
                       "use --sbc to force"}  # fmt: skip


def _merged_warnings(meas: list[dict[str, Any]]) -> dict[str, int]:
    from ..core import flags as fl

    tot: dict[str, int] = {}
    for m in meas:
        for k, v in m["warnings"].items():
            tot[k] = tot.get(k, 0) + v
    return {n: tot[n] for n in fl.names(fl.WARNINGS) if tot.get(n)}


def _merged_prior(meas: list[dict[str, Any]]) -> dict[str, Any]:
    """:func:`prior_report` of the whole table."""
    out: dict[str, Any] = {"threshold": PRIOR_PULL_MAX}
    pulls = {c: np.concatenate([m["shrinkage"][c] for m in meas]) for c in ("g1", "g2")}
    for c in ("g1", "g2"):
        out[f"shrinkage_{c}"] = campaign_pull({c: pulls[c]})
    pull = campaign_pull(pulls)
    out["dominated"] = pull is not None and pull > PRIOR_PULL_MAX
    return out


def _merged_noise(meas: list[dict[str, Any]]) -> dict[str, Any] | None:
    """:func:`noise_bias_note` of the whole table (its median S/N and estimates)."""
    used = [m for m in meas if m["n_used"]]
    if not used or any(m["estimates"] is None or m["snr"] is None for m in used):
        return None
    est = set().union(*(m["estimates"] for m in used))
    return noise_note(est, np.concatenate([m["snr"] for m in used]))


def _digest(scans: list[dict[str, Any]], meas: list[dict[str, Any]], n_used: int) -> TableDigest:
    import pandas as pd

    from .plots import merge_worst

    fails: dict[str, int] = {}
    for s in scans:
        for k, v in s["failures"].items():
            fails[k] = fails.get(k, 0) + v
    ranks = {c: r for c in ("g1", "g2") if (r := merged_ranks(meas, c)) is not None}
    sample = pd.concat([m["sample"] for m in meas], ignore_index=True)
    stamps = [r for m in meas for r in m["stamp_runs"]][:3]
    return TableDigest(dict(sorted(fails.items())), merge_worst([s["worst"] for s in scans], 3),
                       ranks, sample, n_used, stamps)  # fmt: skip
