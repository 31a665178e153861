"""NUTS cost at Level 2 and at survey S/N 30: seconds per realization, ESS of g per second.

The compiled batched program ``bias-run`` runs (``shearbatch.engine.build_program``) with
``inference.method: nuts`` on

- ``configs/level2.yaml`` (M = 32 galaxies sharing g, 16x16 Moffat stamps, 2 + 6 M =
  194 latents per realization; NUTS in the MAP + Laplace-whitened coordinates, the O(M)
  block-arrow factor), at batch ``--batch`` (the lanes of a batch run in lockstep);
- ``configs/survey_snr30.yaml`` (one galaxy, free shape: 8 latents), at batch
  ``--batch-snr30``.

For each NUTS setting (``--settings warmup:samples:chains:depth[:warm_depth]``, depth = the
sampling phase's tree-depth cap; warm_depth the warm-up's, the config's when absent) it records the
compile time, the median wall of ``--repeats`` post-compile calls, seconds per realization
(wall, and CPU seconds of both cores: on a loaded machine the CPU figure / 2 is what an idle
2-core machine would take when the program keeps both cores busy),
per lane the largest R-hat and the smallest bulk ESS of g1 and g2, divergences, and bulk
ESS(g) per second of one core-pair (min over g1, g2 and lanes / seconds per realization).
For Level 2 it estimates a 300-image campaign (300 x seconds per realization + one
compile) and whether the setting meets R-hat <= 1.01 and ESS(g) >= 400 in every lane.

Each Level 2 setting runs ``--repeats`` batches of ``--batch`` distinct seeds through one
compiled program (R-hat and ESS of every realization; the wall is the median batch), and
its cost is decomposed: the leapfrog steps the lockstep program ran x the time of one
vmapped value-and-gradient of the potential (``grad %``: their share of the wall). The same
NUTS on a standard normal of Level 2's dimension (``gaussian_reference``) gives the step
size and steps per draw of an exactly whitened posterior of that size.

Prints the figures and writes ``results/benchmarks/nuts_level2.json`` and ``.png``::

    .venv/bin/python bench/bench_nuts_level2.py [--batch 2] [--repeats 4]
"""

from __future__ import annotations

import os
import time
from typing import Any

import yaml

import _harness as h

#: R-hat and ESS(g) a realization needs (issue 23 item 5)
RHAT_MAX, ESS_MIN = 1.01, 400
CAMPAIGN_IMAGES = 300


def config(
    name: str, warmup: int, samples: int, chains: int, depth: int, warm_depth: int | None = None
) -> dict[str, Any]:
    raw = yaml.safe_load((h.ROOT / "configs" / f"{name}.yaml").read_text())
    raw["inference"]["method"] = "nuts"
    raw["inference"]["shear_model"] = "joint"  # M galaxies sharing one shear
    nc = raw["inference"].setdefault("nuts_config", {})
    nc.update(warmup=warmup, samples=samples, chains=chains, max_tree_depth_sampling=depth)
    if warm_depth is not None:
        nc["max_tree_depth"] = warm_depth
    nc.setdefault("max_tree_depth", max(depth, 4))
    return raw


def parse_setting(setting: str) -> tuple[int, int, int, int, int | None]:
    """``warmup:samples:chains:depth[:warmup_depth]`` (warm-up depth: the config's if absent)."""
    v = [int(x) for x in setting.split(":")]
    if len(v) not in (4, 5):
        raise SystemExit(f"--settings: {setting!r} is not warmup:samples:chains:depth[:warm_depth]")
    return v[0], v[1], v[2], v[3], (v[4] if len(v) == 5 else None)


