"""Running host estimators beside the device: cells drawn per batch, measured in workers.

:class:`HostEstimators` is what the engine holds when a campaign names
``inference.estimators``: :meth:`~HostEstimators.submit` draws a batch's cells (the same
realizations the device is about to infer: :func:`shearbatch.core.cells.simulate_cells`)
and hands them, in slices, to worker processes (spawned: the engine holds JAX's threads),
then returns at once; :meth:`~HostEstimators.collect`, when the batch's records are made,
waits for its slices (measured meanwhile, while the device ran) and gives each
realization's ``{name: record}``, which the engine puts into its ``convergence.json``
(:func:`with_estimates`) before the record is written, so a realization written is
complete with its estimators' results or not written at all (the resume redoes it).
"""

from __future__ import annotations

import logging
import math
import multiprocessing
import os
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

import numpy as np

from . import module

__all__ = ["HostEstimators", "default_workers", "with_estimates"]

logger = logging.getLogger(__name__)


def default_workers(cores: int | None = None) -> int:
    """Worker processes for the host estimators: every usable core but one (the engine's,
    which drives the device), at least one, at most 16."""
    if cores is None:
        try:
            cores = len(os.sched_getaffinity(0))
        except AttributeError:  # pragma: no cover - not Linux
            cores = os.cpu_count() or 1
    return max(1, min(16, cores - 1))


class HostEstimators:
    """The host estimators of a campaign (``spec.estimators``) and their worker pool."""

    def __init__(self, spec: Any, workers: int | None = None) -> None:
        self.spec = spec
        self.items = tuple(spec.estimators)
        self.workers = workers or default_workers()
        ctx = multiprocessing.get_context("spawn")
        self.pool = ProcessPoolExecutor(self.workers, mp_context=ctx)
        logger.info("host estimators %s: %d worker process(es)",
                    ", ".join(n for n, _ in self.items), self.workers)  # fmt: skip

    def submit(self, padded: Sequence[Any], n_real: int) -> list[tuple[str, list[Future]]]:
        """Draw the cells of the first ``n_real`` realizations of ``padded`` (a batch padded
        to the lane count, so the cell program compiles once) and start measuring them."""
        from ..core.cells import simulate_cells

        spec, out = self.spec, []
        quarters = [4 * r.rotation // r.n_rotations for r in padded]
        for name, settings in self.items:
            cells = simulate_cells(spec.truth, settings.cell_size, [r.seed for r in padded],
                                   [(r.g1, r.g2) for r in padded], quarters,
                                   [r.noise_stream for r in padded])  # fmt: skip
            fn, kw = module(name).measure_batch, settings.model_dump()
            step = max(1, math.ceil(n_real / self.workers))
            futs = [self.pool.submit(fn, kw, cells.images[i : i + step],
                                     cells.noise[i : i + step], cells.psf,
                                     cells.centres[i : i + step], cells.noise_sigma, cells.scale)
                    for i in range(0, n_real, step)]  # fmt: skip
            out.append((name, futs))
        return out

    @staticmethod
    def collect(pending: list[tuple[str, list[Future]]]) -> list[dict[str, Any]]:
        """Each realization's ``{name: record}``, in the batch's order (waits for them)."""
        per: list[dict[str, Any]] = []
        for name, futs in pending:
            recs = [r for f in futs for r in f.result()]
            if not per:
                per = [{} for _ in recs]
            for d, r in zip(per, recs, strict=True):
                d[name] = r
        return per

    def close(self, abandon: bool = False) -> None:
        self.pool.shutdown(wait=not abandon, cancel_futures=abandon)


def with_estimates(rec: Any, estimates: dict[str, Any]) -> Any:
    """``rec`` (:class:`shearbatch.io.writer.Record`) with ``estimates`` in its convergence
    record (``convergence.json``'s ``estimators``)."""
    conv = rec.convergence
    est = {n: {k: (float(v) if isinstance(v, np.floating) else v) for k, v in r.items()}
           for n, r in estimates.items()}  # fmt: skip
    return rec._replace(convergence=conv.replace(
        diagnostics={**conv.diagnostics, "estimators": est}))  # fmt: skip
