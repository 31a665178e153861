"""Strict configuration schema, YAML loading and defaults.

The YAML has the GalSim-like shape that SHINE users already write (``image``,
``psf``, ``gal``, ``inference``), plus our own optional sections:

- ``campaign``: shear grid, realizations per grid point, base seed, batch size,
  output directory, paired design. Command-line flags override it.
- ``simulation``: ``psf`` / ``gal`` fields that override the main sections for
  the *generator only* (misspecification studies: the model keeps the main
  sections).

A galaxy parameter is *fixed* when given as a number and a *latent* when given
as a distribution mapping (``type: Normal | LogNormal | Uniform |
TruncatedNormal``; LogNormal's ``mean`` is the median, ``sigma`` the log-space
width). Unknown keys, wrong types and impossible values raise
:class:`ConfigError` whose one-line message starts with the key path, e.g.
``gal.half_light_radius: must be > 0``.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, get_args

import yaml
from pydantic import (
    BaseModel,
    ValidationError,
    field_validator,
    model_validator,
)

from .dialect import drop_ignored
from .distributions import (
    DIST_TYPES,
    Count,
    Dist,
    Fixed,
    LogNormal,
    Normal,
    Positive,
    TruncatedNormal,
    Uniform,
)
from .distributions import StrictModel as _Strict
from .distributions import as_param as _as_param
from .distributions import bounded_unit as _bounded_unit
from .distributions import positive_support as _positive_support
from .inference import InferenceHead, inference_model

__all__ = [
    "DIST_TYPES",
    "CampaignConfig",
    "Config",
    "ConfigError",
    "Fixed",
    "LogNormal",
    "Normal",
    "SbatchConfig",
    "TruncatedNormal",
    "Uniform",
    "config_hash",
    "current_config",
    "load_config",
    "parse_config",
    "read_config_data",
]


class ConfigError(ValueError):
    """Invalid configuration; ``str(err)`` is one line naming the key path."""


ParamT = Dist

# --------------------------------------------------------------------------- sections


class Noise(_Strict):
    """Gaussian pixel noise: give ``sigma`` (flux units per pixel) or ``snr``.

    ``snr`` is the matched-filter S/N of the noiseless stamp of the reference
    galaxy (every field at its prior mean, unsheared, centred):
    ``snr = sqrt(sum_pixels I^2) / sigma``; the pixel sigma it implies (6
    significant digits) is the same for every realization, and each galaxy's own
    S/N (its drawn flux and size) is reported in ``convergence.json``.
    """

    type: Literal["Gaussian"] = "Gaussian"
    """Independent Gaussian noise in every pixel."""
    sigma: Positive | None = None
    """[image units per pixel] Pixel noise standard deviation (give sigma or snr). Example: 1.0e-6"""
    snr: Positive | None = None
    """[dimensionless] Matched-filter S/N of the reference galaxy, sqrt(sum I^2) / sigma (give sigma or snr). Example: 30"""

    @model_validator(mode="after")
    def _one(self) -> Noise:
        if (self.sigma is None) == (self.snr is None):
            raise ValueError("give exactly one of sigma (per pixel) and snr (matched-filter S/N)")
        return self


class Image(_Strict):
    pixel_scale: Positive
    """[arcsec / pixel] Pixel size. Example: 0.263"""
    size_x: Count
    """[pixels] Stamp width. Example: 48"""
    size_y: Count
    """[pixels] Stamp height. Example: 48"""
    n_objects: Count = 1
    """[count] Galaxies per stamp, each with its own latents and one shared shear."""
    fft_size: int | None = None
    """[pixels] FFT period of the renderer, a power of 2 >= the stamp. null: chosen from the pixel noise, the smallest 2^a or 3 x 2^a >= the stamp at which 99% of the galaxies the priors draw render within 1e-3 sigma_noise of every pixel at a period twice as large, at most the generous default (2 x the stamp rounded up, more for a Moffat's wings); the period used is recorded in campaign.json and convergence.json (plan fft_size). Example: 32"""
    alias_band: float | None = None
    """[fraction of the Nyquist frequency, in [0, 1)] The renderer evaluates each axis' nearest pixel alias only where that axis' frequency is at least this fraction of Nyquist (the alias of a lower frequency lies where the PSF and pixel have fallen furthest). null: chosen from the pixel noise, the largest of 0.9, 0.85, 0.8, 0.75, 0.7, 0.6, 0.5 at which 99% of the galaxies the priors draw render within 1e-4 sigma_noise of every pixel of their image with every alias (0 when none does); 0: every alias. The band used is recorded in campaign.json (plan alias_band). Example: 0"""
    noise: Noise
    """Pixel noise (section image.noise)."""

    @field_validator("alias_band")
    @classmethod
    def _band(cls, v: float | None) -> float | None:
        if v is not None and not 0.0 <= v < 1.0:
            raise ValueError("must be in [0, 1)")
        return v

    @field_validator("fft_size")
    @classmethod
    def _fft(cls, v: int | None) -> int | None:
        if v is not None and (v < 8 or v & (v - 1)):
            raise ValueError("must be a power of 2 >= 8")
        return v

    @model_validator(mode="after")
    def _fft_fits(self) -> Image:
        if self.fft_size is not None and self.fft_size < max(self.size_x, self.size_y):
            raise ValueError("fft_size must be >= the stamp size")
        return self


class PSF(_Strict):
    """The PSF: ``Gaussian`` (``sigma`` or ``fwhm``) or ``Moffat`` (``fwhm``, ``beta``,
    optional ``trunc``: GalSim's ``Moffat(beta, fwhm, trunc)``), sheared by the PSF
    ellipticity ``(e1, e2)`` (reduced-shear convention, GalSim's ``psf.shear(g1=e1,
    g2=e2)``); sizes in arcsec."""

    type: Literal["Gaussian", "Moffat"] = "Gaussian"
    """PSF profile: Gaussian (sigma or fwhm) or Moffat (fwhm, beta, optional trunc)."""
    sigma: Positive | None = None
    """[arcsec] Gaussian PSF standard deviation (FWHM = 2.355 sigma; give sigma or fwhm). Example: 0.382"""
    fwhm: Positive | None = None
    """[arcsec] PSF full width at half maximum (Moffat: required; Gaussian: instead of sigma). Example: 0.9"""
    beta: Positive | None = None
    """[dimensionless] Moffat index, profile (1 + r^2/r_d^2)^-beta (> 1.5 untruncated). Example: 3.5"""
    trunc: Positive | None = None
    """[arcsec] Moffat truncation radius, > sqrt(2) scale radii (null: untruncated). Example: 3.0"""
    e1: float = 0.0
    """[dimensionless] PSF ellipticity e1 (reduced shear applied to the PSF; the source of additive bias c). Example: 0.05"""
    e2: float = 0.0
    """[dimensionless] PSF ellipticity e2."""

    @model_validator(mode="after")
    def _shape(self) -> PSF:
        if self.type == "Gaussian":
            if (self.sigma is None) == (self.fwhm is None):
                raise ValueError("a Gaussian PSF needs exactly one of sigma and fwhm")
            for k in ("beta", "trunc"):
                if getattr(self, k) is not None:
                    raise ValueError(f"{k}: only for type Moffat")
        else:
            if self.sigma is not None:
                raise ValueError("sigma: a Moffat PSF is sized by fwhm")
            if self.fwhm is None or self.beta is None:
                raise ValueError("a Moffat PSF needs fwhm and beta")
            if self.trunc is None and not self.beta > 1.5:
                raise ValueError("beta: must be > 1.5 for an untruncated Moffat (or give trunc)")
            r_d = self.fwhm / (2.0 * (2.0 ** (1.0 / self.beta) - 1.0) ** 0.5)
            if self.trunc is not None and not self.trunc > 2.0**0.5 * r_d:
                raise ValueError(f"trunc: must be > sqrt(2) scale radii ({2.0**0.5 * r_d:.4g})")
        if not self.e1 * self.e1 + self.e2 * self.e2 < 1.0:
            raise ValueError("|e| must be < 1")
        if self.trunc is not None and self.e1 * self.e1 + self.e2 * self.e2 > 0.36:
            raise ValueError(
                "|e| must be <= 0.6 for a truncated Moffat (its transform table's range)"
            )
        return self


class Ellipticity(_Strict):
    type: Literal["E1E2"] = "E1E2"
    """Intrinsic ellipticity components (reduced-shear convention, |e| < 1)."""
    e1: ParamT = Fixed(value=0.0)
    """[dimensionless] e1: a number or a prior. Example: {type: Normal, mean: 0.0, sigma: 0.2}"""
    e2: ParamT = Fixed(value=0.0)
    """[dimensionless] e2: a number or a prior."""

    @field_validator("e1", "e2", mode="before")
    @classmethod
    def _param(cls, v: Any) -> Any:
        return _as_param(v)

    @field_validator("e1", "e2")
    @classmethod
    def _unit(cls, v: Any) -> Any:
        if not _bounded_unit(v):
            raise ValueError("|e| must be < 1")
        return v


class Shear(_Strict):
    """Prior on the inferred shear; the true shear comes from the campaign.

    ``UniformDisk`` (default): flat on |g| < 1, no transform, so neither the prior
    nor a Jacobian shrinks the estimate (a calibration campaign must not be
    decided by its prior). ``G1G2``: a prior per component (``g1``, ``g2``), e.g.
    the proper prior of an SBC campaign (``campaign.shear_from_prior``).
    """

    type: Literal["UniformDisk", "G1G2"] = "UniformDisk"
    """UniformDisk: flat on |g| < 1 (no parameters); G1G2: a prior per component."""
    g1: ParamT | None = None
    """[dimensionless] Prior on g1 (type G1G2 only). Example: {type: Normal, mean: 0.0, sigma: 0.05}"""
    g2: ParamT | None = None
    """[dimensionless] Prior on g2 (type G1G2 only)."""

    @field_validator("g1", "g2", mode="before")
    @classmethod
    def _param(cls, v: Any) -> Any:
        return None if v is None else _as_param(v)

    @model_validator(mode="after")
    def _kind(self) -> Shear:
        for k in ("g1", "g2"):
            if self.type == "UniformDisk" and getattr(self, k) is not None:
                raise ValueError(f"{k}: only with type G1G2 (UniformDisk has no parameters)")
            if self.type == "G1G2" and getattr(self, k) is None:
                raise ValueError(f"{k}: required with type G1G2")
        return self

    @field_validator("g1", "g2")
    @classmethod
    def _unit(cls, v: Any) -> Any:
        if v is not None and not _bounded_unit(v):
            raise ValueError("|g| must be < 1")
        return v


class Position(_Strict):
    """Prior on the galaxy centre, in pixels from the stamp's lower-left corner (the
    stamp centre is ``size / 2``; values < 1 are fractions of the stamp): ``Uniform``
    in a box, or ``Normal`` around a point (no bound on which a mode can sit)."""

    type: Literal["Uniform", "Normal"] = "Uniform"
    """Uniform in [x_min, x_max] x [y_min, y_max], or Normal around (x, y) with sigma."""
    x_min: float | None = None
    """[pixels from the lower-left corner; < 1: fraction of the stamp] Lower x bound (Uniform)."""
    x_max: float | None = None
    """[pixels from the lower-left corner; < 1: fraction of the stamp] Upper x bound (Uniform)."""
    y_min: float | None = None
    """[pixels from the lower-left corner; < 1: fraction of the stamp] Lower y bound (Uniform)."""
    y_max: float | None = None
    """[pixels from the lower-left corner; < 1: fraction of the stamp] Upper y bound (Uniform)."""
    x: float | None = None
    """[pixels from the lower-left corner; < 1: fraction of the stamp] Mean x (Normal)."""
    y: float | None = None
    """[pixels from the lower-left corner; < 1: fraction of the stamp] Mean y (Normal)."""
    sigma: float | None = None
    """[pixels] Standard deviation of each coordinate (Normal)."""

    @model_validator(mode="after")
    def _order(self) -> Position:
        box = {"x_min": self.x_min, "x_max": self.x_max, "y_min": self.y_min, "y_max": self.y_max}
        point = {"x": self.x, "y": self.y, "sigma": self.sigma}
        need, other = (box, point) if self.type == "Uniform" else (point, box)
        if missing := [k for k, v in need.items() if v is None]:
            raise ValueError(f"type {self.type} needs {', '.join(missing)}")
        if extra := [k for k, v in other.items() if v is not None]:
            raise ValueError(f"type {self.type} does not take {', '.join(extra)}")
        if self.type == "Normal":
            if not self.sigma > 0:
                raise ValueError(f"sigma must be > 0, got {self.sigma}")
            return self
        if not self.x_min < self.x_max:
            raise ValueError("x_min must be < x_max")
        if not self.y_min < self.y_max:
            raise ValueError("y_min must be < y_max")
        return self


#: Galaxy profiles the inference model (the JAX renderer) draws; the others exist
#: only for the GalSim generator (``simulation.renderer: galsim``).
MODEL_PROFILES = ("Exponential", "Gaussian")


class Galaxy(_Strict):
    """A galaxy population. ``Sersic`` (index ``n``) and ``BulgeDisk`` (an exponential
    disk of ``half_light_radius`` plus a de Vaucouleurs bulge with ``bulge_fraction`` of
    the flux and half-light radius ``bulge_hlr_ratio * half_light_radius``) are drawn by
    the GalSim generator only: allowed in ``simulation.gal`` with
    ``simulation.renderer: galsim``."""

    type: Literal["Exponential", "Gaussian", "Sersic", "BulgeDisk"] = "Exponential"
    """Galaxy light profile (the model: Exponential or Gaussian; Sersic and BulgeDisk only in simulation.gal with simulation.renderer: galsim)."""
    n: float | None = None
    """[dimensionless] Sersic index in [0.3, 6.2] (type Sersic only). Example: 2.0"""
    bulge_fraction: float | None = None
    """[dimensionless] Bulge share of the flux in [0, 1] (type BulgeDisk only). Example: 0.3"""
    bulge_hlr_ratio: Positive | None = None
    """[dimensionless] Bulge half-light radius over half_light_radius, the disk's (type BulgeDisk only). Example: 0.5"""
    flux: ParamT
    """[image units: the sum of the noiseless stamp's pixels] Total flux: a number or a prior with positive support. Example: 1.0"""
    half_light_radius: ParamT
    """[arcsec] Half-light radius: a number or a prior with positive support. Example: 0.5"""
    ellipticity: Ellipticity | None = None
    """Intrinsic shape (section gal.ellipticity; null: round)."""
    shear: Shear = Shear()
    """Prior on the INFERRED shear (section gal.shear); the true shear comes from the campaign."""
    position: Position | None = None
    """Prior on the centre (section gal.position; null: fixed at the stamp centre)."""

    @field_validator("flux", "half_light_radius", mode="before")
    @classmethod
    def _param(cls, v: Any) -> Any:
        return _as_param(v)

    @model_validator(mode="after")
    def _profile_args(self) -> Galaxy:
        need = {"Sersic": ("n",), "BulgeDisk": ("bulge_fraction", "bulge_hlr_ratio")}
        for k in ("n", "bulge_fraction", "bulge_hlr_ratio"):
            given = getattr(self, k) is not None
            if given != (k in need.get(self.type, ())):
                raise ValueError(f"{k}: {'only' if given else 'required'} with type "
                                 f"{'Sersic' if k == 'n' else 'BulgeDisk'}")  # fmt: skip
        if self.n is not None and not 0.3 <= self.n <= 6.2:
            raise ValueError("n: must be in [0.3, 6.2] (GalSim's Sersic range)")
        if self.bulge_fraction is not None and not 0.0 <= self.bulge_fraction <= 1.0:
            raise ValueError("bulge_fraction: must be in [0, 1]")
        return self

    @field_validator("flux", "half_light_radius")
    @classmethod
    def _positive(cls, v: Any) -> Any:
        if isinstance(v, Fixed) and not v.value > 0:
            raise ValueError("must be > 0")
        if not _positive_support(v):
            raise ValueError(
                "prior must have positive support (LogNormal, or Uniform/TruncatedNormal with min > 0)"
            )
        return v


class SbatchConfig(_Strict):
    """``campaign.sbatch``: what ``bias-run --emit-sbatch`` asks SLURM for; each key is
    overridden by the ``--sbatch-<key>`` flag of the same name."""

    tasks: Count | None = None
    """[count] Array tasks (--sbatch-tasks; null: one per batch of the plan, at most 1000). Example: 16"""
    array: str | None = None
    """Array index set instead of 0-(tasks-1) (--sbatch-array; a list that is not a range is passed on as --array-indices). Example: 10-13"""
    throttle: Count | None = None
    """[count] At most this many tasks at once, the %T of --array (--sbatch-throttle). Example: 4"""
    time: str | None = None
    """[HH:MM:SS] Time limit per task (--sbatch-time). Example: 01:00:00"""
    mem: str | None = None
    """[SLURM size] Memory per task (--sbatch-mem). Example: 8G"""
    cpus: Count | None = None
    """[count] CPUs per task, --cpus-per-task (--sbatch-cpus). Example: 4"""
    gpus: Count | None = None
    """[count] GPUs per task, --gres=gpu:N (--sbatch-gpus); one per task is the usual choice. Example: 1"""
    job_name: str | None = None
    """SLURM job name (null: shearbatch; the stats job adds -stats). Example: level0"""
    log_dir: str | None = None
    """[path] Where the tasks' %x_%A_%a.out logs go (null: <output_dir>/logs)."""
    line: tuple[str, ...] = ()
    """Extra #SBATCH options (--sbatch-line). Example: ["--partition=gpu"]"""
    setup: tuple[str, ...] = ()
    """Shell lines run before bias-run (--sbatch-setup; empty: activate the virtual environment bias-run ran in). Example: ["module load cuda/12"]"""
    stats: bool = True
    """Also write the dependent bias-extract + bias-stats job (--sbatch-stats/--no-sbatch-stats)."""
    level: str | None = None
    """Acceptance level of the dependent bias-stats, passed as its --level (--sbatch-level; null: bias-stats picks the campaign's own requirement from the frozen config.yaml). Example: level_0"""


class CampaignConfig(_Strict):
    """Campaign defaults; every field can be overridden by a CLI flag."""

    shear_grid: list[float] | None = None
    """[dimensionless] True g1 values (--shear-grid). Example: [-0.05, 0.05]"""
    shear_grid_g2: list[float] | None = None
    """[dimensionless] True g2 values (--shear-grid-g2): the grid is every (g1, g2) pair, so m2 is measured too. Example: [-0.05, 0.05]"""
    g2: float = 0.0
    """[dimensionless] The constant true g2 when shear_grid_g2 is not given (--g2-true)."""
    n_realizations: Count = 1
    """[count] Realizations (seeds) per grid point (--n-realizations)."""
    base_seed: int = 0
    """[seed] Seed of realization 0; realization i has seed base_seed + i at every grid point (--base-seed)."""
    batch_size: Count = 16
    """[count] Realizations per compiled batch (--batch-size)."""
    output_dir: str = "results"
    """[path] Campaign root, one directory per realization (--output-dir)."""
    paired: bool = False
    """+g/-g twins sharing seed, galaxy and noise (--paired)."""
    rotations: Literal[1, 2, 4] = 1
    """[count] Ring design: copies per seed with every intrinsic shape rotated by k * 180 / rotations degrees, k = 0 .. rotations - 1 (shape-noise cancellation; run ids end in _r<k>; with paired, 2 x rotations images per seed and grid point) (--rotations). Example: 2"""
    rotation_noise: Literal["shared", "independent"] = "shared"
    """Noise field of a rotated copy: the seed's own (shared: the copy differs only by its rotated shapes) or an independent one per copy. Example: shared"""
    draws: Literal["all", "estimator"] = "all"
    """What each posterior.nc keeps: every latent's draws (all), or only those the shear estimate is made from, as float32 (estimator: g1, g2 for the joint model; e1, e2 and interim_log_weight for the interim model; ~5x fewer bytes at Level 2, for campaigns of 10^4-10^5 realizations). bias-extract and bias-stats read either. Example: estimator"""
    shear_from_prior: bool = False
    """SBC: each realization's true shear drawn from gal.shear instead of a grid (--shear-from-prior)."""
    sbatch: SbatchConfig = SbatchConfig()
    """What bias-run --emit-sbatch asks SLURM for (section campaign.sbatch; each key overridden by its --sbatch-<key> flag)."""
    requirement: str | None = None
    """The acceptance requirement bias-stats judges this campaign against when no --requirement is given: a preset name of docs/requirements.md (null: level0). Example: survey_snr30"""

    @model_validator(mode="after")
    def _ring_needs_grid(self) -> CampaignConfig:
        if self.rotations > 1 and self.shear_from_prior:
            raise ValueError("rotations: a ring design needs a shear grid, not shear_from_prior")
        return self

    @field_validator("shear_grid", "shear_grid_g2")
    @classmethod
    def _grid(cls, v: list[float] | None) -> list[float] | None:
        if v is not None:
            if not v:
                raise ValueError("must not be empty")
            for g in v:
                if not abs(g) < 1:
                    raise ValueError(f"|g| must be < 1, got {g}")
        return v

    @field_validator("requirement")
    @classmethod
    def _requirement(cls, v: str | None) -> str | None:
        if v is not None:
            from .requirements import resolve

            resolve(v)  # ValueError naming the presets
        return v

    @field_validator("g2")
    @classmethod
    def _g2(cls, v: float) -> float:
        if not abs(v) < 1:
            raise ValueError("|g| must be < 1")
        return v

    @field_validator("base_seed")
    @classmethod
    def _seed(cls, v: int) -> int:
        if v < 0:
            raise ValueError("must be >= 0")
        return v


class Simulation(_Strict):
    """How the data are generated, where it differs from the model.

    ``psf`` / ``gal``: generator-only overrides of the main sections (stored raw,
    merged in :class:`Config`; a mapping with ``type`` replaces the section, e.g.
    ``gal: {type: Sersic, n: 2}`` keeps the priors of ``gal`` and changes the
    profile). ``renderer``: ``jax`` (default, the model's own renderer) or
    ``galsim`` (the optional extra ``pip install shearbatch[galsim]``): the same
    truths and noise, stamps drawn by GalSim, which also draws the profiles the
    model lacks (``Sersic``, ``BulgeDisk``).
    """

    renderer: Literal["jax", "galsim"] = "jax"
    """Who draws the data: jax (the model's renderer) or galsim (pip install shearbatch[galsim]; same truths and noise, also Sersic and BulgeDisk)."""
    psf: dict[str, Any] | None = None
    """psf keys that differ for the generator only (misspecification). Example: {sigma: 0.382}"""
    gal: dict[str, Any] | None = None
    """gal keys that differ for the generator only. Example: {type: Sersic, n: 2.0}"""

    @field_validator("renderer")
    @classmethod
    def _installed(cls, v: str) -> str:
        if v == "galsim":
            try:
                import galsim  # noqa: F401
            except ImportError:
                raise ValueError(
                    "galsim is not installed (pip install 'shearbatch[galsim]')"
                ) from None
        return v


class Config(_Strict):
    image: Image
    """Stamp geometry and pixel noise."""
    psf: PSF
    """Point-spread function (the same for the generator and the model unless simulation.psf)."""
    gal: Galaxy
    """Galaxy profile and the priors of its latents; a number is fixed, a mapping with type a prior."""
    inference: InferenceHead = InferenceHead()  # the methods' sections: current_config()
    """Inference method and its settings."""
    campaign: CampaignConfig = CampaignConfig()
    """Shear grid, realizations, seeds, batch size, output; every key has a bias-run flag."""
    simulation: Simulation | None = None
    """Generator-only overrides of psf / gal (the model keeps the main sections)."""

    def truth(self) -> Config:
        """The configuration the generator uses: ``simulation`` merged over ``psf``/``gal``."""
        if self.simulation is None:
            return self
        psf, gal = self._merged_truth()
        return self.model_copy(update={"psf": psf, "gal": gal, "simulation": None})

    def _merged_truth(self) -> tuple[PSF, Galaxy]:
        sim = self.simulation
        assert sim is not None
        raw_psf = _deep_merge(self.psf.model_dump(), sim.psf or {})
        raw_gal = _deep_merge(self.gal.model_dump(), sim.gal or {})
        try:
            return PSF.model_validate(raw_psf), Galaxy.model_validate(raw_gal)
        except ValidationError as err:
            section = "psf" if err.title == "PSF" else "gal"
            raise ConfigError(_format_error(err, f"simulation.{section}")) from None

    @model_validator(mode="after")
    def _check_simulation(self) -> Config:
        if self.gal.type not in MODEL_PROFILES:
            raise ConfigError(
                f"gal.type: the model draws {' or '.join(MODEL_PROFILES)}; put {self.gal.type} "
                "in simulation.gal with simulation.renderer: galsim"
            )
        if self.simulation is not None:
            _, gal = self._merged_truth()  # raises ConfigError naming simulation.<key>
            if gal.type not in MODEL_PROFILES and self.simulation.renderer != "galsim":
                raise ConfigError(
                    f"simulation.gal.type: {gal.type} needs simulation.renderer: galsim"
                )
        return self

    @model_validator(mode="after")
    def _check_estimators(self) -> Config:
        """A host estimator's settings against the stamps (e.g. AnaCal's cell size)."""
        from .. import estimators

        for name in getattr(self.inference, "estimators", None) or ():
            settings = getattr(self.inference, f"{name}_config", None)
            settings = settings or estimators.settings_model(name)()
            im = self.image
            try:
                estimators.module(name).check(settings, im.size_x, im.size_y, im.pixel_scale)
            except ValueError as err:
                raise ConfigError(f"inference.{err}") from None
        return self


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict) and "type" not in v:
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = v
    return out


