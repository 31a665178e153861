"""Stages 2 and 3 at field scale (issue 43): the reduction of array-task partials and the
streamed pooled fit, wall time and peak RSS at campaign sizes at least 6x apart.

On a campaign root written by ``bias-run`` array tasks (``--root``; e.g. the 9,000-seed
Level 2 campaign of ``results/validation/level2_2d_3e4/``), in order:

1. **Array tasks' partials**: ``bias-extract --array-task-id i --array-task-count T`` for
   each task whose partial is missing (what each array task does when its ``bias-run``
   ends; timed per task, not part of the reduction).
2. **Reduction**: ``bias-extract --input-dir ROOT`` over those partials (every
   realization's key checked against its partial, the partials' checksums verified, the
   summary written), ``--repeats`` times: wall time and peak RSS (``/usr/bin/time -v``).
3. **Sizes**: ``small`` = the first ``--small-tasks`` tasks' partials (a sub-campaign,
   3,000 seeds for T = 36 and 12), ``campaign`` = all of them, and ``large`` = the
   campaign's real partials repeated ``--replicas`` times under new seed labels (each copy
   a real partial file with its run_ids and seeds relabelled: ``_xN`` and
   ``seed + N * 10**7``), as the issue allows. Each gets its ``summary.csv`` rows and
   ``summary.partials.json`` index.
4. **Stats**: ``bias-stats --input <size>/summary.csv --requirement lsst-project
   --no-plots`` per size, ``--repeats`` times: wall time, peak RSS, m and c with errors,
   the fit's passes over the partials.
5. **Agreement** at ``small``: the in-memory fit (every galaxy's draws in memory,
   :func:`shearbatch.analysis.pooled.pooled_fits`, as ``bias-stats`` did before) against
   the streamed one on the same rows: m, c and their errors.

    .venv/bin/python bench/bench_stages_scale.py --root /work/l2_3e4/runs --tasks 36 \\
        --work /work/scale [--small-tasks 12] [--replicas 3] [--repeats 2]
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import _harness as h

BIN = Path(sys.executable).parent
RSS_BOUND_GIB = 2.0


def timed(cmd: list[str], log: Path) -> dict[str, Any]:
    """Run ``cmd`` under ``/usr/bin/time -v``: wall s, peak RSS MiB, exit status."""
    t0 = time.perf_counter()
    with open(log, "w") as fh:
        p = subprocess.run(["/usr/bin/time", "-v", *cmd], stdout=fh, stderr=subprocess.STDOUT,
                           cwd=h.ROOT, check=False)  # fmt: skip
    wall = time.perf_counter() - t0
    text = log.read_text()
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    return {"wall_s": wall, "peak_rss_mib": int(rss.group(1)) / 1024 if rss else None,
            "exit": p.returncode}  # fmt: skip


def array_partials(root: Path, tasks: int, work: Path) -> list[dict[str, Any]]:
    from shearbatch.io import partials as pio

    out = []
    for i in range(tasks):
        if (root / pio.PARTIALS / f"task-{i:05d}-of-{tasks:05d}.nc.sum.json").is_file():
            continue
        r = timed([str(BIN / "bias-extract"), "--input-dir", str(root), "--array-task-id", str(i),
                   "--array-task-count", str(tasks), "--workers", "2", "--no-progress"],
                  work / f"task_{i}.log")  # fmt: skip
        if r["exit"] != 0:
            raise SystemExit(f"array task {i}: bias-extract exited {r['exit']}")
        print(f"array task {i}/{tasks}: {r['wall_s']:.1f} s")
        out.append({"task": i, **r})
    return out


def size_dir(name: str, work: Path, rows: list[dict], entries: list[dict]) -> Path:
    """``<work>/<name>/summary.csv`` and its index over ``entries`` (absolute paths)."""
    from shearbatch.analysis import partials as ap
    from shearbatch.analysis import summary_table as ex

    d = work / name
    d.mkdir(parents=True, exist_ok=True)
    ex.write_summary(rows, d / "summary.csv")
    ap.write_index({"format": "shearbatch-partial/1", "partials": entries},
                   ap.index_path(d / "summary.csv"))  # fmt: skip
    return d


def entry(path: Path, use: list[int]) -> dict[str, Any]:
    from shearbatch.io import partials as pio

    rec = json.loads(pio.sum_path(path).read_text())
    return {"path": str(path), "size": rec["size"], "crc32": rec["crc32"], "use": use}


def relabel(r: dict[str, Any], n: int) -> dict[str, Any]:
    """Row ``r`` of copy ``n``: its seed ``+ n * 10**7``, and that seed in its run_id,
    pair_id and path (``..._s<seed>[_r<k>]``: the names the ring and pair logic read)."""
    r = dict(r)
    seed = r.get("seed")
    if seed is None or seed != seed:
        r["run_id"] = f"{r['run_id']}_x{n}"
        r["path"] = f"x{n}/{r.get('path')}"
        return r
    old, new = int(seed), int(seed) + n * 10**7
    r["seed"] = new
    for key in ("run_id", "pair_id", "path"):
        if isinstance(r.get(key), str):
            r[key] = re.sub(rf"_s{old}(?=_|$|/)", f"_s{new}", r[key])
    return r


def replicate(src: Path, dst: Path, n: int) -> Path:
    """A real partial file: ``src``'s rows (:func:`relabel`) and draws."""
    from shearbatch.io import partials as pio

    part = pio.Partial(src)
    rows = [relabel(r, n) for r in part.rows]
    ((_, ro, eps, lb),) = part.blocks(max(1, part.n_galaxies))
    for i in range(len(rows)):
        sel = ro == i
        if sel.any():
            rows[i]["_population"] = {"eps": eps[sel], "log_base": lb[sel], "population": [
                dict(q) for q in json.loads(part.population)]}  # fmt: skip
    return pio.write_partial(dst, rows, [int(k) for k in part.keys], part.context)


