"""How core's jitted programs reach a store of exported programs, core importing no layer
above it.

The generator (:func:`shearbatch.core.generate.simulate`) and the residual check
(:func:`shearbatch.core.checks.chi2_program`) are built here with :func:`program`: the
plain ``jax.jit`` program, or, once an entry point has installed a wrapper
(:func:`install`: :func:`shearbatch.engine.exported.use` installs the engine's
``exportable``, which exports the program to the store, or loads it from there, when a
store is set and runs the plain jit otherwise), the wrapped one. The engine hands its
wrapper down at run time, so core never imports the engine (no import cycle between the
folders). Nothing is installed at import.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["Wrapper", "install", "installed", "program"]

#: ``wrapper(build, what, name) -> program``: ``build()`` returns the plain jitted program,
#: ``what`` names everything its trace depends on besides its inputs, ``name`` names it in
#: log lines
Wrapper = Callable[[Callable[[], Any], Mapping[str, Any], str], Any]

_INSTALLED: list[Wrapper | None] = [None]


def install(wrapper: Wrapper | None) -> None:
    """Build core's programs with ``wrapper`` from now on (None: the plain jit)."""
    _INSTALLED[0] = wrapper


def installed() -> Wrapper | None:
    """The wrapper :func:`install` set, or None."""
    return _INSTALLED[0]


def program(build: Callable[[], Any], what: Mapping[str, Any], name: str) -> Any:
    """``build()`` (a jitted program), wrapped by the installed wrapper when there is one."""
    wrap = _INSTALLED[0]
    return build() if wrap is None else wrap(build, what, name)