# --------------------------------------------------------------------------- loading


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation can hold (through unions, Annotated, lists)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for a in get_args(annotation) for m in _models_in(a)]


def known_keys(root: type[BaseModel], loc: Sequence[Any]) -> list[str] | None:
    """The keys the mapping at ``loc`` (a pydantic error location) accepts, if it is a model."""
    models = [root]
    for part in loc:
        part = str(part)
        tagged = [m for m in models if m.__name__ == part]
        if tagged:  # a discriminated union's tag (LogNormal, Uniform, ...)
            models = tagged
            continue
        fields = [m.model_fields[part] for m in models if part in m.model_fields]
        if not fields:
            return None
        models = _models_in(fields[0].annotation)
        if not models:
            return None
    return sorted({k for m in models for k in m.model_fields})


def current_config() -> type[Config]:
    """:class:`Config`, its ``inference`` section made of the methods registered now
    (:func:`shearbatch.schema.inference.inference_model`): a method registered after this
    module was imported, with its settings model, is accepted from then on. Everything
    that validates or describes a config asks for it (until then ``inference`` has only
    its own keys, so importing the schema imports no method)."""
    model = inference_model()
    field = Config.model_fields["inference"]
    if field.annotation is not model:
        field.annotation, field.default = model, model()
        Config.model_rebuild(force=True)
    return Config


