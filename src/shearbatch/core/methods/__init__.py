"""Inference methods and their registry.

A method is one module and one :func:`register` call. The module defines

- optionally its settings model, a :class:`shearbatch.strict_model.StrictModel` of the
  config section ``inference.<name>_config`` (the schema validates that section with it);
- a factory ``factory(settings, **sections) -> Method`` (:class:`~.base.Method`), in
  the style of BlackJAX's ``as_top_level_api``: ``settings`` is the validated section
  (its settings model; a method without one takes no positional argument) and every
  keyword-only parameter named ``<other>_config`` receives that registered method's
  section (NUTS and VI: ``map_config``, the settings of their Laplace start). The
  factory never reads ``shear_model``: a method that can fit the interim model gives its
  per-galaxy variant (:attr:`~.base.Method.interim`) and :func:`get` wraps it
  (:func:`~.interim.as_interim`).

``REGISTRY`` maps a method name to its :class:`Entry`. The schema's allowed
``inference.method`` values and its ``inference.<name>_config`` sections, the CLI's
``--method`` choices, the generated config reference and the engine all read this
registry. A registered module is imported only when the method (or the schema) needs
it. :func:`get` builds a method from its :class:`~.base.MethodSpec`
(:attr:`shearbatch.spec.RunSpec.inference`).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any, NamedTuple

from .base import Diagnosis, Draws, Info, Method, MethodSpec

__all__ = [
    "DEFAULT",
    "INTERIM",
    "REGISTRY",
    "Diagnosis",
    "Draws",
    "Entry",
    "Info",
    "Method",
    "MethodSpec",
    "get",
    "names",
    "register",
    "sections_of",
    "settings_model",
    "settings_models",
    "supports_interim",
]

#: the method of a config that names none
DEFAULT = "map"

#: ``factory(settings, **sections) -> Method`` (no ``settings`` for a method without a
#: settings model)
Factory = Callable[..., Method]


class Entry(NamedTuple):
    """A registered method: its factory and its settings model (the pydantic model of
    ``inference.<name>_config``; None: the method has no settings section), each either
    the object or ``"module:attribute"``, imported on first use."""

    factory: Factory | str
    settings: type | str | None = None
    #: whether the method fits the interim model (``shear_model: interim``): its
    #: :class:`Method` carries ``interim``, the per-galaxy variant :mod:`.interim` wraps
    interim: bool = False


#: name -> :class:`Entry`
REGISTRY: dict[str, Entry] = {
    "map": Entry(
        "shearbatch.core.methods.map:method", "shearbatch.core.methods.map:MapConfig", True
    ),
    "vi": Entry("shearbatch.core.methods.vi:method", "shearbatch.core.methods.vi:ViConfig"),
    "nuts": Entry(
        "shearbatch.core.methods.nuts:method", "shearbatch.core.methods.nuts:NutsConfig", True
    ),
}


#: the built-in methods that fit the interim model (``inference.shear_model: interim``):
#: their draws carry per-galaxy population weights (``interim_log_weight``): MAP + Laplace
#: draws with importance ratios, or NUTS with every galaxy its own sampler (exact draws).
#: A plug-in declares it with ``register(..., interim=True)`` (:func:`supports_interim`)
INTERIM = tuple(name for name, entry in REGISTRY.items() if entry.interim)


def supports_interim(name: str) -> bool:
    """Whether method ``name`` is registered as fitting the interim model."""
    entry = REGISTRY.get(name.lower())
    return isinstance(entry, Entry) and entry.interim


def register(
    name: str, factory: Factory | str, settings: type | str | None = None, *, interim: bool = False
) -> None:
    """Add (or replace) a method: ``factory(settings, **sections) -> Method``, with its
    settings model ``settings`` (the config section ``inference.<name>_config``; None:
    none, and the factory takes no positional argument); ``interim``: it fits the interim
    model too (its :class:`Method` carries ``interim``, wrapped by :mod:`.interim`)."""
    REGISTRY[name.lower()] = Entry(factory, settings, interim)


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


def sections_of(name: str) -> tuple[str, ...]:
    """The other methods' sections method ``name``'s factory takes: its keyword-only
    parameters named ``<registered method>_config`` (e.g. ``map_config``)."""
    params = inspect.signature(_load(_entry(name).factory)).parameters.values()
    known = {f"{n}_config" for n in names()}
    return tuple(p.name for p in params if p.kind is p.KEYWORD_ONLY and p.name in known)


def get(spec: MethodSpec) -> Method:
    """The method of ``spec``: its factory called with its validated settings and
    sections, wrapped for the interim model where ``spec`` asks for it."""
    factory = _load(_entry(spec.name).factory)
    args = () if spec.settings is None else (spec.settings,)
    method = factory(*args, **dict(spec.sections))
    if spec.interim_e_sigma is None:
        return method
    from .interim import as_interim

    return as_interim(method, spec.interim_e_sigma)
