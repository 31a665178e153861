r"""The renderer's FFT period chosen from the pixel noise (``image.fft_size: null``).

The renderer (:mod:`shearbatch.core.render`) samples the spectrum of the PSF-
and pixel-convolved profile at :math:`\Delta k = 2\pi/(N s)`, which is exactly
the image of the profile summed over its periodic copies at
:math:`N s\,\mathbf{m}`, :math:`\mathbf{m} \in \mathbb{Z}^2`; the copies
:math:`\mathbf{m} \neq 0` are the wrap-around error. Its cost grows as
:math:`N^2`, and how much wrap-around a campaign can afford is set by its
noise. :func:`choose_fft_size` picks the smallest FFT-friendly period
(:math:`2^a` or :math:`3\cdot2^a`, at least the stamp, below the renderer's
generous default) at which **99% of the galaxies the priors draw render within**
``TOLERANCE`` **(1e-3) of the pixel noise sigma at every stamp pixel**, relative
to a period at least twice as large.

**How the wrap-around is measured.** :func:`wrap_errors` evaluates the
renderer's spectrum (the same folding at the pixel Nyquist frequency, shear,
PSF table and pixel) in NumPy on a reference period :math:`N_\mathrm{ref}` that
every candidate divides; the period-:math:`N` image is then the reference image
folded by :math:`N` (exactly: the period-:math:`N` spectrum is every
:math:`N_\mathrm{ref}/N`-th sample of the reference one), so one inverse FFT
per galaxy gives every candidate's error. 2,000 galaxies are drawn from the
priors (a fixed seed: a config always gets the same period), with the lensing
shear at :math:`|g| = 0.1` (its value when fixed); the 200 with the largest
tail proxy (flux times the round galaxy majorant at the major-axis scale plus
the PSF, at one stamp size from the centre) are rendered, the others counted as
below. The period is the smallest at which at most 20 of the 2,000 exceed the
tolerance. It takes about 0.2-1 s per config (cached).

**Why not a bound alone.** :func:`wrap_error_bound` is a rigorous per-galaxy
bound from the profiles' analytic tails: with :math:`G` the sheared galaxy
(flux :math:`F`) and :math:`p` the sheared unit-flux PSF, both radially
non-increasing in their own frame, a shear :math:`|e|` stretching distances by
at most :math:`\lambda(e) = \sqrt{(1+|e|)/(1-|e|)}`, so that
:math:`G(\mathbf{y}) \le F g(|\mathbf{y}|/\lambda_\mathrm{gal})` and
:math:`p(\mathbf{z}) \le p_0(|\mathbf{z}|/\lambda_\mathrm{psf})`
(:math:`\lambda_\mathrm{gal} = \lambda(e)\lambda(g)`), the convolution at
distance :math:`r` is at most the smaller of

(1) :math:`F p_0((r-\rho)/\lambda_\mathrm{psf}) + F g(\rho/\lambda_\mathrm{gal})`
    for any :math:`0 \le \rho \le r` (split the galaxy at :math:`|\mathbf{y}| = \rho`),
(2) for an exponential, :math:`G \le A e^{-|\mathbf{y}|/L}` with
    :math:`L = \lambda_\mathrm{gal} r_0`:
    :math:`A e^{-r/L} M(R) + F p(r - \rho) + A e^{-\rho/L} T(R)` for any
    :math:`R, \rho`, with :math:`M(R) = \int_{|z|<R} e^{|z|/L} p` and
    :math:`T(R) = \int_{|z|\ge R} p` (the PSF's truncated moment generating
    function and tail flux, integrated numerically from above);

a pixel at distance :math:`d` holds at most :math:`s^2 C(d - s/\sqrt2)`, and
the copies are summed over the lattice (exactly for :math:`|m_a| \le 3`, then by
rings). It is 3-8x above the true profile along the major axis and 10-40x
above the true wrap-around (it gives every copy the major-axis tail), enough
that at 1e-3 sigma it would keep the default period for every shipped config;
the tests check it against the measured errors (no measured error above it).

**The alias band.** The renderer folds each axis' spectrum with its nearest alias,
:math:`u - 2\pi\,\mathrm{sign}\,u`; for all but the frequencies near Nyquist that alias
lies where the PSF and pixel have fallen by orders of magnitude. :func:`choose_alias_band`
picks the largest ``alias_band`` b of :data:`ALIAS_BANDS` (the renderer then evaluates
the alias only where :math:`|u| \ge b\pi`) at which 99% of 2,000 prior draws render
within ``ALIAS_TOLERANCE`` (1e-4) of the pixel noise at every pixel, against every alias
at the same period; :func:`alias_errors` is that error exactly (the NumPy image of the
left-out terms; the 200 draws with the most power at Nyquist are rendered, the others
counted as below). Shipped configs: Level 2 0.75, Level 0 0.85, the others 0.9.

The JAX generator draws its data at the same period as the model, so a
JAX-drawn campaign has no model error from the period at all; the tolerance
matters against GalSim data and the real sky. Measured for the shipped configs
(docs/results/cost_render.md): Level 0 48 (default 96), Level 2 32 (64),
survey S/N 15-100 48 (64), Level 1 32 (32).
"""

