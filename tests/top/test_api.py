"""The notebook path: shearbatch.run a two-component campaign, open it, read its statuses,
summary, m and c, and one posterior with units, as the docs' session does."""

import warnings
from pathlib import Path

import numpy as np
import pytest
import yaml

import shearbatch

LEVEL0 = Path("configs/level0.yaml")


def tiny_config() -> dict:
    """Level 0 on 16x16 stamps (a 0.3" galaxy), so the test stays fast."""
    cfg = yaml.safe_load(LEVEL0.read_text())
    cfg["image"].update(size_x=16, size_y=16)
    cfg["gal"]["half_light_radius"] = 0.3
    return cfg


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    out = tmp_path_factory.mktemp("nb") / "camp"
    camp = shearbatch.run(tiny_config(), shear_grid=[-0.05, 0.05], shear_grid_g2=[-0.05, 0.05],
                          n_realizations=3, batch_size=12, output_dir=str(out))  # fmt: skip
    return out, camp


def test_run_returns_the_opened_campaign(campaign):
    out, camp = campaign
    assert camp.report.n_ok == 12 and camp.report.n_failed == 0
    assert camp.root == out and len(camp.realizations) == 12
    again = shearbatch.open_campaign(out)
    assert again.realizations == camp.realizations


def test_statuses_and_summary(campaign):
    _, camp = campaign
    assert set(camp.statuses()) == {"ok"}
    df = camp.summary()
    assert len(df) == 12 and {"g1_true", "g2_true", "g1_mean", "g2_std"} <= set(df.columns)
    assert sorted(set(df["g2_true"])) == [-0.05, 0.05]  # both components vary


def test_stats_measure_both_components(campaign):
    _, camp = campaign
    res = camp.stats()
    for k, x, err, _ in res.values():
        assert x is not None and err is not None, k
        # a well-specified Level 0 campaign: consistent with zero at its own precision
        assert abs(x) < 4 * err + 1e-6, (k, x, err)


def test_posterior_has_units_and_long_names(campaign):
    _, camp = campaign
    rid = camp.realizations[0]
    post = camp.posterior(rid)
    g1 = post["posterior"]["g1"]
    assert g1.dims == ("chain", "draw")
    assert g1.attrs["units"] == "1" and "shear" in g1.attrs["long_name"]
    assert post["observed_data"]["obs"].attrs["units"] == "image units per pixel"
    truth = camp.truth(rid)
    assert post.attrs["g1_true"] == pytest.approx(truth["g1"])
    assert camp.convergence(rid)["status"] == "ok"


def test_describe_keeps_level0_precision_without_warnings(campaign):
    _, camp = campaign
    rid = camp.realizations[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        table = camp.describe(rid)
    sd = float(table.loc["g1", "sd"])
    draws = np.asarray(camp.posterior(rid)["posterior"]["g1"]).ravel()
    assert 0 < sd < 1e-3  # a Level 0 width, not rounded to 0.0
    assert sd == pytest.approx(draws.std(ddof=0), rel=1e-3) or sd == pytest.approx(
        draws.std(ddof=1), rel=1e-3
    )


def test_bad_options_raise_the_clis_message(tmp_path):
    with pytest.raises(ValueError, match="--batch-size: must be >= 1"):
        shearbatch.run(LEVEL0, batch_size=0, output_dir=str(tmp_path / "x"))
    with pytest.raises(ValueError, match="unknown option"):
        shearbatch.run(LEVEL0, shear_gird=[0.01])
    # every option goes through the schema's rules, reported under the option's flag
    with pytest.raises(ValueError, match="--rotations: must be 1, 2 or 4, got 3"):
        shearbatch.run(LEVEL0, rotations=3, output_dir=str(tmp_path / "x"))
    with pytest.raises(ValueError, match=r"--shear-grid: \|g\| must be < 1"):
        shearbatch.run(LEVEL0, shear_grid=[0.01, 1.5], output_dir=str(tmp_path / "x"))
    with pytest.raises(ValueError, match="did you mean"):
        cfg = tiny_config()
        cfg["gal"]["fluxx"] = cfg["gal"].pop("flux")
        shearbatch.run(cfg, output_dir=str(tmp_path / "y"))
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
    with pytest.raises(ValueError, match="not a directory"):
        shearbatch.open_campaign(tmp_path / "nothing")


def test_the_docs_session_runs_as_written(tmp_path, monkeypatch):
    """The notebook session of the Python API page (docs/api.md), executed line by line
    (on the tiny config, 3 seeds, in a temporary directory): a newcomer can copy it."""
    text = Path("docs/api.md").read_text()
    block = text.split("## From Python (notebooks)", 1)[1].split("```python", 1)[1]
    block = block.split("```", 1)[0]
    code = "\n".join(ln[4:] for ln in block.splitlines() if ln.startswith((">>> ", "... ")))
    assert "shearbatch.run(" in code and "open_campaign(" in code
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(tiny_config()))
    code = (code.replace('"configs/level0.yaml"', repr(str(tmp_path / "tiny.yaml")))
            .replace("n_realizations=20", "n_realizations=3")
            .replace("batch_size=40", "batch_size=12"))  # fmt: skip
    monkeypatch.chdir(tmp_path)  # output_dir="results/nb" lands here
    ns: dict = {}
    exec(compile(code, "docs/api.md", "exec"), ns)
    assert ns["res"].m2 is not None and ns["res"].verdict in ("PASS", "INCONCLUSIVE")
    assert len(ns["df"]) == 12 and (tmp_path / "results" / "nb").is_dir()


def test_the_example_notebook_opens_a_campaign(campaign, monkeypatch):
    """docs/open_campaign.ipynb, its code cells run in order on a campaign (as after
    `make demo`, with ROOT pointed at this test's campaign)."""
    import json

    monkeypatch.setenv("MPLBACKEND", "Agg")
    out, _ = campaign
    nb = json.loads(Path("docs/open_campaign.ipynb").read_text())
    cells = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    assert 'ROOT = "../results/demo/runs"' in cells[0]
    cells[0] = cells[0].replace('"../results/demo/runs"', repr(str(out)))
    ns: dict = {}
    for i, src in enumerate(cells):
        exec(compile(src, f"open_campaign.ipynb cell {i}", "exec"), ns)
    assert ns["res"].m1 is not None and ns["g1"].attrs["units"] == "1"
    import matplotlib.pyplot as plt

    plt.close("all")
