"""Block-arrow linear algebra: the Hessian of M galaxies sharing a shear, in O(M).

One realization's latents are the shared ones (the shear: ``ns`` = 2 at Levels 1-2)
and, per galaxy j, its own ``k`` latents (6 at Level 2). Galaxy j's latents meet
only their own stamp, their own prior and the shear, so the Hessian, with the
galaxies first and the shared latents last, is block-arrow:

    H = [[A, C], [C^T, G]],  A = diag(A_1 .. A_M) (k x k each),
        C = [C_1; ..; C_M] (C_j: k x ns),  G: ns x ns.

Everything MAP and the samplers that start from it need is computed from the blocks
(:class:`Arrow`), never from a dense D x D matrix (D = ns + k M), by block
elimination (the Schur complement of the galaxy blocks, e.g. Boyd & Vandenberghe,
Convex Optimization, Appendix C.4):

    H = L diag(A_1 .. A_M, S) L^T,   L = [[I, 0], [C^T A^-1, I]],
    S = G - sum_j C_j^T A_j^-1 C_j                            (block LDL^T)

- Newton direction (saddle-free): p = -L^-T |D|^-1 L^-1 g, where |D| replaces each
  diagonal block by its absolute value (eigenvectors kept, eigenvalues |w| floored at
  1e-12 of the block's largest). Where H is positive definite this is the exact Newton
  step; elsewhere g^T p = -|(L^-1 g)|^2_{|D|^-1} < 0, a descent direction;
- decrement g^T |H|^-1 g = sum_j g_j^T |A_j|^-1 g_j + w^T |S|^-1 w, w = g_s - sum_j
  C_j^T A_j^-1 g_j;
- log det H = sum_j log det A_j + log det S;
- exact draws of N(x*, H^-1) (:func:`apply_scale`): x_s = x*_s + S^-1/2 eps_s,
  x_j = x*_j - A_j^-1 C_j (x_s - x*_s) + A_j^-1/2 eps_j (S^-1/2 = L_S^-T with
  S = L_S L_S^T, and the same for A_j);
- marginal variances diag(H^-1): S^-1 for the shared latents, A_j^-1 + (A_j^-1 C_j)
  S^-1 (A_j^-1 C_j)^T for galaxy j's.

Each costs O(M (k^3 + k^2 ns) + ns^3) time and O(M k^2) memory. A posterior without
per-galaxy latents is the same algebra with M = 0 (:func:`dense_layout`: G is the whole
Hessian, from ``jax.hessian``).

The blocks come from ``ns + k`` Hessian-vector products whatever M (the colouring of
:mod:`shearbatch.core.posterior`): the product with ``sum_j e_(j, s)`` (galaxy site s)
holds column (j, s) of A_j in galaxy j's rows; the product with a shared latent's unit
vector holds its column of G and, by symmetry, its row of every C_j.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "Arrow",
    "Factor",
    "Layout",
    "apply_scale",
    "blocks_fn",
    "dense_layout",
    "factor",
    "fallback",
    "gauss_newton_blocks_fn",
    "log_det",
    "merge",
    "newton_direction",
    "split",
    "to_dense",
    "variances",
    "whiten",
]

#: eigenvalues of a block below this fraction of its largest are floored (saddle-free Newton)
EIG_FLOOR = 1e-12


class Layout(NamedTuple):
    """Where the blocks sit in the flat latent vector (NumPy, static).

    shared: (ns,) flat indices of the shared latents; local: (M, k) flat index of
    galaxy j's latent s; shared_colour / local_colour: the Hessian-vector product
    (colour) that holds each shared latent's column / each galaxy site's columns;
    n_colours: how many products (None: ``jax.hessian``, the dense layout).
    """

    shared: np.ndarray
    local: np.ndarray
    shared_colour: np.ndarray
    local_colour: np.ndarray
    n_colours: int | None

    @property
    def size(self) -> int:
        return int(self.shared.size + self.local.size)


class Arrow(NamedTuple):
    """The Hessian's blocks: A (M, k, k), C (M, k, ns), G (ns, ns)."""

    A: jax.Array
    C: jax.Array
    G: jax.Array


