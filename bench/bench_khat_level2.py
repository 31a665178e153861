"""How many real Level 2 galaxies have importance weights that Pareto k-hat flags, against
the number of draws (issue 42 item 1's reliability flag, on real galaxies).

The inference program of ``configs/level2.yaml`` before issue 42 (1,000 Student-t draws
per galaxy; ``bench_level2_rate.config("before")``) on ``--batches`` batches of 16
realizations (consecutive seeds); each galaxy's population weights at its true shear
(``core.population_np.pareto_khat_at``, ArviZ's PSIS) from the first K / 2 antithetic
pairs of its draws, K in ``--ks``: the fraction of galaxies whose k-hat is above
``khat_threshold(K)`` (what flags ``POP_WEIGHTS_COLLAPSED``), with its 95% Clopper-Pearson
interval, and the k-hat quantiles. The toy of bench/bench_draws.py flags none from 200
draws on; this is the same question on real galaxies.

    .venv/bin/python bench/bench_khat_level2.py [--batches 64]
"""

from __future__ import annotations

from typing import Any

import numpy as np

import _harness as h


def measure(args: Any) -> dict[str, Any]:
    import jax
    from scipy import stats as st

    from bench_level2_rate import config, population
    from shearbatch.campaign import plan_campaign
    from shearbatch.core import population_np as pnp
    from shearbatch.engine.loop import batch_inputs, build_program, lane_chunk_for
    from shearbatch.schema import parse_config
    from shearbatch.spec import run_spec

    raw = config("before")
    spec = run_spec(parse_config(raw))
    plan = plan_campaign([0.02], n_realizations=16 * args.batches // 4, base_seed=0,
                         paired=True, rotations=2)  # fmt: skip
    built = build_program(spec, chunk=lane_chunk_for("auto", spec))
    batches = [plan[i : i + 16] for i in range(0, len(plan), 16)]
    sim, keys = batch_inputs(spec, batches[0])
    compiled = built.program.lower(keys, sim.images).compile()
    ell = raw["gal"]["ellipticity"]
    prior = pnp.ShapePrior(*(pnp.PriorSpec(kind="normal", args=[ell[c]["mean"], ell[c]["sigma"]])
                             for c in ("e1", "e2")))  # fmt: skip
    khat: dict[int, list[np.ndarray]] = {k: [] for k in args.ks}
    for batch in batches:
        sim, keys = batch_inputs(spec, batch)
        out = jax.block_until_ready(compiled(keys, sim.images))
        for r, real in zip(population(out, [b.seed for b in batch], [(b.g1, b.g2) for b in batch]),
                           batch, strict=True):  # fmt: skip
            half = r["eps"].shape[1] // 2
            for k in args.ks:
                idx = np.concatenate([np.arange(k // 2), half + np.arange(k // 2)])
                khat[k].append(pnp.pareto_khat_at((real.g1, real.g2), r["eps"][:, idx],
                                                  r["log_base"][:, idx], prior))  # fmt: skip
    rows = []
    for k in args.ks:
        kh = np.concatenate(khat[k])
        n, hi = len(kh), int(np.sum(kh > pnp.khat_threshold(k)))
        lo_ci = st.beta.ppf(0.025, hi, n - hi + 1) if hi else 0.0
        hi_ci = st.beta.ppf(0.975, hi + 1, n - hi) if hi < n else 1.0
        rows.append({"K": k, "threshold": float(pnp.khat_threshold(k)), "n_galaxies": n,
                     "n_high": hi, "fraction": hi / n, "ci95": [float(lo_ci), float(hi_ci)],
                     "quantiles": {q: float(np.nanquantile(kh, q)) for q in (0.5, 0.9, 0.99)},
                     "above_0.7": float(np.mean(kh > 0.7))})  # fmt: skip
    return {"rows": rows, "config": "before (1,000 draws; the first K/2 pairs used)"}


def draw(fig: Any, res: dict[str, Any]) -> None:
    rows = res["measured"]["rows"]
    ax = fig.subplots()
    k = np.array([r["K"] for r in rows], float)
    f = np.array([100 * r["fraction"] for r in rows])
    ci = np.array([[100 * r["ci95"][0], 100 * r["ci95"][1]] for r in rows])
    ax.errorbar(k, f, [f - ci[:, 0], ci[:, 1] - f], marker="o", capsize=3,
                label="k-hat above min(1 - 1/log10 K, 0.7)")  # fmt: skip
    ax.plot(k, [100 * r["above_0.7"] for r in rows], "s--", label="k-hat above 0.7")
    ax.axhline(0.5, color="k", ls=":", lw=1, label="0.5%")
    ax.set(xscale="log", xlabel="draws per galaxy K", ylabel="% of galaxies flagged",
           title=f"real Level 2 galaxies ({rows[0]['n_galaxies']}), population weights at "
                 "the true shear")  # fmt: skip
    ax.legend(fontsize=8)


def main(argv: list[str] | None = None) -> None:
    ap = h.parser(__doc__, "khat_level2", repeats=1)
    ap.add_argument("--batches", type=int, default=64)
    ap.add_argument("--ks", type=int, nargs="+", default=[50, 100, 200, 500, 1000])
    args = ap.parse_args(argv)
    h.configure(True)
    info = h.provenance("float64")
    h.banner(info)
    m = measure(args)
    t = h.Table([("K", "5d"), ("threshold", "9.3f"), ("flagged", "8d"), ("of", "7d"),
                 ("%", "6.2f"), ("median k", "8.2f"), ("p90", "6.2f"), (">0.7 %", "7.2f")])  # fmt: skip
    for r in m["rows"]:
        t.row(r["K"], r["threshold"], r["n_high"], r["n_galaxies"], 100 * r["fraction"],
              r["quantiles"][0.5], r["quantiles"][0.9], 100 * r["above_0.7"])  # fmt: skip
    h.write_json({"settings": h.settings(args), "info": info, "measured": m}, args.out, draw)


if __name__ == "__main__":
    main()
