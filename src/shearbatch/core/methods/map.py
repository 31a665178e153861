"""MAP per realization (damped Newton, L-BFGS or Adam) plus a Laplace approximation.

For one realization, with the physical parameters theta = T(x) of an
unconstrained vector x and V(x) = -log p(T(x), d) (the posterior density in
the physical parameters, WITHOUT the log-Jacobian of T):

    x* = argmin V(x)                       (theta* = T(x*) is the posterior mode in theta)
    Sigma = H^{-1},  H = d^2 V / dx^2 (x*)  (Laplace approximation)

At the mode the gradient vanishes, so H = J^T H_theta J (J = dT/dx): the
Gaussian N(x*, H^-1) mapped through T has, to first order, the covariance
H_theta^-1 of the Laplace approximation in the physical parameters, while its
draws stay inside every support. For g (no transform) both are exact. (The
potential with the Jacobian, which NUTS samples, would put the mode of a
bounded prior's latent elsewhere: measured m = -0.02 at S/N 30 with a
U(-0.9, 0.9) shear prior.)

The written posterior is ``num_samples`` draws of N(x*, Sigma), mapped to the
constrained space. Draws come in antithetic pairs (x* + F eps, x* - F eps with
F F^T = H^-1, from the block LDL^T factors of :mod:`shearbatch.core.block_arrow`), so the
draw mean of every unconstrained latent (g1, g2 among them) equals the mode exactly
and the draw std estimates the Laplace width.

The Hessian of M galaxies sharing a shear is kept as its blocks (per galaxy, shear,
couplings: :mod:`shearbatch.core.block_arrow`); the Newton direction, decrement, log det and
draws are computed by block elimination, O(M) time and memory per realization.
``optimizer: gauss_newton`` replaces the exact Hessian by J^T W J of the stamps (forward
mode) plus the prior's exact Hessian while far from the mode, then takes exact Newton
steps to the tolerance; the Laplace width is always the exact Hessian's.

The optimiser stops per realization when the relative decrease of U in one
step falls below ``tol`` (|U_k - U_{k+1}| <= tol max(1, |U_{k+1}|)) or after
``num_steps``, or when a step fails to decrease U (the float resolution of U is
reached; ``converged`` is then true unless the step budget ran out); under :func:`shearbatch.core.batching.batched` a converged lane is frozen
while others continue, and nothing couples lanes (no global-norm clipping, no
stopping on a summed loss).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from pydantic import model_validator

from ...strict_model import Count, Positive, StrictModel
from .. import block_arrow
from ..failure_flags import flag
from .base import Diagnosis, Draws, Method
from .interim import LOG_RATIO

__all__ = [
    "Laplace",
    "MapConfig",
    "MapInfo",
    "OptResult",
    "covariance",
    "default_tol",
    "laplace",
    "layout_of",
    "method",
    "optimize",
]


class OptResult(NamedTuple):
    x: jax.Array  # (D,) mode, unconstrained
    potential: jax.Array  # U(x)
    grad_norm: jax.Array  # |dU/dx| at x
    n_steps: jax.Array
    converged: jax.Array
    #: of ``n_steps``, the Gauss-Newton steps (``optimizer: gauss_newton``; None otherwise)
    gn_steps: jax.Array | None = None


#: ``map_config.proposal`` values: the Laplace Gaussian (the default) and the Student-t
LAPLACE, STUDENT_T = "laplace", "student_t"

#: the Student-t proposal's degrees of freedom when ``proposal_dof`` is not given: the
#: pixel-free toy of bench/bench_estimator.py (a proposal 0.75x too narrow) shifts m by
#: < 1e-4 at 1,000 draws with it, against -8.7e-4 for the Gaussian
DEFAULT_DOF = 5.0


class MapConfig(StrictModel):
    """The MAP fit: used by ``method: map``, and for the Laplace start of NUTS and VI.

    Each realization's ``convergence.json`` records the fit under ``optimizer``:
    ``converged`` (the convergence rule: ``newton_decrement`` <= 1e-4, whatever the
    optimiser), ``newton_decrement`` (g^T H^-1 g / 2 at the mode: the log density still to
    gain), ``grad_norm_whitened`` (|L^-1 g| with H = L L^T the Laplace factor: the Newton
    step still to go, in posterior standard deviations, = sqrt(2 newton_decrement); the raw
    gradient norm is not recorded, as it scales with the curvature, i.e. with S/N^2),
    ``n_steps``, ``stopping_rule_met`` (the optimiser's own rule: ``tol``) and ``potential``.
    """

    optimizer: Literal["newton", "gauss_newton", "lbfgs", "adam"] = "newton"
    """Damped Newton with the exact Hessian (default), Gauss-Newton (the stamps' J^T W J plus the prior's Hessian far from the mode, exact Newton for the last steps), L-BFGS or Adam (large models). Gauss-Newton (bench/bench_cost.py, docs/benchmarks.md): the same modes (within 1e-5 posterior sd), faster where galaxies have free shapes (3.8x at 8 and 7.2x at 32 galaxies per realization, 2.6x for one galaxy at survey S/N 30, 1.1x at Level 0); configs/level2.yaml uses it. Not the default because of float32 at very high S/N: at Level 0's S/N 1.2e5 both optimizers stop on float32's rounding floor at the step limit, and more Gauss-Newton lanes end above the convergence rule (4 of 16 against 1 of 16 for newton, docs/results/cost_map.md)."""
    num_steps: Count = 200
    """[iterations] Optimiser steps at most."""
    learning_rate: Positive | None = None
    """[step size] Adam only (null: 0.1)."""
    tol: Positive | None = None
    """[log-density] Convergence: half the Newton decrement below tol (null: 1e-10 float64, 1e-7 float32); at most half of the convergence check's decrement, 1e-4, for Newton and Gauss-Newton. configs/level2.yaml: 1e-5 (the proposal's centre within sqrt(2 tol) posterior sd of the mode; one exact-Hessian iteration fewer per fit than 1e-10: bench/bench_level2_rate.py measures what it saves and what it moves m by)."""
    num_samples: Count = 1000
    """[draws] Laplace draws written as the posterior (antithetic)."""
    proposal: Literal["laplace", "student_t"] | None = None
    """``shear_model: interim`` only: the distribution of each galaxy's draws, which its importance weights (``interim_log_weight``) correct to the interim posterior. ``laplace`` (null): the Laplace Gaussian N(x*, H_j^-1). ``student_t``: a multivariate Student-t with ``proposal_dof`` degrees of freedom and the same centre and scale matrix, per galaxy (heavier tails: a galaxy whose posterior is wider than its Laplace approximation keeps its weights). Either way the written draws are proposal draws, NOT posterior draws: only weighted do they estimate the interim posterior (t draws spread ~sqrt(nu / (nu - 2)) wider; ``convergence.json``'s ``laplace.posterior_std`` is then the weighted std). configs/level2.yaml: student_t at ``proposal_centre: target`` (docs/validation.md, "The interim draws and their weights"). Ignored by the joint model (its draws are always the Laplace Gaussian's at the MAP, its written posterior) and by NUTS and VI (their Laplace start takes the optimiser settings only)."""
    proposal_dof: Positive | None = None
    """[degrees of freedom] ``proposal: student_t`` only: nu of the Student-t proposal (null: 5)."""
    gauss_newton_precision: Literal["float32", "float64"] | None = None
    """``optimizer: gauss_newton`` only: the precision of the Gauss-Newton steps (the fit far from the mode); exact Newton then converges in the run's ``precision`` from where they stop, and its last Hessian is the Laplace approximation's (the same modes to ~1e-10: bench/bench_level2_rate.py). null: the run's precision. configs/level2.yaml: float32."""
    draw_precision: Literal["float32", "float64"] | None = None
    """``shear_model: interim`` only: the precision in which each draw's log density is evaluated for its importance weight (the draws' stamps rendered in it; the fit, the Laplace factor, the draws and the weights' arithmetic stay in the run's precision). null: the run's ``precision``. configs/level2.yaml: float32 (bench/bench_level2_rate.py measures what it saves and what it moves m by, on the same draws)."""
    proposal_centre: Literal["map", "target"] | None = None
    """``shear_model: interim`` only: where the proposal sits, with the curvature there as its scale. ``map`` (null): the MAP (the mode in the physical parameters). ``target``: the mode of the density the importance weights target, the interim posterior in the unconstrained coordinates (the transforms' log-Jacobian included, as NUTS's and VI's Laplace starts use it): the two differ most for a galaxy near |e| = 1, whose weights' mass lies ~2 sd inside the MAP-centred proposal. ``convergence.json``'s ``mode`` and ``optimizer`` are then that fit's. Ignored by the joint model."""

    @model_validator(mode="after")
    def _lr(self) -> MapConfig:
        newton = self.optimizer in ("newton", GN)
        if newton and self.tol is not None and 2.0 * self.tol > DECREMENT_TOL:
            raise ValueError(
                f"tol: {self.tol:g} lets a fit stop with a Newton decrement above "
                f"{DECREMENT_TOL:g}, which the convergence check reports as not converged; "
                f"use at most {DECREMENT_TOL / 2:g}"
            )
        if self.learning_rate is not None and self.optimizer != "adam":
            raise ValueError(
                f"learning_rate: has no effect with optimizer {self.optimizer} (Adam only)"
            )
        if self.proposal_dof is not None and self.proposal != STUDENT_T:
            raise ValueError(
                f"proposal_dof: has no effect with proposal {self.proposal or LAPLACE} "
                f"(student_t only)"
            )
        return self

    @property
    def proposal_kind(self) -> str:
        """``laplace`` or ``student_t`` (``proposal`` with its default filled in)."""
        return self.proposal or LAPLACE

    @property
    def dof(self) -> float:
        """The Student-t proposal's degrees of freedom (``proposal_dof`` or its default)."""
        return DEFAULT_DOF if self.proposal_dof is None else float(self.proposal_dof)


class MapInfo(NamedTuple):
    """MAP's record of one fit (:class:`~.base.Info`), read by :func:`diagnose` and
    :func:`batch_report`."""

    potential: jax.Array  # U at the mode
    grad_norm_whitened: jax.Array  # |L^-1 g| at the mode (Laplace.grad_whitened)
    n_steps: jax.Array  # optimiser iterations (Newton: steps taken + the last, which takes none)
    converged: jax.Array  # the optimiser's own stopping rule met
    decrement: jax.Array  # half the Newton decrement at the mode
    laplace_ok: jax.Array  # Hessian finite and positive definite
    std: jax.Array  # (D,) Laplace marginal widths, unconstrained
    #: (M,) the interim model's importance-sampling ESS per galaxy (None: joint model)
    is_ess: jax.Array | None = None
    #: {site: (M,)} the importance-weighted std per galaxy (None: Laplace draws, whose
    #: plain std is recorded)
    weighted_std: dict[str, jax.Array] | None = None
    #: of ``n_steps``, the Gauss-Newton steps (None: no Gauss-Newton phase); a vmapped
    #: fit runs each phase's loop until its slowest lane is done
    gn_steps: jax.Array | None = None
    #: the lane-steps the batch's refilled optimiser loops executed (:func:`fit_batch`),
    #: shared evenly among its realizations (their sum over a batch is what ran); None: a
    #: per-realization fit, vmapped in lockstep
    lane_steps: jax.Array | None = None
    #: the lanes of those loops (:func:`fit_batch`; None: lockstep)
    refill_lanes: jax.Array | None = None


#: a MAP fit is converged when the Newton decrement at its end, g^T H^-1 g / 2 (the
#: predicted log-density gain still to be had, whatever the dtype, optimiser or
#: parameter scale), is below this: the mode is then within 0.014 posterior sigma
DECREMENT_TOL = 1e-4


def default_tol(dtype, optimizer: str = "newton") -> float:
    """Newton: half-decrement tolerance (log-density units) 1e-10 in float64, 1e-7 in
    float32. L-BFGS: relative-decrease tolerance 1e-12 / 1e-6. Adam (noisy steps):
    relative change of the last step 1e-9 / 1e-6."""
    x64 = jnp.dtype(dtype) == jnp.float64
    if optimizer == "newton":
        return 1e-10 if x64 else 1e-7
    if optimizer == "adam":
        return 1e-9 if x64 else 1e-6
    return 1e-12 if x64 else 1e-6


#: largest change of any unconstrained coordinate in one Newton step. Far from the mode
#: the quadratic model can send a step along the nearly flat shear / shape ridge of a
#: many-galaxy realization (g up, every e down) to where bounded shapes sit at their
#: support's edge and their gradients vanish; measured at Level 1 (M = 8, S/N 400): 3 of
#: 128 fits stuck there without the cap, 1 with it (a mode genuinely on the bound). Near
#: the mode steps are far smaller, so the cap leaves the answer and the quadratic
#: convergence unchanged.
MAX_STEP = 0.5

#: steps in the quadratic regime (half-decrement below 1e-3) without halving the smallest
#: decrement so far after which :func:`_newton` stops: the float floor of U and its
#: gradient is reached above the tolerance (float32 at Level 2, U ~ 3.5e4: 1e-6 to 2e-4
#: measured, and those fits otherwise ran all 200 steps); whether the fit converged is
#: then its decrement's to say (:data:`DECREMENT_TOL`)
STALL_STEPS = 5


def _newton(
    x0,
    fun,
    *,
    num_steps: int,
    tol: float,
    blocks_fn=None,
    layout: block_arrow.Layout | None = None,
    final: bool = True,
) -> tuple[OptResult, block_arrow.Arrow]:
    """Damped saddle-free Newton with Armijo backtracking; returns the result and the
    Hessian's blocks at the point it returns (``blocks_fn(x)``, default: the dense Hessian
    as one block, :func:`shearbatch.core.block_arrow.dense_layout`).

    Each iteration evaluates the gradient and Hessian at its iterate, then steps or stops.
    A fit that stops by a rule stops without stepping, so its last Hessian is the one at
    the point returned. A fit whose last step within ``num_steps`` was accepted runs ONE
    iteration more (``final``), which evaluates the gradient and Hessian there and takes
    no step (:func:`_newton_step`'s ``budget``): the Laplace factor, decrement and
    stopping rule are then those of the point returned, not of the iterate before it, at
    the cost of one iteration for such fits only. ``n_steps`` counts iterations: steps
    taken plus the last, which takes none. ``final=False`` (a phase whose Hessian is not
    used, the Gauss-Newton steps of :func:`laplace`): no such iteration.

    The direction and decrement come from the block LDL^T of the Hessian
    (:func:`shearbatch.core.block_arrow.newton_direction`: exact Newton where H is positive
    definite, a descent direction elsewhere). Stops when half the Newton decrement,
    ``g^T H^-1 g / 2`` (the predicted decrease of U to the optimum, in log-density
    units), is <= ``tol``; or after :data:`STALL_STEPS` steps of the quadratic regime
    without halving the smallest decrement (the float floor: such a fit held its batch in
    lockstep for all the steps; not reported as the stopping rule met). A fit that
    converges quadratically never meets the second rule before the tolerance.
    """
    if layout is None:
        layout = block_arrow.dense_layout(x0.shape[0])
    if blocks_fn is None:
        blocks_fn = block_arrow.blocks_fn(lambda x, o: fun(x), layout)
        blocks_fn = functools.partial(blocks_fn, obs=None)

    def cond(c):
        return _newton_cond(c, num_steps, final)

    def body(c):
        return _newton_step(c, fun, blocks_fn, layout, tol, budget=num_steps if final else None)

    init = _newton_init(x0, fun(x0), jax.eval_shape(blocks_fn, x0))
    c = jax.lax.while_loop(cond, body, init)
    return _newton_result(c)


def _newton_cond(c, num_steps, final: bool = False) -> jax.Array:
    """Whether :func:`_newton`'s loop goes on from carry ``c`` (``num_steps``: its budget;
    ``final``: one iteration past it after an accepted step, which takes no step)."""
    return (c[3] < num_steps + int(final)) & ~c[4] & jnp.isfinite(c[1])


def _newton_init(x0, f0, h_shape) -> tuple:
    """:func:`_newton`'s carry at ``x0`` (``f0 = fun(x0)``; ``h_shape``: the Hessian
    blocks' shapes, whose zeros the carry holds until the first step)."""
    return (
        x0,
        f0,
        jnp.asarray(jnp.inf, x0.dtype),
        jnp.asarray(0),
        jnp.asarray(False),
        (
            jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), h_shape),
            jnp.asarray(False),
            jnp.asarray(jnp.inf, x0.dtype),
            jnp.asarray(0),
        ),
    )


