"""The GPU record of issue 33 (item 5): one run on a GPU node, one JSON.

Every step runs in its own subprocess with its own timeout (this process never initialises
JAX, so each step has the whole device and its own preallocation, as a user's bias-run
would), in this order, each skipped when the ``--budget-s`` left is too short:

1. ``probe``: JAX's version and devices, the device's memory (``memory_stats``), and
   ``nvidia-smi``'s line where there is one.
2. ``level2_auto``: ``bias-run --config configs/level2.yaml --batch-size auto`` (the
   interim model, MAP + Laplace), the real CLI (``python -m shearbatch run``), on
   ``--l2-seeds`` seeds (default 40, the config's campaign: x 4 images, paired and 2
   rotations, of 32 galaxies): from its log, the batch ``auto`` picked and why (the
   memory per lane by XLA's memory analysis of the compiled program, the lanes that fit,
   the budget). It is one batch (``auto`` never plans more lanes than realizations), whose
   "simulation" also compiles the generator: not a warm batch.
3. ``level2_warm``: the same campaign grown ``--l2-grow`` times (a second process
   resuming the root: ``--n-realizations`` x grow, ``--batch-size`` = the lanes ``auto``
   picked, so the same compiled program): its batches after the first are warm. Figures:
   galaxies/s after batch 1 (to ``campaign done``: writes drained) and in the device
   program alone, the host's share of a warm batch's wall (``batch k/n: N
   realization(s) in W s (simulation S s, inference I s)``: host = W - I; other fields
   the engine may add are kept), and this second process's first batch against a warm one.
4. ``nuts``: NUTS at Level 2 (the interim model, ``bench/bench_interim_nuts.py``'s spec
   and convergence figures): ``--nuts-batch`` realizations (default 16) of 32 galaxies x
   ``--nuts-chains`` chains (4), 100 warmup / 400 draws, in one program: compile time,
   wall per batch, bulk ESS of e per second per galaxy, R-hat, XLA's memory per lane.
5. ``level0_auto``, ``level0_warm``: 2 and 3 for ``configs/level0.yaml`` on a 2-D grid
   (``--l0-grid`` values of g1 and of g2 in [-0.05, 0.05]) x ``--l0-seeds`` seeds (default
   8 x 8 x 64 = 4,096 realizations; ``auto``'s one batch: realizations/s end to end, with
   and without the process's start and compile), then grown ``--l0-grow`` times at
   ``--batch-size --l0-batch`` (1024: the batch of the issue's H200 figure):
   realizations/s after batch 1, host share of a warm batch.
6. ``memory`` (only when no log gave a memory per lane): XLA's memory analysis of each
   level's MAP program at 8 lanes.

Writes ``results/benchmarks/gpu.json`` (``gpu.json.partial`` after each step, removed at
the end; ``steps_not_ok`` lists the steps that failed, timed out or were skipped, and the
exit status is then 3) and ``gpu.png``; ``--log FILE`` collects every step's output. The git commit is
``$SHEARBATCH_GIT_COMMIT`` when set (a copy of the tree whose ``.git`` may be stale), else git.
``--quick``: smaller campaigns; ``--cpu-smoke``: tiny sizes on the CPU
(``JAX_PLATFORMS=cpu``), to try the script where there is no GPU (its figures say nothing
about a GPU; written to a temporary directory unless ``--out``)::

    python bench/bench_gpu.py [--quick] [--budget-s 240] [--log bench_gpu.log]
    nice -n 10 python bench/bench_gpu.py --cpu-smoke
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _harness as h

GALAXIES = {"level0": 1, "level2": 32}
SIZES = {  # the size options' defaults in each mode
    "full": {"l2_seeds": 40, "l2_grow": 4, "l0_grid": 8, "l0_seeds": 64, "l0_grow": 2,
             "l0_batch": 1024, "nuts_batch": 16, "nuts_warmup": 100, "nuts_samples": 400,
             "nuts_chains": 4, "budget_s": 240.0},
    "quick": {"l2_seeds": 16, "l2_grow": 4, "l0_grid": 8, "l0_seeds": 16, "l0_grow": 2,
              "l0_batch": 256, "nuts_batch": 8, "nuts_warmup": 100, "nuts_samples": 200,
              "nuts_chains": 4, "budget_s": 150.0},
    "cpu_smoke": {"l2_seeds": 1, "l2_grow": 4, "l0_grid": 2, "l0_seeds": 4, "l0_grow": 2,
                  "l0_batch": 4, "nuts_batch": 1, "nuts_warmup": 20, "nuts_samples": 40,
                  "nuts_chains": 2, "budget_s": 1200.0},
}  # fmt: skip
#: each step's own limit (s; x6 with --cpu-smoke); the budget left bounds it further
STEP_TIMEOUT = {"probe": 60, "level2_auto": 110, "level2_warm": 70, "nuts": 110,
                "level0_auto": 90, "level0_warm": 80, "memory": 60}  # fmt: skip
#: a step starts only with at least this much budget left (s)
STEP_MIN = {"probe": 10, "level2_auto": 45, "level2_warm": 20, "nuts": 45, "level0_auto": 20,
            "level0_warm": 20, "memory": 30}  # fmt: skip

_UNIT = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
_TS = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


# --------------------------------------------------------------------------- the log


def _stamp(line: str) -> float | None:
    m = _TS.match(line)
    if not m:
        return None
    return datetime.datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()


def _bytes(text: str) -> float | None:
    m = re.search(r"([\d.]+(?:e[+-]?\d+)?)\s*(B|KiB|MiB|GiB|TiB)\b", text)
    return float(m[1]) * _UNIT[m[2]] if m else None


def _timings(inner: str) -> dict[str, float]:
    """``simulation 0.01 s, inference 0.64 s, ...`` -> {name: seconds} (any fields)."""
    return {k.strip().replace(" ", "_"): float(v)
            for k, v in re.findall(r"([A-Za-z][\w -]*?)\s+([\d.]+(?:e[+-]?\d+)?)\s*s\b", inner)}  # fmt: skip


def parse_log(text: str) -> dict[str, Any]:
    """What a bias-run log says about its device, lane decision, batches and end. Lines
    the engine may reword are read defensively: a figure not found is None."""
    out: dict[str, Any] = {"batches": [], "lanes_line": None, "auto": None, "errors": [],
                           "memory_per_lane_bytes": None}  # fmt: skip
    for line in text.splitlines():
        msg = line.split(": ", 1)[1] if _TS.match(line) and ": " in line else line
        t = _stamp(line)
        if m := re.search(r"JAX (\S+) on (\w+) x(\d+) \((.*?)\), x64=(\w+)", line):
            out["jax"] = {"version": m[1], "platform": m[2].lower(), "devices": int(m[3]),
                          "kind": m[4], "x64": m[5] == "True"}  # fmt: skip
        elif re.search(
            r"batch size auto: \d+|does not fit|batch (?:of|size) \d+ (?:lanes|\()", msg
        ):
            out["lanes_line"] = out["lanes_line"] or msg  # the engine's lane decision
            if per := re.search(r"([\d.]+ (?:B|KiB|MiB|GiB)) per lane", msg):
                out["memory_per_lane_bytes"] = _bytes(per[1])
            if m := re.search(r"batch size auto: (\d+)", msg):
                fit = re.search(r"(\d+) lanes fit ([\d.]+ \w+)", msg)
                bound = re.search(r"bound: ([^;)]+)", msg)
                budget = re.search(r"lanes fit [\d.]+ \w+, (.*)\)\s*$", msg)
                out["auto"] = {"lanes": int(m[1]), "lanes_that_fit": int(fit[1]) if fit else None,
                               "budget_bytes": _bytes(fit[2]) if fit else None,
                               "budget_source": budget[1] if budget else None,
                               "bound": bound[1].strip() if bound else None}  # fmt: skip
            if "does not fit" in msg:
                chunk = re.search(r"lane chunks of (\d+)", msg)
                out["split_into"] = int(chunk[1]) if chunk else None
        elif m := re.search(r"campaign: (\d+) realizations, (\d+) batch\(es\) of (\d+) lanes", msg):
            out["campaign"] = {"realizations": int(m[1]), "batches": int(m[2]),
                               "lanes": int(m[3]), "t": t}  # fmt: skip
        elif m := re.search(r"batch (\d+)/(\d+): (\d+) realization\(s\) in ([\d.]+) s(.*)", msg):
            inner = m[5].strip()
            inner = inner[1:-1] if inner.startswith("(") and inner.endswith(")") else inner
            out["batches"].append({"index": int(m[1]), "realizations": int(m[3]),
                                   "wall_s": float(m[4]), **_timings(inner), "t": t})  # fmt: skip
        elif m := re.search(r"campaign done: (\d+) ok, (\d+) failed in ([\d.]+) s", msg):
            out["done"] = {"ok": int(m[1]), "failed": int(m[2]), "wall_s": float(m[3]), "t": t}
        elif m := re.search(r"batch (\d+): lockstep efficiency (.*)", msg):
            out.setdefault("lockstep_efficiency", {})[m[1]] = m[2].strip()
        elif m := re.search(r"persistent compilation cache: (\d+) hit\(s\), (\d+) miss", msg):
            out["cache"] = {"hits": int(m[1]), "misses": int(m[2])}
        if line.startswith("Error:") or "Traceback" in line or "RESOURCE_EXHAUSTED" in line:
            out["errors"].append(line.strip()[:300])
    return out


def _median(xs: list[float]) -> float | None:
    return h.median(xs) if xs else None


def campaign_figures(log: dict[str, Any], galaxies: int, process_wall_s: float) -> dict[str, Any]:
    """Throughput, host share and memory of one campaign from its parsed log."""
    batches, camp, done = log["batches"], log.get("campaign"), log.get("done")
    warm = batches[1:] or batches
    n = sum(b["realizations"] for b in batches)
    host = [(b["wall_s"] - b["inference"]) / b["wall_s"] for b in warm
            if "inference" in b and b["wall_s"] > 0]  # fmt: skip
    infer = sum(b.get("inference", 0.0) for b in warm)
    post = (done["t"] - camp["t"]) if done and camp and done["t"] and camp["t"] else None
    fig = {
        "realizations": n,
        "galaxies_per_realization": galaxies,
        "batch_lanes": camp["lanes"] if camp else None,
        "n_batches": len(batches),
        "warm_batches": (
            "batches 2.."
            if len(batches) > 1
            else "batch 1 (the only one; its program compiled before it ran)"
        ),
        "memory_per_lane_bytes": log.get("memory_per_lane_bytes"),
        "memory_per_lane_MiB": (
            log["memory_per_lane_bytes"] / 2**20 if log.get("memory_per_lane_bytes") else None
        ),
        "auto": log.get("auto"),
        "lanes_line": log.get("lanes_line"),
        "process_wall_s": process_wall_s,
        "campaign_wall_s": done["wall_s"] if done else None,
        "post_compile_s": post,
        "realizations_per_s_end_to_end": n / process_wall_s if n and process_wall_s else None,
        "realizations_per_s_campaign": n / done["wall_s"] if done and done["wall_s"] else None,
        "realizations_per_s_post_compile": n / post if post else None,
        "galaxies_per_s_post_compile": n * galaxies / post if post else None,
        # the same from the end of batch 1 (an engine that compiles inside batch 1)
        "realizations_per_s_after_batch_1": (
            (n - batches[0]["realizations"]) / (done["t"] - batches[0]["t"])
            if len(batches) > 1
            and done
            and done["t"]
            and batches[0]["t"]
            and done["t"] > batches[0]["t"]
            else None
        ),
        "galaxies_per_s_device_program": (
            sum(b["realizations"] for b in warm) * galaxies / infer if infer > 0 else None
        ),
        "warm_batch_wall_s_median": _median([b["wall_s"] for b in warm]),
        "warm_inference_s_median": _median([b["inference"] for b in warm if "inference" in b]),
        "host_fraction_warm_median": _median(host),
        "host_fraction_warm_max": max(host) if host else None,
        "host_ms_per_realization_warm": _median(
            [
                1e3 * (b["wall_s"] - b["inference"]) / b["realizations"]
                for b in warm
                if "inference" in b and b["realizations"]
            ]
        ),
        "batches": [{k: v for k, v in b.items() if k != "t"} for b in batches],
        "lockstep_efficiency": log.get("lockstep_efficiency"),
        "compilation_cache": log.get("cache"),
    }
    return fig


# --------------------------------------------------------------------------- steps (children)


def _step_probe(p: dict[str, Any]) -> dict[str, Any]:
    import jax

    try:
        import numpyro

        npv = numpyro.__version__
    except ImportError:  # pragma: no cover
        npv = None
    dev = jax.devices()[0]
    try:
        stats = dev.memory_stats() or {}
    except Exception:  # a backend without the call
        stats = {}
    smi = None
    if shutil.which("nvidia-smi"):
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                            "--format=csv,noheader"], capture_output=True, text=True,
                           timeout=30, check=False)  # fmt: skip
        smi = q.stdout.strip() or None
    return {"jax": jax.__version__, "jaxlib": getattr(jax.lib, "__version__", None),
            "numpyro": npv, "python": platform.python_version(), "platform": dev.platform,
            "device": dev.device_kind, "devices": [str(d) for d in jax.devices()],
            "memory_bytes_limit": stats.get("bytes_limit"),
            "memory_bytes_in_use": stats.get("bytes_in_use"), "nvidia_smi": smi}  # fmt: skip


def _step_nuts(p: dict[str, Any]) -> dict[str, Any]:
    import jax
    import numpy as np

    import bench_interim_nuts as bin_
    from shearbatch.campaign import plan_campaign
    from shearbatch.engine.loop import build_program

    h.configure(True)
    ns = argparse.Namespace(config=p["config"], warmup=p["warmup"], samples=p["samples"],
                            chains=p["chains"], set=[])  # fmt: skip
    raw, spec = bin_.make_spec(ns)
    grid = raw.get("campaign", {}).get("shear_grid", [0.02])[:1]
    plan = plan_campaign(grid, n_realizations=p["batch"], base_seed=0)
    prog = build_program(spec, plan)
    compiled, compile_s = h.compile_aot(prog.program, prog.keys, prog.sim.images)
    lanes = int(prog.keys.shape[0])
    try:
        mem = compiled.memory_analysis()
        total = int(mem.argument_size_in_bytes + mem.output_size_in_bytes
                    + mem.temp_size_in_bytes)  # fmt: skip
    except Exception:  # a backend without memory analysis
        total = None
    _, times, out = h.time_calls(compiled, (prog.keys, prog.sim.images), p["repeats"], warm=False)
    out = jax.tree.map(np.asarray, out)
    wall = h.median(times)
    m = spec.model.image.n_objects
    conv = bin_.convergence(out.samples, p["samples"])
    per_galaxy_s = wall / (lanes * m)
    div = np.asarray(out.stats["diverging"])
    return {
        "realizations": lanes, "galaxies": lanes * m, "chains": p["chains"],
        "warmup": p["warmup"], "samples": p["samples"], "compile_s": compile_s,
        "batch_wall_s": times, "batch_wall_s_median": wall,
        "ms_per_galaxy": 1e3 * per_galaxy_s,
        "ess_bulk_e_per_s_per_galaxy": {k: conv["ess_bulk_e"][k] / per_galaxy_s
                                        for k in ("min", "median")},
        "convergence": {k: conv[k] for k in ("rhat_e", "ess_bulk_e", "ess_tail_e",
                                             "frac_galaxies_ok", "all_ok")},
        "divergent_transitions": int(div.sum()),
        "program_bytes": total,
        "memory_per_lane_MiB": total / lanes / 2**20 if total else None,
    }  # fmt: skip


def _step_memory(p: dict[str, Any]) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp

    from shearbatch.engine.loop import build_program, lane_chunk_for
    from shearbatch.schema import load_config
    from shearbatch.spec import run_spec

    h.configure(True)
    out = {}
    for level in p["levels"]:
        spec = run_spec(load_config(h.ROOT / "configs" / f"{level}.yaml"))
        program = build_program(spec, chunk=lane_chunk_for("auto", spec)).program
        im, lanes = spec.model.image, p["lanes"]
        keys = jax.ShapeDtypeStruct((lanes, 2), jnp.uint32)
        obs = jax.ShapeDtypeStruct((lanes, im.n_objects, im.ny, im.nx), jnp.result_type(float))
        t0 = time.perf_counter()
        mem = program.lower(keys, obs).compile().memory_analysis()
        total = int(mem.argument_size_in_bytes + mem.output_size_in_bytes
                    + mem.temp_size_in_bytes)  # fmt: skip
        out[level] = {"lanes": lanes, "program_bytes": total, "compile_s": time.perf_counter() - t0,
                      "memory_per_lane_MiB": total / lanes / 2**20}  # fmt: skip
    return out


STEPS = {"probe": _step_probe, "nuts": _step_nuts, "memory": _step_memory}


# --------------------------------------------------------------------------- orchestration


class Runner:
    """Runs the steps in subprocesses under one time budget; collects their output."""

    def __init__(self, args: argparse.Namespace, tmp: Path):
        self.args, self.tmp, self.t0 = args, tmp, time.perf_counter()
        self.logs: list[str] = []
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        path = [str(h.ROOT / "src"), str(h.ROOT / "bench"), *filter(None, [env.get("PYTHONPATH")])]
        env["PYTHONPATH"] = os.pathsep.join(path)
        env["SHEARBATCH_CACHE_DIR"] = str(args.cache_dir or tmp / "jax-cache")
        env.pop("SHEARBATCH_MEMORY_BUDGET", None)  # the device's own free memory
        if args.cpu_smoke:
            env["JAX_PLATFORMS"] = "cpu"
        self.env = env

    def left(self) -> float:
        return self.args.budget_s - (time.perf_counter() - self.t0)

    def timeout(self, name: str) -> float | None:
        """The step's timeout, or None when too little budget is left to start it."""
        left = self.left()
        if left < STEP_MIN[name]:
            return None
        return min(STEP_TIMEOUT[name] * (6 if self.args.cpu_smoke else 1), left)

    def run(self, name: str, cmd: list[str], timeout: float) -> dict[str, Any]:
        """``cmd`` in its own process group (killed whole at the timeout: writer processes
        too); its exit status (None: timed out) and output."""
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=self.env, cwd=h.ROOT, start_new_session=True)  # fmt: skip
        try:
            out, err = proc.communicate(timeout=timeout)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            rc = None
        text = (out or "") + (err or "")
        wall = time.perf_counter() - t0
        status = "ok" if rc == 0 else ("timeout" if rc is None else f"exit {rc}")
        self.logs.append(f"===== {name}: {' '.join(cmd[1:])}\n===== {status} after "
                         f"{wall:.1f} s (timeout {timeout:.0f} s)\n{text}\n")  # fmt: skip
        print(f"[{name}] {status} in {wall:.1f} s", flush=True)
        return {"rc": rc, "status": status, "wall_s": wall, "timeout_s": timeout, "text": text}

    def step(self, name: str, payload: dict[str, Any]) -> dict[str, Any]:
        """An in-process step of this script, in a subprocess: its JSON result."""
        timeout = self.timeout(name)
        if timeout is None:
            return {"skipped": f"budget: {self.left():.0f} s left"}
        result = self.tmp / f"{name}.result.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--step", name,
               "--payload", json.dumps(payload), "--result", str(result)]  # fmt: skip
        r = self.run(name, cmd, timeout)
        if r["rc"] != 0 or not result.is_file():
            return {"error": r["status"], "wall_s": r["wall_s"], "tail": r["text"][-1500:]}
        return {**json.loads(result.read_text()), "step_wall_s": r["wall_s"]}

    def campaign(self, name: str, level: str, root: Path, args: list[str]) -> dict[str, Any]:
        """``python -m shearbatch run`` of ``level``'s config on ``root``: the figures of its
        log (:func:`campaign_figures`)."""
        timeout = self.timeout(name)
        if timeout is None:
            return {"skipped": f"budget: {self.left():.0f} s left"}
        cmd = [sys.executable, "-m", "shearbatch", "run", "--config",
               str(h.ROOT / "configs" / f"{level}.yaml"), *args, "--no-progress",
               "--output-dir", str(root)]  # fmt: skip
        r = self.run(name, cmd, timeout)
        log = parse_log(r["text"])
        fig = campaign_figures(log, GALAXIES[level], r["wall_s"])
        fig.update(exit=r["status"], device=log.get("jax"), errors=log["errors"][:5],
                   args=" ".join(args))  # fmt: skip
        if r["rc"] != 0:
            fig["tail"] = r["text"][-1500:]
            # this bias-run has no --batch-size auto: the caller falls back to a number
            fig["no_auto"] = "'--batch-size'" in r["text"] and "valid integer" in r["text"]
        return fig

    def level(
        self,
        level: str,
        first: list[str],
        seeds: int,
        grow: int,
        warm_batch: int | None,
        fallback: int,
    ) -> dict[str, Any]:
        """``<level>_auto`` (``--batch-size auto``, ``seeds`` seeds), then ``<level>_warm``:
        the same root grown to ``grow`` x ``seeds`` at ``warm_batch`` (None: the lanes
        ``auto`` picked)."""
        root = self.tmp / level
        a = self.campaign(f"{level}_auto", level, root,
                          [*first, "--n-realizations", str(seeds), "--batch-size", "auto"])  # fmt: skip
        if a.get("no_auto"):
            shutil.rmtree(root, ignore_errors=True)
            a = self.campaign(f"{level}_auto", level, root,
                              [*first, "--n-realizations", str(seeds), "--batch-size",
                               str(fallback)])  # fmt: skip
            a["auto_supported"] = False
        batch = warm_batch or (a.get("auto") or {}).get("lanes") or a.get("batch_lanes") or fallback
        w = self.campaign(f"{level}_warm", level, root, [*first, "--n-realizations",
                          str(seeds * grow), "--batch-size", str(batch)])  # fmt: skip
        shutil.rmtree(root, ignore_errors=True)
        return {"summary": level_summary(a, w), "auto_run": a, "warm_run": w}


