"""Host work per realization: what ``bias-run`` spends outside the device program.

For one batch of ``--batch`` realizations of each config (Level 0 and Level 2 by default),
after the batched program has run once, this measures in this process the CPU time per
realization of each host stage of the engine, median of ``--repeats``:

- ``records``: the per-realization statistics and records (the method's diagnosis, the
  flags, the prior influence, ``truth.json``'s and ``convergence.json``'s contents): the
  engine's loop over ``shearbatch.engine.records.records`` (with ``host_batch`` where it exists);
- ``write``: the three files of every realization of the batch, written in this thread
  (``shearbatch.io.write_record``), split into ``posterior.nc`` and the two JSON files;
- ``host``: records + write, the figure the issue's target is stated in.

The engine's critical path (``critical``): for one Level 0 batch of ``--critical-batch``
realizations (1,024 by default), the CPU time per realization of the engine's main process
for a landed batch, everything but waiting on the device: the batch report, the records
and their statistics, and handing them to a ``WriterPool`` of spawned writer processes (a
GPU node's kind), the pool's pickling and result callbacks included (the process's CPU
time until the writers are done; the writers' own CPU is theirs). ``loop_cpu_ms`` is the
submitting loop alone, ``records_only_cpu_ms`` the records without a sink. It replays
``engine.run``'s ``finish`` step with the same calls.

Then the writers' scaling: the wall time per realization of handing the batch's records to
a ``WriterPool`` of 1, 2, ... ``--writers`` spawned processes (threads for comparison) and
waiting until every file is written, on fresh directories each time.

Run it on an older commit for the "before" figures (``PYTHONPATH=<worktree>/src``); the
record names the commit it ran on. Prints the figures, writes
``results/benchmarks/host.json`` and a PNG::

    .venv/bin/python bench/bench_host.py [--batch 256] [--configs level0 level2]
"""

from __future__ import annotations

import os
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
        from shearbatch.engine import records as engine
    except ImportError:
        from shearbatch.engine import loop as engine

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
    from shearbatch.engine.loop import build_program
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
           "bytes_per_realization": size,
           "runs": {"records_cpu_ms": rec_ms, "write_cpu_ms": write_ms,
                    "posterior_nc_cpu_ms": nc_ms, "json_cpu_ms": json_ms}}  # fmt: skip
    res["host_cpu_ms"] = res["records_cpu_ms"] + res["write_cpu_ms"]
    return res, plan, recs


def _provenance(cfg) -> dict[str, Any]:
    """What ``bias-run`` records in every convergence.json (its config, plan, environment)."""
    from shearbatch.io import manifest as mf

    plan = {"n_realizations": 512, "shear_grid": list(GRID), "base_seed": 0}
    return mf.realization_provenance(config=cfg.model_dump(mode="json"), campaign=plan,
                                     env=mf.environment())  # fmt: skip


