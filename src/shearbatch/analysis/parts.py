"""A summary table in parts that share no seed, for stage 3 in memory set by a part.

Every number ``bias-stats`` reports is a function of per-seed sums (the fits and their
jackknife and bootstrap over seeds), of counts (coverage, exclusions, warnings), of the
distinct rank values with their counts (SBC), or of rows of one seed together (rings,
pairs, the host estimators' ring responses). So a table split into parts by seed, each
part measured alone (:mod:`shearbatch.analysis.bias`' pass over a part) and the parts'
sums merged in seed order, gives the numbers of the whole table: the same sums in the
same order, so the same bootstrap resamples (tests/analysis/test_parts.py holds the
parts' result to the whole table's, bit for bit).

- :class:`InMemory`: a DataFrame, one part (``bias-stats`` on a table that fits in a
  part, the API, the tests).
- :class:`SummaryParts`: a ``summary.csv`` larger than :data:`PART_BYTES`, split once by
  a hash of its ``seed`` cell into ``ceil(size / PART_BYTES)`` CSV files in a temporary
  folder (each with the header; rows in their file order; the text copied as it is, so
  each part reads back as :func:`~shearbatch.analysis.extract.read_summary` reads the
  whole file), each read when its pass reaches it. Peak memory: one part's table and
  its copies, plus the per-seed sums; the split itself holds one row at a time.
"""

from __future__ import annotations

import csv
import logging
import math
import os
import shutil
import sys
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["PART_BYTES", "InMemory", "SummaryParts", "open_table"]

logger = logging.getLogger(__name__)

#: the largest summary.csv read whole; a larger one is split into parts of about this
#: size (a Level 2 row is ~730 bytes of text, ~1 kB as a table: ~45,000 realizations, a
#: few hundred MB with the analysis' copies)
PART_BYTES = 32 * 2**20


class InMemory:
    """A summary table already in memory: one part."""

    def __init__(self, df: Any):
        self.df = df
        self.n_parts = 1

    def frames(self) -> Iterator[Any]:
        yield self.df

    def close(self) -> None:
        pass

    def __enter__(self) -> InMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SummaryParts:
    """A ``summary.csv`` split by seed into ``n_parts`` files under a temporary folder
    (removed by :meth:`close`, or leaving the ``with`` block)."""

    def __init__(self, path: str | Path, n_parts: int, tmp: str | Path | None = None):
        self.path = Path(path)
        self.n_parts = int(n_parts)
        self.dir = Path(tempfile.mkdtemp(prefix="shearbatch-stats-", dir=tmp))
        self.files = [self.dir / f"part{i:04d}.csv" for i in range(self.n_parts)]
        try:
            self._split()
        except BaseException:
            self.close()
            raise

    def _split(self) -> None:
        csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
        with open(self.path, newline="") as fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            if header is None:
                raise ValueError("empty file: no header")
            if "seed" not in header:
                raise ValueError("missing columns: seed")
            at = header.index("seed")
            outs = [open(f, "w", newline="") for f in self.files]
            try:
                writers = [csv.writer(o) for o in outs]
                for w in writers:
                    w.writerow(header)
                n = self.n_parts
                for row in reader:
                    key = row[at] if at < len(row) else ""
                    writers[zlib.crc32(_seed_key(key).encode()) % n].writerow(row)
            finally:
                for o in outs:
                    o.close()
        logger.info("bias-stats: %s split by seed into %d parts", self.path, self.n_parts)

    def frames(self) -> Iterator[Any]:
        from .extract import read_summary

        for f in self.files:
            yield read_summary(f)

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> SummaryParts:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _seed_key(text: str) -> str:
    """The seed cell as the part key: ``12`` and ``12.0`` (a column with an empty cell is
    written as floats by some tools) in one part."""
    t = text.strip()
    if t.endswith(".0") and t[:-2].lstrip("-").isdigit():
        return t[:-2]
    return t


def open_table(path: str | Path, part_bytes: int | None = None) -> InMemory | SummaryParts:
    """``path`` (a summary.csv) as parts: whole (:class:`InMemory`) when it is at most
    ``part_bytes`` (default :data:`PART_BYTES`, or the environment's
    ``SHEARBATCH_STATS_PART_BYTES``), else split by seed (:class:`SummaryParts`, in
    ``$TMPDIR``). ``ValueError`` / ``OSError`` when it cannot be read."""
    from .extract import read_summary

    limit = part_bytes or int(os.environ.get("SHEARBATCH_STATS_PART_BYTES") or PART_BYTES)
    size = Path(path).stat().st_size
    if size <= limit:
        return InMemory(read_summary(path))
    return SummaryParts(path, math.ceil(size / limit))
