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
  part, :func:`~shearbatch.analysis.bias.measure_bias` given a DataFrame, the API, the
  tests).
- :class:`SummaryParts`: a ``summary.csv`` larger than :data:`PART_BYTES`, split once by
  a hash of its ``seed`` cell into ``ceil(size / PART_BYTES)`` CSV files in a temporary
  folder (each with the header; rows in their file order; the text copied as it is, so
  each part reads back as :func:`~shearbatch.analysis.summary_table.read_summary` reads the
  whole file), each read when its pass reaches it. Peak memory: one part's table and
  its copies, plus the per-seed sums; the split itself holds one row at a time.

What a pass over one part gives is a typed record with an associative ``merge`` and an
identity ``empty()``, so stage 3 is a fold over the parts
(:func:`shearbatch.analysis.bias.measure_bias`):

- :class:`PartScan` (pass 1, :func:`shearbatch.analysis.bias.scan_part`): scope and status
  counts, what resolves and checks the point estimate, the bad truths, the host
  estimators present, the failures by flag, the worst-converged candidates;
- :class:`PartSums` (pass 2, :func:`shearbatch.analysis.bias.measure_part`): the usable
  rows' counts, the per-seed sums of every estimator (:class:`CompSums`,
  :class:`~shearbatch.analysis.bias_fits.SeedSums`), the coverage and rank counts
  (:class:`IntervalCount`, :class:`RankCounts`), the notes' inputs, the host estimators'
  sums (:class:`~shearbatch.analysis.compare.EstimatorSums`), the residual figure's sample.