def _newton_result(c) -> tuple[OptResult, block_arrow.Arrow]:
    x, f, gn, n, _, (h, converged, *_) = c
    return OptResult(x, f, gn, n, converged & jnp.isfinite(f)), h


def _newton_step(
    c, fun, blocks_fn, layout: block_arrow.Layout, tol: float, live=True, budget=None
) -> tuple:
    """ONE iteration of :func:`_newton` from carry ``c``. ``live`` (a bool array): False
    for an empty lane of :func:`~.refill.refill_loop`, whose result is discarded: its
    backtracking loop then stops at once (so that it does not hold the vectorised inner
    loop); a live lane's arithmetic is the same either way. ``budget`` (the step budget;
    None: no final iteration): an iteration at or past it only evaluates the gradient and
    Hessian at its iterate and stops there (its backtracking loop stops at once)."""
    grad_fn = jax.grad(fun)
    x, f, _, i, _, (_, _, dec_min, n_stall) = c
    if budget is not None:  # the final iteration: the Hessian at the point returned
        live = (i < budget) & live
    g, h = grad_fn(x), blocks_fn(x)
    p, dec = block_arrow.newton_direction(h, g, layout)
    p, dec = p.astype(x.dtype), dec.astype(x.dtype)  # a float32 fit of a float64 model
    p = p * jnp.minimum(1.0, MAX_STEP / jnp.max(jnp.abs(p)))  # p = 0: MAX_STEP / 0 = inf -> 1
    small = 0.5 * dec <= tol
    # at the float floor: STALL_STEPS steps of the quadratic regime without halving the
    # smallest decrement so far (Newton's quadratic convergence shrinks it far faster)
    n_stall = jnp.where((0.5 * dec < 1e-3) & ~(dec < 0.5 * dec_min), n_stall + 1, 0)
    stalled = n_stall >= STALL_STEPS
    slope = jnp.dot(g, p)

    def bt_cond(b):
        t, fn, k = b
        more = (k < 30) & ~(fn <= f + 1e-4 * t * slope)
        return more if live is True else more & live

    def bt_body(b):
        t, _, k = b
        return 0.5 * t, fun(x + 0.5 * t * p), k + 1

    f_full = fun(x + p)
    # in the quadratic regime (predicted gain < 1e-3) the full Newton step is taken even
    # when rounding hides its decrease (float32: U ~ 500 resolves only ~3e-5)
    quad = (0.5 * dec < 1e-3) & jnp.isfinite(f_full) & (f_full <= f + 1e-3)
    t, f_new, _ = jax.lax.while_loop(bt_cond, bt_body, (1.0, f_full, 0))
    t = jnp.where(quad, 1.0, t)
    f_new = jnp.where(quad, f_full, f_new)
    ok = ((f_new <= f + 1e-4 * t * slope) | quad) & ~small & ~stalled
    if budget is not None:
        ok = ok & (i < budget)
    x_new = jnp.where(ok, x + t * p, x)
    f_new = jnp.where(ok, f_new, f)
    gn = jnp.linalg.norm(g)
    return (x_new, f_new, gn, i + 1, small | ~ok,
            (h, small, jnp.minimum(dec_min, dec), n_stall))  # fmt: skip


