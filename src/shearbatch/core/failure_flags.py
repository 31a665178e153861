"""Named failure flags (a bit set, as ngmix does) and the one convergence gate.

Every realization records ``flags`` (an int), the names of the set bits and a
readable reason. Two kinds of flags:

- *fatal* flags (:data:`FATAL`): the result is unusable (non-finite data or
  draws, no valid or no converged mode, ...); the realization's ``status`` is
  ``failed``;
- *gate* flags (:data:`GATES`): the result exists but did not pass a
  convergence gate (R-hat, ESS, divergences, E-BFMI, ELBO still trending);
  ``status`` stays ``ok`` and ``passed`` is false;
- *warning* flags (:data:`WARNINGS`): recorded and counted, the result is used
  (the interim model's collapsed population weights).

:func:`gate_flags` is the only place the threshold gates are evaluated, with
:data:`DEFAULT_THRESHOLDS` (``bias-run``) or the user's (``bias-extract
--convergence-config``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import numpy as np

__all__ = [
    "DEFAULT_THRESHOLDS",
    "FATAL",
    "FLAGS",
    "GATES",
    "GATE_KEYS",
    "THRESHOLD_GATES",
    "WARNINGS",
    "Thresholds",
    "common_flags",
    "describe",
    "flag",
    "gate_flags",
    "names",
]

#: name -> (bit, readable reason); the order is the order of cause
FLAGS: dict[str, tuple[int, str]] = {
    "NONFINITE_DATA": (1 << 0, "non-finite data (NaN or inf in the stamps)"),
    "NONFINITE_POTENTIAL": (1 << 1, "non-finite potential at the optimum"),
    "HESSIAN_NOT_PD": (1 << 2, "Laplace Hessian not positive definite at the optimum"),
    "NONFINITE_ELBO": (1 << 3, "non-finite ELBO"),
    "NONFINITE_DRAWS": (1 << 4, "non-finite posterior draws"),
    "ALL_DIVERGENT": (1 << 5, "every transition diverged"),
    "CHAINS_STUCK": (1 << 6, "chains never moved"),
    "OPT_NOT_CONVERGED": (1 << 8, "optimiser not converged (Newton decrement above tolerance)"),
    "ELBO_NOT_FLAT": (1 << 9, "ELBO still trending at the end of the fit"),
    "RHAT_HIGH": (1 << 10, "R-hat above threshold"),
    "ESS_LOW": (1 << 11, "ESS below threshold"),
    "DIVERGENCES": (1 << 12, "divergent transitions above threshold"),
    "BFMI_LOW": (1 << 13, "E-BFMI below threshold"),
    "DATA_MISFIT": (1 << 14, "residual at the estimate inconsistent with the noise model"),
    "UNINFORMATIVE": (1 << 15, "posterior of g about as wide as its prior (no information)"),
    # the interim model's population fit (bias-extract, core/population.py)
    "POP_WEIGHTS_COLLAPSED": (
        1 << 16,
        "population weights unreliable: a galaxy's importance weights have a Pareto "
        "k-hat above min(1 - 1/log10(draws), 0.7) at the estimate",
    ),
    "POP_FIT_FAILED": (
        1 << 17,
        "population fit of g: no maximum with a negative-definite curvature",
    ),
}


def flag(*names_: str) -> int:
    out = 0
    for n in names_:
        out |= FLAGS[n][0]
    return out


FATAL = flag(
    "NONFINITE_DATA",
    "NONFINITE_POTENTIAL",
    "HESSIAN_NOT_PD",
    "NONFINITE_ELBO",
    "NONFINITE_DRAWS",
    "ALL_DIVERGENT",
    "CHAINS_STUCK",
    "OPT_NOT_CONVERGED",
    "DATA_MISFIT",
    "UNINFORMATIVE",
)
THRESHOLD_GATES = flag("RHAT_HIGH", "ESS_LOW", "DIVERGENCES", "BFMI_LOW")
#: recorded and counted (bias-stats), but the realization stays usable: dropping every
#: realization with one galaxy's weights collapsed would select on the data
WARNINGS = flag("POP_WEIGHTS_COLLAPSED")
GATES = THRESHOLD_GATES | flag("ELBO_NOT_FLAT")


def names(flags: int) -> list[str]:
    """Names of the set bits, in order of cause."""
    return [n for n, (bit, _) in FLAGS.items() if flags & bit]


def describe(flags: int, details: Mapping[str, str] | None = None) -> str:
    """Readable reasons of every set flag, ``; ``-joined (``details`` refines a reason)."""
    details = details or {}
    return "; ".join(details.get(n, FLAGS[n][1]) for n in names(flags))


class Thresholds(NamedTuple):
    """Convergence gates (Vehtari et al. 2021 for R-hat / ESS; Betancourt 2016 for E-BFMI)."""

    rhat_max: float = 1.01
    ess_min: float = 400.0
    divergence_frac_max: float = 0.0
    bfmi_min: float = 0.3


DEFAULT_THRESHOLDS = Thresholds()


def _numbers(v: Any) -> list[float]:
    if isinstance(v, Mapping):
        return [x for w in v.values() for x in _numbers(w)]
    if isinstance(v, list | tuple | np.ndarray):
        return [x for w in np.asarray(v, dtype=object).ravel() for x in _numbers(w)]
    return [math.nan if v is None else float(v)]


class Gates(NamedTuple):
    """The statistics the threshold gates read, as a sampler's ``diagnose`` reports them
    and ``convergence.json`` stores them (top-level keys of the same names). A statistic
    that is None is not gated (MAP and VI have no R-hat); one that is present but null
    or NaN fails its gate."""

    rhat: Mapping[str, Any] | None = None
    """R-hat per site (a number, or a list per galaxy)."""
    ess_bulk: Mapping[str, Any] | None = None
    """Bulk ESS per site."""
    ess_tail: Mapping[str, Any] | None = None
    """Tail ESS per site."""
    divergences: int | None = None
    """Divergent transitions (count)."""
    divergence_frac: float | None = None
    """Divergent transitions / transitions."""
    bfmi: Any = None
    """E-BFMI per chain."""

    def to_json(self) -> dict[str, Any]:
        """The statistics that are present, by name."""
        return {k: v for k, v in self._asdict().items() if v is not None}

    @classmethod
    def from_json(cls, rec: Mapping[str, Any]) -> Gates:
        """The gate statistics of a ``convergence.json`` record (absent keys: None; a key
        present with null is NaN, which fails its gate)."""
        return cls(**{k: (math.nan if rec[k] is None else rec[k]) for k in cls._fields
                      if k in rec})  # fmt: skip


#: the ``convergence.json`` keys of :class:`Gates`
GATE_KEYS = Gates._fields


def gate_flags(gates: Gates | Mapping[str, Any], th: Thresholds = DEFAULT_THRESHOLDS) -> int:
    """Threshold-gate flags of one realization's :class:`Gates` (or a record holding them).

    Reads ``rhat`` (max), ``ess_bulk`` / ``ess_tail`` (min), ``divergence_frac``,
    ``bfmi`` (min). A statistic that is absent is not gated (MAP and VI have no R-hat);
    one that is present but null or NaN fails its gate.
    """
    if not isinstance(gates, Gates):
        gates = Gates.from_json(gates)
    out = 0
    checks = [
        ("rhat", "RHAT_HIGH", lambda xs: max(xs) <= th.rhat_max),
        ("ess_bulk", "ESS_LOW", lambda xs: min(xs) >= th.ess_min),
        ("ess_tail", "ESS_LOW", lambda xs: min(xs) >= th.ess_min),
        ("divergence_frac", "DIVERGENCES", lambda xs: max(xs) <= th.divergence_frac_max),
        ("bfmi", "BFMI_LOW", lambda xs: min(xs) >= th.bfmi_min),
    ]
    present = gates._asdict()
    for key, name, ok in checks:
        if key not in present or present[key] is None:
            continue
        xs = _numbers(present[key])
        if not xs or any(math.isnan(x) for x in xs) or not ok(xs):
            out |= flag(name)
    return out


def common_flags(obs: np.ndarray, samples: Mapping[str, np.ndarray]) -> tuple[int, dict[str, str]]:
    """Flags every method shares: non-finite data or draws (with the sites named)."""
    out, details = 0, {}
    if not np.all(np.isfinite(obs)):
        out |= flag("NONFINITE_DATA")
    bad = sorted(k for k, v in samples.items() if not np.all(np.isfinite(v)))
    if bad:
        out |= flag("NONFINITE_DRAWS")
        details["NONFINITE_DRAWS"] = f"non-finite posterior draws of {', '.join(bad)}"
    return out, details


def from_names(items: Iterable[str]) -> int:
    return flag(*[n for n in items if n in FLAGS])
