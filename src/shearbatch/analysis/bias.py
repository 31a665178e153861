"""Stage 3: a summary table -> m and c with errors, coverage, SBC and a verdict against a
requirement, as a :class:`~shearbatch.analysis.result.BiasResult`.

:func:`measure_bias` runs these steps over the table's parts (a DataFrame is one part):

0. :class:`Settings`: the options (estimator, point estimate, weights, resamples, SBC,
   target sigma_m), each checked there and nowhere else (:class:`BadSetting` names it);
   the requirement comes chosen and resolved
   (:func:`shearbatch.app.stats_stage.choose_requirement`), or as a name resolved here;
1. :func:`scan_part` per part, a :class:`~shearbatch.analysis.parts.PartScan`
   (:func:`prepare_table`: the current column names, the required columns;
   :func:`~shearbatch.analysis.scope.scope`: the rows judged and whether the campaign is
   unfinished), the parts' scans folded; then, over the whole table, the point estimate
   (``mean``, ``median`` or ``mode``; ``auto``: the mode for a MAP campaign, the mean
   otherwise) and its columns checked, and finite truths in every ``ok`` row;
2. :func:`measure_part` per part, a :class:`~shearbatch.analysis.parts.PartSums`, folded
   likewise: the usable rows (:func:`usable_rows`), the complete
   rings and pairs, the per-seed sums of ``g_hat = (1 + m) g_true + c`` per component
   (:mod:`shearbatch.analysis.bias_fits`: regression, paired, constant truth), the coverage
   and rank counts, the notes' inputs, the host estimators' sums;
3. from the folded sums: the estimator (``auto``: ``paired`` when there are +g/-g pairs),
   the fits with errors over seeds (or, for an interim-model campaign, the population
   estimator pooled per grid point, :mod:`shearbatch.analysis.pooled`), coverage, SBC
   (when the truths were drawn from the prior, or forced), :func:`judge` (each criterion
   three-valued, INCONCLUSIVE for an unfinished campaign), the notes
   (:func:`noise_bias_note`, :func:`warning_counts`) and the planning
   (:func:`shearbatch.analysis.verdict.planning`).

``bias-stats`` and :meth:`shearbatch.api.Campaign.stats` both reach it through
:func:`shearbatch.app.run_stats`.

A table may come in parts sharing no seed (:mod:`shearbatch.analysis.parts`: a
field-scale ``summary.csv`` split by seed; a DataFrame is one part,
:class:`~shearbatch.analysis.parts.InMemory`). The two passes are folds: each part's
record (:class:`~shearbatch.analysis.parts.PartScan`,
:class:`~shearbatch.analysis.parts.PartSums`) is merged into the parts' before it, in part
order (an associative ``merge`` from ``empty()``), and the sections are read off the
folded records (``_merged_*``): the whole table's numbers, bit for bit, in memory set by a
part.
"""

from __future__ import annotations

import dataclasses
import logging
from functools import reduce
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.priors import PRIOR_PULL_MAX, campaign_pull
from ..schema import requirements as rq
from . import bias_fits
from .bias_fits import (
    WEIGHTS,
    Fit,
    SeedSums,
    complete_rings,
    error_label,
    has_pairs,
    pair_table,
)
from .parts import (
    BadTruth,
    CompSums,
    Counts,
    InMemory,
    IntervalCount,
    PartScan,
    PartSums,
    PerComp,
    PerPoint,
    RankCounts,
)
from .result import (
    Acceptance,
    BiasResult,
    ComponentFit,
    Coverage,
    Coverages,
    Criterion,
    Design,
    Fits,
    NoiseBias,
    Population,
    Prior,
    Requirement,
    Sbc,
    SbcTest,
    Scope,
)
from .scope import scope
from .summary_table import current_columns
from .verdict import criteria, overall, planning, sbc_status

