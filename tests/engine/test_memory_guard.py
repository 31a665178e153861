"""Batches that always fit: the memory guard of ``bias-run`` (engine.plan_lanes).

Through the real CLI on a small Level 0 campaign (16x16 stamps): a batch that does not fit
the memory budget runs in lane chunks that do, with every realization's posterior equal
to the unsplit run's (the fixed-lanes guarantee: within the optimiser's tolerance in
posterior standard deviations); a budget that not even the smallest batch fits is refused
with one line naming the flag, exit 2, nothing written; ``--batch-size auto`` says what it
picked and why. The interim model's draw-chunked importance weights equal the all-draws
ones.
"""

import logging
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from shearbatch.cli import bias_run
from shearbatch.core import memory as mem
from shearbatch.io import read_posterior
from tests.conftest import OPTIMIZER_SD_TOL, write_config

GRID = ["-0.05", "-0.02", "0.02", "0.05"]


def test_parse_bytes():
    assert mem.parse_bytes("2GiB") == 2 * 2**30
    assert mem.parse_bytes("500MB") == 500_000_000
    assert mem.parse_bytes("1e9") == 10**9
    assert mem.parse_bytes(4096) == 4096
    for bad in ("lots", "-1GiB", "0", "2 parsecs"):
        with pytest.raises(ValueError):
            mem.parse_bytes(bad)


def test_budget_sources(monkeypatch):
    monkeypatch.delenv("SHEARBATCH_MEMORY_BUDGET", raising=False)
    assert mem.memory_budget("3MiB") == mem.Budget(3 * 2**20, "set by --memory-budget")
    cpu = mem.memory_budget()
    assert 0 < cpu.bytes and "RAM" in cpu.source  # tests run on the CPU
    monkeypatch.setenv("SHEARBATCH_MEMORY_BUDGET", "1GiB")
    assert mem.memory_budget().bytes == 2**30


def test_lanes_that_fit():
    m = mem.ProgramMemory(lanes=8, argument=100, output=100, temp=600)  # 100 B per lane
    assert mem.lanes_that_fit(m, mem.Budget(450, ""), 1) == 4
    assert mem.lanes_that_fit(m, mem.Budget(450, ""), 4) == 4
    assert mem.lanes_that_fit(m, mem.Budget(350, ""), 4) == 0
    # a fixed part of 200 and 75 per lane: the line through two measurements
    a, b = mem.ProgramMemory(8, 0, 0, 800), mem.ProgramMemory(4, 0, 0, 500)
    assert mem.lanes_that_fit_line(a, b, mem.Budget(700, ""), 1) == 6


def _run(tmp: Path, name: str, *extra: str, caplog=None):
    cfg = write_config(tmp / "small.yaml", {"image.size_x": 16, "image.size_y": 16})
    out = tmp / name
    args = ["--config", cfg, "--shear-grid", *GRID, "--n-realizations", "2", "--x64",
            "--no-progress", "--output-dir", str(out), *extra]  # fmt: skip
    return CliRunner().invoke(bias_run, args), out


def _program_total(tmp: Path, lanes: int) -> int:
    """XLA's memory analysis of the campaign's program at ``lanes`` lanes (what the
    engine measures before its first batch)."""
    from shearbatch.engine.loop import build_program, compile_lanes, lane_chunk_for
    from shearbatch.schema import load_config
    from shearbatch.spec import run_spec

    spec = run_spec(load_config(write_config(tmp / "m.yaml", {"image.size_x": 16,
                                                               "image.size_y": 16})))  # fmt: skip
    program = build_program(spec, chunk=lane_chunk_for("auto", spec)).program
    return compile_lanes(program, spec, lanes)[1].total


@pytest.fixture(scope="module")
def unsplit(module_tmp):
    res, out = _run(module_tmp, "whole", "--batch-size", "8")
    assert res.exit_code == 0, res.output
    return out


def test_batch_that_does_not_fit_runs_in_lane_chunks(unsplit, module_tmp, caplog):
    # a budget between the 4-lane and the 8-lane programs (lanes run in chunks of 4)
    budget = (_program_total(module_tmp, 4) + _program_total(module_tmp, 8)) // 2
    with caplog.at_level(logging.INFO, logger="shearbatch"):
        res, out = _run(module_tmp, "split", "--batch-size", "8", "--memory-budget", str(budget))
    assert res.exit_code == 0, res.output
    line = next(r.getMessage() for r in caplog.records if "does not fit" in r.getMessage())
    assert "--batch-size 8" in line and "lane chunks of 4" in line, line
    runs = sorted(p.name for p in unsplit.iterdir() if p.name.startswith("g1_"))
    assert len(runs) == 8 and runs == sorted(
        p.name for p in out.iterdir() if p.name.startswith("g1_")
    )
    for run in runs:
        a, b = (
            read_posterior(unsplit / run / "posterior.nc"),
            read_posterior(out / run / "posterior.nc"),
        )
        for site in ("g1", "g2"):
            sd = np.std(a[site])
            assert abs(np.mean(a[site]) - np.mean(b[site])) <= OPTIMIZER_SD_TOL * sd, (run, site)
            assert np.std(b[site]) == pytest.approx(sd, rel=OPTIMIZER_SD_TOL)


def test_batch_of_which_nothing_fits_is_refused(module_tmp):
    res, out = _run(module_tmp, "refused", "--batch-size", "8", "--memory-budget", "1KiB")
    assert res.exit_code == 2, res.output
    err = [ln for ln in res.output.splitlines() if ln.startswith("Error")]
    assert len(err) == 1 and "--batch-size 8" in err[0] and "--memory-budget" in err[0], res.output
    assert "Traceback" not in res.output and "RESOURCE_EXHAUSTED" not in res.output
    assert not [p for p in out.iterdir() if p.name.startswith("g1_")]  # nothing written


