"""Inference methods and their registry.

``REGISTRY`` maps a method name to its factory ``factory(inference) ->
Method``, where ``inference`` is the plain ``inference`` section of the config
(nested dicts of numbers and strings). The schema's allowed
``inference.method`` values, the CLI's ``--method`` choices and the engine all
read this registry. A new method is one module plus one :func:`register` call;
its module is imported only when the method is used.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

from .base import Diagnosis, Draws, Method

__all__ = [
    "DEFAULT",
    "INTERIM",
    "REGISTRY",
    "Diagnosis",
    "Draws",
    "Method",
    "get",
    "names",
    "register",
    "supports_interim",
]

#: the method of a config that names none
DEFAULT = "map"

#: name -> factory, or "module:attribute" of a factory imported on first use
REGISTRY: dict[str, Callable[[Mapping[str, Any]], Method] | str] = {
    "map": "shearbatch.core.methods.map:method",
    "vi": "shearbatch.core.methods.vi:method",
    "nuts": "shearbatch.core.methods.nuts:method",
}


#: methods that fit the interim model (``inference.shear_model: interim``): their draws
#: carry per-galaxy population weights (``interim_log_weight``): MAP + Laplace draws with
#: importance ratios, or NUTS with every galaxy its own sampler (exact draws)
INTERIM = ("map", "nuts")


def supports_interim(name: str) -> bool:
    """Whether method ``name`` can fit the interim model (:data:`INTERIM`)."""
    return name.lower() in INTERIM


def register(name: str, factory: Callable[[Mapping[str, Any]], Method] | str) -> None:
    """Add (or replace) a method: ``factory(inference_settings) -> Method``."""
    REGISTRY[name.lower()] = factory


def names() -> tuple[str, ...]:
    return tuple(REGISTRY)


def get(name: str, inference: Mapping[str, Any] | None = None) -> Method:
    """The method ``name`` built from the plain ``inference`` settings."""
    try:
        factory = REGISTRY[name.lower()]
    except KeyError:
        raise ValueError(f"unknown method {name!r}; use one of {', '.join(names())}") from None
    if isinstance(factory, str):
        mod, _, attr = factory.partition(":")
        factory = getattr(importlib.import_module(mod), attr)
    return factory(dict(inference or {}))
