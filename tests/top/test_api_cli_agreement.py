"""The Python API and the commands agree row for row on one campaign (issue 35): with a
corrupt, a planned-but-missing and an unplanned realization, Campaign.summary() is the
table bias-extract writes (in_plan column and the missing row included) and
Campaign.stats() writes the bias_results.json bias-stats writes, byte for byte (issue 46:
it calls shearbatch.app.run_stats with the command's option names; the old names sbc_mode
and acceptance still work, with a DeprecationWarning). Through the real click commands on
one tiny Level 0 campaign (16x16 stamps, MAP), run once for the module."""

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

import shearbatch
from shearbatch.analysis.summary_table import FLAG_COLUMNS, read_summary
from shearbatch.cli import bias_extract, bias_run, bias_stats
from shearbatch.io import to_strict_json

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["--set", "image.size_x=16", "--set", "image.size_y=16"]
CORRUPT, MISSING = "g1_+0.0200_g2_-0.0100_s1", "g1_+0.0100_g2_+0.0100_s2"
STRANGER = "g1_+0.0200_g2_+0.0100_s7"  # left by another grid: not in the plan


def invoke(cmd, args):
    return CliRunner().invoke(cmd, [str(a) for a in args])


@pytest.fixture(scope="module")
def campaign(module_tmp):
    """2 x 2 shear grid x 3 seeds (12), then damaged: one posterior.nc truncated, one
    directory removed, one directory of another plan copied in."""
    root = module_tmp / "camp"
    res = invoke(bias_run, ["--config", ROOT / "configs" / "level0.yaml", *SMALL,
                            "--shear-grid", "0.01", "0.02", "--shear-grid-g2", "-0.01", "0.01",
                            "--n-realizations", 3, "--batch-size", 12, "--output-dir", root,
                            "--no-progress"])  # fmt: skip
    assert res.exit_code == 0, res.output
    post = root / CORRUPT / "posterior.nc"
    post.write_bytes(post.read_bytes()[:3000])
    shutil.rmtree(root / MISSING)
    shutil.copytree(root / "g1_+0.0200_g2_+0.0100_s0", root / STRANGER)
    return root


@pytest.fixture(scope="module")
def by_cli(campaign, module_tmp):
    """bias-extract's summary.csv, and bias-stats' bias_results.json with and without the
    unplanned realization."""
    res = invoke(bias_extract, ["--input-dir", campaign, "--no-progress"])
    assert res.exit_code == 0, res.output
    assert "not in the plan" in res.output  # the warning
    table = read_summary(campaign / "summary.csv")  # as bias-stats reads it back
    out = {}
    for name, extra in (("planned", []), ("all", ["--include-unplanned"])):
        stats_dir = module_tmp / name
        res = invoke(bias_stats, ["--input", campaign, "--output-dir", stats_dir, "--no-plots",
                                  "--report", stats_dir / "report.html", *extra])  # fmt: skip
        assert res.exit_code == 3, res.output  # unfinished: INCONCLUSIVE
        done = "11 of 13" if extra else "10 of 12"  # the stranger is complete
        assert f"unfinished: {done} planned realizations complete" in res.output
        out[name] = json.loads((stats_dir / "bias_results.json").read_text())
    return table, out


def test_summary_agrees_row_for_row(campaign, by_cli):
    table, _ = by_cli
    api = shearbatch.open_campaign(campaign).summary()
    assert api.index.name == "run_id" and "in_plan" in api.columns
    pd.testing.assert_frame_equal(api.reset_index(), table)
    # the True / False columns are booleans (missing: <NA>), never text or mixed objects
    for col in FLAG_COLUMNS:
        assert str(api[col].dtype) == "boolean", (col, api[col].dtype)
    assert api["in_plan"].tolist().count(False) == 1  # the stranger
    status = api["status"]
    assert status[CORRUPT] == "corrupt" and status[MISSING] == "incomplete"
    assert api.loc[MISSING, "reason"].startswith("not started")
    assert not api.loc[STRANGER, "in_plan"] and api["in_plan"].sum() == 12
    assert len(api) == 13 and (status == "ok").sum() == 11


def test_statuses_count_the_missing_work(campaign):
    counts = shearbatch.open_campaign(campaign).statuses().value_counts().to_dict()
    assert counts == {"ok": 11, "corrupt": 1, "incomplete": 1}  # the stranger is ok


@pytest.fixture(scope="module")
def by_api(campaign, by_cli, module_tmp):
    """Campaign.stats() with the command's option names, into directories of its own."""
    out = {}
    for name, kw in (("planned", {}), ("all", {"include_unplanned": True})):
        stats_dir = module_tmp / f"api_{name}"
        res = shearbatch.open_campaign(campaign).stats(output_dir=stats_dir, **kw)
        out[name] = (res, stats_dir / "bias_results.json")
    return out


@pytest.mark.parametrize("name", ["planned", "all"])
def test_stats_write_the_same_bytes(campaign, by_cli, by_api, module_tmp, name):
    _, cli = by_cli
    res, path = by_api[name]
    assert path.read_bytes() == (module_tmp / name / "bias_results.json").read_bytes()
    api = json.loads(json.dumps(to_strict_json(res.to_json())))
    assert api == cli[name]  # the result returned is the one written
    assert api["requirement"]["chosen"] == f"campaign.requirement in {campaign / 'config.yaml'}"
    assert res.n_used == (11 if name == "all" else 10) and res.scope.unfinished
    assert res.scope.unplanned_dropped == (0 if name == "all" else 1)
    assert not (path.parent / "report.html").exists() and not (path.parent / "plots").exists()


