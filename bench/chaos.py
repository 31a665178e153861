"""Chaos run: kill and restart a 1,024-realization campaign at random moments; the result
set must equal an uninterrupted run's exactly.

A Level 0 campaign (16x16 stamps, MAP, float64, 4 shears x 256 seeds, batch size 4) is
run once without interruption (the reference) and once under chaos: two bias-run
processes at a time into one output root (slot A alternates between array task 0 of 2
and the whole campaign, which overlaps both tasks; slot B is array task 1 of 2), each
restarted as soon as it ends; ``--kills`` times a random running process is killed at a
moment of its running work: never before that process has itself written a complete
realization directory (one that became complete while that process held its claim: the
claims file's byte-range locks name their holder's pid, polled every 0.1 s), nor once it
holds no claim left (its work done); then half at a random time up to ``--max-delay`` s
after its first complete realization, half once it has written a random 1 to 2 x batch
size of them. One kill is a SIGTERM, one a SIGINT, the others SIGKILL. (Its log's
``batch i/n`` line is not the evidence: it comes once the batch is handed to the
background writer, whose queued writes a SIGKILL loses; that count is recorded too, as
computed.) Each kill's exit status is asserted (SIGKILL: -9; bias-run after SIGTERM:
143, after SIGINT: 130: docs/getting-started.md "Exit statuses") and recorded with its
evidence: how many complete realizations that process had written and how many it still
held when hit, its age, and the time since its first complete one. When the kills are
spent both run to completion. Checked:

- every planned realization complete, none failed, nothing extra;
- MAP draws of g1, g2 bit-identical to the reference (same lane count);
- nothing complete was redone (a convergence.json never changes once seen);
- bias-extract: "1024 of 1024 planned realization(s) complete";
- every kill hit a process that had written >= 1 complete realization and held >= 1 more,
  and it exited with its signal's status;
- leftovers: temporary files and the claims file (counted, reported).

Prints a table of events and writes ``results/benchmarks/chaos.json`` and a PNG. The
machine is shared: timings in the record are wall-clock under whatever load it had.

    python bench/chaos.py [--kills 20] [--seed 0] [--n-realizations 256] [--batch-size 4] [--max-delay 1]
"""

from __future__ import annotations

import json
import os
import random
import re
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
# the engine's line once a batch's files are written (engine/loop.py, after sink.flush())
BATCH_LINE = re.compile(r"INFO shearbatch\.engine[\w.]*: batch (\d+)/(\d+): (\d+) realization")
# the exit status each signal must give (docs/getting-started.md "Exit statuses")
EXPECTED_EXIT = {"SIGKILL": -signal.SIGKILL, "SIGTERM": 143, "SIGINT": 130}


