"""MCMC convergence statistics of (chain, draw) arrays: rank-normalised R-hat,
bulk and tail ESS (Vehtari et al. 2021) and E-BFMI (Betancourt 2016).

Tested against ArviZ on the same draws (tests/test_numerics.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numpyro.diagnostics import effective_sample_size, split_gelman_rubin
from scipy.special import ndtri
from scipy.stats import rankdata

__all__ = ["bfmi", "ess_bulk", "ess_tail", "per_site", "rhat"]


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


def per_site(fn, posterior: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """Apply a (chain, draw) statistic to every site (per galaxy for per-galaxy sites)."""
    out: dict[str, Any] = {}
    for k, v in posterior.items():
        v = np.asarray(v)
        out[k] = fn(v) if v.ndim == 2 else [fn(v[..., j]) for j in range(v.shape[2])]
    return out
