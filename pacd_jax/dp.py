"""Client-side differential privacy: clip each particle's gradient, add Gaussian noise.

Paper section VI. Before a client sends its ``K`` per-particle gradients
``A_{i,k}`` (eq. 6) it replaces each one by

    clip(A, C) = A * min(1, C / ||A||_2)                       (eq. 12)
    A~ = clip(A, C) + N(0, sigma^2 Delta^2 I),  Delta = 2C      (eq. 13)

independently for every particle ``k`` (one global L2 norm over the whole
particle pytree, a fresh noise draw per particle and per leaf). ``Delta = 2C``
is the L2 sensitivity of one clipped gradient when one data point of the
client is added or removed (both gradients lie in the ball of radius C).
``sigma`` is therefore the noise multiplier that :mod:`pacd_jax.accounting`
composes over particles, SVGD steps and rounds.

The transform follows the optax shape (``init`` / ``update`` with the PRNG key
in the state), and :func:`clip_and_noise` is the same computation as a pure
function of an explicit key, which is what the client calls with the key of
(seed, client, round, step) from :mod:`pacd_jax.keys`.
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

Array = jax.Array
PyTree = Any


class DPConfig(NamedTuple):
    """``sigma``: noise multiplier (0 switches DP off); ``clip``: the clip norm C."""

    sigma: float
    clip: float

    @property
    def enabled(self) -> bool:
        return self.sigma > 0.0

    @property
    def noise_std(self) -> float:
        """Standard deviation of each noise coordinate, ``sigma * Delta = 2 sigma C`` (eq. 13)."""
        return 2.0 * self.sigma * self.clip


def check_config(sigma: float, clip: float) -> DPConfig:
    """Validate (sigma >= 0, C > 0, both finite) and return a :class:`DPConfig`."""
    for name, value in (("dp_sigma", sigma), ("dp_clip", clip)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number, got {value!r}")
    if sigma < 0:
        raise ValueError(f"dp_sigma must be >= 0, got {sigma!r}")
    if clip <= 0:
        raise ValueError(f"dp_clip must be > 0, got {clip!r}")
    return DPConfig(float(sigma), float(clip))


def per_particle_norms(grads: PyTree) -> Array:
    """Global L2 norm of each particle's gradient: leaves ``(K, ...)`` -> ``(K,)``."""
    leaves = jax.tree_util.tree_leaves(grads)
    sq = sum(jnp.sum(jnp.reshape(g, (g.shape[0], -1)) ** 2, axis=1) for g in leaves)
    # safe square root: the gradient of sqrt at 0 is inf; route zeros through 1
    zero = sq == 0
    return jnp.where(zero, 0.0, jnp.sqrt(jnp.where(zero, 1.0, sq)))


def clip(grads: PyTree, clip_norm: float) -> PyTree:
    """Scale each particle's gradient to global L2 norm at most ``C`` (eq. 12).

    Gradients with norm ``<= C`` are returned unchanged; larger ones are scaled
    to norm exactly ``C``. A zero gradient gives the factor ``min(C/0, 1) = 1``
    (via ``nan_to_num``) and stays zero, with finite derivatives.

    Args:
        grads: pytree whose leaves have a leading particle axis ``K``.
        clip_norm: C > 0.
    """
    norms = per_particle_norms(grads)
    safe = jnp.where(norms > 0, norms, 1.0)
    factor = jnp.where(norms > clip_norm, clip_norm / safe, 1.0)
    factor = jnp.nan_to_num(factor, nan=1.0)

    def scale(g):
        return g * factor.reshape((-1,) + (1,) * (g.ndim - 1)).astype(g.dtype)

    return jax.tree_util.tree_map(scale, grads)


def add_noise(grads: PyTree, key: Array, noise_std: float) -> PyTree:
    """Add independent ``N(0, noise_std^2)`` to every coordinate; one key per particle and leaf."""
    leaves, treedef = jax.tree_util.tree_flatten(grads)
    if not leaves:
        return grads
    num_particles = leaves[0].shape[0]
    particle_keys = jax.random.split(key, num_particles)  # (K,) keys: particle k's noise uses only its key
    leaf_keys = jax.vmap(lambda k: jax.random.split(k, len(leaves)))(particle_keys)  # (K, L)

    noisy = []
    for j, g in enumerate(leaves):
        draw = jax.vmap(lambda k, gk: jax.random.normal(k, gk.shape, gk.dtype))(leaf_keys[:, j], g)
        noisy.append(g + jnp.asarray(noise_std, g.dtype) * draw)
    return jax.tree_util.tree_unflatten(treedef, noisy)


def clip_and_noise(grads: PyTree, key: Array, sigma: float, clip_norm: float) -> PyTree:
    """Eq. 12-13 per particle: clip to C, add ``N(0, sigma^2 (2C)^2 I)``.

    Args:
        grads: pytree with a leading particle axis ``K`` on every leaf (e.g. the
            ``(K, P)`` message of eq. 6).
        key: the PRNG key of this release (never reuse it).
        sigma: noise multiplier (>= 0; 0 adds no noise but still clips).
        clip_norm: C > 0.
    """
    clipped = clip(grads, clip_norm)
    return add_noise(clipped, key, 2.0 * sigma * clip_norm)


# -- optax-style transform ------------------------------------------------------------


class DPState(NamedTuple):
    """The transform's state: the key of the next release."""

    key: Array


class DPTransform(NamedTuple):
    """``init(key) -> DPState``; ``update(grads, state) -> (noisy grads, state)``."""

    init: Callable[[Array], DPState]
    update: Callable[[PyTree, DPState], tuple[PyTree, DPState]]


def private_gradients(sigma: float, clip_norm: float) -> DPTransform:
    """The clip-and-noise transform of eq. 12-13 with its key carried in the state.

    Each ``update`` splits the state's key, uses one half for this release and
    keeps the other, so successive calls draw fresh noise.
    """
    config = check_config(sigma, clip_norm)

    def init(key: Array) -> DPState:
        return DPState(key)

    def update(grads: PyTree, state: DPState) -> tuple[PyTree, DPState]:
        next_key, use = jax.random.split(state.key)
        return clip_and_noise(grads, use, config.sigma, config.clip), DPState(next_key)

    return DPTransform(init, update)
