"""A ``bias-run``'s plan: :func:`plan_run` checks every input and returns a frozen :class:`Plan`.

Nothing is computed or written while planning: bad input raises :class:`PlanError` (or the
schema's :class:`~shearbatch.schema.ConfigError`) with one line naming the flag or key. That
includes another campaign in the output root: its ``campaign.json`` (or, before the first
task has run, the ``config.yaml`` frozen by ``--emit-sbatch``) must agree on every
campaign-defining setting (:mod:`shearbatch.io.manifest`) unless ``--overwrite``.
Without ``--config``, a campaign root's frozen ``config.yaml`` is the config
(``bias-run --output-dir <root>`` resumes it).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from .options import PlanError, RunOptions, merge_config

if TYPE_CHECKING:  # the schema and the spec load with the plan (plan_run imports them)
    from ..campaign import Realization
    from ..schema import Config
    from ..spec import RunSpec

__all__ = ["MAX_PLAN", "Plan", "check_campaign", "check_out_path", "check_writable",
           "frozen_path", "load_config_data", "plan_identity", "plan_run"]  # fmt: skip

logger = logging.getLogger("shearbatch")

#: the most realizations one campaign (one output root, one campaign.json) may plan
MAX_PLAN = 1_000_000


@dataclasses.dataclass(frozen=True)
class Plan:
    """What one ``bias-run`` process (one array task) is to do; built by :func:`plan_run`."""

    #: the validated config, flags applied
    cfg: Config
    #: the hashable run spec of ``cfg`` (:func:`shearbatch.spec.run_spec`)
    spec: RunSpec
    #: every realization of the campaign, in plan order (all array tasks)
    realizations: tuple[Realization, ...]
    #: this array task's contiguous slice of ``realizations``
    mine: tuple[Realization, ...]
    #: the part of ``mine`` to compute (not complete, or everything with ``overwrite``)
    todo: tuple[Realization, ...]
    #: run id -> :func:`shearbatch.io.realization_status` of each of ``mine`` when planned
    status: Mapping[str, str]
    #: lanes of the compiled program: the campaign's, never this task's share
    batch_size: int
    #: ``auto``, ``off`` or a number of lanes (``--lane-chunk``)
    lane_chunk: str
    #: the campaign root
    output_dir: Path
    #: (array task id, array task count)
    task: tuple[int, int]
    #: the campaign-defining settings a complete realization must have been computed with
    expect: Mapping[str, Any]
    #: the design written to campaign.json (campaign-defining: :data:`~shearbatch.io.manifest.PLAN_DEFINING`)
    plan_info: Mapping[str, Any]
    #: the options this plan was made from
    options: RunOptions
    #: the config data the schema validated (file, ``--set``, flags): frozen as config.yaml
    config_data: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    #: the keys set by ``--set`` and flags, as recorded in campaign.json (``overrides``)
    overrides: tuple[Mapping[str, Any], ...] = ()

    @property
    def auto_batch(self) -> bool:
        """``--batch-size auto``: the engine picks the lanes from the memory budget
        (``batch_size`` is then the config's, used where no device is at hand)."""
        return self.options.overrides.batch_size == "auto"

    @property
    def config_name(self) -> str:
        """The config as the user named it (its path, or ``<mapping>``; the campaign's
        frozen config.yaml when none was named)."""
        c = self.options.overrides.config
        if c is None:
            return str(frozen_path(self.options))
        return "<mapping>" if isinstance(c, Mapping) else str(c)


def check_out_path(flag: str, path: Path, *, is_dir: bool = True, write: bool = True) -> None:
    """One line (:class:`PlanError`) when ``path`` cannot be created/written: a file where a
    directory must be (the path itself or an ancestor), or a first existing ancestor not
    writable."""
    if path.exists():
        if is_dir and not path.is_dir():
            raise PlanError(f"{flag}: {path} exists and is not a directory")
        if not is_dir and path.is_dir():
            raise PlanError(f"{flag}: {path} is a directory")
    anc = path if path.exists() and is_dir else path.parent
    while not anc.exists() and anc != anc.parent:
        anc = anc.parent
    if not anc.is_dir():
        raise PlanError(f"{flag}: {anc} is not a directory")
    if write and not os.access(anc, os.W_OK | os.X_OK):
        raise PlanError(f"{flag}: {anc} is not writable")


def check_writable(output_dir: Path) -> None:
    """Create the output root and a probe file in it, before anything is computed
    (:func:`shearbatch.io.atomic.probe`: nothing is left behind, even by a kill)."""
    from ..io import atomic

    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        atomic.probe(output_dir)
    except OSError as err:
        raise PlanError(f"--output-dir: cannot write to {output_dir}: {err.strerror}") from None


def frozen_path(kw: RunOptions) -> Path | None:
    """``<--output-dir>/config.yaml`` when ``--output-dir`` is given and it exists."""
    from ..io.manifest import FROZEN_CONFIG

    if kw.overrides.output_dir is None:
        return None
    path = Path(kw.overrides.output_dir) / FROZEN_CONFIG
    return path if path.is_file() else None


def load_config_data(kw: RunOptions) -> tuple[Config, dict[str, Any], list[dict[str, Any]]]:
    """``(config, data, overrides)``: the config (a YAML path, a mapping, or without one
    the frozen ``config.yaml`` of ``--output-dir``) with ``kw``'s ``--set`` items and flags
    merged in, validated (:func:`~shearbatch.app.options.merge_config`)."""
    from ..schema import ConfigError, read_config_data

    config = kw.overrides.config
    if config is None:
        config = frozen_path(kw)
        if config is None:
            raise PlanError("Missing option '--config' / '--shine-config' (or an --output-dir "
                            "holding a campaign's config.yaml).")  # fmt: skip
    data = config if isinstance(config, Mapping) else read_config_data(config)
    if not isinstance(data, Mapping):
        raise ConfigError("config: top level must be a mapping")
    return merge_config(data, kw)


def load_with_flags(kw: RunOptions) -> Config:
    """The config (a YAML path or a mapping) with ``kw``'s flags merged in, validated."""
    return load_config_data(kw)[0]


def plan_identity(
    camp: Any, *, single: Any = None, fft_size: Any = None, alias_band: Any = None
) -> dict[str, Any]:
    """What campaign.json's ``plan`` records of a campaign section ``camp``: the design,
    grids, seeds (``single``: the one realization of ``--g1-true``), ``fft_size`` and
    ``alias_band`` (the renderer's)."""
    grid = single is None and not camp.shear_from_prior
    info = {
        "design": "single" if single is not None else "prior" if camp.shear_from_prior
        else "grid",
        "shear_grid": list(camp.shear_grid) if grid else None,
        "shear_grid_g2": list(camp.shear_grid_g2) if grid and camp.shear_grid_g2 else None,
        "g2": camp.g2,
        "n_realizations": 1 if single is not None else camp.n_realizations,
        "base_seed": single.seed if single is not None else camp.base_seed,
        "paired": camp.paired and single is None,
        "rotations": camp.rotations if grid else 1,
        "rotation_noise": camp.rotation_noise,
    }  # fmt: skip
    if fft_size is not None:
        info["fft_size"] = fft_size
    if alias_band is not None:
        info["alias_band"] = alias_band
    return info


def check_campaign(output_dir: Path, expect: Mapping[str, Any], plan_info: Mapping[str, Any],
                   config: Mapping[str, Any]) -> None:  # fmt: skip
    """:class:`PlanError` (one line naming the setting) when ``output_dir`` holds another
    campaign: its campaign.json, or without one its frozen config.yaml (written by
    ``--emit-sbatch`` before any task ran), differs in a campaign-defining setting."""
    from ..io import manifest as mf
    from ..schema import ConfigError, config_hash, parse_config

    try:
        if mf.check_manifest(output_dir, expect, plan_info, config) is not None:
            return
        frozen = mf.read_frozen_config(output_dir)
        if frozen is None:
            return
        where = output_dir / mf.FROZEN_CONFIG
        try:
            fcfg = parse_config(frozen)
        except ConfigError as err:
            raise PlanError(f"--output-dir: {where} is not a valid config ({err}); "
                            "--overwrite replaces it") from None  # fmt: skip
        found = {**plan_identity(fcfg.campaign), **mf.defining(
            config_hash(fcfg), fcfg.inference.method, fcfg.inference.precision)}  # fmt: skip
        found.pop("n_realizations")
        run = {**{k: v for k, v in plan_info.items() if k in mf.PLAN_DEFINING}, **expect}
        mf.check_identity(found, run, where, found_config=fcfg.model_dump(mode="json"),
                          config=config)  # fmt: skip
    except ValueError as err:  # ManifestMismatch, an unreadable manifest or frozen config
        raise PlanError(str(err)) from None


def _check_flags(kw: RunOptions) -> tuple[str, tuple[int, int]]:
    """Checks of flags that no config key holds; returns (lane chunk, (task id, count))."""
    from .. import campaign as cp
    from ..slurm import ArrayError, parse_indices

    lane_chunk = str(kw.execution.lane_chunk).strip().lower()
    if lane_chunk not in ("auto", "off") and not (lane_chunk.isdigit() and int(lane_chunk) >= 1):
        raise PlanError(
            f"--lane-chunk: auto, off or a number of lanes >= 1, got {kw.execution.lane_chunk!r}"
        )
    if isinstance(kw.overrides.batch_size, str) and kw.overrides.batch_size != "auto":
        raise PlanError(f"--batch-size: auto or a number of realizations >= 1, got "
                        f"{kw.overrides.batch_size!r}")  # fmt: skip
    if kw.execution.memory_budget is not None:
        from ..core.memory import parse_bytes

        try:
            parse_bytes(kw.execution.memory_budget)
        except ValueError as err:
            raise PlanError(f"--memory-budget: {err}") from None
    if kw.overrides.seed is not None and kw.overrides.seed < 0:
        raise PlanError(f"--seed: must be >= 0, got {kw.overrides.seed}")
    if kw.overrides.shear_grid and kw.overrides.g1_true is not None:
        raise PlanError("--g1-true and --shear-grid are exclusive (single realization vs campaign)")
    if kw.overrides.shear_grid_g2 and kw.overrides.g2_true is not None:
        raise PlanError("--g2-true and --shear-grid-g2 are exclusive (constant g2 vs a g2 grid)")
    if kw.overrides.shear_grid_g2 and kw.overrides.g1_true is not None:
        raise PlanError("--g1-true and --shear-grid-g2 are exclusive (single realization vs "
                        "campaign)")  # fmt: skip
    if kw.overrides.shear_from_prior and (kw.overrides.shear_grid or kw.overrides.shear_grid_g2):
        raise PlanError("--shear-from-prior and --shear-grid(-g2) are exclusive")
    if kw.overrides.g1_true is not None and not abs(kw.overrides.g1_true) < 1:
        raise PlanError(f"--g1-true: |g| must be < 1, got {kw.overrides.g1_true}")
    task_id, task_count = kw.execution.array_task_id, kw.execution.array_task_count
    if (task_id is None) != (task_count is None):
        raise PlanError("--array-task-id and --array-task-count go together")
    indices = None
    if kw.execution.array_indices is not None:
        if task_id is not None:
            raise PlanError("--array-indices and --array-task-id are exclusive")
        try:
            indices = parse_indices(kw.execution.array_indices)
        except ArrayError as err:
            raise PlanError(f"--array-indices: {err}") from None
        if "SLURM_ARRAY_TASK_ID" not in os.environ:
            raise PlanError("--array-indices: SLURM_ARRAY_TASK_ID is not set (not an array task)")
    if task_id is None:
        try:
            task_id, task_count = cp.array_task_from_env(indices)
        except ArrayError as err:
            raise PlanError(str(err)) from None
    if task_count < 1:
        raise PlanError(f"--array-task-count: must be >= 1, got {task_count}")
    if not 0 <= task_id < task_count:
        raise PlanError(f"--array-task-id: {task_id} outside [0, {task_count})")
    return lane_chunk, (task_id, task_count)


def plan_run(kw: RunOptions) -> Plan:
    """Validate everything and build this task's plan; raises :class:`PlanError` /
    :class:`~shearbatch.schema.ConfigError` (one line) on bad input."""
    from .. import campaign as cp
    from ..io import manifest as mf
    from ..io import realization_status
    from ..spec import run_spec

    lane_chunk, (task_id, task_count) = _check_flags(kw)
    cfg, data, over = load_config_data(kw)
    camp = cfg.campaign
    output_dir = Path(camp.output_dir)
    check_out_path("--output-dir", output_dir, write=False)  # writes: check_writable
    n_plan = (1 if camp.shear_from_prior else len(camp.shear_grid or [])) * camp.n_realizations
    n_plan *= len(camp.shear_grid_g2 or [0])
    if camp.paired:
        n_plan *= 2
    if kw.overrides.g1_true is None and n_plan > MAX_PLAN:
        raise PlanError(f"--n-realizations: the plan would hold {n_plan:,} realizations, more "
                        f"than the {MAX_PLAN:,} one output root may hold; split the campaign "
                        "over several --output-dir / --base-seed ranges")  # fmt: skip
    spec = run_spec(cfg)
    expect = mf.defining(spec.config_hash, spec.method, spec.precision)
    if kw.overrides.g1_true is not None:
        seed = kw.overrides.seed if kw.overrides.seed is not None else camp.base_seed
        try:
            plan = cp.plan_single(kw.overrides.g1_true, camp.g2, seed, kw.overrides.run_id)
        except ValueError as err:
            raise PlanError(f"--g1-true/--g2-true: {err}") from None
        if plan[0].run_id in ("", ".", "..") or "/" in plan[0].run_id:
            raise PlanError(f"--run-id: not a valid directory name: {plan[0].run_id!r}")
    elif camp.shear_from_prior:
        from ..core.priors import draw_shear_from_prior

        plan = cp.plan_from_prior(
            lambda seed: draw_shear_from_prior(spec.model.shear, seed),
            n_realizations=camp.n_realizations,
            base_seed=camp.base_seed,
        )
    else:
        if kw.overrides.run_id is not None or kw.overrides.seed is not None:
            raise PlanError("--run-id/--seed are for a single realization (with --g1-true)")
        if not camp.shear_grid:
            raise PlanError(
                "no shear given: use --g1-true (single) or --shear-grid "
                "(or campaign.shear_grid in the config)"
            )
        try:
            plan = cp.plan_campaign(
                camp.shear_grid,
                g2=camp.g2,
                n_realizations=camp.n_realizations,
                base_seed=camp.base_seed,
                paired=camp.paired,
                shear_grid_g2=camp.shear_grid_g2,
                rotations=camp.rotations,
                rotation_noise=camp.rotation_noise,
            )
        except ValueError as err:
            raise PlanError(f"--shear-grid/--shear-grid-g2/--g2-true: {err}") from None
    fft = {"model": spec.model.image.fft_size, "truth": spec.truth.image.fft_size}
    band = {"model": spec.model.image.alias_band, "truth": spec.truth.image.alias_band}
    plan_info = plan_identity(camp, single=plan[0] if kw.overrides.g1_true is not None else None,
                              fft_size=fft, alias_band=band)  # fmt: skip
    if not kw.execution.overwrite:  # another campaign in the output root: refuse before anything
        check_campaign(output_dir, expect, plan_info, cfg.model_dump(mode="json"))
    if plan_info["design"] == "grid" and camp.shear_grid_g2 is None:
        logger.info("g2 is constant (%g): m2 will be undefined; --shear-grid-g2 (or "
                    "campaign.shear_grid_g2) varies it too", camp.g2)  # fmt: skip
    mine = cp.array_slice(plan, task_id, task_count)
    # lanes of the compiled program: the campaign's, never this task's share or what is
    # left to do, so every array task (whatever its slice size), a resumed run and a
    # single-process run share one compiled program and give bit-identical results
    batch_size = max(1, min(camp.batch_size, len(plan)))
    # a complete realization whose files are damaged or disagree with the plan is corrupt
    status = {r.run_id: realization_status(output_dir, r.run_id, expect, r._asdict())
              for r in mine}  # fmt: skip
    if other := [k for k, v in status.items() if v == "other"]:
        logger.warning("%d complete realization(s) under %s were computed with other "
                       "campaign-defining settings (e.g. %s); they are redone", len(other),
                       output_dir, other[0])  # fmt: skip
    if bad := [k for k, v in status.items() if v in ("corrupt", "incomplete")]:
        from ..io import inspect_planned

        planned = next(r for r in mine if r.run_id == bad[0])._asdict()
        why = inspect_planned(output_dir, bad[0], planned).reason
        kinds = sorted({status[k] for k in bad})
        logger.warning("%d %s realization(s) under %s (e.g. %s: %s); they are redone",
                       len(bad), " or ".join(kinds), output_dir, bad[0], why)  # fmt: skip
    todo = [r for r in mine if kw.execution.overwrite or status[r.run_id] != "done"]
    return Plan(
        cfg=cfg,
        spec=spec,
        realizations=tuple(plan),
        mine=tuple(mine),
        todo=tuple(todo),
        status=MappingProxyType(status),
        batch_size=batch_size,
        lane_chunk=lane_chunk,
        output_dir=output_dir,
        task=(task_id, task_count),
        expect=expect,
        plan_info=plan_info,
        options=kw,
        config_data=data,
        overrides=tuple(over),
    )
