"""SLURM arrays without a cluster: which slice a task runs, one lane count per campaign,
the sbatch scripts, the cache location and lock. (A real SLURM: test_slurm_cluster.py.)"""

import fcntl
import json
import os
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from shearbatch.campaign import array_slice, plan_campaign
from shearbatch.cli import bias_run
from shearbatch.engine import runtime
from shearbatch.io import read_posterior
from shearbatch.slurm import ArrayError, array_position, parse_indices
from tests.conftest import write_config

LEVEL0 = "configs/level0.yaml"


def slurm_env(task_id, lo, hi, step, count):
    """The variables SLURM 22.05 sets (recorded from sbatch on the local cluster)."""
    return {"SLURM_ARRAY_TASK_ID": str(task_id), "SLURM_ARRAY_TASK_MIN": str(lo),
            "SLURM_ARRAY_TASK_MAX": str(hi), "SLURM_ARRAY_TASK_STEP": str(step),
            "SLURM_ARRAY_TASK_COUNT": str(count)}  # fmt: skip


# SLURM's variables for each --array value, as recorded from sbatch (slurm-wlm 22.05.8):
# (ids, MIN, MAX, STEP, COUNT); 1,3,5 is reported with STEP=1
RECORDED = {
    "0-3": ([0, 1, 2, 3], 0, 3, 1, 4),
    "0-4:2": ([0, 2, 4], 0, 4, 2, 3),
    "10-13": ([10, 11, 12, 13], 10, 13, 1, 4),
    "1,3,5": ([1, 3, 5], 1, 5, 1, 3),
}


@pytest.mark.parametrize("spec", ["0-3", "0-4:2", "10-13"])
def test_ranges_map_onto_positions_from_the_environment(spec):
    ids, lo, hi, step, count = RECORDED[spec]
    got = [array_position(slurm_env(i, lo, hi, step, count)) for i in ids]
    assert got == [(p, len(ids)) for p in range(len(ids))]
    assert parse_indices(spec) == ids


def test_a_list_that_is_not_a_range_needs_its_index_set():
    ids, lo, hi, step, count = RECORDED["1,3,5"]
    with pytest.raises(ArrayError, match=r"SLURM_ARRAY_TASK_ID=3 .*--array-indices"):
        array_position(slurm_env(3, lo, hi, step, count))
    idx = parse_indices("1,3,5")
    assert [array_position(slurm_env(i, lo, hi, step, count), idx) for i in ids] == [
        (0, 3),
        (1, 3),
        (2, 3),
    ]
    with pytest.raises(ArrayError, match="not in --array-indices"):
        array_position(slurm_env(4, lo, hi, step, count), idx)
    assert array_position({}) is None
    assert parse_indices("1,4-6,10-14:2%3") == [1, 4, 5, 6, 10, 12, 14]
    for bad in ("1,x", "5-2", "0-4:0", ""):
        with pytest.raises(ArrayError, match="not an array index set"):
            parse_indices(bad)


def dry_run(args, env=None):
    return CliRunner().invoke(bias_run, ["--config", LEVEL0, "--dry-run", *args], env=env)


@pytest.mark.parametrize("spec", ["0-4:2", "10-13", "1,3,5"])
def test_stepped_offset_and_sparse_arrays_cover_the_plan_once(tmp_path, spec):
    ids, lo, hi, step, count = RECORDED[spec]
    base = ["--shear-grid", "0.01", "0.02", "0.05", "--n-realizations", "3",
            "--batch-size", "4", "--output-dir", str(tmp_path)]  # fmt: skip
    extra = ["--array-indices", spec] if "," in spec else []
    seen = []
    for i in ids:
        res = dry_run([*base, *extra], env=slurm_env(i, lo, hi, step, count))
        assert res.exit_code == 0, res.output
        assert "--array-task-id" not in res.output
        seen += [ln.split()[2:] for ln in res.output.splitlines() if ln.startswith("batch ")]
    ids_seen = [r for b in seen for r in b if r.startswith("g1_")]
    plan = plan_campaign([0.01, 0.02, 0.05], n_realizations=3)
    assert sorted(ids_seen) == sorted(r.run_id for r in plan)  # all of it, once


