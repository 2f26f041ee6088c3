"""Pursuit attack: read the client's points off the structure of its message.

Paper eq. 6 by the chain rule: the client's data enter ``A_k = grad_phi ln Z``
only through the two networks evaluated at its points (eq. 5). On the
networks' weights (:meth:`pacd_jax.gp.MetaGP.network_coordinates`),

    A_k = sum_j J_k(x_j) c_jk,    J_k(x) = d [m_phi_k(x), h_phi_k(x)] / d phi   ((P_net, 1 + F)),

with ``c_jk = (alpha_jk, d ln Z / d h_jk)``, ``alpha_k = K_k^-1 (y - m_k)``. So
a message is a sum of ``m`` *atoms*, one per point, from a dictionary the
coordinator can compute (it knows the particles), with unknown coefficients.
The coefficients enter linearly: for given points they are a least-squares
fit, and the points alone are unknown (variable projection). The attack
finds them as sparse recovery does (an ADCG-style greedy pursuit):

1. grow: ``m`` times, add the candidate point whose atoms explain most of
   the residual (scored on a Sobol set of the box, its faces and corners,
   and next to the points found so far, with the atoms and the residual
   orthogonalised against those already in, so that a second point in a
   cluster scores as it should), then move all
   points found so far a few L-BFGS steps down the projected residual;
2. refine all points (more L-BFGS steps);
3. swap: drop the point that explains least, search again, keep the change
   if the residual falls by at least ``swap_gain``;
4. polish: refine on every particle's message.

Stages 1-3 use the messages of the few particles that carry the most
(``PursuitConfig.search_particles``): each alone has far more equations
than there are unknowns, and they cost in proportion to the particles used.
When the exchanges stall on those, they go on with twice as many particles
(``PursuitConfig.widen``): a point set that fits two particles' messages can
still be wrong, and the other particles' messages tell.

The least-squares fits are by QR of the atoms stacked over a small ridge
(:func:`_ridge_qr`), which keeps the residual accurate when close pairs of
queries make the atoms nearly dependent. :func:`pursuit_follow` follows a
target round after round, adding one point per round and polishing all by
Levenberg-Marquardt.

This uses no random restarts and never optimises y: once the points are
found, ``y`` follows from the fitted ``alpha``: ``y = m_k(X) + K_k(X) alpha_k``,
averaged over particles. It is a stronger attacker than eq. 11's gradient
matching from random starts (:mod:`pacd_jax.attack`), whose loss has a very
narrow basin around the truth (README, "Gradient-leakage attack").
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import jax.scipy.linalg
import numpy as np
from scipy.stats import qmc

from pacd_jax import optim
from pacd_jax.gp import DEFAULT_JITTER, MetaGP

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class PursuitConfig:
    """How hard the pursuit attack searches.

    Attributes:
        candidates: Sobol points of the box scored at every addition (a power of 2).
        faces: Sobol points on each of the box's ``2 d`` faces also scored
            (a power of 2; 0: none), and for ``d <= 3`` its corners. The
            acquisition maximiser clips to the box, so queries sit exactly on
            faces (Branin run: 10 of 104, one corner), where interior
            candidates only come within ~1/sqrt(candidates).
        shortlist: box candidates picked by their own atoms' fit to the
            residual, then rescored with atoms orthogonalised against the
            points already in. ``None`` (default): score every candidate
            orthogonally (~3-5 s per new point on the Branin run's late
            rounds). The pre-selection misses points whose atoms lie mostly in the span of
            the earlier points' (many points, close pairs): at the Branin
            run's round 32 the true new point explained 99 % of the residual
            orthogonally but ranked ~930th of 6148 by its own fit, and in
            the 6-point unit test the exchanges stall with a shortlist of 64.
        radii: distances (unit box) at which neighbours of the points found so
            far are also candidates (a cluster's next member is close by).
            The smallest, 0.001, is for queries next to earlier ones: a
            new point is placed from a candidate within about 3e-3 of it
            (Branin run, round 55) and BO puts queries 2e-4 to 2e-3 from
            earlier ones; the Branin run's round-42 query, 2e-4 from an
            earlier one, had its nearest candidate 3.2e-3 away with radii
            0.004 and 0.015 and 8e-4 away with 0.001 added.
        grow_steps: L-BFGS steps on all points after each addition.
        final_steps: L-BFGS steps once all ``m`` points are in.
        swaps: exchange passes at most.
        exchange_steps: L-BFGS steps on all points after each exchange try
            (the kept set is refined further by ``polish``).
        swap_gain: a swap is kept if it lowers the residual by this factor.
        polish: further rounds of ``final_steps`` at the end, while each lowers
            the residual by ``swap_gain`` or more.
        ridge: Tikhonov term of the coefficient fit while growing, relative to
            the mean diagonal of the atoms' Gram matrix (keeps coinciding points finite).
        search_particles: grow, refine and exchange on only this many particles
            (those with the largest messages), then polish on all of them. One
            particle's message already has many more weights than there are
            unknowns, and every stage costs in proportion to the particles it
            uses. ``None``: all.
        widen: when an exchange pass fails on the search particles, refine
            on twice as many and go on exchanging there (up to all of them)
            instead of stopping; ``swaps`` still bounds the kept exchanges.
        tol: no exchanges (nor widening) once the relative residual is
            below this: the message is explained to round-off (the truth
            leaves 4e-24 and 1e-21 at rounds 1 and 5 of the Branin run).
        ridge_final: the same term for refining, swapping and polishing. The
            residual the true points leave is about the ridge (a fraction of
            the message the regularised fit gives up), so a large ridge makes
            wrong point sets as good as the truth; a small one keeps the
            truth's residual far below theirs. ``None``: ``ridge``.
        ridge_lm: the same term for the Levenberg-Marquardt polish of
            :func:`pursuit_follow`, which never differentiates through the
            fit. With the fit by QR (:func:`_ridge_qr`) the true points then
            leave the message's own round-off: 1e-30 to 2e-29 at every round
            of the Branin run, where ridge 1e-13 left 2e-13 at round 99 and
            moved the truth 0.03 (matched RMSE) to a lower residual.
        converged_rtol: ``None``: every L-BFGS run takes its full number of
            steps. A value: each stops at the first iteration that lowers
            the residual by at most this fraction of it
            (:func:`pacd_jax.optim.lbfgs_until_converged`, purely relative).
            Once the residual sits at round-off, further iterations only
            spend the line search's 20 evaluations each; stopping there
            makes :func:`pursuit_follow`'s 100 rounds affordable.
    """

    candidates: int = 4096
    faces: int = 512
    shortlist: int | None = None
    radii: tuple[float, ...] = (0.001, 0.004, 0.015)
    grow_steps: int = 15
    final_steps: int = 200
    swaps: int = 20
    exchange_steps: int = 200
    swap_gain: float = 0.9
    polish: int = 5
    ridge: float = 1e-9
    search_particles: int | None = 2
    widen: bool = True
    tol: float = 1e-14
    ridge_final: float | None = 1e-13
    ridge_lm: float = 1e-30
    converged_rtol: float | None = None

    def __post_init__(self):
        names = ("candidates", "grow_steps", "final_steps", "exchange_steps") + (() if self.shortlist is None else ("shortlist",))
        for name in names:
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not isinstance(self.faces, int) or self.faces < 0:
            raise ValueError(f"faces must be a non-negative integer, got {self.faces!r}")
        if self.search_particles is not None and (not isinstance(self.search_particles, int) or self.search_particles < 1):
            raise ValueError(f"search_particles must be a positive integer or None, got {self.search_particles!r}")
        for name in ("swaps", "polish"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
        if not 0.0 < self.swap_gain < 1.0:
            raise ValueError(f"swap_gain must be in (0, 1), got {self.swap_gain!r}")
        for name in ("ridge", "ridge_final", "ridge_lm"):
            value = getattr(self, name)
            if value is not None and not (np.isfinite(value) and value > 0.0):
                raise ValueError(f"{name} must be positive, got {value!r}")
        if not (np.isfinite(self.tol) and self.tol >= 0.0):
            raise ValueError(f"tol must be non-negative, got {self.tol!r}")
        if self.converged_rtol is not None and not (np.isfinite(self.converged_rtol) and 0.0 <= self.converged_rtol < 1.0):
            raise ValueError(f"converged_rtol must be in [0, 1) or None, got {self.converged_rtol!r}")
        if not isinstance(self.widen, bool):
            raise ValueError(f"widen must be a bool, got {self.widen!r}")
        if any(not 0.0 < r < 0.5 for r in self.radii):
            raise ValueError(f"radii must be in (0, 0.5), got {self.radii!r}")


class PursuitResult(NamedTuple):
    """Outcome of a pursuit attack (NumPy, float64).

    Attributes:
        X: ``(m, d)`` reconstruction in the unit box.
        y: ``(m,)`` the standardised targets implied by the fitted coefficients.
        loss: relative residual ``||A - J c||^2 / ||A||^2`` on the network weights
            of all particles.
        history: ``(stage, residual)`` after growing, refining, each kept swap
            (these three on the ``search_particles`` messages), each widening
            (``"widen to N"``, on the N particles now searched) and polishing (all).
        swaps: swaps kept.
    """

    X: np.ndarray
    y: np.ndarray
    loss: float
    history: list
    swaps: int


def atoms(model: MetaGP, particles: Array, X: Array, coords: Array) -> Array:
    """``(K, M, 1 + F, P_net)``: the Jacobians ``J_k(x_j)`` on the network weights ``coords``."""

    def one(phi, x):
        return jax.jacrev(model.network_outputs)(phi, x)[:, coords]

    return jax.vmap(jax.vmap(one, (None, 0)), (0, None))(particles, X)


def _normal_equations(J: Array, active: Array, ridge: float) -> tuple[Array, Array]:
    """The active atoms ``B`` ``(K, M O, P_net)`` and their ridge-regularised Gram matrix ``(K, M O, M O)``.

    The ridge is relative to the mean diagonal of the active atoms' Gram
    matrix; it also gives empty slots (zero rows) a zero coefficient.
    """
    K, M, O, _ = J.shape
    B = (J * active[None, :, None, None]).reshape(K, M * O, -1)
    gram = jnp.einsum("kap,kbp->kab", B, B)
    scale = jnp.trace(gram, axis1=1, axis2=2)[:, None, None] / jnp.maximum(jnp.sum(active) * O, 1.0)
    return B, gram + ridge * scale * jnp.eye(M * O, dtype=J.dtype)


def _ridge_qr(J: Array, active: Array, ridge: float) -> tuple[Array, Array, Array]:
    """QR of the active atoms stacked over the ridge: ``[B^T; sqrt(lambda) I] = [Q1; Q2] R``.

    ``(B (K, M O, P_net), Q1 (K, P_net, M O), R (K, M O, M O))``. The fit
    ``c = R^-1 Q1^T t`` and its residual ``t - Q1 Q1^T t`` then cost the
    atoms' condition number, not its square as the normal equations do:
    once the queries come in close pairs, the normal equations' round-off
    (relative residual ~1e-12 at the Branin run's round 99) swamps the
    differences between point sets, and a ridge large enough to hide it
    (1e-13) already pulls the truth's near-duplicates apart. ``lambda`` is
    ``ridge`` times the mean diagonal of the active atoms' Gram matrix.
    """
    K, M, O, P = J.shape
    B = (J * active[None, :, None, None]).reshape(K, M * O, P)
    scale = jnp.sum(B * B, axis=(1, 2)) / jnp.maximum(jnp.sum(active) * O, 1.0)
    eye = jnp.broadcast_to(jnp.eye(M * O, dtype=J.dtype), (K, M * O, M * O))
    stacked = jnp.concatenate([jnp.swapaxes(B, 1, 2), jnp.sqrt(ridge * scale)[:, None, None] * eye], axis=1)
    Q, R = jnp.linalg.qr(stacked)
    return B, Q[:, :P], R


def fit_coefficients(J: Array, target: Array, active: Array, ridge: float) -> tuple[Array, Array]:
    """Ridge least-squares coefficients of the active points' atoms and the residual (by QR, :func:`_ridge_qr`).

    Args:
        J: ``(K, M, O, P_net)`` atoms; target: ``(K, P_net)`` the message on the
            network weights; active: ``(M,)`` 1 for points in, 0 for slots not yet filled.

    Returns:
        ``(c (K, M, O), residual (K, P_net))``; inactive slots get ``c = 0``.
    """
    K, M, O, _ = J.shape
    c, resid, _ = _ridge_fit(J, target, active, ridge)
    return c.reshape(K, M, O), resid


def _ridge_fit(J: Array, target: Array, active: Array, ridge: float) -> tuple[Array, Array, Array]:
    """``(c (K, M O), residual (K, P_net), Q1)``: the fit of :func:`fit_coefficients` and the basis it used."""
    _, Q1, R = _ridge_qr(J, active, ridge)
    qt = jnp.einsum("kpa,kp->ka", Q1, target)
    c = jax.scipy.linalg.solve_triangular(R, qt[..., None], lower=False)[..., 0]
    return c, target - jnp.einsum("kpa,ka->kp", Q1, qt), Q1


def removal_costs(J: Array, target: Array, active: Array, ridge: float) -> Array:
    """``(M,)``: how much the regularised fit's objective grows if each active point is dropped.

    Dropping point ``j`` from a (ridge) least-squares fit raises its objective
    by ``sum_k c_jk^T (H_k)_jj^-1 c_jk``, ``H_k`` the inverse of the
    regularised Gram matrix and ``(H_k)_jj`` its ``O x O`` block (the
    leave-one-block-out identity). Inactive slots get ``inf``.
    """
    K, M, O, _ = J.shape
    B, system = _normal_equations(J, active, ridge)
    H = jnp.linalg.inv(system)
    c = jnp.einsum("kab,kbp,kp->ka", H, B, target).reshape(K, M, O)
    blocks = H.reshape(K, M, O, M, O)[:, jnp.arange(M), :, jnp.arange(M), :]  # (M, K, O, O)
    cost = jnp.einsum("mkoq,kmo,kmq->m", jnp.linalg.inv(blocks), c, c)
    return jnp.where(active > 0, cost, jnp.inf)


def _box_candidates(dim: int, count: int, faces: int, seed: int) -> np.ndarray:
    """``count`` scrambled Sobol points of the unit box, ``faces`` on each face, and the corners for ``dim <= 3``."""
    parts = [qmc.Sobol(dim, scramble=True, seed=seed).random(count)]
    if faces:
        base = qmc.Sobol(dim - 1, scramble=True, seed=seed + 1).random(faces) if dim > 1 else np.zeros((1, 0))
        parts += [np.insert(base, i, v, axis=1) for i in range(dim) for v in (0.0, 1.0)]
        if dim <= 3:
            parts.append(np.stack(np.meshgrid(*[np.array([0.0, 1.0])] * dim, indexing="ij"), -1).reshape(-1, dim))
    return np.unique(np.concatenate(parts), axis=0) if dim == 1 else np.concatenate(parts)


def _neighbour_offsets(dim: int, radii) -> np.ndarray:
    """All ``3^d - 1`` grid neighbours per radius for ``d <= 3``, else the ``2d`` axis ones."""
    if dim <= 3:
        steps = np.stack(np.meshgrid(*[np.array([-1.0, 0.0, 1.0])] * dim, indexing="ij"), -1).reshape(-1, dim)
        steps = steps[np.any(steps != 0, axis=1)]
    else:
        steps = np.concatenate([np.eye(dim), -np.eye(dim)])
    return np.concatenate([r * steps for r in radii])


class _Functions:
    """The attack's jitted pieces, with the particles and the message as arguments.

    Each compiles once per shape (particles searched, point slots), so one
    instance serves every round of :func:`pursuit_follow` (the slots are
    padded to a few sizes) and every particle subset of one attack.
    """

    def __init__(self, model: MetaGP, config: PursuitConfig, coords: Array):
        self.model, self.config, self.coords = model, config, coords
        P = model.num_params
        ridge_final = config.ridge if config.ridge_final is None else config.ridge_final

        def loss_of(particles, target, z, active, ridge):
            J = atoms(model, particles, z, coords)
            _, r = fit_coefficients(J, target, active, ridge)
            return jnp.sum(r * r) / jnp.sum(target * target)

        def descent(ridge, steps):
            if config.converged_rtol is None:
                return jax.jit(lambda p, t, z, a: optim.lbfgs(lambda zz: loss_of(p, t, zz, a, ridge), z, steps))
            return jax.jit(lambda p, t, z, a: optim.lbfgs_until_converged(
                lambda zz: loss_of(p, t, zz, a, ridge), z, steps, config.converged_rtol, floor=0.0).params)

        self.loss = jax.jit(lambda p, t, z, a: loss_of(p, t, z, a, ridge_final))
        self.loss_lm = jax.jit(lambda p, t, z, a: loss_of(p, t, z, a, config.ridge_lm))
        self.grow = descent(config.ridge, config.grow_steps)
        self.final = descent(ridge_final, config.final_steps)
        self.short = descent(ridge_final, config.grow_steps)
        self.exchange = descent(ridge_final, config.exchange_steps)

        def fit_with(ridge):
            @jax.jit
            def fit(particles, target, z, active):
                J = atoms(model, particles, z, coords)
                return fit_coefficients(J, target, active, ridge) + (J,)

            return fit

        self.fit_grow, self.fit = fit_with(config.ridge), fit_with(ridge_final)
        self.removal_costs = jax.jit(
            lambda p, t, z, a: removal_costs(atoms(model, p, z, coords), t, a, ridge_final) / jnp.sum(t * t)
        )

        def embed(r):  # residual on the network weights -> a full particle-sized direction
            return jnp.zeros((P,), r.dtype).at[coords].set(r)

        @jax.jit
        def raw_scores(particles, gram_inv, cand, resid):
            # J^T r for every candidate by one forward-mode pass per particle
            def per_particle(phi, r):
                _, jr = jax.jvp(lambda p: model.network_outputs(p, cand), (phi,), (embed(r),))
                return jr  # (C, O)

            proj = jax.vmap(per_particle)(particles, resid)
            return jnp.einsum("kco,kcoq,kcq->c", proj, gram_inv, proj)

        self.raw_scores = raw_scores

        @jax.jit
        def gram_inverse(particles, cand):
            J = atoms(model, particles, cand, coords)
            g = jnp.einsum("kcop,kcqp->kcoq", J, J)
            eye = jnp.eye(g.shape[-1], dtype=g.dtype)
            return jnp.linalg.inv(g + 1e-12 * jnp.trace(g, axis1=2, axis2=3)[..., None, None] * eye)

        self.gram_inverse = gram_inverse

        @jax.jit
        def ortho_scores(particles, J_active, active, cand, resid):
            # residual explained by a candidate's atoms after projecting out the active atoms
            K = J_active.shape[0]
            A = (J_active * active[None, :, None, None]).reshape(K, -1, J_active.shape[-1])
            # an orthonormal basis of the active span by SVD: a pivot-free QR truncated
            # on its diagonal would drop real directions (after an empty slot, or a
            # near-repeat point) that later columns lean on
            Q, sv, _ = jnp.linalg.svd(jnp.swapaxes(A, 1, 2), full_matrices=False)
            Q = Q * (sv > 1e-10 * sv[:, :1])[:, None, :]
            Bc = atoms(model, particles, cand, coords)
            QtB = jnp.einsum("kpa,kcop->kcoa", Q, Bc)
            g = jnp.einsum("kcop,kcqp->kcoq", Bc, Bc) - jnp.einsum("kcoa,kcqa->kcoq", QtB, QtB)
            eye = jnp.eye(g.shape[-1], dtype=g.dtype)
            g = g + (1e-10 * jnp.trace(g, axis1=2, axis2=3)[..., None, None] + 1e-300) * eye
            # the residual of a ridge fit keeps a part inside the active span (along its
            # weak directions); project it out too, or candidates next to earlier points
            # (nearly in that span, tiny g) score that leftover instead of new signal
            proj = jnp.einsum("kcop,kp->kco", Bc, resid) - jnp.einsum("kcoa,ka->kco", QtB, jnp.einsum("kpa,kp->ka", Q, resid))
            return jnp.sum(jnp.einsum("kco,kco->kc", proj, jnp.linalg.solve(g, proj[..., None])[..., 0]), axis=0)

        self.ortho_scores = ortho_scores

        @jax.jit
        def exact_scores(particles, target, z, active, cand):
            # the share of the exact residual (QR fit at ridge_lm) each candidate's atoms explain,
            # orthogonalised against the active atoms explicitly: B - Q (Q^T B), not the Gram
            # difference B^T B - (Q^T B)^T (Q^T B), whose cancellation and the grow ridge's leftover
            # hide a new point inside a tight cluster (Branin run, round 57: the true query scored
            # -8e-17 and ranked ~7400th by ortho_scores, first here)
            J = atoms(model, particles, z, coords)
            _, Q1, _ = _ridge_qr(J, active, config.ridge_lm)
            resid = target - jnp.einsum("kpa,ka->kp", Q1, jnp.einsum("kpa,kp->ka", Q1, target))
            Bc = atoms(model, particles, cand, coords)
            perp = Bc - jnp.einsum("kpa,kcoa->kcop", Q1, jnp.einsum("kpa,kcop->kcoa", Q1, Bc))
            g = jnp.einsum("kcop,kcqp->kcoq", perp, perp)
            eye = jnp.eye(g.shape[-1], dtype=g.dtype)
            g = g + (1e-12 * jnp.trace(g, axis1=2, axis2=3)[..., None, None] + 1e-300) * eye
            proj = jnp.einsum("kcop,kp->kco", perp, resid)
            explained = jnp.sum(jnp.einsum("kco,kco->kc", proj, jnp.linalg.solve(g, proj[..., None])[..., 0]), axis=0)
            return explained / jnp.sum(resid * resid)

        self.exact_scores = exact_scores

        def point_atoms(phi, x):
            return jax.jacrev(model.network_outputs)(phi, x)[:, coords]  # (O, P_net)

        @jax.jit
        def gauss_newton(particles, target, z, active):
            # Kaufman's variable-projection Jacobian: moving point j changes the fit's
            # residual by minus the part of d(B c)/dz_j that the active atoms cannot absorb
            J = atoms(model, particles, z, coords)
            K, M, O, _ = J.shape
            d = z.shape[1]
            c, r, Q1 = _ridge_fit(J, target, active, config.ridge_lm)
            dJ = jax.vmap(jax.vmap(jax.jacfwd(point_atoms, argnums=1), (None, 0)), (0, None))(particles, z)  # (K, M, O, P, d)
            v = jnp.einsum("kmopd,kmo->kmdp", dJ, c.reshape(K, M, O)) * active[None, :, None, None]
            v = v.reshape(K, M * d, -1)
            V = v - jnp.einsum("kpa,kba->kbp", Q1, jnp.einsum("kpa,kbp->kba", Q1, v))
            return jnp.einsum("kap,kbp->ab", V, V), jnp.einsum("kap,kp->a", V, r), jnp.sum(r * r) / jnp.sum(target * target)

        @jax.jit
        def lm_step(H, g, mu, active):
            # damped normal equations on the active points' coordinates (the others stay put)
            mask = jnp.repeat(active, H.shape[0] // active.shape[0], total_repeat_length=H.shape[0])
            Hm = H * mask[:, None] * mask[None, :] + jnp.diag(1.0 - mask)
            dg = jnp.diag(Hm)
            return jnp.linalg.solve(Hm + mu * jnp.diag(dg + 1e-30 * jnp.max(dg)), g * mask)

        self.gauss_newton, self.lm_step = gauss_newton, lm_step


class _Programs:
    """:class:`_Functions` bound to one message: its particles and their message on the network weights."""

    def __init__(self, model: MetaGP, config: PursuitConfig, particles: Array, target: Array, coords: Array, fns: _Functions | None = None):
        fns = _Functions(model, config, coords) if fns is None else fns
        self.fns, self.model, self.config = fns, model, config
        self.particles, self.target, self.coords = particles, target, coords
        bind = functools.partial
        for name in ("loss", "loss_lm", "grow", "final", "short", "exchange", "fit_grow", "fit", "removal_costs", "gauss_newton",
                     "exact_scores"):
            setattr(self, name, bind(getattr(fns, name), particles, target))
        for name in ("raw_scores", "gram_inverse", "ortho_scores"):
            setattr(self, name, bind(getattr(fns, name), particles))


def _best_candidate(prog: _Programs, sobol, gram_inv, offsets, z, active, resid, J) -> Array:
    """The next point: the best of :func:`_top_candidates`."""
    return _top_candidates(prog, sobol, gram_inv, offsets, z, active, resid, J, 1)[0]


def _levenberg_marquardt(prog: _Programs, z: Array, active: Array, iters: int, floor: float = 0.0, trace: list | None = None,
                         movable: Array | None = None, max_step: float = float("inf")) -> tuple[Array, float]:
    """Levenberg-Marquardt on the relative residual (ridge ``ridge_lm``), at most ``iters`` Jacobians.

    From a start near the solution it converges in a few iterations where
    L-BFGS crawls (the problem is ill-conditioned: on the Branin run's round
    10 from the truth at round 9 plus the new point, L-BFGS passes reached
    matched RMSE 4e-8 in ~50 s, this 7e-12 in 9 s). Stops when an accepted
    step gains less than 0.1 %, the damping exceeds 1e8, or the residual is
    at most ``floor`` (near the message's round-off a step's "gain" is
    noise, and the 0.1 % rule alone lets the polish run all ``iters``).
    ``trace``, if given, gets the residual after each iteration.
    ``movable`` (a subset of ``active``): only these points move, the fit
    still uses every active point (default: all active points move).
    ``max_step``: a trust region, the farthest (Euclidean, unit box) any
    point may move in one step; a longer step is shortened to it along its
    direction (and a shortened step's small gain does not end the polish).
    """
    movable = active if movable is None else movable
    mu = 1e-3
    H, g, f = prog.gauss_newton(z, active)
    f = float(f)
    trace = [] if trace is None else trace
    streak = True  # the last try was accepted: the next one likely is too
    for _ in range(iters):
        if f <= floor:
            break
        step = prog.fns.lm_step(H, g, mu, movable).reshape(z.shape)
        longest = float(jnp.sqrt(jnp.max(jnp.sum(step * step, axis=1))))
        truncated = longest > max_step
        if truncated:  # shortened along its direction to the trust region
            step = step * (max_step / longest)
        z_try = z + step
        # after an accepted step, evaluate the try with its Gauss-Newton system at once (the
        # residual is part of it): an accepted try then costs one fit, not two; after a
        # rejection only the residual (a rejection streak costs what it did)
        system = prog.gauss_newton(z_try, active) if streak else None
        f_try = float(system[2]) if streak else float(prog.loss_lm(z_try, active))
        accepted = bool(np.isfinite(f_try) and f_try < f)
        if accepted:
            done = f_try > (1.0 - 1e-3) * f and not truncated
            z, mu = z_try, max(mu / 10.0, 1e-12)
            H, g, f = system if streak else prog.gauss_newton(z, active)
            f = float(f)
        else:
            mu *= 10.0
        streak = accepted
        trace.append(f)
        if (accepted and done) or mu > 1e8:
            break
    return z, f


def _top_candidates(prog: _Programs, sobol, gram_inv, offsets, z, active, resid, J, count: int) -> Array:
    """The ``count`` best distinct candidates for the next point, best first.

    The box candidates (the shortlist by each candidate's own explained
    residual, or all of them) and the active points' neighbours, scored with
    atoms orthogonalised against the active ones. Neighbours clipped into the
    box can coincide (near a corner); repeats are dropped.
    """
    if prog.config.shortlist is None:
        step = 512  # candidates' atoms per chunk
        scores = np.concatenate([np.asarray(prog.ortho_scores(J, active, sobol[i : i + step], resid))
                                 for i in range(0, sobol.shape[0], step)])
        top = sobol[jnp.asarray(np.argsort(-scores, kind="stable")[: max(count, 1)])]
    else:
        raw = np.asarray(prog.raw_scores(gram_inv, sobol, resid))
        top = sobol[jnp.asarray(np.argsort(-raw, kind="stable")[: prog.config.shortlist])]
    near = jnp.clip(z[:, None, :] + offsets[None], 1e-3, 1 - 1e-3).reshape(-1, z.shape[1])
    near = jnp.where(jnp.repeat(active, offsets.shape[0])[:, None] > 0, near, top[:1])
    cand = np.asarray(jnp.concatenate([top, near]))
    order = np.argsort(-np.asarray(prog.ortho_scores(J, active, jnp.asarray(cand), resid)), kind="stable")
    _, first = np.unique(cand[order], axis=0, return_index=True)
    return jnp.asarray(cand[order[np.sort(first)[:count]]], z.dtype)


def _exact_candidates(prog: _Programs, sobol, offsets, z, active, count: int) -> Array:
    """The ``count`` best distinct candidates for the next point by :meth:`_Functions.exact_scores`, best first.

    The box candidates and the active points' neighbours (as
    :func:`_top_candidates`), each scored by the share of the exact
    residual its atoms explain outside the active span. What the follow
    attacker grows and retries with: its earlier points fit the message to
    round-off, and a new query next to them shows only there.
    """
    near = jnp.clip(z[:, None, :] + offsets[None], 1e-3, 1 - 1e-3).reshape(-1, z.shape[1])
    near = near[np.flatnonzero(np.repeat(np.asarray(active) > 0, offsets.shape[0]))]
    cand = np.asarray(jnp.concatenate([sobol, near]))
    step = 256  # candidates' atoms per chunk; the last chunk is padded so that one program serves every round
    n = cand.shape[0]
    padded = np.concatenate([cand, np.repeat(cand[:1], -n % step, axis=0)])
    scores = np.concatenate([np.asarray(prog.exact_scores(z, active, jnp.asarray(padded[i : i + step])))
                             for i in range(0, padded.shape[0], step)])[:n]
    scores = np.where(np.isfinite(scores), scores, -np.inf)
    order = np.argsort(-scores, kind="stable")
    _, first = np.unique(cand[order], axis=0, return_index=True)
    return jnp.asarray(cand[order[np.sort(first)[:count]]], z.dtype)


def _exchange(prog: _Programs, sobol, gram_inv, offsets, z, active, loss):
    """One exchange pass; ``(z, loss)`` if it lowered the residual by ``swap_gain``, else ``None``.

    First add-then-prune: put the best candidate for the residual in as an
    extra point, let all ``m + 1`` move, and drop the one whose loss costs
    least (a point in the wrong place, or a duplicate). Then, if that did not
    help, drop-then-add: remove one of the cheapest points and search afresh
    for its replacement. The extra point goes into a free slot of ``z`` if
    it has one (padded buffers keep their shape), else ``z`` grows by a row.
    """
    config = prog.config
    free = np.flatnonzero(np.asarray(active) == 0)
    _, resid, J = prog.fit(z, active)
    x_new = _best_candidate(prog, sobol, gram_inv, offsets, z, active, resid, J)
    if free.size:
        slot = int(free[0])
        z_ext, active_ext = z.at[slot].set(x_new), active.at[slot].set(1.0)
    else:
        slot = z.shape[0]
        z_ext, active_ext = jnp.concatenate([z, x_new[None]]), jnp.ones((slot + 1,), z.dtype)
    z_ext = prog.short(z_ext, active_ext)
    costs = np.asarray(prog.removal_costs(z_ext, active_ext))
    tries = [("prune", int(w)) for w in np.argsort(costs)[:3] if w != slot and np.isfinite(costs[w])]
    tries += [("replace", int(w)) for w in np.argsort(np.asarray(prog.removal_costs(z, active)))[:3] if active[w] > 0]
    for how, w in tries:
        if how == "prune":
            if free.size:  # the new point takes the pruned one's slot; its own slot is free again
                start = z_ext.at[w].set(z_ext[slot]).at[slot].set(z[slot])
            else:
                start = jnp.delete(z_ext, w, axis=0, assume_unique_indices=True)
        else:
            dropped = active.at[w].set(0.0)
            _, resid_w, J_w = prog.fit(z, dropped)
            start = z.at[w].set(_best_candidate(prog, sobol, gram_inv, offsets, z, dropped, resid_w, J_w))
        z_try = prog.exchange(start, active)
        loss_try = float(prog.loss(z_try, active))
        if np.isfinite(loss_try) and loss_try < config.swap_gain * loss:
            return z_try, loss_try
    return None


def _relocate(msg: _Message, z: Array, active: Array, loss: float, tries: int, candidates: int, place_iters: int,
              lm_iters: int, floor: float, max_step: float, bar: float = 0.0) -> tuple[Array, float, int]:
    """Revisit earlier points: drop one, put the best of ``candidates`` in its place; keep the best such move.

    The ``tries`` points that explain least (:func:`removal_costs`) are
    tried, cheapest first. For each, the candidates for the residual
    without it are placed alone (``place_iters`` Levenberg-Marquardt steps
    that move only it), then all points are polished (``lm_iters`` steps to
    ``floor``, trust region ``max_step``). The tries stop at the first that
    reaches ``bar``; the best one is kept if it lowers the residual by
    ``swap_gain``. Best of all tries, not the first gain: dropping a right
    point and re-placing it elsewhere can also lower the residual a little
    while the wrong point stays. All on every particle's message.
    ``(z, loss, 1 if a move was kept else 0)``.
    """
    prog, gram_inv, _ = msg.subset(msg.particles.shape[0])
    costs = np.asarray(prog.removal_costs(z, active))
    order = [int(w) for w in np.argsort(costs, kind="stable") if active[w] > 0][:tries]
    best = None
    for w in order:
        dropped = active.at[w].set(0.0)
        _, resid, J = prog.fit_grow(z, dropped)
        alone = jnp.zeros_like(active).at[w].set(1.0)
        for x in _top_candidates(prog, msg.sobol, gram_inv, msg.offsets, z, dropped, resid, J, candidates):
            z_try = z.at[w].set(x)
            if place_iters:
                z_try = _levenberg_marquardt(prog, z_try, active, place_iters, floor, movable=alone)[0]
            z_try, loss_try = _levenberg_marquardt(prog, z_try, active, lm_iters, floor, max_step=max_step)
            if np.isfinite(loss_try) and (best is None or loss_try < best[1]):
                best = (z_try, loss_try)
        if best is not None and best[1] <= bar:
            break
    if best is not None and best[1] < msg.config.swap_gain * loss:
        return best[0], best[1], 1
    return z, loss, 0


def implied_targets(model: MetaGP, particles: Array, X: Array, alpha: Array, jitter: float = DEFAULT_JITTER) -> Array:
    """``y = m_k(X) + (K_k(X) + sigma_k^2 I) alpha_k`` averaged over the K particles (``alpha``: ``(K, m)``)."""

    def one(phi, a):
        mean, kxx = model.prior_moments(phi, X)
        return mean + kxx @ a + (model.noise_variance(phi) + jitter) * a

    return jnp.mean(jax.vmap(one)(particles, alpha), axis=0)


class _Message:
    """One intercepted message prepared for the search: its programs (all particles and the search subsets) and candidates."""

    def __init__(self, fns: _Functions, particles: Array, grads: Array, key: Array):
        config, model = fns.config, fns.model
        d = model.config.dim
        self.fns, self.config = fns, config
        self.particles = particles
        self.target = jnp.asarray(grads, particles.dtype)[:, fns.coords]
        self.all = _Programs(model, config, particles, self.target, fns.coords, fns)
        seed = int(jax.random.randint(key, (), 0, 2**31 - 1))
        self.sobol = jnp.asarray(_box_candidates(d, config.candidates, config.faces, seed), particles.dtype)
        self.offsets = jnp.asarray(_neighbour_offsets(d, config.radii), particles.dtype)
        self.by_size = np.argsort(-np.asarray(jnp.sum(self.target * self.target, axis=1)))

    def _gram_inverse(self, particles: Array) -> Array:
        """``(K, C, O, O)``: the inverse Gram matrix of every box candidate's atoms, per particle (in chunks: the atoms are large)."""
        step = 512
        return jnp.concatenate(
            [self.fns.gram_inverse(particles, self.sobol[i : i + step]) for i in range(0, self.sobol.shape[0], step)], axis=1
        )

    @functools.cached_property
    def gram_inv(self) -> Array:
        return self._gram_inverse(self.particles)

    def subset(self, size: int):
        """The programs and candidate Gram inverses of the ``size`` particles with the largest messages."""
        K = self.particles.shape[0]
        if size >= K:
            return self.all, None if self.config.shortlist is None else self.gram_inv, K
        sub = np.sort(self.by_size[:size])
        prog = _Programs(self.fns.model, self.config, self.particles[sub], self.target[sub], self.fns.coords, self.fns)
        return prog, None if self.config.shortlist is None else self._gram_inverse(self.particles[sub]), size


def _grow(msg: _Message, search: _Programs, search_inv: Array, z: Array, active: Array, slots, move: bool = True,
          exact: bool = False) -> tuple[Array, Array]:
    """Fill ``slots`` one by one with the candidate that explains most of the residual.

    With ``move``, all points then take a few L-BFGS steps on the search
    particles after each addition (a search from scratch); without, every
    point stays where it is (:func:`pursuit_follow`, whose earlier points are
    already right: those steps on a subset of the particles pushed one of a
    close pair of queries away, see there). ``exact``: pick each point by
    :func:`_exact_candidates` instead of :func:`_best_candidate`.
    """
    for i in slots:
        if exact:
            x_new = _exact_candidates(search, msg.sobol, msg.offsets, z, active, 1)[0]
        else:
            _, resid, J = search.fit_grow(z, active)
            x_new = _best_candidate(search, msg.sobol, search_inv, msg.offsets, z, active, resid, J)
        z = z.at[i].set(x_new)
        active = active.at[i].set(1.0)
        if move:
            z = search.grow(z, active)
    return z, active


def _search(msg: _Message, z: Array, active: Array, grow_slots, report) -> tuple[Array, float, int]:
    """Grow into ``grow_slots``, refine, exchange (widening when stalled) and polish; ``(z, loss, swaps kept)``."""
    config = msg.config
    K = msg.particles.shape[0]
    search, search_inv, size = msg.subset(K if config.search_particles is None else config.search_particles)
    z, active = _grow(msg, search, search_inv, z, active, grow_slots)
    report("grow", float(search.loss(z, active)))
    z = search.final(z, active)
    loss = float(search.loss(z, active))
    report("refine", loss)

    # exchanges; when they stall on a subset, continue on twice as many particles
    kept = 0
    while kept < config.swaps and loss > config.tol:
        z_new = _exchange(search, msg.sobol, search_inv, msg.offsets, z, active, loss)
        if z_new is None:
            if size >= K or not config.widen:
                break
            search, search_inv, size = msg.subset(2 * size)
            z = search.final(z, active)
            loss = float(search.loss(z, active))
            report(f"widen to {size}", loss)
            continue
        z, loss = z_new
        kept += 1
        report("swap", loss)

    # polish on every particle: at least one pass, more while each gains ``swap_gain``
    prog = msg.all
    loss = float(prog.loss(z, active))
    for _ in range(config.polish if search is prog else max(config.polish, 1)):
        z_try = prog.final(z, active)
        loss_try = float(prog.loss(z_try, active))
        if not (np.isfinite(loss_try) and loss_try < loss):
            break
        z, done, loss = z_try, loss_try > config.swap_gain * loss, loss_try
        if done:
            break
    report("polish", loss)
    return z, loss, kept


def _result(msg: _Message, z: Array, active: Array, loss: float, history, kept: int) -> PursuitResult:
    """The active points clipped to the box (they move freely: a box transform would trap them on its edges) and their implied ``y``."""
    idx = np.flatnonzero(np.asarray(active) > 0)
    X = jnp.clip(z[idx], 0.0, 1.0)
    c, _, _ = msg.all.fit(X, jnp.ones((idx.size,), z.dtype))
    y = implied_targets(msg.fns.model, msg.particles, X, c[..., 0])
    return PursuitResult(np.asarray(X, np.float64), np.asarray(y, np.float64), loss, history, kept)


def pursuit_attack(model: MetaGP, particles, grads, m: int, key: Array, config: PursuitConfig = PursuitConfig(), on_stage=None) -> PursuitResult:
    """Reconstruct the target's ``m`` points from one intercepted message (float64 advised).

    Args:
        model: the public prior architecture.
        particles, grads: ``(K, P)`` the broadcast particles and the target's message.
        m: number of the target's points (public).
        key: PRNG key (scrambles the Sobol candidates).
        on_stage: optional ``on_stage(name, loss)`` after growing, refining, each kept swap, each widening and polishing.
    """
    if not isinstance(m, (int, np.integer)) or m < 1:
        raise ValueError(f"m must be a positive integer, got {m!r}")
    particles = jnp.asarray(particles)
    dtype = particles.dtype
    fns = _Functions(model, config, jnp.asarray(model.network_coordinates()))
    msg = _Message(fns, particles, grads, key)
    history = []

    def report(stage, loss):
        history.append((stage, loss))
        if on_stage is not None:
            on_stage(stage, loss)

    active = jnp.zeros((m,), dtype)
    z, loss, kept = _search(msg, jnp.zeros((m, model.config.dim), dtype), active, range(m), report)
    return _result(msg, z, jnp.ones((m,), dtype), loss, history, kept)


#: a retry of :func:`pursuit_follow` that ends within this (unit box, every coordinate) of the first
#: candidate's points confirms them: only round-off tells the two apart
CONFIRM_TOL = 1e-3


def _screen_by_placing(placed, z: Array, row: int, candidates, good: float) -> list[tuple[float, int, Array]]:
    """Place each candidate for the new point at ``row`` alone (``placed(z) -> (points, residual)``); stop at one within ``good``.

    Returns ``(residual, index, points)`` per candidate tried, in order. Once
    the earlier points fit the message to round-off, placing the new point
    alone tells a right candidate from a wrong one by orders of magnitude, and
    the basin around a query inside a cluster is narrow: on the Branin run's
    round 46 (a query 0.002 from an earlier one) the exact scores' best
    candidates lay 0.02 away and placed to 3e-20, the 19th (0.0009 away)
    placed to 7e-30, the truth's own residual.
    """
    out = []
    for i, x in enumerate(candidates):
        z_try, loss_try = placed(z.at[row].set(x))
        out.append((float(loss_try), i, z_try))
        if loss_try <= good:
            break
    return out


class FollowStep(NamedTuple):
    """One round of :func:`pursuit_follow`: the round, the pursuit outcome, this round's time.

    ``reference``: the residual the next round is measured against (its
    bar is ``max(accept, accept_growth * reference)``); ``confirmed``: this
    round's retries found no rival for its new point; ``carried``: the points
    the next round starts from (unclipped: ``result.X`` is clipped to the
    box), so ``pursuit_follow(start=carried, reference=reference)`` on the
    later records continues exactly as an uninterrupted follow.
    """

    round: int
    result: PursuitResult
    time_s: float
    reference: float = float("nan")
    confirmed: bool = False
    carried: np.ndarray | None = None


def pursuit_follow(
    model: MetaGP, records, key: Array, config: PursuitConfig = PursuitConfig(), pad: int = 16, accept: float = 1e-27,
    retries: int = 24, lm_iters: int = 100, search_on_failure: bool = False, accept_growth: float = 2.0, start=None,
    lm_floor: float = 1e-28, screen_iters: int = 10, reference: float = float("inf"), place_iters: int = 20,
    max_step: float = 0.02, exact_scores: bool = True, screen_placed: bool = True, repairs: int = 0, repair_bar: float = 1e-28, repair_candidates: int = 4, on_step=None,
) -> list[FollowStep]:
    """Follow the target round after round with the pursuit attack (float64 advised).

    The coordinator receives the target's message at every round, and the
    target's data only grow (one query per round). So the attacker runs
    :func:`pursuit_attack` on the first record, and at every later record
    keeps the points it has, grows only the new ones from the residual and
    polishes all points on every particle's message by Levenberg-Marquardt
    (:func:`_levenberg_marquardt`). Growing leaves the earlier points where
    they are (``_grow(move=False)``): the search's L-BFGS steps on all points
    use only ``search_particles`` messages, and on the Branin run they pushed
    one of a close pair of queries (2e-4 apart) 0.09 away at round 43, which
    no later polish undid; from round 41's reconstruction, rounds 42-45 ended
    at matched RMSE 2e-5 to 1.3e-2 in 144-241 s each with those steps, and at
    3e-7 in 9-51 s without. If that leaves a relative residual above
    both ``accept`` and ``accept_growth`` times the previous round's (a new
    point in the wrong place), it tries the ``retries`` next-best candidates
    for the new point, each screened by placing it alone (``screen_placed``;
    else by ``screen_iters`` Levenberg-Marquardt steps on all points). The
    best screened one is polished fully only if it beats the first
    candidate's residual after the same screening, and kept if it then
    beats the first; if none beats it (or the winner ends within
    :data:`CONFIRM_TOL` of the first's points), the first is *confirmed* and its
    residual becomes the next round's reference (a new query next to an
    earlier one converges slowly; without this every round after it retried
    in vain). With
    ``search_on_failure`` it then also refines, exchanges and polishes as
    :func:`pursuit_attack` does (an exchange can repair an earlier point; on
    the Branin run's rounds 60 and 99, started from the truth at the round
    before, that took 95 and 560 s and did not lower the residual, hence off
    by default; several new points at once, after a gap in the records,
    always get it). Every round ends with Levenberg-Marquardt on all particles
    (at most ``lm_iters`` Jacobians; it stops sooner once it gains under
    0.1 % a step or reaches ``lm_floor``, so a large budget only costs where
    a start converges slowly). Point buffers
    are padded to multiples of ``pad`` rows (with a free row for the
    exchanges), so one compiled program per size serves many rounds.

    Args:
        records: messages in round order, each with ``round, m, particles,
            grads`` (:class:`pacd_jax.intercept.Record`); ``m`` must not shrink.
        key: PRNG key; round ``t`` scrambles its candidates with ``fold_in(key, t)``.
        accept: relative residual on all particles below which a round's
            grown-and-polished points are kept without further search. On
            the Branin run's messages (float64) the true points leave 4e-30
            to 9e-28, while misplaced ones can come close: at round 49 a
            new point put 0.2 from the truth (six queries within 0.005
            there make the candidates' scores fragile) was absorbed by
            the polish at 1.5e-27, under the earlier default of 1e-26,
            and kept.
        accept_growth: a round whose residual is at most this factor above
            the previous round's is kept too. Once close pairs of queries
            make the fit ill-conditioned, the truth's own residual sits at
            1e-15 (Branin run, rounds 17-60, drifting up slowly); a misplaced
            new point left 1e-10 to 1e-8 there. ``inf``: keep every round.
        lm_floor: the polish stops once the relative residual is below
            this (a tenth of the default ``accept``): from the truth at
            round 93 of the Branin run, rounds 94-99 took 33-65 s with it
            and 43-158 s without, equally accurate (matched RMSE 1e-2 to 5e-2
            either way, at the message's identifiability limit).
        place_iters: Levenberg-Marquardt steps that move only the new
            points (the fit keeps every point) before each polish of all
            points. A new query next to an earlier one is pinned down by
            second-order terms: polishing all points jointly then crawls
            (Branin run, round 55, from round 54's reconstruction plus the
            true new point 1e-3 off: 100 joint steps left 9.7e-24 in 958 s),
            while the new point alone came back to 1e-6 of the truth in 4
            steps and the joint polish after it reached 4.6e-28 in 15 s
            (the true new point itself: 4.7e-28). 0: off.
        max_step: trust region of every polish of all points: no point
            moves farther than this (unit box) in one Levenberg-Marquardt
            step. A guard: in a tight cluster of queries one point's atoms
            are nearly those of its neighbours, so the fit hardly minds
            where one of them goes (the Branin run's round-49 failure,
            first blamed on such a jump, came from the new point's
            candidate; see ``accept``). Near the solution the steps are far
            shorter (1e-4 and less). ``inf``: no bound.
        exact_scores: pick each new point (and the retries) by
            :func:`_exact_candidates`: the share of the exact residual
            (QR at ``ridge_lm``) a candidate explains outside the earlier
            points' span. ``False``: :func:`_best_candidate` (the grow
            ridge's residual and :meth:`_Functions.ortho_scores`), under
            which a query inside a tight cluster is invisible: on the Branin
            run, round 57 (from round 56's reconstruction), its top nine
            candidates all lay 0.67-0.88 away in the other cluster and the
            true query itself ranked ~7400th; by exact scores the truth
            ranks first and the next best are 0.0015 and 0.003 from it.
        repairs: earlier points revisited per round (:func:`_relocate`:
            drop one of the ``repairs`` points that explain least, put the
            best of ``repair_candidates`` candidates in its place, keep the
            best such move if the residual falls by ``swap_gain``) when the
            round ends above ``repair_bar``. Once a point sits in the wrong place a later
            round never moves it back (its neighbours' polish only
            compensates), and new points then join it there. 0 (default):
            off. Measured on the Branin run (float64, candidates then
            ranked by ``ortho_scores``): from round 60's
            saved reconstruction one move brought the misplaced query
            back (matched-RMSE ratio 0.11 to 0.011, 290 s); at round 57
            (``repairs=1``, 740 s) the best move lowered the residual
            from 9e-26 to 2e-27 but took a point of a tight cluster
            (near-duplicates explain little each, so they are dropped
            first) into the other cluster: ratio 0.014 to 0.11.
        repair_bar: the relative residual above which a round revisits its
            points. The true points leave 4e-30 to 2e-29 at every round of
            the Branin run (float64).
        screen_iters: Levenberg-Marquardt steps per retry candidate before
            the best is polished (Branin run, round 42, a new query 2e-4 of
            the box from an earlier one: 8 retries took 468 s polished fully
            each, 222 s screened, with the same outcome, ratio 8e-5 and 6e-5).
        screen_placed: screen the retries by placing each candidate alone
            (:func:`_screen_by_placing`, ``place_iters`` steps that move
            only the new point; needs ``place_iters > 0``) instead of
            ``screen_iters`` steps on all points. Measured on the Branin run
            from the same round-45 reconstruction (exact to 3e-10): round 46
            went from ratio 1.3e-3 (8 retries screened on all points, 304 s,
            none near the truth) to 1.5e-9 (222 s; the 19th candidate placed
            to the truth's residual), and rounds 47-52 then stayed at ratio
            1.2e-4 or less in 10-15 s each (were 2.7e-3 to 1.5e-2 in 39-286 s).
        retries: candidates screened for a new point whose round missed the
            bar (24 by default: on the Branin run's round 46 the right one
            ranked 19th by the exact scores).
        start: ``(m0, d)`` points (unit box) known before the first record,
            e.g. a saved reconstruction to resume from; the first record is
            then followed from them instead of attacked from scratch (a
            saved round's :attr:`FollowStep.carried` continues the follow
            exactly; its clipped ``result.X`` does not where points left the box).
        reference: with ``start``, the saved round's :attr:`FollowStep.reference`
            (the first record's bar is then as in an uninterrupted run; ``inf``:
            ``accept``).
        on_step: ``on_step(FollowStep)`` after each record (progress, saving).
    """
    if not isinstance(pad, int) or pad < 1:
        raise ValueError(f"pad must be a positive integer, got {pad!r}")
    if not (np.isfinite(accept) and accept >= 0.0):
        raise ValueError(f"accept must be a non-negative number, got {accept!r}")
    if not (np.isfinite(lm_floor) and lm_floor >= 0.0):
        raise ValueError(f"lm_floor must be a non-negative number, got {lm_floor!r}")
    if not accept_growth >= 1.0:
        raise ValueError(f"accept_growth must be >= 1, got {accept_growth!r}")
    if not isinstance(retries, int) or retries < 0 or not isinstance(lm_iters, int) or lm_iters < 1:
        raise ValueError(f"retries must be >= 0 and lm_iters >= 1 (integers), got {retries!r} and {lm_iters!r}")
    if not isinstance(place_iters, int) or place_iters < 0:
        raise ValueError(f"place_iters must be a non-negative integer, got {place_iters!r}")
    if not max_step > 0.0:
        raise ValueError(f"max_step must be positive, got {max_step!r}")
    if not isinstance(screen_iters, int) or screen_iters < 1:
        raise ValueError(f"screen_iters must be a positive integer, got {screen_iters!r}")
    if not isinstance(repairs, int) or repairs < 0 or not isinstance(repair_candidates, int) or repair_candidates < 1:
        raise ValueError(f"repairs must be >= 0 and repair_candidates >= 1 (integers), got {repairs!r} and {repair_candidates!r}")
    if not (np.isfinite(repair_bar) and repair_bar >= 0.0):
        raise ValueError(f"repair_bar must be a non-negative number, got {repair_bar!r}")
    fns = _Functions(model, config, jnp.asarray(model.network_coordinates()))
    d = model.config.dim
    if not (reference > 0.0) or (np.isfinite(reference) and start is None):
        raise ValueError(f"reference must be positive and comes with start (inf: none), got {reference!r}")
    z_prev, m_prev, out, loss_prev = None, 0, [], float(reference)
    if start is not None:
        z_prev = np.asarray(start, np.float64)
        if z_prev.ndim != 2 or z_prev.shape[1] != d or not z_prev.shape[0] or not np.all(np.isfinite(z_prev)):
            raise ValueError(f"start must be a finite (m, {d}) array with m >= 1, got shape {z_prev.shape}")
        m_prev = z_prev.shape[0]
    for rec in records:
        t0 = time.perf_counter()
        particles = jnp.asarray(rec.particles)
        dtype = particles.dtype
        if not (np.all(np.isfinite(np.asarray(rec.grads))) and np.all(np.isfinite(np.asarray(particles)))):
            raise ValueError(f"round {rec.round}: the intercepted message is not finite")
        m = int(rec.m)
        if m < max(m_prev, 1):
            raise ValueError(f"round {rec.round}: m must not shrink between records ({m_prev} -> {m})")
        M = pad * -(-(m + 1) // pad)
        msg = _Message(fns, particles, rec.grads, jax.random.fold_in(key, int(rec.round)))
        z = jnp.full((M, d), 0.5, dtype)
        if z_prev is not None:
            z = z.at[:m_prev].set(jnp.asarray(z_prev, dtype))
        active = (jnp.arange(M) < m_prev).astype(dtype)
        history = []
        report = lambda stage, value: history.append((stage, value))  # noqa: E731
        good = max(accept, accept_growth * loss_prev) if np.isfinite(loss_prev) else accept
        confirmed = False  # retries found no rival for the new point
        if z_prev is None:
            z, loss, kept = _search(msg, z, active, range(m), report)
            active = (jnp.arange(M) < m).astype(dtype)
        else:
            # the earlier points are (nearly) right: grow the new ones and polish all on every particle
            K = particles.shape[0]
            search, search_inv, _ = msg.subset(K if config.search_particles is None else config.search_particles)
            before = active
            z_grown, active = _grow(msg, search, search_inv, z, before, range(m_prev, m), move=False, exact=exact_scores)
            report("grow", float(search.loss(z_grown, active)))
            fresh = ((jnp.arange(M) >= m_prev) & (jnp.arange(M) < m)).astype(dtype)

            def placed(z_new):  # the new points alone first (see place_iters): (points, residual)
                return _levenberg_marquardt(msg.all, z_new, active, place_iters, lm_floor, movable=fresh) if place_iters else (z_new, None)

            def place(z_new):
                return placed(z_new)[0]

            z_grown, placed_loss = placed(z_grown)
            screen_by_placing = screen_placed and place_iters > 0
            trace = []
            z_best, loss = _levenberg_marquardt(msg.all, z_grown, active, lm_iters, lm_floor, trace, max_step=max_step)
            report("lm", loss)
            kept = 0
            if not loss <= good and m - m_prev == 1:
                # the new point may be in the wrong place: screen the next-best candidates for it with a
                # short polish each, then polish the most promising one fully
                if exact_scores:
                    ranked = _exact_candidates(search, msg.sobol, msg.offsets, z, before, retries + 1)
                else:
                    _, resid, J = search.fit_grow(z, before)
                    ranked = _top_candidates(search, msg.sobol, search_inv, msg.offsets, z, before, resid, J, retries + 1)
                if screen_by_placing:
                    screened = _screen_by_placing(placed, z_grown, m_prev, ranked[1:], good)
                else:
                    screened = []
                    for x in ranked[1:]:
                        z_try, loss_try = _levenberg_marquardt(msg.all, place(z_grown.at[m_prev].set(x)), active,
                                                               min(screen_iters, lm_iters), lm_floor, max_step=max_step)
                        screened.append((loss_try, len(screened), z_try))
                        if loss_try <= good:
                            break
                # the first candidate's residual after as many steps: a retry that does not beat it is not
                # polished further (near-duplicate queries: the first candidate was right, only slow to converge)
                if screen_by_placing:
                    first = placed_loss
                else:
                    first = trace[min(screen_iters, len(trace)) - 1] if trace else loss
                best = min(screened, key=lambda item: item[:2]) if screened else None
                confirmed = True  # unless a retry at a different point set beats it
                if best is not None and best[0] < first:
                    z_try, loss_try = _levenberg_marquardt(msg.all, best[2], active, lm_iters, lm_floor, max_step=max_step)
                    moved = float(jnp.max(jnp.abs(z_try - z_best) * active[:, None]))
                    if loss_try < loss:
                        # a rival unless it came back to the first candidate's points
                        confirmed = moved <= CONFIRM_TOL
                        z_best, loss = z_try, loss_try
                report("retry", loss)
            z = z_best
            if repairs and not loss <= repair_bar:
                z, loss, kept = _relocate(msg, z, active, loss, repairs, repair_candidates, place_iters, lm_iters, lm_floor,
                                          max_step, repair_bar)
                report("repair", loss)
            if (search_on_failure or m - m_prev > 1) and not loss <= good:  # the full search (refine, exchange, polish)
                z, loss, kept = _search(msg, z, active, (), report)
        if not history or history[-1][0] not in ("lm", "retry", "repair"):
            z, loss = _levenberg_marquardt(msg.all, z, active, lm_iters, lm_floor, max_step=max_step)
            report("lm", loss)
        active = (jnp.arange(M) < m).astype(dtype)
        # the next round's reference: this residual if kept or confirmed by the retries (a new query
        # next to an earlier one converges slowly; the rounds after it would retry in vain), else the
        # threshold it missed (which thus doubles per missed round: a misplaced point does not lower
        # the bar for the next rounds, while a genuine rise of the truth's own residual is caught up with)
        loss_ref = min(loss, good) if np.isfinite(loss_prev) and not confirmed else loss
        z_prev, m_prev, loss_prev = z[np.flatnonzero(np.asarray(active) > 0)], m, loss_ref
        step = FollowStep(int(rec.round), _result(msg, z, active, loss, history, kept), time.perf_counter() - t0, float(loss_ref), confirmed,
                          np.asarray(z_prev, np.float64))
        out.append(step)
        if on_step is not None:
            on_step(step)
    return out
