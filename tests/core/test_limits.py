"""No tensor past XLA's 32-bit element counts, at any batch the engine runs (issue 54).

On a GPU an inverse FFT of more than 2**31 - 1 elements skips its 1/N scaling with no
error (openxla/xla#45009): at the 4,096 lanes ``--batch-size auto`` picks on an H100 or
H200, Level 2's draws stage held a 3.57e9-element operand and every galaxy's importance
weights collapsed. These tests run on the CPU: a program is lowered (traced to StableHLO,
nothing computed, no memory) at the GPU's lane count and its tensor types are read.

- every shipped config's inference program, lowered at :data:`AUTO_MAX_LANES` lanes as a
  GPU runs it (no lane chunk), holds no tensor above :data:`MAX_ELEMENTS` (at 1b98279
  Level 2's held ``4096x50x32x17x32xcomplex<f32>``: this test failed there);
- the engine refuses, in one line naming --batch-size, a batch whose program would hold one;
- the draws stage run in lane pieces gives each realization the result it has in a batch of
  a few lanes (a small Level 2 model, the limit lowered so that 24 lanes split into 5
  pieces), to rounding in posterior sd.
"""

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from shearbatch.campaign import plan_campaign
from shearbatch.core import limits
from shearbatch.core.compare import agreement
from shearbatch.core.methods import map as map_
from shearbatch.core.posterior import build_posterior
from shearbatch.engine.loop import AUTO_MAX_LANES, BatchTooLarge, batch_inputs, inference_program
from shearbatch.schema import load_config
from shearbatch.spec import run_spec
from tests.conftest import write_config

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "configs").is_dir())
# every shipped campaign config (configs/acceptance.yaml holds bias-stats' criteria only)
CONFIGS = [c for c in sorted((ROOT / "configs").glob("*.yaml")) if "image:" in c.read_text()]


def _abstract(spec, lanes):
    im = spec.model.image
    return (jax.ShapeDtypeStruct((lanes, 2), jnp.uint32),
            jax.ShapeDtypeStruct((lanes, im.n_objects, im.ny, im.nx), jnp.result_type(float)))  # fmt: skip


# ----------------------------------------------------------------- the tools themselves


def test_oversized_reads_a_lowered_fft_past_the_limit():
    """An inverse FFT one row past 2**31 elements is found, with its type; one row under
    it is not (both only lowered)."""
    ifft = jax.jit(lambda x: jnp.fft.ifft(x, axis=-1))
    over = ifft.lower(jax.ShapeDtypeStruct((2**16 + 1, 2**15), jnp.complex64)).as_text()
    under = ifft.lower(jax.ShapeDtypeStruct((2**16 - 1, 2**15), jnp.complex64)).as_text()
    big = limits.oversized(over)
    assert big and big[0].elements == (2**16 + 1) * 2**15 > limits.MAX_ELEMENTS
    assert "complex<f32>" in big[0].type
    assert limits.oversized(under) == []


def test_largest_elements_looks_inside_loops_and_maps():
    def fn(x):
        inner = jax.lax.map(lambda r: jnp.outer(r, r).sum(), x)  # (n, n) per row, in a loop
        return jax.lax.while_loop(lambda c: c[1] < 3, lambda c: (c[0] * 2, c[1] + 1), (inner, 0))

    assert limits.largest_elements(fn, jax.ShapeDtypeStruct((7, 300), jnp.float32)) == 300 * 300


def test_lanes_within_and_lane_pieces():
    assert limits.lanes_within(1000, limit=4999) == 4
    with pytest.raises(ValueError, match="more than"):
        limits.lanes_within(5000, limit=4999)
    vfn = jax.vmap(lambda a, b: (jnp.sin(a) * b.sum(), b[::-1]))
    a, b = jnp.arange(11.0), jnp.arange(33.0).reshape(11, 3)
    for width in (1, 3, 4, 11, 50):  # 11 lanes: pieces of 1, 3 (one padded), 4 (padded)...
        got = jax.jit(limits.in_lane_pieces(vfn, width))(a, b)
        for x, y in zip(jax.tree.leaves(got), jax.tree.leaves(vfn(a, b)), strict=True):
            np.testing.assert_array_equal(x, y)