def critical(cfg, spec, batch: int, repeats: int, writers: int, tmp: Path) -> dict[str, Any]:
    """The engine's main-process CPU per realization for one landed batch (module doc)."""
    import jax

    from shearbatch.campaign import plan_campaign
    from shearbatch.core.checks import chi2_program
    from shearbatch.engine.loop import build_program
    from shearbatch.io import WriterPool

    try:
        from shearbatch.engine import records as rm
    except ImportError:  # pragma: no cover - older layouts
        from shearbatch import engine as rm

    plan = plan_campaign(GRID, n_realizations=-(-batch // len(GRID)))[:batch]
    prog = build_program(spec, plan)
    draws = jax.tree.map(np.asarray, prog())
    chi2 = np.asarray(chi2_program(spec.model)(draws.samples, prog.sim.images))
    method, provenance, dtype = prog.method, _provenance(cfg), "float64"
    raw = getattr(__import__("shearbatch.io.writer", fromlist=["raw_json"]), "raw_json", None)

    class Null:
        def submit(self, directory, record) -> None:
            pass

        def flush(self) -> None:
            pass

    def finish(sink, out: Path) -> None:  # engine.run's finish, step for step
        obs = np.asarray(prog.sim.images)
        report = {"index": 0, "size": batch, "n_real": batch}
        report.update(method.batch_report(draws, lockstep=4))
        hsim = rm.host_batch(prog.sim, obs)
        status, pulls = {}, {}
        if hasattr(rm, "batch_records"):  # this commit's engine
            prov = {k: raw(v) for k, v in provenance.items()}
            root, runtime_s = str(out), 0.01

            def extra(b: int) -> dict[str, Any]:
                return {"batch": {**report, "lane": b}, "runtime_s": runtime_s, "provenance": prov}

            for r, rec in rm.batch_records(spec, method, plan, draws, obs, hsim, dtype, chi2,
                                           extra):  # fmt: skip
                conv, d = rec.convergence, os.path.join(root, r.run_id)
                sink.submit(d, rec)
                for site, v in conv.prior.items():
                    pulls.setdefault(site, []).append(v["shrinkage"])
                status[d] = conv.status
        else:  # the engine before it (per-realization statistics and copies)
            for (b, lane), r in zip(rm.split_batch(draws, batch), plan, strict=True):
                rec = rm.records(spec, method, r, lane, obs[b], hsim, b, dtype, float(chi2[b]))
                conv = rec.convergence.replace(batch={**report, "lane": b}, runtime_s=0.01,
                                               provenance=dict(provenance))  # fmt: skip
                sink.submit(out / r.run_id, rec._replace(convergence=conv))
                for site, v in conv.prior.items():
                    pulls.setdefault(site, []).append(v["shrinkage"])
                status[str(out / r.run_id)] = conv.status
        sink.flush()

    only, loop, total, walls = [], [], [], []
    for i in range(repeats):
        c0 = time.process_time()
        finish(Null(), tmp / "null")
        only.append(1e3 * (time.process_time() - c0) / batch)
        pool = WriterPool(writers, 2 * batch, "process", start=True)
        pool.bound(2 * batch, group=max(1, min(16, batch // (4 * writers))))  # as the engine
        for f in [pool._ex.submit(time.sleep, 0.2) for _ in range(writers)]:
            f.result()
        out = tmp / f"crit{i}"
        t0, c0 = time.perf_counter(), time.process_time()
        finish(pool, out)
        c1 = time.process_time()
        pool.close()
        pool.check()
        c2, t2 = time.process_time(), time.perf_counter()
        loop.append(1e3 * (c1 - c0) / batch)
        total.append(1e3 * (c2 - c0) / batch)
        walls.append(1e3 * (t2 - t0) / batch)
        assert len(pool.written) == batch
        shutil.rmtree(out, ignore_errors=True)
    return {"batch": batch, "writers": writers, "kind": "process",
            "critical_cpu_ms": h.median(total), "loop_cpu_ms": h.median(loop),
            "records_only_cpu_ms": h.median(only), "write_wall_ms": h.median(walls),
            "runs_cpu_ms": total}  # fmt: skip


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
    if (cr := res.get("critical")) is not None:
        ax.set_title(f"host stages per realization (one thread)\nengine main process, Level 0 "
                     f"batch {cr['batch']}: {cr['critical_cpu_ms']:.3f} CPU ms per realization",
                     fontsize=9)  # fmt: skip
    bx.set_xlabel("writers")
    bx.set_ylabel("realizations written / s")
    bx.set_title("writer pool scaling")
    bx.legend()


def main(argv: list[str] | None = None) -> None:
    ap = h.parser(__doc__, "host", repeats=3)
    ap.add_argument("--batch", type=int, default=256, help="realizations per batch")
    ap.add_argument("--configs", nargs="*", default=["level0", "level2"])
    ap.add_argument("--writers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--kinds", nargs="+", default=["process", "thread"])
    ap.add_argument(
        "--critical-batch",
        type=int,
        default=1024,
        help="Level 0 batch of the engine's critical path (0: skip)",
    )
    ap.add_argument(
        "--critical-writers",
        type=int,
        default=1,
        help="writer processes while the critical path is measured",
    )
    args = ap.parse_args(argv)

    from shearbatch.engine import runtime
    from shearbatch.schema import load_config
    from shearbatch.spec import run_spec

    tmp = Path(tempfile.mkdtemp(prefix="bench_host_"))
    runtime.configure(True, str(tmp / "cache"))
    res = h.provenance("float64")
    h.banner(res)
    res["settings"] = h.settings(args)
    res["configs"] = {}
    if args.critical_batch:
        cfg = load_config(h.ROOT / "configs" / "level0.yaml")
        cr = critical(cfg, run_spec(cfg), args.critical_batch, args.repeats,
                      args.critical_writers, tmp / "critical")  # fmt: skip
        print(f"engine critical path, Level 0 batch {cr['batch']}: {cr['critical_cpu_ms']:.3f} "
              f"CPU ms per realization in the main process ({cr['loop_cpu_ms']:.3f} submitting, "
              f"{cr['records_only_cpu_ms']:.3f} records alone), {cr['writers']} writer "
              f"process(es)")  # fmt: skip
        res["critical"] = cr
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
