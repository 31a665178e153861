"""Test configuration: CPU, float64, strict rank promotion, shared compilation cache.

JAX flags are set here (and in the CLI), never by library code at import time.
"""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_rank_promotion", "raise")

_CACHE = os.environ.get(
    "SHEARBATCH_CACHE_DIR",
    os.path.join(os.path.expanduser("~"), ".cache", "shearbatch", "jax-test-cache"),
)
jax.config.update("jax_compilation_cache_dir", _CACHE)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


@pytest.fixture
def rng_key():
    return jax.random.PRNGKey(0)