def stats_runs(d: Path, repeats: int) -> list[dict[str, Any]]:
    out = []
    for rep in range(repeats):
        r = timed([str(BIN / "bias-stats"), "--input", str(d / "summary.csv"), "--output-dir",
                   str(d / "stats"), "--requirement", "lsst-project", "--no-plots"],
                  d / f"stats_{rep}.log")  # fmt: skip
        if r["exit"] not in (0, 1, 3):
            raise SystemExit(f"bias-stats on {d}: exit {r['exit']} ({d}/stats_{rep}.log)")
        res = json.loads((d / "stats" / "bias_results.json").read_text())
        pop = res["population"]
        keys = ("m1", "m1_err", "c1", "c1_err", "m2", "m2_err", "c2", "c2_err", "verdict")
        r.update({k: res[k] for k in keys})
        r.update(
            galaxies=pop["n_galaxies"],
            seeds=pop["n_seeds"],
            passes=pop.get("passes"),
            partials=pop.get("partials"),
            repeat=rep,
        )
        print(f"  {d.name}: {r['galaxies']:,} galaxies, {r['wall_s']:.1f} s, peak RSS "
              f"{r['peak_rss_mib']:.0f} MiB, m1 {r['m1']:+.3e} +- {r['m1_err']:.2e}")  # fmt: skip
        out.append(r)
    return out


def read_timed(log: Path) -> dict[str, Any]:
    """Wall s and peak RSS MiB of a ``/usr/bin/time -v`` log written elsewhere (run.sh's
    reduction), with its partials line."""
    text = log.read_text()
    el = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([0-9:.]+)", text)
    secs = 0.0
    for part in el.group(1).split(":"):
        secs = 60 * secs + float(part)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    m = re.search(r"partials: (\d+) realization\(s\) from partials, (\d+) read", text)
    return {"wall_s": secs, "peak_rss_mib": int(rss.group(1)) / 1024, "exit": None,
            "repeat": 0, "from_partials": int(m.group(1)) if m else None,
            "read": int(m.group(2)) if m else None,
            "source": f"run.sh's reduction ({log.name})"}  # fmt: skip


