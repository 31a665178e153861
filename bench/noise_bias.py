"""Noise bias per inference method at survey S/N (issue 12, item 5). Not a unit test.

For each S/N in ``--snr`` and each method in ``--methods`` it runs the real
pipeline on ``configs/survey_snr<S/N>.yaml`` (one exponential galaxy with free
flux, size and intrinsic ellipticity, flat shear prior, paired +-0.02 design):
``bias-run`` -> ``bias-extract`` -> ``bias-stats`` (paired estimator, posterior
mean, jackknife over seeds), and records m1 and c1 with errors, realizations
used and wall time in ``<out>/noise_bias.json`` (plus the exact commands).

    .venv/bin/python bench/noise_bias.py --snr 15 30 100 --methods map --seeds 200
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def _run(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=False, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def planning(csv: Path, point: str) -> dict:
    """sigma_m per 1,000 realizations, paired (the pair differences) and unpaired (what
    independent seeds at +g and -g would give: the per-realization scatter), and the
    realizations needed for sigma_m = 1e-3 with each design; from the realizations that
    pass the convergence gate, or (``gate_ignored``) from every ok one when fewer than
    10 pairs pass, with m1 of those pairs (mean of the pair estimates, its standard
    error) so that a campaign the gate empties still has a figure, labelled as such."""
    import numpy as np
    import pandas as pd

    df = pd.read_csv(csv)
    ok = df[df["status"] == "ok"]
    col = f"g1_{point}"
    passed = ok[ok["passed_convergence"].astype(bool)]
    wide = passed.pivot_table(index="seed", columns="g1_true", values=col).dropna()
    gate_ignored = len(wide) < 10
    if gate_ignored:
        wide = ok.pivot_table(index="seed", columns="g1_true", values=col).dropna()
    lo, hi = wide.columns.min(), wide.columns.max()
    g = (hi - lo) / 2
    m_pair = (wide[hi] - wide[lo]) / (2 * g) - 1
    per_pair = m_pair.std(ddof=1)  # m scatter of one pair (2 images)
    unpaired = np.sqrt(wide[hi].var(ddof=1) + wide[lo].var(ddof=1)) / (2 * g)
    out = {"pairs": len(wide), "gate_ignored": bool(gate_ignored),
           "m1_pairs": float(m_pair.mean()), "m1_pairs_err": float(per_pair / np.sqrt(len(wide)))}  # fmt: skip
    for name, sd in (("paired", per_pair), ("unpaired", unpaired)):
        out[f"sigma_m_per_1000_{name}"] = float(sd / np.sqrt(500))  # 1,000 images = 500 pairs
        out[f"n_for_1e-3_{name}"] = int(np.ceil(2 * (sd / 1e-3) ** 2))
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--snr", type=int, nargs="+", default=[15, 30, 100])
    ap.add_argument("--methods", nargs="+", default=["map"])
    ap.add_argument("--seeds", type=int, nargs="+", default=[200],
                    help="pairs per (method, S/N): one number, or one per --snr")  # fmt: skip
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--extra", nargs="*", default=[], help="extra bias-run flags")
    ap.add_argument("--point", default="mean", help="bias-stats --point")
    ap.add_argument("--out", default="results/validation/noise_bias")
    a = ap.parse_args(argv)
    out = ROOT / a.out
    out.mkdir(parents=True, exist_ok=True)
    rows, commands = [], []
    if len(a.seeds) not in (1, len(a.snr)):
        ap.error("--seeds: one number, or one per --snr")
    seeds = dict(zip(a.snr, a.seeds * len(a.snr) if len(a.seeds) == 1 else a.seeds, strict=True))
    for method in a.methods:
        for snr in a.snr:
            tag = f"{method}_snr{snr}"
            runs = out / "runs" / tag
            run = [str(BIN / "bias-run"), "--config", f"configs/survey_snr{snr}.yaml",
                   "--method", method, "--n-realizations", str(seeds[snr]),
                   "--batch-size", str(a.batch_size), "--output-dir",
                   os.path.relpath(runs, ROOT), "--no-progress", *a.extra]  # fmt: skip
            ext = [str(BIN / "bias-extract"), "--input-dir", os.path.relpath(runs, ROOT),
                   "--output", os.path.relpath(out / f"{tag}.csv", ROOT), "--no-progress"]  # fmt: skip
            st = [str(BIN / "bias-stats"), "--input", os.path.relpath(out / f"{tag}.csv", ROOT),
                  "--output-dir", os.path.relpath(out / tag, ROOT), "--level", "level_2",
                  "--point", a.point]  # fmt: skip
            wall = _run(run)
            _run(ext)
            _run(st)
            res = json.loads((out / tag / "bias_results.json").read_text())
            row = {"method": method, "snr": snr, "wall_s": round(wall, 1),
                   **{k: res.get(k) for k in ("m1", "m1_err", "c1", "c1_err", "n_used",
                                              "n_realizations", "estimator")},
                   **planning(out / f"{tag}.csv", a.point)}  # fmt: skip
            rows.append(row)
            commands += [" ".join(c[:1] and [Path(c[0]).name, *c[1:]]) for c in (run, ext, st)]
            print(f"{method:5s} S/N {snr:4d}: m1 = {row['m1']:+.4f} +- {row['m1_err']:.4f}, "
                  f"c1 = {row['c1']:+.2e} +- {row['c1_err']:.1e}, {row['n_used']} used, "
                  f"{wall:.0f} s", flush=True)  # fmt: skip
    doc = {
        "what": "noise bias of the posterior-mean / mode shear per method at survey S/N",
        "machine": f"{platform.machine()} {os.cpu_count()} CPU, {platform.python_version()}",
        "commands": commands,
        "rows": rows,
    }
    name = "noise_bias_" + "_".join(a.methods) + ".json"
    (out / name).write_text(json.dumps(doc, indent=2) + "\n")
    return doc


if __name__ == "__main__":
    main()