def test_batch_size_auto_says_what_and_why(module_tmp, caplog):
    with caplog.at_level(logging.INFO, logger="shearbatch"):
        res, out = _run(module_tmp, "auto", "--batch-size", "auto")
    assert res.exit_code == 0, res.output
    line = next(
        r.getMessage() for r in caplog.records if r.getMessage().startswith("batch size auto")
    )
    # 8 realizations to run, far below what the machine's RAM holds
    assert line.startswith("batch size auto: 8 lanes (bound: the realizations to run") and (
        "per lane by XLA's memory analysis" in line
    ), line
    assert len([p for p in out.iterdir() if p.name.startswith("g1_")]) == 8


def test_bad_batch_size_and_budget_are_one_line(module_tmp):
    res, _ = _run(module_tmp, "bad", "--batch-size", "lots")
    assert res.exit_code == 2 and "--batch-size" in res.output
    res, _ = _run(module_tmp, "bad2", "--memory-budget", "lots")
    assert res.exit_code == 2
    assert [ln for ln in res.output.splitlines() if ln.startswith("Error")] == [
        "Error: --memory-budget: not a memory size: 'lots' (e.g. 2GiB, 500MB, 1e9)"
    ]


def test_interim_weights_in_draw_chunks_equal_all_draws(monkeypatch):
    """The interim model's per-galaxy importance weights, rendered DRAW_CHUNK draws at a
    time, are the all-draws ones (to rounding)."""
    import jax

    from shearbatch.campaign import plan_campaign
    from shearbatch.core.methods import map as map_method
    from shearbatch.core.methods.interim import LOG_RATIO
    from shearbatch.core.posterior import build_posterior
    from shearbatch.engine.loop import batch_inputs
    from shearbatch.schema import load_config
    from shearbatch.spec import run_spec

    cfg = write_config(Path(pytest.importorskip("tempfile").mkdtemp()) / "l2.yaml",
                       {"image.n_objects": 3, "inference.map_config.num_samples": 120},
                       base=Path("configs/level2.yaml"))  # fmt: skip
    spec = run_spec(load_config(cfg))
    post = build_posterior(spec.model)
    settings = spec.inference.settings
    sim, keys = batch_inputs(spec, plan_campaign([0.02], n_realizations=1)[:1])
    fit = jax.jit(lambda k, o: map_method.interim_fit(k, o, post, settings))
    monkeypatch.setattr(map_method, "DRAW_CHUNK", 7)  # uneven: 120 = 17 x 7 + 1
    chunked = fit(keys[0], sim.images[0]).stats[LOG_RATIO]
    monkeypatch.setattr(map_method, "DRAW_CHUNK", 10_000)
    whole = jax.jit(lambda k, o: map_method.interim_fit(k, o, post, settings))(
        keys[0], sim.images[0]
    ).stats[LOG_RATIO]
    np.testing.assert_allclose(np.asarray(chunked), np.asarray(whole), rtol=1e-9, atol=1e-9)


def test_the_lanes_are_decided_once_for_the_compile_and_the_engine(unsplit, module_tmp, caplog,
                                                                   monkeypatch):  # fmt: skip
    """An array task compiles the campaign's program first (app.runner.compile_first) at
    the width the memory budget allows, and the engine runs what it prepared: one lane
    decision in the process (engine.prepare calls plan_lanes once), lane chunks of 4 under
    a budget between the 4- and 8-lane programs, the posteriors the unsplit run's."""
    import shearbatch.engine.loop as loop
    from tests.conftest import count_calls

    budget = (_program_total(module_tmp, 4) + _program_total(module_tmp, 8)) // 2
    calls = count_calls(monkeypatch, loop, "plan_lanes")
    with caplog.at_level(logging.INFO, logger="shearbatch"):
        res, out = _run(module_tmp, "task0", "--batch-size", "8", "--memory-budget", str(budget),
                        "--array-task-count", "1", "--array-task-id", "0",
                        "--cache-dir", str(module_tmp / "cache0"))  # fmt: skip
    # one task of one: no shared compile step (the engine decides); of two: compile_first
    assert res.exit_code == 0, res.output
    assert len(calls) == 1, calls
    calls.clear()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="shearbatch"):
        res, out = _run(module_tmp, "task0of2", "--batch-size", "8", "--memory-budget",
                        str(budget), "--array-task-count", "2", "--array-task-id", "0",
                        "--cache-dir", str(module_tmp / "cache"))  # fmt: skip
    assert res.exit_code == 0, res.output
    assert len(calls) == 1, calls  # compile_first's prepare, only
    msgs = [r.getMessage() for r in caplog.records]
    assert any("miss(es) for the campaign's 8-lane programs" in m for m in msgs), msgs
    line = next(m for m in msgs if "does not fit" in m)
    assert "lane chunks of 4" in line, line
    runs = sorted(p.name for p in out.iterdir() if p.name.startswith("g1_"))
    assert len(runs) == 4  # task 0's half of the plan
    for run in runs:
        a = read_posterior(unsplit / run / "posterior.nc")
        b = read_posterior(out / run / "posterior.nc")
        for site in ("g1", "g2"):
            sd = np.std(a[site])
            assert abs(np.mean(a[site]) - np.mean(b[site])) <= OPTIMIZER_SD_TOL * sd, (run, site)
