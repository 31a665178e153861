"""bias-stats on summary tables of millions of realizations (issue 43): peak RSS and wall
time of stage 3's per-realization work (everything but the pooled fit's draws, which
``bench_stages_scale.py`` measures), at sizes at least 6x apart, and the code before the
split into seed parts on the largest table.

1. **Template**: a Level 0 campaign made by the real pipeline, as ``make demo`` makes it
   (``bias-run --config configs/level0.yaml``, 2-D grid, 20 seeds: 80 realizations), and
   its ``summary.csv`` (``bias-extract``).
2. **Tables**: the template's rows repeated under new seed labels to ``--sizes`` rows
   (copy ``n``: ``seed + n * 10**7``, ``_x<n>`` appended to run_id, pair_id and path; the
   text of every other cell as bias-extract wrote it). The copies repeat one campaign's
   noise, so their m and c errors are not a campaign's: the record is about resources.
3. **bias-stats** (``--requirement level0``, figures on, no report) per size,
   ``--repeats`` times under ``/usr/bin/time -v``: wall time, peak RSS, the parts it split
   the table into, m1 and its error.
4. **Before**: with ``--before-src`` (a checkout of an earlier commit's ``src``, e.g.
   ``git worktree add /tmp/base 53b74d6``), the same command on the largest table once,
   that code reading the table whole.

    .venv/bin/python bench/bench_stats_rows.py --work /work/rows \\
        [--sizes 500000,3000000] [--before-src /tmp/base/src]
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import _harness as h

BIN = Path(sys.executable).parent
RSS_BOUND_GIB = 2.0


def timed(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``cmd`` under ``/usr/bin/time -v``: wall s, peak RSS MiB, exit status."""
    t0 = time.perf_counter()
    with open(log, "w") as fh:
        p = subprocess.run(["/usr/bin/time", "-v", *cmd], stdout=fh, stderr=subprocess.STDOUT,
                           cwd=h.ROOT, check=False, env=env)  # fmt: skip
    wall = time.perf_counter() - t0
    text = log.read_text()
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    parts = re.search(r"split by seed into (\d+) parts", text)
    m1 = re.search(r"m1\s+=\s+([-+0-9.e]+)\s+±\s+([0-9.e+-]+)", text)
    return {"wall_s": wall, "peak_rss_mib": int(rss.group(1)) / 1024 if rss else None,
            "exit": p.returncode, "parts": int(parts.group(1)) if parts else 1,
            "m1": float(m1.group(1)) if m1 else None,
            "m1_err": float(m1.group(2)) if m1 else None}  # fmt: skip


def template(work: Path, seeds: int = 20) -> Path:
    """The Level 0 campaign's summary.csv (made once): ``seeds`` per grid point (4 points)."""
    out = work / "template"
    if (out / "summary.csv").is_file():
        return out / "summary.csv"
    subprocess.run([str(BIN / "bias-run"), "--config", "configs/level0.yaml", "--shear-grid",
                    "-0.05", "0.05", "--shear-grid-g2", "-0.05", "0.05", "--n-realizations",
                    str(seeds), "--base-seed", "0", "--batch-size", str(min(40, 4 * seeds)),
                    "--output-dir", str(out / "runs"), "--no-progress"], cwd=h.ROOT,
                   check=True)  # fmt: skip
    subprocess.run([str(BIN / "bias-extract"), "--input-dir", str(out / "runs"), "--output",
                    str(out / "summary.csv"), "--no-progress"], cwd=h.ROOT, check=True)  # fmt: skip
    return out / "summary.csv"


