"""The application layer under ``bias-run`` and :func:`shearbatch.run`.

- :class:`RunOptions` (the command's options) -> :func:`plan_run` -> a frozen :class:`Plan`
  (flags merged into the config data and validated by the schema; bad input raises
  :class:`PlanError` or :class:`~shearbatch.schema.ConfigError`, one line naming the flag or
  key, before anything is computed);
- :func:`run` (manifest, claims, signals, time limit, engine), :func:`emit_sbatch` (a SLURM
  array script instead), :func:`preview` (PNGs of the stamps and fitted models),
  :func:`estimate_lines` (the dry run's disk and, with a pilot batch, time estimates);
- stage 2, ``bias-extract``: :class:`ExtractOptions` -> :func:`run_extract` ->
  :class:`ExtractOutcome` (:mod:`.extract_stage`; :func:`campaign_table`, the same table in
  memory, is :meth:`shearbatch.api.Campaign.summary`; :func:`run_verify`, the scrub of
  ``--verify``);
- stage 3, ``bias-stats``: :class:`StatsOptions` -> :func:`run_stats` ->
  :class:`StatsOutcome`, carrying the typed
  :class:`~shearbatch.analysis.result.BiasResult` (:mod:`.stats_stage`; the figures and the
  report: :mod:`.report_files`); :meth:`shearbatch.api.Campaign.stats` calls
  :func:`run_stats` with the command's options. Bad input to either raises
  :class:`StageError`, one line naming the flag.

The CLI (:mod:`shearbatch.cli`) only parses, calls this package, prints and maps exceptions
to exit codes; nothing here imports it.
"""

from .estimate import disk_estimate, estimate_lines, pilot
from .extract_stage import (
    ExtractOptions,
    ExtractOutcome,
    StageError,
    campaign_table,
    extract_slice,
    run_extract,
    run_verify,
)
from .options import (
    PlanError,
    RunOptions,
    apply_flags,
    config_with_flags,
    flag_name,
    merge_config,
    parse_sets,
)
from .plan import MAX_PLAN, Plan, check_campaign, check_out_path, check_writable, plan_run
from .preview import models_at_estimate, preview
from .runner import (
    COMMANDS_FILE,
    Outcome,
    compile_first,
    n_complete,
    prepare_plan,
    preview_only,
    record_command,
    resume_hint,
    run,
    run_claimed,
    write_manifest,
)
from .sbatch import emit_sbatch, run_args
from .signals import StopOnSignal, deadline
from .stats_stage import StatsOptions, StatsOutcome, choose_requirement, run_stats, stats_of_table

__all__ = [
    "COMMANDS_FILE",
    "MAX_PLAN",
    "ExtractOptions",
    "ExtractOutcome",
    "Outcome",
    "Plan",
    "PlanError",
    "RunOptions",
    "StageError",
    "StatsOptions",
    "StatsOutcome",
    "StopOnSignal",
    "apply_flags",
    "campaign_table",
    "check_campaign",
    "check_out_path",
    "check_writable",
    "choose_requirement",
    "compile_first",
    "config_with_flags",
    "deadline",
    "disk_estimate",
    "emit_sbatch",
    "estimate_lines",
    "extract_slice",
    "flag_name",
    "merge_config",
    "models_at_estimate",
    "n_complete",
    "parse_sets",
    "pilot",
    "plan_run",
    "prepare_plan",
    "preview",
    "preview_only",
    "record_command",
    "resume_hint",
    "run",
    "run_args",
    "run_claimed",
    "run_extract",
    "run_stats",
    "run_verify",
    "stats_of_table",
    "write_manifest",
]
