"""Write a campaign's ``validation.json`` from the files its ``run.sh`` left. Not a test.

A validation campaign run by a committed ``run.sh`` (``results/validation/<name>/run.sh``)
leaves, under its root ``ROOT``:

- ``source_commit``: the one commit that wrote every image (``run.sh`` refuses to grow the
  campaign from another commit or a dirty tree); ``analysis_commit`` (optional):
  ``<commit> dirty=<0|1>`` of the code that ran ``bias-extract`` and ``bias-stats``;
- ``grow.log``: one line per array task of ``bias-run`` when it ended,
  ``<date> task <i>/<n> rc=<rc> start=<epoch s> end=<epoch s>`` (``n`` = 1: one process
  over the whole plan, the resume that finishes what an interrupted task left), beside
  other lines (``start ... commit=<commit>``, ``partial ...``, ``runs done``);
- ``extract.log`` and ``stats.log``: ``bias-extract`` and ``bias-stats`` under
  ``/usr/bin/time -v`` (its ``Elapsed (wall clock) time`` and ``Maximum resident set
  size``); ``logs/extract_task_<i>.log`` (optional): each array task's partial, the same;
- ``stats/bias_results.json``: ``bias-stats``' record;
- ``runs/campaign.json`` (optional): the campaign's manifest (config hash, overrides,
  plan, code version, device); ``runs/config.yaml`` (optional): the config as run;
- ``summary.csv`` (optional): ``bias-extract``'s table, whose ``code_commit`` and
  ``code_dirty`` columns say which code wrote each image.

It writes, under ``--out DIR``: ``validation.json`` (the commit that wrote every image,
the config, seeds, images and galaxies used, m1, m1_err, c1, c1_err, m2, m2_err, c2,
c2_err and the verdict, the timing: the array tasks' summed and spanned wall, galaxies/s,
``bias-extract`` and ``bias-stats`` wall and peak RSS), and copies: ``bias_results.json``,
``printed.txt`` (``stats.log`` without the ``time -v`` block), ``grow.log`` and, where
present, ``config_as_run.yaml`` and ``bias-stats``' figures (``stats/plots/`` as
``plots/``). Every value is read from those files; nothing is typed.

``--grow SIGMA`` (``run.sh`` with ``SIGMA`` set, after ``bias-stats``): when the larger of
m1's and m2's errors in ``stats/bias_results.json`` is above ``SIGMA``, grows the plan to
``ceil(N (err / SIGMA)^2 (1 + GROW_MARGIN) / GROW_STEP) x GROW_STEP`` seeds (sigma_m as
1/sqrt(seeds); ``N``: ``runs/campaign.json``'s planned seeds), from the widths alone,
never from m. It writes the ``grown`` line to ``grow.log``, keeps the smaller campaign's
``stats/`` as ``stats_n<N>/`` (and its ``summary.csv`` in it), removes ``runs.done``
(which makes ``run.sh`` run the grown plan's new realizations), prints the new seed count
and exits 0; below ``SIGMA`` it prints nothing and changes nothing.

Exit 0; 1 when the images were not all written by ``source_commit`` (the record is still
written and says so: ``git.one_commit`` false, ``git.images_by_commit``); 2 when a file
it needs is missing or unreadable.

    python bench/campaign_record.py /work/l2_3e4 --out results/validation/level2_2d_3e4
    python bench/campaign_record.py /work/l2_3e4 --grow 3e-4
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import shutil
import sys
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

TASK = re.compile(
    r"^(?P<date>\S+) task (?P<i>\d+)/(?P<n>\d+) rc=(?P<rc>-?\d+) "
    r"start=(?P<start>[0-9.]+) end=(?P<end>[0-9.]+)\s*$"
)
START = re.compile(r"^\S+ start .*\bcommit=(?P<commit>[0-9a-f]{7,40})\b")
#: the first line of ``/usr/bin/time -v``'s block (after "Command exited with non-zero
#: status N" when the command failed)
TIME_V_START = re.compile(r"^(Command exited with non-zero status \d+|\tCommand being timed:)")
WALL = re.compile(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?P<t>[0-9:.]+)")
RSS = re.compile(r"Maximum resident set size \(kbytes\): (?P<kb>\d+)")
EXIT = re.compile(r"^\s*Exit status: (?P<rc>-?\d+)", re.M)
RESULT_KEYS = ("m1", "m1_err", "c1", "c1_err", "m2", "m2_err", "c2", "c2_err")
#: a grown plan's seeds: the width's scaling to the target, 1% above it, rounded up to a
#: multiple of 100 seeds (9,000 seeds at m1_err 3.007e-4 for 3e-4: 9,200)
GROW_MARGIN, GROW_STEP = 0.01, 100


class RecordError(RuntimeError):
    """A file the record needs is missing or unreadable (exit 2)."""


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as err:
        raise RecordError(f"{path}: {err.strerror or err}") from err


def _json(path: Path) -> Any:
    try:
        return json.loads(_read(path))
    except json.JSONDecodeError as err:
        raise RecordError(f"{path}: not JSON ({err})") from err


def seconds(clock: str) -> float:
    """``time -v``'s ``h:mm:ss`` or ``m:ss.ss`` as seconds."""
    total = 0.0
    for part in clock.split(":"):
        total = total * 60 + float(part)
    return total


