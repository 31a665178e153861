"""MAP fits whose lanes do not wait for the slowest lane (issue 42, item 3): the interim
model's optimiser runs on L lanes refilled from a queue of the batch's realizations
(core/methods/refill.py, map.laplace_batch, map.fit_batch).

A refilled realization's result is, bit for bit, the result of the same realization run
alone in the same program shape (the batch being that realization B times), whichever
lane it lands in and after whichever realization held that lane; its step counts and flags
are the lockstep fit's (the vmapped per-realization program) and its mode agrees with it
to rounding in posterior sd. The batch report's efficiency is counted inside the program.

Level 2 with 4 galaxies per realization (the interim model, Gauss-Newton then Newton,
Student-t draws at the target mode, as configs/level2.yaml), 8 realizations on 2 lanes;
exact Newton to its default 1e-10, and in the slow tier to configs/level2.yaml's 1e-5 (the
bitwise properties the same; the lockstep comparison to 2 sqrt(2 tol) sd).
"""

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from shearbatch.campaign import plan_campaign
from shearbatch.core import block_arrow
from shearbatch.core.compare import agreement
from shearbatch.core.methods import map as map_
from shearbatch.core.methods.refill import refill_loop
from shearbatch.core.posterior import build_posterior
from shearbatch.engine.loop import batch_inputs, inference_program
from shearbatch.schema import load_config
from shearbatch.spec import run_spec
from tests.conftest import run_engine, write_config

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "configs").is_dir())
LANES, B = 2, 8


# --------------------------------------------------------------- the loop on its own


def _sqrt_step(c, a, live):
    x, n = c
    return 0.5 * (x + a / x), n + 1


def _sqrt_cond(c, a):
    x, n = c
    return (jnp.abs(x * x - a) > 1e-12 * a) & (n < 100) & (a > 0)


