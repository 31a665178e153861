"""Campaign throughput: realizations/s of a Level 0 MAP campaign, overlapped vs serial writes.

``shearbatch.engine.prepare`` then ``run`` as ``bias-run`` calls them (simulate -> batched MAP +
Laplace -> write three files per realization), in this process, float64:

1. The target: ``--n`` (1024) realizations at batch ``--batch-size`` (64): the path
   before issue 14 (serial writes, the whole batch in one ``vmap``: ``--no-overlap
   --lane-chunk off``), serial writes with lanes in chunks (``--no-overlap``), and
   background writers (threads, bias-run's default; spawned processes), one after the
   other in this run; throughput after the first batch (which compiles).
2. The sweep: realizations/s against batch size ``--batches`` (1 .. 1024), serial vs
   overlapped, ``max(--sweep-n, 2 x batch)`` realizations each.
3. The cost of one ``posterior.nc``: xarray ``DataTree.to_netcdf`` (the writer before)
   vs netCDF4 directly (the writer now), CPU ms per file, median of ``--files``; and
   the CPU time per realization of its inference (one batch of ``--batch-size``, after
   compilation; lanes in chunks and, for comparison, unchunked) and of writing its three files: on a machine with a free core,
   overlapping can at best hide the smaller of the two, so the speed-up over serial
   writes is bounded by ``(inference + write) / max(inference, write)``.
   ``--only-costs`` measures this part alone.

The compiled program comes from a persistent compilation cache in a temporary directory
(filled by the first mode of each batch size), so only the first batch of each run pays
the trace. Prints the figures, writes ``results/benchmarks/throughput.json`` and a PNG::

    .venv/bin/python bench/bench_throughput.py [--n 1024] [--batches 1 4 16 64 256 1024]
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

import _harness as h

GRID = (-0.05, -0.02, 0.02, 0.05)
# "unchunked": serial writes and one vmap over the whole batch (the path before issue 14);
# the others evaluate lanes in chunks (bias-run's default --lane-chunk auto)
MODES = {"unchunked": {"overlap": False, "lane_chunk": None}, "serial": {"overlap": False},
         "threads": {"overlap": True},
         "processes": {"overlap": True, "writer_kind": "process"}}  # fmt: skip


def campaign(spec, n: int, batch: int, out: Path, mode: str) -> dict[str, Any]:
    from shearbatch.campaign import plan_campaign
    from shearbatch.engine import Execution, prepare, run

    plan = plan_campaign(GRID, n_realizations=-(-n // len(GRID)))[:n]
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    rep = run(prepare(spec, plan, Execution(output_dir=out, batch_size=batch, **MODES[mode])))
    wall = time.perf_counter() - t0
    assert rep.n_ok == n, f"{mode}: {rep.n_ok} of {n} ok"
    first = rep.batch_times[0]
    rest = n - min(batch, n)
    shutil.rmtree(out)
    return {
        "n": n, "batch_size": batch, "mode": mode, "wall_s": wall, "first_batch_s": first,
        "post_compile_s": wall - first,
        "realizations_per_s": rest / (wall - first) if rest else None,
        "load_average": [load0, os.getloadavg()[0]],
    }  # fmt: skip


def write_cost(n_files: int, tmp: Path) -> dict[str, Any]:
    import xarray as xr

    from shearbatch.io.writer import write_posterior_nc

    rng = np.random.default_rng(0)
    post = {"g1": rng.normal(size=(1, 1000)), "g2": rng.normal(size=(1, 1000))}
    stats = {"laplace_log_q": rng.normal(size=(1, 1000))}
    obs = rng.normal(size=(1, 48, 48))
    attrs = {"inference_method": "map", "run_id": "r", "seed": 0, "batch_size": 64}

    def with_xarray(path):
        c = {"chain": np.arange(1), "draw": np.arange(1000)}
        tree = xr.DataTree.from_dict({
            "/": xr.Dataset(attrs=attrs),
            "posterior": xr.Dataset({k: (("chain", "draw"), v) for k, v in post.items()}, c),
            "sample_stats": xr.Dataset({k: (("chain", "draw"), v) for k, v in stats.items()}, c),
            "observed_data": xr.Dataset({"obs": (("galaxy", "y", "x"), obs)},
                                        {"galaxy": np.arange(1)}),
        })  # fmt: skip
        tree.to_netcdf(path, engine="netcdf4")

    out = {}
    for name, fn in (("xarray_datatree", with_xarray),
                     ("netcdf4_direct", lambda p: write_posterior_nc(p, post, stats, obs, attrs))):  # fmt: skip
        cpu, wall = [], []
        for i in range(n_files):
            c0, t0 = time.process_time(), time.perf_counter()
            fn(tmp / f"{name}{i}.nc")
            cpu.append(time.process_time() - c0)
            wall.append(time.perf_counter() - t0)
        out[name] = {
            "cpu_ms": 1e3 * h.median(cpu),
            "wall_ms": 1e3 * h.median(wall),
            "cpu_ms_all": [1e3 * c for c in cpu],
            "wall_ms_all": [1e3 * w for w in wall],
        }
    out["ratio_cpu"] = out["xarray_datatree"]["cpu_ms"] / out["netcdf4_direct"]["cpu_ms"]
    return out


def cpu_per_realization(spec, batch: int, tmp: Path) -> dict[str, Any]:
    import jax

    from shearbatch.campaign import plan_campaign
    from shearbatch.engine.loop import build_program, lane_chunk_for
    from shearbatch.engine.records import records
    from shearbatch.io import write_record

    plan = plan_campaign(GRID, n_realizations=-(-batch // len(GRID)))[:batch]
    base = build_program(spec, plan)  # one batch of inputs, two programs
    sim, keys = base.sim, base.keys
    cpu_of, cpu_all = {}, {}
    for name, chunk in (("unchunked", None), ("chunked", lane_chunk_for("auto", spec))):
        method, program = build_program(spec, chunk=chunk)[:2]
        _, _, draws = h.time_calls(program, (keys, sim.images), 0)  # compile (persistent cache)
        cpu = []
        for _ in range(3):
            c0 = time.process_time()
            draws = jax.tree.map(np.asarray, program(keys, sim.images))
            cpu.append((time.process_time() - c0) / batch)
        cpu_of[name] = 1e3 * h.median(cpu)
        cpu_all[name] = [1e3 * c for c in cpu]
    obs, write = np.asarray(sim.images), []
    for b, r in enumerate(plan):
        lane = jax.tree.map(lambda a, b=b: a[b], draws)
        c0 = time.process_time()
        rec = records(spec, method, r, lane, obs[b], sim, b, "float64")
        write_record(tmp / "cpu" / r.run_id, rec)
        write.append(time.process_time() - c0)
    inf_ms, write_ms = cpu_of["chunked"], 1e3 * h.median(write)
    return {"batch_size": batch, "inference_cpu_ms": inf_ms,
            "inference_unchunked_cpu_ms": cpu_of["unchunked"], "records_and_write_cpu_ms": write_ms,
            "overlap_speedup_bound": (inf_ms + write_ms) / max(inf_ms, write_ms),
            "inference_cpu_ms_all": cpu_all["chunked"],
            "inference_unchunked_cpu_ms_all": cpu_all["unchunked"],
            "records_and_write_cpu_ms_all": [1e3 * w for w in write]}  # fmt: skip


def draw(fig, res: dict[str, Any]) -> None:
    """Left: realizations/s vs batch size, serial vs overlapped; right: the 1024-realization
    campaign at batch 64 per writer mode."""
    ax, bx = fig.subplots(1, 2)
    for mode, label in (("serial", "serial writes"), ("threads", "overlapped (threads)")):
        rows = [r for r in res["sweep"] if r["mode"] == mode and r["realizations_per_s"]]
        ax.plot([r["batch_size"] for r in rows], [r["realizations_per_s"] for r in rows],
                "o-", label=label)  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size (lanes)")
    ax.set_ylabel("realizations / s after the first batch")
    ax.set_title("Level 0 MAP, float64: sweep")
    ax.legend()
    target = res["target"]
    bx.bar([r["mode"] for r in target], [r["realizations_per_s"] for r in target])
    for i, r in enumerate(target):
        bx.text(i, r["realizations_per_s"], f"{r['realizations_per_s']:.1f}", ha="center",
                va="bottom")  # fmt: skip
    bx.set_ylabel("realizations / s after the first batch")
    bx.set_title(f"{target[0]['n']} realizations, batch {target[0]['batch_size']}: writers")


def main(argv: list[str] | None = None) -> None:
    ap = h.parser(__doc__, "throughput", repeats=1)
    ap.add_argument("--n", type=int, default=1024, help="realizations of the target campaign")
    ap.add_argument("--batch-size", type=int, default=64, help="batch of the target campaign")
    ap.add_argument("--batches", type=int, nargs="*", default=[1, 4, 16, 64, 256, 1024])
    ap.add_argument("--sweep-n", type=int, default=256, help="realizations per sweep point")
    ap.add_argument("--stamp", type=int, default=48, help="stamp size in pixels")
    ap.add_argument("--files", type=int, default=50, help="files timed per writer")
    ap.add_argument("--no-processes", action="store_true", help="skip the process writers")
    ap.add_argument("--only-costs", action="store_true", help="part 3 only")
    args = ap.parse_args(argv)

    from shearbatch.engine import runtime
    from shearbatch.schema import load_config
    from shearbatch.spec import run_spec

    tmp = Path(tempfile.mkdtemp(prefix="bench_throughput_"))
    runtime.configure(True, str(tmp / "cache"))
    res = h.provenance("float64")
    h.banner(res)
    res["settings"] = h.settings(args)
    raw = yaml.safe_load((h.ROOT / "configs" / "level0.yaml").read_text())
    raw["image"].update(size_x=args.stamp, size_y=args.stamp)
    (tmp / "cfg.yaml").write_text(yaml.safe_dump(raw))
    spec = run_spec(load_config(tmp / "cfg.yaml"))

    res["write_cost"] = wc = write_cost(args.files, tmp)
    print(f"posterior.nc: xarray {wc['xarray_datatree']['cpu_ms']:.1f} ms CPU, netCDF4 "
          f"{wc['netcdf4_direct']['cpu_ms']:.1f} ms CPU per file ({wc['ratio_cpu']:.1f}x)")  # fmt: skip
    res["cpu_per_realization"] = cp = cpu_per_realization(spec, args.batch_size, tmp)
    print(f"CPU per realization at batch {cp['batch_size']}: inference "
          f"{cp['inference_cpu_ms']:.1f} ms (unchunked {cp['inference_unchunked_cpu_ms']:.1f} ms), "
          f"records + three files {cp['records_and_write_cpu_ms']:.1f}"
          f" ms: overlap can gain at most {cp['overlap_speedup_bound']:.2f}x")  # fmt: skip
    if args.only_costs:
        h.write_json(res, args.out)
        shutil.rmtree(tmp)
        return
    table = h.Table([("n", "6d"), ("batch", "6d"), ("mode", "10s"), ("wall s", "8.1f"),
                     ("1st batch s", "11.1f"), ("real/s", "8.1f"), ("load", "5.1f")])  # fmt: skip
    modes = ["unchunked", "serial", "threads"] + ([] if args.no_processes else ["processes"])
    res["target"] = []
    for mode in modes * args.repeats:
        r = campaign(spec, args.n, args.batch_size, tmp / "out", mode)
        res["target"].append(r)
        table.row(r["n"], r["batch_size"], mode, r["wall_s"], r["first_batch_s"],
                  r["realizations_per_s"], r["load_average"][1])  # fmt: skip
    by = {m: h.median([r["realizations_per_s"] for r in res["target"] if r["mode"] == m])
          for m in modes}  # fmt: skip
    res["speedup"] = {m: by[m] / by["serial"] for m in modes if m != "serial"}
    res["speedup_over_unchunked_serial"] = {m: by[m] / by["unchunked"] for m in modes
                                            if m != "unchunked"}  # fmt: skip
    print("post-compile speed-up over serial writes: "
          + ", ".join(f"{m} {v:.2f}x" for m, v in res["speedup"].items()))  # fmt: skip
    print("over the unchunked serial path (before issue 14): "
          + ", ".join(f"{m} {v:.2f}x" for m, v in res["speedup_over_unchunked_serial"].items()))  # fmt: skip
    res["sweep"] = []
    for b in args.batches:
        for mode in ("serial", "threads"):
            r = campaign(spec, max(args.sweep_n, 2 * b), b, tmp / "out", mode)
            res["sweep"].append(r)
            table.row(r["n"], b, mode, r["wall_s"], r["first_batch_s"],
                      r["realizations_per_s"], r["load_average"][1])  # fmt: skip
    h.write_json(res, args.out, draw)
    shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