def level_summary(a: dict[str, Any], w: dict[str, Any]) -> dict[str, Any]:
    """The figures of a level: ``auto``'s choice from the first run, the warm figures from
    the second (its batches after the first)."""
    auto = a.get("auto") or {}
    batches = w.get("batches") or []
    if len(batches) < 2:  # no batch after the first: no warm figure
        w = {k: v for k, v in w.items() if k in ("batch_lanes", "memory_per_lane_MiB")}
    warm = w.get("warm_batch_wall_s_median")
    return {
        "auto_batch": auto.get("lanes"),
        "auto_bound": auto.get("bound"),
        "auto_lanes_that_fit": auto.get("lanes_that_fit"),
        "auto_budget_GiB": auto["budget_bytes"] / 2**30 if auto.get("budget_bytes") else None,
        "auto_budget_source": auto.get("budget_source"),
        "memory_per_lane_MiB": a.get("memory_per_lane_MiB") or w.get("memory_per_lane_MiB"),
        "auto_run_realizations": a.get("realizations"),
        "auto_run_realizations_per_s_process": a.get("realizations_per_s_end_to_end"),
        "auto_run_realizations_per_s_campaign": a.get("realizations_per_s_campaign"),
        "auto_run_realizations_per_s_post_compile": a.get("realizations_per_s_post_compile"),
        "warm_batch_lanes": w.get("batch_lanes"),
        "warm_batches": max(0, len(batches) - 1),
        "realizations_per_s_warm": w.get("realizations_per_s_after_batch_1"),
        "galaxies_per_s_warm": (
            w["realizations_per_s_after_batch_1"] * w["galaxies_per_realization"]
            if w.get("realizations_per_s_after_batch_1")
            else None
        ),
        "galaxies_per_s_device_program": w.get("galaxies_per_s_device_program"),
        "warm_batch_wall_s_median": warm,
        "warm_inference_s_median": w.get("warm_inference_s_median"),
        "host_fraction_warm_median": w.get("host_fraction_warm_median"),
        "host_ms_per_realization_warm": w.get("host_ms_per_realization_warm"),
        "second_process_first_batch_s": batches[0]["wall_s"] if batches else None,
        "second_process_first_batch_over_warm": (
            batches[0]["wall_s"] / warm if batches and warm else None
        ),
    }


