"""MAP fits whose lanes do not wait for the slowest lane (issue 42, item 3): lockstep
efficiency and time per batch, the vmapped per-realization fit against the refilled one.

Level 2 (configs/level2.yaml: 32 galaxies per realization, the interim model,
Gauss-Newton then exact Newton) with ``--batch`` realizations per batch run as one program
with the lane chunk off (the whole batch in one ``vmap``, as a GPU runs it: 32 x 32 =
1,024 galaxy lanes). For each of ``--batches`` batches (consecutive seeds, the same for
both programs) it records:

- **lockstep** (the program before issue 42: ``inference_program(..., refill=False)``):
  each phase's while loop (Gauss-Newton, then exact Newton) runs on every lane until the
  batch's slowest lane is done; executed lane-steps = B x (max Gauss-Newton steps + max
  Newton steps), from the per-lane counts (what a batched while loop executes);
- **refill** (``bias-run``'s program now: :func:`shearbatch.core.methods.map.fit_batch`):
  the optimiser on B / ``REFILL_DEPTH`` lanes refilled from the batch; executed lane-steps
  counted inside the program (lanes x loop iterations).

``--chunk N``: both programs as ``bias-run --lane-chunk N`` runs them (the lockstep in
chunks of N lanes, each chunk's loops waiting for its slowest lane; refill on N lanes fed
from the whole batch). ``--repeats``: timed calls per batch (median).

Efficiency = the Newton steps the realizations needed / the lane-steps executed (the
engine's ``batch N: lockstep efficiency``). Times: post-compile seconds per batch (one
call each; the first batch's first call compiles and is timed separately), of the whole
program (fit, Laplace factor, 1,000 importance draws per galaxy rendered and weighted) and
of the fit alone (optimiser and Laplace factor: what refill changes; the draws stage is
the same code in both, the larger part of a batch's time at Level 2). The two
programs' results are compared: equal step counts and flags, modes and draws to rounding
in posterior sd (:mod:`shearbatch.core.compare`). Prints a table and writes
``results/benchmarks/lockstep.json`` and a PNG::

    .venv/bin/python bench/bench_lockstep.py [--batch 32] [--batches 3] [--depths 4]
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

import _harness as h


def _counts(draws) -> dict[str, Any]:
    n = np.asarray(draws.info.n_steps).reshape(-1)
    gn = np.asarray(draws.info.gn_steps).reshape(-1)
    return {"n_steps": n.tolist(), "gn_steps": gn.tolist(), "needed": int(n.sum())}


def measure(a) -> Iterator[dict[str, Any]]:
    import jax

    from shearbatch.campaign import plan_campaign
    from shearbatch.core import batching
    from shearbatch.core.compare import agreement
    from shearbatch.core.methods import map as map_
    from shearbatch.core.posterior import build_posterior
    from shearbatch.engine.loop import batch_inputs, inference_program
    from shearbatch.schema import load_config
    from shearbatch.spec import run_spec

    spec = run_spec(load_config(h.ROOT / a.config))
    per_seed = 4  # paired (+-g) x 2 rotations: configs/level2.yaml's design
    seeds = a.batch // per_seed
    plan = plan_campaign([0.02], n_realizations=seeds * a.batches, base_seed=a.base_seed,
                         paired=True, rotations=2)  # fmt: skip
    plan = sorted(plan, key=lambda r: (r.seed, r.run_id))
    batches = [plan[i * a.batch : (i + 1) * a.batch] for i in range(a.batches)]
    inputs = [batch_inputs(spec, b) for b in batches]
    programs: list[tuple[str, int | None]] = [("lockstep", None)]
    programs += [("refill", d) for d in a.depths]
    post = build_posterior(spec.model)
    settings = spec.inference.settings
    target = settings.proposal_centre == "target"
    objective = post.potential_fn if target else post.mode_fn
    layout = map_.layout_of(post)
    outs, chunk = {}, a.chunk or None
    for kind, depth in programs:
        if depth is not None:
            batching.REFILL_DEPTH = depth  # read when the program is traced
        _, program = inference_program(spec, chunk=chunk, refill=kind == "refill")
        width = batching.chunk_width(a.batch, chunk) or a.batch  # the lockstep's
        if kind == "refill":  # the optimiser and the Laplace factor alone (no draws)
            lanes_ = batching.refill_lanes(a.batch, chunk)

            def fit(obs, lanes_=lanes_):
                opt, hh, _ = map_.laplace_batch(obs, post, settings, objective, lanes_)
                at = lambda o_, h_, ob: map_._laplace_at(o_, h_, ob, objective, layout)  # noqa: E731
                return jax.vmap(at)(opt, hh, obs)
        else:

            def fit(obs):
                one = jax.vmap(lambda o: map_.laplace(o, post, settings, objective))
                return (batching.in_chunks(one, chunk) if chunk else one)(obs)

        fit = jax.jit(fit)
        sim, keys = inputs[0]
        t0 = time.perf_counter()
        jax.block_until_ready(program(keys, sim.images))
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        jax.block_until_ready(fit(sim.images))
        first_fit = time.perf_counter() - t0
        for ib, (sim, keys) in enumerate(inputs):
            walls, fits = [], []
            for _ in range(a.repeats):
                t0 = time.perf_counter()
                out = jax.device_get(jax.block_until_ready(program(keys, sim.images)))
                walls.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                lap = jax.block_until_ready(fit(sim.images))
                fits.append(time.perf_counter() - t0)
            wall, wall_fit = h.median(walls), h.median(fits)
            fit_same = bool(
                np.array_equal(np.asarray(lap.opt.n_steps), np.asarray(out.info.n_steps))
            )
            n = np.asarray(out.info.n_steps).reshape(-1)
            gn = np.asarray(out.info.gn_steps).reshape(-1)
            if kind == "refill":
                executed = float(np.sum(out.info.lane_steps))
                lanes = int(np.max(out.info.refill_lanes))
            else:  # each phase's batched while loop: its chunk's slowest lane's steps
                lanes = width
                executed = float(sum(width * (gn[i : i + width].max() + (n - gn)[i : i + width].max())
                                     for i in range(0, n.size, width)))  # fmt: skip
            row = {"program": kind, "depth": depth, "lanes": lanes, "batch": ib,
                   "seeds": [batches[ib][0].seed, batches[ib][-1].seed],
                   "efficiency": float(n.sum() / executed), "executed_lane_steps": executed,
                   "needed_steps": int(n.sum()), "max_steps": int(n.max()),
                   "median_steps": float(np.median(n)),
                   # the engine's figure before issue 42: B x max steps (one loop)
                   "efficiency_one_loop": float(n.sum() / (n.size * n.max())),
                   "seconds": wall, "first_call_s": first if ib == 0 else None,
                   "fit_seconds": wall_fit, "fit_first_call_s": first_fit if ib == 0 else None,
                   "fit_same_steps": fit_same,
                   "load": os.getloadavg()[0], **_counts(out)}  # fmt: skip
            key = (ib,)
            if kind == "lockstep":
                outs[key] = out
            else:
                agree = agreement(out, outs[key])
                row["agreement"] = agree._asdict()
                row["same_steps"] = bool(np.array_equal(n, np.asarray(outs[key].info.n_steps)))
                row["within_rounding"] = bool(agree.within())
            yield row
    batching.REFILL_DEPTH = 4


def draw(fig, res: dict[str, Any]) -> None:
    """Left: efficiency per batch, lockstep vs refill; right: post-compile seconds per batch."""
    ax, bx = fig.subplots(1, 2)
    kinds = sorted({(r["program"], r["depth"] or 0) for r in res["rows"]})
    width = 0.8 / len(kinds)
    for k, (kind, depth) in enumerate(kinds):
        rows = [r for r in res["rows"] if (r["program"], r["depth"] or 0) == (kind, depth)]
        label = f"{kind}, {rows[0]['lanes']} lanes"
        xs = np.array([r["batch"] for r in rows]) + (k - (len(kinds) - 1) / 2) * width
        ax.bar(xs, [r["efficiency"] for r in rows], width, label=label)
        bars = bx.bar(xs, [r["seconds"] for r in rows], width, label=f"{label}: program")
        bx.bar(xs, [r.get("fit_seconds", 0.0) for r in rows], width * 0.5,
               color=bars.patches[0].get_facecolor(), edgecolor="k", hatch="//",
               label=f"{label}: the fit alone")  # fmt: skip
    ax.axhline(0.8, color="0.4", lw=0.8, ls="--")
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("batch")
    ax.set_ylabel("useful / executed lane-steps")
    chunk = res["settings"].get("chunk") or "off"
    ax.set_title(f"Level 2 MAP, {res['settings']['batch']} realizations per batch, chunk {chunk}")
    bx.set_xlabel("batch")
    bx.set_ylabel("seconds per batch (post-compile; load in the record)")
    for x in (ax, bx):
        x.legend(fontsize=8)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = h.parser(__doc__, "lockstep", repeats=1)
    h.add_x64(ap)
    ap.add_argument("--config", default="configs/level2.yaml")
    ap.add_argument("--batch", type=int, default=32, help="realizations per batch (x4 per seed)")
    ap.add_argument("--batches", type=int, default=3)
    ap.add_argument("--base-seed", type=int, default=0)
    ap.add_argument("--chunk", type=int, default=0,
                    help="lane chunk (0: off, the whole batch in one vmap; refill: its lanes)")  # fmt: skip
    ap.add_argument("--depths", type=int, nargs="+", default=[4],
                    help="refill: realizations queued per lane (lanes = batch / depth)")  # fmt: skip
    a = ap.parse_args(argv)
    h.configure(a.x64)
    res: dict[str, Any] = {**h.provenance("float64" if a.x64 else "float32"),
                           "settings": h.settings(a), "rows": []}  # fmt: skip
    # a config outside the repository is recorded by its name (the record holds no path)
    res["settings"]["config"] = h.rel(h.ROOT / a.config)
    h.banner(res)
    table = h.Table([("program", "9s"), ("lanes", "5d"), ("batch", "5d"), ("eff", "6.3f"),
                     ("executed", "9.0f"), ("needed", "7d"), ("max", "4d"), ("s/batch", "8.2f"), ("fit_s", "6.2f"),
                     ("first_s", "8s"), ("load", "5.2f"), ("same", "5s")])  # fmt: skip
    for r in measure(a):
        res["rows"].append(r)
        table.row(r["program"], r["lanes"], r["batch"], r["efficiency"], r["executed_lane_steps"],
                  r["needed_steps"], r["max_steps"], r["seconds"], r["fit_seconds"],
                  "-" if r["first_call_s"] is None else f"{r['first_call_s']:.1f}", r["load"],
                  "-" if "same_steps" not in r else str(r["same_steps"] and r["within_rounding"]))  # fmt: skip
    summary = {}
    for kind in sorted({(r["program"], r["lanes"]) for r in res["rows"]}):
        rows = [r for r in res["rows"] if (r["program"], r["lanes"]) == kind]
        summary[f"{kind[0]}_{kind[1]}"] = {
            "efficiency_pooled": sum(r["needed_steps"] for r in rows)
            / sum(r["executed_lane_steps"] for r in rows),
            "efficiency_per_batch": [r["efficiency"] for r in rows],
            "median_seconds_per_batch": h.median([r["seconds"] for r in rows]),
            "seconds_per_batch": [r["seconds"] for r in rows],
            "median_fit_seconds_per_batch": h.median([r["fit_seconds"] for r in rows]),
            "fit_seconds_per_batch": [r["fit_seconds"] for r in rows],
        }
    res["summary"] = summary
    for k, v in summary.items():
        print(f"{k}: efficiency {v['efficiency_pooled']:.3f} (per batch "
              f"{', '.join(f'{e:.2f}' for e in v['efficiency_per_batch'])}), "
              f"median {v['median_seconds_per_batch']:.2f} s per batch (the fit alone "
              f"{v['median_fit_seconds_per_batch']:.2f} s)")  # fmt: skip
    h.write_json(res, a.out, draw)
    return res


if __name__ == "__main__":
    main()
