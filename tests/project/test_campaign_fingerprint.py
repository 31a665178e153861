"""ci/campaign_fingerprint.py, the check that a refactor changed no output (issue 57 item
5): two runs that differ only in when, where and by which commit they ran fingerprint
the same; a changed number in any kind of output file does not. No JAX: the files are
written here."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import netCDF4
import numpy as np

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[2]


FP = load_script("ci/campaign_fingerprint.py")


def _campaign(work: Path, *, created: str, commit: str, g1: float = 0.0123) -> Path:
    """One campaign directory under ``work`` with a JSON, a CSV, a netCDF and a YAML file
    that name the directory's path, the time and the commit, as bias-run's do."""
    root = work / "camp"
    run = root / "g1_+0.0200_s0"
    (root / "stats").mkdir(parents=True)
    run.mkdir()
    (run / "convergence.json").write_text(json.dumps({
        "run_id": run.name, "created_at": created, "runtime_s": 1.5,
        "code": {"commit": commit}, "checksums": {"posterior.nc": {"crc32": commit[:8]}},
        "mode": {"g1": g1}, "config": {"output_dir": str(root)},
    }))  # fmt: skip
    (root / "summary.csv").write_text(
        f"run_id,g1_mean,runtime_s,code_commit,path\n{run.name},{g1},1.5,{commit},{run}\n"
    )
    (root / "config.yaml").write_text(f"campaign: {{output_dir: {root}}}\n")
    (root / "commands.txt").write_text(f"{created} bias-run --output-dir {root}\n")
    (root / "stats" / "bias_results.json").write_text(json.dumps({"m1": g1 * 2}))
    with netCDF4.Dataset(run / "posterior.nc", "w") as ds:
        ds.created_at = created
        ds.source = str(run)
        grp = ds.createGroup("posterior")
        grp.createDimension("draw", 3)
        grp.createVariable("g1", "f8", ("draw",))[:] = np.array([g1, g1 + 1e-3, g1 - 1e-3])
    return root


def test_the_same_campaign_elsewhere_later_by_another_commit_is_identical(tmp_path):
    a = _campaign(tmp_path / "a", created="2026-11-29T03:00:00", commit="1" * 40)
    b = _campaign(tmp_path / "bb", created="2026-11-30T09:00:00", commit="2" * 40)
    assert FP.fingerprint_tree(a) == FP.fingerprint_tree(b)
    assert "commands.txt" not in FP.fingerprint_tree(a)  # a log, not a result
    assert FP.diff_trees(tmp_path / "a", tmp_path / "bb") == 0


def test_a_changed_number_in_any_file_is_found_and_located(tmp_path, capsys):
    _campaign(tmp_path / "a", created="t", commit="1" * 40)
    for kind in ("json", "csv", "nc"):
        b_work = tmp_path / f"b_{kind}"
        b = _campaign(b_work, created="t", commit="1" * 40)
        if kind == "json":
            (b / "stats" / "bias_results.json").write_text(json.dumps({"m1": 0.0247}))
        elif kind == "csv":
            text = (b / "summary.csv").read_text().replace(",0.0123,", ",0.0124,")
            (b / "summary.csv").write_text(text)
        else:
            with netCDF4.Dataset(next(b.glob("*/posterior.nc")), "a") as ds:
                ds["posterior"]["g1"][1] = 0.5
        assert FP.diff_trees(tmp_path / "a", b_work) == 1, kind
        out = capsys.readouterr().out
        where = {"json": "stats/bias_results.json: .m1", "csv": "summary.csv: .rows[1]",
                 "nc": "posterior.nc: .groups.posterior.vars.g1.sha256"}[kind]  # fmt: skip
        assert where in out, out


def test_compare_of_two_fingerprint_files(tmp_path, capsys):
    a = _campaign(tmp_path / "a", created="t", commit="1" * 40)
    fa = tmp_path / "a.json"
    fa.write_text(json.dumps({"camp": FP.fingerprint_tree(a)}))
    fb = tmp_path / "b.json"
    shutil.copy(fa, fb)
    assert FP.compare(fa, fb) == 0
    assert "identical: 5 files in 1 campaigns" in capsys.readouterr().out
    doc = json.loads(fb.read_text())
    doc["camp"]["summary.csv"] = "0" * 64
    fb.write_text(json.dumps(doc))
    assert FP.compare(fa, fb) == 1
    assert "camp/summary.csv" in capsys.readouterr().out
