"""Test configuration: CPU, float64, strict rank promotion, shared compilation cache.

JAX flags are set here (and in the CLI), never by library code at import time.
"""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import copy
from pathlib import Path

import jax
import pytest
import yaml

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_rank_promotion", "raise")

_CACHE = os.environ.setdefault(
    "SHEARBATCH_CACHE_DIR",
    os.path.join(os.path.expanduser("~"), ".cache", "shearbatch", "jax-test-cache"),
)
jax.config.update("jax_compilation_cache_dir", _CACHE)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


@pytest.fixture
def rng_key():
    return jax.random.PRNGKey(0)


LEVEL0 = Path(__file__).resolve().parent.parent / "configs" / "level0.yaml"


def write_config(path: Path, edits: dict | None = None, base: Path = LEVEL0) -> str:
    """Write ``base`` with dotted-key ``edits`` applied (e.g. {"image.noise.sigma": 1e-3})."""
    raw = yaml.safe_load(base.read_text())
    raw = copy.deepcopy(raw)
    for dotted, value in (edits or {}).items():
        node = raw
        keys = dotted.split(".")
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = value
    path.write_text(yaml.safe_dump(raw))
    return str(path)


# The run ids of the seed's example (grid 0.01 0.02 0.05, 2 realizations, base seed 42).
SEED_IDS = [f"g1_+{g:.4f}_g2_+0.0000_s{seed}" for g in (0.01, 0.02, 0.05) for seed in (42, 43)]


def count_calls(monkeypatch, module, name: str) -> list:
    """Replace ``module.name`` by a wrapper that appends 1 per call (per trace for a
    function only called while tracing); returns that list."""
    calls = []
    real = getattr(module, name)

    def counting(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(module, name, counting)
    return calls


@pytest.fixture(scope="module")
def module_tmp(tmp_path_factory, request):
    return tmp_path_factory.mktemp(request.module.__name__.split(".")[-1])
