"""Level 2 through the real ``bias-run``, one process, before and after issue 42: galaxies/s
after the compile (issue 42 item 4's CPU target: at least 400).

Runs ``bias-run --config configs/level2.yaml`` (the shipped config) as a subprocess on a
fresh output directory, ``--n-realizations`` seeds (4 realizations each: paired, ring) in
batches of ``--batch-size``, with the CPU defaults (lane chunk, writer processes), and
reads the engine's per-batch lines (``batch i/n: k realization(s) in X s``: each batch's
dispatch to landing, its predecessor's host work and writes overlapping it). Post-compile
galaxies/s = the galaxies of batches 2..n / the sum of their times (batch 1 includes the
compile); also the whole command's wall time. ``before`` is the same command with the
settings of before issue 42 (``--set``: 1,000 draws per galaxy, float64 draws and
Gauss-Newton steps, exact Newton to 1e-10); ``shipped_estimator_draws`` the shipped config with
``campaign.draws: estimator`` (posterior.nc keeps only the draws the shear estimate is
made from, in float32). The variants run in turn ``--repeats`` times (alternated: a
shared machine), medians reported.

    .venv/bin/python bench/bench_level2_campaign.py [--n-realizations 32] [--repeats 2]
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

import _harness as h

BEFORE = ["inference.map_config.num_samples=1000", "inference.map_config.draw_precision=null",
          "inference.map_config.gauss_newton_precision=null",
          "inference.map_config.tol=null"]  # fmt: skip
VARIANTS = {"before": BEFORE, "shipped": [],
            "shipped_estimator_draws": ["campaign.draws=estimator"]}  # fmt: skip
LINE = re.compile(r"batch (\d+)/(\d+): (\d+) realization\(s\) in ([0-9.]+) s")
M = 32  # galaxies per realization (configs/level2.yaml)
TARGET = 400.0


def run(variant: str, args: Any) -> dict[str, Any]:
    out = Path(tempfile.mkdtemp(prefix="l2camp_"))
    cmd = [str(Path(sys.executable).parent / "bias-run"), "--config", "configs/level2.yaml",
           "--n-realizations", str(args.n_realizations), "--batch-size", str(args.batch_size),
           "--output-dir", str(out / "runs"), "--no-progress"]  # fmt: skip
    for s in VARIANTS[variant]:
        cmd += ["--set", s]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=h.ROOT, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    shutil.rmtree(out, ignore_errors=True)
    if p.returncode != 0:
        raise SystemExit(f"{variant}: bias-run exited {p.returncode}:\n{p.stderr[-2000:]}")
    batches = [(int(a), int(c), float(d)) for a, _, c, d in LINE.findall(p.stderr)]
    after = [(n, t) for i, n, t in batches if i > 1]
    gal = M * sum(n for n, _ in after)
    secs = sum(t for _, t in after)
    return {"variant": variant, "set": VARIANTS[variant], "wall_s": wall,
            "batch_s": [t for _, _, t in batches], "realizations": sum(n for _, n, _ in batches),
            "post_compile_galaxies": gal, "post_compile_s": secs,
            "galaxies_per_s": gal / secs if secs else float("nan")}  # fmt: skip


def draw(fig: Any, res: dict[str, Any]) -> None:
    m = res["measured"]
    ax = fig.subplots()
    names = list(m["median_galaxies_per_s"])
    x = np.arange(len(names))
    for i, name in enumerate(names):
        runs = [r["galaxies_per_s"] for r in m["runs"] if r["variant"] == name]
        ax.plot([i] * len(runs), runs, "o", color="0.5")
    ax.bar(x, [m["median_galaxies_per_s"][n] for n in names], alpha=0.6)
    ax.axhline(TARGET, color="k", ls="--", lw=1, label=f"target {TARGET:g} galaxies/s")
    ax.set(xticks=x, ylabel="Level 2 galaxies/s after the compile (bias-run, one process)",
           title=f"bias-run, {m['realizations']} realizations per run; ratio "
                 f"{m['ratio']:.2f}x")  # fmt: skip
    ax.set_xticklabels([n.replace("_", "\n", 1) for n in names])
    ax.legend(fontsize=8)


def main(argv: list[str] | None = None) -> None:
    ap = h.parser(__doc__, "level2_campaign", repeats=2)
    ap.add_argument("--n-realizations", type=int, default=32, help="seeds (x4 realizations)")
    ap.add_argument("--batch-size", type=int, default=16)
    args = ap.parse_args(argv)
    info = h.provenance("float64")
    h.banner(info)
    t = h.Table([("variant", "8s"), ("run", "4d"), ("wall s", "7.1f"), ("batches", "8d"),
                 ("gal/s", "7.0f")])  # fmt: skip
    runs = []
    for rep in range(args.repeats):
        for v in VARIANTS:
            r = run(v, args)
            r["repeat"] = rep
            t.row(v, rep, r["wall_s"], len(r["batch_s"]), r["galaxies_per_s"])
            runs.append(r)
    med = {v: h.median([r["galaxies_per_s"] for r in runs if r["variant"] == v]) for v in VARIANTS}
    ratio = med["shipped"] / med["before"]
    print(f"median galaxies/s after the compile: before {med['before']:.0f}, shipped "
          f"{med['shipped']:.0f} ({ratio:.2f}x; target {TARGET:g})")  # fmt: skip
    m = {"runs": runs, "median_galaxies_per_s": med, "ratio": ratio, "target": TARGET,
         "realizations": runs[0]["realizations"]}  # fmt: skip
    h.write_json({"settings": h.settings(args), "info": info, "measured": m}, args.out, draw)


if __name__ == "__main__":
    main()
