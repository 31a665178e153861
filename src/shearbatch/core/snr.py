"""Matched-filter signal-to-noise of a stamp: ``S/N = sqrt(sum_pixels I^2) / sigma``.

``I`` is the noiseless stamp; this is the S/N of an optimal (matched-filter)
flux measurement of a known profile in white Gaussian noise of pixel sigma.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from .generate import FIELDS, render_stamps, stamp_snr
from .priors import prior_mean

__all__ = ["reference_signal", "stamp_snr"]


def reference_signal(problem) -> float:
    """``sqrt(sum I^2)`` of the reference galaxy: every field at its prior mean,
    unsheared and centred (the ``snr`` of ``image.noise`` is defined on it)."""
    return float(_reference_signal(problem))


@functools.partial(jax.jit, static_argnums=0)  # one small program (cached), not eager ops
def _reference_signal(problem) -> jax.Array:
    fields = problem.fields._asdict()
    m = problem.image.n_objects
    params = {k: jnp.full((m,), prior_mean(fields[k])) for k in FIELDS}
    params["dx"] = params["dy"] = jnp.zeros((m,))
    clean = render_stamps(problem, params, jnp.zeros(2))
    return jnp.sqrt(jnp.sum(clean[0] * clean[0]))
