"""Campaign plan: run ids, seeds, batches, array-task slices, resume status."""

import json

import pytest

from shearbatch.campaign import (
    array_slice,
    array_task_from_env,
    make_batches,
    plan_campaign,
    plan_single,
    run_id_for,
)
from shearbatch.io import realization_status
from tests.conftest import SEED_IDS


def test_seed_example_plan():
    plan = plan_campaign([0.01, 0.02, 0.05], n_realizations=2, base_seed=42)
    assert [r.run_id for r in plan] == [
        "g1_+0.0100_g2_+0.0000_s42",
        "g1_+0.0100_g2_+0.0000_s43",
        "g1_+0.0200_g2_+0.0000_s42",
        "g1_+0.0200_g2_+0.0000_s43",
        "g1_+0.0500_g2_+0.0000_s42",
        "g1_+0.0500_g2_+0.0000_s43",
    ]
    assert [r.run_id for r in plan] == SEED_IDS
    batches = make_batches(plan, 4)
    assert [len(b) for b in batches] == [4, 2]


def test_run_id_format_and_seed_zero():
    assert run_id_for(-0.05, 0.0, 0) == "g1_-0.0500_g2_+0.0000_s0"
    (r,) = plan_single(0.02, -0.01, 0)
    assert (r.seed, r.run_id) == (0, "g1_+0.0200_g2_-0.0100_s0")
    assert plan_single(0.02, -0.01, 42, "r0001")[0].run_id == "r0001"


def test_paired_design_shares_seeds():
    plan = plan_campaign([0.02], n_realizations=2, base_seed=7, paired=True)
    assert [(r.g1, r.seed, r.pair_sign) for r in plan] == [
        (0.02, 7, 1),
        (-0.02, 7, -1),
        (0.02, 8, 1),
        (-0.02, 8, -1),
    ]
    assert plan[0].pair_id == plan[1].pair_id != plan[2].pair_id


@pytest.mark.parametrize("n", [1, 5, 6, 17, 100])
@pytest.mark.parametrize("k", [1, 2, 3, 7, 16])
def test_array_slices_partition_the_plan(n, k):
    plan = plan_campaign([0.001 * (i + 1) for i in range(n)], n_realizations=1)
    parts = [array_slice(plan, i, k) for i in range(k)]
    assert [r for p in parts for r in p] == plan  # union, in order, no overlap
    assert max(map(len, parts)) - min(map(len, parts)) <= 1


def test_array_task_bounds():
    with pytest.raises(ValueError, match="outside"):
        array_slice([], 3, 2)


def test_array_task_from_slurm_env(monkeypatch):
    monkeypatch.delenv("SLURM_ARRAY_TASK_ID", raising=False)
    assert array_task_from_env() == (0, 1)
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "3")
    monkeypatch.setenv("SLURM_ARRAY_TASK_COUNT", "4")
    monkeypatch.setenv("SLURM_ARRAY_TASK_MIN", "0")
    assert array_task_from_env() == (3, 4)
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "4")
    monkeypatch.setenv("SLURM_ARRAY_TASK_MIN", "1")
    assert array_task_from_env() == (3, 4)


def test_bad_shear_rejected():
    with pytest.raises(ValueError, match=r"\|g\| < 1"):
        plan_campaign([0.8], g2=0.7)


def test_realization_status(tmp_path):
    assert realization_status(tmp_path, "a") == "absent"
    d = tmp_path / "a"
    d.mkdir()
    assert realization_status(tmp_path, "a") == "incomplete"
    (d / "posterior.nc").write_bytes(b"x")
    (d / "truth.json").write_text("{}")
    (d / "convergence.json").write_text(json.dumps({"status": "failed"}))
    assert realization_status(tmp_path, "a") == "failed"
    (d / "convergence.json").write_text(json.dumps({"status": "ok"}))
    assert realization_status(tmp_path, "a") == "corrupt"  # b"x" is no netCDF file
    (d / "convergence.json").write_text("{trunc")
    assert realization_status(tmp_path, "a") == "corrupt"  # (tests/io/test_layout.py: the rest)


@pytest.mark.parametrize("rotations", [2, 4])
def test_ring_design_plan_ids_pairs_and_angles(rotations):
    plan = plan_campaign([0.02], n_realizations=2, base_seed=5, paired=True, rotations=rotations)
    assert len(plan) == 2 * 2 * rotations  # a seed yields 2 x rotations images
    ids = [r.run_id for r in plan]
    assert len(set(ids)) == len(ids)
    first = [r for r in plan if r.seed == 5]
    assert [(r.rotation, r.pair_sign) for r in first] == [
        (k, s) for k in range(rotations) for s in (1, -1)
    ]
    assert first[0].run_id == "g1_+0.0200_g2_+0.0000_s5"
    assert first[2].run_id == "g1_+0.0200_g2_+0.0000_s5_r1"
    assert [r.rotation_deg for r in first[::2]] == [180.0 * k / rotations for k in range(rotations)]
    # pairs are +g/-g of one rotation; every copy of a seed shares its noise by default
    assert first[2].pair_id == first[3].pair_id != first[0].pair_id
    assert {r.noise_stream for r in plan} == {0}
    indep = plan_campaign(
        [0.02], n_realizations=1, rotations=rotations, rotation_noise="independent"
    )
    assert [r.noise_stream for r in indep] == list(range(rotations))


def test_bad_ring_design_rejected():
    with pytest.raises(ValueError, match="rotations"):
        plan_campaign([0.02], rotations=3)
    with pytest.raises(ValueError, match="rotation_noise"):
        plan_campaign([0.02], rotations=2, rotation_noise="rotated")
