"""The per-method diagnostics figure reads what the writer writes: chains get trace and
rank plots, one chain of independent draws gets the Gaussian view; 'worst' is stated."""

import numpy as np
import pytest

from shearbatch.analysis.plots import WORST_RULE, diagnostics_figure
from shearbatch.io import write_realization


def _write(d, n_chain, method, rng):
    g = {k: 0.02 + 1e-5 * rng.standard_normal((n_chain, 200)) for k in ("g1", "g2")}
    write_realization(d, posterior=g, sample_stats={"lp": rng.standard_normal((n_chain, 200))},
                      observed=np.zeros((1, 8, 8)), attrs={"inference_method": method},
                      truth={"g1": 0.02, "g2": 0.02},
                      convergence={"status": "ok", "method": method,
                                   "estimate": "mode" if method == "map" else "mean",
                                   "map_estimate": {"g1": 0.02, "g2": 0.02}})  # fmt: skip
    return d


@pytest.mark.parametrize(("n_chain", "method", "panel"), [(4, "nuts", "rank plot"),
                                                          (1, "map", "Laplace ellipses"),
                                                          (1, "vi", "guide ellipses")])  # fmt: skip
def test_each_method_gets_its_own_diagnostics(tmp_path, n_chain, method, panel):
    rng = np.random.default_rng(0)
    dirs = [_write(tmp_path / f"r{i}", n_chain, method, rng) for i in range(2)]
    fig = diagnostics_figure(dirs, [(0.02, 0.02)] * 2)
    titles = [ax.get_title() for ax in fig.axes]
    assert any(panel in t for t in titles), titles
    assert WORST_RULE in fig._suptitle.get_text()
    if n_chain > 1:
        assert len(fig.axes[0].lines) == n_chain + 1  # one trace per chain + the truth
    fig.savefig(tmp_path / "d.png")