def optimize(
    x0: jax.Array,
    obs: jax.Array,
    potential_fn,
    *,
    num_steps: int,
    optimizer: str = "newton",
    learning_rate: float = 0.1,
    tol: float | None = None,
) -> OptResult:
    """Minimise ``potential_fn(x, obs)`` from ``x0`` for ONE realization."""
    fun = functools.partial(lambda x, o: potential_fn(x, o), o=obs)
    tol = default_tol(x0.dtype, optimizer) if tol is None else tol
    if optimizer == "newton":
        return _newton(x0, fun, num_steps=num_steps, tol=tol)[0]
    if optimizer == "lbfgs":
        opt = optax.lbfgs()
        value_and_grad = optax.value_and_grad_from_state(fun)
    else:
        schedule = optax.cosine_decay_schedule(learning_rate, num_steps, alpha=1e-3)
        opt = optax.adam(schedule)

        def value_and_grad(x, state):
            del state
            return jax.value_and_grad(fun)(x)

    f0 = fun(x0)

    def cond(c):
        _, _, f, i, done, _ = c
        return (i < num_steps) & ~done & jnp.isfinite(f)

    def body(c):
        x, state, f, i, _, _ = c
        value, grad = value_and_grad(x, state=state)
        if optimizer == "lbfgs":
            updates, state = opt.update(grad, state, x, value=value, grad=grad, value_fn=fun)
        else:
            updates, state = opt.update(grad, state, x)
        x_new = optax.apply_updates(x, updates)
        f_new = fun(x_new) if optimizer != "lbfgs" else optax.tree_utils.tree_get(state, "value")
        small = jnp.abs(f - f_new) <= tol * jnp.maximum(1.0, jnp.abs(f_new))
        if optimizer != "lbfgs":  # Adam is not monotone: it runs its whole step budget
            return x_new, state, f_new, i + 1, jnp.asarray(False), small
        stalled = f_new > f  # at the float resolution of U: no further progress possible
        return x_new, state, f_new, i + 1, small | stalled, small

    init = (x0, opt.init(x0), f0, jnp.asarray(0), jnp.asarray(False), jnp.asarray(False))
    x, _, f, n, done, small = jax.lax.while_loop(cond, body, init)
    grad = jax.grad(fun)(x)
    if optimizer != "lbfgs":  # converged: the last step changed U by less than the tolerance
        return OptResult(x, f, jnp.linalg.norm(grad), n, small & jnp.isfinite(f))
    return OptResult(x, f, jnp.linalg.norm(grad), n, done & jnp.isfinite(f) & (n < num_steps))


