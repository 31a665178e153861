"""Does the fit explain the data? The residual at the point estimate, per realization.

For a realization whose data came from the model it is fitted with, the
residual at the estimate is noise: ``chi2 = sum_pixels ((d - model(theta_hat)) / sigma)^2``
follows a chi-square law with about N = M * H * W degrees of freedom (minus the few
fitted parameters), so ``chi2 / N = 1 +- sqrt(2 / N)``. Broken data makes it
inconsistent with the noise model: a stamp without its galaxy (zero flux, or a
galaxy far outside the stamp) or with absurd noise gives ``chi2 / N >> 1``, and
data without noise gives ``chi2 / N ~ 0``. :func:`misfit` turns that into the
fatal flag ``DATA_MISFIT`` when ``chi2 / N`` leaves ``[1/4, 4]`` (hundreds of
standard deviations for any stamp of 16x16 or more, so a well-specified
realization never trips it).

A deliberately misspecified campaign (``simulation`` overrides: the generator
differs from the model) misfits every realization by design; the engine does not
apply the check there (its ``chi2 / N`` is still recorded).

The point estimate is the per-site median of the draws (for MAP, whose Laplace
draws are antithetic around the mode, that is the mode); fixed fields take their
value. :func:`chi2_fn` is batched with the engine's other per-realization
programs (:func:`shearbatch.core.batching.batched`), so it compiles once per campaign.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp

from .generate import render_stamps

__all__ = ["CHI2_RANGE", "chi2_fn", "chi2_program", "misfit", "point_estimate"]

#: accepted range of chi2 / N at the estimate (a well-specified fit: 1 +- sqrt(2/N))
CHI2_RANGE = (0.25, 4.0)


def point_estimate(samples: Mapping[str, jax.Array]) -> dict[str, jax.Array]:
    """Per-site median over chains and draws of ONE realization's draws (chain, draw, ...)."""
    return {k: jnp.median(v.reshape(-1, *v.shape[2:]), axis=0) for k, v in samples.items()}


def chi2_fn(problem) -> Callable[[Mapping[str, jax.Array], jax.Array], jax.Array]:
    """``chi2(samples, obs) -> chi2 / N`` of ONE realization at its point estimate."""
    fields = problem.fields._asdict()
    m = problem.image.n_objects
    shear = {"g1": problem.shear[0], "g2": problem.shear[1]}

    def value(point, site: str, prior, n: int | None):
        if site in point:
            v = jnp.asarray(point[site])
        else:  # a fixed field or shear component
            v = jnp.asarray(prior.args[0] if prior.fixed else 0.0)
        return v if n is None else jnp.broadcast_to(v, (n,))

    def chi2(samples: Mapping[str, jax.Array], obs: jax.Array) -> jax.Array:
        point = point_estimate(samples)
        dtype = obs.dtype
        params = {k: value(point, k, p, m).astype(dtype) for k, p in fields.items()}
        g = jnp.stack([value(point, s, p, None).astype(dtype) for s, p in shear.items()])
        model = render_stamps(problem, params, g)
        r = (obs - model) / problem.noise_sigma
        return jnp.sum(r * r) / r.size

    return chi2


def chi2_program(problem, store: Any = None,
                 ) -> Callable[[Mapping[str, jax.Array], jax.Array], jax.Array]:  # fmt: skip
    """The engine's batched check, ``batched(chi2_fn(problem))``: ``(samples, images) ->
    chi2 / N`` per lane; wrapped by ``store`` when given (:mod:`shearbatch.core.programs`:
    the engine hands down :func:`shearbatch.engine.exported.exportable`, with which a later
    process loads the program instead of tracing it)."""
    from . import programs
    from .batching import batched

    return programs.program(lambda: batched(chi2_fn(problem)),
                            {"program": "chi2", "problem": problem}, "residual check",
                            store)  # fmt: skip


def misfit(chi2_per_pixel: float) -> bool:
    """True when ``chi2 / N`` is outside :data:`CHI2_RANGE` (or not a number)."""
    lo, hi = CHI2_RANGE
    return not lo <= chi2_per_pixel <= hi
