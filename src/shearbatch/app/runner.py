"""Running a plan: the manifest, the claims, signals, the time limit and the engine.

:func:`run` is what ``bias-run`` and :func:`shearbatch.run` do once a :class:`Plan` is made.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from ..io.layout import COMMANDS_FILE
from .options import PlanError
from .plan import Plan
from .signals import StopOnSignal

if TYPE_CHECKING:
    from ..engine import Execution, Prepared

__all__ = ["COMMANDS_FILE", "Claimed", "Outcome", "compile_first", "execution_of", "n_complete",
           "prepare_plan", "record_command", "resume_hint", "run", "run_claimed",
           "write_manifest"]  # fmt: skip

logger = logging.getLogger("shearbatch")


class Claimed(NamedTuple):
    """This task's realizations to compute once claimed, how many another process holds
    (``held``: their run ids), and those claimed but found completed by another process
    since the plan."""

    todo: list[Any]
    skipped: int
    released_done: tuple[str, ...] = ()
    held: tuple[str, ...] = ()


class Outcome(NamedTuple):
    """What :func:`run` did: the engine's report, the realizations skipped because another
    ``bias-run`` held them, and the signal that stopped it (``signum`` 0: none)."""

    report: Any
    skipped: int = 0
    signum: int = 0
    signal_name: str = ""


def n_complete(plan: Plan) -> int:
    from ..io import realization_status

    return sum(realization_status(plan.output_dir, r.run_id, planned=r._asdict())
               in ("done", "failed") for r in plan.mine)  # fmt: skip


def resume_hint(plan: Plan, how: str = "the same command") -> str:
    return (f"{n_complete(plan)} of {len(plan.mine)} realization(s) of this task complete; "
            f"re-run {how} to resume")  # fmt: skip


def record_command(plan: Plan, args: Sequence[str]) -> None:
    """Append this bias-run command line ``args`` (time, array task, config hash) to the
    output root's commands.txt, which bias-stats --report quotes as provenance. Raises
    :class:`~shearbatch.io.WriteError` (one line: bias-run exits 4) when it cannot be
    written, e.g. a full disk (was a traceback and exit 1, found by bench/chaos_slurm.py:
    an array task starting while the disk was full)."""
    import shlex
    from datetime import UTC, datetime

    from ..io import WriteError

    out = plan.output_dir
    out.mkdir(parents=True, exist_ok=True)
    tid, tcount = plan.task
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    line = (f"{stamp} task {tid}/{tcount} config_hash {plan.spec.config_hash}: "
            f"{shlex.join(args)}\n")  # fmt: skip
    try:
        with open(out / COMMANDS_FILE, "a") as fh:  # one short append per process
            fh.write(line)
    except OSError as err:
        raise WriteError(f"cannot write {out / COMMANDS_FILE}: {err.strerror}") from None


def prepare_plan(plan: Plan, execution: Execution | None = None,
                 todo: Sequence[Any] | None = None, *, compile: bool = True,
                 one_device: bool = False) -> Prepared:  # fmt: skip
    """The engine's set-up of ``plan``'s realizations (``todo``, default the plan's):
    :func:`shearbatch.engine.prepare` with ``execution`` (default :func:`execution_of` the
    plan), the application's one call of the lane decision. ``compile=False``: nothing
    compiled, no device asked; the batches are of the campaign's lanes (``--batch-size
    auto`` too: :attr:`Plan.batch_size`), as the dry run prints them and ``--emit-sbatch``
    sizes the array. ``one_device``: the pilot's batch. Raises :class:`PlanError` (one
    line) when not even the smallest batch fits the memory budget."""
    import dataclasses

    from ..engine import BatchTooLarge, prepare

    ex = execution if execution is not None else execution_of(plan, {})
    if not compile:
        ex = dataclasses.replace(ex, batch_size=plan.batch_size)
    try:
        return prepare(plan.spec, plan.todo if todo is None else todo, ex, compile=compile,
                       one_device=one_device)  # fmt: skip
    except BatchTooLarge as err:
        raise PlanError(str(err)) from None


def compile_first(plan: Plan, cache: str, execution: Execution) -> Prepared | None:
    """Compile (or load) this campaign's generator and inference program while holding the
    cache's lock, so that array tasks starting together compile once between them: the
    first one compiles, writes the cache and leaves a marker (``.compiled-<key>``, the key
    hashing the config, method, lanes, precision, JAX version and devices); the others
    wait, see the marker and go on to read the cache (no second trace of the program).

    The program is compiled as the engine's lane decision compiles it
    (:func:`prepare_plan`: the campaign's lanes, the memory budget, the lane chunk), and
    what was prepared is returned, for the engine to run (:func:`shearbatch.engine.run`,
    no second lane decision); None where this task did not compile (the engine then
    prepares after the claims, from the cache)."""
    import hashlib
    import json

    import jax

    from ..engine import runtime

    spec, lanes = plan.spec, plan.batch_size
    devs = jax.devices()
    if plan.auto_batch:
        logger.info("--batch-size auto: each task picks its lanes from its device's memory; "
                    "no shared compile step")  # fmt: skip
        return None
    if len(jax.local_devices()) > 1:
        # the engine splits lanes over the devices with a program of its own making; a
        # warm-up of the one-device program here would compile something never used
        logger.info("%d local devices: no shared compile step, each task compiles or "
                    "reads the cache itself", len(jax.local_devices()))  # fmt: skip
        return None
    what = [spec.config_hash, spec.method, spec.precision, lanes, plan.lane_chunk,
            jax.__version__, devs[0].platform, devs[0].device_kind, len(devs)]  # fmt: skip
    key = hashlib.sha256(json.dumps(what, default=str).encode()).hexdigest()[:16]
    with runtime.compile_lock(cache) as waited:
        marker = Path(cache) / f".compiled-{key}"
        if marker.exists():
            logger.info("compile lock (waited %.1f s): the cache already holds the campaign's "
                        "%d-lane programs", waited, lanes)  # fmt: skip
            return None
        before = dict(runtime.CACHE_EVENTS)
        # the engine's lane decision and its programs (the generator, the inference program
        # at the width the budget allows, the residual check), so that the cache entries
        # are the ones the tasks will look up
        prepared = prepare_plan(plan, execution)
        prepared.warm_up()
        marker.touch()
        ev = runtime.CACHE_EVENTS
        logger.info("compile lock (waited %.1f s): %d cache hit(s), %d miss(es) for the "
                    "campaign's %d-lane programs", waited, ev["hits"] - before["hits"],
                    ev["misses"] - before["misses"], lanes)  # fmt: skip
        return prepared if prepared.lanes.compiled is not None else None


def write_manifest(plan: Plan) -> dict[str, Any]:
    """Write (or check) the output root's campaign.json and, with it, the frozen
    config.yaml; returns the per-realization provenance."""
    from ..io import manifest as mf

    root, cfg = plan.output_dir, plan.cfg.model_dump(mode="json")
    env = mf.environment()
    try:
        man, wrote = mf.write_manifest(root, config=cfg, expect=plan.expect,
                                       plan=dict(plan.plan_info),
                                       run_ids=[r.run_id for r in plan.realizations],
                                       batch_size=plan.batch_size, env=env,
                                       replace=plan.options.execution.overwrite,
                                       overrides=plan.overrides,
                                       frozen=plan.config_data)  # fmt: skip
    except ValueError as err:
        raise PlanError(str(err)) from None
    except OSError as err:
        raise PlanError(f"--output-dir: cannot write {root}: {err.strerror}") from None
    have = (man.get("plan") or {}).get("n_realizations")
    if not wrote and isinstance(have, int) and plan.plan_info["n_realizations"] < have:
        logger.info("this run plans %d of the campaign's %d realization(s) per grid point "
                    "(%s); bias-extract counts against the campaign's",
                    plan.plan_info["n_realizations"], have, root / mf.MANIFEST)  # fmt: skip
    return mf.realization_provenance(config=cfg, campaign=dict(plan.plan_info), env=env)


@contextlib.contextmanager
def claimed(plan: Plan, quiet: bool = False) -> Iterator[Claimed]:
    """This task's realizations to compute, claimed (see :mod:`shearbatch.io.claims`): those
    another process holds are skipped with a warning naming the overlap, and those completed
    by another process since the plan are not redone."""
    from ..io import claims, realization_status

    root, stack = plan.output_dir, contextlib.ExitStack()
    try:
        cl = stack.enter_context(claims.claim(root, [r.run_id for r in plan.todo]))
    except OSError as err:
        raise PlanError(f"--output-dir: cannot write {root}: {err.strerror}") from None
    with stack:
        if cl.others and not quiet:
            pids = sorted({p for p in cl.others.values() if p})
            ids = sorted(cl.others)
            logger.warning("overlapping slices: %d realization(s) of this task are being "
                           "computed by another bias-run%s into %s (%s%s); skipped here",
                           len(ids), f" (pid {', '.join(map(str, pids))})" if pids else "", root,
                           ", ".join(ids[:3]), ", ..." if len(ids) > 3 else "")  # fmt: skip
        mine = set(cl.mine)
        todo = [r for r in plan.todo if r.run_id in mine]
        done: tuple[str, ...] = ()
        if not plan.options.execution.overwrite:
            now = [r for r in todo
                   if realization_status(root, r.run_id, plan.expect, r._asdict()) != "done"]  # fmt: skip
            done = tuple(sorted(mine - {r.run_id for r in now}))
            if len(now) < len(todo) and not quiet:
                logger.info("%d realization(s) were completed by another process since the "
                            "plan; not redone", len(todo) - len(now))  # fmt: skip
            todo = now
        yield Claimed(todo, len(cl.others), done, tuple(sorted(cl.others)))


#: how long a task that found realizations claimed by another bias-run waits, once its own
#: are done, for those claims to be released (a cancelled, requeued or timed-out task's
#: process stops within its 5 s grace, SLURM's KillWait is 30 s by default) and computes
#: any the holder left unfinished; a holder still alive after that is left to finish them
CLAIM_WAIT_S = 60.0


def execution_of(plan: Plan, provenance: Mapping[str, Any], **run_kw: Any) -> Execution:
    """The one record the engine runs ``plan`` with (:class:`shearbatch.engine.Execution`):
    the plan's lanes (``auto``, or the campaign's), lane chunk, memory budget, writes,
    draws and the realizations' ``provenance``; ``run_kw``: this run's ``progress``,
    ``stop`` and ``deadline``."""
    from ..engine import Execution

    return Execution(output_dir=plan.output_dir,
                     batch_size="auto" if plan.auto_batch else plan.batch_size,
                     lane_chunk=plan.lane_chunk, memory_budget=plan.options.execution.memory_budget,
                     overlap=plan.options.execution.overlap, provenance=provenance,
                     draws=plan.cfg.campaign.draws, **run_kw)  # fmt: skip


def run_claimed(plan: Plan, provenance: dict[str, Any], *, claim_wait: float | None = None,
                prepared: Prepared | None = None, **engine_kw: Any) -> tuple[Any, int]:  # fmt: skip
    """Claim this task's realizations and run them with one
    :class:`~shearbatch.engine.Execution` (:func:`execution_of`; ``engine_kw``: its
    progress / stop / deadline), prepared once (:func:`prepare_plan`, after the claims;
    ``prepared``: what :func:`compile_first` prepared, run as it is). Returns the engine's
    report and the number skipped because another process held them.

    Realizations another process held are not lost when it dies: once this task's own are
    done, it polls their claims for up to ``claim_wait`` seconds (:data:`CLAIM_WAIT_S`),
    takes over each one released unfinished (the holder was cancelled, requeued or hit
    its time limit: a re-submitted task that started while the stopped one was still
    exiting) and computes it; one completed by its holder is skipped, never redone."""
    import dataclasses
    import time

    from .. import engine as eng

    execution = execution_of(plan, provenance, **engine_kw)
    made = [prepared]

    def engine(todo: list[Any]) -> Any:
        # one lane decision: made for this task's claimed realizations (or by compile_first),
        # then the same program and lanes for any taken over
        done = made[0]
        made[0] = prepare_plan(plan, execution, todo) if done is None else done.again(todo)
        return eng.run(made[0])

    with claimed(plan) as cl:
        report = engine(cl.todo)
    others = [r for r in plan.todo if r.run_id in set(cl.held)]
    wait = CLAIM_WAIT_S if claim_wait is None else claim_wait
    stop, deadline = engine_kw.get("stop"), engine_kw.get("deadline")
    until = time.monotonic() + wait
    taken = 0
    while others and report.stopped is None and wait > 0:
        with claimed(dataclasses.replace(plan, todo=tuple(others)), quiet=True) as cl2:
            if cl2.todo:
                logger.info("%d realization(s) another bias-run held were released unfinished; "
                            "computing them here", len(cl2.todo))  # fmt: skip
                report = _merge(report, engine(cl2.todo))
                taken += len(cl2.todo)
            mine = {r.run_id for r in cl2.todo} | set(cl2.released_done)
        others = [r for r in others if r.run_id not in mine]
        if not others or time.monotonic() > until:
            break
        if (stop is not None and stop.is_set()) or (deadline and time.time() > deadline):
            break
        time.sleep(1.0)
    if others and wait > 0:
        logger.info("%d realization(s) still held by another bias-run after %.0f s; left to it",
                    len(others), wait)  # fmt: skip
    return report, cl.skipped - taken


def _merge(a: Any, b: Any) -> Any:
    """Two engine reports of one task as one."""
    return a._replace(n_ok=a.n_ok + b.n_ok, n_failed=a.n_failed + b.n_failed,
                      failed=[*a.failed, *b.failed], wall_s=a.wall_s + b.wall_s,
                      batch_times=[*a.batch_times, *b.batch_times], stopped=b.stopped,
                      n_written=a.n_written + b.n_written)  # fmt: skip


def run(
    plan: Plan,
    *,
    progress: bool = False,
    deadline: float | None = None,
    signals: bool = True,
    command: Sequence[str] | None = None,
    preview: Path | None = None,
    notify: Callable[[str], None] = logger.info,
) -> Outcome:
    """Run ``plan``: configure JAX (precision, compilation cache), write the manifest,
    claim this task's realizations and run the engine on them.

    ``deadline`` (``time.time()`` seconds, :func:`~shearbatch.app.signals.deadline`): no
    batch starts that would not end before it. ``signals``: SIGINT / SIGTERM stop the run
    cleanly between batches (:class:`StopOnSignal`; leave it off in a notebook, whose
    interrupt it would turn into an exit). ``command``: the command line recorded in the
    output root's commands.txt. ``preview``: a PNG of the first stamps, written before the
    run and again with the fitted models after it. ``notify``: where user-facing lines go.
    Raises :class:`PlanError` (the output root cannot be written or holds another campaign)
    and :class:`~shearbatch.io.WriteError` (an output could not be written; every
    realization is then complete or absent).
    """
    from ..engine import runtime
    from .preview import preview as write_preview

    cache_dir = plan.options.execution.cache_dir or runtime.default_cache_dir(plan.output_dir)
    stopper = StopOnSignal(lambda: resume_hint(plan)) if signals else contextlib.nullcontext()
    with runtime.scoped(), stopper as stop:
        cache = runtime.configure(plan.spec.precision == "float64", cache_dir)
        runtime.reset_cache_events()
        if preview is not None:
            write_preview(plan, preview, notify=notify)
        provenance = write_manifest(plan)
        engine_kw = {"progress": progress, "deadline": deadline,
                     "stop": stop.event if stop is not None else None}  # fmt: skip
        prepared = None
        if plan.task[1] > 1 and plan.todo:
            prepared = compile_first(plan, cache, execution_of(plan, provenance, **engine_kw))
        if command is not None:
            record_command(plan, command)
        report, skipped = run_claimed(plan, provenance, prepared=prepared, **engine_kw)
        if preview is not None:  # again, now with the model at each estimate and the residual
            write_preview(plan, preview, fitted=True, notify=notify)
    ev = runtime.CACHE_EVENTS
    logger.info("persistent compilation cache: %d hit(s), %d miss(es)", ev["hits"], ev["misses"])
    signum, name = (stop.signum, stop.name) if stop is not None else (0, "")
    return Outcome(report, skipped, signum if report.stopped == "signal" else 0, name)


def preview_only(plan: Plan, path: Path, notify: Callable[[str], None] = logger.info) -> None:
    """``--dry-run --preview``: the PNG of the first stamps, nothing else computed or written."""
    from ..engine import runtime
    from .preview import preview as write_preview

    cache_dir = plan.options.execution.cache_dir or runtime.default_cache_dir(plan.output_dir)
    with runtime.scoped():
        runtime.configure(plan.spec.precision == "float64", cache_dir)
        write_preview(plan, path, notify=notify)
