"""Stage 2 in the application layer: :class:`ExtractOptions` -> :func:`run_extract` ->
:class:`ExtractOutcome` (``bias-extract``), and the campaign's table in memory
(:func:`campaign_table`, what :meth:`shearbatch.api.Campaign.summary` returns).

Both go through :func:`campaign_rows`: one row per realization directory under the root
(NUTS gates re-evaluated at the thresholds) plus one ``incomplete`` row per planned
realization not started, each marked ``in_plan``
(:func:`~shearbatch.analysis.progress.campaign_progress`).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, NamedTuple

from ..io.layout import SUMMARY, population_path

__all__ = [
    "ExtractOptions",
    "ExtractOutcome",
    "StageError",
    "campaign_rows",
    "campaign_table",
    "extract_slice",
    "extract_to",
    "run_extract",
    "run_verify",
]

#: ``bias-extract --verify``'s exit status when it finds damage (as bias-stats' FAIL: the
#: check ran, and what it checks does not hold)
EXIT_DAMAGED = 1


class StageError(ValueError):
    """Bad input to ``bias-extract`` or ``bias-stats``: ``str(err)`` is one line naming
    the flag at fault; the commands exit 2 with it."""


@dataclasses.dataclass(frozen=True)
class ExtractOptions:
    """``bias-extract``'s options."""

    input_dir: str | Path
    """The campaign root (nested layouts are scanned)."""
    output: str | Path | None = None
    """The summary table to write; default ``<input_dir>/summary.csv``."""
    convergence_config: str | Path | None = None
    """YAML with a ``convergence:`` block re-gating NUTS realizations."""
    workers: int | None = None
    """Reader processes; default the CPUs allocated."""
    progress: bool = False
    array_task_id: int | None = None
    """With ``array_task_count``: write only this array task's partial."""
    array_task_count: int | None = None
    array_indices: str | None = None
    """The SLURM array's index set (``--array-indices``): the task from
    ``SLURM_ARRAY_TASK_ID``, as bias-run finds it."""
    verify: bool = False
    """The scrub (``--verify``, :func:`run_verify`): every realization read again against its
    checksums; nothing but its record is written."""


class ExtractOutcome(NamedTuple):
    """What :func:`run_extract` did: the rows written to ``summary``, the campaign's
    :class:`~shearbatch.analysis.progress.Progress`, and the population sidecar (None
    without interim-model rows)."""

    rows: list[dict[str, Any]]
    progress: Any
    summary: Path
    population: Path | None
    """The partials index (None without partials)."""
    partials: dict[str, int] | None = None
    """Where the rows came from (:func:`shearbatch.analysis.partials.gather`'s counts)."""

    @property
    def counts(self) -> dict[str, int]:
        """``{status: rows}``."""
        from ..analysis.summary_table import status_counts

        return status_counts(self.rows)

    @property
    def n_converged(self) -> int:
        return sum(1 for r in self.rows if r["status"] == "ok" and r.get("passed_convergence"))

    def lines(self) -> list[str]:
        """``bias-extract``'s printed summary: the counts, the campaign, the sidecar."""
        counts = ", ".join(f"{k} {v}" for k, v in self.counts.items())
        out = [f"{len(self.rows)} realization(s): {counts}; passed convergence "
               f"{self.n_converged} -> {self.summary}", f"campaign: {self.progress.line()}"]  # fmt: skip
        if self.partials:
            c = self.partials
            out.append(f"partials: {c['from_partials']} realization(s) from partials, "
                       f"{c['read']} read ({c['stale']} stale, {c['damaged_partials']} damaged "
                       f"partial(s), {c['duplicates']} duplicate(s) counted once)")  # fmt: skip
        if self.population is not None:
            out.append(f"partials index (bias-stats' pooled fit) -> {self.population}")
        return out

    def warnings(self) -> list[str]:
        """What the campaign's state should warn about: directories not in its plan,
        unreadable manifests, settings mixed within one campaign."""
        from ..analysis.progress import mixed_warning

        prog = self.progress
        out = []
        if prog.unplanned:
            out.append(f"{prog.unplanned_line(5)}: not this campaign's (campaign.json's plan); "
                       "summary.csv marks them in_plan = False and bias-stats leaves them out "
                       "unless --include-unplanned")  # fmt: skip
        return out + [m for m in [*prog.problems, mixed_warning(prog.mixed)] if m]

    def notes(self) -> list[str]:
        """What is allowed but worth a line: several batch sizes."""
        if len(self.progress.batch_sizes) > 1:
            return [f"batch sizes {self.progress.batch_sizes} (allowed: MAP agrees to < 1e-6 "
                    "across batch sizes; recorded per realization in summary.csv)"]  # fmt: skip
        return []