def time_v(text: str, path: Path) -> dict[str, Any]:
    """Wall (s), peak RSS (MiB) and exit status of one ``/usr/bin/time -v`` block."""
    wall, rss = WALL.search(text), RSS.search(text)
    if wall is None or rss is None:
        raise RecordError(f"{path}: no /usr/bin/time -v block (wall clock, maximum RSS)")
    rc = EXIT.search(text)
    return {
        "wall_s": round(seconds(wall["t"]), 2),
        "peak_rss_mib": round(int(rss["kb"]) / 1024, 1),
        "exit_status": int(rc["rc"]) if rc else None,
    }


def printed(text: str) -> str:
    """The command's own output: ``text`` up to ``time -v``'s block."""
    lines = text.splitlines(keepends=True)
    for k, line in enumerate(lines):
        if TIME_V_START.match(line):
            return "".join(lines[:k])
    return text


def tasks(grow: str) -> list[dict[str, Any]]:
    """Every task line of ``grow.log``, in order."""
    out = []
    for line in grow.splitlines():
        m = TASK.match(line.strip())
        if m:
            start, end = float(m["start"]), float(m["end"])
            out.append({"task": int(m["i"]), "of": int(m["n"]), "rc": int(m["rc"]),
                        "start": start, "end": end, "wall_s": end - start})  # fmt: skip
    return out


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds")


