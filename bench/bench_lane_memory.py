"""Device memory per lane of the batched inference program (for sizing GPU batches).

Compiles (``lower().compile()``, nothing runs) the Level 0 MAP + Laplace program of
``configs/level0.yaml`` (48x48 stamps) for each ``--batches`` lane count and
``--dtypes``, and reads XLA's own buffer assignment (``compiled.memory_analysis()``:
arguments, outputs and temporaries). The per-lane memory is the slope between the
smallest and largest lane count. These are the compiler's figures for the backend it
runs on (CPU here); a GPU's buffer assignment differs in detail, so they are an
estimate of a GPU's needs, not a measurement on one.

Prints the figures and writes ``results/benchmarks/lane_memory.json``::

    .venv/bin/python bench/bench_lane_memory.py [--batches 16 128] [--dtypes float64 float32]
"""

from __future__ import annotations

import time
from typing import Any

import yaml

import _harness as h


def program_memory(lanes: int, dtype: str, stamp: int) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp

    from shearbatch.core.batching import realization_keys
    from shearbatch.engine.loop import build_program
    from shearbatch.schema import parse_config
    from shearbatch.spec import run_spec

    jax.config.update("jax_enable_x64", dtype == "float64")
    raw = yaml.safe_load((h.ROOT / "configs" / "level0.yaml").read_text())
    raw["image"].update(size_x=stamp, size_y=stamp)
    raw["inference"]["precision"] = dtype
    spec = run_spec(parse_config(raw))
    program = build_program(spec).program  # lowered for shapes only: no simulation
    keys = realization_keys(list(range(lanes)), spec.rng_seed)
    obs = jax.ShapeDtypeStruct((lanes, 1, stamp, stamp), jnp.dtype(dtype))
    t0 = time.perf_counter()
    mem = program.lower(keys, obs).compile().memory_analysis()
    rec = {
        "compile_s": time.perf_counter() - t0,
        "argument_bytes": int(mem.argument_size_in_bytes),
        "output_bytes": int(mem.output_size_in_bytes),
        "temp_bytes": int(mem.temp_size_in_bytes),
    }
    rec["total_bytes"] = rec["argument_bytes"] + rec["output_bytes"] + rec["temp_bytes"]
    return rec


def draw(fig, rec: dict[str, Any]) -> None:
    """Compiled program memory vs lane count per dtype (the PNG beside the JSON)."""
    ax = fig.subplots()
    for dtype, r in rec["by_dtype"].items():
        lanes = sorted(r["lanes"], key=int)
        ax.plot([int(b) for b in lanes], [r["lanes"][b]["total_bytes"] / 2**20 for b in lanes],
                "o-", label=f"{dtype}: {r['bytes_per_lane'] / 2**20:.2f} MiB per lane")  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("lanes (realizations per compiled batch)")
    ax.set_ylabel("XLA buffers: arguments + outputs + temporaries (MiB)")
    ax.set_title(f"Level 0 MAP + Laplace program, {rec['settings']['stamp']}x"
                 f"{rec['settings']['stamp']} stamps (compiler's figures on this backend)",
                 fontsize=10)  # fmt: skip
    ax.legend(fontsize=8)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = h.parser(__doc__, "lane_memory", repeats=1)
    ap.add_argument("--batches", type=int, nargs="+", default=[16, 128])
    ap.add_argument("--dtypes", nargs="+", default=["float64", "float32"])
    ap.add_argument("--stamp", type=int, default=48)
    args = ap.parse_args(argv)
    info = h.provenance(None)
    h.banner(info)
    res: dict[str, Any] = {"info": info, "settings": h.settings(args), "by_dtype": {}}
    table = h.Table([("dtype", "8s"), ("lanes", "6d"), ("total MiB", "10.2f"),
                     ("temp MiB", "9.2f"), ("compile s", "9.1f")])  # fmt: skip
    for dtype in args.dtypes:
        rows = {}
        for b in args.batches:
            rows[str(b)] = r = program_memory(b, dtype, args.stamp)
            table.row(dtype, b, r["total_bytes"] / 2**20, r["temp_bytes"] / 2**20, r["compile_s"])
        lo, hi = min(args.batches), max(args.batches)
        per_lane = (rows[str(hi)]["total_bytes"] - rows[str(lo)]["total_bytes"]) / (hi - lo)
        fixed = rows[str(lo)]["total_bytes"] - per_lane * lo
        res["by_dtype"][dtype] = {"lanes": rows, "bytes_per_lane": per_lane,
                                  "fixed_bytes": fixed,
                                  "lanes_per_80GiB_at_75pct": int(0.75 * 80 * 2**30 / per_lane)}  # fmt: skip
        print(f"{dtype}: {per_lane / 2**20:.3f} MiB per lane (+ {fixed / 2**20:.2f} MiB fixed)")
    return h.write_json(res, args.out, draw=draw)


if __name__ == "__main__":
    main()
