"""Inference methods and their registry.

A method is one module and one :func:`register` call. The module defines

- a factory ``factory(inference) -> Method`` (:class:`~.base.Method`), where
  ``inference`` is the plain ``inference`` section of the config (nested dicts of
  numbers and strings, :attr:`shearbatch.spec.RunSpec.inference`);
- optionally its settings model, a :class:`shearbatch.settings.StrictModel` of the
  config section ``inference.<name>_config`` (the factory reads that section of
  ``inference`` through it: :func:`~.base.section`).

``REGISTRY`` maps a method name to its :class:`Entry`. The schema's allowed
``inference.method`` values and its ``inference.<name>_config`` sections, the CLI's
``--method`` choices, the generated config reference and the engine all read this
registry. A registered module is imported only when the method (or the schema) needs
it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from .base import Diagnosis, Draws, Info, Method, section

__all__ = [
    "DEFAULT",
    "INTERIM",
    "REGISTRY",
    "Diagnosis",
    "Draws",
    "Entry",
    "Info",
    "Method",
    "get",
    "names",
    "register",
    "section",
    "settings_model",
    "settings_models",
    "supports_interim",
]

#: the method of a config that names none
DEFAULT = "map"

Factory = Callable[[Mapping[str, Any]], Method]


class Entry(NamedTuple):
    """A registered method: its factory and its settings model (the pydantic model of
    ``inference.<name>_config``; None: the method has no settings section), each either
    the object or ``"module:attribute"``, imported on first use."""

    factory: Factory | str
    settings: type | str | None = None


#: name -> :class:`Entry`
REGISTRY: dict[str, Entry] = {
    "map": Entry("shearbatch.core.methods.map:method", "shearbatch.core.methods.map:MapConfig"),
    "vi": Entry("shearbatch.core.methods.vi:method", "shearbatch.core.methods.vi:ViConfig"),
    "nuts": Entry("shearbatch.core.methods.nuts:method", "shearbatch.core.methods.nuts:NutsConfig"),
}


#: methods that fit the interim model (``inference.shear_model: interim``): their draws
#: carry per-galaxy population weights (``interim_log_weight``): MAP + Laplace draws with
#: importance ratios, or NUTS with every galaxy its own sampler (exact draws)
INTERIM = ("map", "nuts")


def supports_interim(name: str) -> bool:
    """Whether method ``name`` can fit the interim model (:data:`INTERIM`)."""
    return name.lower() in INTERIM


def register(name: str, factory: Factory | str, settings: type | str | None = None) -> None:
    """Add (or replace) a method: ``factory(inference) -> Method``, with its settings
    model ``settings`` (the config section ``inference.<name>_config``; None: none)."""
    REGISTRY[name.lower()] = Entry(factory, settings)


def names() -> tuple[str, ...]:
    return tuple(REGISTRY)


def _load(ref: Any) -> Any:
    if isinstance(ref, str):
        mod, _, attr = ref.partition(":")
        return getattr(importlib.import_module(mod), attr)
    return ref


def _entry(name: str) -> Entry:
    try:
        entry = REGISTRY[name.lower()]
    except KeyError:
        raise ValueError(f"unknown method {name!r}; use one of {', '.join(names())}") from None
    return entry if isinstance(entry, Entry) else Entry(entry)  # a bare factory


def settings_model(name: str) -> type | None:
    """The settings model of method ``name`` (its ``inference.<name>_config``), or None."""
    return _load(_entry(name).settings)


def settings_models() -> dict[str, type]:
    """``{name: settings model}`` of every registered method that has settings, in
    registration order (the schema's ``inference.<name>_config`` sections)."""
    out = {}
    for name in names():
        if (model := settings_model(name)) is not None:
            out[name] = model
    return out


def get(name: str, inference: Mapping[str, Any] | None = None) -> Method:
    """The method ``name`` built from the plain ``inference`` settings."""
    return _load(_entry(name).factory)(dict(inference or {}))