def _scrub(obj: Any, tmp: Path) -> Any:
    """The record without this machine's paths (log tails quote them)."""
    if isinstance(obj, dict):
        return {k: _scrub(v, tmp) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_scrub(v, tmp) for v in obj]
    if isinstance(obj, str):
        for path, name in ((str(tmp), "<tmp>"), (str(h.ROOT), "<repo>"),
                           (str(Path.home()), "~"), (tempfile.gettempdir(), "<tmpdir>")):  # fmt: skip
            obj = obj.replace(path, name)
        return obj.lstrip("/")
    return obj


def _not_ok(res: dict[str, Any]) -> list[str]:
    """The steps that failed, timed out or were skipped for the budget."""
    out = []
    for level in ("level2", "level0"):
        for part in ("auto_run", "warm_run"):
            r = (res.get(level) or {}).get(part) or {}
            if r.get("exit") != "ok":
                out.append(f"{level} {part}: {r.get('exit') or r.get('skipped')}")
    for step in ("nuts", "memory"):
        r = res.get(step)
        if r is not None and ("error" in r or "skipped" in r):
            out.append(f"{step}: {r.get('error') or r.get('skipped')}")
    return out


def _grid(n: int) -> list[str]:
    return [f"{-0.05 + 0.1 * i / (n - 1):.4f}" if n > 1 else "0.0200" for i in range(n)]


