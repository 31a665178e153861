"""The scrub (``bias-extract --verify``): every realization read again against its checksums.

``bias-extract`` trusts a partial's row while the realization's key holds
(:func:`shearbatch.io.partials.realization_key`: its record's bytes, the size and
modification time of ``posterior.nc`` and ``truth.json``), and ``bias-stats`` reuses
``summary.csv`` while it is newer than every realization file. Neither sees a byte changed
in place with its modification time put back: the rot of a campaign archived for months.
The scrub reads every file of every realization directory, whatever the caches say, and
compares (:func:`check_realization`):

- ``convergence.json``: its own checksum (``checksums.record``, of its bytes but those 8
  digits) recomputed against the recorded one; a record without ``checksums`` is damaged
  unless its campaign predates them (:func:`shearbatch.io.integrity.unchecked_problem`),
  then ``unchecked``;
- ``truth.json``: the CRC-32 of its bytes against the record's;
- ``posterior.nc``: its size and whole-file CRC-32 against the record's; when they differ,
  each recorded variable's CRC (read raw through netCDF) too, naming those that differ.

Each damaged realization is then placed in time by the partials (:attr:`shearbatch.io.
partials.Partial.trusted`: the content checksums each extraction verified): *after
extraction* when a partial trusted it (its read then matched the checksums it now fails),
*not trusted by any extraction* otherwise (damaged before it was extracted, read
``corrupt`` then, or never extracted). A realization whose files match its record but not
what a partial trusted was rewritten whole since (redone): ``changed``, not damage. A
realization a partial trusted whose directory or record is gone is damaged after
extraction.

The scrub writes a small record beside the summary table (:func:`record_path`:
``summary.csv`` -> ``summary.verified.json``: UTC time, counts, each damage found), which
``bias-stats`` reads to say when its inputs were last verified (:func:`last_verified_line`).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from ..io import integrity
from ..io import partials as pio
from ..io.layout import CONVERGENCE, POSTERIOR, TRUTH, campaign_manifest, find_realization_dirs

__all__ = [
    "FORMAT",
    "Checked",
    "Finding",
    "ScrubReport",
    "check_realization",
    "last_verified_line",
    "read_record",
    "record_path",
    "scrub_campaign",
    "trusted_by_partials",
]

logger = logging.getLogger(__name__)

#: the format tag of the scrub's record
FORMAT = "shearbatch-verify/1"
#: the realization's files, as the findings name them; ``directory``: the whole of it
DIRECTORY = "directory"


def record_path(summary: str | Path) -> Path:
    """The scrub's record of a summary table: ``summary.csv`` -> ``summary.verified.json``."""
    p = Path(summary)
    return p.with_name(p.stem + ".verified.json")


class Finding(NamedTuple):
    """One thing that differs: the file (or :data:`DIRECTORY`) and what."""

    file: str
    what: str


class Checked(NamedTuple):
    """One realization read again: ``state`` is ``whole``, ``damaged``, ``unchecked`` (a
    record without checksums, of a campaign that predates them) or ``incomplete`` (no
    ``convergence.json``: nothing recorded to check); ``now``: the checksums its record
    holds, as a partial records what it trusted
    (:func:`shearbatch.analysis.summary_table.trusted_checksums`), None without them."""

    path: str
    state: str
    findings: list[Finding]
    now: dict[str, Any] | None


def _crc_of(path: Path) -> tuple[int, str]:
    size, crc = pio.file_crc(path)
    return size, f"{crc:08x}"


