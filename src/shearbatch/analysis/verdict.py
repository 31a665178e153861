"""The three-valued acceptance rule and the realizations a decision needs.

A bias ``x`` (``m1``, ``m2``, ``c1``, ``c2``) measured with standard error
``sigma`` over ``G`` independent seeds is judged against its ceiling ``T`` at
``z`` standard errors (default ``z = 2``: a one-sided ~97.7% bound):

- ``pass``: ``|x| + q sigma <= T`` (even the pessimistic end is inside);
- ``fail``: ``|x| - q sigma > T`` (even the optimistic end is outside);
- ``inconclusive`` otherwise, with the realizations a decision would take.

``q`` is the quantile of the bound. ``sigma`` is itself estimated from the
``G`` seeds (delete-one-seed jackknife or bootstrap over seeds), so ``x /
sigma`` is Student-t with ``G - 1`` degrees of freedom, not normal: ``q =
t_{G-1}(Phi(z))``, the Student-t quantile at the normal ``z``'s one-sided
probability (:func:`quantile`). At ``z = 2``: 14.0 with 2 seeds, 4.5 with 3,
2.3 with 10, 2.07 with 40, ``-> z`` as ``G`` grows. The bootstrap over ``G``
seeds resamples the same ``G`` group sums as the jackknife, so its standard
error carries the same ``G - 1`` degrees of freedom and gets the same ``q``.
A 1-degree-of-freedom error bar (two seeds) therefore decides almost nothing:
``0.116 +- 0.032`` with two seeds was a FAIL at ``z = 2`` and is inconclusive
at ``q = 14.0``. Without a seed count (``n_seeds=None``) ``q = z``.

``sigma`` scales as ``1 / sqrt(N)`` at a fixed number of realizations per seed,
so with ``N_used`` realizations the campaign needs the smallest ``N`` with
``q(N) sigma sqrt(N_used / N) <= |T - |x||`` (``q(N)`` with ``G N / N_used``
seeds): ``N_used (z sigma / (T - |x|))^2`` at large ``G``. It is the
realizations to pass when ``|x| < T`` and to confirm a fail when ``|x| >= T``
(both assume the estimate stays where it is; more seeds, not more grid points
per seed, are what shrink ``sigma``).

The campaign's verdict (:func:`overall`): ``FAIL`` if any criterion fails,
else ``INCONCLUSIVE`` if any is inconclusive, else ``PASS``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from scipy import stats as st

__all__ = ["EXIT_CODES", "STATUSES", "VERDICTS", "decide", "n_needed", "overall", "quantile"]

STATUSES = ("pass", "fail", "inconclusive")
VERDICTS = ("PASS", "FAIL", "INCONCLUSIVE")
#: bias-stats exit status per verdict (2 is bad input)
EXIT_CODES = {"PASS": 0, "FAIL": 1, "INCONCLUSIVE": 3}


def quantile(z: float, n_seeds: int | None) -> float:
    """Bound quantile ``t_{G-1}(Phi(z))`` for an error estimated from ``G = n_seeds`` seeds.

    ``z`` itself when ``n_seeds`` is ``None``; ``inf`` below 2 seeds (no error).
    """
    if n_seeds is None:
        return float(z)
    if n_seeds < 2:
        return math.inf
    return float(st.t.ppf(st.norm.cdf(z), n_seeds - 1))


def n_needed(
    abs_x: float,
    err: float,
    threshold: float,
    z: float,
    n_used: int,
    n_seeds: int | None = None,
) -> int | None:
    """Realizations for ``|x| +- q sigma`` to clear ``threshold`` (module docstring).

    ``q`` follows the seeds: ``n_seeds N / n_used`` at ``N`` realizations.
    ``None`` when no finite number decides (``|x|`` exactly on the threshold,
    or a non-finite error).
    """
    gap = abs(threshold - abs_x)
    if gap == 0 or not math.isfinite(err):
        return None
    need = n_used * (z * err / gap) ** 2  # the large-G answer, a lower bound
    if not math.isfinite(need):
        return None
    # to 12 significant digits first, so that 1600.0000000000002 (rounding) is 1600
    n = max(math.ceil(float(f"{need:.12g}")), 1)
    if n_seeds is None:
        return n
    per_seed = n_used / max(n_seeds, 1)

    def enough(k: int) -> bool:  # q(k) sigma(k) <= gap: false below the answer, true above
        q = quantile(z, max(int(k / per_seed), 2))
        return float(f"{n_used * (q * err / gap) ** 2:.12g}") <= k

    hi = n
    while not enough(hi):
        hi *= 2
    lo = n - 1 if n > 1 else 0  # the large-G answer is a lower bound
    while hi - lo > 1:  # smallest k in (lo, hi] that is enough
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if enough(mid) else (mid, hi)
    return hi


def decide(
    x: float,
    err: float | None,
    threshold: float,
    z: float,
    n_used: int,
    n_seeds: int | None = None,
) -> tuple[str, int | None, str]:
    """``(status, n_needed, reason)`` of one bias ``x +- err`` against ``threshold``.

    ``err`` is estimated from ``n_seeds`` independent seeds (the bound's quantile is
    Student-t, :func:`quantile`); ``n_needed`` (realizations) is set only when
    ``status`` is ``inconclusive``.
    """
    a = abs(x)
    if err is None or not math.isfinite(err) or (n_seeds is not None and n_seeds < 2):
        return "inconclusive", None, "no error estimate (needs at least 2 independent seeds)"
    q = quantile(z, n_seeds)
    if a + q * err <= threshold:
        return "pass", None, ""
    if a - q * err > threshold:
        return "fail", None, ""
    need = n_needed(a, err, threshold, z, n_used, n_seeds)
    bound = "z·σ" if n_seeds is None else f"{q:.3g}·σ (Student-t, {n_seeds - 1} dof)"
    if a < threshold:
        why = f"|x| < threshold < |x| + {bound}"
        return "inconclusive", need, why + (f"; ~{need} realizations to decide" if need else "")
    why = f"|x| - {bound} <= threshold <= |x|"
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
