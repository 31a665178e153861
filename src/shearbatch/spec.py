"""Config -> plain values: the only reader of the schema below the CLI.

The renderer, generator, model and inference methods take these NamedTuples
(hashable, so they key compiled-program caches), never the pydantic schema.

- :class:`Prior`: ``kind`` in fixed | flat | normal | lognormal | uniform |
  truncnormal and its numbers (``flat``: none; the shear's default, flat on the
  unit disk) (``fixed``: value; ``normal``: mean, sigma; ``lognormal``:
  median, log-space sigma; ``uniform``: min, max; ``truncnormal``: mean, sigma,
  min, max with -inf/inf for an open side).
- :class:`Problem`: one realization's image geometry (``image.fft_size``: the config's,
  or when it is null the renderer period chosen from the pixel noise,
  :mod:`shearbatch.core.period`), PSF, galaxy fields
  (``flux, hlr, e1, e2, dx, dy``: priors or fixed values), the shear prior and
  the pixel noise. :func:`problem` gives the model's view, :func:`truth_problem`
  the generator's (``simulation`` overrides merged in, its ``renderer`` and, for
  the GalSim-only profiles, ``profile_args``: Sersic ``(n,)``, BulgeDisk
  ``(bulge_fraction, bulge_hlr_ratio)``); both share the model's pixel noise.
- :class:`PsfSpec`: ``gaussian`` (sigma) or ``moffat`` (fwhm, beta, trunc), and
  the PSF ellipticity (e1, e2).
- :class:`RunSpec`: both problems, the inference method and its validated settings
  (:class:`~shearbatch.core.methods.MethodSpec`: the pydantic model of its section
  ``inference.<method>_config``, the sections its factory takes, the interim prior's
  width), the inference seed, the config hash and provenance.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from .core.methods import MethodSpec, sections_of
from .schema import Config, config_hash
from .schema.distributions import Fixed, LogNormal, Normal, TruncatedNormal, Uniform

__all__ = [
    "GALAXY_FIELDS",
    "GalaxyFields",
    "ImageSpec",
    "MethodSpec",
    "Prior",
    "Problem",
    "PsfSpec",
    "RunSpec",
    "interim_problem",
    "method_spec",
    "problem",
    "run_spec",
    "truth_problem",
]

GALAXY_FIELDS = ("flux", "hlr", "e1", "e2", "dx", "dy")


class Prior(NamedTuple):
    kind: str
    args: tuple[float, ...]

    @property
    def fixed(self) -> bool:
        return self.kind == "fixed"


class ImageSpec(NamedTuple):
    nx: int
    ny: int
    scale: float  # arcsec / pixel
    fft_size: int | None
    n_objects: int
    alias_band: float | None = None  # the renderer's (draw_galaxy); None: not yet chosen


class PsfSpec(NamedTuple):
    profile: str  # "gaussian" | "moffat"
    sigma: float | None  # Gaussian sigma, arcsec (None for Moffat)
    fwhm: float | None = None  # Moffat FWHM, arcsec
    beta: float | None = None  # Moffat index
    trunc: float = 0.0  # Moffat truncation radius, arcsec (0: none)
    e1: float = 0.0  # PSF ellipticity (reduced shear)
    e2: float = 0.0


class GalaxyFields(NamedTuple):
    flux: Prior
    hlr: Prior
    e1: Prior
    e2: Prior
    dx: Prior  # pixels from the stamp centre
    dy: Prior


class Problem(NamedTuple):
    image: ImageSpec
    psf: PsfSpec
    profile: str  # "exponential" | "gaussian"
    fields: GalaxyFields
    shear: tuple[Prior, Prior]  # priors of (g1, g2)
    noise_sigma: float  # per pixel (from image.noise.sigma, or implied by image.noise.snr)
    # Generator only: "sersic" (n,) / "bulgedisk" (bulge_fraction, bulge_hlr_ratio) args,
    # and who draws the stamps ("jax" | "galsim"; the model is always "jax").
    profile_args: tuple[float, ...] = ()
    renderer: str = "jax"


class RunSpec(NamedTuple):
    model: Problem
    truth: Problem
    inference: MethodSpec  # the method and its settings, as the schema validated them
    precision: str  # "float64" | "float32"
    rng_seed: int
    config_hash: str
    provenance: dict[str, Any]  # JSON-ready extras for truth.json (simulation overrides)
    #: shear_model interim: the config's own view (intrinsic-shape population prior, shear
    #: prior), while ``model`` is the interim model; None for the joint model
    population: Problem | None = None
    #: host estimators beside the method (``inference.estimators``): ``(name, settings)``
    #: each, settings its validated ``inference.<name>_config`` (:mod:`shearbatch.estimators`)
    estimators: tuple[tuple[str, Any], ...] = ()

    @property
    def method(self) -> str:
        """The inference method's name."""
        return self.inference.name


