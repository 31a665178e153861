"""NUTS benchmark (issue 5): independent vmapped samplers (ours) vs one joint NUTS chain.

Workload, "noisy Level 0": ``configs/level0.yaml``, noise sigma ``--sigma``, shear prior
Normal(0, 0.05) per component (pinned: the committed figures'), galaxy centre free (+-0.5
px), NUTS from each realization's MAP + Laplace fit, 4 chains, float64; latents g1 g2 dx dy.

- ours: ``shearbatch.engine.build_program(run_spec(cfg))``, B x C independent NUTS
  samplers vmapped in lockstep, each in its realization's Laplace-whitened coordinates;
- capped: the same with the documented large-batch recipe (docs/design.md) (tree depth capped at
  ``--capped-depth``, Laplace inverse mass matrix kept fixed);
- joint: the package's ONE model (``shearbatch.core.model.make_model``) inside
  ``numpyro.plate("realization", B)``, run by NumPyro's functional NUTS
  (``shearbatch.core.methods.nuts.run_chains``) as C chains over the concatenated latents
  (ours' starts; the Laplace variances as the initial inverse mass matrix).

Cases: homogeneous batches, and (B > 1) the same with the last lane's data replaced by
``--hard-factor`` x its clean image + the same noise. Figures: compile and wall time
(median of ``--repeats``), bulk ESS of g1 per realization and ESS/s, step sizes, leapfrog
steps, tree depth, divergences, lockstep efficiency, ESS/s ratios to joint. Defaults are
reduced for a 2-core CPU (24x24 stamps, 100 warmup / 100 draws, batch 1 4 16 64: ~20 min);
the full workload is ``--stamp 48 --warmup 500 --samples 1000 --batch-sizes 1 4 ... 4096``.
"""

from __future__ import annotations

import copy
import math
import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import yaml
from jax.flatten_util import ravel_pytree
from numpyro.infer.util import potential_energy

import _harness as h
from shearbatch.campaign import plan_campaign
from shearbatch.core.diagnostics import ess_bulk
from shearbatch.core.generate import render_stamps
from shearbatch.core.methods import nuts
from shearbatch.core.model import make_model
from shearbatch.core.posterior import build_posterior
from shearbatch.engine.loop import build_program
from shearbatch.schema import parse_config
from shearbatch.spec import run_spec

GRID = (-0.05, -0.02, 0.02, 0.05)
SHEAR_PRIOR = {"type": "Normal", "mean": 0.0, "sigma": 0.05}  # level0.yaml's before 9dff94c


def make_specs(args) -> tuple[Any, Any]:
    """RunSpecs of the workload (ours and joint) and of the capped recipe."""
    raw = yaml.safe_load((h.ROOT / "configs" / "level0.yaml").read_text())
    n, c = args.stamp, args.stamp / 2
    raw["image"].update(size_x=n, size_y=n, noise={"type": "Gaussian", "sigma": args.sigma})
    raw["gal"]["shear"] = {"type": "G1G2", "g1": SHEAR_PRIOR, "g2": SHEAR_PRIOR}
    pos = {"x_min": c - 0.5, "x_max": c + 0.5, "y_min": c - 0.5, "y_max": c + 0.5}
    raw["gal"]["position"] = {"type": "Uniform", **pos}
    nc = {"warmup": args.warmup, "samples": args.samples, "chains": args.chains,
          "target_accept": args.target_accept, "max_tree_depth": args.max_tree_depth,
          "map_init": {"enabled": args.map_init}}  # fmt: skip
    raw["inference"].update(method="nuts", nuts_config=nc)
    capped = copy.deepcopy(raw)
    (d_warm, d_samp), cap = args.capped_depth, capped["inference"]["nuts_config"]
    cap.update(max_tree_depth=d_warm, max_tree_depth_sampling=d_samp, adapt_mass_matrix=False)
    return run_spec(parse_config(raw)), run_spec(parse_config(capped))


def make_batch(spec, b: int, hard: bool, hard_factor: float):
    """(keys, obs) of a batch of ``b``; ``hard``: the last lane at S/N x hard_factor."""
    plan = plan_campaign(GRID, n_realizations=math.ceil(b / len(GRID)), base_seed=0)[:b]
    built = build_program(spec, plan)
    sim, images = built.sim, np.array(built.sim.images)
    if hard:
        params = {k: v[b - 1] for k, v in sim.params.items()}
        clean = np.asarray(render_stamps(spec.truth, params, sim.g[b - 1]))
        images[b - 1] = hard_factor * clean + (images[b - 1] - clean)  # same noise
    return built.keys, jnp.asarray(images)