def gradient_time(spec, sim, lanes: int, repeats: int = 30) -> float:
    """Median seconds of one value-and-gradient of the realization's potential, vmapped
    over ``lanes`` points (the lanes of one leapfrog step of the program)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from shearbatch.core.posterior import build_posterior

    post = build_posterior(spec.model)
    obs = jnp.asarray(sim.images[0])
    x = post.x0.astype(obs.dtype)
    noise = jax.random.normal(jax.random.PRNGKey(0), (lanes, x.shape[0]), obs.dtype)
    xs = x[None, :] + 0.01 * noise
    vg = jax.jit(jax.vmap(jax.value_and_grad(lambda z: post.potential_fn(z, obs))))
    jax.block_until_ready(vg(xs))
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(vg(xs))
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def measure(name: str, setting: str, b: int, batches: int) -> dict[str, Any]:
    """One NUTS setting on ``batches`` batches of ``b`` distinct seeds (one compiled program):
    the median batch wall, per-realization R-hat / ESS of g, and the cost decomposed into
    leapfrog steps x the time of one vmapped value-and-gradient."""
    import jax
    import numpy as np

    from shearbatch.campaign import plan_campaign
    from shearbatch.core.diagnostics import ess_bulk, rhat
    from shearbatch.engine.loop import batch_inputs, build_program
    from shearbatch.schema import parse_config
    from shearbatch.spec import run_spec

    warmup, samples, chains, depth, warm_depth = parse_setting(setting)
    raw = config(name, warmup, samples, chains, depth, warm_depth)
    spec = run_spec(parse_config(raw))
    m = raw["image"]["n_objects"]
    plan = plan_campaign([0.02], n_realizations=b * batches, base_seed=0)
    built = build_program(spec, plan[:b])
    compiled, compile_s = h.compile_aot(built.program, built.keys, built.sim.images)
    times, cpus, lanes, steps = [], [], [], []
    for k in range(batches):
        batch = plan[k * b : (k + 1) * b]
        sim, keys = batch_inputs(spec, batch)
        cpu0, t0 = time.process_time(), time.perf_counter()
        out = jax.block_until_ready(compiled(keys, sim.images))
        times.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - cpu0)  # both cores' CPU seconds
        out = jax.tree.map(np.asarray, out)
        # leapfrog steps the lockstep program ran per lane: the slowest lane's, per iteration
        steps.append(float(out.info.warmup_n_steps.max(axis=(0, 1)).sum()
                           + out.stats["n_steps"].max(axis=(0, 1)).sum()))  # fmt: skip
        for i, r in enumerate(batch):
            row: dict[str, Any] = {"seed": r.seed}
            for c in ("g1", "g2"):
                x = out.samples[c][i]  # (chain, draw)
                row[f"rhat_{c}"] = float(rhat(x))
                row[f"ess_{c}"] = float(ess_bulk(x))
            row["divergences"] = int(np.asarray(out.stats["diverging"][i]).sum())
            row["step_size"] = float(np.mean(out.stats["step_size"][i][:, -1]))
            row["meets"] = bool(max(row["rhat_g1"], row["rhat_g2"]) <= RHAT_MAX
                                and min(row["ess_g1"], row["ess_g2"]) >= ESS_MIN)  # fmt: skip
            lanes.append(row)
    med = h.median(times)
    s_per_real = med / b
    t_grad = gradient_time(spec, sim, b * chains)
    grads = h.median(steps)
    ess = [min(r["ess_g1"], r["ess_g2"]) for r in lanes]
    rh = [max(r["rhat_g1"], r["rhat_g2"]) for r in lanes]
    res = {
        "config": name, "M": m, "D": 2 + 6 * m if name == "level2" else None, "B": b,
        "batches": batches, "warmup": warmup, "samples": samples, "chains": chains,
        "depth_sampling": depth, "depth_warmup": raw["inference"]["nuts_config"]["max_tree_depth"],
        "compile_s": compile_s, "median_s": med, "all_s": times, "s_per_realization": s_per_real,
        "cpu_s_per_realization": h.median(cpus) / b, "s_per_galaxy": s_per_real / m,
        "ess_g_min": min(ess), "ess_g_median": float(np.median(ess)), "rhat_g_max": max(rh),
        "ess_g_per_s": min(ess) / s_per_real,
        "ess_g_per_s_median": float(np.median(ess)) / s_per_real,
        "n_meet": sum(r["meets"] for r in lanes), "n": len(lanes),
        "divergences": sum(r["divergences"] for r in lanes),
        "step_size_median": float(np.median([r["step_size"] for r in lanes])),
        "leapfrog_steps_per_call": grads, "value_and_grad_s": t_grad,
        "gradient_share": grads * t_grad / med,
        "meets": all(r["meets"] for r in lanes), "lanes": lanes,
    }  # fmt: skip
    if name == "level2":
        res["campaign_300_min"] = (CAMPAIGN_IMAGES * s_per_real + compile_s) / 60
    return res


def gaussian_reference(dim: int, setting: str) -> dict[str, Any]:
    """NUTS (the same kernel and settings) on a standard normal of ``dim`` dimensions: the
    step size and ESS per draw that an exactly whitened posterior of that size gets."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from shearbatch.core.diagnostics import ess_bulk
    from shearbatch.core.methods.map import MapConfig
    from shearbatch.core.methods.nuts import NutsSettings, run_chains

    warmup, samples, chains, depth, warm_depth = parse_setting(setting)
    st = NutsSettings(warmup, samples, chains, False, 0.8, warm_depth or max(depth, 4), depth,
                      False, False, MapConfig())  # fmt: skip
    key = jax.random.PRNGKey(0)
    starts = jax.random.normal(key, (chains, dim))
    (z, _, nst, step, *_), _ = jax.jit(
        lambda k, s: run_chains(
            lambda x: 0.5 * jnp.sum(x * x), jax.random.split(k, chains), s, None, st
        )
    )(key, starts)
    z = np.asarray(z)
    ess = [float(ess_bulk(z[..., j])) for j in range(min(dim, 8))]
    return {"dim": dim, "setting": setting, "step_size_median": float(np.median(np.asarray(step)[:, -1])),
            "n_steps_mean": float(np.asarray(nst).mean()),
            "ess_per_draw_median": float(np.median(ess)) / (chains * samples)}  # fmt: skip


