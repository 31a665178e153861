"""What ``bias-stats`` reads besides the table: the campaign behind its ``--input`` (a
campaign directory, extracted when its ``summary.csv`` is missing or stale, or a summary
table), and the campaign's config as run and its requirement."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, NamedTuple

from ..io.layout import SUMMARY
from ..io.manifest import FROZEN_CONFIG  # the config as run, in the campaign root
from .extract_stage import extract_to

__all__ = [
    "FROZEN_CONFIG",
    "CampaignInput",
    "campaign_config",
    "campaign_requirement",
    "campaign_root",
    "is_campaign",
    "release_freed_memory",
    "resolve_input",
    "summary_is_fresh",
]

logger = logging.getLogger("shearbatch")


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
        done = extract_to(path, summary, workers=workers, progress=progress)
        release_freed_memory()  # the rows' draws, now in the sidecar that is read next
        return CampaignInput(summary, path, True, done.progress.line())
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
