"""Stein variational gradient descent on flat particles (paper section III-B).

The particles are one ``(K, P)`` array. The SVGD direction

    psi(phi_k) = 1/K sum_k' [ k(phi_k', phi_k) grad ln Q*(phi_k') + grad_{phi_k'} k(phi_k', phi_k) ]

is computed in matmul form, ``(Kmat @ S + 2 g (phi * Kmat 1 - Kmat @ phi)) / K``,
so no ``(K, K, P)`` intermediate is ever built; distances and repulsion are
computed about the particles' mean, which keeps their float32 accuracy when
the particles are close together. The kernel is an RBF on the
flattened particles with PACOH's median heuristic
``k = exp(-d^2 ln(K+1) / median(d^2))``. An optax optimiser (Adam by default)
takes a step along ``-psi``.

``init``/``step`` follow the BlackJAX/optax split: the state is data, the
step is a pure function specialised by closure over the optimiser. The
scores are an *input* of the step, not a callable, because in PACD-BO they are
assembled by the coordinator from gradients that the clients computed
(:mod:`pacd_jax.coordinator`).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

Array = jax.Array


class SVGDState(NamedTuple):
    """Particles ``(K, P)`` and the optimiser state that moves them."""

    particles: Array
    opt_state: optax.OptState


def _centred(particles: Array) -> Array:
    """The particles less their mean: distances and the repulsion term do not change, round-off does.

    The matmul forms below subtract large, nearly equal numbers when the particles
    sit close together far from the origin (late in meta-training); about their
    mean the terms are of the size of the spread, so float32 keeps its relative
    accuracy (tests/test_svgd.py: with a spread of 1e-3 about an offset of 1, the
    uncentred form was 28 % off in ``d^2``; centred, within 1e-4).
    """
    return particles - jnp.mean(particles, axis=0, keepdims=True)


def squared_distances(particles: Array) -> Array:
    """``(K, K)`` squared Euclidean distances, ``|x|^2 + |y|^2 - 2 x.y`` about the mean, clipped at 0."""
    particles = _centred(particles)
    sq = jnp.sum(particles * particles, axis=-1)
    d2 = sq[:, None] + sq[None, :] - 2.0 * particles @ particles.T
    return jnp.maximum(d2, 0.0)


def median_bandwidth(d2: Array) -> Array:
    """PACOH's median heuristic: ``gamma = ln(K+1) / median(d^2)``.

    The median runs over all ``K^2`` entries (diagonal included), as PACOH's
    implementation does, and is not differentiated. When all particles
    coincide the median is 0 and the kernel is 1 whatever ``gamma``; 1 is
    returned then to keep the arithmetic finite.
    """
    num = d2.shape[0]
    med = jax.lax.stop_gradient(jnp.median(d2))
    return jnp.where(med > 0, jnp.log(num + 1.0) / jnp.where(med > 0, med, 1.0), 1.0)


def rbf_kernel_matrix(particles: Array, gamma: Array | None = None) -> tuple[Array, Array]:
    """``Kmat[i, j] = exp(-gamma |phi_i - phi_j|^2)`` and the ``gamma`` used."""
    d2 = squared_distances(particles)
    if gamma is None:
        gamma = median_bandwidth(d2)
    return jnp.exp(-gamma * d2), gamma


def svgd_direction(particles: Array, scores: Array, gamma: Array | None = None) -> Array:
    """The SVGD update direction ``psi`` for every particle (matmul form).

    Args:
        particles: ``(K, P)``.
        scores: ``(K, P)`` values of ``grad ln Q*`` at the particles (eq. 4/7).
        gamma: RBF inverse bandwidth; the median heuristic when None.

    Returns:
        ``(K, P)`` with ``psi_k = 1/K [sum_j k_jk s_j + 2 g (phi_k sum_j k_jk - sum_j k_jk phi_j)]``.
    """
    kmat, gamma = rbf_kernel_matrix(particles, gamma)
    num = particles.shape[0]
    drive = kmat @ scores
    # sum_j grad_{phi_j} k(phi_j, phi_k) = 2 g sum_j k_jk (phi_k - phi_j), invariant to a common shift
    centred = _centred(particles)
    repulse = 2.0 * gamma * (centred * jnp.sum(kmat, axis=1, keepdims=True) - kmat @ centred)
    return (drive + repulse) / num


class SVGD(NamedTuple):
    """A pair of pure functions ``init(particles) -> state`` and ``step(state, scores) -> state``."""

    init: Callable[[Array], SVGDState]
    step: Callable[[SVGDState, Array], SVGDState]


def svgd(optimizer: optax.GradientTransformation | None = None, learning_rate: float = 1e-3) -> SVGD:
    """Build SVGD with an optax optimiser (default Adam, lr 1e-3 as PACOH).

    The optimiser minimises ``-psi``: ``updates = optimizer.update(-psi, ...)``.
    """
    if optimizer is None:
        optimizer = optax.adam(learning_rate)

    def init(particles: Array) -> SVGDState:
        return SVGDState(particles, optimizer.init(particles))

    def step(state: SVGDState, scores: Array, gamma: Array | None = None) -> SVGDState:
        psi = svgd_direction(state.particles, scores, gamma)
        updates, opt_state = optimizer.update(-psi, state.opt_state, state.particles)
        return SVGDState(optax.apply_updates(state.particles, updates), opt_state)

    return SVGD(init, step)
