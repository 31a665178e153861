"""How MAP (and NUTS, small) scale with the galaxies per realization M and the batch B.

The inference step alone (``shearbatch.engine.build_program``: one compiled
batched program, simulated data ready), on 16x16 stamps of ``configs/level2.yaml``'s
population (flux, size, shape and offset free per galaxy; 2 + 6 M latents):

1. MAP + Laplace, wall time vs M (``--ms``, default 1 8 32 128) at fixed B
   (``--batch``, 4), and vs B (``--batches``, 1 4 16) at fixed M (``--m-fixed``, 32);
   for M <= ``--dense-upto`` (32) also with ``jax.hessian``'s dense Hessian, to show
   what the block-arrow Hessian (2 + 6 Hessian-vector products per Newton step,
   whatever M) saves;
2. NUTS (``--nuts-ms``, 1 8; short chains) vs M at B = ``--nuts-batch`` (2).

Memory: the compiled program's own estimate (XLA ``memory_analysis``: arguments,
outputs and temporaries, in MiB), which does not depend on the machine's load; the
process's peak RSS is recorded too. Times are medians of ``--repeats`` calls on a
shared, loaded machine (its load average is in the JSON). Prints the figures and
writes ``results/benchmarks/scaling.json`` and ``scaling.png``::

    .venv/bin/python bench/bench_scaling.py [--ms 1 8 32 128] [--repeats 3]
"""

from __future__ import annotations

import resource
from typing import Any

import yaml

import _harness as h


def config(m: int, method: str, nuts: dict | None = None) -> dict[str, Any]:
    raw = yaml.safe_load((h.ROOT / "configs" / "level2.yaml").read_text())
    raw["image"]["n_objects"] = m
    raw["inference"]["method"] = method
    raw["inference"]["shear_model"] = "joint"  # M galaxies sharing one shear
    if nuts:
        raw["inference"]["nuts_config"].update(nuts)
    return raw


def memory_mib(compiled) -> float | None:
    try:
        st = compiled.memory_analysis()
        total = st.argument_size_in_bytes + st.output_size_in_bytes + st.temp_size_in_bytes
        return total / 2**20
    except Exception:  # not every backend reports it
        return None


def measure(raw: dict, b: int, repeats: int, dense: bool = False) -> dict[str, Any]:
    import jax

    from shearbatch.campaign import plan_campaign
    from shearbatch.core.posterior import build_posterior
    from shearbatch.engine.loop import build_program
    from shearbatch.schema import parse_config
    from shearbatch.spec import run_spec

    spec = run_spec(parse_config(raw))
    plan = plan_campaign([0.02], n_realizations=b, base_seed=0)
    if dense:  # the same method with jax.hessian's dense Hessian and dense linear algebra
        import shearbatch.engine.loop as engine

        real = engine.build_posterior
        engine.build_posterior = lambda p: build_posterior(p)._replace(
            hessian=jax.hessian, layout=None
        )
        try:
            built = build_program(spec, plan)
        finally:
            engine.build_posterior = real
    else:
        built = build_program(spec, plan)
    prog, keys, sim = built.program, built.keys, built.sim
    compiled, compile_s = h.compile_aot(prog, keys, sim.images)
    first, times, _ = h.time_calls(compiled, (keys, sim.images), repeats)
    med = h.median(times)
    m = raw["image"]["n_objects"]
    return {"M": m, "B": b, "latents": 2 + 6 * m, "compile_s": compile_s, "first_s": first,
            "median_s": med, "all_s": times, "realizations_per_s": b / med,
            "galaxies_per_s": b * m / med, "program_mib": memory_mib(compiled),
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "hessian": "dense" if dense else "arrow"}  # fmt: skip


