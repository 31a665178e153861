"""The three-valued acceptance rule and the realizations a decision needs.

A bias ``x`` (``m1``, ``m2``, ``c1``, ``c2``) measured with standard error
``sigma`` is judged against its ceiling ``T`` at ``z`` standard errors
(default ``z = 2``: a one-sided ~97.7% bound):

- ``pass``: ``|x| + z sigma <= T`` (even the pessimistic end is inside);
- ``fail``: ``|x| - z sigma > T`` (even the optimistic end is outside);
- ``inconclusive`` otherwise, with the realizations a decision would take.

``sigma`` scales as ``1 / sqrt(N)``, so with ``N_used`` realizations the
campaign needs ``N_needed = N_used (z sigma / (T - |x|))^2`` to pass when
``|x| < T``, and ``N_needed = N_used (z sigma / (|x| - T))^2`` to confirm a
fail when ``|x| >= T`` (both assume the estimate stays where it is; more
seeds, not more grid points per seed, are what shrink ``sigma``).

The campaign's verdict (:func:`overall`): ``FAIL`` if any criterion fails,
else ``INCONCLUSIVE`` if any is inconclusive, else ``PASS``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

__all__ = ["EXIT_CODES", "STATUSES", "VERDICTS", "decide", "n_needed", "overall"]

STATUSES = ("pass", "fail", "inconclusive")
VERDICTS = ("PASS", "FAIL", "INCONCLUSIVE")
#: bias-stats exit status per verdict (2 is bad input)
EXIT_CODES = {"PASS": 0, "FAIL": 1, "INCONCLUSIVE": 3}


def n_needed(abs_x: float, err: float, threshold: float, z: float, n_used: int) -> int | None:
    """Realizations for ``|x| +- z sigma`` to clear ``threshold``: ``N (z sigma / |T - |x||)^2``.

    ``None`` when no finite number decides (``|x|`` exactly on the threshold,
    or a non-finite error).
    """
    gap = abs(threshold - abs_x)
    if gap == 0 or not math.isfinite(err):
        return None
    need = n_used * (z * err / gap) ** 2
    # to 12 significant digits first, so that 1600.0000000000002 (rounding) is 1600
    return math.ceil(float(f"{need:.12g}")) if math.isfinite(need) else None


def decide(
    x: float, err: float | None, threshold: float, z: float, n_used: int
) -> tuple[str, int | None, str]:
    """``(status, n_needed, reason)`` of one bias ``x +- err`` against ``threshold``.

    ``n_needed`` (realizations) is set only when ``status`` is ``inconclusive``.
    """
    a = abs(x)
    if err is None or not math.isfinite(err):
        return "inconclusive", None, "no error estimate (needs at least 2 independent seeds)"
    if a + z * err <= threshold:
        return "pass", None, ""
    if a - z * err > threshold:
        return "fail", None, ""
    need = n_needed(a, err, threshold, z, n_used)
    if a < threshold:
        why = "|x| < threshold < |x| + z·σ"
        return "inconclusive", need, why + (f"; ~{need} realizations to decide" if need else "")
    why = "|x| - z·σ <= threshold <= |x|"
    return "inconclusive", need, why + (f"; ~{need} realizations to confirm a FAIL" if need else "")


def overall(statuses: Iterable[str]) -> str:
    """``FAIL`` if any ``fail``, else ``INCONCLUSIVE`` if any ``inconclusive``, else ``PASS``."""
    seen = set(statuses)
    unknown = seen - set(STATUSES)
    if unknown:
        raise ValueError(f"unknown status {sorted(unknown)}")
    if "fail" in seen:
        return "FAIL"
    if "inconclusive" in seen:
        return "INCONCLUSIVE"
    return "PASS"