from __future__ import annotations

import functools
import logging
import math

import numpy as np

__all__ = [
    "ALIAS_BANDS",
    "ALIAS_TOLERANCE",
    "TOLERANCE",
    "alias_errors",
    "choose_alias_band",
    "choose_fft_size",
    "default_fft_size",
    "fft_candidates",
    "noise_alias_band",
    "noise_fft_size",
    "wrap_error_bound",
    "wrap_errors",
]

logger = logging.getLogger(__name__)

#: Wrap-around error allowed per pixel, in units of the pixel noise sigma.
TOLERANCE = 1e-3
#: Error allowed per pixel for the alias terms left out (``alias_band``), in units of the
#: pixel noise sigma: a tenth of the period's, so the two together stay within 1.1e-3.
ALIAS_TOLERANCE = 1e-4
#: ``alias_band`` candidates, the cheapest first (the fraction of each axis' band, at the
#: top, where its nearest alias is still evaluated: 1 - band).
ALIAS_BANDS = (0.9, 0.85, 0.8, 0.75, 0.7, 0.6, 0.5)
_TAIL_P = 1e-2  # the fraction of galaxies the chosen period may leave above TOLERANCE
_N_DRAWS = 2_000
_FIELDS = ("flux", "hlr", "e1", "e2", "dx", "dy")
_N_RENDER = 200  # draws ranked highest by the tail proxy, rendered
_SEED = 20_231
_G_MAX = 0.1
_HLR_TO_R0_EXP = 1.6783469900166608
_HLR_TO_SIGMA_GAUSS = math.sqrt(2.0 * math.log(2.0))


def fft_candidates(n_min: int, n_max: int) -> list[int]:
    """FFT-friendly periods ``2**a`` and ``3 * 2**a`` in ``[max(n_min, 8), n_max]``, ascending."""
    out = {p for a in range(3, 16) for p in (1 << a, 3 << (a - 1))}
    return sorted(p for p in out if max(n_min, 8) <= p <= n_max)


def _stretch(e: float) -> float:
    e = min(abs(e), 1.0 - 1e-6)
    return math.sqrt((1.0 + e) / (1.0 - e))


def _galaxy_round(profile: str, hlr: float):
    """Unit-flux round surface brightness g(r) (1/arcsec^2), non-increasing in r, and
    its exponential scale length (``None`` for a Gaussian profile)."""
    if profile == "exponential":
        r0 = hlr / _HLR_TO_R0_EXP
        return (lambda r: np.exp(-r / r0) / (2.0 * math.pi * r0 * r0)), r0
    if profile == "gaussian":
        sig = hlr / _HLR_TO_SIGMA_GAUSS
        return (lambda r: np.exp(-0.5 * (r / sig) ** 2) / (2.0 * math.pi * sig * sig)), None
    raise ValueError(f"no analytic tail for a {profile!r} profile")


