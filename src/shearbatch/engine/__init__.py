"""The batch engine: a campaign's realizations -> batches -> generate -> the compiled
inference program -> records -> the writer.

- :mod:`~shearbatch.engine.loop`: :func:`run` (``run(spec, realizations, execution) ->
  CampaignReport``), the entry point ``shearbatch.app`` calls with one :class:`Execution`
  record, the batch loop in named steps (each batch a typed :class:`Job`), the lane plan
  and the programs it compiles; :func:`run_campaign` is :func:`run` with the execution's
  fields as keywords;
- :mod:`~shearbatch.engine.records`: one realization's record, assembled on the host;
- :mod:`~shearbatch.engine.exported`: the traced programs stored as ``jax.export``
  modules, which a later process loads instead of tracing;
- :mod:`~shearbatch.engine.runtime`: the JAX compilation cache and flags an entry point
  sets once per process (through :func:`shearbatch.process.set_flags`).
"""

from .loop import (
    AUTO_MAX_LANES,
    BatchTooLarge,
    CampaignReport,
    Execution,
    Job,
    Lanes,
    Program,
    batch_inputs,
    build_program,
    compile_lanes,
    default_writers,
    generate,
    inference_program,
    lane_chunk_for,
    plan_lanes,
    run,
    run_campaign,
)

__all__ = [
    "AUTO_MAX_LANES",
    "BatchTooLarge",
    "CampaignReport",
    "Execution",
    "Job",
    "Lanes",
    "Program",
    "batch_inputs",
    "build_program",
    "compile_lanes",
    "default_writers",
    "generate",
    "inference_program",
    "lane_chunk_for",
    "plan_lanes",
    "run",
    "run_campaign",
]
