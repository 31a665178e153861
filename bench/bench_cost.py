"""Cost per galaxy of MAP + Laplace vs the galaxies per realization M, and its lockstep.

The inference step alone (``shearbatch.engine.build_program``, the compiled batched
program ``bias-run`` runs, with its lane chunk), on ``configs/level2.yaml``'s population
(16x16 stamps; flux, size, shape and offset free per galaxy: 2 + 6 M latents):

1. galaxies/s post-compile, compiled program MiB (XLA ``memory_analysis``) and MiB per
   galaxy-lane, Newton steps and the lockstep efficiency (steps each lane needed / steps
   its chunk ran) vs M (``--ms``, default 1 8 32 128) at batch ``--batch`` (8) and the
   method's CPU chunk (``--chunk``, default: MAP's ``cpu_chunk``);
   for the last ``map_config.optimizer`` of ``--optimizers`` (newton, gauss_newton), the
   others at M in ``--compare-ms`` (8 32) only;
2. the same at M = ``--m-fixed`` (32) vs the chunk width (``--chunks``, 1 2 4 8): what the
   lockstep costs and what vectorising the lanes gains (the last optimizer);
3. the optimizers on other configs as shipped (``--configs``: level0, survey_snr30), and
   for every case the second optimizer against the first: galaxies/s ratio, mean steps,
   and the largest difference of the modes in posterior sd (the draws' std).

Times are medians of ``--repeats`` calls on a shared machine (load average in the JSON).
Prints the figures and writes ``results/benchmarks/cost.json`` and ``cost.png``::

    .venv/bin/python bench/bench_cost.py [--ms 1 8 32 128] [--batch 8] [--repeats 3]
"""

from __future__ import annotations

from typing import Any

import yaml

import _harness as h
from bench_scaling import memory_mib


def config(m: int | None, optimizer: str = "newton", name: str = "level2") -> dict[str, Any]:
    raw = yaml.safe_load((h.ROOT / "configs" / f"{name}.yaml").read_text())
    if m is not None:
        raw["image"]["n_objects"] = m
    raw["inference"]["method"] = "map"
    raw["inference"]["shear_model"] = "joint"  # the shared-shear model whose cost M sets
    raw["inference"]["map_config"]["optimizer"] = optimizer
    return raw


def measure(raw: dict, b: int, chunk: int | None, repeats: int) -> dict[str, Any]:
    import jax
    import numpy as np

    from shearbatch.campaign import plan_campaign
    from shearbatch.core.batching import chunk_width
    from shearbatch.engine.loop import build_program
    from shearbatch.schema import parse_config
    from shearbatch.spec import run_spec

    spec = run_spec(parse_config(raw))
    m = raw["image"]["n_objects"]
    plan = plan_campaign([0.02], n_realizations=b, base_seed=0)
    built = build_program(spec, plan, chunk=chunk)
    method, prog, sim, keys = built.method, built.program, built.sim, built.keys
    compiled, compile_s = h.compile_aot(prog, keys, sim.images)
    first, times, out = h.time_calls(compiled, (keys, sim.images), repeats)
    width = chunk_width(b, chunk) or b
    rep = method.batch_report(jax.tree.map(np.asarray, out), lockstep=width)
    med = h.median(times)
    mib = memory_mib(compiled)
    dec = np.asarray(out.info.decrement)
    modes = {k: np.asarray(v) for k, v in out.mode.items()}
    sds = {k: np.asarray(v).std(axis=(1, 2)) for k, v in out.samples.items()}
    return {"M": m, "B": b, "chunk": width,
            "optimizer": raw["inference"]["map_config"]["optimizer"], "_modes": (modes, sds), "latents": 2 + 6 * m, "compile_s": compile_s,
            "first_s": first, "median_s": med, "all_s": times, "galaxies_per_s": b * m / med,
            "program_mib": mib, "mib_per_galaxy_lane": None if mib is None else mib / (b * m),
            "lockstep_efficiency": rep["lockstep_efficiency"],
            "newton_steps": np.asarray(out.info.n_steps).tolist(),
            "all_converged": bool(np.all(dec <= 1e-4)),
            "max_decrement": float(np.max(dec))}  # fmt: skip


