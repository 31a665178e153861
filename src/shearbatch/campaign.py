"""Campaign plan: realizations, seeds, run ids, batches, SLURM array slices, resume.

A campaign is a shear grid times ``n_realizations``; the grid is g1 values at
a constant g2, or (``shear_grid_g2``) every ``(g1, g2)`` pair of two lists. Realization ``i`` at a
grid point gets seed ``base_seed + i``; the *same* seeds are used at every grid
point (common random numbers: the same galaxy and the same noise field are
sheared by each g), so the regression slope is measured with far less noise
and jackknife errors can be grouped by seed. Run ids are
``g1_{g1:+.4f}_g2_{g2:+.4f}_s{seed}``.

With ``paired=True`` every grid value ``g`` contributes a ``+|g|`` and a
``-|g|`` realization sharing one seed (same galaxy, same noise): the paired
estimator ``m = (g_hat(+) - g_hat(-)) / (2 g) - 1`` cancels the noise.

With ``rotations=R`` (2 or 4; shape-noise cancellation, a "ring" design) every
realization gets ``R - 1`` more copies, ``k = 1 .. R-1``, whose galaxies have
their intrinsic shape rotated by ``k * 180 / R`` degrees (90 for R = 2; 45, 90
and 135 for R = 4: the spin-2 ellipticity turns by twice that), sharing the
seed: the same fluxes, sizes and offsets, and by default the same noise field
(``rotation_noise="shared"``; ``"independent"`` gives copy ``k`` its own noise
field, see :mod:`shearbatch.core.generate`). Copy ``k``
has run id ``<run id>_r{k}``; the unrotated copy keeps the plain id. With
``paired`` a seed yields ``2 R`` images per grid value: ``+g`` and ``-g`` of
each rotation, paired within the rotation (``pair_id`` ends in ``_r{k}``).
All copies of a seed form one group for the errors of ``bias-stats``.

Every SLURM array task builds the same deterministic plan and takes a
contiguous slice of it, so the union over tasks is the plan with no overlap.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any, NamedTuple

__all__ = [
    "ROTATIONS",
    "ROTATION_NOISE",
    "Realization",
    "array_slice",
    "array_task_from_env",
    "make_batches",
    "plan_campaign",
    "plan_from_prior",
    "plan_single",
    "run_id_for",
    "simulate_realizations",
]

logger = logging.getLogger(__name__)


class Realization(NamedTuple):
    """One realization of a campaign: its true shear, seed and identity."""

    run_id: str
    g1: float
    g2: float
    seed: int
    pair_id: str = ""
    pair_sign: int = 0
    from_prior: bool = False  # true shear drawn from the inference prior (SBC)
    rotation: int = 0  # ring design: index k of this copy, 0 .. n_rotations - 1
    n_rotations: int = 1  # copies per seed in the ring design (1: no rotation)
    noise_stream: int = 0  # 0: the seed's noise field; k > 0: an independent one (copy k)

    @property
    def rotation_deg(self) -> float:
        """Rotation of the intrinsic shapes, degrees (``k * 180 / n_rotations``)."""
        return 180.0 * self.rotation / self.n_rotations


def run_id_for(g1: float, g2: float, seed: int) -> str:
    """``g1_+0.0100_g2_+0.0000_s42``."""
    return f"g1_{g1:+.4f}_g2_{g2:+.4f}_s{seed}"


#: copies per seed of a ring design (``campaign.rotations``)
ROTATIONS = (1, 2, 4)
#: the noise of a rotated copy: the seed's own field, or an independent one per copy
ROTATION_NOISE = ("shared", "independent")


def _check_shear(g1: float, g2: float) -> None:
    if not (g1 * g1 + g2 * g2) < 1.0:
        raise ValueError(f"shear (g1={g1}, g2={g2}) must have |g| < 1")


def plan_campaign(
    shear_grid: Sequence[float],
    *,
    g2: float = 0.0,
    n_realizations: int = 1,
    base_seed: int = 0,
    paired: bool = False,
    shear_grid_g2: Sequence[float] | None = None,
    rotations: int = 1,
    rotation_noise: str = "shared",
) -> list[Realization]:
    """Expand a shear grid x realizations (x rotations) into the deterministic campaign plan.

    With ``shear_grid_g2`` the grid is two-dimensional: every ``(g1, g2)`` pair of
    the two lists (g1 major), so both components vary and ``m1, c1, m2, c2`` are
    all measurable; without it ``g2`` is the constant true g2. Paired 2-D points
    are ``+(g1, g2)`` and ``-(g1, g2)`` with the ``+`` twin's g1 >= 0 (a vector and
    its negative are one pair).

    Order: grid point major, realization minor, then rotation, then sign (``-g``
    right after ``+g`` of the same rotation when paired).
    """
    if n_realizations < 1:
        raise ValueError("n_realizations must be >= 1")
    if rotations not in ROTATIONS:
        raise ValueError(f"rotations must be one of {ROTATIONS}, got {rotations}")
    if rotation_noise not in ROTATION_NOISE:
        raise ValueError(f"rotation_noise must be one of {ROTATION_NOISE}, got {rotation_noise!r}")
    if base_seed < 0:
        raise ValueError("base_seed must be >= 0")
    two_d = shear_grid_g2 is not None
    points = [(a, b) for a in shear_grid for b in shear_grid_g2] if two_d else [
        (a, g2) for a in shear_grid
    ]  # fmt: skip
    plan: list[Realization] = []
    seen: set[str] = set()
    for a, b in points:
        if two_d and paired and (a < 0 or (a == 0 and b < 0)):
            a, b = -a, -b  # the + twin of a 2-D pair has g1 >= 0
        flips = paired and (a != 0 or (two_d and b != 0))
        signs = (1.0, -1.0) if flips else (1.0,)
        for i in range(n_realizations):
            seed = base_seed + i
            for k in range(rotations):
                suffix = f"_r{k}" if k else ""
                for sign in signs:
                    g1 = sign * abs(a) if paired and not two_d else sign * a
                    gg2 = sign * b if two_d else b
                    _check_shear(g1, gg2)
                    rid = run_id_for(g1, gg2, seed) + suffix
                    if rid in seen:  # e.g. a grid that lists the same value twice
                        continue
                    seen.add(rid)
                    pair = ""
                    if paired:
                        pair = (
                            f"p{abs(a):.4f}_{b:+.4f}_s{seed}" if two_d else f"p{abs(a):.4f}_s{seed}"
                        )
                        pair += suffix
                    stream = k if rotation_noise == "independent" else 0
                    plan.append(Realization(rid, g1, gg2, seed, pair, int(sign) if paired else 0,
                                            rotation=k, n_rotations=rotations,
                                            noise_stream=stream))  # fmt: skip
    return plan


def plan_from_prior(draw_fn, *, n_realizations: int, base_seed: int = 0) -> list[Realization]:
    """Simulation-based calibration: realization ``i`` (seed ``base_seed + i``) has its
    true shear drawn from the inference prior by ``draw_fn(seed) -> (g1, g2)``."""
    if n_realizations < 1:
        raise ValueError("n_realizations must be >= 1")
    plan = []
    for i in range(n_realizations):
        seed = base_seed + i
        g1, g2 = draw_fn(seed)
        plan.append(Realization(run_id_for(g1, g2, seed), g1, g2, seed, from_prior=True))
    return plan


def plan_single(g1: float, g2: float, seed: int, run_id: str | None = None) -> list[Realization]:
    """A one-realization plan (the same code path as a campaign)."""
    _check_shear(g1, g2)
    if seed < 0:
        raise ValueError("seed must be >= 0")
    return [Realization(run_id or run_id_for(g1, g2, seed), g1, g2, seed)]


def array_task_from_env(indices: Sequence[int] | None = None) -> tuple[int, int]:
    """``(position, count)`` of this SLURM array task, ``(0, 1)`` outside an array.

    Offset and stepped ranges (``--array=10-13``, ``--array=0-4:2``) map onto
    positions ``0..count-1`` from ``SLURM_ARRAY_TASK_MIN/MAX/STEP/COUNT``; any other
    index set (``--array=1,3,5``) needs ``indices`` (see :mod:`shearbatch.slurm`).
    Raises :class:`shearbatch.slurm.ArrayError` naming the variables.
    """
    from .slurm import array_position

    pos = array_position(os.environ, indices)
    return (0, 1) if pos is None else pos


def array_slice(plan: Sequence[Realization], task_id: int, task_count: int) -> list[Realization]:
    """Contiguous slice ``[task_id * N // K, (task_id + 1) * N // K)`` of the plan."""
    if task_count < 1:
        raise ValueError("array task count must be >= 1")
    if not 0 <= task_id < task_count:
        raise ValueError(f"array task id {task_id} outside [0, {task_count})")
    n = len(plan)
    return list(plan[task_id * n // task_count : (task_id + 1) * n // task_count])


def make_batches(realizations: Sequence[Realization], batch_size: int) -> list[list[Realization]]:
    """Cut into batches of ``batch_size``; the last may be short (the engine pads it)."""
    if batch_size < 1:
        raise ValueError("batch size must be >= 1")
    r = list(realizations)
    return [r[i : i + batch_size] for i in range(0, len(r), batch_size)]


def simulate_realizations(spec: Any, batch: Sequence[Realization], store: Any = None) -> Any:
    """The simulated stamps (a :class:`~shearbatch.core.generate.SimBatch`) of ``batch``'s
    realizations from ``spec``'s truth: their seeds, shears, ring copies (45 degrees each)
    and noise streams, drawn by :func:`shearbatch.core.generators.simulate`. ``store``: the
    wrapper of the generator's program (the engine hands down its store of exported
    programs; None: the plain jit)."""
    from .core.generators import simulate

    quarters = [4 * r.rotation // r.n_rotations for r in batch]  # ring copies (45 deg each)
    return simulate(spec.truth, [r.seed for r in batch], [(r.g1, r.g2) for r in batch],
                    quarters, [r.noise_stream for r in batch], store=store)  # fmt: skip
