"""A campaign on a real SLURM: time from ``sbatch`` to a finished, analysed campaign.

Needs a running SLURM whose jobs can reach this interpreter (``ci/start_slurm.sh``
starts a single-node one). What a user does, step by step:

1. ``bias-run ... --emit-sbatch camp.sbatch --sbatch-tasks 4 --sbatch-throttle 2``
   for a 16-realization Level 0 MAP campaign (4 grid points x 4 seeds, 16x16
   stamps, batch 4, float64), with the compilation cache under the campaign's
   output root (empty at the start);
2. ``sbatch camp.sbatch`` and ``sbatch --dependency=afterany:<array> camp-stats.sbatch``
   (``bias-extract`` + ``bias-stats``); wait for both by polling ``squeue``;
3. the same campaign in one process (same lanes, same cache), and in one process
   with two CPU devices (``XLA_FLAGS=--xla_force_host_platform_device_count=2``),
   each extracted and analysed the same way, for comparison.

Records the wall time from the first ``sbatch`` to the end of the array and of
the stats job, each task's persistent-cache hits and misses, and whether the
array's and the two-device process's ``bias_results.json`` equal the single
process's. Prints them and writes
``results/benchmarks/slurm.json``::

    .venv/bin/python bench/bench_slurm.py [--tasks 4] [--throttle 2]

``tests/top/test_slurm_cluster.py`` (the ``slurm`` tier) runs :func:`run` and asserts
on its record.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

import _harness as h

GRID = ("-0.05", "-0.02", "0.02", "0.05")
BIN = Path(sys.executable).parent


def config(path: Path, stamp: int) -> Path:
    """configs/level0.yaml with ``stamp`` x ``stamp`` stamps and a 0.3\" galaxy, at ``path``."""
    raw = yaml.safe_load((h.ROOT / "configs" / "level0.yaml").read_text())
    raw["image"].update(size_x=stamp, size_y=stamp)
    raw["gal"]["half_light_radius"] = 0.3
    path.write_text(yaml.safe_dump(raw))
    return path


def _sh(cmd: list[str], env: dict[str, str], ok=(0,)) -> subprocess.CompletedProcess:
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if out.returncode not in ok:
        raise RuntimeError(f"{' '.join(cmd[:2])}... exit {out.returncode}:\n{out.stderr[-3000:]}")
    return out


def _wait(job_ids: list[str], timeout: float) -> dict[str, float]:
    """Poll squeue until each job has left it; ``{job id: seconds since the call}``."""
    t0, done = time.perf_counter(), {}
    while len(done) < len(job_ids):
        if time.perf_counter() - t0 > timeout:
            raise TimeoutError(f"SLURM jobs {job_ids} not finished after {timeout:.0f} s")
        for j in job_ids:
            if j not in done:
                q = subprocess.run(["squeue", "-h", "-j", j], capture_output=True, text=True)
                if q.returncode == 0 and not q.stdout.strip():
                    done[j] = time.perf_counter() - t0
        time.sleep(0.25)
    return done


def _task_records(log_dir: Path) -> list[dict[str, Any]]:
    """Per array task, from its log: slice, cache hits/misses, realizations written."""
    recs = []
    for log in sorted(log_dir.glob("*_*_*.out")):
        text = log.read_text()
        task = re.search(r"array task (\d+) of (\d+) takes (\d+)", text)
        cache = re.search(r"persistent compilation cache: (\d+) hit\(s\), (\d+) miss", text)
        lock = re.search(r"compile lock \(waited ([\d.]+) s\)", text)
        wrote = re.search(r"wrote (\d+) ok, (\d+) failed", text)
        stamps = re.findall(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),\d+", text, re.M)
        span = None
        if len(stamps) >= 2:
            fmt = "%Y-%m-%d %H:%M:%S"
            span = time.mktime(time.strptime(stamps[-1], fmt)) - time.mktime(
                time.strptime(stamps[0], fmt)
            )
        recs.append({
            "log": log.name.split("_", 1)[1],
            "task": int(task.group(1)) if task else None,
            "takes": int(task.group(3)) if task else None,
            "cache_hits": int(cache.group(1)) if cache else None,
            "cache_misses": int(cache.group(2)) if cache else None,
            "lock_wait_s": float(lock.group(1)) if lock else None,
            "ok": int(wrote.group(1)) if wrote else None,
            "failed": int(wrote.group(2)) if wrote else None,
            "logged_span_s": span,
        })  # fmt: skip
    return recs


