"""The inference-method interface: what every method is, takes and returns.

A method is a :class:`Method`, a NamedTuple of pure functions (the shape of
BlackJAX's ``SamplingAlgorithm`` and Optax's ``GradientTransformation``),
built by its factory from typed settings (the shape of BlackJAX's
``as_top_level_api``): ``factory(settings, **sections) -> Method``, where
``settings`` is the method's own validated settings model (the config section
``inference.<name>_config``; no argument for a method without one) and each
keyword-only parameter named ``<other>_config`` receives that registered method's
section (NUTS and VI take ``map_config``, the settings of their Laplace start).
:class:`MethodSpec` carries these, validated once by the schema
(:func:`shearbatch.spec.run_spec` builds it); :func:`shearbatch.core.methods.get`
calls the factory.

- ``fit(rng_key, obs, posterior) -> Draws`` for ONE realization (pure JAX;
  :func:`shearbatch.core.batching.batched` vmaps and jits it);
- ``diagnose(draws) -> Diagnosis`` for ONE realization's draws (NumPy, after
  the batch is computed): per-draw statistics to store, the gate statistics
  (:class:`~shearbatch.core.failure_flags.Gates`), a JSON-ready record of the method's
  own, and its failure flags;
- ``batch_report(draws, lockstep=None) -> dict`` (optional) for a whole batch of
  draws: batch-level telemetry such as the lockstep efficiency of NUTS and MAP
  (``lockstep``: the lanes that run in one vectorised loop, i.e. the chunk width),
  logged by the engine and recorded in every realization's ``convergence.json``;
- ``fit_batch(keys, obs, posterior, chunk) -> Draws`` (optional): the whole batch at
  once, for a method whose realizations share work better than a ``vmap`` of ``fit``
  does (MAP's refilled optimiser lanes); the engine runs it when present;
- ``interim`` (optional): the method's per-galaxy variant for the interim model
  (``shear_model: interim``), a :class:`Method` whose draws are laid out
  ``(chain, draw, galaxy)``; :func:`shearbatch.core.methods.interim.as_interim` wraps it
  with the interim prior (one wrapper for every method).

Every method returns the same :class:`Draws`: constrained samples laid out
``(chain, draw, ...)`` (MAP and VI have one chain), per-draw statistics
``(chain, draw)``, the ``mode`` it centres on, and ``info``, the method's own typed
record of its fit (:class:`Info`: a NamedTuple of arrays, read by its own
``diagnose`` / ``batch_report``).

A method's settings are its own pydantic model (a
:class:`shearbatch.strict_model.StrictModel`), registered with it
(:func:`shearbatch.core.methods.register`): the schema accepts and validates its
section ``inference.<name>_config``, and the factory receives that validated model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from ..failure_flags import Gates

if TYPE_CHECKING:  # annotations only: the schema reads this module without loading JAX
    import jax

__all__ = ["POINT_ESTIMATES", "Diagnosis", "Draws", "Info", "Method", "MethodSpec"]

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


class MethodSpec(NamedTuple):
    """A run's inference method as the schema validated it (built by
    :func:`shearbatch.spec.run_spec`, read by :func:`shearbatch.core.methods.get`).

    name: the registered method; settings: its validated section
    ``inference.<name>_config`` (its settings model; None: the method has none);
    sections: ``(keyword, settings)`` of the other methods' sections its factory takes
    by keyword (e.g. ``("map_config", MapConfig(...))`` for a Laplace start);
    interim_e_sigma: ``shear_model: interim``'s prior width (the schema's
    ``inference.interim_e_sigma``), None for the joint model.
    """

    name: str
    settings: Any = None
    sections: tuple[tuple[str, Any], ...] = ()
    interim_e_sigma: float | None = None

    @property
    def shear_model(self) -> str:
        """``"interim"`` or ``"joint"``."""
        return "joint" if self.interim_e_sigma is None else "interim"


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
    flags: the method's own failure flags (:mod:`shearbatch.core.failure_flags`);
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
    #: the per-galaxy variant for the interim model (draws ``(chain, draw, galaxy)``; a
    #: statistic ``interim_log_ratio``, the draws' per-galaxy log importance ratio to the
    #: interim posterior, where they are not its exact draws), before
    #: :func:`shearbatch.core.methods.interim.as_interim` divides out the interim prior;
    #: None: the method cannot fit the interim model
    interim: Method | None = None
    #: optional batch-level fit ``fit_batch(keys, obs, posterior, chunk) -> Draws`` of a
    #: whole batch (leading realization axis B of ``keys``, ``obs`` and of the result),
    #: for a method whose realizations are better fitted jointly than as a ``vmap`` of
    #: ``fit`` (MAP: an optimiser whose lanes are refilled from the batch, so that none
    #: waits for the slowest: :mod:`.refill`). Every realization's result must be
    #: ``fit``'s for it (to rounding) and must not depend on its companions. ``chunk``:
    #: the lane chunk asked for (``bias-run --lane-chunk``; None: off). Where present,
    #: :func:`shearbatch.engine.inference_program` runs it
    #: (:func:`shearbatch.core.batching.batched_fit`) instead of ``batched(fit)``
    fit_batch: Callable[..., Draws] | None = None