def to_prior(p: Any) -> Prior:
    if isinstance(p, Fixed):
        return Prior("fixed", (float(p.value),))
    if isinstance(p, Normal):
        return Prior("normal", (float(p.mean), float(p.sigma)))
    if isinstance(p, LogNormal):
        return Prior("lognormal", (float(p.mean), float(p.sigma)))
    if isinstance(p, Uniform):
        return Prior("uniform", (float(p.min), float(p.max)))
    if isinstance(p, TruncatedNormal):
        lo = -math.inf if p.min is None else float(p.min)
        hi = math.inf if p.max is None else float(p.max)
        return Prior("truncnormal", (float(p.mean), float(p.sigma), lo, hi))
    raise TypeError(f"not a parameter: {p!r}")


def _fields(cfg: Config) -> GalaxyFields:
    """Per-galaxy fields. ``gal.position`` (pixels from the lower-left corner, fractions
    of the stamp when < 1) becomes a uniform or normal prior on the offset from the stamp
    centre; without it the galaxy is centred."""
    g = cfg.gal
    ell = g.ellipticity
    zero = Prior("fixed", (0.0,))
    e1 = to_prior(ell.e1) if ell is not None else zero
    e2 = to_prior(ell.e2) if ell is not None else zero
    pos = g.position
    if pos is None:
        dx = dy = zero
    else:
        nx, ny = cfg.image.size_x, cfg.image.size_y

        def at(v: float, n: int) -> float:  # offset from the stamp centre, pixels
            return (v * n if abs(v) < 1 else v) - n / 2

        def axis(lo: float, hi: float, n: int) -> Prior:
            lo, hi = at(lo, n), at(hi, n)
            return Prior("fixed", (lo,)) if lo == hi else Prior("uniform", (lo, hi))

        if pos.type == "Normal":
            dx = Prior("normal", (at(pos.x, nx), float(pos.sigma)))
            dy = Prior("normal", (at(pos.y, ny), float(pos.sigma)))
        else:
            dx = axis(pos.x_min, pos.x_max, nx)
            dy = axis(pos.y_min, pos.y_max, ny)
    return GalaxyFields(to_prior(g.flux), to_prior(g.half_light_radius), e1, e2, dx, dy)


def _psf(cfg: Config) -> PsfSpec:
    p = cfg.psf
    if p.type == "Gaussian":
        sigma = p.sigma if p.sigma is not None else p.fwhm / (2.0 * math.sqrt(2.0 * math.log(2.0)))
        return PsfSpec("gaussian", float(sigma), e1=float(p.e1), e2=float(p.e2))
    trunc = 0.0 if p.trunc is None else float(p.trunc)
    return PsfSpec("moffat", None, float(p.fwhm), float(p.beta), trunc, float(p.e1), float(p.e2))


def _shear(cfg: Config) -> tuple[Prior, Prior]:
    sh = cfg.gal.shear
    if sh.type == "UniformDisk":
        return Prior("flat", ()), Prior("flat", ())
    return to_prior(sh.g1), to_prior(sh.g2)


def problem(cfg: Config) -> Problem:
    """The inference model's view of the config."""
    im = cfg.image
    out = Problem(
        image=ImageSpec(
            im.size_x, im.size_y, float(im.pixel_scale), im.fft_size, im.n_objects, im.alias_band
        ),
        psf=_psf(cfg),
        profile=cfg.gal.type.lower(),
        fields=_fields(cfg),
        shear=_shear(cfg),
        noise_sigma=1.0,
    )
    if im.noise.sigma is not None:
        out = out._replace(noise_sigma=float(im.noise.sigma))
    else:
        from .core.snr import reference_signal

        sigma = reference_signal(out) / float(im.noise.snr)  # at the default period
        out = out._replace(noise_sigma=float(f"{sigma:.6g}"))
    return _with_period(out)


