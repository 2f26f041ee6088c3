"""The hand-written GMLL gradient (the client's message, eq. 6) and its linear algebra against independent oracles."""

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pacd_jax import gmll_grad, gp, linalg
from pacd_jax.gp import GPData, MetaGP, MetaGPConfig


def _data(key, m, capacity, d, dtype):
    kx, ky = jax.random.split(key)
    X = jax.random.uniform(kx, (capacity, d), dtype)
    y = jnp.sin(5.0 * X.sum(-1)) + 0.1 * jax.random.normal(ky, (capacity,), dtype)
    y = (y - y[:m].mean()) / y[:m].std()
    # junk in the padding must not matter
    return GPData(X.at[m:].set(7.0), y.at[m:].set(-3.0), gp.make_mask(m, capacity))


def _reference(model, particles, data):
    """Reverse-mode autodiff of the GMLL (gp.MetaGP.gmll_grad), one particle at a time.

    Jitted as a whole: run op by op, its hundreds of primitives were each
    compiled on first use, seconds per test case.
    """
    one = jax.jit(model.gmll_grad)
    return jnp.stack([one(particles[k], data) for k in range(particles.shape[0])])


@pytest.mark.parametrize(
    "config, m, capacity",
    [
        (dict(dim=1), 20, 20),  # the PACOH anchor network, unpadded
        (dict(dim=2), 9, 16),  # padded
        (dict(dim=6, features=3), 50, 70),  # rows > linalg.DEFAULT_BASE: the recursive inverse
        (dict(dim=3, hidden=(8,), learn_lengthscale=False), 11, 12),  # one hidden layer, fixed lengthscale
        (dict(dim=2, hidden=(8, 8, 8), kernel_variance=1.0), 10, 10),  # three hidden layers
        (dict(dim=20, hidden=(8, 8)), 12, 15),  # d above the row-sum first layer: einsum path
        (dict(dim=3, input_kernel=True), 9, 13),  # times an ARD SE kernel on the inputs
        (dict(dim=2, input_kernel=True, learn_lengthscale=False), 8, 8),
        (dict(dim=3, kernel="matern52"), 10, 14),  # Matérn-5/2 on the features
        (dict(dim=2, kernel="matern52", input_kernel=True), 9, 9),
        (dict(dim=2, learn_outputscale=True), 9, 13),  # learned output scale, padded
        (dict(dim=3, kernel="matern52", learn_outputscale=True, input_kernel=True), 10, 10),
    ],
)
def test_matches_autodiff_in_float64(config, m, capacity):
    with jax.enable_x64(True):
        model = MetaGP(MetaGPConfig(**config))
        particles = model.sample_hyperprior(jax.random.key(3), 3)
        data = _data(jax.random.key(4), m, capacity, model.config.dim, jnp.float64)
        fast = jax.jit(gmll_grad.gmll_grads, static_argnums=(0, 3))(model, particles, data, gp.DEFAULT_JITTER)
        ref = _reference(model, particles, data)
        assert fast.shape == (3, model.num_params) and fast.dtype == jnp.float64
        scale = float(jnp.abs(ref).max())
        np.testing.assert_allclose(np.asarray(fast), np.asarray(ref), rtol=0, atol=1e-10 * scale)


def test_matches_finite_differences():
    with jax.enable_x64(True):
        model = MetaGP(MetaGPConfig(dim=2, hidden=(6, 6)))
        particles = model.sample_hyperprior(jax.random.key(5), 2)
        data = _data(jax.random.key(6), 8, 11, 2, jnp.float64)
        fast = np.asarray(gmll_grad.gmll_grads(model, particles, data, gp.DEFAULT_JITTER))
        rng = np.random.default_rng(0)
        for k in range(2):
            for _ in range(3):
                v = rng.normal(size=model.num_params)
                eps = 1e-5
                f = lambda t: float(model.gmll(particles[k] + t * jnp.asarray(v), data))
                fd = (f(eps) - f(-eps)) / (2 * eps)
                np.testing.assert_allclose(fast[k] @ v, fd, rtol=1e-6, atol=1e-6)