class Laplace(NamedTuple):
    opt: OptResult
    #: the block LDL^T factors of the Hessian at x* (:class:`shearbatch.core.block_arrow.Factor`):
    #: x* + block_arrow.apply_scale(factor, eps) has covariance H^-1
    factor: block_arrow.Factor
    ok: jax.Array  # Hessian finite and positive definite
    decrement: jax.Array  # g^T H^-1 g / 2 at x*: predicted distance to the mode (log density)
    #: |L^-1 g| at x*: the gradient whitened by the Laplace factor, i.e. the length of the
    #: Newton step still to go in posterior standard deviations (= sqrt(2 decrement)). The
    #: raw |g| scales with the curvature (S/N^2: ~1e-6 from rounding alone at Level 0's S/N
    #: 1e5) and has no stable value; this one means the same at every S/N and precision.
    grad_whitened: jax.Array
    log_det: jax.Array  # log det H
    std: jax.Array  # (D,) sqrt diag(H^-1): the Laplace marginal widths


#: ``map_config.optimizer`` of the Gauss-Newton fit
GN = "gauss_newton"

#: Gauss-Newton hands over to exact Newton once half its decrement (the predicted gain
#: of log density, in the Gauss-Newton metric) is below this: exact Newton then
#: converges quadratically, where Gauss-Newton would slow to the linear rate the
#: neglected residual curvature sets
GN_SWITCH = 1e-2

#: Gauss-Newton steps at most before exact Newton takes over (the rest of ``num_steps``):
#: a fit converges in ~6-12 Gauss-Newton steps (Level 2 on the 2-core CPU: median 9 in
#: all, p99 21). A galaxy whose posterior presses on |e| = 1, where Gauss-Newton misses
#: the curvature of the |e| < 1 factor, crawled all 200 steps there (Level 2 seed 754,
#: the 3 failed fits of the H100 field run, each holding its batch of 1,554 lanes in
#: lockstep: efficiency 0.05); exact Newton from step 30 converged in 5 more
GN_MAX_STEPS = 30


def gn_precision(settings: MapConfig, dtype) -> Any:
    """The dtype of the Gauss-Newton steps: ``settings.gauss_newton_precision`` or ``dtype``."""
    p = settings.gauss_newton_precision
    return jnp.dtype(dtype if p is None else p)


def _gauss_newton_blocks(model, objective, layout: block_arrow.Layout):
    """The Gauss-Newton blocks of ``objective`` for ``model`` (None where they do not
    apply: no Gaussian pixel likelihood; the fit is then exact Newton)."""
    image_fn = getattr(model, "image_fn", None)
    prior = model.prior_part(objective) if image_fn is not None else None
    return None if prior is None else block_arrow.gauss_newton_blocks_fn(image_fn, prior, layout)


def layout_of(model) -> block_arrow.Layout:
    """The block layout of ``model``'s Hessian (dense for a posterior without one)."""
    lay = getattr(model, "layout", None)
    return block_arrow.dense_layout(model.x0.shape[0]) if lay is None else lay


def laplace(obs: jax.Array, model, settings: MapConfig, objective=None) -> Laplace:
    """Mode and Laplace approximation of ONE realization's posterior (``model``: a
    :class:`shearbatch.core.posterior.Posterior`). ``objective(x, obs)`` defaults to the
    physical-parameter mode objective ``model.mode_fn``; samplers pass
    ``model.potential_fn`` (the density they sample in x, Jacobian included: its mode is
    finite even where a bounded latent's physical mode sits on a bound). Every step is
    O(M) in the number of galaxies (:mod:`shearbatch.core.block_arrow`).

    Inside :func:`given_fit` (a batch's fits already run by :func:`laplace_batch`) the
    optimiser is not run again: its given result and last Hessian are used."""
    objective = model.mode_fn if objective is None else objective
    layout = layout_of(model)
    given = _GIVEN.get()
    if given is not None:
        if given.objective != objective:
            raise ValueError("laplace: the given fit was made with another objective")
        return _laplace_at(given.opt, given.h, obs, objective, layout)
    blocks = block_arrow.blocks_fn(objective, layout)
    x0 = model.x0.astype(obs.dtype)
    gn = _gauss_newton_blocks(model, objective, layout) if settings.optimizer == GN else None
    if settings.optimizer in ("newton", GN):
        fun = functools.partial(lambda x, o: objective(x, o), o=obs)
        tol = default_tol(x0.dtype) if settings.tol is None else settings.tol
        blocks_at = functools.partial(lambda x, o: blocks(x, o), o=obs)
        steps, start, n_gn = settings.num_steps, x0, 0
        if gn is not None:  # Gauss-Newton steps until the predicted gain is small
            obs_gn = obs.astype(gn_precision(settings, x0.dtype))
            gn_at = functools.partial(lambda x, o: gn(x, o), o=obs_gn)
            fun_gn = functools.partial(lambda x, o: objective(x, o), o=obs_gn)
            gn_opt, _ = _newton(x0.astype(obs_gn.dtype), fun_gn, num_steps=min(steps, GN_MAX_STEPS),
                                tol=GN_SWITCH, blocks_fn=gn_at, layout=layout, final=False)  # fmt: skip
            start, n_gn = gn_opt.x.astype(x0.dtype), gn_opt.n_steps
        # exact Newton to the tolerance (a step or two after Gauss-Newton), whose Hessian
        # at the point it returns is the Laplace approximation's (with no step left after
        # Gauss-Newton, its final iteration alone evaluates it there)
        opt, h = _newton(start, fun, num_steps=steps - n_gn, tol=tol, blocks_fn=blocks_at,
                         layout=layout)  # fmt: skip
        opt = opt._replace(n_steps=opt.n_steps + n_gn, gn_steps=None if gn is None else n_gn)
    else:
        opt = optimize(
            x0,
            obs,
            objective,
            num_steps=settings.num_steps,
            optimizer=settings.optimizer,
            learning_rate=settings.learning_rate or 0.1,
            tol=settings.tol,
        )
        h = blocks(opt.x, obs)
    return _laplace_at(opt, h, obs, objective, layout)


