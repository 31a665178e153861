"""Smoke test of the expensive benchmarks in bench/ (``slow``: ``make test-slow``): each
script's ``main()`` run to its end at its smallest size on the CPU, into tmp_path.

The cheap ones are in test_bench_smoke.py, whose ``run_bench`` these use: each record
must hold every key of the committed ``results/benchmarks/<name>.json``, finite numbers
only, no absolute path, and its figure beside it. Most of them compile a Level 2 program
(32 galaxies, 1,000 draws) or start ``bias-run`` processes: minutes each on the 2-core
CPU. The scripts that write under results/validation/ are given a folder in tmp_path, and
the committed records are checked to be left alone. bench_slurm.py and chaos_slurm.py
run in the ``slurm`` tier (tests/top/test_slurm_cluster.py,
tests/guarantees/test_slurm_chaos.py).
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from shearbatch.engine import runtime
from tests.conftest import write_config
from tests.project.test_bench_smoke import ROOT, key_paths, run_bench

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
LEVEL2 = ROOT / "configs" / "level2.yaml"


@pytest.fixture(autouse=True)
def bench_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))


def _records(folder: Path) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def level2_campaign(tmp_path_factory):
    """A tiny Level 2 campaign (configs/level2.yaml, 4 seeds: 16 realizations of 32
    galaxies, 2 batches), extracted (summary.csv, its partials); tests copy it."""
    root = tmp_path_factory.mktemp("level2") / "runs"
    for cmd in ([str(BIN / "bias-run"), "--config", str(LEVEL2), "--n-realizations", "4",
                 "--batch-size", "8", "--output-dir", str(root), "--no-progress"],
                [str(BIN / "bias-extract"), "--input-dir", str(root), "--output",
                 str(root / "summary.csv"), "--no-progress"]):  # fmt: skip
        res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
        assert res.returncode == 0, res.stderr[-3000:]
    return root


def _copy(root: Path, tmp_path: Path, extracted: bool = True) -> Path:
    """A copy of the campaign; ``extracted=False``: as its bias-run left it (no summary.csv,
    index or partials: what array tasks leave before their bias-extract)."""
    skip = () if extracted else ("summary.csv", "summary.partials.json", "partials")
    return Path(shutil.copytree(root, tmp_path / "runs", ignore=shutil.ignore_patterns(*skip)))


# --------------------------------------------------------------------------- compiled programs


def test_lane_memory(tmp_path):
    rec = run_bench("lane_memory", tmp_path, "--batches", "1", "2", "--stamp", "16")
    assert set(rec["by_dtype"]) == {"float64", "float32"}
    assert all(r["bytes_per_lane"] > 0 for r in rec["by_dtype"].values())


def test_memory(tmp_path):
    rec = run_bench("memory", tmp_path, "--lanes", "1", "2")
    assert set(rec["programs"]) == {"joint", "interim_all_draws", "interim"}
    assert rec["interim_over_joint"] > 0 and rec["all_draws_over_chunked"] > 0


def test_khat_level2(tmp_path):
    rec = run_bench("khat_level2", tmp_path, "--batches", "1", "--ks", "50")
    (row,) = rec["measured"]["rows"]
    assert row["K"] == 50 and row["n_galaxies"] == 16 * 32 and 0 <= row["fraction"] <= 1


def test_level2_rate(tmp_path):
    """``before`` alone (each variant compiles its own Level 2 program), 2 seeds timed and
    2 more for the draws study."""
    rec = run_bench("level2_rate", tmp_path, "--batch", "8", "--batches", "1",
                    "--study-batches", "2", "--repeats", "1", "--variants", "before",
                    skip=".measured.ratio_to_before")  # fmt: skip
    (row,) = rec["measured"]["rows"]
    assert row["variant"] == "before" and row["n_galaxies"] == 8 * 32 and row["dm1"] == 0
    assert row["draws_study"]["n_galaxies"] == 16 * 32


def test_lockstep(tmp_path):
    """One batch of 4 realizations (one seed) on a Level 2 config of 4 galaxies and 100
    draws; the summary's keys name the lane counts (lockstep_4, refill_1 here)."""
    cfg = write_config(tmp_path / "l2.yaml", {"image.n_objects": 4,
                                              "inference.map_config.num_samples": 100},
                       base=LEVEL2)  # fmt: skip
    rec = run_bench("lockstep", tmp_path, "--config", cfg, "--batch", "4", "--batches", "1",
                    skip=".summary")  # fmt: skip
    assert sorted(rec["summary"]) == ["lockstep_4", "refill_1"]
    ref = next(r for r in rec["rows"] if r["program"] == "refill")
    assert ref["same_steps"] and ref["within_rounding"]


