"""Output warping: a monotone transform of a client's observations before its GP sees them.

Every method models a client's observations standardised with the client's
own statistics (DESIGN.md section 3). An objective whose values are heavily
skewed (Branin spans about 0.4 to 300 over its box, while the queries that
matter differ by tenths near the minimum) leaves the differences a BO run
must resolve late a tiny share of the standardised spread; a GP then either
smooths them away or learns a noise variance far above the observation
noise. A monotone warp that stretches the low end and compresses the high
end keeps the order of the observations (so the minimiser of the warped
objective is the minimiser of the objective) while giving the GP a target
it can fit with one smoothness over the whole box. BoTorch offers such
transforms as outcome transforms (``Log``, ``Power``); HEBO fits a power
transform every iteration.

Warps here (``kind``):

* ``none``: the identity (the paper; the default).
* ``log``: ``log(y - min y + offset * (max y - min y))`` over the client's
  valid observations, ``offset`` = :data:`LOG_OFFSET`.
* ``yeo-johnson``: the Yeo-Johnson power transform (Yeo and Johnson, 2000)
  of the standardised observations with the exponent ``lambda`` that
  maximises its Gaussian log-likelihood, as ``scipy.stats.yeojohnson`` fits
  it, taken over a grid of :data:`YJ_GRID` (``[-2, 2]`` in steps of 0.05)
  so that it is a fixed-shape, jit-compatible computation.

The warp runs on the client, on its own data, every round; nothing about it
leaves the client. It applies to every method alike (PACD-BO and PACOH-BO's
meta-GP, the Independent and CBOC GPs), so comparisons between methods stay
like for like. Everything works on padded buffers: ``mask`` marks the valid
rows and padding comes out as 0.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from pacd_jax.config import OUTPUT_WARPS
from pacd_jax.gp import standardise

Array = jax.Array

#: ``log`` warp: the offset below the smallest observation, as a share of the observations' range.
LOG_OFFSET = 0.01

#: ``yeo-johnson``: the exponents searched for the maximum-likelihood fit.
YJ_GRID = np.round(np.linspace(-2.0, 2.0, 81), 10)


def _valid_min_max(y: Array, mask: Array) -> tuple[Array, Array]:
    lo = jnp.min(jnp.where(mask, y, jnp.inf))
    hi = jnp.max(jnp.where(mask, y, -jnp.inf))
    return lo, hi


def log_warp(y: Array, mask: Array, offset: float = LOG_OFFSET) -> Array:
    """``log(y - min y + offset * range)`` on the valid rows of ``y`` (padding 0).

    A constant ``y`` (range 0) maps to the constant ``log(offset)``, which
    standardises to 0 like a constant unwarped ``y``.
    """
    lo, hi = _valid_min_max(y, mask)
    spread = jnp.where(hi > lo, hi - lo, 1.0)
    safe = jnp.where(mask, y, lo)
    return jnp.where(mask, jnp.log(safe - lo + offset * spread), 0.0)


def yeo_johnson(z: Array, lam: Array | float) -> Array:
    """The Yeo-Johnson transform of ``z`` with exponent ``lam`` (elementwise; ``scipy.stats.yeojohnson``).

    ``((z + 1)^lam - 1) / lam`` for ``z >= 0`` (``log(z + 1)`` at ``lam = 0``)
    and ``-((1 - z)^(2 - lam) - 1) / (2 - lam)`` for ``z < 0``
    (``-log(1 - z)`` at ``lam = 2``).
    """
    lam = jnp.asarray(lam, z.dtype)
    a = jnp.log1p(jnp.abs(z))  # log(|z| + 1), both branches
    pos_lam, neg_lam = lam, 2.0 - lam
    tiny = 1e-8

    def branch(p):
        # (exp(p a) - 1) / p, continuous at p = 0 where it is a
        small = jnp.abs(p) < tiny
        return jnp.where(small, a, jnp.expm1(p * a) / jnp.where(small, 1.0, p))

    return jnp.where(z >= 0, branch(pos_lam), -branch(neg_lam))


def yeo_johnson_llf(z: Array, mask: Array, lam: Array | float) -> Array:
    """Gaussian log-likelihood of the transformed valid rows (``scipy.stats.yeojohnson_llf``).

    ``-n/2 log var(T(z)) + (lam - 1) sum sign(z) log(|z| + 1)``, the variance
    with divisor n.
    """
    n = jnp.maximum(jnp.sum(mask), 1).astype(z.dtype)
    t = yeo_johnson(z, lam)
    mean = jnp.sum(jnp.where(mask, t, 0.0)) / n
    var = jnp.sum(jnp.where(mask, (t - mean) ** 2, 0.0)) / n
    jac = jnp.sum(jnp.where(mask, jnp.sign(z) * jnp.log1p(jnp.abs(z)), 0.0))
    return -0.5 * n * jnp.log(jnp.maximum(var, jnp.finfo(z.dtype).tiny)) + (lam - 1.0) * jac


def fit_yeo_johnson(z: Array, mask: Array, grid=YJ_GRID) -> Array:
    """The exponent on ``grid`` with the largest :func:`yeo_johnson_llf` of the valid rows."""
    lams = jnp.asarray(grid, z.dtype)
    llf = jax.vmap(lambda lam: yeo_johnson_llf(z, mask, lam))(lams)
    return lams[jnp.argmax(llf)]


def warp_outputs(y: Array, mask: Array, kind: str = "none") -> Array:
    """The client's observations as its GP models them, before standardisation.

    Args:
        y: ``(M,)`` observations in the objective's units (padding ignored).
        mask: ``(M,)`` valid rows.
        kind: one of :data:`OUTPUT_WARPS`.

    Returns:
        ``(M,)``: ``y`` itself for ``none``; otherwise the warped valid rows,
        padding 0. Standardise the result as usual.
    """
    if kind == "none":
        return y
    if kind == "log":
        return log_warp(y, mask)
    if kind == "yeo-johnson":
        z = standardise(y, mask)[0]
        return jnp.where(mask, yeo_johnson(z, fit_yeo_johnson(z, mask)), 0.0)
    raise ValueError(f"unknown output warp {kind!r}; choose one of {', '.join(OUTPUT_WARPS)}")
