"""A later process's first batch against a warm batch: the cold start without re-tracing.

What a resumed campaign or a SLURM array task does, as a user runs it: ``bias-run
--config configs/level2.yaml`` (``--config``) in a first process, ``--n-realizations``
``--first-n`` (8: 32 images, 2 batches of ``--batch-size`` 16), into a fresh output
root (compilation cache under it, empty at the start); then a second process on the
same root with ``--second-n`` (24: the 32 complete images are skipped, 64 new ones, 4
batches). From each process's log (its time stamps and the lines ``batch k/n: ... in T s
(simulation S s, inference I s)``):

- ``setup_s``: JAX configured -> the first batch starts (the engine's ``campaign:`` line).
  The engine compiles its program ahead of the first batch (for the memory check), so
  the trace, lowering and compile that the issue measured inside the first batch's
  "inference" happen here;
- ``first_inference_s`` = ``setup_s`` + the first batch's inference, against
  ``warm_inference_s`` (the median of the later batches'), and their ratio (target for
  the second process: at most 1.5; the issue measured 12.9 s against 5.3 s, 2.4x);
- the first batch's simulation and other host work (``T - S - I``: the residual check,
  the records) against a warm batch's; JAX configured -> batch 1 done against a warm
  batch's wall; the process's wall time, its persistent-cache hits and misses, and the
  exported programs it wrote or loaded (``shearbatch/engine/exported.py``).

Both modes, each in its own fresh root, ``--repeats`` times (medians; the order of the
modes alternates between repeats, against the drifts of a shared machine's load):

- ``before``: ``SHEARBATCH_EXPORT=off``, every process traces its programs (the
  persistent compilation cache only saves the XLA compile);
- ``after``: the default, a later process loads the first one's exported programs.

The package run is a snapshot of HEAD's ``src/`` (``git archive``, first on
``PYTHONPATH``; ``--no-snapshot``: the working tree's), so that edits of a shared working
tree during the run, which change every program's key (the key hashes the package's
source), do not make a second process export again.

Prints the figures and writes ``results/benchmarks/cold_start.json`` and ``.png``::

    .venv/bin/python bench/bench_cold_start.py [--repeats 1] [--first-n 8] [--second-n 24]
"""

from __future__ import annotations

import math
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import _harness as h

BIN = Path(sys.executable).parent
MODES = {"before": "off", "after": "on"}
_BATCH = re.compile(r"batch (\d+)/(\d+): (\d+) realization\(s\) in ([\d.]+) s \(simulation "
                    r"([\d.]+) s, inference ([\d.]+) s[,)]")  # fmt: skip
_CACHE = re.compile(r"persistent compilation cache: (\d+) hit\(s\), (\d+) miss\(es\)")
_STAMP = r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) "


def _time(log: str, pattern: str) -> float | None:
    """The log time (s) of the first line matching ``pattern``, or None."""
    m = re.search(_STAMP + r".*" + pattern, log, re.M)
    if m is None:
        return None
    return datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()


