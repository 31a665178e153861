"""Process-wide JAX configuration, set once by an entry point (never at import).

:func:`configure` applies x64 and the persistent compilation cache (and points
:mod:`shearbatch.engine.exported`'s store of traced programs into it), and
registers ONE cache-event listener per process; calling it again only changes
what differs, so ``--preview`` followed by the run (or several in-process CLI
calls in tests) neither double-counts cache hits nor leaks a listener.
:func:`scoped` restores the previous flags afterwards (the in-process CLI uses
it so that a test calling ``bias-run --no-x64`` does not change later tests). The flags
themselves, their names and their one setter are :mod:`shearbatch.jax_setup`'s
(:func:`~shearbatch.jax_setup.configure_flags`, :func:`~shearbatch.jax_setup.set_flags`), as
is where the cache lives (:func:`~shearbatch.jax_setup.default_cache_dir`, kept here under
its old name).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..jax_setup import (
    CACHE_SUBDIR,
    backend_line,
    configure_flags,
    default_cache_dir,
    flag_values,
    set_flags,
)

__all__ = [
    "CACHE_EVENTS",
    "CACHE_SUBDIR",
    "compile_lock",
    "configure",
    "default_cache_dir",
    "reset_cache_events",
    "scoped",
]

logger = logging.getLogger(__name__)

#: persistent compilation cache events since the last :func:`reset_cache_events`
CACHE_EVENTS = {"hits": 0, "misses": 0}
_LISTENER: list[Any] = []


@contextlib.contextmanager
def compile_lock(cache_dir: str) -> Iterator[float]:
    """Hold an exclusive lock on ``<cache_dir>/.compile.lock`` (``fcntl.flock``; yields the
    seconds spent waiting for it).

    Array tasks that start together take turns to compile: the first compiles and
    writes the cache, the others wait and then only read it, so a campaign compiles
    once and no task reads an entry another is still writing (JAX writes entries in
    place, not atomically). The kernel drops the lock when its holder dies. A no-op
    when the cache is off or on a filesystem without ``flock``.
    """
    import time

    if cache_dir == "off":
        yield 0.0
        return
    import fcntl

    Path(cache_dir).mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with open(Path(cache_dir) / ".compile.lock", "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX)
        except OSError as err:  # e.g. a filesystem that does not support locks
            logger.warning("compilation cache lock unavailable (%s): tasks may compile "
                           "concurrently", err)  # fmt: skip
            yield 0.0
            return
        try:
            yield time.perf_counter() - t0
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _listener(event: str, **_: Any) -> None:
    if event.endswith("/compilation_cache/cache_hits"):
        CACHE_EVENTS["hits"] += 1
    elif event.endswith("/compilation_cache/cache_misses"):
        CACHE_EVENTS["misses"] += 1


def reset_cache_events() -> None:
    CACHE_EVENTS.update(hits=0, misses=0)


def configure(x64: bool, cache_dir: str | None = None) -> str:
    """Set x64 and the compilation cache (``off`` / ``none`` / ``0`` / empty disables it);
    returns the cache directory in use (or ``"off"``). Safe to call repeatedly."""
    from jax import monitoring

    cache = cache_dir if cache_dir is not None else default_cache_dir()
    if cache.lower() in ("", "0", "off", "none"):
        cache = "off"
    configure_flags(x64, None if cache == "off" else cache)
    from . import exported

    # the traced programs beside the compiled ones (shearbatch.engine.exported): a later process
    # of the campaign loads them instead of tracing
    exported.use(None if cache == "off" else Path(cache) / exported.SUBDIR)
    if not _LISTENER:
        monitoring.register_event_listener(_listener)
        _LISTENER.append(_listener)
    logger.info("%s", backend_line(x64, cache))
    return cache


@contextlib.contextmanager
def scoped() -> Iterator[None]:
    """Restore x64, the cache settings and the exported programs' store on exit."""
    from . import exported

    saved = flag_values()
    store = exported.stored_in()
    try:
        yield
    finally:
        set_flags(saved)
        exported.use(store)
