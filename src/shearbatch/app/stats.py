"""What ``bias-stats`` does besides the statistics: find the campaign behind its input
(a campaign directory, extracted when its summary.csv is missing or stale), the
campaign's own requirement, its figures and the HTML report."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from ..io.manifest import FROZEN_CONFIG  # the config as run, in the campaign root
from .runner import COMMANDS_FILE

__all__ = [
    "FROZEN_CONFIG",
    "SUMMARY",
    "CampaignInput",
    "campaign_config",
    "campaign_requirement",
    "campaign_root",
    "extract_to",
    "is_campaign",
    "resolve_input",
    "stats_plots",
    "summary_is_fresh",
    "write_report",
]

logger = logging.getLogger("shearbatch")

#: the summary table's name in a campaign root (bias-extract's --output default)
SUMMARY = "summary.csv"


class CampaignInput(NamedTuple):
    """``bias-stats --input``, resolved: the summary table to read, the campaign root
    (None when unknown), and whether the table was extracted by this call."""

    summary: Path
    root: Path | None
    extracted: bool
    progress: str = ""  # bias-extract's campaign line, when extracted


def is_campaign(root: Path) -> bool:
    from ..io import find_realization_dirs
    from ..io.manifest import MANIFEST

    return (root / MANIFEST).is_file() or bool(find_realization_dirs(root))


def summary_is_fresh(summary: Path, root: Path) -> bool:
    """True when ``summary`` is newer than every file of every realization directory
    (and their directories: a file added or removed changes them) and than the root's
    campaign.json and frozen config: nothing was written since it was extracted."""
    from ..io import find_realization_dirs
    from ..io.manifest import MANIFEST

    if not summary.is_file():
        return False
    made = summary.stat().st_mtime
    paths = [root / MANIFEST, root / FROZEN_CONFIG]
    for d in find_realization_dirs(root):
        paths.append(d)
        with os.scandir(d) as it:
            paths += [Path(e.path) for e in it]
    for p in paths:
        try:
            if p.stat().st_mtime >= made:
                return False
        except FileNotFoundError:
            continue
    return True


def extract_to(root: Path, out: Path, thresholds: Any = None, workers: int | None = None,
               progress: bool = False) -> tuple[list[dict[str, Any]], Any, Path | None]:  # fmt: skip
    """bias-extract's work: the rows of every realization under ``root`` (NUTS gates
    re-evaluated at ``thresholds``; default the built-in ones) plus the planned ones not
    started (:func:`~shearbatch.analysis.progress.campaign_progress`), written to ``out``
    and the population sidecar; returns ``(rows, progress, sidecar or None)``.
    ``ValueError`` for a campaign without realization directories or with mixed population
    priors."""
    from ..analysis import extract as ex
    from ..analysis.progress import campaign_progress

    th = ex.DEFAULT_THRESHOLDS if thresholds is None else thresholds
    rows = ex.extract_campaign(root, th, workers=workers, progress=progress)
    rows, prog = campaign_progress(root, rows)
    if not rows:
        raise ValueError(f"no realization directories under {root}")
    ex.write_summary(rows, out)
    return rows, prog, ex.write_population(rows, ex.population_path(out))


def release_freed_memory() -> None:
    """Hand the heap's free pages back to the system (glibc's ``malloc_trim``; elsewhere a
    no-op). The extraction's per-realization draws, freed once the population sidecar is
    written, stay resident otherwise while the pooled fit reads the sidecar back (measured
    at 1,000 Level 2 realizations: +360 MB of peak RSS, the size of the draws)."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def campaign_root(path: Path, posterior_dir: str | None) -> Path | None:
    """The campaign root behind ``bias-stats --input``: the directory itself, else
    ``--posterior-dir``, else the summary file's folder when it holds a campaign.json."""
    from ..io.manifest import MANIFEST

    if path.is_dir():
        return path
    if posterior_dir is not None:
        return Path(posterior_dir)
    return path.parent if (path.parent / MANIFEST).is_file() else None