def joint_program(spec, b: int):
    """``(jit(fit), joint_model, split)``: ``fit(keys, obs (B, M, H, W))`` runs C NUTS chains
    on the package's model plated over B realizations. The joint latent vector is the B flat
    vectors of ``build_posterior`` end to end; ``split`` maps it onto the plated sites."""
    inf = spec.inference
    settings = nuts.settings_of(inf.settings, **dict(inf.sections))._replace(dense_mass=False)
    post = build_posterior(spec.model)
    model = make_model(spec.model)
    d, c = post.x0.shape[0], settings.chains
    _, unravel = ravel_pytree({k: jnp.zeros(s) for k, s in post.sites.items()})

    def joint_model(obs):
        with numpyro.plate("realization", obs.shape[0], dim=-2):
            model(obs)

    def split(x):
        z = jax.vmap(unravel)(x.reshape(b, d))
        return {k: v.reshape(b, *(post.sites[k] or (1,))) for k, v in z.items()}

    def fit(keys, obs):
        def lane(key, o):  # ours' starts (nuts.fit's k_init) and Laplace variances
            centre, scale_fn, spread, _ = nuts._init(o, post, settings)
            eps = spread * jax.random.normal(jax.random.split(key)[0], (c, d), o.dtype)
            cols = jax.vmap(scale_fn)(jnp.eye(d, dtype=o.dtype))  # row i: F e_i, cov F F^T
            return centre[None, :] + jax.vmap(scale_fn)(eps), jnp.sum(cols**2, axis=0)

        starts, var = jax.vmap(lane)(keys, obs)  # (B, C, D), (B, D)
        starts = jnp.swapaxes(starts, 0, 1).reshape(c, b * d)

        def potential(x):
            pe = potential_energy(joint_model, (obs,), {}, split(x))
            return jnp.where(jnp.isnan(pe), jnp.inf, pe)

        chain_keys = jax.random.split(jax.random.fold_in(keys[0], 17), c)
        inv_mass = var.reshape(b * d) if settings.map_init else None
        (z, div, nst, step, *_), warm = nuts.run_chains(
            potential, chain_keys, starts, inv_mass, settings
        )
        lanes = jax.vmap(jax.vmap(lambda x: jax.vmap(post.constrain_fn)(x.reshape(b, d))))
        return {"samples": lanes(z), "diverging": div, "n_steps": nst, "step_size": step,
                "warmup_n_steps": warm}  # fmt: skip  # samples {site: (C, S, B, ...)}

    return jax.jit(fit), joint_model, split


def summarize(samples, walls, compile_s, hard, n_objects, extra) -> dict:
    """Figures of one run; ``samples`` {site: (B, C, S, ...)}."""
    g1, b, wall = samples["g1"], samples["g1"].shape[0], h.median(walls)
    ess = np.array([ess_bulk(v) for v in g1])
    flat = [v.reshape(*v.shape[:3], -1) for v in samples.values()]
    ess_all = [ess_bulk(v[r, ..., j]) for v in flat for r in range(b) for j in range(v.shape[-1])]
    e = {"min": float(np.nanmin(ess)), "median": float(np.nanmedian(ess)),
         "per_realization": ess.tolist()}  # fmt: skip
    s = {"min": e["min"] / wall, "median": e["median"] / wall}
    rec = {"compile_s": compile_s, "wall_s": wall, "wall_all_s": walls, "ess_bulk_g1": e,
           "ess_per_s_per_realization": s, "ess_per_s_batch": float(np.nansum(ess)) / wall,
           "g1_posterior_std_median": float(np.median(g1.std(axis=(1, 2)))), **extra,
           "ess_bulk_min_all_sites": float(np.nanmin(ess_all))}  # fmt: skip
    if hard and b > 1:
        e.update(hard_lane=float(ess[-1]), min_companions=float(np.nanmin(ess[:-1])))
        s["min_companions"] = e["min_companions"] / wall
        comp_std = float(np.median(g1[:-1].std(axis=(1, 2))))
        rec["hard_lane_g1"] = {"mean": float(g1[-1].mean()), "std": float(g1[-1].std()),
                               "companions_std_median": comp_std}  # fmt: skip
    if jax.devices()[0].platform == "gpu":
        rec["ess_per_s_per_galaxy"] = {k: v / n_objects for k, v in s.items()}
    return rec