def test_a_sparse_array_without_its_index_set_says_what_to_pass(tmp_path):
    res = dry_run(["--shear-grid", "0.01", "--output-dir", str(tmp_path)],
                  env=slurm_env(3, 1, 5, 1, 3))  # fmt: skip
    assert res.exit_code == 2
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "SLURM_ARRAY_TASK_ID=3" in lines[0], res.output
    assert "--array-indices" in lines[0]


def test_every_task_pads_to_the_campaigns_lane_count(tmp_path):
    """3 tasks over 16 realizations, batch 8: slices of 5, 5 and 6, each one batch of 8
    lanes (the single-process run's lane count), never a program of 5 or 6 lanes."""
    base = ["--shear-grid", "0.01", "0.02", "--n-realizations", "8", "--batch-size", "8",
            "--output-dir", str(tmp_path)]  # fmt: skip
    takes = []
    for i in range(3):
        res = dry_run([*base, "--array-task-id", str(i), "--array-task-count", "3"])
        assert res.exit_code == 0, res.output
        assert "in 1 batch(es) of 8" in res.output, res.output
        takes.append(int(res.output.split(" takes ")[1].split(";")[0]))
    assert takes == [5, 5, 6]
    res = dry_run(base)
    assert "in 2 batch(es) of 8" in res.output


@pytest.fixture(scope="module")
def split_and_single(module_tmp):
    """The same 5-realization campaign (batch 4) as 2 array tasks (slices of 2 and 3, each
    padded to 4 lanes) and in one process (4 + 1 padded); the tasks are the CLI's
    (CliRunner), one after the other."""
    cfg = write_config(module_tmp / "tiny.yaml", {"image.size_x": 16, "image.size_y": 16,
                                                 "gal.half_light_radius": 0.3})  # fmt: skip
    base = ["--config", cfg, "--shear-grid", "0.01", "-0.02", "0.03", "0.04", "0.05",
            "--n-realizations", "1", "--batch-size", "4", "--x64", "--no-progress"]  # fmt: skip
    for i in range(2):
        res = CliRunner().invoke(bias_run, [*base, "--output-dir", str(module_tmp / "split"),
                                            "--array-task-id", str(i),
                                            "--array-task-count", "2"])  # fmt: skip
        assert res.exit_code == 0, res.output
        assert f"wrote {2 + i} ok, 0 failed" in res.output  # slices of 2 and 3
    res = CliRunner().invoke(bias_run, [*base, "--output-dir", str(module_tmp / "single")])
    assert res.exit_code == 0, res.output
    return module_tmp / "split", module_tmp / "single"


def test_split_campaign_is_bit_identical_to_one_process(split_and_single):
    split, single = split_and_single
    ids = sorted(p.name for p in single.iterdir() if p.name.startswith("g1_"))
    assert len(ids) == 5
    assert sorted(p.name for p in split.iterdir() if p.name.startswith("g1_")) == ids
    for rid in ids:
        a, b = (
            read_posterior(split / rid / "posterior.nc"),
            read_posterior(single / rid / "posterior.nc"),
        )
        for k in ("g1", "g2"):
            np.testing.assert_array_equal(a[k], b[k])
        conv = json.loads((split / rid / "convergence.json").read_text())
        assert conv["batch"]["size"] == 4  # every task ran the campaign's 4 lanes


def test_array_slices_are_contiguous_whatever_the_split():
    plan = plan_campaign([0.01 * (i + 1) for i in range(16)], n_realizations=1)
    for k in (1, 3, 4, 16):
        parts = [array_slice(plan, i, k) for i in range(k)]
        assert [r for p in parts for r in p] == plan


# --------------------------------------------------------------------------- sbatch scripts


def emit(tmp_path, *extra, config=LEVEL0):
    script = tmp_path / "camp.sbatch"
    args = ["--config", config, "--shear-grid", "-0.02", "0.02", "--n-realizations", "8",
            "--batch-size", "4", "--x64", "--output-dir", str(tmp_path / "out"),
            "--emit-sbatch", str(script), *extra]  # fmt: skip
    return CliRunner().invoke(bias_run, args), script


