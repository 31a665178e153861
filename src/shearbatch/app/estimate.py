"""``bias-run --dry-run``'s estimates: the disk a realization takes and (``--pilot``) the
wall time of this task, from the compiled program's timing on one batch.

Disk: measured from complete realizations of the campaign already in the output root when
there are some, else from the pilot batch's outputs, else from the shapes the plan implies:
the method's draws (its settings' chains x samples; a method whose settings do not say has
its ``fit`` traced with ``jax.eval_shape``, nothing computed) times the posterior's latent
values (an abstract trace of the model) times the bytes of the precision, plus the observed
stamps and the netCDF and JSON records around them. Time: the dry run alone cannot know it (a method's cost depends on the data); the
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

#: what netCDF-4/HDF5 adds per variable (header, attributes) and per file (superblock,
#: groups), and the JSON records besides the config that convergence.json holds
#: (diagnostics, plan, versions, host; truth.json): fitted to this package's own files
#: (16x16 Level 0 and 32x32 S/N 30 MAP realizations: 14.4 KB and 19.3 KB of netCDF
#: overhead for 9 and 14 variables, 3.3 and 4.0 KB of JSON besides the config);
#: tests/app/test_campaign_identity.py checks the estimate against written realizations
NC_PER_VARIABLE = 1_000
NC_PER_FILE = 5_500
JSON_RECORDS = 3_500
#: coordinate variables of posterior.nc: chain and draw in posterior and sample_stats,
#: galaxy in observed_data and posterior
NC_COORDINATES = 6


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
    #: bytes of one realization's draws and per-draw statistics, as the program returned them
    draws_bytes: float = 0.0
    n_variables: int = 0
    draws_per_chain: int = 0

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


def _draws(plan: Plan) -> tuple[int, int] | None:
    """(chains, draws per chain) from the method's settings (``<method>_config``: ``chains``
    x ``samples`` / ``num_samples``), None when they do not say."""
    settings = plan.spec.inference.settings
    samples = getattr(settings, "num_samples", getattr(settings, "samples", None))
    if not isinstance(samples, int):
        return None
    chains = getattr(settings, "chains", getattr(settings, "num_chains", 1))
    return (chains if isinstance(chains, int) else 1), samples


def _record_bytes(plan: Plan, n_variables: int, draws_per_chain: int) -> int:
    """netCDF overhead (and the int64 draw coordinates of the posterior and sample_stats
    groups) and the JSON records (convergence.json holds the config)."""
    from ..io import to_strict_json

    config = len(json.dumps(to_strict_json(plan.cfg.model_dump(mode="json"))))
    return (NC_PER_FILE + NC_PER_VARIABLE * (n_variables + NC_COORDINATES)
            + 2 * 8 * draws_per_chain + config + JSON_RECORDS)  # fmt: skip


def _from_shapes(plan: Plan) -> DiskEstimate:
    """draws x latent values x bytes of the precision, the stamps and the records. The
    latents are the posterior's sites (an abstract trace of the model); the draws the
    method's settings, else the shapes of its ``fit`` traced on one stamp (slower)."""
    import jax
    import numpy as np

    from ..core.posterior import build_posterior
    from ..engine import runtime

    spec = plan.spec
    im = spec.model.image
    with runtime.scoped():
        runtime.configure(spec.precision == "float64", "off")
        dtype = np.dtype(jax.numpy.result_type(float))
        post = build_posterior(spec.model)
        n_latents = sum(math.prod(shape) for shape in post.sites.values())
        draws = _draws(plan)
        n_stats = 0
        if draws is None:  # a method whose settings do not say: trace its fit
            from ..core.batching import realization_keys
            from ..core.methods import get as get_method

            method = get_method(spec.inference)
            key = realization_keys([0], spec.rng_seed)[0]
            obs = jax.ShapeDtypeStruct((im.n_objects, im.ny, im.nx), dtype)
            out = jax.eval_shape(lambda k, o: method.fit(k, o, post), key, obs)
            draws = next((v.shape[:2] for v in out.samples.values()), (1, 0))
            n_stats = sum(math.prod(v.shape) * np.dtype(v.dtype).itemsize
                          for v in out.stats.values())  # fmt: skip
    chains, per_chain = draws
    data = chains * per_chain * n_latents * dtype.itemsize + n_stats
    data += im.n_objects * im.ny * im.nx * dtype.itemsize
    total = data + _record_bytes(plan, len(post.sites) + 1, per_chain)
    what = f"{chains} x {per_chain}" if chains > 1 else f"{per_chain}"
    return DiskEstimate(total, f"from the posterior's shapes: {what} draws x {n_latents} "
                        f"latent values x {dtype.itemsize} bytes ({dtype.name}), the stamps "
                        "and the records; --pilot adds the sampler's statistics")  # fmt: skip


