"""One realization's record, assembled on the host from its batch: its draws and per-draw
statistics, flags, truth and :class:`~shearbatch.core.convergence.Convergence` record,
the :class:`~shearbatch.io.Record` the writer writes (:mod:`shearbatch.engine` calls
:func:`split_batch` and :func:`records` for each batch that lands).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import jax
import numpy as np

from .._version import __version__
from ..campaign import Realization
from ..core import failure_flags as fl
from ..core.checks import misfit
from ..core.convergence import Convergence
from ..core.generate import FIELDS, SimBatch
from ..core.model import SHEAR_SITES
from ..core.population_np import relative_log_weights
from ..core.priors import prior_sd, shrinkage
from ..io import Record
from ..spec import RunSpec

__all__ = [
    "PROPOSAL_LOG_Q",
    "UNINFORMATIVE_WIDTH",
    "BatchStats",
    "batch_records",
    "batch_stats",
    "estimator_draws",
    "host_batch",
    "interim_attrs",
    "prior_influence",
    "records",
    "split_batch",
    "truth_record",
]


def host_batch(sim: SimBatch, images: np.ndarray | None = None) -> SimBatch:
    """``sim`` with its arrays on the host (one transfer each per batch: indexing a device
    array per realization costs a dispatch each, ~0.1 ms)."""
    return sim._replace(
        images=np.asarray(sim.images) if images is None else images,
        g=np.asarray(sim.g),
        snr=np.asarray(sim.snr),
        params={k: np.asarray(v) for k, v in sim.params.items()},
    )


#: the per-draw statistics of draws taken from a proposal density (not the posterior's own)
PROPOSAL_LOG_Q = ("laplace_log_q", "proposal_log_q")


def split_batch(draws: Any, n: int) -> Iterator[tuple[int, Any]]:
    """``(lane, its draws)`` for the first ``n`` lanes of a batch's host draws (the padding
    lanes after them are never written). The tree is flattened once per batch."""
    leaves, tree = jax.tree.flatten(draws)
    for b in range(n):
        yield b, tree.unflatten([a[b] for a in leaves])


class BatchStats(NamedTuple):
    """The per-realization statistics of a whole batch, computed once over its arrays
    (:func:`batch_stats`; numpy over the batch, not one call per realization)."""

    #: free shear site -> each lane's posterior sd over all its draws, shape (lanes,)
    sd: dict[str, np.ndarray]
    #: each lane's stamps all finite, shape (lanes,)
    finite_obs: np.ndarray
    #: site -> each lane's draws all finite, shape (lanes,)
    finite_draws: dict[str, np.ndarray]


def batch_stats(spec: RunSpec, samples: Any, obs: np.ndarray) -> BatchStats:
    """:class:`BatchStats` of a batch's host ``samples`` (site -> (lanes, chain, draw,
    ...)) and stamps ``obs`` (lanes, ...). A lane's sd is ``np.std`` of its draws, as
    :func:`prior_influence` takes it of one realization's."""
    n = obs.shape[0]
    sd = {site: np.std(np.reshape(samples[site], (n, -1)), axis=1)
          for site, p in zip(SHEAR_SITES, spec.model.shear, strict=True)
          if site in samples and not p.fixed}  # fmt: skip
    finite_obs = np.isfinite(np.reshape(obs, (n, -1))).all(axis=1)
    finite = {k: np.isfinite(np.reshape(v, (n, -1))).all(axis=1) for k, v in samples.items()}
    return BatchStats(sd, finite_obs, finite)


def _common_flags(stats: BatchStats, b: int) -> tuple[int, dict[str, str]]:
    """:func:`shearbatch.core.failure_flags.common_flags` of lane ``b`` from its batch's stats."""
    out, details = 0, {}
    if not stats.finite_obs[b]:
        out |= fl.flag("NONFINITE_DATA")
    bad = sorted(k for k, v in stats.finite_draws.items() if not v[b])
    if bad:
        out |= fl.flag("NONFINITE_DRAWS")
        details["NONFINITE_DRAWS"] = f"non-finite posterior draws of {', '.join(bad)}"
    return out, details


