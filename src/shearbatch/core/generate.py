"""The generator: truths and noisy stamps for a batch of realizations.

For realization ``r`` with seed ``s``: ``key = PRNGKey(s)`` is split into a key
for the galaxy parameters and a key for the noise. Each galaxy field given as a
distribution in the (generator's) problem is drawn from it; the stamp of galaxy
``j`` is

    d_j = render(flux_j, hlr_j, e_j, g_true, offset_j) + sigma * n_j,  n_j ~ N(0, 1)

Ring designs (:mod:`shearbatch.campaign`, ``rotations``): copy ``k`` of a seed
draws the same galaxies and rotates each intrinsic shape by ``q`` quarter turns
of the spin-2 ellipticity (45 degrees on the sky each, ``q = 4 k / R``):

    (e1, e2) -> (-e2, e1) -> (-e1, -e2) -> (e2, -e1)        (q = 1, 2, 3)

exactly (no trigonometry, so rotating by 90 degrees twice is the identity to the
bit); flux, size and offset are unchanged. Its noise field is the seed's own
(``noise_stream = 0``, the default: a ring copy then differs from the original
only by the rotated shapes, and with ``+g``/``-g`` pairs all 2 R images of a seed
share one noise field) or an independent one, ``fold_in(noise_key, stream)``.

The generator takes the truth problem (:func:`shearbatch.spec.truth_problem`:
``simulation`` overrides merged in, for misspecification studies).

A realization's data depend only on its seed and problem: every realization is
drawn by the same compiled single-realization program (``jax.lax.map`` over
the batch), never by anything that couples lanes.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .priors import to_distribution
from .psf import psf_kwargs
from .render import draw_galaxy

__all__ = ["FIELDS", "SimBatch", "render_stamps", "rotate_shapes", "simulate", "stamp_snr"]

FIELDS = ("flux", "hlr", "e1", "e2", "dx", "dy")


class SimBatch(NamedTuple):
    """Stacked observations of a batch.

    images: (B, M, H, W) noisy stamps; noise_sigma: scalar; g: (B, 2) true shear;
    params: {field: (B, M)} true per-galaxy parameters (``FIELDS``);
    snr: (B, M) matched-filter S/N of each noiseless stamp.
    """

    images: jax.Array
    noise_sigma: float
    g: jax.Array
    params: dict[str, jax.Array]
    snr: jax.Array


def stamp_snr(clean: jax.Array, sigma: float) -> jax.Array:
    """Matched-filter S/N ``sqrt(sum I^2) / sigma`` of each stamp of ``clean`` (..., H, W)."""
    return jnp.sqrt(jnp.sum(clean * clean, axis=(-2, -1))) / sigma


def render_stamps(problem, params: dict[str, jax.Array], g: jax.Array) -> jax.Array:
    """Noise-free stamps (M, H, W) of one realization's M galaxies sheared by ``g`` (2,).

    Shared by the generator and the model: ``params[f]`` has shape (M,).
    """
    im = problem.image
    draw = functools.partial(
        draw_galaxy,
        profile=problem.profile,
        **psf_kwargs(problem.psf),
        nx=im.nx,
        ny=im.ny,
        scale=im.scale,
        fft_size=im.fft_size,
        alias_band=im.alias_band or 0.0,
    )

    def one(flux, hlr, e1, e2, dx, dy):
        return draw(
            flux=flux,
            half_light_radius=hlr,
            e1=e1,
            e2=e2,
            g1=g[0],
            g2=g[1],
            offset=jnp.stack([dx, dy]),
        )

    return jax.vmap(one)(*(params[f] for f in FIELDS))


def _draw_params(problem, key: jax.Array) -> dict[str, jax.Array]:
    """True per-galaxy fields, drawn in float32 whatever the working precision (then
    cast), so a seed gives the same galaxy in a float32 and a float64 campaign."""
    m = problem.image.n_objects
    dtype = jnp.result_type(float)
    out = {}
    for i, (name, p) in enumerate(problem.fields._asdict().items()):
        if p.fixed:
            out[name] = jnp.full((m,), p.args[0], dtype=dtype)
        else:
            out[name] = _draw(p, jax.random.fold_in(key, i), m, dtype)
    return out


def _draw(p, key: jax.Array, m: int, dtype) -> jax.Array:
    """(m,) draws of prior ``p`` from float32 standard variates."""
    a = p.args
    if p.kind in ("normal", "lognormal"):
        z = jax.random.normal(key, (m,), jnp.float32).astype(dtype)
        return a[0] + a[1] * z if p.kind == "normal" else a[0] * jnp.exp(a[1] * z)
    u = jax.random.uniform(key, (m,), jnp.float32).astype(dtype)
    if p.kind == "uniform":
        return a[0] + (a[1] - a[0]) * u
    return to_distribution(p).icdf(u)


def rotate_shapes(params: dict[str, jax.Array], quarter: jax.Array) -> dict[str, jax.Array]:
    """``params`` with (e1, e2) turned by ``quarter`` (0-3) quarter turns of the spin-2
    ellipticity, i.e. ``quarter * 45`` degrees on the sky (exact sign swaps)."""
    e1, e2 = params["e1"], params["e2"]
    q = jnp.mod(quarter, 4)
    r1 = jnp.select([q == 0, q == 1, q == 2], [e1, -e2, -e1], e2)
    r2 = jnp.select([q == 0, q == 1, q == 2], [e2, e1, -e2], -e1)
    return {**params, "e1": r1, "e2": r2}


def simulate_one(
    problem, seed: jax.Array, g: jax.Array, quarter: jax.Array = 0, stream: jax.Array = 0
) -> tuple[jax.Array, dict, jax.Array]:
    """Noisy stamps (M, H, W), true parameters and matched-filter S/N (M,) of ONE
    realization (``quarter``: quarter turns of the intrinsic shapes; ``stream``: 0 for
    the seed's noise field, k > 0 for an independent one). The noise field is drawn in
    float32 and cast: the same data (to the float32 rounding of the clean image) in a
    float32 and a float64 campaign."""
    key = jax.random.PRNGKey(seed)
    k_par, k_noise = jax.random.split(key)
    k_noise = jnp.where(stream == 0, k_noise, jax.random.fold_in(k_noise, stream))
    params = rotate_shapes(_draw_params(problem, k_par), quarter)
    clean = render_stamps(problem, params, g)
    noise = jax.random.normal(k_noise, clean.shape, jnp.float32).astype(clean.dtype)
    return clean + problem.noise_sigma * noise, params, stamp_snr(clean, problem.noise_sigma)


_SIMULATORS: dict[Any, Any] = {}


def _simulator(problem, store=None):
    """One jitted generator per problem (and default float dtype, and ``store``), reused by
    every batch; wrapped by ``store`` when given (:mod:`shearbatch.core.programs`: the
    engine hands down :func:`shearbatch.engine.exported.exportable`, with which a later
    process loads the program instead of tracing it)."""
    from . import programs

    key = (problem, str(jnp.result_type(float)), store)
    if key not in _SIMULATORS:
        one = functools.partial(simulate_one, problem)
        _SIMULATORS[key] = programs.program(
            lambda: jax.jit(lambda *a: jax.lax.map(lambda x: one(*x), a)),
            {"program": "generator", "problem": problem}, "generator", store,
        )  # fmt: skip
    return _SIMULATORS[key]


def simulate(
    problem,
    seeds: Sequence[int],
    g: Sequence[tuple[float, float]],
    quarters: Sequence[int] | None = None,
    streams: Sequence[int] | None = None,
    store: Any = None,
) -> SimBatch:
    """Truth and noisy stamps for realizations with ``seeds`` and true shears ``g``
    (optionally ring copies: ``quarters`` of a turn of the shapes, noise ``streams``):
    images have shape (B, M, H, W). The JAX generator: a problem for another renderer
    goes through :func:`shearbatch.core.generators.simulate`. ``store``: the wrapper of
    its program (:func:`shearbatch.core.programs.program`; None: the plain jit)."""
    if problem.renderer != "jax":
        raise ValueError(
            f"renderer {problem.renderer!r}: draw with shearbatch.core.generators.simulate"
        )
    n = len(seeds)
    seeds_a = jnp.asarray(seeds, dtype=jnp.uint32)
    g_a = jnp.asarray(g, dtype=jnp.result_type(float))
    q_a = jnp.asarray([0] * n if quarters is None else quarters, dtype=jnp.int32)
    s_a = jnp.asarray([0] * n if streams is None else streams, dtype=jnp.uint32)
    images, params, snr = _simulator(problem, store)(seeds_a, g_a, q_a, s_a)
    return SimBatch(images, problem.noise_sigma, g_a, params, snr)
