"""The generator: shapes, truths, and a realization's data depending only on its seed."""

import numpy as np
import pytest

from shearbatch.campaign import Realization, plan_campaign
from shearbatch.core.generate import render_stamps
from shearbatch.engine.loop import generate
from shearbatch.engine.records import truth_record
from shearbatch.schema import load_config
from shearbatch.spec import problem, run_spec
from tests.conftest import write_config


def simulate_batch(cfg, plan):
    return generate(run_spec(cfg), plan)


def truth_records(cfg, plan, sim):
    return [truth_record(run_spec(cfg), r, sim, b) for b, r in enumerate(plan)]


@pytest.fixture(scope="module")
def cfg(module_tmp):
    """Three 24x24 galaxies per realization with drawn flux, size, shape and position."""
    return load_config(
        write_config(
            module_tmp / "multi.yaml",
            {
                "image.size_x": 24,
                "image.size_y": 24,
                "image.n_objects": 3,
                "image.noise.sigma": 1e-3,
                "gal.flux": {"type": "LogNormal", "mean": 1.0, "sigma": 0.2},
                "gal.half_light_radius": {"type": "Uniform", "min": 0.3, "max": 0.6},
                "gal.ellipticity": {
                    "type": "E1E2",
                    "e1": {"type": "Normal", "sigma": 0.2},
                    "e2": {"type": "TruncatedNormal", "sigma": 0.2, "min": -0.5, "max": 0.5},
                },
                "gal.position": {
                    "type": "Uniform",
                    "x_min": 11.5,
                    "x_max": 12.5,
                    "y_min": 0.45,
                    "y_max": 0.55,
                },
            },
        )
    )


def test_shapes_and_truths(cfg):
    plan = plan_campaign([0.01, -0.03], g2=0.02, n_realizations=2, base_seed=0)
    sim = simulate_batch(cfg, plan)
    assert sim.images.shape == (4, 3, 24, 24)
    assert sim.noise_sigma == 1e-3
    np.testing.assert_array_equal(
        np.asarray(sim.g), [[0.01, 0.02], [0.01, 0.02], [-0.03, 0.02], [-0.03, 0.02]]
    )
    truths = truth_records(cfg, plan, sim)
    t = truths[0]
    assert (t["run_id"], t["g1"], t["g2"], t["seed"], t["noise_sigma"]) == (
        plan[0].run_id,
        0.01,
        0.02,
        0,
        1e-3,
    )
    gal = np.array(
        [
            [g[f] for f in ("flux", "hlr", "e1", "e2", "dx", "dy")]
            for t in truths
            for g in t["galaxies"]
        ]
    )
    assert np.all(gal[:, 1] >= 0.3) and np.all(gal[:, 1] <= 0.6)
    assert np.all(np.abs(gal[:, 3]) <= 0.5)
    assert np.all(np.abs(gal[:, 4]) <= 0.5) and np.all(np.abs(gal[:, 5]) <= 0.05 * 24 + 1e-12)
    # drawn per galaxy and per seed; the same seed gives the same galaxies at every grid point
    assert len(np.unique(gal[:, 0])) == len(gal) // 2


def test_same_seed_same_galaxy_and_noise_at_every_shear(cfg):
    """Common random numbers across the grid: only the shear differs between grid points."""
    plan = plan_campaign([0.0, 0.05], n_realizations=1, base_seed=5)
    sim = simulate_batch(cfg, plan)
    assert np.all(np.asarray(sim.params["flux"][0]) == np.asarray(sim.params["flux"][1]))
    diff = np.asarray(sim.images[0] - sim.images[1])
    assert 0 < np.max(np.abs(diff)) < 0.2 * np.max(np.asarray(sim.images[0]))


