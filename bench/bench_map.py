"""Level 0 MAP campaign benchmark (CPU or GPU).

1. End to end, as a user runs it: ``bias-run`` on 64 realizations (batch 64,
   float64) in a new process, cold (empty compilation cache) and warm (cache
   filled by the cold run); whole-process wall time, median of ``--repeats``.
2. The inference step alone (one compiled batched MAP + Laplace program,
   simulated data ready, compile excluded): realizations per second at batch
   1, 16, 64, 256, median of ``--repeats``.

Prints the figures and writes them to ``results/benchmarks/map.json``.
Usage: ``python bench/bench_map.py [--repeats 3] [--no-x64]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def end_to_end(repeats: int, x64: bool) -> dict:
    exe = Path(sys.executable).parent / "bias-run"
    cold, warm = [], []
    for _ in range(repeats):
        tmp = Path(tempfile.mkdtemp(prefix="bench_map_"))
        env = {**os.environ, "SHEARBATCH_CACHE_DIR": str(tmp / "cache")}
        for i, sink in enumerate((cold, warm)):
            cmd = [
                str(exe),
                "--config",
                str(ROOT / "configs/level0.yaml"),
                "--shear-grid",
                "-0.05",
                "-0.02",
                "0.02",
                "0.05",
                "--n-realizations",
                "16",
                "--batch-size",
                "64",
                "--output-dir",
                str(tmp / f"out{i}"),
                "--no-progress",
            ]
            cmd += ["--x64"] if x64 else ["--no-x64"]
            t0 = time.perf_counter()
            subprocess.run(cmd, check=True, env=env, capture_output=True)
            sink.append(time.perf_counter() - t0)
            assert len(list((tmp / f"out{i}").iterdir())) == 64
        shutil.rmtree(tmp)
    return {
        "realizations": 64,
        "batch_size": 64,
        "cold_s": {"median": statistics.median(cold), "all": cold},
        "warm_s": {"median": statistics.median(warm), "all": warm},
        "targets_s": {"cold": 20.0, "warm": 8.0},
    }


def inference_only(repeats: int, batches=(1, 16, 64, 256)) -> dict:
    import jax

    from shearbatch.batch import build_inference_model, realization_keys
    from shearbatch.campaign import plan_campaign
    from shearbatch.config import load_config
    from shearbatch.engine import make_inference_program
    from shearbatch.simulate import simulate_batch

    cfg = load_config(ROOT / "configs/level0.yaml")
    model = build_inference_model(cfg)
    out = {}
    for b in batches:
        plan = plan_campaign([0.02], n_realizations=b, base_seed=0)
        sim = simulate_batch(cfg, plan)
        keys = realization_keys([r.seed for r in plan])
        prog = make_inference_program(cfg, model)
        t0 = time.perf_counter()
        jax.block_until_ready(prog(keys, sim.images))
        first = time.perf_counter() - t0
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            jax.block_until_ready(prog(keys, sim.images))
            times.append(time.perf_counter() - t0)
        med = statistics.median(times)
        out[str(b)] = {
            "compile_and_first_s": first,
            "median_s": med,
            "all_s": times,
            "realizations_per_s": b / med,
        }
        print(
            f"  batch {b:4d}: {b / med:9.1f} realizations/s  (step {med * 1e3:.1f} ms, "
            f"first call {first:.1f} s)"
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-x64", dest="x64", action="store_false")
    ap.add_argument("--skip-e2e", action="store_true")
    args = ap.parse_args()

    import jax

    jax.config.update("jax_enable_x64", args.x64)
    res = {
        "jax": jax.__version__,
        "platform": jax.devices()[0].platform,
        "device": jax.devices()[0].device_kind,
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "dtype": "float64" if args.x64 else "float32",
    }
    if not args.skip_e2e:
        print("end to end (bias-run, 64 realizations, batch 64):")
        res["end_to_end"] = end_to_end(args.repeats, args.x64)
        e = res["end_to_end"]
        print(
            f"  cold {e['cold_s']['median']:.1f} s (target 20), "
            f"warm {e['warm_s']['median']:.1f} s (target 8)"
        )
    print("inference step alone:")
    res["inference_only"] = inference_only(args.repeats)
    dest = ROOT / "results" / "benchmarks" / "map.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(res, indent=2) + "\n")
    print(f"wrote {dest}")


if __name__ == "__main__":
    main()
