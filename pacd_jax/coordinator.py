"""What the coordinator computes: aggregate the clients' gradients, take an SVGD step.

The coordinator holds the particles and the optimiser state, never any
client's data. From the ``(N, K, P)`` gradients it receives it forms the
aggregated score of paper eq. 7,

    grad ln Q*(phi_k) = prior_factor * grad ln P(phi_k) + lambda / (N beta + lambda) * G_k,
    G_k = sum_i A_{i,k},

and moves the particles along the SVGD direction.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from pacd_jax.gp import MetaGP
from pacd_jax.svgd import SVGD, SVGDState

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class MetaObjective:
    """Weights of the hyper-posterior score (paper eq. 3-4, 7).

    Attributes:
        num_clients: N.
        meta_lambda: lambda; None means lambda = N (DESIGN.md section 3).
        prior_factor: extra weight on ``ln P`` (PACOH's ``prior_factor``).
    """

    num_clients: int
    meta_lambda: float | None = None
    prior_factor: float = 1.0

    def __post_init__(self):
        if not isinstance(self.num_clients, int) or self.num_clients < 1:
            raise ValueError(f"num_clients must be a positive integer, got {self.num_clients!r}")
        if self.meta_lambda is not None and not (np.isfinite(self.meta_lambda) and self.meta_lambda > 0):
            raise ValueError(f"meta_lambda must be positive, got {self.meta_lambda!r}")
        if not (np.isfinite(self.prior_factor) and self.prior_factor >= 0):
            raise ValueError(f"prior_factor must be non-negative, got {self.prior_factor!r}")

    @property
    def lam(self) -> float:
        return float(self.num_clients if self.meta_lambda is None else self.meta_lambda)

    def data_weight(self, beta: Array) -> Array:
        """``lambda / (N beta + lambda)`` with ``beta = m`` points per client."""
        return self.lam / (self.num_clients * beta + self.lam)


def aggregate(grads: Array) -> Array:
    """``G_k = sum_i A_{i,k}``: ``(N, K, P) -> (K, P)``."""
    return jnp.sum(grads, axis=0)


def meta_score(model: MetaGP, objective: MetaObjective, particles: Array, grad_sum: Array, beta: Array) -> Array:
    """The score of eq. 7 at every particle, ``(K, P)``."""
    prior = model.hyperprior_score(particles)
    return objective.prior_factor * prior + objective.data_weight(beta).astype(particles.dtype) * grad_sum


def update(
    model: MetaGP,
    objective: MetaObjective,
    svgd: SVGD,
    state: SVGDState,
    grads: Array,
    beta: Array,
) -> SVGDState:
    """One coordinator step: aggregate ``(N, K, P)`` client gradients, score, SVGD step."""
    scores = meta_score(model, objective, state.particles, aggregate(grads), beta)
    return svgd.step(state, scores)