def draw(fig, res: dict) -> None:
    ax = fig.subplots(1, 2)
    for name, mark in (("level2", "o"), ("survey_snr30", "s")):
        rows = [r for r in res["rows"] if r["config"] == name]
        if not rows:
            continue
        ax[0].plot([r["s_per_realization"] for r in rows], [r["ess_g_min"] for r in rows],
                   mark, label=name)  # fmt: skip
        for r in rows:
            ax[0].annotate(f"{r['warmup']}/{r['samples']}x{r['chains']} d{r['depth_sampling']}",
                           (r["s_per_realization"], r["ess_g_min"]), fontsize=6)  # fmt: skip
        ax[1].bar([f"{name[:6]} {r['warmup']}/{r['samples']}" for r in rows],
                  [r["ess_g_per_s"] for r in rows])  # fmt: skip
    ax[0].axhline(ESS_MIN, color="k", lw=0.8, ls="--", label=f"ESS {ESS_MIN}")
    ax[0].set(xscale="log", yscale="log", xlabel="s per realization (post-compile)",
              ylabel="min bulk ESS of g over lanes", title="NUTS: ESS vs cost")  # fmt: skip
    ax[0].legend(fontsize=7)
    ax[1].set(yscale="log", ylabel="bulk ESS(g) / s per realization", title="ESS per second")
    ax[1].tick_params(axis="x", labelrotation=60, labelsize=6)
    for a in ax:
        a.grid(alpha=0.3, which="both")


def main(argv: list[str] | None = None) -> dict:
    ap = h.parser(__doc__, "nuts_level2", repeats=4)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--batch-snr30", type=int, default=16)
    ap.add_argument(
        "--settings",
        nargs="*",
        default=["200:500:4:3:4", "100:400:4:3:3"],
        help="Level 2 NUTS settings warmup:samples:chains:depth[:warm_depth]",
    )
    ap.add_argument("--settings-snr30", nargs="*", default=["300:500:4:10"])
    args = ap.parse_args(argv)
    h.configure(True)
    res: dict[str, Any] = {**h.provenance("float64"), "settings": h.settings(args),
                           "load_average_start": list(os.getloadavg())}  # fmt: skip
    h.banner(res)
    cols = [("config", "13s"), ("n", "4d"), ("B", "3d"), ("setting", "14s"), ("s/real", "8.2f"),
            ("ESS(g)min", "10.0f"), ("ESS(g)med", "10.0f"), ("Rhat max", "9.4f"),
            ("meet", "6s"), ("step", "6.3f"), ("leapfrog", "9.0f"), ("vg ms", "7.2f"),
            ("grad %", "7.0f"), ("div", "5d")]  # fmt: skip
    table = h.Table(cols)
    rows = []
    cases = [("level2", s, args.batch, args.repeats) for s in args.settings]
    cases += [("survey_snr30", s, args.batch_snr30, 1) for s in args.settings_snr30]
    for name, s, b, k in cases:
        r = measure(name, s, b, k)
        rows.append(r)
        table.row(name, r["n"], r["B"], s, r["s_per_realization"], r["ess_g_min"],
                  r["ess_g_median"], r["rhat_g_max"], f"{r['n_meet']}/{r['n']}",
                  r["step_size_median"], r["leapfrog_steps_per_call"],
                  1e3 * r["value_and_grad_s"], 100 * r["gradient_share"], r["divergences"])  # fmt: skip
    res["rows"] = rows
    res["gaussian_reference"] = [gaussian_reference(r["D"], f"{r['warmup']}:{r['samples']}:"
                                                    f"{r['chains']}:{r['depth_sampling']}:"
                                                    f"{r['depth_warmup']}")
                                 for r in rows if r["config"] == "level2"][:1]  # fmt: skip
    for r in rows:
        if r["config"] == "level2":
            print(f"level2 {r['warmup']}/{r['samples']}x{r['chains']} depth "
                  f"{r['depth_warmup']}/{r['depth_sampling']}: 300-image campaign "
                  f"~{r['campaign_300_min']:.1f} min; {r['n_meet']} of {r['n']} realizations "
                  f"meet R-hat <= {RHAT_MAX} and ESS(g) >= {ESS_MIN}; "
                  f"{r['leapfrog_steps_per_call']:.0f} leapfrog steps x "
                  f"{1e3 * r['value_and_grad_s']:.2f} ms (one gradient of {r['B'] * r['chains']} "
                  f"lanes) = {100 * r['gradient_share']:.0f}% of the wall")  # fmt: skip
        else:
            print(f"{r['config']}: {r['ess_g_per_s'] / r['M']:.0f} ESS(g)/s per galaxy, "
                  f"{r['s_per_galaxy']:.3f} s per galaxy for ESS {r['ess_g_min']:.0f}")  # fmt: skip
    for g in res["gaussian_reference"]:
        print(f"standard normal, D = {g['dim']}, {g['setting']}: step size "
              f"{g['step_size_median']:.3f}, {g['n_steps_mean']:.1f} leapfrog steps per draw, "
              f"ESS per draw {g['ess_per_draw_median']:.2f}")  # fmt: skip
    res["load_average_end"] = list(os.getloadavg())
    return h.write_json(res, args.out, draw)


if __name__ == "__main__":
    main()