def parse(log: str) -> dict[str, Any]:
    """The figures of one bias-run process from its log.

    ``setup_s``: from JAX configured (``runtime``'s line) to the engine's ``campaign:``
    line, logged just before its first batch: the programs built, traced or loaded and
    compiled ahead for the memory check (and the manifest and claims, ~0.1 s); the trace
    that the issue measured inside the first batch's "inference" is here now.
    ``first_inference_s``: ``setup_s`` + the first batch's inference (the issue's
    measure), against ``warm_inference_s``, a warm batch's median. The first batch's
    wall and other host work are taken from the time stamps (``campaign:`` -> ``batch
    1/``), whether or not the engine counts its set-up in the first batch's logged time."""
    batches = [{"index": int(m[1]), "of": int(m[2]), "n": int(m[3]), "wall_s": float(m[4]),
                "simulation_s": float(m[5]), "inference_s": float(m[6])}
               for m in _BATCH.finditer(log)]  # fmt: skip
    for b in batches:
        b["other_s"] = max(b["wall_s"] - b["simulation_s"] - b["inference_s"], 0.0)
    cache = _CACHE.search(log)
    rec: dict[str, Any] = {
        "batches": batches,
        "cache_hits": int(cache[1]) if cache else None,
        "cache_misses": int(cache[2]) if cache else None,
        "exported": len(re.findall(r": traced in [\d.]+ s and exported", log)),
        "loaded": len(re.findall(r": loaded the program exported by an earlier process", log)),
        "fallbacks": len(re.findall(r"traced with jit instead", log)),
    }
    # the loggers' names since the engine's modules moved (shearbatch.engine.runtime and
    # .loop), and before (shearbatch.runtime and shearbatch.engine: an older commit's log)
    t_cfg = _time(log, r"shearbatch(\.engine)?\.runtime: JAX ")
    t_loop = _time(log, r"shearbatch\.engine(\.loop)?: campaign: \d+ realizations")
    t_b1 = _time(log, r"shearbatch\.engine(\.loop)?: batch 1/")
    if batches and None not in (t_cfg, t_loop, t_b1):
        first, warm = batches[0], batches[1:]
        rec["setup_s"] = t_loop - t_cfg
        rec["to_first_batch_s"] = t_b1 - t_cfg
        rec["batch1_inference_s"] = first["inference_s"]
        rec["first_inference_s"] = rec["setup_s"] + first["inference_s"]
        rec["first_simulation_s"] = first["simulation_s"]
        # from the time stamps: the engine may count its set-up in the first batch's wall
        rec["first_wall_s"] = t_b1 - t_loop
        rec["first_other_s"] = max(rec["first_wall_s"] - first["simulation_s"]
                                   - first["inference_s"], 0.0)  # fmt: skip
        for k in ("inference_s", "simulation_s", "other_s", "wall_s"):
            rec[f"warm_{k}"] = h.median([b[k] for b in warm]) if warm else None
        if warm and rec["warm_inference_s"] > 0:  # (0.00 s: a program too small to time)
            rec["first_over_warm_inference"] = rec["first_inference_s"] / rec["warm_inference_s"]
        if warm and rec["warm_wall_s"] > 0:
            rec["first_over_warm_wall"] = rec["to_first_batch_s"] / rec["warm_wall_s"]
    return rec


def snapshot(work: Path) -> tuple[Path, str]:
    """``HEAD``'s ``src/`` unpacked under ``work`` (``git archive``) and HEAD's commit."""
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=h.ROOT, check=True,
                            capture_output=True, text=True).stdout.strip()  # fmt: skip
    work.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "archive", commit, "src"], cwd=h.ROOT, check=True,
                             capture_output=True).stdout  # fmt: skip
    subprocess.run(["tar", "-x", "-C", str(work)], input=archive, check=True)
    return work / "src", commit


def bias_run(config: Path, root: Path, n: int, batch: int, export: str,
             src: Path | None = None) -> dict[str, Any]:  # fmt: skip
    """One bias-run process into ``root`` (the package from ``src`` when given); its
    parsed log, wall time and exit status."""
    env = {k: v for k, v in os.environ.items() if k != "SHEARBATCH_CACHE_DIR"}
    env["SHEARBATCH_EXPORT"] = export
    if src is not None:  # first on the path: before the editable install's source
        env["PYTHONPATH"] = os.pathsep.join([str(src), *filter(None, [env.get("PYTHONPATH")])])
    cmd = [str(BIN / "bias-run"), "--config", str(config), "--n-realizations", str(n),
           "--batch-size", str(batch), "--output-dir", str(root), "--no-progress"]  # fmt: skip
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    rec = {"process_s": wall, "process_cpu_s": cpu, "returncode": out.returncode,
           **parse(out.stderr)}  # fmt: skip
    # exit 1: some realization failed, written all the same; anything else, or no batch, is
    # a failed run (a traceback also exits 1)
    if out.returncode not in (0, 1) or not rec["batches"]:
        raise RuntimeError(f"bias-run exit {out.returncode}:\n{out.stderr[-3000:]}")
    return rec