def test_float32_as_accurate_as_autodiff():
    """Against the float64 answer, the float32 fast path errs no more than float32 autodiff (within 3x)."""
    model = MetaGP(MetaGPConfig(dim=6))
    particles = model.sample_hyperprior(jax.random.key(7), 4)
    data = _data(jax.random.key(8), 90, 110, 6, jnp.float32)
    with jax.enable_x64(True):
        data64 = jax.tree_util.tree_map(lambda a: a.astype(jnp.float64) if a.dtype == jnp.float32 else a, data)
        truth = np.asarray(_reference(model, particles.astype(jnp.float64), data64))
    fast = np.asarray(jax.jit(gmll_grad.gmll_grads, static_argnums=(0, 3))(model, particles, data, gp.DEFAULT_JITTER), np.float64)
    auto = np.asarray(jax.jit(lambda p, d: _reference(model, p, d))(particles, data), np.float64)
    rel = lambda g: np.linalg.norm(g - truth, axis=-1) / np.linalg.norm(truth, axis=-1)
    assert rel(fast).max() < max(3 * rel(auto).max(), 1e-5), (rel(fast), rel(auto))


def test_padding_leaves_the_gradient_unchanged():
    with jax.enable_x64(True):
        model = MetaGP(MetaGPConfig(dim=2))
        particles = model.sample_hyperprior(jax.random.key(9), 2)
        padded = _data(jax.random.key(10), 40, 75, 2, jnp.float64)
        unpadded = GPData(padded.X[:40], padded.y[:40], gp.make_mask(40, 40))
        a = gmll_grad.gmll_grads(model, particles, padded, gp.DEFAULT_JITTER)
        b = gmll_grad.gmll_grads(model, particles, unpadded, gp.DEFAULT_JITTER)
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=1e-11 * float(jnp.abs(b).max()))


def test_ravel_inverts_unravel():
    model = MetaGP(MetaGPConfig(dim=3))
    phi = model.sample_hyperprior(jax.random.key(0), 5)
    np.testing.assert_array_equal(np.asarray(model.ravel(model.unravel(phi))), np.asarray(phi))
    np.testing.assert_array_equal(np.asarray(model.ravel(model.unravel(phi[0]))), np.asarray(phi[0]))


@pytest.mark.parametrize("n, base", [(5, 32), (33, 32), (70, 32), (110, 16), (220, 32)])
def test_spd_inverse_matches_numpy(n, base):
    with jax.enable_x64(True):
        rng = np.random.default_rng(n)
        a = rng.normal(size=(3, n, n))
        spd = a @ a.transpose(0, 2, 1) / n + 1e-2 * np.eye(n)
        inv = np.asarray(jax.jit(linalg.spd_inverse, static_argnums=1)(jnp.asarray(spd), base))
        np.testing.assert_allclose(inv, np.linalg.inv(spd), rtol=0, atol=1e-9 * np.abs(np.linalg.inv(spd)).max())
        np.testing.assert_allclose(inv, inv.transpose(0, 2, 1), atol=1e-9 * np.abs(inv).max())


def test_spd_inverse_of_block_diagonal_keeps_exact_zeros():
    """A masked Gram matrix (valid block, identity padding) inverts to the same block structure, exactly."""
    rng = np.random.default_rng(1)
    a = rng.normal(size=(50, 50)).astype(np.float32)
    valid = a @ a.T / 50 + 0.1 * np.eye(50, dtype=np.float32)
    gram = np.eye(90, dtype=np.float32)
    gram[:50, :50] = valid
    inv = np.asarray(linalg.spd_inverse(jnp.asarray(gram)))
    assert np.all(inv[:50, 50:] == 0) and np.all(inv[50:, :50] == 0)
    np.testing.assert_array_equal(inv[50:, 50:], np.eye(40, dtype=np.float32))


