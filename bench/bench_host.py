"""Host work per realization: what ``bias-run`` spends outside the device program.

For one batch of ``--batch`` realizations of each config (Level 0 and Level 2 by default),
after the batched program has run once, this measures in this process the CPU time per
realization of each host stage of the engine, median of ``--repeats``:

- ``records``: the per-realization statistics and records (the method's diagnosis, the
  flags, the prior influence, ``truth.json``'s and ``convergence.json``'s contents): the
  engine's loop over ``shearbatch.records.records`` (with ``host_batch`` where it exists);
- ``write``: the three files of every realization of the batch, written in this thread
  (``shearbatch.io.write_record``), split into ``posterior.nc`` and the two JSON files;
- ``host``: records + write, the figure the issue's target is stated in.

Then the writers' scaling: the wall time per realization of handing the batch's records to
a ``WriterPool`` of 1, 2, ... ``--writers`` spawned processes (threads for comparison) and
waiting until every file is written, on fresh directories each time.

Run it on an older commit for the "before" figures (``PYTHONPATH=<worktree>/src``); the
record names the commit it ran on. Prints the figures, writes
``results/benchmarks/host.json`` and a PNG::

    .venv/bin/python bench/bench_host.py [--batch 256] [--configs level0 level2]
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

import _harness as h

GRID = (-0.02, 0.02)


def _records(spec, method, plan, draws, sim, dtype: str) -> list:
    import jax

    try:  # the record assembly's module (engine.py's before it moved)
        from shearbatch import records as engine
    except ImportError:
        from shearbatch import engine

    obs = np.asarray(sim.images)
    if hasattr(engine, "host_batch"):  # the engine's arrays on the host once per batch
        sim = engine.host_batch(sim, obs)
    out = []
    for b, r in enumerate(plan):
        lane = jax.tree.map(lambda a, b=b: a[b], draws)
        out.append(engine.records(spec, method, r, lane, obs[b], sim, b, dtype))
    return out


def stages(spec, batch: int, repeats: int, tmp: Path) -> tuple[dict[str, Any], list, list]:
    import jax

    from shearbatch.campaign import plan_campaign
    from shearbatch.engine import build_program
    from shearbatch.io import writer as w

    plan = plan_campaign(GRID, n_realizations=-(-batch // len(GRID)))[:batch]
    prog = build_program(spec, plan)
    draws = jax.tree.map(np.asarray, prog())
    rec_ms, nc_ms, json_ms, write_ms = [], [], [], []
    recs = None
    for i in range(repeats):
        c0 = time.process_time()
        recs = _records(spec, prog.method, plan, draws, prog.sim, "float64")
        rec_ms.append(1e3 * (time.process_time() - c0) / batch)
        nc = js = 0.0
        c0 = time.process_time()
        for r, rec in zip(plan, recs, strict=True):
            d = tmp / f"s{i}" / r.run_id
            w.write_record(d, rec)
        write_ms.append(1e3 * (time.process_time() - c0) / batch)
        for r, rec in zip(plan, recs, strict=True):  # the split, on other directories
            d = tmp / f"p{i}" / r.run_id
            d.mkdir(parents=True)
            c0 = time.process_time()
            w.write_posterior_nc(d / "posterior.nc", rec.posterior, rec.sample_stats,
                                 rec.observed, rec.attrs)  # fmt: skip
            c1 = time.process_time()
            w.write_json(d / "truth.json", rec.truth)
            conv = rec.convergence
            w.write_json(d / "convergence.json", conv.to_json() if hasattr(conv, "to_json")
                         else conv)  # fmt: skip
            nc += c1 - c0
            js += time.process_time() - c1
        nc_ms.append(1e3 * nc / batch)
        json_ms.append(1e3 * js / batch)
    size = sum(f.stat().st_size for f in (tmp / "s0").rglob("*") if f.is_file()) / batch
    res = {"batch": batch, "records_cpu_ms": h.median(rec_ms), "write_cpu_ms": h.median(write_ms),
           "posterior_nc_cpu_ms": h.median(nc_ms), "json_cpu_ms": h.median(json_ms),
           "bytes_per_realization": size}  # fmt: skip
    res["host_cpu_ms"] = res["records_cpu_ms"] + res["write_cpu_ms"]
    return res, plan, recs


def scaling(plan, recs, writers: list[int], kinds: list[str], tmp: Path) -> list[dict[str, Any]]:
    from shearbatch.io import WriterPool

    rows = []
    for kind in kinds:
        for n in writers:
            pool = WriterPool(n, 2 * len(recs), kind)
            if kind == "process":  # start the workers before the clock (a campaign does once)
                for f in [pool._ex.submit(time.sleep, 0.2) for _ in range(n)]:
                    f.result()
            out = tmp / f"{kind}{n}"
            t0 = time.perf_counter()
            c0 = time.process_time()
            for r, rec in zip(plan, recs, strict=True):
                pool.submit(out / r.run_id, rec)
            submit_cpu = time.process_time() - c0
            pool.close()
            pool.check()
            wall = time.perf_counter() - t0
            rows.append({"kind": kind, "writers": n, "wall_ms": 1e3 * wall / len(recs),
                         "submit_cpu_ms": 1e3 * submit_cpu / len(recs),
                         "realizations_per_s": len(recs) / wall})  # fmt: skip
            shutil.rmtree(out, ignore_errors=True)
    return rows


def draw(fig, res: dict[str, Any]) -> None:
    ax, bx = fig.subplots(1, 2)
    names = list(res["configs"])
    parts = ("records_cpu_ms", "posterior_nc_cpu_ms", "json_cpu_ms")
    bottom = np.zeros(len(names))
    for p in parts:
        v = np.array([res["configs"][n]["stages"][p] for n in names])
        ax.bar(names, v, bottom=bottom, label=p.replace("_cpu_ms", ""))
        bottom += v
    ax.set_ylabel("host CPU ms per realization")
    ax.set_title("host stages per realization (one thread)")
    ax.legend()
    for n in names:
        for kind in ("process", "thread"):
            rows = [r for r in res["configs"][n]["scaling"] if r["kind"] == kind]
            if rows:
                bx.plot([r["writers"] for r in rows], [r["realizations_per_s"] for r in rows],
                        "o-", label=f"{n}, {kind} writers")  # fmt: skip
    bx.set_xlabel("writers")
    bx.set_ylabel("realizations written / s")
    bx.set_title("writer pool scaling")
    bx.legend()


def main() -> None:
    ap = h.parser(__doc__, "host", repeats=3)
    ap.add_argument("--batch", type=int, default=256, help="realizations per batch")
    ap.add_argument("--configs", nargs="+", default=["level0", "level2"])
    ap.add_argument("--writers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--kinds", nargs="+", default=["process", "thread"])
    args = ap.parse_args()

    from shearbatch import runtime
    from shearbatch.schema import load_config
    from shearbatch.spec import run_spec

    tmp = Path(tempfile.mkdtemp(prefix="bench_host_"))
    runtime.configure(True, str(tmp / "cache"))
    res = h.provenance("float64")
    h.banner(res)
    res["settings"] = h.settings(args)
    res["configs"] = {}
    for name in args.configs:
        spec = run_spec(load_config(h.ROOT / "configs" / f"{name}.yaml"))
        batch = args.batch if name == "level0" else min(args.batch, 32)
        st, plan, recs = stages(spec, batch, args.repeats, tmp / name)
        print(f"{name} (batch {batch}): host {st['host_cpu_ms']:.2f} CPU ms per realization = "
              f"records {st['records_cpu_ms']:.2f} + write {st['write_cpu_ms']:.2f} (posterior.nc "
              f"{st['posterior_nc_cpu_ms']:.2f}, JSON {st['json_cpu_ms']:.2f}); "
              f"{st['bytes_per_realization'] / 1024:.0f} KiB per realization")  # fmt: skip
        rows = scaling(plan, recs, args.writers, args.kinds, tmp / name)
        for r in rows:
            print(f"  {r['writers']} {r['kind']} writer(s): {r['realizations_per_s']:.0f} "
                  f"realizations/s written, submit {r['submit_cpu_ms']:.2f} CPU ms each")  # fmt: skip
        res["configs"][name] = {"stages": st, "scaling": rows}
    shutil.rmtree(tmp, ignore_errors=True)
    h.write_json(res, args.out, draw)


if __name__ == "__main__":
    main()