def resolve_input(path: Path, posterior_dir: str | None, workers: int | None = None,
                  progress: bool = False) -> CampaignInput:  # fmt: skip
    """A summary table (a file), or a campaign directory: its ``summary.csv`` when fresh
    (:func:`summary_is_fresh`), else extracted there now (:func:`extract_to`).
    ``ValueError`` (one line) for a directory that is not a campaign."""
    from ..io.manifest import MANIFEST

    if path.is_dir():
        if not is_campaign(path):
            raise ValueError(f"{path} is a directory but not a campaign (no {MANIFEST}, no "
                             "realization directories); give a campaign root or a "
                             "summary.csv from bias-extract")  # fmt: skip
        summary = path / SUMMARY
        if summary_is_fresh(summary, path):
            logger.info("%s is newer than every realization file: reused", summary)
            return CampaignInput(summary, path, False)
        _, prog, _ = extract_to(path, summary, workers=workers, progress=progress)
        release_freed_memory()  # the rows' draws, now in the sidecar that is read next
        return CampaignInput(summary, path, True, prog.line())
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found (give a campaign directory or a summary.csv)")
    return CampaignInput(path, campaign_root(path, posterior_dir), False)


def campaign_config(root: Path | None) -> tuple[dict[str, Any] | None, str | None, str]:
    """``(config data, its YAML text, where it came from)`` of a campaign: the frozen
    ``config.yaml`` of its root, else the config recorded in ``campaign.json``."""
    import yaml

    from ..io.manifest import MANIFEST, read_manifest

    if root is None:
        return None, None, ""
    frozen = root / FROZEN_CONFIG
    if frozen.is_file():
        text = frozen.read_text()
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as err:
            logger.warning("%s: not YAML (%s); ignored", frozen, type(err).__name__)
        else:
            if isinstance(data, dict):
                return data, text, str(frozen)
    try:
        man = read_manifest(root)
    except ValueError as err:
        logger.warning("%s", err)
        return None, None, ""
    if man is None or not isinstance(man.get("config"), dict):
        return None, None, ""
    text = (f"# the config as run, from {root / MANIFEST} (every default filled in)\n"
            + yaml.safe_dump(man["config"], sort_keys=False))  # fmt: skip
    return man["config"], text, str(root / MANIFEST)


def campaign_requirement(root: Path | None) -> tuple[str | None, str]:
    """``(campaign.requirement, where it was read)`` of a campaign's config, or ``(None,
    "")`` when it names none."""
    data, _, where = campaign_config(root)
    camp = data.get("campaign") if isinstance(data, dict) else None
    name = camp.get("requirement") if isinstance(camp, dict) else None
    return (str(name), where) if name else (None, "")


def distinct_seed_runs(df: Any, run_ids: Sequence[str], k: int) -> list[str]:
    """Up to ``k`` of ``run_ids`` (in their order) with distinct seeds: grid points of one
    seed share the galaxy and the noise, so one seed would be shown several times."""
    seeds = dict(zip(df["run_id"].astype(str), df["seed"].astype(str), strict=False))
    out, seen = [], set()
    for r in run_ids:
        s = seeds.get(str(r), str(r))
        if s not in seen:
            seen.add(s)
            out.append(r)
        if len(out) == k:
            break
    return out


def _stamps_png(root: Path, run_ids: Sequence[str], cfg: dict[str, Any], path: Path) -> Path:
    """Data, model at the estimate and residual of a few realizations (the data from their
    posterior.nc, the model rendered from the campaign's config at each one's estimate)."""
    import numpy as np
    import xarray as xr

    from .. import runtime
    from ..analysis.plots import stamps_figure
    from ..io import POSTERIOR, TRUTH, find_realization_dirs, read_json
    from ..schema import current_config
    from ..spec import run_spec
    from .preview import models_at_estimate

    where = {p.name: p for p in find_realization_dirs(root)}
    images, reals, homes = [], [], []
    for rid in run_ids:
        d = where[rid]
        with xr.open_dataset(d / POSTERIOR, group="observed_data", engine="netcdf4") as ds:
            images.append(np.asarray(ds["obs"].values, float))
        t = read_json(d / TRUTH)
        reals.append(_Real(rid, float(t["g1"]), float(t["g2"])))
        homes.append(d.parent)
    # the campaign's precision, and its compilation cache when it has one: the model's
    # constants (PSF tables, reference S/N) are computed op by op, each op a compiled
    # program that bias-run compiled and cached already (measured at Level 2 on the 2-core
    # CPU: 18 s without the cache, 7 s with it)
    # On a GPU node JAX would start here (this process's only use of it) taking 75% of the
    # GPU's memory up front for three stamps: it takes what it uses unless told otherwise
    cache = runtime.default_cache_dir(root)
    precision = str((cfg.get("inference") or {}).get("precision", "float64"))
    lazy = {"XLA_PYTHON_CLIENT_PREALLOCATE": os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE",
                                                            "false")}  # fmt: skip
    with runtime.scoped_environ(lazy), runtime.scoped():
        runtime.configure(precision == "float64", cache if Path(cache).is_dir() else "off")
        spec = run_spec(current_config().model_validate(cfg))  # validated when run
        models = np.concatenate([models_at_estimate(_Where(spec, h), [r])
                                 for h, r in zip(homes, reals, strict=True)])  # fmt: skip
    fig = stamps_figure(np.stack(images), list(run_ids), spec.model.noise_sigma, models)
    fig.savefig(path, dpi=90)
    return path