#: the models a ValidationError can come from, by its ``title``
_ROOTS: dict[str, type[BaseModel]] = {"Config": Config, "PSF": PSF, "Galaxy": Galaxy}


def _format_error(err: ValidationError, prefix: str | None = None) -> str:
    """One line: the first unknown key (with a did-you-mean) if any, else the first error."""
    errors = sorted(
        err.errors(include_url=False), key=lambda e: e["type"] != "extra_forbidden"
    )  # stable: unknown keys first, hiding nothing behind "required key is missing"

    def path_of(e: Any) -> str:
        loc = [_key_text(str(p)) for p in e["loc"] if str(p) not in (*DIST_TYPES, "Fixed")]
        return ".".join(([prefix] if prefix else []) + loc)

    e = errors[0]
    path = path_of(e)
    msg = e["msg"]
    for pre in ("Value error, ", "Assertion failed, "):
        if msg.startswith(pre):
            msg = msg[len(pre) :]
    if e["type"] == "extra_forbidden":
        msg = "unknown key"
        root = _ROOTS.get(err.title)
        keys = known_keys(root, e["loc"][:-1]) if root is not None else None
        if keys:
            close = difflib.get_close_matches(str(e["loc"][-1]), keys, n=1, cutoff=0.6)
            msg += f" (did you mean {close[0]}?)" if close else f" (known: {', '.join(keys)})"
    elif e["type"] == "missing":
        msg = "required key is missing"
    others = sorted({path_of(o) for o in errors[1:]} - {path})
    extra = f" (+{len(errors) - 1} more: {', '.join(others[:3])})" if len(errors) > 1 else ""
    if len(errors) > 1 and not others:
        extra = f" (+{len(errors) - 1} more)"
    line = f"{path}: {msg}{extra}" if path else f"{msg}{extra}"
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in line)