def _psf_round(psf):
    """Unit-flux round PSF surface brightness p0(r) (1/arcsec^2), non-increasing in r, and
    a radius beyond which it is zero or below 1e-30 of its centre."""
    if psf.profile == "gaussian":
        sig = float(psf.sigma)
        return (lambda r: np.exp(-0.5 * (r / sig) ** 2) / (2.0 * math.pi * sig * sig)), 12 * sig
    beta = float(psf.beta)
    rd = float(psf.fwhm) / (2.0 * math.sqrt(2.0 ** (1.0 / beta) - 1.0))
    trunc = float(psf.trunc or 0.0)
    if trunc > 0:
        t2 = (trunc / rd) ** 2
        # flux of (1 + r^2/rd^2)^-beta inside trunc: pi rd^2 [1 - (1 + T^2)^(1-beta)] / (beta - 1)
        if abs(beta - 1.0) > 1e-12:
            flux = math.pi * rd * rd * (1.0 - (1.0 + t2) ** (1.0 - beta)) / (beta - 1.0)
        else:
            flux = math.pi * rd * rd * math.log1p(t2)
        return (lambda r: np.where(r < trunc, (1.0 + (r / rd) ** 2) ** (-beta), 0.0) / flux), trunc
    flux = math.pi * rd * rd / (beta - 1.0)
    return (lambda r: (1.0 + (r / rd) ** 2) ** (-beta) / flux), rd * 10.0 ** (15.0 / beta)


class _Tail:
    """Pointwise bound C(r) (surface brightness, any direction) on the sheared galaxy
    convolved with the sheared PSF: the smaller of the module notes' bounds (1) and (2).
    Non-increasing in r (every term is)."""

    def __init__(self, profile, hlr, flux, lam_gal, psf, lam_psf):
        self.flux, self.lam_gal, self.lam_psf = flux, lam_gal, lam_psf
        self.gal, r0 = _galaxy_round(profile, hlr)
        self.p0, r_end = _psf_round(psf)
        self.length = None if r0 is None else lam_gal * r0  # e-folding length, major axis
        if self.length is None:
            return
        # On a radial grid of the round PSF majorant p0(|z| / lam_psf) (flux lam_psf^2):
        # M(R) = int_{|z|<R} e^{|z|/L} p(z) dz and T(R) = int_{|z|>=R} p(z) dz. Both
        # integrands rise and then fall on a panel at most once, so a panel's smaller end
        # bounds its integral below (for T) and its larger end above (for M, to O(dt^2)
        # at an interior maximum: the 1% margin).
        r_end = r_end * lam_psf
        r_core = min(30.0 * self.length, r_end)
        t = np.concatenate([np.linspace(0.0, r_core, 3001),
                            np.geomspace(r_core, max(r_end, 2 * r_core), 501)[1:]])  # fmt: skip
        w = 2.0 * math.pi * t * self.p0(t / lam_psf)
        dt = np.diff(t)
        inside = np.concatenate([[0.0], np.cumsum(np.minimum(w[1:], w[:-1]) * dt)])
        with np.errstate(over="ignore", invalid="ignore"):
            ew = w * np.exp(t / self.length)
            mgf = np.concatenate([[0.0], np.cumsum(np.maximum(ew[1:], ew[:-1]) * dt)])
        keep = np.flatnonzero(np.isfinite(mgf) & (mgf < 1e250))
        keep = np.unique(np.geomspace(1, keep[-1] + 1, 48).astype(int) - 1)
        self.mgf = 1.01 * mgf[keep]
        # the majorant's flux beyond r_end (a Moffat is below 1e-30 of its centre) is
        # below 1e-25 of it: counted in T
        self.tail = np.maximum(lam_psf * lam_psf - inside[keep], 0.0) + 1e-25

    def psf(self, r):
        return self.p0(np.maximum(r, 0.0) / self.lam_psf)

    def __call__(self, r: np.ndarray) -> np.ndarray:
        r = np.asarray(r, dtype=float)
        fracs = np.linspace(0.0, 1.0, 65)[:, None, None]
        rho = fracs[:, 0] * r[None, :]
        # (1) split the galaxy at |y| = rho: F p(r - rho) + sup_{|y| >= rho} G
        out = self.flux * (self.psf(r[None, :] - rho) + self.gal(rho / self.lam_gal)).min(axis=0)
        if self.length is None:
            return out
        # (2) exponential galaxy, G(y) <= A e^{-|y|/L} (A = F g(0)): for any R and rho,
        #     C(r) <= A e^{-r/L} M(R) + F p(r - rho) + A e^{-rho/L} T(R)
        amp = self.flux * self.gal(0.0)
        first = amp * np.exp(-r / self.length)
        total = (first[None, None, :] * self.mgf[None, :, None]
                 + self.flux * self.psf((1.0 - fracs) * r)
                 + amp * np.exp(-fracs * r / self.length) * self.tail[None, :, None])  # fmt: skip
        return np.minimum(out, total.min(axis=(0, 1)))