def read_stats(d: Path) -> dict[str, Any]:
    """A bias-stats run recorded elsewhere (run.sh): ``d/stats.log`` (with ``/usr/bin/time
    -v``'s block) and ``d/stats/bias_results.json``."""
    text = (d / "stats.log").read_text()
    el = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([0-9:.]+)", text)
    secs = 0.0
    for part in el.group(1).split(":"):
        secs = 60 * secs + float(part)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    res = json.loads((d / "stats" / "bias_results.json").read_text())
    pop = res["population"]
    keys = ("m1", "m1_err", "c1", "c1_err", "m2", "m2_err", "c2", "c2_err", "verdict")
    return {"wall_s": secs, "peak_rss_mib": int(rss.group(1)) / 1024, "exit": None,
            **{k: res[k] for k in keys}, "galaxies": pop["n_galaxies"], "seeds": pop["n_seeds"],
            "passes": pop.get("passes"), "partials": pop.get("partials"), "repeat": 0,
            "source": "the campaign's own bias-stats (run.sh, stats.log)"}  # fmt: skip


def agreement(d: Path) -> dict[str, Any]:
    """In-memory against streamed fit on the same rows (``d``'s summary and index)."""
    from shearbatch.analysis import summary_table as ex
    from shearbatch.analysis.bias import measure_bias
    from shearbatch.analysis.partials import index_path
    from shearbatch.analysis.streamed import PartialSource

    df = ex.read_summary(d / "summary.csv")
    src = PartialSource(index_path(d / "summary.csv"))
    t0 = time.perf_counter()
    mem = src.arrays()
    res_m, _, _ = measure_bias(df, requirement="lsst-project", population=mem)
    t_mem = time.perf_counter() - t0
    del mem
    t0 = time.perf_counter()
    res_s, _, _ = measure_bias(df, requirement="lsst-project", population=src)
    t_str = time.perf_counter() - t0
    keys = ("m1", "m1_err", "c1", "c1_err", "m2", "m2_err", "c2", "c2_err")
    a = res_m.to_json()
    b = res_s.to_json()
    out = {"in_memory": {k: a[k] for k in keys}, "streamed": {k: b[k] for k in keys},
           "max_abs_diff": max(abs(a[k] - b[k]) for k in keys if a[k] is not None),
           "in_memory_s": t_mem, "streamed_s": t_str}  # fmt: skip
    print(f"agreement at {d.name}: largest |in-memory - streamed| over m, c and errors "
          f"{out['max_abs_diff']:.2e}")  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> None:
    ap = h.parser(__doc__, "stages_scale", repeats=2)
    ap.add_argument("--root", type=Path, required=True, help="the campaign root")
    ap.add_argument("--tasks", type=int, required=True, help="its array tasks")
    ap.add_argument("--work", type=Path, required=True, help="scratch folder (large)")
    ap.add_argument("--small-tasks", type=int, default=12)
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--skip-agreement", action="store_true")
    ap.add_argument(
        "--sizes",
        default="small,campaign,large",
        help="which sizes bias-stats runs on (comma-separated)",
    )
    ap.add_argument(
        "--campaign-stats",
        type=Path,
        default=None,
        help="a campaign whose bias-extract and bias-stats ran already (run.sh): its folder "
        "with extract.log, stats.log (/usr/bin/time -v), summary.csv, summary.partials.json "
        "and stats/bias_results.json, read as the campaign size instead of running again",
    )
    ap.add_argument(
        "--reduction-repeats", type=int, default=None, help="timed reductions (default --repeats)"
    )
    args = ap.parse_args(argv)
    info = h.provenance("float64")
    h.banner(info)
    from shearbatch.io import partials as pio

    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    tasks = array_partials(args.root, args.tasks, work)
    red = []
    n_red = args.repeats if args.reduction_repeats is None else args.reduction_repeats
    base = work / "campaign"
    if n_red == 0 and args.campaign_stats is not None:  # run.sh's reduction, as it ran
        base = args.campaign_stats
        red.append(read_timed(base / "extract.log"))
    for rep in range(n_red):
        out = work / "campaign"
        out.mkdir(exist_ok=True)
        r = timed([str(BIN / "bias-extract"), "--input-dir", str(args.root), "--output",
                   str(out / "summary.csv"), "--workers", "2", "--no-progress"],
                  work / f"reduce_{rep}.log")  # fmt: skip
        text = (work / f"reduce_{rep}.log").read_text()
        m = re.search(r"partials: (\d+) realization\(s\) from partials, (\d+) read", text)
        r.update(repeat=rep, from_partials=int(m.group(1)) if m else None,
                 read=int(m.group(2)) if m else None)  # fmt: skip
        print(f"reduction {rep}: {r['wall_s']:.1f} s, peak RSS {r['peak_rss_mib']:.0f} MiB, "
              f"{r['from_partials']} from partials, {r['read']} read")  # fmt: skip
        red.append(r)
    from shearbatch.analysis import summary_table as ex

    rows = ex.read_summary(base / "summary.csv").to_dict("records")
    idx = json.loads((base / "summary.partials.json").read_text())
    entries = [{**e, "path": str((base / e["path"]).resolve())} for e in idx["partials"]]
    small_names = {f"task-{i:05d}-of-{args.tasks:05d}.nc" for i in range(args.small_tasks)}
    small_entries = [e for e in entries if Path(e["path"]).name in small_names]
    small_ids = set()
    for e in small_entries:
        part = pio.Partial(e["path"])
        small_ids |= {str(part.rows[i]["run_id"]) for i in e["use"]}
    sizes = {"small": size_dir("small", work, [r for r in rows if str(r["run_id"]) in small_ids],
                               small_entries)}  # fmt: skip
    sizes["campaign"] = base
    big_entries, big_rows = list(entries), list(rows)
    for n in range(1, args.replicas if "large" in args.sizes.split(",") else 1):
        for e in entries:
            dst = work / "replicas" / f"x{n}_{Path(e['path']).name}"
            if not pio.sum_path(dst).is_file():
                replicate(Path(e["path"]), dst, n)
            big_entries.append(entry(dst, e["use"]))
        big_rows += [relabel(r, n) for r in rows]
        print(f"replica {n}: {len(entries)} partials written")
    if args.replicas > 1 and "large" in args.sizes.split(","):
        sizes["large"] = size_dir("large", work, big_rows, big_entries)
    want = args.sizes.split(",")
    stats: dict[str, list] = {}
    if args.campaign_stats is not None and "campaign" not in want:
        stats["campaign"] = [read_stats(args.campaign_stats)]
    for name, d in sizes.items():
        if name in want:
            stats[name] = stats_runs(d, args.repeats)
            record(args, info, tasks, red, stats, None, complete=False)  # so far
    agree = None if args.skip_agreement else agreement(sizes["small"])
    record(args, info, tasks, red, stats, agree, complete=True)
    if "--keep" not in sys.argv:
        shutil.rmtree(work / "replicas", ignore_errors=True)


