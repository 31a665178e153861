"""The inference-method interface from the outside: a method registered by a test runs
through the real ``bias-run``; method names live only in the registry; flags over config;
one trace per campaign; no global JAX state left behind by the CLI or ``runtime``."""

import contextlib
import re
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import xarray as xr
from click.testing import CliRunner
from numpyro.infer import Predictive

import shearbatch
from shearbatch.cli import apply_flags, bias_run
from shearbatch.core import methods
from shearbatch.core.methods import Diagnosis, Draws, Method
from shearbatch.core.methods import map as map_
from shearbatch.engine import runtime
from shearbatch.io import find_realization_dirs, read_json, read_posterior
from shearbatch.schema import ConfigError, load_config
from tests.conftest import write_config

TINY = {
    "image.size_x": 16,
    "image.size_y": 16,
    "gal.half_light_radius": 0.3,
    "image.noise.sigma": 1e-3,
    "gal.shear": {
        "type": "G1G2",
        "g1": {"type": "Normal", "mean": 0.0, "sigma": 0.05},
        "g2": {"type": "Normal", "mean": 0.0, "sigma": 0.05},
    },
    "inference.map_config": {"num_steps": 200, "num_samples": 200},
}
PRIOR_SIGMA = 0.05  # TINY's g1, g2 ~ Normal(0, 0.05)
N_PRIOR = 400  # draws per realization of the "prior" method


def invoke(args):
    return CliRunner().invoke(bias_run, [*args, "--no-progress"])


def lines(output: str) -> list[str]:
    return [ln for ln in output.splitlines() if ln.strip()]


@contextlib.contextmanager
def registered(name, factory):
    """``factory`` registered as ``name`` for the duration (REGISTRY is a plain dict)."""
    assert name not in methods.REGISTRY
    methods.register(name, factory)
    try:
        yield
    finally:
        methods.REGISTRY.pop(name, None)


def prior_method() -> Method:
    """A trivial method without settings: ``N_PRIOR`` draws of the model's prior, one chain."""

    def fit(rng_key, obs, posterior):
        pred = Predictive(posterior.model, num_samples=N_PRIOR, return_sites=list(posterior.sites))
        draws = pred(rng_key, obs)
        samples = {k: jnp.asarray(v, obs.dtype)[None] for k, v in draws.items()}
        return Draws(samples, {}, posterior.constrain_fn(posterior.x0), {})

    def diagnose(draws):
        return Diagnosis({}, {}, 0)

    return Method("prior", fit, diagnose)


@pytest.fixture(scope="module")
def tiny_cfg(module_tmp):
    return write_config(module_tmp / "tiny.yaml", TINY)


@pytest.fixture
def prior_registered():
    with registered("prior", prior_method):
        yield


@pytest.fixture(scope="module")
def prior_campaign(module_tmp, tiny_cfg):
    out = module_tmp / "prior"
    args = ["--config", tiny_cfg, "--method", "prior", "--shear-grid", "-0.02", "0.02",
            "--n-realizations", "2", "--batch-size", "2", "--x64", "--output-dir", str(out)]  # fmt: skip
    with registered("prior", prior_method):
        res = invoke(args)
    # draws of the prior carry no information about g: every realization is written and
    # failed with the UNINFORMATIVE flag (bias-run exits 1 when a realization failed)
    assert res.exit_code == 1, res.output
    assert "wrote 0 ok, 4 failed" in res.output
    return out


# --------------------------------------------------------------------------- a registered method