def _with_period(p: Problem) -> Problem:
    """``p`` with ``image.fft_size`` and then ``image.alias_band`` chosen from the pixel
    noise where the config leaves them null (:func:`shearbatch.core.period.choose_fft_size`,
    :func:`~shearbatch.core.period.choose_alias_band`)."""
    from .core.period import choose_alias_band, choose_fft_size

    if p.image.fft_size is None:
        p = p._replace(image=p.image._replace(fft_size=choose_fft_size(p)))
    if p.image.alias_band is None:
        p = p._replace(image=p.image._replace(alias_band=choose_alias_band(p)))
    return p


def truth_problem(cfg: Config) -> Problem:
    """The generator's view: ``simulation`` overrides merged over ``psf`` / ``gal``,
    its renderer and profile arguments. The pixel noise is the model's (an ``snr`` is
    defined on the model's reference galaxy): both see the same noise level."""
    if cfg.simulation is None:
        return problem(cfg)
    truth = cfg.truth()
    gal = truth.gal
    args: tuple[float, ...] = ()
    if gal.type == "Sersic":
        args = (float(gal.n),)
    elif gal.type == "BulgeDisk":
        args = (float(gal.bulge_fraction), float(gal.bulge_hlr_ratio))
    model = problem(cfg)
    out = model._replace(
        psf=_psf(truth),
        profile=gal.type.lower(),
        fields=_fields(truth),
        shear=_shear(truth),
        profile_args=args,
        renderer=cfg.simulation.renderer,
    )
    # the truth's own period and alias band (its PSF and galaxies may differ)
    out = _with_period(out._replace(image=out.image._replace(
        fft_size=cfg.image.fft_size, alias_band=cfg.image.alias_band)))  # fmt: skip
    return out


def interim_problem(p: Problem, e_sigma: float) -> Problem:
    """The interim model of ``p``: no shear (g fixed at 0: each galaxy's ellipticity latent
    is its observed, sheared one) and ``Normal(0, e_sigma)`` on each ellipticity component
    (restricted to ``|e| < 1`` by the model); flux, size and position keep their priors, so
    only the ellipticity's prior ratio enters the population weights
    (:mod:`shearbatch.core.population`)."""
    interim = Prior("normal", (0.0, float(e_sigma)))
    fields = p.fields._replace(e1=interim, e2=interim)
    zero = Prior("fixed", (0.0,))
    return p._replace(fields=fields, shear=(zero, zero))


def method_spec(inference: Any) -> MethodSpec:
    """The method of a validated ``inference`` section: its name, its own section
    ``<method>_config`` (None where it has no settings model), the sections its factory
    takes (:func:`shearbatch.core.methods.sections_of`) and, for ``shear_model: interim``,
    the interim prior's width."""
    name = inference.method
    interim = inference.shear_model == "interim"
    return MethodSpec(
        name=name,
        settings=getattr(inference, f"{name}_config", None),
        sections=tuple((kw, getattr(inference, kw)) for kw in sections_of(name)),
        interim_e_sigma=float(inference.interim_e_sigma) if interim else None,
    )


def run_spec(cfg: Config) -> RunSpec:
    prov: dict[str, Any] = {}
    if cfg.simulation is not None:
        prov["simulation_overrides"] = cfg.simulation.model_dump(exclude_none=True)
    model, population = problem(cfg), None
    if cfg.inference.shear_model == "interim":
        model, population = interim_problem(model, cfg.inference.interim_e_sigma), model
    return RunSpec(
        model=model,
        truth=truth_problem(cfg),
        inference=method_spec(cfg.inference),
        precision=cfg.inference.precision,
        rng_seed=cfg.inference.rng_seed,
        config_hash=config_hash(cfg),
        provenance=prov,
        population=population,
        estimators=_estimators(cfg.inference),
    )


def _estimators(inference: Any) -> tuple[tuple[str, Any], ...]:
    """``(name, validated settings)`` of the config's host estimators."""
    from . import estimators

    out = []
    for name in getattr(inference, "estimators", None) or ():
        settings = getattr(inference, f"{name}_config", None)
        out.append((name, settings or estimators.settings_model(name)()))
    return tuple(out)