@pytest.mark.parametrize("lanes", [1, 3, 8, 40])
def test_refill_loop_gives_each_realizations_own_loop(lanes):
    """Every realization ends where its own while loop ends (bit for bit), including one
    that runs no iteration (a = 0) and lanes >= realizations; the trip count is at least
    the work / lanes and at most the work (one lane)."""
    a = jnp.asarray(np.random.default_rng(1).uniform(0.1, 1e6, size=24)).at[5].set(0.0)
    init = (a + 1.0, jnp.zeros(24, int))
    out, trips = jax.jit(lambda i, d: refill_loop(_sqrt_step, _sqrt_cond, i, d, d, lanes))(init, a)
    alone = jax.vmap(lambda x0, ai: jax.lax.while_loop(
        lambda c: _sqrt_cond(c, ai), lambda c: _sqrt_step(c, ai, True), (x0, 0)))(a + 1.0, a)  # fmt: skip
    np.testing.assert_array_equal(out[0], alone[0])
    np.testing.assert_array_equal(out[1], alone[1])
    assert int(out[1][5]) == 0
    work = int(np.sum(alone[1]))
    used = min(lanes, 24)
    assert -(-work // used) <= int(trips) <= work
    if used == 1:
        assert int(trips) == work  # one lane: never idle


# --------------------------------------------------------------- Level 2, 4 galaxies


#: configs/level2.yaml's map_config.tol (1e-5)
SHIPPED_TOL = load_config(ROOT / "configs" / "level2.yaml").inference.map_config.tol


@pytest.fixture(
    scope="module",
    params=[pytest.param(None, id="tol_null"),
            pytest.param(SHIPPED_TOL, id="tol_shipped", marks=pytest.mark.slow)],
)  # fmt: skip
def level2(module_tmp, request):
    """The config, keys and images; exact Newton to its default 1e-10 (null) or, in the
    slow tier, to configs/level2.yaml's 1e-5. At 1e-10 the lockstep program (compiled
    separately) agrees with the refilled one to rounding: the last exact iteration washes
    out the float32 Gauss-Newton rounding between the two. At 1e-5 each stops within
    sqrt(2 tol) posterior sd of the mode (test_step_counts_and_flags_are_the_lockstep_fits).
    Refilling itself (the bitwise tests) does not depend on tol."""
    tol = request.param
    cfg = write_config(module_tmp / f"l2_{tol}.yaml",
                       {"image.n_objects": 4, "inference.map_config.tol": tol},
                       base=ROOT / "configs" / "level2.yaml")  # fmt: skip
    spec = run_spec(load_config(cfg))
    plan = plan_campaign([0.02], n_realizations=2, base_seed=0, paired=True,
                         shear_grid_g2=[0.0], rotations=2)  # fmt: skip
    assert len(plan) == B
    sim, keys = batch_inputs(spec, plan)
    return spec, keys, sim.images


@pytest.fixture(scope="module")
def programs(level2):
    """The refilled program (B realizations on LANES lanes) on the batch and on each
    realization alone (its B copies), and the lockstep program (vmap of the fit)."""
    spec, keys, images = level2
    method, refilled = inference_program(spec, chunk=LANES)
    assert method.fit_batch is not None
    _, lockstep = inference_program(spec, chunk=None, refill=False)
    batch = jax.device_get(refilled(keys, images))
    rep = lambda a, r: jnp.repeat(a[r : r + 1], B, axis=0)  # noqa: E731
    alone = [jax.device_get(refilled(rep(keys, r), rep(images, r))) for r in range(B)]
    return {"method": method, "batch": batch, "alone": alone,
            "lockstep": jax.device_get(lockstep(keys, images)),
            "tol": spec.inference.settings.tol}  # fmt: skip


def _lane(tree, r):
    return jax.tree.map(lambda a: np.asarray(a)[r], tree)


def _results(draws):
    """Every leaf of a realization's result (the batch telemetry left out)."""
    info = draws.info._replace(lane_steps=None, refill_lanes=None)
    return jax.tree_util.tree_flatten_with_path(draws._replace(info=info))[0]


def test_a_refilled_lane_is_bitwise_the_realization_run_alone(programs):
    """Draws, weights, mode, step counts, flags, Laplace widths: identical bits."""
    n = np.asarray(programs["batch"].info.n_steps)
    assert len(set(n.tolist())) > 1  # the fits take different numbers of steps
    for r in range(B):
        got, ref = _lane(programs["batch"], r), _lane(programs["alone"][r], 0)
        for (path, a), (_, b) in zip(_results(got), _results(ref), strict=True):
            assert np.array_equal(a, b, equal_nan=True), (r, jax.tree_util.keystr(path))


def test_step_counts_and_flags_are_the_lockstep_fits(programs):
    """Same iterations as the vmapped per-realization fit: step counts within one (the
    other program's rounding may tip one stopping test) and equal flags,
    the same mode and draws to rounding in posterior sd (the programs' widths differ, so
    XLA may vectorise the same arithmetic differently). At the shipped tol (slow tier)
    the two programs' float32 Gauss-Newton roundings are not washed out: each fit stops
    at a half-decrement <= tol, i.e. within sqrt(2 tol) posterior sd of the mode (the
    Newton step still to go, whose whitened norm bounds every coordinate's shift in its
    marginal sd), so the two modes, and the draws made from them with the same random
    numbers, agree to 2 sqrt(2 tol) = 8.9e-3 sd, the step counts to one step."""
    got, ref = programs["batch"], programs["lockstep"]
    np.testing.assert_array_equal(got.info.converged, ref.info.converged)
    np.testing.assert_array_equal(got.info.laplace_ok, ref.info.laplace_ok)
    agree = agreement(got, ref)
    if programs["tol"] is None:
        # rounding in either program can tip one stopping test by one step, no more
        assert agree.within() and agree.max_steps_diff <= 1, agree
    else:
        bound = 2.0 * np.sqrt(2.0 * programs["tol"])
        assert agree.max_diff_sd <= bound and agree.flags_equal, agree
        assert agree.max_steps_diff <= 1 and agree.max_abs_info_diff <= bound, agree


@pytest.fixture(scope="module")
def laplace_fits(level2):
    """map.laplace_batch (the refilled optimiser alone) on the batch and on realization
    r alone, with the Laplace factor of each fit; map.laplace per realization (vmapped)."""
    spec, _, images = level2
    post = build_posterior(spec.model)
    settings = spec.inference.settings
    objective = post.potential_fn  # configs/level2.yaml: proposal_centre target

    @jax.jit
    def refilled(obs):
        opt, h, executed = map_.laplace_batch(obs, post, settings, objective, LANES)
        fac, ok = jax.vmap(block_arrow.factor)(h)
        return opt, fac, ok, executed

    lockstep = jax.jit(jax.vmap(lambda o: map_.laplace(o, post, settings, objective)))
    alone = [jax.device_get(refilled(jnp.repeat(images[r : r + 1], B, axis=0))) for r in range(B)]
    return jax.device_get(refilled(images)), alone, jax.device_get(lockstep(images))


def test_refilled_fit_and_laplace_factor_are_bitwise_alone(laplace_fits):
    batch, alone, lockstep = laplace_fits
    for r in range(B):
        for a, b in zip(jax.tree.leaves(_lane(batch[:3], r)), jax.tree.leaves(_lane(alone[r][:3], 0)),
                        strict=True):  # fmt: skip
            assert np.array_equal(a, b, equal_nan=True), r
    opt = batch[0]
    # the vmapped fit is another compiled program: rounding may tip a stopping test by
    # one step (the refilled lanes against their own program alone are bitwise, above)
    steps = np.abs(np.asarray(opt.n_steps, int) - np.asarray(lockstep.opt.n_steps, int))
    assert steps.max() <= 1, steps
    np.testing.assert_array_equal(opt.converged, lockstep.opt.converged)
    # executed lane-steps: LANES x the loops' iterations; never fewer than the steps needed
    executed, need = int(batch[3]), int(np.sum(opt.n_steps))
    assert executed % LANES == 0 and need <= executed
    # the lockstep program ran the slowest lane's phases for every lane
    assert executed < B * int(np.max(opt.n_steps))


def test_batch_report_counts_what_the_program_executed(programs, laplace_fits):
    rep = programs["method"].batch_report(programs["batch"])
    executed = int(laplace_fits[0][3])
    n = np.asarray(programs["batch"].info.n_steps)
    assert rep["refill"] and rep["lockstep_lanes"] == LANES
    assert rep["executed_lane_steps"] == executed
    assert rep["lockstep_efficiency"] == pytest.approx(n.sum() / executed)
    lock = programs["method"].batch_report(programs["lockstep"], lockstep=B)
    assert "refill" not in lock and lock["lockstep_lanes"] == B
    assert rep["lockstep_efficiency"] > lock["lockstep_efficiency"]


def test_the_campaign_records_the_refilled_batchs_efficiency(level2, module_tmp, caplog):
    """bias-run's engine runs the refilled program and records what it executed in every
    convergence.json's batch section, and logs it."""
    import json

    spec = level2[0]
    plan = plan_campaign([0.02], n_realizations=2, base_seed=0, paired=True,
                         shear_grid_g2=[0.0], rotations=2)  # fmt: skip
    out = module_tmp / "campaign"
    with caplog.at_level("INFO", logger="shearbatch.engine"):
        report = run_engine(spec, plan, output_dir=out, batch_size=B,
                                     lane_chunk=LANES, overlap=False)  # fmt: skip
    assert report.n_ok + report.n_failed == B
    assert "optimiser lanes refilled from the batch (2 lanes per device)" in caplog.text
    assert "batch 1: lockstep efficiency" in caplog.text
    batch = json.loads((out / plan[0].run_id / "convergence.json").read_text())["batch"]
    assert batch["refill"] and batch["lockstep_lanes"] == LANES
    assert 0 < batch["lockstep_efficiency"] <= 1
    assert batch["executed_lane_steps"] % LANES == 0
