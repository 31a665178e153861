"""Config distributions -> NumPyro distributions, and the per-galaxy parameter table.

Shared by the generator (``simulate.py``, which draws truths) and the model
(``model.py``, which puts priors on latents), so both read the ``gal`` section
the same way.

Galaxy fields, in this order: ``flux``, ``hlr`` (half-light radius, arcsec),
``e1``, ``e2`` (intrinsic reduced-shear ellipticity), ``dx``, ``dy`` (offset
of the centre from the stamp centre, pixels).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpyro.distributions as dist

from .config import Config, Fixed, LogNormal, Normal, TruncatedNormal, Uniform

__all__ = ["GALAXY_FIELDS", "draw_shear_from_prior", "galaxy_params", "to_distribution"]

GALAXY_FIELDS = ("flux", "hlr", "e1", "e2", "dx", "dy")


def to_distribution(p: Any) -> dist.Distribution:
    """NumPyro distribution of a config distribution (not for :class:`Fixed`).

    LogNormal's ``mean`` is the median: ``log x ~ Normal(log mean, sigma)``.
    """
    if isinstance(p, Normal):
        return dist.Normal(p.mean, p.sigma)
    if isinstance(p, LogNormal):
        import math

        return dist.LogNormal(math.log(p.mean), p.sigma)
    if isinstance(p, Uniform):
        return dist.Uniform(p.min, p.max)
    if isinstance(p, TruncatedNormal):
        return dist.TruncatedNormal(p.mean, p.sigma, low=p.min, high=p.max)
    raise TypeError(f"not a distribution: {p!r}")


def galaxy_params(cfg: Config) -> dict[str, Any]:
    """Per-galaxy fields of ``cfg.gal`` as ``{name: Fixed | distribution config}``.

    Position (``gal.position``, pixels from the lower-left corner, fractions of
    the stamp when < 1) becomes a uniform prior on the offset from the stamp
    centre; without it the galaxy is centred.
    """
    g = cfg.gal
    ell = g.ellipticity
    out: dict[str, Any] = {
        "flux": g.flux,
        "hlr": g.half_light_radius,
        "e1": ell.e1 if ell is not None else Fixed(value=0.0),
        "e2": ell.e2 if ell is not None else Fixed(value=0.0),
    }
    pos = g.position
    if pos is None:
        out["dx"] = Fixed(value=0.0)
        out["dy"] = Fixed(value=0.0)
    else:
        nx, ny = cfg.image.size_x, cfg.image.size_y

        def pix(v: float, n: int) -> float:
            return v * n if abs(v) < 1 else v

        lo_x, hi_x = pix(pos.x_min, nx) - nx / 2, pix(pos.x_max, nx) - nx / 2
        lo_y, hi_y = pix(pos.y_min, ny) - ny / 2, pix(pos.y_max, ny) - ny / 2
        out["dx"] = (
            Fixed(value=lo_x) if lo_x == hi_x else Uniform(type="Uniform", min=lo_x, max=hi_x)
        )
        out["dy"] = (
            Fixed(value=lo_y) if lo_y == hi_y else Uniform(type="Uniform", min=lo_y, max=hi_y)
        )
    return out


def _draw_numpy(p: Any, rng) -> float:
    """One draw of a config distribution with NumPy (dtype- and platform-independent)."""
    import math

    from scipy import stats as st

    if isinstance(p, Fixed):
        return p.value
    if isinstance(p, Normal):
        return float(rng.normal(p.mean, p.sigma))
    if isinstance(p, LogNormal):
        return float(math.exp(rng.normal(math.log(p.mean), p.sigma)))
    if isinstance(p, Uniform):
        return float(rng.uniform(p.min, p.max))
    if isinstance(p, TruncatedNormal):
        lo = -np.inf if p.min is None else (p.min - p.mean) / p.sigma
        hi = np.inf if p.max is None else (p.max - p.mean) / p.sigma
        return float(st.truncnorm.rvs(lo, hi, loc=p.mean, scale=p.sigma, random_state=rng))
    raise TypeError(f"not a distribution: {p!r}")


def draw_shear_from_prior(cfg: Config, seed: int) -> tuple[float, float]:
    """True shear of realization ``seed`` drawn from the inference prior ``gal.shear``,
    restricted to |g| < 1 (rejection), for simulation-based calibration.

    NumPy's generator seeded with ``(seed, 0x5BC)``: the same plan in every process,
    array task and precision.
    """
    rng = np.random.default_rng([seed, 0x5BC])
    while True:
        g1 = _draw_numpy(cfg.gal.shear.g1, rng)
        g2 = _draw_numpy(cfg.gal.shear.g2, rng)
        if g1 * g1 + g2 * g2 < 1.0:
            return g1, g2
