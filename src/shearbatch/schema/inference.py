"""Inference settings of the config schema (``inference:`` section), built from the registry.

The section's own keys (``method``, ``precision``, ``rng_seed``, ``shear_model``,
``interim_e_sigma``) are defined here; every registered method with a settings model
(:func:`shearbatch.core.methods.register`) adds its section ``<name>_config``, validated
by the model its module defines. :func:`inference_model` is the model of the methods
registered now: a method registered later (a plugin, a test) is accepted by the schema
from then on (:func:`shearbatch.schema.config.parse_config` asks for the current model).
Building it imports the registered methods' modules (JAX, NumPyro), so it is built on
first use, not when the schema is imported: :data:`InferenceHead`, the section without
the methods' sections, stands in until then (commands that never read a config, such
as ``bias-extract``, stay light).
"""

from __future__ import annotations

import inspect
from typing import Any, Literal

from pydantic import Field, create_model, field_validator, model_validator

from .. import estimators as _est
from ..core import methods as _methods
from ..core.methods import DEFAULT as DEFAULT_METHOD
from ..core.methods import names as method_names
from ..core.methods import supports_interim
from ..strict_model import Positive
from ..strict_model import StrictModel as _Strict

__all__ = ["InferenceHead", "InferenceRules", "inference_model", "registry_key"]


class InferenceRules(_Strict):
    """The rules of the ``inference`` section across its keys (the base of
    :func:`inference_model`'s models)."""

    @model_validator(mode="after")
    def _interim(self) -> Any:
        method = getattr(self, "method", DEFAULT_METHOD)
        if getattr(self, "shear_model", None) == "interim" and not supports_interim(method):
            raise ValueError(
                f"shear_model: interim needs method "
                f"{' or '.join(m for m in method_names() if supports_interim(m))} (its draws carry "
                f"per-galaxy population weights), got {method}"
            )
        return self

    @field_validator("estimators", check_fields=False)
    @classmethod
    def _estimators(cls, v: list[str] | None) -> list[str] | None:
        if v is None:
            return v
        v = [e.lower() for e in v]
        for e in v:
            _est.require(e)  # unknown, or its package not installed: one line
        if len(set(v)) != len(v):
            raise ValueError(f"an estimator named twice: {v}")
        return v

    @field_validator("method", check_fields=False)
    @classmethod
    def _method(cls, v: str) -> str:
        v = v.lower()
        if v not in method_names():
            raise ValueError(f"unknown method {v!r}; use one of {', '.join(method_names())}")
        return v


def _head() -> dict[str, Any]:
    """The section's own keys before the methods' sections (name -> (type, Field))."""
    return {
        "method": (str, Field(DEFAULT_METHOD, description=(
            f"The inference method (--method): one of the registered methods "
            f"({', '.join(method_names())}; shearbatch.core.methods.register adds one), "
            "each with its settings in the section `<method>_config`."))),
        # float64 is the default: at high S/N float32 rounding is not negligible against
        # the noise (docs/statistics.md, "Precision"); --x64 / --no-x64 override it
        "precision": (Literal["float64", "float32"], Field("float64", description=(
            "Generation and inference dtype (--x64 / --no-x64)."))),
    }  # fmt: skip


#: the section's own keys, after the methods' sections
_TAIL: dict[str, Any] = {
    "rng_seed": (int, Field(0, description=(
        "[seed] Seed of the inference's random keys (the data's seeds come from the "
        "campaign)."))),
    # interim: the population estimator (core/population.py, docs/results/population_estimator.md)
    "shear_model": (Literal["joint", "interim"], Field("joint", description=(
        "joint: g is a latent of each realization. interim: no shear in the pixel model; "
        "each galaxy's latents are its observed (sheared) ellipticity, flux, size and "
        "position under a broad interim ellipticity prior, and bias-extract / bias-stats "
        "infer g from the population. Methods (core.methods.INTERIM): nuts (every galaxy "
        "of every realization its own sampler with nuts_config's warmup, samples, chains, "
        "tree depth and mass-matrix adaptation; exact draws; per-galaxy R-hat, ESS and "
        "divergences in convergence.json) or map (MAP + Laplace draws with per-galaxy "
        "importance weights: the cheap variant, its importance-sampling efficiency "
        "recorded)."))),
    "interim_e_sigma": (Positive, Field(0.5, description=(
        "[1] shear_model interim: the interim prior on each observed-ellipticity "
        "component, Normal(0, interim_e_sigma) on |e| < 1 (written to posterior.nc)."))),
    # host estimators beside the method (shearbatch/estimators/, issue 45): null, the
    # default, keeps a config's hash as before they existed (schema/config.py)
    "estimators": (list[str] | None, Field(None, description=(
        "Host estimators run beside the method on the same realizations (--estimators): "
        "e.g. [anacal] (AnaCal's FPFS; pip install 'shearbatch[anacal]'); each measures "
        "every galaxy in its own cell, on the host, in worker processes, and bias-stats "
        "gives each one its m, c, verdict and cost, and its difference from the method "
        "with a paired error. null: none."))),
    **{f"{_name}_config": (_est.settings_model(_name) | None, Field(None, description=(
        f"Settings of host estimator {_name} (null: its defaults)."))) for _name in _est.names()},
}  # fmt: skip


def _section_description(name: str, model: type) -> str:
    doc = inspect.cleandoc(model.__doc__ or "").split("\n\n")[0]
    doc = " ".join(doc.split())
    return doc or f"Settings of method {name}."


def registry_key() -> tuple[Any, ...]:
    """What the ``inference`` model depends on: each registered method's settings model
    (its reference; nothing is imported)."""
    out = []
    for name, entry in list(_methods.REGISTRY.items()):
        settings = getattr(entry, "settings", None)
        out.append((name, settings if isinstance(settings, str) else id(settings)))
    return tuple(out)


_CACHE: dict[tuple[Any, ...], type[_Strict]] = {}


def inference_model() -> type[_Strict]:
    """The ``inference`` section's model for the methods registered now."""
    key = registry_key()
    if key not in _CACHE:
        sections = {
            f"{name}_config": (model, Field(default_factory=model,
                                            description=_section_description(name, model)))
            for name, model in _methods.settings_models().items()
        }  # fmt: skip
        _CACHE[key] = create_model(
            "Inference",
            __base__=InferenceRules,
            __module__=__name__,
            __doc__="Inference method and its settings.",
            **_head(),
            **sections,
            **_TAIL,
        )
    return _CACHE[key]


#: the ``inference`` section's own keys without the methods' sections (no method module
#: imported): :class:`shearbatch.schema.config.Config`'s until :func:`inference_model`
#: replaces it (:func:`shearbatch.schema.config.current_config`)
InferenceHead = create_model(
    "Inference",
    __base__=InferenceRules,
    __module__=__name__,
    __doc__="Inference method and its settings.",
    **_head(),
    **_TAIL,
)