@pytest.mark.parametrize("n, base", [(5, 32), (33, 32), (70, 16), (110, 32)])
def test_triangular_gram_equals_the_dense_product(n, base):
    rng = np.random.default_rng(n + 7)
    t = np.tril(rng.normal(size=(2, n, n)))
    with jax.enable_x64(True):
        out = np.asarray(linalg.triangular_gram(jnp.asarray(t), base))
    np.testing.assert_allclose(out, t.transpose(0, 2, 1) @ t, rtol=1e-12, atol=1e-12 * n)


@pytest.mark.parametrize("n, base", [(6, 32), (70, 16)])
def test_spd_inverse_gradient_matches_autodiff_of_lapack_inverse_and_finite_differences(n, base):
    """The closed-form reverse rule of spd_inverse against jax.grad through jnp.linalg.inv, and central differences."""
    rng = np.random.default_rng(n)
    theta0 = rng.normal(size=(n, n))
    weights = rng.normal(size=(n, n))

    def loss(theta, inverse):
        spd = theta @ theta.T / n + 0.5 * jnp.eye(n, dtype=theta.dtype)
        return jnp.sum(weights * inverse(spd)) + jnp.sum(inverse(spd) @ spd[:, :1])

    with jax.enable_x64(True):
        theta = jnp.asarray(theta0)
        ours = np.asarray(jax.grad(loss)(theta, lambda a: linalg.spd_inverse(a, base)))
        ref = np.asarray(jax.grad(loss)(theta, jnp.linalg.inv))
        np.testing.assert_allclose(ours, ref, rtol=1e-9, atol=1e-10 * np.abs(ref).max())
        f = jax.jit(lambda th: loss(th, jnp.linalg.inv))
        eps = 1e-6
        for i, j in [(0, 0), (n - 1, 1), (n // 2, n - 1)]:
            e = np.zeros((n, n))
            e[i, j] = eps
            fd = (float(f(theta + e)) - float(f(theta - e))) / (2 * eps)
            assert abs(ours[i, j] - fd) <= 1e-6 * max(1.0, abs(fd))


@pytest.mark.parametrize("n, base", [(5, 32), (70, 32), (110, 16)])
def test_cholesky_inverse_is_the_inverse_of_the_lapack_factor(n, base):
    with jax.enable_x64(True):
        rng = np.random.default_rng(n + 1)
        a = rng.normal(size=(2, n, n))
        spd = a @ a.transpose(0, 2, 1) / n + 1e-2 * np.eye(n)
        l_inv = np.asarray(jax.jit(linalg.cholesky_inverse, static_argnums=1)(jnp.asarray(spd), base))
        ref = np.linalg.inv(np.linalg.cholesky(spd))
        np.testing.assert_allclose(l_inv, ref, rtol=0, atol=1e-9 * np.abs(ref).max())
        assert np.all(np.triu(l_inv, 1) == 0)


def test_float32_gradient_stays_finite_on_an_ill_conditioned_gram_matrix():
    """Regression: a Branin run (seed 0, round 33) where the explicit-inverse Schur complement
    went indefinite in float32 (Gram condition number 1.6e4) and every particle became NaN.
    The Cholesky-based blocks keep it finite and accurate against a float64 reference."""
    from pacd_jax import client

    case = np.load(Path(__file__).parent / "data" / "gram_float32_case.npz")
    model = MetaGP(MetaGPConfig(dim=2))
    buf = client.ClientBuffer(jnp.asarray(case["X"]), jnp.asarray(case["y"]), jnp.asarray(int(case["m"]), jnp.int32))
    phi = jnp.asarray(case["phi"])[None]
    got = np.asarray(jax.jit(lambda p, b: client.local_gradients(model, p, b))(phi, buf))
    assert np.all(np.isfinite(got))
    with jax.enable_x64(True):
        buf64 = jax.tree_util.tree_map(lambda a: jnp.asarray(np.asarray(a), a.dtype if a.dtype == jnp.int32 else jnp.float64), buf)
        ref = np.asarray(model.gmll_grad(jnp.asarray(case["phi"], jnp.float64), client.model_data(buf64)))
    assert np.linalg.norm(got[0] - ref) <= 2e-2 * np.linalg.norm(ref)
