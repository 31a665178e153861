"""Stage 3 in the application layer: :class:`StatsOptions` -> :func:`run_stats` ->
:class:`StatsOutcome` (``bias-stats``).

:func:`run_stats` checks the options (:func:`check_stats`: one line naming the flag, before
anything is computed; the analysis' settings are checked by
:class:`shearbatch.analysis.bias.Settings`, their one home, and the requirement is chosen
and resolved once, by :func:`choose_requirement`: the flag, else the campaign config's
``campaign.requirement``, else ``level0``), finds the campaign behind ``--input`` (a
summary table, or a campaign directory whose ``summary.csv`` is reused when fresh and
extracted otherwise: :func:`resolve_input`), reads the table, measures and judges it
(:func:`stats_of_table`, i.e. :func:`shearbatch.analysis.bias.measure_bias`, given the
checked settings and the chosen requirement) and writes ``bias_results.json``, the
figures and the report (:mod:`shearbatch.app.report_files`), each atomically.
:meth:`shearbatch.api.Campaign.stats` calls :func:`run_stats` with the same options, so
the Python API and the command write the same ``bias_results.json`` on the same campaign.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from ..io.layout import BIAS_RESULTS, REPORT, SUMMARY, population_path
from .extract_stage import StageError
from .inputs import (
    campaign_requirement,
    campaign_root,
    is_campaign,
    resolve_input,
    summary_is_fresh,
)

if TYPE_CHECKING:  # the analysis (scipy; never JAX) loads when stats run
    from ..analysis.bias import BiasAnalysis, Settings
    from ..analysis.result import BiasResult, Requirement

__all__ = [
    "StatsOptions",
    "StatsOutcome",
    "check_stats",
    "choose_requirement",
    "run_stats",
    "stats_of_table",
    "write_results",
]

logger = logging.getLogger("shearbatch")

DEFAULT_REQUIREMENT = "level0"


@dataclasses.dataclass(frozen=True)
class StatsOptions:
    """``bias-stats``' options (the command's help says what each does)."""

    input: str | Path
    """A campaign directory or a summary table."""
    output_dir: str | Path | None = None
    """Default: the campaign directory of ``input``; required for a summary table."""
    requirement: str | None = None
    level: str | None = None
    """The alias ``level_k`` of ``requirement`` (one of the two)."""
    target_sigma_m: float | None = None
    include_unplanned: bool = False
    posterior_dir: str | Path | None = None
    acceptance_config: str | Path | Mapping[str, Any] | None = None
    """A YAML path, or its content (:func:`shearbatch.analysis.verdict.load_acceptance`)."""
    estimator: str = "auto"
    point: str = "auto"
    weights: str = "none"
    sbc: bool | None = None
    """None: SBC when the truths were drawn from the prior."""
    n_boot: int = 1000
    plots: bool = True
    report: str | Path | bool | None = None
    """None: ``<campaign directory>/report.html`` for a campaign directory, else none;
    False: none (the Python API's default)."""
    command: tuple[str, ...] = ()
    """The command line, quoted in the report as provenance."""

    @property
    def sbc_mode(self) -> str:
        return {None: "auto", True: "on", False: "off"}[self.sbc]


class StatsOutcome(NamedTuple):
    """What :func:`run_stats` did: the result and where it went."""

    result: BiasResult
    results_path: Path
    """``bias_results.json``."""
    plot_dir: Path | None
    report: Path | None
    extracted: str | None
    """The campaign line of ``bias-extract`` when this call extracted the table, else None."""
    summary: Path
    """The summary table read."""
    verified: str | None = None
    """When its inputs were last verified (the scrub's record beside the table:
    :func:`shearbatch.analysis.scrub.last_verified_line`), or that they never were."""

    def lines(self) -> list[str]:
        """``bias-stats``' printed summary (:func:`shearbatch.analysis.report_text.summary_lines`),
        after the extraction's line and before the report's."""
        from ..analysis.report_text import summary_lines

        out = []
        if self.extracted is not None:
            out.append(f"extracted {self.summary} (none, or older than a realization file); "
                       f"campaign: {self.extracted}")  # fmt: skip
        if self.verified is not None:
            out.append(self.verified)
        out += summary_lines(self.result, self.results_path, self.plot_dir)
        if self.report is not None:
            out.append(f"report: {self.report}")
        return out

    @property
    def exit_code(self) -> int:
        """0 PASS, 1 FAIL, 3 INCONCLUSIVE (2, bad input, is :class:`StageError`)."""
        from ..analysis.verdict import EXIT_CODES

        return EXIT_CODES[self.result.verdict]


class _Checked(NamedTuple):  # the options of check_stats, resolved
    src: Path
    out: Path
    report: Path | None
    requirement: Requirement
    """Chosen and resolved (:func:`choose_requirement`)."""
    settings: Settings
    """The analysis' settings, checked."""


#: the flags of the analysis' settings (:class:`shearbatch.analysis.bias.Settings`)
_SETTING_FLAGS = {"sbc_mode": "--sbc"}


def check_stats(opts: StatsOptions) -> _Checked:
    """The options checked before anything is read (:class:`StageError` naming the flag),
    the analysis' settings made (:class:`~shearbatch.analysis.bias.Settings`, where their
    rules are) and the requirement chosen (:func:`choose_requirement`)."""
    from ..analysis.bias import BadSetting, Settings
    from .plan import PlanError, check_out_path

    src = Path(opts.input)
    if opts.requirement is not None and opts.level is not None:
        raise StageError("--level: an alias of --requirement; give one of them")
    flag = "--requirement" if opts.level is None else "--level"
    given = opts.requirement if opts.level is None else opts.level
    req = choose_requirement(given, None, flag) if given is not None else None
    try:
        settings = Settings(estimator=opts.estimator, point=opts.point, weights=opts.weights,
                            n_boot=opts.n_boot, sbc_mode=opts.sbc_mode,
                            include_unplanned=opts.include_unplanned,
                            target_sigma_m=opts.target_sigma_m)  # fmt: skip
    except BadSetting as err:
        name = _SETTING_FLAGS.get(err.option, "--" + err.option.replace("_", "-"))
        raise StageError(f"{name}: {err.reason}") from None
    if not src.exists():
        raise StageError(f"--input: {src} not found (give a campaign directory or a summary.csv)")
    if src.is_dir() and not is_campaign(src):
        raise StageError(f"--input: {src} is a directory but not a campaign (no campaign.json, no "
                         "realization directories); give bias-run's --output-dir, or a summary.csv "
                         "from bias-extract --input-dir DIR --output DIR/summary.csv")  # fmt: skip
    if not src.is_dir() and opts.output_dir is None:
        raise StageError("--output-dir: required when --input is a summary.csv")
    out = Path(opts.output_dir) if opts.output_dir is not None else src
    try:
        check_out_path("--output-dir", out)
        if opts.posterior_dir is not None and not Path(opts.posterior_dir).is_dir():
            raise StageError(f"--posterior-dir: {opts.posterior_dir} is not a directory")
        report = opts.report if opts.report is not None or not src.is_dir() else out / REPORT
        report = None if report is False else report  # the API's "no report"
        if report is not None and Path(report).is_dir():
            raise StageError(f"--report: {report} is a directory")
        if src.is_dir() and not summary_is_fresh(src / SUMMARY, src):
            check_out_path("--input", src)  # summary.csv will be written there
    except PlanError as err:
        raise StageError(str(err)) from None
    if req is None:  # the campaign's, else the default
        posterior_dir = None if opts.posterior_dir is None else str(opts.posterior_dir)
        req = choose_requirement(None, campaign_root(src, posterior_dir))
    return _Checked(src, out, None if report is None else Path(report), req, settings)


def choose_requirement(given: str | None, root: Path | None, given_by: str = "--requirement",
                       default: str = "default (no --requirement; the campaign names none)",
                       ) -> Requirement:  # fmt: skip
    """The requirement judged, resolved (the one place a requirement's name or alias is
    resolved on the way to ``bias_results.json``) and marked with who chose it: ``given``
    (by ``given_by``), else the campaign config's ``campaign.requirement``
    (:func:`campaign_requirement`), else ``level0`` (``default``). :class:`StageError` for
    an unknown one."""
    from ..analysis.result import Requirement
    from ..schema import requirements as rq

    def resolved(name: str, chosen: str) -> Requirement:
        info = rq.REQUIREMENTS[name]
        return Requirement(name, info["for"], info["source"], chosen)

    if given is not None:
        try:
            return resolved(rq.resolve(given), given_by)
        except ValueError as err:
            raise StageError(f"{given_by}: {err}") from None
    camp_req, where = campaign_requirement(root)
    if camp_req is not None:
        try:
            return resolved(rq.resolve(camp_req), f"campaign.requirement in {where}")
        except ValueError as err:
            raise StageError(f"campaign.requirement: {err} ({where})") from None
    return resolved(DEFAULT_REQUIREMENT, default)


def stats_of_table(df: Any, requirement: Requirement, settings: Settings,
                   **inputs: Any) -> BiasAnalysis:  # fmt: skip
    """:func:`shearbatch.analysis.bias.measure_bias` of a summary table with the chosen
    ``requirement`` and the checked ``settings`` (``inputs``: ``acceptance``,
    ``population``)."""
    from ..analysis.bias import measure_bias

    return measure_bias(df, requirement=requirement, settings=settings, **inputs)


def write_results(res: BiasResult, out: Path) -> Path:
    """``bias_results.json`` in ``out``: :meth:`BiasResult.to_json` as strict JSON (NaN
    and infinities as null), indented by 2, written atomically."""
    import json

    from ..io import atomic, to_strict_json

    text = json.dumps(to_strict_json(res.to_json()), indent=2, allow_nan=False)
    return atomic.write_text(out / BIAS_RESULTS, text + "\n")


def run_stats(opts: StatsOptions) -> StatsOutcome:
    """``bias-stats`` (module docstring). :class:`StageError` (one line naming the flag)
    for bad input: the options, an unreadable table or sidecar, a table the analysis
    refuses."""
    from ..analysis.parts import open_table
    from ..analysis.verdict import load_acceptance

    ck = check_stats(opts)
    posterior_dir = None if opts.posterior_dir is None else str(opts.posterior_dir)
    try:
        acc = load_acceptance(opts.acceptance_config, ck.requirement.name)
    except OSError as err:
        raise StageError(f"--acceptance-config: {err.strerror}: {err.filename}") from None
    except ValueError as err:
        raise StageError(f"--acceptance-config: {err}") from None
    try:
        inp = resolve_input(ck.src, posterior_dir)
    except (ValueError, OSError) as err:
        raise StageError(f"--input: {err}") from None
    posterior_dir = posterior_dir or (str(inp.root) if ck.src.is_dir() else None)
    try:  # a field-scale table is split by seed and measured a part at a time
        table = open_table(inp.summary)
    except (ValueError, OSError) as err:
        raise StageError(f"--input: cannot read {inp.summary}: {err}") from None
    with table:
        population = _population(inp.summary, _is_interim(table, inp.summary))
        try:
            got = stats_of_table(table, ck.requirement, ck.settings, acceptance=acc,
                                 population=population)  # fmt: skip
            res, fits, digest = got.result, got.fits, got.digest
        except ValueError as err:
            raise StageError(f"--input: {err}") from None
    population = None  # the sidecar's draws (the pooled fit's input) are not needed further
    from .report_files import stats_plots, write_report

    ck.out.mkdir(parents=True, exist_ok=True)
    plot_dir = stats_plots(digest, res, fits, ck.out, posterior_dir) if opts.plots else None
    path = write_results(res, ck.out)
    report = None
    if ck.report is not None:
        report = write_report(res, digest, plot_dir, posterior_dir, ck.report,
                              command=opts.command)  # fmt: skip
    from ..analysis.scrub import last_verified_line

    return StatsOutcome(res, path, plot_dir, report, inp.progress if inp.extracted else None,
                        inp.summary, last_verified_line(inp.summary))  # fmt: skip


def _is_interim(table: Any, summary: Path) -> bool:
    """Whether a row of the table is an interim-model (population) estimate: of a table in
    parts, read from its ``point_estimate`` column alone, as text (a type given, not
    inferred per chunk of the parser: :func:`shearbatch.analysis.summary_table.read_summary`),
    :data:`_SCAN_ROWS` rows at a time."""
    import pandas as pd

    df = getattr(table, "df", None)
    if df is not None:
        return bool("point_estimate" in df and (df["point_estimate"] == "population").any())
    try:
        with pd.read_csv(summary, usecols=lambda c: c == "point_estimate", dtype=str,
                         chunksize=_SCAN_ROWS) as chunks:  # fmt: skip
            return any("point_estimate" in c and (c["point_estimate"] == "population").any()
                       for c in chunks)  # fmt: skip
    except (ValueError, OSError) as err:
        raise StageError(f"--input: cannot read {summary}: {err}") from None


#: rows of a summary table in parts read at a time to find its point estimates
_SCAN_ROWS = 2**16


def _population(summary: Path, interim: bool) -> Any:
    """What the pooled fit of an interim-model table reads (None for the others): the
    partials index beside it (:class:`shearbatch.analysis.streamed.PartialSource`, streamed
    in bounded memory), else an older version's population sidecar (read whole)."""
    if not interim:
        return None
    from ..analysis.partials import index_path

    idx = index_path(summary)
    if idx.is_file():
        from ..analysis.streamed import PartialSource

        try:
            return PartialSource(idx)
        except (OSError, ValueError, KeyError) as err:
            raise StageError(f"--input: partials index {idx} unreadable: {err}") from None
    pop_path = population_path(summary)
    if not pop_path.is_file():
        return None
    from ..analysis.pooled import load_population

    try:
        return load_population(pop_path)
    except (OSError, ValueError, KeyError) as err:
        raise StageError(f"--input: population sidecar {pop_path} unreadable: {err}") from None