def test_emitted_script_asks_for_what_the_flags_say(tmp_path):
    res, script = emit(tmp_path, "--sbatch-throttle", "2", "--sbatch-time", "01:30:00",
                       "--sbatch-mem", "8G", "--sbatch-gpus", "1", "--sbatch-cpus", "4",
                       "--sbatch-line=--partition=gpu", "--sbatch-line", "--account=lens",
                       "--sbatch-setup", "module load cuda/12")  # fmt: skip
    assert res.exit_code == 0, res.output
    text = script.read_text()
    lines = text.splitlines()
    assert lines[0] == "#!/bin/bash"
    for want in ("#SBATCH --array=0-3%2", "#SBATCH --time=01:30:00", "#SBATCH --mem=8G",
                 "#SBATCH --gres=gpu:1", "#SBATCH --cpus-per-task=4",
                 "#SBATCH --partition=gpu", "#SBATCH --account=lens",
                 "#SBATCH --job-name=shearbatch", "module load cuda/12"):  # fmt: skip
        assert want in lines, (want, text)
    assert any(ln.startswith("#SBATCH --output=") and ln.endswith("%x_%A_%a.out") for ln in lines)
    run = lines[-1].split()
    assert run[0] == "bias-run" and "--emit-sbatch" not in run and "--sbatch-time" not in run
    assert run[run.index("--shear-grid") + 1 : run.index("--shear-grid") + 3] == ["-0.02", "0.02"]
    frozen = (tmp_path / "out").resolve() / "config.yaml"
    assert run[run.index("--config") + 1] == str(frozen) and frozen.is_file()
    assert run[run.index("--output-dir") + 1] == str((tmp_path / "out").resolve())
    assert "--x64" in run and "--array-task-id" not in run
    stats = (tmp_path / "camp-stats.sbatch").read_text().splitlines()
    assert "#SBATCH --gres=gpu:1" not in stats and "#SBATCH --partition=gpu" in stats
    assert "#SBATCH --cpus-per-task=4" in stats
    root = str((tmp_path / "out").resolve())
    extract = next(ln for ln in stats if ln.startswith("bias-extract "))
    assert extract.startswith(f"bias-extract --input-dir {root}") and '"$workers"' in extract
    line = next(ln for ln in stats if ln.startswith("bias-stats "))
    assert line.startswith(f"bias-stats --input {root} ")  # the campaign directory
    assert f"--report {root}/report.html" in line and "--level" not in line
    assert "--dependency=afterany:" in res.output
    assert (tmp_path / "out" / "logs").is_dir()  # SLURM does not create --output's folder
    # nothing ran: only the logs' folder and the frozen config
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["config.yaml", "logs"]


def _fake_tools(tmp_path, status):
    """bias-extract and bias-stats stand-ins that record their arguments; bias-stats exits
    with ``status``."""
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir(exist_ok=True)
    for name, code in (("bias-extract", 0), ("bias-stats", status)):
        exe = bin_dir / name
        exe.write_text(f'#!/bin/bash\necho "{name} $*" >> {tmp_path}/calls.txt\nexit {code}\n')
        exe.chmod(0o755)
    return bin_dir


@pytest.mark.parametrize(("status", "job_exit"), [(0, 0), (3, 0), (1, 1), (2, 2)])
def test_stats_job_treats_inconclusive_as_a_verdict(tmp_path, status, job_exit):
    """The emitted stats job, run by bash with stand-ins for the two commands: bias-stats'
    INCONCLUSIVE (exit 3, also an unfinished campaign's) ends the job with 0 and says so;
    FAIL (1) and bad input (2) end it with their status. Its extract workers are the
    allocation's: SLURM_CPUS_PER_TASK, else nproc (the affinity mask)."""
    res, _ = emit(tmp_path, "--sbatch-setup", "echo setup")
    assert res.exit_code == 0, res.output
    script = tmp_path / "camp-stats.sbatch"
    syntax = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr
    bin_dir = _fake_tools(tmp_path, status)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_CPUS_PER_TASK": "3"}
    job = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env)
    assert job.returncode == job_exit, job.stdout + job.stderr
    calls = (tmp_path / "calls.txt").read_text().splitlines()
    assert calls[0].startswith("bias-extract ") and "--workers 3 " in calls[0]
    assert calls[1].startswith("bias-stats --input ") and "--report" in calls[1]
    verdict = {0: "verdict: PASS", 3: "verdict: INCONCLUSIVE (or unfinished)",
               1: "verdict: FAIL"}.get(status, f"bias-stats failed (exit {status})")  # fmt: skip
    assert verdict in job.stdout + job.stderr
    if status == 0:
        (tmp_path / "calls.txt").unlink()
        env.pop("SLURM_CPUS_PER_TASK")
        job = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env)
        assert job.returncode == 0, job.stderr
        n = len(os.sched_getaffinity(0))
        assert f"--workers {n} " in (tmp_path / "calls.txt").read_text()


