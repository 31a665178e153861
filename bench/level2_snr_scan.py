"""Level 2's m at three noise levels on the same seeds: what the bias is made of. Not a test.

Reads the ring campaigns that ``bench/validate_levels.py --levels level2 [--snr S
--tag snrS]`` wrote (``results/validation/level2{,_snr30,_snr450}/runs/ring.csv``:
the same seeds, truths and noise *pattern*, the noise scaled by the S/N) and,
per seed, the ring estimate ``m_seed = mean over rotations of (g1(+g) - g1(-g)) /
(2 g) - 1`` of the posterior mode. Writes ``results/validation/level2_snr_scan.json``
and prints:

- m at each S/N (mean of the seeds it shares with the others, standard error
  over seeds), the mean of 1 / (S/N)^2 over its galaxies (``convergence.json``)
  and what the single-galaxy MAP noise bias at S/N 15 (m1 = -0.015) predicts when
  scaled as (S/N)^-2 galaxy by galaxy;
- the per-seed differences between noise levels (the seeds are shared, so the
  difference of two campaigns is far more precise than either) and the
  correlation of the per-seed m.

    .venv/bin/python bench/level2_snr_scan.py
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
VAL = ROOT / "results" / "validation"
CAMPAIGNS = {30: "level2_snr30", 45: "level2", 450: "level2_snr450"}
SINGLE_GALAXY_MAP = {"snr": 15.0, "m1": -0.015}  # docs/validation.md, noise bias (MAP, S/N 15)


def per_seed(csv: Path, g: float = 0.02) -> pd.Series:
    df = pd.read_csv(csv)
    df = df[(df["status"] == "ok") & df["passed_convergence"].astype(bool)]
    p = df.pivot_table(index=["seed", "rotation"], columns="pair_sign", values="g1_mode")
    p = p.dropna()
    return ((p[1] - p[-1]) / (2 * g) - 1).groupby("seed").mean()


def inv_snr2(runs: Path, seeds) -> float:
    snr = []
    for f in runs.glob("*/convergence.json"):
        d = json.loads(f.read_text())
        if d.get("snr") and int(f.parent.name.split("_s")[1].split("_")[0]) in seeds:
            snr += d["snr"]
    return float(np.mean(np.asarray(snr) ** -2.0))


def se(x: pd.Series) -> float:
    return float(x.std(ddof=1) / np.sqrt(len(x)))


def main(val: Path = VAL, out: Path | None = None) -> dict:
    """Reads the campaigns under ``val`` and writes ``out`` (default
    ``<val>/level2_snr_scan.json``; a test passes a folder of its own for both)."""
    m = {s: per_seed(val / c / "runs" / "ring.csv") for s, c in CAMPAIGNS.items()}
    common = sorted(set.intersection(*(set(v.index) for v in m.values())))
    a = SINGLE_GALAXY_MAP["m1"] * SINGLE_GALAXY_MAP["snr"] ** 2
    res: dict = {"seeds_common": len(common), "per_snr": {}, "pairs": {}}
    for s, v in m.items():
        c = v[common]
        q = inv_snr2(val / CAMPAIGNS[s] / "runs" / "ring", set(common))
        res["per_snr"][s] = {"campaign": CAMPAIGNS[s], "n_seeds_all": len(v),
                             "m1_all": float(v.mean()), "m1_all_se": se(v),
                             "m1_common": float(c.mean()), "m1_common_se": se(c),
                             "per_seed_sd": float(c.std(ddof=1)), "mean_inv_snr2": q,
                             "m1_predicted_single_galaxy_scaling": a * q}  # fmt: skip
        print(f"S/N {s:>3} ({CAMPAIGNS[s]}): m1 = {c.mean():+.4f} +- {se(c):.4f} over "
              f"{len(common)} common seeds (all {len(v)}: {v.mean():+.4f} +- {se(v):.4f}); "
              f"per-seed sd {c.std(ddof=1):.4f}; <(S/N)^-2> = {q:.2e} -> single-galaxy "
              f"scaling predicts {a * q:+.4f}")  # fmt: skip
    for lo, hi in ((30, 45), (45, 450), (30, 450)):
        d = m[lo][common] - m[hi][common]
        r = float(np.corrcoef(m[lo][common], m[hi][common])[0, 1])
        res["pairs"][f"{lo}-{hi}"] = {"diff": float(d.mean()), "se": se(d), "corr": r}
        print(f"m(S/N {lo}) - m(S/N {hi}) = {d.mean():+.4f} +- {se(d):.4f} "
              f"(per-seed correlation {r:.2f})")  # fmt: skip
    path = out if out is not None else val / "level2_snr_scan.json"
    path.write_text(json.dumps(res, indent=2) + "\n")
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return res


if __name__ == "__main__":
    main()
