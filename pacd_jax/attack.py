"""Deep-leakage-from-gradients (DLG) by an honest-but-curious coordinator (paper section V).

The coordinator knows the particles ``{phi_k}`` it broadcast, the count ``m``
of the target client's points (beta = m is public) and the message
``{A_k}`` it received (paper eq. 6). It searches for dummy data ``(X^, y^)``
whose gradients match the message, minimising eq. 11,

    L_DLG(X^, y^) = sum_k || g_k(X^, y^) - A_k ||^2,   g_k = grad_phi ln Z(X^, y^; P_phi_k),

with L-BFGS (optax, zoom line search) from ``R`` random starts (vmapped),
keeping the restart with the lowest finite loss (DESIGN.md section 7).

The attacker's GMLL is a plain autodiff one (``jnp.linalg.cholesky`` and
triangular solves, no custom VJP) because the loss needs the derivative of
the gradient with respect to the data (second order). Tests check that its
gradient equals the production :func:`pacd_jax.gp.gmll_grads`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from pacd_jax.gp import DEFAULT_JITTER, GPData, MetaGP, gmll_grads

Array = jax.Array

_LOG_2PI = math.log(2.0 * math.pi)


def attack_gmll(model: MetaGP, phi: Array, X: Array, y: Array, jitter: float = DEFAULT_JITTER) -> Array:
    """``ln Z_beta(S, P_phi)`` (eq. 6, beta = m) on unpadded data, twice differentiable.

    Args:
        X: ``(m, d)`` inputs in model space (the unit box); y: ``(m,)`` standardised targets.
    """
    mean, kxx = model.prior_moments(phi, X)
    m = X.shape[0]
    gram = kxx + (model.noise_variance(phi) + jitter) * jnp.eye(m, dtype=kxx.dtype)
    chol = jnp.linalg.cholesky(gram)
    resid = y - mean
    z = jax.scipy.linalg.solve_triangular(chol, resid, lower=True)
    return -0.5 * jnp.dot(z, z) - jnp.sum(jnp.log(jnp.diagonal(chol))) - 0.5 * m * _LOG_2PI


def dummy_gradients(model: MetaGP, particles: Array, X: Array, y: Array, jitter: float = DEFAULT_JITTER) -> Array:
    """``g_k(X^, y^)`` for every broadcast particle: ``(K, P)``.

    The clients' own hand-written gradient (:func:`pacd_jax.gp.gmll_grads`)
    on an all-valid buffer: equal to ``jax.grad`` of :func:`attack_gmll` to
    round-off (tested), and differentiating it again for the attack's loss
    costs several times less than second-order autodiff through the
    Cholesky (``bench/dlg_loss.py``).
    """
    data = GPData(X, y, jnp.ones(X.shape[:1], dtype=bool))
    return gmll_grads(model, particles, data, jitter)


def dummy_gradients_autodiff(model: MetaGP, particles: Array, X: Array, y: Array, jitter: float = DEFAULT_JITTER) -> Array:
    """:func:`dummy_gradients` by ``jax.grad`` of :func:`attack_gmll` (the reference)."""
    grad = jax.grad(attack_gmll, argnums=1)
    return jax.vmap(lambda phi: grad(model, phi, X, y, jitter))(particles)


def dlg_loss(
    model: MetaGP,
    X: Array,
    y: Array,
    particles: Array,
    grads: Array,
    cosine: bool = False,
    normalise: bool = False,
    jitter: float = DEFAULT_JITTER,
) -> Array:
    """The gradient-matching loss of eq. 11.

    Args:
        X, y: dummy data ``(m, d)``, ``(m,)``.
        particles: ``(K, P)`` broadcast particles; grads: ``(K, P)`` intercepted message.
        cosine: use ``sum_k (1 - cos(g_k, A_k))`` instead of the squared distance
            (a variant from the DLG literature, insensitive to gradient scale).
        normalise: divide the squared loss by ``sum_k ||A_k||^2``.
    """
    g = dummy_gradients(model, particles, X, y, jitter)
    if cosine:
        num = jnp.sum(g * grads, axis=-1)
        den = jnp.linalg.norm(g, axis=-1) * jnp.linalg.norm(grads, axis=-1) + 1e-30
        return jnp.sum(1.0 - num / den)
    loss = jnp.sum((g - grads) ** 2)
    if normalise:
        loss = loss / jnp.sum(grads**2)
    return loss


@dataclasses.dataclass(frozen=True)
class AttackConfig:
    """What the attacker knows and how hard it tries.

    Attributes:
        restarts: R random initialisations (vmapped); the lowest finite loss wins.
        steps: L-BFGS iterations per restart.
        learn_y: optimise the dummy targets (paper); False: the attacker knows
            the client's standardised ``y`` (a stronger attacker, an upper bound).
        init: ``normal``: dummy X ~ N(0, I) in model space (paper);
            ``uniform``: X ~ U([0,1]^d), the box.
        cosine, normalise: loss variants (see :func:`dlg_loss`).
        particles: use the first ``particles`` of the K particles (None: all).
        memory: L-BFGS history size.
        bounded: optimise ``u`` with ``X^ = sigmoid(u)``, so the dummy points
            stay in the (public) unit box; the init draws then apply to ``u``
            (``normal``: u ~ N(0, I); ``uniform``: u = logit(U(0,1))).
    """

    restarts: int = 5
    steps: int = 500
    learn_y: bool = True
    init: str = "normal"
    cosine: bool = False
    normalise: bool = False
    particles: int | None = None
    memory: int = 10
    bounded: bool = False

    def __post_init__(self):
        if not isinstance(self.restarts, int) or self.restarts < 1:
            raise ValueError(f"restarts must be a positive integer, got {self.restarts!r}")
        if not isinstance(self.steps, int) or self.steps < 1:
            raise ValueError(f"steps must be a positive integer, got {self.steps!r}")
        if self.init not in ("normal", "uniform"):
            raise ValueError(f"init must be 'normal' or 'uniform', got {self.init!r}")
        if self.particles is not None and (not isinstance(self.particles, int) or self.particles < 1):
            raise ValueError(f"particles must be a positive integer or None, got {self.particles!r}")


class AttackResult(NamedTuple):
    """Outcome of one attack (NumPy, float64).

    Attributes:
        X: ``(m, d)`` best reconstruction in model space (unit box, clipped).
        y: ``(m,)`` its standardised targets (the known ones when ``learn_y`` is off).
        loss: its final loss (eq. 11 or the chosen variant).
        losses: ``(R,)`` final loss of every restart (NaN/inf for diverged ones).
        best: index of the chosen restart.
    """

    X: np.ndarray
    y: np.ndarray
    loss: float
    losses: np.ndarray
    best: int


def _init(key: Array, m: int, d: int, config: AttackConfig, dtype) -> tuple[Array, Array]:
    kx, ky = jax.random.split(key)
    if config.init == "uniform":
        X = jax.random.uniform(kx, (m, d), dtype, 1e-3, 1.0 - 1e-3)
        if config.bounded:
            X = jnp.log(X) - jnp.log1p(-X)
    else:
        X = jax.random.normal(kx, (m, d), dtype)
    return X, jax.random.normal(ky, (m,), dtype)


def _solve(model: MetaGP, config: AttackConfig, m: int, key: Array, particles: Array, grads: Array, y_known: Array, start=None):
    """All restarts of one attack, vmapped; returns the final (X, y, loss) of each.

    ``start``: optional ``(X0 (R, m, d), y0 (R, m))`` starting points (in the
    optimised parametrisation) instead of random draws.
    """
    d = model.config.dim
    dtype = particles.dtype
    keys_ = jax.random.split(key, config.restarts)
    if start is None:
        start = jax.vmap(lambda k: _init(k, m, d, config, dtype))(keys_)

    def loss_of(params):
        X, y = params
        X = jax.nn.sigmoid(X) if config.bounded else X
        y = y if config.learn_y else y_known
        return dlg_loss(model, X, y, particles, grads, config.cosine, config.normalise)

    opt = optax.lbfgs(memory_size=config.memory)
    value_and_grad = optax.value_and_grad_from_state(loss_of)

    def one(params):
        state = opt.init(params)

        def body(_, carry):
            params, state = carry
            value, grad = value_and_grad(params, state=state)
            updates, state = opt.update(grad, state, params, value=value, grad=grad, value_fn=loss_of)
            new = optax.apply_updates(params, updates)
            # a step to a non-finite point freezes the restart (it is then scored by its loss)
            ok = jnp.all(jnp.isfinite(new[0])) & jnp.all(jnp.isfinite(new[1]))
            params = jax.tree_util.tree_map(lambda a, b: jnp.where(ok, a, b), new, params)
            return params, state

        params, _ = jax.lax.fori_loop(0, config.steps, body, (params, state))
        X = jax.nn.sigmoid(params[0]) if config.bounded else params[0]
        return X, params[1], loss_of(params)

    return jax.vmap(one)(start)


_solve_jit = jax.jit(_solve, static_argnums=(0, 1, 2))


def select_best(losses: np.ndarray) -> int:
    """Index of the lowest finite loss; NaN/inf restarts are never chosen.

    Raises:
        RuntimeError: every restart diverged.
    """
    losses = np.asarray(losses, np.float64)
    finite = np.isfinite(losses)
    if not finite.any():
        raise RuntimeError("every restart of the attack diverged (non-finite loss)")
    return int(np.argmin(np.where(finite, losses, np.inf)))


def run_attack(
    model: MetaGP,
    particles,
    grads,
    m: int,
    key: Array,
    config: AttackConfig = AttackConfig(),
    y_known=None,
    start=None,
) -> AttackResult:
    """Reconstruct the target's ``m`` points from one intercepted message (eq. 11).

    Args:
        model: the public prior architecture.
        particles: ``(K, P)`` particles the coordinator broadcast for that step.
        grads: ``(K, P)`` the target's message for those particles.
        m: number of the target's points (public: beta = m).
        key: PRNG key of the restarts.
        y_known: ``(m,)`` standardised targets, required when ``config.learn_y`` is off.
        start: optional ``(X0, y0)`` of shapes ``(R, m, d)``, ``(R, m)``: start
            the restarts there (diagnostics: the basin of the true data).

    Returns:
        The best restart, in model space (the unit box); see :func:`to_original`.
    """
    particles = jnp.asarray(particles)
    grads = jnp.asarray(grads, particles.dtype)
    if config.particles is not None:
        particles, grads = particles[: config.particles], grads[: config.particles]
    if not config.learn_y:
        if y_known is None:
            raise ValueError("an attack with learn_y=False needs y_known")
        y_known = jnp.asarray(y_known, particles.dtype)
    else:
        y_known = jnp.zeros((m,), particles.dtype)
    if start is not None:
        start = (jnp.asarray(start[0], particles.dtype), jnp.asarray(start[1], particles.dtype))
    X, y, losses = _solve_jit(model, config, int(m), key, particles, grads, y_known, start)
    losses = np.asarray(losses, np.float64)
    best = select_best(losses)
    X_best = np.clip(np.asarray(X[best], np.float64), 0.0, 1.0)
    y_best = np.asarray(y[best] if config.learn_y else y_known, np.float64)
    return AttackResult(X_best, y_best, float(losses[best]), losses, best)


def to_original(X_unit, bounds) -> np.ndarray:
    """Map unit-box points to the task's original units (``bounds``: ``(d, 2)``)."""
    bounds = np.asarray(bounds, np.float64)
    return bounds[:, 0] + np.asarray(X_unit, np.float64) * (bounds[:, 1] - bounds[:, 0])