def test_sbatch_level_is_passed_to_the_stats_job(tmp_path):
    res, _ = emit(tmp_path, "--sbatch-level", "level_1")
    assert res.exit_code == 0, res.output
    line = next(ln for ln in (tmp_path / "camp-stats.sbatch").read_text().splitlines()
                if ln.startswith("bias-stats "))  # fmt: skip
    assert "--level level_1" in line


def test_the_tasks_read_the_frozen_config(tmp_path):
    """Editing the config after --emit-sbatch changes nothing for the tasks (they read the
    copy frozen in the output root, --set applied); emitting the edited config into the
    same root is refused, naming the key."""
    cfg = write_config(tmp_path / "mine.yaml")
    res, script = emit(tmp_path, "--set", "image.size_x=16", "--sbatch-tasks", "2", config=cfg)
    assert res.exit_code == 0, res.output
    frozen = tmp_path / "out" / "config.yaml"
    assert yaml.safe_load(frozen.read_text())["image"]["size_x"] == 16
    write_config(tmp_path / "mine.yaml", {"gal.half_light_radius": 0.6})  # edited afterwards
    run = shlex.split(script.read_text().splitlines()[-1])[1:]
    assert run[run.index("--set") + 1] == "image.size_x=16"
    out = CliRunner().invoke(bias_run, [*run, "--dry-run"], env=slurm_env(1, 0, 1, 1, 2))
    assert out.exit_code == 0, out.output
    assert f"config: {frozen.resolve()}" in out.output
    res, _ = emit(tmp_path, "--set", "image.size_x=16", config=cfg)
    assert res.exit_code == 2, res.output
    assert "--config (config hash): gal.half_light_radius is 0.6 here, 0.5 in " in res.output
    assert str(frozen) in res.output


def test_emitted_bias_run_line_plans_what_the_command_line_planned(tmp_path):
    """The script's bias-run, run as array task 1 of 4 (SLURM's variables), plans the
    same campaign as the command line that emitted it."""
    res, script = emit(tmp_path, "--sbatch-tasks", "4")
    assert res.exit_code == 0, res.output
    run = script.read_text().splitlines()[-1].split()[1:]
    out = CliRunner().invoke(bias_run, [*run, "--dry-run"], env=slurm_env(1, 0, 3, 1, 4))
    assert out.exit_code == 0, out.output
    assert "plan: 16 realizations; array task 1 of 4 takes 4" in out.output
    assert "batch(es) of 4" in out.output


def test_sparse_index_set_and_config_section(tmp_path):
    cfg = write_config(tmp_path / "c.yaml", {"campaign.sbatch": {
        "time": "00:20:00", "mem": "2G", "gpus": 1, "throttle": 3,
        "setup": ["source /opt/venv/bin/activate"], "line": ["--qos=short"]}})  # fmt: skip
    res, script = emit(tmp_path, "--sbatch-array", "1,3,5", "--sbatch-mem", "4G", config=cfg)
    assert res.exit_code == 0, res.output
    lines = script.read_text().splitlines()
    for want in ("#SBATCH --array=1,3,5%3", "#SBATCH --time=00:20:00", "#SBATCH --mem=4G",
                 "#SBATCH --gres=gpu:1", "#SBATCH --qos=short",
                 "source /opt/venv/bin/activate"):  # fmt: skip
        assert want in lines, (want, lines)
    assert lines[-1].endswith("--array-indices 1,3,5")
    res, script = emit(tmp_path, "--sbatch-array", "10-13", "--no-sbatch-stats")
    assert "#SBATCH --array=10-13" in script.read_text().splitlines()
    assert script.read_text().splitlines()[-1].endswith("--array-indices 10-13")


