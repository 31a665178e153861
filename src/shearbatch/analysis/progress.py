"""How far a campaign is: planned vs complete realizations, and mixed settings.

``bias-extract`` reads each ``campaign.json`` (:mod:`shearbatch.io.manifest`)
found at the campaign root or next to realization directories. Every planned
realization without a directory yet becomes a row with status ``incomplete``
(reason ``not started``), so the summary table, its counts and ``bias-stats``'
fraction converged all see an unfinished campaign as unfinished. A realization
directory in flight (files being written by a running ``bias-run``) has no
``convergence.json`` yet and is ``incomplete`` too.

Each row's ``in_plan`` says whether its directory is one of the plan's (a manifest's
``run_ids``): a directory that is not (left by another campaign, or by a run whose
manifest was removed) is ``False`` and listed in :attr:`Progress.unplanned`, so
``bias-extract`` reports it and ``bias-stats`` leaves it out unless told otherwise;
without any manifest ``in_plan`` is empty (unknown). The realizations of a
single-realization root (``bias-run --g1-true``, whose manifest plans only the first) are
all in it.

Rows whose campaign-defining settings (config hash, method, precision) differ
within one campaign are reported as a mix (their ``summary.csv`` columns
``config_hash``, ``method``, ``precision`` tell them apart); different batch
sizes are allowed and only noted. So are rows written by more than one code version
(``summary.csv`` columns ``code_commit``, ``code_dirty``, ``code_fingerprint``: a grown
campaign whose realizations span commits), in the same line: the commits (with a dirty
flag) and counts, and whether their results may differ (the method-code fingerprints
differ, or the config hashes do) or not (one fingerprint and one config hash: the commits
changed no code that computes a result).
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from ..io.claims import held
from ..io.manifest import DEFINING, MANIFEST, read_manifest

__all__ = ["NOT_STARTED", "Progress", "campaign_progress", "mixed_warning"]

logger = logging.getLogger(__name__)

NOT_STARTED = "not started (planned in campaign.json)"


class Progress(NamedTuple):
    n_planned: int | None  # None: no manifest found (planned size unknown)
    n_complete: int  # ok or failed, of the planned ones (or of all rows without a manifest)
    n_not_started: int
    n_in_progress: int  # directories without convergence.json (in flight or interrupted)
    # setting -> {value: count}, only when > 1 value (and code_version, code_fingerprint)
    mixed: dict[str, dict[str, int]]
    batch_sizes: dict[str, int]
    problems: list[str]  # unreadable manifests
    unplanned: tuple[str, ...] = ()  # realization directories (paths) in no manifest's plan

    @property
    def finished(self) -> bool:
        return self.n_planned is not None and self.n_complete >= self.n_planned

    def line(self) -> str:
        if self.n_planned is None:
            return f"{self.n_complete} complete; planned size unknown (no campaign.json)"
        text = f"{self.n_complete} of {self.n_planned} planned realization(s) complete"
        if not self.finished:
            n_other = self.n_planned - self.n_complete - self.n_in_progress - self.n_not_started
            text += (f"; UNFINISHED: {self.n_in_progress} in progress or interrupted, "
                     f"{self.n_not_started} not started"
                     + (f", {n_other} corrupt" if n_other > 0 else ""))  # fmt: skip
        if self.unplanned:
            text += f"; {self.unplanned_line()}"
        return text

    def unplanned_line(self, first: int = 3) -> str:
        """``k realization directories not in the plan (a, b, c, ...)``, or empty."""
        if not self.unplanned:
            return ""
        ids = ", ".join(self.unplanned[:first]) + (", ..." if len(self.unplanned) > first else "")
        return (
            f"{len(self.unplanned)} realization director"
            f"{'y' if len(self.unplanned) == 1 else 'ies'} not in the plan ({ids})"
        )


def campaign_progress(
    root: str | Path, rows: Sequence[dict[str, Any]]
) -> tuple[list[dict[str, Any]], Progress]:
    """``rows`` plus one ``incomplete`` row per planned realization without a directory."""
    root = Path(root)
    homes = {root} | {(root / r["path"]).parent for r in rows if r.get("path")}
    seen = {os.path.normpath(r["path"]) for r in rows if r.get("path")}
    out, planned, problems, in_flight = list(rows), set(), [], set()
    singles: set[Path] = set()  # homes of single-realization manifests
    for home in sorted(homes):
        if not (home / MANIFEST).is_file():
            continue
        try:
            man = read_manifest(home)
        except ValueError as err:
            problems.append(str(err))
            continue
        assert man is not None
        if man["plan"].get("design") == "single":
            singles.add(home)
        ids = [str(rid) for rid in man["plan"].get("run_ids") or []]
        busy = held(home, ids)
        for rid in ids:
            rel = os.path.normpath(os.path.relpath(home / rid, root))
            planned.add(rel)
            if rel not in seen:
                why = f"in flight (claimed by pid {busy[rid]})" if rid in busy else NOT_STARTED
                out.append({"run_id": rid, "status": "incomplete", "reason": why, "path": rel})
            elif rid in busy:
                in_flight.add(rel)
    for r in rows:
        if r["status"] == "incomplete" and os.path.normpath(r.get("path") or "") in in_flight:
            r["reason"] = "in flight (being written by a running bias-run)"
    unplanned = []
    for r in rows:
        rel = os.path.normpath(r.get("path") or ".")
        if not planned and not singles:
            r["in_plan"] = None
        elif rel in planned or (root / rel).parent in singles:
            r["in_plan"] = True
        else:
            r["in_plan"] = False
            unplanned.append(rel)
    for r in out[len(rows) :]:
        r["in_plan"] = True
    done = {"ok", "failed"}
    scope = (
        [r for r in rows if os.path.normpath(r.get("path") or "") in planned] if planned else rows
    )
    n_planned = len(planned) if planned else None
    n_complete = sum(r["status"] in done for r in scope)
    finished = [r for r in rows if r["status"] in done]
    mixed = {}
    for key in DEFINING:
        c = Counter(str(r[key]) for r in finished if r.get(key) is not None)
        if len(c) > 1:
            mixed[key] = dict(c)
    mixed.update(_code_versions(finished))
    sizes = Counter(str(r["batch_size"]) for r in finished if r.get("batch_size") is not None)
    prog = Progress(
        n_planned,
        n_complete,
        sum(r.get("reason") == NOT_STARTED for r in out[len(rows) :]),
        sum(r["status"] == "incomplete" for r in scope)
        + sum(r.get("reason") != NOT_STARTED for r in out[len(rows) :]),
        mixed,
        dict(sizes),
        problems,
        tuple(sorted(unplanned)),
    )
    return out, prog


#: what rows without a code version (records from before it was recorded) count as
UNRECORDED = "unrecorded"


def _text(v: Any) -> str | None:
    return v if isinstance(v, str) and v else None


def _code_versions(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """``{"code_version": {commit[:12][+dirty]: n}, "code_fingerprint": {fingerprint: n}}``
    of ``rows`` when they hold more than one of either, else empty."""
    versions: Counter[str] = Counter()
    prints: Counter[str] = Counter()
    for r in rows:
        commit, fp = _text(r.get("code_commit")), _text(r.get("code_fingerprint"))
        if commit is None and fp is None:
            versions[UNRECORDED] += 1
        else:
            dirty = "+dirty" if r.get("code_dirty") is True else ""
            versions[f"{commit[:12]}{dirty}" if commit else "no git commit"] += 1
        prints[fp or UNRECORDED] += 1
    if len(versions) > 1 or len(prints) > 1:
        return {"code_version": dict(versions), "code_fingerprint": dict(prints)}
    return {}


def mixed_warning(mixed: Mapping[str, Mapping[str, int]]) -> str | None:
    """One line naming every campaign-defining setting that is mixed, with counts, and the
    code versions (commit[+dirty]) when the rows span several, with whether their results
    may differ."""
    if not mixed:
        return None

    def counts(c: Mapping[str, int]) -> str:
        return ", ".join(f"{v} x{n}" for v, n in c.items())

    settings = {k: c for k, c in mixed.items() if k in DEFINING}
    out = []
    if settings:
        parts = [f"{k} {counts(c)}" for k, c in settings.items()]
        out.append("mixed campaign settings: " + "; ".join(parts) + " (summary.csv columns "
                   "config_hash, method, precision tell them apart; do not fit them together)")  # fmt: skip
    versions, prints = mixed.get("code_version"), mixed.get("code_fingerprint") or {}
    if versions:
        text = f"realizations written by code versions (commit[+dirty]) {counts(versions)}: "
        if len(prints) > 1:
            text += (f"the method code differs (fingerprints {counts(prints)}), so may their "
                     "results: do not fit them together (summary.csv columns code_commit, "
                     "code_dirty, code_fingerprint tell them apart)")  # fmt: skip
        elif "config_hash" in settings:
            text += "with different config hashes, their results may differ"
        else:
            text += (f"the same method code (fingerprint {next(iter(prints), '?')}) and "
                     "config hash: results unchanged by the commits")  # fmt: skip
        out.append(text)
    return "; ".join(out) or None