def _laplace_at(opt: OptResult, h: block_arrow.Arrow, obs, objective, layout) -> Laplace:
    """The Laplace approximation at the optimiser's result ``opt`` with Hessian blocks ``h``."""
    fac, ok = block_arrow.factor(h)
    w = block_arrow.whiten(fac, jax.grad(objective)(opt.x, obs), layout)  # |w|^2 = g^T H^-1 g
    ww = jnp.sum(w * w)
    std = jnp.sqrt(block_arrow.variances(fac, layout))
    return Laplace(opt, fac, ok, 0.5 * ww, jnp.sqrt(ww), block_arrow.log_det(fac), std)


class _Given(NamedTuple):
    opt: OptResult
    h: block_arrow.Arrow
    objective: Any


_GIVEN: contextvars.ContextVar[_Given | None] = contextvars.ContextVar(
    "map_given_fit", default=None
)


@contextlib.contextmanager
def given_fit(opt: OptResult, h: block_arrow.Arrow, objective):
    """While tracing inside this context, :func:`laplace` takes ``opt`` (the optimiser's
    result for ONE realization) and ``h`` (the Hessian blocks at its result) as its fit
    of ``objective`` instead of running the optimiser: how :func:`fit_batch` hands the
    refilled fits of :func:`laplace_batch` to the unchanged per-realization draws code
    (:func:`fit`, :func:`interim_fit`)."""
    token = _GIVEN.set(_Given(opt, h, objective))
    try:
        yield
    finally:
        _GIVEN.reset(token)


def refills(settings: MapConfig) -> bool:
    """Whether :func:`laplace_batch` can run ``settings``' optimiser (Newton, Gauss-Newton)."""
    return settings.optimizer in ("newton", GN)


def laplace_batch(
    obs: jax.Array, model, settings: MapConfig, objective, lanes: int
) -> tuple[OptResult, block_arrow.Arrow, jax.Array]:
    """The optimiser of :func:`laplace` for a BATCH of realizations (``obs``: leading axis
    B), on ``lanes`` lanes refilled from the batch (:func:`~.refill.refill_loop`): no lane
    waits for the batch's slowest fit. Returns ``(opt, h, executed)``: each realization's
    :class:`OptResult` and Hessian blocks at it (leading axis B), exactly as
    :func:`laplace`'s loops give them for that realization alone, and the lane-steps the
    loops executed (lanes x iterations, both phases).

    Gauss-Newton (``optimizer: gauss_newton``) and exact Newton are two refilled loops, one
    after the other: a lane computes one kind of Hessian per iteration (a lane of the one
    kind next to a lane of the other would compute both under ``vmap``)."""
    if not refills(settings):
        raise ValueError(f"laplace_batch: optimizer {settings.optimizer} is not refilled")
    from .refill import refill_loop

    layout = layout_of(model)
    blocks = block_arrow.blocks_fn(objective, layout)
    n = obs.shape[0]
    x0 = model.x0.astype(obs.dtype)
    tol = default_tol(x0.dtype) if settings.tol is None else settings.tol
    gn = _gauss_newton_blocks(model, objective, layout) if settings.optimizer == GN else None
    steps = settings.num_steps

    def run(blocks_of, starts, budget, tol_, obs_, final):
        # final: as _newton's (the exact phase's last Hessian is at the point returned)
        def step(c, d, live):
            o, b = d
            fun = functools.partial(lambda x, o_: objective(x, o_), o_=o)
            at = functools.partial(lambda x, o_: blocks_of(x, o_), o_=o)
            return _newton_step(c, fun, at, layout, tol_, live, budget=b if final else None)

        def cond(c, b):
            return _newton_cond(c, b, final)

        f0 = jax.vmap(lambda x, o: objective(x, o))(starts, obs_)
        h_shape = jax.eval_shape(blocks_of, starts[0], obs_[0])
        init = jax.vmap(lambda x, f: _newton_init(x, f, h_shape))(starts, f0)
        return refill_loop(step, cond, init, (obs_, budget), budget, lanes)

    starts, n_gn, executed = jnp.broadcast_to(x0, (n, *x0.shape)), jnp.zeros(n, int), 0
    trips = jnp.asarray(0)
    if gn is not None:  # Gauss-Newton steps until the predicted gain is small
        obs_gn = obs.astype(gn_precision(settings, x0.dtype))
        c, t = run(gn, starts.astype(obs_gn.dtype), jnp.full(n, min(steps, GN_MAX_STEPS)),
                   GN_SWITCH, obs_gn, final=False)  # fmt: skip
        starts, n_gn, trips = c[0].astype(x0.dtype), c[3], trips + t
    c, t = run(blocks, starts, steps - n_gn, tol, obs, final=True)
    opt, h = _newton_result(c)
    executed = min(int(lanes), n) * (trips + t)
    opt = opt._replace(n_steps=opt.n_steps + n_gn, gn_steps=None if gn is None else n_gn)
    return opt, h, executed


def covariance(lap: Laplace, layout: block_arrow.Layout) -> jax.Array:
    """The dense D x D Laplace covariance H^-1 (tests and small D only)."""
    eye = jnp.eye(layout.size, dtype=lap.opt.x.dtype)
    f = jax.vmap(lambda e: block_arrow.apply_scale(lap.factor, e, layout))(eye).T  # columns F e_i
    return f @ f.T


def normal_eps(rng_key: jax.Array, num_samples: int, d: int, dtype) -> jax.Array:
    """(num_samples, d) standard-normal draws in antithetic pairs (eps, -eps)."""
    half = (num_samples + 1) // 2
    eps = jax.random.normal(rng_key, (half, d), dtype)
    return jnp.concatenate([eps, -eps], axis=0)[:num_samples]


