"""How core's jitted programs reach a store of exported programs, core importing no layer
above it.

The generator (:func:`shearbatch.core.generate.simulate`) and the residual check
(:func:`shearbatch.core.checks.chi2_program`) are built here with :func:`program`: the
plain ``jax.jit`` program, or, when the caller hands a ``store`` down (the engine hands
:func:`shearbatch.engine.exported.exportable`, which exports the program to the store, or
loads it from there, when a store is set and runs the plain jit otherwise), the wrapped
one. The wrapper is an argument, never a global: what core builds depends only on what it
is given, not on which entry point ran first, and core never imports the engine.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["Wrapper", "program"]

#: ``wrapper(build, what, name) -> program``: ``build()`` returns the plain jitted program,
#: ``what`` names everything its trace depends on besides its inputs, ``name`` names it in
#: log lines
Wrapper = Callable[[Callable[[], Any], Mapping[str, Any], str], Any]


def program(build: Callable[[], Any], what: Mapping[str, Any], name: str,
            store: Wrapper | None = None) -> Any:  # fmt: skip
    """``build()`` (a jitted program), wrapped by ``store`` when one is given."""
    return build() if store is None else store(build, what, name)
