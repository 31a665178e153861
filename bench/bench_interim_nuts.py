"""NUTS for the interim model (issue 22): cost and convergence per galaxy.

``--config`` (default ``configs/level2.yaml``) with ``inference.shear_model: interim``,
``method: nuts`` and ``--warmup`` / ``--samples`` / ``--chains`` (the config's tree depths
and mass-matrix setting kept unless ``--set``), ``--batch`` realizations of its first grid
point (seeds 0..B-1) in one program (``shearbatch.engine.build_program``: B x M x chains
lanes). Figures: compile time; wall time of the batch (median of ``--repeats``), per
realization and per galaxy; per galaxy (over every galaxy of the batch) R-hat (e1, e2 and
every latent), bulk and tail ESS of e1 / e2 (the smaller), divergences; bulk ESS of e per
second per galaxy (ESS / (batch time / galaxies)). ``--prefixes N ...``: the same
convergence figures on the first N draws of each chain (the first N draws of a longer run
ARE a run of N draws: the kernel and keys are the same), to find the smallest ``samples``
at which every galaxy has R-hat <= 1.01 and bulk ESS(e1, e2) >= 400.

    PYTHONPATH=src python bench/bench_interim_nuts.py --config configs/level2.yaml \\
        --batch 8 --warmup 150 --samples 250 --out results/benchmarks/interim_nuts_level2.json
"""

from __future__ import annotations

import copy
import sys
from typing import Any

import jax
import numpy as np
import yaml

import _harness as h
from shearbatch.campaign import plan_campaign
from shearbatch.core.diagnostics import ess_bulk, ess_tail, rhat
from shearbatch.engine.loop import build_program
from shearbatch.schema import parse_config
from shearbatch.spec import run_spec

RHAT_MAX, ESS_MIN = 1.01, 400.0


def make_spec(args) -> Any:
    raw = yaml.safe_load((h.ROOT / args.config).read_text())
    raw = copy.deepcopy(raw)
    inf = raw.setdefault("inference", {})
    inf.update(shear_model="interim", method="nuts")
    inf.setdefault("nuts_config", {}).update(
        warmup=args.warmup, samples=args.samples, chains=args.chains
    )
    for item in args.set:
        key, _, value = item.partition("=")
        node = raw
        *path, last = key.split(".")
        for k in path:
            node = node.setdefault(k, {})
        node[last] = yaml.safe_load(value)
    return raw, run_spec(parse_config(raw))


