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

from pacd_jax import optim
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


def attack_gmll_masked(model: MetaGP, phi: Array, X: Array, y: Array, mask: Array, jitter: float = DEFAULT_JITTER) -> Array:
    """:func:`attack_gmll` on the valid rows of a padded ``(M, d)`` buffer (``mask``: ``(M,)`` bool).

    Padding rows get an identity block and a zero residual, so they add
    nothing to the value or to its gradient; one compiled program serves
    every ``m <= M`` (the progressive attack's data grows each round).
    """
    mean, kxx = model.prior_moments(phi, X)
    both = mask[:, None] & mask[None, :]
    diag = jnp.where(mask, model.noise_variance(phi) + jitter, 1.0)
    gram = jnp.where(both, kxx, 0.0) + jnp.diag(diag)
    chol = jnp.linalg.cholesky(gram)
    resid = jnp.where(mask, y - mean, 0.0)
    z = jax.scipy.linalg.solve_triangular(chol, resid, lower=True)
    m = jnp.sum(mask)
    return -0.5 * jnp.dot(z, z) - jnp.sum(jnp.log(jnp.diagonal(chol))) - 0.5 * m * _LOG_2PI


def dummy_gradients(model: MetaGP, particles: Array, X: Array, y: Array, jitter: float = DEFAULT_JITTER, mask: Array | None = None) -> Array:
    """``g_k(X^, y^)`` for every broadcast particle: ``(K, P)``.

    The clients' own hand-written gradient (:func:`pacd_jax.gp.gmll_grads`)
    on the buffer (all rows valid, or those of ``mask`` for a padded one):
    equal to ``jax.grad`` of :func:`attack_gmll` / :func:`attack_gmll_masked`
    to round-off (tested), and differentiating it again for the attack's
    loss costs several times less than second-order autodiff through the
    Cholesky (``bench/dlg_loss.py``).
    """
    if mask is None:
        mask = jnp.ones(X.shape[:1], dtype=bool)
    return gmll_grads(model, particles, GPData(X, y, mask), jitter)


def dummy_gradients_autodiff(model: MetaGP, particles: Array, X: Array, y: Array, jitter: float = DEFAULT_JITTER, mask: Array | None = None) -> Array:
    """:func:`dummy_gradients` by ``jax.grad`` of :func:`attack_gmll` (the reference)."""
    if mask is None:
        grad = jax.grad(attack_gmll, argnums=1)
        return jax.vmap(lambda phi: grad(model, phi, X, y, jitter))(particles)
    grad = jax.grad(attack_gmll_masked, argnums=1)
    return jax.vmap(lambda phi: grad(model, phi, X, y, mask, jitter))(particles)


def dlg_loss(
    model: MetaGP,
    X: Array,
    y: Array,
    particles: Array,
    grads: Array,
    cosine: bool = False,
    normalise: bool = False,
    jitter: float = DEFAULT_JITTER,
    mask: Array | None = None,
) -> Array:
    """The gradient-matching loss of eq. 11.

    Args:
        X, y: dummy data ``(m, d)``, ``(m,)``.
        particles: ``(K, P)`` broadcast particles; grads: ``(K, P)`` intercepted message.
        cosine: use ``sum_k (1 - cos(g_k, A_k))`` instead of the squared distance
            (a variant from the DLG literature, insensitive to gradient scale).
        normalise: divide the squared loss by ``sum_k ||A_k||^2``.
        mask: ``(M,)`` valid rows of padded ``X, y`` (None: all rows are data).
    """
    g = dummy_gradients(model, particles, X, y, jitter, mask)
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

    def one(params):
        # a step to a non-finite point freezes the restart (it is then scored by its loss)
        params = optim.lbfgs(loss_of, params, config.steps, config.memory)
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


# -- progressive (warm-started) attack -----------------------------------------------


def standardise_free(y: Array) -> Array:
    """``(y - mean) / std`` with the population std, as the client standardises (gp.standardise).

    Standardisation is invariant to an affine change of units, so the target's
    standardised values at round ``t + 1`` are ``standardise_free([y_t, u])``
    with ``y_t`` its standardised values at round ``t`` and ``u`` the new value
    in round-``t`` units: one unknown scalar per new point.
    """
    mean = jnp.mean(y)
    return (y - mean) / jnp.sqrt(jnp.mean((y - mean) ** 2))