def test_registered_method_runs_through_bias_run(prior_campaign):
    dirs = find_realization_dirs(prior_campaign)
    assert len(dirs) == 4
    g1 = {}
    for d in dirs:
        assert sorted(p.name for p in d.iterdir()) == [
            "convergence.json",
            "posterior.nc",
            "truth.json",
        ]
        conv = read_json(d / "convergence.json")
        assert conv["method"] == "prior" and conv["status"] == "failed"
        assert conv["flag_names"] == ["UNINFORMATIVE"] and conv["passed"] is False
        with xr.open_datatree(d / "posterior.nc") as tree:
            assert tree.attrs["inference_method"] == "prior"
            assert tree.attrs["run_id"] == d.name
            for site in ("g1", "g2"):
                assert tree["posterior"][site].dims == ("chain", "draw")
                assert tree["posterior"][site].shape == (1, N_PRIOR)
        seed = read_json(d / "truth.json")["seed"]
        g1.setdefault(seed, []).append(read_posterior(d / "posterior.nc")["g1"][0])
    # the inference key derives from the seed alone: +g and -g of one seed share draws,
    # different seeds do not
    assert sorted(g1) == [0, 1]
    for same in g1.values():
        np.testing.assert_array_equal(same[0], same[1])
    assert not np.array_equal(g1[0][0], g1[1][0])
    # the files hold the method's own draws: the prior N(0, 0.05) (4-sigma bands)
    x = np.concatenate([v[0] for v in g1.values()])
    n = x.size
    assert abs(x.mean()) < 4 * PRIOR_SIGMA / np.sqrt(n)
    assert abs(x.std() / PRIOR_SIGMA - 1) < 4 / np.sqrt(2 * (n - 1))


def test_unknown_method_lists_the_registered_ones(tmp_path, tiny_cfg, prior_registered):
    out = tmp_path / "out"
    res = invoke(["--config", tiny_cfg, "--method", "bogus", "--shear-grid", "0.01",
                  "--output-dir", str(out)])  # fmt: skip
    assert res.exit_code == 2, res.output
    (line,) = lines(res.output)
    assert "--method" in line and "'bogus'" in line
    listed = line.rsplit("use one of", 1)[1]
    assert {n.strip() for n in listed.split(",")} == set(methods.names())
    assert "prior" in methods.names()
    assert not out.exists()


def test_config_method_accepted_only_while_registered(tmp_path, tiny_cfg):
    cfg = write_config(tmp_path / "prior.yaml", {**TINY, "inference.method": "prior"})
    dry = ["--config", cfg, "--shear-grid", "0.01", "--output-dir", str(tmp_path / "o"),
           "--dry-run"]  # fmt: skip
    with registered("prior", prior_method):
        assert load_config(cfg).inference.method == "prior"
        res = invoke(dry)
        assert res.exit_code == 0, res.output
        assert "method: prior" in res.output
        assert invoke(["--config", tiny_cfg, *dry[2:], "--method", "prior"]).exit_code == 0
    with pytest.raises(ConfigError, match="unknown method 'prior'"):
        load_config(cfg)
    res = invoke(dry)
    assert res.exit_code == 2 and "inference.method" in res.output, res.output
    res = invoke(["--config", tiny_cfg, *dry[2:], "--method", "prior"])
    assert res.exit_code == 2, res.output
    (line,) = lines(res.output)
    assert "--method" in line and "prior" not in line.rsplit("use one of", 1)[1]


# --------------------------------------------------------------------------- names in one place

METHOD_LITERAL = re.compile(r"""(["'])(nuts|map|vi)\1""")


def test_method_names_appear_only_in_the_methods_package():
    """The engine, schema, CLI, io and analysis never name a method: they read the registry."""
    root = Path(shearbatch.__file__).parent
    allowed = root / "core" / "methods"
    found = []
    for path in sorted(root.rglob("*.py")):
        if allowed in path.parents:
            continue
        for i, text in enumerate(path.read_text().splitlines(), 1):
            if METHOD_LITERAL.search(text):
                found.append(f"{path.relative_to(root.parent)}:{i}: {text.strip()}")
    assert not found, "method names outside core/methods:\n" + "\n".join(found)
    # the check can fail: the registry itself names them
    assert METHOD_LITERAL.search((allowed / "__init__.py").read_text())


# --------------------------------------------------------------------------- flags over config


