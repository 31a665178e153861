r"""Cells for a host estimator (FPFS): each galaxy alone in a larger image, same seed.

The forward model fits its stamps (``image.size_x`` x ``size_y``); an estimator that
measures one source with its own weight function (AnaCal's FPFS) needs room around it.
:func:`simulate_cells` draws, for the realizations a batch simulates, per galaxy:

- **the cell**: the same galaxy (the truths :func:`shearbatch.core.generate.simulate`
  draws for the seed, ring rotations included) sheared by the same ``g``, alone at the
  centre of a ``C x C`` image (``C`` = ``cell``), plus noise. Its centre is where the
  stamp's is (GalSim's convention: the image's true centre plus the offset ``(dx, dy)``),
  and the central ``H x W`` window IS the forward model's stamp: there the noise is the
  stamp's own field (the same ``N(0, 1)`` draws, same float32 rounding), and outside it an
  independent field from the seed's noise key (``fold_in(noise_key, 1)``). So the cell
  and the stamp agree to rendering accuracy in the window (``tests/core/test_cells.py``);
  +g/-g pairs and ring copies that share a noise field share it in their cells too;
- **a pure-noise image** of the same size and sigma for FPFS's renoising (noise-bias
  correction), from the same seed (``fold_in(noise_key, 2)``): shared by pairs and ring
  copies exactly as their pixel noise is;
- **the PSF image** (``C x C``, unit flux, centred on pixel ``(C // 2, C // 2)`` 0-based,
  as AnaCal wants it): the data's PSF (``simulation.psf`` included), drawn by the JAX
  renderer as a point source (a Gaussian of half-light radius 1e-6 arcsec, a relative
  difference of order 1e-11 from a true point) convolved with the PSF and the pixel.

The galaxy is drawn by the problem's renderer: the JAX renderer for ``renderer: jax``,
GalSim for ``renderer: galsim`` (profiles the model lacks, e.g. Sersic).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .generate import FIELDS, _draw_params, render_stamps, rotate_shapes
from .psf import psf_kwargs
from .render import draw_galaxy

__all__ = ["Cells", "cell_window", "psf_image", "simulate_cells"]


class Cells(NamedTuple):
    """What a host estimator measures, on the host (NumPy).

    images: (B, M, C, C) noisy cells; noise: (B, M, C, C) pure-noise images (same sigma);
    psf: (C, C) the data's PSF, unit flux, centred on pixel (C // 2, C // 2);
    centres: (B, M, 2) each galaxy's true centre ``(y, x)`` in 0-based pixel coordinates of
    its cell; noise_sigma: the pixel noise; scale: arcsec per pixel.
    """

    images: np.ndarray
    noise: np.ndarray
    psf: np.ndarray
    centres: np.ndarray
    noise_sigma: float
    scale: float


def cell_window(problem, cell: int) -> tuple[slice, slice]:
    """``(rows, cols)``: where the forward model's stamp lies in a cell of side ``cell``."""
    im = problem.image
    y0, x0 = (cell - im.ny) // 2, (cell - im.nx) // 2
    return slice(y0, y0 + im.ny), slice(x0, x0 + im.nx)


def _cell_problem(problem, cell: int):
    return problem._replace(
        image=problem.image._replace(nx=cell, ny=cell, fft_size=None, alias_band=0.0)
    )


def psf_image(problem, cell: int) -> np.ndarray:
    """The data's PSF as a ``cell x cell`` image of unit flux, centred on pixel
    ``(cell // 2, cell // 2)`` (0-based): a point source through the renderer."""
    im = problem.image
    img = draw_galaxy(profile="gaussian", flux=1.0, half_light_radius=1e-6,
                      offset=(0.5, 0.5), **psf_kwargs(problem.psf), nx=cell, ny=cell,
                      scale=im.scale)  # fmt: skip
    return np.asarray(img, dtype=np.float64)