def command(cfg: Path, root: Path, n: int, task: int | None, batch: int = 8) -> list[str]:
    cmd = [str(BIN / "bias-run"), "--config", str(cfg), "--shear-grid", *GRID,
           "--n-realizations", str(n), "--batch-size", str(batch), "--x64", "--no-progress",
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


def written(log: Path) -> tuple[int, int, int]:
    """(batches, realizations) a bias-run has written, from its log's batch lines, and its
    batches left (0 once its last batch is written: its work is done, it only finishes)."""
    try:
        text = log.read_text(errors="replace")
    except FileNotFoundError:
        return 0, 0, 0
    got = [(int(m.group(1)), int(m.group(2)), int(m.group(3))) for m in BATCH_LINE.finditer(text)]
    if not got:
        return 0, 0, 0
    return len(got), sum(k for *_, k in got), got[-1][1] - got[-1][0]


def draws(root: Path, rid: str) -> dict[str, np.ndarray]:
    from shearbatch.io import read_posterior

    post = read_posterior(root / rid / "posterior.nc")
    return {k: post[k] for k in ("g1", "g2")}


def main(argv: list[str] | None = None) -> int:
    ap = h.parser(__doc__, "chaos", repeats=1)
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n-realizations", type=int, default=256, help="per shear (4 shears)")
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument(
        "--max-delay",
        type=float,
        default=1.0,
        help="latest time-triggered kill after the process's first complete realization, s",
    )
    args = ap.parse_args(argv)
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
        subprocess.run(command(cfg, ref, args.n_realizations, None, args.batch_size),
                       check=True, env=env, capture_output=True)  # fmt: skip
        ref_wall = time.perf_counter() - t0
        print(f"reference: {len(complete(ref))} realizations in {ref_wall:.1f} s")

        from shearbatch.io import claims

        root = tmp / "chaos"
        logs = tmp / "logs"
        logs.mkdir()
        events, seen, redone = [], {}, set()
        planned = sorted(complete(ref))
        holder: dict[str, int] = {}  # realization not yet complete -> pid holding its claim
        by_pid: dict[int, int] = {}  # pid -> complete realizations it wrote
        unattributed: set[str] = set()
        kills_left = args.kills
        special = rng.sample(range(args.kills), min(2, args.kills))
        sig_of = {k: signal.SIGTERM if i == 0 else signal.SIGINT for i, k in enumerate(special)}
        slots: dict[str, dict] = {}
        starts = {"A": 0, "B": 0}
        t_chaos = time.perf_counter()

        def launch(slot: str) -> None:
            task = 1 if slot == "B" else (0 if starts["A"] % 2 == 0 else None)
            starts[slot] += 1
            log = logs / f"{slot}{starts[slot]}.log"
            with log.open("w") as fh:
                proc = subprocess.Popen(
                    command(cfg, root, args.n_realizations, task, args.batch_size), env=env,
                    stdout=fh, stderr=subprocess.STDOUT)  # fmt: skip
            what = "whole campaign" if task is None else f"task {task} of 2"
            # every kill hits running work: never before this process has written a batch;
            # then half at a random time after its first batch landed (computing the next),
            # half once it has written a random 1-2 batches (writing)
            if kills_left <= 0:
                kill_at = None
            elif rng.random() < 0.5:
                kill_at = ("time", rng.uniform(0.0, args.max_delay))
            else:
                kill_at = ("written", rng.randint(1, 2 * args.batch_size))
            slots[slot] = {"proc": proc, "t": time.perf_counter(), "what": what,
                           "kill_at": kill_at, "log": log, "first_batch": None}  # fmt: skip

        def watch() -> None:
            # a realization that became complete since the last poll was written by the
            # process that held its claim then (claims: byte-range locks, by pid)
            now = complete(root)
            for rid, mt in now.items():
                if rid in seen and seen[rid] != mt:
                    redone.add(rid)
                if rid not in seen:
                    pid = holder.get(rid)
                    if pid:
                        by_pid[pid] = by_pid.get(pid, 0) + 1
                    else:
                        unattributed.add(rid)
                seen.setdefault(rid, mt)
            holder.clear()
            holder.update({r: p for r, p in claims.held(root, [r for r in planned if r not in now])
                           .items() if p})  # fmt: skip

        launch("A")
        launch("B")
        while slots:
            time.sleep(0.1)
            watch()
            for slot, st in list(slots.items()):
                proc, what, kill_at = st["proc"], st["what"], st["kill_at"]
                now = time.perf_counter()
                age = now - st["t"]
                rc = proc.poll()
                n_batches, n_computed, _ = written(st["log"])
                # complete realization directories this process wrote, and its work left
                n_written = by_pid.get(proc.pid, 0)
                n_left = sum(p == proc.pid for p in holder.values())
                if n_written and st["first_batch"] is None:
                    st["first_batch"] = now
                # running work: >= 1 batch written by this process, >= 1 still to come
                due = kill_at is not None and n_written >= 1 and n_left >= 1 and (
                    now - st["first_batch"] >= kill_at[1] if kill_at[0] == "time"
                    else n_written >= kill_at[1]
                )  # fmt: skip
                if rc is None and due and kills_left:
                    kills_left -= 1
                    sig = sig_of.get(kills_left, signal.SIGKILL)
                    proc.send_signal(sig)
                    t_kill = time.perf_counter()
                    rc = proc.wait()
                    events.append({"t": round(t_kill - t_chaos, 2), "slot": slot, "what": what,
                                   "signal": sig.name, "after_s": round(age, 2),
                                   "trigger": kill_at[0],
                                   "written_when_hit": n_written, "left_when_hit": n_left,
                                   "batches_computed_when_hit": n_batches,
                                   "computed_when_hit": n_computed,
                                   "since_first_written_s": round(t_kill - st["first_batch"], 2),
                                   "exit": rc, "expected_exit": EXPECTED_EXIT[sig.name],
                                   "exit_ok": rc == EXPECTED_EXIT[sig.name],
                                   "stop_s": round(time.perf_counter() - t_kill, 2),
                                   "pid": proc.pid,
                                   "complete": len(complete(root))})  # fmt: skip
                    print(
                        f"{events[-1]['t']:7.1f} s  {sig.name:7s} {slot} ({what}) after "
                        f"{age:5.1f} s, {n_written} written by it ({n_left} left) -> exit "
                        f"{rc} (expected {EXPECTED_EXIT[sig.name]}); "
                        f"{events[-1]['complete']} complete"
                    )
                elif rc is None:
                    continue
                else:
                    events.append({"t": round(now - t_chaos, 2), "slot": slot,
                                   "what": what, "signal": None, "after_s": round(age, 2),
                                   "exit": rc, "pid": proc.pid,
                                   "complete": len(complete(root))})  # fmt: skip
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
            "sigint": [e for e in events if e["signal"] == "SIGINT"],
            "kills_into_running_work": sum(
                e["signal"] is not None and e["written_when_hit"] >= 1 and e["left_when_hit"] >= 1
                for e in events
            ),
            "kills_exit_ok": sum(e["signal"] is not None and e["exit_ok"] for e in events),
            "written_when_hit": [e["written_when_hit"] for e in events if e["signal"]],
            "written_by_pid": {str(k): v for k, v in sorted(by_pid.items())},
            "unattributed": sorted(unattributed),
            "age_when_hit_s": [e["after_s"] for e in events if e["signal"]],
            "bad_exits": [e for e in events if e["signal"] is None and e["exit"] != 0],
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
        kills = res["kills"]
        ok = (len(got) == n_planned and not res["extra"] and not mismatched and not redone
              and statuses == {"ok": n_planned} and res["kills_into_running_work"] == kills
              and res["kills_exit_ok"] == kills and not res["bad_exits"])  # fmt: skip
        res["exact_result_set"] = ok
        print(
            f"complete {len(got)}/{n_planned}, bit-identical {res['draws_bit_identical']}, "
            f"redone {len(redone)}, tmp files left {len(leftovers)}; {extract_line}"
        )
        print(
            f"kills {kills}: {res['kills_into_running_work']} into running work "
            f"(written when hit: {res['written_when_hit']}), {res['kills_exit_ok']} with the "
            f"expected exit status; processes that ended by themselves not 0: "
            f"{len(res['bad_exits'])}"
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
    for sig, mk, col in (
        ("SIGKILL", "x", "C3"),
        ("SIGTERM", "s", "C1"),
        ("SIGINT", "^", "C2"),
        (None, "o", "C0"),
    ):
        pts = [e for e in ev if e["signal"] == sig]
        ax.plot([e["t"] for e in pts], [e["complete"] for e in pts], mk, color=col,
                label=sig or "process ended", ms=7)  # fmt: skip
    ax.axhline(res["n_planned"], color="k", lw=0.8, ls="--")
    ax.set_xlabel("time since the first start (s)")
    ax.set_ylabel("complete realizations")
    ax.set_title(f"{res['kills']} kills, each into running work, 2 concurrent "
                 f"processes: exact result set "
                 f"{'yes' if res['exact_result_set'] else 'NO'}")  # fmt: skip
    ax.legend(loc="lower right")


if __name__ == "__main__":
    sys.exit(main())
