"""read_summary on a summary.csv large enough that pandas' C parser reads it in chunks
(``low_memory``), with long runs of incomplete rows whose text cells are all empty, as a
campaign stopped by ``--time-limit`` leaves it (bias-extract appends one ``incomplete`` row
per planned realization not started: run_id, status, reason, path and in_plan only).

As categories, a chunk of all-empty cells got categories of another type, and pandas
3.0.x failed to join the chunks (``TypeError: dtype of categories must be the same``,
from ``union_categoricals``); pandas 2 made those cells the text "nan". The table must be
the one read without chunks, on every pandas of pyproject.toml, and bias-stats must judge
the complete realizations and say how many are not.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from shearbatch.analysis import bias, summary_table
from shearbatch.analysis.summary_table import (
    FLAG_COLUMNS,
    SUMMARY_COLUMNS,
    TEXT_COLUMNS,
    read_summary,
)
from shearbatch.cli import bias_stats

GRID = (-0.05, -0.02, 0.02, 0.05)
SD = 2e-5  # the Laplace width of a Level 0 estimate
N_OK_SEEDS = 1024  # 4,096 realizations done, as in the report of the crash
N_NOT_STARTED = 27_904
NOT_STARTED = "not started (planned in campaign.json)"


def parser_chunk_rows(n_columns: int) -> int:
    """The rows pandas' C parser reads per chunk with ``low_memory`` (pandas/_libs/parsers.pyx:
    the largest power of two below 2**20 // columns; 8,192 for summary.csv)."""
    rows = 1
    while rows * 2 < 2**20 // n_columns:
        rows *= 2
    return rows


def done_row(seed: int, g1: float, rng: np.random.Generator) -> dict:
    """A realization that ran (bias-extract's columns for a Level 0 MAP fit)."""
    rid = f"g1_{g1:+.4f}_g2_+0.0000_s{seed}"
    est = np.array([g1, 0.0]) + rng.normal(0.0, SD, 2)
    row = {"run_id": rid, "g1_true": g1, "g2_true": 0.0, "seed": seed, "status": "ok",
           "method": "map", "passed_convergence": True, "point_estimate": "mode",
           "precision": "float64", "config_hash": "3f9a0c2e", "code_commit": "1b98279",
           "code_dirty": False, "code_fingerprint": "9d1e", "shear_model": "joint",
           "truth_from_prior": False, "in_plan": True, "batch_size": 8, "runtime_s": 0.4,
           "snr": 1.2e5, "flags": "", "reason": "", "path": f"task{seed % 4}/{rid}"}  # fmt: skip
    for k, c in enumerate(("g1", "g2")):
        row.update({f"{c}_mean": est[k], f"{c}_median": est[k], f"{c}_mode": est[k],
                    f"{c}_std": SD, f"{c}_q16": est[k] - SD, f"{c}_q84": est[k] + SD,
                    f"{c}_q025": est[k] - 1.96 * SD, f"{c}_q975": est[k] + 1.96 * SD})  # fmt: skip
    return row


def not_started_row(i: int) -> dict:
    """A planned realization without a directory (analysis/progress.py's row)."""
    seed = N_OK_SEEDS + i // len(GRID)
    rid = f"g1_{GRID[i % len(GRID)]:+.4f}_g2_+0.0000_s{seed}"
    return {"run_id": rid, "status": "incomplete", "reason": NOT_STARTED,
            "path": f"task{seed % 4}/{rid}", "in_plan": True}  # fmt: skip


def stopped_campaign() -> list[dict]:
    """A time-limited campaign: the done realizations (one failed, one interrupted: its
    convergence.json missing), then the planned ones not started."""
    rng = np.random.default_rng(7)
    rows = [done_row(s, g, rng) for s in range(N_OK_SEEDS) for g in GRID]
    rows[5].update(status="failed", reason="injected: non-finite posterior draws of g1",
                   flags="OPT_NOT_CONVERGED", passed_convergence=None)  # fmt: skip
    rows[5].update((k, None) for k in rows[5] if k[:3] in ("g1_", "g2_") and "true" not in k)
    interrupted = {k: rows[9][k] for k in ("run_id", "g1_true", "g2_true", "seed", "path",
                                           "in_plan")}  # fmt: skip
    rows[9] = {**interrupted, "status": "incomplete",
               "reason": "convergence.json missing (interrupted)"}  # fmt: skip
    return rows + [not_started_row(i) for i in range(N_NOT_STARTED)]


def layout(rows: list[dict], how: str) -> list[dict]:
    """The rows in a file order: as bias-extract writes them (``done first``), the runs of
    not-started rows first, or in blocks (done, not started, done, not started)."""
    done = [r for r in rows if r["reason"] != NOT_STARTED]
    todo = [r for r in rows if r["reason"] == NOT_STARTED]
    if how == "done first":
        return done + todo
    if how == "not started first":
        return todo + done
    h, t = len(done) // 2, len(todo) // 2
    return done[:h] + todo[:t] + done[h:] + todo[t:]