def test_interim_nuts(tmp_path):
    """No committed record (its runs are named by --out) and no figure."""
    rec = run_bench("interim_nuts", tmp_path, "--batch", "1", "--warmup", "10", "--samples",
                    "10", "--chains", "2", "--repeats", "1", "--prefixes", "5", "--set",
                    "image.n_objects=2", committed=False, png=False)  # fmt: skip
    assert rec["galaxies_per_realization"] == 2 and rec["convergence"]["galaxies"] == 2
    assert [p["samples"] for p in rec["prefixes"]] == [5]


def test_nuts_level2(tmp_path):
    rec = run_bench("nuts_level2", tmp_path, "--batch", "1", "--batch-snr30", "1", "--repeats",
                    "1", "--settings", "10:10:2:2", "--settings-snr30", "10:10:2:2")  # fmt: skip
    assert [(r["config"], r["B"]) for r in rec["rows"]] == [("level2", 1), ("survey_snr30", 1)]
    assert len(rec["gaussian_reference"]) == 1


def test_scaling(tmp_path):
    rec = run_bench("scaling", tmp_path, "--ms", "1", "2", "--batch", "1", "--m-fixed", "1",
                    "--batches", "1", "--dense-upto", "2", "--nuts-ms", "1", "--nuts-batch", "1",
                    "--nuts-draws", "10", "--repeats", "1")  # fmt: skip
    assert [r["M"] for r in rec["map_vs_m"]] == [1, 2] and len(rec["map_vs_m_dense"]) == 1
    assert len(rec["map_vs_b"]) == 1 and len(rec["nuts_vs_m"]) == 1


def test_host(tmp_path):
    rec = run_bench("host", tmp_path, "--batch", "2", "--repeats", "1", "--critical-batch", "2",
                    "--writers", "1")  # fmt: skip
    assert set(rec["configs"]) == {"level0", "level2"} and rec["critical"]["batch"] == 2
    kinds = {r["kind"] for c in rec["configs"].values() for r in c["scaling"]}
    assert kinds == {"process", "thread"}


def test_throughput(tmp_path):
    rec = run_bench("throughput", tmp_path, "--n", "4", "--batch-size", "2", "--batches", "1",
                    "--sweep-n", "2", "--stamp", "16", "--files", "2")  # fmt: skip
    assert [r["mode"] for r in rec["target"]] == ["unchunked", "serial", "threads", "processes"]
    assert all(r["n"] == 4 for r in rec["target"]) and len(rec["sweep"]) == 2


# --------------------------------------------------------------------------- bias-run processes


def test_level2_campaign(tmp_path):
    """Three bias-run processes (before, shipped, estimator draws) of 2 seeds (8 images) in
    2 batches of 4: batch 2 is the post-compile rate."""
    rec = run_bench("level2_campaign", tmp_path, "--n-realizations", "2", "--batch-size", "4",
                    "--repeats", "1")  # fmt: skip
    m = rec["measured"]
    assert [r["variant"] for r in m["runs"]] == ["before", "shipped", "shipped_estimator_draws"]
    assert all(r["realizations"] == 8 and len(r["batch_s"]) == 2 for r in m["runs"])


