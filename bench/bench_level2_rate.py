"""Level 2's cost per galaxy on this CPU and what each lever of issue 42 saves, with the
same seeds' m before and after (issue 42 items 2 and 4).

The inference program ``bias-run`` compiles for ``configs/level2.yaml`` (32 galaxies per
realization, the interim model, paired and ring design; ``build_program`` with the CPU's
lane chunk, as the engine builds it), run on ``--batches`` batches of ``--batch``
realizations (consecutive seeds, the same for every variant), one process, post-compile:

- ``before``: the config as shipped before issue 42: 1,000 Student-t draws per galaxy,
  every stamp in float64;
- one lever at a time, the rest as ``before``: ``draws_200`` (200 draws per galaxy, the
  count shipped), ``draw_f32`` (each draw's stamps rendered in float32:
  ``map_config.draw_precision``), ``gn_f32`` (the Gauss-Newton steps in float32, exact
  Newton in float64: ``map_config.gauss_newton_precision``), ``newton_tol`` (exact Newton
  stops at half-decrement 1e-5 instead of 1e-10: ``map_config.tol``);
- ``shipped``: configs/level2.yaml now (all four).

Per variant: compile seconds, the median post-compile seconds per batch (``--repeats``
calls of each batch) and galaxies/s, and m1 from the pooled fits of the batches' galaxies
(the population estimator as ``bias-stats`` runs it, on the draws and weights the program
wrote: +g against -g, paired); the shift ``dm`` against ``before`` on the same seeds with
its delete-one-seed jackknife error. ``draw_f32`` and ``gn_f32`` keep ``before``'s draws
(the same random numbers, the same modes to ~1e-10), so their ``dm`` is the lever's own
effect, known far below 3e-5 (``newton_tol`` moves each proposal's centre and scale, not
the random numbers); a variant with other draw counts carries the draws' Monte
Carlo noise. The variants run in turn, each batch's calls back to back; the load average
is recorded (a shared machine).

The draws-per-galaxy question on real Level 2 galaxies (what bench/bench_draws.py answers
on a toy with an exact answer): ``before``'s 1,000 draws per galaxy are split into
disjoint sets of K (whole antithetic pairs), each a K-draw run of the shipped proposal on
the same galaxies; m from each set against m from all 1,000: the mean shift (the finite-K
bias, with and without the correction) and the sets' scatter (the draws' Monte Carlo
noise in m at K, to set beside the shape noise of m). ``before`` runs ``--study-batches``
batches for it (the first ``--batches`` timed, the rest one untimed call each).

    .venv/bin/python bench/bench_level2_rate.py [--batch 16] [--batches 6] [--repeats 2]
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
import yaml

import _harness as h

BEFORE = {"num_samples": 1000, "draw_precision": None, "gauss_newton_precision": None, "tol": None}
VARIANTS = {
    "before": {},
    "draws_200": {"num_samples": 200},
    "draw_f32": {"draw_precision": "float32"},
    "gn_f32": {"gauss_newton_precision": "float32"},
    "newton_tol": {"tol": 1e-5},
    "shipped": None,  # configs/level2.yaml as it is
}
SUBSET_KS = [50, 100, 200, 250]
MODES = (
    "halves",
    "delta",
    "none",
)  # population_np.CORRECTIONS: the shipped one first  # the draws-per-galaxy study on before's draws
TARGET_RATE = 400.0  # issue 42: Level 2 galaxies/s, one process, post-compile


def config(variant: str) -> dict[str, Any]:
    raw = yaml.safe_load((h.ROOT / "configs" / "level2.yaml").read_text())
    if VARIANTS[variant] is not None:
        raw["inference"]["map_config"].update({**BEFORE, **VARIANTS[variant]})
    return raw


def population(out, seeds: list[int], truth: list[tuple[float, float]]) -> list[dict]:
    """Per realization of a batch: its galaxies' draws (eps) and relative log weights."""
    from shearbatch.core.population_np import relative_log_weights

    e1, e2 = (np.asarray(out.samples[s], np.float64) for s in ("e1", "e2"))  # (B, 1, K, M)
    lw = np.asarray(out.stats["interim_log_weight"], np.float64)  # (B, 1, K, M)
    rows = []
    for b, (seed, g) in enumerate(zip(seeds, truth, strict=True)):
        eps = np.stack([e1[b, 0].T, e2[b, 0].T], axis=-1).astype(np.float32)  # (M, K, 2)
        rows.append({"seed": seed, "g1": g[0], "eps": eps,
                     "log_base": relative_log_weights(lw[b, 0].T, axis=1)})  # fmt: skip
    return rows