def student_t_scale(rng_key: jax.Array, num_samples: int, m: int, nu: float, dtype) -> jax.Array:
    """(num_samples, m) ``sqrt(nu / u)``, ``u ~ chi2_nu`` independent per galaxy and per
    antithetic pair (the pair's two draws, ``+z`` and ``-z``, share it): ``eps * sqrt(nu / u)``
    of a standard-normal ``eps`` is a standard multivariate Student-t with nu degrees of
    freedom. Its own stream, ``fold_in(rng_key, 1)``: the normal ``eps`` of the same key
    are the Laplace proposal's."""
    half = (num_samples + 1) // 2
    u = 2.0 * jax.random.gamma(jax.random.fold_in(rng_key, 1), nu / 2.0, (half, m), dtype)
    u = jnp.maximum(u, jnp.finfo(dtype).tiny)  # chi2 underflow at small nu: a far, finite draw
    s = jnp.sqrt(nu / u)
    return jnp.concatenate([s, s], axis=0)[:num_samples]


def student_t_log_density(z: jax.Array, nu: float) -> jax.Array:
    """log density of the standard multivariate Student-t (nu dof, identity scale) in the
    last axis's k dimensions: ``lgamma((nu + k)/2) - lgamma(nu/2) - k/2 log(nu pi)
    - (nu + k)/2 log(1 + |z|^2 / nu)`` (normalised)."""
    from jax.scipy.special import gammaln

    k = z.shape[-1]
    const = gammaln((nu + k) / 2.0) - gammaln(nu / 2.0) - 0.5 * k * jnp.log(nu * jnp.pi)
    return const - 0.5 * (nu + k) * jnp.log1p(jnp.sum(z * z, axis=-1) / nu)


def _draws(lap: Laplace, posterior, z: jax.Array, layout: block_arrow.Layout, stats) -> tuple:
    """The draws ``x* + F z`` (F F^T = H^-1) of whitened ``z`` (K, D): ``(xs, Draws)``, the
    unconstrained draws and the constrained ones with ``stats`` and MAP's record."""
    xs = lap.opt.x[None, :] + jax.vmap(lambda e: block_arrow.apply_scale(lap.factor, e, layout))(z)
    samples = jax.vmap(posterior.constrain_fn)(xs)
    info = MapInfo(
        potential=lap.opt.potential,
        grad_norm_whitened=lap.grad_whitened,
        n_steps=lap.opt.n_steps,
        converged=lap.opt.converged,
        decrement=lap.decrement,
        laplace_ok=lap.ok,
        std=lap.std,
        gn_steps=lap.opt.gn_steps,
    )
    draws = Draws(
        samples={k: v[None] for k, v in samples.items()},
        stats={k: v[None] for k, v in stats.items()},
        mode=posterior.constrain_fn(lap.opt.x),
        info=info,
    )
    return xs, draws


def fit(
    rng_key: jax.Array, obs: jax.Array, posterior, settings: MapConfig, lap: Laplace | None = None
) -> Draws:
    """MAP + Laplace for ONE realization: ``num_samples`` antithetic Laplace draws
    (``lap``: an already computed :func:`laplace` of this realization). ``proposal`` is
    the interim model's (:func:`interim_fit`): the joint model's draws are always Laplace's."""
    lap = laplace(obs, posterior, settings) if lap is None else lap
    eps = normal_eps(rng_key, settings.num_samples, lap.opt.x.shape[0], lap.opt.x.dtype)
    log_q = -0.5 * jnp.sum(eps * eps, axis=1) + 0.5 * lap.log_det
    return _draws(lap, posterior, eps, layout_of(posterior), {"laplace_log_q": log_q})[1]


#: Laplace draws whose per-galaxy log densities the interim model's importance weights
#: evaluate together (``lax.map`` in chunks of this many draws): all 1,000 at once held
#: 1,000 x M rendered stamps per lane (0.5 GiB per realization of 32 galaxies); in chunks
#: the program's memory per lane is within a small factor of the joint model's
DRAW_CHUNK = 50


def draws_lane_width(posterior, obs: jax.Array, settings: MapConfig) -> int:
    """The most lanes whose draws stage (:func:`interim_fit`'s per-galaxy log targets of
    ``min(DRAW_CHUNK, num_samples)`` draws at a time, vmapped over the lanes) keeps every
    tensor within :data:`shearbatch.core.limits.MAX_ELEMENTS`: one draw's largest tensor
    (traced on shapes, ~0.1 s at Level 2) x the draws evaluated together. ``obs``: the
    batch's stamps (lanes, M, H, W) or one realization's."""
    from ..limits import lanes_within, largest_elements

    one_obs = jax.ShapeDtypeStruct(obs.shape[-3:], obs.dtype)
    x = jax.ShapeDtypeStruct(posterior.x0.shape, obs.dtype)
    per_draw = largest_elements(lambda x_, o: galaxy_log_target(posterior, x_, o), x, one_obs)
    return lanes_within(per_draw * min(DRAW_CHUNK, settings.num_samples))


def galaxy_log_target(posterior, x: jax.Array, obs: jax.Array) -> jax.Array:
    """Per-galaxy ``log p(d_j, theta_j) + log |dT/dx|_j`` (M,) of a model whose galaxies are
    independent (the interim model: no shear site), at ONE unconstrained point ``x``.

    Every per-galaxy site's log-density (latents, the stamp's likelihood, the
    ``|e| < 1`` factor) and each transform's log-Jacobian, elementwise over the
    ``galaxy`` plate; scalar sites (fixed-shear factors, 0) are left out. The sum over
    galaxies is ``-posterior.potential_fn(x, obs)``.
    """
    from numpyro.distributions import biject_to
    from numpyro.handlers import substitute, trace

    params = posterior.constrain_fn(x)
    m = obs.shape[0]
    tr = trace(substitute(posterior.model, data=params)).get_trace(obs)
    out = jnp.zeros((m,), obs.dtype)
    for name, site in tr.items():
        if site["type"] != "sample":
            continue
        lp = site["fn"].log_prob(site["value"])
        if jnp.shape(lp) == (m,):
            out = out + lp
        if name in params:
            t = biject_to(site["fn"].support)
            v = params[name]
            out = out + jnp.broadcast_to(t.log_abs_det_jacobian(t.inv(v), v), (m,))
    return out


def proposal_log_q(z_local: jax.Array, log_diag: jax.Array, settings: MapConfig) -> jax.Array:
    """Per-galaxy log density (K, M) of the proposal at the draws with whitened coordinates
    ``z_local`` (K, M, k), in the unconstrained x: the whitened density plus
    ``sum log diag(L_j)`` (``log_diag`` (M, k); ``z_j = L_j^T (x_j - x*_j)``). Laplace:
    ``-|z_j|^2 / 2`` (without its constant ``-k/2 log 2 pi``, as the weights always had);
    Student-t: :func:`student_t_log_density` (normalised)."""
    if settings.proposal_kind == STUDENT_T:
        log_z = student_t_log_density(z_local, settings.dof)
    else:
        log_z = -0.5 * jnp.sum(z_local * z_local, axis=-1)
    return log_z + jnp.sum(log_diag, axis=-1)[None, :]


