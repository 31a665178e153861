"""Process-wide JAX flags and the environment of worker processes, below every layer that
starts a process: the one setter of JAX flags (:func:`set_flags`), called by an entry
point's set-up (:func:`shearbatch.engine.runtime.configure` and its undoing,
:func:`shearbatch.engine.runtime.scoped`) and by a worker's initializer
(:func:`cpu_only_worker`: bias-run's writer processes, bias-extract's readers), never at
import. :mod:`shearbatch.io` and :mod:`shearbatch.analysis` start such workers and import
this module, not the engine.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

__all__ = ["WORKER_ENV", "cpu_only_worker", "scoped_environ", "set_flags"]


def set_flags(values: dict[str, Any]) -> None:
    """The one place that sets JAX flags (``jax.config.update``): those of ``values`` whose
    current value differs. Called by :func:`shearbatch.engine.runtime.configure`,
    :func:`cpu_only_worker` and :func:`shearbatch.engine.runtime.scoped` (the entry points'
    set-up and its undoing), never at import."""
    import jax

    for key, value in values.items():
        if getattr(jax.config, key, None) != value:
            jax.config.update(key, value)


#: the environment of worker processes that need no device (bias-run's writers,
#: bias-extract's readers): whatever the node, one that imported JAX would start its CPU
#: backend only (on a GPU node each process that starts the GPU backend takes 75% of the
#: GPU's memory and the pool dies), and take no memory up front
WORKER_ENV = {"JAX_PLATFORMS": "cpu", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}


def cpu_only_worker() -> None:
    """A worker process's initializer: :data:`WORKER_ENV`, and the platform flag of a JAX
    already imported (spawn re-imports the parent's ``__main__`` first, which may import
    JAX; an import starts no backend)."""
    import sys

    os.environ.update(WORKER_ENV)
    if sys.modules.get("jax") is not None:
        set_flags({"jax_platforms": WORKER_ENV["JAX_PLATFORMS"]})


@contextlib.contextmanager
def scoped_environ(env: dict[str, str]) -> Iterator[None]:
    """``os.environ`` updated with ``env`` inside (a process started there inherits it)."""
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