def _key_text(key: str) -> str:
    """A key as an error line quotes it: as written, or its Python repr where it holds a
    character a one-line message cannot show as is (a newline, a tab, leading or trailing
    space) or is empty."""
    return key if key and key.isprintable() and key.strip() == key else repr(key)


def parse_config(raw: Any, *, prefix: str | None = None) -> Config:
    """Validate a mapping (already parsed YAML) into a :class:`Config`.

    Keys of the SHINE dialect that have no effect here are dropped first, each with one
    warning (:mod:`shearbatch.schema.dialect`); every other unknown key is an error."""
    if not isinstance(raw, dict):
        raise ConfigError("config: top level must be a mapping")
    raw = drop_ignored(raw)
    try:
        return current_config().model_validate(raw)
    except ConfigError:
        raise
    except ValidationError as err:
        raise ConfigError(_format_error(err, prefix)) from None


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping (PyYAML keeps the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_config(path: str | Path) -> Config:
    """Read and validate a YAML config; raises :class:`ConfigError` with a one-line message."""
    return parse_config(read_config_data(path))


def read_config_data(path: str | Path) -> Any:
    """The YAML config at ``path`` as parsed data, not validated (:func:`parse_config` does
    that); raises :class:`ConfigError` when it is missing or not YAML."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file not found: {p}")
    try:
        raw = yaml.load(p.read_text(), Loader=_UniqueKeyLoader)  # a SafeLoader
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(err, "problem", None) or type(err).__name__
        raise ConfigError(f"{p}: invalid YAML{where}: {problem}") from None
    return raw


#: Keys added after configs were hashed, by their path: left at their default (null) they
#: are not hashed, so a campaign started before a key existed keeps its hash (and resumes).
_HASH_NEUTRAL = (
    ("image", "alias_band"),
    ("inference", "map_config", "proposal"),
    ("inference", "map_config", "proposal_dof"),
    ("inference", "map_config", "proposal_centre"),
    ("inference", "map_config", "gauss_newton_precision"),
    ("inference", "map_config", "draw_precision"),
    ("inference", "estimators"),
    ("inference", "anacal_config"),
)


def config_hash(cfg: Config) -> str:
    """Stable short hash of the validated configuration (without ``campaign``)."""
    data = cfg.model_dump(mode="json", exclude={"campaign"})
    for *path, key in _HASH_NEUTRAL:  # added later: at its default, not in the hash
        node = data
        for part in path:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict) and key in node and node[key] is None:
            del node[key]
    blob = json.dumps(data, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