def lane_stats(n, w, step, depth, div, eff) -> dict:
    """n, w: (lanes, iterations) leapfrog steps, sampling / warmup; step: final step sizes."""
    return {
        "step_size": {"median": float(np.median(step)), "min": float(np.min(step)),
                      "max": float(np.max(step))},
        "leapfrog_per_iter": {"sampling_mean": float(n.mean()), "warmup_mean": float(w.mean()),
                              "sampling_executed": float(n.max(axis=0).mean()),
                              "warmup_executed": float(w.max(axis=0).mean())},
        "mean_tree_depth": float(np.mean(depth)),
        "divergences": int(np.sum(div)),
        "lockstep_efficiency": eff,
        "warmup_fraction_of_leapfrog": float(w.sum() / (w.sum() + n.sum())),
    }  # fmt: skip


_COMPILED: dict[tuple[str, int], tuple[Any, float]] = {}


def run(name: str, spec, keys, obs, repeats: int, hard: bool) -> dict:
    """Compile once per (sampler, batch size) (the hard case re-uses it), time, summarize."""
    b, n_obj = obs.shape[0], spec.model.image.n_objects
    method, prog = (None, joint_program(spec, b)[0]) if name == "joint" else build_program(spec)[:2]
    if (name, b) not in _COMPILED:
        _COMPILED[name, b] = h.compile_aot(prog, keys, obs)
    compiled, compile_s = _COMPILED[name, b]
    _, walls, res = h.time_calls(compiled, (keys, obs), repeats, warm=False)
    res = jax.tree.map(np.asarray, res)
    if name == "joint":  # the C chains run in lockstep too; divergences shared by the batch
        n, w = res["n_steps"], res["warmup_n_steps"]  # (C, S), (C, W)
        eff = {"warmup": nuts.lockstep_efficiency(w), "sampling": nuts.lockstep_efficiency(n)}
        depth = np.ceil(np.log2(n + 1.0))
        extra = lane_stats(n, w, res["step_size"][:, -1], depth, res["diverging"], eff)
        samples = {k: np.moveaxis(v, 2, 0) for k, v in res["samples"].items()}
        return summarize(samples, walls, compile_s, hard, n_obj, extra)
    st, info = res.stats, res.info
    n, w = (a.reshape(-1, a.shape[-1]) for a in (st["n_steps"], info.warmup_n_steps))
    eff = method.batch_report(res)["lockstep_efficiency"]
    step = st["step_size"][:, :, -1]  # (B, C)
    extra = lane_stats(n, w, step, st["tree_depth"], st["diverging"], eff)
    split = hard and b > 1
    extra["step_size"]["median_companions"] = float(np.median(step[:-1])) if split else None
    extra["step_size"]["hard_lane"] = float(np.median(step[-1])) if split else None
    extra["divergences_per_realization_max"] = int(st["diverging"].sum(axis=(1, 2)).max())
    extra["map_init_ok"] = int(np.sum(info.map_ok))
    return summarize(res.samples, walls, compile_s, hard, n_obj, extra)


COLUMNS = [("case", "11s"), ("B", "5d"), ("samp", "6s"), ("comp_s", "7.1f"), ("wall_s", "8.2f"),
           ("ESSmin", "7.0f"), ("ESSmed", "7.0f"), ("ESSmin*", "7.0f"), ("ESS/smin", "8.1f"),
           ("ESS/smed", "8.1f"), ("step", "7.3f"), ("lf/it", "6.1f"), ("lf_ex", "6.1f"),
           ("depth", "5.2f"), ("div", "5d"), ("eff_w", "5.2f"), ("eff_s", "5.2f")]  # fmt: skip
NOTE = "(ESS of g1 per realization, *: of the hard lane's companions; lf: leapfrog steps)"


