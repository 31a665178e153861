"""Benchmark bias-extract: 10,000 MAP realization directories on this machine's CPUs.

The directories are made by running ONE small real campaign with ``bias-run``
(configs/level0.yaml, 4 grid points x ``--n-realizations`` (4)) and then COPYING its
realization directories under new run ids (``copy<k>_<run_id>``, spread over task
sub-directories) until there are ``--n-dirs`` of them: the files are real bias-run
output, only their number is synthetic. The timed part is
``shearbatch.analysis.summary_table.extract_campaign`` (directory scan + parallel reads) and
``write_summary``; median of ``--repeats`` (3).

    .venv/bin/python bench/bench_extract.py [--n-dirs 10000] [--workers N]

Writes ``results/benchmarks/extract.json``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

import _harness as h

TARGET_S = 120  # for 10,000 directories


def make_dirs(work: Path, args) -> Path:
    from shearbatch.io import FILES

    raw = yaml.safe_load((h.ROOT / "configs" / "level0.yaml").read_text())
    raw["image"].update(size_x=args.stamp, size_y=args.stamp)
    (work / "level0.yaml").write_text(yaml.safe_dump(raw))
    seed_camp = work / "seed"
    exe = Path(sys.executable).parent / "bias-run"
    cmd = [str(exe), "--config", str(work / "level0.yaml"), "--shear-grid", "-0.05", "-0.02",
           "0.02", "0.05", "--n-realizations", str(args.n_realizations), "--batch-size", "16",
           "--x64", "--no-progress", "--output-dir", str(seed_camp)]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True)
    src = sorted(p for p in seed_camp.iterdir() if p.is_dir())
    camp = work / "campaign"
    for k in range(args.n_dirs):
        s = src[k % len(src)]
        dst = camp / f"task{k // 1000:03d}" / f"copy{k}_{s.name}"
        dst.mkdir(parents=True)
        for f in FILES:
            shutil.copyfile(s / f, dst / f)
    return camp


def draw(fig, rec: dict) -> None:
    """bias-extract's time for the campaign against its target, and its throughput."""
    ax = fig.subplots()
    runs = rec.get("total_all_s") or [rec["total_s"]]
    ax.bar(
        ["extract", "write CSV", "total (median)"],
        [rec["extract_s"], rec["write_csv_s"], rec["total_s"]],
        color=["C0", "C0", "C1"],
    )
    ax.scatter(
        range(len(runs)) and [2] * len(runs),
        runs,
        color="k",
        s=12,
        zorder=3,
        label="total, each repeat",
    )
    ax.axhline(
        rec["target_s_for_10000"] * rec["n_dirs"] / 10000,
        color="C3",
        ls="--",
        label=f"target ({rec['target_s_for_10000']} s per 10,000 directories)",
    )
    ax.set_ylabel("seconds")
    ax.set_title(
        f"bias-extract: {rec['n_dirs']} realization directories, {rec['workers']} "
        f"worker(s): {rec['dirs_per_s']:.0f} directories / s",
        fontsize=10,
    )
    ax.legend(fontsize=8)  # fmt: skip


def main(argv: list[str] | None = None) -> dict:
    ap = h.parser(__doc__, "extract", repeats=3)
    ap.add_argument("--n-dirs", type=int, default=10_000)
    ap.add_argument("--workers", type=int, default=None, help="reader processes (CPU count)")
    ap.add_argument("--n-realizations", type=int, default=4, help="seed campaign, per grid point")
    ap.add_argument("--stamp", type=int, default=48, help="seed campaign's stamp size")
    args = ap.parse_args(argv)
    from shearbatch.analysis.summary_table import extract_campaign, status_counts, write_summary

    info = h.provenance(None)
    h.banner(info)
    reads, writes = [], []
    with tempfile.TemporaryDirectory(prefix="bench_extract_") as tmp:
        t0 = time.perf_counter()
        camp = make_dirs(Path(tmp), args)
        t_make = time.perf_counter() - t0
        subprocess.run(["sync"], check=False)
        table = h.Table([("n_dirs", "7d"), ("extract_s", "9.2f"), ("write_s", "8.2f"),
                         ("dirs/s", "8.1f"), ("load", "5.2f")])  # fmt: skip
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            rows = extract_campaign(camp, workers=args.workers)
            reads.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            write_summary(rows, Path(tmp) / "summary.csv")
            writes.append(time.perf_counter() - t0)
            total = reads[-1] + writes[-1]
            table.row(len(rows), reads[-1], writes[-1], len(rows) / total, os.getloadavg()[0])
    totals = [r + w for r, w in zip(reads, writes, strict=True)]
    total = h.median(totals)
    res = {
        "benchmark": "bias-extract, MAP realization directories (copies of a real level-0 run)",
        "n_dirs": len(rows),
        "status_counts": status_counts(rows),
        "workers": args.workers or os.cpu_count(),
        "extract_s": round(h.median(reads), 2),
        "write_csv_s": round(h.median(writes), 2),
        "total_s": round(total, 2),
        "total_all_s": [round(t, 2) for t in totals],
        "dirs_per_s": round(len(rows) / total, 1),
        "target_s_for_10000": TARGET_S,
        "passed": bool(total * 10_000 / len(rows) <= TARGET_S),
        "setup_s (bias-run + copies, not timed)": round(t_make, 1),
        **info,
        "settings": h.settings(args),
    }
    return h.write_json(res, args.out, draw=draw)


if __name__ == "__main__":
    main()