def record(args, info, tasks, red, stats, agree, complete: bool) -> None:
    """Write the record (after each size, ``complete`` False until the last)."""
    med = {name: {"wall_s": h.median([r["wall_s"] for r in rs]),
                  "peak_rss_mib": h.median([r["peak_rss_mib"] for r in rs]),
                  "galaxies": rs[0]["galaxies"]} for name, rs in stats.items()}  # fmt: skip
    for v in med.values():
        v["galaxies_per_s"] = v["galaxies"] / v["wall_s"]
    reduce_med = {"wall_s": h.median([r["wall_s"] for r in red]),
                  "peak_rss_mib": h.median([r["peak_rss_mib"] for r in red]),
                  "realizations": red[0]["from_partials"]}  # fmt: skip
    gal = [med[n]["galaxies"] for n in med]
    print(f"stats: sizes {min(gal):,}-{max(gal):,} galaxies ({max(gal) / min(gal):.1f}x); peak "
          f"RSS at most {max(v['peak_rss_mib'] for v in med.values()):.0f} MiB (bound "
          f"{RSS_BOUND_GIB * 1024:.0f})")  # fmt: skip
    growth = None
    if len(med) >= 2:  # peak RSS against galaxies: what still grows, and where it meets 2 GiB
        lo, hi = min(med.values(), key=lambda v: v["galaxies"]), max(
            med.values(), key=lambda v: v["galaxies"])  # fmt: skip
        slope = (
            (hi["peak_rss_mib"] - lo["peak_rss_mib"]) * 2**20 / (hi["galaxies"] - lo["galaxies"])
        )
        reach = (None if slope <= 0 else lo["galaxies"] + (RSS_BOUND_GIB * 1024 - lo[
            "peak_rss_mib"]) * 2**20 / slope)  # fmt: skip
        growth = {"bytes_per_galaxy": slope, "galaxies_at_bound": reach}
        print(f"peak RSS grows {slope:.0f} bytes per galaxy between the smallest and largest "
              f"size: 2 GiB at ~{reach / 1e6:.0f} million galaxies" if reach else
              "peak RSS does not grow between the smallest and largest size")  # fmt: skip
    m = {"array_tasks": tasks, "reduction": red, "reduction_median": reduce_med,
         "stats": stats, "stats_median": med, "rss_growth": growth, "agreement": agree,
         "rss_bound_mib": RSS_BOUND_GIB * 1024, "complete": complete,
         "replicas": args.replicas, "small_tasks": args.small_tasks}  # fmt: skip
    res = {"settings": {k: (h.rel(v) if isinstance(v, Path) else v)
                        for k, v in vars(args).items()}, "info": info, "measured": m}  # fmt: skip
    h.write_json(res, args.out, draw)


