"""A Python API for notebooks: run a campaign and open its results.

::

    import shearbatch

    camp = shearbatch.run("configs/level0.yaml", shear_grid=[-0.05, 0.05],
                          shear_grid_g2=[-0.05, 0.05], n_realizations=20,
                          output_dir="results/nb")
    camp = shearbatch.open_campaign("results/nb")      # the same, for an existing campaign
    camp.statuses()          # run_id -> ok / failed / incomplete / corrupt
    df = camp.summary()      # one row per realization (what bias-extract writes)
    res = camp.stats()       # bias-stats: a BiasResult (res.m1, res.c1_err, res.verdict)
    post = camp.posterior(camp.realizations[0])   # xarray.DataTree with units / long_name
    camp.describe(camp.realizations[0])           # az.summary at full precision

:func:`run` mirrors ``bias-run``: its keyword arguments are the command's
options (``shear_grid=[...]`` is ``--shear-grid ...``) and go through the same
validation (a bad value raises ``ValueError`` with the CLI's one-line message)
and the same engine. :class:`Campaign` never recomputes an inference; it reads
files, and :meth:`Campaign.stats` is ``bias-stats`` (:func:`shearbatch.app.run_stats`), so it
writes ``bias_results.json`` as the command does.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .analysis.result import BiasResult

__all__ = ["Campaign", "open_campaign", "run"]

logger = logging.getLogger(__name__)


class Campaign:
    """The results of a campaign directory (``bias-run``'s ``--output-dir``)."""

    def __init__(self, root: str | Path, report: Any = None) -> None:
        from .io import find_realization_dirs

        self.root = Path(root)
        if not self.root.is_dir():
            raise ValueError(f"open_campaign: {self.root} is not a directory")
        self._dirs = {p.name: p for p in find_realization_dirs(self.root)}
        #: the engine's report when this campaign was just run by :func:`run`
        self.report = report

    def __repr__(self) -> str:
        return f"Campaign({str(self.root)!r}, {len(self._dirs)} realization(s))"

    @property
    def realizations(self) -> list[str]:
        """Run ids (directory names), sorted."""
        return sorted(self._dirs)

    def path(self, run_id: str) -> Path:
        try:
            return self._dirs[run_id]
        except KeyError:
            raise KeyError(f"{run_id!r} is not a realization of {self.root}") from None

    def summary(self, convergence_config: str | None = None, workers: int = 1) -> Any:
        """One row per realization as a pandas DataFrame indexed by ``run_id``: the table
        ``bias-extract`` writes (:func:`shearbatch.app.campaign_table`: the realization
        directories plus the planned ones not started, each with ``in_plan``), as
        ``bias-stats`` reads it back."""
        from .analysis.summary_table import load_thresholds
        from .app import campaign_table

        th = load_thresholds(convergence_config)
        return campaign_table(self.root, th, workers).set_index("run_id")

    def statuses(self) -> Any:
        """``run_id -> status`` (ok, failed, incomplete, corrupt) as a pandas Series."""
        return self.summary()["status"]

    def stats(self, requirement: str | None = None, level: str | None = None, *,
              output_dir: str | Path | None = None, plots: bool = False,
              report: str | Path | bool = False, **options: Any) -> BiasResult:  # fmt: skip
        """``bias-stats --input <this campaign>``: :func:`shearbatch.app.run_stats`, the
        function the command calls, with the command's options (underscores for dashes:
        ``requirement``, ``level``, ``target_sigma_m``, ``include_unplanned``,
        ``posterior_dir``, ``acceptance_config``, ``estimator``, ``point``, ``weights``,
        ``sbc``, ``n_boot``, ``output_dir``, ``plots``, ``report``), the same checks (a bad
        value raises ``ValueError`` with the command's one-line message) and the same
        files: ``bias_results.json`` is written to ``output_dir`` (default: the campaign
        directory) byte for byte as ``bias-stats`` writes it, and ``summary.csv`` is
        extracted there first when older than a realization file. Returns the
        :class:`~shearbatch.analysis.result.BiasResult` (m, c, errors, coverage, planning,
        verdict; ``.to_json()``: the mapping of ``bias_results.json``).

        Two defaults differ from the command's, for notebooks: ``plots=False`` (the
        command: on) and ``report=False`` (no HTML report; ``True``: the command's default,
        ``<campaign>/report.html``; a path: there). ``acceptance_config`` is a YAML path, or
        its content as a mapping.

        Deprecated keyword names, kept working with a :class:`DeprecationWarning`:
        ``sbc_mode`` (``"auto"``, ``"on"``, ``"off"``: ``sbc`` None, True, False) and
        ``acceptance`` (a mapping of criteria overrides of the judged requirement, e.g.
        ``{"max_abs_m": 1e-3}``: ``acceptance_config``).
        """
        import dataclasses

        from .app import StageError, StatsOptions, run_stats

        options = _stats_aliases(options)
        names = {f.name for f in dataclasses.fields(StatsOptions)} - {"input", "command"}
        unknown = sorted(set(options) - names)
        if unknown:
            raise ValueError(f"stats: unknown option(s) {', '.join(unknown)}; use bias-stats' "
                             "options")  # fmt: skip
        if report is True:
            report = None  # the command's default: <campaign>/report.html
        opts = StatsOptions(input=self.root, output_dir=output_dir, requirement=requirement,
                            level=level, plots=plots, report=report, **options)  # fmt: skip
        try:
            return run_stats(opts).result
        except StageError as err:
            raise ValueError(str(err)) from None

    def posterior(self, run_id: str) -> Any:
        """``posterior.nc`` of one realization as an ``xarray.DataTree`` (loaded into memory).

        Groups ``posterior`` (``g1``, ``g2``, per-galaxy latents; each with ``units``
        and ``long_name``), ``sample_stats``, ``observed_data``; root attributes
        carry the truth, seed, method and config hash. ``arviz.from_netcdf(path)``
        reads the same file as InferenceData.
        """
        import xarray as xr

        from .io import POSTERIOR

        with xr.open_datatree(self.path(run_id) / POSTERIOR, engine="netcdf4") as tree:
            return tree.load()

    def truth(self, run_id: str) -> dict[str, Any]:
        from .io import TRUTH, read_json

        return read_json(self.path(run_id) / TRUTH)

    def convergence(self, run_id: str) -> dict[str, Any]:
        from .io import CONVERGENCE, read_json

        return read_json(self.path(run_id) / CONVERGENCE)

    def describe(self, run_id: str) -> Any:
        """``az.summary`` of one realization at full precision (a DataFrame).

        A Level 0 posterior width is ~1e-5: ArviZ's default ``round_to=2`` shows
        it as 0.0, so this passes ``round_to="none"``. MAP and VI draws are
        independent draws of a Gaussian stored as one chain, so only the statistics
        are computed for them (R-hat needs chains; ArviZ would warn). The draws of an
        interim-model MAP realization are proposal draws (``inference.map_config.proposal``)
        that only estimate the posterior weighted by ``exp(interim_log_weight) pi(e)``;
        ``az.summary`` does not weight them, so this warns (its ``convergence.json``
        has the weighted widths under ``laplace.posterior_std`` with a Student-t proposal).
        """
        import warnings

        import arviz as az
        import netCDF4

        from .io import POSTERIOR

        path = self.path(run_id) / POSTERIOR
        with netCDF4.Dataset(path) as ds:
            kind = getattr(ds, "interim_draws", None)  # "proposal" or "posterior"
            if kind is None and getattr(ds, "shear_model", None) == "interim":  # older files
                stats = ds.groups.get("sample_stats")
                kind = "proposal" if stats is not None and any(
                    k in stats.variables for k in ("laplace_log_q", "proposal_log_q")) else None  # fmt: skip
        if kind == "proposal":
            warnings.warn(
                f"{run_id}: this interim-model realization's draws are proposal draws, "
                "summarised here unweighted; weight each galaxy's draws by "
                "exp(interim_log_weight) pi(e) for its posterior (docs/validation.md, "
                "'The interim draws and their weights')",
                UserWarning,
                stacklevel=2,
            )
        data = az.from_netcdf(path)
        n_chain = int(data.posterior.sizes["chain"])
        kind = "all" if n_chain > 1 else "stats"
        return az.summary(data, kind=kind, round_to="none")


#: ``Campaign.stats``' keyword names before they became ``bias-stats``' option names
_STATS_ALIASES = {"sbc_mode": "sbc", "acceptance": "acceptance_config"}
_SBC_MODES = {"auto": None, "on": True, "off": False}


def _stats_aliases(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with the deprecated names (:data:`_STATS_ALIASES`) renamed, each with a
    :class:`DeprecationWarning`; ``ValueError`` when both names of one option are given or
    an ``sbc_mode`` is unknown."""
    import warnings

    out = dict(options)
    for old, new in _STATS_ALIASES.items():
        if old not in out:
            continue
        if new in out:
            raise ValueError(f"stats: give {new} or its deprecated alias {old}, not both")
        warnings.warn(f"Campaign.stats({old}=...) is deprecated: use {new}=..., "
                      f"bias-stats' --{new.replace('_', '-')}", DeprecationWarning,
                      stacklevel=3)  # fmt: skip
        value = out.pop(old)
        if old == "sbc_mode":
            if value not in _SBC_MODES:
                raise ValueError(f"stats: sbc_mode must be auto, on or off, got {value!r}")
            value = _SBC_MODES[value]
        out[new] = value
    return out


def open_campaign(root: str | Path) -> Campaign:
    """Open a campaign directory (``bias-run``'s ``--output-dir``) for reading."""
    return Campaign(root)


def run(config: str | Path | Mapping[str, Any], **options: Any) -> Campaign:
    """Run a campaign like ``bias-run`` and return it opened.

    ``config``: a YAML path or a mapping with the same content. ``options`` are
    ``bias-run``'s options with underscores (``shear_grid=[-0.05, 0.05]``,
    ``shear_grid_g2=[...]``, ``n_realizations=20``, ``output_dir=...``,
    ``method=<a registered method>``, ``x64=False``, ``batch_size=...``, ``paired=True``, ...:
    the fields of :class:`shearbatch.app.RunOptions`' groups); unknown options and bad values raise
    ``ValueError`` with the CLI's message. Complete realizations are skipped unless
    ``overwrite=True``.
    """
    from . import app
    from .schema import ConfigError

    fields = set(app.RunOptions.fields()) - {"config"}
    unknown = sorted(set(options) - fields)
    if unknown:
        raise ValueError(f"run: unknown option(s) {', '.join(unknown)}; use bias-run's options")
    if options.get("emit_sbatch"):
        raise ValueError("run: emit_sbatch writes a SLURM script; use bias-run --emit-sbatch")
    for k in ("shear_grid", "shear_grid_g2", "sbatch_line", "sbatch_setup"):
        v = options.get(k)
        if v is not None:
            options[k] = tuple(v) if isinstance(v, Sequence) and not isinstance(v, str) else (v,)
        else:
            options.pop(k, None)
    opts = app.RunOptions.of(config=config if isinstance(config, Mapping) else str(config),
                             **{**options, "progress": bool(options.get("progress"))})  # fmt: skip
    ex = opts.execution
    try:
        plan = app.plan_run(opts)
        deadline = app.deadline(ex.time_limit) if ex.time_limit is not None else None
        out = app.run(plan, progress=bool(ex.progress), signals=False, deadline=deadline)
    except ConfigError as err:  # PlanError is a ValueError too
        raise ValueError(str(err)) from None
    report = out.report
    logger.info("wrote %d ok, %d failed realization(s) under %s", report.n_ok, report.n_failed,
                plan.output_dir)  # fmt: skip
    return Campaign(plan.output_dir, report=report)