if TYPE_CHECKING:
    from .pooled import PopulationDraws
    from .streamed import PartialSource

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
    """``regression``, ``paired`` or ``auto`` (``paired`` when there are complete +g/-g
    pairs, else ``regression``: :func:`measure_bias`)."""
    point: str = "auto"
    """``mean``, ``median``, ``mode`` or ``auto`` (the mode for a MAP campaign, the mean
    otherwise: :func:`_merged_point`)."""
    weights: str = "none"
    """``none`` or ``inverse-variance``."""
    n_boot: int = 1000
    """Bootstrap resamples of the paired estimator, >= 2."""
    sbc_mode: str = "auto"
    """``on``, ``off`` or ``auto`` (SBC when the truths were drawn from the inference
    prior: :func:`_merged_sbc`)."""
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


def noise_bias_note(use: Any) -> NoiseBias | None:
    """For campaigns at low S/N (median below :data:`NOISE_BIAS_SNR`): the expected order
    of the joint mode's noise bias (MAP), or the warning that averaged posterior means
    (NUTS, VI) are no unbiased shear estimator there; each names the page where the
    measured values are."""
    if "point_estimate" not in use or "snr" not in use or not len(use):
        return None
    snr = use["snr"].to_numpy(float)
    return noise_note(set(use["point_estimate"].dropna().astype(str)), snr[np.isfinite(snr)])


def noise_note(estimates: set[str], snr: np.ndarray) -> NoiseBias | None:
    """:func:`noise_bias_note` from the usable rows' point estimates and finite S/N."""
    if not snr.size or np.median(snr) >= NOISE_BIAS_SNR or len(estimates) != 1:
        return None
    med = float(np.median(snr))
    if estimates == {"population"}:  # the interim model's marginal likelihood: no such note
        return None
    if estimates != {"mode"}:  # posterior means / medians (NUTS, VI)
        return NoiseBias.of(median_snr=med, expected_order=None,
                message="per-realization posterior means (or medians) of g marginalise the "
                           "intrinsic ellipticity: where it is a free latent their average "
                           f"is not an unbiased shear estimator at survey S/N (median {med:.3g})"
                           "; NUTS's and VI's measured m for one exponential galaxy: "
                           f"{MEASURED_NOISE_BIAS}; the survey configs use the joint mode "
                           "(--method map); the population estimator (inference.shear_model: "
                           "interim) pools marginal likelihoods instead "
                           "(docs/results/population_estimator.md)")  # fmt: skip
    return NoiseBias.of(median_snr=med, expected_order=med**-2,
            message=f"MAP estimates are joint modes: noise bias of order (S/N)^-2 = "
                       f"{med**-2:.1g} at the median S/N {med:.3g}; measured m for one "
                       f"galaxy per realization against S/N: {MEASURED_NOISE_BIAS}; it can be "
                       "far larger with many small galaxies sharing one shear: "
                       f"{MEASURED_LEVELS}; the population estimator (inference.shear_model: "
                       "interim) integrates the nuisances instead "
                       "(docs/results/population_estimator.md)")  # fmt: skip


def warning_counts(use: Any) -> dict[str, int]:
    """``{flag: realizations}`` of the warning flags (:data:`shearbatch.core.failure_flags.WARNINGS`)
    among the USED rows (e.g. ``POP_WEIGHTS_COLLAPSED``: a galaxy's population weights
    collapsed; the realization is kept)."""
    from ..core import failure_flags as fl

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
    cov: Coverages,
    sbc_res: Sbc,
    n_used: int,
    sc: Scope,
    acc: Acceptance,
) -> tuple[list[Criterion], str, str | None]:
    """Step 3's verdict: ``(criteria, verdict, verdict of the complete ones)``. The fraction
    converged is over the complete realizations (missing work is not a convergence
    failure); an unfinished campaign is INCONCLUSIVE, judged on its complete ones too
    (else that verdict is None)."""
    frac = n_used / max(sc.n_complete, 1)
    crit = criteria(fits, cov, sbc_res, frac, acc, n_used)
    verdict = overall(c.status for c in crit)
    if sc.unfinished:  # never a verdict on missing work
        return crit, "INCONCLUSIVE", verdict
    return crit, verdict, None


