"""Continuous batching (refill) of per-realization iterative fits (issue 42, item 3).

Vmapped, a ``lax.while_loop`` runs until its slowest lane is done: every lane of a batch
executes the body as many times as the lane that needs the most iterations (the
finished lanes' results are selected away). At Level 2 (32 galaxies per realization) a
MAP fit takes a median of ~9 Newton steps and up to ~35, so a batch of 32 lanes in one
``vmap`` used 0.48-0.92 of the lane-steps it executed.

:func:`refill_loop` holds ``lanes`` (L) lanes of iterate state and a queue of B
realizations. Each iteration advances every occupied lane by one step of its own
realization (``vmap`` of ``step`` over the lanes, each with its realization's data,
gathered by index); a lane whose fit has stopped writes its final state to its
realization's output slot and loads the next queued realization's initial state.
The loop ends when the queue is empty and every lane has stopped. Executed
lane-steps are ``L x iterations``: the loop returns its iteration count, so the
efficiency it reports is what ran, not an estimate.

A realization's iterates are exactly those of the per-realization loop (the same
``step`` from the same initial state, the same stopping rule ``cond``), whichever lane
it lands in and whichever realizations share the lanes: nothing couples lanes (no
reduction over the lane axis enters a lane's arithmetic), so its result is the same,
bit for bit, as when it runs alone in a program of the same shape
(tests/core/test_refill.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

__all__ = ["refill_loop"]


def _take(tree: Any, idx: jax.Array) -> Any:
    return jax.tree.map(lambda a: a[idx], tree)


def _select(mask: jax.Array, a: Any, b: Any) -> Any:
    """Per lane: ``a`` where ``mask`` (L,), else ``b`` (pytrees with a leading lane axis)."""
    return jax.tree.map(
        lambda x, y: jnp.where(mask.reshape(mask.shape + (1,) * (x.ndim - 1)), x, y), a, b
    )


def refill_loop(
    step: Callable[[Any, Any, jax.Array], Any],
    cond: Callable[[Any, Any], jax.Array],
    init: Any,
    data: Any,
    budget: Any,
    lanes: int,
) -> tuple[Any, jax.Array]:
    """Run every realization's loop ``while cond(c, budget): c = step(c, data, live)``
    on ``lanes`` lanes refilled from a queue; returns ``(final, iterations)``.

    ``init``, ``data`` and ``budget``: pytrees with a leading realization axis B (each
    realization's initial carry, its data and what ``cond`` reads besides the carry, e.g.
    its step budget). ``step(c, d, live)`` is ONE realization's iteration (vmapped over the
    lanes here); ``live`` is False for an empty lane (the queue ran out), whose result is
    discarded: a step may use it to skip optional work (an inner loop) there, never to
    change a live lane's arithmetic. ``final``: each realization's carry when its ``cond``
    first failed (its ``init`` when it fails at once, as a ``while_loop`` that runs no
    iteration); ``iterations``: the loop's trip count (each executes ``lanes`` lane-steps).
    Realizations are loaded in batch order (those that run at all)."""
    n = jax.tree.leaves(init)[0].shape[0]
    lanes = max(1, min(int(lanes), n))
    runs = jax.vmap(cond)(init, budget)
    order = jnp.argsort(~runs, stable=True)  # realizations that run at all, in batch order
    n_run = jnp.sum(runs)
    slot = jnp.arange(lanes)
    lane_r = jnp.where(slot < n_run, order[slot], n)  # n: an empty lane
    lane_d = order[slot]  # the data an empty lane steps on (a valid realization's)
    state = (lane_r, lane_d, _take(init, lane_d), jnp.minimum(lanes, n_run), init, jnp.asarray(0))

    def loop_cond(s):
        return jnp.any(s[0] < n)

    def body(s):
        lane_r, lane_d, c, q, out, t = s
        live = lane_r < n
        c = jax.vmap(step)(c, _take(data, lane_d), live)
        fin = live & ~jax.vmap(cond)(c, _take(budget, lane_d))
        # finished lanes write their realization's slot (index n: dropped)
        slot_out = jnp.where(fin, lane_r, n)
        out = jax.tree.map(lambda o, v: o.at[slot_out].set(v, mode="drop"), out, c)
        # and load the next queued realizations, in lane order
        nq = q + jnp.cumsum(fin) - 1
        nxt = jnp.where(nq < n_run, order[jnp.minimum(nq, n - 1)], n)
        lane_r = jnp.where(fin, nxt, lane_r)
        load = fin & (lane_r < n)
        lane_d = jnp.where(load, lane_r, lane_d)
        c = _select(load, _take(init, lane_d), c)
        return lane_r, lane_d, c, q + jnp.sum(fin), out, t + 1

    *_, out, trips = jax.lax.while_loop(loop_cond, body, state)
    return out, trips
