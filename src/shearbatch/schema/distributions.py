"""Distributions of the config schema: a number is fixed, a mapping with ``type`` is a prior.

``type: Normal | LogNormal | Uniform | TruncatedNormal`` (LogNormal's ``mean``
is the median, ``sigma`` the log-space width). A bare number (or a numeric
string such as PyYAML's ``1e-6``) becomes :class:`Fixed`.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from ..strict_model import Count, Positive, StrictModel

__all__ = [
    "DIST_TYPES",
    "Count",
    "Dist",
    "Fixed",
    "LogNormal",
    "Normal",
    "Positive",
    "StrictModel",
    "TruncatedNormal",
    "Uniform",
    "as_param",
    "bounded_unit",
    "positive_support",
]


# --------------------------------------------------------------------------- distributions


class Fixed(StrictModel):
    """A fixed value (what a bare number in the YAML becomes)."""

    type: Literal["Fixed"] = "Fixed"
    """A bare number in the YAML is a Fixed value."""
    value: float
    """[the parameter's unit] The value."""

    @field_validator("value")
    @classmethod
    def _finite(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError("must be finite")
        return v


class Normal(StrictModel):
    type: Literal["Normal"]
    """Gaussian prior N(mean, sigma)."""
    mean: float = 0.0
    """[the parameter's unit] Mean."""
    sigma: Positive
    """[the parameter's unit] Standard deviation."""


class LogNormal(StrictModel):
    """Log-normal with median ``mean`` and log-space width ``sigma``."""

    type: Literal["LogNormal"]
    """log(x) ~ N(log(mean), sigma): positive support."""
    mean: Positive
    """[the parameter's unit] The MEDIAN exp(mu). Example: 0.5"""
    sigma: Positive
    """[dimensionless] Width of log(x) (0.1 = about 10% scatter)."""


class Uniform(StrictModel):
    type: Literal["Uniform"]
    """Flat on [min, max]."""
    min: float
    """[the parameter's unit] Lower bound."""
    max: float
    """[the parameter's unit] Upper bound (> min)."""

    @model_validator(mode="after")
    def _order(self) -> Uniform:
        if not self.min < self.max:
            raise ValueError("min must be < max")
        return self


class TruncatedNormal(StrictModel):
    type: Literal["TruncatedNormal"]
    """N(mean, sigma) restricted to [min, max] (the bounds are min/max, not low/high)."""
    mean: float = 0.0
    """[the parameter's unit] Mean of the untruncated Normal."""
    sigma: float
    """[the parameter's unit] Standard deviation of the untruncated Normal (> 0)."""
    min: float | None = None
    """[the parameter's unit] Lower bound (null: unbounded below)."""
    max: float | None = None
    """[the parameter's unit] Upper bound (null: unbounded above)."""

    @model_validator(mode="after")
    def _check(self) -> TruncatedNormal:
        if not self.sigma > 0:
            raise ValueError("sigma must be > 0")
        if self.min is not None and self.max is not None and not self.min < self.max:
            raise ValueError("min must be < max")
        return self


DIST_TYPES = ("Normal", "LogNormal", "Uniform", "TruncatedNormal")
Dist = Annotated[
    Fixed | Normal | LogNormal | Uniform | TruncatedNormal, Field(discriminator="type")
]


def as_param(v: Any) -> Any:
    """A number (or numeric string such as YAML's ``1e-6``) -> Fixed; mappings pass."""
    if isinstance(v, bool):
        raise ValueError("must be a number or a distribution mapping")
    if isinstance(v, int | float):
        return {"type": "Fixed", "value": float(v)}
    if isinstance(v, str):
        try:
            return {"type": "Fixed", "value": float(v)}
        except ValueError:
            raise ValueError(f"must be a number or a distribution mapping, got {v!r}") from None
    if isinstance(v, dict):
        if "type" not in v:
            params = {k for m in (Normal, LogNormal, Uniform, TruncatedNormal, Fixed)
                      for k in m.model_fields}  # fmt: skip
            unknown = sorted(str(k) for k in v if k not in params)
            if unknown:  # a typo, not a forgotten type: name the key
                raise ValueError(
                    f"{unknown[0]}: unknown key (a number, or a distribution with 'type': "
                    f"one of {', '.join(DIST_TYPES)})"
                )
            raise ValueError(f"a distribution needs 'type' (one of {', '.join(DIST_TYPES)})")
        if v["type"] not in (*DIST_TYPES, "Fixed"):
            raise ValueError(
                f"unknown distribution {v['type']!r}; use one of {', '.join(DIST_TYPES)}"
            )
        return v
    if isinstance(v, BaseModel):
        return v
    raise ValueError("must be a number or a distribution mapping")


def positive_support(p: Any) -> bool:
    if isinstance(p, Fixed):
        return p.value > 0
    if isinstance(p, LogNormal):
        return True
    if isinstance(p, Uniform):
        return p.min > 0
    if isinstance(p, TruncatedNormal):
        return p.min is not None and p.min > 0
    return False


def bounded_unit(p: Any) -> bool:
    """True when a fixed value lies inside (-1, 1)."""
    return not isinstance(p, Fixed) or abs(p.value) < 1