def stage1(runs: list[dict[str, Any]], galaxies: int | None) -> dict[str, Any]:
    """The array tasks' wall: summed over task runs (process-seconds) and spanned (first
    start to last end), with the galaxies/s those give."""
    if not runs:
        return {"task_runs": 0}
    wall_sum = sum(r["wall_s"] for r in runs)
    start, end = min(r["start"] for r in runs), max(r["end"] for r in runs)
    span = end - start
    return {
        "task_runs": len(runs),
        "tasks": len({(r["task"], r["of"]) for r in runs}),
        "task_runs_failed": sum(r["rc"] not in (0, 1) for r in runs),
        "wall_sum_s": round(wall_sum, 1),
        "span_s": round(span, 1),
        "first_start": _iso(start),
        "last_end": _iso(end),
        "task_wall_s_median": round(sorted(r["wall_s"] for r in runs)[len(runs) // 2], 1),
        "galaxies_per_s_span": round(galaxies / span, 1) if galaxies and span > 0 else None,
        "galaxies_per_process_s": round(galaxies / wall_sum, 1)
        if galaxies and wall_sum > 0 else None,
    }  # fmt: skip


def images_by_commit(summary: Path) -> Counter[str] | None:
    """``{commit[+dirty]: images}`` from ``summary.csv``'s ``code_commit`` / ``code_dirty``
    (empty commit: ``unknown``); None without the file or the columns."""
    if not summary.is_file():
        return None
    counts: Counter[str] = Counter()
    with summary.open(newline="") as fh:
        reader = csv.DictReader(fh)
        if "code_commit" not in (reader.fieldnames or ()):
            return None
        for row in reader:
            commit = row.get("code_commit") or "unknown"
            dirty = (row.get("code_dirty") or "").strip().lower() in ("true", "1")
            counts[commit + ("+dirty" if dirty else "")] += 1
    return counts


def _n_objects(manifest: dict[str, Any] | None) -> int | None:
    image = ((manifest or {}).get("config") or {}).get("image") or {}
    n = image.get("n_objects")
    return n if isinstance(n, int) else None


def build(root: Path) -> tuple[dict[str, Any], bool]:
    """``(validation.json's content, whether source_commit wrote every image)``."""
    commit = _read(root / "source_commit").strip()
    if not re.fullmatch(r"[0-9a-f]{7,40}", commit):
        raise RecordError(f"{root / 'source_commit'}: not a commit: {commit!r}")
    grow = _read(root / "grow.log")
    res = _json(root / "stats" / "bias_results.json")
    mpath = root / "runs" / "campaign.json"
    manifest = _json(mpath) if mpath.is_file() else None
    analysis = None
    if (root / "analysis_commit").is_file():
        a = _read(root / "analysis_commit").split()
        analysis = {"commit": a[0] if a else None,
                    "dirty": (a[1] == "dirty=1") if len(a) > 1 else None}  # fmt: skip

    # which commit wrote each image: summary.csv's columns, the manifest, grow.log's starts
    started = sorted({m["commit"] for ln in grow.splitlines() if (m := START.match(ln))})
    by_commit = images_by_commit(root / "summary.csv")
    code = (manifest or {}).get("code") or {}

    def same(c: str) -> bool:
        return c.startswith(commit) or commit.startswith(c)

    one = all(same(c) for c in started)
    if isinstance(code.get("commit"), str):
        one = one and same(code["commit"]) and code.get("dirty") is not True
    if by_commit is not None:
        one = one and all(same(k) and not k.endswith("+dirty") for k in by_commit)
    git = {
        "commit": commit,
        "one_commit": one,
        "source": "source_commit (run.sh writes it and refuses another commit or a dirty tree)",
        "started_with": started,
        "images_by_commit": dict(by_commit) if by_commit is not None else None,
        "manifest_code": code or None,
    }

    # the population estimate's galaxies and seeds
    points = (res.get("population") or {}).get("grid_points") or []
    galaxies_used = sum(p.get("n_galaxies", 0) for p in points) if points else None
    collapsed = sum(p.get("n_collapsed", 0) for p in points) if points else None
    fits = res.get("fits") or {}
    groups = sorted({f.get("n_groups") for f in fits.values() if isinstance(f, dict)} - {None})
    plan = dict((manifest or {}).get("plan") or {})
    plan.pop("run_ids", None)
    n_obj = _n_objects(manifest)
    images_written = res.get("n_realizations")
    galaxies_written = images_written * n_obj if images_written and n_obj else None

    runs = tasks(grow)
    arrays = [r for r in runs if r["of"] > 1]
    whole = [r for r in runs if r["of"] == 1]
    timing: dict[str, Any] = {
        "array_tasks": stage1(arrays, galaxies_written),
        "whole_plan_runs": stage1(whole, None),
        "all_bias_run_processes": stage1(runs, galaxies_written),
        "definitions": (
            "wall_sum_s: the task runs' wall times (end - start in grow.log) added; span_s: "
            "the first start to the last end; galaxies_per_s_span: the galaxies of the images "
            "written (images x image.n_objects; all of them, also those a whole-plan run "
            "wrote, as in a grown campaign: only all_bias_run_processes' rate is then the "
            "campaign's) / span_s; galaxies_per_process_s: the same / "
            "wall_sum_s; task_runs_failed: runs whose rc is neither 0 nor 1 (bias-run's "
            "complete-with-failed-realizations), which run.sh starts again"
        ),
    }
    extract_log, stats_log = root / "extract.log", root / "stats.log"
    timing["bias_extract"] = time_v(_read(extract_log), extract_log)
    timing["bias_stats"] = time_v(_read(stats_log), stats_log)
    partial_logs = sorted((root / "logs").glob("extract_task_*.log"))
    if partial_logs:
        parts = [time_v(_read(p), p) for p in partial_logs]
        timing["bias_extract_partials"] = {
            "tasks": len(parts),
            "wall_sum_s": round(sum(p["wall_s"] for p in parts), 1),
            "peak_rss_mib_max": max(p["peak_rss_mib"] for p in parts),
        }

    device = (manifest or {}).get("device") or {}
    doc = {
        "written_by": "bench/campaign_record.py",
        "root": str(root),
        "git": git,
        "analysis_code": analysis,
        "platform": device.get("platform"),
        "device": device or None,
        "host": (manifest or {}).get("host"),
        "versions": (manifest or {}).get("versions"),
        "dtype": (manifest or {}).get("precision"),
        "config": {
            "hash": (manifest or {}).get("config_hash"),
            "method": (manifest or {}).get("method"),
            "overrides": (manifest or {}).get("overrides"),
            "n_objects": n_obj,
            "plan": plan or None,
            "extended": (manifest or {}).get("extended"),
        },
        "seeds": {
            "planned": plan.get("n_realizations"),
            "base_seed": plan.get("base_seed"),
            "used": res.get("n_seeds"),
            "jackknife_groups": groups[0] if len(groups) == 1 else groups or None,
        },
        "images": {
            "planned": plan.get("n_planned"),
            "written": images_written,
            "ok": res.get("n_ok"),
            "failed": res.get("n_failed"),
            "incomplete": res.get("n_incomplete"),
            "corrupt": res.get("n_corrupt"),
            "used": res.get("n_used"),
            "excluded": res.get("excluded"),
        },
        "galaxies": {
            "written": galaxies_written,
            "used": galaxies_used,
            "collapsed_at_estimate": collapsed,
        },
        "result": {
            **{k: res.get(k) for k in RESULT_KEYS},
            "verdict": res.get("verdict"),
            "passed": res.get("passed"),
            "requirement": (res.get("requirement") or {}).get("name"),
        },
        "coverage": {
            comp: {lvl: (v or {}).get("observed") for lvl, v in levels.items()}
            for comp, levels in (res.get("coverage") or {}).items()
            if isinstance(levels, dict)
        },
        "timing": timing,
    }
    return doc, one


def write(root: Path, out: Path) -> bool:
    doc, one = build(root)
    out.mkdir(parents=True, exist_ok=True)
    (out / "validation.json").write_text(json.dumps(doc, indent=1) + "\n")
    shutil.copyfile(root / "stats" / "bias_results.json", out / "bias_results.json")
    shutil.copyfile(root / "grow.log", out / "grow.log")
    (out / "printed.txt").write_text(printed(_read(root / "stats.log")))
    if (root / "runs" / "config.yaml").is_file():
        shutil.copyfile(root / "runs" / "config.yaml", out / "config_as_run.yaml")
    if (root / "stats" / "plots").is_dir():
        shutil.copytree(root / "stats" / "plots", out / "plots", dirs_exist_ok=True)
    return one


def _sci(v: float) -> str:
    """``3.007e-4`` (``.3e`` without the exponent's leading zero)."""
    return re.sub(r"e([+-])0(\d)", r"e\1\2", f"{v:.3e}").replace("e+", "e")


def grown_seeds(n: int, err: float, sigma: float) -> int:
    """The seeds that bring an error ``err`` at ``n`` seeds to ``sigma`` (1/sqrt(seeds)),
    with :data:`GROW_MARGIN`, rounded up to :data:`GROW_STEP`; ``n`` when ``err <= sigma``."""
    if err <= sigma:
        return n
    need = n * (err / sigma) ** 2 * (1.0 + GROW_MARGIN)
    return -(-math.ceil(need) // GROW_STEP) * GROW_STEP  # > n, as need > n


def grow(root: Path, sigma: float) -> int | None:
    """Grow the campaign in ``root`` when its sigma_m is above ``sigma`` (the module's
    ``--grow``): the new seed count, or None (nothing changed)."""
    res = _json(root / "stats" / "bias_results.json")
    plan = _json(root / "runs" / "campaign.json").get("plan") or {}
    n = plan.get("n_realizations")
    if not isinstance(n, int) or n < 1:
        raise RecordError(f"{root / 'runs' / 'campaign.json'}: no plan.n_realizations")
    errs = {k: res.get(k) for k in ("m1_err", "m2_err") if isinstance(res.get(k), int | float)}
    if not errs:
        raise RecordError(f"{root / 'stats' / 'bias_results.json'}: no m1_err or m2_err")
    comp, err = max(errs.items(), key=lambda kv: kv[1])
    new = grown_seeds(n, err, sigma)
    if new == n:
        return None
    kept = root / f"stats_n{n}"
    if kept.exists():
        raise RecordError(f"{kept}: exists (the campaign was grown from {n} seeds before)")
    (root / "stats").rename(kept)
    if (root / "summary.csv").is_file():
        (root / "summary.csv").rename(kept / "summary.csv")
    (root / "runs.done").unlink(missing_ok=True)
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    with (root / "grow.log").open("a") as fh:
        fh.write(f"{stamp} grown: n {n} -> {new} ({n:,} seeds gave {comp} {_sci(err)}, above "
                 f"{sigma:g}); the {n:,}-seed bias-stats record is {kept.name}/\n")  # fmt: skip
    return new


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", type=Path, help="the campaign root run.sh wrote (ROOT)")
    ap.add_argument("--out", type=Path,
                    help="the record's folder, e.g. results/validation/<name>")  # fmt: skip
    ap.add_argument("--grow", type=float, metavar="SIGMA",
                    help="grow the plan when sigma_m is above SIGMA: print the new seeds")  # fmt: skip
    args = ap.parse_args(argv)
    if (args.out is None) == (args.grow is None):
        ap.error("give one of --out DIR and --grow SIGMA")
    if args.grow is not None:
        try:
            new = grow(args.root, args.grow)
        except (RecordError, OSError) as err:
            print(f"campaign_record: {err}", file=sys.stderr)
            return 2
        if new is not None:
            print(new)
        return 0
    try:
        one = write(args.root, args.out)
    except RecordError as err:
        print(f"campaign_record: {err}", file=sys.stderr)
        return 2
    print(f"wrote {args.out / 'validation.json'}")
    if not one:
        print(f"campaign_record: not every image was written by {args.root}/source_commit's "
              "commit: see validation.json's git.images_by_commit", file=sys.stderr)  # fmt: skip
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