def interim_fit(rng_key: jax.Array, obs: jax.Array, posterior, settings: MapConfig) -> Draws:
    """MAP + Laplace of ONE realization of the interim model, with per-galaxy importance
    ratios of its draws (MAP's :attr:`~.base.Method.interim` fit, which
    :func:`~.interim.as_interim` wraps).

    The galaxies are independent (no shear), so the Hessian is its per-galaxy blocks
    A_j = L_j L_j^T (:mod:`shearbatch.core.block_arrow` with no shared latent) and the proposal
    ``q`` factors by galaxy. The draws are ``x_j = x*_j + L_j^-T z_j`` with whitened
    ``z_j``, per galaxy; ``x*`` is the MAP (``proposal_centre: map``, the default) or the
    mode of the density the weights target, ``-posterior.potential_fn`` (``target``), and
    ``L_j`` the Cholesky factor of the Hessian there. ``settings.proposal``:

    - ``laplace`` (default): ``z_j = eps_j`` standard normal (the Laplace Gaussian,
      ``log q_j = -1/2 |z_j|^2 + sum log diag(L_j)``);
    - ``student_t``: ``z_j = eps_j sqrt(nu / u_j)``, ``u_j ~ chi2_nu`` independent per
      galaxy and draw (:func:`student_t_scale`): a k-dimensional Student-t with the
      Laplace centre and scale matrix, ``log q_j`` its density
      (:func:`student_t_log_density`) plus ``sum log diag(L_j)``.

    Draws come in antithetic pairs (+z, -z). Per draw k and galaxy j the statistic
    :data:`~.interim.LOG_RATIO` is ``log p(d_j, x_kj) - log q_j(x_kj)`` (the importance
    ratio of the exact interim posterior to the proposal, up to a per-galaxy constant);
    :func:`~.interim.as_interim` divides the interim ellipticity prior out of it, giving
    ``interim_log_weight``. The written draws are proposal draws:
    only weighted do they estimate the interim posterior (with ``student_t`` their plain
    spread is ~sqrt(nu / (nu - 2)) times the Laplace width). ``is_ess`` (M,) is the
    effective sample size of the importance ratios p / q: the importance-sampling
    efficiency of the proposal, ``is_ess / num_samples``; ``weighted_std`` the
    self-normalised importance-weighted std of each site per galaxy (the interim
    posterior's; ``convergence.json``'s ``laplace.posterior_std`` with ``student_t``).
    The proposal's log density summed over galaxies is the statistic ``laplace_log_q``
    (Laplace) or ``proposal_log_q`` (Student-t).
    """
    from ..population import ess

    layout = layout_of(posterior)
    if layout.shared.size or not layout.local.size:
        raise ValueError("interim fit: every latent must be per-galaxy (no shear site)")
    target = settings.proposal_centre == "target"
    lap = laplace(obs, posterior, settings, posterior.potential_fn if target else None)
    x, local = lap.opt.x, layout.local
    z = normal_eps(rng_key, settings.num_samples, x.shape[0], x.dtype)
    if settings.proposal_kind == STUDENT_T:
        s = student_t_scale(rng_key, settings.num_samples, local.shape[0], settings.dof, x.dtype)
        z = z.at[:, local].set(z[:, local] * s[:, :, None])
    log_diag = jnp.log(jnp.diagonal(lap.factor.chol_a, axis1=-2, axis2=-1))  # (M, k)
    log_q = proposal_log_q(z[:, local], log_diag, settings)  # (K, M)
    if settings.proposal_kind == STUDENT_T:
        stats = {"proposal_log_q": jnp.sum(log_q, axis=1)}
    else:  # as fit's, bit for bit
        stats = {"laplace_log_q": -0.5 * jnp.sum(z * z, axis=1) + 0.5 * lap.log_det}
    xs, draws = _draws(lap, posterior, z, layout, stats)
    # (K, M), DRAW_CHUNK draws rendered at a time: the program's memory per lane holds one
    # chunk's stamps, not all K draws' (bench/bench_memory.py)
    # in settings.draw_precision (float32: the stamps of the draws at about half the cost)
    lt = x.dtype if settings.draw_precision is None else jnp.dtype(settings.draw_precision)
    obs_lt = obs.astype(lt)
    log_p = jax.lax.map(lambda x: galaxy_log_target(posterior, x.astype(lt), obs_lt), xs,
                        batch_size=min(DRAW_CHUNK, xs.shape[0])).astype(x.dtype)  # fmt: skip
    log_r = jnp.where(jnp.isnan(log_p), -jnp.inf, log_p) - log_q
    samples = {k: v[0] for k, v in draws.samples.items()}
    stats = {**draws.stats, LOG_RATIO: log_r[None]}
    info = draws.info._replace(is_ess=ess(log_r.T))
    if settings.proposal_kind == STUDENT_T:
        info = info._replace(weighted_std=weighted_std(samples, log_r))
    return draws._replace(stats=stats, info=info)


def weighted_std(samples: dict[str, jax.Array], log_r: jax.Array) -> dict[str, jax.Array]:
    """Self-normalised importance-weighted std per galaxy (M,) of each site's draws
    ``samples[site]`` (K, M) with log weights ``log_r`` (K, M)."""
    w = jax.nn.softmax(jnp.where(jnp.isnan(log_r), -jnp.inf, log_r), axis=0)
    out = {}
    for k, v in samples.items():
        mean = jnp.sum(w * v, axis=0, keepdims=True)
        out[k] = jnp.sqrt(jnp.sum(w * (v - mean) ** 2, axis=0))
    return out


def std_by_site(samples) -> dict[str, np.ndarray]:
    """Posterior std of each site (per galaxy for per-galaxy sites); draws (chain, draw, ...)."""
    return {k: np.std(v, axis=(0, 1)) for k, v in samples.items()}


def fit_batch(
    keys: jax.Array,
    obs: jax.Array,
    posterior,
    chunk: int | None,
    *,
    fit_one,
    settings: MapConfig,
    objective=None,
) -> Draws:
    """MAP + Laplace of a BATCH of realizations (leading axis B of ``keys`` and ``obs``):
    :meth:`~.base.Method.fit_batch`. The optimiser runs on refilled lanes
    (:func:`laplace_batch`; :func:`shearbatch.core.batching.refill_lanes` of B and
    ``chunk``), then ``fit_one(key, obs, posterior)`` (the per-realization fit, e.g.
    :func:`interim_fit`) runs vmapped over the realizations, ``chunk`` at a time when
    given, with its :func:`laplace` given the refilled fit (:func:`given_fit`): its
    draws, weights and records are computed as for a realization fitted alone.
    ``objective``: the one ``fit_one`` fits (None: ``posterior.mode_fn``; checked)."""
    from ..batching import in_chunks, refill_lanes
    from ..limits import in_lane_pieces

    objective = posterior.mode_fn if objective is None else objective
    n = obs.shape[0]
    lanes = refill_lanes(n, chunk)
    opt, h, executed = laplace_batch(obs, posterior, settings, objective, lanes)

    def one(key, o, opt_r, h_r):
        with given_fit(opt_r, h_r, objective):
            return fit_one(key, o, posterior)

    # the draws stage in pieces of lanes small enough that no tensor of it passes XLA's
    # 32-bit element counts (core/limits.py: its GPU inverse FFT skips its 1/N scaling
    # there, openxla/xla#45009): on a GPU's unchunked batch of 4,096 lanes, 2 pieces
    # (a passthrough below that width: the CPU's chunks of 4 lanes are unchanged)
    vone = in_chunks(jax.vmap(one), chunk) if chunk else jax.vmap(one)
    width = draws_lane_width(posterior, obs, settings)
    draws = in_lane_pieces(vone, width)(keys, obs, opt, h)
    share = jnp.full((n,), executed / n, obs.dtype)
    info = draws.info._replace(lane_steps=share, refill_lanes=jnp.full((n,), lanes))
    return draws._replace(info=info)