def _provenance(probe: dict[str, Any]) -> dict[str, Any]:
    git = h.git_state()
    # given, it wins: the device's copy of the tree may carry a stale .git (seen on the
    # H100: HEAD at the session's start, not the tree that ran)
    if os.environ.get("SHEARBATCH_GIT_COMMIT"):
        git = {"commit": os.environ["SHEARBATCH_GIT_COMMIT"], "modified": None,
               "source": "$SHEARBATCH_GIT_COMMIT (the tree sent to the device)"}  # fmt: skip
    return {
        "jax": probe.get("jax"), "numpyro": probe.get("numpyro"),
        "python": probe.get("python") or platform.python_version(),
        "platform": probe.get("platform"), "device": probe.get("device"),
        "devices": probe.get("devices"), "cpu_count": os.cpu_count(),
        "machine": platform.machine(), "dtype": "float64", "git": git,
        "load_average_start": list(os.getloadavg()),
        "device_memory_bytes": probe.get("memory_bytes_limit"),
        "nvidia_smi": probe.get("nvidia_smi"),
    }  # fmt: skip


def _summary(res: dict[str, Any]) -> None:
    print(f"GPU record: {res.get('device')} ({res.get('platform')}), JAX {res.get('jax')}, "
          f"commit {(res.get('git') or {}).get('commit')}")  # fmt: skip

    def f(v, fmt):
        return "-" if v is None else format(v, fmt)

    for level in ("level2", "level0"):
        lv = res.get(level) or {}
        c, a, w = lv.get("summary") or {}, lv.get("auto_run") or {}, lv.get("warm_run") or {}
        print(f"  {level}: auto run {a.get('exit') or a.get('skipped')}, warm run "
              f"{w.get('exit') or w.get('skipped')}")  # fmt: skip
        if not c:
            continue
        print(f"    batch auto: {c['auto_batch']} lanes (bound: {c['auto_bound']}; "
              f"{c['auto_lanes_that_fit']} fit {f(c['auto_budget_GiB'], '.1f')} GiB), "
              f"{f(c['memory_per_lane_MiB'], '.3g')} MiB per lane; its run: "
              f"{f(c['auto_run_realizations_per_s_process'], '.1f')} realizations/s with the "
              f"process start, {f(c['auto_run_realizations_per_s_post_compile'], '.1f')} "
              f"after the compile")  # fmt: skip
        print(f"    warm ({c['warm_batches']} batches of {c['warm_batch_lanes']}): "
              f"{f(c['realizations_per_s_warm'], '.1f')} realizations/s, "
              f"{f(c['galaxies_per_s_warm'], '.0f')} galaxies/s "
              f"({f(c['galaxies_per_s_device_program'], '.0f')} in the device program); "
              f"batch {f(c['warm_batch_wall_s_median'], '.2f')} s, host fraction "
              f"{f(c['host_fraction_warm_median'], '.2f')} "
              f"({f(c['host_ms_per_realization_warm'], '.2f')} ms/realization); second "
              f"process's first batch {f(c['second_process_first_batch_over_warm'], '.2f')}x "
              f"a warm one")  # fmt: skip
    n = res.get("nuts") or {}
    if "ess_bulk_e_per_s_per_galaxy" in n:
        e = n["ess_bulk_e_per_s_per_galaxy"]
        print(f"  NUTS level 2: {n['realizations']} x 32 galaxies x {n['chains']} chains, "
              f"{n['warmup']}/{n['samples']}: compile {n['compile_s']:.1f} s, "
              f"{n['ms_per_galaxy']:.2f} ms/galaxy, bulk ESS(e)/s per galaxy median "
              f"{e['median']:.0f} (min {e['min']:.0f}), galaxies meeting R-hat/ESS "
              f"{n['convergence']['frac_galaxies_ok']:.3f}, "
              f"{f(n['memory_per_lane_MiB'], '.3g')} MiB per lane")  # fmt: skip
    else:
        print(f"  NUTS level 2: {n.get('skipped') or n.get('error')}")


