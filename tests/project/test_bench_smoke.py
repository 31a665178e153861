"""Smoke test of the benchmarks in bench/: each ``main()`` at its tiniest settings.

Each writes its JSON, which must hold every key of the committed
``results/benchmarks/<name>.json`` (so the figures stay comparable; batch sizes and
list items are wildcards), finite numbers only, and no absolute path. The joint NUTS
baseline is also checked to be the package's model: its plated potential equals the
sum of the single-realization potentials.
"""

import argparse
import importlib
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
import yaml

from shearbatch.engine import runtime

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def bench_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))


def key_paths(obj, prefix=""):
    """Dict key paths of a JSON record; list items and integer keys (batch sizes) are '*'."""
    out = set()
    if isinstance(obj, dict):
        for k, v in obj.items():
            p = f"{prefix}.{'*' if k.isdigit() else k}"
            out |= {p} | key_paths(v, p)
    elif isinstance(obj, list):
        for v in obj:
            out |= key_paths(v, f"{prefix}[*]")
    return out


def renamed(path, old, new):
    """``path`` with the key ``old`` (a whole key, or a word of a ratio key) renamed ``new``."""
    return f"{path}.".replace(f".{old}.", f".{new}.").replace(f"_{old}_", f"_{new}_")[:-1]


def leaves(obj):
    if isinstance(obj, dict):
        for v in obj.values():
            yield from leaves(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from leaves(v)
    else:
        yield obj


def run_bench(name, tmp_path, *args, alias=None, skip=None, module=None, committed=True,
              png=True):  # fmt: skip
    """``bench_<name>.main(args + --out)`` (``module``: a script of another name); returns
    the JSON it wrote, after the checks. Committed key paths: ``alias`` (old, new) renames
    a key, ``skip`` drops a subtree (a tuple: several); ``committed=False``: a benchmark
    with no committed record; ``png=False``: one that draws no figure."""
    out = tmp_path / f"{name}.json"
    with runtime.scoped():  # restores x64 and the cache settings
        importlib.import_module(module or f"bench_{name}").main([*args, "--out", str(out)])
    text = out.read_text()
    rec = json.loads(text)  # json.loads reads NaN / Infinity as floats: caught below
    if committed:
        old = json.loads((ROOT / "results" / "benchmarks" / f"{name}.json").read_text())
        expected = {renamed(p, *alias) if alias else p for p in key_paths(old)}
        missing = {p for p in expected - key_paths(rec) if not (skip and p.startswith(skip))}
        assert not missing, sorted(missing)
    numbers = [v for v in leaves(rec) if isinstance(v, int | float) and not isinstance(v, bool)]
    assert numbers and all(math.isfinite(v) for v in numbers)
    for s in (v for v in leaves(rec) if isinstance(v, str)):
        assert not os.path.isabs(s), s
    for p in (tmp_path, ROOT, Path.home()):
        assert str(p) not in text
    fig = out.with_suffix(".png")  # every benchmark draws its figure beside its JSON
    assert not png or (fig.is_file() and fig.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n")
    return rec


def test_render(tmp_path):
    rec = run_bench("render", tmp_path, "--batch", "4", "--chunk", "2", "--stamp", "16",
                    "--repeats", "2", "--dtypes", "float32", "--psfs", "gaussian", "moffat",
                    "--cost-stamps", "16", "--cost-batch", "2", skip=".psfs")  # fmt: skip
    assert len(rec["results"]) == 8 and rec["stamp"] == [16, 16]
    assert {r["psf"] for r in rec["results"]} == {"gaussian", "moffat"}
    assert all(r["stamps_per_s"] > 0 and len(r["times_s"]) == 2 for r in rec["results"])
    cost = rec["cost_per_stamp"]
    assert [(r["stamp"], r["psf"]) for r in cost] == [(16, "gaussian"), (16, "moffat")]
    assert all(16 <= r["fft_size"] <= r["fft_size_default"] for r in cost)


def test_map(tmp_path):
    """The inference step alone: the end-to-end part (two bias-run processes, one with an
    empty compilation cache) would cost ~25 s; test_extract runs bias-run the same way."""
    rec = run_bench("map", tmp_path, "--stamp", "16", "--batches", "1", "2", "--repeats", "1",
                    "--skip-e2e", skip=".end_to_end")  # fmt: skip
    assert "end_to_end" not in rec and rec["dtype"] == "float64"
    assert sorted(rec["inference_only"]) == ["1", "2"]
    assert all(v["realizations_per_s"] > 0 for v in rec["inference_only"].values())


def test_extract(tmp_path):
    rec = run_bench("extract", tmp_path, "--stamp", "16", "--n-realizations", "1", "--n-dirs",
                    "20", "--workers", "1", "--repeats", "1")  # fmt: skip
    assert rec["n_dirs"] == 20 and rec["status_counts"]["ok"] == 20
    assert rec["dirs_per_s"] > 0 and rec["settings"]["out"] == "extract.json"


def test_nuts(tmp_path):
    """Batch 2 (homogeneous and one hard lane); 'capped' is 'ours' with other settings,
    so the committed capped keys are checked against ours."""
    from numpyro.infer.util import potential_energy

    import bench_nuts as bn
    from shearbatch.core.posterior import build_posterior

    rec = run_bench("nuts", tmp_path, "--stamp", "16", "--warmup", "10", "--samples", "40",
                    "--chains", "2", "--batch-sizes", "2", "--samplers", "ours", "joint",
                    alias=("capped", "ours"))  # fmt: skip
    assert [(r["case"], r["batch_size"]) for r in rec["runs"]] == [("homogeneous", 2), ("hard", 2)]
    for r in rec["runs"]:  # (ESS of 2 x 40 draws can be anything: no bounds asserted)
        assert r["ours"]["map_init_ok"] == 2
        assert len(r["joint"]["ess_bulk_g1"]["per_realization"]) == 2

    # the joint baseline's potential is the package model's, summed over realizations
    spec, _ = bn.make_specs(argparse.Namespace(
        stamp=16, sigma=1e-3, warmup=10, samples=10, chains=2, target_accept=0.8,
        max_tree_depth=10, map_init=True, capped_depth=[3, 3]))  # fmt: skip
    _, obs = bn.make_batch(spec, 3, True, 100.0)
    _, joint_model, split = bn.joint_program(spec, 3)
    post = build_posterior(spec.model)
    x = post.x0[None, :] + 0.01 * np.random.default_rng(0).normal(size=(3, post.x0.shape[0]))
    joint = potential_energy(joint_model, (obs,), {}, split(x.reshape(-1)))
    single = sum(post.potential_fn(x[r], obs[r]) for r in range(3))
    np.testing.assert_allclose(joint, single, rtol=1e-12)


def test_chunking(tmp_path):
    """Two chunk widths of a 4-lane Level 0 MAP batch on a small stamp config."""
    from tests.conftest import write_config

    cfg = write_config(tmp_path / "small.yaml", {"image.size_x": 16, "image.size_y": 16})
    rel = os.path.relpath(cfg, ROOT)
    rec = run_bench("chunking", tmp_path, "--configs", f"{rel}:map:4", "--chunks", "0", "2",
                    "--repeats", "1")  # fmt: skip
    assert [(r["batch_size"], r["width"]) for r in rec["rows"]] == [(4, 4), (4, 2)]
    assert all(r["ms_per_realization"] > 0 for r in rec["rows"])
    ref, other = rec["rows"]
    assert ref["bit_identical"]  # the same program: bit-identical, whatever the CPU
    # Another chunk width vectorises differently, so the last bits may differ (by CPU). At
    # this stamp's S/N (~1e5) g's posterior sd is ~2e-5, so a 3e-16 rounding shift of the
    # mode is ~1e-11 sd; the potential (~3e3) and log q agree to ~1e-15 relative; the
    # whitened gradient is in sd units (the raw one, ~1e-6 here from rounding amplified by
    # the ~3e9 curvature, has no stable value). Bounds sit 5 decades above rounding and
    # far below any real defect: lanes mixed up move modes by >1e3 sd (asserted below).
    assert other["max_diff_sd"] < 1e-6 and other["max_rel_diff"] < 1e-9
    assert other["max_abs_info_diff"] < 1e-6 and other["flags_equal"]
    assert other["max_steps_diff"] <= 1  # a stopping threshold met one step apart
    mixed = other["lanes_mixed"]  # the check has teeth: lanes rolled by one
    assert mixed["max_diff_sd"] > 1e3 and mixed["max_rel_diff"] > 1e-6


def test_cost(tmp_path):
    """MAP's cost per galaxy vs M at batch 2 (one optimizer comparison at M = 1)."""
    rec = run_bench("cost", tmp_path, "--ms", "1", "8", "--batch", "2", "--compare-ms", "1",
                    "--m-fixed", "1", "--chunks", "1", "--configs", "--repeats", "1",
                    skip=".vs_config")  # fmt: skip
    assert [(r["M"], r["optimizer"]) for r in rec["vs_m"]] == [
        (1, "newton"), (1, "gauss_newton"), (8, "gauss_newton")]  # fmt: skip
    assert all(0 < r["lockstep_efficiency"] <= 1 and r["all_converged"] for r in rec["vs_m"])
    (cmp,) = rec["optimizer_comparison"]
    # A fit stops at half its Newton decrement dec <= tol (configs/level2.yaml's
    # map_config.tol, 1e-5); the Newton step still to go, sqrt(2 dec) in whitened units,
    # bounds each coordinate's distance to the mode in its marginal posterior sd
    # (Cauchy-Schwarz). So the two optimizers' modes agree to sqrt(2 dec_newton) +
    # sqrt(2 dec_gn), at most 2 sqrt(2 tol) = 8.9e-3 sd (what tol guarantees). The bound is
    # the fits' own decrements' (each asserted <= tol), x1.5 for the sd being the std of
    # the draws (~7% error at 200 antithetic draws), + 1e-6 sd for rounding. Measured here
    # (2-core CPU, tol 1e-5): 2.35e-3 sd against 2.90e-3 (bound 4.4e-3); the committed
    # cost.json's ~1e-5 sd was recorded at tol 1e-10 (before 9334ce2; ceiling 2.8e-5).
    tol = yaml.safe_load((ROOT / "configs" / "level2.yaml").read_text())["inference"]["map_config"]
    tol = tol.get("tol") or 1e-10
    decs = [r["max_decrement"] for r in rec["vs_m"] if r["M"] == 1]
    assert len(decs) == 2 and max(decs) <= tol, decs
    bound = 1.5 * sum(np.sqrt(2.0 * d) for d in decs) + 1e-6
    assert cmp["case"] == "1" and cmp["max_mode_diff_sd"] < bound, (cmp, decs)


def test_estimator(tmp_path):
    """The population estimator's known-answer toy: 80 galaxies per sign, K = 10 draws
    against a 20-draw reference (~5 s; no program of the package's model is compiled)."""
    rec = run_bench("estimator", tmp_path, "--n", "80", "--ks", "10", "--ref-k", "20")
    m = rec["measured"]
    assert m["n_galaxies_per_sign"] == 80 and m["ref_K"] == 20 and m["Ks"] == [10]
    assert [r["proposal"] for r in m["rows"]] == ["exact", "laplace_narrow", "student_t",
                                                  "student_t_narrow"]  # fmt: skip
    assert all(r["K"] == 10 and 0 <= r["frac_collapsed"] <= 1 for r in m["rows"])


# --------------------------------------------------------------------------- the scripts that
# read committed records or the source (no benchmark JSON of their own)


def test_anacal_table_prints_every_row(capsys):
    """``python bench/anacal_table.py`` and ``--scan``: the tables of docs/validation.md
    from the committed records (tests/project/test_figures.py checks the rows' text)."""
    import anacal_table as at

    at.main([])
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == at.HEAD.splitlines()
    rows = [ln for ln in lines[2:] if ln.startswith("| ")]
    assert len(rows) == len(lines) - 2 and {r.split(" | ")[0][2:] for r in rows} == set(
        at.CAMPAIGNS
    )
    at.main(["--scan"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == at.SCAN_HEAD.splitlines() and len(lines) == 2 + len(at.SCAN)


def test_layer_walk_prints_and_writes_its_counts(capsys):
    """``python bench/layer_walk.py`` and ``--json`` (the static counts; ``--calls``, which
    runs a campaign, is in test_bench_smoke_slow.py)."""
    import layer_walk as lw

    res = lw.main([])
    text = capsys.readouterr().out
    assert f"{res['modules']} modules; layers" in text and "folder cycles:" in text
    assert "walk app/stats_stage.py -> io/atomic.py" in text and "call_walk" not in res
    assert json.loads(json.dumps(lw.main(["--json"]))) == json.loads(capsys.readouterr().out)


def test_level2_snr_scan(tmp_path):
    """``bench/level2_snr_scan.py`` on three fake ring campaigns (6 seeds, 2 rotations,
    paired; m per seed known) in tmp_path: its record has the committed record's keys, and
    the committed one is left alone."""
    import pandas as pd

    import level2_snr_scan as scan

    committed = ROOT / "results" / "validation" / "level2_snr_scan.json"
    before = committed.stat().st_mtime_ns
    rng = np.random.default_rng(0)
    m_true = {30: -0.02, 45: -0.01, 450: 0.0}
    for snr, name in scan.CAMPAIGNS.items():
        rows = []
        for seed in range(6):
            m_seed = m_true[snr] + 0.001 * rng.normal()
            for rot in (0, 1):
                d = tmp_path / name / "runs" / "ring" / f"g1_+0.0200_g2_+0.0000_s{seed}_r{rot}"
                d.mkdir(parents=True)
                (d / "convergence.json").write_text(json.dumps({"snr": [snr, 2.0 * snr]}))
                for sign in (1, -1):
                    rows.append({"seed": seed, "rotation": rot, "pair_sign": sign, "status": "ok",
                                 "passed_convergence": True,
                                 "g1_mode": sign * 0.02 * (1 + m_seed) + 0.003})  # fmt: skip
        pd.DataFrame(rows).to_csv(tmp_path / name / "runs" / "ring.csv", index=False)
    out = tmp_path / "level2_snr_scan.json"
    res = scan.main(tmp_path, out)
    assert json.loads(out.read_text()) == json.loads(json.dumps(res))
    assert key_paths(json.loads(committed.read_text())) <= key_paths(json.loads(out.read_text()))
    assert res["seeds_common"] == 6
    for snr, r in res["per_snr"].items():
        assert r["m1_common"] == pytest.approx(m_true[snr], abs=0.003)
        assert r["mean_inv_snr2"] == pytest.approx((snr**-2 + (2 * snr) ** -2) / 2)
    assert res["pairs"]["30-450"]["diff"] == pytest.approx(-0.02, abs=0.003)
    assert committed.stat().st_mtime_ns == before


def test_import(tmp_path):
    """Stage 2 and 3 start-up: one timed run of each command in a fresh process, no warm-up
    and no baseline tree (the committed record's ``before`` is left out)."""
    rec = run_bench("import", tmp_path, "--repeats", "1", "--warmup", "0", skip=".before")
    assert set(rec["commands"]) == {"bias-stats --help", "bias-extract --help",
                                    "import shearbatch.cli.stats", "import jax (reference)"}  # fmt: skip
    for label, r in rec["commands"].items():  # what each loaded, whatever the machine's speed
        assert not r["loads_engine"] and r["loads_jax"] == ("reference" in label), label
        assert len(r["times_s"]) == 1 and r["median_s"] > 0
    assert rec["bias_stats_help_median_s"] == rec["commands"]["bias-stats --help"]["median_s"]
    assert "cpu_model" in rec and "before" not in rec


def test_layer_walk_calls(capsys):
    """``bench/layer_walk.py --calls``: a tiny Level 0 campaign and bias-stats in this
    process, every call between the package's functions followed (~13 s)."""
    import layer_walk as lw

    with runtime.scoped():
        res = lw.main(["--calls"])
    text = capsys.readouterr().out
    for key, entry in (("run", "app/runner.py:run"), ("stats", "app/stats_stage.py:run_stats")):
        assert res["call_walk"][key]["stops"] > 0
        assert f"call walk from {entry}:" in text


def _mtimes(folder: Path) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}


def test_validate_anacal(tmp_path):
    """``bench/validate_anacal.py``: Level 0 with AnaCal beside it, 4 seeds at +-0.02: run ->
    extract -> stats through the CLI, the record into ``--out-dir`` in tmp_path, the
    committed records left alone (~11 s)."""
    import validate_anacal as va

    before = _mtimes(ROOT / "results" / "validation")
    with runtime.scoped():
        path = va.main(["--config", "configs/level0.yaml", "--name", "smoke", "--grid", "-0.02",
                        "0.02", "--n", "4", "--batch-size", "8", "--work",
                        str(tmp_path / "work"), "--out-dir", str(tmp_path / "rec")])  # fmt: skip
    assert path == tmp_path / "rec" / "validation.json"
    rec = json.loads(path.read_text())
    committed = json.loads((ROOT / "results" / "validation" / "anacal" / "level0" /
                            "validation.json").read_text())  # fmt: skip
    ignore = (".estimators.differences", ".estimators.results")  # keys named by estimator
    assert {p for p in key_paths(committed) if not p.startswith(ignore)} <= key_paths(rec)
    assert "anacal" in rec["estimators"]["results"]
    assert {p.name for p in path.parent.iterdir()} == {"validation.json", "bias_results.json",
                                                       "printed.txt"}  # fmt: skip
    assert _mtimes(ROOT / "results" / "validation") == before


# --------------------------------------------------------------------------- --help

#: bench/*.py that take no argparse options: a helper module and two table scripts reading
#: sys.argv themselves
NO_ARGPARSE = {"_harness.py", "anacal_table.py", "level2_snr_scan.py"}


def test_every_bench_script_answers_help():
    """``python bench/<script>.py --help`` exits 0 for every script with argparse options: a
    help string with a bare ``%`` (argparse formats help with %-style) crashed it (issue 54
    item 4: bench_draws.py). In subprocesses, a few at a time (~0.1-3 s each)."""
    import subprocess
    import sys
    from concurrent.futures import ThreadPoolExecutor

    scripts = sorted(p for p in (ROOT / "bench").glob("*.py") if p.name not in NO_ARGPARSE)
    assert len(scripts) > 30, scripts
    for p in (ROOT / "bench").glob("*.py"):  # the list above stays true
        uses = "argparse" in p.read_text() or "h.parser(" in p.read_text()
        assert uses != (p.name in NO_ARGPARSE) or p.name == "_harness.py", p.name
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": os.pathsep.join(
        [str(ROOT / "src"), str(ROOT / "bench"), os.environ.get("PYTHONPATH", "")])}  # fmt: skip

    def help_of(p: Path) -> tuple[str, int, str]:
        res = subprocess.run([sys.executable, str(p), "--help"], capture_output=True, text=True,
                             cwd=ROOT, env=env, timeout=120, check=False)  # fmt: skip
        return p.name, res.returncode, res.stdout + res.stderr

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(help_of, scripts))
    bad = {name: out[-600:] for name, rc, out in results if rc != 0 or "usage:" not in out}
    assert not bad, bad