def _cells_one(problem, cell: int, seed, g, quarter, stream):
    """(clean cells or None, noise cells, pure noise, params) of ONE realization, with
    the keys of :func:`shearbatch.core.generate.simulate_one`."""
    im = problem.image
    key = jax.random.PRNGKey(seed)
    k_par, k_noise = jax.random.split(key)
    k_noise = jnp.where(stream == 0, k_noise, jax.random.fold_in(k_noise, stream))
    params = rotate_shapes(_draw_params(problem, k_par), quarter)
    m = im.n_objects
    stamp_noise = jax.random.normal(k_noise, (m, im.ny, im.nx), jnp.float32)
    outer = jax.random.normal(jax.random.fold_in(k_noise, 1), (m, cell, cell), jnp.float32)
    rows, cols = cell_window(problem, cell)
    noise = outer.at[:, rows, cols].set(stamp_noise)
    pure = jax.random.normal(jax.random.fold_in(k_noise, 2), (m, cell, cell), jnp.float32)
    return noise, pure, params


@functools.cache
def _programs(problem, cell: int):
    big = _cell_problem(problem, cell)
    one = functools.partial(_cells_one, problem, cell)
    noise = jax.jit(lambda *a: jax.lax.map(lambda x: one(*x), a))
    clean = jax.jit(jax.vmap(functools.partial(render_stamps, big)))
    return noise, clean


def simulate_cells(
    problem,
    cell: int,
    seeds: Sequence[int],
    g: Sequence[tuple[float, float]],
    quarters: Sequence[int] | None = None,
    streams: Sequence[int] | None = None,
) -> Cells:
    """The cells, pure-noise images and PSF image of realizations ``seeds`` with shears
    ``g`` (ring copies: ``quarters``, noise ``streams``), as
    :func:`shearbatch.core.generators.simulate` draws their stamps (module docstring)."""
    im = problem.image
    if cell < max(im.nx, im.ny):
        raise ValueError(f"cell size {cell} is smaller than the stamp ({im.nx}x{im.ny})")
    n = len(seeds)
    dtype = jnp.result_type(float)
    seeds_a = jnp.asarray(seeds, dtype=jnp.uint32)
    g_a = jnp.asarray(g, dtype=dtype)
    q_a = jnp.asarray([0] * n if quarters is None else quarters, dtype=jnp.int32)
    s_a = jnp.asarray([0] * n if streams is None else streams, dtype=jnp.uint32)
    noise_p, clean_p = _programs(problem, cell)
    noise, pure, params = noise_p(seeds_a, g_a, q_a, s_a)
    if problem.renderer == "galsim":
        from .galsim_generator import galsim_image

        big = _cell_problem(problem, cell)
        p64 = {k: np.asarray(params[k], dtype=np.float64) for k in FIELDS}
        g64 = np.asarray(g_a, dtype=np.float64)
        clean = np.empty((n, im.n_objects, cell, cell))
        for i in range(n):
            for j in range(im.n_objects):
                one = {k: float(p64[k][i, j]) for k in FIELDS}
                clean[i, j] = galsim_image(big, one, tuple(g64[i]))
    else:
        jp = problem if problem.profile in ("exponential", "gaussian") else None
        if jp is None:
            raise ValueError(f"profile {problem.profile!r} needs renderer galsim")
        clean = np.asarray(clean_p(params, g_a), dtype=np.float64)
    sigma = float(problem.noise_sigma)
    images = clean.astype(dtype) + sigma * np.asarray(noise).astype(dtype)
    centre = cell / 2 - 0.5  # the image's true centre, 0-based (GalSim's, even or odd)
    centres = np.stack([centre + np.asarray(params["dy"], dtype=np.float64),
                        centre + np.asarray(params["dx"], dtype=np.float64)], axis=-1)  # fmt: skip
    return Cells(np.asarray(images, dtype=np.float64),
                 sigma * np.asarray(pure, dtype=np.float64), psf_image(problem, cell),
                 centres, sigma, float(im.scale))  # fmt: skip