Counts and sums are merged exactly (integers, per-seed rows copied in seed order, arrays
concatenated in part order); the few DataFrames (the worst candidates, the sample, the
pooled fit's rows) are kept per part and concatenated once, as pandas resolves a column's
type over all of them.
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
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar

import numpy as np

from .bias_fits import SeedSums
from .bias_fits import first_given as _first
from .bias_fits import merged_range as _range

if TYPE_CHECKING:
    from .compare import EstimatorSums

__all__ = [
    "PART_BYTES",
    "BadTruth",
    "CompSums",
    "Counts",
    "InMemory",
    "IntervalCount",
    "PartScan",
    "PartSums",
    "PerComp",
    "PerPoint",
    "RankCounts",
    "SummaryParts",
    "open_table",
]

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
        from .summary_table import read_summary

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
    from .summary_table import read_summary

    limit = part_bytes or int(os.environ.get("SHEARBATCH_STATS_PART_BYTES") or PART_BYTES)
    size = Path(path).stat().st_size
    if size <= limit:
        return InMemory(read_summary(path))
    return SummaryParts(path, math.ceil(size / limit))


# ------------------------------------------------------------- what a pass over a part gives

T = TypeVar("T")


class PerComp(NamedTuple, Generic[T]):
    """One value per shear component (``getattr(x, "g1")``)."""

    g1: T
    g2: T


class PerPoint(NamedTuple, Generic[T]):
    """One value per point estimate (:data:`shearbatch.analysis.bias.POINT_ESTIMATES`)."""

    mean: T
    median: T
    mode: T


@dataclass(frozen=True)
class Counts:
    """Counts by label (exclusion reasons, warning flags, failures by flag), the labels in
    the order first met; merged by adding."""

    items: tuple[tuple[str, int], ...] = ()

    @classmethod
    def of(cls, counts: Mapping[str, int]) -> Counts:
        return cls(tuple(counts.items()))

    def merge(self, other: Counts) -> Counts:
        tot = dict(self.items)
        for k, v in other.items:
            tot[k] = tot.get(k, 0) + v
        return Counts(tuple(tot.items()))

    def get(self, label: str) -> int:
        return next((v for k, v in self.items if k == label), 0)

    def labels(self) -> list[str]:
        return [k for k, _ in self.items]


class BadTruth(NamedTuple):
    """``ok`` rows with a non-finite truth of one component, and the first one's run_id."""

    n: int = 0
    first: str | None = None

    def merge(self, other: BadTruth) -> BadTruth:
        return BadTruth(self.n + other.n, self.first if self.n else other.first)


@dataclass(frozen=True, eq=False)
class PartScan:
    """Pass 1 over a part (:func:`shearbatch.analysis.bias.scan_part`)."""

    columns: tuple[str, ...] | None
    """The table's header (of the first part merged; None: no part)."""
    failures: Counts
    """:func:`shearbatch.analysis.report_text.failures_by_flag` (all rows)."""
    worst: tuple[Any, ...]
    """Each part's :func:`shearbatch.analysis.plots.worst_rows` table, in part order."""
    n_unplanned: int
    n_planned: int
    n_complete: int
    unfinished: bool
    n_ok: int
    n_failed: int
    n_incomplete: int
    n_corrupt: int
    estimates: frozenset[str]
    """The ``point_estimate`` values of the rows judged."""
    has_mode: bool
    """Some ``g1_mode`` cell is set."""
    n_empty: PerPoint[int]
    """Per point estimate: converged ``ok`` rows with a finite mean but not that estimate
    (0 without its columns)."""
    present: PerPoint[frozenset[str]]
    """Per point estimate: the host estimators present in the rows it would use."""
    bad_truth: PerComp[BadTruth]

    @classmethod
    def empty(cls) -> PartScan:
        """No rows: the identity of :meth:`merge`."""
        none = frozenset()
        return cls(None, Counts(), (), 0, 0, 0, False, 0, 0, 0, 0, none, False,
                   PerPoint(0, 0, 0), PerPoint(none, none, none),
                   PerComp(BadTruth(), BadTruth()))  # fmt: skip

    def merge(self, other: PartScan) -> PartScan:
        return PartScan(
            _first(self.columns, other.columns), self.failures.merge(other.failures),
            self.worst + other.worst, self.n_unplanned + other.n_unplanned,
            self.n_planned + other.n_planned, self.n_complete + other.n_complete,
            self.unfinished or other.unfinished, self.n_ok + other.n_ok,
            self.n_failed + other.n_failed, self.n_incomplete + other.n_incomplete,
            self.n_corrupt + other.n_corrupt, self.estimates | other.estimates,
            self.has_mode or other.has_mode,
            PerPoint(*(a + b for a, b in zip(self.n_empty, other.n_empty, strict=True))),
            PerPoint(*(a | b for a, b in zip(self.present, other.present, strict=True))),
            PerComp(*(a.merge(b) for a, b in zip(self.bad_truth, other.bad_truth,
                                                 strict=True))),
        )  # fmt: skip


@dataclass(frozen=True, eq=False)
class CompSums:
    """One component's fit inputs over complete rings: the rows, the truths' range, and
    the per-seed sums of the regression, the constant-truth offset and the +g/-g pairs."""

    n: int
    range: tuple[float, float, float] | None
    """``(min, max, first)`` of the truths (None: no row)."""
    regression: SeedSums
    offset: SeedSums
    paired: SeedSums | None
    """None: no part had the pair columns."""
    n_pairs: int
    flipped: bool
    """Every part with the pair columns has its truths flipped within pairs."""

    @classmethod
    def empty(cls) -> CompSums:
        return cls(0, None, SeedSums.empty(), SeedSums.empty(), None, 0, True)

    def merge(self, other: CompSums) -> CompSums:
        paired = (self.paired if other.paired is None else other.paired
                  if self.paired is None else self.paired.merge(other.paired))  # fmt: skip
        return CompSums(self.n + other.n, _range(self.range, other.range),
                        self.regression.merge(other.regression),
                        self.offset.merge(other.offset), paired,
                        self.n_pairs + other.n_pairs, self.flipped and other.flipped)  # fmt: skip


@dataclass(frozen=True)
class IntervalCount:
    """A posterior interval's coverage counts: rows, whether every bound is finite and
    every upper bound above its lower, truths inside."""

    n: int = 0
    finite: bool = True
    ordered: bool = True
    inside: int = 0

    def merge(self, other: IntervalCount) -> IntervalCount:
        return IntervalCount(self.n + other.n, self.finite and other.finite,
                             self.ordered and other.ordered, self.inside + other.inside)  # fmt: skip


def _interval(a: IntervalCount | None, b: IntervalCount | None) -> IntervalCount | None:
    """None (the quantile columns missing in a part) absorbs."""
    return None if a is None or b is None else a.merge(b)


@dataclass(frozen=True, eq=False)
class RankCounts:
    """A component's distinct finite SBC ranks (sorted), their counts, and the seeds they
    come from."""

    values: np.ndarray
    counts: np.ndarray
    n_seeds: int

    @classmethod
    def empty(cls) -> RankCounts:
        return cls(np.zeros(0), np.zeros(0, dtype=np.int64), 0)

    def merge(self, other: RankCounts) -> RankCounts:
        vals = np.concatenate([self.values, other.values])
        counts = np.concatenate([self.counts, other.counts])
        uniq, inv = np.unique(vals, return_inverse=True)
        merged = np.bincount(inv, weights=counts, minlength=len(uniq)).astype(np.int64)
        return RankCounts(uniq, merged, self.n_seeds + other.n_seeds)


def _ranks(a: RankCounts | None, b: RankCounts | None) -> RankCounts | None:
    """None (the rank column missing in a part) absorbs."""
    return None if a is None or b is None else a.merge(b)


def _estimators(a: EstimatorSums | None, b: EstimatorSums | None) -> EstimatorSums | None:
    if a is None or b is None:
        return _first(a, b)
    return a.merge(b)


@dataclass(frozen=True, eq=False)
class PartSums:
    """Pass 2 over a part holding whole seeds (:func:`shearbatch.analysis.bias.measure_part`).
    Parts without usable rows leave ``prior_flag``, ``estimates``, ``noise_inputs`` and
    ``snr`` as the identity does."""

    n_used: int
    n_seeds: int
    excluded: Counts
    """:func:`shearbatch.analysis.bias.usable_rows`' exclusion counts."""
    usable: Any
    """The usable rows, kept when the table is measured whole (else None)."""
    has_pairs: bool
    """Complete +g/-g pairs among the usable rows."""
    incomplete: int
    """Usable rows of incomplete rings, left out of the fits."""
    fits: PerComp[CompSums]
    coverage: PerComp[tuple[IntervalCount | None, ...]]
    """Per component, per :data:`shearbatch.analysis.bias.COVERAGE_LEVELS` (None: the
    quantile columns missing)."""
    prior_flag: bool
    """Every usable row's truth was drawn from the inference prior."""
    ranks: PerComp[RankCounts | None]
    """None: the rank column missing."""
    rotations: int | None
    """The largest ring size (None: no part)."""
    design_pairs: bool
    warnings: Counts
    """:func:`shearbatch.analysis.bias.warning_counts` of the usable rows."""
    shrinkage: PerComp[np.ndarray]
    """The finite prior shrinkage pulls."""
    estimates: frozenset[str]
    """The usable rows' ``point_estimate`` values."""
    noise_inputs: bool
    """Every part with usable rows has the ``point_estimate`` and ``snr`` columns."""
    snr: np.ndarray
    """The usable rows' finite S/N."""
    method: str | None
    """The first usable row's inference method."""
    compare: EstimatorSums | None
    """The host estimators' sums (None: none present)."""
    pooled_rows: tuple[Any, ...]
    """Each part's rows for the pooled fit (:data:`shearbatch.analysis.pooled.FIT_COLUMNS`
    and ``_in_pair``), when asked for."""
    sample: tuple[Any, ...]
    """Each part's rows of the residual figure's sample."""
    stamp_runs: tuple[str, ...]
    """The first three used realizations of distinct seeds."""

    @classmethod
    def empty(cls) -> PartSums:
        """No rows: the identity of :meth:`merge`."""
        none = np.zeros(0)
        return cls(0, 0, Counts(), None, False, 0, PerComp(CompSums.empty(), CompSums.empty()),
                   PerComp((IntervalCount(), IntervalCount()), (IntervalCount(), IntervalCount())),
                   True, PerComp(RankCounts.empty(), RankCounts.empty()), None, False, Counts(),
                   PerComp(none, none), frozenset(), True, none, None, None, (), (), ())  # fmt: skip

    def merge(self, other: PartSums) -> PartSums:
        rot = (self.rotations if other.rotations is None else other.rotations
               if self.rotations is None else max(self.rotations, other.rotations))  # fmt: skip
        return PartSums(
            self.n_used + other.n_used, self.n_seeds + other.n_seeds,
            self.excluded.merge(other.excluded), _first(self.usable, other.usable),
            self.has_pairs or other.has_pairs, self.incomplete + other.incomplete,
            PerComp(*(a.merge(b) for a, b in zip(self.fits, other.fits, strict=True))),
            PerComp(*(tuple(_interval(x, y) for x, y in zip(a, b, strict=True))
                      for a, b in zip(self.coverage, other.coverage, strict=True))),
            self.prior_flag and other.prior_flag,
            PerComp(*(_ranks(a, b) for a, b in zip(self.ranks, other.ranks, strict=True))),
            rot, self.design_pairs or other.design_pairs, self.warnings.merge(other.warnings),
            PerComp(*(np.concatenate([a, b]) for a, b in zip(self.shrinkage, other.shrinkage,
                                                             strict=True))),
            self.estimates | other.estimates, self.noise_inputs and other.noise_inputs,
            np.concatenate([self.snr, other.snr]), _first(self.method, other.method),
            _estimators(self.compare, other.compare), self.pooled_rows + other.pooled_rows,
            self.sample + other.sample, (self.stamp_runs + other.stamp_runs)[:3],
        )  # fmt: skip
