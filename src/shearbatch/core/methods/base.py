"""The inference-method interface: what every method is and returns.

A method is a :class:`Method`, a NamedTuple of pure functions (the shape of
BlackJAX's ``SamplingAlgorithm`` and Optax's ``GradientTransformation``),
built by a factory from the plain ``inference`` settings:

- ``fit(rng_key, obs, posterior) -> Draws`` for ONE realization (pure JAX;
  :func:`shearbatch.core.batching.batched` vmaps and jits it);
- ``diagnose(draws) -> Diagnosis`` for ONE realization's draws (NumPy, after
  the batch is computed): per-draw statistics to store, a JSON-ready
  diagnostics record, and the method's own failure flags;
- ``batch_report(draws, lockstep=None) -> dict`` (optional) for a whole batch of
  draws: batch-level telemetry such as the lockstep efficiency of NUTS and MAP
  (``lockstep``: the lanes that run in one vectorised loop, i.e. the chunk width),
  logged by the engine and recorded in every realization's ``convergence.json``.

Every method returns the same :class:`Draws`: constrained samples laid out
``(chain, draw, ...)`` (MAP and VI have one chain), per-draw statistics
``(chain, draw)``, and ``info``, a method-specific record read by its own
``diagnose``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax

__all__ = ["Diagnosis", "Draws", "Method"]


class Draws(NamedTuple):
    """One realization's result (a batch of them under ``batched``).

    samples: ``{site: (chain, draw, *shape)}`` constrained draws;
    stats: ``{name: (chain, draw)}`` per-draw statistics (written as ``sample_stats``);
    mode: ``{site: shape}`` the posterior point the method centres on (the MAP for
    MAP-initialised methods), constrained;
    info: method-specific arrays for its ``diagnose`` / ``batch_report``.
    """

    samples: dict[str, jax.Array]
    stats: dict[str, jax.Array]
    mode: dict[str, jax.Array]
    info: dict[str, Any]


class Diagnosis(NamedTuple):
    """What ``diagnose`` returns for one realization.

    sample_stats: {name: (chain, draw)} NumPy arrays for ``posterior.nc``;
    diagnostics: JSON-ready record for ``convergence.json``. Threshold gates read
    its standard keys (``rhat_max``, ``ess_bulk_min``, ``ess_tail_min``,
    ``divergence_frac``, ``bfmi_min``) when present;
    flags: the method's own failure flags (:mod:`shearbatch.core.flags`).
    """

    sample_stats: Mapping[str, Any]
    diagnostics: Mapping[str, Any]
    flags: int


class Method(NamedTuple):
    name: str
    fit: Callable[[jax.Array, jax.Array, Any], Draws]
    diagnose: Callable[[Draws], Diagnosis]
    batch_report: Callable[..., dict[str, Any]] | None = None
    #: the per-realization point estimate the method stands for: "mode" (a joint mode,
    #: e.g. MAP: bias-stats then uses g_mode and notes its noise bias) or "mean"
    estimate: str = "mean"
    #: lanes per chunk inside the compiled program on CPU (``bias-run --lane-chunk
    #: auto``), measured by bench/bench_chunking.py; None: the whole batch in one vmap
    cpu_chunk: int | None = None
