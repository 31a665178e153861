"""Test configuration: CPU, float64, strict rank promotion, shared compilation cache.

JAX flags are set here (and in the CLI), never by library code at import time.
"""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import copy
import types
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
        # a copy: a later dotted edit into this value must not reach the caller's dict
        node[keys[-1]] = copy.deepcopy(value)
    path.write_text(yaml.safe_dump(raw))
    return str(path)


# The run ids of the seed's example (grid 0.01 0.02 0.05, 2 realizations, base seed 42).
SEED_IDS = [f"g1_+{g:.4f}_g2_+0.0000_s{seed}" for g in (0.01, 0.02, 0.05) for seed in (42, 43)]


def run_engine(spec, realizations, *, simulate_fn=None, **execution):
    """The engine's two calls, :func:`shearbatch.engine.prepare` (the program, the lane
    decision, the batches) then :func:`shearbatch.engine.run`, with the
    :class:`~shearbatch.engine.Execution`'s fields as keywords: the tests' spelling."""
    from shearbatch.engine import Execution, prepare, run

    return run(prepare(spec, realizations, Execution(**execution), simulate_fn=simulate_fn))


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


#: Two answers of the same realization from differently shaped programs (another batch
#: size or device) each stop within the Newton tolerance of the mode: half-decrement
#: <= 1e-10 in float64, i.e. within sqrt(2e-10) = 1.4e-5 posterior sd; they may take
#: different step counts when rounding moves a stopping test, so they agree to
#: 2 x 1.4e-5 sd, not to rounding.
OPTIMIZER_SD_TOL = 1e-4


def max_diff_sd(a: dict, b: dict) -> float:
    """Largest difference between two posteriors' draws ``{site: (chain, draw, ...)}``
    (as ``read_posterior`` returns them), in units of ``b``'s posterior sd per element."""
    import numpy as np

    worst = 0.0
    for k, vb in b.items():
        vb, va = np.asarray(vb, float), np.asarray(a[k], float)
        sd = vb.std(axis=(0, 1))
        worst = max(worst, float(np.max(np.abs(va - vb) / np.where(sd > 0, sd, 1.0))))
    return worst


def as_before_checksums(root: Path, manifest: Path | None = None, records: bool = True) -> None:
    """Make the campaign in ``root`` one written by a version from before checksums
    existed: its ``campaign.json`` (``manifest``'s, default its own) without
    ``record_format`` and created the day before :data:`shearbatch.io.integrity.CHECKSUMS_SINCE`;
    with ``records``, each ``convergence.json`` in it without ``checksums`` and ``code``
    (neither was written then)."""
    import datetime
    import json

    from shearbatch.io import integrity

    man = json.loads((manifest or root / "campaign.json").read_text())
    man.pop(integrity.FORMAT_KEY)
    man["created_at"] = (integrity.CHECKSUMS_SINCE - datetime.timedelta(days=1)).isoformat()
    (root / "campaign.json").write_text(json.dumps(man, indent=1))
    for p in root.glob("*/convergence.json") if records else ():
        conv = json.loads(p.read_text())
        del conv[integrity.KEY], conv["code"]
        p.write_text(json.dumps(conv))


def load_script(relpath: str) -> types.ModuleType:
    """A script of the repository (``ci/...``, ``bench/...``: folders that are no
    packages) loaded as a module from its path relative to the repository root."""
    import importlib.util

    path = Path(__file__).resolve().parent.parent / relpath
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