def draw(fig, rec: dict) -> None:
    """Min ESS/s per realization and lockstep efficiency vs batch size, per case and sampler."""
    ax, bx = fig.subplots(1, 2)
    styles = {"ours": "o-", "capped": "s-", "joint": "^--"}
    for case, color in (("homogeneous", "C0"), ("hard", "C3")):
        runs = [r for r in rec["runs"] if r["case"] == case]
        for sampler, style in styles.items():
            pts = [(r["batch_size"], r[sampler]) for r in runs if sampler in r]
            if not pts:
                continue
            b = [p[0] for p in pts]
            ax.plot(b, [p[1]["ess_per_s_per_realization"]["min"] for p in pts], style,
                    color=color, label=f"{case}, {sampler}")  # fmt: skip
            if sampler != "joint":
                bx.plot(b, [p[1]["lockstep_efficiency"]["sampling"] for p in pts], style,
                        color=color, label=f"{case}, {sampler}")  # fmt: skip
    for a in (ax, bx):
        a.set_xscale("log", base=2)
        a.set_xlabel("batch size (realizations)")
        a.legend(fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("min bulk ESS(g1) / s per realization")
    ax.set_title("NUTS: independent per-realization samplers vs one joint chain", fontsize=10)
    bx.set_ylabel("useful fraction of leapfrog work (sampling)")
    bx.set_ylim(0, 1.05)
    bx.set_title("lockstep efficiency of the batched samplers", fontsize=10)


def main(argv: list[str] | None = None) -> dict:
    ap = h.parser(__doc__, "nuts", repeats=1)
    add = ap.add_argument
    add("--batch-sizes", type=int, nargs="+", default=[1, 4, 16, 64])
    add("--cases", nargs="+", choices=["homogeneous", "hard"], default=["homogeneous", "hard"])
    samplers = ["ours", "capped", "joint"]
    add("--samplers", nargs="+", choices=samplers, default=samplers)
    add("--capped-depth", type=int, nargs=2, default=[3, 3], metavar=("WARMUP", "SAMPLING"))
    add("--stamp", type=int, default=24, help="stamp size in pixels (full: 48)")
    add("--warmup", type=int, default=100, help="full: 500")
    add("--samples", type=int, default=100, help="full: 1000")
    add("--chains", type=int, default=4)
    add("--sigma", type=float, default=1e-3, help="noise sigma")
    add("--target-accept", type=float, default=0.8)
    add("--max-tree-depth", type=int, default=10)
    add("--no-map-init", dest="map_init", action="store_false")
    add("--hard-factor", type=float, default=100.0)
    h.add_x64(ap)
    args = ap.parse_args(argv)
    h.configure(args.x64)
    spec, capped = make_specs(args)
    res: dict[str, Any] = {
        "workload": "noisy Level 0: configs/level0.yaml, noise sigma as below, shear prior "
        "Normal(0, 0.05) per component, offset free (uniform +-0.5 px), NUTS, latents g1 g2 dx dy",
        **h.provenance("float64" if args.x64 else "float32"),
        "settings": {**h.settings(args), "n_objects": spec.model.image.n_objects,
                     "fft_size": spec.model.image.fft_size, "shear_grid": list(GRID),
                     "hard_lane": "last lane: hard_factor x clean image + the same noise"},
        "runs": [],
    }  # fmt: skip
    h.banner(res)
    table = h.Table(COLUMNS, NOTE)
    for case in args.cases:
        for b in [b for b in args.batch_sizes if case == "homogeneous" or b > 1]:
            keys, obs = make_batch(spec, b, case == "hard", args.hard_factor)
            row: dict[str, Any] = {"case": case, "batch_size": b}
            for name in args.samplers:
                load = os.getloadavg()[0]
                sp = capped if name == "capped" else spec
                r = row[name] = {**run(name, sp, keys, obs, args.repeats, case == "hard"),
                                 "load_1min": load}  # fmt: skip
                e, s, lf = r["ess_bulk_g1"], r["ess_per_s_per_realization"], r["leapfrog_per_iter"]
                table.row(case, b, name, r["compile_s"], r["wall_s"], e["min"], e["median"],
                          e.get("min_companions"), s["min"], s["median"], r["step_size"]["median"],
                          lf["sampling_mean"], lf["sampling_executed"], r["mean_tree_depth"],
                          r["divergences"], *r["lockstep_efficiency"].values())  # fmt: skip
            rate = {k: row[k]["ess_per_s_per_realization"] for k in args.samplers}
            for name in [k for k in ("ours", "capped") if k in rate and "joint" in rate]:
                j = rate["joint"]
                rat = {q: rate[name][q] / j[q] if j[q] > 0 else None for q in ("min", "median")}
                row.update({f"ratio_{q}_ess_per_s_{name}_over_joint": v for q, v in rat.items()})
                rounded = (v if v is None else round(v, 2) for v in rat.values())
                print(f"{'':18s}{name} / joint, ESS/s per realization (min, median):", *rounded)
            res["runs"].append(row)
    return h.write_json(res, args.out, draw=draw)


if __name__ == "__main__":
    main()