def _variables(path: Path, variables: Any) -> list[Finding]:
    """The recorded variables of ``posterior.nc`` whose bytes (read raw) differ; one line
    when netCDF cannot open it, or when every one still matches."""
    import netCDF4
    import numpy as np

    if not isinstance(variables, Mapping):
        return []
    out = []
    try:
        with netCDF4.Dataset(path, "r") as ds:
            for key, want in variables.items():
                group, _, name = str(key).rpartition("/")
                try:
                    var = ds.groups[group].variables[name] if group else ds.variables[name]
                except KeyError:
                    out.append(Finding(POSTERIOR, f"variable {key} missing"))
                    continue
                var.set_auto_maskandscale(False)
                got = integrity.array_checksum(np.asarray(var[...]))
                want = want if isinstance(want, Mapping) else {}
                if got != {k: want.get(k) for k in got}:
                    out.append(Finding(POSTERIOR, f"variable {key}: {got['dtype']}{got['shape']} "
                                       f"crc32 {got['crc32']}, recorded {want.get('dtype')}"
                                       f"{want.get('shape')} crc32 {want.get('crc32')}"))  # fmt: skip
    except Exception as err:  # netCDF4/HDF5 raise many types for a damaged file
        return [Finding(POSTERIOR, f"netCDF cannot read it ({type(err).__name__}: {err})")]
    if not out:
        out.append(Finding(POSTERIOR, "every recorded variable still matches: the damage is "
                           "outside their data (HDF5 metadata or padding)"))  # fmt: skip
    return out


def check_realization(directory: str | Path, root: str | Path) -> Checked:
    """Read one realization directory's files again against its record's checksums (module
    docstring); ``path`` relative to ``root``."""
    from .summary_table import trusted_checksums

    d = Path(directory)
    rel = os.path.normpath(os.path.relpath(d, root))
    try:
        raw = (d / CONVERGENCE).read_bytes()
    except FileNotFoundError:
        return Checked(rel, "incomplete", [], None)
    except OSError as err:
        return Checked(rel, "damaged", [Finding(CONVERGENCE, f"unreadable ({err.strerror})")], None)
    try:
        rec = json.loads(raw)
        if not isinstance(rec, dict):
            raise ValueError("not a JSON object")
    except ValueError as err:
        return Checked(rel, "damaged", [Finding(CONVERGENCE, f"not a record: {err}")], None)
    sums = rec.get(integrity.KEY)
    if not isinstance(sums, Mapping):
        why = integrity.unchecked_problem(rec, lambda: campaign_manifest(d.absolute().parent))
        if why is None:
            return Checked(rel, "unchecked", [], None)
        return Checked(rel, "damaged", [Finding(CONVERGENCE, why.split(": ", 1)[-1])], None)
    if sums.get("algorithm") != integrity.ALGORITHM:
        why = f"unknown checksum algorithm {sums.get('algorithm')!r}"
        return Checked(rel, "damaged", [Finding(CONVERGENCE, why)], None)
    found = []
    want = sums.get("record")
    got = integrity.record_checksum(raw, want)
    if got != want:
        found.append(Finding(CONVERGENCE, f"record checksum {got}, recorded {want}" if got else
                             f"its recorded checksum {want!r} is not in its bytes"))  # fmt: skip
    ok = rec.get("status") == "ok"
    try:
        got = integrity.crc((d / TRUTH).read_bytes())
        if got != sums.get("truth.json"):
            found.append(Finding(TRUTH, f"crc32 {got}, recorded {sums.get('truth.json')}"))
    except FileNotFoundError:
        if ok:
            found.append(Finding(TRUTH, "missing"))
    except OSError as err:
        found.append(Finding(TRUTH, f"unreadable ({err.strerror})"))
    post = sums.get("posterior.nc")
    if isinstance(post, Mapping):
        try:
            size, got = _crc_of(d / POSTERIOR)
            if size != post.get("bytes") or got != post.get("crc32"):
                found.append(Finding(POSTERIOR, f"{size} bytes, crc32 {got}, recorded "
                                     f"{post.get('bytes')} bytes, crc32 {post.get('crc32')}"))  # fmt: skip
                found += _variables(d / POSTERIOR, sums.get("variables"))
        except FileNotFoundError:
            if ok:
                found.append(Finding(POSTERIOR, "missing"))
        except OSError as err:
            found.append(Finding(POSTERIOR, f"unreadable ({err.strerror})"))
    return Checked(rel, "damaged" if found else "whole", found, trusted_checksums(sums))


def _check_chunk(args: tuple[list[str], str]) -> list[Checked]:
    dirs, root = args
    return [check_realization(p, root) for p in dirs]


