"""``bias-run --dry-run``'s estimates: the disk a realization takes and (``--pilot``) the
wall time of this task, from the compiled program's timing on one batch.

Disk: measured from complete realizations of the campaign already in the output root when
there are some, else from the shapes the plan implies: the method's draws of every latent
(``jax.eval_shape`` of its ``fit`` on one stamp: traced, nothing computed or compiled) times
the bytes of the precision, the observed stamps, and the netCDF and JSON records around
them. Time: the dry run alone cannot know it (a method's cost depends on the data); the
pilot simulates one batch of the campaign's lanes, compiles the program (timed apart) and
runs it once, and the task's time is its number of batches times that batch's.
"""

from __future__ import annotations

import json
import logging
import math
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from .plan import Plan

__all__ = ["DiskEstimate", "PilotTiming", "disk_estimate", "estimate_lines", "pilot"]

logger = logging.getLogger("shearbatch")

#: what netCDF-4/HDF5 adds per variable (header, attributes, chunk index) and per file
#: (superblock, groups, coordinates): measured on this package's own files, see
#: tests/test_estimate.py, which checks the estimate against a written realization
NC_PER_VARIABLE = 1_600
NC_PER_FILE = 12_000
#: convergence.json besides the config it records: diagnostics, flags, versions, host
JSON_RECORDS = 3_000


class DiskEstimate(NamedTuple):
    bytes_per_realization: float
    #: how it was obtained, for the user
    source: str


class PilotTiming(NamedTuple):
    lanes: int
    compile_s: float  # generator and inference program, first call (or cache load)
    simulate_s: float  # one batch's simulation, compiled
    infer_s: float  # one batch's inference, compiled
    devices: int

    @property
    def batch_s(self) -> float:
        return self.simulate_s + self.infer_s


def _dir_bytes(d: Path) -> int:
    return sum(p.stat().st_size for p in d.iterdir() if p.is_file())


def _measured(plan: Plan, most: int = 8) -> DiskEstimate | None:
    """The median size of up to ``most`` complete realizations of this campaign."""
    done = [r.run_id for r in plan.realizations if plan.status.get(r.run_id) == "done"][:most]
    if not done:
        from ..io import realization_status

        done = [r.run_id for r in plan.realizations[: 4 * most]
                if realization_status(plan.output_dir, r.run_id, plan.expect) == "done"]  # fmt: skip
        done = done[:most]
    if not done:
        return None
    sizes = [_dir_bytes(plan.output_dir / rid) for rid in done]
    return DiskEstimate(statistics.median(sizes), f"measured: the median of {len(done)} "
                        f"complete realization(s) in {plan.output_dir}")  # fmt: skip


def _from_shapes(plan: Plan) -> DiskEstimate:
    """From the method's output shapes (traced on one stamp, nothing computed)."""
    import jax
    import numpy as np

    from .. import runtime
    from ..core.batching import realization_keys
    from ..core.methods import get as get_method
    from ..core.posterior import build_posterior
    from ..io import to_strict_json

    spec = plan.spec
    im = spec.model.image
    with runtime.scoped():
        runtime.configure(spec.precision == "float64", "off")
        dtype = jax.numpy.result_type(float)
        method = get_method(spec.method, spec.inference)
        post = build_posterior(spec.model)
        key = realization_keys([0], spec.rng_seed)[0]
        obs = jax.ShapeDtypeStruct((im.n_objects, im.size_y, im.size_x), dtype)
        out = jax.eval_shape(lambda k, o: method.fit(k, o, post), key, obs)
    leaves = {**out.samples, **out.stats}
    data = sum(math.prod(v.shape) * np.dtype(v.dtype).itemsize for v in leaves.values())
    data += math.prod(obs.shape) * np.dtype(dtype).itemsize
    n_draws = max((math.prod(v.shape[:2]) for v in out.samples.values()), default=0)
    n_latents = sum(math.prod(v.shape[2:]) for v in out.samples.values())
    config = len(json.dumps(to_strict_json(plan.cfg.model_dump(mode="json"))))
    total = (data + NC_PER_FILE + NC_PER_VARIABLE * (len(leaves) + 1)
             + 2 * config + JSON_RECORDS)  # fmt: skip
    return DiskEstimate(total, f"from the posterior's shapes: {n_draws} draws x {n_latents} "
                        f"latent values ({np.dtype(dtype).name}), the stamps and the records")  # fmt: skip


