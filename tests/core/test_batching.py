"""Lane chunking inside the compiled program (core/batching.py): which width is used, and
that chunks change no lane's result: per-lane while loops give exactly the unchunked
values, and the MAP program agrees with the unchunked one (of the chunk's width, and of
the whole batch) to rounding in posterior units, with the same flags."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from shearbatch.campaign import plan_campaign
from shearbatch.core.batching import batched, chunk_width, default_chunk, realization_keys
from shearbatch.core.compare import agreement
from shearbatch.engine.loop import generate, inference_program, lane_chunk_for
from shearbatch.schema import load_config
from shearbatch.spec import method_spec, run_spec
from tests.conftest import write_config


@pytest.mark.parametrize(
    ("lanes", "chunk", "width"),
    [(64, 16, 16), (64, 8, 8), (48, 16, 16), (40, 16, 10), (20, 16, 10), (17, 16, None),
     (16, 16, None), (8, 16, None), (64, None, None), (64, 0, None), (12, 8, 6), (7, 8, None)],
)  # fmt: skip
def test_chunk_width_divides_the_lanes_or_is_none(lanes, chunk, width):
    assert chunk_width(lanes, chunk) == width


def test_default_chunk_per_backend_and_method():
    assert default_chunk(4, "cpu") == 4 and default_chunk(None, "cpu") is None
    assert default_chunk(4, "gpu") is None and default_chunk(4, "tpu") is None
    cfg = load_config("configs/level0.yaml")
    spec = run_spec(cfg)  # MAP: chunks of 4 on CPU
    assert lane_chunk_for("auto", spec) == default_chunk(4)
    vi_inf = method_spec(cfg.inference.model_copy(update={"method": "vi"}))
    vi = spec._replace(inference=vi_inf)  # VI's fixed-length scan is faster unchunked
    assert lane_chunk_for("auto", vi) is None
    assert lane_chunk_for("off", spec) is None and lane_chunk_for(None, spec) is None
    assert lane_chunk_for("8", vi) == 8 and lane_chunk_for(0, spec) is None


def _newton_sqrt(a):
    """A per-lane while loop whose trip count depends on the lane (as the optimisers')."""

    def body(s):
        x, n = s
        return 0.5 * (x + a / x), n + 1

    x, n = jax.lax.while_loop(lambda s: jnp.abs(s[0] ** 2 - a) > 1e-12 * a, body, (a + 1.0, 0))
    return {"x": x, "n": n, "y": jnp.sum(jnp.sin(jnp.arange(50.0) * x))}


def test_chunked_while_loops_stop_per_lane_and_match():
    a = jnp.asarray(np.random.default_rng(0).uniform(0.1, 1e6, size=24))
    whole = batched(_newton_sqrt)(a)
    chunked = batched(_newton_sqrt, chunk=8)(a)
    assert len(set(np.asarray(whole["n"]).tolist())) > 3  # trip counts differ per lane
    for k in whole:
        np.testing.assert_array_equal(chunked[k], whole[k])
    for i in range(0, 24, 8):  # and each chunk is a batch of 8
        part = batched(_newton_sqrt)(a[i : i + 8])
        for k in part:
            np.testing.assert_array_equal(chunked[k][i : i + 8], part[k])


@pytest.fixture(scope="module")
def map_programs(module_tmp):
    """Level 0 MAP + Laplace on a 16-pixel stamp at survey noise: 16 lanes in chunks of 8,
    the same 16 unchunked, and the first 8 alone."""
    cfg = write_config(module_tmp / "small.yaml", {"image.size_x": 16, "image.size_y": 16,
                                                   "image.noise.sigma": 2e-3})  # fmt: skip
    spec = run_spec(load_config(cfg))
    plan = plan_campaign((-0.05, -0.02, 0.02, 0.05), n_realizations=4)
    sim = generate(spec, plan)
    keys = realization_keys([r.seed for r in plan], spec.rng_seed)
    run = {c: inference_program(spec, chunk=c)[1] for c in (8, None)}
    return {
        "chunked": run[8](keys, sim.images),
        "whole": run[None](keys, sim.images),
        "eight": run[None](keys[:8], sim.images[:8]),
    }


def _same_to_rounding(a, b):
    """Agreement to rounding in each quantity's units (shearbatch.core.compare: draws and
    modes within 1e-6 posterior sd, potentials and log q within 1e-9 relative, flags
    equal, step counts within one): XLA vectorises another width differently, so the last
    bits of a reduction may differ, and another CPU rounds differently again."""
    got = agreement(a, b)
    assert got.within(), got


def test_map_chunked_matches_a_batch_of_its_width(map_programs):
    chunked, eight = map_programs["chunked"], map_programs["eight"]
    assert bool(np.all(chunked.info.converged))
    _same_to_rounding(jax.tree.map(lambda x: x[:8], chunked), eight)


def test_map_chunked_matches_the_unchunked_batch(map_programs):
    _same_to_rounding(map_programs["chunked"], map_programs["whole"])


class _Dev:
    def __init__(self, platform: str, i: int):
        self.platform, self.id, self.device_kind = platform, i, platform


def test_several_cpu_devices_get_no_mesh_unless_asked(monkeypatch, caplog):
    """Two CPU devices are not split by default (a Level 2 batch deadlocked in jaxlib's
    batched LAPACK kernels that way), with a warning naming the override; the override
    and explicit devices split; GPUs always split."""
    from shearbatch.core import batching

    cpus = [_Dev("cpu", 0), _Dev("cpu", 1)]
    monkeypatch.setattr(jax, "local_devices", lambda: cpus)
    monkeypatch.setattr(jax.sharding, "Mesh", lambda devs, axes: ("mesh", len(devs), axes))
    monkeypatch.delenv(batching.CPU_SPLIT_ENV, raising=False)
    with caplog.at_level("WARNING", logger="shearbatch.core.batching"):
        assert batching.lane_mesh() is None
    assert "2 CPU devices: lanes are not split" in caplog.text
    assert batching.CPU_SPLIT_ENV in caplog.text
    assert batching.lane_mesh(cpus) == ("mesh", 2, (batching.LANES,))
    monkeypatch.setenv(batching.CPU_SPLIT_ENV, "1")
    assert batching.lane_mesh() == ("mesh", 2, (batching.LANES,))
    monkeypatch.delenv(batching.CPU_SPLIT_ENV)
    monkeypatch.setattr(jax, "local_devices", lambda: [_Dev("gpu", 0), _Dev("gpu", 1)])
    assert batching.lane_mesh() == ("mesh", 2, (batching.LANES,))
    monkeypatch.setattr(jax, "local_devices", lambda: cpus[:1])
    assert batching.lane_mesh() is None
