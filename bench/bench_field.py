"""A field-precision Level 2 campaign on one GPU, run as a user runs it, in one command.

Issue 34 asks for Level 2 on a 2-D grid at sigma_m <= 3e-4 (about a million galaxies);
issue 33 for the GPU path's figures (host fraction of a warm Level 2 batch, Level 0
realizations/s end to end). Both come from the same three CLI stages, timed here:

1. ``level0``: ``python -m shearbatch run`` of configs/level0.yaml, ``--batch-size auto``:
   its realizations/s end to end and after the first batch (the compile), host fraction;
2. ``level2``: configs/level2.yaml on the 2-D grid +-(0.02, +-0.02) (paired, ring: 8
   images of 32 galaxies per seed), ``campaign.draws: estimator`` (posterior.nc keeps the
   draws the pooled fit reads, float32), ``--batch-size auto`` (or ``--l2-batch N``),
   ``--time-limit``: the cold start (process start to the end of batch 1, compile
   included), the warm batches (after the first) counted, their galaxies/s, host fraction
   and lockstep efficiency, bytes per realization;
3. ``extract`` (``python -m shearbatch extract``) and ``stats`` (``python -m shearbatch
   stats --requirement lsst-project``): their wall, m1, m2, c1, c2 with errors, the
   verdict, the pooled fits' status, and the importance weights' ESS per galaxy (from a
   sample of the realizations' convergence.json).

Writes into ``--out`` (the device tool's $OUT: at most 8 files come back): field.json (the
record) and field.png (each campaign's batches: wall, device and host time), field.log
(every stage's output), bias_results.json, summary_compact.csv.gz (one row per
realization: truth, estimate, flags), and the stats' residuals and coverage plots. Figures are
printed as they come; the record's ``headline`` gathers the ones a GPU session reports
(Level 2 galaxies/s warm, lockstep efficiency, host fraction, cold start, m and c, ESS).
``--cpu-smoke``: tiny sizes on the CPU, to try the script. ci/gpu_session.sh runs it after
the gpu test tier (``--skip-l0 --l2-seeds 256 --l2-batch 512 --l2-time-limit none``: 4
batches of 512).

    python bench/bench_field.py --out $OUT --l2-seeds 5000 --l2-time-limit 240
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _harness as h
import bench_gpu as bg

GRID2 = ["--shear-grid-g2", "-0.02,0.02"]
SMOKE_L2 = ["--set", "image.n_objects=4", "--set", "inference.map_config.num_samples=200"]
PLOTS = ("residuals.png", "coverage.png")  # of the stats' plots/
RESULT_KEYS = ("m1", "m1_err", "m2", "m2_err", "c1", "c1_err", "c2", "c2_err", "verdict")


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="where the record goes")
    ap.add_argument("--l0-realizations", type=int, default=16384)
    ap.add_argument("--l2-seeds", type=int, default=5000, help="seeds (8 images each)")
    ap.add_argument(
        "--l2-time-limit",
        default="240",
        help="bias-run --time-limit of level2; 'none': none (bias-run then starts batch 2 only "
        "if 1.5x batch 1, compile included, fits before the limit)",
    )
    ap.add_argument(
        "--stats-reserve-s",
        type=float,
        default=120.0,
        help="budget kept for extract and stats: level2 is stopped this long before its end",
    )
    ap.add_argument("--l2-batch", default="auto")
    ap.add_argument(
        "--l2-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a --set of the level2 campaign (repeatable)",
    )
    ap.add_argument("--budget-s", type=float, default=560.0, help="all steps together")
    ap.add_argument("--root", type=Path, default=None, help="campaign roots (default: tmp)")
    ap.add_argument(
        "--sample-every",
        type=int,
        default=10,
        help="read every Nth realization's convergence.json for the ESS figures",
    )
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny sizes on the CPU")
    ap.add_argument("--skip-l0", action="store_true")
    ap.add_argument("--skip-stats", action="store_true", help="no extract, stats or ESS")
    ap.add_argument("--l2-name", default="level2", help="the record's key for this campaign")
    return ap.parse_args(argv)


def _shearbatch(stage: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "shearbatch", stage, *args]


def ess_figures(root: Path, every: int) -> dict[str, Any]:
    """Per-galaxy importance ESS fractions of every ``every``-th realization (sorted by
    name): the share below 10% of the draws (POP_WEIGHTS_COLLAPSED's threshold), by S/N."""
    dirs = sorted(p for p in root.iterdir() if (p / "convergence.json").is_file())[::every]
    frac, snr = [], []
    for d in dirs:
        c = json.loads((d / "convergence.json").read_text())
        f = (c.get("importance") or {}).get("ess_fraction")
        if f:
            frac += [float(x) if x is not None else 0.0 for x in f]
            snr += list(c.get("snr") or [float("nan")] * len(f))
    if not frac:
        return {"realizations_read": len(dirs), "galaxies": 0}
    import numpy as np

    fr, sn = np.asarray(frac), np.asarray(snr, float)
    low = fr < 0.1
    bands = [(0, 20), (20, 30), (30, 50), (50, 1e9)]
    by = {f"snr_{a:g}_{b:g}": {"galaxies": int(((sn >= a) & (sn < b)).sum()),
                               "below_10pct": int((low & (sn >= a) & (sn < b)).sum())}
          for a, b in bands}  # fmt: skip
    n, k = fr.size, int(low.sum())
    return {"realizations_read": len(dirs), "galaxies": n, "below_10pct": k,
            "below_10pct_fraction": k / n,
            "binomial_95_upper": bg_upper(k, n),
            "ess_fraction_min": float(fr.min()), "ess_fraction_median": float(np.median(fr)),
            "by_snr": by}  # fmt: skip


def bg_upper(k: int, n: int) -> float:
    """The one-sided 95% upper bound of a binomial fraction k/n (Wilson score)."""
    z = 1.645
    p = k / n
    den = 1 + z * z / n
    return (p + z * z / (2 * n) + z * ((p * (1 - p) + z * z / (4 * n)) / n) ** 0.5) / den


def warm_figures(log: dict[str, Any], fig: dict[str, Any], started: float) -> dict[str, Any]:
    """The figures of a campaign that :func:`bench_gpu.campaign_figures` leaves out: the
    cold start (from the process's start to the end of batch 1, compile included; batch 1's
    writes may still be queued), the warm batches (after the first) counted, their
    galaxies/s end to end (realizations/s after batch 1 x galaxies per realization) and
    the lockstep efficiency of each batch as numbers (the Newton steps its lanes needed /
    the lane-steps its loops ran: 1 when every lane stops together)."""
    batches = log.get("batches") or []
    t1 = batches[0].get("t") if batches else None
    per_s = fig.get("realizations_per_s_after_batch_1")
    eff = {}
    for k, v in (log.get("lockstep_efficiency") or {}).items():
        try:
            eff[int(k)] = float(str(v).split()[0])
        except (ValueError, IndexError):
            continue
    warm_eff = [v for k, v in eff.items() if k > 1]
    return {
        "cold_start_to_batch_1_s": t1 - started if t1 else None,
        "batch_1_wall_s": batches[0]["wall_s"] if batches else None,
        "warm_batch_count": max(0, len(batches) - 1),
        "galaxies_per_s_after_batch_1": (
            per_s * fig["galaxies_per_realization"] if per_s else None
        ),
        "lockstep_efficiency_batch_1": eff.get(1),
        "lockstep_efficiency_warm_median": h.median(warm_eff) if warm_eff else None,
        "lockstep_efficiency_warm_min": min(warm_eff) if warm_eff else None,
    }


def headline(res: dict[str, Any], name: str) -> dict[str, Any]:
    """The figures a GPU session reports (ci/gpu_session.sh), from the record: Level 2's
    galaxies/s warm (after batch 1, over ``warm_batches`` batches), lockstep efficiency,
    host fraction, the cold start, m and c with errors, and the importance weights' ESS."""
    c = res.get(name) or {}
    r = res.get("result") or {}
    e = res.get("ess") or {}
    return {
        "device": (c.get("device") or {}).get("kind"),
        "batch_lanes": c.get("batch_lanes"),
        "realizations": c.get("realizations"),
        "warm_batches": c.get("warm_batch_count"),
        "galaxies_per_s_warm": c.get("galaxies_per_s_after_batch_1"),
        "galaxies_per_s_device_program": c.get("galaxies_per_s_device_program"),
        "lockstep_efficiency_warm_median": c.get("lockstep_efficiency_warm_median"),
        "host_fraction_warm_median": c.get("host_fraction_warm_median"),
        "cold_start_to_batch_1_s": c.get("cold_start_to_batch_1_s"),
        **{k: r.get(k) for k in RESULT_KEYS},
        "ess_fraction_median": e.get("ess_fraction_median"),
        "ess_below_10pct_fraction": e.get("below_10pct_fraction"),
    }


def bytes_per_realization(root: Path, n: int = 50) -> dict[str, float]:
    dirs = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))[:n]
    per = {}
    for name in ("posterior.nc", "convergence.json", "truth.json"):
        sizes = [(d / name).stat().st_size for d in dirs if (d / name).is_file()]
        per[name] = sum(sizes) / len(sizes) if sizes else None
    return per


