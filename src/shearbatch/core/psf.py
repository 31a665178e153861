r"""PSF transforms for the renderer: Gaussian and Moffat, round or sheared.

A PSF is a radial profile :math:`p(r)` of unit flux, optionally sheared by a
reduced shear :math:`e_\mathrm{psf}` (GalSim's ``psf.shear(g1=e1, g2=e2)``):
the sheared PSF :math:`p(S^{-1}\mathbf{x})` has transform
:math:`\tilde p(S\mathbf{k})` (:math:`S = S(e_\mathrm{psf})` is symmetric with
:math:`\det S = 1`).

**Gaussian**: :math:`\tilde p(k) = \exp(-\sigma^2 k^2 / 2)`.

**Moffat** (GalSim's ``Moffat(beta, fwhm, trunc)``):
:math:`p(r) \propto (1 + r^2/r_d^2)^{-\beta}` for :math:`r < r_t` (``trunc``;
untruncated when 0), with :math:`r_d = \mathrm{fwhm} / (2\sqrt{2^{1/\beta} - 1})`.
Its transform is a Hankel transform of order 0; in :math:`q = k r_d` and
:math:`s = r / r_d`, with :math:`T = r_t / r_d`,

.. math:: \tilde p(q) = \frac{\int_0^T s (1+s^2)^{-\beta} J_0(q s)\,ds}
                             {\int_0^T s (1+s^2)^{-\beta}\,ds},
          \qquad
          \tilde p'(q) = -\frac{\int_0^T s^2 (1+s^2)^{-\beta} J_1(q s)\,ds}
                              {\int_0^T s (1+s^2)^{-\beta}\,ds}.

Untruncated (:math:`T = \infty`, :math:`\beta > 3/2`) the integrals have the
closed form (Gradshteyn & Ryzhik 6.565.4), with :math:`\nu = \beta - 1`,

.. math:: \tilde p(q) = \frac{q^\nu K_\nu(q)}{2^{\nu-1}\Gamma(\nu)}, \qquad
          \tilde p'(q) = -\frac{q^\nu K_{\nu-1}(q)}{2^{\nu-1}\Gamma(\nu)}.

Truncated, they are integrated numerically (composite 10-point Gauss-Legendre
on [0, T], panels short enough that :math:`J_0(qs)` turns by at most 3 radians
across one). Either way the transform is tabulated once per
:math:`(\beta, T)` (NumPy/SciPy, cached) on a uniform grid in :math:`q`, with
its derivative, and evaluated in JAX by cubic Hermite interpolation, which is
differentiable in :math:`q` and so in every galaxy (and PSF) parameter. The grid
step :math:`h = \min(0.02, 0.2/T)` keeps the interpolation error
(:math:`h^4 \max|\tilde p^{(4)}| / 384`) below :math:`10^{-8}`, also across the
oscillating tail that the truncation edge gives. Beyond the table,
:math:`\tilde p = 0`: untruncated the table ends where
:math:`\tilde p < 10^{-18}`; truncated it covers every wave vector of the FFT
grid and its aliases for a PSF ellipticity :math:`|e_\mathrm{psf}| \le 0.6`.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "MoffatTable",
    "moffat_ft",
    "moffat_scale_radius",
    "moffat_table",
    "psf_kwargs",
]

FWHM_TO_SIGMA = 1.0 / (2.0 * math.sqrt(2.0 * math.log(2.0)))
#: Largest PSF |e| for which a truncated Moffat's table covers the whole FFT grid.
E_PSF_TABLE = 0.6
_H_MAX = 0.02  # table step in q = k r_d
_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(10)


def moffat_scale_radius(fwhm: float, beta: float):
    """``r_d = fwhm / (2 sqrt(2^(1/beta) - 1))`` (works on floats and JAX arrays)."""
    return fwhm / (2.0 * math.sqrt(2.0 ** (1.0 / beta) - 1.0))


class MoffatTable(NamedTuple):
    """``values[i]``, ``slopes[i]``: the unit-flux transform and its derivative at ``q = i h``."""

    h: float
    values: np.ndarray
    slopes: np.ndarray

    @property
    def q_max(self) -> float:
        return self.h * (self.values.size - 1)


def _untruncated(beta: float) -> MoffatTable:
    from scipy.special import gammaln, kv

    nu = beta - 1.0
    h = _H_MAX
    # Tail: q^nu K_nu(q) ~ sqrt(pi/2) q^(nu - 1/2) e^-q; end where the transform < 1e-18.
    q_end = 10.0
    while (nu - 0.5) * math.log(q_end) - q_end - (nu - 1) * math.log(2) - gammaln(nu) > -41.4:
        q_end += 5.0
    q = h * np.arange(math.ceil(q_end / h) + 1)
    qs = np.where(q > 0, q, 1.0)
    log_norm = (nu - 1.0) * math.log(2.0) + gammaln(nu)
    values = np.exp(nu * np.log(qs) - log_norm) * kv(nu, qs)
    slopes = -np.exp(nu * np.log(qs) - log_norm) * kv(nu - 1.0, qs)
    values[0], slopes[0] = 1.0, 0.0  # limits at q = 0 for nu > 1/2
    return MoffatTable(h, values, slopes)


def _truncated(beta: float, trunc: float, q_max: float) -> MoffatTable:
    from scipy.special import j0, j1

    h = min(_H_MAX, 0.2 / trunc)
    q = h * np.arange(math.ceil(q_max / h) + 1)
    n_panels = max(16, math.ceil(trunc * max(q_max, 1.0) / 3.0))
    edges = np.linspace(0.0, trunc, n_panels + 1)
    half = 0.5 * np.diff(edges)[:, None]
    s = (0.5 * (edges[:-1] + edges[1:])[:, None] + half * _GL_NODES).ravel()
    w = (half * _GL_WEIGHTS).ravel() * s * (1.0 + s * s) ** (-beta)
    norm = w.sum()
    values, slopes = np.empty_like(q), np.empty_like(q)
    chunk = max(1, 2_000_000 // s.size)
    for i in range(0, q.size, chunk):
        qs = q[i : i + chunk, None] * s
        values[i : i + chunk] = j0(qs) @ w / norm
        slopes[i : i + chunk] = -(j1(qs) @ (w * s)) / norm
    return MoffatTable(h, values, slopes)


@functools.lru_cache(maxsize=32)
def moffat_table(beta: float, trunc: float = 0.0, q_max: float = 0.0) -> MoffatTable:
    r"""Tabulated unit-flux Moffat transform in :math:`q = k r_d` (cached).

    ``trunc`` is :math:`T = r_t / r_d` (0: untruncated, needs ``beta > 1.5``);
    ``q_max`` the largest :math:`q` a truncated table must cover (an untruncated
    one ends where the transform is below 1e-18).
    """
    beta, trunc = float(beta), float(trunc)
    if trunc > 0:
        if not beta > 0:
            raise ValueError(f"Moffat beta must be > 0, got {beta}")
        if not trunc > math.sqrt(2.0):
            raise ValueError("Moffat trunc must be > sqrt(2) scale radii (GalSim's rule)")
        return _truncated(beta, trunc, float(q_max))
    if not beta > 1.5:
        raise ValueError(f"an untruncated Moffat needs beta > 1.5, got {beta}")
    return _untruncated(beta)


def moffat_ft(q2: jax.Array, table: MoffatTable) -> jax.Array:
    r"""Cubic Hermite interpolation of ``table`` at :math:`q = \sqrt{q^2}`; 0 beyond it.

    Takes :math:`q^2` so that the gradient at :math:`q = 0` (where
    :math:`\sqrt{\cdot}` has an infinite derivative and the transform a zero
    slope) is exactly 0.
    """
    return moffat_ft_slope(q2, table)[0]  # (under jit the unused slope is not computed)


def psf_kwargs(psf) -> dict:
    """``draw_galaxy``'s PSF keyword arguments from a :class:`shearbatch.spec.PsfSpec`."""
    kw = {"psf_profile": psf.profile, "psf_e1": psf.e1, "psf_e2": psf.e2}
    if psf.profile == "moffat":
        return {**kw, "psf_fwhm": psf.fwhm, "psf_beta": psf.beta, "psf_trunc": psf.trunc}
    return {**kw, "psf_sigma": psf.sigma}