def trusted_by_partials(folders: Sequence[Path], root: str | Path = ".",
                        ) -> tuple[dict[str, list[tuple[str, dict]]], list[str]]:  # fmt: skip
    """``({path: [(partial, trusted checksums)]}, notes)``: what each realization was
    trusted as by the partials in ``folders`` (each named relative to ``root``; name order;
    rows not read ``ok``, and partials from before trust was recorded, add nothing), and
    one note per partial that is damaged (:func:`shearbatch.io.partials.verify`) or
    unreadable: its trust is not taken."""
    out: dict[str, list[tuple[str, dict]]] = {}
    notes = []
    seen = set()
    for folder in folders:
        for path in sorted(Path(folder).glob("*.nc")):
            if path.resolve() in seen:
                continue
            seen.add(path.resolve())
            why = pio.verify(path)
            trusted = rows = None
            if why is None:
                try:
                    part = pio.Partial(path)
                    rows, trusted = part.rows, part.trusted
                except Exception as err:  # netCDF4/HDF5 raise many types for a damaged file
                    why = f"unreadable: {type(err).__name__}: {err}"
            if why is not None:
                notes.append(f"partial {path} is damaged ({why}): what it trusted is not taken; "
                             "the next bias-extract reads its realizations again")  # fmt: skip
                continue
            for row, t in zip(rows or [], trusted or [], strict=False):
                if isinstance(t, Mapping):
                    out.setdefault(os.path.normpath(str(row.get("path"))), []).append(
                        (os.path.relpath(path, root), dict(t))
                    )
    return out, notes


_FILE_KEY = {CONVERGENCE: "convergence.json", TRUTH: "truth.json", POSTERIOR: "posterior.nc"}


def _trusted_value(t: Mapping[str, Any], file: str) -> str | None:
    v = t.get(_FILE_KEY.get(file, ""))
    if isinstance(v, Mapping):
        return f"{v.get('bytes')} bytes, crc32 {v.get('crc32')}"
    return None if v is None else f"crc32 {v}"


class ScrubReport(NamedTuple):
    """What :func:`scrub_campaign` found: each realization checked, where each damaged one
    stands against the partials (``{path: partial that trusted it}``, absent: none did),
    the realizations a partial trusted whose directory is gone, notes on damaged partials,
    and the record written (None until written)."""

    checked: list[Checked]
    trusted_by: dict[str, tuple[str, dict]]
    notes: list[str]
    verified_at: str
    record: Path | None = None

    def state(self, c: Checked) -> str:
        """``c``'s state with ``changed`` for a whole one rewritten since a partial
        trusted it."""
        by = self.trusted_by.get(c.path)
        if c.state == "whole" and by is not None and by[1] != c.now:
            return "changed"
        return c.state

    @property
    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(("whole", "damaged", "changed", "unchecked", "incomplete"), 0)
        for c in self.checked:
            out[self.state(c)] += 1
        out["damaged_after_extraction"] = sum(
            1 for c in self.checked if c.state == "damaged" and c.path in self.trusted_by
        )
        return out

    @property
    def damage(self) -> list[dict[str, Any]]:
        """One entry per thing that differs: realization, file, what, and the partial that
        trusted the realization (None: no extraction did)."""
        out = []
        for c in self.checked:
            if c.state != "damaged":
                continue
            by = self.trusted_by.get(c.path)
            for f in c.findings:
                out.append({"realization": c.path, "file": f.file, "what": f.what,
                            "trusted_by": by[0] if by else None,
                            "trusted": _trusted_value(by[1], f.file) if by else None})  # fmt: skip
        return out

    @property
    def n_damaged(self) -> int:
        return self.counts["damaged"]

    def lines(self) -> list[str]:
        """The scrub's printed report: one line of counts, one per damage found."""
        n = self.counts
        out = [f"verified {len(self.checked)} realization(s), every file read again against its "
               f"checksums: {n['whole']} whole, {n['damaged']} damaged "
               f"({n['damaged_after_extraction']} after extraction), {n['changed']} changed "
               f"since extraction, {n['unchecked']} without checksums, {n['incomplete']} not "
               "complete" + (f" -> {self.record}" if self.record else "")]  # fmt: skip
        for e in self.damage:
            if e["trusted_by"] is None:
                when = "not trusted by any extraction: damaged before it, or never extracted"
            elif e["trusted"] is not None:
                when = f"after extraction: {e['trusted_by']} trusted {e['trusted']}"
            else:
                when = f"after extraction: {e['trusted_by']} trusted the realization whole"
            out.append(f"damaged: {e['realization']}/{e['file']}: {e['what']} ({when})")
        for c in self.checked:
            if self.state(c) == "changed":
                out.append(f"changed: {c.path}: rewritten whole since "
                           f"{self.trusted_by[c.path][0]} trusted it (redone?); bias-extract "
                           "reads it again when its key changed")  # fmt: skip
        return out + self.notes

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "verified_at": self.verified_at,
                "realizations": len(self.checked), **self.counts,
                "damage": self.damage}  # fmt: skip