def mode_diff_sd(a: dict, b: dict) -> float:
    """Largest |mode_a - mode_b| over every latent and lane, in a's posterior sd."""
    import numpy as np

    (ma, sa), (mb, _) = a["_modes"], b["_modes"]
    return float(max(np.max(np.abs(ma[k] - mb[k]) / sa[k]) for k in ma))


def draw(fig, res: dict) -> None:
    ax = fig.subplots(1, 3)
    for opt, style in (("newton", "o-"), ("gauss_newton", "s--")):
        rows = [r for r in res["vs_m"] if r["optimizer"] == opt]
        if not rows:
            continue
        ms = [r["M"] for r in rows]
        ax[0].loglog(ms, [r["galaxies_per_s"] for r in rows], style, label=opt)
        if rows[0]["mib_per_galaxy_lane"] is not None:
            ax[1].semilogx(ms, [r["mib_per_galaxy_lane"] for r in rows], style, label=opt)
    r0 = res["vs_m"][0]
    ax[0].set(xlabel="galaxies per realization M", ylabel="galaxies / s (post-compile)",
              title=f"MAP + Laplace, B = {r0['B']}, chunk {r0['chunk']}")  # fmt: skip
    ax[0].legend(fontsize=7)
    ax[1].set_ylim(bottom=0)
    ax[1].set(xlabel="M", ylabel="program MiB / (B M)", title="memory per galaxy-lane")
    for a in ax:
        a.grid(alpha=0.3, which="both")
    rows = res["vs_chunk"]
    if not rows:  # no chunk scan asked for (--chunks with no value)
        ax[2].set_visible(False)
        return
    cs = [r["chunk"] for r in rows]
    ax[2].plot(cs, [r["lockstep_efficiency"] for r in rows], "o-", label="lockstep efficiency")
    best = max(r["galaxies_per_s"] for r in rows)
    ax[2].plot(cs, [r["galaxies_per_s"] / best for r in rows], "s--", label="galaxies/s / best")
    ax[2].set(xlabel="lanes per chunk", ylim=(0, 1.05),
              title=f"vs chunk (M = {rows[0]['M']}, B = {rows[0]['B']}, {rows[0]['optimizer']})")  # fmt: skip
    ax[2].set_xscale("log", base=2)
    ax[2].legend(fontsize=7)


