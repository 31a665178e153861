"""NUTS cost at Level 2 and at survey S/N 30: seconds per realization, ESS of g per second.

The compiled batched program ``bias-run`` runs (``shearbatch.engine.build_program``) with
``inference.method: nuts`` on

- ``configs/level2.yaml`` (M = 32 galaxies sharing g, 16x16 Moffat stamps, 2 + 6 M =
  194 latents per realization; NUTS in the MAP + Laplace-whitened coordinates, the O(M)
  block-arrow factor), at batch ``--batch`` (the lanes of a batch run in lockstep);
- ``configs/survey_snr30.yaml`` (one galaxy, free shape: 8 latents), at batch
  ``--batch-snr30``.

For each NUTS setting (``--settings warmup:samples:chains:depth``, depth = the sampling
phase's tree-depth cap; the config's ``max_tree_depth`` stays the warm-up's) it records the
compile time, the median wall of ``--repeats`` post-compile calls, seconds per realization
(wall, and CPU seconds of both cores: on a loaded machine the CPU figure / 2 is what an idle
2-core machine would take when the program keeps both cores busy),
per lane the largest R-hat and the smallest bulk ESS of g1 and g2, divergences, and bulk
ESS(g) per second of one core-pair (min over g1, g2 and lanes / seconds per realization).
For Level 2 it estimates a 300-image campaign (300 x seconds per realization + one
compile) and whether the setting meets R-hat <= 1.01 and ESS(g) >= 400 in every lane.

Prints the figures and writes ``results/benchmarks/nuts_level2.json`` and ``.png``::

    .venv/bin/python bench/bench_nuts_level2.py [--batch 8] [--repeats 3]
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


def config(name: str, warmup: int, samples: int, chains: int, depth: int) -> dict[str, Any]:
    raw = yaml.safe_load((h.ROOT / "configs" / f"{name}.yaml").read_text())
    raw["inference"]["method"] = "nuts"
    raw["inference"]["shear_model"] = "joint"  # M galaxies sharing one shear
    nc = raw["inference"].setdefault("nuts_config", {})
    nc.update(warmup=warmup, samples=samples, chains=chains, max_tree_depth_sampling=depth)
    nc.setdefault("max_tree_depth", max(depth, 4))
    return raw


def measure(name: str, setting: str, b: int, repeats: int) -> dict[str, Any]:
    import jax
    import numpy as np

    from shearbatch.campaign import plan_campaign
    from shearbatch.core.diagnostics import ess_bulk, rhat
    from shearbatch.engine import build_program
    from shearbatch.schema import parse_config
    from shearbatch.spec import run_spec

    warmup, samples, chains, depth = (int(v) for v in setting.split(":"))
    raw = config(name, warmup, samples, chains, depth)
    spec = run_spec(parse_config(raw))
    m = raw["image"]["n_objects"]
    plan = plan_campaign([0.02], n_realizations=b, base_seed=0)
    built = build_program(spec, plan)
    compiled, compile_s = h.compile_aot(built.program, built.keys, built.sim.images)
    cpu0 = time.process_time()
    first, times, out = h.time_calls(compiled, (built.keys, built.sim.images), repeats)
    cpu_per_call = (time.process_time() - cpu0) / (repeats + 1)  # both cores' CPU seconds
    out = jax.tree.map(np.asarray, out)
    med = h.median(times)
    lanes = []
    for i in range(len(plan)):
        row: dict[str, Any] = {}
        for c in ("g1", "g2"):
            x = out.samples[c][i]  # (chain, draw)
            row[f"rhat_{c}"] = float(rhat(x))
            row[f"ess_{c}"] = float(ess_bulk(x))
        row["divergences"] = int(np.asarray(out.stats["diverging"][i]).sum())
        lanes.append(row)
    s_per_real = med / len(plan)
    ess_min = min(min(r["ess_g1"], r["ess_g2"]) for r in lanes)
    rhat_max = max(max(r["rhat_g1"], r["rhat_g2"]) for r in lanes)
    res = {
        "config": name, "M": m, "B": len(plan), "warmup": warmup, "samples": samples,
        "chains": chains, "depth_sampling": depth, "compile_s": compile_s, "first_s": first,
        "median_s": med, "all_s": times, "s_per_realization": s_per_real,
        "cpu_s_per_realization": cpu_per_call / len(plan),
        "s_per_galaxy": s_per_real / m, "ess_g_min": ess_min, "rhat_g_max": rhat_max,
        "ess_g_per_s": ess_min / s_per_real,
        "divergences": sum(r["divergences"] for r in lanes),
        "meets": bool(rhat_max <= RHAT_MAX and ess_min >= ESS_MIN), "lanes": lanes,
    }  # fmt: skip
    if name == "level2":
        res["campaign_300_min"] = (CAMPAIGN_IMAGES * s_per_real + compile_s) / 60
    return res


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
    ap = h.parser(__doc__, "nuts_level2", repeats=3)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--batch-snr30", type=int, default=16)
    ap.add_argument("--settings", nargs="*", default=["200:500:4:3", "100:300:4:3"],
                    help="Level 2 NUTS settings warmup:samples:chains:depth")  # fmt: skip
    ap.add_argument("--settings-snr30", nargs="*", default=["200:500:4:3"])
    args = ap.parse_args(argv)
    h.configure(True)
    res: dict[str, Any] = {**h.provenance("float64"), "settings": h.settings(args),
                           "load_average_start": list(os.getloadavg())}  # fmt: skip
    h.banner(res)
    cols = [("config", "13s"), ("M", "4d"), ("B", "4d"), ("warmup", "7d"), ("samples", "8d"),
            ("chains", "7d"), ("depth", "6d"), ("s/real", "8.2f"), ("ESS(g)min", "10.0f"),
            ("Rhat max", "9.4f"), ("ESS/s", "8.1f"), ("div", "5d"), ("compile_s", "9.1f")]  # fmt: skip
    table = h.Table(cols)
    rows = []
    cases = [("level2", s, args.batch) for s in args.settings]
    cases += [("survey_snr30", s, args.batch_snr30) for s in args.settings_snr30]
    for name, s, b in cases:
        r = measure(name, s, b, args.repeats)
        rows.append(r)
        table.row(name, r["M"], r["B"], r["warmup"], r["samples"], r["chains"],
                  r["depth_sampling"], r["s_per_realization"], r["ess_g_min"], r["rhat_g_max"],
                  r["ess_g_per_s"], r["divergences"], r["compile_s"])  # fmt: skip
    res["rows"] = rows
    for r in rows:
        if r["config"] == "level2":
            print(f"level2 {r['warmup']}/{r['samples']}x{r['chains']} depth {r['depth_sampling']}: "
                  f"300-image campaign ~{r['campaign_300_min']:.1f} min, meets R-hat <= {RHAT_MAX} "
                  f"and ESS(g) >= {ESS_MIN}: {r['meets']}")  # fmt: skip
        else:
            print(f"{r['config']}: {r['ess_g_per_s'] / r['M']:.0f} ESS(g)/s per galaxy, "
                  f"{r['s_per_galaxy']:.3f} s per galaxy for ESS {r['ess_g_min']:.0f}")  # fmt: skip
    res["load_average_end"] = list(os.getloadavg())
    return h.write_json(res, args.out, draw)


if __name__ == "__main__":
    main()