def test_realization_depends_only_on_its_seed(cfg):
    """The same realization in batches of 1, 2, 10 and at any position: the same truths
    and image. Each batch width is its own compiled program (docs/guarantees.md: not bit
    for bit), so the image agrees to 1e-6 of the pixel noise's sigma and the truths to
    1e-12 relative, far below anything a fit could see and far above rounding; another
    seed differs by the noise itself."""
    sigma = 1e-3  # image.noise.sigma of the fixture
    target = Realization("t", 0.02, -0.01, 0)  # seed 0 is an ordinary seed
    others = plan_campaign([0.03, -0.04, 0.01], n_realizations=3, base_seed=11)
    alone = simulate_batch(cfg, [target])
    for batch in ([*others[:4], target, *others[4:]], [target, *others[::-1]], [others[0], target]):
        sim = simulate_batch(cfg, batch)
        i = batch.index(target)
        np.testing.assert_allclose(
            np.asarray(sim.images[i]), np.asarray(alone.images[0]), rtol=0, atol=1e-6 * sigma
        )
        for f in sim.params:
            np.testing.assert_allclose(
                np.asarray(sim.params[f][i]), np.asarray(alone.params[f][0]), rtol=1e-12
            )
    again = simulate_batch(cfg, [target._replace(seed=1)])
    assert not np.array_equal(np.asarray(again.images), np.asarray(alone.images))


def test_noise_has_the_configured_sigma(cfg):
    plan = plan_campaign([0.01], n_realizations=4, base_seed=100)
    sim = simulate_batch(cfg, plan)
    clean = np.stack(
        [
            np.asarray(
                render_stamps(problem(cfg), {k: v[b] for k, v in sim.params.items()}, sim.g[b])
            )
            for b in range(len(plan))
        ]
    )
    resid = np.asarray(sim.images) - clean
    n = resid.size
    assert abs(resid.std() / 1e-3 - 1) < 5 / np.sqrt(2 * n)  # 5 standard errors of a std
    assert abs(resid.mean()) < 5e-3 / np.sqrt(n)


def test_simulation_section_changes_only_the_data(module_tmp):
    base = load_config("configs/level0.yaml")
    mis = load_config(
        write_config(
            module_tmp / "mis.yaml", {"psf.sigma": 0.4011, "simulation": {"psf": {"sigma": 0.382}}}
        )
    )
    r = [Realization("x", 0.02, 0.0, 3)]
    np.testing.assert_array_equal(
        np.asarray(simulate_batch(base, r).images), np.asarray(simulate_batch(mis, r).images)
    )
    assert truth_records(mis, r, simulate_batch(mis, r))[0]["psf"]["sigma"] == 0.382


@pytest.mark.parametrize("noise", ["shared", "independent"])
def test_rotated_copies_have_rotated_shapes_and_the_designed_noise(cfg, noise):
    """Ring copies: same flux, size, offset; (e1, e2) turned by 45 deg per quarter turn
    exactly; the noise field is the seed's own (shared) or a fresh one (independent)."""
    plan = plan_campaign([0.02], n_realizations=1, base_seed=3, rotations=4, rotation_noise=noise)
    sim = simulate_batch(cfg, plan)
    p = {k: np.asarray(v) for k, v in sim.params.items()}
    for f in ("flux", "hlr", "dx", "dy"):
        np.testing.assert_array_equal(p[f][1:], np.broadcast_to(p[f][0], p[f][1:].shape))
    e1, e2 = p["e1"][0], p["e2"][0]
    turned = [(e1, e2), (-e2, e1), (-e1, -e2), (e2, -e1)]
    for k, (a, b) in enumerate(turned):
        np.testing.assert_array_equal(p["e1"][k], a)
        np.testing.assert_array_equal(p["e2"][k], b)
    spec = problem(cfg)
    noise_fields = [
        np.asarray(sim.images[k])
        - np.asarray(render_stamps(spec, {f: sim.params[f][k] for f in p}, sim.g[k]))
        for k in range(4)
    ]
    # shared: equal up to the rendering's rounding of two rotated models (1e-12 of the
    # peak); independent: differ by ~the noise sigma
    peak = float(np.max(np.asarray(sim.images)))
    for k in range(1, 4):
        same = np.allclose(noise_fields[k], noise_fields[0], rtol=0, atol=1e-12 * peak)
        assert same == (noise == "shared")
    # the unrotated copy is the plain realization of the seed (rotations change nothing else)
    (alone,) = plan_campaign([0.02], n_realizations=1, base_seed=3)
    np.testing.assert_array_equal(simulate_batch(cfg, [alone]).images[0], sim.images[0])
