"""The per-method diagnostics figure reads what the writer writes: chains get trace and
rank plots, one chain of independent draws gets the Gaussian view; 'worst' is stated."""

import numpy as np
import pytest

from shearbatch.analysis.plots import WORST_RULE, diagnostics_figure
from shearbatch.io import write_realization


def _write(d, n_chain, method, rng, legacy=False):
    """A realization's files; ``legacy``: convergence.json with the point estimate's older
    key names (``estimate``, ``map_estimate``), which the figure still reads."""
    g = {k: 0.02 + 1e-5 * rng.standard_normal((n_chain, 200)) for k in ("g1", "g2")}
    names = ("estimate", "map_estimate") if legacy else ("point_estimate", "mode")
    write_realization(d, posterior=g, sample_stats={"lp": rng.standard_normal((n_chain, 200))},
                      observed=np.zeros((1, 8, 8)), attrs={"inference_method": method},
                      truth={"g1": 0.02, "g2": 0.02},
                      convergence={"status": "ok", "method": method,
                                   names[0]: "mode" if method == "map" else "mean",
                                   names[1]: {"g1": 0.02, "g2": 0.02}})  # fmt: skip
    return d


@pytest.mark.parametrize(("n_chain", "method", "panel"), [(4, "nuts", "rank plot"),
                                                          (1, "map", "Laplace ellipses"),
                                                          (1, "vi", "guide ellipses")])  # fmt: skip
@pytest.mark.parametrize("legacy", [False, True], ids=["current", "older-keys"])
def test_each_method_gets_its_own_diagnostics(tmp_path, n_chain, method, panel, legacy):
    rng = np.random.default_rng(0)
    dirs = [_write(tmp_path / f"r{i}", n_chain, method, rng, legacy) for i in range(2)]
    fig = diagnostics_figure(dirs, [(0.02, 0.02)] * 2)
    titles = [ax.get_title() for ax in fig.axes]
    assert any(panel in t for t in titles), titles
    assert WORST_RULE in fig._suptitle.get_text()
    if n_chain > 1:
        assert len(fig.axes[0].lines) == n_chain + 1  # one trace per chain + the truth
    if method == "map":  # the Laplace Gaussian sits at the recorded mode, under either name
        labels = [lab for ax in fig.axes for lab in ax.get_legend_handles_labels()[1]]
        assert any("centre mode" in lab for lab in labels), labels
    fig.savefig(tmp_path / "d.png")
