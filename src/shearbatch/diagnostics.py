"""Per-realization convergence diagnostics, method-aware, and failure detection.

Failures are data: :func:`failure_reason` inspects one realization's data,
draws and optimiser record and returns a short reason (or ``None``); the
engine writes it into that realization's ``convergence.json`` with
``status: "failed"`` and carries on with the rest of the batch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numpyro.diagnostics import effective_sample_size, split_gelman_rubin
from scipy.special import ndtri
from scipy.stats import rankdata

__all__ = [
    "NUTS_THRESHOLDS",
    "bfmi",
    "ess_bulk",
    "ess_tail",
    "failure_reason",
    "map_diagnostics",
    "nuts_diagnostics",
    "rhat",
    "vi_diagnostics",
]

#: defaults for ``passed`` in a NUTS convergence.json (bias-extract can apply its own)
NUTS_THRESHOLDS = {"rhat_max": 1.01, "ess_min": 400.0, "divergence_frac_max": 0.0, "bfmi_min": 0.3}


def _rank_normalize(x: np.ndarray) -> np.ndarray:
    """z-scores of the pooled ranks, (r - 3/8) / (n + 1/4) -> Phi^-1 (Vehtari et al. 2021, eq. 14)."""
    r = rankdata(x, method="average").reshape(x.shape)
    return ndtri((r - 0.375) / (x.size + 0.25))


def _constant(x: np.ndarray) -> bool:
    return bool(np.all(x == x.flat[0])) or not np.all(np.isfinite(x))


def rhat(x: np.ndarray) -> float:
    """Rank-normalised split R-hat, max of bulk and folded (Vehtari et al. 2021, sec. 4.2).

    ``x``: (chain, draw). NaN when the draws are constant or non-finite.
    """
    if _constant(x):
        return float("nan")
    bulk = split_gelman_rubin(_rank_normalize(x)[..., None])[0]
    folded = np.abs(x - np.median(x))
    tail = split_gelman_rubin(_rank_normalize(folded)[..., None])[0]
    return float(max(bulk, tail))


def ess_bulk(x: np.ndarray) -> float:
    """Bulk ESS: ESS of the rank-normalised split chains (Vehtari et al. 2021, sec. 4.3)."""
    if _constant(x):
        return float("nan")
    half = x.shape[1] // 2
    split = np.concatenate([x[:, :half], x[:, half : 2 * half]], axis=0)
    return float(effective_sample_size(_rank_normalize(split)[..., None])[0])


def ess_tail(x: np.ndarray) -> float:
    """Tail ESS: min ESS of the 5% and 95% quantile indicators (Vehtari et al. 2021, sec. 4.3)."""
    if _constant(x):
        return float("nan")
    half = x.shape[1] // 2
    split = np.concatenate([x[:, :half], x[:, half : 2 * half]], axis=0)
    out = []
    for q in (0.05, 0.95):
        ind = (split <= np.quantile(split, q)).astype(float)
        if _constant(ind):
            return float("nan")
        out.append(effective_sample_size(ind[..., None])[0])
    return float(min(out))


def bfmi(energy: np.ndarray) -> np.ndarray:
    """E-BFMI per chain: sum (E_n - E_{n-1})^2 / sum (E_n - mean E)^2 (Betancourt 2016)."""
    e = np.asarray(energy, dtype=float)
    num = np.sum(np.diff(e, axis=1) ** 2, axis=1)
    den = np.sum((e - e.mean(axis=1, keepdims=True)) ** 2, axis=1)
    return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def _per_site(fn, posterior: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """Apply a (chain, draw) statistic to every site (per galaxy for per-galaxy sites)."""
    out: dict[str, Any] = {}
    for k, v in posterior.items():
        v = np.asarray(v)
        out[k] = fn(v) if v.ndim == 2 else [fn(v[..., j]) for j in range(v.shape[2])]
    return out


def nuts_diagnostics(
    lane: Any,
    posterior: Mapping[str, np.ndarray],
    max_tree_depth: int,
    thresholds: Mapping[str, float] = NUTS_THRESHOLDS,
) -> dict[str, Any]:
    """R-hat, bulk/tail ESS for every latent, divergences, BFMI, tree-depth hits.

    Non-finite draws or energies (a failed realization) give null statistics, not errors.
    """
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        return _nuts_diagnostics(lane, posterior, max_tree_depth, thresholds)


def _nuts_diagnostics(lane, posterior, max_tree_depth, thresholds) -> dict[str, Any]:
    div = np.asarray(lane.diverging)
    depth = np.asarray(lane.tree_depth)
    r, eb, et = (_per_site(f, posterior) for f in (rhat, ess_bulk, ess_tail))
    bf = bfmi(np.asarray(lane.energy))
    n_div = int(div.sum())
    frac = n_div / div.size

    def flat(d: Mapping[str, Any]) -> np.ndarray:
        return np.concatenate([np.ravel(np.asarray(v, dtype=float)) for v in d.values()])

    worst = {
        "rhat_max": float(np.nanmax(flat(r))) if np.any(np.isfinite(flat(r))) else None,
        "ess_bulk_min": float(np.nanmin(flat(eb))) if np.any(np.isfinite(flat(eb))) else None,
        "ess_tail_min": float(np.nanmin(flat(et))) if np.any(np.isfinite(flat(et))) else None,
    }
    passed = (
        worst["rhat_max"] is not None
        and worst["rhat_max"] <= thresholds["rhat_max"]
        and worst["ess_bulk_min"] >= thresholds["ess_min"]
        and (worst["ess_tail_min"] or 0.0) >= thresholds["ess_min"]
        and frac <= thresholds["divergence_frac_max"]
        and bool(np.all(np.nan_to_num(bf, nan=0.0) >= thresholds["bfmi_min"]))
    )
    return {
        "rhat": r,
        "ess_bulk": eb,
        "ess_tail": et,
        **worst,
        "divergences": n_div,
        "divergence_frac": frac,
        "bfmi": bf,
        "tree_depth_max_hits": int(np.sum(depth >= max_tree_depth)),
        "mean_tree_depth": float(depth.mean()),
        "step_size": np.asarray(lane.step_size)[:, -1],
        "acceptance_rate": float(np.mean(np.asarray(lane.accept_prob))),
        "map_init_ok": bool(lane.map_ok),
        "thresholds": dict(thresholds),
        "passed": bool(passed),
    }


def _std_by_site(samples: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """Posterior std of each site (per galaxy for per-galaxy sites); draws are (chain, draw, ...)."""
    return {k: np.std(v, axis=(0, 1)) for k, v in samples.items()}


def map_diagnostics(lane: Any, posterior: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """Optimiser record + Laplace widths of one MAP realization (a lane of ``MapResult``)."""
    opt = lane.opt
    return {
        "optimizer": {
            "converged": bool(opt.converged),
            "n_steps": int(opt.n_steps),
            "grad_norm": float(opt.grad_norm),
            "potential": float(opt.potential),
        },
        "laplace": {
            "positive_definite": bool(lane.laplace_ok),
            "std_unconstrained": [float(s) for s in np.asarray(lane.std)],
            "posterior_std": _std_by_site(posterior),
        },
        "map_estimate": {k: np.mean(v, axis=(0, 1)) for k, v in posterior.items()},
        "passed": bool(opt.converged) and bool(lane.laplace_ok),
    }


def vi_diagnostics(
    lane: Any, posterior: Mapping[str, np.ndarray], max_trend_z: float = 3.0
) -> dict:
    """ELBO record of one VI realization: converged when the loss shows no trend
    (last 10% vs previous 10% of steps differ by < ``max_trend_z`` standard errors)."""
    z = float(lane.trend_z)
    converged = bool(np.isfinite(z) and z < max_trend_z)
    return {
        "elbo": {
            "final_loss": float(lane.final_loss),
            "trend_z": z,
            "n_steps": int(np.asarray(lane.losses).shape[0]),
            "converged": converged,
            "laplace_init": bool(lane.laplace_ok),
        },
        "posterior_std": _std_by_site(posterior),
        "passed": converged,
    }


def failure_reason(
    obs: np.ndarray, posterior: Mapping[str, np.ndarray], diag: Mapping[str, Any]
) -> str | None:
    """Why this realization failed, or ``None``. Checked in order of cause."""
    if not np.all(np.isfinite(obs)):
        return "non-finite data (NaN or inf in the stamps)"
    opt = diag.get("optimizer")
    if opt is not None and not np.isfinite(opt["potential"]):
        return "non-finite potential at the optimum"
    lap = diag.get("laplace")
    if lap is not None and not lap["positive_definite"]:
        return "Laplace Hessian not positive definite at the optimum"
    elbo = diag.get("elbo")
    if elbo is not None and not np.isfinite(elbo["final_loss"]):
        return "non-finite ELBO"
    bad = [k for k, v in posterior.items() if not np.all(np.isfinite(v))]
    if bad:
        return f"non-finite posterior draws of {', '.join(sorted(bad))}"
    if "divergence_frac" in diag:
        if diag["divergence_frac"] >= 1.0:
            return "every transition diverged"
        if all(np.all(np.ptp(np.asarray(v), axis=1) == 0) for v in posterior.values()):
            return "chains never moved"
    return None