def test_cold_start(tmp_path):
    """Both modes, each a first process (1 seed: 4 images, 2 batches) and a second one
    resuming it (2 seeds: 4 more), on 16x16 Level 0 stamps. The figures come from the
    processes' logs (the loggers' names changed when the engine's modules moved: none was
    found, and the script ended in a KeyError)."""
    cfg = write_config(tmp_path / "small.yaml", {"image.size_x": 16, "image.size_y": 16})
    rec = run_bench("cold_start", tmp_path, "--config", cfg, "--first-n", "1", "--second-n",
                    "2", "--batch-size", "2")  # fmt: skip
    for mode in ("before", "after"):
        (run,) = rec["runs"][mode]
        assert len(run["first_process"]["batches"]) == 2
        assert len(run["second_process"]["batches"]) == 2
        for proc in ("first_process", "second_process"):
            assert run[proc]["setup_s"] > 0 and run[proc]["to_first_batch_s"] > 0


def test_chaos(tmp_path):
    """Up to 3 kills (a SIGTERM, a SIGINT, a SIGKILL) of bias-run processes that have
    written a realization and hold more, in a 64-realization campaign (16x16 stamps, batch
    2): every realization complete and ok, its draws bit-identical to the uninterrupted
    run's, none redone. How many kills land (none, on a quiet machine: the processes end
    first) and whether a signal still finds work to compute (the exit status that
    ``exact_result_set`` asserts) are the processes' timing, not asserted here; so are the
    kill events' keys of the committed record."""
    rec = run_bench("chaos", tmp_path, "--kills", "3", "--seed", "0", "--n-realizations",
                    "16", "--batch-size", "2", "--max-delay", "1", module="chaos",
                    skip=(".sigterm", ".sigint", ".events"))  # fmt: skip
    assert rec["complete"] == 64 and rec["statuses"] == {"ok": 64} and rec["kills"] <= 3
    assert rec["draws_bit_identical"] == 64 and not rec["redone_after_complete"]
    assert not rec["extra"] and not rec["missing"] and not rec["tmp_files_left"]


def test_gpu_cpu_smoke(tmp_path):
    """``bench_gpu.py --cpu-smoke``: every step (probe, Level 2 auto and warm, NUTS, Level 0
    auto and warm) at its tiny sizes on the CPU; no step skipped, failed or timed out.
    NUTS gets 100 warm-up steps and 100 draws (the smoke size's 20 leave a chain stuck:
    R-hat NaN, which the record may not hold)."""
    skip = (".nvidia_smi", ".device_memory_bytes", ".git.source")  # a GPU's, a device copy's
    rec = run_bench("gpu", tmp_path, "--cpu-smoke", "--nuts-warmup", "100", "--nuts-samples",
                    "100", skip=skip)  # fmt: skip
    assert rec["settings"]["mode"] == "cpu_smoke" and rec["steps_not_ok"] == []
    assert not (tmp_path / "gpu.json.partial").exists()


# --------------------------------------------------------------------------- a campaign's files


def test_stats(level2_campaign, tmp_path):
    """bias-stats on the tiny campaign, twice: ``--label before`` (``--src``: this checkout's)
    then ``after`` into the same record, which keeps both."""
    root = _copy(level2_campaign, tmp_path)
    out = tmp_path / "stats.json"
    with runtime.scoped():
        import bench_stats

        bench_stats.main(["--root", str(root), "--src", str(ROOT / "src"), "--label", "before",
                          "--out", str(out)])  # fmt: skip
    rec = run_bench("stats", tmp_path, "--root", str(root), "--label", "after")
    assert sorted(rec["runs"]) == ["after", "before"] and rec["n_realizations"] == 16
    for run in rec["runs"].values():
        (rep,) = run["repeats"]
        assert rep["exit_code"] in (0, 1, 3) and rep["m1_line"].startswith("m1 = ")


