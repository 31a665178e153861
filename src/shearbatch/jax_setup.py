"""Process-wide JAX flags and the environment of worker processes, below every layer that
starts a process: the one setter of JAX flags (:func:`set_flags`), called by an entry
point's set-up (:func:`shearbatch.engine.runtime.configure` and its undoing,
:func:`shearbatch.engine.runtime.scoped`) and by a worker's initializer
(:func:`cpu_only_worker`: bias-run's writer processes, bias-extract's readers), never at
import. :mod:`shearbatch.io` and :mod:`shearbatch.analysis` start such workers and import
this module, not the engine. Where a campaign's persistent compilation cache lives
(:func:`default_cache_dir`) and the line an entry point logs once JAX is set up
(:func:`backend_line`) are here too, so that ``bias-stats``' report stamps, which render
with JAX but never run the engine, set JAX up without importing it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "CACHE_SUBDIR",
    "ENTRY_FLAGS",
    "TRACE_FLAGS",
    "WORKER_ENV",
    "backend_line",
    "configure_flags",
    "cpu_only_worker",
    "default_cache_dir",
    "flag_values",
    "scoped_environ",
    "set_flags",
]

#: the JAX flags an entry point sets (:func:`configure_flags`): the precision and the
#: persistent compilation cache
ENTRY_FLAGS = (
    "jax_enable_x64",
    "jax_compilation_cache_dir",
    "jax_persistent_cache_min_compile_time_secs",
    "jax_persistent_cache_min_entry_size_bytes",
)
#: the JAX flags a traced program depends on: one traced under other values is another
#: program (:mod:`shearbatch.engine.exported` keys its stored programs by their values)
TRACE_FLAGS = (
    "jax_enable_x64",
    "jax_default_matmul_precision",
    "jax_numpy_rank_promotion",
    "jax_numpy_dtype_promotion",
    "jax_threefry_partitionable",
    "jax_default_prng_impl",
    "jax_enable_checks",
    "jax_debug_nans",
    "jax_disable_jit",
)


#: the compilation cache's directory name under a campaign's output root (hidden, so
#: ``bias-extract`` never takes it for a realization directory)
CACHE_SUBDIR = ".jax-cache"


def default_cache_dir(output_root: str | Path | None = None) -> str:
    """``$SHEARBATCH_CACHE_DIR``, else ``<output_root>/.jax-cache`` (every array task of a
    campaign shares it, on whatever filesystem the outputs live), else
    ``$XDG_CACHE_HOME/shearbatch/jax`` (~/.cache) when no output root is given."""
    if env := os.environ.get("SHEARBATCH_CACHE_DIR"):
        return env
    if output_root is not None:
        return str(Path(output_root) / CACHE_SUBDIR)
    return str(
        Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "shearbatch" / "jax"
    )


def set_flags(values: dict[str, Any]) -> None:
    """The one place that sets JAX flags (``jax.config.update``): those of ``values`` whose
    current value differs. Called by :func:`configure_flags` (an entry point's set-up,
    :func:`shearbatch.engine.runtime.configure`), with :func:`flag_values`' record by its
    undoing (:func:`shearbatch.engine.runtime.scoped`), and by :func:`cpu_only_worker`;
    never at import."""
    import jax

    for key, value in values.items():
        if getattr(jax.config, key, None) != value:
            jax.config.update(key, value)


def configure_flags(x64: bool, cache_dir: str | None) -> None:
    """An entry point's JAX flags: x64, and the persistent compilation cache in
    ``cache_dir`` with every program cached (None: the cache flags left as they are)."""
    values: dict[str, Any] = {"jax_enable_x64": bool(x64)}
    if cache_dir is not None:
        values.update({"jax_compilation_cache_dir": cache_dir,
                       "jax_persistent_cache_min_compile_time_secs": 0.0,
                       "jax_persistent_cache_min_entry_size_bytes": 0})  # fmt: skip
    set_flags(values)


def flag_values(names: tuple[str, ...] = ENTRY_FLAGS) -> dict[str, Any]:
    """The current values of the JAX flags ``names`` (None for one this JAX lacks)."""
    import jax

    return {name: getattr(jax.config, name, None) for name in names}


def backend_line(x64: bool, cache: str) -> str:
    """The line an entry point logs once it has set JAX up: version, platform and devices,
    precision and the compilation cache in use (``cache``: its directory, or ``"off"``).
    Starts JAX's backend (:func:`jax.devices`)."""
    import jax

    devs = jax.devices()
    return (f"JAX {jax.__version__} on {devs[0].platform.upper()} x{len(devs)} "
            f"({devs[0].device_kind}), x64={x64}, compilation cache: {cache}")  # fmt: skip


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
