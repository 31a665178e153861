"""The one definition of a complete realization (io.layout.inspect_realization), on the
files the real writer makes: every truncation of posterior.nc is told from its size and
header alone, and the resume's status agrees with bias-extract's."""

import json
import shutil

import numpy as np
import pytest

from shearbatch.analysis.summary_table import read_realization
from shearbatch.io import (
    CONVERGENCE,
    POSTERIOR,
    TRUTH,
    inspect_realization,
    netcdf_problem,
    realization_status,
    write_realization,
)


def _realization(tmp_path):
    """A directory as the real writer makes it (a posterior of 2 chains x 50 draws)."""
    d = tmp_path / "g1_+0.0200_g2_+0.0000_s0"
    draws = np.random.default_rng(0).normal(0.02, 1e-3, (2, 2, 50))
    write_realization(
        d,
        posterior={"g1": draws[0], "g2": draws[1]},
        sample_stats={},
        observed=np.zeros((1, 16, 16)),
        attrs={},
        truth={"g1": 0.02, "g2": 0.0, "seed": 0},
        convergence={"status": "ok", "method": "map"},
    )
    return d


def test_whole_files_are_done_and_agree_with_extract(tmp_path):
    d = _realization(tmp_path)
    assert netcdf_problem(d / POSTERIOR) is None
    assert inspect_realization(d).status == "done"
    assert realization_status(tmp_path, d.name) == "done"
    assert read_realization(d)["status"] == "ok"


def test_every_truncation_of_the_posterior_is_corrupt_to_both(tmp_path):
    d = _realization(tmp_path)
    full = (d / POSTERIOR).read_bytes()
    cuts = sorted({0, 1, 8, 9, 12, 20, 40, 47, 48, 100, len(full) // 2, len(full) - 1})
    cuts += [int(c) for c in np.random.default_rng(1).integers(48, len(full), 20)]
    for cut in cuts:
        (d / POSTERIOR).write_bytes(full[:cut])
        ins = inspect_realization(d)
        assert ins.status == "corrupt" and ins.reason.startswith("posterior.nc"), (cut, ins)
        assert realization_status(tmp_path, d.name) == "corrupt"
        row = read_realization(d)
        assert (row["status"], row["reason"]) == ("corrupt", ins.reason), cut
    (d / POSTERIOR).write_bytes(full)
    assert inspect_realization(d).status == "done"


@pytest.mark.parametrize(
    ("damage", "status", "reason"),
    [
        (lambda d: (d / CONVERGENCE).unlink(), "incomplete", "convergence.json missing"),
        (lambda d: (d / CONVERGENCE).write_text("{"), "corrupt", "convergence.json unreadable"),
        (lambda d: (d / CONVERGENCE).write_text("[]"), "corrupt", "convergence.json unreadable"),
        (lambda d: (d / TRUTH).write_text("{"), "corrupt", "truth.json unreadable"),
        (lambda d: (d / TRUTH).unlink(), "incomplete", "truth.json missing"),
        (lambda d: (d / POSTERIOR).unlink(), "incomplete", "posterior.nc missing"),
        (lambda d: (d / POSTERIOR).write_bytes(b"x" * 4096), "corrupt", "posterior.nc not a"),
        (
            lambda d: (d / CONVERGENCE).write_text(
                json.dumps({"status": "failed", "reason": "nan"})
            ),
            "failed",
            "nan",
        ),
        (lambda d: shutil.rmtree(d), "absent", "no directory"),
    ],
)
def test_each_state_has_one_status_for_resume_and_extract(tmp_path, damage, status, reason):
    d = _realization(tmp_path)
    damage(d)
    ins = inspect_realization(d)
    assert ins.status == status and ins.reason.startswith(reason), ins
    assert realization_status(tmp_path, d.name) == status
    if status != "absent":
        row = read_realization(d)
        assert (row["status"], row["reason"]) == (ins.status, ins.reason)