def convergence(samples: dict[str, np.ndarray], n: int, detail=None) -> dict[str, Any]:
    """Per-galaxy figures of draws ``{site: (B, chain, draw, M)}`` on their first ``n`` draws;
    ``detail`` ((B, M) S/N, (B, C, S, M) divergences): also a record of every galaxy that
    misses the targets."""
    b, _, _, m = samples["e1"].shape
    cut = {k: np.asarray(v)[:, :, :n] for k, v in samples.items()}
    r_e, r_all, eb, et = (np.empty(b * m) for _ in range(4))
    for i in range(b):
        for j in range(m):
            per = {k: v[i, ..., j] for k, v in cut.items()}
            r = {k: rhat(x) for k, x in per.items()}
            r_e[i * m + j] = max(r["e1"], r["e2"])
            r_all[i * m + j] = max(r.values())
            eb[i * m + j] = min(ess_bulk(per["e1"]), ess_bulk(per["e2"]))
            et[i * m + j] = min(ess_tail(per["e1"]), ess_tail(per["e2"]))
    ok = (r_e <= RHAT_MAX) & (eb >= ESS_MIN)

    def q(x):
        return {"min": float(np.min(x)), "median": float(np.median(x)), "max": float(np.max(x))}

    out = {"samples": n, "galaxies": int(b * m), "rhat_e": q(r_e), "rhat_all": q(r_all),
           "ess_bulk_e": q(eb), "ess_tail_e": q(et), "frac_galaxies_ok": float(ok.mean()),
           "all_ok": bool(ok.all())}  # fmt: skip
    if detail is not None:  # who misses: S/N, size, shape near the |e| < 1 wall, divergences
        snr, div = detail
        e = np.hypot(cut["e1"], cut["e2"])
        rows = []
        for i in np.flatnonzero(~ok):
            bb, j = divmod(int(i), m)
            rows.append({"realization": bb, "galaxy": j, "snr": float(snr[bb, j]),
                         "rhat_e": float(r_e[i]), "ess_bulk_e": float(eb[i]),
                         "divergences": int(div[bb, :, :n, j].sum()),
                         "hlr_median": float(np.median(cut["hlr"][bb, ..., j])),
                         "abs_e_median": float(np.median(e[bb, ..., j])),
                         "frac_abs_e_gt_0.9": float(np.mean(e[bb, ..., j] > 0.9))})  # fmt: skip
        good = ok.reshape(b, m)
        out["missing"] = rows
        if good.any():  # (none at a smoke test's few draws: no figure, not a NaN)
            out["ok_galaxies"] = {"snr_median": float(np.median(snr[good])),
                                  "hlr_median": float(np.median(cut["hlr"].transpose(0, 3, 1, 2)[good])),
                                  "frac_abs_e_gt_0.9": float(np.mean(e.transpose(0, 3, 1, 2)[good] > 0.9))}  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = h.parser(__doc__, "interim_nuts", repeats=3)
    h.add_x64(ap)
    ap.add_argument("--config", default="configs/level2.yaml")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=150)
    ap.add_argument("--samples", type=int, default=250)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--prefixes", type=int, nargs="*", default=[])
    ap.add_argument("--set", action="append", default=[], help="dotted.key=value (YAML)")
    args = ap.parse_args(argv)
    h.configure(args.x64)
    info = h.provenance("float64" if args.x64 else "float32")
    h.banner(info)
    raw, spec = make_spec(args)
    camp = raw.get("campaign", {})
    plan = plan_campaign(camp.get("shear_grid", [0.02])[:1], n_realizations=args.batch,
                         base_seed=0)  # fmt: skip
    prog = build_program(spec, plan)
    compiled, compile_s = h.compile_aot(prog.program, prog.keys, prog.sim.images)
    _, times, out = h.time_calls(compiled, (prog.keys, prog.sim.images), args.repeats, warm=False)
    out = jax.tree.map(np.asarray, out)
    wall = h.median(times)
    m = spec.model.image.n_objects
    div = np.asarray(out.stats["diverging"])  # (B, C, S, M)
    conv = convergence(out.samples, args.samples, (np.asarray(prog.sim.snr), div))
    per_galaxy_s = wall / (args.batch * m)
    depth = np.asarray(out.stats["tree_depth"])
    res = {
        "settings": h.settings(args),
        "provenance": info,
        "nuts_config": spec.inference.settings.model_dump(mode="json"),
        "galaxies_per_realization": m,
        "compile_s": compile_s,
        "batch_wall_s": times,
        "batch_wall_s_median": wall,
        "s_per_realization": wall / args.batch,
        "s_per_galaxy": per_galaxy_s,
        "ess_bulk_e_per_s_per_galaxy": {
            k: conv["ess_bulk_e"][k] / per_galaxy_s for k in ("min", "median")
        },
        "convergence": conv,
        "divergent_transitions": int(div.sum()),
        "galaxies_with_divergences": int(np.sum(div.any(axis=(1, 2)))),
        "tree_depth": {"mean": float(depth.mean()), "max": int(depth.max())},
        "prefixes": [convergence(out.samples, n) for n in args.prefixes if n <= args.samples],
    }
    print(f"{args.config}: B = {args.batch}, M = {m}, warmup {args.warmup}, samples "
          f"{args.samples} x {args.chains} chains; compile {compile_s:.1f} s; batch "
          f"{wall:.2f} s (runs {', '.join(f'{t:.2f}' for t in times)}): "
          f"{wall / args.batch:.3f} s / realization, {per_galaxy_s * 1e3:.2f} ms / galaxy")  # fmt: skip
    for c in [conv, *res["prefixes"]]:
        print(f"  samples {c['samples']}: R-hat(e) max {c['rhat_e']['max']:.4f} (all latents "
              f"{c['rhat_all']['max']:.4f}), bulk ESS(e) min {c['ess_bulk_e']['min']:.0f} "
              f"median {c['ess_bulk_e']['median']:.0f}, tail ESS(e) min "
              f"{c['ess_tail_e']['min']:.0f}; galaxies meeting both {c['frac_galaxies_ok']:.3f}")  # fmt: skip
    e = res["ess_bulk_e_per_s_per_galaxy"]
    print(f"  bulk ESS(e) per second per galaxy: min {e['min']:.0f}, median {e['median']:.0f}; "
          f"divergent transitions {res['divergent_transitions']} in "
          f"{res['galaxies_with_divergences']} galaxies")  # fmt: skip
    for r in conv.get("missing", []):
        print("  misses:", ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}"
                                     for k, v in r.items()))  # fmt: skip
    if "ok_galaxies" in conv:
        print("  the others:", conv["ok_galaxies"])
    return h.write_json(res, args.out)


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
