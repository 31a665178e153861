"""Chaos run: kill and restart a 256-realization campaign at random moments; the result
set must equal an uninterrupted run's exactly.

A Level 0 campaign (16x16 stamps, MAP, float64, 4 shears x 64 seeds, batch size 8) is
run once without interruption (the reference) and once under chaos: two bias-run
processes at a time into one output root (slot A alternates between array task 0 of 2
and the whole campaign, which overlaps both tasks; slot B is array task 1 of 2), each
restarted as soon as it ends; ``--kills`` times a random running process is killed at a
random moment: half at a random time after its start (start-up, compile), half once the
campaign has gained a random 1-16 realizations since it started (sampling, writing); one
kill is a SIGTERM, the others SIGKILL. When the kills are spent both run to completion. Checked:

- every planned realization complete, none failed, nothing extra;
- MAP draws of g1, g2 bit-identical to the reference (same lane count);
- nothing complete was redone (a convergence.json never changes once seen);
- bias-extract: "256 of 256 planned realization(s) complete";
- leftovers: temporary files and the claims file (counted, reported).

Prints a table of events and writes ``results/benchmarks/chaos.json`` and a PNG. The
machine is shared: timings in the record are wall-clock under whatever load it had.

    python bench/chaos.py [--kills 20] [--seed 0] [--n-realizations 64]
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

import _harness as h

BIN = Path(sys.executable).parent
GRID = ("-0.05", "-0.02", "0.02", "0.05")


def command(cfg: Path, root: Path, n: int, task: int | None) -> list[str]:
    cmd = [str(BIN / "bias-run"), "--config", str(cfg), "--shear-grid", *GRID,
           "--n-realizations", str(n), "--batch-size", "8", "--x64", "--no-progress",
           "--output-dir", str(root)]  # fmt: skip
    if task is not None:
        cmd += ["--array-task-id", str(task), "--array-task-count", "2"]
    return cmd


def complete(root: Path) -> dict[str, int]:
    """run id -> convergence.json mtime (ns) of every complete realization."""
    out = {}
    for p in root.glob("g1_*/convergence.json"):
        try:
            out[p.parent.name] = p.stat().st_mtime_ns
        except FileNotFoundError:
            pass
    return out


def draws(root: Path, rid: str) -> dict[str, np.ndarray]:
    from shearbatch.io import read_posterior

    post = read_posterior(root / rid / "posterior.nc")
    return {k: post[k] for k in ("g1", "g2")}


def main() -> int:
    ap = h.parser(__doc__, "chaos", repeats=1)
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n-realizations", type=int, default=64, help="per shear (4 shears)")
    ap.add_argument("--max-delay", type=float, default=30.0, help="latest kill after a start, s")
    args = ap.parse_args()
    info = h.provenance("float64")
    h.banner(info)
    rng = random.Random(args.seed)
    tmp = Path(tempfile.mkdtemp(prefix="shearbatch-chaos-"))
    env = {**os.environ, "SHEARBATCH_CACHE_DIR": str(tmp / "cache")}
    try:
        raw = yaml.safe_load((h.ROOT / "configs" / "level0.yaml").read_text())
        raw["image"].update(size_x=16, size_y=16)
        cfg = tmp / "level0_16.yaml"
        cfg.write_text(yaml.safe_dump(raw))
        n_planned = 4 * args.n_realizations

        t0 = time.perf_counter()
        ref = tmp / "reference"
        subprocess.run(command(cfg, ref, args.n_realizations, None), check=True, env=env,
                       capture_output=True)  # fmt: skip
        ref_wall = time.perf_counter() - t0
        print(f"reference: {len(complete(ref))} realizations in {ref_wall:.1f} s")

        root = tmp / "chaos"
        events, seen, redone = [], {}, set()
        kills_left, sigterm_at = args.kills, rng.randrange(args.kills)
        slots: dict[str, tuple[subprocess.Popen, float, str, float]] = {}
        starts = {"A": 0, "B": 0}
        t_chaos = time.perf_counter()

        def launch(slot: str) -> None:
            task = 1 if slot == "B" else (0 if starts["A"] % 2 == 0 else None)
            starts[slot] += 1
            proc = subprocess.Popen(command(cfg, root, args.n_realizations, task), env=env,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
            what = "whole campaign" if task is None else f"task {task} of 2"
            # half the kills at a random time after the start (start-up, compile), half once
            # this process has written a random number of realizations (sampling, writing)
            if kills_left <= 0:
                kill_at = None
            elif rng.random() < 0.5:
                kill_at = ("time", rng.uniform(0.5, args.max_delay))
            else:
                kill_at = ("written", len(complete(root)) + rng.randint(1, 16))
            slots[slot] = (proc, time.perf_counter(), what, kill_at)

        def watch() -> None:
            now = complete(root)
            for rid, mt in now.items():
                if rid in seen and seen[rid] != mt:
                    redone.add(rid)
                seen.setdefault(rid, mt)

        launch("A")
        launch("B")
        while slots:
            time.sleep(0.1)
            watch()
            n_now = len(complete(root))
            for slot, (proc, t_start, what, kill_at) in list(slots.items()):
                age = time.perf_counter() - t_start
                rc = proc.poll()
                due = kill_at is not None and (
                    age >= kill_at[1] if kill_at[0] == "time" else n_now >= kill_at[1]
                )
                if rc is None and due and kills_left:
                    kills_left -= 1
                    sig = signal.SIGTERM if kills_left == sigterm_at else signal.SIGKILL
                    proc.send_signal(sig)
                    t_kill = time.perf_counter()
                    rc = proc.wait()
                    events.append({"t": round(t_kill - t_chaos, 2), "slot": slot, "what": what,
                                   "signal": sig.name, "after_s": round(age, 2),
                                   "trigger": kill_at[0],
                                   "exit": rc, "stop_s": round(time.perf_counter() - t_kill, 2),
                                   "complete": len(complete(root))})  # fmt: skip
                    print(
                        f"{events[-1]['t']:7.1f} s  {sig.name:7s} {slot} ({what}) after "
                        f"{age:5.1f} s -> exit {rc}; {events[-1]['complete']} complete"
                    )
                elif rc is None:
                    continue
                else:
                    events.append({"t": round(time.perf_counter() - t_chaos, 2), "slot": slot,
                                   "what": what, "signal": None, "after_s": round(age, 2),
                                   "exit": rc, "complete": len(complete(root))})  # fmt: skip
                    print(
                        f"{events[-1]['t']:7.1f} s  ended   {slot} ({what}) after {age:5.1f} s"
                        f" -> exit {rc}; {events[-1]['complete']} complete"
                    )
                del slots[slot]
                # a killed process is restarted; one that ended by itself (its slice done,
                # or skipped as claimed) only when nothing else runs and work is left
                if len(complete(root)) < n_planned and (rc != 0 or not slots):
                    launch(slot)
        chaos_wall = time.perf_counter() - t_chaos
        watch()

        got, want = complete(root), complete(ref)
        statuses = {}
        mismatched = []
        for rid in sorted(want):
            conv = json.loads((root / rid / "convergence.json").read_text()) if rid in got else {}
            statuses[conv.get("status", "absent")] = (
                statuses.get(conv.get("status", "absent"), 0) + 1
            )
            if rid in got:
                a, b = draws(ref, rid), draws(root, rid)
                if any(not np.array_equal(a[k], b[k]) for k in a):
                    mismatched.append(rid)
        ex = subprocess.run([str(BIN / "bias-extract"), "--input-dir", str(root), "--output",
                             str(tmp / "s.csv")], capture_output=True, text=True, env=env)  # fmt: skip
        extract_line = next((x for x in ex.stdout.splitlines() if x.startswith("campaign:")), "")
        leftovers = sorted(str(p.relative_to(root)) for p in root.rglob("*.tmp"))
        res = {
            "info": info,
            "settings": h.settings(args),
            "n_planned": n_planned,
            "reference_wall_s": ref_wall,
            "chaos_wall_s": chaos_wall,
            "kills": sum(e["signal"] is not None for e in events),
            "sigterm": [e for e in events if e["signal"] == "SIGTERM"],
            "starts": starts,
            "events": events,
            "complete": len(got),
            "extra": sorted(set(got) - set(want)),
            "missing": sorted(set(want) - set(got)),
            "statuses": statuses,
            "draws_bit_identical": len(want) - len(mismatched) - len(set(want) - set(got)),
            "mismatched": mismatched,
            "redone_after_complete": sorted(redone),
            "extract": extract_line,
            "tmp_files_left": leftovers,
            "claims_file_left": (root / ".claims").exists(),
        }
        ok = (len(got) == n_planned and not res["extra"] and not mismatched and not redone
              and statuses == {"ok": n_planned})  # fmt: skip
        res["exact_result_set"] = ok
        print(
            f"complete {len(got)}/{n_planned}, bit-identical {res['draws_bit_identical']}, "
            f"redone {len(redone)}, tmp files left {len(leftovers)}; {extract_line}"
        )
        print(f"EXACT UNINTERRUPTED RESULT SET: {'yes' if ok else 'NO'}")
        h.write_json(res, args.out, draw)
        return 0 if ok else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def draw(fig, res) -> None:
    ax = fig.add_subplot(1, 1, 1)
    ev = res["events"]
    ax.plot([e["t"] for e in ev], [e["complete"] for e in ev], "-", color="0.7", lw=1)
    for sig, mk, col in (("SIGKILL", "x", "C3"), ("SIGTERM", "s", "C1"), (None, "o", "C0")):
        pts = [e for e in ev if e["signal"] == sig]
        ax.plot([e["t"] for e in pts], [e["complete"] for e in pts], mk, color=col,
                label=sig or "process ended", ms=7)  # fmt: skip
    ax.axhline(res["n_planned"], color="k", lw=0.8, ls="--")
    ax.set_xlabel("time since the first start (s)")
    ax.set_ylabel("complete realizations")
    ax.set_title(f"{res['kills']} kills, 2 concurrent processes: exact result set "
                 f"{'yes' if res['exact_result_set'] else 'NO'}")  # fmt: skip
    ax.legend(loc="lower right")


if __name__ == "__main__":
    sys.exit(main())
