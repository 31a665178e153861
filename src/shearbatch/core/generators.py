"""The generators, by renderer: ``simulate`` picks the one a problem names.

- ``jax``: :func:`shearbatch.core.generate.simulate`, the analytic Fourier-space
  renderer (the same as the model's);
- ``galsim``: :func:`shearbatch.core.galsim_generator.simulate_galsim`, the same
  truths and noise with the stamps drawn by GalSim (optional dependency, imported
  when it draws).

Both take the same arguments and return a :class:`~shearbatch.core.generate.SimBatch`.
This module sits above both, so neither imports the other's dispatcher (no
import cycle: ``galsim_generator`` builds on ``generate``, never the reverse).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .galsim_generator import simulate_galsim
from .generate import SimBatch
from .generate import simulate as simulate_jax

__all__ = ["GENERATORS", "simulate"]

#: renderer name (``spec``'s ``problem.renderer``) -> its generator
GENERATORS: dict[str, Callable[..., SimBatch]] = {"jax": simulate_jax, "galsim": simulate_galsim}


def simulate(
    problem,
    seeds: Sequence[int],
    g: Sequence[tuple[float, float]],
    quarters: Sequence[int] | None = None,
    streams: Sequence[int] | None = None,
    store: Any = None,
) -> SimBatch:
    """Truth and noisy stamps for realizations with ``seeds`` and true shears ``g`` (ring
    copies: ``quarters`` of a turn of the shapes, noise ``streams``), drawn by the
    generator of ``problem.renderer``: images of shape (B, M, H, W). ``store``: the wrapper
    of a jitted generator's program (:mod:`shearbatch.core.programs`; None: the plain jit)."""
    try:
        generate = GENERATORS[problem.renderer]
    except KeyError:
        raise ValueError(
            f"unknown renderer {problem.renderer!r}; use one of {', '.join(GENERATORS)}"
        ) from None
    if store is not None and problem.renderer == "jax":  # (the one generator that is a program)
        return generate(problem, seeds, g, quarters, streams, store=store)
    return generate(problem, seeds, g, quarters, streams)
