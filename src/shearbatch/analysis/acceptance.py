"""Stage 3 as a whole: a summary table -> fits, coverage, SBC and the acceptance verdict.

:func:`analyze` selects the usable rows (status ``ok`` and passed convergence;
the others are counted by reason), fits ``g_hat = (1 + m) g_true + c`` per
component with the estimator of :mod:`shearbatch.stats`, measures coverage and
(when the truths were drawn from the prior) SBC, and checks the level's
acceptance criteria, each reported as ``{name, value, threshold, passed}``.
Default criteria per level live in :data:`ACCEPTANCE`; :func:`load_acceptance`
reads overrides from YAML.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

from .stats import (
    Fit,
    coverage,
    fit_offset,
    fit_paired,
    fit_regression,
    has_pairs,
    pair_table,
    sbc,
)

__all__ = ["ACCEPTANCE", "LEVELS", "analyze", "criteria", "load_acceptance", "usable_rows"]

logger = logging.getLogger(__name__)

LEVELS = ("level_0", "level_1", "level_2")
#: Default acceptance per level: |m| and |c| ceilings (per component), coverage inside
#: its z-sigma binomial band, minimum fraction of realizations usable, SBC p-value floor.
ACCEPTANCE: dict[str, dict[str, float]] = {
    "level_0": {"max_abs_m": 1e-3, "max_abs_c": 1e-4, "coverage_z": 3.0,
                "min_frac_converged": 0.99, "sbc_p_min": 0.01},
    "level_1": {"max_abs_m": 2e-3, "max_abs_c": 2e-4, "coverage_z": 3.0,
                "min_frac_converged": 0.95, "sbc_p_min": 0.01},
    "level_2": {"max_abs_m": 5e-3, "max_abs_c": 5e-4, "coverage_z": 3.0,
                "min_frac_converged": 0.90, "sbc_p_min": 0.01},
}  # fmt: skip
REQUIRED_COLUMNS = ("run_id", "g1_true", "g2_true", "g1_mean", "g2_mean", "g1_std", "g2_std",
                    "status", "passed_convergence", "seed")  # fmt: skip
COVERAGE_LEVELS = {"0.68": ("q16", "q84"), "0.95": ("q025", "q975")}


def usable_rows(df: Any) -> tuple[Any, dict[str, int]]:
    """The ``ok`` rows that pass convergence with finite estimates, and ``{why excluded: count}``."""
    status = df["status"].fillna("").astype(str)
    conv = df["passed_convergence"].astype(str).str.lower().isin(["true", "1", "1.0"])
    finite = np.isfinite(df[["g1_true", "g2_true", "g1_mean", "g2_mean"]].to_numpy(float)).all(1)
    why = {f"status {s}": int((status == s).sum()) for s in sorted(set(status)) if s != "ok"}
    why["did not pass convergence"] = int(((status == "ok") & ~conv).sum())
    why["non-finite truth or estimate"] = int(((status == "ok") & conv & ~finite).sum())
    keep = (status == "ok").to_numpy() & conv.to_numpy() & finite
    return df[keep].reset_index(drop=True), {k: v for k, v in why.items() if v}


def _col(df: Any, name: str) -> np.ndarray | None:
    return df[name].to_numpy(float) if name in df.columns else None


def fit_component(df: Any, comp: str, estimator: str, n_boot: int = 1000, seed: int = 0) -> Fit:
    """``(m, c)`` of component ``comp`` (``"g1"``/``"g2"``) on usable rows."""
    t, h, s = (
        df[f"{comp}_true"].to_numpy(float),
        df[f"{comp}_mean"].to_numpy(float),
        _col(df, f"{comp}_std"),
    )
    groups = df["seed"].astype(str).to_numpy()
    if np.ptp(t) <= 1e-12:
        why = f"{comp}_true is constant ({t[0]:g}) over the campaign: slope undefined"
        return fit_offset(t, h, s, groups, n_boot=n_boot, seed=seed, reason=why)
    if estimator == "paired":
        ip, im = pair_table(df["pair_id"].to_numpy(object), df["pair_sign"].to_numpy(float))
        sp = None if s is None else s[ip]
        sm = None if s is None else s[im]
        if np.all(t[ip] > 0) and np.allclose(t[ip], -t[im]):
            return fit_paired(t[ip], h[ip], h[im], sp, sm, groups[ip], n_boot=n_boot, seed=seed)
        logger.info("%s: truth not flipped within pairs; using the grid regression", comp)
    return fit_regression(t, h, s, groups, n_boot=n_boot, seed=seed)


def criteria(
    fits: dict[str, Fit], cov: dict[str, Any], sbc_res: dict[str, Any], frac: float, acc: dict
) -> list[dict[str, Any]]:
    """Acceptance criteria as ``{name, value, threshold, passed}``."""
    out = []
    for comp, f in fits.items():
        if f.m is not None:
            out.append({"name": f"|m{comp[1]}|", "value": abs(f.m), "threshold": acc["max_abs_m"],
                        "passed": abs(f.m) <= acc["max_abs_m"]})  # fmt: skip
        out.append({"name": f"|c{comp[1]}|", "value": abs(f.c), "threshold": acc["max_abs_c"],
                    "passed": abs(f.c) <= acc["max_abs_c"]})  # fmt: skip
    for comp, levels in cov.items():
        for lev, r in levels.items():
            if "observed" in r:
                out.append({"name": f"coverage {comp} {float(lev):.0%}", "value": r["observed"],
                            "threshold": r["band"], "passed": r["passed"]})  # fmt: skip
    for comp, r in sbc_res.items():
        if isinstance(r, dict) and "p_value" in r:
            out.append({"name": f"SBC {comp} uniformity p", "value": r["p_value"],
                        "threshold": acc["sbc_p_min"], "passed": r["p_value"] >= acc["sbc_p_min"]})  # fmt: skip
    out.append({"name": "fraction converged", "value": frac,
                "threshold": acc["min_frac_converged"], "passed": frac >= acc["min_frac_converged"]})  # fmt: skip
    return out


def analyze(
    df: Any,
    *,
    level: str = "level_0",
    estimator: str = "auto",
    acceptance: dict[str, float] | None = None,
    sbc_mode: str = "auto",
    n_boot: int = 1000,
    seed: int = 0,
) -> tuple[dict[str, Any], dict[str, Fit], Any]:
    """The whole stage-3 analysis of a summary table.

    Returns ``(results, fits, usable)``: the JSON-ready ``bias_results`` dict,
    the :class:`Fit` per component and the usable rows. Raises ``ValueError``
    (one line) on bad input: missing columns, unknown level or estimator, no
    usable rows, ``paired`` without pairs.
    """
    if level not in LEVELS:
        raise ValueError(f"unknown level {level!r}; use one of {', '.join(LEVELS)}")
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"missing columns: {', '.join(missing)}")
    acc = {**ACCEPTANCE[level], **(acceptance or {})}
    status = df["status"].fillna("").astype(str)
    use, excluded = usable_rows(df)
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
    fits = {c: fit_component(use, c, estimator, n_boot, seed) for c in ("g1", "g2")}
    cov: dict[str, Any] = {}
    for comp in ("g1", "g2"):
        cov[comp] = {}
        for lev, (lo, hi) in COVERAGE_LEVELS.items():
            if f"{comp}_{lo}" not in use.columns or f"{comp}_{hi}" not in use.columns:
                cov[comp][lev] = {"skipped": "posterior quantile columns missing"}
                continue
            cov[comp][lev] = coverage(use[f"{comp}_true"], use[f"{comp}_{lo}"],
                                      use[f"{comp}_{hi}"], float(lev), acc["coverage_z"],
                                      use["seed"].astype(str).to_numpy())  # fmt: skip
    prior = "truth_from_prior" in use.columns and bool(
        use["truth_from_prior"].astype(str).str.lower().eq("true").all())  # fmt: skip
    if sbc_mode == "on" or (sbc_mode == "auto" and prior):
        sbc_res = {c: sbc(use[f"rank_{c}"].to_numpy(float)) if f"rank_{c}" in use.columns
                   else {"skipped": f"rank_{c} column missing"} for c in ("g1", "g2")}  # fmt: skip
    else:
        why = (
            "disabled (--no-sbc)"
            if sbc_mode == "off"
            else (
                "truths were not drawn from the inference prior (a shear grid); use --sbc to force"
            )
        )
        sbc_res = {"skipped": why}
    frac = len(use) / len(df)
    crit = criteria(fits, cov, sbc_res, frac, acc)
    res: dict[str, Any] = {
        "level": level, "estimator": estimator, "n_realizations": len(df),
        "n_ok": int((status == "ok").sum()), "n_failed": int((status == "failed").sum()),
        "n_incomplete": int((status == "incomplete").sum()),
        "n_corrupt": int((status == "corrupt").sum()), "n_used": len(use), "excluded": excluded,
    }  # fmt: skip
    for comp, f in fits.items():
        k = comp[1]
        res.update({f"m{k}": f.m, f"m{k}_err": f.m_err, f"c{k}": f.c, f"c{k}_err": f.c_err})
        if f.m_reason:
            res[f"m{k}_reason"] = f.m_reason
    res["fits"] = {c: {"error_method": f.error_method, "n": f.n, "n_groups": f.n_groups,
                       "errors": f.errors} for c, f in fits.items()}  # fmt: skip
    res.update(coverage=cov, sbc=sbc_res, acceptance=acc, criteria=crit)
    res["passed"] = all(c["passed"] for c in crit)
    return res, fits, use


def load_acceptance(path: str | None, level: str) -> dict[str, float]:
    """Overrides for ``level`` from a YAML (``{level_k: {key: value}}``, top level or under
    ``acceptance:``); unknown levels or keys raise ``ValueError`` naming the key path."""
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
        if lev not in LEVELS:
            raise ValueError(f"acceptance.{lev}: unknown level; use one of {', '.join(LEVELS)}")
        if not isinstance(vals, dict):
            raise ValueError(f"acceptance.{lev}: expected a mapping")
        for k, v in vals.items():
            if k not in ACCEPTANCE[lev]:
                raise ValueError(
                    f"acceptance.{lev}.{k}: unknown key; use {', '.join(ACCEPTANCE[lev])}"
                )
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                raise ValueError(f"acceptance.{lev}.{k}: must be a number, got {v!r}")
    return {k: float(v) for k, v in (sec.get(level) or {}).items()}
