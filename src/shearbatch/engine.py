"""Run a campaign: batches -> simulate -> infer -> split -> write.

Every batch has the same shape (the last is padded by repeating its last
realization; padding lanes are never written), so the generator and the
inference program are compiled once per campaign and reused. A realization
whose data, optimum or draws are non-finite is written with ``status:
"failed"`` and a reason; its companions are written normally.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from . import __version__
from .batch import InferenceModel, build_inference_model, pad_to, realization_keys
from .campaign import Realization, make_batches
from .config import Config, config_hash
from .diagnostics import failure_reason, map_diagnostics, nuts_diagnostics, vi_diagnostics
from .outputs import write_realization
from .simulate import SimBatch, simulate_batch, truth_records

__all__ = ["CampaignReport", "make_inference_program", "run_campaign"]

logger = logging.getLogger(__name__)


class CampaignReport(NamedTuple):
    n_ok: int
    n_failed: int
    failed: list[str]
    wall_s: float
    batch_times: list[float]


def make_inference_program(
    cfg: Config, model: InferenceModel
) -> Callable[[jax.Array, jax.Array], Any]:
    """The batched inference program of ``cfg.inference.method``: ``(keys, obs) -> result``."""
    method = cfg.inference.method
    if method == "map":
        from .infer import map as map_

        return map_.make_program(model, cfg.inference.map_config)
    if method == "vi":
        from .infer import vi

        return vi.make_program(model, cfg.inference.vi_config)
    if method == "nuts":
        from .infer import nuts

        return nuts.make_program(model, cfg.inference.nuts_config)
    raise ValueError(f"inference.method: {method!r} is not available")


def _lane_outputs(cfg: Config, lane: Any) -> tuple[dict, dict, dict]:
    """(posterior, sample_stats, diagnostics) of one realization, draws as (chain, draw, ...)."""
    method = cfg.inference.method
    if method == "nuts":
        samples = {k: np.asarray(v) for k, v in lane.samples.items()}
        stats = {
            "diverging": np.asarray(lane.diverging),
            "tree_depth": np.asarray(lane.tree_depth),
            "n_steps": np.asarray(lane.n_steps),
            "step_size": np.asarray(lane.step_size),
            "energy": np.asarray(lane.energy),
            "acceptance_rate": np.asarray(lane.accept_prob),
            "lp": -np.asarray(lane.potential),
        }
        nc = cfg.inference.nuts_config
        depth = nc.max_tree_depth_sampling or nc.max_tree_depth
        return samples, stats, nuts_diagnostics(lane, samples, depth)
    samples = {k: np.asarray(v)[None] for k, v in lane.samples.items()}
    if method == "map":
        stats = {"laplace_log_q": np.asarray(lane.log_q)[None]}
        return samples, stats, map_diagnostics(lane, samples)
    n = next(iter(samples.values())).shape[1]
    stats = {"final_loss": np.full((1, n), float(lane.final_loss))}
    return samples, stats, vi_diagnostics(lane, samples)


def _lanes_by_iter(n_steps: np.ndarray) -> np.ndarray:
    """(B, C, T) per-chain leapfrog counts -> (B * C lanes, T iterations)."""
    n = np.asarray(n_steps)
    return n.reshape(-1, n.shape[-1])


def run_campaign(
    cfg: Config,
    realizations: Sequence[Realization],
    *,
    output_dir: str | Path,
    batch_size: int,
    progress: bool = False,
    simulate_fn: Callable[[Config, Sequence[Realization]], SimBatch] | None = None,
) -> CampaignReport:
    """Infer every realization and write its directory under ``output_dir``.

    ``batch_size`` is the lane count of the compiled program; a short batch is
    padded to it. ``simulate_fn`` is the generator (default
    :func:`shearbatch.simulate.simulate_batch`; replaceable, e.g. to inject a
    broken realization).
    """
    simulate_fn = simulate_fn or simulate_batch
    t_start = time.perf_counter()
    out = Path(output_dir)
    todo = list(realizations)
    if not todo:
        logger.info("nothing to run")
        return CampaignReport(0, 0, [], 0.0, [])
    lanes = batch_size
    batches = make_batches(todo, lanes)
    method = cfg.inference.method
    model = build_inference_model(cfg)
    program = None
    chash = config_hash(cfg)
    dtype = str(jnp.result_type(float))
    n_ok, failed, times = 0, [], []
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(todo), unit="realization", desc=f"bias-run {method}")
    logger.info(
        "campaign: %d realizations, %d batch(es) of %d lanes, method %s, %s",
        len(todo),
        len(batches),
        lanes,
        method,
        dtype,
    )
    for ib, batch in enumerate(batches):
        t0 = time.perf_counter()
        padded = pad_to(batch, lanes)
        sim = simulate_fn(cfg, padded)
        keys = realization_keys([r.seed for r in padded], cfg.inference.rng_seed)
        if program is None:
            program = make_inference_program(cfg, model)
        result = jax.tree.map(np.asarray, program(keys, sim.images))
        obs = np.asarray(sim.images)
        t_infer = time.perf_counter() - t0
        batch_rec = {"index": ib, "size": lanes, "n_real": len(batch)}
        if method == "nuts":
            from .infer.nuts import lockstep_efficiency

            eff = {
                "warmup": lockstep_efficiency(_lanes_by_iter(result.warmup_n_steps)),
                "sampling": lockstep_efficiency(_lanes_by_iter(result.n_steps)),
            }
            depth_p99 = int(np.percentile(result.tree_depth, 99))
            batch_rec["lockstep_efficiency"] = eff
            batch_rec["sampling_tree_depth_p99"] = depth_p99
            logger.info(
                "batch %d: lockstep efficiency (useful/executed leapfrog steps) "
                "warmup %.2f, sampling %.2f",
                ib + 1,
                eff["warmup"],
                eff["sampling"],
            )
            nc = cfg.inference.nuts_config
            if eff["sampling"] < 0.5 and nc.max_tree_depth_sampling is None and ib == 0:
                q50, q90 = np.percentile(result.tree_depth, [50, 90])
                logger.info(
                    "sampling tree depth: median %d, p90 %d, p99 %d; every lane waits for "
                    "the deepest: capping inference.nuts_config.max_tree_depth_sampling "
                    "bounds that cost (README: NUTS on large batches)",
                    q50,
                    q90,
                    depth_p99,
                )
        truths = truth_records(cfg, batch, sim)
        for b, r in enumerate(batch):
            lane = jax.tree.map(lambda a, b=b: a[b], result)
            posterior, stats, diag = _lane_outputs(cfg, lane)
            reason = failure_reason(obs[b], posterior, diag)
            conv = {
                "run_id": r.run_id,
                "status": "failed" if reason else "ok",
                "reason": reason,
                "method": method,
                **diag,
                "batch": {**batch_rec, "lane": b},
                "runtime_s": t_infer / len(batch),
            }
            attrs = {
                "inference_method": method,
                "run_id": r.run_id,
                "seed": r.seed,
                "g1_true": r.g1,
                "g2_true": r.g2,
                "batch_size": lanes,
                "shearbatch_version": __version__,
                "config_hash": chash,
                "dtype": dtype,
            }
            write_realization(
                out / r.run_id,
                posterior=posterior,
                sample_stats=stats,
                observed=obs[b],
                attrs=attrs,
                truth=truths[b],
                convergence=conv,
            )
            if reason:
                failed.append(r.run_id)
                logger.warning("%s failed: %s", r.run_id, reason)
            else:
                n_ok += 1
        dt = time.perf_counter() - t0
        times.append(dt)
        if bar is not None:
            bar.update(len(batch))
        else:
            logger.info(
                "batch %d/%d: %d realization(s) in %.2f s (inference %.2f s)",
                ib + 1,
                len(batches),
                len(batch),
                dt,
                t_infer,
            )
    if bar is not None:
        bar.close()
    wall = time.perf_counter() - t_start
    logger.info("campaign done: %d ok, %d failed in %.1f s", n_ok, len(failed), wall)
    return CampaignReport(n_ok, len(failed), failed, wall, times)
