"""UCB acquisition (paper eq. 10), expected improvement (CBOC baselines) and their maximiser over the unit box.

The maximiser is pure and jit-able: a batch of random candidates (uniform
over the box, plus Gaussian perturbations of an incumbent point), then
projected-Adam refinement of the best few, all vectorised, clipped to the box.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

Array = jax.Array

#: Variance floor inside the square root so the gradient stays finite at
#: observed points, where the posterior variance is ~0.
VARIANCE_FLOOR = 1e-12


def ucb(mean: Array, variance: Array, kappa: float) -> Array:
    """``A_UCB = kappa * sigma - mu`` for minimisation (paper section III-C).

    Args:
        mean, variance: posterior (mixture) moments, any matching shapes.
        kappa: exploration weight, ``kappa > 0``.
    """
    return kappa * jnp.sqrt(jnp.maximum(variance, VARIANCE_FLOOR)) - mean


def expected_improvement(mean: Array, variance: Array, best: Array) -> Array:
    """Expected improvement below ``best`` for minimisation (the CBOC baselines' acquisition).

    ``EI(x) = (best - mu) Phi(z) + sigma phi(z)``, ``z = (best - mu) / sigma``
    (Jones et al. 1998), i.e. ``E[max(best - f(x), 0)]`` under ``f(x) ~ N(mu, sigma^2)``.

    Args:
        mean, variance: posterior moments, matching shapes.
        best: the incumbent value (same units as ``mean``), broadcastable.
    """
    sigma = jnp.sqrt(jnp.maximum(variance, VARIANCE_FLOOR))
    gap = best - mean
    z = gap / sigma
    return gap * jax.scipy.stats.norm.cdf(z) + sigma * jax.scipy.stats.norm.pdf(z)


@dataclasses.dataclass(frozen=True)
class MaximiserConfig:
    """Settings of :func:`maximise`.

    Attributes:
        num_candidates: uniform random candidates over the box.
        num_local: Gaussian perturbations of the incumbent (the best observed
            point), with std ``local_scale`` per coordinate of the unit box.
        num_refine: the best candidates refined by projected Adam.
        refine_steps, refine_lr: Adam steps and learning rate of the refinement.
    """

    num_candidates: int = 1024
    num_local: int = 256
    local_scale: float = 0.05
    num_refine: int = 5
    refine_steps: int = 50
    refine_lr: float = 0.01

    def __post_init__(self):
        for name in ("num_candidates", "num_refine"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        for name in ("num_local", "refine_steps"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or value < 0:
                raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
        if self.num_refine > self.num_candidates + self.num_local:
            raise ValueError(
                f"num_refine ({self.num_refine}) exceeds the number of candidates "
                f"({self.num_candidates + self.num_local})"
            )
        for name in ("local_scale", "refine_lr"):
            value = getattr(self, name)
            if not (np.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be positive and finite, got {value!r}")


def maximise(
    acq: Callable[[Array], Array],
    key: Array,
    dim: int,
    config: MaximiserConfig = MaximiserConfig(),
    incumbent: Array | None = None,
    dtype=None,
) -> tuple[Array, Array]:
    """Maximise ``acq`` over ``[0, 1]^dim``.

    Args:
        acq: batched acquisition, ``(T, dim) -> (T,)``; must be differentiable.
        key: PRNG key for the candidates.
        dim: input dimension.
        config: candidate and refinement settings.
        incumbent: optional ``(dim,)`` point around which local candidates are drawn.
        dtype: candidate dtype (default: JAX's default float).

    Returns:
        ``(x_best, acq(x_best))`` with ``x_best`` of shape ``(dim,)`` inside the box.
    """
    dtype = dtype or jnp.result_type(float)
    key_u, key_l = jax.random.split(key)
    cands = jax.random.uniform(key_u, (config.num_candidates, dim), dtype)
    if config.num_local and incumbent is not None:
        noise = config.local_scale * jax.random.normal(key_l, (config.num_local, dim), dtype)
        local = jnp.clip(incumbent.astype(dtype)[None, :] + noise, 0.0, 1.0)
        cands = jnp.concatenate([cands, local, incumbent.astype(dtype)[None, :]], axis=0)
    values = acq(cands)
    values = jnp.where(jnp.isfinite(values), values, -jnp.inf)
    _, top = jax.lax.top_k(values, config.num_refine)
    starts = cands[top]

    def neg_acq(x):
        return -acq(x[None, :])[0]

    opt = optax.adam(config.refine_lr)
    lower, upper = jnp.zeros((dim,), dtype), jnp.ones((dim,), dtype)

    def refine(x0):
        def body(_, carry):
            x, state = carry
            g = jax.grad(neg_acq)(x)
            g = jnp.where(jnp.isfinite(g), g, 0.0)
            updates, state = opt.update(g, state, x)
            x = optax.projections.projection_box(optax.apply_updates(x, updates), lower, upper)
            return x, state

        x, _ = jax.lax.fori_loop(0, config.refine_steps, body, (x0, opt.init(x0)))
        return x

    refined = jax.vmap(refine)(starts)
    # Keep the refined point only where it improved on its start.
    all_x = jnp.concatenate([starts, refined], axis=0)
    all_v = acq(all_x)
    all_v = jnp.where(jnp.isfinite(all_v), all_v, -jnp.inf)
    best = jnp.argmax(all_v)
    return all_x[best], all_v[best]