def figure(res: dict, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 3, figsize=(13, 3.8))
    for key, label, style in (("map_vs_m", "MAP, arrow Hessian", "o-"),
                              ("map_vs_m_dense", "MAP, dense jax.hessian", "s--"),
                              ("nuts_vs_m", "NUTS (short chains)", "^-")):  # fmt: skip
        rows = res.get(key) or []
        if rows:
            ms = [r["M"] for r in rows]
            ax[0].loglog(ms, [r["median_s"] / r["B"] for r in rows], style, label=label)
            if rows[0].get("program_mib") is not None:
                ax[1].loglog(ms, [r["program_mib"] for r in rows], style, label=label)
    ax[0].set(xlabel="galaxies per realization M", ylabel="wall s per realization",
              title=f"vs M (B = {res['settings']['batch']})")  # fmt: skip
    ax[1].set(xlabel="M", ylabel="compiled program MiB", title="memory vs M")
    rows = res.get("map_vs_b") or []
    if rows:
        bs = [r["B"] for r in rows]
        ax[2].loglog(bs, [r["median_s"] for r in rows], "o-", label="wall s per batch")
        if rows[0].get("program_mib") is not None:
            ax[2].loglog(bs, [r["program_mib"] for r in rows], "s--", label="program MiB")
        ax[2].set(xlabel="batch B", title=f"MAP vs B (M = {rows[0]['M']})")
    for a in ax:
        a.legend(fontsize=7)
        a.grid(alpha=0.3, which="both")
    fig.suptitle("shearbatch scaling (one call per point; machine and load average in scaling.json)",
                 fontsize=9)  # fmt: skip
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> dict:
    ap = h.parser(__doc__, "scaling", repeats=3)
    ap.add_argument("--ms", type=int, nargs="+", default=[1, 8, 32, 128])
    ap.add_argument("--batch", type=int, default=4, help="B for the M scan")
    ap.add_argument("--m-fixed", type=int, default=32, help="M for the B scan")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--dense-upto", type=int, default=32, help="dense Hessian up to this M")
    ap.add_argument("--nuts-ms", type=int, nargs="*", default=[1, 8])
    ap.add_argument("--nuts-batch", type=int, default=2)
    ap.add_argument("--nuts-draws", type=int, default=100, help="warmup = samples, 2 chains")
    args = ap.parse_args(argv)
    h.configure(True)
    res: dict[str, Any] = {**h.provenance("float64"), "settings": h.settings(args)}
    h.banner(res)
    cols = [("M", "5d"), ("B", "4d"), ("hessian", "8s"), ("s/real", "9.3f"),
            ("gal/s", "9.1f"), ("MiB", "8.1f"), ("compile_s", "9.1f")]  # fmt: skip

    def row(t, r):
        t.row(r["M"], r["B"], r["hessian"], r["median_s"] / r["B"], r["galaxies_per_s"],
              r["program_mib"], r["compile_s"])  # fmt: skip

    print("MAP + Laplace vs M:")
    t = h.Table(cols)
    res["map_vs_m"], res["map_vs_m_dense"] = [], []
    for m in args.ms:
        res["map_vs_m"].append(r := measure(config(m, "map"), args.batch, args.repeats))
        row(t, r)
        if m <= args.dense_upto and m > 1:
            res["map_vs_m_dense"].append(
                r := measure(config(m, "map"), args.batch, args.repeats, dense=True)
            )
            row(t, r)
    print(f"MAP + Laplace vs B (M = {args.m_fixed}):")
    t = h.Table(cols)
    res["map_vs_b"] = []
    for b in args.batches:
        res["map_vs_b"].append(r := measure(config(args.m_fixed, "map"), b, args.repeats))
        row(t, r)
    print("NUTS vs M:")
    t = h.Table(cols)
    res["nuts_vs_m"] = []
    nuts = {"warmup": args.nuts_draws, "samples": args.nuts_draws, "chains": 2}
    for m in args.nuts_ms:
        res["nuts_vs_m"].append(r := measure(config(m, "nuts", nuts), args.nuts_batch, 1))
        row(t, r)
    figure(res, args.out.with_suffix(".png"))
    return h.write_json(res, args.out)


if __name__ == "__main__":
    main()
