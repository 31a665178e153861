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
``q(N) sigma sqrt(N_used / N) <= gap`` (``q(N)`` with ``G N / N_used`` seeds):
``N_used (z sigma / gap)^2`` at large ``G`` (:func:`n_needed`). Which gap is asked
about depends on what the estimate says (:func:`plan`):

- ``n_pass_if_zero`` (every criterion): ``gap = T``, the realizations to PASS if the
  true bias were 0, ``N_used (q sigma / T)^2`` from the measured scatter alone: the
  planning number, which does not move with the noise in ``x``;
- only when the bias is *detected* (``|x| > q sigma``): ``n_confirm_fail`` (``|x| >
  T``, ``gap = |x| - T``) or ``n_pass_at_estimate`` (``|x| < T``, ``gap = T - |x|``),
  which take the estimate as the truth. An estimate within ``q sigma`` of zero is
  noise: extrapolating from it gives numbers that explode near the threshold (~2.3
  million realizations "to confirm a FAIL" for ``|m| = 0.0052 +- 0.010`` against 0.005),
  so none is given.

:func:`decide` reports the one a user acts on as ``n_needed``: ``n_confirm_fail`` or
``n_pass_at_estimate`` when detected, else ``n_pass_if_zero``. More seeds, not more
grid points per seed, are what shrink ``sigma``.

The campaign's verdict (:func:`overall`): ``FAIL`` if any criterion fails,
else ``INCONCLUSIVE`` if any is inconclusive, else ``PASS``.

The criteria of a requirement (:func:`criteria`), each a
:class:`~shearbatch.analysis.result.Criterion` with ``status`` ``pass`` | ``fail`` |
``inconclusive``:

- ``|m1|, |m2|, |c1|, |c2|``: the rule above against ``max_abs_m`` / ``max_abs_c``, with
  its ``quantile`` and ``dof``; an undefined ``m`` (constant truth in that component) is
  not a criterion, and :func:`criteria` alone reports one without an error as
  ``inconclusive``.
- coverage (68% and 95%, per component): two-sided binomial band at ``coverage_z``; SBC:
  chi-square p-value >= ``sbc_p_min``. Both need ``min_seeds`` independent seeds, else
  ``inconclusive`` ("too few to test").
- fraction converged >= ``min_frac_converged`` (a count: pass or fail).

Default criteria per level live in :data:`ACCEPTANCE` (the presets, with their sources,
are :data:`shearbatch.schema.requirements.REQUIREMENTS`); :func:`load_acceptance` reads
overrides from YAML.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from scipy import stats as st

from ..schema import requirements as rq
from .bias_fits import Fit, error_label
from .result import (
    Acceptance,
    Coverages,
    Criterion,
    Design,
    PlannedCriterion,
    Planning,
    Sbc,
    SbcTest,
)

__all__ = [
    "ACCEPTANCE",
    "EXIT_CODES",
    "LEVELS",
    "STATUSES",
    "VERDICTS",
    "Plan",
    "criteria",
    "decide",
    "load_acceptance",
    "n_for_sigma",
    "n_needed",
    "overall",
    "plan",
    "quantile",
    "sbc_status",
]

STATUSES = ("pass", "fail", "inconclusive")
VERDICTS = ("PASS", "FAIL", "INCONCLUSIVE")
#: bias-stats exit status per verdict (2 is bad input)
EXIT_CODES = {"PASS": 0, "FAIL": 1, "INCONCLUSIVE": 3}
LEVELS = ("level_0", "level_1", "level_2")
#: Default acceptance per level (the old --level names): |m| and |c| ceilings (per
#: component) judged at ``z`` standard errors (2.0: one-sided ~97.7%), coverage inside its
#: two-sided ``coverage_z`` binomial band, ``min_seeds`` independent seeds to test coverage
#: or SBC, minimum fraction of the complete realizations usable, SBC p-value floor.
ACCEPTANCE: dict[str, dict[str, float]] = {lev: rq.criteria_of(lev) for lev in LEVELS}


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


@dataclasses.dataclass(frozen=True)
class Plan:
    """:func:`plan`: the bound's quantile (None without an error), whether the bias is
    detected, and the realizations to PASS if the true bias were 0, to confirm a FAIL or
    to PASS at the estimate (None where not asked, or no finite number answers)."""

    quantile: float | None = None
    detected: bool = False
    n_pass_if_zero: int | None = None
    n_confirm_fail: int | None = None
    n_pass_at_estimate: int | None = None


