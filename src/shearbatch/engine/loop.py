"""The campaign pipeline: batches -> generate -> batched(method.fit) -> records -> write.

Every batch has the same lane count (the last is padded by repeating its last
realization; padding lanes are never written), so the generator and the
inference program are compiled once per campaign and reused. The engine never
names an inference method: it builds one from the registry and uses only its
``fit`` / ``diagnose`` / ``batch_report``. A realization with a fatal flag is
written with ``status: "failed"``, its flags and reasons; its companions are
written normally.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._version import code_version
from ..campaign import Realization, make_batches, simulate_realizations
from ..core.batching import (
    batched,
    batched_fit,
    chunk_width,
    default_chunk,
    lane_mesh,
    lanes_for,
    pad_to,
    realization_keys,
    refill_lanes,
)
from ..core.checks import chi2_program
from ..core.generate import SimBatch
from ..core.memory import (
    Budget,
    ProgramMemory,
    fmt_bytes,
    lanes_that_fit,
    lanes_that_fit_line,
    memory_budget,
    program_memory,
)
from ..core.methods import get as get_method
from ..core.posterior import build_posterior
from ..core.priors import PRIOR_PULL_MAX, campaign_pull
from ..io import WriterPool, clean_orphans
from ..io.writer import SerialWriter, Sink, raw_json
from ..spec import RunSpec
from .health import UnhealthyBatch, check_batch
from .records import batch_records, estimator_draws, host_batch

__all__ = [
    "AUTO_MAX_LANES",
    "BatchTooLarge",
    "CampaignReport",
    "Execution",
    "Job",
    "Lanes",
    "Prepared",
    "Program",
    "ProgramTooWide",
    "UnhealthyBatch",
    "batch_inputs",
    "build_program",
    "compile_lanes",
    "default_writers",
    "inference_program",
    "lane_chunk_for",
    "plan_lanes",
    "prepare",
    "run",
]

logger = logging.getLogger(__name__)


class CampaignReport(NamedTuple):
    n_ok: int
    n_failed: int
    failed: list[str]
    wall_s: float
    batch_times: list[float]
    #: why the run stopped before its last batch: ``"signal"``, ``"time limit"`` or None
    stopped: str | None = None
    #: realizations written by this run
    n_written: int = 0


def inference_program(
    spec: RunSpec,
    mesh: jax.sharding.Mesh | None = None,
    chunk: int | None = None,
    refill: bool = True,
) -> tuple[Any, Callable[[jax.Array, jax.Array], Any]]:
    """``(method, program)``: the batched ``program(keys, obs) -> Draws`` of ``spec``'s
    method (lanes split over ``mesh``'s devices when given, evaluated ``chunk`` lanes at
    a time when given: :func:`shearbatch.core.batching.batched`). A method with a
    batch-level fit (:attr:`~shearbatch.core.methods.base.Method.fit_batch`: MAP's
    interim fit, whose optimiser lanes are refilled from the batch) runs that
    (:func:`shearbatch.core.batching.batched_fit`) unless ``refill`` is False (the
    vmapped per-realization fit in lockstep, for comparison).

    Where an entry point set a store of exported programs (``runtime.configure``), a
    one-device program is an :class:`~shearbatch.engine.exported.Exportable`: exported on its
    first call and written there, or loaded from there by a later process of the campaign
    without tracing it (:mod:`shearbatch.engine.exported`)."""
    from . import exported

    method = get_method(spec.inference)
    if not refill:
        method = method._replace(fit_batch=None)

    def build() -> Callable[[jax.Array, jax.Array], Any]:
        post = build_posterior(spec.model)
        if method.fit_batch is not None:
            return batched_fit(lambda keys, obs, c: method.fit_batch(keys, obs, post, c),
                               mesh, chunk)  # fmt: skip
        return batched(lambda key, obs: method.fit(key, obs, post), mesh, chunk)

    if mesh is not None or exported.store() is None:  # shard_map: traced by every process
        return method, build()
    what = {"program": "inference", "model": spec.model, "method": spec.method,
            "inference": spec.inference, "chunk": chunk, "fit": exported.code_of(method.fit)}  # fmt: skip
    if method.fit_batch is not None:  # (a key without it names the vmapped fit's program)
        what["fit_batch"] = exported.code_of(method.fit_batch)
    return method, exported.exportable(build, what, "inference program")


def lane_chunk_for(lane_chunk: int | str | None, spec: RunSpec) -> int | None:
    """The chunk width asked for: ``"auto"`` -> :func:`default_chunk` of the backend for
    ``spec``'s method (its ``cpu_chunk``); None, 0 or ``"off"`` -> None (the whole batch
    in one ``vmap``); a number -> itself."""
    if lane_chunk == "auto":
        return default_chunk(get_method(spec.inference).cpu_chunk)
    if lane_chunk in (None, "off"):
        return None
    return int(lane_chunk) or None


def generate(spec: RunSpec, batch: Sequence[Realization]) -> SimBatch:
    """``batch``'s stamps (:func:`shearbatch.campaign.simulate_realizations`), the generator
    handed the engine's store of exported programs (:func:`exported.exportable`)."""
    from . import exported

    return simulate_realizations(spec, batch, store=exported.exportable)


def batch_inputs(
    spec: RunSpec,
    batch: Sequence[Realization],
    simulate_fn: Callable[[RunSpec, Sequence[Realization]], SimBatch] | None = None,
) -> tuple[SimBatch, jax.Array]:
    """The simulated batch and its per-realization inference keys (one per seed)."""
    sim = (simulate_fn or generate)(spec, batch)
    return sim, realization_keys([r.seed for r in batch], spec.rng_seed)


