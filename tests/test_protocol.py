"""Client and coordinator step functions: what each side computes, and that together they are PACOH."""

import jax
import jax.numpy as jnp
import numpy as np

from pacd_jax import client, coordinator, gp
from pacd_jax.gp import MetaGP, MetaGPConfig
from pacd_jax.svgd import svgd


def _buffers(n, m, capacity, d, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, capacity, d))
    y = 10.0 + 3.0 * np.sin(4 * X.sum(-1)) + rng.normal(size=(n, capacity))
    return client.ClientBuffer(jnp.asarray(X), jnp.asarray(y), jnp.full((n,), m, jnp.int32))


def test_local_gradients_use_the_clients_own_standardisation():
    with jax.enable_x64(True):
        model = MetaGP(MetaGPConfig(dim=2))
        particles = model.sample_hyperprior(jax.random.key(0), 3)
        bufs = _buffers(2, 6, 9, 2)
        b = jax.tree_util.tree_map(lambda a: a[1], bufs)
        y = np.asarray(b.y[:6])
        data = gp.GPData(b.X, jnp.asarray(np.r_[(y - y.mean()) / y.std(), np.zeros(3)]), gp.make_mask(6, 9))
        expected = jax.jit(jax.vmap(model.gmll_grad, (0, None)))(particles, data)
        got = jax.jit(client.local_gradients, static_argnums=0)(model, particles, b)
        np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=0, atol=1e-10 * float(jnp.abs(expected).max()))


def test_aggregated_gradient_equals_centralised_gradient():
    """Eq. 4 vs eq. 7: summing per-client gradients is the gradient of the summed GMLL."""
    with jax.enable_x64(True):
        model = MetaGP(MetaGPConfig(dim=1))
        particles = model.sample_hyperprior(jax.random.key(1), 4)
        bufs = _buffers(5, 7, 10, 1, seed=2)
        grads = jax.jit(jax.vmap(client.local_gradients, (None, None, 0)), static_argnums=0)(model, particles, bufs)
        G = coordinator.aggregate(grads)

        def centralised(phi):
            return sum(model.gmll(phi, client.model_data(jax.tree_util.tree_map(lambda a: a[i], bufs))) for i in range(5))

        np.testing.assert_allclose(np.asarray(G), np.asarray(jax.jit(jax.vmap(jax.grad(centralised)))(particles)), rtol=1e-9, atol=1e-10)


def test_coordinator_update_is_svgd_on_the_eq7_score():
    with jax.enable_x64(True):
        model = MetaGP(MetaGPConfig(dim=1, hidden=(4,)))
        particles = model.sample_hyperprior(jax.random.key(3), 3)
        grads = jax.random.normal(jax.random.key(4), (5, 3, model.num_params), jnp.float64)
        obj = coordinator.MetaObjective(num_clients=5, prior_factor=0.3)
        sv = svgd(learning_rate=0.05)
        state = sv.init(particles)
        beta = jnp.asarray(7.0)
        new = coordinator.update(model, obj, sv, state, grads, beta)
        mu, sd = model.hyperprior_mean, model.hyperprior_std
        score = 0.3 * (-(np.asarray(particles) - mu) / sd**2) + 5.0 / (5 * 7.0 + 5.0) * np.asarray(grads).sum(0)
        np.testing.assert_allclose(np.asarray(new.particles), np.asarray(sv.step(state, jnp.asarray(score)).particles), rtol=1e-12)
        # and the particles moved in the direction of the score where the score is large
        assert np.all(np.isfinite(np.asarray(new.particles)))


def test_append_writes_rows_in_place():
    buf = client.empty_buffer(4, 2)
    buf = client.append(buf, jnp.asarray([[0.1, 0.2], [0.3, 0.4]]), jnp.asarray([1.0, 2.0]))
    buf = jax.jit(client.append)(buf, jnp.asarray([0.5, 0.6]), jnp.asarray(3.0))
    assert int(buf.count) == 3
    np.testing.assert_allclose(np.asarray(buf.X[:3]), [[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(buf.y), [1.0, 2.0, 3.0, 0.0])
    assert np.asarray(buf.mask).tolist() == [True, True, True, False]
    np.testing.assert_allclose(np.asarray(client.incumbent(buf)), [0.1, 0.2], rtol=1e-6)