def moffat_ft_slope(q2: jax.Array, table: MoffatTable) -> tuple[jax.Array, jax.Array]:
    r""":func:`moffat_ft` and its derivative in :math:`q^2`, from the same four table reads.

    The cubic's slope in :math:`t` (the position within the table step),
    :math:`dv/dt = 6tu(f_1 - f_0) + u(1 - 3t)\,d_0 + t(3t - 2)\,d_1` with :math:`u = 1 - t`,
    times :math:`dt/dq^2 = 1/(2 h q)`; 0 at :math:`q = 0` (as :func:`moffat_ft`'s own
    derivative there) and beyond the table. What the renderer's derivatives use: a JVP
    through the interpolation costs about three times the value, this about 1.3.
    """
    dtype = q2.dtype
    pos = q2 > 0
    q = jnp.where(pos, jnp.sqrt(jnp.where(pos, q2, 1.0)), 0.0)
    n = table.values.size
    x = q * (1.0 / table.h)
    i = jnp.clip(jnp.floor(x), 0, n - 2)
    t = jnp.clip(x - i, 0.0, 1.0)
    i = i.astype(jnp.int32)
    f = jnp.asarray(table.values, dtype)
    d = jnp.asarray(table.slopes * table.h, dtype)
    f0, f1, d0, d1 = f[i], f[i + 1], d[i], d[i + 1]
    t2 = t * t
    u = 1.0 - t
    value = (1.0 + 2.0 * t) * u * u * f0 + t * u * u * d0 + t2 * (3.0 - 2.0 * t) * f1 - t2 * u * d1
    dv_dt = 6.0 * t * u * (f1 - f0) + u * (1.0 - 3.0 * t) * d0 + t * (3.0 * t - 2.0) * d1
    inside = x <= n - 1
    slope = jnp.where(pos & inside, dv_dt / (2.0 * table.h * jnp.where(pos, q, 1.0)), 0.0)
    return jnp.where(inside, value, 0.0), slope