# --------------------------------------------------------------------------- bench_field.py


def _fake_campaign_log(n_batches: int, lanes: int) -> str:
    """bias-run's log lines that bench_gpu.parse_log reads, stamped from now on."""
    import datetime

    t = datetime.datetime.now()

    def line(dt: float, msg: str) -> str:
        s = (t + datetime.timedelta(seconds=dt)).strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]
        return f"{s} INFO shearbatch.engine.loop: {msg}"

    out = [line(1, "JAX 0.0 on CPU x1 (cpu), x64=True, compilation cache: off"),
           line(30, f"batch size {lanes} (no memory analysis here)"),
           line(30, f"campaign: {n_batches * lanes} realizations, {n_batches} batch(es) of "
                    f"{lanes} lanes, method map, float64, 2 background thread writer(s)")]  # fmt: skip
    for k in range(1, n_batches + 1):
        wall = 40.0 if k == 1 else 2.0
        out += [line(30 + 2 * k, f"batch {k}: lockstep efficiency {0.2 + 0.1 * k}"),
                line(30 + 2 * k, f"batch {k}/{n_batches}: {lanes} realization(s) in {wall} s "
                                 f"(simulation 0.2 s, inference 1.5 s, host 0.3 s, wait 0.0 s)")]  # fmt: skip
    out.append(line(31 + 2 * n_batches, f"campaign done: {n_batches * lanes} ok, 0 failed in 40 s"))
    return "\n".join(out) + "\n"