def m_of(
    rows: list[dict], prior, shear: float, correct: bool = True
) -> tuple[float, np.ndarray, list[int]]:
    """m1 from the pooled fits at +g and -g and its delete-one-seed values."""
    from shearbatch.core import population_np as pnp

    seeds = sorted({r["seed"] for r in rows})
    fits, jk = {}, {}
    for sign in (1, -1):
        sel = [r for r in rows if np.isclose(r["g1"], sign * shear)]
        eps = np.concatenate([r["eps"] for r in sel])
        base = np.concatenate([r["log_base"] for r in sel])
        who = np.concatenate([[r["seed"]] * len(r["eps"]) for r in sel])
        f = pnp.fit(eps, base, prior, threads=2, correct=correct)
        fits[sign] = f.g[0]
        ok = np.all(np.isfinite(f.galaxy_grad), axis=1)
        h_tot = f.galaxy_hess[ok].sum(axis=0)
        jk[sign] = np.array([
            (f.g + np.linalg.solve(h_tot - f.galaxy_hess[ok & (who == s)].sum(axis=0),
                                   f.galaxy_grad[ok & (who == s)].sum(axis=0)))[0]
            for s in seeds])  # fmt: skip
    m = (fits[1] - fits[-1]) / (2 * shear) - 1
    return float(m), (jk[1] - jk[-1]) / (2 * shear) - 1, seeds


