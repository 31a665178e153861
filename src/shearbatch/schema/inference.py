"""Inference settings of the config schema (``inference:`` section): MAP, NUTS, VI."""

from __future__ import annotations

from typing import Literal

from pydantic import field_validator, model_validator

from ..core.methods import DEFAULT as DEFAULT_METHOD
from ..core.methods import names as method_names
from .distributions import Count, Positive
from .distributions import StrictModel as _Strict

__all__ = ["Inference", "MapConfig", "MapInit", "NutsConfig", "ViConfig"]


class MapConfig(_Strict):
    """The MAP fit: used by ``method: map``, and for the Laplace start of NUTS and VI."""

    optimizer: Literal["newton", "lbfgs", "adam"] = "newton"
    num_steps: Count = 200
    learning_rate: Positive | None = None  # Adam only (default 0.1)
    tol: Positive | None = None  # None: dtype-aware default (see shearbatch.core.methods.map)
    num_samples: Count = 1000  # Laplace draws written as the posterior

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
    num_steps: Count = 500


class NutsConfig(_Strict):
    warmup: Count = 500
    samples: Count = 1000
    chains: Count = 4
    dense_mass: bool = False
    target_accept: float = 0.8
    max_tree_depth: Count = 10  # warmup (and sampling unless capped separately)
    # A cap on the sampling phase's tree depth. Lanes run in lockstep, so every
    # vectorised iteration costs the deepest tree of the batch; a cap never biases
    # NUTS (it stays a valid MCMC kernel), it can only lower ESS, which the
    # convergence thresholds check. See README "NUTS on large batches".
    max_tree_depth_sampling: Count | None = None
    # False: keep the initial inverse mass matrix (the Laplace covariance with
    # map_init) and adapt the step size only.
    adapt_mass_matrix: bool = True
    map_init: MapInit = MapInit()

    @field_validator("target_accept")
    @classmethod
    def _prob(cls, v: float) -> float:
        if not 0 < v < 1:
            raise ValueError("must be in (0, 1)")
        return v


class ViConfig(_Strict):
    guide: Literal["normal", "mvn"] = "normal"
    num_steps: Count = 5000
    learning_rate: Positive = 0.001
    num_samples: Count = 1000
    num_particles: Count = 1


class Inference(_Strict):
    method: str = DEFAULT_METHOD
    # float64 is the default: at high S/N float32 rounding is not negligible against the
    # noise (README "Precision"); --x64 / --no-x64 override it
    precision: Literal["float64", "float32"] = "float64"
    map_config: MapConfig = MapConfig()
    nuts_config: NutsConfig = NutsConfig()
    vi_config: ViConfig = ViConfig()
    rng_seed: int = 0

    @field_validator("method")
    @classmethod
    def _method(cls, v: str) -> str:
        v = v.lower()
        if v not in method_names():
            raise ValueError(f"unknown method {v!r}; use one of {', '.join(method_names())}")
        return v
