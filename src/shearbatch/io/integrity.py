"""What tells a damaged realization from a whole one: checksums written with its files.

The writer records, in ``convergence.json`` (written last) under ``checksums``
(:func:`checksums`):

- ``algorithm``: ``"crc32"`` (:func:`zlib.crc32`, 8 hex digits; damage from a bad copy,
  a truncation or another tool, not an adversary, is what it tells);
- ``record`` (last): of ``convergence.json``'s own bytes, but these 8 digits
  (:func:`seal`, :func:`record_checksum`), so a ``convergence.json`` that parses but was
  edited (a batch size, a status, a recorded shape or checksum; rewritten in another
  layout too) is told;
- ``truth.json``: of that file's bytes;
- ``posterior.nc``: ``{"bytes": size, "crc32": ...}`` of the whole file;
- ``variables``: ``{"<group>/<name>": {"shape", "dtype", "crc32"}}`` of each variable's
  bytes as written (the coordinate variables aside): deterministic from the data, so a
  resumed realization records the same values.

:func:`json_problem` (the two JSON files; microseconds) and :func:`file_problem` (one
sequential read and CRC of ``posterior.nc``, no netCDF open) run in
:func:`shearbatch.io.layout.inspect_realization`, i.e. for the resume of ``bias-run`` and
for ``bias-extract``; :func:`dataset_problem` (each variable's shape, dtype and CRC, and
the file's attributes against ``truth.json``) runs in ``bias-extract``'s netCDF4 read.

**A record without checksums** (no ``checksums`` key, or not a mapping) is checked no
further only in a campaign written before checksums existed; anywhere else the
realization is ``corrupt`` (:func:`unchecked_problem`, in
:func:`~shearbatch.io.layout.inspect_realization`: for the resume and ``bias-extract``
alike), its reason one line naming the missing key and why it is required. Which
version wrote a campaign is told by its manifest, the ``campaign.json`` beside the
realization's directory (the shearbatch version it records is no help: it did not change
when checksums came):

- a manifest with ``record_format`` (:data:`FORMAT_KEY`; :data:`RECORD_FORMAT` = 2, written
  since the records carry the code version too) was written by a version that records
  checksums: none is exempt. A campaign grown by a later version keeps its first
  manifest's ``record_format`` (or its absence) and ``created_at``;
- a manifest without ``record_format`` predates that key; it predates checksums when its
  ``created_at`` (UTC, written by every version) is before :data:`CHECKSUMS_SINCE`, the
  commit (d8f6965) that made the writer record them. Only then is a record without
  checksums read as before (its attributes still checked against ``truth.json``). A
  campaign started after that time by an older checkout is told as current: its
  realizations are ``corrupt`` and a resume redoes them;
- no manifest (or one that cannot be read): nothing says the campaign predates
  checksums, so none is exempt (every ``bias-run`` writes ``campaign.json``, since before
  checksums existed; a directory copied without it, or written through the library by
  :func:`~shearbatch.io.write_realization`, which always records them, is not exempt);
- a record that carries ``code`` (the code version that wrote it:
  :func:`shearbatch._version.code_version`) was written by a version that records
  checksums: it is never exempt, whatever its manifest says.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "ALGORITHM",
    "CHECKSUMS_SINCE",
    "FORMAT_KEY",
    "KEY",
    "RECORD_FORMAT",
    "array_checksum",
    "bytes_checksum",
    "checksums",
    "crc",
    "dataset_problem",
    "file_checksum",
    "file_problem",
    "json_problem",
    "nonfinite_problem",
    "record_checksum",
    "seal",
    "truth_problem",
    "unchecked_problem",
]

ALGORITHM = "crc32"
#: the key of ``convergence.json`` holding them
KEY = "checksums"
#: the key of ``campaign.json`` saying what its realizations' records carry
FORMAT_KEY = "record_format"
#: 2: every record carries ``checksums`` and ``code`` (absent: a manifest from before)
RECORD_FORMAT = 2
#: when the writer began to record checksums (commit d8f6965's time): a manifest without
#: :data:`FORMAT_KEY` created before it was written by a version that did not
CHECKSUMS_SINCE = datetime(2026, 11, 26, 15, 0, 49, tzinfo=UTC)


def crc(data: bytes | memoryview) -> str:
    return f"{zlib.crc32(data) & 0xFFFFFFFF:08x}"


def _raw(arr: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(arr)
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    return a


def array_checksum(arr: np.ndarray) -> dict[str, Any]:
    """``{"shape", "dtype", "crc32"}`` of an array's little-endian C-order bytes."""
    a = _raw(arr)
    return {"shape": list(a.shape), "dtype": a.dtype.name, "crc32": crc(a.data if a.size else b"")}


