"""Lane chunking inside the compiled program (issue 14, item 2): inference time per
realization against the chunk width, and the check that chunks change no result.

For each config in ``--configs`` and each batch size in ``--batches`` it builds the
campaign's inference program (``shearbatch.engine.build_program``, the same one
``bias-run`` runs) once per chunk width in ``--chunks`` (0 = the whole batch in one
``vmap``, the path before chunking), times ``--repeats`` calls after compilation
(median, ``block_until_ready``) and compares every output leaf with the unchunked
program's, in each quantity's units (:mod:`shearbatch.core.compare`; XLA vectorises
another width differently, so expect the last bit to differ;
a chunk of width c is bit-identical to an unchunked batch of c lanes: tests/core/test_batching.py). Prints a table and writes ``results/benchmarks/chunking.json``
and a PNG; each method's ``cpu_chunk`` (``bias-run --lane-chunk auto`` on CPU) is
chosen from these figures::

    .venv/bin/python bench/bench_chunking.py [--configs configs/level0.yaml:map:16,64]
        [--chunks 0 4 8 16 32 64] [--repeats 3]
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

import _harness as h

GRID = (-0.05, -0.02, 0.02, 0.05)


def measure(cfg: str, method: str, batch: int, chunks: list[int], repeats: int) -> list[dict]:
    import jax

    from shearbatch.campaign import plan_campaign
    from shearbatch.core.batching import chunk_width
    from shearbatch.core.compare import agreement
    from shearbatch.engine.loop import build_program
    from shearbatch.schema import load_config
    from shearbatch.spec import run_spec

    raw = load_config(h.ROOT / cfg)
    raw = raw.model_copy(update={"inference": raw.inference.model_copy(update={"method": method})})
    spec = run_spec(raw)
    plan = plan_campaign(GRID, n_realizations=-(-batch // len(GRID)))[:batch]
    base = build_program(spec, plan)  # one batch of inputs, programs of every chunk width
    sim, keys = base.sim, base.keys
    rows, ref = [], None
    for chunk in chunks:
        program = build_program(spec, chunk=chunk or None).program
        t0 = time.perf_counter()
        out = jax.block_until_ready(program(keys, sim.images))
        first = time.perf_counter() - t0
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            jax.block_until_ready(program(keys, sim.images))
            times.append(time.perf_counter() - t0)
        leaves = [np.asarray(a) for a in jax.tree.leaves(out)]
        if ref is None:
            ref, ref_out = leaves, out
        same = all(np.array_equal(a, b, equal_nan=True) for a, b in zip(leaves, ref, strict=True))
        worst = max(float(np.nanmax(np.abs(a.astype(float) - b.astype(float)), initial=0.0))
                    for a, b in zip(leaves, ref, strict=True))  # fmt: skip
        med = h.median(times)
        rows.append({"config": h.rel(h.ROOT / cfg), "method": method, "batch_size": batch, "chunk": chunk,
                     "width": chunk_width(batch, chunk or None) or batch,
                     "first_call_s": first, "median_s": med, "times_s": times,
                     "ms_per_realization": 1e3 * med / batch,
                     "bit_identical": same, "max_abs_diff": worst,
                     **agreement(out, ref_out)._asdict(),
                     # the same check against lanes rolled by one: what a batching defect
                     # that mixed lanes up would show (the check's sensitivity)
                     "lanes_mixed": agreement(jax.tree.map(lambda a: np.roll(a, 1, 0), out), ref_out)._asdict()})  # fmt: skip
    base = rows[0]["median_s"]
    for r in rows:
        r["speedup"] = base / r["median_s"]
    return rows


def draw(fig, res: dict[str, Any]) -> None:
    """Left: speed-up over one vmap against the chunk width, one line per (config,
    method, batch); right: MAP ms per realization against the batch size, unchunked vs
    the best chunk."""
    ax, bx = fig.subplots(1, 2)
    keys = sorted({(r["config"], r["method"], r["batch_size"]) for r in res["rows"]})
    for cfg, method, batch in keys:
        rows = [r for r in res["rows"] if (r["config"], r["method"], r["batch_size"]) == (cfg, method, batch)]  # fmt: skip
        rows = sorted(rows, key=lambda r: r["width"])
        ax.plot([r["width"] for r in rows], [r["speedup"] for r in rows], "o-",
                label=f"{cfg.split('/')[-1]} {method} B={batch}")  # fmt: skip
    ax.axhline(1.0, color="0.5", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("lanes per chunk (the rightmost point of a line: the whole batch)")
    ax.set_ylabel("speed-up over one vmap of the whole batch")
    ax.set_title("Lane chunking inside the compiled program, CPU")
    ax.legend(fontsize=7)
    for cfg in sorted({r["config"] for r in res["rows"] if r["method"] == "map"}):
        rows = [r for r in res["rows"] if r["config"] == cfg and r["method"] == "map"]
        bs = sorted({r["batch_size"] for r in rows})
        whole = [min(r["ms_per_realization"] for r in rows if r["batch_size"] == b and r["chunk"] == 0) for b in bs]  # fmt: skip
        best = [min(r["ms_per_realization"] for r in rows if r["batch_size"] == b) for b in bs]
        (line,) = bx.plot(bs, whole, "o--", label=f"{cfg.split('/')[-1]} one vmap")
        bx.plot(bs, best, "o-", color=line.get_color(), label=f"{cfg.split('/')[-1]} best chunk")
    bx.set_xscale("log", base=2)
    bx.set_xlabel("batch size (lanes)")
    bx.set_ylabel("MAP inference ms per realization (median)")
    bx.set_ylim(bottom=0)
    bx.legend(fontsize=7)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = h.parser(__doc__, "chunking", repeats=3)
    h.add_x64(ap)
    ap.add_argument("--configs", nargs="+", default=[
        "configs/level0.yaml:map:16,64,256", "configs/survey_snr30.yaml:map:64,256",
        "configs/survey_snr30.yaml:vi:32:1", "configs/survey_snr30.yaml:nuts:8:1"],
        help="CONFIG:METHOD[:B,B,...[:REPEATS]] (batches and repeats other than --batches "
        "and --repeats)")  # fmt: skip
    ap.add_argument("--batches", type=int, nargs="+", default=[16, 64, 256])
    ap.add_argument("--chunks", type=int, nargs="+", default=[0, 4, 8, 16, 32, 64])
    a = ap.parse_args(argv)
    h.configure(a.x64)
    res: dict[str, Any] = {**h.provenance("float64" if a.x64 else "float32"),
                           "settings": h.settings(a), "rows": []}  # fmt: skip
    res["settings"]["configs"] = [":".join([h.rel(h.ROOT / c.split(":")[0]), *c.split(":")[1:]])
                                  for c in a.configs]  # fmt: skip
    h.banner(res)
    table = h.Table([("config", "18s"), ("B", "5d"), ("chunk", "6d"), ("ms/real", "8.2f"),
                     ("speed-up", "9s"), ("first_s", "8.1f"), ("identical", "10s")])  # fmt: skip
    for item in a.configs:
        cfg, method, *rest = [*item.split(":"), "map"][:2] + item.split(":")[2:]
        batches = [int(b) for b in rest[0].split(",")] if rest and rest[0] else a.batches
        repeats = int(rest[1]) if len(rest) > 1 else a.repeats
        for batch in batches:
            chunks = [0] + [c for c in a.chunks if 0 < c < batch]
            for r in measure(cfg, method, batch, chunks, repeats):
                res["rows"].append(r)
                table.row(cfg.split("/")[-1], batch, r["width"], r["ms_per_realization"],
                          f"{r['speedup']:.2f}x", r["first_call_s"],
                          "yes" if r["bit_identical"] else f"no {r['max_abs_diff']:.0e}")  # fmt: skip
            res.pop("total_runtime_s", None)
            h.write_json(res, a.out, draw)  # after each batch size: a long run keeps its rows
    return res


if __name__ == "__main__":
    main()