def _lattice(hx: float, hy: float):
    """Copies m != 0 as (n -> distance in pixels from the nearest stamp pixel, weight):
    exact for |m_a| <= 3, then rings k of 8k copies at >= k n - max(h) pixels, grouped in
    blocks counted at their first (nearest) ring."""
    m = np.arange(-3, 4)
    mx, my = (a.ravel() for a in np.meshgrid(m, m))
    keep = (mx != 0) | (my != 0)
    mx, my = np.abs(mx[keep]), np.abs(my[keep])
    starts = np.unique(np.geomspace(4, 4096, 48).astype(int))
    ends = np.append(starts[1:], 4097)
    weight = np.array([8.0 * np.arange(a, b).sum() for a, b in zip(starts, ends, strict=True)])
    h = max(hx, hy)

    def distances(n: int) -> tuple[np.ndarray, np.ndarray]:
        d = np.hypot(np.maximum(mx * n - hx, 0.0), np.maximum(my * n - hy, 0.0))
        return np.concatenate([d, starts * n - h]), np.concatenate([np.ones(d.size), weight])

    return distances


def wrap_error_bound(
    n: int,
    *,
    nx: int,
    ny: int,
    scale: float,
    profile: str,
    flux: float,
    hlr: float,
    e: float,
    g: float,
    offset: tuple[float, float],
    psf,
) -> float:
    """Upper bound on any stamp pixel's wrap-around error (flux per pixel) at period ``n``.

    ``flux, hlr, e, g`` (``|e|, |g|``) and ``offset`` (``|dx|, |dy|``, pixels) describe the
    galaxy it holds for; ``psf`` is a :class:`shearbatch.spec.PsfSpec`.
    """
    tail = _Tail(profile, hlr, flux, _stretch(e) * _stretch(g), psf,
                 _stretch(math.hypot(psf.e1, psf.e2)))  # fmt: skip
    dist, weight = _lattice(0.5 * (nx - 1) + abs(offset[0]), 0.5 * (ny - 1) + abs(offset[1]))(n)
    r = np.maximum(dist - math.sqrt(0.5), 0.0) * scale
    return float(scale * scale * (weight * tail(r)).sum())


