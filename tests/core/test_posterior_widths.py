"""Posterior widths are honest: the Laplace std of g matches the scatter of the MAP
estimate over noise realizations, and VI agrees with Laplace on a Gaussian-like posterior."""

import numpy as np
import pytest

from shearbatch.campaign import plan_campaign
from shearbatch.core.batching import realization_keys
from shearbatch.engine.loop import generate, inference_program
from shearbatch.schema import load_config
from shearbatch.spec import run_spec
from tests.conftest import write_config

N_NOISE = 300  # relative SE of a std from N draws: 1/sqrt(2(N-1)) = 4.1%; 15% is 3.7 SE


def _infer(cfg, plan, batch):
    spec = run_spec(cfg)
    _, program = inference_program(spec)
    results, truths = [], []
    for i in range(0, len(plan), batch):
        part = plan[i : i + batch]
        sim = generate(spec, part)
        keys = realization_keys([r.seed for r in part], spec.rng_seed)
        results.append(program(keys, sim.images))
        truths.append(np.asarray(sim.g))
    return results, np.concatenate(truths)


@pytest.fixture(scope="module")
def noisy_cfg(module_tmp):
    # noise 1e-3: sigma(g) ~ 0.017. The default flat shear prior makes the MAP estimate's
    # scatter equal the posterior width (a N(0, 0.05) prior would shrink the scatter ~6%
    # below the Laplace std, by construction).
    return load_config(
        write_config(
            module_tmp / "noisy.yaml",
            {
                "image.noise.sigma": 1e-3,
            },
        )
    )


def test_laplace_width_matches_scatter_over_noise_realizations(noisy_cfg):
    plan = plan_campaign([0.02], g2=-0.01, n_realizations=N_NOISE, base_seed=1000)
    results, truth = _infer(noisy_cfg, plan, batch=100)
    g_hat = np.concatenate([np.stack([r.mode["g1"], r.mode["g2"]], axis=1) for r in results])
    std = np.concatenate([np.asarray(r.info.std) for r in results])
    assert np.all(np.concatenate([np.asarray(r.info.converged) for r in results]))
    scatter = np.std(g_hat - truth, axis=0, ddof=1)
    laplace = np.mean(std, axis=0)
    assert np.all(np.abs(scatter / laplace - 1) < 0.15), (scatter, laplace)
    # and the estimator is unbiased at this precision: mean error within 4 standard errors
    err = np.mean(g_hat - truth, axis=0)
    assert np.all(np.abs(err) < 4 * scatter / np.sqrt(N_NOISE)), err


def test_vi_agrees_with_laplace(noisy_cfg):
    plan = plan_campaign([0.03, -0.02], g2=0.01, n_realizations=2, base_seed=7)
    vi_cfg = noisy_cfg.model_copy(
        update={
            "inference": noisy_cfg.inference.model_copy(
                update={
                    "method": "vi",
                    "vi_config": noisy_cfg.inference.vi_config.model_copy(
                        update={"num_steps": 1000, "learning_rate": 0.003, "num_samples": 2000}
                    ),
                }
            )
        }
    )
    (vi,), truth = _infer(vi_cfg, plan, batch=4)
    (lap,), _ = _infer(noisy_cfg, plan, batch=4)
    for k, site in enumerate(("g1", "g2")):
        draws = np.asarray(vi.samples[site])[:, 0]  # (B, S)
        mean, sd = draws.mean(axis=1), draws.std(axis=1)
        lap_mean, lap_sd = np.asarray(lap.mode[site]), np.asarray(lap.info.std)[:, k]
        # ELBO optimum of a near-Gaussian posterior: same centre and width as Laplace, up to
        # the Monte Carlo noise of the stochastic optimiser and of 2000 draws
        assert np.all(np.abs(mean - lap_mean) < 0.2 * lap_sd), (mean, lap_mean, lap_sd)
        assert np.all(np.abs(sd / lap_sd - 1) < 0.2), (sd, lap_sd)
        assert np.all(np.abs(mean - truth[:, k]) < 4 * sd)
    # realizations do not share values
    assert len(set(np.round(np.asarray(vi.samples["g1"]).mean(axis=(1, 2)), 12))) == 4


@pytest.mark.slow
@pytest.mark.parametrize(
    ("optimizer", "settings", "tol_in_sigma"),
    [
        ("lbfgs", {"num_steps": 200}, 1e-3),
        # both stop at half-decrement <= 1e-10: modes within 2 sqrt(2e-10) sd
        ("gauss_newton", {"num_steps": 200}, 3e-5),
        ("adam", {"num_steps": 1500, "learning_rate": 0.003}, 0.05),
    ],
)
def test_alternative_optimizers_find_the_same_mode(noisy_cfg, optimizer, settings, tol_in_sigma):
    plan = plan_campaign([0.03, -0.02], g2=0.01, n_realizations=2, base_seed=7)
    (newton,), _ = _infer(noisy_cfg, plan, batch=4)
    mc = noisy_cfg.inference.map_config.model_copy(update={"optimizer": optimizer, **settings})
    other_cfg = noisy_cfg.model_copy(
        update={"inference": noisy_cfg.inference.model_copy(update={"map_config": mc})}
    )
    (other,), _ = _infer(other_cfg, plan, batch=4)

    def mode(d):
        return np.stack([d.mode["g1"], d.mode["g2"]], axis=1)

    diff = np.abs(mode(other) - mode(newton)) / np.asarray(newton.info.std)
    assert np.all(diff < tol_in_sigma), diff
    np.testing.assert_allclose(other.info.std, newton.info.std, rtol=1e-2)