def measure_bias(
    df: Any,
    *,
    requirement: str | Requirement = "level0",
    acceptance: dict[str, float] | None = None,
    population: PopulationDraws | PartialSource | None = None,
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
    resolved (:func:`shearbatch.app.stats_stage.choose_requirement`: used as it is, ``chosen``
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
    parts = df if hasattr(df, "frames") else InMemory(df)
    # pass 1: counts, the point estimate, the checks (before any sum)
    scan = reduce(PartScan.merge, (scan_part(part, st.include_unplanned)
                                   for part in parts.frames()), PartScan.empty())  # fmt: skip
    sc = merge_scope(scan, st.include_unplanned)
    point = _merged_point(scan, st.point)
    acc = Acceptance.of(**{**rq.criteria_of(name), **(acceptance or {})})
    _merged_truth_check(scan)
    names = present_order(set(getattr(scan.present, point)))
    n_rows = scan.n_planned
    frac_sample = min(1.0, SAMPLE_ROWS / max(n_rows, 1))
    # pass 2: per-seed sums of every part
    single = parts.n_parts == 1
    total = reduce(PartSums.merge, (
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
    ), PartSums.empty())  # fmt: skip
    excluded = _merged_excluded(total)
    n_used = total.n_used
    if n_used == 0:
        raise ValueError(f"no usable rows (excluded: {excluded or 'none'})")
    estimator = st.estimator
    pairs = total.has_pairs
    if estimator == "auto":
        estimator = "paired" if pairs else "regression"
    elif estimator == "paired" and not pairs:
        raise ValueError("estimator paired: no complete +g/-g pairs (pair_id, pair_sign)")
    # the parts' pooled-fit rows handed over (not kept twice while the fit streams)
    held = [total.pooled_rows]
    total = dataclasses.replace(total, pooled_rows=())
    fits, estimator, pooled = _merged_fits(total, held, estimator, weights, n_boot, seed,
                                           population)  # fmt: skip
    n_seeds = total.n_seeds
    cov = _merged_coverage(total, acc, n_seeds)
    sbc_res = _merged_sbc(total, st.sbc_mode, int(acc.min_seeds), acc.sbc_p_min)
    crit, verdict, of_complete = judge(fits, cov, sbc_res, n_used, sc, acc)
    design = Design.of(paired=total.design_pairs,
                       rotations=1 if total.rotations is None else total.rotations,
                       error_groups="seed", incomplete_rings_left_out=total.incomplete)  # fmt: skip
    bias: dict[str, Any] = {}
    for comp, f in fits.items():
        k = comp[1]
        bias.update({f"m{k}": f.m, f"m{k}_err": f.m_err, f"c{k}": f.c, f"c{k}_err": f.c_err,
                     f"m{k}_reason": f.m_reason or None})  # fmt: skip
    result = BiasResult.build(
        level=rq.alias_of(name) or name, estimator=estimator,
        point_estimate="population" if pooled is not None else point, weights=weights,
        requirement=req,
        n_realizations=n_rows, n_ok=scan.n_ok, n_failed=scan.n_failed,
        n_incomplete=scan.n_incomplete, n_corrupt=scan.n_corrupt, n_used=n_used,
        n_seeds=n_seeds, excluded=excluded, **bias,
        fits=Fits(**{c: ComponentFit.of(error_method=f.error_method,
                                        error_label=error_label(f), n=f.n,
                                        n_groups=f.n_groups, weights=f.weights,
                                        errors=f.errors) for c, f in fits.items()}),
        design=design, warnings=_merged_warnings(total), population=pooled, coverage=cov,
        sbc=sbc_res, acceptance=acc, z=acc.z, criteria=tuple(crit),
        prior=_merged_prior(total), noise_bias=_merged_noise(total), verdict=verdict,
        scope=sc, verdict_of_complete=of_complete,
        planning=planning(crit, fits, design, n_used, n_seeds, st.target_sigma_m),
    )  # fmt: skip
    from .compare import compare_merge  # host estimators beside the method (issue 45)

    method = total.method if total.method is not None else "method"
    frac = n_used / max(sc.n_complete, 1)
    side = compare_merge(total.compare, acc, frac, method) if names else None
    if side is not None:
        result = result.replace(estimators=side)
    digest = _digest(scan, total)
    usable = total.usable if single else digest.sample
    return BiasAnalysis(result, fits, usable, digest)


# ------------------------------------------------------------------ a table in parts


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


def scan_part(df: Any, include_unplanned: bool = False) -> PartScan:
    """Pass 1 over a part: its scope and status counts, what resolves the point estimate
    and checks it (:func:`_merged_point`, per candidate), the bad truths
    (:func:`_merged_truth_check`), the host estimators present per candidate point, the
    failures by flag and the worst-converged candidates."""
    from . import report_text
    from .compare import present
    from .plots import worst_rows

    df = prepare_table(df)
    failures, worst, columns = (
        report_text.failures_by_flag(df),
        worst_rows(df, 3),
        tuple(df.columns),
    )
    df, sc = scope(df, include_unplanned)
    status, conv = _ok_converged(df)
    n_of = {s: int((status == s).sum()) for s in ("ok", "failed", "incomplete", "corrupt")}
    ok = (status == "ok").to_numpy()
    truth = np.isfinite(df[["g1_true", "g2_true"]].to_numpy(float)).all(1)
    has_mean = np.isfinite(df[["g1_mean", "g2_mean"]].to_numpy(float)).all(1)
    empty, present_in = [], []
    for p in POINT_ESTIMATES:
        cols = [f"g1_{p}", f"g2_{p}"]
        if not all(c in df.columns for c in cols):
            empty.append(0)
            present_in.append(frozenset())
            continue
        fin = np.isfinite(df[cols].to_numpy(float)).all(1)
        empty.append(int((ok & conv.to_numpy() & has_mean & ~fin).sum()))
        keep = ok & conv.to_numpy() & truth & fin
        present_in.append(frozenset(present(df[keep])) if keep.any() else frozenset())
    bad_truth = []
    for c in ("g1_true", "g2_true"):
        bad = ok & ~np.isfinite(pd_numeric(df[c]))
        bad_truth.append(BadTruth(int(bad.sum()),
                                  str(df["run_id"][bad].iloc[0]) if bad.any() else None))  # fmt: skip
    return PartScan(
        columns=columns, failures=Counts.of(failures), worst=(worst,),
        n_unplanned=sc.n_unplanned, n_planned=sc.n_planned, n_complete=sc.n_complete,
        unfinished=sc.unfinished, n_ok=n_of["ok"], n_failed=n_of["failed"],
        n_incomplete=n_of["incomplete"], n_corrupt=n_of["corrupt"],
        estimates=(frozenset(df["point_estimate"].dropna().astype(str))
                   if "point_estimate" in df else frozenset()),
        has_mode=bool("g1_mode" in df and df["g1_mode"].notna().any()),
        n_empty=PerPoint(*empty), present=PerPoint(*present_in), bad_truth=PerComp(*bad_truth),
    )  # fmt: skip


def merge_scope(scan: PartScan, include_unplanned: bool = False) -> Scope:
    """:func:`~shearbatch.analysis.scope.scope`'s report of the whole table."""
    n_unplanned, n_planned, n_complete = scan.n_unplanned, scan.n_planned, scan.n_complete
    unfinished = scan.unfinished
    message = (f"unfinished: {n_complete} of {n_planned} planned realizations complete"
               if unfinished else "")  # fmt: skip
    return Scope(n_unplanned=n_unplanned,
                 unplanned_dropped=n_unplanned if not include_unplanned else 0,
                 n_planned=n_planned, n_complete=n_complete, unfinished=unfinished,
                 message=message)  # fmt: skip


def _merged_point(scan: PartScan, point: str) -> str:
    """The point estimate of the whole table (``auto``: the mode for a MAP campaign with
    modes, the mean otherwise), its columns checked."""
    if point == "auto":
        point = "mode" if scan.estimates == {"mode"} and scan.has_mode else "mean"
    cols = [f"g1_{point}", f"g2_{point}"]
    header = scan.columns or ()
    missing = [c for c in cols if c not in header]
    old = " (convergence.json without a mode: an older bias-run)" if point == "mode" else ""
    if missing:
        raise ValueError(f"point estimate {point}: missing columns: {', '.join(missing)}; "
                         "re-run bias-extract or use --point mean")  # fmt: skip
    empty = getattr(scan.n_empty, point)
    if empty:
        raise ValueError(f"point estimate {point}: {', '.join(cols)} empty in {empty} "
                         f"converged row(s){old}; use --point mean or median")  # fmt: skip
    return point


def _merged_truth_check(scan: PartScan) -> None:
    """``ValueError`` when an ``ok`` row of the whole table has a non-finite truth."""
    for c, bad in zip(("g1_true", "g2_true"), scan.bad_truth, strict=True):
        if bad.n:
            raise ValueError(f"{c}: not a finite number in {bad.n} ok row(s) (e.g. "
                             f"{bad.first}); re-run bias-extract")  # fmt: skip


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
) -> PartSums:
    """Pass 2 over a part holding whole seeds: its usable rows (:func:`usable_rows`), the
    per-seed sums of every estimator (:mod:`shearbatch.analysis.bias_fits`: regression, paired
    and constant-truth, each component), the coverage and rank counts, the design,
    warning and note inputs, the host estimators' sums
    (:func:`shearbatch.analysis.compare.compare_part`), the pooled fit's rows
    (``pooled_rows``) and the residual figure's sample (the seeds hashed below
    ``sample``)."""
    from .compare import compare_part

    df, _ = scope(prepare_table(df), include_unplanned)
    use, excl = usable_rows(df, point)
    n_used = len(use)
    seeds_all = use["seed"].astype(str).to_numpy()
    pairs_here = bool(len(use)) and "pair_id" in use.columns and \
        "pair_sign" in use.columns and has_pairs(use["pair_id"].to_numpy(object),
                                                 use["pair_sign"].to_numpy(float))  # fmt: skip
    ring, incomplete = complete_rings(use)
    rows = use[ring].reset_index(drop=True)
    groups = rows["seed"].astype(str).to_numpy()
    pairs = None
    if len(rows) and "pair_id" in rows.columns and "pair_sign" in rows.columns:
        pairs = pair_table(rows["pair_id"].to_numpy(object), rows["pair_sign"].to_numpy(float))
    fit = []
    for comp in ("g1", "g2"):
        t = rows[f"{comp}_true"].to_numpy(float)
        h = rows[f"{comp}_{point}"].to_numpy(float)
        s = _col(rows, f"{comp}_std")
        reg = SeedSums.of(
            lambda t=t, h=h, s=s: bias_fits.regression_terms(t, h, s, weights), groups
        )
        off = SeedSums.of(lambda t=t, h=h, s=s: bias_fits.offset_terms(t, h, s, weights), groups)
        paired, n_pairs, flipped = None, 0, True
        if pairs is not None:
            ip, im = pairs
            n_pairs = len(ip)
            flipped = bool(np.all(t[ip] > 0) and np.allclose(t[ip], -t[im]))
            paired = SeedSums.of(lambda t=t, h=h, s=s, ip=ip, im=im: bias_fits.paired_terms(
                t[ip], h[ip], h[im], None if s is None else s[ip],
                None if s is None else s[im], weights), groups[ip])  # fmt: skip
        fit.append(CompSums(len(t), (t.min(), t.max(), t[0]) if len(t) else None, reg, off,
                            paired, n_pairs, flipped))  # fmt: skip
    cov = []
    for comp in ("g1", "g2"):
        levels: list[IntervalCount | None] = []
        for lo, hi in COVERAGE_LEVELS.values():
            if f"{comp}_{lo}" not in use.columns or f"{comp}_{hi}" not in use.columns:
                levels.append(None)
                continue
            t, a, b = (use[f"{comp}_{x}"].to_numpy(float) for x in ("true", lo, hi))
            finite = bool(np.all(np.isfinite(a)) and np.all(np.isfinite(b)))
            levels.append(IntervalCount(len(t), finite, bool(np.all(b > a)),
                                        int(((a <= t) & (t <= b)).sum())))  # fmt: skip
        cov.append(tuple(levels))
    prior_flag = "truth_from_prior" in use.columns and bool(
        use["truth_from_prior"].astype(str).str.lower().eq("true").all())  # fmt: skip
    ranks: list[RankCounts | None] = []
    for comp in ("g1", "g2"):
        if f"rank_{comp}" not in use.columns:
            ranks.append(None)
            continue
        r = use[f"rank_{comp}"].to_numpy(float)
        fin = np.isfinite(r)
        vals, counts = np.unique(r[fin], return_counts=True)
        ranks.append(RankCounts(vals, counts, len(np.unique(seeds_all[fin]))))
    nrot = use["n_rotations"].to_numpy(float) if "n_rotations" in use.columns else np.array([])
    nrot = nrot[np.isfinite(nrot)]
    shrinkage = []
    for c in ("g1", "g2"):
        col = f"prior_shrinkage_{c}"
        v = use[col].to_numpy(float) if col in use else np.array([])
        shrinkage.append(v[np.isfinite(v)])
    estimates = (frozenset(use["point_estimate"].dropna().astype(str))
                 if "point_estimate" in use else None)  # fmt: skip
    snr = use["snr"].to_numpy(float) if "snr" in use else None
    pooled = ()
    if pooled_rows:
        from .pooled import FIT_COLUMNS

        pr = rows[[c for c in FIT_COLUMNS if c in rows.columns]].copy()
        keep = np.zeros(len(pr), dtype=bool)
        if pairs is not None:
            keep[np.concatenate([pairs[0], pairs[1]])] = True
        pr["_in_pair"] = keep
        pooled = (pr.drop(columns=[c for c in ("pair_id", "pair_sign") if c in pr]),)
    cols = [c for comp in ("g1", "g2") for c in (f"{comp}_true", f"{comp}_{point}",
                                                  f"{comp}_mode", f"{comp}_std")
            if c in use.columns]  # fmt: skip
    cols = list(dict.fromkeys([*cols, "seed"]))
    pick = _seed_hash(seeds_all) < sample if sample < 1.0 else np.ones(len(use), dtype=bool)
    return PartSums(
        n_used=n_used, n_seeds=len(np.unique(seeds_all)), excluded=Counts.of(excl),
        usable=use if keep_usable else None, has_pairs=pairs_here, incomplete=incomplete,
        fits=PerComp(*fit), coverage=PerComp(*cov),
        # a part without usable rows leaves the flags and the notes' inputs to the others
        prior_flag=prior_flag or not n_used, ranks=PerComp(*ranks),
        rotations=int(nrot.max()) if nrot.size else 1,
        design_pairs="pair_sign" in use.columns and bool(use["pair_sign"].isin([1, -1]).any()),
        warnings=Counts.of(warning_counts(use)), shrinkage=PerComp(*shrinkage),
        estimates=(estimates or frozenset()) if n_used else frozenset(),
        noise_inputs=not n_used or (estimates is not None and snr is not None),
        snr=snr[np.isfinite(snr)] if n_used and snr is not None else np.zeros(0),
        method=str(use["method"].iloc[0]) if "method" in use.columns and len(use) else None,
        compare=compare_part(use, point, names) if names else None, pooled_rows=pooled,
        sample=(use.loc[pick, cols].reset_index(drop=True),),
        stamp_runs=tuple(_distinct_seed_runs(use, 3)),
    )  # fmt: skip


def _distinct_seed_runs(use: Any, k: int) -> list[str]:
    out, seen = [], set()
    for r, s in zip(use["run_id"].astype(str), use["seed"].astype(str), strict=True):
        if s not in seen:
            seen.add(s)
            out.append(r)
            if len(out) == k:
                break
    return out


def _merged_excluded(total: PartSums) -> dict[str, int]:
    """:func:`usable_rows`' exclusion counts of the whole table, in its order."""
    fixed = ("did not pass convergence", "non-finite truth or estimate")
    labels = total.excluded.labels()
    keys = (sorted(k for k in labels if k.startswith("status ")) + [k for k in fixed if k in labels]
            + sorted(k for k in labels if k.startswith("flag ")))  # fmt: skip
    return {k: total.excluded.get(k) for k in keys if total.excluded.get(k)}


def _merged_fits(
    total: PartSums,
    held: list[tuple[Any, ...]],
    estimator: str,
    weights: str,
    n_boot: int,
    seed: int,
    population: PopulationDraws | PartialSource | None,
) -> tuple[dict[str, Fit], str, Population | None]:
    """The fits of the whole table from its parts' per-seed sums, or the pooled population
    fit of an interim-model campaign's rows (``held``: the parts' rows, handed over)."""
    if population is not None and total.estimates == {"population"}:
        import pandas as pd

        from .pooled import pooled_fits
        from .streamed import PartialSource, streamed_fits

        rows = pd.concat(held.pop(), ignore_index=True)
        if estimator == "paired":
            rows = rows[rows["_in_pair"].to_numpy(bool)].reset_index(drop=True)
        rows = rows.drop(columns="_in_pair")
        fit = streamed_fits if isinstance(population, PartialSource) else pooled_fits
        fits, pooled = fit(rows, population, estimator == "paired")
        est = f"pooled {'paired' if pooled.paired else 'regression'}"
        if all(f.m is None for f in fits.values()):
            raise ValueError(f"g1_true and g2_true are each constant over the usable rows: "
                             f"{M_UNDEFINED}")  # fmt: skip
        return fits, est, pooled
    held.clear()
    kw = {"weights": weights, "n_boot": n_boot, "seed": seed}
    fits = {}
    for comp in ("g1", "g2"):
        cs: CompSums = getattr(total.fits, comp)
        if cs.range is None:
            raise ValueError("no complete rings among the usable rows (a copy of every "
                             "seed's grid point is missing): nothing to fit")  # fmt: skip
        lo, hi, first = cs.range
        if hi - lo <= 1e-12:
            why = f"{comp}_true is constant ({first:g}) over the campaign: slope undefined"
            fits[comp] = bias_fits.offset_from_sums(cs.offset.total(2), cs.n, reason=why, **kw)
            continue
        if estimator == "paired":
            if cs.paired is not None and cs.flipped:
                fits[comp] = bias_fits.paired_from_sums(cs.paired.total(4), cs.n_pairs, **kw)
                continue
            logger.info("%s: truth not flipped within pairs; using the grid regression", comp)
        fits[comp] = bias_fits.regression_from_sums(cs.regression.total(5), cs.n, **kw)
    if all(f.m is None for f in fits.values()):
        raise ValueError(f"g1_true and g2_true are each constant over the usable rows: "
                         f"{M_UNDEFINED}")  # fmt: skip
    return fits, estimator, None


def _merged_coverage(total: PartSums, acc: Acceptance, n_seeds: int) -> Coverages:
    """The coverage section of the whole table from its parts' counts."""
    cov: dict[str, dict[str, Coverage]] = {}
    for comp in ("g1", "g2"):
        cov[comp] = {}
        for lev, got in zip(COVERAGE_LEVELS, getattr(total.coverage, comp), strict=True):
            if got is None:
                cov[comp][lev] = Coverage.of(skipped="posterior quantile columns missing")
            elif got.n == 0:
                cov[comp][lev] = Coverage.of(skipped="no rows")
            elif not got.finite:
                cov[comp][lev] = Coverage.of(skipped="posterior quantiles missing")
            elif not got.ordered:
                cov[comp][lev] = Coverage.of(
                    skipped="zero-width posterior intervals (point estimates)")  # fmt: skip
            else:
                cov[comp][lev] = bias_fits.coverage_counts(
                    got.n, got.inside, n_seeds, float(lev), acc.coverage_z,
                    int(acc.min_seeds))  # fmt: skip
    return Coverages.of(**cov)


def _merged_sbc(total: PartSums, sbc_mode: str, min_seeds: int, p_min: float) -> Sbc:
    """The SBC section of the whole table from its parts' rank counts (run when the truths
    were drawn from the inference prior, or forced), each test judged against the
    p-value floor ``p_min`` (:func:`~shearbatch.analysis.verdict.sbc_status`)."""
    if sbc_mode == "on" or (sbc_mode == "auto" and total.prior_flag):
        out = {}
        for c in ("g1", "g2"):
            got: RankCounts | None = getattr(total.ranks, c)
            if got is None:
                out[c] = SbcTest.of(skipped=f"rank_{c} column missing")
                continue
            out[c] = sbc_status(bias_fits.sbc(np.repeat(got.values, got.counts),
                                              min_seeds=min_seeds, n_seeds=got.n_seeds),
                                p_min)  # fmt: skip
        return Sbc.of(**out)
    if sbc_mode == "off":
        return Sbc.of(skipped="disabled (--no-sbc)")
    return Sbc.of(skipped="truths were not drawn from the inference prior (a shear grid); "
                          "use --sbc to force")  # fmt: skip


def _merged_warnings(total: PartSums) -> dict[str, int]:
    from ..core import failure_flags as fl

    return {n: total.warnings.get(n) for n in fl.names(fl.WARNINGS) if total.warnings.get(n)}


def _merged_prior(total: PartSums) -> Prior:
    """The prior section of the whole table: each component's and the campaign's prior
    shrinkage pull, and whether the prior dominated."""
    pulls = {"g1": total.shrinkage.g1, "g2": total.shrinkage.g2}
    pull = campaign_pull(pulls)
    return Prior.of(threshold=PRIOR_PULL_MAX, shrinkage_g1=campaign_pull({"g1": pulls["g1"]}),
                    shrinkage_g2=campaign_pull({"g2": pulls["g2"]}),
                    dominated=pull is not None and pull > PRIOR_PULL_MAX)  # fmt: skip


def _merged_noise(total: PartSums) -> NoiseBias | None:
    """:func:`noise_bias_note` of the whole table (its median S/N and estimates)."""
    if not total.n_used or not total.noise_inputs:
        return None
    return noise_note(set(total.estimates), total.snr)


def _digest(scan: PartScan, total: PartSums) -> TableDigest:
    import pandas as pd

    from .plots import merge_worst

    fails = {k: scan.failures.get(k) for k in sorted(scan.failures.labels())}
    ranks = {c: (r.values, r.counts, r.n_seeds) for c in ("g1", "g2")
             if (r := getattr(total.ranks, c)) is not None}  # fmt: skip
    sample = pd.concat(list(total.sample), ignore_index=True)
    return TableDigest(fails, merge_worst(list(scan.worst), 3), ranks, sample, total.n_used,
                       list(total.stamp_runs))  # fmt: skip
