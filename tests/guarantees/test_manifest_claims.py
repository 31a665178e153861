"""The campaign manifest and per-realization claims, through the real CLIs in subprocesses.

Tiny Level 0 campaigns (16x16 stamps, MAP): a different campaign never mixes
into an output root, every convergence.json reproduces its realization alone,
bias-extract knows the planned size, two bias-runs on one root never compute a
realization twice, and bias-extract during a run never crashes.
"""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from shearbatch import spec
from shearbatch.cli import bias_extract
from shearbatch.io import read_posterior
from shearbatch.schema import load_config
from tests.conftest import OPTIMIZER_SD_TOL, max_diff_sd, write_config

BIN = Path(sys.executable).parent
SMALL = {"image.size_x": 16, "image.size_y": 16}


def cli(cmd: str, *args, check: int | None = 0, **kw) -> subprocess.CompletedProcess:
    out = subprocess.run([str(BIN / cmd), *map(str, args)], capture_output=True, text=True,
                         check=False, **kw)  # fmt: skip
    if check is not None:
        assert out.returncode == check, out.stdout + out.stderr
    return out


def start(cmd: str, *args) -> subprocess.Popen:
    return subprocess.Popen([str(BIN / cmd), *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip


def campaign(cfg, out, *extra, grid=("0.01", "0.02"), n=2, bs=2):
    return ["--config", cfg, "--shear-grid", *grid, "--n-realizations", n, "--batch-size", bs,
            "--output-dir", out, "--no-progress", *extra]  # fmt: skip


def snapshot(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*")}


@pytest.fixture(scope="module")
def cfg(module_tmp):
    return write_config(module_tmp / "small.yaml", SMALL)


@pytest.fixture(scope="module")
def done(module_tmp, cfg):
    """A complete 4-realization campaign."""
    root = module_tmp / "done"
    cli("bias-run", *campaign(cfg, root))
    return root


def test_a_resume_removes_the_temporary_files_of_a_killed_run(done, cfg):
    """A run killed while writing campaign.json or config.yaml leaves a temporary file;
    the next run of the campaign removes it, also when the manifest itself is kept."""
    import socket

    host, dead = socket.gethostname(), 2**22 + 12345  # above Linux's pid_max: never alive
    left = [done / f".campaign.json.{host}.{dead}.tmp", done / f".config.yaml.{host}.{dead}.tmp"]
    for f in left:
        f.write_text("{")
    res = cli("bias-run", *campaign(cfg, done))
    assert "already complete: 4" in res.stdout + res.stderr
    assert not [f for f in left if f.exists()]


def test_manifest_records_the_campaign(done, cfg):
    man = json.loads((done / "campaign.json").read_text())
    assert (man["method"], man["precision"], man["batch_size"]) == ("map", "float64", 2)
    assert len(man["config_hash"]) == 16 and man["config"]["image"]["size_x"] == 16
    assert man["plan"]["shear_grid"] == [0.01, 0.02] and man["plan"]["n_planned"] == 4
    assert man["plan"]["base_seed"] == 0 and len(man["plan"]["run_ids"]) == 4
    # the renderer period as run (chosen from the noise: the config leaves it null)
    period = spec.run_spec(load_config(cfg)).model.image.fft_size
    assert man["config"]["image"]["fft_size"] is None
    assert man["plan"]["fft_size"] == {"model": period, "truth": period}
    assert set(man["versions"]) == {"shearbatch", "jax", "jaxlib", "numpyro", "arviz"}
    assert all(man["versions"].values())
    assert man["device"]["count"] >= 1 and man["device"]["kind"]
    assert not list(done.glob(".campaign.json*"))  # no temporary left


@pytest.mark.parametrize(
    ("edit", "flags", "named"),
    [
        ({"gal.half_light_radius": 0.6}, (), "--config (config hash)"),
        ({}, ("--no-x64",), "--x64/--no-x64"),
        ({}, ("--method", "vi"), "--method"),
    ],
    ids=["config", "dtype", "method"],
)
def test_another_campaign_is_refused(done, module_tmp, edit, flags, named):
    other = write_config(module_tmp / f"other{len(edit)}.yaml", {**SMALL, **edit})
    before = snapshot(done)
    res = cli("bias-run", *campaign(other, done, *flags), check=2)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {named}"), res.stderr
    assert "Traceback" not in res.stderr and "campaign.json" in lines[0]
    assert snapshot(done) == before  # nothing written or touched


def test_resume_never_counts_another_campaigns_realization(module_tmp, cfg):
    root = module_tmp / "stale"
    cli("bias-run", *campaign(cfg, root, n=1))
    # e.g. a directory from before manifests (and the frozen config.yaml) existed
    (root / "campaign.json").unlink()
    (root / "config.yaml").unlink()
    other = write_config(module_tmp / "hlr.yaml", {**SMALL, "gal.half_light_radius": 0.6})
    res = cli("bias-run", *campaign(other, root, n=1))
    assert "wrote 2 ok" in res.stdout and "other campaign-defining settings" in res.stderr
    new_hash = json.loads((root / "campaign.json").read_text())["config_hash"]
    for d in root.glob("g1_*"):
        assert json.loads((d / "convergence.json").read_text())["config_hash"] == new_hash


def test_batch_size_may_differ_and_convergence_json_reproduces_alone(done, module_tmp):
    """A realization redone at another batch size is recorded with it; a realization's
    convergence.json alone (config, seed, batch size) reproduces its MAP. Run alone it is
    one lane, not the campaign's two: another compiled program, so the same answer to the
    optimizer's tolerance in posterior sd, not bit for bit (bit-identity holds at equal
    lane counts: test_batching, test_engine_map)."""
    rid = "g1_+0.0200_g2_+0.0000_s1"
    conv = json.loads((done / rid / "convergence.json").read_text())
    for key in ("config", "campaign", "versions", "device", "host", "config_hash", "method",
                "precision", "seed", "batch_size"):  # fmt: skip
        assert key in conv, key
    assert (conv["seed"], conv["batch_size"]) == (1, 2)
    alone = module_tmp / "alone.yaml"
    alone.write_text(yaml.safe_dump(conv["config"]))
    out = module_tmp / "repro"
    cli("bias-run", "--config", alone, "--g1-true", "0.02", "--seed", conv["seed"], "--run-id",
        rid, "--batch-size", conv["batch_size"], "--output-dir", out, "--no-progress")  # fmt: skip
    a, b = read_posterior(done / rid / "posterior.nc"), read_posterior(out / rid / "posterior.nc")
    assert max_diff_sd(b, a) <= OPTIMIZER_SD_TOL
    assert (
        json.loads((out / rid / "convergence.json").read_text())["config_hash"]
        == conv["config_hash"]
    )


def test_extract_counts_against_the_planned_size_and_warns_on_mixes(module_tmp, cfg):
    root = module_tmp / "half"
    # array task 0 of 2: half the plan exists, the other half was never started
    cli("bias-run", *campaign(cfg, root, "--array-task-id", 0, "--array-task-count", 2))
    res = cli("bias-extract", "--input-dir", root, "--output", module_tmp / "half.csv")
    assert "campaign: 2 of 4 planned realization(s) complete; UNFINISHED" in res.stdout
    assert "2 not started" in res.stdout
    import pandas as pd

    df = pd.read_csv(module_tmp / "half.csv")
    assert len(df) == 4 and (df["status"] == "incomplete").sum() == 2
    assert set(df.loc[df.status == "ok", "config_hash"]) == {
        json.loads((root / "campaign.json").read_text())["config_hash"]
    }
    # the second half in float32 (the manifest and the frozen config removed, as a careless
    # user would)
    (root / "campaign.json").unlink()
    (root / "config.yaml").unlink()
    cli("bias-run", *campaign(cfg, root, "--no-x64", "--array-task-id", 1,
                              "--array-task-count", 2))  # fmt: skip
    res = cli("bias-extract", "--input-dir", root, "--output", module_tmp / "mixed.csv")
    assert "mixed campaign settings: precision" in res.stderr and "config_hash" in res.stderr
    df = pd.read_csv(module_tmp / "mixed.csv")
    assert sorted(df["precision"]) == ["float32"] * 2 + ["float64"] * 2


def test_disjoint_slices_run_together(module_tmp, cfg):
    root = module_tmp / "slices"
    procs = [start("bias-run", *campaign(cfg, root, "--array-task-id", i, "--array-task-count",
                                         2, n=2)) for i in (0, 1)]  # fmt: skip
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
        assert "wrote 2 ok" in out and "overlapping" not in err
    assert len(list(root.glob("g1_*/convergence.json"))) == 4


def test_two_identical_runs_and_extract_during_them(module_tmp, cfg):
    """Two identical commands at once: each realization computed by exactly one of them (the
    second skips what the first claimed, with a warning naming the overlap); bias-extract
    run meanwhile reports the in-flight realizations as incomplete and never crashes."""
    root = module_tmp / "twice"
    args = campaign(cfg, root, n=4)
    first, second, seen = start("bias-run", *args), None, []
    while first.poll() is None and len(seen) < 60:
        if (root / "campaign.json").is_file():
            second = second or start("bias-run", *args)
            # in this process (click's runner): a new interpreter's start-up outlasts the
            # whole run now that a later process loads its programs instead of tracing them
            res = CliRunner().invoke(bias_extract, ["--input-dir", str(root), "--output",
                                                    str(module_tmp / "live.csv"), "--workers", "1"])  # fmt: skip
            assert res.exception is None and "corrupt 0" in res.output, res.output
            seen.append(next(x for x in res.output.splitlines() if x.startswith("campaign:")))
            assert "of 8 planned" in seen[-1]
        time.sleep(0.2)
    outs = [p.communicate(timeout=300) for p in (first, second)]
    assert first.returncode == second.returncode == 0, outs
    assert any("UNFINISHED" in s for s in seen), seen  # looked at least once while in flight
    wrote = [int(o.split("wrote ")[1].split(" ok")[0]) for o, _ in outs]
    assert sum(wrote) == 8, outs  # each of the 8 realizations written by exactly one run
    if wrote[1] < 8:  # it skipped what the first held, or what the first had completed
        err = outs[1][1]
        assert ("overlapping slices" in err and "skipped here" in err) or (
            "completed by another process" in err or f"already complete: {8 - wrote[1]}" in err
        ), err
    res = cli("bias-extract", "--input-dir", root, "--output", module_tmp / "twice.csv")
    assert "campaign: 8 of 8 planned realization(s) complete" in res.stdout
    assert not list(root.rglob("*.tmp"))