def pair(config: Path, args, export: str, src: Path | None = None) -> dict[str, Any]:
    """A first process and a second one resuming it (a larger n) in a fresh root."""
    work = Path(tempfile.mkdtemp(prefix="bench_cold_start_"))
    try:
        first = bias_run(config, work / "camp", args.first_n, args.batch_size, export, src)
        second = bias_run(config, work / "camp", args.second_n, args.batch_size, export, src)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"first_process": first, "second_process": second}


def reused(run: dict[str, Any]) -> bool:
    """Whether a pair's second process traced nothing that its first had stored (an edit of
    the package's source between the two, on a shared working tree, changes every key)."""
    return run["second_process"]["exported"] == 0


def summary(runs: list[dict[str, Any]], export: bool) -> dict[str, Any]:
    """Medians over the repeats of each process's headline figures (with export on: over
    the pairs whose second process reused the first's programs, :func:`reused`)."""
    out: dict[str, Any] = {"pairs": len(runs)}
    if export:
        out["pairs_reused"] = sum(map(reused, runs))
        runs = [r for r in runs if reused(r)] or runs
    for proc in ("first_process", "second_process"):
        recs = [r[proc] for r in runs]
        keys = ("setup_s", "batch1_inference_s", "first_inference_s", "warm_inference_s",
                "first_over_warm_inference", "first_simulation_s", "warm_simulation_s",
                "first_other_s", "warm_other_s", "first_wall_s", "warm_wall_s",
                "to_first_batch_s", "first_over_warm_wall", "process_s",
                "process_cpu_s")  # fmt: skip
        vals = {k: [r[k] for r in recs if r.get(k) is not None] for k in keys}
        out[proc] = {k: h.median(v) for k, v in vals.items() if v}
    return out


