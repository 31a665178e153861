"""ci/gpu_session.sh, the one prepared command of a lent GPU (issue 54 item 4), tried end to
end on the CPU: ``--cpu-smoke`` runs its steps (the gpu tier with
``SHEARBATCH_GPU_TIER_ON_CPU=1``, then bench/bench_field.py --cpu-smoke) at tiny sizes.
Here the tier is narrowed to (d), Level 2 at the auto batch against a CPU sample (2 seeds):
two Level 2 campaigns and the bench's one compile for minutes each on a 2-core CPU, so the
test is ``slow`` (~8-10 minutes there)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
#: what the session writes: the device tool brings back at most 8 files
FILES = {"session.log", "field.json", "field.png", "field.log", "bias_results.json",
         "residuals.png", "coverage.png", "summary_compact.csv.gz"}  # fmt: skip


def _records() -> dict[str, int]:
    bench = ROOT / "results" / "benchmarks"
    return {str(p): p.stat().st_mtime_ns for p in bench.rglob("*") if p.is_file()}


def test_gpu_session_cpu_smoke_runs_every_step(tmp_path):
    out = tmp_path / "out"
    before = _records()
    env = {**os.environ, "PYTHON": sys.executable, "TMPDIR": str(tmp_path)}
    env.pop("OUT", None)
    cmd = ["bash", str(ROOT / "ci" / "gpu_session.sh"), "--cpu-smoke", "--out", str(out),
           "--pytest-k", "level2_at_the_auto"]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=2400,
                         check=False)  # fmt: skip
    log = res.stdout + res.stderr
    assert res.returncode == 0, log[-6000:]
    assert (out / "session.log").read_text() == res.stdout
    for line in ("mode: cpu-smoke", "tier exit 0", "bench exit 0", "1 passed"):
        assert line in log, (line, log[-4000:])
    assert "level 2 at 8 lanes" in log  # (d)'s line: 2 seeds x 4 images, auto at them
    names = {p.name for p in out.iterdir()}
    assert names <= FILES and {"session.log", "field.json", "field.png"} <= names, names
    rec = json.loads((out / "field.json").read_text())
    head = rec["headline"]
    assert head["warm_batches"] == 3 and head["batch_lanes"] == 4, head  # 16 realizations / 4
    for key in ("galaxies_per_s_warm", "lockstep_efficiency_warm_median",
                "host_fraction_warm_median", "cold_start_to_batch_1_s", "m1", "m1_err",
                "ess_fraction_median"):  # fmt: skip
        assert isinstance(head[key], float), (key, head)
    assert rec["level2"]["device"]["platform"] == "cpu"
    assert _records() == before  # the committed records are left alone
