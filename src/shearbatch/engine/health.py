"""A batch's health: results a healthy program never gives are not written (issue 54).

On one H200 at 4,096 lanes the Level 2 program computed every galaxy's importance
weights from an unscaled inverse FFT (XLA's 32-bit element count, openxla/xla#45009;
:mod:`shearbatch.core.limits` now keeps every tensor below it): every one of 131,072
galaxies had its weights on a single draw (importance ESS 1 of 200), m came out near
-0.1 to -0.17, and the campaign completed without a word.

:func:`check_batch` looks at what a batch's program returned, before any of its
realizations is written: a batch in which more than :data:`COLLAPSED_BATCH_MAX` of the
galaxies have their importance weights collapsed (an effective sample size below
:data:`COLLAPSED_ESS_DRAWS` draws: one draw carries all the weight) is not the output of
a healthy program. ``bench/bench_health.py`` measured the healthy rate of such galaxies
at every S/N the shipped configs run the interim model at (Level 2 and the survey
configs at S/N 15, 30 and 100): ``results/benchmarks/health.json``; the threshold is far
above it (``tests/engine/test_health.py`` checks the record against it). The engine then
stops with one line (:class:`UnhealthyBatch`, ``bias-run`` exit 5) after the writes of
the batches before it have ended: nothing already written is lost, the batch is
absent, and the same command resumes from it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["COLLAPSED_BATCH_MAX", "COLLAPSED_ESS_DRAWS", "UnhealthyBatch", "check_batch",
           "collapsed_fraction"]  # fmt: skip

#: a galaxy's importance weights have collapsed when their effective sample size is below
#: this many draws (exactly 1.0: one draw carries every weight)
COLLAPSED_ESS_DRAWS = 1.5

#: the most a batch's galaxies may have collapsed weights and still be written: "most
#: galaxies" (healthy campaigns at every shipped S/N, 10,752 galaxies in 24 batches: none
#: collapsed, the lowest ESS 3 draws, results/benchmarks/health.json)
COLLAPSED_BATCH_MAX = 0.5


class UnhealthyBatch(RuntimeError):
    """A batch whose results a healthy program never gives: one line (what was seen, in
    which batch, what to try)."""


def collapsed_fraction(info: Any, n_real: int) -> tuple[int, int] | None:
    """``(collapsed, galaxies)`` among the first ``n_real`` lanes of a batch's draws'
    ``info`` (its ``is_ess``, lanes x galaxies); None for a method without importance
    weights."""
    ess = getattr(info, "is_ess", None)
    if ess is None:
        return None
    ess = np.asarray(ess, float)[:n_real].reshape(n_real, -1)
    # a NaN ESS (a failed fit) is the realization's own failure, counted by its flags
    return int(np.sum(ess < COLLAPSED_ESS_DRAWS)), int(np.sum(np.isfinite(ess)))


def check_batch(draws: Any, n_real: int, ib: int, n_batches: int, lanes: int) -> str | None:
    """Why batch ``ib`` (0-based, of ``n_batches``; ``lanes`` lanes, ``n_real`` of them
    realizations) must not be written, in one line, or None when it is healthy."""
    counts = collapsed_fraction(getattr(draws, "info", None), n_real)
    if counts is None:
        return None
    bad, n = counts
    if n == 0 or bad <= COLLAPSED_BATCH_MAX * n:
        return None
    n_draws = next(iter(draws.samples.values())).shape[-2] if draws.samples else "?"
    return (f"batch {ib + 1} of {n_batches}: the importance weights of {bad:,} of {n:,} "
            f"galaxies ({bad / n:.0%}) collapsed onto one draw (ESS < {COLLAPSED_ESS_DRAWS:g} "
            f"of {n_draws}; healthy batches at every shipped S/N have none), so it was not "
            f"written: the program is not computing what it should at {lanes} lanes "
            "(docs/design.md, 'Tensors within 32-bit counts')")  # fmt: skip
