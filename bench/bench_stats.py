"""Benchmark ``bias-stats --input <campaign root>`` on an interim-model (Level 2) campaign.

The whole command as a user runs it, in a child process: extraction (every realization
read, its population fit, summary.csv and the population sidecar), the pooled fit per grid
point, the figures and report.html. Measured per repeat: wall time, the peak resident
memory of the largest process (``getrusage`` of the waited child: the main process, the
reader processes being smaller) and of the whole process tree (``/proc`` sampled every
50 ms), and the stages, from the arrival time of the lines the command prints:

- startup: imports and checks, until ``found N realization directories``;
- extraction: until ``extracted ... summary.csv``;
- fit: the analysis (summary and sidecar read back, the pooled fit, the jackknife) and the
  figures, until the ``requirement ...`` line;
- report: the HTML report (provenance, stamps), until the end;

and the size of the population sidecar it wrote (the pooled fit's input: float32 draws).

Each repeat first removes the campaign's summary.csv and sidecar, so bias-stats extracts.
The campaign is made once, outside the repository, niced (not timed)::

    nice -n 10 .venv/bin/bias-run --config configs/level2.yaml --n-realizations 250 \\
        --output-dir /tmp/l2_1000 --no-progress      # 1,000 realizations of 32 galaxies

    .venv/bin/python bench/bench_stats.py --root /tmp/l2_1000 [--label after]
    # another checkout's code (e.g. `git worktree add /tmp/base <commit>`):
    .venv/bin/python bench/bench_stats.py --root /tmp/l2_1000 --src /tmp/base/src --label before

A child whose process tree exceeds ``--rss-cap-gb`` is killed and recorded as such (the
machine is shared). Writes ``results/benchmarks/stats.json`` (one entry per label, the
others kept); target: 1,000 Level 2 realizations in at most 60 s on the 2-core CPU.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import _harness as h

TARGET_S = 60.0  # for 1,000 Level 2 realizations (32,000 galaxies) on the 2-core CPU
MARKS = {  # stage -> the first output line that ends it
    "startup": re.compile(r"found \d+ realization directories"),
    "extraction": re.compile(r"^extracted "),
    "fit": re.compile(r"^requirement "),
}


def _tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and its descendants (``/proc``)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/status") as fh:
                for line in fh:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
                        break
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    todo += [int(c) for c in fh.read().split()]
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return total


def run_once(root: Path, src: Path | None, cap: float) -> dict:
    for name in ("summary.csv", "summary.population.npz"):
        (root / name).unlink(missing_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if src is not None:
        env["PYTHONPATH"] = str(src) + os.pathsep + env.get("PYTHONPATH", "")
    exe = Path(sys.executable).parent / "bias-stats"
    t0 = time.perf_counter()
    child = subprocess.Popen([str(exe), "--input", str(root)], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, env=env,
                             start_new_session=True)  # fmt: skip
    peak, killed, stop = [0], [False], threading.Event()

    def sample() -> None:
        while not stop.wait(0.05):
            rss = _tree_rss(child.pid)
            peak[0] = max(peak[0], rss)
            if rss > cap * 2**30 and not killed[0]:
                killed[0] = True
                os.killpg(child.pid, signal.SIGKILL)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    marks, lines = {}, []
    assert child.stdout is not None
    for line in child.stdout:
        now = time.perf_counter() - t0
        lines.append(line.rstrip())
        for stage, pat in MARKS.items():
            if stage not in marks and pat.search(line.split(" INFO ")[-1]):
                marks[stage] = now
    child.stdout.close()
    _, status, usage = os.wait4(child.pid, 0)  # the child's own peak (and its waited ones)
    wall = time.perf_counter() - t0
    child.returncode = rc = os.waitstatus_to_exitcode(status)
    stop.set()
    th.join()
    ends = [marks.get("startup"), marks.get("extraction"), marks.get("fit"), wall]
    stages, last = {}, 0.0
    for name, end in zip(("startup_s", "extraction_s", "fit_s", "report_s"), ends, strict=True):
        stages[name] = None if end is None else round(end - last, 2)
        last = end if end is not None else last
    sidecar = root / "summary.population.npz"
    found = next((ln for ln in lines if MARKS["startup"].search(ln)), "")
    n_dirs = int(re.search(r"found (\d+)", found).group(1)) if found else None
    pop = next((ln.strip() for ln in lines if "population estimator pooled" in ln), None)
    return {
        "exit_code": rc,
        "killed_at_rss_cap": killed[0],
        "wall_s": round(wall, 2),
        **stages,
        "peak_rss_main_mb": round(usage.ru_maxrss / 1024, 1),
        "peak_rss_tree_mb": round(peak[0] / 2**20, 1),
        "sidecar_mb": round(sidecar.stat().st_size / 2**20, 1) if sidecar.is_file() else None,
        "n_dirs": n_dirs,
        "population_line": pop,
        "m1_line": next((ln.strip() for ln in lines if ln.strip().startswith("m1 =")), None),
        "tail": lines[-3:] if rc not in (0, 1, 3) else [],
    }


def _commit_of(src: Path | None) -> str | None:
    """The commit of the checkout whose code ran (``--src``, else this one)."""
    where = h.ROOT if src is None else src
    try:
        out = subprocess.run(["git", "-C", str(where), "rev-parse", "HEAD"], check=True,
                             capture_output=True, text=True)  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip()


def draw(fig, rec: dict) -> None:
    """Wall time by stage per label against the target, and the peak memory."""
    runs = rec["runs"]
    labels = list(runs)
    ax, ax2 = fig.subplots(1, 2)
    bottom = [0.0] * len(labels)
    for i, stage in enumerate(("startup_s", "extraction_s", "fit_s", "report_s")):
        vals = [runs[lb]["median"].get(stage) or 0.0 for lb in labels]
        ax.bar(labels, vals, bottom=bottom, color=f"C{i}", label=stage[:-2])
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    ax.axhline(TARGET_S, color="C3", ls="--", label=f"target {TARGET_S:g} s")
    ax.set_ylabel("seconds (median)")
    ax.set_title(f"bias-stats --input: {rec['n_realizations']} Level 2 realizations", fontsize=10)
    ax.legend(fontsize=8)
    x = range(len(labels))
    for i, (key, name) in enumerate((("peak_rss_main_mb", "main process"),
                                     ("peak_rss_tree_mb", "process tree"))):  # fmt: skip
        ax2.bar([v + 0.4 * (i - 0.5) for v in x], [runs[lb]["median"][key] or 0 for lb in labels],
                width=0.4, color=f"C{5 + i}", label=name)  # fmt: skip
    side = [runs[lb]["median"].get("sidecar_mb") for lb in labels]
    if any(side):
        ax2.axhline(max(v for v in side if v), color="C3", ls="--",
                    label="the pooled fit's input (the sidecar's draws)")  # fmt: skip
    ax2.set_xticks(list(x), labels)
    ax2.set_ylabel("peak RSS (MB, median)")
    ax2.set_title("memory", fontsize=10)
    ax2.legend(fontsize=8)


def main(argv: list[str] | None = None) -> dict:
    ap = h.parser(__doc__, "stats", repeats=1)
    ap.add_argument("--root", type=Path, required=True, help="the campaign root")
    ap.add_argument("--src", type=Path, default=None, help="PYTHONPATH for another checkout")
    ap.add_argument("--label", default="after", help="this run's name in the record")
    ap.add_argument("--rss-cap-gb", type=float, default=8.0, help="kill the run above this")
    args = ap.parse_args(argv)
    info = h.provenance(None)
    h.banner(info)
    table = h.Table([("label", "8s"), ("wall_s", "7.1f"), ("startup", "7.1f"),
                     ("extract", "7.1f"), ("fit", "6.1f"), ("report", "6.1f"),
                     ("rss_main", "8.0f"), ("rss_tree", "8.0f"), ("load", "5.2f")])  # fmt: skip
    reps = []
    for _ in range(args.repeats):
        r = run_once(args.root, args.src, args.rss_cap_gb)
        reps.append(r)
        table.row(args.label, r["wall_s"], r["startup_s"], r["extraction_s"], r["fit_s"],
                  r["report_s"], r["peak_rss_main_mb"], r["peak_rss_tree_mb"],
                  os.getloadavg()[0])  # fmt: skip
        if r["tail"]:
            print("\n".join(r["tail"]))
    keys = [k for k in reps[0] if k.endswith("_s") or k.endswith("_mb")]
    med = {k: (h.median([r[k] for r in reps if r[k] is not None])
               if any(r[k] is not None for r in reps) else None) for k in keys}  # fmt: skip
    out = Path(args.out)
    rec = json.loads(out.read_text()) if out.is_file() else {}
    if not isinstance(rec.get("runs"), dict):
        rec["runs"] = {}
    man = json.loads((args.root / "campaign.json").read_text())
    rec.update({
        "benchmark": "bias-stats --input <campaign root> (extraction, pooled fit, figures, "
                     "report), whole process",
        "config": "configs/level2.yaml (interim model, MAP + 1000 Laplace draws per galaxy)",
        "n_realizations": man["plan"]["n_planned"],
        "n_galaxies": man["plan"]["n_planned"] * man["config"]["image"]["n_objects"],
        "target_s": TARGET_S,
    })  # fmt: skip
    rec["runs"][args.label] = {
        "median": med,
        "passed": bool(med["wall_s"] is not None and med["wall_s"] <= TARGET_S
                       and all(r["exit_code"] in (0, 1, 3) for r in reps)),
        "repeats": reps,
        "code": "this checkout" if args.src is None else f"--src {args.src.name}",
        "code_commit": _commit_of(args.src),
        **info,
    }  # fmt: skip
    rec["settings"] = h.settings(args)
    rec["info"] = info  # the last label's run: its machine, load and checkout (runs.*.code)
    return h.write_json(rec, out, draw=draw)


if __name__ == "__main__":
    main()