def _pick(entries: list[tuple[str, dict]], now: dict[str, Any] | None) -> tuple[str, dict]:
    """Of the partials that trusted a realization, one that trusted what its record now
    says (the content was then whole against these checksums), else the first."""
    return next((e for e in entries if e[1] == now), entries[0])


def scrub_campaign(root: str | Path, summary: str | Path, workers: int = 1) -> ScrubReport:
    """The scrub of the campaign under ``root`` (module docstring), read by ``workers``
    CPU-only processes; its record is written beside ``summary``
    (:func:`record_path`; ``OSError`` when it cannot be)."""
    from ..io import atomic
    from .summary_table import map_cpu_only, plan_chunks

    root, summary = Path(root), Path(summary)
    when = datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    dirs = find_realization_dirs(root)
    chunks, parallel = plan_chunks(dirs, workers)
    args = [(c, str(root)) for c in chunks]
    checked = []
    for part in (map_cpu_only(_check_chunk, args, workers) if parallel
                 else map(_check_chunk, args)):  # fmt: skip
        checked += part
    folders = [root / pio.PARTIALS, summary.with_name(summary.stem + ".partials")]
    trusts, notes = trusted_by_partials([f for f in folders if f.is_dir()], root)
    by = {}
    found = set()
    for i, c in enumerate(checked):
        found.add(c.path)
        if c.path in trusts:
            by[c.path] = _pick(trusts[c.path], c.now)
            if c.state == "incomplete":  # its record gone since an extraction trusted it
                checked[i] = c._replace(state="damaged",
                                        findings=[Finding(CONVERGENCE, "missing")])  # fmt: skip
    for path in sorted(set(trusts) - found):  # a directory gone since it was trusted
        checked.append(Checked(path, "damaged", [Finding(DIRECTORY, "missing")], None))
        by[path] = trusts[path][0]
    rep = ScrubReport(checked, by, notes, when)
    for e in rep.damage:
        logger.warning("damaged: %s/%s: %s", e["realization"], e["file"], e["what"])
    path = atomic.write_text(record_path(summary), json.dumps(rep.to_json(), indent=1) + "\n")
    return rep._replace(record=path)


def read_record(summary: str | Path) -> dict[str, Any] | None:
    """The scrub's record beside ``summary`` (None when there is none); ``ValueError`` or
    ``OSError`` when it cannot be read."""
    path = record_path(summary)
    if not path.is_file():
        return None
    doc = json.loads(path.read_text())
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f"not a {FORMAT} record")
    return doc


def last_verified_line(summary: str | Path) -> str:
    """``bias-stats``' line on its inputs' last scrub: when, how many realizations, how many
    damaged; or that they were never verified."""
    try:
        doc = read_record(summary)
    except (OSError, ValueError) as err:
        return f"inputs' verification record {record_path(summary)} unreadable ({err})"
    if doc is None:
        return ("inputs never verified (bias-extract --verify reads every realization again "
                "against its checksums)")  # fmt: skip
    after = doc.get("damaged_after_extraction")
    tail = f" ({after} after extraction)" if after else ""
    return (f"inputs last verified {doc.get('verified_at')}: {doc.get('realizations')} "
            f"realization(s), {doc.get('damaged')} damaged{tail}")  # fmt: skip