def table(src: Path, n_rows: int, dst: Path) -> Path:
    """``n_rows`` rows: ``src``'s repeated under new seed labels (module docstring)."""
    import pandas as pd

    if dst.is_file() and dst.stat().st_size > 0:
        return dst
    base = pd.read_csv(src, dtype=str, keep_default_na=False)
    k = len(base)
    copies = -(-n_rows // k)
    seed = base["seed"].astype(np.int64).to_numpy()
    with open(dst.with_suffix(".tmp"), "w", newline="") as fh:
        for start in range(0, copies, 2000):
            ns = np.arange(start, min(copies, start + 2000))
            block = pd.concat([base] * len(ns), ignore_index=True)
            n = np.repeat(ns, k)
            block["seed"] = (np.tile(seed, len(ns)) + n * 10**7).astype(str)
            tag = pd.Series([f"_x{i}" for i in n])
            for col in ("run_id", "path"):
                block[col] = block[col] + tag
            pid = block["pair_id"]
            block["pair_id"] = pid.where(pid == "", pid + tag)
            block = block.iloc[: max(0, n_rows - start * k)]
            block.to_csv(fh, index=False, header=start == 0)
    dst.with_suffix(".tmp").rename(dst)
    return dst


def stats_cmd(src: Path, out: Path) -> list[str]:
    return ["--input", str(src), "--output-dir", str(out), "--requirement", "level0"]


def main(argv: list[str] | None = None) -> None:
    ap = h.parser(__doc__, "stats_rows", repeats=2)
    ap.add_argument("--work", type=Path, required=True, help="scratch folder (a few GB)")
    ap.add_argument("--sizes", default="500000,3000000", help="rows (comma-separated)")
    ap.add_argument("--before-src", type=Path, default=None,
                    help="an earlier checkout's src/, run once on the largest table")  # fmt: skip
    ap.add_argument("--template-seeds", type=int, default=20,
                    help="the template campaign's seeds per grid point (4 points)")  # fmt: skip
    args = ap.parse_args(argv)
    info = h.provenance("float64")
    h.banner(info)
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    src = template(work, args.template_seeds)
    sizes = [int(s) for s in args.sizes.split(",")]
    runs: dict[str, list[dict[str, Any]]] = {}
    tables = {}
    for n in sizes:
        t = table(src, n, work / f"summary_{n}.csv")
        tables[n] = t
        size = t.stat().st_size
        runs[str(n)] = []
        for rep in range(args.repeats):
            r = timed([str(BIN / "bias-stats"), *stats_cmd(t, work / f"stats_{n}")],
                      work / f"stats_{n}_{rep}.log")  # fmt: skip
            r.update(repeat=rep, rows=n, csv_bytes=size)
            print(f"{n:,} rows ({size / 2**30:.2f} GiB of CSV): {r['wall_s']:.1f} s, peak RSS "
                  f"{r['peak_rss_mib']:.0f} MiB, {r['parts']} part(s), exit {r['exit']}")  # fmt: skip
            runs[str(n)].append(r)
    before = None
    if args.before_src is not None:
        n = max(sizes)
        env = {**os.environ, "PYTHONPATH": str(args.before_src)}
        before = timed([sys.executable, "-m", "shearbatch", "stats",
                        *stats_cmd(tables[n], work / f"before_{n}")],
                       work / f"before_{n}.log", env)  # fmt: skip
        before.update(rows=n, src=h.rel(args.before_src),
                      commit=subprocess.run(["git", "-C", str(args.before_src), "rev-parse",
                                             "HEAD"], capture_output=True, text=True,
                                            check=False).stdout.strip())  # fmt: skip
        print(f"before ({before['commit'][:10]}), {n:,} rows: {before['wall_s']:.1f} s, peak "
              f"RSS {before['peak_rss_mib']:.0f} MiB, exit {before['exit']}")  # fmt: skip
    med = {k: {"wall_s": h.median([r["wall_s"] for r in rs]),
               "peak_rss_mib": h.median([r["peak_rss_mib"] for r in rs]),
               "rows": rs[0]["rows"], "parts": rs[0]["parts"]} for k, rs in runs.items()}  # fmt: skip
    lo, hi = med[str(min(sizes))], med[str(max(sizes))]
    slope = (hi["peak_rss_mib"] - lo["peak_rss_mib"]) * 2**20 / (hi["rows"] - lo["rows"])
    m = {"runs": runs, "median": med, "before": before, "rss_bound_mib": RSS_BOUND_GIB * 1024,
         "rss_growth_bytes_per_row": slope,
         "bound_held": all(v["peak_rss_mib"] <= RSS_BOUND_GIB * 1024 for v in med.values()),
         "size_ratio": max(sizes) / min(sizes)}  # fmt: skip
    print(f"peak RSS {lo['peak_rss_mib']:.0f} -> {hi['peak_rss_mib']:.0f} MiB over "
          f"{m['size_ratio']:.0f}x the rows ({slope:.1f} bytes per row); bound held: "
          f"{m['bound_held']}")  # fmt: skip
    res = {"settings": h.settings(args), "info": info, "measured": m}
    h.write_json(res, args.out, draw)


def draw(fig: Any, res: dict[str, Any]) -> None:
    m = res["measured"]
    med = m["median"]
    names = sorted(med, key=lambda n: med[n]["rows"])
    rows = np.array([med[n]["rows"] for n in names], float) / 1e6
    ax1, ax2 = fig.subplots(1, 2)
    for n in names:
        rs = m["runs"][n]
        x = [med[n]["rows"] / 1e6] * len(rs)
        ax1.plot(x, [r["wall_s"] for r in rs], "o", color="0.5")
        ax2.plot(x, [r["peak_rss_mib"] / 1024 for r in rs], "o", color="0.5")
    ax1.plot(rows, [med[n]["wall_s"] for n in names], "-", label="bias-stats in seed parts")
    ax2.plot(rows, [med[n]["peak_rss_mib"] / 1024 for n in names], "-",
             label="bias-stats in seed parts")  # fmt: skip
    b = m.get("before")
    if b:
        lab = f"before ({b['commit'][:7]}): the table whole"
        ax1.plot([b["rows"] / 1e6], [b["wall_s"]], "s", color="C3", label=lab)
        ax2.plot([b["rows"] / 1e6], [b["peak_rss_mib"] / 1024], "s", color="C3", label=lab)
    ax1.set(xlabel="realizations (millions; Level 0: one galaxy each)", ylabel="wall time (s)",
            title="bias-stats on a summary table (figures on)")  # fmt: skip
    ax2.axhline(m["rss_bound_mib"] / 1024, color="k", ls="--", lw=1, label="bound 2 GiB")
    ax2.set(xlabel="realizations (millions)", ylabel="peak RSS (GiB)", ylim=(0, None),
            title="peak resident memory")  # fmt: skip
    for ax in (ax1, ax2):
        ax.legend(fontsize=8)


if __name__ == "__main__":
    main()
