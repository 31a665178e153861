"""The ONLY place where realizations are batched.

Everything numerical is written for one realization. :func:`batched` vmaps
such a function over a leading realization axis of every argument and jits
it, so one compiled program serves every batch of a campaign (same lane
count, same config). Each realization's RNG key derives from its own seed,
never from its position in the batch, so its result does not depend on its
companions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

__all__ = ["batched", "pad_to", "realization_keys"]


def batched(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``jit(vmap(fn))`` over the leading realization axis of every argument."""
    return jax.jit(jax.vmap(fn))


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
