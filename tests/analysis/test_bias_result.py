"""The typed stage-3 result (shearbatch.analysis.result.BiasResult): it reads back every
bias_results.json the previous version wrote and writes the same text, and what
measure_bias builds writes what the files hold."""

import json
from pathlib import Path

import numpy as np
import pytest

from shearbatch.analysis.bias import measure_bias
from shearbatch.analysis.result import BiasResult, Criterion, Requirement
from shearbatch.app.stats_stage import write_results

OLD = sorted((Path(__file__).resolve().parents[1] / "data" / "bias_results").glob("*.json"))


def test_the_fixtures_are_there():
    assert {p.stem for p in OLD} == {"level0_unfinished", "interim_population", "paired_sbc",
                                     "grid_weighted"}  # fmt: skip


@pytest.mark.parametrize("path", OLD, ids=lambda p: p.stem)
def test_a_file_of_the_previous_version_round_trips_to_the_same_text(path, tmp_path):
    old = path.read_text()
    res = BiasResult.from_json(json.loads(old))
    assert not res.extra  # every key is a field
    written = write_results(res, tmp_path)
    assert written.name == "bias_results.json"
    assert written.read_text() == old


def test_fields_read_back_typed():
    res = BiasResult.from_json(json.loads(OLD[[p.stem for p in OLD].index("level0_unfinished")]
                                          .read_text()))  # fmt: skip
    assert isinstance(res.requirement, Requirement) and res.requirement.name == "level0"
    assert res.requirement.chosen.startswith("campaign.requirement in ")
    assert all(isinstance(c, Criterion) for c in res.criteria)
    assert res.verdict == "INCONCLUSIVE" and not res.passed
    assert res.scope.unfinished and res.verdict_of_complete == "INCONCLUSIVE"
    assert res.scope.unplanned_dropped == 1 and res.n_corrupt == 1
    assert [k for k, *_ in res.values()] == ["m1", "c1", "m2", "c2"]
    assert res.criterion("coverage g1 68%").status == "inconclusive"
    interim = BiasResult.from_json(json.loads(OLD[[p.stem for p in OLD].index(
        "interim_population")].read_text()))  # fmt: skip
    assert interim.point_estimate == "population" and interim.population.grid_points
    assert interim.m2 is None and "constant" in interim.m2_reason


def test_unknown_keys_are_kept_last():
    doc = json.loads(OLD[0].read_text())
    doc["from_a_newer_version"] = {"x": 1}
    out = BiasResult.from_json(doc).to_json()
    assert list(out)[-1] == "from_a_newer_version" and out["from_a_newer_version"] == {"x": 1}


def test_measure_bias_builds_what_the_file_holds(tmp_path):
    """A fresh result written and read back is the same record."""
    import pandas as pd

    rng = np.random.default_rng(0)
    rows = []
    for seed in range(6):
        for g1 in (-0.02, 0.02):
            for g2 in (-0.02, 0.02):
                e1, e2 = rng.normal(0, 1e-3, 2)
                rows.append({"run_id": f"{g1}_{g2}_{seed}", "seed": seed, "g1_true": g1,
                             "g2_true": g2, "g1_mean": g1 + e1, "g2_mean": g2 + e2,
                             "g1_std": 1e-3, "g2_std": 1e-3, "status": "ok",
                             "passed_convergence": True})  # fmt: skip
    res, fits, use = measure_bias(pd.DataFrame(rows), requirement="level1")
    assert len(use) == 24 and set(fits) == {"g1", "g2"}
    assert res.requirement.chosen is None and res.with_chosen("x").requirement.chosen == "x"
    back = BiasResult.from_json(json.loads(write_results(res, tmp_path).read_text()))
    assert back.to_json() == json.loads((tmp_path / "bias_results.json").read_text())
    assert back.m1 == pytest.approx(res.m1) and back.criteria[0].name == "|m1|"


ROOT = Path(__file__).resolve().parents[2]
#: every bias_results.json committed under results/ (written by versions since the first)
COMMITTED = sorted(ROOT.glob("results/**/bias_results.json"))


def test_the_committed_results_are_found():
    names = {str(p.relative_to(ROOT)) for p in COMMITTED}
    assert len(COMMITTED) >= 19 and "results/validation/level2/bias_results.json" in names
    assert any(n.startswith("results/validation/anacal/") for n in names)


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: str(p.parent.relative_to(ROOT)))
def test_every_committed_result_round_trips_and_renders(path, tmp_path):
    """Each file (older ones lack requirement, design, warnings, scope, planning, or a
    criterion's quantile; their keys come in other orders) reads into the typed record
    and writes back to the same text; the summary and the HTML report render from it."""
    from shearbatch.analysis.report_text import render_report, summary_lines
    from shearbatch.analysis.result import Coverages, Estimators, Fits, Prior, Sbc

    old = path.read_text()
    res = BiasResult.from_json(json.loads(old))
    assert isinstance(res.fits, Fits) and isinstance(res.coverage, Coverages)
    assert isinstance(res.sbc, Sbc) and isinstance(res.prior, Prior)
    assert res.fits.of("g1").error_label and not res.extra
    assert write_results(res, tmp_path).read_text() == old
    lines = summary_lines(res, tmp_path / "bias_results.json")
    assert lines[-1].startswith(f"verdict: {res.verdict} ")
    page = render_report(res, [], {}, {"command": "bias-stats"})
    assert f"id='verdict'>{res.verdict}<" in page and "<h2>Coverage</h2>" in page
    if res.estimators is not None:  # host estimators beside the method: a record too
        assert isinstance(res.estimators, Estimators) and res.estimators.results
        assert "estimators on the same realizations:" in lines
        assert "<h2>Estimators on the same realizations</h2>" in page


def test_the_old_string_reads_still_work_with_a_warning():
    """A notebook written when the sections were mappings (res.fits["g1"]["error_label"])
    still reads them, warned that they are records now."""
    res = BiasResult.from_json(json.loads(OLD[0].read_text()))
    with pytest.warns(DeprecationWarning, match="read the field instead"):
        assert res.fits["g1"]["error_label"] == res.fits.g1.error_label
    with pytest.warns(DeprecationWarning), pytest.raises(KeyError):
        res.prior["nothing"]