def _numbers(res: dict[str, Any]) -> dict[str, Any]:
    """The estimates of a bias_results.json: m, c, errors, coverage, verdict."""
    keep = ("m1", "m2", "c1", "c2", "m1_err", "m2_err", "c1_err", "c2_err", "n_used",
            "n_realizations", "coverage", "verdict", "fits")  # fmt: skip
    return {k: res.get(k) for k in keep}


def run(work: Path, *, tasks: int = 4, throttle: int = 2, stamp: int = 16,
        n_realizations: int = 4, batch_size: int = 4, timeout: float = 1200) -> dict[str, Any]:  # fmt: skip
    """Emit, submit and wait for the campaign under ``work``, then the single-process run."""
    env = {k: v for k, v in os.environ.items() if k != "SHEARBATCH_CACHE_DIR"}
    env["PATH"] = f"{BIN}:/usr/sbin:{env.get('PATH', '/usr/bin:/bin')}"
    cfg = config(work / "tiny.yaml", stamp)
    camp = work / "camp"
    run_args = ["--config", str(cfg), "--shear-grid", *GRID, "--n-realizations",
                str(n_realizations), "--batch-size", str(batch_size), "--x64"]  # fmt: skip
    script = work / "camp.sbatch"
    _sh([str(BIN / "bias-run"), *run_args, "--output-dir", str(camp), "--emit-sbatch",
         str(script), "--sbatch-tasks", str(tasks), "--sbatch-throttle", str(throttle),
         "--sbatch-time", "00:30:00"], env)  # fmt: skip
    stats_script = work / "camp-stats.sbatch"
    t0 = time.perf_counter()
    array = _sh(["sbatch", "--parsable", str(script)], env).stdout.strip().split(";")[0]
    stats = _sh(["sbatch", "--parsable", f"--dependency=afterany:{array}", str(stats_script)],
                env).stdout.strip().split(";")[0]  # fmt: skip
    submitted = time.perf_counter() - t0
    done = _wait([array, stats], timeout)
    rec: dict[str, Any] = {
        "campaign": {"realizations": len(GRID) * n_realizations, "tasks": tasks,
                     "throttle": throttle, "batch_size": batch_size, "stamp": stamp,
                     "method": "map", "dtype": "float64"},
        "sbatch_to_array_done_s": submitted + done[array],
        "sbatch_to_stats_done_s": submitted + done[stats],
        "tasks": _task_records(camp / "logs"),
        "script": script.read_text(),
        "stats_script": stats_script.read_text(),
    }  # fmt: skip
    summary = camp / "summary.csv"
    rows = []
    if summary.is_file():
        with summary.open() as fh:
            rows = list(csv.DictReader(fh))
    rec["summary_rows"], rec["summary_ok"] = len(rows), sum(r["status"] == "ok" for r in rows)
    res_path = camp / "stats" / "bias_results.json"
    array_res = json.loads(res_path.read_text()) if res_path.is_file() else None

    # the same campaign in one process (same lanes; the array's cache), then in one
    # process with two (CPU) devices: every lane count split over them
    for name, extra_env in (("single", {}),
                            ("multi_device",
                             {"XLA_FLAGS": "--xla_force_host_platform_device_count=2",
                              "SHEARBATCH_CPU_LANE_SPLIT": "1"})):  # fmt: skip
        out = work / name
        e = {**env, **extra_env}
        t1 = time.perf_counter()
        ran = _sh([str(BIN / "bias-run"), *run_args, "--output-dir", str(out), "--no-progress",
                   "--cache-dir", str(camp / ".jax-cache")], e)  # fmt: skip
        _sh([str(BIN / "bias-extract"), "--input-dir", str(out), "--output",
             str(out / "summary.csv"), "--no-progress"], e)  # fmt: skip
        _sh([str(BIN / "bias-stats"), "--input", str(out / "summary.csv"), "--output-dir",
             str(out / "stats"), "--level", "level_0", "--posterior-dir", str(out)], e,
            ok=(0, 1, 3))  # fmt: skip
        rec[f"{name}_process_s"] = time.perf_counter() - t1
        rec[f"{name}_devices"] = re.findall(r"JAX \S+ on (\S+ x\d+)", ran.stderr)[:1]
        rec[f"{name}_results"] = _numbers(
            json.loads((out / "stats" / "bias_results.json").read_text())
        )
    rec["array_results"] = _numbers(array_res) if array_res else None
    rec["results_identical"] = rec["array_results"] == rec["single_results"]
    rec["multi_device_identical"] = rec["multi_device_results"] == rec["single_results"]
    return rec