def records(
    spec: RunSpec, method, r: Realization, lane, obs, sim: SimBatch, b: int, dtype: str,
    chi2: float = math.nan, stats: BatchStats | None = None,
    extra: dict[str, Any] | None = None,
) -> Record:  # fmt: skip
    """The :class:`~shearbatch.io.Record` of one realization (``obs``: its stamps): draws,
    per-draw statistics, attributes, truth and its
    :class:`~shearbatch.core.convergence.Convergence` record. ``stats``: its batch's
    :func:`batch_stats` (lane ``b``'s are read; computed for this realization alone
    without); ``extra``: further :class:`~shearbatch.core.convergence.Convergence`
    fields (the engine's batch report, runtime, provenance)."""
    if stats is None:
        one = {k: np.asarray(v)[None] for k, v in lane.samples.items()}
        stats, i = batch_stats(spec, one, np.asarray(obs)[None]), 0
    else:
        i = b
    diag = method.diagnose(lane)
    common, details = _common_flags(stats, i)
    influence = _influence(spec, {k: float(v[i]) for k, v in stats.sd.items()})
    data_flags = _data_flags(spec, chi2, obs.size, influence, details)
    gates = diag.gates
    if all(v is None for v in gates):  # a method reporting its gate statistics in its record
        gates = fl.Gates.from_json(diag.diagnostics)
    own = {k: v for k, v in diag.diagnostics.items() if k not in fl.GATE_KEYS}
    flags = common | diag.flags | fl.gate_flags(gates) | data_flags
    interim = spec.population is not None
    conv = Convergence(
        run_id=r.run_id,
        status="failed" if flags & fl.FATAL else "ok",
        flags=flags,
        reason=fl.describe(flags, details) or None,
        method=spec.method,
        point_estimate="population" if interim else method.point_estimate,
        mode={k: np.asarray(v) for k, v in lane.mode.items()},
        gates=gates,
        diagnostics=own,
        thresholds=fl.DEFAULT_THRESHOLDS._asdict(),
        precision=dtype,
        config_hash=spec.config_hash,
        seed=r.seed,
        batch_size=len(sim.g),
        snr=np.asarray(sim.snr[b]).tolist(),
        chi2_per_pixel=chi2,
        prior=influence,
        shear_model="interim" if interim else None,
        **(extra or {}),
    )
    attrs = {
        "inference_method": spec.method,
        "run_id": r.run_id,
        "seed": r.seed,
        "g1_true": r.g1,
        "g2_true": r.g2,
        "batch_size": len(sim.g),
        "shearbatch_version": __version__,
        "config_hash": spec.config_hash,
        "dtype": dtype,
    }
    if interim:  # the interim model: what the population fit needs
        attrs.update(interim_attrs(spec))
        # draws from a proposal (their per-draw log q recorded) estimate the interim
        # posterior only weighted; a sampler's draws are the interim posterior's own
        proposal = any(k in (diag.sample_stats or {}) for k in PROPOSAL_LOG_Q)
        attrs["interim_draws"] = "proposal" if proposal else "posterior"
    return Record(
        posterior=lane.samples,
        sample_stats=diag.sample_stats,
        observed=obs,
        attrs=attrs,
        truth=truth_record(spec, r, sim, b),
        convergence=conv,
    )


def batch_records(
    spec: RunSpec, method, batch: Sequence[Realization], draws, obs: np.ndarray,
    sim: SimBatch, dtype: str, chi2: np.ndarray, extra: Callable[[int], dict[str, Any]],
) -> Iterator[tuple[Realization, Record]]:  # fmt: skip
    """``(realization, its Record)`` for each realization of a landed batch (the engine's
    host work per batch): ``draws`` and ``obs`` on the host (all lanes, padding included),
    ``sim`` through :func:`host_batch`, ``chi2`` per lane, ``extra(lane)``: the
    :class:`~shearbatch.core.convergence.Convergence` fields the engine adds. The
    statistics every method shares are computed once over the batch (:func:`batch_stats`)."""
    stats = batch_stats(spec, draws.samples, obs)
    chi2 = np.asarray(chi2, dtype=float).tolist()
    for (b, lane), r in zip(split_batch(draws, len(batch)), batch, strict=True):
        yield r, records(spec, method, r, lane, obs[b], sim, b, dtype, chi2[b], stats, extra(b))


def estimator_draws(rec: Record, interim: bool) -> Record:
    """``rec`` keeping only the draws its shear estimate is made from (``campaign.draws:
    estimator``), as float32, the precision the pooled fit reads them in
    (:func:`shearbatch.analysis.summary_table.compact_draws`): ``g1``, ``g2`` (the joint model)
    or ``e1``, ``e2`` and ``interim_log_weight`` less each galaxy's largest (the interim
    model: a per-galaxy constant does not move its weights); the other sample statistics
    as they are. A Level 2 posterior.nc is then ~5x smaller (1.9 MB -> ~0.4 MB)."""
    keep = ("e1", "e2") if interim else SHEAR_SITES
    post = {k: np.asarray(v, np.float32) for k, v in rec.posterior.items() if k in keep}
    stats = dict(rec.sample_stats or {})
    for name in PROPOSAL_LOG_Q:  # the proposal density of all latents' draws
        stats.pop(name, None)
    if (lw := stats.get("interim_log_weight")) is not None:  # (chain, draw, galaxy)
        stats["interim_log_weight"] = relative_log_weights(lw, axis=(0, 1))
    return rec._replace(posterior=post, sample_stats=stats)