def draw(fig, res: dict) -> None:
    """First-batch and warm-batch inference per process and mode; the first batch's parts."""
    ax, bx = fig.subplots(1, 2)
    labels, first, warm, ratio = [], [], [], []
    for mode in MODES:
        for proc, name in (("first_process", "1st process"), ("second_process", "2nd process")):
            s = res["summary"][mode][proc]
            labels.append(f"{mode}\n{name}")
            first.append(s["first_inference_s"])
            warm.append(s["warm_inference_s"])
            ratio.append(s["first_over_warm_inference"])  # the median of the pairs' ratios
    x = range(len(labels))
    ax.bar([i - 0.2 for i in x], first, 0.4, label="set-up + batch 1")
    ax.bar([i + 0.2 for i in x], warm, 0.4, label="warm batch (median)")
    for i, (f, r) in enumerate(zip(first, ratio, strict=True)):
        ax.annotate(f"{r:.2f}x", (i - 0.2, f), xytext=(0, 2), textcoords="offset points",
                    ha="center", fontsize=8)  # fmt: skip
    ax.set_xticks(list(x), labels, fontsize=8)
    ax.set_ylabel("inference, s")
    ax.set_title(f"bias-run {res['settings']['config']}: set-up + first batch's inference vs "
                 "a warm batch's", fontsize=10)  # fmt: skip
    ax.legend(fontsize=8)
    parts = ("setup_s", "simulation_s", "inference_s", "other_s")
    names, bottoms = [], [0.0] * 2 * len(MODES)
    for mode in MODES:
        names += [f"{mode}\n2nd, batch 1", f"{mode}\n2nd, warm"]
    for part in parts:
        vals = []
        for mode in MODES:
            p2 = res["summary"][mode]["second_process"]
            first = p2["setup_s"] if part == "setup_s" else p2[f"first_{part}"]
            first = p2["batch1_inference_s"] if part == "inference_s" else first
            vals += [first, 0.0 if part == "setup_s" else p2[f"warm_{part}"]]
        bx.bar(names, vals, bottom=bottoms, label=part.removesuffix("_s"))
        bottoms = [b + v for b, v in zip(bottoms, vals, strict=True)]
    bx.tick_params(axis="x", labelsize=8)
    bx.set_ylabel("s")
    bx.set_title("second process: set-up and batch wall by part", fontsize=10)
    bx.legend(fontsize=8)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = h.parser(__doc__, "cold_start", repeats=1)
    ap.add_argument("--config", type=Path, default=h.ROOT / "configs" / "level2.yaml")
    ap.add_argument("--first-n", type=int, default=8, help="first process: --n-realizations")
    ap.add_argument("--second-n", type=int, default=24, help="second process (resume)")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    ap.add_argument("--no-snapshot", dest="snapshot", action="store_false",
                    help="run the working tree's package, not a snapshot of HEAD's src/ (an "
                         "edit during the run then changes the programs' keys)")  # fmt: skip
    args = ap.parse_args(argv)
    info = h.provenance(None)
    h.banner(info)
    tmp = Path(tempfile.mkdtemp(prefix="bench_cold_start_src_"))
    try:
        return _run(args, info, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _run(args, info: dict[str, Any], tmp: Path) -> dict[str, Any]:
    src, commit = snapshot(tmp) if args.snapshot else (None, None)
    if src is not None:  # the package as committed: edits of the tree change no key
        print(f"bias-run from a snapshot of HEAD's src/ ({commit[:10]})")
    table = h.Table([("mode", "7s"), ("process", "8s"), ("setup_s", "8.2f"), ("b1_inf_s", "9.2f"),
                     ("1st_inf_s", "10.2f"), ("warm_inf_s", "10.2f"), ("ratio", "6.2f"),
                     ("1st_sim_s", "9.2f"), ("1st_oth_s", "9.2f"), ("warm_oth_s", "10.2f"),
                     ("proc_s", "7.1f"), ("cpu_s", "6.1f"), ("hits", "5d"), ("miss", "5d"),
                     ("exp", "4d"), ("load", "5d")],
                    note="1st_inf_s = setup_s (programs built/traced/loaded and compiled "
                         "before batch 1) + b1_inf_s")  # fmt: skip
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in args.modes}
    for i in range(args.repeats):
        for mode in args.modes if i % 2 == 0 else args.modes[::-1]:  # against load drifts
            rec = pair(args.config, args, MODES[mode], src)
            runs[mode].append(rec)
            for proc in ("first_process", "second_process"):
                r = rec[proc]
                table.row(mode, proc.split("_")[0], r.get("setup_s"), r.get("batch1_inference_s"),
                          r.get("first_inference_s"), r.get("warm_inference_s"),
                          r.get("first_over_warm_inference"),
                          r.get("first_simulation_s"), r.get("first_other_s"),
                          r.get("warm_other_s"), r["process_s"], r["process_cpu_s"],
                          r["cache_hits"], r["cache_misses"], r["exported"], r["loaded"])  # fmt: skip
    res = {"info": info, "settings": h.settings(args), "package_commit": commit, "runs": runs,
           "summary": {m: summary(v, MODES[m] == "on") for m, v in runs.items()},
           "target_ratio": 1.5}  # fmt: skip
    for mode, summ in res["summary"].items():
        p2 = {k: float("nan") for k in ("first_over_warm_inference", "first_over_warm_wall")}
        p2.update(summ["second_process"])
        ratios = ", ".join(f"{r['second_process'].get('first_over_warm_inference', math.nan):.2f}"
                           for r in runs[mode])  # fmt: skip
        print(f"{mode}: second process, medians over {summ['pairs']} pair(s): set-up "
              f"{p2['setup_s']:.2f} s, batch 1 inference {p2['batch1_inference_s']:.2f} s, "
              f"a warm batch's {p2['warm_inference_s']:.2f} s; (set-up + batch 1) / warm "
              f"{p2['first_over_warm_inference']:.2f}x (each pair: {ratios}; target <= "
              f"{res['target_ratio']}); JAX configured -> batch 1 done / a warm batch's wall "
              f"{p2['first_over_warm_wall']:.2f}x")  # fmt: skip
    return h.write_json(res, args.out, draw=draw if set(args.modes) == set(MODES) else None)


if __name__ == "__main__":
    main()
