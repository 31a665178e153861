r"""AnaCal's FPFS (``anacal.fpfs.process_image``) as a host estimator.

Each galaxy is measured alone in its cell (:mod:`shearbatch.core.cells`), at its true
centre, with the data's PSF image and the cell's pure-noise image for FPFS's renoising
(noise-bias correction). Per galaxy FPFS gives an ellipticity ``e_i`` and its shear
response ``de_i/dg_i``; a realization's record is their sums over its galaxies (a
shear estimate is a ratio of sums, ``sum e / sum R``, taken by ``bias-stats`` over a
campaign's realizations, never per galaxy).

**What FPFS needs of a cell.** FPFS filters the galaxy in Fourier space with a Gaussian
kernel of width ``sigma_arcsec`` (``1 / sigma`` in k) sampled on the cell's Fourier
grid, whose spacing is ``2 pi / (C scale)``. :func:`check` asks for at least
:data:`K_SAMPLES` grid spacings per kernel width, ``C scale >= 2 pi K_SAMPLES sigma``:
50 pixels at ``sigma = 0.52"`` and 0.263"/pixel (so 64 passes, and the Level 2 stamps of
16 pixels, 1.3 spacings, are refused), and at least the forward model's stamp (the
stamp is the cell's central window).

Imported in the worker processes: NumPy and anacal only (no JAX).
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from ..strict_model import Count, Positive, StrictModel

__all__ = ["K_SAMPLES", "Settings", "check", "measure_batch", "min_cell"]

#: Fourier grid spacings per FPFS kernel width a cell must give (module docstring)
K_SAMPLES = 4.0


class Settings(StrictModel):
    """AnaCal (FPFS) beside the forward model (inference.estimators: [anacal]; pip install 'shearbatch[anacal]')."""

    cell_size: Count = 64
    """[pixel] Side of the square cell each galaxy is measured in, alone, at its true centre (the forward model keeps its stamps, the cell's central window). At least 2 pi x 4 x sigma_arcsec / pixel_scale and the stamp (refused otherwise)."""
    sigma_arcsec: Positive = 0.52
    """[arcsec] Width of FPFS's Gaussian shapelet kernel (anacal's sigma_shapelets1), < 3."""
    c0_nsigma: Positive = 4.0
    """[1] FPFS's weight parameter C0 in units of the noise's standard deviation of the flux mode M00 (anacal's c0 = c0_nsigma x std(M00), with the renoised variance)."""


def min_cell(settings: Settings, scale: float) -> int:
    """The smallest even cell side FPFS's kernel allows at ``scale`` arcsec / pixel."""
    n = math.ceil(2 * math.pi * K_SAMPLES * settings.sigma_arcsec / scale)
    return n + (n % 2)


def check(settings: Settings, nx: int, ny: int, scale: float) -> None:
    """``ValueError`` (one line) for a cell FPFS cannot use with stamps ``nx x ny``."""
    need = max(min_cell(settings, scale), nx, ny)
    if settings.sigma_arcsec >= 3.0:
        raise ValueError(f"anacal_config.sigma_arcsec: {settings.sigma_arcsec} (FPFS needs < 3)")
    if settings.cell_size < need:
        raise ValueError(
            f"anacal_config.cell_size: {settings.cell_size} is too small for FPFS: it needs "
            f">= {need} pixels (cell x pixel_scale >= 2 pi x {K_SAMPLES:g} x sigma_arcsec "
            f'{settings.sigma_arcsec:g}" at {scale:g}"/pixel, and the {nx}x{ny} stamp)'
        )


_TASKS: dict[tuple, Any] = {}


def _config(settings: dict[str, Any], psf: np.ndarray, scale: float, variance: float):
    """anacal's FpfsConfig for the campaign (its C0 from the renoised M00 noise), cached
    per process."""
    from anacal import fpfs

    key = (tuple(sorted(settings.items())), psf.tobytes(), scale, variance)
    if key not in _TASKS:
        n = psf.shape[0]
        task = fpfs.FpfsTask(npix=n, pixel_scale=scale, sigma_shapelets=settings["sigma_arcsec"],
                             psf_array=psf, kmax_thres=1e-12)  # fmt: skip
        task.prepare_covariance(variance=variance)  # (doubled: the renoised image's)
        c0 = settings["c0_nsigma"] * float(task.std_m00)
        _TASKS[key] = fpfs.FpfsConfig(npix=n, sigma_shapelets1=settings["sigma_arcsec"], c0=c0)
    return _TASKS[key]


def measure_batch(settings: dict[str, Any], images: np.ndarray, noise: np.ndarray,
                  psf: np.ndarray, centres: np.ndarray, sigma: float,
                  scale: float) -> list[dict[str, Any]]:  # fmt: skip
    """One record per realization of cells ``images`` (B, M, C, C) with pure-noise images
    ``noise``, PSF image ``psf`` (C, C) and true centres ``centres`` (B, M, 2) as (y, x):
    the sums of FPFS's e1, e2, de1/dg1, de2/dg2 over the galaxies (those with a
    non-finite value left out and counted as flagged), and the CPU seconds spent."""
    from anacal import fpfs

    variance = float(sigma) ** 2
    cfg = _config(settings, psf, scale, variance)
    mag_zero = float(fpfs.THRESHOLD_REF_MAG_ZERO)  # c0 is then used as it is
    out = []
    for b in range(images.shape[0]):
        t0 = time.process_time()
        vals = np.empty((images.shape[1], 4))
        for j in range(images.shape[1]):
            det = np.zeros(1, dtype=[("y", "f8"), ("x", "f8")])
            det[0] = (centres[b, j, 0], centres[b, j, 1])
            cat = fpfs.process_image(fpfs_config=cfg, pixel_scale=scale, noise_variance=variance,
                                     mag_zero=mag_zero, gal_array=images[b, j], psf_array=psf,
                                     noise_array=noise[b, j], detection=det)  # fmt: skip
            vals[j] = [cat["fpfs1_e1"][0], cat["fpfs1_e2"][0], cat["fpfs1_de1_dg1"][0],
                       cat["fpfs1_de2_dg2"][0]]  # fmt: skip
        good = np.isfinite(vals).all(axis=1)
        s = vals[good].sum(axis=0)
        bad = int((~good).sum())
        out.append({"e1": float(s[0]), "e2": float(s[1]), "r11": float(s[2]),
                    "r22": float(s[3]), "n": int(images.shape[1]), "n_flagged": bad,
                    "flags": int(bad > 0), "cost_s": time.process_time() - t0})  # fmt: skip
    return out
