"""The batch engine: a campaign's realizations -> batches -> generate -> the compiled
inference program -> records -> the writer.

- :mod:`~shearbatch.engine.loop`: :func:`run_campaign`, the batch loop (the entry point
  ``shearbatch.app`` runs), the lane plan and the programs it compiles;
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
    run_campaign,
)

__all__ = [
    "AUTO_MAX_LANES",
    "BatchTooLarge",
    "CampaignReport",
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
    "run_campaign",
]