#: the record's own checksum while it is computed (:func:`seal`)
_PLACEHOLDER = "0" * 8


def _pattern(value: str) -> bytes:
    return f'"record": "{value}"'.encode()


def seal(text: str) -> str:
    """``convergence.json``'s text, written with ``checksums.record`` = ``00000000`` (its
    last ``"record": "..."``), with that placeholder replaced by the CRC of the text as it
    is: the record checksum covers every byte of the file but its own 8 digits."""
    at = text.rfind(_pattern(_PLACEHOLDER).decode())
    if at < 0:
        raise ValueError("no checksums.record placeholder in the record")
    at += len('"record": "')
    return text[:at] + crc(text.encode()) + text[at + len(_PLACEHOLDER) :]


def record_checksum(data: bytes, value: str) -> str | None:
    """The CRC of ``convergence.json``'s bytes ``data`` with its recorded ``value`` (the
    last ``"record": "<value>"``) put back to the placeholder; None when it is not there."""
    at = data.rfind(_pattern(value)) if isinstance(value, str) and len(value) == 8 else -1
    if at < 0:
        return None
    at += len('"record": "')
    return crc(data[:at] + _PLACEHOLDER.encode() + data[at + len(_PLACEHOLDER) :])


def bytes_checksum(data: bytes | memoryview | np.ndarray) -> dict[str, Any]:
    """The whole-file checksum of a file whose bytes are ``data``."""
    return {"bytes": len(data), "crc32": crc(data)}


def file_checksum(path: str | Path) -> dict[str, Any]:
    with open(path, "rb") as fh:
        return bytes_checksum(fh.read())


def checksums(*, truth_text: str, posterior: Mapping[str, Any],
              variables: Mapping[str, Any]) -> dict[str, Any]:  # fmt: skip
    """The ``checksums`` entry of a record (see the module docstring), ``record`` last and
    still the placeholder: the record is to be the last key and its text :func:`seal`-ed."""
    return {
        "algorithm": ALGORITHM,
        "truth.json": crc(truth_text.encode()),
        "posterior.nc": dict(posterior),
        "variables": dict(variables),
        "record": _PLACEHOLDER,
    }


def _sums(rec: Mapping[str, Any]) -> Mapping[str, Any] | None:
    s = rec.get(KEY)
    return s if isinstance(s, Mapping) else None


def json_problem(rec: Mapping[str, Any], rec_bytes: bytes, truth_bytes: bytes | None) -> str | None:
    """Why an ``ok`` record (parsed, and its file's bytes) or its ``truth.json`` is
    damaged (their checksums), or None; None for a record without checksums."""
    sums = _sums(rec)
    if sums is None:
        return None
    if sums.get("algorithm") != ALGORITHM:
        return f"convergence.json: unknown checksum algorithm {sums.get('algorithm')!r}"
    want = sums.get("record")
    if record_checksum(rec_bytes, want) != want:
        return "convergence.json: checksum mismatch (edited or damaged)"
    if truth_bytes is not None and crc(truth_bytes) != sums.get("truth.json"):
        return "truth.json: checksum mismatch (edited or damaged)"
    return None


def _created(manifest: Mapping[str, Any]) -> datetime | None:
    try:
        t = datetime.fromisoformat(str(manifest.get("created_at")))
    except ValueError:
        return None
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


def unchecked_problem(
    rec: Mapping[str, Any], campaign: Callable[[], Mapping[str, Any] | str | None]
) -> str | None:
    """Why the record ``rec`` is damaged for want of checksums (one line naming the key),
    or None: it has them, or it is exempt (module docstring). ``campaign()``: its
    campaign's ``campaign.json`` (parsed), None when there is none, or a string saying why
    it cannot be read; called only for a record without checksums."""
    if _sums(rec) is not None:
        return None
    head = (f"convergence.json: {KEY} is not a mapping" if KEY in rec
            else f"convergence.json: no {KEY} key")  # fmt: skip
    if "code" in rec:
        return f"{head} (its code key says a version that writes them wrote it)"
    man = campaign()
    if man is None:
        return f"{head} (no campaign.json beside it says its campaign predates checksums)"
    if isinstance(man, str):
        return f"{head} (campaign.json unreadable: {man})"
    if FORMAT_KEY in man:
        return f"{head} (campaign.json: {FORMAT_KEY} {man[FORMAT_KEY]!r}, written with them)"
    created = _created(man)
    if created is None:
        return f"{head} (campaign.json: no created_at to tell it predates checksums)"
    if created >= CHECKSUMS_SINCE:
        return (f"{head} (campaign.json created {man.get('created_at')}, after checksums "
                f"were written, since {CHECKSUMS_SINCE.isoformat()})")  # fmt: skip
    return None


