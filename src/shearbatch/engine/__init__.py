"""The batch engine: a campaign's realizations -> batches -> generate -> the compiled
inference program -> records -> the writer.

Its face is two calls and their types: :func:`prepare` (``prepare(spec, todo, execution)
-> Prepared``: the devices, the inference program, the one lane decision and the
batches) and :func:`run` (``run(prepared) -> CampaignReport``: the batch loop), with the
:class:`Execution` record the application layer hands it and :class:`BatchTooLarge`
(not even the smallest batch fits the memory budget). The rest is the engine's own:

- :mod:`~shearbatch.engine.loop`: the batch loop in named steps (each batch a typed
  ``Job``), the lane plan and the programs it compiles;
- :mod:`~shearbatch.engine.records`: one realization's record, assembled on the host;
- :mod:`~shearbatch.engine.health`: the check of a batch a healthy program never gives;
- :mod:`~shearbatch.engine.exported`: the traced programs stored as ``jax.export``
  modules, which a later process loads instead of tracing (handed down to core's
  generator and residual check as their ``store``);
- :mod:`~shearbatch.engine.runtime`: the JAX compilation cache and flags an entry point
  sets once per process (through :func:`shearbatch.jax_setup.set_flags`).
"""

from .loop import BatchTooLarge, CampaignReport, Execution, Prepared, prepare, run

__all__ = ["BatchTooLarge", "CampaignReport", "Execution", "Prepared", "prepare", "run"]

# the submodules the import above bound here are reached by their full names
# (``shearbatch.engine.loop``), not as names of the engine's face
del health, loop, records  # noqa: F821