def interim_attrs(spec: RunSpec) -> dict[str, Any]:
    """posterior.nc root attributes of an interim-model realization: the shear model, the
    interim prior of each observed-ellipticity component and the population's
    intrinsic-shape prior (``{"kind": ..., "args": [...]}`` as JSON), read back by
    bias-extract's population fit (:mod:`shearbatch.core.population`)."""
    import json

    def enc(p) -> str:
        return json.dumps({"kind": p.kind, "args": [float(a) for a in p.args]})

    assert spec.population is not None
    return {"shear_model": "interim",
            "interim_prior_e1": enc(spec.model.fields.e1),
            "interim_prior_e2": enc(spec.model.fields.e2),
            "population_prior_e1": enc(spec.population.fields.e1),
            "population_prior_e2": enc(spec.population.fields.e2)}  # fmt: skip


#: a free shear component whose posterior is at least this wide, relative to its prior,
#: was not measured (the data carry no information on it; e.g. absurd noise)
UNINFORMATIVE_WIDTH = 0.9


def _data_flags(spec: RunSpec, chi2: float, n_pix: int, influence, details) -> int:
    """``DATA_MISFIT`` (residual not noise; only when the generator is the model) and
    ``UNINFORMATIVE`` (posterior as wide as the prior), with their details."""
    out = 0
    if math.isfinite(chi2) and spec.truth == spec.model and misfit(chi2):
        out |= fl.flag("DATA_MISFIT")
        details["DATA_MISFIT"] = (f"residual at the estimate inconsistent with the noise model "
                                  f"(chi2/N = {chi2:.3g}, expected 1 +- "
                                  f"{math.sqrt(2 / n_pix):.2g})")  # fmt: skip
    wide = {s: v["width_ratio"] for s, v in influence.items()
            if v["width_ratio"] is not None and v["width_ratio"] >= UNINFORMATIVE_WIDTH}  # fmt: skip
    if wide:
        out |= fl.flag("UNINFORMATIVE")
        details["UNINFORMATIVE"] = (
            "posterior of g as wide as its prior ("
            + ", ".join(f"{s}: {v:.3g} x the prior's sd" for s, v in wide.items())
            + "): no information"
        )
    return out


def prior_influence(spec: RunSpec, samples) -> dict[str, dict[str, float]]:
    """Per shear component: posterior / prior width and the prior's predicted pull of
    the estimate towards the prior mean (``shrinkage``, i.e. -m caused by the prior)."""
    return _influence(spec, {site: float(np.std(samples[site]))
                             for site, p in zip(SHEAR_SITES, spec.model.shear, strict=True)
                             if site in samples and not p.fixed})  # fmt: skip


def _influence(spec: RunSpec, sd: dict[str, float]) -> dict[str, dict[str, float]]:
    """:func:`prior_influence` from each free shear site's posterior sd."""
    out = {}
    for site, p in zip(SHEAR_SITES, spec.model.shear, strict=True):
        if site in sd:
            out[site] = {"width_ratio": sd[site] / prior_sd(p), "shrinkage": shrinkage(p, sd[site])}
    return out


def truth_record(spec: RunSpec, r: Realization, sim: SimBatch, b: int) -> dict[str, Any]:
    """The JSON-ready ``truth.json`` of lane ``b``."""
    t = spec.truth
    params = {k: np.asarray(sim.params[k][b]) for k in FIELDS}
    galaxies = [{f: float(params[f][j]) for f in FIELDS} for j in range(t.image.n_objects)]
    rec: dict[str, Any] = {
        "run_id": r.run_id,
        "g1": r.g1,
        "g2": r.g2,
        "seed": r.seed,
        "noise_sigma": sim.noise_sigma,
        "snr": np.asarray(sim.snr[b]).tolist(),
        "profile": t.profile,
        "psf": t.psf._asdict(),
        "galaxies": galaxies,
    }
    if r.pair_id:
        rec["pair_id"], rec["pair_sign"] = r.pair_id, r.pair_sign
    if r.n_rotations > 1:
        rec["rotation"] = {"index": r.rotation, "n_rotations": r.n_rotations,
                           "degrees": r.rotation_deg, "noise_stream": r.noise_stream}  # fmt: skip
    rec["truth_from_prior"] = r.from_prior
    rec.update(spec.provenance)
    return rec