def standardise_masked(y: Array, mask: Array) -> Array:
    """:func:`standardise_free` over the valid rows of a padded ``y`` (padding stays 0)."""
    n = jnp.sum(mask)
    mean = jnp.sum(jnp.where(mask, y, 0.0)) / n
    std = jnp.sqrt(jnp.sum(jnp.where(mask, (y - mean) ** 2, 0.0)) / n)
    return jnp.where(mask, (y - mean) / std, 0.0)


@dataclasses.dataclass(frozen=True)
class ProgressiveConfig:
    """A stronger, realistic attacker that follows the target round after round.

    The honest-but-curious coordinator receives the target's message every
    round and ``m`` (public) grows by one point per round (one query). So it
    reconstructs the first attacked round from scratch (``first``, many cheap
    restarts: few points), then, for each later round, keeps the previous
    reconstruction and only searches the new point(s): ``candidates`` starts
    of the new ``x`` (uniform on the box, kept in it by a sigmoid) and its
    value ``u`` (~ N(0, 1) in the previous round's standardised units), each
    refined by ``search_steps`` L-BFGS steps with the old points fixed (the
    loss of eq. 11 on the first ``search_particles`` particles); the best is
    then refined jointly (all points and values, all particles) for
    ``refine_steps`` steps. A fraction ``local_fraction`` of the candidates
    start near a random earlier point instead (``x`` + N(0, ``local_scale``^2),
    ``u`` = that point's value + N(0, 0.1^2)): BO exploits, so later queries
    land near earlier ones; this is how clustering helps the attacker.

    Attributes:
        first: the from-scratch attack of the first round (see :class:`AttackConfig`).
        candidates, search_steps, search_particles, refine_steps: as above
            (``search_particles`` None: all K).
        memory: L-BFGS history size.
    """

    first: AttackConfig = AttackConfig(restarts=64, steps=300, init="uniform", bounded=True)
    candidates: int = 16
    search_steps: int = 40
    search_particles: int | None = 2
    refine_steps: int = 30
    local_fraction: float = 0.5
    local_scale: float = 0.05
    tries: int = 3
    tol: float = 1e-8
    pad: int = 32
    repair_passes: int = 2
    memory: int = 10

    def __post_init__(self):
        if not 0.0 <= self.local_fraction <= 1.0:
            raise ValueError(f"local_fraction must be in [0, 1], got {self.local_fraction!r}")
        if not self.local_scale > 0:
            raise ValueError(f"local_scale must be > 0, got {self.local_scale!r}")
        if not isinstance(self.repair_passes, int) or self.repair_passes < 0:
            raise ValueError(f"repair_passes must be a non-negative integer, got {self.repair_passes!r}")
        for name in ("candidates", "search_steps", "tries", "pad"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if not isinstance(self.refine_steps, int) or self.refine_steps < 0:
            raise ValueError(f"refine_steps must be a non-negative integer, got {self.refine_steps!r}")
        if self.search_particles is not None and (not isinstance(self.search_particles, int) or self.search_particles < 1):
            raise ValueError(f"search_particles must be a positive integer or None, got {self.search_particles!r}")
        if self.first.cosine or self.first.normalise or not self.first.learn_y:
            raise ValueError("the progressive attack's first round uses eq. 11 with y optimised")


def _lbfgs(loss_of, params, steps: int, memory: int):
    """``steps`` L-BFGS iterations (:func:`pacd_jax.optim.lbfgs`); returns the parameters and their loss."""
    params = optim.lbfgs(loss_of, params, steps, memory)
    return params, loss_of(params)


def best_finite(losses: Array) -> Array:
    """Traceable :func:`select_best`: index of the lowest finite loss (NaN/inf never win)."""
    return jnp.argmin(jnp.where(jnp.isfinite(losses), losses, jnp.inf))


def _logit(X):
    X = jnp.clip(X, 1e-6, 1.0 - 1e-6)
    return jnp.log(X) - jnp.log1p(-X)


def _extend(model: MetaGP, config: ProgressiveConfig, k: int, key, particles, grads, X_prev, y_prev, m_prev):
    """Search ``k`` new points given the previous reconstruction, on padded buffers.

    ``X_prev (M, d)``, ``y_prev (M,)`` hold the previous ``m_prev`` points in
    their first rows (padding after); the new points go to rows
    ``m_prev .. m_prev + k - 1``. Returns ``(X, y, loss, search_losses)``.
    """
    M, d = X_prev.shape
    dtype = particles.dtype
    rows = jnp.arange(M)
    mask = rows < m_prev + k
    sp = particles if config.search_particles is None else particles[: config.search_particles]
    sg = grads if config.search_particles is None else grads[: config.search_particles]

    def place(v, u):
        X = jax.lax.dynamic_update_slice(X_prev, jax.nn.sigmoid(v), (m_prev, 0))
        y = jax.lax.dynamic_update_slice(y_prev, u, (m_prev,))
        return X, standardise_masked(y, mask)

    def search_loss(params):
        X, y = place(*params)
        return dlg_loss(model, X, y, sp, sg, mask=mask)

    kx, ku, kj, kn, kv = jax.random.split(key, 5)
    x_uni = jax.random.uniform(kx, (config.candidates, k, d), dtype, 1e-3, 1.0 - 1e-3)
    u_uni = jax.random.normal(ku, (config.candidates, k), dtype)
    # local candidates: BO exploits, so a new query is often near an earlier one
    j = jax.random.randint(kj, (config.candidates, k), 0, m_prev)
    x_loc = jnp.clip(X_prev[j] + config.local_scale * jax.random.normal(kn, (config.candidates, k, d), dtype), 1e-3, 1.0 - 1e-3)
    u_loc = y_prev[j] + 0.1 * jax.random.normal(kv, (config.candidates, k), dtype)
    n_loc = int(round(config.local_fraction * config.candidates))
    is_loc = (jnp.arange(config.candidates) < n_loc)[:, None]
    v0 = _logit(jnp.where(is_loc[..., None], x_loc, x_uni))
    u0 = jnp.where(is_loc, u_loc, u_uni)
    (v, u), losses = jax.vmap(lambda p: _lbfgs(search_loss, p, config.search_steps, config.memory))((v0, u0))
    best = best_finite(losses)
    X, y = place(v[best], u[best])

    def joint_loss(params):
        w, yy = params
        return dlg_loss(model, jax.nn.sigmoid(w), yy, particles, grads, mask=mask)

    before = joint_loss((_logit(X), y))
    if config.refine_steps > 0:
        (w, y_ref), after = _lbfgs(joint_loss, (_logit(X), y), config.refine_steps, config.memory)
        better = jnp.isfinite(after) & (after < before)
        X = jnp.where(better, jnp.where(mask[:, None], jax.nn.sigmoid(w), 0.0), X)
        y = jnp.where(better, jnp.where(mask, y_ref, 0.0), y)
        before = jnp.where(better, after, before)
    return X, y, before, losses


_extend_jit = jax.jit(_extend, static_argnums=(0, 1, 2))


def _repair(model, config: ProgressiveConfig, key, particles, grads, X, y, loss, target: float, M: int):
    """Re-search each point of a from-scratch reconstruction with the others fixed; keep improvements."""
    m, d = X.shape
    for p in range(config.repair_passes):
        for j in range(m):
            if not loss > target:
                return X, y, loss
            keep = np.r_[0:j, j + 1 : m]
            Xp = jnp.zeros((M, d), particles.dtype).at[: m - 1].set(X[keep])
            yp = jnp.zeros((M,), particles.dtype).at[: m - 1].set(standardise_free(y[keep]))
            Xn, yn, ln, _ = _extend_jit(model, config, 1, jax.random.fold_in(key, 1000 * (p + 1) + j), particles, grads, Xp, yp, m - 1)
            if np.isfinite(float(ln)) and float(ln) < loss:
                X, y, loss = Xn[:m], yn[:m], float(ln)
    return X, y, loss


class ProgressiveStep(NamedTuple):
    """The progressive attack's reconstruction at one intercepted round (NumPy, float64).

    ``X``: ``(m, d)`` in the unit box; ``y``: ``(m,)`` standardised; ``loss``:
    eq. 11 on all particles; ``search_losses``: final loss of every candidate
    of the new-point search (restart losses of the from-scratch attack at the
    first round); ``time_s``: seconds spent on this round; ``rel_loss``:
    ``loss / sum_k ||A_k||^2`` (1 is the loss of predicting zero gradients);
    ``tries``: candidate batches used.
    """

    round: int
    X: np.ndarray
    y: np.ndarray
    loss: float
    search_losses: np.ndarray
    time_s: float
    rel_loss: float
    tries: int


def progressive_attack(
    model: MetaGP, records, key: Array, config: ProgressiveConfig = ProgressiveConfig(), on_step=None, initial=None
) -> list[ProgressiveStep]:
    """Follow the target through consecutive intercepted rounds (eq. 11 at every round).

    Args:
        records: messages in round order, each with ``round, m, particles, grads``
            (:class:`pacd_jax.intercept.Record`); ``m`` must grow between records.
            Consecutive rounds add one point each; a gap of ``g`` rounds
            searches ``g`` new points at once (harder).
        key: PRNG key; round ``t`` uses ``fold_in(key, t)``.
        on_step: ``on_step(ProgressiveStep)`` after each round (progress).
        initial: optional ``(X0, y0)``: the points (unit box) and standardised
            values the attacker already has before the first record (then the
            first record is extended from them, not attacked from scratch).
            A diagnostic: started from the truth at round t, it measures the
            new-point search alone.

    Returns:
        One :class:`ProgressiveStep` per record.
    """
    import time

    out = []
    X = y = None
    m_prev = 0
    if initial is not None:
        X, y = jnp.asarray(initial[0]), jnp.asarray(initial[1])
        m_prev = int(X.shape[0])
    for rec in records:
        start = time.perf_counter()
        particles = jnp.asarray(rec.particles)
        grads = jnp.asarray(rec.grads, particles.dtype)
        if not (np.all(np.isfinite(np.asarray(grads))) and np.all(np.isfinite(np.asarray(particles)))):
            raise ValueError(f"round {rec.round}: the intercepted message is not finite")
        m = int(rec.m)
        M = config.pad * -(-m // config.pad)
        k_round = jax.random.fold_in(key, int(rec.round))
        scale = float(jnp.sum(grads**2))
        if X is None:
            res = run_attack(model, particles, grads, m, k_round, config.first)
            X, y = jnp.asarray(res.X, particles.dtype), jnp.asarray(res.y, particles.dtype)
            loss, losses, tries = res.loss, res.losses, 1
            X, y, loss = _repair(model, config, k_round, particles, grads, X, y, loss, config.tol * scale, M)
        else:
            k = m - m_prev
            if k < 1:
                raise ValueError(f"round {rec.round}: m must grow between records ({m_prev} -> {m})")
            Xp = jnp.zeros((M, X.shape[1]), particles.dtype).at[:m_prev].set(jnp.asarray(X[:m_prev], particles.dtype))
            yp = jnp.zeros((M,), particles.dtype).at[:m_prev].set(jnp.asarray(y[:m_prev], particles.dtype))
            best = None
            for tries in range(1, config.tries + 1):
                cand = _extend_jit(model, config, k, jax.random.fold_in(k_round, tries), particles, grads, Xp, yp, m_prev)
                if best is None or (np.isfinite(float(cand[2])) and not float(cand[2]) >= float(best[2])):
                    best = cand
                if float(best[2]) <= config.tol * scale:
                    break
            Xn, yn, loss, losses = best
            X, y = Xn[:m], yn[:m]
            loss, losses = float(loss), np.asarray(losses, np.float64)
        m_prev = m
        step = ProgressiveStep(
            int(rec.round), np.clip(np.asarray(X, np.float64), 0.0, 1.0), np.asarray(y, np.float64), float(loss),
            np.asarray(losses, np.float64), time.perf_counter() - start, loss / scale if scale > 0 else float("nan"), tries,
        )
        out.append(step)
        if on_step is not None:
            on_step(step)
    return out
