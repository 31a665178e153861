"""convergence.json is one typed record (core.convergence.Convergence): what the writer
stores reads back equal, files of older versions read with today's names, and a damaged
record reads as unknowns instead of raising (bias-extract reports, it does not crash)."""

import json

import numpy as np

from shearbatch.core import failure_flags as fl
from shearbatch.core.convergence import Convergence
from shearbatch.io import inspect_realization, read_json, write_realization
from shearbatch.io.writer import to_strict_json

GATES = fl.Gates(rhat={"g1": 1.02, "g2": 1.001}, ess_bulk={"g1": 900.0, "g2": 1000.0},
                 ess_tail={"g1": 800.0, "g2": 700.0}, divergences=0, divergence_frac=0.0,
                 bfmi=[0.9, 1.1])  # fmt: skip


def nuts_like() -> Convergence:
    flags = fl.flag("RHAT_HIGH")
    return Convergence(
        run_id="g1_+0.0200_g2_+0.0000_s3",
        status="ok",
        flags=flags,
        reason=fl.describe(flags),
        method="nuts",
        point_estimate="mean",
        mode={"g1": 0.021, "g2": -0.001, "flux": [1.0, 2.0]},
        gates=GATES,
        diagnostics={"rhat_max": 1.02, "step_size": [0.7, 0.8]},
        thresholds=fl.DEFAULT_THRESHOLDS._asdict(),
        precision="float64",
        config_hash="abc",
        seed=3,
        batch_size=8,
        snr=[150.0],
        chi2_per_pixel=1.01,
        prior={"g1": {"width_ratio": 0.01, "shrinkage": 1e-4}},
        batch={"index": 0, "size": 8, "lane": 3},
        runtime_s=0.5,
        provenance={"config": {"image": {}}, "host": "h"},
    )


def test_what_is_written_reads_back_equal(tmp_path):
    rec = nuts_like()
    on_disk = json.loads(json.dumps(to_strict_json(rec.to_json())))
    assert Convergence.from_json(on_disk) == rec
    # the published layout: flags, names and gate statistics at the top level
    assert on_disk["flag_names"] == ["RHAT_HIGH"] and on_disk["passed"] is False
    assert on_disk["rhat"] == {"g1": 1.02, "g2": 1.001} and on_disk["rhat_max"] == 1.02
    assert on_disk["point_estimate"] == "mean" and on_disk["mode"]["g1"] == 0.021
    assert on_disk["host"] == "h" and on_disk["batch"]["lane"] == 3
    # the gates re-evaluate from the record, at the thresholds given
    assert rec.flags_under() == fl.flag("RHAT_HIGH")
    assert rec.flags_under(fl.Thresholds(rhat_max=1.05)) == 0
    assert rec.site("rhat", "g1") == 1.02 and rec.site("mode", "flux") is None
    # through the writer and the one definition of complete
    post = {"g1": np.zeros((1, 4)), "g2": np.zeros((1, 4))}
    write_realization(tmp_path / "r", posterior=post, sample_stats={}, observed=np.zeros((1, 4, 4)),
                      attrs={}, truth={"g1": 0.02}, convergence=rec)  # fmt: skip
    written = read_json(tmp_path / "r" / "convergence.json")
    assert set(written.pop("checksums")) == {"algorithm", "record", "truth.json", "posterior.nc",
                                             "variables"}  # fmt: skip
    assert written == on_disk  # and the writer's checksums (shearbatch.io.integrity)
    ins = inspect_realization(tmp_path / "r")
    assert ins.status == "done" and ins.convergence.checksums is not None
    assert ins.convergence.replace(checksums=None) == rec


def test_older_key_names_read_as_todays():
    old = nuts_like().to_json()
    old["estimate"], old["map_estimate"] = old.pop("point_estimate"), old.pop("mode")
    rec = Convergence.from_json(json.loads(json.dumps(to_strict_json(old))))
    assert rec.point_estimate == "mean" and rec.mode["g1"] == 0.021
    assert "estimate" not in rec.diagnostics and "map_estimate" not in rec.diagnostics


def test_a_damaged_record_reads_as_unknowns():
    rec = Convergence.from_json({"status": "ok", "flags": "x", "flag_names": ["ESS_LOW", "?"],
                                 "seed": "3", "mode": [1], "batch": 7, "rhat": None})  # fmt: skip
    assert rec.flags == fl.flag("ESS_LOW") and rec.seed is None and rec.mode == {}
    assert rec.batch is None
    # a gate statistic present but null fails its gate, as before
    assert rec.flags_under() & fl.flag("RHAT_HIGH")