def _sample(p, rng: np.random.Generator, size: int) -> np.ndarray:
    """``size`` draws of a prior (``spec.Prior``); a flat one is drawn on [-1, 1]."""
    a = p.args
    if p.kind == "fixed":
        return np.full(size, a[0])
    if p.kind == "normal":
        return rng.normal(a[0], a[1], size)
    if p.kind == "lognormal":  # args: median, log-space sigma
        return a[0] * np.exp(a[1] * rng.standard_normal(size))
    if p.kind in ("uniform", "flat"):
        lo, hi = (a[0], a[1]) if p.kind == "uniform" else (-1.0, 1.0)
        return rng.uniform(lo, hi, size)
    if p.kind == "truncnormal":
        from scipy import stats

        lo, hi = (a[2] - a[0]) / a[1], (a[3] - a[0]) / a[1]
        return stats.truncnorm.rvs(lo, hi, loc=a[0], scale=a[1], size=size, random_state=rng)
    raise TypeError(f"not a prior: {p!r}")


def _g_max(shear) -> float:
    if all(p.fixed for p in shear):
        return math.hypot(shear[0].args[0], shear[1].args[0])
    return _G_MAX


def _shear_rows(e1, e2):
    """Rows of S(e) sqrt(1 - |e|^2) = [[1 + e1, e2], [e2, 1 - e1]] and sqrt(1 - |e|^2),
    with |e| pulled back to the renderer's 1 - 1e-6."""
    norm = np.hypot(e1, e2)
    f = np.where(norm > 1.0 - 1e-6, (1.0 - 1e-6) / np.maximum(norm, 1e-300), 1.0)
    e1, e2 = e1 * f, e2 * f
    return (1.0 + e1, e2, 1.0 - e1), np.sqrt(1.0 - (e1 * e1 + e2 * e2))


def _spectra(
    problem, gal: dict[str, np.ndarray], g: np.ndarray, n: int, dropped: float | None = None
) -> np.ndarray:
    r"""Spectra (K, n, n//2 + 1) of ``gal``'s galaxies on the period-``n`` grid, folded at
    the pixel Nyquist frequency as the renderer does (the DFT frequency and its nearest
    alias per axis): the renderer's sum in NumPy (profile at :math:`A^T k`, PSF, pixel,
    phase). ``dropped``: an ``alias_band`` -- only the alias terms the renderer leaves out
    at that band (their sum is the band's error)."""
    im = problem.image
    two_pi = 2.0 * np.pi
    uy0 = two_pi * np.fft.fftfreq(n)
    ux0 = two_pi * np.fft.rfftfreq(n)
    col = lambda x: np.asarray(x, dtype=float)[:, None, None]  # noqa: E731
    (ea, eb, ec), ed = _shear_rows(gal["e1"], gal["e2"])
    (ga, gb, gc), gd = _shear_rows(np.full_like(ea, g[0]), np.full_like(ea, g[1]))
    # A = S(g) S(e); r |A^T k| with r the profile's scale, in u = k s (see render.py)
    t11, t12 = ga * ea + gb * eb, ga * eb + gb * ec
    t21, t22 = gb * ea + gc * eb, gb * eb + gc * ec
    r = (
        np.maximum(gal["hlr"], 1e-6)
        / im.scale
        / (_HLR_TO_R0_EXP if problem.profile == "exponential" else _HLR_TO_SIGMA_GAUSS)
    )
    r = r / (ed * gd)
    a, b, c, d = (col(r * t) for t in (t11, t12, t21, t22))
    psf = problem.psf
    (pa, pb, pc), pd = _shear_rows(np.array([psf.e1]), np.array([psf.e2]))
    table = None
    if psf.profile == "moffat":
        from .psf import moffat_scale_radius, moffat_table

        r_d = moffat_scale_radius(psf.fwhm, psf.beta)
        trunc = float(psf.trunc or 0.0)
        q_max = 1.01 * r_d * 2.0 * two_pi * _stretch(0.6) / im.scale  # as render._moffat_table
        table = (moffat_table(psf.beta, trunc / r_d, float(np.ceil(q_max / 8.0) * 8.0))
                 if trunc > 0 else moffat_table(psf.beta))  # fmt: skip
    cx = col(0.5 * (im.nx - 1) + gal["dx"])
    cy = col(0.5 * (im.ny - 1) + gal["dy"])
    out = 0.0
    if dropped is not None:
        from .render import alias_k0

        k0 = alias_k0(n, dropped)
        kept_y = np.abs(np.fft.fftfreq(n) * n) >= k0  # where the renderer keeps each alias
        kept_x = np.fft.rfftfreq(n) * n >= k0
    # the DFT frequency and its nearest alias per axis, as the renderer (pixel aliases)
    for iy, uy in enumerate((uy0, np.where(uy0 >= 0.0, uy0 - two_pi, uy0 + two_pi))):
        for jx, ux in enumerate((ux0, ux0 - two_pi)):
            if dropped is not None and iy + jx == 0:
                continue
            uy_, ux_ = uy[None, :, None], ux[None, None, :]
            q = (a * ux_ + c * uy_) ** 2 + (b * ux_ + d * uy_) ** 2
            spec = (1.0 + q) ** -1.5 if problem.profile == "exponential" else np.exp(-0.5 * q)
            ksq = ((pa * ux_ + pb * uy_) ** 2 + (pb * ux_ + pc * uy_) ** 2) / (pd * im.scale) ** 2
            if table is None:
                spec = spec * np.exp(-0.5 * psf.sigma**2 * ksq)
            else:
                spec = spec * _hermite(r_d * np.sqrt(ksq), table)
            spec = spec * np.sinc(ux_ / two_pi) * np.sinc(uy_ / two_pi)
            if dropped is not None:
                keep = (kept_y[:, None] | (iy == 0)) & (kept_x[None, :] | (jx == 0))
                spec = spec * ~keep[None]
            out = out + spec * np.exp(-1j * (cx * ux_ + cy * uy_))
    return col(gal["flux"]) * out