def test_weights(level2_campaign, tmp_path):
    rec = run_bench("weights", tmp_path, "--root", str(_copy(level2_campaign, tmp_path)))
    m = rec["measured"]
    assert m["n_realizations"] == 16 and m["n_galaxies"] == 16 * 32


def test_stages_scale(level2_campaign, tmp_path):
    """Two array tasks' partials, the reduction, the three sizes (small = task 0: 2 seeds,
    the fewest bias-stats fits; large = 2 replicas) and the agreement of the in-memory and
    streamed fits."""
    root = _copy(level2_campaign, tmp_path, extracted=False)
    rec = run_bench("stages_scale", tmp_path, "--root", str(root),
                    "--tasks", "2", "--work", str(tmp_path / "work"), "--small-tasks", "1",
                    "--replicas", "2", "--repeats", "1")  # fmt: skip
    m = rec["measured"]
    assert m["complete"] and sorted(m["stats"]) == ["campaign", "large", "small"]
    assert len(m["array_tasks"]) == 2


def test_stats_rows(tmp_path):
    """A 2-seed Level 0 template (8 realizations) repeated to 100 and 600 rows, bias-stats
    on each, and ``--before-src`` (this checkout's src) on the larger."""
    rec = run_bench("stats_rows", tmp_path, "--work", str(tmp_path / "work"), "--sizes",
                    "100,600", "--repeats", "1", "--template-seeds", "2", "--before-src",
                    str(ROOT / "src"))  # fmt: skip
    m = rec["measured"]
    assert sorted(m["median"], key=int) == ["100", "600"] and m["size_ratio"] == 6
    assert all(r["exit"] in (0, 1, 3) for rs in m["runs"].values() for r in rs)


# --------------------------------------------------------------------------- results/validation


def test_noise_bias(tmp_path):
    """S/N 15, MAP, 10 pairs; ``--out`` a folder in tmp_path."""
    import noise_bias

    before = _records(ROOT / "results" / "validation")
    with runtime.scoped():
        doc = noise_bias.main(["--snr", "15", "--seeds", "10", "--batch-size", "20", "--out",
                               str(tmp_path / "nb")])  # fmt: skip
    committed = json.loads((ROOT / "results" / "validation" / "noise_bias" /
                            "noise_bias_map.json").read_text())  # fmt: skip
    written = json.loads((tmp_path / "nb" / "noise_bias_map.json").read_text())
    assert written == doc and key_paths(committed) - {".note"} <= key_paths(written)
    (row,) = doc["rows"]
    assert (row["method"], row["snr"], row["n_realizations"]) == ("map", 15, 20)
    assert _records(ROOT / "results" / "validation") == before


def test_validate_levels(tmp_path):
    """survey_snr30 (one galaxy per image), 8 seeds: run -> extract -> stats into
    ``--results`` in tmp_path."""
    import validate_levels as vl

    before = _records(ROOT / "results" / "validation")
    with runtime.scoped():
        (doc,) = vl.main(["--levels", "survey_snr30", "--seeds", "8", "--batch-size", "16",
                          "--nice", "0", "--results", str(tmp_path)])  # fmt: skip
    out = tmp_path / "survey_snr30"
    assert json.loads((out / "validation.json").read_text()) == json.loads(
        json.dumps(doc, default=str)
    )
    assert (out / "commands.txt").is_file() and (out / "bias_results.json").is_file()
    assert doc["ring"]["n_realizations"] == 16 and doc["snr_per_galaxy"]["n_galaxies"] == 16
    committed = json.loads((ROOT / "results" / "validation" / "survey_snr30_interim" /
                            "validation.json").read_text())  # fmt: skip
    assert {p for p in key_paths(committed) if p.startswith(".ring.")} <= key_paths(doc)
    assert _records(ROOT / "results" / "validation") == before