def draw(fig: Any, res: dict[str, Any]) -> None:
    m = res["measured"]
    med = m["stats_median"]
    names = sorted(med, key=lambda n: med[n]["galaxies"])
    gal = np.array([med[n]["galaxies"] for n in names], float)
    ax1, ax2 = fig.subplots(1, 2)
    for n in names:
        rs = m["stats"][n]
        ax1.plot([med[n]["galaxies"] / 1e6] * len(rs), [r["wall_s"] for r in rs], "o", color="0.5")
        ax2.plot([med[n]["galaxies"] / 1e6] * len(rs), [r["peak_rss_mib"] / 1024 for r in rs], "o",
                 color="0.5")  # fmt: skip
    ax1.plot(gal / 1e6, [med[n]["wall_s"] for n in names], "-", label="bias-stats (median)")
    ax1.set(xlabel="galaxies (millions)", ylabel="wall time (s)",
            title="bias-stats, streamed pooled fit")  # fmt: skip
    ax1.legend(fontsize=8)
    ax2.plot(gal / 1e6, [med[n]["peak_rss_mib"] / 1024 for n in names], "-")
    ax2.axhline(m["rss_bound_mib"] / 1024, color="k", ls="--", lw=1, label="bound 2 GiB")
    ax2.set(xlabel="galaxies (millions)", ylabel="peak RSS (GiB)", ylim=(0, None),
            title=f"reduction of {m['reduction_median']['realizations']:,} realizations: "
                  f"{m['reduction_median']['wall_s']:.0f} s")  # fmt: skip
    ax2.legend(fontsize=8)


if __name__ == "__main__":
    main()
