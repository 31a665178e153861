"""Inference settings of the config schema (``inference:`` section): MAP, NUTS, VI."""

from __future__ import annotations

from typing import Literal

from pydantic import field_validator, model_validator

from ..core.methods import DEFAULT as DEFAULT_METHOD
from ..core.methods import INTERIM, supports_interim
from ..core.methods import names as method_names
from .distributions import Count, Positive
from .distributions import StrictModel as _Strict

__all__ = ["Inference", "MapConfig", "MapInit", "NutsConfig", "ViConfig"]


class MapConfig(_Strict):
    """The MAP fit: used by ``method: map``, and for the Laplace start of NUTS and VI.

    Each realization's ``convergence.json`` records the fit under ``optimizer``:
    ``converged`` (the convergence rule: ``newton_decrement`` <= 1e-4, whatever the
    optimiser), ``newton_decrement`` (g^T H^-1 g / 2 at the mode: the log density still to
    gain), ``grad_norm_whitened`` (|L^-1 g| with H = L L^T the Laplace factor: the Newton
    step still to go, in posterior standard deviations, = sqrt(2 newton_decrement); the raw
    gradient norm is not recorded, as it scales with the curvature, i.e. with S/N^2),
    ``n_steps``, ``stopping_rule_met`` (the optimiser's own rule: ``tol``) and ``potential``.
    """

    optimizer: Literal["newton", "gauss_newton", "lbfgs", "adam"] = "newton"
    """Damped Newton with the exact Hessian (default), Gauss-Newton (the stamps' J^T W J plus the prior's Hessian far from the mode, exact Newton for the last steps), L-BFGS or Adam (large models). Gauss-Newton measured (bench/bench_cost.py, docs/results/cost_map.md): the same modes (within 1e-5 posterior sd) with 1.2x (Level 0), 1.7x (survey S/N 30), 2.6x (M = 8) and 8.7x (Level 2, M = 32) the galaxies/s of newton; configs/level2.yaml uses it. Not the default: in float32 at Level 0's S/N 1.2e5 it ended one of four test realizations unconverged (decrement 1.3e-3) where exact Newton converged."""
    num_steps: Count = 200
    """[iterations] Optimiser steps at most."""
    learning_rate: Positive | None = None
    """[step size] Adam only (null: 0.1)."""
    tol: Positive | None = None
    """[log-density] Convergence: half the Newton decrement below tol (null: 1e-10 float64, 1e-7 float32)."""
    num_samples: Count = 1000
    """[draws] Laplace draws written as the posterior (antithetic)."""

    @model_validator(mode="after")
    def _lr(self) -> MapConfig:
        if self.learning_rate is not None and self.optimizer != "adam":
            raise ValueError(
                f"learning_rate: has no effect with optimizer {self.optimizer} (Adam only)"
            )
        return self


class MapInit(_Strict):
    """NUTS's start at each realization's MAP/Laplace fit (``map_config``'s optimiser)."""

    enabled: bool = True
    """Start each realization's chains at its MAP and sample in Laplace-whitened coordinates."""
    num_steps: Count = 500
    """[iterations] Optimiser steps of the MAP start."""


class NutsConfig(_Strict):
    warmup: Count = 500
    """[iterations] Warmup (adaptation) iterations per chain."""
    samples: Count = 1000
    """[draws] Kept draws per chain."""
    chains: Count = 4
    """[count] Independent chains per realization."""
    dense_mass: bool = False
    """Dense (true) or diagonal inverse mass matrix."""
    target_accept: float = 0.8
    """[probability, in (0, 1)] Target acceptance of the step-size adaptation."""
    max_tree_depth: Count = 10
    """[doublings] Tree-depth cap of warmup (and of sampling unless max_tree_depth_sampling)."""
    # A cap on the sampling phase's tree depth. Lanes run in lockstep, so every
    # vectorised iteration costs the deepest tree of the batch; a cap never biases
    # NUTS (it stays a valid MCMC kernel), it can only lower ESS, which the
    # convergence thresholds check. See docs/design.md, "NUTS on large batches".
    max_tree_depth_sampling: Count | None = None
    """[doublings] Tree-depth cap of the sampling phase (null: max_tree_depth); 3 for big batches."""
    # False: keep the initial inverse mass matrix (the Laplace covariance with
    # map_init) and adapt the step size only.
    adapt_mass_matrix: bool = True
    """False: keep the initial (Laplace) mass matrix and adapt the step size only."""
    map_init: MapInit = MapInit()
    """Start at the MAP (section inference.nuts_config.map_init)."""

    @field_validator("target_accept")
    @classmethod
    def _prob(cls, v: float) -> float:
        if not 0 < v < 1:
            raise ValueError("must be in (0, 1)")
        return v


class ViConfig(_Strict):
    guide: Literal["normal", "mvn"] = "normal"
    """Gaussian guide on the unconstrained latents: mean-field (normal) or full-rank (mvn)."""
    num_steps: Count = 5000
    """[iterations] SVI steps."""
    learning_rate: Positive = 0.001
    """[step size] Adam learning rate."""
    num_samples: Count = 1000
    """[draws] Guide draws written as the posterior."""
    num_particles: Count = 1
    """[count] ELBO particles per step."""


class Inference(_Strict):
    method: str = DEFAULT_METHOD
    """A registered method: map (MAP + Laplace), vi, nuts (--method)."""
    # float64 is the default: at high S/N float32 rounding is not negligible against the
    # noise (docs/statistics.md, "Precision"); --x64 / --no-x64 override it
    precision: Literal["float64", "float32"] = "float64"
    """Generation and inference dtype (--x64 / --no-x64)."""
    map_config: MapConfig = MapConfig()
    """MAP settings (also the start of NUTS and VI)."""
    nuts_config: NutsConfig = NutsConfig()
    """NUTS settings."""
    vi_config: ViConfig = ViConfig()
    """VI settings."""
    rng_seed: int = 0
    """[seed] Seed of the inference's random keys (the data's seeds come from the campaign)."""
    # interim: the population estimator (core/population.py, docs/results/population_estimator.md)
    shear_model: Literal["joint", "interim"] = "joint"
    """joint: g is a latent of each realization. interim: no shear in the pixel model; each galaxy's latents are its observed (sheared) ellipticity, flux, size and position under a broad interim ellipticity prior, and bias-extract / bias-stats infer g from the population. Methods (core.methods.INTERIM): nuts (every galaxy of every realization its own sampler with nuts_config's warmup, samples, chains, tree depth and mass-matrix adaptation; exact draws; per-galaxy R-hat, ESS and divergences in convergence.json) or map (MAP + Laplace draws with per-galaxy importance weights: the cheap variant, its importance-sampling efficiency recorded)."""
    interim_e_sigma: Positive = 0.5
    """[1] shear_model interim: the interim prior on each observed-ellipticity component, Normal(0, interim_e_sigma) on |e| < 1 (written to posterior.nc)."""

    @model_validator(mode="after")
    def _interim(self) -> Inference:
        if self.shear_model == "interim" and not supports_interim(self.method):
            raise ValueError(
                f"shear_model: interim needs method {' or '.join(INTERIM)} (its draws carry "
                f"per-galaxy population weights), got {self.method}"
            )
        return self

    @field_validator("method")
    @classmethod
    def _method(cls, v: str) -> str:
        v = v.lower()
        if v not in method_names():
            raise ValueError(f"unknown method {v!r}; use one of {', '.join(method_names())}")
        return v