def _hermite(q: np.ndarray, table) -> np.ndarray:
    """Cubic Hermite interpolation of a Moffat table at q (0 beyond it), as psf.moffat_ft."""
    x = q / table.h
    n = table.values.size
    i = np.clip(np.floor(x), 0, n - 2).astype(int)
    t = np.clip(x - i, 0.0, 1.0)
    f, d = table.values, table.slopes * table.h
    u = 1.0 - t
    v = ((1 + 2 * t) * u * u * f[i] + t * u * u * d[i] + t * t * (3 - 2 * t) * f[i + 1]
         - t * t * u * d[i + 1])  # fmt: skip
    return np.where(x <= n - 1, v, 0.0)


def wrap_errors(problem, gal: dict[str, np.ndarray], g, sizes: list[int], n_ref: int):
    """Largest stamp-pixel wrap-around error (flux per pixel), shape (len(sizes), K), of
    each galaxy of ``gal`` at each period of ``sizes`` against period ``n_ref`` (each size
    divides it): the period-``n`` image is the period-``n_ref`` one folded (exactly: the
    period-``n`` spectrum is every (n_ref/n)-th sample of the other)."""
    im = problem.image
    count = len(next(iter(gal.values())))
    out = np.empty((len(sizes), count))
    for i in range(0, count, 64):  # chunks keep the (K, n_ref, n_ref/2 + 1) arrays small
        part = {k: v[i : i + 64] for k, v in gal.items()}
        big = np.fft.irfft2(_spectra(problem, part, np.asarray(g, float), n_ref),
                            s=(n_ref, n_ref))  # fmt: skip
        ref = big[:, : im.ny, : im.nx]
        for j, n in enumerate(sizes):
            m = n_ref // n
            folded = big.reshape(-1, m, n, m, n).sum(axis=(1, 3))[:, : im.ny, : im.nx]
            out[j, i : i + 64] = np.abs(folded - ref).max(axis=(1, 2))
    return out