def campaign_rows(
    root: str | Path, thresholds: Any = None, workers: int | None = None, progress: bool = False
) -> tuple[list[dict[str, Any]], Any]:
    """``(rows, progress)`` of the campaign under ``root`` (module docstring); NUTS gates
    at ``thresholds`` (default the built-in ones). ``ValueError`` when there is no
    realization, planned or found."""
    from ..analysis import summary_table as ex
    from ..analysis.progress import campaign_progress

    th = ex.DEFAULT_THRESHOLDS if thresholds is None else thresholds
    rows = ex.extract_campaign(root, th, workers=workers, progress=progress)
    rows, prog = campaign_progress(root, rows)
    if not rows:
        raise ValueError(f"no realization directories under {root}")
    return rows, prog


def campaign_table(root: str | Path, thresholds: Any = None, workers: int | None = 1) -> Any:
    """The campaign's summary table as ``bias-stats`` reads it from ``summary.csv``
    (:func:`~shearbatch.analysis.summary_table.summary_frame`: the same text, parsed), without
    writing it."""
    from ..analysis.summary_table import summary_frame

    rows, _ = campaign_rows(root, thresholds, workers)
    return summary_frame(rows)


def extract_to(root: Path, out: Path, thresholds: Any = None, workers: int | None = None,
               progress: bool = False) -> ExtractOutcome:  # fmt: skip
    """The reduction of the campaign under ``root``
    (:func:`shearbatch.analysis.partials.gather`: rows from its partials where they hold
    them, the rest read and written to new partials), its planned realizations not started
    added (:func:`~shearbatch.analysis.progress.campaign_progress`), written to ``out``,
    with the partials index beside it (``summary.partials.json``: what bias-stats' pooled
    fit streams). ``ValueError`` for a campaign without realizations or with mixed
    population priors."""
    from ..analysis import partials as ap
    from ..analysis import summary_table as ex
    from ..analysis.progress import campaign_progress
    from ..io import partials as pio
    from ..slurm import allocated_cpus

    th = ex.DEFAULT_THRESHOLDS if thresholds is None else thresholds
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(ex.find_realization_dirs(root)), unit="dir", desc="bias-extract")
    folder = None  # <root>/partials; beside the summary when the root is read-only
    if not os.access(root, os.W_OK) or (
        (root / pio.PARTIALS).exists() and not os.access(root / pio.PARTIALS, os.W_OK)
    ):
        folder = Path(out).with_name(Path(out).stem + ".partials")
    rows, index = ap.gather(root, th, workers or allocated_cpus(),
                            None if bar is None else bar.update, folder)  # fmt: skip
    if bar is not None:
        bar.close()
    rows, prog = campaign_progress(root, rows)
    if not rows:
        raise ValueError(f"no realization directories under {root}")
    ex.write_summary(rows, out)
    population_path(out).unlink(missing_ok=True)  # an older version's sidecar: superseded
    idx = ap.write_index(index, ap.index_path(out))
    return ExtractOutcome(rows, prog, Path(out), idx, index.get("counts"))


