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

__all__ = ["failure_reason", "map_diagnostics", "vi_diagnostics"]


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


def vi_diagnostics(lane: Any, posterior: Mapping[str, np.ndarray], max_trend_z: float = 3.0) -> dict:
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
    return None