class _Real(NamedTuple):  # what models_at_estimate reads of a planned realization
    run_id: str
    g1: float
    g2: float


class _Where(NamedTuple):  # what models_at_estimate reads of a plan
    spec: Any
    output_dir: Path


def write_report(
    res: dict[str, Any],
    df: Any,
    plot_dir: Path | None,
    posterior_dir: str | Path | None,
    path: Path,
    command: Sequence[str] = (),
    use: Any = None,
) -> Path:
    """``bias-stats --report``: one self-contained HTML file (analysis/report.py); ``command``
    is the bias-stats command line quoted as provenance. With the campaign root
    (``posterior_dir``) it embeds the config as run and the stamps (data, model,
    residual) of up to three used realizations of distinct seeds."""
    from ..analysis import report
    from ..analysis.extract import posterior_attrs
    from ..io import POSTERIOR, find_realization_dirs

    root = None if posterior_dir is None else Path(posterior_dir)
    attrs = []
    if root is not None:
        for d in find_realization_dirs(root)[:500]:  # provenance, not statistics
            if (d / POSTERIOR).is_file():  # the root attrs (netCDF4: ~1 ms, xarray ~30 ms)
                attrs.append(posterior_attrs(d / POSTERIOR))
    order = ["stamps.png", "residuals.png", "coverage.png", "ranks.png", "worst_diagnostics.png"]
    figures = []
    cfg, cfg_text, cfg_from = campaign_config(root)
    if root is not None and cfg is not None and use is not None and len(use) and plot_dir:
        ids = distinct_seed_runs(use, list(use["run_id"].astype(str)), 3)
        try:
            figures.append(_stamps_png(root, ids, cfg, plot_dir / "stamps.png"))
        except Exception as err:  # a figure must not cost the report
            logger.warning("report: no stamps (%s: %s)", type(err).__name__, err)
    if plot_dir is not None:
        figures += sorted((p for p in plot_dir.glob("*.png") if p.name != "stamps.png"),
                          key=lambda p: (p.name not in order, order.index(p.name)
                                         if p.name in order else 0, p.name))  # fmt: skip
    commands = []
    if root is not None and (root / COMMANDS_FILE).is_file():
        commands = (root / COMMANDS_FILE).read_text().splitlines()[-20:]
    prov = report.provenance(list(command), attrs, commands)
    config = {"text": cfg_text, "source": cfg_from} if cfg_text else None
    text = report.render_report(res, figures, report.failures_by_flag(df), prov, config=config)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def stats_plots(df, use, res, fits, out: Path, posterior_dir: str | Path | None) -> Path:
    """``bias-stats``'s figures under ``out/plots`` (residuals, coverage, SBC ranks, and with
    ``posterior_dir`` the diagnostics of the worst realizations, one per seed); returns
    that folder."""
    from ..analysis import plots
    from ..io import POSTERIOR, find_realization_dirs

    d = out / "plots"
    d.mkdir(parents=True, exist_ok=True)
    # the population estimator: the per-realization maxima (g_mode) in the residual figure
    point = "mode" if res["point_estimate"] == "population" else res["point_estimate"]
    figs = {
        "residuals.png": plots.residual_figure(
            use, fits, res["estimator"], point=point, weights=res["weights"]
        ),
        "coverage.png": plots.coverage_figure(res["coverage"]),
        "ranks.png": plots.rank_figure(use, res["sbc"]),
    }
    if posterior_dir is not None and res["point_estimate"] == "population":
        logger.info("--posterior-dir: no per-realization g posterior to plot (interim model)")
    elif posterior_dir is not None:
        worst = plots.worst_converged(df, k=3)
        where = {p.name: p for p in find_realization_dirs(posterior_dir)}
        found = [w for w in worst if w in where and (where[w] / POSTERIOR).is_file()]
        if found:
            truth = df.set_index("run_id")
            figs["worst_diagnostics.png"] = plots.diagnostics_figure(
                [where[w] for w in found],
                [(float(truth.at[w, "g1_true"]), float(truth.at[w, "g2_true"])) for w in found],
            )
        else:
            logger.warning("--posterior-dir: none of the worst realizations %s found", worst)
    for name, fig in figs.items():
        fig.savefig(d / name, dpi=110)
    return d