def disk_estimate(plan: Plan) -> DiskEstimate:
    """Bytes per realization: measured in the output root when it holds complete
    realizations of this campaign, else from the shapes the plan implies."""
    return _measured(plan) or _from_shapes(plan)


def pilot(plan: Plan) -> PilotTiming:
    """Simulate one batch of the campaign, compile the inference program and run it once;
    the compilation cache (``--cache-dir``, default under the output root) is used and
    filled, no realization is written. The batch is the one the engine would run: prepared
    as the engine prepares it (:func:`shearbatch.app.runner.prepare_plan`: the campaign's
    lanes or ``--batch-size auto``, the memory budget, the lane chunk; a batch that does
    not fit runs in lane chunks here too), on one device."""
    import jax

    from ..engine import runtime
    from .runner import prepare_plan

    spec = plan.spec
    todo = list(plan.todo or plan.mine)
    cache_dir = plan.options.execution.cache_dir or runtime.default_cache_dir(plan.output_dir)
    with runtime.scoped():
        runtime.configure(spec.precision == "float64", cache_dir)
        t0 = time.perf_counter()
        prepared = prepare_plan(plan, todo=todo, one_device=True)
        t_compile = time.perf_counter() - t0
        n = prepared.batch_size
        reals = todo[:n]
        t0 = time.perf_counter()
        sim, keys = prepared.inputs(reals)
        jax.block_until_ready(sim.images)
        t_sim_first = time.perf_counter() - t0
        t0 = time.perf_counter()
        sim, keys = prepared.inputs(reals)
        jax.block_until_ready(sim.images)
        t_sim = time.perf_counter() - t0
        # no ahead-of-time compile here: its first call compiles
        if prepared.lanes.compiled is None:
            t0 = time.perf_counter()
            jax.block_until_ready(prepared.program.lower(keys, sim.images).compile())
            t_compile += time.perf_counter() - t0
        t0 = time.perf_counter()
        out, _ = prepared.infer(keys, sim.images)
        t_infer = time.perf_counter() - t0
        devices = len(jax.local_devices())
    leaves = [*out.samples.values(), *out.stats.values()]
    nbytes = sum(v.size * v.dtype.itemsize for v in leaves) / n
    nbytes += math.prod(sim.images.shape[1:]) * sim.images.dtype.itemsize
    per_chain = next((int(v.shape[2]) for v in out.samples.values()), 0)  # (lane, chain, draw)
    return PilotTiming(n, max(t_sim_first - t_sim, 0.0) + t_compile, t_sim, t_infer, devices,
                       nbytes, len(leaves) + 1, per_chain)  # fmt: skip


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
    """The dry run's estimate lines: disk (always; from the pilot's outputs when it ran
    and no realization was measured) and wall time (``with_pilot``)."""
    n_todo, n_plan = len(plan.todo), len(plan.realizations)
    t = None
    if with_pilot:
        notify(f"pilot: compiling and timing one {plan.batch_size}-lane batch ...")
        t = pilot(plan)
    disk = _measured(plan)
    if disk is None and t is not None:
        disk = DiskEstimate(t.draws_bytes + _record_bytes(plan, t.n_variables, t.draws_per_chain),
                            "from the pilot batch's draws, statistics and stamps, and the "
                            "records")  # fmt: skip
    disk = disk or _from_shapes(plan)
    b = disk.bytes_per_realization
    lines = [f"disk: ~{_size(b)} per realization ({disk.source}); this task's {n_todo} to run "
             f"~{_size(b * n_todo)}, the whole plan of {n_plan} ~{_size(b * n_plan)}"]  # fmt: skip
    if t is None:
        lines.append("time: add --pilot for an estimate (it compiles the program and times one "
                     f"{plan.batch_size}-lane batch)")  # fmt: skip
        return lines
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
