"""NUTS benchmark (issue 5): independent vmapped samplers (ours) vs one joint NUTS chain.

Workload, "noisy Level 0": ``configs/level0.yaml`` with ``image.noise.sigma =
1e-3``, the galaxy centre free (uniform over +-0.5 px around the stamp centre,
i.e. ``gal.position`` 23.5..24.5 on a 48x48 stamp), ``inference.method: nuts``,
4 chains, float64. Latents per realization: g1, g2, dx, dy.

Samplers, on the same batches, with the same settings (warmup, draws,
chains, target acceptance, tree depth, diagonal mass matrix) and the same
initialisation (each realization's MAP + Laplace: chain starts at one Laplace
standard deviation from the mode, the Laplace covariance as the initial inverse
mass matrix -- ours whitens by it, the joint chain gets its variances;
``--no-map-init``: prior means for both):

- **ours** -- ``shearbatch.engine.make_inference_program``: B x C independent
  NUTS samplers (own step size, mass matrix, tree) vmapped in lockstep, each
  sampling its realization's Laplace-whitened coordinates.
- **capped** -- the same program with the large-batch recipe of the README:
  tree depth capped at ``--capped-depth`` (warmup 3, sampling 3 by default)
  and the Laplace inverse mass matrix kept fixed (step size adapted only).
- **joint** (kept in bench/ only) -- one NumPyro model over the whole batch, a
  ``numpyro.plate("realization", B)`` around the single-realization sites, run
  with NumPyro's functional NUTS (``numpyro.infer.hmc.hmc``, the kernel behind
  ``MCMC(NUTS(model), chain_method="vectorized")``) as C chains vectorized over
  the concatenated B x 4 latents: one step size, one mass matrix, one tree per
  chain for the whole batch.

Cases: (a) homogeneous batches; (b) the same batches with one hard lane (the last):
its data replaced by ``--hard-factor`` (100) x the clean image + the same noise
(S/N x100, posterior 100x narrower), batch sizes > 1.

Figures per (case, batch size, sampler): compile time (``lower().compile()``),
wall time of the compiled program (simulated data ready; init + warmup + sampling;
median of ``--repeats`` calls, each ended with ``block_until_ready``), per-realization
bulk ESS of g1 (``shearbatch.diagnostics.ess_bulk`` on its (chain, draw) draws):
min and median over the batch (and min over the companions of the hard lane),
ESS/s per realization (ESS / wall) and of the batch (sum ESS / wall), final step
sizes, leapfrog steps per iteration and tree depth, divergences, lockstep
efficiency (useful / executed leapfrog steps; warmup and sampling) and the
ratio of min ESS/s, ours / joint. On a GPU also effective samples per galaxy
per second (ESS/s per realization / n_objects).

Settings: the full workload (48x48 stamps, 500 warmup / 1000 draws) is too slow
at batch 64 on a 2-core CPU, so the DEFAULTS ARE REDUCED: 24x24 stamps (they
hold this galaxy), 100 warmup / 100 draws per chain, batch sizes 1 4 16 64. Even
so a default run takes ~10-15 minutes on 2 CPU cores: 8 compilations of ~30-45 s
each, and the hard case at batch 64 is expensive for both samplers (deep trees).
The settings used are written to the JSON.
Full workload (e.g. on a GPU)::

    .venv/bin/python bench/bench_nuts.py --stamp 48 --warmup 500 --samples 1000 \\
        --batch-sizes 1 4 16 64 256 1024 4096

Prints a table and writes ``results/benchmarks/nuts.json`` (``--out``). No
persistent compilation cache is used, so compile times are real.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import jax

jax.config.update("jax_enable_x64", True)  # a script; --no-x64 switches it off in main()

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import numpyro  # noqa: E402
import numpyro.distributions as dist  # noqa: E402
import yaml  # noqa: E402
from jax.flatten_util import ravel_pytree  # noqa: E402
from numpyro.distributions import biject_to  # noqa: E402
from numpyro.infer.util import potential_energy  # noqa: E402

from shearbatch.batch import InferenceModel, build_inference_model, realization_keys  # noqa: E402
from shearbatch.campaign import plan_campaign  # noqa: E402
from shearbatch.config import Config, Fixed, NutsConfig, parse_config  # noqa: E402
from shearbatch.diagnostics import ess_bulk  # noqa: E402
from shearbatch.engine import make_inference_program  # noqa: E402
from shearbatch.infer import nuts  # noqa: E402
from shearbatch.priors import galaxy_params, to_distribution  # noqa: E402
from shearbatch.simulate import render_stamps, simulate_batch  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
GRID = (-0.05, -0.02, 0.02, 0.05)


# --------------------------------------------------------------------------- workload


def make_config(args: argparse.Namespace) -> Config:
    """configs/level0.yaml edited into the noisy Level 0 NUTS workload."""
    raw = copy.deepcopy(yaml.safe_load((ROOT / "configs" / "level0.yaml").read_text()))
    n = args.stamp
    c = n / 2
    raw["image"].update(size_x=n, size_y=n)
    raw["image"]["noise"]["sigma"] = args.sigma
    raw["gal"]["position"] = {
        "type": "Uniform",
        "x_min": c - 0.5,
        "x_max": c + 0.5,
        "y_min": c - 0.5,
        "y_max": c + 0.5,
    }
    raw["inference"]["method"] = "nuts"
    raw["inference"]["nuts_config"] = {
        "warmup": args.warmup,
        "samples": args.samples,
        "chains": args.chains,
        "target_accept": args.target_accept,
        "max_tree_depth": args.max_tree_depth,
        "map_init": {"enabled": args.map_init},
    }
    return parse_config(raw)


def capped_config(cfg: Config, args: argparse.Namespace) -> Config:
    """The large-batch recipe: tree depth capped (warmup, sampling), Laplace mass kept fixed."""
    nc = cfg.inference.nuts_config.model_copy(
        update={
            "max_tree_depth": args.capped_depth[0],
            "max_tree_depth_sampling": args.capped_depth[1],
            "adapt_mass_matrix": False,
        }
    )
    return cfg.model_copy(
        update={"inference": cfg.inference.model_copy(update={"nuts_config": nc})}
    )


def make_batch(cfg: Config, b: int, hard: bool, hard_factor: float):
    """(realizations, keys, obs) of a batch of ``b``; ``hard``: the last lane at S/N x hard_factor."""
    plan = plan_campaign(GRID, n_realizations=math.ceil(b / len(GRID)), base_seed=0)[:b]
    sim = simulate_batch(cfg, plan)
    images = np.array(sim.images)
    if hard:
        i = b - 1
        clean = np.asarray(render_stamps(cfg, {k: v[i] for k, v in sim.params.items()}, sim.g[i]))
        images[i] = hard_factor * clean + (images[i] - clean)  # same noise, S/N x hard_factor
    keys = realization_keys([r.seed for r in plan], cfg.inference.rng_seed)
    return plan, keys, jnp.asarray(images)


# --------------------------------------------------------------------------- joint baseline


def _site_params(cfg: Config) -> dict[str, Any]:
    """{site: config distribution} of every latent of one realization (model.py's sites)."""
    out = {k: getattr(cfg.gal.shear, k) for k in ("g1", "g2")}
    out.update({k: p for k, p in galaxy_params(cfg).items()})
    return {k: p for k, p in out.items() if not isinstance(p, Fixed)}


def make_joint_model(cfg: Config):
    """``model(obs)`` over a whole batch, ``obs`` (B, M, H, W): model.py's sites in a
    ``realization`` plate (same priors, unit-disk factors and renderer)."""
    shear = cfg.gal.shear
    fields = galaxy_params(cfg)
    sigma = cfg.image.noise.sigma
    m = cfg.image.n_objects

    def disk(a, b):
        return jnp.where(a * a + b * b < 1.0, 0.0, -jnp.inf)

    def model(obs):
        nb = obs.shape[0]

        def site(name, p, shape):
            if isinstance(p, Fixed):
                return jnp.full(shape, p.value, obs.dtype)
            return numpyro.sample(name, to_distribution(p))

        with numpyro.plate("realization", nb, dim=-2):
            g1 = site("g1", shear.g1, (nb, 1))  # (B, 1): realization plate is dim -2
            g2 = site("g2", shear.g2, (nb, 1))
            numpyro.factor("g_in_unit_disk", disk(g1, g2))
            with numpyro.plate("galaxy", m, dim=-1):
                params = {k: site(k, p, (nb, m)) for k, p in fields.items()}
                numpyro.factor("e_in_unit_disk", disk(params["e1"], params["e2"]))
                params = {
                    k: jnp.broadcast_to(jnp.asarray(v, obs.dtype), (nb, m))
                    for k, v in params.items()
                }
                g = jnp.stack(
                    [jnp.broadcast_to(g1, (nb, 1))[:, 0], jnp.broadcast_to(g2, (nb, 1))[:, 0]],
                    axis=-1,
                ).astype(obs.dtype)
                image = jax.vmap(lambda p, gg: render_stamps(cfg, p, gg))(params, g)
                numpyro.sample("obs", dist.Normal(image, sigma).to_event(2), obs=obs)

    return model


def make_joint_program(cfg: Config, model: InferenceModel, b: int):
    """jit((keys (B, 2), obs (B, M, H, W)) -> dict): C joint NUTS chains over the batch.

    Latent layout: realization r's site ``k`` (shape ``s`` in the single model) is
    ``z[k][r]`` with shape ``(1,)`` for g1/g2 (plate dim -2) and ``(M,)`` for per-galaxy
    sites. Starts: exactly ours (``nuts._init``, same keys) mapped into this layout;
    initial inverse mass matrix: the Laplace variances (what a NumPyro user would pass).
    """
    settings: NutsConfig = cfg.inference.nuts_config
    jmodel = make_joint_model(cfg)
    params = _site_params(cfg)
    shapes = model.sites  # {site: shape in the single-realization model}
    jshape = {k: (b, *(s if s else (1,))) for k, s in shapes.items()}
    transforms = {k: biject_to(to_distribution(params[k]).support) for k in shapes}
    _, unravel_one = ravel_pytree({k: jnp.zeros(s) for k, s in shapes.items()})
    _, unravel_joint = ravel_pytree({k: jnp.zeros(s) for k, s in jshape.items()})

    def lanes_to_joint(xs):  # (B, D) per-realization flat vectors -> (B * D,) joint vector
        z = jax.vmap(unravel_one)(xs)
        return ravel_pytree({k: jnp.reshape(v, jshape[k]) for k, v in z.items()})[0]

    def constrain(x):
        return {k: transforms[k](v) for k, v in unravel_joint(x).items()}

    def fit(keys, obs):
        c = settings.chains

        def lane_init(key, o):  # ours' starts, in x; its Laplace variances as the mass
            k_init, _ = jax.random.split(key)
            centre, scale, spread, _ = nuts._init(o, model, settings)
            eps = spread * jax.random.normal(k_init, (c, centre.shape[0]), o.dtype)
            return centre[None, :] + eps @ scale.T, jnp.sum(scale**2, axis=1)

        starts, inv_mass = jax.vmap(lane_init)(keys, obs)  # (B, C, D), (B, D)
        starts = jax.vmap(lanes_to_joint, in_axes=1)(starts)  # (C, B * D)
        inv_mass = lanes_to_joint(inv_mass) if settings.map_init.enabled else None

        def pot(x):
            pe = potential_energy(jmodel, (obs,), {}, unravel_joint(x))
            return jnp.where(jnp.isnan(pe), jnp.inf, pe)

        chain_keys = jax.random.split(jax.random.fold_in(keys[0], 17), c)
        joint_settings = settings.model_copy(update={"dense_mass": False})
        (z, div, nst, step, *_), warm_steps = nuts.run_chains(
            pot, chain_keys, starts, inv_mass, joint_settings
        )
        samples = jax.vmap(jax.vmap(constrain))(z)  # {site: (C, S, B, ...)}
        return {
            "g1": samples["g1"][..., 0],
            "diverging": div,
            "n_steps": nst,
            "step_size": step,
            "warmup_n_steps": warm_steps,
            "samples": samples,
        }

    return jax.jit(fit)


# --------------------------------------------------------------------------- measuring


_COMPILED: dict[tuple[str, int], tuple[Any, float]] = {}


def _timed(name: str, make_prog, keys, obs, repeats: int):
    """(compile_s, median wall_s, all wall_s, result) of an AOT-compiled program.

    Compiled once per (sampler, batch size): the hard case re-uses the homogeneous
    case's executable (same shapes) and reports the compile time measured then.
    """
    key = (name, obs.shape[0])
    if key not in _COMPILED:
        t0 = time.perf_counter()
        compiled = make_prog().lower(keys, obs).compile()
        _COMPILED[key] = (compiled, time.perf_counter() - t0)
    compiled, compile_s = _COMPILED[key]
    walls, res = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        res = jax.block_until_ready(compiled(keys, obs))
        walls.append(time.perf_counter() - t0)
    return compile_s, statistics.median(walls), walls, jax.tree.map(np.asarray, res)


def _ess_all_sites(samples: dict[str, np.ndarray]) -> np.ndarray:
    """min over every latent of the per-realization bulk ESS; samples {site: (B, C, S, ...)}."""
    out = []
    for v in samples.values():
        v = v.reshape(v.shape[0], v.shape[1], v.shape[2], -1)
        out.append(
            [[ess_bulk(v[r, ..., j]) for j in range(v.shape[-1])] for r in range(v.shape[0])]
        )
    return np.nanmin(np.concatenate([np.asarray(o) for o in out], axis=1), axis=1)


def _summary(g1, walls, compile_s, n_objects, hard, extra) -> dict:
    """g1: (B, C, S) draws per realization."""
    b = g1.shape[0]
    ess = np.array([ess_bulk(g1[r]) for r in range(b)])
    wall = statistics.median(walls)
    rec = {
        "compile_s": compile_s,
        "wall_s": wall,
        "wall_all_s": walls,
        "ess_bulk_g1": {
            "min": float(np.nanmin(ess)),
            "median": float(np.nanmedian(ess)),
            "per_realization": ess.tolist(),
        },
        "ess_per_s_per_realization": {
            "min": float(np.nanmin(ess)) / wall,
            "median": float(np.nanmedian(ess)) / wall,
        },
        "ess_per_s_batch": float(np.nansum(ess)) / wall,
        "g1_posterior_std_median": float(np.median(g1.std(axis=(1, 2)))),
        **extra,
    }
    if hard and b > 1:
        rec["ess_bulk_g1"]["hard_lane"] = float(ess[-1])
        rec["ess_bulk_g1"]["min_companions"] = float(np.nanmin(ess[:-1]))
        rec["ess_per_s_per_realization"]["min_companions"] = float(np.nanmin(ess[:-1])) / wall
        rec["hard_lane_g1"] = {
            "mean": float(g1[-1].mean()),
            "std": float(g1[-1].std()),
            "companions_std_median": float(np.median(g1[:-1].std(axis=(1, 2)))),
        }
    if jax.devices()[0].platform == "gpu":
        rec["ess_per_s_per_galaxy"] = {
            k: v / n_objects for k, v in rec["ess_per_s_per_realization"].items()
        }
    return rec


def run_ours(cfg, model, keys, obs, repeats: int, hard: bool, name: str = "ours") -> dict:
    compile_s, _, walls, res = _timed(
        name, lambda: make_inference_program(cfg, model), keys, obs, repeats
    )
    b, c = res.n_steps.shape[:2]
    n, w = res.n_steps, res.warmup_n_steps
    step = res.step_size[:, :, -1]
    extra = {
        "step_size": {
            "median": float(np.median(step)),
            "min": float(step.min()),
            "max": float(step.max()),
            "median_companions": float(np.median(step[:-1])) if hard and b > 1 else None,
            "hard_lane": float(np.median(step[-1])) if hard and b > 1 else None,
        },
        "leapfrog_per_iter": {
            "sampling_mean": float(n.mean()),
            "warmup_mean": float(w.mean()),
            "sampling_executed": float(n.reshape(b * c, -1).max(axis=0).mean()),
            "warmup_executed": float(w.reshape(b * c, -1).max(axis=0).mean()),
        },
        "mean_tree_depth": float(res.tree_depth.mean()),
        "divergences": int(res.diverging.sum()),
        "divergences_per_realization_max": int(res.diverging.sum(axis=(1, 2)).max()),
        "lockstep_efficiency": {
            "warmup": nuts.lockstep_efficiency(w.reshape(b * c, -1)),
            "sampling": nuts.lockstep_efficiency(n.reshape(b * c, -1)),
        },
        "warmup_fraction_of_leapfrog": float(w.sum() / (w.sum() + n.sum())),
        "map_init_ok": int(np.sum(res.map_ok)),
        "ess_bulk_min_all_sites": float(np.nanmin(_ess_all_sites(res.samples))),
    }
    return _summary(
        np.asarray(res.samples["g1"]), walls, compile_s, cfg.image.n_objects, hard, extra
    )


def run_joint(cfg, model, keys, obs, repeats: int, hard: bool) -> dict:
    b = obs.shape[0]
    compile_s, _, walls, res = _timed(
        "joint", lambda: make_joint_program(cfg, model, b), keys, obs, repeats
    )
    n, w = res["n_steps"], res["warmup_n_steps"]  # (C, S), (C, W)
    step = res["step_size"][:, -1]
    depth = np.ceil(np.log2(n + 1.0))
    g1 = np.moveaxis(res["g1"], -1, 0)  # (B, C, S)
    samples = {k: np.moveaxis(v, 2, 0) for k, v in res["samples"].items()}
    extra = {
        "step_size": {
            "median": float(np.median(step)),
            "min": float(step.min()),
            "max": float(step.max()),
        },
        "leapfrog_per_iter": {
            "sampling_mean": float(n.mean()),
            "warmup_mean": float(w.mean()),
            "sampling_executed": float(n.max(axis=0).mean()),
            "warmup_executed": float(w.max(axis=0).mean()),
        },
        "mean_tree_depth": float(depth.mean()),
        "divergences": int(res["diverging"].sum()),  # shared by every realization
        "lockstep_efficiency": {  # the C chains run in lockstep too
            "warmup": nuts.lockstep_efficiency(w),
            "sampling": nuts.lockstep_efficiency(n),
        },
        "warmup_fraction_of_leapfrog": float(w.sum() / (w.sum() + n.sum())),
        "ess_bulk_min_all_sites": float(np.nanmin(_ess_all_sites(samples))),
    }
    return _summary(g1, walls, compile_s, cfg.image.n_objects, hard, extra)


# --------------------------------------------------------------------------- report


def _row(case, b, name, r) -> str:
    e, s = r["ess_bulk_g1"], r["ess_per_s_per_realization"]
    comp = f"{e['min_companions']:7.0f}" if "min_companions" in e else "      -"
    return (
        f"{case:11s} {b:5d} {name:6s} {r['compile_s']:7.1f} {r['wall_s']:8.2f} "
        f"{e['min']:7.0f} {e['median']:7.0f} {comp} {s['min']:8.1f} {s['median']:8.1f} "
        f"{r['step_size']['median']:7.3f} {r['leapfrog_per_iter']['sampling_mean']:6.1f} "
        f"{r['leapfrog_per_iter']['sampling_executed']:6.1f} {r['mean_tree_depth']:5.2f} "
        f"{r['divergences']:5d} {r['lockstep_efficiency']['warmup']:5.2f} "
        f"{r['lockstep_efficiency']['sampling']:5.2f}"
    )


HEADER = (
    "case            B samp   comp_s   wall_s  ESSmin  ESSmed ESSmin* ESS/smin ESS/smed "
    "   step  lf/it  lf_ex depth   div eff_w eff_s\n"
    "(ESS: bulk ESS of g1 per realization; ESSmin*: min over the hard lane's companions; "
    "ESS/s: per realization;\n lf/it: mean leapfrog steps per iteration per chain; lf_ex: "
    "executed in lockstep; eff_w/eff_s: lockstep efficiency, warmup/sampling)"
)


def _git_state() -> dict:
    """Commit and locally modified files of the checkout (read-only git calls)."""
    import subprocess

    def git(*a):
        try:
            return subprocess.run(
                ["git", *a], cwd=ROOT, capture_output=True, text=True, check=True
            ).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return None

    dirty = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": git("rev-parse", "HEAD"), "modified": dirty.splitlines() if dirty else []}


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 4, 16, 64])
    ap.add_argument(
        "--cases", nargs="+", choices=["homogeneous", "hard"], default=["homogeneous", "hard"]
    )
    ap.add_argument(
        "--samplers",
        nargs="+",
        choices=["ours", "capped", "joint"],
        default=["ours", "capped", "joint"],
    )
    ap.add_argument(
        "--capped-depth",
        type=int,
        nargs=2,
        default=[3, 3],
        metavar=("WARMUP", "SAMPLING"),
        help="tree-depth caps of the 'capped' sampler (ours + Laplace mass kept fixed)",
    )
    ap.add_argument("--stamp", type=int, default=24, help="stamp size in pixels (full: 48)")
    ap.add_argument("--warmup", type=int, default=100, help="full: 500")
    ap.add_argument("--samples", type=int, default=100, help="full: 1000")
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--sigma", type=float, default=1e-3, help="noise sigma")
    ap.add_argument("--target-accept", type=float, default=0.8)
    ap.add_argument("--max-tree-depth", type=int, default=10)
    ap.add_argument("--no-map-init", dest="map_init", action="store_false")
    ap.add_argument("--hard-factor", type=float, default=100.0)
    ap.add_argument("--repeats", type=int, default=1, help="timed calls after compiling")
    ap.add_argument("--no-x64", dest="x64", action="store_false")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "benchmarks" / "nuts.json")
    args = ap.parse_args()

    jax.config.update("jax_enable_x64", args.x64)
    t_start = time.perf_counter()
    cfg = make_config(args)
    cfg_capped = capped_config(cfg, args)
    model = build_inference_model(cfg)
    dev = jax.devices()[0]
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    res: dict[str, Any] = {
        "workload": "noisy Level 0: configs/level0.yaml, noise sigma as below, offset free "
        "(uniform +-0.5 px), NUTS, latents g1 g2 dx dy",
        "jax": jax.__version__,
        "numpyro": numpyro.__version__,
        "platform": dev.platform,
        "device": dev.device_kind,
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "dtype": "float64" if args.x64 else "float32",
        "git": _git_state(),
        "load_average_start": list(os.getloadavg()),
        "settings": {
            **settings,
            "n_objects": cfg.image.n_objects,
            "fft_size": cfg.image.fft_size,
            "shear_grid": list(GRID),
            "hard_lane": "last lane: hard_factor x clean image + the same noise",
        },
        "runs": [],
    }
    print(
        f"JAX {jax.__version__} on {dev.platform} ({dev.device_kind}), {os.cpu_count()} CPUs, "
        f"load {os.getloadavg()[0]:.2f}; stamp {args.stamp}, warmup {args.warmup}, "
        f"samples {args.samples}, chains {args.chains}, sigma {args.sigma}"
    )
    print(HEADER)
    for case in args.cases:
        hard = case == "hard"
        for b in args.batch_sizes:
            if hard and b < 2:
                continue
            _, keys, obs = make_batch(cfg, b, hard, args.hard_factor)
            row = {"case": case, "batch_size": b}
            for name in args.samplers:
                load = os.getloadavg()[0]
                if name == "joint":
                    r = run_joint(cfg, model, keys, obs, args.repeats, hard)
                else:
                    c = cfg_capped if name == "capped" else cfg
                    r = run_ours(c, model, keys, obs, args.repeats, hard, name=name)
                row[name] = {**r, "load_1min": load}
                print(_row(case, b, name, row[name]), flush=True)
            for name in ("ours", "capped"):
                if name in row and "joint" in row:
                    o = row[name]["ess_per_s_per_realization"]
                    j = row["joint"]["ess_per_s_per_realization"]
                    row[f"ratio_min_ess_per_s_{name}_over_joint"] = (
                        o["min"] / j["min"] if j["min"] > 0 else None
                    )
                    row[f"ratio_median_ess_per_s_{name}_over_joint"] = (
                        o["median"] / j["median"] if j["median"] > 0 else None
                    )
            res["runs"].append(row)
    res["load_average_end"] = list(os.getloadavg())
    res["total_runtime_s"] = time.perf_counter() - t_start
    for name in ("ours", "capped"):
        print(f"\nmin ESS/s per realization, {name} / joint:")
        for row in res["runs"]:
            r = row.get(f"ratio_min_ess_per_s_{name}_over_joint")
            if r is not None:
                print(
                    f"  {row['case']:11s} B={row['batch_size']:5d}: {r:8.2f}  "
                    f"(median: {row[f'ratio_median_ess_per_s_{name}_over_joint']:.2f})"
                )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2) + "\n")
    print(
        f"total {res['total_runtime_s']:.0f} s; load average end {res['load_average_end']}; "
        f"wrote {args.out}"
    )


if __name__ == "__main__":
    main()
