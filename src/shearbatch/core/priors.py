"""Plain priors (:class:`shearbatch.spec.Prior`) -> NumPyro distributions and NumPy draws.

Shared by the generator (which draws truths) and the model (which puts priors
on latents), so both read a prior the same way. LogNormal's first number is
the median: ``log x ~ Normal(log median, sigma)``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import numpyro.distributions as dist

__all__ = [
    "PRIOR_PULL_MAX",
    "campaign_pull",
    "draw_numpy",
    "draw_shear_from_prior",
    "prior_mean",
    "prior_sd",
    "shrinkage",
    "to_distribution",
]


def to_distribution(p: Any) -> dist.Distribution:
    """NumPyro distribution of a non-fixed prior (NumPyro imported here: bias-stats reads
    this module's NumPy half without loading JAX)."""
    import numpyro.distributions as dist

    a = p.args
    if p.kind == "flat":  # flat on the real line; the model restricts g to the unit disk
        from numpyro.distributions import constraints

        return dist.ImproperUniform(constraints.real, (), ())
    if p.kind == "normal":
        return dist.Normal(a[0], a[1])
    if p.kind == "lognormal":
        return dist.LogNormal(math.log(a[0]), a[1])
    if p.kind == "uniform":
        return dist.Uniform(a[0], a[1])
    if p.kind == "truncnormal":
        lo = None if math.isinf(a[2]) else a[2]
        hi = None if math.isinf(a[3]) else a[3]
        return dist.TruncatedNormal(a[0], a[1], low=lo, high=hi)
    raise TypeError(f"not a distribution: {p!r}")


def prior_mean(p: Any) -> float:
    """Mean of a prior (the value of a fixed one); concrete, batch independent."""
    if p.kind == "fixed":
        return p.args[0]
    a = p.args
    if p.kind in ("flat", "uniform"):
        return 0.0 if p.kind == "flat" else 0.5 * (a[0] + a[1])
    if p.kind == "normal":
        return a[0]
    if p.kind == "lognormal":
        return a[0] * math.exp(0.5 * a[1] * a[1])
    from scipy import stats as st  # truncnormal (plain Python floats: safe under jit)

    lo, hi = (a[2] - a[0]) / a[1], (a[3] - a[0]) / a[1]
    return float(st.truncnorm.mean(lo, hi, loc=a[0], scale=a[1]))


#: a campaign whose shear prior is predicted to shift m by more than this (the largest
#: per-component median pull) is prior-dominated; bias-run warns, bias-stats reports
PRIOR_PULL_MAX = 1e-3


def campaign_pull(pulls: dict[str, list[float]]) -> float | None:
    """The campaign's predicted prior pull: the largest per-component median of the
    realizations' ``shrinkage`` (``None`` when there is none)."""
    meds = [float(np.median(v)) for v in pulls.values() if len(v)]
    return max(meds) if meds else None


def prior_sd(p: Any) -> float:
    """Standard deviation of a prior; ``flat`` (a shear component uniform on the unit
    disk) has 1/2."""
    if p.kind == "fixed":
        return 0.0
    if p.kind == "flat":
        return 0.5
    a = p.args
    if p.kind == "normal":
        return a[1]
    if p.kind == "uniform":
        return (a[1] - a[0]) / math.sqrt(12.0)
    if p.kind == "lognormal":
        return a[0] * math.exp(0.5 * a[1] ** 2) * math.sqrt(math.expm1(a[1] ** 2))
    from scipy import stats as st

    lo, hi = (a[2] - a[0]) / a[1], (a[3] - a[0]) / a[1]
    return float(st.truncnorm.std(lo, hi, loc=a[0], scale=a[1]))


def shrinkage(p: Any, post_sd: float) -> float:
    """Predicted fractional pull of the posterior mean towards the prior mean
    (-m caused by the prior): ``(sd_post / sd_prior)^2`` for a Normal prior on a
    Gaussian likelihood (exact there), 0 for flat and uniform priors (no pull away
    from their bounds; the MAP is taken without the transform's Jacobian)."""
    if p.kind in ("normal", "truncnormal", "lognormal"):
        return float((post_sd / prior_sd(p)) ** 2)
    return 0.0


def draw_numpy(p: Any, rng: np.random.Generator) -> float:
    """One draw with NumPy (dtype- and platform-independent)."""
    a = p.args
    if p.kind == "fixed":
        return a[0]
    if p.kind == "flat":  # a shear component: rejection to the unit disk is the caller's
        return float(rng.uniform(-1.0, 1.0))
    if p.kind == "normal":
        return float(rng.normal(a[0], a[1]))
    if p.kind == "lognormal":
        return float(math.exp(rng.normal(math.log(a[0]), a[1])))
    if p.kind == "uniform":
        return float(rng.uniform(a[0], a[1]))
    if p.kind == "truncnormal":
        from scipy import stats as st

        lo, hi = (a[2] - a[0]) / a[1], (a[3] - a[0]) / a[1]
        return float(st.truncnorm.rvs(lo, hi, loc=a[0], scale=a[1], random_state=rng))
    raise TypeError(f"not a distribution: {p!r}")


def draw_shear_from_prior(shear: tuple[Any, Any], seed: int) -> tuple[float, float]:
    """True shear of realization ``seed`` drawn from the inference prior ``shear``
    (priors of g1, g2), restricted to |g| < 1 (rejection), for simulation-based
    calibration. NumPy's generator seeded with ``(seed, 0x5BC)``: the same plan in
    every process, array task and precision."""
    rng = np.random.default_rng([seed, 0x5BC])
    while True:
        g1 = draw_numpy(shear[0], rng)
        g2 = draw_numpy(shear[1], rng)
        if g1 * g1 + g2 * g2 < 1.0:
            return g1, g2
