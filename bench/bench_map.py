"""Level 0 MAP campaign benchmark (CPU or GPU).

1. End to end, as a user runs it: ``bias-run`` on ``configs/level0.yaml``, 4 grid
   points x ``--n-realizations`` (16) = 64 realizations in one batch of
   ``--batch-size`` (64), float64, in a new process, cold (empty compilation cache)
   and warm (cache filled by the cold run); whole-process wall time, median of
   ``--repeats``.
2. The inference step alone (``shearbatch.engine.build_program``: one compiled
   batched MAP + Laplace program, simulated data ready, compile excluded):
   realizations per second at batch ``--batches`` (1 16 64 256), median of ``--repeats``.

Prints the figures and writes ``results/benchmarks/map.json``::

    .venv/bin/python bench/bench_map.py [--repeats 3] [--no-x64] [--skip-e2e]
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

import _harness as h

GRID = ("-0.05", "-0.02", "0.02", "0.05")


def level0(stamp: int) -> dict[str, Any]:
    """configs/level0.yaml, at ``stamp`` x ``stamp`` pixels."""
    raw = yaml.safe_load((h.ROOT / "configs" / "level0.yaml").read_text())
    raw["image"].update(size_x=stamp, size_y=stamp)
    return raw


def end_to_end(args) -> dict[str, Any]:
    exe = Path(sys.executable).parent / "bias-run"
    n = len(GRID) * args.n_realizations
    cold, warm = [], []
    for _ in range(args.repeats):
        tmp = Path(tempfile.mkdtemp(prefix="bench_map_"))
        (tmp / "level0.yaml").write_text(yaml.safe_dump(level0(args.stamp)))
        env = {**os.environ, "SHEARBATCH_CACHE_DIR": str(tmp / "cache")}
        for i, sink in enumerate((cold, warm)):
            out = tmp / f"out{i}"
            cmd = [str(exe), "--config", str(tmp / "level0.yaml"), "--shear-grid", *GRID,
                   "--n-realizations", str(args.n_realizations), "--batch-size",
                   str(args.batch_size), "--output-dir", str(out), "--no-progress",
                   "--x64" if args.x64 else "--no-x64"]  # fmt: skip
            t0 = time.perf_counter()
            subprocess.run(cmd, check=True, env=env, capture_output=True)
            sink.append(time.perf_counter() - t0)
            wrote = len([p for p in out.iterdir() if p.is_dir()])
            assert wrote == n, f"bias-run wrote {wrote}"
        shutil.rmtree(tmp)
    return {
        "realizations": n,
        "batch_size": args.batch_size,
        "cold_s": {"median": h.median(cold), "all": cold},
        "warm_s": {"median": h.median(warm), "all": warm},
        "targets_s": {"cold": 20.0, "warm": 8.0},
    }


def inference_only(args) -> dict[str, Any]:
    from shearbatch.campaign import plan_campaign
    from shearbatch.engine.loop import build_program
    from shearbatch.schema import parse_config
    from shearbatch.spec import run_spec

    spec = run_spec(parse_config(level0(args.stamp)))
    table = h.Table([("batch", "5d"), ("real/s", "9.1f"), ("step_ms", "9.1f"),
                     ("first_s", "8.1f")])  # fmt: skip
    out = {}
    for b in args.batches:
        plan = plan_campaign([0.02], n_realizations=b, base_seed=0)
        built = build_program(spec, plan)
        first, times, _ = h.time_calls(built.program, (built.keys, built.sim.images),
                                       args.repeats)  # fmt: skip
        med = h.median(times)
        out[str(b)] = {
            "compile_and_first_s": first,
            "median_s": med,
            "all_s": times,
            "realizations_per_s": b / med,
        }
        table.row(b, b / med, 1e3 * med, first)
    return out


def draw(fig, rec: dict) -> None:
    """Throughput vs batch size and the end-to-end times against their targets."""
    ax, bx = fig.subplots(1, 2)
    inf = rec["inference_only"]
    sizes = sorted(inf, key=int)
    ax.plot([int(b) for b in sizes], [inf[b]["realizations_per_s"] for b in sizes], "o-")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size (realizations per compiled program)")
    ax.set_ylabel("realizations / s (median, compiled)")
    ax.set_title(f"MAP inference step, stamp {rec['settings']['stamp']}, {rec['dtype']}",
                 fontsize=10)  # fmt: skip
    e2e = rec.get("end_to_end")
    if e2e:
        names = ["cold", "warm"]
        bx.bar([0, 1], [e2e[f"{n}_s"]["median"] for n in names], color=["C1", "C0"],
               label="bias-run wall (median)")  # fmt: skip
        bx.scatter([0, 1], [e2e["targets_s"][n] for n in names], color="k", marker="_", s=600,
                   zorder=3, label="target")  # fmt: skip
        bx.set_xticks([0, 1], ["cold cache", "warm cache"])
        bx.set_ylabel("seconds")
        bx.set_title(f"bias-run end to end: {e2e['realizations']} realizations, batch "
                     f"{e2e['batch_size']}", fontsize=10)  # fmt: skip
        bx.legend(fontsize=8)
    else:
        bx.set_axis_off()


def main(argv: list[str] | None = None) -> dict:
    ap = h.parser(__doc__, "map", repeats=3)
    h.add_x64(ap)
    ap.add_argument("--skip-e2e", action="store_true")
    ap.add_argument("--n-realizations", type=int, default=16, help="e2e: per grid point (x4)")
    ap.add_argument("--batch-size", type=int, default=64, help="e2e: lanes of bias-run's batch")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 16, 64, 256],
                    help="inference alone: batch sizes")  # fmt: skip
    ap.add_argument("--stamp", type=int, default=48, help="stamp size in pixels (level0: 48)")
    args = ap.parse_args(argv)
    h.configure(args.x64)
    res: dict[str, Any] = {**h.provenance("float64" if args.x64 else "float32"),
                           "settings": h.settings(args)}  # fmt: skip
    h.banner(res)
    if not args.skip_e2e:
        n = len(GRID) * args.n_realizations
        print(f"end to end (bias-run, {n} realizations, batch {args.batch_size}):", flush=True)
        res["end_to_end"] = e = end_to_end(args)
        print(f"  cold {e['cold_s']['median']:.1f} s (target 20), "
              f"warm {e['warm_s']['median']:.1f} s (target 8)")  # fmt: skip
    print("inference step alone:")
    res["inference_only"] = inference_only(args)
    return h.write_json(res, args.out, draw=draw)


if __name__ == "__main__":
    main()