def draw(fig, res: dict[str, Any]) -> None:
    """Left: galaxies/s of warm batches, end to end and in the device program; middle: a
    warm batch's wall split into device program and host; right: NUTS bulk ESS(e)/s per
    galaxy."""
    ax, bx, cx = fig.subplots(1, 3)
    levels = [lv for lv in ("level2", "level0") if (res.get(lv) or {}).get("summary")]
    for i, lv in enumerate(levels):
        c = res[lv]["summary"]
        for j, (key, label) in enumerate((("galaxies_per_s_warm", "warm batches, end to end"),
                                          ("galaxies_per_s_device_program", "device program"))):  # fmt: skip
            v = c.get(key) or 0.0
            ax.bar(i + 0.4 * j, v, width=0.4, color=f"C{j}", label=label if i == 0 else None)
            ax.text(i + 0.4 * j, v, f"{v:.0f}", ha="center", va="bottom", fontsize=8)
        wall = c.get("warm_batch_wall_s_median") or 0.0
        inf = c.get("warm_inference_s_median") or 0.0
        bx.bar(i, inf, color="C2", label="device program" if i == 0 else None)
        bx.bar(i, max(wall - inf, 0.0), bottom=inf, color="C3", label="host" if i == 0 else None)
        frac = c.get("host_fraction_warm_median")
        bx.text(i, wall, f"host {frac:.0%}" if frac is not None else "", ha="center",
                va="bottom", fontsize=8)  # fmt: skip
    names = [f"{lv}: batch {res[lv]['summary'].get('warm_batch_lanes')}\n(auto "
             f"{res[lv]['summary'].get('auto_batch')})" for lv in levels]  # fmt: skip
    for x in (ax, bx):
        x.set_xticks(range(len(levels)), names)
        if levels:
            x.legend(fontsize=8)
    if any((res[lv]["summary"].get("galaxies_per_s_warm") or 0) > 0 for lv in levels):
        ax.set_yscale("log")
    ax.set_ylabel("galaxies / s")
    ax.set_title("MAP: galaxies/s of warm batches")
    bx.set_ylabel("s per warm batch (median)")
    bx.set_title("a warm batch: device program vs host")
    n = res.get("nuts") or {}
    if "ess_bulk_e_per_s_per_galaxy" in n:
        e = n["ess_bulk_e_per_s_per_galaxy"]
        cx.bar(["min", "median"], [e["min"], e["median"]], color="C4")
        cx.set_title(f"NUTS, Level 2: {n['realizations']} x 32 galaxies, {n['chains']} chains",
                     fontsize=10)  # fmt: skip
    else:
        cx.set_title("NUTS Level 2: not run")
    cx.set_ylabel("bulk ESS(e) / s per galaxy")


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    ap = h.parser(__doc__, "gpu", repeats=2)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="smaller sizes, budget 150 s")
    mode.add_argument("--cpu-smoke", action="store_true", help="tiny sizes on the CPU")
    for k in SIZES["full"]:
        kind = float if k == "budget_s" else int
        ap.add_argument(f"--{k.replace('_', '-')}", type=kind, default=None,
                        help=f"default {SIZES['full'][k]} (--quick {SIZES['quick'][k]})")  # fmt: skip
    ap.add_argument("--cache-dir", type=Path, default=None,
                    help="JAX compilation cache of the steps (default: a fresh one: honest compiles)")  # fmt: skip
    ap.add_argument("--log", type=Path, default=None, help="write every step's output here")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("--step", choices=sorted(STEPS), help=argparse.SUPPRESS)
    ap.add_argument("--payload", help=argparse.SUPPRESS)
    ap.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.step:  # a child: one step, its result as JSON
        args.result.write_text(json.dumps(STEPS[args.step](json.loads(args.payload))))
        return {"step": args.step}
    size = SIZES["cpu_smoke" if args.cpu_smoke else "quick" if args.quick else "full"]
    for k, v in size.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    given = argv if argv is not None else sys.argv[1:]
    if args.cpu_smoke and not any(a.startswith("--out") for a in given):
        args.out = Path(tempfile.gettempdir()) / "bench_gpu_cpu_smoke" / "gpu.json"
    tmp = Path(tempfile.mkdtemp(prefix="bench_gpu_"))
    run = Runner(args, tmp)
    partial = Path(f"{args.out}.partial")
    res: dict[str, Any] = {}

    def save() -> None:
        partial.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(json.dumps(res, indent=2, default=str) + "\n")
        if args.log:
            args.log.write_text("".join(run.logs))

    try:
        probe = run.step("probe", {})
        res.update(_provenance(probe))
        res["settings"] = {**h.settings(args), "mode": "cpu_smoke" if args.cpu_smoke else
                           "quick" if args.quick else "full"}  # fmt: skip
        res["probe"] = probe
        h.banner({**res, "load_average_start": res["load_average_start"]})
        if probe.get("platform") != "gpu" and not args.cpu_smoke:
            save()
            print(f"no GPU here ({probe.get('platform') or probe.get('error')}): "
                  "--cpu-smoke tries the script on the CPU", file=sys.stderr)  # fmt: skip
            return None
        save()
        res["level2"] = run.level("level2", [], args.l2_seeds, args.l2_grow, None, 64)
        save()
        res["nuts"] = run.step("nuts", {"config": "configs/level2.yaml", "batch": args.nuts_batch,
                                        "warmup": args.nuts_warmup, "samples": args.nuts_samples,
                                        "chains": args.nuts_chains, "repeats": args.repeats})  # fmt: skip
        save()
        grid = _grid(args.l0_grid)
        res["level0"] = run.level("level0", ["--shear-grid", *grid, "--shear-grid-g2", *grid],
                                  args.l0_seeds, args.l0_grow, args.l0_batch, 1024)  # fmt: skip
        save()
        missing = [lv for lv in ("level2", "level0")
                   if not ((res.get(lv) or {}).get("summary") or {}).get("memory_per_lane_MiB")]  # fmt: skip
        if missing:
            res["memory"] = run.step("memory", {"levels": missing, "lanes": 8})
        res["budget_left_s"] = run.left()
        res["steps_not_ok"] = _not_ok(res)
        res = _scrub(res, tmp)
        _summary(res)
        h.write_json(res, args.out, draw)
        partial.unlink(missing_ok=True)
        if res["steps_not_ok"]:
            print("steps not ok: " + "; ".join(res["steps_not_ok"]), file=sys.stderr)
        return res
    finally:
        if args.log:
            args.log.parent.mkdir(parents=True, exist_ok=True)
            args.log.write_text("".join(run.logs))
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":  # 0: every step ok; 3: a record with steps not ok; 1: none
    record = main()
    sys.exit(1 if record is None else 3 if record.get("steps_not_ok") else 0)