def main(argv: list[str] | None = None) -> dict:
    ap = h.parser(__doc__, "cost", repeats=3)
    ap.add_argument("--ms", type=int, nargs="+", default=[1, 8, 32, 128])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--chunk", type=int, default=None, help="default: MAP's cpu_chunk")
    ap.add_argument("--m-fixed", type=int, default=32, help="M of the chunk scan")
    ap.add_argument("--chunks", type=int, nargs="*", default=[1, 2, 4, 8])
    ap.add_argument("--optimizers", nargs="+", default=["newton", "gauss_newton"],
                    help="map_config.optimizer values; the last one is the chunk scan's")  # fmt: skip
    ap.add_argument("--compare-ms", type=int, nargs="*", default=[8, 32],
                    help="the M at which every optimizer runs (the others: the last only)")  # fmt: skip
    ap.add_argument("--configs", nargs="*", default=["level0", "survey_snr30"],
                    help="configs/<name>.yaml compared across the optimizers as shipped")  # fmt: skip
    args = ap.parse_args(argv)
    h.configure(True)
    from shearbatch.engine.loop import lane_chunk_for
    from shearbatch.schema import parse_config
    from shearbatch.spec import run_spec

    chunk = args.chunk or lane_chunk_for("auto", run_spec(parse_config(config(1))))
    res: dict[str, Any] = {**h.provenance("float64"), "settings": h.settings(args)}
    h.banner(res)
    cols = [("M", "5d"), ("B", "4d"), ("optimizer", "13s"), ("chunk", "6d"), ("gal/s", "9.1f"), ("MiB", "8.1f"),
            ("MiB/gal", "8.3f"), ("lockstep", "9.3f"), ("steps_max", "9d"),
            ("compile_s", "9.1f")]  # fmt: skip

    def row(t, r):
        t.row(r["M"], r["B"], r["optimizer"], r["chunk"], r["galaxies_per_s"], r["program_mib"] or 0.0,
              r["mib_per_galaxy_lane"] or 0.0, r["lockstep_efficiency"],
              max(r["newton_steps"]), r["compile_s"])  # fmt: skip

    print(f"MAP + Laplace vs M (B = {args.batch}, chunk {chunk}):")
    t = h.Table(cols)
    res["vs_m"] = []
    rows: dict[tuple[str, int], dict] = {}
    opt0 = args.optimizers[-1]
    for m in args.ms:
        for opt in args.optimizers:
            if opt != opt0 and m not in args.compare_ms:
                continue
            res["vs_m"].append(r := measure(config(m, opt), args.batch, chunk, args.repeats))
            rows[(opt, m)] = r
            row(t, r)
    print(f"MAP + Laplace vs chunk (M = {args.m_fixed}, B = {args.batch}, {opt0}):")
    t = h.Table(cols)
    res["vs_chunk"] = []
    for c in args.chunks:
        if c == chunk and (opt0, args.m_fixed) in rows:
            r = rows[(opt0, args.m_fixed)]
        else:
            r = measure(config(args.m_fixed, opt0), args.batch, c, args.repeats)
        res["vs_chunk"].append(r)
        row(t, r)
    print("optimizers on other configs (their own M and stamps):")
    t = h.Table(cols)
    res["vs_config"] = []
    for name in args.configs:
        for opt in args.optimizers:
            r = measure(config(None, opt, name), args.batch, chunk, args.repeats)
            res["vs_config"].append({"config": name, **r})
            rows[(opt, name)] = r
            row(t, r)
    if len(args.optimizers) == 2:  # the second against the first: time, steps, modes
        a, b = args.optimizers
        res["optimizer_comparison"] = []
        for key in [*(m for m in args.ms if m in args.compare_ms), *args.configs]:
            ra, rb = rows[(a, key)], rows[(b, key)]
            cmp = {"case": str(key), "speedup": rb["galaxies_per_s"] / ra["galaxies_per_s"],
                   f"steps_mean_{a}": sum(ra["newton_steps"]) / len(ra["newton_steps"]),
                   f"steps_mean_{b}": sum(rb["newton_steps"]) / len(rb["newton_steps"]),
                   "max_mode_diff_sd": mode_diff_sd(ra, rb)}  # fmt: skip
            res["optimizer_comparison"].append(cmp)
            print(f"{key}: {b} / {a} galaxies/s {cmp['speedup']:.2f}, steps "
                  f"{cmp[f'steps_mean_{a}']:.1f} -> {cmp[f'steps_mean_{b}']:.1f}, modes "
                  f"within {cmp['max_mode_diff_sd']:.2g} sd")  # fmt: skip
    for r in [*res["vs_m"], *res["vs_chunk"], *res["vs_config"]]:
        r.pop("_modes", None)
    by_m = {r["M"]: r["galaxies_per_s"] for r in res["vs_m"] if r["optimizer"] == opt0}
    if 8 in by_m:
        res["ratio_largest_m_to_m8"] = by_m[max(by_m)] / by_m[8]
        print(f"{opt0}: galaxies/s at M = {max(by_m)} / at M = 8: "
              f"{res['ratio_largest_m_to_m8']:.2f}")  # fmt: skip
    return h.write_json(res, args.out, draw)


if __name__ == "__main__":
    main()
