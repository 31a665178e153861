"""Estimators side by side (analysis/compare.py): each one's m and c by the same moment
equations, and their difference jackknifed over the shared seeds."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from shearbatch.analysis.compare import compare_estimators, fit_response
from shearbatch.analysis.result import Acceptance
from shearbatch.schema import requirements as rq

ACC = Acceptance.of(**rq.criteria_of(rq.resolve("level2")))


def _table(n_seeds: int = 200, m_fm: float = 0.01, m_an: float = -0.005, seed: int = 1):
    """A paired 2-D grid: per seed a 'shape + noise' part the pair cancels, per realization
    a part it does not; both estimators see both (the same realizations), each adds its own
    small noise; AnaCal's e is R (g (1 + m) + ...) with a response shared by the pair."""
    rng = np.random.default_rng(seed)
    rows = []
    for s in range(n_seeds):
        common = rng.normal(0, 0.05, 2)  # the realization's galaxies and noise
        r = 10 * (0.5 + rng.normal(0, 0.02, 2))  # FPFS response sums, shared by the pair
        for g1, g2 in ((0.02, 0.0), (0.0, 0.02)):
            for sign in (1, -1):
                g = np.array([g1, g2]) * sign
                # what the pair does not cancel (the noise's coupling to g), both see it
                real = rng.normal(0, 3e-3, 2)
                own_fm, own_an = rng.normal(0, 3e-4, 2), rng.normal(0, 3e-4, 2)
                ghat = g * (1 + m_fm) + common + real + own_fm
                e = r * (g * (1 + m_an) + common + real + own_an)
                rows.append({"run_id": f"{s}_{g1}_{sign}", "seed": s,
                             "pair_id": f"p{s}_{g1}", "pair_sign": sign,
                             "g1_true": g[0], "g2_true": g[1], "g1_mode": ghat[0],
                             "g2_mode": ghat[1], "method": "map", "runtime_s": 0.4,
                             "anacal_e1": e[0], "anacal_e2": e[1], "anacal_r11": r[0],
                             "anacal_r22": r[1], "anacal_n": 4, "anacal_n_flagged": 0,
                             "anacal_cost_s": 0.002})  # fmt: skip
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def side():
    return compare_estimators(_table(), "mode", ACC, 1.0, "map")


def test_each_estimator_recovers_its_m(side):
    fm, an = side.results["map"], side.results["anacal"]
    for k in "12":
        assert abs(getattr(fm, f"m{k}") - 0.01) < 4 * getattr(fm, f"m{k}_err")
        assert abs(getattr(an, f"m{k}") + 0.005) < 4 * getattr(an, f"m{k}_err")
        assert getattr(fm, f"c{k}_err") > 0 and getattr(an, f"c{k}_err") > 0
    assert fm.verdict in ("PASS", "FAIL", "INCONCLUSIVE") and an.criteria
    assert an.cost.s_per_galaxy == pytest.approx(0.0005)
    assert fm.cost.s_per_galaxy == pytest.approx(0.1)
    assert an.n_flagged == 0 and not fm.has("n_flagged")


def test_the_difference_has_a_smaller_error_than_either(side):
    """The estimators share realizations: the paired jackknife of the difference is far
    sharper than either estimator's own error."""
    d = side.differences["anacal - map"]
    fm, an = side.results["map"], side.results["anacal"]
    for q in ("m1", "m2", "c1", "c2"):
        assert getattr(d, f"d{q}") == pytest.approx(getattr(an, q) - getattr(fm, q))
        assert getattr(d, f"d{q}_err") < 0.5 * min(getattr(fm, f"{q}_err"),
                                                   getattr(an, f"{q}_err")), q  # fmt: skip
    assert abs(d.dm1 + 0.015) < 4 * d.dm1_err


def test_a_response_estimator_is_a_ratio_of_sums():
    """With pairs the moment equations are FPFS's paired estimator: 1 + m = sum(e+ - e-) /
    (2 g sum R), and c = sum(e+ + e-) / sum(R+ + R-)... (no errors-in-variables bias)."""
    rng = np.random.default_rng(3)
    n, g = 50, 0.02
    r = rng.uniform(0.5, 2.0, n)
    shape = rng.normal(0, 0.3, n)
    ep, em = r * g * 1.01 + shape, -r * g * 1.01 + shape
    e = np.concatenate([ep, em])
    rr = np.concatenate([r, r])
    gg = np.concatenate([np.full(n, g), np.full(n, -g)])
    theta, reps, slope = fit_response(e, rr, gg, np.concatenate([np.arange(n)] * 2))
    assert slope and reps.shape == (n, 2)
    assert theta[0] == pytest.approx((ep - em).sum() / (2 * g * r.sum()) - 1)
    assert theta[1] == pytest.approx((ep + em).sum() / (2 * r.sum()))


def test_no_host_estimator_no_section():
    df = _table(4).drop(columns=[c for c in _table(4).columns if c.startswith("anacal_")])
    assert compare_estimators(df, "mode", ACC, 1.0, "map") is None


def test_the_section_is_a_record_that_reads_back_from_its_json(side):
    """``estimators`` is a record (issue 57): its JSON (strict: a cost without a finite
    value is null) reads back into the same records, writes the same mapping, and prints
    the same table."""
    import json

    from shearbatch.analysis.compare import side_lines
    from shearbatch.analysis.result import Criterion, EstimatorResult, Estimators
    from shearbatch.io import to_strict_json

    assert isinstance(side, Estimators) and isinstance(side.results["anacal"], EstimatorResult)
    assert all(isinstance(c, Criterion) for c in side.results["map"].criteria)
    text = json.dumps(to_strict_json(side.to_json()))
    back = Estimators.from_json(json.loads(text))
    assert json.dumps(to_strict_json(back.to_json())) == text
    assert list(back.to_json()["results"]["anacal"]) == list(side.to_json()["results"]["anacal"])
    assert side_lines(back) == side_lines(side)
    free = side.set(results={**side.results, "map": side.results["map"].set(
        cost=side.results["map"].cost.set(s_per_galaxy=float("nan"), galaxies_per_s=None))})  # fmt: skip
    read = Estimators.from_json(json.loads(json.dumps(to_strict_json(free.to_json()))))
    assert read.results["map"].cost.s_per_galaxy is None
    assert side_lines(read) == side_lines(free)  # null printed as nan, as NaN is