class Factor(NamedTuple):
    """Cholesky factors of the block LDL^T: A_j = La_j La_j^T (M, k, k), A_j^-1 C_j
    (M, k, ns), S = Ls Ls^T (ns, ns)."""

    chol_a: jax.Array
    ainv_c: jax.Array
    chol_s: jax.Array


def dense_layout(d: int) -> Layout:
    """Every latent shared (M = 0): the blocks are the dense Hessian."""
    empty = np.zeros((0, 0), dtype=int)
    return Layout(np.arange(d), empty, np.arange(d), np.zeros(0, dtype=int), None)


def split(x: jax.Array, layout: Layout) -> tuple[jax.Array, jax.Array]:
    """(x_local (M, k), x_shared (ns,)) of a flat vector."""
    return x[layout.local], x[layout.shared]


def merge(xl: jax.Array, xs: jax.Array, layout: Layout) -> jax.Array:
    """The flat vector of ``split``'s parts."""
    out = jnp.zeros(layout.size, dtype=xs.dtype if xs.size else xl.dtype)
    return out.at[layout.local].set(xl).at[layout.shared].set(xs)


def _sym(a: jax.Array) -> jax.Array:
    return 0.5 * (a + jnp.swapaxes(a, -1, -2))


def blocks_fn(f: Callable, layout: Layout) -> Callable[[jax.Array, jax.Array], Arrow]:
    """``(x, obs) -> Arrow``: the blocks of the Hessian of ``f(x, obs)`` at x, from one
    Hessian-vector product per colour (``jax.hessian`` for the dense layout)."""
    if layout.n_colours is None:

        def dense(x: jax.Array, obs: jax.Array) -> Arrow:
            h = _sym(jax.hessian(f)(x, obs))
            return Arrow(jnp.zeros((0, 0, 0), x.dtype), jnp.zeros((0, 0, h.shape[0]), x.dtype), h)

        return dense
    grad = jax.grad(f)
    tangents = _colour_tangents(layout)

    def blocks(x: jax.Array, obs: jax.Array) -> Arrow:
        t = jnp.asarray(tangents, x.dtype)
        hv = jax.vmap(lambda v: jax.jvp(lambda y: grad(y, obs), (x,), (v,))[1])(t)
        # A[j, s', s] = Hv_{colour(s)}[(j, s')]; C[j, s, i] = Hv_{colour(i)}[(j, s)];
        # G[i, i'] = Hv_{colour(i')}[i]
        a = jnp.transpose(hv[layout.local_colour][:, layout.local], (1, 2, 0))
        c = jnp.transpose(hv[layout.shared_colour][:, layout.local], (1, 2, 0))
        g = hv[layout.shared_colour][:, layout.shared].T
        return Arrow(_sym(a), c, _sym(g))

    return blocks


def _colour_tangents(layout: Layout) -> np.ndarray:
    colour = np.full(layout.size, -1)
    colour[layout.shared] = layout.shared_colour
    colour[layout.local] = layout.local_colour[None, :]
    return np.eye(layout.n_colours)[colour].T  # (colours, D): indicator of each colour