def test_a_task_resubmitted_alone_runs_its_own_slice(tmp_path):
    """``sbatch --array=2 camp.sbatch`` (re-running one cancelled task) gives the task
    MIN=MAX=2, COUNT=1: the script's own index set, on its bias-run line, still makes it
    slice 2 of 4, not the whole campaign as task 0 of 1."""
    res, script = emit(tmp_path, "--sbatch-tasks", "4")
    assert res.exit_code == 0, res.output
    run = script.read_text().splitlines()[-1].split()[1:]
    assert run[-2:] == ["--array-indices", "0-3"]
    out = CliRunner().invoke(bias_run, [*run, "--dry-run"], env=slurm_env(2, 2, 2, 1, 1))
    assert out.exit_code == 0, out.output
    assert "plan: 16 realizations; array task 2 of 4 takes 4" in out.output


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--sbatch-tasks", "0"], "--sbatch-tasks: must be >= 1"),
        (["--sbatch-tasks", "17"], "--sbatch-tasks: 17 tasks for 16 realizations"),
        (["--sbatch-array", "1,x"], "--sbatch-array: not an array index set"),
        (["--sbatch-array", "0-3", "--sbatch-tasks", "3"], "--sbatch-tasks: 3 but"),
        (["--sbatch-level", "level_9"], "--sbatch-level: unknown level"),
        (["--dry-run"], "--emit-sbatch: does not combine"),
    ],
)
def test_bad_sbatch_options_exit_2_and_write_nothing(tmp_path, extra, needle):
    res, script = emit(tmp_path, *extra)
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0], res.output
    assert not script.exists() and not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- compilation cache


def test_cache_defaults_to_the_output_root(tmp_path, monkeypatch):
    monkeypatch.delenv("SHEARBATCH_CACHE_DIR", raising=False)
    assert runtime.default_cache_dir(tmp_path) == str(tmp_path / ".jax-cache")
    monkeypatch.setenv("SHEARBATCH_CACHE_DIR", str(tmp_path / "elsewhere"))
    assert runtime.default_cache_dir(tmp_path) == str(tmp_path / "elsewhere")


def test_bias_run_writes_its_cache_under_the_output_root(tmp_path):
    """A new process (JAX reads its cache directory once): the generator compiled for
    --preview lands in <output-dir>/.jax-cache, which bias-extract never scans."""
    env = {k: v for k, v in os.environ.items() if k != "SHEARBATCH_CACHE_DIR"}
    cfg = write_config(tmp_path / "t.yaml", {"image.size_x": 16, "image.size_y": 16})
    out = tmp_path / "camp"
    exe = Path(sys.executable).parent / "bias-run"
    res = subprocess.run([str(exe), "--config", cfg, "--shear-grid", "0.01", "--output-dir",
                          str(out), "--dry-run", "--preview", str(tmp_path / "p.png")],
                         capture_output=True, text=True, env=env, check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert f"compilation cache: {out / '.jax-cache'}" in res.stderr
    assert any((out / ".jax-cache").iterdir())
    from shearbatch.io import find_realization_dirs

    assert find_realization_dirs(out) == []


def test_compile_lock_lets_one_task_compile_at_a_time(tmp_path):
    cache = str(tmp_path / "cache")
    held = threading.Event()
    order = []

    def other():
        held.wait()
        with runtime.compile_lock(cache) as waited:
            order.append(("other", waited))

    t = threading.Thread(target=other)
    with runtime.compile_lock(cache):
        t.start()
        held.set()
        time.sleep(0.3)
        order.append(("first", 0.0))
    t.join()
    assert [o[0] for o in order] == ["first", "other"] and order[1][1] >= 0.2
    with open(Path(cache) / ".compile.lock") as fh:  # released: another process may take it
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with runtime.compile_lock("off") as waited:
        assert waited == 0.0


def test_array_tasks_starting_together_compile_once(tmp_path, caplog):
    """Task 0 compiles the campaign's program under the cache's lock (app.compile_first,
    through engine.build_program) and leaves its marker; task 1 finds it and only reads."""
    cfg = write_config(tmp_path / "tiny.yaml", {"image.size_x": 16, "image.size_y": 16,
                                               "gal.half_light_radius": 0.3})  # fmt: skip
    cache = tmp_path / "cache"
    base = ["--config", cfg, "--shear-grid", "0.01", "0.02", "--n-realizations", "1", "--batch-size", "1",
            "--output-dir", str(tmp_path / "camp"), "--cache-dir", str(cache),
            "--array-task-count", "2", "--no-progress"]  # fmt: skip
    logs = []
    for i in range(2):
        caplog.clear()
        with caplog.at_level("INFO", logger="shearbatch"):
            res = CliRunner().invoke(bias_run, [*base, "--array-task-id", str(i)])
        assert res.exit_code == 0, res.output
        assert "wrote 1 ok, 0 failed" in res.output
        logs.append([r.getMessage() for r in caplog.records if "compile lock" in r.getMessage()])
        if i == 0:
            assert len(list(cache.glob(".compiled-*"))) == 1
    assert len(logs[0]) == 1 and "miss(es) for the campaign's 1-lane programs" in logs[0][0]
    assert len(logs[1]) == 1 and "the cache already holds" in logs[1][0]


@pytest.mark.parametrize("run_status", [0, 4])
@pytest.mark.parametrize("extract_status", [0, 1])
def test_the_task_ends_with_bias_runs_status_whatever_its_extraction_does(
    tmp_path, run_status, extract_status
):
    """The emitted array script, run by bash with ``bias-run`` and ``bias-extract`` stand-ins
    on PATH: the task's exit status is bias-run's, also when the EXIT trap's extraction
    fails (a disk still full: SLURM would otherwise call a finished task FAILED), and a
    failed extraction says so on stderr."""
    res, script = emit(tmp_path, "--sbatch-array", "0-1")
    assert res.exit_code == 0, res.output
    (tmp_path / "out").mkdir(exist_ok=True)
    (tmp_path / "out" / "campaign.json").write_text("{}")  # the plan exists: the trap extracts
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for name, status in (("bias-run", run_status), ("bias-extract", extract_status)):
        (bin_ / name).write_text(f"#!/bin/sh\necho {name} ran >&2\nexit {status}\n")
        (bin_ / name).chmod(0o755)
    # the stand-ins instead of the environment the script activates
    text = script.read_text()
    assert "\nsource " in text
    script.write_text("\n".join(ln for ln in text.splitlines() if not ln.startswith("source ")))
    env = {**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}", **slurm_env(0, 0, 1, 0, 2)}
    got = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True,
                         timeout=60, cwd=tmp_path)  # fmt: skip
    assert "bias-run ran" in got.stderr and "bias-extract ran" in got.stderr, got.stderr
    assert got.returncode == run_status, got.stderr
    assert ("this task's bias-extract failed" in got.stderr) == bool(extract_status)