def test_stats_options_are_the_commands(campaign, by_api, module_tmp):
    camp = shearbatch.open_campaign(campaign)
    base = by_api["planned"][0]
    with pytest.raises(ValueError, match="unknown option"):
        camp.stats(sbc_mod="on", output_dir=module_tmp / "x")
    with pytest.raises(ValueError, match="--estimator: unknown 'pared'"):
        camp.stats(estimator="pared", output_dir=module_tmp / "x")
    with pytest.raises(ValueError, match="--level: an alias of --requirement"):
        camp.stats(requirement="level0", level="level_0", output_dir=module_tmp / "x")
    res = camp.stats(sbc=False, acceptance_config={"max_abs_m": 0.5},
                     output_dir=module_tmp / "new")  # fmt: skip
    assert res.acceptance.max_abs_m == 0.5 and res.sbc.skipped is not None
    assert res.m1 == base.m1 and res.criterion("|m1|").threshold == 0.5
    with pytest.warns(DeprecationWarning) as seen:
        old = camp.stats(sbc_mode="off", acceptance={"max_abs_m": 0.5},
                         output_dir=module_tmp / "old")  # fmt: skip
    assert sorted(str(w.message).split(" is ")[0] for w in seen) == [
        "Campaign.stats(acceptance=...)", "Campaign.stats(sbc_mode=...)"]  # fmt: skip
    assert (module_tmp / "old" / "bias_results.json").read_bytes() == (
        module_tmp / "new" / "bias_results.json").read_bytes()  # fmt: skip
    assert old.to_json() == res.to_json()
    with pytest.raises(ValueError, match="not both"):
        camp.stats(sbc_mode="off", sbc=False, output_dir=module_tmp / "x")
    assert not (module_tmp / "x").exists()


# --------------------------------------------------------------------------- stand alone

#: run in a fresh interpreter: stages 2 and 3 as their console scripts run them (``from
#: shearbatch.cli import bias_stats``), ``python -m shearbatch``, and the API's summary()
#: and stats(); then prints, as JSON, the modules of JAX and of the engine it loaded
_STAGES_2_AND_3 = """
import json, sys
from pathlib import Path

root, work = Path(sys.argv[1]), Path(sys.argv[2])

def call(command, *args):
    try:
        command.main(args=[str(a) for a in args], prog_name=command.name)
    except SystemExit as end:
        assert end.code in (0, 3, None), (args, end.code)  # 3: INCONCLUSIVE (unfinished)

from shearbatch.cli import bias_extract, bias_stats
from shearbatch.__main__ import main

call(bias_stats, "--help")
call(bias_extract, "--help")
try:
    main(["stats", "--help"])
except SystemExit:
    pass
call(bias_extract, "--input-dir", root, "--output", work / "summary.csv", "--workers", 1,
     "--no-progress")
# the figures, the worst realizations' diagnostics read from posterior.nc; no report
call(bias_stats, "--input", work / "summary.csv", "--output-dir", work / "plots",
     "--posterior-dir", root)
# a campaign directory: its summary reused or extracted, the figures and the report with
# its stamps (rendered by a child process: python -m shearbatch.app.stamps)
call(bias_stats, "--input", root, "--output-dir", work / "campaign")

import shearbatch

camp = shearbatch.open_campaign(root)
assert len(camp.summary()) == 13
camp.stats(output_dir=work / "api")
for d in ("plots", "campaign", "api"):
    assert (work / d / "bias_results.json").is_file(), d
assert (work / "plots" / "plots" / "worst_diagnostics.png").is_file()
assert (work / "campaign" / "report.html").is_file()
assert (work / "campaign" / "plots" / "stamps.png").stat().st_size > 5_000
print(json.dumps(sorted({m.split(".")[0] if m.split(".")[0] != "shearbatch" else m
                         for m in sys.modules
                         if m.split(".")[0] in ("jax", "jaxlib", "numpyro", "optax")
                         or m.startswith("shearbatch.engine")})))
"""


def test_stages_2_and_3_load_neither_jax_nor_the_engine(campaign, tmp_path):
    """bias-extract, bias-stats (--help; a run with the figures and the worst
    realizations' diagnostics; a campaign directory's run with its report) and the API's
    summary() and stats() in a fresh interpreter load no module of JAX, NumPyro or Optax,
    and none under shearbatch/engine/ (issue 57: the import of shearbatch.cli.stats
    loaded engine/loop.py and JAX, 4 s). The report's stamps, which render the model with
    JAX, are drawn by a child process (shearbatch.app.stamps): the report has them, and
    the stats process still loaded no JAX."""
    import subprocess
    import sys

    root = tmp_path / "camp"
    shutil.copytree(campaign, root, ignore=shutil.ignore_patterns(".jax-cache"))
    work = tmp_path / "work"
    work.mkdir()
    out = subprocess.run([sys.executable, "-c", _STAGES_2_AND_3, str(root), str(work)],
                         capture_output=True, text=True, cwd=tmp_path, timeout=300,
                         check=False)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Usage: bias-stats" in out.stdout and "Usage: bias-extract" in out.stdout
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert loaded == [], f"stages 2 and 3 loaded {loaded}"