def disk_estimate(plan: Plan) -> DiskEstimate:
    """Bytes per realization: measured in the output root when it holds complete
    realizations of this campaign, else from the shapes the plan implies."""
    return _measured(plan) or _from_shapes(plan)


def pilot(plan: Plan) -> PilotTiming:
    """Simulate one batch of the campaign's lanes, compile the inference program and run
    it once; the compilation cache (``--cache-dir``, default under the output root) is
    used and filled, no realization is written."""
    import jax

    from .. import runtime
    from ..core.batching import pad_to
    from ..engine import batch_inputs, inference_program, lane_chunk_for

    spec, lanes = plan.spec, plan.batch_size
    reals = pad_to(list(plan.todo or plan.mine)[:lanes], lanes)
    cache_dir = plan.options.cache_dir or runtime.default_cache_dir(plan.output_dir)
    with runtime.scoped():
        runtime.configure(spec.precision == "float64", cache_dir)
        t0 = time.perf_counter()
        sim, keys = batch_inputs(spec, reals)
        jax.block_until_ready(sim.images)
        t_sim_first = time.perf_counter() - t0
        t0 = time.perf_counter()
        sim, keys = batch_inputs(spec, reals)
        jax.block_until_ready(sim.images)
        t_sim = time.perf_counter() - t0
        _, program = inference_program(spec, None, lane_chunk_for(plan.lane_chunk, spec))
        t0 = time.perf_counter()
        compiled = program.lower(keys, sim.images).compile()
        t_compile = time.perf_counter() - t0
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(keys, sim.images))
        t_infer = time.perf_counter() - t0
        devices = len(jax.local_devices())
    return PilotTiming(lanes, max(t_sim_first - t_sim, 0.0) + t_compile, t_sim, t_infer, devices)


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.3g} {unit}"
        n /= 1000
    raise AssertionError  # unreachable


def _secs(s: float) -> str:
    if s < 120:
        return f"{s:.3g} s"
    if s < 7200:
        return f"{s / 60:.3g} min"
    return f"{s / 3600:.3g} h"


def estimate_lines(plan: Plan, *, with_pilot: bool = False,
                   notify: Callable[[str], None] = logger.info) -> list[str]:  # fmt: skip
    """The dry run's estimate lines: disk (always) and wall time (``with_pilot``)."""
    n_todo, n_plan = len(plan.todo), len(plan.realizations)
    disk = disk_estimate(plan)
    b = disk.bytes_per_realization
    lines = [f"disk: ~{_size(b)} per realization ({disk.source}); this task's {n_todo} to run "
             f"~{_size(b * n_todo)}, the whole plan of {n_plan} ~{_size(b * n_plan)}"]  # fmt: skip
    if not with_pilot:
        lines.append("time: add --pilot for an estimate (it compiles the program and times one "
                     f"{plan.batch_size}-lane batch)")  # fmt: skip
        return lines
    notify(f"pilot: compiling and timing one {plan.batch_size}-lane batch ...")
    t = pilot(plan)
    n_batches = math.ceil(n_todo / t.lanes) if n_todo else 0
    lines.append(f"pilot ({t.lanes}-lane batch): compile {_secs(t.compile_s)} (once per "
                 f"process; less from a warm compilation cache), then {_secs(t.batch_s)} per "
                 f"batch (simulation {_secs(t.simulate_s)}, inference {_secs(t.infer_s)}), "
                 f"{_secs(t.batch_s / t.lanes)} per realization")  # fmt: skip
    lines.append(f"time: this task's {n_todo} realization(s) in {n_batches} batch(es): "
                 f"~{_secs(n_batches * t.batch_s)} after compiling, "
                 f"~{_secs(n_batches * t.batch_s + t.compile_s)} with it")  # fmt: skip
    if t.devices > 1:
        lines.append(f"  (the pilot ran on one device; the run splits each batch over "
                     f"{t.devices})")  # fmt: skip
    return lines
