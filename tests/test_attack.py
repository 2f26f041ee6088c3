"""DLG attack (paper eq. 11): its GMLL against the production gradient, its
loss gradient against finite differences, recovery on a tiny known case, and
restart selection that never picks a diverged restart."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pacd_jax import attack
from pacd_jax.gp import GPData, MetaGP, MetaGPConfig, gmll_grads


def _model(dim=2, hidden=(4,)):
    return MetaGP(MetaGPConfig(dim=dim, hidden=hidden, features=2))


def test_attack_gmll_gradient_equals_production_gradient():
    with jax.enable_x64(True):
        model = _model()
        key = jax.random.key(1)
        particles = model.sample_hyperprior(key, 3, jnp.float64)
        X = jax.random.uniform(jax.random.key(2), (7, 2), jnp.float64)
        y = jax.random.normal(jax.random.key(3), (7,), jnp.float64)
        ours = jax.jit(attack.dummy_gradients_autodiff, static_argnums=0)(model, particles, X, y)
        # the production gradient on a padded buffer (10 rows, 7 valid)
        Xp = jnp.zeros((10, 2)).at[:7].set(X)
        yp = jnp.zeros((10,)).at[:7].set(y)
        ref = jax.jit(gmll_grads, static_argnums=0)(model, particles, GPData(Xp, yp, jnp.arange(10) < 7))
        np.testing.assert_allclose(np.asarray(ours), np.asarray(ref), rtol=1e-9, atol=1e-9)
        fast = jax.jit(attack.dummy_gradients, static_argnums=0)(model, particles, X, y)
        np.testing.assert_allclose(np.asarray(fast), np.asarray(ref), rtol=1e-9, atol=1e-9)
        # and the value equals the production GMLL
        value = attack.attack_gmll(model, particles[0], X, y)
        ref_value = model.gmll(particles[0], GPData(Xp, yp, jnp.arange(10) < 7))
        np.testing.assert_allclose(float(value), float(ref_value), rtol=1e-12)


def test_dlg_loss_gradient_through_the_hand_written_gradient_equals_second_order_autodiff():
    """The attack differentiates the clients' hand-written gradient; second-order
    autodiff through the Cholesky (the obvious way) must give the same d loss / d(X, y)."""
    with jax.enable_x64(True):
        model = _model(hidden=(6, 6))
        particles = model.sample_hyperprior(jax.random.key(4), 4, jnp.float64)
        X_true = jax.random.uniform(jax.random.key(5), (9, 2), jnp.float64)
        y_true = jax.random.normal(jax.random.key(6), (9,), jnp.float64)
        A = jax.jit(attack.dummy_gradients_autodiff, static_argnums=0)(model, particles, X_true, y_true)
        X = jax.random.uniform(jax.random.key(7), (9, 2), jnp.float64)
        y = jax.random.normal(jax.random.key(8), (9,), jnp.float64)

        def loss(fn, X, y):
            return jnp.sum((fn(model, particles, X, y) - A) ** 2)

        # jitted: op by op, second-order autodiff compiles each of its primitives on first use
        fast = jax.jit(jax.grad(lambda X, y: loss(attack.dummy_gradients, X, y), argnums=(0, 1)))(X, y)
        ref = jax.jit(jax.grad(lambda X, y: loss(attack.dummy_gradients_autodiff, X, y), argnums=(0, 1)))(X, y)
        for a, b in zip(fast, ref):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-8, atol=1e-10 * float(jnp.max(jnp.abs(b))))


@pytest.mark.parametrize("cosine", [False, True])
def test_dlg_loss_gradient_matches_finite_differences(cosine):
    with jax.enable_x64(True):
        model = _model()
        particles = model.sample_hyperprior(jax.random.key(0), 2, jnp.float64)
        X_true = jax.random.uniform(jax.random.key(1), (4, 2), jnp.float64)
        y_true = jax.random.normal(jax.random.key(2), (4,), jnp.float64)
        A = attack.dummy_gradients(model, particles, X_true, y_true)
        X = jax.random.uniform(jax.random.key(3), (4, 2), jnp.float64)
        y = jax.random.normal(jax.random.key(4), (4,), jnp.float64)
        f = jax.jit(lambda X, y: attack.dlg_loss(model, X, y, particles, A, cosine=cosine))
        gX, gy = jax.jit(jax.grad(f, argnums=(0, 1)))(X, y)
        eps = 1e-6
        for idx in [(0, 0), (2, 1), (3, 0)]:
            e = jnp.zeros_like(X).at[idx].set(eps)
            fd = (f(X + e, y) - f(X - e, y)) / (2 * eps)
            np.testing.assert_allclose(float(gX[idx]), float(fd), rtol=1e-5, atol=1e-7)
        for j in [0, 3]:
            e = jnp.zeros_like(y).at[j].set(eps)
            fd = (f(X, y + e) - f(X, y - e)) / (2 * eps)
            np.testing.assert_allclose(float(gy[j]), float(fd), rtol=1e-5, atol=1e-7)


def test_recovers_a_tiny_known_case():
    """One client, 3 points in 2-D, one particle, float64: the attack finds the points."""
    with jax.enable_x64(True):
        model = _model()
        particles = model.sample_hyperprior(jax.random.key(5), 1, jnp.float64)
        X_true = jnp.array([[0.2, 0.7], [0.8, 0.3], [0.5, 0.5]], jnp.float64)
        y_true = jnp.array([1.0, -1.2, 0.2], jnp.float64)
        A = attack.dummy_gradients(model, particles, X_true, y_true)
        cfg = attack.AttackConfig(restarts=4, steps=300, init="uniform")
        res = attack.run_attack(model, particles, A, 3, jax.random.key(0), cfg)
        from scipy.optimize import linear_sum_assignment

        cost = np.linalg.norm(res.X[:, None] - np.asarray(X_true)[None], axis=-1)
        r, c = linear_sum_assignment(cost)
        assert res.loss < 1e-10
        assert np.max(cost[r, c]) < 1e-4
        np.testing.assert_allclose(res.y[r], np.asarray(y_true)[c], atol=1e-4)


def test_select_best_skips_non_finite_restarts():
    assert attack.select_best(np.array([np.nan, 3.0, -np.inf, 1.0, np.inf])) == 3
    assert attack.select_best(np.array([2.0, np.nan])) == 0
    with pytest.raises(RuntimeError, match="diverged"):
        attack.select_best(np.array([np.nan, np.inf]))


def test_attack_config_validates():
    with pytest.raises(ValueError, match="restarts"):
        attack.AttackConfig(restarts=0)
    with pytest.raises(ValueError, match="init"):
        attack.AttackConfig(init="sobol")


def test_run_attack_never_picks_a_diverged_restart(monkeypatch):
    """The restart with the lowest loss is NaN/inf here; the finite best one is returned."""
    X = jnp.stack([jnp.full((2, 2), v) for v in (0.1, 0.2, 0.3, 0.4)])
    y = jnp.zeros((4, 2))
    losses = jnp.array([jnp.nan, 5.0, -jnp.inf, 2.0])
    monkeypatch.setattr(attack, "_solve_jit", lambda *a: (X, y, losses))
    model = _model()
    res = attack.run_attack(model, jnp.zeros((1, model.num_params)), jnp.zeros((1, model.num_params)), 2, jax.random.key(0))
    assert res.best == 3 and res.loss == 2.0
    np.testing.assert_allclose(res.X, 0.4)