@pytest.fixture(scope="module")
def summaries(tmp_path_factory):
    """``{layout: summary.csv}``, each several MB with runs of all-empty text cells longer
    than two of the parser's chunks."""
    rows = stopped_campaign()
    root = tmp_path_factory.mktemp("chunks")
    chunk = parser_chunk_rows(len(SUMMARY_COLUMNS))
    out = {}
    for how in ("done first", "not started first", "in blocks"):
        ordered = layout(rows, how)
        todo = np.array([r["reason"] == NOT_STARTED for r in ordered])
        # some chunk of the parser (the last may be shorter) holds not-started rows alone
        assert any(todo[k : k + chunk].all() for k in range(0, len(todo), chunk))
        out[how] = summary_table.write_summary(ordered, root / f"{how.replace(' ', '_')}.csv")
        assert out[how].stat().st_size > 4 * 2**20
    return out


def reference(path) -> pd.DataFrame:
    """The table read in one piece (``low_memory=False``: no chunks), every text and flag
    cell as the text in the file, then typed as read_summary's docstring says."""
    raw = pd.read_csv(path, dtype=str, keep_default_na=False, low_memory=False)
    text = {*TEXT_COLUMNS, *FLAG_COLUMNS}
    ref = pd.read_csv(path, low_memory=False, usecols=[c for c in raw if c not in text])
    out = {}
    for col in raw.columns:
        cell = raw[col]
        if col in FLAG_COLUMNS:
            words = {"True": True, "False": False, "": None}
            out[col] = pd.array(cell.map(words).to_numpy(object), dtype="boolean")
        elif col in TEXT_COLUMNS:
            if (cell == "").all() and col not in ("run_id", "pair_id", "status"):
                out[col] = pd.Series(np.nan, index=cell.index)
            else:
                out[col] = cell.where(cell != "")
        else:
            out[col] = ref[col]
    return pd.DataFrame(out)


@pytest.mark.parametrize("how", ["done first", "not started first", "in blocks"])
def test_a_chunked_summary_reads_as_the_whole_file(summaries, how):
    got = read_summary(summaries[how])
    pd.testing.assert_frame_equal(got, reference(summaries[how]), check_exact=True)
    assert got["status"].value_counts().to_dict() == {
        "incomplete": N_NOT_STARTED + 1, "ok": 4 * N_OK_SEEDS - 2, "failed": 1}  # fmt: skip
    todo = got["reason"] == NOT_STARTED
    assert got.loc[todo, ["method", "config_hash", "point_estimate"]].isna().all().all()
    assert (got.loc[got["status"] != "incomplete", "method"] == "map").all()
    assert got.loc[todo, "passed_convergence"].isna().all() and got["in_plan"].all()
    assert got.loc[got["status"] == "ok", "passed_convergence"].all()
    assert not got["pair_id"].notna().any()  # no pairs: empty, never the text "nan"
    for col in ("method", "config_hash", "flags", "reason"):
        assert not got[col].isin(["nan", "None", "<NA>"]).any()


def test_bias_stats_judges_the_complete_ones_and_counts_the_rest(summaries, tmp_path,
                                                                  monkeypatch):  # fmt: skip
    """The real command on the stopped campaign: INCONCLUSIVE (unfinished, exit 3), the
    verdict of the complete realizations (the one a table of those alone gets), and a
    line with the count of the incomplete ones; the same when the table is read in parts
    by seed (analysis/parts.py) and its point estimates scanned (app/stats_stage.py)."""
    path = summaries["done first"]
    table = read_summary(path)
    alone = bias.measure_bias(table[table["status"] != "incomplete"], requirement="level0")
    res = bias.measure_bias(table, requirement="level0")
    assert res.result.n_incomplete == N_NOT_STARTED + 1 and res.result.scope.unfinished
    assert res.result.verdict == "INCONCLUSIVE"
    assert res.result.verdict_of_complete == alone.result.verdict
    assert res.result.m1 == alone.result.m1 and res.result.n_used == alone.result.n_used

    n_planned, n_complete = len(table), 4 * N_OK_SEEDS - 1
    outs = []
    for name, part_bytes in (("whole", None), ("parts", str(2**20))):
        if part_bytes is not None:
            monkeypatch.setenv("SHEARBATCH_STATS_PART_BYTES", part_bytes)
        out = tmp_path / name
        run = CliRunner().invoke(bias_stats, ["--input", str(path), "--output-dir", str(out),
                                              "--no-plots"])  # fmt: skip
        assert run.exit_code == 3, run.output
        assert (f"unfinished: {N_NOT_STARTED + 1} incomplete of {n_planned} planned "
                f"realization(s)") in run.output  # fmt: skip
        assert (f"verdict: INCONCLUSIVE (exit 3) unfinished: {n_complete} of {n_planned} "
                f"planned realizations complete (on the complete ones: "
                f"{alone.result.verdict})") in run.output  # fmt: skip
        outs.append((out / "bias_results.json").read_text())
    assert outs[0] == outs[1]
    assert json.loads(outs[0])["n_incomplete"] == N_NOT_STARTED + 1