def draw(fig, rec: dict) -> None:
    """Per array task: cache misses, lock wait and logged span; wall times of the array."""
    ax, bx = fig.subplots(1, 2)
    tasks = rec["tasks"]
    x = [t["task"] for t in tasks]
    ax.bar([i - 0.2 for i in x], [t["lock_wait_s"] for t in tasks], 0.4, label="compile-lock wait")
    ax.bar([i + 0.2 for i in x], [t["logged_span_s"] for t in tasks], 0.4, label="logged span")
    for i, t in zip(x, tasks, strict=True):
        ax.annotate(
            f"{t['cache_misses']} miss(es)\n{t['cache_hits']} hit(s)",
            (i, 0),
            xytext=(0, 4),
            textcoords="offset points",
            ha="center",
            fontsize=7,
        )
    ax.set_xticks(x, [f"task {i}" for i in x])
    ax.set_ylabel("seconds")
    ax.set_title("array tasks: the first compiles, the others read the cache", fontsize=10)
    ax.legend(fontsize=8)
    c = rec["campaign"]
    names = ["sbatch ->\narray done", "sbatch ->\nstats done", "one process\n(cache warm)"]
    vals = [rec["sbatch_to_array_done_s"], rec["sbatch_to_stats_done_s"], rec["single_process_s"]]
    if rec.get("multi_device_process_s") is not None:
        names.append("one process,\n2 devices")
        vals.append(rec["multi_device_process_s"])
    bx.bar(names, vals, color=["C0", "C1", "C2", "C3"][: len(vals)])
    bx.set_ylabel("seconds")
    bx.set_title(f"{c['realizations']} realizations over {c['tasks']} tasks (throttle "
                 f"{c['throttle']}), local single-node SLURM", fontsize=10)  # fmt: skip


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = h.parser(__doc__, "slurm", repeats=1)
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--throttle", type=int, default=2)
    ap.add_argument("--keep", action="store_true", help="keep the working directory")
    args = ap.parse_args(argv)
    if shutil.which("sbatch", path=f"/usr/sbin:{os.environ.get('PATH', '')}") is None:
        raise SystemExit("bench_slurm: sbatch not found (start a local SLURM: ci/start_slurm.sh)")
    info = h.provenance("float64")
    h.banner(info)
    info["slurm"] = subprocess.run(["sinfo", "-V"], capture_output=True, text=True).stdout.strip()
    # a directory the SLURM jobs can write (they run as the submitting user)
    work = Path(tempfile.mkdtemp(prefix="bench_slurm_"))
    try:
        rec = run(work, tasks=args.tasks, throttle=args.throttle)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    rec["script"] = rec["script"].replace(str(work), "<work>").replace(str(h.ROOT), "<repo>")
    rec["stats_script"] = rec["stats_script"].replace(str(work), "<work>")
    rec["script"] = re.sub(r"source \S+/bin/activate", "source <venv>/bin/activate", rec["script"])
    rec["stats_script"] = re.sub(
        r"source \S+/bin/activate", "source <venv>/bin/activate", rec["stats_script"]
    )
    print(f"sbatch -> array done: {rec['sbatch_to_array_done_s']:.1f} s; -> stats done: "
          f"{rec['sbatch_to_stats_done_s']:.1f} s; single process (cache warm): "
          f"{rec['single_process_s']:.1f} s; two devices: {rec['multi_device_process_s']:.1f} s")  # fmt: skip
    for t in rec["tasks"]:
        print(f"  task {t['task']}: {t['takes']} realizations, cache {t['cache_hits']} hit(s) "
              f"{t['cache_misses']} miss(es), lock wait {t['lock_wait_s']} s, "
              f"logged span {t['logged_span_s']} s")  # fmt: skip
    print(f"bias_results.json identical to the single process's: {rec['results_identical']}; "
          f"two-device process ({rec['multi_device_devices']}) identical: "
          f"{rec['multi_device_identical']}")  # fmt: skip
    return h.write_json({"info": info, "settings": h.settings(args), **rec}, args.out, draw=draw)


if __name__ == "__main__":
    main()
