"""The inference-method interface: what every method is and returns.

A method is a :class:`Method`, a NamedTuple of pure functions (the shape of
BlackJAX's ``SamplingAlgorithm`` and Optax's ``GradientTransformation``),
built by a factory from the plain ``inference`` settings:

- ``fit(rng_key, obs, posterior) -> Draws`` for ONE realization (pure JAX;
  :func:`shearbatch.core.batching.batched` vmaps and jits it);
- ``diagnose(draws) -> Diagnosis`` for ONE realization's draws (NumPy, after
  the batch is computed): per-draw statistics to store, the gate statistics
  (:class:`~shearbatch.core.flags.Gates`), a JSON-ready record of the method's
  own, and its failure flags;
- ``batch_report(draws, lockstep=None) -> dict`` (optional) for a whole batch of
  draws: batch-level telemetry such as the lockstep efficiency of NUTS and MAP
  (``lockstep``: the lanes that run in one vectorised loop, i.e. the chunk width),
  logged by the engine and recorded in every realization's ``convergence.json``.

Every method returns the same :class:`Draws`: constrained samples laid out
``(chain, draw, ...)`` (MAP and VI have one chain), per-draw statistics
``(chain, draw)``, the ``mode`` it centres on, and ``info``, the method's own typed
record of its fit (:class:`Info`: a NamedTuple of arrays, read by its own
``diagnose`` / ``batch_report``).

A method's settings are its own pydantic model (a
:class:`shearbatch.settings.StrictModel`), registered with it
(:func:`shearbatch.core.methods.register`): the schema accepts its section
``inference.<name>_config`` and the factory reads it with :func:`section`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, Protocol, TypeVar

import jax

from ..flags import Gates

__all__ = ["POINT_ESTIMATES", "Diagnosis", "Draws", "Info", "Method", "section"]

#: what :attr:`Method.point_estimate` may be (``"population"`` is the interim model's,
#: set by the engine): see :mod:`shearbatch.core.convergence`
POINT_ESTIMATES = ("mode", "mean")


class Info(Protocol):
    """A method's per-realization record of its fit, returned in :attr:`Draws.info`: a
    NamedTuple of arrays (a JAX pytree; under ``batched`` each leaf gains a leading lane
    axis), so the engine can slice one lane out of a batch and compare two runs leaf by
    leaf (:func:`shearbatch.core.compare.agreement`). Only the method's own ``diagnose``
    and ``batch_report`` read its fields; what the writer, ``bias-extract`` and the flags
    need goes through :class:`Diagnosis` into the convergence record."""

    _fields: tuple[str, ...]

    def _asdict(self) -> dict[str, Any]: ...


S = TypeVar("S")


def section(inference: Mapping[str, Any], name: str, model: type[S]) -> S:
    """Method ``name``'s settings: the section ``inference.<name>_config`` of the plain
    ``inference`` settings, validated by its settings ``model`` (defaults when absent)."""
    return model.model_validate(dict(inference.get(f"{name}_config") or {}))  # type: ignore[attr-defined]


class Draws(NamedTuple):
    """One realization's result (a batch of them under ``batched``).

    samples: ``{site: (chain, draw, *shape)}`` constrained draws;
    stats: ``{name: (chain, draw)}`` per-draw statistics (written as ``sample_stats``);
    mode: ``{site: shape}`` the posterior point the method centres on (the MAP for
    MAP-initialised methods), constrained; written as ``convergence.json``'s ``mode``;
    info: the method's own record of its fit (:class:`Info`), for its ``diagnose`` /
    ``batch_report``.
    """

    samples: dict[str, jax.Array]
    stats: dict[str, jax.Array]
    mode: dict[str, jax.Array]
    info: Info


class Diagnosis(NamedTuple):
    """What ``diagnose`` returns for one realization.

    sample_stats: {name: (chain, draw)} NumPy arrays for ``posterior.nc``;
    diagnostics: the method's own JSON-ready record, stored at the top level of
    ``convergence.json`` (e.g. MAP's ``optimizer`` and ``laplace``);
    flags: the method's own failure flags (:mod:`shearbatch.core.flags`);
    gates: the statistics the threshold gates read (R-hat, ESS, divergences, E-BFMI;
    none for a method without chains).
    """

    sample_stats: Mapping[str, Any]
    diagnostics: Mapping[str, Any]
    flags: int
    gates: Gates = Gates()


class Method(NamedTuple):
    name: str
    fit: Callable[[jax.Array, jax.Array, Any], Draws]
    diagnose: Callable[[Draws], Diagnosis]
    batch_report: Callable[..., dict[str, Any]] | None = None
    #: which statistic stands for a realization (:data:`POINT_ESTIMATES`): "mode" (a joint
    #: mode, e.g. MAP: bias-stats then uses g_mode and notes its noise bias) or "mean"
    point_estimate: str = "mean"
    #: lanes per chunk inside the compiled program on CPU (``bias-run --lane-chunk
    #: auto``), measured by bench/bench_chunking.py; None: the whole batch in one vmap
    cpu_chunk: int | None = None
