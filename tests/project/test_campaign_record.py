"""``bench/campaign_record.py`` writes a campaign's validation.json from the files its
``run.sh`` left (issue 44 item 2: a record a script writes), on a small fake root."""

import importlib
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMMIT = "0123456789abcdef0123456789abcdef01234567"
OTHER = "fedcba9876543210fedcba9876543210fedcba98"


@pytest.fixture
def record(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    sys.modules.pop("campaign_record", None)
    return importlib.import_module("campaign_record")


def time_v(wall: str, kb: int, rc: int = 0) -> str:
    head = f"Command exited with non-zero status {rc}\n" if rc else ""
    return (head + "\tCommand being timed: \"python -m shearbatch stats\"\n"
            "\tUser time (seconds): 10.00\n"
            f"\tElapsed (wall clock) time (h:mm:ss or m:ss): {wall}\n"
            f"\tMaximum resident set size (kbytes): {kb}\n"
            f"\tExit status: {rc}\n")  # fmt: skip


def fake_root(tmp: Path, *, codes=(COMMIT,) * 4) -> Path:
    """A campaign root as run.sh leaves it: 2 seeds x 4 images... of 32 galaxies, two array
    tasks (task 1 failed once and ran again), the whole-plan resume, extract and stats."""
    root = tmp / "camp"
    (root / "stats").mkdir(parents=True)
    (root / "runs").mkdir()
    (root / "logs").mkdir()
    (root / "source_commit").write_text(COMMIT + "\n")
    (root / "analysis_commit").write_text(f"{OTHER} dirty=0\n")
    (root / "grow.log").write_text(
        f"2026-11-28T00:00:00+00:00 start n=2 tasks=2 commit={COMMIT}\n"
        "2026-11-28T00:01:40+00:00 task 0/2 rc=0 start=1000.0 end=1100.0\n"
        "2026-11-28T00:00:50+00:00 task 1/2 rc=137 start=1000.5 end=1050.5\n"
        "2026-11-28T00:02:30+00:00 task 1/2 rc=0 start=1100.0 end=1150.0\n"
        "2026-11-28T00:02:40+00:00 task 0/1 rc=0 start=1150.0 end=1160.0\n"
        "2026-11-28T00:02:40+00:00 runs done\n"
        "2026-11-28T00:03:00+00:00 partial 0/2 rc=0\n"
    )
    for i in range(2):
        (root / "logs" / f"extract_task_{i}.log").write_text("partial\n" + time_v("0:03.50", 2048))
    (root / "extract.log").write_text("wrote summary.csv\n" + time_v("1:02:03.5", 1048576))
    (root / "stats.log").write_text("m1 = +1.0e-03 ± 2.0e-03\nverdict: INCONCLUSIVE (exit 3)\n"
                                    + time_v("7:17.28", 9693352, rc=3))  # fmt: skip
    grid = [{"g1_true": 0.02, "n_galaxies": 64, "n_collapsed": 1},
            {"g1_true": -0.02, "n_galaxies": 62, "n_collapsed": 0}]  # fmt: skip
    results = {
        "n_realizations": 4, "n_ok": 4, "n_failed": 0, "n_incomplete": 0, "n_corrupt": 0,
        "n_used": 4, "n_seeds": 2, "excluded": {},
        "m1": 1e-3, "m1_err": 2e-3, "c1": -1e-4, "c1_err": 3e-4,
        "m2": 2e-3, "m2_err": 2.5e-3, "c2": 5e-5, "c2_err": 4e-4,
        "fits": {"g1": {"n_groups": 2}, "g2": {"n_groups": 2}},
        "population": {"grid_points": grid},
        "coverage": {"g1": {"0.68": {"observed": 0.7}, "0.95": {"observed": 0.95}}},
        "requirement": {"name": "lsst-project"}, "verdict": "INCONCLUSIVE", "passed": False,
    }  # fmt: skip
    (root / "stats" / "bias_results.json").write_text(json.dumps(results))
    manifest = {
        "config_hash": "b968767afdd659dd", "method": "map", "precision": "float64",
        "config": {"image": {"n_objects": 32}}, "overrides": [{"campaign.draws": "estimator"}],
        "plan": {"n_realizations": 2, "base_seed": 90000, "n_planned": 4, "run_ids": ["a"] * 4},
        "code": {"commit": COMMIT, "dirty": False, "fingerprint": "f" * 16},
        "device": {"platform": "cpu", "kind": "cpu", "count": 1}, "host": "box",
    }  # fmt: skip
    (root / "runs" / "campaign.json").write_text(json.dumps(manifest))
    (root / "runs" / "config.yaml").write_text("image: {n_objects: 32}\n")
    rows = "".join(f"r{k},ok,{c},False\n" for k, c in enumerate(codes))
    (root / "summary.csv").write_text("run_id,status,code_commit,code_dirty\n" + rows)
    return root


def test_writes_validation_json_and_copies_from_the_logs(record, tmp_path, capsys):
    root, out = fake_root(tmp_path), tmp_path / "out"
    assert record.main([str(root), "--out", str(out)]) == 0
    doc = json.loads((out / "validation.json").read_text())
    assert doc["git"]["commit"] == COMMIT and doc["git"]["one_commit"] is True
    assert doc["git"]["images_by_commit"] == {COMMIT: 4}
    assert doc["analysis_code"] == {"commit": OTHER, "dirty": False}
    assert doc["config"]["hash"] == "b968767afdd659dd" and doc["config"]["n_objects"] == 32
    assert "run_ids" not in doc["config"]["plan"]
    assert doc["seeds"] == {"planned": 2, "base_seed": 90000, "used": 2, "jackknife_groups": 2}
    assert doc["images"]["planned"] == 4 and doc["images"]["used"] == 4
    assert doc["galaxies"] == {"written": 128, "used": 126, "collapsed_at_estimate": 1}
    res = doc["result"]
    assert (res["m1"], res["m1_err"], res["c2"], res["c2_err"]) == (1e-3, 2e-3, 5e-5, 4e-4)
    assert res["verdict"] == "INCONCLUSIVE" and res["requirement"] == "lsst-project"
    t = doc["timing"]
    arr = t["array_tasks"]  # three runs of the two array tasks (one failed, run again)
    assert (arr["task_runs"], arr["tasks"], arr["task_runs_failed"]) == (3, 2, 1)
    assert arr["wall_sum_s"] == 200.0 and arr["span_s"] == 150.0
    assert arr["galaxies_per_s_span"] == round(128 / 150, 1)
    assert t["whole_plan_runs"]["wall_sum_s"] == 10.0
    assert t["all_bias_run_processes"]["span_s"] == 160.0
    assert t["bias_extract"] == {"wall_s": 3723.5, "peak_rss_mib": 1024.0, "exit_status": 0}
    assert t["bias_stats"] == {"wall_s": 437.28, "peak_rss_mib": round(9693352 / 1024, 1),
                               "exit_status": 3}  # fmt: skip
    assert t["bias_extract_partials"] == {"tasks": 2, "wall_sum_s": 7.0,
                                          "peak_rss_mib_max": 2.0}  # fmt: skip
    # the copies: the printed text without time -v's block, the log and results as they are
    assert (out / "printed.txt").read_text() == (
        "m1 = +1.0e-03 ± 2.0e-03\nverdict: INCONCLUSIVE (exit 3)\n"
    )
    assert (out / "grow.log").read_bytes() == (root / "grow.log").read_bytes()
    assert (out / "bias_results.json").read_bytes() == (
        root / "stats" / "bias_results.json"
    ).read_bytes()
    assert (out / "config_as_run.yaml").is_file()
    assert "wrote" in capsys.readouterr().out


@pytest.mark.parametrize("codes", [(COMMIT, COMMIT, OTHER, COMMIT), (COMMIT, "", COMMIT, COMMIT)])
def test_images_from_another_commit_are_said_per_commit_and_exit_1(record, tmp_path, codes):
    root, out = fake_root(tmp_path, codes=codes), tmp_path / "out"
    assert record.main([str(root), "--out", str(out)]) == 1
    git = json.loads((out / "validation.json").read_text())["git"]
    assert git["one_commit"] is False and sum(git["images_by_commit"].values()) == 4
    assert git["images_by_commit"][COMMIT] == 3


def test_a_dirty_image_is_not_the_commit(record, tmp_path):
    root = fake_root(tmp_path)
    (root / "summary.csv").write_text(
        f"run_id,status,code_commit,code_dirty\nr0,ok,{COMMIT},True\nr1,ok,{COMMIT},False\n"
    )
    assert record.main([str(root), "--out", str(tmp_path / "out")]) == 1


def test_a_missing_log_is_one_line_and_exit_2(record, tmp_path, capsys):
    root = fake_root(tmp_path)
    (root / "stats.log").unlink()
    assert record.main([str(root), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "stats.log" in err
    assert not (tmp_path / "out" / "validation.json").exists()


def test_the_record_has_bias_stats_plots(record, tmp_path):
    root, out = fake_root(tmp_path), tmp_path / "out"
    (root / "stats" / "plots").mkdir()
    (root / "stats" / "plots" / "residuals.png").write_bytes(b"png")
    assert record.main([str(root), "--out", str(out)]) == 0
    assert (out / "plots" / "residuals.png").read_bytes() == b"png"


def test_grow_writes_the_grown_line_and_readies_the_grown_plan(record, tmp_path, capsys):
    """``--grow SIGMA`` (run.sh's SIGMA): the seeds from the larger error alone, the
    "grown" line in grow.log (which run.sh reads back to resume at the grown N), the
    smaller campaign's stats and summary kept, runs.done removed."""
    import subprocess

    root = fake_root(tmp_path)
    (root / "runs.done").touch()
    res = json.loads((root / "stats" / "bias_results.json").read_text())
    assert record.main([str(root), "--grow", "3e-3"]) == 0  # both errors below: nothing
    assert capsys.readouterr().out == "" and (root / "runs.done").is_file()
    assert record.main([str(root), "--grow", "2.4e-3"]) == 0  # m2_err 2.5e-3 above
    new = int(capsys.readouterr().out)
    assert new == record.grown_seeds(2, 2.5e-3, 2.4e-3) == 100  # rounded up to 100 seeds
    line = (root / "grow.log").read_text().splitlines()[-1]
    assert line.endswith(" grown: n 2 -> 100 (2 seeds gave m2_err 2.500e-3, above 0.0024); "
                         "the 2-seed bias-stats record is stats_n2/")  # fmt: skip
    assert not (root / "runs.done").exists() and not (root / "stats").exists()
    assert json.loads((root / "stats_n2" / "bias_results.json").read_text()) == res
    assert (root / "stats_n2" / "summary.csv").is_file() and not (root / "summary.csv").exists()
    sed = ROOT / "results" / "validation" / "level2_2d_3e4" / "run.sh"
    expr = next(ln for ln in sed.read_text().splitlines() if "grown: n" in ln and "sed" in ln)
    pattern = expr.split("sed -n '", 1)[1].split("'", 1)[0]
    got = subprocess.run(["sed", "-n", pattern, str(root / "grow.log")], capture_output=True,
                         text=True, check=True).stdout.split()  # fmt: skip
    assert got == ["100"]  # run.sh resumes a grown campaign at its grown N
    # the 3e-4 campaign's figures: 9,000 seeds at m1_err 3.007e-4 grow to 9,200
    assert record.grown_seeds(9000, 3.007007590861981e-4, 3e-4) == 9200
    assert record.grown_seeds(9000, 2.98e-4, 3e-4) == 9000


def test_grow_refuses_without_a_plan_in_one_line(record, tmp_path, capsys):
    root = fake_root(tmp_path)
    (root / "runs" / "campaign.json").write_text("{}")
    assert record.main([str(root), "--grow", "1e-4"]) == 2
    assert capsys.readouterr().err.count("\n") == 1 and (root / "stats").is_dir()