def extract_slice(opts: ExtractOptions) -> tuple[Path, int]:
    """``bias-extract --array-task-id``: the partial of one array task's slice
    (:func:`shearbatch.analysis.partials.extract_slice`); :class:`StageError` for bad
    input."""
    from ..analysis import partials as ap
    from ..analysis import summary_table as ex
    from ..slurm import allocated_cpus

    root, _, th = check_extract(opts)
    tid, count = opts.array_task_id, opts.array_task_count
    if opts.array_indices is not None:
        import os as _os

        from ..campaign import array_task_from_env
        from ..slurm import ArrayError, parse_indices

        if tid is not None or count is not None:
            raise StageError("--array-indices: exclusive with --array-task-id/--array-task-count")
        if "SLURM_ARRAY_TASK_ID" not in _os.environ:
            raise StageError("--array-indices: SLURM_ARRAY_TASK_ID is not set (not an array task)")
        try:
            tid, count = array_task_from_env(parse_indices(opts.array_indices))
        except ArrayError as err:
            raise StageError(f"--array-indices: {err}") from None
    if count is None:
        raise StageError("--array-task-count: required with --array-task-id")
    if tid is None:
        raise StageError("--array-task-id: required with --array-task-count")
    if count < 1 or not 0 <= tid < count:
        raise StageError(f"--array-task-id: {tid} outside [0, {count})")
    try:
        return ap.extract_slice(root, tid, count, th or ex.DEFAULT_THRESHOLDS,
                                opts.workers or allocated_cpus())  # fmt: skip
    except ValueError as err:
        raise StageError(f"--input-dir: {err}") from None


def check_extract(opts: ExtractOptions) -> tuple[Path, Path, Any]:
    """``(root, summary path, thresholds)`` of ``opts``; :class:`StageError` (naming the
    flag) for bad input, before anything is read."""
    from ..analysis import summary_table as ex
    from ..io.manifest import MANIFEST
    from .plan import PlanError, check_out_path

    root = Path(opts.input_dir)
    if not root.is_dir():
        raise StageError(f"--input-dir: {root} is not a directory")
    if opts.workers is not None and opts.workers < 1:
        raise StageError(f"--workers: must be >= 1, got {opts.workers}")
    out = Path(opts.output) if opts.output is not None else root / SUMMARY
    try:
        check_out_path("--output", out, is_dir=False)
    except PlanError as err:
        raise StageError(str(err)) from None
    try:
        th = ex.load_thresholds(opts.convergence_config)
    except OSError as err:
        raise StageError(f"--convergence-config: {err.strerror}: {err.filename}") from None
    except ValueError as err:
        raise StageError(f"--convergence-config: {err}") from None
    if not ex.find_realization_dirs(root) and not (root / MANIFEST).is_file():
        raise StageError(f"--input-dir: no realization directories under {root}")
    return root, out, th


def run_extract(opts: ExtractOptions) -> ExtractOutcome:
    """``bias-extract``: every realization of the campaign (and the planned ones not
    started) in one summary table, written atomically (:class:`StageError` for bad input,
    naming the flag)."""
    root, out, th = check_extract(opts)
    try:
        return extract_to(root, out, th, opts.workers, opts.progress)
    except ValueError as err:
        raise StageError(f"--input-dir: {err}") from None


def run_verify(opts: ExtractOptions) -> Any:
    """``bias-extract --verify``: the scrub of the campaign
    (:func:`shearbatch.analysis.scrub.scrub_campaign`), its record written beside the summary
    table (``--output``'s ``summary.verified.json``). :class:`StageError` for bad input
    (naming the flag); ``OSError`` when the record cannot be written."""
    from ..analysis.scrub import scrub_campaign
    from ..slurm import allocated_cpus

    for flag, v in (("--array-task-id", opts.array_task_id),
                    ("--array-task-count", opts.array_task_count),
                    ("--array-indices", opts.array_indices)):  # fmt: skip
        if v is not None:
            raise StageError(f"--verify: exclusive with {flag} (the scrub reads every "
                             "realization of the campaign)")  # fmt: skip
    root, out, _ = check_extract(opts)
    return scrub_campaign(root, out, opts.workers or allocated_cpus())
