"""MCMC convergence statistics of (chain, draw) arrays: rank-normalised R-hat,
bulk and tail ESS (Vehtari et al. 2021) and E-BFMI (Betancourt 2016).

Tested against ArviZ on the same draws (tests/core/test_numerics.py).
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
    """z-scores of the ranks pooled over (chain, draw), per site of the trailing axes,
    (r - 3/8) / (n + 1/4) -> Phi^-1 (Vehtari et al. 2021, eq. 14)."""
    n = x.shape[0] * x.shape[1]
    sites = np.ascontiguousarray(x.reshape(n, -1).T)  # each site's draws contiguous: fast sort
    r = rankdata(sites, method="average", axis=1).T.reshape(x.shape)
    return ndtri((r - 0.375) / (n + 0.25))


def _constant(x: np.ndarray) -> np.ndarray:
    """Per site of the trailing axes: its draws are constant or not all finite."""
    return np.all(x == x[:1, :1], axis=(0, 1)) | ~np.all(np.isfinite(x), axis=(0, 1))


def _per_site(stat):
    """``stat`` of (chain, draw, *sites) arrays, NaN on constant or non-finite sites; a
    float for a (chain, draw) array."""

    def wrapped(x: np.ndarray):
        x = np.asarray(x, dtype=float)
        bad = _constant(x)
        with np.errstate(invalid="ignore", divide="ignore"):
            out = np.where(bad, np.nan, stat(np.where(bad, 0.0, x)) if not np.all(bad) else 0.0)
        return float(out) if out.ndim == 0 else out

    wrapped.__name__, wrapped.__doc__ = stat.__name__, stat.__doc__
    return wrapped


def _split(x: np.ndarray) -> np.ndarray:
    half = x.shape[1] // 2
    return np.concatenate([x[:, :half], x[:, half : 2 * half]], axis=0)


@_per_site
def rhat(x: np.ndarray) -> np.ndarray:
    """Rank-normalised split R-hat, max of bulk and folded (Vehtari et al. 2021, sec. 4.2).

    ``x``: (chain, draw) or (chain, draw, *sites). NaN where the draws are constant or
    non-finite.
    """
    bulk = split_gelman_rubin(_rank_normalize(x))
    folded = np.abs(x - np.median(x, axis=(0, 1), keepdims=True))
    tail = split_gelman_rubin(_rank_normalize(folded))
    return np.maximum(bulk, tail)


@_per_site
def ess_bulk(x: np.ndarray) -> np.ndarray:
    """Bulk ESS: ESS of the rank-normalised split chains (Vehtari et al. 2021, sec. 4.3)."""
    return effective_sample_size(_rank_normalize(_split(x)))


@_per_site
def ess_tail(x: np.ndarray) -> np.ndarray:
    """Tail ESS: min ESS of the 5% and 95% quantile indicators (Vehtari et al. 2021, sec. 4.3);
    NaN where an indicator is constant."""
    split = _split(x)
    out = []
    for q in (0.05, 0.95):
        ind = (split <= np.quantile(split, q, axis=(0, 1), keepdims=True)).astype(float)
        ess = effective_sample_size(np.where(_constant(ind), np.nan, ind))
        out.append(np.where(_constant(ind), np.nan, ess))
    return np.minimum(*out)


def bfmi(energy: np.ndarray) -> np.ndarray:
    """E-BFMI per chain: sum (E_n - E_{n-1})^2 / sum (E_n - mean E)^2 (Betancourt 2016)."""
    e = np.asarray(energy, dtype=float)
    num = np.sum(np.diff(e, axis=1) ** 2, axis=1)
    den = np.sum((e - e.mean(axis=1, keepdims=True)) ** 2, axis=1)
    return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def per_site(fn, posterior: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """A (chain, draw) statistic of every site (per galaxy for per-galaxy sites: a list),
    each site's galaxies in one vectorised call."""
    out: dict[str, Any] = {}
    for k, v in posterior.items():
        v = np.asarray(v)
        out[k] = fn(v) if v.ndim == 2 else [float(r) for r in fn(v)]
    return out
