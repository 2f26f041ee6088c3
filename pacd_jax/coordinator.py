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


# -- validation of what the clients send ---------------------------------------------


class BadGradientError(ValueError):
    """A client sent gradients of the wrong shape or with NaN/inf; the message names the client."""


def check_gradient_shape(grads: Array, num_clients: int, particles: Array) -> None:
    """Trace-time check that the gathered gradients are ``(N, K, P)`` like the particles."""
    expected = (num_clients,) + tuple(particles.shape)
    if tuple(grads.shape) != expected:
        raise BadGradientError(f"the coordinator received gradients of shape {tuple(grads.shape)}, expected {expected}")


def first_bad_client(grads: Array) -> Array:
    """Index of the first client whose ``(K, P)`` block holds a NaN/inf, -1 if none (jit-able)."""
    # x * 0 is 0 for finite x and NaN for NaN/inf, so the sum is finite exactly when every entry
    # is (no overflow, unlike a plain sum); one multiply-add pass instead of a boolean tensor
    ok = jnp.isfinite(jnp.sum(grads.reshape(grads.shape[0], -1) * 0, axis=1))
    return jnp.where(jnp.all(ok), -1, jnp.argmin(ok)).astype(jnp.int32)


#: The carried record of a round with no non-finite gradient so far: (client, step) = (-1, -1).
NO_BAD_GRADIENT = (-1, -1)


class BadGradientLog:
    """Host-side record of the non-finite gradients one run's coordinator received.

    Each run owns one (no module state): two runs in one process, such as a
    notebook's or ``pacd-bo table``'s, never see each other's records. The
    jitted round sends its ``(client, step)`` record here once per round
    (:meth:`report`, a host callback inside the program, or :meth:`record`,
    on the host with the record the round returned); the backend then calls
    :meth:`raise_first` on the host.
    """

    def __init__(self) -> None:
        self._seen: list[tuple[int, int, int]] = []

    def _record(self, bad, round_idx, step) -> None:
        rounds = np.broadcast_to(round_idx, np.shape(bad))
        steps = np.broadcast_to(step, np.shape(bad))
        for b, r, s in zip(np.ravel(bad), np.ravel(rounds), np.ravel(steps)):
            if int(b) >= 0:
                self._seen.append((int(b), int(r), int(s)))

    def record(self, bad, round_idx: int) -> None:
        """Keep a round's ``(..., 2)`` ``(client, step)`` record(s) fetched to the host (see ``Method.learn_checked``)."""
        bad = np.asarray(bad)
        self._record(bad[..., 0], round_idx, bad[..., 1])

    def report(self, bad: Array, round_idx: Array) -> None:
        """Send a round's ``(client, step)`` record (from :func:`validate_gradients`) to the host (traced)."""
        jax.debug.callback(self._record, bad[..., 0], round_idx, bad[..., 1])

    def raise_first(self, client_ids) -> None:
        """Raise :class:`BadGradientError` for the first record (and clear the log); nothing if empty."""
        if not self._seen:
            return
        b, r, s = self._seen[0]
        self._seen.clear()
        raise BadGradientError(
            f"client {int(np.asarray(client_ids)[b])} sent a non-finite gradient at round {r}, SVGD step {s}; "
            "the coordinator stopped the run"
        )


def no_bad_gradient() -> Array:
    """The initial ``(client, step)`` record of :func:`validate_gradients`: int32 ``(-1, -1)``."""
    return jnp.asarray(NO_BAD_GRADIENT, jnp.int32)


def validate_gradients(grads: Array, num_clients: int, particles: Array, bad: Array, step: Array) -> Array:
    """The coordinator's check of every gathered gradient (inside the jitted round).

    The shape is checked when the round is traced; finiteness at run time:
    the round's loop carries ``bad``, the ``(client, step)`` of the first
    non-finite message of the round (``(-1, -1)`` while there is none), and
    :meth:`BadGradientLog.report` hands it to the host once per round, after
    which :meth:`BadGradientLog.raise_first` (called by the backend) ends the
    run naming the client. One host callback per round rather than per SVGD step:
    per step it cost a quarter of the anchor step's time (bench/profile_step.py).
    The round's arrays keep flowing meanwhile (no data-dependent control flow
    inside the jitted loop).

    Returns:
        the updated ``(client, step)`` record.
    """
    check_gradient_shape(grads, num_clients, particles)
    client = first_bad_client(grads)
    first = (bad[0] < 0) & (client >= 0)
    return jnp.where(first, jnp.stack([client, jnp.asarray(step, jnp.int32)]), bad)