def subsets(rows: list[dict], prior, shear: float, ks: list[int]) -> list[dict[str, Any]]:
    """The draws-per-galaxy study on real Level 2 galaxies: ``before``'s 1,000 draws per
    galaxy (500 antithetic pairs: draw j with j + 500) split into 1,000 / K disjoint sets of
    K / 2 pairs, each a K-draw run of the same proposal; m from each set (with each of
    :data:`MODES`' corrections) against m from all 1,000 (the shipped correction): the mean
    shift, its error
    (the sets' sd / sqrt(sets)) and the sets' sd (the draws' Monte Carlo noise in m at K
    on these galaxies, against the shape noise, ``m1_err``)."""
    half = rows[0]["eps"].shape[1] // 2
    m_all = m_of(rows, prior, shear)[0]
    out = []
    for k in ks:
        sets = half // (k // 2)
        per = {mode: [] for mode in MODES}
        for i in range(sets):
            pick = np.arange(i * (k // 2), (i + 1) * (k // 2))
            idx = np.concatenate([pick, pick + half])  # antithetic pairs: j, then j + half
            sub = [{**r, "eps": r["eps"][:, idx], "log_base": r["log_base"][:, idx]} for r in rows]
            for mode in MODES:
                per[mode].append(m_of(sub, prior, shear, correct=mode)[0] - m_all)
        row = {"K": k, "sets": sets}
        for name in MODES:
            x = np.asarray(per[name])
            row[name] = {"dm": float(x.mean()), "dm_err": float(x.std(ddof=1) / np.sqrt(sets)),
                         "mc_sd": float(x.std(ddof=1))}  # fmt: skip
        out.append(row)
    return out


def jackknife(x: np.ndarray) -> float:
    return float(np.sqrt((len(x) - 1) / len(x) * np.sum((x - x.mean()) ** 2)))


def measure(variant: str, args: Any) -> dict[str, Any]:
    import jax

    from shearbatch.campaign import plan_campaign
    from shearbatch.core import population_np as pnp
    from shearbatch.engine.loop import batch_inputs, build_program, lane_chunk_for
    from shearbatch.schema import parse_config
    from shearbatch.spec import run_spec

    raw = config(variant)
    spec = run_spec(parse_config(raw))
    study_on = variant == "before" and args.study_batches > args.batches
    n_seeds = args.batch * max(args.batches, args.study_batches if study_on else 0) // 4
    plan = plan_campaign([0.02], n_realizations=n_seeds, base_seed=args.base_seed, paired=True,
                         rotations=2)  # fmt: skip
    batches = [plan[i : i + args.batch] for i in range(0, len(plan), args.batch)]
    chunk = lane_chunk_for("auto", spec)
    built = build_program(spec, chunk=chunk)
    t0 = time.perf_counter()
    sim, keys = batch_inputs(spec, batches[0])
    compiled = built.program.lower(keys, sim.images).compile()
    compile_s = time.perf_counter() - t0
    times, calls, rows, steps, extra = [], [], [], [], []
    for ib, batch in enumerate(batches):
        sim, keys = batch_inputs(spec, batch)
        timed = ib < args.batches  # the study's further batches: one untimed call each
        per = []
        for _ in range(args.repeats if timed else 1):
            t = time.perf_counter()
            out = jax.block_until_ready(compiled(keys, sim.images))
            per.append(time.perf_counter() - t)
        got = population(out, [r.seed for r in batch], [(r.g1, r.g2) for r in batch])
        if timed:
            times.append(h.median(per))
            calls.append(per)
            rows += got
            steps.append(np.asarray(out.info.n_steps).ravel())
        else:
            extra += got
    m_cfg = raw["gal"]["ellipticity"]
    prior = pnp.ShapePrior(*(pnp.PriorSpec(kind="normal", args=[c["mean"], c["sigma"]])
                             for c in (m_cfg["e1"], m_cfg["e2"])))  # fmt: skip
    m, m_jk, seeds = m_of(rows, prior, 0.02)
    study = subsets(rows + extra, prior, 0.02, SUBSET_KS) if variant == "before" else None
    if study:
        study = {"n_galaxies": sum(len(r["eps"]) for r in rows + extra), "rows": study}
    n_gal = args.batch * raw["image"]["n_objects"]
    med = h.median(times)
    mc = raw["inference"]["map_config"]
    return {"variant": variant, "num_samples": mc["num_samples"],
            "draw_precision": mc.get("draw_precision"),
            "gauss_newton_precision": mc.get("gauss_newton_precision"),
            "lane_chunk": chunk, "compile_s": compile_s, "batch_s": times, "batch_calls_s": calls,
            "median_batch_s": med,
            "galaxies_per_batch": n_gal, "galaxies_per_s": n_gal / med,
            "n_galaxies": sum(len(r["eps"]) for r in rows), "m1": m, "m1_jk": m_jk.tolist(),
            "m1_err": jackknife(m_jk), "seeds": seeds,
            "newton_steps_median": float(np.median(np.concatenate(steps))),
            "draws_study": study,
            "load_after": list(os.getloadavg())}  # fmt: skip


def draw(fig: Any, res: dict[str, Any]) -> None:
    rows = res["measured"]["rows"]
    study = rows[0].get("draws_study")
    fig.set_size_inches(16 if study else 11, 4.6)
    ax1, ax2, *rest = fig.subplots(1, 3 if study else 2)
    names = [r["variant"] for r in rows]
    x = np.arange(len(rows))
    ax1.bar(x, [r["galaxies_per_s"] for r in rows], color="C0")
    ax1.axhline(TARGET_RATE, color="k", ls="--", lw=1, label=f"target {TARGET_RATE:g}/s")
    ax1.set(xticks=x, ylabel="Level 2 galaxies/s (one process, post-compile)",
            title="inference program, 2-core CPU")  # fmt: skip
    ax1.set_xticklabels(names, rotation=20, fontsize=8)
    ax1.legend(fontsize=8)
    ax2.errorbar(x, [1e4 * r["dm1"] for r in rows], [1e4 * r["dm1_err"] for r in rows],
                 fmt="o", capsize=3)  # fmt: skip
    ax2.axhline(0.0, color="k", lw=0.8)
    ax2.set(xticks=x, ylabel="m1 - m1(before), same seeds (x 1e-4)",
            title=f"{rows[0]['n_galaxies']} galaxies, jackknife over seeds")  # fmt: skip
    ax2.set_xticklabels(names, rotation=20, fontsize=8)
    if study:
        ax3 = rest[0]
        n_study, study = study["n_galaxies"], study["rows"]
        k = np.array([s["K"] for s in study], float)
        for i, (name, mk) in enumerate(zip(MODES, "os^", strict=True)):
            ax3.errorbar(k * (1 + 0.04 * (i - 1)), [1e4 * s[name]["dm"] for s in study],
                         [1e4 * s[name]["dm_err"] for s in study], marker=mk, capsize=3,
                         label=name)  # fmt: skip
        ax3.plot(k, [1e4 * s["halves"]["mc_sd"] for s in study], "k:", label="MC sd per set")
        ax3.axhline(0.0, color="k", lw=0.8)
        ax3.set(xscale="log", xlabel="draws per galaxy K", ylabel="m_K - m_1000 (x 1e-4)",
                title=f"before's draws of {n_study} galaxies\nin K-draw sets")  # fmt: skip
        ax3.legend(fontsize=7)


def main(argv: list[str] | None = None) -> None:
    ap = h.parser(__doc__, "level2_rate", repeats=2)
    ap.add_argument("--batch", type=int, default=16, help="realizations per batch")
    ap.add_argument("--batches", type=int, default=6)
    ap.add_argument("--base-seed", type=int, default=0)
    ap.add_argument("--study-batches", type=int, default=64,
                    help="batches of `before` for the draws study on real galaxies (the first "
                         "--batches of them timed)")  # fmt: skip
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    args = ap.parse_args(argv)
    h.configure(True)
    info = h.provenance("float64")
    h.banner(info)
    t = h.Table([("variant", "10s"), ("K", "5d"), ("compile s", "9.1f"), ("batch s", "8.2f"),
                 ("gal/s", "7.0f"), ("m1", "10.5f"), ("+-", "8.5f"), ("dm1", "10.2e"),
                 ("+-", "8.1e")])  # fmt: skip
    rows, base = [], None
    for v in args.variants:
        r = measure(v, args)
        if base is None:
            base = r
        d = np.asarray(r["m1_jk"]) - np.asarray(base["m1_jk"])
        r["dm1"], r["dm1_err"] = r["m1"] - base["m1"], jackknife(d)
        t.row(v, r["num_samples"], r["compile_s"], r["median_batch_s"], r["galaxies_per_s"],
              r["m1"], r["m1_err"], r["dm1"], r["dm1_err"])  # fmt: skip
        rows.append(r)
    if study := rows[0].get("draws_study"):
        print(f"{rows[0]['variant']}'s 1,000 draws per galaxy of {study['n_galaxies']} galaxies "
              "in disjoint K-draw sets, m against all 1,000:")  # fmt: skip
        for s_ in study["rows"]:
            print(f"  K = {s_['K']:4d} ({s_['sets']:2d} sets): " + ", ".join(
                f"{m} dm {s_[m]['dm']:+.2e} +- {s_[m]['dm_err']:.1e}" for m in MODES)
                + f" (sd per set {s_['halves']['mc_sd']:.1e})")  # fmt: skip
    ratio = {r["variant"]: r["galaxies_per_s"] / base["galaxies_per_s"] for r in rows}
    print("galaxies/s against before: " + ", ".join(f"{k} {v:.2f}x" for k, v in ratio.items()))
    m = {"rows": rows, "ratio_to_before": ratio, "target_galaxies_per_s": TARGET_RATE,
         "reference_variant": base["variant"]}  # fmt: skip
    h.write_json({"settings": h.settings(args), "info": info, "measured": m}, args.out, draw)


if __name__ == "__main__":
    main()