def compact_summary(src: Path, dst: Path) -> int:
    cols = ("run_id", "seed", "g1_true", "g2_true", "g1_mean", "g2_mean", "g1_std", "g2_std",
            "status", "flags", "pair_id", "pair_sign")  # fmt: skip
    n = 0
    with open(src, newline="") as f, gzip.open(dst, "wt", newline="") as g:
        rd = csv.DictReader(f)
        keep = [c for c in cols if c in (rd.fieldnames or [])]
        wr = csv.DictWriter(g, keep, extrasaction="ignore")
        wr.writeheader()
        for row in rd:
            wr.writerow(row)
            n += 1
    return n


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    tmp = Path(args.root or tempfile.mkdtemp(prefix="bench_field_"))
    ns = argparse.Namespace(budget_s=args.budget_s, cpu_smoke=args.cpu_smoke, cache_dir=None)
    run = bg.Runner(ns, tmp)
    res: dict[str, Any] = {**h.provenance("float64"), "settings": {
        k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}}  # fmt: skip
    if sha := os.environ.get("SHEARBATCH_GIT_COMMIT"):
        res["git"] = {"commit": sha, "modified": None, "source": "$SHEARBATCH_GIT_COMMIT"}
    smoke = args.cpu_smoke

    def save(final: bool = False) -> None:
        (args.out / "field.json").write_text(json.dumps(res, indent=1, default=str))
        (args.out / "field.log").write_text("".join(run.logs))
        if final:  # the figure (bench/_harness.py replot redraws it from the JSON)
            h.write_png(json.loads((args.out / "field.json").read_text()),
                        args.out / "field.json", draw)  # fmt: skip

    def campaign(name: str, config: str, root: Path, extra: list[str], timeout: float):
        cmd = _shearbatch("run", "--config", str(h.ROOT / "configs" / config), *extra,
                          "--no-progress", "--output-dir", str(root))  # fmt: skip
        started = time.time()  # the log's stamps are wall-clock times
        r = run.run(name, cmd, timeout)
        log = bg.parse_log(r["text"])
        fig = bg.campaign_figures(log, 4 if smoke and "level2" in config else
                                  (32 if "level2" in config else 1), r["wall_s"])  # fmt: skip
        fig.update(warm_figures(log, fig, started))
        fig.update(exit=r["status"], device=log.get("jax"), errors=log["errors"][:5],
                   args=" ".join(extra), command=" ".join(cmd[1:]))  # fmt: skip
        fig.pop("batches", None) if len(fig.get("batches") or []) > 200 else None
        return fig

    # 1. Level 0 throughput
    if not args.skip_l0:
        n0 = 64 if smoke else args.l0_realizations
        seeds = max(1, n0 // 16)  # level0's grid: 8 g1 x 2 g2 points
        l0 = campaign("level0", "level0.yaml", tmp / "l0",
                      ["--shear-grid", "-0.04,-0.03,-0.02,-0.01,0.01,0.02,0.03,0.04", *GRID2,
                       "--n-realizations", str(seeds), "--batch-size", "auto"],
                      timeout=min(120, run.left()))  # fmt: skip
        res["level0"] = l0
        print(f"[level0] {l0.get('realizations')} realizations: "
              f"{l0.get('realizations_per_s_end_to_end')} /s process, "
              f"{l0.get('realizations_per_s_after_batch_1')} /s after batch 1, host fraction "
              f"{l0.get('host_fraction_warm_median')}", flush=True)  # fmt: skip
        shutil.rmtree(tmp / "l0", ignore_errors=True)
        save()

    # 2. Level 2 on the 2-D grid, the estimator's draws only
    root = tmp / "l2"
    seeds = 2 if smoke else args.l2_seeds
    limit = [] if args.l2_time_limit.lower() == "none" else ["--time-limit", args.l2_time_limit]
    l2_args = [*GRID2, "--set", "campaign.draws=estimator", "--n-realizations", str(seeds),
               "--batch-size", args.l2_batch, *limit,
               *(SMOKE_L2 if smoke else []), *(a for kv in args.l2_set for a in ("--set", kv))]  # fmt: skip
    reserve = 15 if args.skip_stats else args.stats_reserve_s
    l2 = campaign(args.l2_name, "level2.yaml", root, l2_args,
                  timeout=max(30, run.left() - reserve))  # fmt: skip
    l2["bytes_per_realization"] = bytes_per_realization(root) if root.is_dir() else None
    res[args.l2_name] = l2
    print(f"[{args.l2_name}] {l2.get('realizations')} realizations "
          f"({l2.get('exit')}): {l2.get('galaxies_per_s_post_compile')} galaxies/s post-compile, "
          f"host fraction warm {l2.get('host_fraction_warm_median')}", flush=True)  # fmt: skip
    save()

    # 3. extract and stats
    if args.skip_stats:
        res["total_s"] = time.perf_counter() - run.t0
        res["headline"] = headline(res, args.l2_name)
        save(final=True)
        return 0
    csv_path, stats_dir = root / "summary.csv", tmp / "stats"
    r = run.run("extract", _shearbatch("extract", "--input-dir", str(root), "--output",
                                       str(csv_path), "--no-progress"),
                max(30, run.left() - 45))  # fmt: skip
    res["extract"] = {"status": r["status"], "wall_s": r["wall_s"]}
    save()
    if csv_path.is_file():
        t = time.perf_counter()
        r = run.run("stats", _shearbatch("stats", "--input", str(csv_path), "--output-dir",
                                         str(stats_dir), "--requirement", "lsst-project"),
                    max(20, run.left() - 15))  # fmt: skip
        res["stats"] = {"status": r["status"], "wall_s": time.perf_counter() - t,
                        "printed": r["text"][-3000:]}  # fmt: skip
        br = stats_dir / "bias_results.json"
        if br.is_file():
            shutil.copy(br, args.out / "bias_results.json")
            b = json.loads(br.read_text())
            res["result"] = {k: b.get(k) for k in ("m1", "m1_err", "c1", "c1_err", "m2",
                                                     "m2_err", "c2", "c2_err", "n_used",
                                                     "verdict", "passed", "warnings")}  # fmt: skip
            print(f"[stats] {json.dumps(res['result'])}", flush=True)
        for name in PLOTS:
            if (p := stats_dir / "plots" / name).is_file():
                shutil.copy(p, args.out / name)
        res["summary_rows"] = compact_summary(csv_path, args.out / "summary_compact.csv.gz")
    if root.is_dir():
        res["ess"] = ess_figures(root, 1 if smoke else args.sample_every)
        print(f"[ess] {json.dumps({k: v for k, v in res['ess'].items() if k != 'by_snr'})}")
    res["total_s"] = time.perf_counter() - run.t0
    res["headline"] = headline(res, args.l2_name)
    print(f"[headline] {json.dumps(res['headline'])}", flush=True)
    save(final=True)
    if args.root is None:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def draw(fig: Any, res: dict[str, Any]) -> None:
    """Per campaign of the record: each batch's wall, the device's time (inference) and the
    host's (records and queued writes, overlapped with the next batch), in seconds."""
    names = [k for k in res if isinstance(res[k], dict) and res[k].get("batches")]
    axes = fig.subplots(1, max(1, len(names)), squeeze=False)[0]
    for ax, name in zip(axes, names, strict=False):
        b = res[name]["batches"]
        x = [r["index"] for r in b]
        for key, label in (("wall_s", "batch wall"), ("inference", "device (inference)"),
                           ("host", "host: records + queued writes")):  # fmt: skip
            ax.plot(x, [r.get(key) for r in b], "o-", label=label)
        c = res[name]
        ax.set_yscale("log")
        ax.set_xlabel("batch")
        ax.set_ylabel("s")
        ax.set_title(f"{name}: {c.get('realizations')} realizations, {c.get('batch_lanes')} "
                     f"lanes per batch\nafter batch 1: "
                     f"{c.get('realizations_per_s_after_batch_1') or 0:.0f} realizations/s "
                     f"({c.get('galaxies_per_s_after_batch_1') or 0:.0f} galaxies/s); "
                     f"warm host fraction {c.get('host_fraction_warm_median') or 0:.2f}\n"
                     f"cold start to batch 1 {c.get('cold_start_to_batch_1_s') or 0:.0f} s; "
                     f"lockstep efficiency (warm median) "
                     f"{c.get('lockstep_efficiency_warm_median') or 0:.2f}",
                     fontsize=9)  # fmt: skip
        ax.legend(fontsize=8)


if __name__ == "__main__":
    sys.exit(main())
