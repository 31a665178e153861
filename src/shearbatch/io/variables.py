"""Units and long names of the variables in ``posterior.nc`` (CF-style ``units`` / ``long_name``).

The writer attaches them to every file, so a notebook (xarray, ArviZ) shows
what a number means without reading the source.
"""

from __future__ import annotations

from typing import Any

__all__ = ["VARIABLES", "annotate"]

#: variable -> (units, long_name)
VARIABLES: dict[str, tuple[str, str]] = {
    "g1": ("1", "reduced shear component g1 (dimensionless)"),
    "g2": ("1", "reduced shear component g2 (dimensionless)"),
    "flux": ("image units", "galaxy total flux (sum of its noiseless stamp's pixels)"),
    "hlr": ("arcsec", "galaxy half-light radius"),
    "e1": ("1", "intrinsic ellipticity e1 (reduced-shear convention, dimensionless)"),
    "e2": ("1", "intrinsic ellipticity e2 (reduced-shear convention, dimensionless)"),
    "dx": ("pixel", "galaxy centre offset from the stamp centre along x"),
    "dy": ("pixel", "galaxy centre offset from the stamp centre along y"),
    "obs": ("image units per pixel", "observed stamp: simulated galaxy plus pixel noise"),
    # per-draw statistics (sample_stats); the interim model's MAP draws are proposal
    # draws: only weighted by exp(interim_log_weight) (times the population prior) do they
    # estimate anything (inference.map_config.proposal, docs/config.md)
    "interim_log_weight": (
        "1",
        "log importance weight of the draw per galaxy (interim model): "
        "log p(d, x) - log q(x) - log pi(e) for MAP's proposal draws, "
        "-log pi(e) for NUTS's; up to a per-galaxy constant. The draws "
        "are not posterior draws until weighted",
    ),
    "laplace_log_q": (
        "1",
        "log density of the draw under the Laplace Gaussian (unconstrained "
        "coordinates, without its -D/2 log 2 pi)",
    ),
    "proposal_log_q": (
        "1",
        "log density of the draw under the interim model's Student-t "
        "proposal (unconstrained coordinates, summed over galaxies)",
    ),
}


def annotate(ds: Any) -> Any:
    """``ds`` (an xarray Dataset) with ``units`` and ``long_name`` on every known variable."""
    for name in ds.data_vars:
        if name in VARIABLES:
            units, long_name = VARIABLES[name]
            ds[name].attrs.update(units=units, long_name=long_name)
    return ds
