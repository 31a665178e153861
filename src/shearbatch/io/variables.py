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
}


def annotate(ds: Any) -> Any:
    """``ds`` (an xarray Dataset) with ``units`` and ``long_name`` on every known variable."""
    for name in ds.data_vars:
        if name in VARIABLES:
            units, long_name = VARIABLES[name]
            ds[name].attrs.update(units=units, long_name=long_name)
    return ds