def test_given_flags_win_even_when_falsy_and_absent_flags_keep_the_config(tmp_path):
    cfg_path = write_config(
        tmp_path / "c.yaml",
        {**TINY, "campaign.base_seed": 5, "campaign.g2": 0.01, "campaign.paired": True},
    )
    cfg = load_config(cfg_path)
    same = apply_flags(cfg, {})
    assert same.campaign == cfg.campaign and same.inference == cfg.inference
    got = apply_flags(cfg, {"base_seed": 0, "g2_true": 0.0, "paired": False}).campaign
    assert (got.base_seed, got.g2, got.paired) == (0, 0.0, False)
    assert got.batch_size == cfg.campaign.batch_size  # absent: the config's value
    assert got.output_dir == cfg.campaign.output_dir

    base = ["--config", cfg_path, "--g1-true", "0.02", "--output-dir", str(tmp_path / "o"),
            "--dry-run"]  # fmt: skip
    res = invoke([*base, "--base-seed", "0"])
    assert res.exit_code == 0, res.output
    assert "g1_+0.0200_g2_+0.0100_s0" in res.output
    res = invoke(base)
    assert res.exit_code == 0, res.output
    assert "g1_+0.0200_g2_+0.0100_s5" in res.output
    res = invoke([*base, "--g2-true", "0"])
    assert "g1_+0.0200_g2_+0.0000_s5" in res.output, res.output


# --------------------------------------------------------------------------- compile once


def test_campaign_traces_the_method_once(module_tmp, tiny_cfg, monkeypatch):
    """5 realizations at batch size 2: three batches (the last padded), one trace of fit.
    (Exported programs off: an earlier test run's, in the shared test cache, would be
    loaded untraced; tests/engine/test_exported.py covers them.)"""
    monkeypatch.setenv("SHEARBATCH_EXPORT", "off")
    traces = []

    def counted(*, map_config: map_.MapConfig):  # no settings of its own: MAP's section
        m = map_.method(map_config)

        def fit(*a):
            traces.append(1)  # fit runs only while jit traces it
            return m.fit(*a)

        return m._replace(name="counted", fit=fit)

    out = module_tmp / "counted"
    with registered("counted", counted):
        res = invoke(["--config", tiny_cfg, "--method", "counted", "--shear-grid", "0.01", "0.02",
                      "0.03", "0.04", "0.05", "--n-realizations", "1", "--batch-size", "2", "--x64",
                      "--output-dir", str(out)])  # fmt: skip
    assert res.exit_code == 0, res.output
    batches = [read_json(d / "convergence.json")["batch"] for d in find_realization_dirs(out)]
    assert len(batches) == 5 and {b["size"] for b in batches} == {2}
    assert sorted(b["index"] for b in batches) == [0, 0, 1, 1, 2]
    assert [b["n_real"] for b in batches if b["index"] == 2] == [1]
    assert len(traces) == 1


# --------------------------------------------------------------------------- no hidden global state


def test_in_process_no_x64_run_restores_x64(tmp_path, tiny_cfg, prior_registered):
    assert jax.config.jax_enable_x64  # conftest
    out = tmp_path / "f32"
    res = invoke(["--config", tiny_cfg, "--method", "prior", "--g1-true", "0.01", "--no-x64",
                  "--output-dir", str(out)])  # fmt: skip
    assert res.exit_code == 1, res.output  # written, and failed as UNINFORMATIVE (prior draws)
    (d,) = find_realization_dirs(out)
    with xr.open_dataset(d / "posterior.nc") as root:
        assert root.attrs["dtype"] == "float32"  # x64 really was off during the run
    assert read_posterior(d / "posterior.nc")["g1"].dtype == np.float32
    assert jax.config.jax_enable_x64
    assert jnp.zeros(()).dtype == jnp.float64


def test_configure_twice_registers_one_listener_and_counts_a_hit_once():
    cache = jax.config.jax_compilation_cache_dir
    threshold = jax.config.jax_persistent_cache_min_compile_time_secs
    with runtime.scoped():
        runtime.configure(True, cache)
        runtime.configure(True, cache)
        assert len(runtime._LISTENER) == 1
        # write every program to the cache (scoped() restores the conftest threshold)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        salt = float(time.time_ns())  # a program no earlier session cached
        x = np.arange(3.0)

        def compile_once():
            return jax.jit(lambda v: v * salt + 1.0).lower(x).compile()

        runtime.reset_cache_events()
        compile_once()
        assert runtime.CACHE_EVENTS == {"hits": 0, "misses": 1}
        compile_once()  # a new jit of the same program: read back from the persistent cache
        assert runtime.CACHE_EVENTS == {"hits": 1, "misses": 1}
    assert jax.config.jax_persistent_cache_min_compile_time_secs == threshold