def plan(
    x: float,
    err: float | None,
    threshold: float,
    z: float,
    n_used: int,
    n_seeds: int | None = None,
) -> Plan:
    """The realizations questions of one bias ``x +- err`` (module docstring)."""
    if err is None or not math.isfinite(err) or (n_seeds is not None and n_seeds < 2):
        return Plan()
    a, q = abs(x), quantile(z, n_seeds)
    detected = bool(a > q * err)
    n0 = n_needed(0.0, err, threshold, z, n_used, n_seeds)
    if not detected:
        return Plan(q, detected, n0)
    n_at = n_needed(a, err, threshold, z, n_used, n_seeds)
    if a > threshold:
        return Plan(q, detected, n0, n_confirm_fail=n_at)
    return Plan(q, detected, n0, n_pass_at_estimate=n_at)


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
    Student-t, :func:`quantile`); ``n_needed`` (realizations, :func:`plan`) is set only
    when ``status`` is ``inconclusive``: to confirm a FAIL or to PASS at the estimate when
    the bias is detected (``|x| > q sigma``), else to PASS if the true bias were 0.
    """
    a = abs(x)
    if err is None or not math.isfinite(err) or (n_seeds is not None and n_seeds < 2):
        return "inconclusive", None, "no error estimate (needs at least 2 independent seeds)"
    q = quantile(z, n_seeds)
    if a + q * err <= threshold:
        return "pass", None, ""
    if a - q * err > threshold:
        return "fail", None, ""
    p = plan(x, err, threshold, z, n_used, n_seeds)
    bound = "z·σ" if n_seeds is None else f"{q:.3g}·σ (Student-t, {n_seeds - 1} dof)"
    why = (f"|x| < threshold < |x| + {bound}" if a < threshold
           else f"|x| - {bound} <= threshold <= |x|")  # fmt: skip
    if p.detected:  # the estimate is signal: what it takes if it stays there
        why += f"; bias detected (|x| > {q:.3g}·σ)"
        if p.n_confirm_fail:
            return "inconclusive", p.n_confirm_fail, (
                f"{why}: ~{p.n_confirm_fail} realizations to confirm a FAIL")  # fmt: skip
        if p.n_pass_at_estimate:
            return "inconclusive", p.n_pass_at_estimate, (
                f"{why}: ~{p.n_pass_at_estimate} realizations to PASS if it stays at the "
                "estimate")  # fmt: skip
        return "inconclusive", None, f"{why}, on the threshold: no number of realizations decides"
    need = p.n_pass_if_zero
    why += f"; |x| within {q:.3g}·σ of zero (no bias detected)"
    return "inconclusive", need, why + (
        f"; ~{need} realizations to PASS if the true bias is 0" if need else "")  # fmt: skip


def n_for_sigma(err: float, target: float, n_used: int) -> int | None:
    """Realizations for a standard error ``target`` from ``err`` at ``n_used`` (``1/sqrt(N)``
    at the campaign's realizations per seed); None for a non-finite error."""
    if not (math.isfinite(err) and target > 0):
        return None
    return max(math.ceil(float(f"{n_used * (err / target) ** 2:.12g}")), 1)


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


def _design_words(design: Design) -> str:
    rot = int(design.rotations or 1)
    words = "paired (+g/-g)" if design.paired else "unpaired"
    return words + (f", ring of {rot} rotations" if rot > 1 else ", no rings")


def planning(
    criteria: Sequence[Criterion],
    fits: Mapping[str, Fit],
    design: Design,
    n_used: int,
    n_seeds: int,
    target_sigma_m: float | None = None,
) -> Planning:
    """The ``planning`` section of bias_results.json, and its printed ``lines``: per m / c
    criterion the realizations to PASS if the true bias were 0 (and, when the bias is
    detected, to confirm a FAIL or to PASS at the estimate), and with ``target_sigma_m``
    the realizations for that error of m; all from this campaign's scatter, for more
    seeds of the same design (same realizations per seed)."""
    per_seed = n_used / max(n_seeds, 1)
    words = _design_words(design)
    lines = [
        f"planning, from this campaign's scatter ({n_used} realizations, {n_seeds} seeds, "
        f"{per_seed:g} per seed; design: {words}); more seeds of the same design:"
    ]
    rows = []
    for c in criteria:
        if not c.name.startswith(("|m", "|c")) or c.err is None:
            continue
        z, thr, err, x = c.z, c.threshold, c.err, c.value
        seeds = c.dof + 1 if c.dof is not None else n_seeds  # the fit's seeds
        p = plan(x, err, thr, z, n_used, seeds)
        if c.status != "inconclusive":  # decided: nothing left to confirm
            p = dataclasses.replace(p, n_confirm_fail=None, n_pass_at_estimate=None)
        rows.append(PlannedCriterion.of(name=c.name, value=x, err=err, threshold=thr,
                                        status=c.status, **dataclasses.asdict(p)))  # fmt: skip
        n0 = p.n_pass_if_zero
        if p.quantile is None:
            lines.append(f"  {c.name:<5}: no error estimate (needs at least 2 seeds)")
            continue
        head = f"  {c.name:<5} = {x:.3g} ± {err:.2g} ({c.status}"
        head += f", {'detected' if p.detected else 'not detected'}: |x| "
        head += f"{'>' if p.detected else '<='} {p.quantile:.3g}·σ): "
        if n0 is None:
            lines.append(head + "no finite number of realizations decides")
            continue
        s0 = max(int(n0 / per_seed), 2)  # the seeds of n0 realizations, as n_needed counts
        q0 = quantile(z, s0)
        text = (
            f"~{n0} realizations to PASS < {thr:g} if the true value is 0 "
            f"[the smallest N >= {n_used}·(q·{err:.4g}/{thr:g})² = "
            f"{n_used * (q0 * err / thr) ** 2:.1f} with q = {q0:.5g} at {s0} seeds]"
        )
        if p.n_confirm_fail:
            text += f"; ~{p.n_confirm_fail} to confirm a FAIL"
        elif p.n_pass_at_estimate:
            text += f"; ~{p.n_pass_at_estimate} to PASS if it stays at {x:.3g}"
        lines.append(head + text)
    notes = []
    c_open = [r for r in rows if r.name.startswith("|c") and r.status != "pass"]
    if c_open and int(design.rotations or 1) < 2:
        notes.append("c: pairs cancel the intrinsic shape in m, not in c (c is the mean of "
                     "each pair's average, which keeps the shape); a ring design "
                     "(bias-run --rotations 2) cancels it in c too: docs/first-campaign.md")  # fmt: skip
    out = Planning.of(design=words, paired=bool(design.paired),
                      rotations=int(design.rotations or 1), n_used=n_used, n_seeds=n_seeds,
                      realizations_per_seed=per_seed, criteria=rows,
                      target_sigma_m=target_sigma_m)  # fmt: skip
    if target_sigma_m is not None:
        need: dict[str, int | None] = {}
        for comp, f in fits.items():
            k = f"m{comp[1]}"
            if f.m is None or f.m_err is None:
                need[k] = None
                continue
            need[k] = n_for_sigma(f.m_err, target_sigma_m, n_used)
            lines.append(f"  sigma_{k} = {target_sigma_m:g}: ~{need[k]} realizations "
                         f"(~{math.ceil(need[k] / per_seed)} seeds) of this design "
                         f"[{n_used}·({f.m_err:.4g}/{target_sigma_m:g})²]")  # fmt: skip
        out = out.set(n_for_target=need)
    return out.set(notes=notes, lines=lines + [f"  NOTE {n}" for n in notes])


def _criterion(
    name: str,
    value: Any,
    threshold: Any,
    status: str,
    *,
    err: float | None = None,
    z: float | None = None,
    n_needed: int | None = None,
    error_method: str | None = None,
    reason: str = "",
    quantile: float | None = None,
    dof: int | None = None,
    planning: Plan | None = None,
) -> Criterion:
    """One criterion; ``quantile`` / ``dof``: the Student-t bound of an m or c criterion,
    ``planning``: its :func:`plan` (None for the others)."""
    return Criterion(name, value, threshold, status, err=err, z=z, n_needed=n_needed,
                     error_method=error_method, reason=reason, quantile=quantile, dof=dof,
                     detected=None if planning is None else planning.detected,
                     n_pass_if_zero=None if planning is None else planning.n_pass_if_zero)  # fmt: skip


def _scaled(n_used: int, n_seeds: int, min_seeds: int) -> int:
    """Realizations for ``min_seeds`` seeds at the campaign's realizations per seed."""
    return math.ceil(n_used * min_seeds / max(n_seeds, 1))


def sbc_status(test: SbcTest, p_min: float) -> SbcTest:
    """An SBC test judged: ``inconclusive`` as it stands (too few to test), else ``pass``
    when its chi-square p-value is at least ``p_min``, ``fail`` (ranks not uniform)
    otherwise."""
    if test.status == "inconclusive" or test.skipped is not None:
        return test
    return test.set(status="pass" if test.p_value >= p_min else "fail")


def criteria(
    fits: Mapping[str, Fit],
    cov: Coverages | None,
    sbc_res: Sbc | None,
    frac: float,
    acc: Acceptance,
    n_used: int | None = None,
) -> list[Criterion]:
    """The acceptance criteria (:class:`~shearbatch.analysis.result.Criterion` each): m and
    c per component (an undefined m is not one), coverage (None: not tested), SBC (each
    test as :func:`sbc_status` judged it, in the section; one not yet judged is judged
    here; None: not run), fraction converged."""
    out = []
    z = acc.z
    n_used = n_used if n_used is not None else max(f.n for f in fits.values())
    for comp, f in fits.items():
        k = comp[1]
        for q, x, err, thr in (("m", f.m, f.m_err, acc.max_abs_m),
                               ("c", f.c, f.c_err, acc.max_abs_c)):  # fmt: skip
            if x is None:
                continue  # undefined: not a criterion (both undefined: measure_bias refuses)
            status, need, why = decide(x, err, thr, z, n_used, f.n_groups)
            out.append(_criterion(f"|{q}{k}|", abs(x), thr, status, err=err, z=z,
                                  n_needed=need, error_method=error_label(f), reason=why,
                                  quantile=quantile(z, f.n_groups),
                                  dof=max(f.n_groups - 1, 0),
                                  planning=plan(x, err, thr, z, n_used, f.n_groups)))  # fmt: skip
    for comp, levels in cov.items() if cov is not None else ():
        for lev, r in levels.items():
            if not r.tested:
                continue
            need = _scaled(r.n, r.n_eff, r.min_seeds) if r.status == "inconclusive" else None
            out.append(_criterion(f"coverage {comp} {float(lev):.0%}", r.observed, r.band,
                                  r.status, err=r.se, z=r.z, n_needed=need,
                                  error_method=f"binomial over {r.n_eff} seeds",
                                  reason=r.reason))  # fmt: skip
    for comp, r in sbc_res.items() if sbc_res is not None else ():
        if r.skipped is not None:
            continue
        thr = acc.sbc_p_min
        if r.status is None:  # not judged yet (a test of bias_fits.sbc given directly)
            r = sbc_status(r, thr)
        status, need = r.status, None
        why = "" if status == "pass" else "ranks not uniform"
        if status == "inconclusive":
            why, need = r.reason, _scaled(r.n, r.n_eff, r.min_seeds)
        out.append(_criterion(f"SBC {comp} uniformity p", r.p_value, thr, status, n_needed=need,
                              error_method=f"chi-square over {r.n} ranks", reason=why))  # fmt: skip
    thr = acc.min_frac_converged
    out.append(_criterion("fraction converged", frac, thr, "pass" if frac >= thr else "fail"))
    return out


def load_acceptance(path: str | Path | Mapping[str, Any] | None, level: str) -> dict[str, float]:
    """Overrides for the requirement ``level`` (a preset or an alias) from a YAML (``{name:
    {key: value}}``, top level or under ``acceptance:``; a preset's overrides may be given
    under its alias too); unknown names or keys raise ``ValueError`` naming the key path.
    ``path`` may also be the YAML's content as a mapping, or a mapping of criteria keys
    only (``{"max_abs_m": 1e-3}``: overrides of ``level`` itself)."""
    if path is None:
        return {}
    if isinstance(path, Mapping):
        doc: Any = dict(path)
        if doc and all(k in rq.CRITERIA_KEYS for k in doc):  # flat: the judged one's
            doc = {rq.resolve(level): doc}
    else:
        import yaml

        with open(path) as fh:
            doc = yaml.safe_load(fh) or {}
    sec = doc.get("acceptance", doc) if isinstance(doc, dict) else None
    if not isinstance(sec, dict):
        raise ValueError("acceptance: expected a mapping of levels")
    for lev, vals in sec.items():
        if lev == "convergence" and "acceptance" not in doc:
            continue
        if lev not in rq.names():
            raise ValueError(f"acceptance.{lev}: unknown requirement; use one of "
                             f"{', '.join(rq.names())}")  # fmt: skip
        if not isinstance(vals, dict):
            raise ValueError(f"acceptance.{lev}: expected a mapping")
        for k, v in vals.items():
            if k not in rq.CRITERIA_KEYS:
                raise ValueError(
                    f"acceptance.{lev}.{k}: unknown key; use {', '.join(rq.CRITERIA_KEYS)}"
                )
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                raise ValueError(f"acceptance.{lev}.{k}: must be a number, got {v!r}")
            if k == "min_seeds" and (v < 1 or v != int(v)):
                raise ValueError(f"acceptance.{lev}.{k}: must be an integer >= 1, got {v!r}")
            if k in ("z", "coverage_z") and v <= 0:
                raise ValueError(f"acceptance.{lev}.{k}: must be > 0, got {v!r}")
    name = rq.resolve(level)  # overrides given under the preset's name or its alias
    out: dict[str, float] = {}
    for key in (name, rq.alias_of(name)):
        vals = sec.get(key) if key else None
        out.update({k: (int(v) if k == "min_seeds" else float(v))
                    for k, v in (vals or {}).items()})  # fmt: skip
    return out