def test_each_array_task_writes_its_partial_of_its_own_slice(tmp_path):
    """The array script extracts a task's share of stage 2 when bias-run ends (an EXIT trap,
    so bias-run's exit status stays the task's): bias-extract with the script's index set,
    which, run as task 10 of --array=10-13, writes the partial of slice 0 of 4 of the plan."""
    from shearbatch.cli import bias_extract
    from shearbatch.io import partials as pio
    from tests.analysis.test_extract_workers import interim_realization

    res, script = emit(tmp_path, "--sbatch-array", "10-13")
    assert res.exit_code == 0, res.output
    lines = script.read_text().splitlines()
    trap = next(i for i, ln in enumerate(lines) if ln.startswith("trap "))
    assert trap < len(lines) - 1 and lines[-1].startswith("bias-run ")
    words = shlex.split(lines[trap])
    assert words[0] == "trap" and words[-1] == "EXIT"
    body = shlex.split(words[1].replace(";", " ; "))
    assert body[:4] == ["st=$?", ";", "if", "["] and body[-3:] == [";", "exit", "$st"]
    guard = body[body.index("if") :]
    assert guard[:3] == ["if", "[", "-f"]
    assert Path(guard[3]) == tmp_path / "out" / "campaign.json"  # only once there is a plan
    cmd = guard[guard.index("then") + 1 : guard.index("||", guard.index("then"))]
    assert cmd[0] == "bias-extract" and cmd[cmd.index("--array-indices") + 1] == "10-13"
    out = Path(cmd[cmd.index("--input-dir") + 1])
    assert out == tmp_path / "out"
    ids = [interim_realization(out, seed=s, g=(g, 0.0)).name for s in range(4) for g in (-0.02,
                                                                                       0.02)]  # fmt: skip
    (out / "campaign.json").write_text(json.dumps({"plan": {"run_ids": ids}}))
    args = [a for a in cmd[1:] if not a.startswith("$")]
    args = [a for a in args if "SLURM_CPUS" not in a] + ["1"]  # --workers "${...:-1}"
    got = CliRunner().invoke(bias_extract, args, env=slurm_env(10, 10, 13, 1, 4))
    assert got.exit_code == 0, got.output
    part = pio.Partial(out / "partials" / "task-00000-of-00004.nc")
    assert [r["run_id"] for r in part.rows] == array_slice(ids, 0, 4)
