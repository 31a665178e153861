"""Tensor sizes that XLA's kernels count in 32-bit integers, and how the programs stay below.

A vmapped program's tensors grow with its lanes. Some of XLA's GPU kernels take their
element counts as a C ``int``: above ``2**31 - 1`` elements they go wrong **silently**.
The one this project met (issue 54): XLA's GPU inverse FFT scales its output by 1/N
with cuBLAS's ``scal``, whose count is an ``int``; past 2**31 elements the count
overflows to a negative number, cuBLAS does nothing, and the inverse FFT comes back N
times too large, with no error (openxla/xla#45009, open; the fix, openxla/xla#45227,
which scales in chunks of at most ``INT_MAX``, is not merged as of 2026-11-28, so no
jaxlib has it yet; jax-ml/jax#18453 reported the same symptom in 2023). At Level 2 the
importance-weighted draws stage (:func:`shearbatch.core.methods.map.interim_fit`, its
draws rendered :data:`~shearbatch.core.methods.map.DRAW_CHUNK` at a time) held one
``lanes x 50 x 32 x 17 x 32`` complex inverse-FFT operand: 3.57e9 elements at the 4,096
lanes ``--batch-size auto`` picks on an H100 or H200, past the limit from 2,468 lanes.
Every galaxy's importance weights then collapsed onto one draw and m came out near -0.1
to -0.17.

What the project does about it:

- :func:`lanes_within`: a stage whose per-lane tensors are known (:func:`largest_elements`
  of one lane's computation, traced abstractly: shapes only, no memory) runs its lanes in
  pieces of at most that many lanes (:func:`in_lane_pieces`), so that no tensor of it
  exceeds :data:`MAX_ELEMENTS` at any lane count. The MAP draws stage does
  (:func:`shearbatch.core.methods.map.fit_batch`).
- :func:`oversized`: every tensor of a lowered program (its StableHLO text) above
  :data:`MAX_ELEMENTS`. The engine refuses, before the first batch, a program that has one
  (:func:`shearbatch.engine.loop.compile_lanes`), whatever its backend: a CPU would
  compute it correctly, but the same campaign must give the same answer on every device.
  ``tests/core/test_limits.py`` lowers every shipped config's program at the most lanes
  ``--batch-size auto`` can pick and finds none.

The guard stays until the project's lowest supported jaxlib scales the inverse FFT in
chunks (openxla/xla#45227 or its successor), and then for the other 32-bit counts
(cuFFT plans' batch, cuBLAS/cuSOLVER batch counts), which this bound covers too.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import jax

__all__ = [
    "MAX_ELEMENTS",
    "Oversized",
    "in_lane_pieces",
    "lanes_within",
    "largest_elements",
    "oversized",
]

#: the most elements one tensor of a program may hold: ``INT_MAX``, the largest count a
#: C ``int`` holds (cuBLAS's ``scal`` in XLA's GPU inverse FFT, cuFFT's batch)
MAX_ELEMENTS = 2**31 - 1


def _jaxprs(params: Any) -> Iterator[Any]:
    """The jaxprs among an equation's parameters (loop bodies, branches, called programs)."""
    vals = params.values() if isinstance(params, dict) else params
    for v in vals:
        if hasattr(v, "eqns"):  # a Jaxpr
            yield v
        elif hasattr(v, "jaxpr") and hasattr(v.jaxpr, "eqns"):  # a ClosedJaxpr
            yield v.jaxpr
        elif isinstance(v, (tuple, list)):
            yield from _jaxprs(v)


def _jaxpr_largest(jaxpr: Any) -> int:
    big = 0
    for eqn in jaxpr.eqns:
        for v in (*eqn.invars, *eqn.outvars):
            shape = getattr(getattr(v, "aval", None), "shape", None)
            if shape is not None:
                big = max(big, math.prod(shape))
        for sub in _jaxprs(eqn.params):
            big = max(big, _jaxpr_largest(sub))
    return big


def largest_elements(fn: Callable[..., Any], *args: Any) -> int:
    """Elements of the largest tensor that ``fn(*args)`` computes with, inside loops,
    branches and called programs too; ``args`` may be ``jax.ShapeDtypeStruct``: ``fn`` is
    traced, never run."""
    return _jaxpr_largest(jax.make_jaxpr(fn)(*args).jaxpr)


def lanes_within(per_lane: int, limit: int | None = None) -> int:
    """The most lanes of a stage whose largest tensor holds ``per_lane`` elements per lane
    that keep it within ``limit`` (default :data:`MAX_ELEMENTS`, read at each call);
    :class:`ValueError` when not even one lane does."""
    limit = MAX_ELEMENTS if limit is None else limit
    if per_lane > limit:
        raise ValueError(f"one lane's tensor holds {per_lane:,} elements, more than the "
                         f"{limit:,} XLA's kernels can count")  # fmt: skip
    return max(1, limit // max(1, per_lane))


def in_lane_pieces(vfn: Callable[..., Any], width: int) -> Callable[..., Any]:
    """``vfn`` (vmapped over the leading axis of every argument) evaluated in pieces of at
    most ``width`` lanes (``lax.map`` over the pieces, one compiled body): as few pieces as
    the width allows, of equal size, the last padded by repeating the last lane (its
    results dropped). Lanes are independent, so each lane's result is its own up to the
    last bits of rounding (another vector width)."""

    def run(*args: Any) -> Any:
        lanes = jax.tree.leaves(args)[0].shape[0]
        if lanes <= width:
            return vfn(*args)
        pieces = -(-lanes // width)
        w = -(-lanes // pieces)
        pad = pieces * w - lanes

        def split(a: Any) -> Any:
            if pad:
                a = jax.numpy.concatenate([a, jax.numpy.repeat(a[-1:], pad, axis=0)])
            return a.reshape(pieces, w, *a.shape[1:])

        out = jax.lax.map(lambda xs: vfn(*xs), jax.tree.map(split, args))
        return jax.tree.map(lambda a: a.reshape(pieces * w, *a.shape[2:])[:lanes], out)

    return run


class Oversized(NamedTuple):
    """One tensor type of a lowered program above the limit."""

    elements: int
    type: str


_TENSOR = re.compile(r"tensor<((?:\d+x)+)([a-z]+[0-9]*(?:<[a-z0-9]+>)?)>")


def oversized(text: str, limit: int | None = None) -> list[Oversized]:
    """Every distinct tensor type above ``limit`` elements in a lowered program's
    StableHLO text (``jit(f).lower(...).as_text()``), largest first (``limit``: default
    :data:`MAX_ELEMENTS`, read at each call)."""
    limit = MAX_ELEMENTS if limit is None else limit
    seen: dict[str, int] = {}
    for m in _TENSOR.finditer(text):
        dims = m.group(1)
        if m.group(0) in seen:
            continue
        seen[m.group(0)] = math.prod(int(d) for d in dims[:-1].split("x"))
    big = [Oversized(n, t) for t, n in seen.items() if n > limit]
    return sorted(big, reverse=True)