def _draws(problem, n_draws: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(_SEED)
    return {k: _sample(p, rng, n_draws) for k, p in zip(_FIELDS, problem.fields, strict=True)}


def _top_draws(gal: dict[str, np.ndarray], score: np.ndarray):
    """The ``_N_RENDER`` draws of ``gal`` with the highest ``score`` (the ones rendered; the
    others count as below the tolerance), unique rows (fixed fields: one galaxy), and how
    many draws each stands for."""
    top = np.argsort(score)[::-1][:_N_RENDER]
    rows = np.stack([gal[k][top] for k in _FIELDS], axis=1)
    rows, counts = np.unique(rows, axis=0, return_counts=True)
    return dict(zip(_FIELDS, rows.T, strict=True)), counts


def _all_but_1pct_below(err: np.ndarray, counts: np.ndarray, limit: float) -> bool:
    """At most 1% (20) of the ``_N_DRAWS`` draws have an error at or above ``limit``."""
    k = int(_TAIL_P * _N_DRAWS)
    return bool(np.sort(np.repeat(err, counts))[::-1][k] < limit)


def _proxy(problem, gal: dict[str, np.ndarray], g: float, dist_px: float) -> np.ndarray:
    """Cheap ranking of the draws by wrap-around: the round galaxy majorant (major-axis
    scale) and the PSF at ``dist_px``, times the flux."""
    im = problem.image
    e = np.hypot(gal["e1"], gal["e2"])
    lam = np.sqrt((1 + np.minimum(e, 1 - 1e-6)) / (1 - np.minimum(e, 1 - 1e-6))) * _stretch(g)
    gal_round, _ = _galaxy_round(problem.profile, 1.0)
    h = np.maximum(gal["hlr"], 1e-6)
    d = dist_px * im.scale
    galaxy = gal_round(d / (lam * h)) / (h * h)  # g_hlr(r) = g_1(r / hlr) / hlr^2
    p0, _ = _psf_round(problem.psf)
    return np.abs(gal["flux"]) * (galaxy + p0(np.array(d)))


def noise_fft_size(problem, default: int, tol: float = TOLERANCE) -> int:
    """Smallest FFT-friendly period (>= the stamp, < ``default``) at which all but 1% (20)
    of 2,000 galaxies drawn from the priors (a fixed seed) render within ``tol *
    noise_sigma`` at every stamp pixel of their image at a reference period (3 x 2^a, at
    least twice the largest candidate and the default); ``default`` when none does, and
    for profiles the NumPy spectrum does not have (Sersic, BulgeDisk). Only the 200 draws
    ranked highest by a tail proxy are rendered: the others count as below.
    """
    im = problem.image
    if problem.profile not in ("exponential", "gaussian"):
        return default
    sizes = fft_candidates(max(im.nx, im.ny), default - 1)
    if not sizes:
        return default
    # a reference period divisible by every candidate, >= twice the largest and the default
    n_ref = 24
    while n_ref < max(2 * sizes[-1], default):
        n_ref *= 2
    gal = _draws(problem, _N_DRAWS)
    g = _g_max(problem.shear)
    part, counts = _top_draws(gal, _proxy(problem, gal, g, max(im.nx, im.ny)))
    errors = wrap_errors(problem, part, (g, 0.0), sizes, n_ref)
    for n, err in zip(sizes, errors, strict=True):
        if _all_but_1pct_below(err, counts, tol * problem.noise_sigma):
            return n
    return default


def default_fft_size(problem) -> int:
    """The renderer's own default period for ``problem``'s stamp and PSF (generous)."""
    from .psf import moffat_scale_radius
    from .render import _default_fft_size, _moffat_extent

    im, psf = problem.image, problem.psf
    if psf.profile != "moffat":
        return _default_fft_size(im.nx, im.ny)
    r_d = moffat_scale_radius(psf.fwhm, psf.beta)
    return _default_fft_size(im.nx, im.ny, _moffat_extent(r_d, psf.beta, psf.trunc) / im.scale)


def alias_errors(problem, gal: dict[str, np.ndarray], g, n: int, bands) -> np.ndarray:
    """Largest stamp-pixel error (flux per pixel), shape (len(bands), K), of each galaxy of
    ``gal`` rendered at period ``n`` with each ``alias_band`` of ``bands`` against every
    alias evaluated (the image of the alias terms the band leaves out)."""
    im = problem.image
    count = len(next(iter(gal.values())))
    out = np.empty((len(bands), count))
    for i in range(0, count, 256):
        part = {k: v[i : i + 256] for k, v in gal.items()}
        for j, band in enumerate(bands):
            spec = _spectra(problem, part, np.asarray(g, float), n, dropped=band)
            img = np.fft.irfft2(spec, s=(n, n))[:, : im.ny, : im.nx]
            out[j, i : i + 256] = np.abs(img).max(axis=(1, 2))
    return out


def _alias_proxy(problem, gal: dict[str, np.ndarray]) -> np.ndarray:
    """Cheap ranking of the draws by alias error: the flux times the round exponential or
    Gaussian transform at the Nyquist frequency along the minor axis (the most compact
    galaxies keep the most power where the alias terms are)."""
    e = np.minimum(np.hypot(gal["e1"], gal["e2"]), 1 - 1e-6)
    scale = 1.0 / (_HLR_TO_R0_EXP if problem.profile == "exponential" else _HLR_TO_SIGMA_GAUSS)
    r = np.maximum(gal["hlr"], 1e-6) * scale / problem.image.scale * np.sqrt((1 - e) / (1 + e))
    q = (np.pi * r) ** 2
    ft = (1.0 + q) ** -1.5 if problem.profile == "exponential" else np.exp(-0.5 * q)
    return np.abs(gal["flux"]) * ft


def noise_alias_band(problem, tol: float = ALIAS_TOLERANCE) -> float:
    """Largest ``alias_band`` of :data:`ALIAS_BANDS` at which all but 1% (20) of 2,000
    galaxies drawn from the priors (a fixed seed) render within ``tol * noise_sigma`` at
    every stamp pixel of their image with every alias (at the problem's period); 0 (every
    alias) when none does, and for profiles the NumPy spectrum does not have. Only the 200
    draws ranked highest by a proxy (flux x the profile's transform at Nyquist along the
    minor axis) are rendered: the others count as below."""
    if problem.profile not in ("exponential", "gaussian") or problem.image.fft_size is None:
        return 0.0
    gal = _draws(problem, _N_DRAWS)
    part, counts = _top_draws(gal, _alias_proxy(problem, gal))
    g = (_g_max(problem.shear), 0.0)
    for band in ALIAS_BANDS:  # the cheapest first; the error only shrinks down the list
        err = alias_errors(problem, part, g, problem.image.fft_size, [band])[0]
        if _all_but_1pct_below(err, counts, tol * problem.noise_sigma):
            return band
    return 0.0


@functools.lru_cache(maxsize=64)
def choose_alias_band(problem) -> float:
    """The ``alias_band`` for a config that leaves ``image.alias_band`` null:
    :func:`noise_alias_band` at the problem's period (cached per problem)."""
    band = noise_alias_band(problem)
    logger.debug("renderer alias band %.2f at period %s (noise sigma %.3g)", band,
                 problem.image.fft_size, problem.noise_sigma)  # fmt: skip
    return band


@functools.lru_cache(maxsize=64)
def choose_fft_size(problem) -> int:
    """The period for a config that leaves ``image.fft_size`` null: :func:`noise_fft_size`
    below the renderer's default (cached per problem)."""
    n = noise_fft_size(problem, default_fft_size(problem))
    logger.debug("renderer period %d pixels for %dx%d stamps (noise sigma %.3g; default %d)",
                n, problem.image.nx, problem.image.ny, problem.noise_sigma,
                default_fft_size(problem))  # fmt: skip
    return n
