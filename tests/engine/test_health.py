"""A campaign stops rather than write a batch a healthy program never gives (issue 54).

On one H200 at 4,096 lanes an unscaled inverse FFT put every galaxy's importance weights
on one draw and bias-run wrote them all (m ~ -0.1 to -0.17). Now:

- :func:`check_batch` refuses a batch in which most galaxies' weights collapsed, and
  passes one with a few collapsed galaxies;
- its threshold stands on a measurement: ``results/benchmarks/health.json``
  (``bench/bench_health.py``), healthy campaigns at every S/N the shipped configs run the
  interim model at, whose worst batch is far below it;
- a deliberately broken program (every galaxy's log target scaled by 1,000: the weights
  collapse as they did on the GPU) stops ``bias-run`` (the real CLI, in process) with one
  line and exit 5; the realizations written before are untouched, the broken batch is
  absent, and the same command with a healthy program resumes and completes the campaign.
"""

import json
import re
import types
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from shearbatch.cli import bias_run
from shearbatch.core.methods import map as map_
from shearbatch.engine import health

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "configs").is_dir())
RECORD = ROOT / "results" / "benchmarks" / "health.json"


def _draws(ess, k=200):
    info = types.SimpleNamespace(is_ess=np.asarray(ess, float))
    return types.SimpleNamespace(info=info, samples={"e1": np.zeros((len(ess), 1, k, 1))})


def test_check_batch_refuses_most_collapsed_and_passes_a_few():
    lanes, m = 16, 32
    ok = np.full((lanes, m), 120.0)
    ok[:, :3] = 1.0  # 3 of 32 galaxies collapsed in every realization: written
    assert health.check_batch(_draws(ok), lanes, 0, 4, lanes) is None
    bad = np.full((lanes, m), 1.0)
    why = health.check_batch(_draws(bad), lanes, 2, 4, 4096)
    assert why is not None and "\n" not in why
    assert why.startswith("batch 3 of 4: the importance weights of 512 of 512 galaxies (100%)")
    assert "4096 lanes" in why
    # padding lanes (past the batch's realizations) are not counted
    pad = np.vstack([np.full((4, m), 120.0), np.full((12, m), 1.0)])
    assert health.check_batch(_draws(pad), 4, 0, 1, lanes) is None
    # a failed fit's NaN ESS is its own failure, not the batch's
    nan = np.full((lanes, m), np.nan)
    assert health.check_batch(_draws(nan), lanes, 0, 1, lanes) is None
    # a method without importance weights has nothing to check
    assert health.check_batch(types.SimpleNamespace(info=None, samples={}), 8, 0, 1, 8) is None


def test_threshold_is_far_above_the_measured_healthy_rate():
    """Every shipped S/N of the interim model measured (Level 2 at its S/N 45 and at 15,
    the survey configs at 15, 30 and 100), with the thresholds the code has now, and the
    worst healthy batch at most a tenth of the threshold."""
    rec = json.loads(RECORD.read_text())
    assert rec["threshold"] == {"collapsed_ess_draws": health.COLLAPSED_ESS_DRAWS,
                                "collapsed_batch_max": health.COLLAPSED_BATCH_MAX}  # fmt: skip
    want = {"level2_snr45", "level2_snr15", "survey_snr15", "survey_snr30", "survey_snr100"}
    assert set(rec["campaigns"]) == want
    for name, c in rec["campaigns"].items():
        assert c["galaxies"] >= 1000 and c["batches"] >= 3, name
        assert c["worst_batch_collapsed_fraction"] <= health.COLLAPSED_BATCH_MAX / 10, name
    assert rec["worst_batch_collapsed_fraction"] == max(
        c["worst_batch_collapsed_fraction"] for c in rec["campaigns"].values()
    )


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes()
            for p in sorted(root.glob("*/*")) if p.is_file()}  # fmt: skip


def test_a_broken_program_stops_the_campaign_with_nothing_lost(tmp_path, monkeypatch):
    out = tmp_path / "camp"
    args = ["--config", ROOT / "configs" / "survey_snr30.yaml", "--set",
            "inference.shear_model=interim", "--batch-size", 8, "--base-seed", 300,
            "--output-dir", out, "--no-progress"]  # fmt: skip
    run = lambda n: CliRunner().invoke(bias_run, [str(a) for a in [*args, "--n-realizations", n]])  # noqa: E731
    first = run(2)
    assert first.exit_code == 0, first.output
    before = _files(out)
    assert len({k.split("/")[0] for k in before}) == 4  # 2 seeds x (+g, -g)

    real = map_.galaxy_log_target
    monkeypatch.setattr(map_, "galaxy_log_target", lambda *a: 1e3 * real(*a))
    monkeypatch.setenv("SHEARBATCH_EXPORT", "off")  # trace this process's (broken) program
    broken = run(6)  # grown: 8 new realizations, one batch
    assert broken.exit_code == 5, broken.output
    errors = [ln for ln in broken.output.splitlines() if ln.startswith("Error:")]
    assert len(errors) == 1, broken.output
    seen = re.search(r"batch 1 of 1: the importance weights of (\d) of 8 galaxies \(\d+%\) "
                     r"collapsed onto one draw", errors[0])  # fmt: skip
    assert seen and int(seen.group(1)) > 4, errors[0]
    assert "re-run with a smaller --batch-size to resume" in errors[0]
    after = _files(out)
    assert {k: v for k, v in after.items() if k in before} == before  # nothing lost
    new = {k.split("/")[0] for k in after} - {k.split("/")[0] for k in before}
    assert not any((out / d / "convergence.json").exists() for d in new)  # not written

    monkeypatch.undo()
    resumed = run(6)
    assert resumed.exit_code == 0, resumed.output
    assert "wrote 8 ok, 0 failed" in resumed.output
    done = _files(out)
    assert len({k.split("/")[0] for k in done if k.endswith("convergence.json")}) == 12
    assert {k: v for k, v in done.items() if k in before} == before


@pytest.mark.parametrize("ess", [1.0, 1.49])
def test_collapsed_means_one_draw_carries_the_weight(ess):
    assert health.collapsed_fraction(types.SimpleNamespace(is_ess=np.full((2, 3), ess)), 2) == (
        6,
        6,
    )


@pytest.mark.slow
def test_bench_health_runs_to_its_end(tmp_path, monkeypatch):
    """bench/bench_health.py --smoke (one tiny survey campaign through the CLI, ~1 min):
    its record has every key path of the committed one's campaign entries and threshold."""
    import importlib

    from shearbatch.engine import runtime

    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    out = tmp_path / "health.json"
    with runtime.scoped():
        importlib.import_module("bench_health").main(["--smoke", "--out", str(out)])
    rec, committed = json.loads(out.read_text()), json.loads(RECORD.read_text())
    assert set(rec) >= set(committed) and rec["threshold"] == committed["threshold"]
    (one,) = rec["campaigns"].values()
    assert set(one) == set(next(iter(committed["campaigns"].values())))
    assert one["galaxies"] == 8 and one["collapsed"] == 0
    assert out.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"
