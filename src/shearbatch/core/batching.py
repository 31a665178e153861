"""The ONLY place where realizations are batched.

Everything numerical is written for one realization. :func:`batched` vmaps
such a function over a leading realization axis of every argument and jits
it, so one compiled program serves every batch of a campaign (same lane
count, same config). Each realization's RNG key derives from its own seed,
never from its position in the batch, so its result does not depend on its
companions.

With several local devices (GPUs, or CPU devices from
``XLA_FLAGS=--xla_force_host_platform_device_count=N``) :func:`batched` given a
:func:`lane_mesh` runs the vmapped function under ``shard_map``: each device
evaluates its own contiguous block of lanes as an independent program (no
communication: even the batched while-loops of the optimisers stop per device),
so a batch of ``B`` lanes on ``N`` devices computes per device what one device
computes at batch ``B / N``.

On CPU a wide batch is slower per lane than a narrow one: the whole batch's
intermediates (stamps, FFT grids, optimiser states) leave the cache. Given a
``chunk``, :func:`batched` evaluates the lanes in chunks of that width inside the
compiled program (``lax.map`` over ``vmap``-ed chunks, one compiled body): each
chunk's while-loops also stop when that chunk is done rather than the whole batch.
Lanes are independent, so every lane's result is the same as without chunks up to
the last bits of rounding (XLA vectorises another width differently; optimiser step
counts and flags are equal: tests/core/test_batching.py). :func:`default_chunk` picks it per
backend and method (each method's ``cpu_chunk``, from ``bench/bench_chunking.py``'s
measurements: chunks help the optimisers' per-lane while loops, not a fixed-length
scan over many cheap steps such as VI's).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

logger = logging.getLogger(__name__)

__all__ = [
    "LANES",
    "REFILL_DEPTH",
    "batched",
    "batched_fit",
    "chunk_width",
    "default_chunk",
    "in_chunks",
    "lane_mesh",
    "lanes_for",
    "pad_to",
    "realization_keys",
    "refill_lanes",
]

#: the mesh axis of the realization (lane) dimension
LANES = "lanes"


def default_chunk(cpu_chunk: int | None, platform: str | None = None) -> int | None:
    """The lane chunk on ``platform`` (default: JAX's default backend) of a method whose
    measured CPU chunk is ``cpu_chunk``: that on CPU, None (the whole batch in one
    ``vmap``) on GPUs and TPUs."""
    return cpu_chunk if (platform or jax.default_backend()) == "cpu" else None


def chunk_width(lanes: int, chunk: int | None) -> int | None:
    """The chunk width used for ``lanes`` lanes: the largest divisor of ``lanes`` that
    is at most ``chunk`` and at least half of it (one compiled body, no remainder), or
    None (no chunking) when ``chunk`` is unset, covers every lane or has no such divisor."""
    if not chunk or chunk >= lanes:
        return None
    for c in range(chunk, (chunk + 1) // 2 - 1, -1):
        if c > 0 and lanes % c == 0:
            return c
    return None


def in_chunks(vfn: Callable[..., Any], chunk: int) -> Callable[..., Any]:
    """``vfn`` (vmapped over the leading axis) evaluated ``chunk`` lanes at a time."""

    def run(*args: Any) -> Any:
        lanes = jax.tree.leaves(args)[0].shape[0]
        if (c := chunk_width(lanes, chunk)) is None:
            return vfn(*args)
        split = jax.tree.map(lambda a: a.reshape(lanes // c, c, *a.shape[1:]), args)
        out = jax.lax.map(lambda xs: vfn(*xs), split)
        return jax.tree.map(lambda a: a.reshape(lanes, *a.shape[2:]), out)

    return run


#: realizations queued per refilled lane when no lane chunk is asked for
#: (:func:`refill_lanes`): a batch of B realizations runs its refilled optimiser on B / 4
#: lanes. Measured at Level 2, B = 32 on the 2-core CPU (bench/bench_lockstep.py)
REFILL_DEPTH = 4


def refill_lanes(realizations: int, chunk: int | None) -> int:
    """The lanes of a refilled fit (:attr:`~shearbatch.core.methods.base.Method.fit_batch`)
    of ``realizations`` per device: the lane chunk when one is asked for (its lanes are then
    refilled from the whole batch instead of each chunk waiting for its slowest lane), else
    ``ceil(realizations / REFILL_DEPTH)``; at most ``realizations``."""
    if chunk:
        return max(1, min(int(chunk), realizations))
    return max(1, -(-realizations // REFILL_DEPTH))


def _on_mesh(fn: Callable[..., Any], mesh: jax.sharding.Mesh | None) -> Callable[..., Any]:
    """``jit(fn)``; with a ``mesh``, each device runs ``fn`` on its block of the leading
    axis (``shard_map``, no communication)."""
    if mesh is None:
        return jax.jit(fn)
    spec = jax.sharding.PartitionSpec(LANES)
    # check_vma off: the per-realization code has no collectives, and its loops start
    # from constants that the varying-axis type check would ask to be cast
    per_device = jax.shard_map(fn, mesh=mesh, in_specs=spec, out_specs=spec, check_vma=False)
    program = jax.jit(per_device)
    lanes = jax.sharding.NamedSharding(mesh, spec)

    def sharded(*args: Any) -> Any:
        return program(*jax.device_put(args, lanes))

    return sharded


def batched_fit(
    fit_batch: Callable[..., Any],
    mesh: jax.sharding.Mesh | None = None,
    chunk: int | None = None,
) -> Callable[..., Any]:
    """The program of a batch-level fit ``fit_batch(*args, chunk)`` (a method's
    :attr:`~shearbatch.core.methods.base.Method.fit_batch`, which handles the batch's
    realizations together: its arguments have the leading realization axis), jitted; with
    a ``mesh``, each device runs it on its own block of realizations, as :func:`batched`."""
    return _on_mesh(lambda *args: fit_batch(*args, chunk), mesh)


#: set to 1 to split lanes over several CPU devices anyway (the tests of the multi-device
#: path do, at Level 0, where it has not hung)
CPU_SPLIT_ENV = "SHEARBATCH_CPU_LANE_SPLIT"


def lane_mesh(devices: Sequence[Any] | None = None) -> jax.sharding.Mesh | None:
    """A one-axis mesh over ``devices`` (default: every local device); None for one device.

    By default several **CPU** devices (``XLA_FLAGS=--xla_force_host_platform_device_count``)
    get no mesh: their programs share one intra-op thread pool, and jaxlib's batched
    LAPACK kernels (the triangular solves of the Laplace algebra) fan out into that pool
    and wait for it from inside it. A Level 2 batch on two CPU devices of the 2-core
    machine hung that way for good (both pool threads in ``lapack_dtrsm_ffi`` ->
    ``ParallelBatchMap``, load 0; ``--xla_cpu_multi_thread_eigen=false`` did not help).
    Array tasks, one per core, are the way to use a CPU's cores (docs/slurm.md);
    ``SHEARBATCH_CPU_LANE_SPLIT=1`` splits anyway (the multi-device tests)."""
    import numpy as np

    devs = list(jax.local_devices() if devices is None else devices)
    if len(devs) < 2:
        return None
    if (devices is None and all(d.platform == "cpu" for d in devs)
            and os.environ.get(CPU_SPLIT_ENV, "") != "1"):  # fmt: skip
        logger.warning("%d CPU devices: lanes are not split over them (XLA's CPU runtime can "
                       "deadlock when CPU devices run batched LAPACK kernels at once); run "
                       "one array task per core instead, or set %s=1 to split anyway",
                       len(devs), CPU_SPLIT_ENV)  # fmt: skip
        return None
    return jax.sharding.Mesh(np.array(devs), (LANES,))


def lanes_for(batch_size: int, mesh: jax.sharding.Mesh | None) -> int:
    """``batch_size`` rounded up to a multiple of the mesh's device count."""
    n = 1 if mesh is None else mesh.devices.size
    return -(-batch_size // n) * n


def batched(
    fn: Callable[..., Any], mesh: jax.sharding.Mesh | None = None, chunk: int | None = None
) -> Callable[..., Any]:
    """``jit(vmap(fn))`` over the leading realization axis of every argument; with a
    ``mesh``, that axis is split over its devices (``shard_map``, no communication);
    with a ``chunk``, each device evaluates its lanes ``chunk`` at a time
    (:func:`chunk_width`)."""
    vfn = jax.vmap(fn) if not chunk else in_chunks(jax.vmap(fn), chunk)
    return _on_mesh(vfn, mesh)


def realization_keys(seeds: Sequence[int], rng_seed: int = 0) -> jax.Array:
    """Per-realization inference keys, (B, 2): ``fold_in(PRNGKey(seed), rng_seed)``.

    The generator derives its keys with ``split(PRNGKey(seed))``, so inference
    randomness never reuses the data's.
    """
    base = jax.vmap(jax.random.PRNGKey)(jnp.asarray(seeds, dtype=jnp.uint32))
    return jax.vmap(lambda k: jax.random.fold_in(k, 1_000_003 + rng_seed))(base)


def pad_to(items: Sequence[Any], size: int) -> list[Any]:
    """Pad a short batch by repeating its last item (padding lanes are never written)."""
    if not items:
        raise ValueError("cannot pad an empty batch")
    return list(items) + [items[-1]] * (size - len(items))
