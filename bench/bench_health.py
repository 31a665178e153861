"""How often a healthy program's galaxies have collapsed importance weights: the measured
rate under ``shearbatch.engine.health``'s threshold (issue 54).

A batch in which more than ``COLLAPSED_BATCH_MAX`` of the galaxies have an importance
ESS below ``COLLAPSED_ESS_DRAWS`` draws is not written (a broken program: on one H200 at
4,096 lanes every galaxy had ESS 1). This script runs, through the real CLI (``python -m
shearbatch run`` in a subprocess), a campaign at each S/N the shipped configs run the
interim (population) model at:

- ``configs/level2.yaml`` as shipped (noise S/N 45: each galaxy's own S/N spans 14-103),
  and at S/N 15 (galaxies down to S/N ~5);
- ``configs/survey_snr15.yaml``, ``survey_snr30.yaml``, ``survey_snr100.yaml`` with
  ``inference.shear_model=interim`` (their MAP joint model has no importance weights);

reads every ``convergence.json`` (``diagnostics.importance``: each galaxy's ESS fraction
and the draws; ``batch.index``) and records per campaign the galaxies, the fraction with
collapsed weights overall and in its worst batch, and the ESS fraction's quantiles. It
writes ``results/benchmarks/health.json`` (and ``health.png``); ``tests/engine/
test_health.py`` checks that every worst batch is far below the threshold.

    .venv/bin/python bench/bench_health.py            # ~10 min on the 2-core CPU
    .venv/bin/python bench/bench_health.py --smoke    # one tiny campaign (the smoke test)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

import _harness as h

#: (name, config, --set overrides, --n-realizations, --batch-size)
CAMPAIGNS = [
    ("level2_snr45", "configs/level2.yaml", [], 24, 32),
    ("level2_snr15", "configs/level2.yaml", ["image.noise.snr=15"], 24, 32),
    ("survey_snr15", "configs/survey_snr15.yaml", ["inference.shear_model=interim"], 768, 256),
    ("survey_snr30", "configs/survey_snr30.yaml", ["inference.shear_model=interim"], 768, 256),
    ("survey_snr100", "configs/survey_snr100.yaml", ["inference.shear_model=interim"], 768, 256),
]
SMOKE = [("survey_snr30", "configs/survey_snr30.yaml", ["inference.shear_model=interim"], 4, 8)]


def run_campaign(config: str, sets: list[str], n: int, batch: int, out: Path) -> float:
    """bias-run through the CLI in a subprocess; its wall time (s)."""
    cmd = [sys.executable, "-m", "shearbatch", "run", "--config", str(h.ROOT / config),
           "--n-realizations", str(n), "--base-seed", "7000", "--batch-size", str(batch),
           "--output-dir", str(out), "--no-progress"]  # fmt: skip
    for s in sets:
        cmd += ["--set", s]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=h.ROOT, capture_output=True, text=True)
    if proc.returncode not in (0, 1):  # 1: some realization failed (recorded as such)
        raise RuntimeError(f"bias-run exited {proc.returncode}: {proc.stderr[-2000:]}")
    return time.perf_counter() - t0


def measure(out: Path) -> dict[str, Any]:
    """Per-galaxy ESS (draws) and batch of every realization under ``out``."""
    from shearbatch.engine.health import COLLAPSED_ESS_DRAWS

    by_batch: dict[int, list[float]] = {}
    fracs: list[float] = []
    n_draws = None
    for conv in sorted(out.glob("*/convergence.json")):
        rec = json.loads(conv.read_text())
        imp = rec["importance"]
        n_draws = int(imp["n_draws"])
        f = [x for x in imp["ess_fraction"] if x is not None and np.isfinite(x)]
        fracs += f
        by_batch.setdefault(int(rec["batch"]["index"]), []).extend(x * n_draws for x in f)
    ess = np.asarray(fracs) * (n_draws or 0)
    worst = max(float(np.mean(np.asarray(v) < COLLAPSED_ESS_DRAWS)) for v in by_batch.values())
    return {
        "galaxies": int(ess.size),
        "batches": len(by_batch),
        "n_draws": n_draws,
        "collapsed": int(np.sum(ess < COLLAPSED_ESS_DRAWS)),
        "collapsed_fraction": float(np.mean(ess < COLLAPSED_ESS_DRAWS)),
        "worst_batch_collapsed_fraction": worst,
        "ess_fraction_quantiles": {
            str(q): float(np.quantile(ess / n_draws, q)) for q in (0.0, 0.001, 0.01, 0.1, 0.5)
        },
    }


def draw(fig: Any, res: dict[str, Any]) -> None:
    names = list(res["campaigns"])
    th = res["threshold"]
    x = np.arange(len(names))
    ax = fig.add_subplot(1, 2, 1)
    for i, (q, label) in enumerate([("0.0", "min"), ("0.001", "0.1%"), ("0.01", "1%"),
                                    ("0.1", "10%"), ("0.5", "median")]):  # fmt: skip
        ess = [res["campaigns"][n]["ess_fraction_quantiles"][q] * res["campaigns"][n]["n_draws"]
               for n in names]  # fmt: skip
        ax.plot(x, ess, "o", color=f"C{i}", label=f"{label} of galaxies")
    ax.axhline(th["collapsed_ess_draws"], color="C3", ls="--", label="collapsed below")
    ax.set_yscale("log")
    ax.set_xticks(x, names, fontsize=8)
    ax.set_ylabel("importance ESS (draws)")
    ax.legend(fontsize=7)
    ax.set_title("each galaxy's importance ESS, healthy campaigns")
    ax = fig.add_subplot(1, 2, 2)
    worst = [res["campaigns"][n]["worst_batch_collapsed_fraction"] for n in names]
    ax.plot(x, worst, "s", color="C0", label="worst batch: fraction collapsed")
    for i, n in enumerate(names):
        c = res["campaigns"][n]
        ax.annotate(f"{c['collapsed']} of {c['galaxies']}\n({c['batches']} batches)", (i, 0.02),
                    ha="center", fontsize=7)  # fmt: skip
    ax.axhline(th["collapsed_batch_max"], color="C3", ls="--", label="the engine stops above")
    ax.set_ylim(-0.02, 1.0)
    ax.set_xticks(x, names, fontsize=8)
    ax.set_ylabel(f"fraction of a batch's galaxies with ESS < {th['collapsed_ess_draws']:g}")
    ax.legend(fontsize=7, loc="upper right")
    ax.set_title("collapsed weights per batch")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = h.parser(__doc__, "health", repeats=1)
    ap.add_argument("--smoke", action="store_true", help="one tiny campaign")
    args = ap.parse_args(argv)
    from shearbatch.engine.health import COLLAPSED_BATCH_MAX, COLLAPSED_ESS_DRAWS

    info = h.provenance("float64")
    h.banner(info)
    table = h.Table([("campaign", "14s"), ("galaxies", "9d"), ("collapsed", "10d"),
                     ("fraction", "9.2e"), ("worst_batch", "12.2e"), ("ess_med", "8.3f"),
                     ("wall_s", "7.1f")])  # fmt: skip
    campaigns: dict[str, Any] = {}
    env = {**os.environ, "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu")}
    os.environ.update(env)
    with tempfile.TemporaryDirectory(prefix="bench_health_") as tmp:
        for name, config, sets, n, batch in SMOKE if args.smoke else CAMPAIGNS:
            out = Path(tmp) / name
            wall = run_campaign(config, sets, n, batch, out)
            rec = measure(out)
            rec.update(config=config, set=sets, n_realizations=n, batch_size=batch, wall_s=wall)
            campaigns[name] = rec
            table.row(name, rec["galaxies"], rec["collapsed"], rec["collapsed_fraction"],
                      rec["worst_batch_collapsed_fraction"],
                      rec["ess_fraction_quantiles"]["0.5"], wall)  # fmt: skip
    worst = max(c["worst_batch_collapsed_fraction"] for c in campaigns.values())
    res = {"info": info, "settings": h.settings(args), "campaigns": campaigns,
           "threshold": {"collapsed_ess_draws": COLLAPSED_ESS_DRAWS,
                         "collapsed_batch_max": COLLAPSED_BATCH_MAX},
           "worst_batch_collapsed_fraction": worst}  # fmt: skip
    print(
        f"worst healthy batch: {worst:.3g} of its galaxies collapsed; the engine stops "
        f"above {COLLAPSED_BATCH_MAX:g}"
    )
    return h.write_json(res, args.out, draw=draw)


if __name__ == "__main__":
    main()