class Program(NamedTuple):
    """An inference program (:func:`build_program`): ``program(keys, images) -> Draws``,
    its method, and the simulated inputs it was built for (None when built without)."""

    method: Any
    program: Callable[[jax.Array, jax.Array], Any]
    sim: SimBatch | None = None
    keys: jax.Array | None = None

    def __call__(self) -> Any:
        """The program on its own inputs."""
        return self.program(self.keys, self.sim.images)

    def compile(self) -> Any:
        """The program lowered and compiled ahead of time for its inputs' shapes."""
        jax.block_until_ready(self.sim.images)
        return self.program.lower(self.keys, self.sim.images).compile()


def build_program(
    spec: RunSpec,
    realizations: Sequence[Realization] | None = None,
    *,
    mesh: jax.sharding.Mesh | None = None,
    chunk: int | None = None,
    simulate_fn: Callable[[RunSpec, Sequence[Realization]], SimBatch] | None = None,
) -> Program:
    """generate -> realization keys -> the batched inference program of ``spec``'s method.

    ``realizations`` (one batch, already padded to the lane count): simulated, with their
    keys, as the program's inputs (``Program.sim`` / ``.keys``); without them only the
    program is built (the engine simulates each batch with :func:`batch_inputs`). ``mesh``
    and ``chunk``: :func:`inference_program`. The one set-up of the engine, the compile
    warm-up of ``bias-run`` and the benchmarks."""
    method, program = inference_program(spec, mesh, chunk)
    if realizations is None:
        return Program(method, program)
    sim, keys = batch_inputs(spec, realizations, simulate_fn)
    return Program(method, program, sim, keys)


class BatchTooLarge(ValueError):
    """Not even the smallest batch fits the memory budget: one line naming the flag."""


#: a CPU batch wider than this in one vmap (no lane chunk) is warned about: XLA's CPU FFT
#: deadlocked once in a 4,096-lane one (docs/design.md)
CPU_WIDE_LANES = 256

#: ``--batch-size auto`` never plans more lanes than this (a batch this wide already keeps
#: a GPU busy; wider ones only delay the first written realization)
AUTO_MAX_LANES = 4096


class Lanes(NamedTuple):
    """How a campaign's batches run on the device (:func:`plan_lanes`)."""

    #: realizations per batch (simulated, inferred and written together)
    batch: int
    #: lanes of the compiled program; < ``batch`` when a batch runs in lane chunks
    width: int
    #: the compiled program (AOT) of ``width`` lanes, or None (called through jit)
    compiled: Any
    #: XLA's memory analysis of ``compiled`` (None where the backend gives none)
    memory: ProgramMemory | None
    #: the budget it was checked against
    budget: Budget | None
    #: one line: what was chosen and why
    why: str

    def run(
        self, program: Callable[..., Any], keys: jax.Array, images: jax.Array,
        check: Callable[..., Any] | None = None,
    ) -> tuple[Any, np.ndarray | None]:  # fmt: skip
        """The batch's draws on the host, and ``check(samples, images)`` per lane (None
        without ``check``), computed on the device before the draws leave it: one call of
        the program, or one per lane chunk of ``width`` (each chunk copied to the host as
        it ends)."""
        return self.launch(program, keys, images, check).land()[:2]

    def launch(
        self, program: Callable[..., Any], keys: jax.Array, images: jax.Array,
        check: Callable[..., Any] | None = None, waiter: Any = None,
    ) -> InFlight:  # fmt: skip
        """The batch dispatched to the device, not waited for: :meth:`InFlight.land` brings
        its draws (and checks) to the host. A batch that runs in one call of the program is
        called on ``waiter`` (an executor of one thread), so the host can write the previous
        batch while the device runs this one: a program with loops (a MAP fit, NUTS) blocks
        its caller until it ends on a GPU, whose while loops read their condition on the
        host; the thread also stamps the moment the device is done, for the log's inference
        time. Without ``waiter`` it is called here. A batch in lane chunks runs chunk by
        chunk, each copied to the host as it ends (its memory bound), when it lands."""
        fn = self.compiled if self.compiled is not None else program
        n, w, t0 = keys.shape[0], self.width, time.perf_counter()
        if w >= n:  # the whole batch in one call
            if waiter is not None:
                return InFlight(t0, None, waiter.submit(_run_to_end, fn, keys, images, check), None)
            out = fn(keys, images)
            c = check(out.samples, images) if check is not None else None
            return InFlight(t0, (out, c), None, None)
        return InFlight(t0, None, None, lambda: self._chunks(fn, keys, images, check))

    def _chunks(self, fn, keys, images, check) -> tuple[Any, np.ndarray | None]:
        n, w, parts = keys.shape[0], self.width, []
        for i in range(0, n, w):
            k, im = keys[i : i + w], images[i : i + w]
            if short := max(0, w - k.shape[0]):  # the last chunk, padded
                k, im = (jnp.concatenate([a, jnp.repeat(a[-1:], short, axis=0)]) for a in (k, im))
            out = fn(k, im)
            c = check(out.samples, im) if check is not None else None
            m = k.shape[0] - short
            parts.append(jax.tree.map(lambda a, m=m: np.asarray(a)[:m], (out, c)))
        if len(parts) == 1:
            return parts[0]
        return jax.tree.map(lambda *a: np.concatenate(a, axis=0), *parts)


def _to_host_async(tree: Any) -> None:
    """Start copying ``tree``'s device arrays to the host as soon as each is computed, so
    that bringing them over later does not wait for the transfer."""
    for a in jax.tree.leaves(tree):
        if hasattr(a, "copy_to_host_async"):
            a.copy_to_host_async()


