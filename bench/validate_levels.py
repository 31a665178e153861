"""Level 1 and Level 2 validation campaigns through the real CLI. Not a unit test.

For each level in ``--levels`` it runs ``configs/<level>.yaml`` end to end
(``bias-run`` -> ``bias-extract`` -> ``bias-stats --level level_<k>``) and writes
``results/validation/<level>/``: ``bias_results.json`` and ``plots/`` of the ring
campaign, ``validation.json`` (m1, m2, c1, c2 with errors, coverage, SBC p-values,
realizations used, the per-galaxy S/N percentiles, wall time, machine, load, the
exact commands) and ``commands.txt``.

- The paired + ring campaign's sigma_m is compared with the unpaired regression's
  on the same number of images: an unpaired campaign at +-g with independent seeds
  has, per image, the scatter of these very images (each one is an ordinary
  realization of its seed), so ``sigma_m(unpaired) = s / (g sqrt(N))`` with ``s``
  the per-image std of ``g_hat1`` around ``g_true1`` (pooled over the (sign,
  rotation) cells, one image per seed in each) and N images. ``--unpaired-check``
  also runs that unpaired campaign (independent seeds, the same number of images)
  and reports its measured sigma_m.
- ``--sbc K``: an SBC campaign of K realizations with shears drawn from a proper
  prior (``gal.shear: G1G2``, N(0, 0.05) per component), no pairs or rotations.

    .venv/bin/python bench/validate_levels.py --levels level1 level2 --nice 5
    .venv/bin/python bench/validate_levels.py --levels survey_snr30 \
        --set inference.shear_model=interim --tag interim      # the population estimator
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
#: campaign config -> bias-stats acceptance level (survey_snr30: one galaxy per image at S/N
#: 30, judged against Level 0's |m| < 1e-3)
LEVEL_KEY = {"level1": "level_1", "level2": "level_2", "survey_snr30": "level_0"}


def _run(cmd: list[str], nice: int, log: Path) -> tuple[float, int]:
    """Run ``cmd`` from the repository root (its stderr appended to ``log``)."""
    t0 = time.perf_counter()
    with log.open("a") as fh:
        fh.write("$ " + " ".join(_show(cmd)) + "\n")
        fh.flush()
        rc = subprocess.run(["nice", "-n", str(nice), *cmd] if nice else cmd, cwd=ROOT,
                            stdout=fh, stderr=fh, check=False).returncode  # fmt: skip
    return time.perf_counter() - t0, rc


def _show(cmd: list[str]) -> list[str]:
    return [Path(cmd[0]).name, *cmd[1:]]


def _rel(p: Path) -> str:
    return os.path.relpath(p, ROOT)


def per_image_scatter(csv: Path, point: str) -> dict:
    """Unpaired regression's sigma_m on the campaign's number of images, from the
    per-image scatter of ``g_hat1 - g_true1`` in each (sign, rotation) cell."""
    import numpy as np
    import pandas as pd

    df = pd.read_csv(csv)
    df = df[(df["status"] == "ok") & df["passed_convergence"].astype(bool)]
    col = f"g1_{point}"
    resid = df[col] - df["g1_true"]
    cells = df[["pair_sign", "rotation"]].fillna(0).astype(int).astype(str).agg("_".join, axis=1)
    var = resid.groupby(cells).var(ddof=1)
    n_cell = resid.groupby(cells).size()
    pooled = float(((n_cell - 1) * var).sum() / (n_cell - 1).sum())
    g0 = float(np.abs(df["g1_true"]).max())
    n = len(df)
    return {"per_image_std_g1": pooled**0.5, "n_images": n, "g": g0,
            "sigma_m_unpaired_same_n": pooled**0.5 / (g0 * n**0.5)}  # fmt: skip


def snr_percentiles(runs: Path) -> dict:
    import numpy as np

    snr = []
    for f in runs.glob("*/convergence.json"):
        snr += json.loads(f.read_text()).get("snr") or []
    if not snr:
        return {}
    q = np.percentile(snr, [2.5, 16, 50, 84, 97.5])
    return {"n_galaxies": len(snr), **{f"p{p}": float(v) for p, v in
                                          zip(("2.5", "16", "50", "84", "97.5"), q, strict=True)}}  # fmt: skip


def pipeline(cfg: Path, runs: Path, stats: Path, level: str, extra: list[str], nice: int,
             log: Path, stats_extra: list[str] = ()) -> dict:  # fmt: skip
    csv = runs.with_suffix(".csv")
    run = [str(BIN / "bias-run"), "--config", _rel(cfg), "--output-dir", _rel(runs),
           "--no-progress", *extra]  # fmt: skip
    ext = [str(BIN / "bias-extract"), "--input-dir", _rel(runs), "--output", _rel(csv),
           "--no-progress", "--workers", "1"]  # fmt: skip
    st = [str(BIN / "bias-stats"), "--input", _rel(csv), "--output-dir", _rel(stats),
          "--level", level, "--posterior-dir", _rel(runs), *stats_extra]  # fmt: skip
    wall, rc = _run(run, nice, log)
    _run(ext, nice, log)
    _, rc_stats = _run(st, nice, log)
    res = json.loads((stats / "bias_results.json").read_text())
    return {"wall_s": round(wall, 1), "bias_run_exit": rc, "bias_stats_exit": rc_stats,
            "commands": [" ".join(_show(c)) for c in (run, ext, st)], "results": res,
            "csv": csv}  # fmt: skip


def summary(res: dict) -> dict:
    out = {k: res.get(k) for k in ("verdict", "estimator", "point_estimate", "n_realizations",
                                   "n_used", "n_seeds", "m1", "m1_err", "m2", "m2_err", "c1",
                                   "c1_err", "c2", "c2_err", "design", "excluded")}  # fmt: skip
    out["coverage"] = {c: {lev: {k: v.get(k) for k in ("observed", "band", "status")}
                           for lev, v in levels.items()} for c, levels in res["coverage"].items()}  # fmt: skip
    out["sbc"] = {c: {k: v.get(k) for k in ("p_value", "ks_p_value", "status", "n")}
                  for c, v in res["sbc"].items() if isinstance(v, dict)}  # fmt: skip
    return out


def validate(level: str, a: argparse.Namespace) -> dict:
    out = ROOT / a.results / (level + (f"_{a.tag}" if a.tag else ""))
    work = out / "runs"
    if work.exists() and not a.resume:
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    log = out / "log.txt"
    cfg = ROOT / "configs" / f"{level}.yaml"
    raw = yaml.safe_load(cfg.read_text())
    sets = [f"image.noise.snr={a.snr}"] if a.snr is not None else []
    sets += a.set or []
    for item in sets:  # the level with some keys changed (e.g. the noise level)
        key, _, value = item.partition("=")
        *parents, leaf = key.split(".")
        node = raw
        for k in parents:
            node = node[k]
        # inference.* and campaign.*: schema keys a config may leave at their defaults
        # (inference.shear_model=interim, campaign.shear_grid_g2=[...]); bias-run's schema
        # still refuses an unknown one
        if leaf not in node and parents not in (["inference"], ["campaign"]):
            raise SystemExit(f"--set {item}: {key} is not in configs/{level}.yaml")
        node[leaf] = yaml.safe_load(value)
    as_run = out / "config_as_run.yaml"  # the config may change later: keep what ran
    as_run.write_text(cfg.read_text() if not sets else
                      f"# written by bench/validate_levels.py: configs/{level}.yaml with "
                      + ", ".join(sets) + "\n" + yaml.safe_dump(raw, sort_keys=False))  # fmt: skip
    if sets:  # run the copy written here
        cfg = as_run
    extra = ["--n-realizations", str(a.seeds)] if a.seeds else []
    extra += ["--batch-size", str(a.batch_size)] if a.batch_size else []
    extra += ["--method", a.method] if a.method else []
    load0 = os.getloadavg()
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                         text=True).stdout.strip()  # fmt: skip
    dirty = subprocess.run(["git", "status", "--porcelain", "src", "configs"], cwd=ROOT,
                           capture_output=True, text=True).stdout.strip()  # fmt: skip
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    ring = pipeline(cfg, work / "ring", out, LEVEL_KEY[level], extra, a.nice, log)
    doc = {"level": level, "config": _rel(cfg), "method_override": a.method,
           "overrides": sets, "ring": summary(ring["results"]),
           "wall_s": {"ring": ring["wall_s"]}, "commands": list(ring["commands"]),
           "snr_per_galaxy": snr_percentiles(work / "ring")}  # fmt: skip
    point = ring["results"]["point_estimate"]
    if point == "population":  # the interim model: each image's own likelihood maximum
        point = "mode"
        doc["population"] = ring["results"].get("population")
    doc["unpaired_same_images"] = per_image_scatter(ring["csv"], point)
    m_err = ring["results"]["m1_err"]
    if m_err:
        doc["unpaired_same_images"]["ratio_to_ring"] = (
            doc["unpaired_same_images"]["sigma_m_unpaired_same_n"] / m_err
        )
    n_seeds = a.seeds or raw["campaign"]["n_realizations"]
    if a.unpaired_check:  # independent seeds at +g and at -g, as many images as the ring
        n_img = n_seeds * 2 * raw["campaign"].get("rotations", 1)
        g = raw["campaign"]["shear_grid"][0]
        runs = work / "unpaired"
        for sign, base in ((1, 100_000), (-1, 200_000)):
            ex = ["--shear-grid", str(sign * g), "--no-paired", "--rotations", "1",
                  "--n-realizations", str(n_img // 2), "--base-seed", str(base)]  # fmt: skip
            ex += ["--batch-size", str(a.batch_size)] if a.batch_size else []
            ex += ["--method", a.method] if a.method else []
            run = [str(BIN / "bias-run"), "--config", _rel(cfg), "--output-dir", _rel(runs),
                   "--no-progress", *ex]  # fmt: skip
            w, _ = _run(run, a.nice, log)
            doc["commands"].append(" ".join(_show(run)))
            doc["wall_s"][f"unpaired_{sign:+d}"] = round(w, 1)
        csv = runs.with_suffix(".csv")
        for cmd in ([str(BIN / "bias-extract"), "--input-dir", _rel(runs), "--output", _rel(csv),
                     "--no-progress", "--workers", "1"],
                    [str(BIN / "bias-stats"), "--input", _rel(csv), "--output-dir",
                     _rel(out / "unpaired"), "--level", LEVEL_KEY[level], "--no-plots"]):  # fmt: skip
            _run(cmd, a.nice, log)
            doc["commands"].append(" ".join(_show(cmd)))
        un = json.loads((out / "unpaired" / "bias_results.json").read_text())
        doc["unpaired_campaign"] = summary(un)
        if m_err and un.get("m1_err"):
            doc["unpaired_campaign"]["ratio_to_ring"] = un["m1_err"] / m_err
    if a.sbc:
        raw["gal"]["shear"] = {"type": "G1G2", "g1": {"type": "Normal", "mean": 0, "sigma": 0.05},
                               "g2": {"type": "Normal", "mean": 0, "sigma": 0.05}}  # fmt: skip
        raw["campaign"].update(paired=False, rotations=1, shear_from_prior=True,
                               n_realizations=a.sbc, base_seed=1000)  # fmt: skip
        raw["campaign"].pop("shear_grid", None)
        sbc_cfg = out / f"{level}_sbc.yaml"
        sbc_cfg.write_text("# written by bench/validate_levels.py: the level's config with "
                           "shears drawn from a proper prior (SBC)\n" + yaml.safe_dump(raw))  # fmt: skip
        sbc = pipeline(sbc_cfg, work / "sbc", out / "sbc", LEVEL_KEY[level],
                       (["--batch-size", str(a.batch_size)] if a.batch_size else [])
                       + (["--method", a.method] if a.method else []), a.nice, log,
                       ["--no-plots"])  # fmt: skip
        doc["sbc_campaign"] = summary(sbc["results"])
        doc["wall_s"]["sbc"] = sbc["wall_s"]
        doc["commands"] += sbc["commands"]
    doc["machine"] = {"platform": platform.platform(), "cpu_count": os.cpu_count(),
                      "python": platform.python_version(), "load_average_start": load0,
                      "load_average_end": os.getloadavg(), "nice": a.nice}  # fmt: skip
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    doc["cpu_s_children"] = round(cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime, 1)
    doc["git"] = git + ("+modified" if dirty else "")
    prev = out / "validation.json"
    if a.resume and prev.exists():  # a resumed run's walls time only what was left to do
        old = json.loads(prev.read_text())
        keep = {k: old.get(k) for k in ("wall_s", "git", "machine", "cpu_s_children")}
        doc["earlier_runs"] = [*old.pop("earlier_runs", []), keep]
    (out / "validation.json").write_text(json.dumps(doc, indent=2, default=str) + "\n")
    (out / "commands.txt").write_text("\n".join(doc["commands"]) + "\n")
    r = doc["ring"]
    print(f"{level}: m1 = {r['m1']:+.2e} +- {r['m1_err']:.1e}, m2 = {r['m2']}, "
          f"c1 = {r['c1']:+.1e} +- {r['c1_err']:.1e}, c2 = {r['c2']:+.1e} +- {r['c2_err']:.1e}; "
          f"{r['n_used']}/{r['n_realizations']} used; verdict {r['verdict']}; "
          f"wall {doc['wall_s']}", flush=True)  # fmt: skip
    return doc


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--levels", nargs="+", default=["level1", "level2"], choices=list(LEVEL_KEY))
    ap.add_argument("--seeds", type=int, default=None, help="override campaign.n_realizations")
    ap.add_argument("--batch-size", type=int, default=None)
    ap.add_argument("--method", default=None, help="override inference.method (recorded)")
    ap.add_argument("--unpaired-check", action="store_true", help="also run the unpaired campaign")
    ap.add_argument(
        "--snr",
        type=float,
        default=None,
        help="override image.noise.snr (e.g. to show how a bias scales with S/N)",
    )
    ap.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="override a config key, e.g. image.n_objects=1 (repeatable)",
    )
    ap.add_argument("--sbc", type=int, default=0, help="SBC realizations (0: none)")
    ap.add_argument("--nice", type=int, default=5, help="niceness of the campaigns")
    ap.add_argument("--resume", action="store_true", help="keep complete realizations")
    ap.add_argument(
        "--tag",
        default=None,
        help="write results/validation/<level>_<tag>/ (e.g. a method override)",
    )
    ap.add_argument(
        "--results",
        default="results/validation",
        help="the folder <level>[_<tag>]/ is written in (relative to the repository root)",
    )
    a = ap.parse_args(argv)
    return [validate(level, a) for level in a.levels]


if __name__ == "__main__":
    main()
