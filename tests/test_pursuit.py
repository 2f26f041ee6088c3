"""Pursuit attack: the message is a sum of per-point Jacobian atoms (eq. 6 by
the chain rule), checked against the production gradient; the fit, the implied
targets and recovery of a small known case."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pacd_jax import metrics, pursuit
from pacd_jax.gp import GPData, MetaGP, MetaGPConfig, gmll_grads


def _case(m, hidden=(8, 8), K=3, seed=0):
    model = MetaGP(MetaGPConfig(dim=2, hidden=hidden, features=2))
    particles = model.sample_hyperprior(jax.random.key(seed), K, jnp.float64)
    X = jax.random.uniform(jax.random.key(seed + 1), (m, 2), jnp.float64)
    y = jax.random.normal(jax.random.key(seed + 2), (m,), jnp.float64)
    y = (y - y.mean()) / y.std()
    # the message as a client sends it: a padded buffer, the production gradient
    size = m + 3
    data = GPData(jnp.zeros((size, 2)).at[:m].set(X), jnp.zeros((size,)).at[:m].set(y), jnp.arange(size) < m)
    return model, particles, X, y, gmll_grads(model, particles, data)


def test_message_is_exactly_a_combination_of_the_points_atoms():
    with jax.enable_x64(True):
        model, particles, X, y, grads = _case(7)
        coords = jnp.asarray(model.network_coordinates())
        J = pursuit.atoms(model, particles, X, coords)
        c, resid = pursuit.fit_coefficients(J, grads[:, coords], jnp.ones(7), ridge=1e-14)
        rel = float(jnp.sum(resid**2) / jnp.sum(grads[:, coords] ** 2))
        assert rel < 1e-18
        # the mean atoms' coefficients are alpha = K^-1 (y - m): they give back y
        y_back = pursuit.implied_targets(model, particles, X, c[..., 0])
        np.testing.assert_allclose(np.asarray(y_back), np.asarray(y), atol=1e-6)
        # and the same fit at wrong points leaves a residual: the check can fail
        X_wrong = X.at[0].set(jnp.array([0.9, 0.1]) if float(X[0, 0]) < 0.5 else jnp.array([0.1, 0.9]))
        _, resid_w = pursuit.fit_coefficients(pursuit.atoms(model, particles, X_wrong, coords), grads[:, coords], jnp.ones(7), 1e-14)
        assert float(jnp.sum(resid_w**2) / jnp.sum(grads[:, coords] ** 2)) > 1e-6


def test_network_coordinates_are_the_weights_of_both_networks():
    model = MetaGP(MetaGPConfig(dim=2, hidden=(8, 8), features=2))
    coords = model.network_coordinates()
    # every parameter except the noise and the per-feature lengthscales
    assert len(coords) == model.num_params - 1 - 2
    assert len(np.unique(coords)) == len(coords)


def test_inactive_slots_get_zero_coefficients():
    with jax.enable_x64(True):
        model, particles, X, y, grads = _case(5)
        coords = jnp.asarray(model.network_coordinates())
        J = pursuit.atoms(model, particles, X, coords)
        active = jnp.array([1.0, 1.0, 0.0, 1.0, 0.0])
        c, _ = pursuit.fit_coefficients(J, grads[:, coords], active, 1e-9)
        assert np.all(np.asarray(c)[:, [2, 4]] == 0.0)


def test_removal_costs_equal_refitting_without_each_point():
    """Oracle: refit the regularised least squares without point j by numpy's lstsq on the augmented system."""
    rng = np.random.default_rng(0)
    K, M, O, P, lam = 2, 5, 3, 40, 1e-3
    J = rng.normal(size=(K, M, O, P))
    t = rng.normal(size=(K, P))
    active = np.array([1.0, 1.0, 1.0, 1.0, 0.0])
    B_full = (J * active[None, :, None, None]).reshape(K, M * O, P)
    scale = np.einsum("kap,kap->k", B_full, B_full) / (active.sum() * O)

    def objective(a):  # the ridge scale stays the full set's, as in the identity
        B = (J * a[None, :, None, None]).reshape(K, M * O, P)
        total = 0.0
        for k in range(K):
            A = np.concatenate([B[k].T, np.sqrt(lam * scale[k]) * np.eye(M * O)])
            b = np.concatenate([t[k], np.zeros(M * O)])
            c = np.linalg.lstsq(A, b, rcond=None)[0]
            total += np.sum((A @ c - b) ** 2)
        return total

    with jax.enable_x64(True):
        costs = np.asarray(pursuit.removal_costs(jnp.asarray(J), jnp.asarray(t), jnp.asarray(active), lam))
    base = objective(active)
    expected = [objective(np.where(np.arange(M) == j, 0.0, active)) - base for j in range(4)]
    np.testing.assert_allclose(costs[:4], expected, rtol=1e-8)
    assert np.isinf(costs[4]) and np.all(costs[:4] > 0)


@pytest.mark.parametrize("m, search_particles", [(3, None), (6, 2)])
def test_recovers_a_small_known_case(m, search_particles):
    with jax.enable_x64(True):
        model, particles, X, y, grads = _case(m, seed=10 + m)
        # (6, 2): on two of the three particles the exchanges can stall on a wrong
        # set (they do without XLA's CI flags); widening to all three recovers it
        cfg = pursuit.PursuitConfig(candidates=1024, shortlist=64, swaps=12, exchange_steps=50,
                                    search_particles=search_particles)
        res = pursuit.pursuit_attack(model, particles, grads, m, jax.random.key(0), cfg)
        assert res.X.shape == (m, 2) and res.y.shape == (m,)
        assert metrics.matched_rmse(res.X, np.asarray(X)) < 1e-4
        assert res.loss < 1e-8


@pytest.mark.parametrize("tol", [0.0, 1.0])
def test_stalled_exchanges_widen_to_all_particles(tol):
    """On one particle, after 20 refining steps (residual ~1e-8), no exchange
    gains: with ``tol = 0`` the search goes on with both particles before
    polishing (``widen``); with a residual already below ``tol`` there are no
    exchanges at all."""
    with jax.enable_x64(True):
        model, particles, X, y, grads = _case(2, K=2, seed=21)
        cfg = pursuit.PursuitConfig(candidates=256, shortlist=32, grow_steps=5, final_steps=20, swaps=3, exchange_steps=10,
                                    search_particles=1, tol=tol)
        res = pursuit.pursuit_attack(model, particles, grads, 2, jax.random.key(0), cfg)
    stages = [name for name, _ in res.history]
    assert res.swaps == 0 and metrics.matched_rmse(res.X, np.asarray(X)) < 1e-4
    assert stages == ["grow", "refine", *(["widen to 2"] if tol == 0.0 else []), "polish"]
    assert tol == 0.0 or res.history[1][1] < tol


def test_config_validates():
    with pytest.raises(ValueError, match="candidates"):
        pursuit.PursuitConfig(candidates=0)
    with pytest.raises(ValueError, match="swap_gain"):
        pursuit.PursuitConfig(swap_gain=1.5)
    with pytest.raises(ValueError, match="radii"):
        pursuit.PursuitConfig(radii=(0.7,))
    with pytest.raises(ValueError, match="ridge_final"):
        pursuit.PursuitConfig(ridge_final=0.0)
    with pytest.raises(ValueError, match="search_particles"):
        pursuit.PursuitConfig(search_particles=0)
    with pytest.raises(ValueError, match="tol"):
        pursuit.PursuitConfig(tol=-1.0)
    with pytest.raises(ValueError, match="widen"):
        pursuit.PursuitConfig(widen=1)