def _run_to_end(fn: Callable[..., Any], keys: jax.Array, images: jax.Array,
                check: Callable[..., Any] | None) -> tuple[Any, float]:  # fmt: skip
    """``((draws, checks), t_end)``: the program and its checks run (the copy to the host
    started as they end), and when the device was done (``perf_counter``; JAX waits
    without the GIL)."""
    out = fn(keys, images)
    c = check(out.samples, images) if check is not None else None
    _to_host_async((out, c))
    jax.block_until_ready((out, c))
    return (out, c), time.perf_counter()


class InFlight(NamedTuple):
    """A batch dispatched by :meth:`Lanes.launch`."""

    t_launch: float
    out: Any  # (draws, checks) on the device, or None (on the waiter, or lane chunks)
    running: Any  # the waiter's future of (out, t_end), or None
    run_chunks: Callable[[], Any] | None

    def land(self) -> tuple[Any, np.ndarray | None, float]:
        """``(draws, checks, device_s)`` on the host: ``device_s`` from the dispatch to the
        device's end (stamped by the waiter), or to the copy's end without one."""
        if self.run_chunks is not None:
            draws, c = self.run_chunks()
            return draws, c, time.perf_counter() - self.t_launch
        if self.running is not None:
            out, t_end = self.running.result()
        else:
            out, t_end = self.out, None
        draws, c = jax.tree.map(np.asarray, out)
        t_end = time.perf_counter() if t_end is None else t_end
        return draws, c, t_end - self.t_launch


def compile_lanes(program: Any, spec: RunSpec, lanes: int) -> tuple[Any, ProgramMemory | None]:
    """``program`` compiled ahead of time for ``lanes`` lanes of ``spec``'s stamps (the
    compile its first call would do; the persistent cache serves it the same way) and
    XLA's memory analysis of it; ``(None, None)`` where the program cannot be lowered."""
    if not hasattr(program, "lower"):
        return None, None
    im = spec.model.image
    keys = jax.ShapeDtypeStruct((lanes, 2), jnp.uint32)
    obs = jax.ShapeDtypeStruct((lanes, im.n_objects, im.ny, im.nx), jnp.result_type(float))
    lowered = program.lower(keys, obs)
    check_elements(lowered, lanes)
    compiled = lowered.compile()
    return compiled, program_memory(compiled, lanes)


class ProgramTooWide(BatchTooLarge):
    """A batch whose program would hold a tensor past the 32-bit element counts of XLA's
    kernels (:mod:`shearbatch.core.limits`): one line naming --batch-size."""


def check_elements(lowered: Any, lanes: int) -> None:
    """Raise :class:`ProgramTooWide` when the lowered program of ``lanes`` lanes holds a
    tensor of more than :data:`~shearbatch.core.limits.MAX_ELEMENTS` elements: on a GPU
    its inverse FFT would come back unscaled, silently (openxla/xla#45009). Checked on
    every backend, so that a campaign means the same on each. ~1 s at Level 2."""
    from ..core.limits import MAX_ELEMENTS, oversized

    if big := oversized(lowered.as_text()):
        raise ProgramTooWide(
            f"--batch-size {lanes}: the program would hold a tensor of {big[0].elements:,} "
            f"elements ({big[0].type}), more than the {MAX_ELEMENTS:,} XLA's GPU kernels "
            "count (its inverse FFT skips its scaling there: wrong answers, no error, "
            "openxla/xla#45009); use a smaller --batch-size")  # fmt: skip


