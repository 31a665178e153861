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

import numpyro.distributions as dist

from .config import Config, Fixed, LogNormal, Normal, TruncatedNormal, Uniform

__all__ = ["GALAXY_FIELDS", "galaxy_params", "to_distribution"]

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