# ----------------------------------------------------- every shipped config at the cap


@pytest.mark.parametrize("config", CONFIGS, ids=[c.stem for c in CONFIGS])
def test_shipped_program_at_auto_max_lanes_is_within_32_bit_counts(config):
    """The program a GPU runs (no lane chunk, the refilled fit where the method has one) at
    the most lanes auto can pick: no tensor above 2**31 - 1 elements, FFT operands or any
    other (a stronger check than the FFT's alone)."""
    spec = run_spec(load_config(config))
    _, program = inference_program(spec, chunk=None)
    text = program.lower(*_abstract(spec, AUTO_MAX_LANES)).as_text()
    assert "tensor<" in text
    assert limits.oversized(text) == [], (config.name, limits.oversized(text)[:3])


def test_the_engine_refuses_a_program_past_the_limit(monkeypatch, tmp_path):
    """plan_lanes lowers the program before compiling it and refuses one holding a tensor
    past the limit (here lowered to 1e5 elements) with one line naming --batch-size
    (a BatchTooLarge: bias-run's one-line exit 2)."""
    from shearbatch.engine.loop import plan_lanes

    spec = run_spec(load_config(write_config(tmp_path / "l0.yaml")))
    _, program = inference_program(spec, chunk=None)
    monkeypatch.setattr(limits, "MAX_ELEMENTS", 100_000)
    with pytest.raises(BatchTooLarge, match=r"--batch-size 64: .* elements .*openxla/xla#45009"):
        plan_lanes(spec, program, 64, 64)


# ------------------------------------------- the draws stage in pieces: batch invariance

B = 24


@pytest.fixture(scope="module")
def small_level2(module_tmp):
    cfg = write_config(module_tmp / "l2.yaml",
                       {"image.n_objects": 4, "inference.map_config.tol": None},
                       base=ROOT / "configs" / "level2.yaml")  # fmt: skip
    spec = run_spec(load_config(cfg))
    plan = plan_campaign([-0.02, 0.02], n_realizations=3, base_seed=40, paired=True,
                         shear_grid_g2=[0.0], rotations=2)  # fmt: skip
    assert len(plan) == B
    sim, keys = batch_inputs(spec, plan)
    return spec, keys, sim.images


def test_draws_in_lane_pieces_match_a_few_lanes(small_level2, monkeypatch):
    """24 lanes as a GPU runs them (no lane chunk), the limit lowered so that the draws
    stage runs in pieces of 5 lanes (5 pieces, the last padded), against the same 24
    realizations run 3 lanes at a time: the same draws, weights, ESS and modes to rounding
    in posterior sd (``agreement``: the optimiser's lanes differ, 6 refilled against 1)."""
    spec, keys, images = small_level2
    post, settings = build_posterior(spec.model), spec.inference.settings
    one = (jax.ShapeDtypeStruct(post.x0.shape, images.dtype),
           jax.ShapeDtypeStruct(images.shape[1:], images.dtype))  # fmt: skip
    per_draw = limits.largest_elements(lambda x, o: map_.galaxy_log_target(post, x, o), *one)
    per_lane = per_draw * min(map_.DRAW_CHUNK, settings.num_samples)
    assert map_.draws_lane_width(post, images, settings) > B  # the real limit: no pieces here
    monkeypatch.setattr(limits, "MAX_ELEMENTS", 5 * per_lane + per_lane // 2)
    assert map_.draws_lane_width(post, images, settings) == 5
    _, many = inference_program(spec, chunk=None)  # traced now, under the lowered limit
    wide = jax.device_get(many(keys, images))
    monkeypatch.undo()
    _, few = inference_program(spec, chunk=None)
    parts = [jax.device_get(few(keys[i : i + 3], images[i : i + 3])) for i in range(0, B, 3)]
    narrow = jax.tree.map(lambda *a: np.concatenate(a, axis=0), *parts)
    agree = agreement(wide, narrow)
    assert agree.within(), agree
    ess_w, ess_n = np.asarray(wide.info.is_ess), np.asarray(narrow.info.is_ess)
    np.testing.assert_allclose(ess_w, ess_n, rtol=1e-6)
    assert np.median(ess_w) > 1.5  # healthy weights, not a collapsed pair that agrees