def plan_lanes(
    spec: RunSpec,
    program: Any,
    batch_size: int | str,
    n_todo: int,
    *,
    budget: int | str | None = None,
    multiple: int = 1,
) -> Lanes:
    """The one lane decision of a campaign, made before its first batch runs.

    ``batch_size`` ``"auto"``: the program is compiled at ``multiple`` lanes (at least 8),
    XLA's memory analysis gives an upper bound per lane, and the batch is the most lanes
    that fit the budget (:func:`shearbatch.core.memory.memory_budget`), at most the
    realizations to run and :data:`AUTO_MAX_LANES`; that program is compiled and checked.
    A number: the program is compiled at that many lanes (the compile its first call
    would do) and checked; one that does not fit runs in lane chunks of the most lanes
    that do (every lane's result is its own whatever its companions: the fixed-lanes
    guarantee of :mod:`shearbatch.core.batching`), and one of which not even ``multiple``
    lanes fit raises :class:`BatchTooLarge`. Where the backend gives no memory analysis
    (or the program cannot be compiled ahead, e.g. over several devices), a number is
    used as it is and ``auto`` falls back to the realizations to run, at most 16.
    """
    auto = batch_size == "auto"
    bud = memory_budget(budget)
    if auto:
        probe = max(8, multiple)
        compiled, mem = compile_lanes(program, spec, probe)
        if mem is None:
            b = max(multiple, min(16, n_todo))
            return Lanes(
                b,
                b,
                None,
                None,
                bud,
                f"batch size auto: {b} lanes (this backend "
                "reports no program memory: the realizations to run, at most 16)",
            )
        fit = lanes_that_fit(mem, bud, multiple)
        if fit < multiple:
            raise BatchTooLarge(_too_large("--batch-size auto", mem, bud, multiple))
        want = -(-max(1, n_todo) // multiple) * multiple
        b = min(fit, want, AUTO_MAX_LANES)
        cap = ("the realizations to run" if b == want and b < fit else
               f"the cap of {AUTO_MAX_LANES}" if b == AUTO_MAX_LANES and b < fit else
               "the memory budget")  # fmt: skip
        if b != probe:
            compiled, mem2 = compile_lanes(program, spec, b)
            mem = mem2 or mem
        why = (f"batch size auto: {b} lanes (bound: {cap}; {fmt_bytes(mem.per_lane)} per "
               f"lane by XLA's memory analysis of the compiled program, {fit} lanes fit "
               f"{fmt_bytes(bud.bytes)}, {bud.source})")  # fmt: skip
        return Lanes(b, b, compiled, mem, bud, why)
    b = int(batch_size)
    compiled, mem = compile_lanes(program, spec, b)
    if mem is None:
        return Lanes(b, b, compiled, None, bud, f"batch size {b} (no memory analysis here)")
    if mem.total <= bud.bytes:
        return Lanes(b, b, compiled, mem, bud,
                     f"batch of {b} lanes: {mem.describe()}; budget {fmt_bytes(bud.bytes)} "
                     f"({bud.source})")  # fmt: skip
    fit = lanes_that_fit(mem, bud, multiple)
    if fit < multiple:
        raise BatchTooLarge(_too_large(f"--batch-size {b}", mem, bud, multiple))
    width, mem2 = fit, None
    for _ in range(4):  # another width may vectorise (and chunk) differently: check it
        compiled, mem2 = compile_lanes(program, spec, width)
        if mem2 is None or mem2.total <= bud.bytes:
            break
        width = min(width - multiple, lanes_that_fit_line(mem, mem2, bud, multiple))
        if width < multiple:
            raise BatchTooLarge(_too_large(f"--batch-size {b}", mem2, bud, multiple))
    why = (f"--batch-size {b} does not fit the memory budget (its program needs "
           f"{fmt_bytes(mem.total)}, {fmt_bytes(mem.per_lane)} per lane; budget "
           f"{fmt_bytes(bud.bytes)}, {bud.source}): each batch of {b} runs in lane chunks "
           f"of {width} (the largest batch that fits)")  # fmt: skip
    return Lanes(b, width, compiled, mem2 or mem, bud, why)


def _too_large(flag: str, mem: ProgramMemory, bud: Budget, multiple: int = 1) -> str:
    what = "one lane" if multiple == 1 else f"{multiple} lanes (the lane chunk x devices)"
    return (
        f"{flag}: not even {what} fit(s) the memory budget ({fmt_bytes(mem.per_lane)} "
        f"per lane by XLA's memory analysis, budget {fmt_bytes(bud.bytes)}, {bud.source}); "
        "raise --memory-budget or use a smaller config (stamps, galaxies, draws)"
    )


@dataclasses.dataclass(frozen=True)
class Execution:
    """How the engine runs a campaign's realizations: the one record the application layer
    hands it (:func:`run`; built from a plan by
    :func:`shearbatch.app.runner.execution_of`).

    ``batch_size`` is the lane count of the compiled program (a short batch is padded to
    it), or ``"auto"``: :func:`plan_lanes` picks it from ``memory_budget`` (bytes or
    ``"2GiB"``; default: the device's free memory), which also decides whether a batch
    that does not fit runs in lane chunks (:class:`BatchTooLarge` when not even one lane
    fits). ``lane_chunk``: lanes evaluated together inside the compiled program
    (:func:`lane_chunk_for`); it changes speed, not results beyond the last bit.
    ``overlap`` (default): batch k's realizations are written by a
    :class:`~shearbatch.io.WriterPool` (``writers`` workers of ``writer_kind``; by default
    :func:`default_writers` of this machine's cores) while batch k+1 runs; without it each
    is written in turn. ``provenance`` (config, plan, versions, code version, device:
    :func:`shearbatch.io.manifest.realization_provenance`) is recorded in every
    ``convergence.json``. ``draws``: what posterior.nc keeps (``campaign.draws``:
    :func:`~shearbatch.engine.records.estimator_draws`). ``stop`` (an event: SIGTERM,
    Ctrl-C) or ``deadline`` (``time.time()`` seconds) that the next batch would overrun
    stops the loop before its next batch."""

    output_dir: str | Path
    batch_size: int | str
    lane_chunk: int | str | None = "auto"
    memory_budget: int | str | None = None
    overlap: bool = True
    writers: int | None = None
    writer_kind: str | None = None
    provenance: Mapping[str, Any] | None = None
    draws: str = "all"
    progress: bool = False
    stop: threading.Event | None = None
    deadline: float | None = None


@dataclasses.dataclass(frozen=True)
class Prepared:
    """A campaign's realizations ready to run (:func:`prepare`): the inference program, the
    lane decision and the batches, made once; :func:`run` runs them, and the application's
    dry run, pilot and SLURM sizing read them."""

    spec: RunSpec
    #: the realizations to run, in order
    todo: tuple[Realization, ...]
    #: how they run (:class:`Execution`)
    execution: Execution
    #: the lane decision (:func:`plan_lanes`): ``lanes.batch`` realizations per batch,
    #: ``lanes.width`` lanes per call of the compiled ``lanes.compiled``, ``lanes.why``
    lanes: Lanes
    #: ``todo`` cut into batches of ``lanes.batch`` (the last padded when it runs)
    batches: tuple[Sequence[Realization], ...]
    #: the batched inference program ``program(keys, images) -> Draws`` (None: not compiled)
    program: Any = None
    #: the inference method (:mod:`shearbatch.core.methods`)
    method: Any = None
    #: the residual check ``check(samples, images) -> chi2 / N`` per lane (core/checks.py)
    check: Any = None
    #: the device mesh the lanes are split over (None: one device)
    mesh: Any = None
    #: devices in ``mesh`` (1 without one)
    n_dev: int = 1
    #: lanes evaluated together inside the program (:func:`lane_chunk_for`), or None
    chunk: int | None = None
    #: the generator (``simulate_fn(spec, batch) -> SimBatch``; :func:`generate`)
    simulate_fn: Callable[[RunSpec, Sequence[Realization]], SimBatch] | None = None
    #: seconds the lane decision took (counted in the first batch's time by :func:`run`)
    t_plan: float = 0.0
    #: seconds :func:`prepare` took (counted in the campaign's wall time by :func:`run`)
    t_setup: float = 0.0
    #: whether the first batch could start before the deadline, checked before the compile
    first_ok: bool = True

    @property
    def batch_size(self) -> int:
        """Realizations per batch: the lanes of each batch (:attr:`Lanes.batch`)."""
        return self.lanes.batch

    def again(self, todo: Sequence[Realization]) -> Prepared:
        """The same program and lane decision for other realizations (their own batches):
        no second decision, no second compile."""
        ex = self.execution
        return dataclasses.replace(
            self, todo=tuple(todo), batches=tuple(make_batches(todo, self.lanes.batch)),
            t_plan=0.0, t_setup=0.0, first_ok=ex.deadline is None or time.time() < ex.deadline,
        )  # fmt: skip

    def inputs(self, batch: Sequence[Realization]) -> tuple[SimBatch, jax.Array]:
        """``batch`` padded to the lane count, simulated, and its inference keys
        (:func:`batch_inputs`)."""
        return batch_inputs(self.spec, pad_to(batch, self.lanes.batch), self.simulate_fn)

    def infer(self, keys: jax.Array, images: jax.Array) -> tuple[Any, np.ndarray | None]:
        """The program's draws of one batch on the host, as the engine runs it
        (:meth:`Lanes.run`: in lane chunks where the decision says so)."""
        return self.lanes.run(self.program, keys, images)

    def warm_up(self) -> None:
        """Compile what the first batch runs, without running it: its generator (the batch
        simulated), the inference program at its lanes (where the lane decision did not
        compile it) and the residual check at the program's outputs: ``bias-run``'s shared
        compile step, so that array tasks find them in the cache."""
        sim, keys = self.inputs(self.todo[: self.lanes.batch])
        compiled = self.lanes.compiled
        if compiled is None:
            jax.block_until_ready(sim.images)
            compiled = self.program.lower(keys, sim.images).compile()
        # the engine runs the check on the device after each batch or lane chunk
        samples = getattr(compiled, "out_info", None)
        if samples is not None:
            self.check.lower(samples.samples, sim.images[: self.lanes.width]).compile()


def prepare(
    spec: RunSpec,
    todo: Sequence[Realization],
    execution: Execution,
    *,
    simulate_fn: Callable[[RunSpec, Sequence[Realization]], SimBatch] | None = None,
    compile: bool = True,
    one_device: bool = False,
) -> Prepared:
    """The engine's set-up of a campaign, before its first batch: the devices, the
    inference program of ``spec``'s method, the lane decision (:func:`plan_lanes`: the
    lanes ``execution`` asks for, rounded up to a multiple of the devices, or ``auto``;
    its memory budget; its lane chunk) and ``todo`` in batches. The one place the lane
    decision is made: :func:`run` runs what this returns.

    ``simulate_fn`` replaces the generator (e.g. to inject a broken realization).
    ``compile=False``: nothing is built, compiled or asked of the devices; the batches
    are of ``execution.batch_size`` lanes, which must be a number (the dry run's plan).
    ``one_device``: the lanes are not split over several devices (the pilot). Raises
    :class:`BatchTooLarge` (one line) when not even the smallest batch fits."""
    todo = tuple(todo)
    if not compile:
        b = int(execution.batch_size)
        lanes = Lanes(b, b, None, None, None, f"batch size {b} (not compiled)")
        return Prepared(spec, todo, execution, lanes, tuple(make_batches(todo, b)),
                        simulate_fn=simulate_fn)  # fmt: skip
    from . import exported

    t_start = time.perf_counter()
    mesh, n_dev, batch_size = _devices(execution.batch_size, one_device)
    chunk = lane_chunk_for(execution.lane_chunk, spec)
    method, program = build_program(spec, mesh=mesh, chunk=chunk)[:2]
    # the deadline is checked for the first batch before its program is compiled (as when
    # the compile happened in its first call); the compile counts in the first batch's time
    deadline = execution.deadline
    first_ok = deadline is None or time.time() < deadline
    t_plan = time.perf_counter()
    lanes = plan_lanes(spec, program, batch_size, len(todo), budget=execution.memory_budget,
                       multiple=n_dev * (chunk or 1))  # fmt: skip
    t_plan = time.perf_counter() - t_plan
    check = chi2_program(spec.model, store=exported.exportable)  # the residual (core/checks.py)
    return Prepared(spec, todo, execution, lanes, tuple(make_batches(todo, lanes.batch)),
                    program, method, check, mesh, n_dev, chunk, simulate_fn or generate,
                    t_plan, time.perf_counter() - t_start, first_ok)  # fmt: skip


def _devices(batch_size: int | str, one_device: bool = False,
             ) -> tuple[jax.sharding.Mesh | None, int, int | str]:  # fmt: skip
    """The device mesh (None: one device), its devices and the lanes asked for, rounded up
    to a multiple of the devices."""
    mesh = None if one_device else lane_mesh()
    n_dev = 1 if mesh is None else mesh.devices.size
    if batch_size != "auto" and (lanes := lanes_for(int(batch_size), mesh)) != batch_size:
        logger.info("batch size %d rounded up to %d lanes, a multiple of the %d devices",
                    batch_size, lanes, n_dev)  # fmt: skip
        batch_size = lanes
    if mesh is not None:
        logger.info("lanes split over %d devices: %s", n_dev,
                    ", ".join(f"{d.platform}:{d.id} ({d.device_kind})" for d in mesh.devices.flat))  # fmt: skip
    return mesh, n_dev, batch_size


@dataclasses.dataclass
class Job:
    """One batch on its way through the loop: launched (:meth:`_Run.launch`), landed on
    the host (:meth:`_Run.land`), then finished (:meth:`_Run.finish`: records and writes)."""

    ib: int
    """Its index among the campaign's batches."""
    batch: Sequence[Realization]
    """Its realizations (not padded)."""
    sim: SimBatch
    flight: InFlight
    t0: float
    """When its simulation started (``perf_counter``)."""
    t_sim: float
    """Its simulation's dispatch, seconds."""
    host: Any
    """The host estimators' measurement of it, pending (None without them)."""
    obs: np.ndarray | None = None
    """Its stamps on the host (set when it lands, as the next four)."""
    draws: Any = None
    chi2: np.ndarray | None = None
    t_infer: float = 0.0
    """Dispatch to the device's end, seconds."""
    t_wait: float = 0.0
    """The host idle for the device, seconds."""
    wall: float = 0.0
    """Dispatch to landing (the lane plan's time added to the first batch), seconds."""


class _Run:
    """One :func:`run` of the engine, in named steps: :meth:`__init__` (what
    :func:`prepare` made, the writers, the lanes' log lines), :meth:`loop` (:meth:`launch`
    batch k+1, then :meth:`finish` batch k while the device runs, then :meth:`land` batch
    k+1) and :meth:`close` (the writes ended, the report)."""

    def __init__(self, prepared: Prepared) -> None:
        p = self.prepared = prepared
        self.spec, self.todo, self.ex = p.spec, list(p.todo), p.execution
        self.simulate_fn = p.simulate_fn or generate
        self.t_start = time.perf_counter() - p.t_setup  # the set-up counts in the wall time
        self.mesh, self.n_dev, self.chunk = p.mesh, p.n_dev, p.chunk
        self.method, self.program, self.check = p.method, p.program, p.check
        self.host = None  # host estimators beside the method (inference.estimators)
        if self.spec.estimators:
            from ..estimators.host import HostEstimators

            self.host = HostEstimators(self.spec)
        self._start_writers()
        self._lanes()
        self._records()

    # ------------------------------------------------------------------ set-up steps

    def _start_writers(self) -> None:
        """The sink: writer processes start now, so that their interpreters start while the
        first batch runs."""
        auto_kind, auto_n = default_writers()
        self.writer_kind = self.ex.writer_kind or auto_kind
        self.writers = self.ex.writers or auto_n
        asked = self.prepared.lanes.batch if self.ex.batch_size != "auto" else None
        self.sink: Sink = WriterPool(self.writers, 2 * asked if asked is not None else 2,
                                     self.writer_kind, start=True) if self.ex.overlap else SerialWriter()  # fmt: skip

    def _lanes(self) -> None:
        """The lane decision :func:`prepare` made (:func:`plan_lanes`), logged, and how
        lanes run inside the program."""
        spec, p = self.spec, self.prepared
        self.lanes = lanes = p.lanes
        self.first_ok, self.t_plan = p.first_ok, p.t_plan
        logger.info("%s", lanes.why)
        self.batch_size = lanes.batch
        if (self.chunk is None and lanes.width > CPU_WIDE_LANES
                and jax.default_backend() == "cpu" and "xla_cpu_multi_thread_eigen=false"
                not in os.environ.get("XLA_FLAGS", "")):  # fmt: skip
            logger.warning("%d lanes in one vmap on the CPU (--lane-chunk off): XLA's CPU FFT "
                           "has deadlocked at such widths (docs/design.md); --lane-chunk auto "
                           "or XLA_FLAGS=--xla_cpu_multi_thread_eigen=false avoids it",
                           lanes.width)  # fmt: skip
        self.batches = list(p.batches)
        self.per_device = lanes.width // self.n_dev
        self.width: int | None
        if self.method.fit_batch is not None:  # the lanes of a refilled fit are the method's own
            self.width = None
            logger.info("%s: optimiser lanes refilled from the batch (%d lanes per device)",
                        spec.method, refill_lanes(self.per_device, self.chunk))  # fmt: skip
        elif (width := chunk_width(self.per_device, self.chunk)) is not None:
            self.width = width
            logger.info("lanes evaluated %d at a time inside the program (%d chunks per device)",
                        width, self.per_device // width)  # fmt: skip
        else:
            self.width = None

    def _records(self) -> None:
        """What every record repeats, the campaign's log line, the orphans of a killed run
        removed and the writers' bound."""
        spec, ex, todo = self.spec, self.ex, self.todo
        # the provenance every record repeats, encoded once (io.writer.RawJSON), and the
        # directories as plain strings (str(out_dir(...)), without a Path per realization)
        given = dict(ex.provenance or {})
        given["code"] = given.get("code") or code_version()  # every record names what wrote it
        self.prov = {k: raw_json(v) for k, v in given.items()}
        self.root = str(Path(ex.output_dir))
        self.dtype = str(jnp.result_type(float))
        self.status: dict[str, str] = {}
        self.times: list[float] = []
        self.hosts: list[float] = []  # each finished batch's host work (s)
        self.pulls: dict[str, list[float]] = {}
        self.bar = _progress_bar(ex.progress, len(todo), spec.method)
        logger.info("campaign: %d realizations, %d batch(es) of %d lanes, method %s, %s, %s",
                    len(todo), len(self.batches), self.batch_size, spec.method, self.dtype,
                    f"{self.writers} background {self.writer_kind} writer(s)" if ex.overlap
                    else "serial writes")  # fmt: skip
        if n_orphans := sum(clean_orphans(out_dir(ex.output_dir, r)) for r in todo):
            logger.info("removed %d temporary file(s) left by a killed run", n_orphans)
        if isinstance(self.sink, WriterPool):
            # at most two batches wait to be written; a process writer takes a few per job
            b = self.batch_size
            self.sink.bound(2 * b, group=max(1, min(16, b // (4 * self.writers))))

    # ------------------------------------------------------------------ the batch steps

    def launch(self, ib: int, batch: Sequence[Realization]) -> Job:
        """Simulate batch ``ib`` and dispatch its inference (not waited for)."""
        spec, mesh = self.spec, self.mesh
        t0 = time.perf_counter()
        sim, keys = batch_inputs(spec, pad_to(batch, self.batch_size), self.simulate_fn)
        _to_host_async(sim.images)  # not waited for: the host needs the stamps at landing
        t1 = time.perf_counter()
        if mesh is not None and ib == 0:
            out = self.program(keys, sim.images)
            shards = jax.tree.leaves(out)[0].addressable_shards
            logger.info("batch 1 lanes per device: %s", ", ".join(
                f"{s.device.platform}:{s.device.id} {s.data.shape[0]}" for s in shards))  # fmt: skip
            flight = InFlight(t1, (out, None), None, None)
        else:  # over several devices the draws come back sharded: checked on the host
            flight = self.lanes.launch(self.program, keys, sim.images,
                                       self.check if mesh is None else None, self.waiter)  # fmt: skip
        # the host estimators' cells of the same realizations, measured while the device runs
        host = self.host
        measuring = host.submit(pad_to(batch, self.batch_size), len(batch)) if host else None
        return Job(ib, batch, sim, flight, t0, t1 - t0, measuring)

    def land(self, job: Job) -> Job:
        """Wait for the device, bring the batch's draws to the host."""
        t = time.perf_counter()
        draws, chi2, t_infer = job.flight.land()
        job.obs = np.asarray(job.sim.images)
        if chi2 is None:
            chi2 = np.asarray(self.check(draws.samples, job.sim.images))
        job.draws, job.chi2, job.t_infer = draws, chi2, t_infer
        job.t_wait = time.perf_counter() - t
        return job

    def finish(self, job: Job) -> None:
        """Batch ``job``'s records, statistics and writes (queued to the sink), on the host
        while the device runs the next batch."""
        spec, method, sink = self.spec, self.method, self.sink
        t_host = time.perf_counter()
        ib, batch, draws, chi2, obs = job.ib, job.batch, job.draws, job.chi2, job.obs
        t_infer = job.t_infer
        report = {"index": ib, "size": self.batch_size, "n_real": len(batch)}
        if method.batch_report:  # lanes in lockstep: a chunk, or a device's lanes
            report.update(method.batch_report(draws, lockstep=self.width or self.per_device))
        if (eff := report.get("lockstep_efficiency")) is not None:
            logger.info("batch %d: lockstep efficiency %s", ib + 1, eff)
        if hint := report.pop("hint", None):
            logger.info("batch %d: %s", ib + 1, hint)
        hsim = host_batch(job.sim, obs)  # the per-realization records index host arrays
        runtime_s = t_infer / len(batch)
        prov = self.prov

        def extra(b: int) -> dict[str, Any]:  # what the engine adds to each record
            return {"batch": {**report, "lane": b}, "runtime_s": runtime_s, "provenance": prov}

        host = self.host
        estimates = iter(host.collect(job.host)) if host else None
        if estimates is not None:
            from ..estimators.host import with_estimates
        for r, rec in batch_records(spec, method, batch, draws, obs, hsim, self.dtype, chi2,
                                    extra):  # fmt: skip
            if estimates is not None:
                rec = with_estimates(rec, next(estimates))
            if self.ex.draws == "estimator":
                rec = estimator_draws(rec, spec.population is not None)
            conv, d = rec.convergence, os.path.join(self.root, r.run_id)
            sink.submit(d, rec)
            for site, v in conv.prior.items():
                self.pulls.setdefault(site, []).append(v["shrinkage"])
            self.status[d] = conv.status
            if conv.status != "ok":
                logger.warning("%s failed: %s", r.run_id, conv.reason)
        sink.flush()
        if self.bar is not None:
            self.bar.update(len(batch))
        # wall: this batch's dispatch to its landing (the previous batch's host work ran
        # meanwhile); simulation: its dispatch (a jitted generator runs on the device, in
        # inference); inference: dispatch to the device's end; host: this batch's records and
        # queued writes (done while the next batch ran); wait: the host idle for the device
        logger.info("batch %d/%d: %d realization(s) in %.2f s (simulation %.2f s, inference "
                    "%.2f s, host %.2f s, wait %.2f s)", ib + 1, len(self.batches), len(batch),
                    job.wall, job.t_sim, t_infer, time.perf_counter() - t_host,
                    job.t_wait)  # fmt: skip
        self.hosts.append(time.perf_counter() - t_host)

    def _stop_before(self, ib: int) -> str | None:
        """Why batch ``ib`` is not to start (``"signal"``, ``"time limit"``), or None."""
        stop, deadline, times = self.ex.stop, self.ex.deadline, self.times
        if stop is not None and ib == len(self.batches) - 1:  # before the check, not after
            logger.info("next: batch %d/%d, the last", ib + 1, len(self.batches))
        if stop is not None and stop.is_set():
            return "signal"
        # a batch's cost: its dispatch to landing, and its host work after that
        cost = [t + h for t, h in zip(times, self.hosts, strict=False)] or times
        if deadline is not None and not (_fits(cost, deadline) if times else self.first_ok):
            return "time limit"
        return None

    def loop(self) -> str | None:
        """Every batch: batch k+1 is dispatched before batch k's host work, which then runs
        while the device computes: the device waits only for a batch's simulation and its
        copy to the host. Returns why it stopped early (None: it did not)."""
        self.waiter = ThreadPoolExecutor(1, thread_name_prefix="shearbatch-device")
        self.unhealthy: str | None = None
        landed: Job | None = None
        stopped = None
        try:
            for ib, batch in enumerate(self.batches):
                if (stopped := self._stop_before(ib)) is not None:
                    break
                self.sink.check()
                job = self.launch(ib, batch)
                if landed is not None:
                    self.finish(landed)
                    landed = None
                job = self.land(job)
                job.wall = time.perf_counter() - job.t0 + (self.t_plan if not self.times else 0.0)
                self.times.append(job.wall)
                # a batch a healthy program never gives is not written (engine/health.py)
                if (bad := check_batch(job.draws, len(job.batch), ib, len(self.batches),
                                       self.batch_size)) is not None:  # fmt: skip
                    self.unhealthy, stopped = bad, "unhealthy"
                    break
                landed = job
            if landed is not None:
                self.finish(landed)
                landed = None
        except BaseException:
            self.sink.close(abandon=True)
            if self.host is not None:
                self.host.close(abandon=True)
            raise
        finally:
            self.waiter.shutdown(wait=False)
            if self.bar is not None:
                self.bar.close()
        return stopped

    def close(self, stopped: str | None) -> CampaignReport:
        """The writes ended and checked, the prior's pull judged, the report."""
        sink = self.sink
        sink.close()
        if self.host is not None:
            self.host.close()
        sink.check()
        written = set(sink.written)
        n_ok = sum(1 for d in written if self.status.get(d) == "ok")
        failed = sorted(Path(d).name for d in written if self.status.get(d) != "ok")
        wall = time.perf_counter() - self.t_start
        if (pull := campaign_pull(self.pulls)) is not None and pull > PRIOR_PULL_MAX:
            logger.warning("prior-dominated: the shear prior pulls each estimate towards its mean by "
                           "a median %.2g of the shear (m shifted by about -%.2g); use the default "
                           "flat prior (gal.shear.type: UniformDisk) for calibration campaigns",
                           pull, pull)  # fmt: skip
        if stopped and stopped != "unhealthy":
            logger.warning("stopped before batch %d of %d (%s)", len(self.times) + 1,
                           len(self.batches), stopped)  # fmt: skip
        logger.info("campaign done: %d ok, %d failed in %.1f s", n_ok, len(failed), wall)
        return CampaignReport(n_ok, len(failed), failed, wall, self.times, stopped, len(written))


def run(prepared: Prepared) -> CampaignReport:
    """The engine's entry point: infer every realization :func:`prepare` made ready and
    write its directory under ``prepared.execution.output_dir`` (:class:`Execution` says
    how).

    Every batch has the campaign's lane count (:func:`plan_lanes`, decided once by
    :func:`prepare`, before the first batch). Batch k+1 is simulated and dispatched to the device before batch k's
    records are made, so the host's work on batch k runs while the device computes batch
    k+1 (a batch in lane chunks runs when it lands); at most two batches wait to be
    written. A set ``stop`` event or a ``deadline`` that the next batch would overrun,
    estimated from the batches so far, stops the loop before its next batch; the writes
    already queued finish. With ``stop``, the log says when the last batch is next
    (``next: batch k/k, the last``), before the check that would stop it: a signal logged
    after that line came after the last check and stops no batch
    (tests/guarantees/test_interrupts.py). A batch whose results a healthy program never
    gives (:func:`~shearbatch.engine.health.check_batch`: most of its galaxies' importance
    weights collapsed) raises :class:`~shearbatch.engine.health.UnhealthyBatch` (one
    line) once the batches before it are written; it is not written. A write that fails raises
    :class:`~shearbatch.io.WriteError` (one line) once the writes in flight have ended;
    every realization is then complete or absent. Every ``convergence.json`` records the
    provenance next to its seed, batch size and config hash (the code version,
    :func:`~shearbatch._version.code_version`, also without it)."""
    eng = _Run(prepared)
    report = eng.close(eng.loop())
    if eng.unhealthy is not None:  # the batches before it written, it absent
        raise UnhealthyBatch(eng.unhealthy)
    return report


def default_writers(cores: int | None = None) -> tuple[str, int]:
    """``(kind, n)`` of the background writers on a machine of ``cores`` usable cores
    (default: this process's CPU affinity). netCDF-C is not thread-safe, so writer
    threads take turns on its files (and share the GIL): on a node with cores to spare
    (a GPU node: >= 4) spawned processes write in parallel, all cores but two (the
    engine's own threads), at most 16;
    on a small machine, whose cores the inference itself uses, two threads."""
    if cores is None:
        try:
            cores = len(os.sched_getaffinity(0))
        except AttributeError:  # pragma: no cover - not Linux
            cores = os.cpu_count() or 1
    if cores >= 4:
        return "process", min(16, cores - 2)
    return "thread", 2


def _fits(times: Sequence[float], deadline: float) -> bool:
    """Whether one more batch can end before ``deadline``: its cost is estimated as
    1.5x the slowest of the last three batches (the first batch, which compiles, is
    only used while nothing else is known)."""
    if not times:
        return time.time() < deadline
    recent = list(times[1:][-3:]) or list(times[:1])
    return time.time() + 1.5 * max(recent) <= deadline


def out_dir(root: str | Path, r: Realization) -> Path:
    return Path(root) / r.run_id


def _progress_bar(on: bool, total: int, desc: str):
    if not on:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="realization", desc=f"bias-run {desc}")