def test_field_runs_to_its_end_as_a_script(tmp_path, monkeypatch):
    """``python bench/bench_field.py`` to its last line, as a script (runpy with
    ``__name__ == "__main__"``): its final save draws field.png with ``draw``, which sat
    below the main guard, so the script raised NameError at its end (issue 54 item 4). The
    three CLI stages are canned (a real Level 2 campaign compiles for minutes on a CPU; ci/
    gpu_session.sh --cpu-smoke runs them for real: tests/project/test_gpu_session.py):
    bench_gpu.Runner.run answers each command with its log and files. Checks the record's
    figures (cold start, warm batches, lockstep, headline) and the files it writes."""
    import runpy
    import sys

    import bench_gpu

    ran = []

    def fake_run(self, name, cmd, timeout):
        ran.append(name)
        arg = {a: cmd[i + 1] for i, a in enumerate(cmd[:-1]) if a.startswith("--")}
        text = "ok\n"
        if name == "level2":
            root = Path(arg["--output-dir"])
            for i in range(16):  # a realization's convergence.json: the ESS figures read it
                d = root / f"g1_+0.0200_g2_+0.0200_s{i}"
                d.mkdir(parents=True)
                (d / "convergence.json").write_text(json.dumps(
                    {"importance": {"ess_fraction": [0.05, 0.5, 0.7, 0.9]},
                     "snr": [15.0, 25.0, 40.0, 80.0]}))  # fmt: skip
            text = _fake_campaign_log(4, 4)
        elif name == "extract":
            Path(arg["--output"]).write_text(
                "run_id,seed,g1_true,g2_true,g1_mean,g2_mean,g1_std,g2_std,status,flags\n"
                "g1_+0.0200_g2_+0.0200_s0,0,0.02,0.02,0.01,0.03,0.05,0.05,ok,\n"
            )
        elif name == "stats":
            out = Path(arg["--output-dir"])
            (out / "plots").mkdir(parents=True)
            (out / "plots" / "residuals.png").write_bytes(b"\x89PNG\r\n\x1a\n")
            (out / "bias_results.json").write_text(json.dumps(
                {"m1": 1e-3, "m1_err": 2e-3, "c1": 0.0, "c1_err": 1e-4, "m2": -1e-3,
                 "m2_err": 2e-3, "c2": 0.0, "c2_err": 1e-4, "verdict": "INCONCLUSIVE"}))  # fmt: skip
        self.logs.append(f"===== {name}\n{text}")
        return {"rc": 0, "status": "ok", "wall_s": 45.0, "timeout_s": timeout, "text": text}

    monkeypatch.setattr(bench_gpu.Runner, "run", fake_run)
    out = tmp_path / "out"
    argv = ["bench_field.py", "--out", str(out), "--skip-l0", "--cpu-smoke", "--l2-batch", "4",
            "--root", str(tmp_path / "roots")]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    with runtime.scoped(), pytest.raises(SystemExit) as end:
        runpy.run_path(str(ROOT / "bench" / "bench_field.py"), run_name="__main__")
    assert end.value.code == 0
    assert ran == ["level2", "extract", "stats"]
    png = out / "field.png"
    assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rec = json.loads((out / "field.json").read_text())
    l2 = rec["level2"]
    assert l2["n_batches"] == 4 and l2["warm_batch_count"] == 3 and l2["batch_lanes"] == 4
    assert l2["lockstep_efficiency_batch_1"] == pytest.approx(0.3)
    assert l2["lockstep_efficiency_warm_median"] == pytest.approx(0.5)
    assert 30 <= l2["cold_start_to_batch_1_s"] <= 40  # the log's batch 1 ends 32 s after "now"
    assert l2["galaxies_per_s_after_batch_1"] == pytest.approx(
        4 * l2["realizations_per_s_after_batch_1"]
    )
    head = rec["headline"]
    assert head["warm_batches"] == 3 and head["m1"] == 1e-3 and head["verdict"] == "INCONCLUSIVE"
    assert head["ess_fraction_median"] == pytest.approx(0.6)
    assert head["galaxies_per_s_warm"] == l2["galaxies_per_s_after_batch_1"]
    assert head["host_fraction_warm_median"] == pytest.approx(0.25)
    assert {p.name for p in out.iterdir()} == {
        "field.json", "field.log", "field.png", "bias_results.json", "residuals.png",
        "summary_compact.csv.gz"}  # fmt: skip


def test_draws(tmp_path):
    """bench_draws.py to its end at its smallest size (~10 s): 20 galaxies, K = 10, one
    proposal, two repetitions; its record has every key path of the committed one."""
    rec = run_bench("draws", tmp_path, "--n", "20", "--ks", "10", "--proposals", "student_t",
                    "--nq", "8", "--min-reps", "2", "--max-reps", "2", "--repeats", "1")  # fmt: skip
    assert rec["settings"]["n"] == 20