def gauss_newton_blocks_fn(
    image_fn: Callable, prior_fn: Callable, layout: Layout
) -> Callable[[jax.Array, jax.Array], Arrow]:
    """``(x, obs) -> Arrow``: the Gauss-Newton approximation of the Hessian of
    ``prior_fn(x, obs) + sum (obs - mu(x))^2 / (2 sd^2)`` with ``(mu, sd) =
    image_fn(x, obs)`` (stamps (M, H, W), stamp j depending on galaxy j's latents and the
    shared ones only): J^T W J + the prior part's exact Hessian.

    J comes from one forward-mode Jacobian-vector product of the M stamps per colour
    (``ns + k`` whatever M): the product with ``sum_j e_(j, s)`` is, in stamp j, the
    derivative of stamp j by galaxy j's latent s; with a shared latent's unit vector,
    every stamp's derivative by it. J^T W J drops the residual's curvature term
    (sum_p r_p d^2 mu_p / dx^2 / sd^2, zero-mean noise at the mode), so it is positive
    semi-definite and costs forward passes, not the reverse-over-forward products of
    the exact Hessian.
    """
    prior_blocks = blocks_fn(prior_fn, layout)
    if layout.n_colours is None:  # dense (no per-galaxy latents): J by forward mode, D tangents

        def dense(x: jax.Array, obs: jax.Array) -> Arrow:
            _, sd = image_fn(x, obs)
            jac = jax.jacfwd(lambda y: image_fn(y, obs)[0].reshape(-1))(x)  # (pixels, D)
            w = (1.0 / (sd * sd)).reshape(-1)
            p = prior_blocks(x, obs)
            return p._replace(G=p.G + jac.T @ (w[:, None] * jac))

        return dense
    tangents = _colour_tangents(layout)

    def blocks(x: jax.Array, obs: jax.Array) -> Arrow:
        t = jnp.asarray(tangents, x.dtype)
        mu, sd = image_fn(x, obs)
        jr = jax.vmap(lambda v: jax.jvp(lambda y: image_fn(y, obs)[0], (x,), (v,))[1])(t)
        m = mu.shape[0]
        jr = jr.reshape(jr.shape[0], m, -1)  # (colours, M, pixels)
        w = (1.0 / (sd * sd)).reshape(m, -1)
        jl, js = jr[layout.local_colour], jr[layout.shared_colour]  # (k | ns, M, pixels)
        a = jnp.einsum("sjp,tjp,jp->jst", jl, jl, w)
        c = jnp.einsum("sjp,ijp,jp->jsi", jl, js, w)
        g = jnp.einsum("ijp,ljp,jp->il", js, js, w)
        p = prior_blocks(x, obs)
        return Arrow(a + p.A, c + p.C, g + p.G)

    return blocks


def to_dense(h: Arrow, layout: Layout) -> jax.Array:
    """The D x D matrix of the blocks (tests and small problems only)."""
    d = layout.size
    out = jnp.zeros((d, d), h.G.dtype)
    loc, sh = layout.local, layout.shared
    out = out.at[sh[:, None], sh[None, :]].set(h.G)
    if loc.size:
        out = out.at[loc[:, :, None], loc[:, None, :]].set(h.A)
        out = out.at[loc[:, :, None], sh[None, None, :]].set(h.C)
        out = out.at[sh[None, None, :], loc[:, :, None]].set(h.C)
    return out


