"""Batched dense linear algebra for small SPD matrices, written as matrix products.

The GMLL gradient needs, per (client, particle), the full inverse of the
Gram matrix (DESIGN.md section 3:
``d ln Z / dK = 1/2 (a a^T - K^-1)``). On the CPU, XLA hands batched
``cholesky`` and ``triangular_solve`` to LAPACK one matrix at a time, which for
the 20-220 point matrices of BO runs at a small fraction of the speed of a
batched matrix product; ``cho_solve(L, I)`` was 80 % of a GMLL-gradient step
of the 5 x 110 x 6-D configuration (bench/svgd_step.py). The recursive block
Cholesky below moves almost all flops into batched matrix products:

    L = [[L_A, 0], [Z, L_S]],  Z = B L_A^-T,  S = C - Z Z^T = L_S L_S^T,
    L^-1 = [[L_A^-1, 0], [-L_S^-1 Z L_A^-1, L_S^-1]],  K^-1 = L^-T L^-1,

applied recursively; blocks of ``base`` rows or fewer are factorised by
LAPACK. On the 50 Gram matrices of 110 rows of one SVGD step
this is 1.7x faster than ``cho_solve(cholesky(K), I)`` (bench/svgd_step.py).
The function works on leading batch axes and is jit- and vmap-compatible;
sizes are static.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.scipy.linalg import solve_triangular

Array = jax.Array

#: Below this size a block is factorised by LAPACK directly.
DEFAULT_BASE = 32


def _t(a: Array) -> Array:
    return jnp.swapaxes(a, -1, -2)


def cholesky_inverse(a: Array, base: int = DEFAULT_BASE) -> Array:
    """``L^-1`` for the lower Cholesky factor ``L`` of SPD ``a``, by recursive blocks.

    With ``a = [[A, B^T], [B, C]]``, ``A = L_A L_A^T``, ``Z = B L_A^-T`` and
    ``S = C - Z Z^T = L_S L_S^T``: ``L = [[L_A, 0], [Z, L_S]]`` and
    ``L^-1 = [[L_A^-1, 0], [-L_S^-1 Z L_A^-1, L_S^-1]]``.

    This is the blocked Cholesky factorisation, so it inherits its backward
    stability: the Schur complement is formed as ``C - Z Z^T`` from the
    factor, not as ``C - B A^-1 B^T`` from an explicit inverse, which in
    float32 can turn indefinite (and the inverse NaN) for Gram matrices of
    condition number only ~1e4 (a Branin run's clustered queries did).
    Blocks of ``base`` rows or fewer are factorised by LAPACK.
    """
    n = a.shape[-1]
    if n <= base:
        chol = jnp.linalg.cholesky(a)
        eye = jnp.broadcast_to(jnp.eye(n, dtype=a.dtype), a.shape)
        return solve_triangular(chol, eye, lower=True)
    h = n // 2
    la_inv = cholesky_inverse(a[..., :h, :h], base)
    z = a[..., h:, :h] @ _t(la_inv)  # B L_A^-T
    s = a[..., h:, h:] - z @ _t(z)
    ls_inv = cholesky_inverse(0.5 * (s + _t(s)), base)
    off = -(ls_inv @ z) @ la_inv
    zeros = jnp.zeros(a.shape[:-2] + (h, n - h), a.dtype)
    top = jnp.concatenate([la_inv, zeros], axis=-1)
    return jnp.concatenate([top, jnp.concatenate([off, ls_inv], axis=-1)], axis=-2)


def spd_inverse(a: Array, base: int = DEFAULT_BASE) -> Array:
    """``a^-1 = L^-T L^-1`` of SPD ``a`` from :func:`cholesky_inverse` (all matrix products)."""
    l_inv = cholesky_inverse(a, base)
    return _t(l_inv) @ l_inv