def truth_problem(truth: Mapping[str, Any], **expect: Any) -> str | None:
    """The first of ``expect`` (``run_id``, ``seed``, ``g1``, ``g2``: what the plan, the
    record or the directory says) that ``truth.json`` contradicts, or None; None values
    are not compared."""
    for key, want in expect.items():
        got = truth.get(key)
        if want is None or got is None:
            continue
        if isinstance(want, float) or isinstance(got, float):
            try:
                same = float(got) == float(want)
            except (TypeError, ValueError):
                same = False
        else:
            same = got == want
        if not same:
            return f"truth.json: {key} is {got!r}, expected {want!r}"
    return None


def file_problem(path: str | Path, rec: Mapping[str, Any]) -> str | None:
    """Why ``posterior.nc`` differs from its recorded size and whole-file CRC, or None
    (None for a record without checksums). One sequential read: no netCDF open."""
    sums = _sums(rec)
    want = sums.get("posterior.nc") if sums is not None else None
    if not isinstance(want, Mapping):
        return None
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        return f"posterior.nc unreadable ({err.strerror})"
    if len(data) != want.get("bytes"):
        return f"posterior.nc: {len(data)} bytes, {want.get('bytes')} written"
    if crc(data) != want.get("crc32"):
        return "posterior.nc: checksum mismatch (damaged or rewritten)"
    return None


_ATTRS = {"run_id": "run_id", "seed": "seed", "g1_true": "g1", "g2_true": "g2"}


def dataset_problem(
    ds, sums: Mapping[str, Any] | None, truth: Mapping[str, Any] | None
) -> str | None:
    """Why the open netCDF4 dataset ``ds`` of ``posterior.nc`` is damaged (``sums``: the
    record's ``checksums``, None for an older record): a recorded
    variable missing or of another shape, dtype or CRC (a non-finite draw named as such),
    or root attributes (run_id, seed, g1_true, g2_true) contradicting ``truth.json``; None
    when whole. Variables are read raw (no masking or scaling)."""
    attrs = {k: ds.getncattr(k) for k in _ATTRS if k in ds.ncattrs()}
    if truth:
        for a, t in _ATTRS.items():
            v = attrs.get(a)
            v = v.item() if isinstance(v, np.generic) else v
            if why := truth_problem(truth, **{t: v}):
                return f"posterior.nc attribute {a} is {v!r}; {why}"
    variables = sums.get("variables") if isinstance(sums, Mapping) else None
    if not isinstance(variables, Mapping):
        return None
    for key, want in variables.items():
        group, _, name = str(key).rpartition("/")
        try:
            var = ds.groups[group].variables[name]
        except KeyError:
            return f"posterior.nc: {key} missing"
        if not isinstance(want, Mapping):
            return f"convergence.json: checksum of {key} malformed"
        if list(var.shape) != want.get("shape") or var.dtype.name != want.get("dtype"):
            return (f"posterior.nc: {key} is {var.dtype.name}{list(var.shape)}, "
                    f"{want.get('dtype')}{want.get('shape')} written")  # fmt: skip
        var.set_auto_maskandscale(False)
        try:
            data = np.asarray(var[...])
        finally:  # the caller may read it decoded
            var.set_auto_maskandscale(True)
        if array_checksum(data)["crc32"] != want.get("crc32"):
            if data.dtype.kind == "f" and not np.all(np.isfinite(data)):
                n = int(np.sum(~np.isfinite(data)))
                return f"posterior.nc: {key} holds {n} non-finite value(s) not written"
            return f"posterior.nc: {key} checksum mismatch (damaged)"
    return None


def nonfinite_problem(name: str, x: np.ndarray) -> str | None:
    """A one-line reason when draws ``x`` of ``name`` are not all finite."""
    bad = int(np.sum(~np.isfinite(x)))
    return f"posterior.nc: {bad} non-finite draw(s) of {name}" if bad else None