def _eig_parts(a: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(eigenvectors, floored signed eigenvalues, floored |eigenvalues|) of symmetric
    blocks (..., n, n); the floor is EIG_FLOOR of each block's largest |eigenvalue|."""
    w, v = jnp.linalg.eigh(a)
    aw = jnp.abs(w)
    floor = EIG_FLOOR * jnp.max(aw, axis=-1, keepdims=True, initial=0.0)
    aw = jnp.maximum(aw, floor)
    return v, jnp.where(w < 0, -aw, aw), aw


def _eig_apply(v: jax.Array, w: jax.Array, b: jax.Array) -> jax.Array:
    """V diag(1 / w) V^T b for blocks (..., n, n) and right-hand sides (..., n, r)."""
    return v @ ((jnp.swapaxes(v, -1, -2) @ b) / w[..., :, None])


def newton_direction(h: Arrow, g: jax.Array, layout: Layout) -> tuple[jax.Array, jax.Array]:
    """Saddle-free Newton direction ``p = -L^-T |D|^-1 L^-1 g`` and the decrement
    ``g^T L^-T |D|^-1 L^-1 g`` (the exact Newton step and decrement where H is
    positive definite; always a descent direction)."""
    gl, gs = split(g, layout)
    va, wa, awa = _eig_parts(h.A)
    ainv_c = _eig_apply(va, wa, h.C)  # A_j^-1 C_j (M, k, ns)
    s = _sym(h.G - jnp.einsum("jki,jkl->il", h.C, ainv_c))
    w = gs - jnp.einsum("jki,jk->i", ainv_c, gl)  # (L^-1 g)_shared
    vs, _, aws = _eig_parts(s)
    us = _eig_apply(vs, aws, w[:, None])[:, 0]  # |S|^-1 w
    ul = _eig_apply(va, awa, gl[:, :, None])[:, :, 0]  # |A_j|^-1 g_j
    pl = -(ul - jnp.einsum("jki,i->jk", ainv_c, us))
    dec = jnp.sum(gl * ul) + jnp.sum(w * us)
    return merge(pl, -us, layout), dec


def factor(h: Arrow) -> tuple[Factor, jax.Array]:
    """(Cholesky factors of the block LDL^T, ok): ok is false unless H is finite and
    positive definite (every A_j and S)."""
    chol_a = jnp.linalg.cholesky(h.A)
    ainv_c = jax.scipy.linalg.cho_solve((chol_a, True), h.C)
    s = _sym(h.G - jnp.einsum("jki,jkl->il", h.C, ainv_c))
    chol_s = jnp.linalg.cholesky(s)
    parts = (chol_a, ainv_c, chol_s, h.A, h.C, h.G)
    ok = jnp.all(jnp.asarray([jnp.all(jnp.isfinite(p)) for p in parts]))
    return Factor(chol_a, ainv_c, chol_s), ok


def fallback(f: Factor, ok: jax.Array, sd: float) -> Factor:
    """``f`` where ``ok``, else the factor of a diagonal covariance sd^2 I (finite
    everywhere, so gradients through :func:`apply_scale` stay finite)."""
    eye_a = jnp.broadcast_to(jnp.eye(f.chol_a.shape[-1], dtype=f.chol_a.dtype), f.chol_a.shape)
    eye_s = jnp.eye(f.chol_s.shape[-1], dtype=f.chol_s.dtype)
    return Factor(
        jnp.where(ok, f.chol_a, eye_a / sd),
        jnp.where(ok, f.ainv_c, jnp.zeros_like(f.ainv_c)),
        jnp.where(ok, f.chol_s, eye_s / sd),
    )


def _solve_lt(chol: jax.Array, b: jax.Array) -> jax.Array:
    """L^-T b for lower-triangular blocks (..., n, n) and vectors (..., n)."""
    out = jax.scipy.linalg.solve_triangular(jnp.swapaxes(chol, -1, -2), b[..., None], lower=False)
    return out[..., 0]


def apply_scale(f: Factor, eps: jax.Array, layout: Layout) -> jax.Array:
    """x - x* for a standard normal ``eps`` (D,): exact draws of N(0, H^-1)."""
    el, es = split(eps, layout)
    ds = _solve_lt(f.chol_s, es)  # S^-1/2 eps_s
    dl = _solve_lt(f.chol_a, el) - jnp.einsum("jki,i->jk", f.ainv_c, ds)
    return merge(dl, ds, layout)


def whiten(f: Factor, g: jax.Array, layout: Layout) -> jax.Array:
    """D^-1/2 L^-1 g (the gradient in posterior-sd units): |.|^2 = g^T H^-1 g."""
    gl, gs = split(g, layout)
    w = gs - jnp.einsum("jki,jk->i", f.ainv_c, gl)
    tri = jax.scipy.linalg.solve_triangular
    wl = tri(f.chol_a, gl[..., None], lower=True)[..., 0]
    return merge(wl, tri(f.chol_s, w, lower=True), layout)


def log_det(f: Factor) -> jax.Array:
    """log det H = sum_j log det A_j + log det S."""
    diag = jnp.diagonal
    return 2.0 * (
        jnp.sum(jnp.log(diag(f.chol_a, axis1=-2, axis2=-1))) + jnp.sum(jnp.log(diag(f.chol_s)))
    )


def variances(f: Factor, layout: Layout) -> jax.Array:
    """diag(H^-1) in the flat order (the Laplace marginal variances)."""
    ns, k = f.chol_s.shape[0], f.chol_a.shape[-1]
    tri = jax.scipy.linalg.solve_triangular
    fs = tri(f.chol_s, jnp.eye(ns, dtype=f.chol_s.dtype), lower=True)  # Ls^-1: S^-1 = fs^T fs
    eye_a = jnp.broadcast_to(jnp.eye(k, dtype=f.chol_a.dtype), f.chol_a.shape)
    fa = tri(f.chol_a, eye_a, lower=True)  # La^-1 per galaxy
    var_s = jnp.sum(fs * fs, axis=0)
    cross = jnp.einsum("jki,li->jkl", f.ainv_c, fs)  # (A_j^-1 C_j) Ls^-T
    var_l = jnp.sum(fa * fa, axis=-2) + jnp.sum(cross * cross, axis=-1)
    return merge(var_l, var_s, layout)
