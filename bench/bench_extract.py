"""Benchmark bias-extract: 10,000 MAP realization directories on this machine's CPUs.

The directories are made by running ONE small real campaign with ``bias-run``
(configs/level0.yaml, 16 realizations) and then COPYING its realization
directories under new run ids (``copy<k>_<run_id>``, spread over task
sub-directories) until there are ``--n-dirs`` of them: the files are real
bias-run output, only their number is synthetic. The timed part is
``extract_campaign`` (directory scan + parallel reads) and ``write_summary``.

    .venv/bin/python bench/bench_extract.py [--n-dirs 10000] [--workers N]

Writes ``results/benchmarks/extract.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from shearbatch.extract import extract_campaign, status_counts, write_summary

ROOT = Path(__file__).resolve().parents[1]


def make_dirs(work: Path, n_dirs: int) -> Path:
    seed_camp = work / "seed"
    exe = Path(sys.executable).parent / "bias-run"
    subprocess.run(
        [str(exe), "--config", str(ROOT / "configs/level0.yaml"), "--shear-grid", "-0.05", "-0.02",
         "0.02", "0.05", "--n-realizations", "4", "--batch-size", "16", "--x64", "--no-progress",
         "--output-dir", str(seed_camp)],
        check=True, capture_output=True,
    )  # fmt: skip
    src = sorted(p for p in seed_camp.iterdir() if p.is_dir())
    camp = work / "campaign"
    for k in range(n_dirs):
        s = src[k % len(src)]
        dst = camp / f"task{k // 1000:03d}" / f"copy{k}_{s.name}"
        dst.mkdir(parents=True)
        for f in ("truth.json", "posterior.nc", "convergence.json"):
            shutil.copyfile(s / f, dst / f)
    return camp


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-dirs", type=int, default=10_000)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--out", default=str(ROOT / "results/benchmarks/extract.json"))
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_extract_") as tmp:
        t0 = time.perf_counter()
        camp = make_dirs(Path(tmp), a.n_dirs)
        t_make = time.perf_counter() - t0
        subprocess.run(["sync"], check=False)
        t0 = time.perf_counter()
        rows = extract_campaign(camp, workers=a.workers)
        t_read = time.perf_counter() - t0
        t0 = time.perf_counter()
        write_summary(rows, Path(tmp) / "summary.csv")
        t_write = time.perf_counter() - t0
    total = t_read + t_write
    res = {
        "benchmark": "bias-extract, MAP realization directories (copies of a real level-0 run)",
        "n_dirs": len(rows),
        "status_counts": status_counts(rows),
        "workers": a.workers or os.cpu_count(),
        "cpu_count": os.cpu_count(),
        "extract_s": round(t_read, 2),
        "write_csv_s": round(t_write, 2),
        "total_s": round(total, 2),
        "dirs_per_s": round(len(rows) / total, 1),
        "target_s_for_10000": 120,
        "passed": bool(total * 10_000 / len(rows) <= 120),
        "setup_s (bias-run + copies, not timed)": round(t_make, 1),
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