def diagnose(draws: Draws, proposal: dict[str, Any] | None = None) -> Diagnosis:
    """Optimiser record, Laplace widths and the mode of one realization (``proposal``:
    the interim model's proposal settings other than the defaults, recorded under
    ``importance``)."""
    info: MapInfo = draws.info
    flags = 0
    if not np.isfinite(info.potential):
        flags |= flag("NONFINITE_POTENTIAL")
    if not bool(info.laplace_ok):
        flags |= flag("HESSIAN_NOT_PD")
    # the decrement decides (an optimiser's own rule can stop at the float resolution of
    # a large U, e.g. a misspecified model's chi^2 of 1e7, with the mode already found)
    converged = bool(np.isfinite(info.decrement) and info.decrement <= DECREMENT_TOL)
    if not converged:
        flags |= flag("OPT_NOT_CONVERGED")
    diag = {
        "optimizer": {
            "converged": converged,
            "stopping_rule_met": bool(info.converged),
            "newton_decrement": float(info.decrement),
            "n_steps": int(info.n_steps),
            "grad_norm_whitened": float(info.grad_norm_whitened),
            "potential": float(info.potential),
        },
        "laplace": {
            "positive_definite": bool(info.laplace_ok),
            "std_unconstrained": [float(s) for s in np.asarray(info.std)],
            "posterior_std": std_by_site(draws.samples),
        },
    }
    if info.weighted_std is not None:  # Student-t draws: their plain std is the proposal's
        diag["laplace"]["posterior_std"] = {k: np.asarray(v) for k, v in info.weighted_std.items()}
        diag["laplace"]["posterior_std_weighted"] = True
    if info.is_ess is not None:  # the interim model: the proposal's importance-sampling efficiency
        n = next(iter(draws.samples.values())).shape[1]
        frac = np.asarray(info.is_ess, float) / n
        diag["importance"] = {"ess_fraction": frac.tolist(), "min": float(frac.min()),
                              "median": float(np.median(frac)), "n_draws": int(n)}  # fmt: skip
        diag["importance"].update(proposal or {})
    return Diagnosis(draws.stats, diag, flags)


def batch_report(draws: Draws, lockstep: int | None = None) -> dict[str, Any]:
    """Lockstep efficiency of a batch: the Newton steps its realizations needed / the
    lane-steps its loops executed, and the step counts.

    A batch fitted by :func:`fit_batch` (refilled lanes) carries what its loops executed
    (``lane_steps``, counted inside the program). A vmapped per-realization fit runs every
    lane of a chunk of ``lockstep`` lanes (default the whole batch) until the chunk's
    slowest lane has converged, phase by phase (Gauss-Newton, then exact Newton): the
    executed lane-steps follow from the per-lane step counts."""
    info = draws.info
    n = np.asarray(info.n_steps).reshape(-1)
    out: dict[str, Any]
    if info.lane_steps is not None:
        executed = float(np.sum(np.asarray(info.lane_steps, float)))
        out = {"lockstep_efficiency": float(n.sum() / executed) if executed > 0 else 1.0,
               "lockstep_lanes": int(np.max(np.asarray(info.refill_lanes))),
               "refill": True, "executed_lane_steps": round(executed)}  # fmt: skip
    else:  # each phase's loop ran its chunk's slowest lane's steps on every lane
        group = min(lockstep or n.size, n.size)
        gn = np.zeros_like(n) if info.gn_steps is None else np.asarray(info.gn_steps).reshape(-1)
        executed = sum(min(group, n.size - i) * (int(gn[i : i + group].max())
                       + int((n - gn)[i : i + group].max())) for i in range(0, n.size, group))  # fmt: skip
        eff = float(n.sum() / executed) if executed > 0 else 1.0
        out = {"lockstep_efficiency": eff, "lockstep_lanes": group}
    out["newton_steps"] = {"median": float(np.median(n)), "max": int(n.max())}
    return out


def proposal_record(settings: MapConfig) -> dict[str, Any]:
    """The interim proposal's settings that differ from the default (the Laplace Gaussian
    at the MAP), as ``convergence.json``'s ``importance`` records them: ``proposal``,
    ``proposal_dof`` (Student-t) and ``proposal_centre``; empty for the default."""
    out: dict[str, Any] = {}
    if settings.proposal_kind != LAPLACE:
        out["proposal"], out["proposal_dof"] = settings.proposal_kind, settings.dof
    if settings.proposal_centre not in (None, "map"):
        out["proposal_centre"] = settings.proposal_centre
    return out


def method(cfg: MapConfig) -> Method:
    """MAP + Laplace with the settings ``cfg`` (``inference.map_config``); its interim
    variant (:func:`interim_fit`) records the proposal's settings under ``importance``."""
    # the joint model ignores proposal / proposal_centre: its written posterior is always
    # the Laplace draws at the MAP (unweighted), so that `--set inference.shear_model=joint`
    # on configs/level2.yaml runs the joint model as before
    # chunks of 4 lanes: 1.8-3.1x faster than one vmap on CPU (bench/bench_chunking.py)
    interim_one = functools.partial(interim_fit, settings=cfg)

    def interim_batch(keys, obs, post, chunk):  # the refilled optimiser (issue 42)
        target = cfg.proposal_centre == "target"
        return fit_batch(keys, obs, post, chunk, fit_one=interim_one, settings=cfg,
                         objective=post.potential_fn if target else None)  # fmt: skip

    interim = Method(
        "map",
        lambda key, obs, post: interim_fit(key, obs, post, cfg),
        functools.partial(diagnose, proposal=proposal_record(cfg)),
        batch_report,
        point_estimate="mode",
        cpu_chunk=4,
        fit_batch=interim_batch if refills(cfg) else None,
    )
    return Method(
        "map",
        lambda key, obs, post: fit(key, obs, post, cfg),
        diagnose,
        batch_report,
        point_estimate="mode",
        cpu_chunk=4,
        interim=interim,
    )
