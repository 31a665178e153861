"""AnaCal (FPFS) beside the forward model on one campaign (issue 45): run -> extract ->
stats through the real CLI, then a record of both estimators under results/validation/.

    nice -n 15 .venv/bin/python bench/validate_anacal.py --config configs/level2.yaml \\
        --name anacal_level2_2d --grid -0.02 0.02 --grid-g2 -0.02 0.02 --n 40

writes ``results/validation/<name>/validation.json``: the command, the commit (``git``:
HEAD and the tracked files modified), the machine,
each stage's wall time, the forward model's verdict and bias_results.json's ``estimators``
section (each estimator's m1, m2, c1, c2 with errors, verdict and cost per galaxy, and
the differences with their paired jackknife errors), plus a copy of bias_results.json
and the printed summary. Every figure quoted in docs/validation.md for this comparison
must come from such a record.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

from _harness import git_state

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _run(cmd: list[str]) -> tuple[float, str, int]:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    return time.perf_counter() - t0, p.stdout + p.stderr, p.returncode


def main(argv: list[str] | None = None) -> Path:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--grid", nargs="+", default=["0.02"])
    ap.add_argument("--grid-g2", nargs="*", default=None)
    ap.add_argument("--n", type=int, default=20, help="seeds per grid point")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--work", default=None, help="campaign directory (default: /tmp/<name>)")
    ap.add_argument("--out-dir", default=None,
                    help="the record's folder, relative to the repository root "
                         "(default: results/validation/<name>)")  # fmt: skip
    ap.add_argument("--requirement", default=None)
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="bias-run --set (repeatable): a config override, e.g. image.n_objects=1",
    )
    a = ap.parse_args(argv)
    work = Path(a.work or f"/tmp/{a.name}")
    out = ROOT / a.out_dir if a.out_dir else ROOT / "results" / "validation" / a.name
    out.mkdir(parents=True, exist_ok=True)
    run = [str(BIN / "bias-run"), "--config", a.config, "--estimators", "anacal",
           "--shear-grid", *a.grid, "--n-realizations", str(a.n), "--batch-size",
           str(a.batch_size), "--output-dir", str(work / "runs"), "--no-progress"]  # fmt: skip
    if a.grid_g2:
        run += ["--shear-grid-g2", *a.grid_g2]
    for kv in a.set:
        run += ["--set", kv]
    extract = [str(BIN / "bias-extract"), "--input-dir", str(work / "runs"), "--output",
               str(work / "summary.csv"), "--no-progress"]  # fmt: skip
    stats = [str(BIN / "bias-stats"), "--input", str(work / "summary.csv"), "--output-dir",
             str(work / "stats"), "--report", str(work / "report.html")]  # fmt: skip
    if a.requirement:
        stats += ["--requirement", a.requirement]
    git = git_state()  # the code that runs the campaign: HEAD and modified files at the start
    times, printed, exits = {}, "", {}
    for stage, cmd in (("run", run), ("extract", extract), ("stats", stats)):
        times[stage], text, exits[stage] = _run(cmd)
        if stage == "stats":
            printed = text
            if exits[stage] not in (0, 1, 3):  # 0 PASS, 1 FAIL, 3 INCONCLUSIVE: a verdict
                raise SystemExit(f"stats failed (exit {exits[stage]}):\n{text[-3000:]}")
        # bias-run's exit 1: some realizations failed (recorded failed, counted by the stats)
        elif exits[stage] not in ((0, 1) if stage == "run" else (0,)):
            raise SystemExit(f"{stage} failed (exit {exits[stage]}):\n{text[-3000:]}")
    res = json.loads((work / "stats" / "bias_results.json").read_text())
    record = {
        "name": a.name, "script": "bench/validate_anacal.py",
        "command": " ".join(["python", "bench/validate_anacal.py", *(argv or sys.argv[1:])]),
        "stages": {"run": run, "extract": extract, "stats": stats},
        "wall_s": times, "exit": exits, "commit": git["commit"], "git": git,
        "machine": {"host": platform.node(), "cpu": platform.processor(),
                    "cores": len(__import__("os").sched_getaffinity(0))},
        "forward_model": {k: res.get(k) for k in ("estimator", "point_estimate", "m1", "m1_err",
                                                  "m2", "m2_err", "c1", "c1_err", "c2",
                                                  "c2_err", "verdict", "n_used", "n_seeds")},
        "estimators": res.get("estimators"),
    }  # fmt: skip
    path = out / "validation.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    shutil.copy(work / "stats" / "bias_results.json", out / "bias_results.json")
    (out / "printed.txt").write_text(printed)
    print(path)
    return path


if __name__ == "__main__":
    main()
