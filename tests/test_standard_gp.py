"""The Independent baseline's GP against scikit-learn kernels, scipy densities and scipy's L-BFGS-B."""

import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize
import scipy.stats
from sklearn.gaussian_process.kernels import RBF, Matern

from pacd_jax import gp, standard_gp
from pacd_jax.standard_gp import GPHyper, StandardGPConfig


def _data(m, capacity, d, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(capacity, d))
    y = np.sin(4 * X.sum(-1)) + 0.05 * rng.normal(size=capacity)
    X[m:] = 3.0
    y[m:] = 11.0
    return X, y


def _hyper(d):
    return GPHyper(
        mean=jnp.asarray(0.2),
        log_lengthscale=jnp.log(jnp.linspace(0.2, 0.6, d)),
        log_outputscale=jnp.log(jnp.asarray(1.7)),
        log_noise=jnp.log(jnp.asarray(0.03)),
    )


@pytest.mark.parametrize("kernel", ["matern52", "rbf"])
def test_kernel_matches_sklearn(kernel):
    with jax.enable_x64(True):
        d = 3
        cfg = StandardGPConfig(dim=d, kernel=kernel)
        h = _hyper(d)
        X, _ = _data(10, 10, d)
        ls = np.exp(np.asarray(h.log_lengthscale))
        ref_k = Matern(length_scale=ls, nu=2.5) if kernel == "matern52" else RBF(length_scale=ls)
        ref = 1.7 * ref_k(X)
        np.testing.assert_allclose(np.asarray(standard_gp.kernel_matrix(cfg, h, jnp.asarray(X), jnp.asarray(X))), ref, rtol=1e-12)
        # finite gradient at zero distance (Matern's sqrt)
        g = jax.grad(lambda x: standard_gp.kernel_matrix(cfg, h, x[None], x[None])[0, 0])(jnp.asarray(X[0]))
        assert np.all(np.isfinite(np.asarray(g)))


def test_log_marginal_matches_scipy_padded():
    with jax.enable_x64(True):
        d, m = 2, 8
        cfg = StandardGPConfig(dim=d)
        h = _hyper(d)
        X, y = _data(m, 14, d)
        data = gp.GPData(jnp.asarray(X), jnp.asarray(y), gp.make_mask(m, 14))
        K = 1.7 * Matern(length_scale=np.exp(np.asarray(h.log_lengthscale)), nu=2.5)(X[:m])
        K += (float(h.noise) + gp.DEFAULT_JITTER) * np.eye(m)
        oracle = scipy.stats.multivariate_normal.logpdf(y[:m], 0.2 * np.ones(m), K)
        np.testing.assert_allclose(float(standard_gp.log_marginal(cfg, h, data)), oracle, rtol=1e-10)


def test_log_prior_matches_scipy_lognormal():
    with jax.enable_x64(True):
        d = 4
        cfg = StandardGPConfig(dim=d)
        h = _hyper(d)
        loc, scale = cfg.lengthscale_prior
        assert np.isclose(loc, np.sqrt(2) + 0.5 * np.log(d)) and np.isclose(scale, np.sqrt(3))
        ls = np.exp(np.asarray(h.log_lengthscale))
        ref = scipy.stats.lognorm.logpdf(ls, s=scale, scale=np.exp(loc)).sum()
        ref += scipy.stats.lognorm.logpdf(1.7, s=1.0, scale=1.0)
        ref += scipy.stats.lognorm.logpdf(float(h.noise), s=1.0, scale=np.exp(-4.0))
        np.testing.assert_allclose(float(standard_gp.log_prior(cfg, h)), ref, rtol=1e-12)


def test_fit_reaches_scipy_lbfgsb_optimum():
    with jax.enable_x64(True):
        d, m = 2, 12
        cfg = StandardGPConfig(dim=d, fit_steps=100)
        X, y = _data(m, 16, d, seed=3)
        ys, _, _ = gp.standardise(jnp.asarray(y), gp.make_mask(m, 16))
        data = gp.GPData(jnp.asarray(X), ys, gp.make_mask(m, 16))
        fitted = jax.jit(lambda dt: standard_gp.fit(cfg, dt))(data)
        ours = float(standard_gp.neg_log_posterior(cfg, fitted, data))

        # independent optimiser: scipy L-BFGS-B from several starts on the same objective
        h0 = standard_gp.default_hyper(cfg)
        flat0, unravel = jax.flatten_util.ravel_pytree(h0)
        obj = jax.jit(lambda v: standard_gp.neg_log_posterior(cfg, unravel(v), data))
        grad = jax.jit(jax.grad(lambda v: standard_gp.neg_log_posterior(cfg, unravel(v), data)))
        rng = np.random.default_rng(0)
        best = np.inf
        for s in range(6):
            start = np.asarray(flat0) + (0 if s == 0 else rng.normal(scale=0.7, size=flat0.shape))
            res = scipy.optimize.minimize(lambda v: float(obj(v)), start, jac=lambda v: np.asarray(grad(v)), method="L-BFGS-B")
            best = min(best, res.fun)
        assert ours <= best + 1e-4 * abs(best) + 1e-6
        assert ours < float(standard_gp.neg_log_posterior(cfg, h0, data))


def test_fit_is_finite_on_constant_and_duplicated_data():
    cfg = StandardGPConfig(dim=2)
    X = jnp.tile(jnp.asarray([[0.5, 0.5]]), (6, 1))
    data = gp.GPData(X, jnp.zeros(6), gp.make_mask(6, 6))
    h = jax.jit(lambda dt: standard_gp.fit(cfg, dt))(data)
    assert all(np.all(np.isfinite(np.asarray(leaf))) for leaf in jax.tree_util.tree_leaves(h))


def test_posterior_matches_closed_form():
    with jax.enable_x64(True):
        d, m = 2, 9
        cfg = StandardGPConfig(dim=d)
        h = _hyper(d)
        X, y = _data(m, 12, d, seed=5)
        data = gp.GPData(jnp.asarray(X), jnp.asarray(y), gp.make_mask(m, 12))
        Xt = np.random.default_rng(1).uniform(size=(6, d))
        mu, var = standard_gp.predict(cfg, standard_gp.posterior(cfg, h, data), jnp.asarray(Xt))
        k = Matern(length_scale=np.exp(np.asarray(h.log_lengthscale)), nu=2.5)
        K = 1.7 * k(X[:m]) + (float(h.noise) + gp.DEFAULT_JITTER) * np.eye(m)
        Ks = 1.7 * k(X[:m], Xt)
        mu_ref = 0.2 + Ks.T @ np.linalg.solve(K, y[:m] - 0.2)
        var_ref = 1.7 - np.sum(Ks * np.linalg.solve(K, Ks), axis=0)
        np.testing.assert_allclose(np.asarray(mu), mu_ref, rtol=1e-9)
        np.testing.assert_allclose(np.asarray(var), var_ref, rtol=1e-7, atol=1e-12)


def test_config_validation():
    with pytest.raises(ValueError, match="kernel"):
        StandardGPConfig(dim=2, kernel="periodic")
    with pytest.raises(ValueError, match="fit_steps"):
        StandardGPConfig(dim=2, fit_steps=0)
    for bad in (-1e-6, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="fit_ftol"):
            StandardGPConfig(dim=2, fit_ftol=bad)


@pytest.mark.parametrize("kernel", ["matern52", "rbf"])
def test_log_marginal_gradient_matches_autodiff_and_finite_differences(kernel):
    """The closed-form gradient against autodiff of the plain formula (kernel matrix + GP core)."""
    with jax.enable_x64(True):
        d, m = 3, 9
        cfg = StandardGPConfig(dim=d, kernel=kernel)
        h = _hyper(d)
        X, y = _data(m, 13, d, seed=2)
        X[1] = X[0]  # a duplicated point: r = 0 off the diagonal
        data = gp.GPData(jnp.asarray(X), jnp.asarray(y), gp.make_mask(m, 13))

        def plain(hyper):
            mean = jnp.full(data.y.shape, hyper.mean)
            kxx = standard_gp.kernel_matrix(cfg, hyper, data.X, data.X)
            return gp.gaussian_log_marginal(mean, kxx, data, hyper.noise + gp.DEFAULT_JITTER)

        np.testing.assert_allclose(float(standard_gp.log_marginal(cfg, h, data)), float(plain(h)), rtol=1e-12)
        closed = jax.grad(lambda hh: standard_gp.log_marginal(cfg, hh, data))(h)
        auto = jax.grad(plain)(h)
        for a, b in zip(jax.tree_util.tree_leaves(closed), jax.tree_util.tree_leaves(auto)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-9, atol=1e-11)
        flat, unravel = jax.flatten_util.ravel_pytree(h)
        f = lambda v: float(standard_gp.log_marginal(cfg, unravel(v), data))
        g = np.asarray(jax.flatten_util.ravel_pytree(closed)[0])
        for j in range(flat.size):
            e = np.zeros(flat.size)
            e[j] = 1e-6
            np.testing.assert_allclose((f(flat + e) - f(flat - e)) / 2e-6, g[j], rtol=1e-6, atol=1e-6)


def test_line_search_state_holds_the_value_at_the_new_iterate():
    """_lbfgs rejects a step by the value the zoom line search stored; it must be f(new iterate)."""
    import optax

    fun = lambda x: jnp.sum((x - 1.0) ** 2) + jnp.sum(x**4)
    opt = optax.lbfgs(linesearch=optax.scale_by_zoom_linesearch(max_linesearch_steps=20))
    x, state = jnp.asarray([3.0, -2.0]), opt.init(jnp.asarray([3.0, -2.0]))
    value_and_grad = optax.value_and_grad_from_state(fun)
    for _ in range(4):
        value, grad = value_and_grad(x, state=state)
        updates, state = opt.update(grad, state, x, value=value, grad=grad, value_fn=fun)
        x = optax.apply_updates(x, updates)
        np.testing.assert_allclose(float(optax.tree_utils.tree_get(state, "value")), float(fun(x)), rtol=1e-6)


def test_batched_fit_equals_one_fit_per_client():
    """Batched fits run one after another (sequential_vmap), each stopping on its own: a vmapped
    fit over clients and seeds must give what each unbatched fit gives."""
    with jax.enable_x64(True):
        d, M = 3, 20
        cfg = StandardGPConfig(dim=d)
        batch = []
        for s, m in enumerate([8, 14, 20, 11]):
            X, y = _data(m, M, d, seed=10 + s)
            ys, _, _ = gp.standardise(jnp.asarray(y), gp.make_mask(m, M))
            batch.append(gp.GPData(jnp.asarray(X), ys, gp.make_mask(m, M)))
        warm = standard_gp.default_hyper(cfg)._replace(log_outputscale=jnp.asarray(0.5))
        fit_one = jax.jit(lambda dt: standard_gp.fit(cfg, dt, warm))
        singles = [fit_one(dt) for dt in batch]
        stacked = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs).reshape((2, 2) + xs[0].shape), *batch)
        batched = jax.jit(jax.vmap(jax.vmap(lambda dt: standard_gp.fit(cfg, dt, warm))))(stacked)
        for i, single in enumerate(singles):
            for a, b in zip(jax.tree_util.tree_leaves(single), jax.tree_util.tree_leaves(batched)):
                np.testing.assert_allclose(np.asarray(b).reshape((4,) + np.shape(a))[i], np.asarray(a), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("kernel", ["matern52", "rbf"])
def test_float32_objective_and_gradient_on_clustered_points(kernel):
    # late BO queries cluster far from the origin: in float32 the MAP objective and its
    # gradient must still agree with float64 (the expanded |u_i|^2 + |u_j|^2 - 2 u_i.u_j
    # distance gave NaN or kernel errors above the noise floor here)
    rng = np.random.default_rng(0)
    d, m = 6, 100
    X = np.clip(0.95 + 1e-3 * rng.standard_normal((m, d)), 0, 1)
    y = np.sin(3 * X.sum(1))
    y = (y - y.mean()) / y.std()
    config = StandardGPConfig(dim=d, kernel=kernel)
    out = {}
    for dtype in (np.float32, np.float64):
        with jax.enable_x64(dtype == np.float64):
            hyper = GPHyper(jnp.asarray(0.0, dtype), jnp.full((d,), np.log(0.05), dtype),
                            jnp.asarray(0.0, dtype), jnp.asarray(np.log(1e-2), dtype))
            data = gp.GPData(jnp.asarray(X, dtype), jnp.asarray(y, dtype), jnp.ones(m, bool))
            value, grad = jax.jit(jax.value_and_grad(lambda h: standard_gp.neg_log_posterior(config, h, data)))(hyper)
            out[dtype] = (float(value), np.asarray(grad.log_lengthscale, np.float64))
    (v32, g32), (v64, g64) = out[np.float32], out[np.float64]
    assert np.isfinite(v32) and v32 == pytest.approx(v64, rel=1e-4)
    np.testing.assert_allclose(g32, g64, rtol=2e-2, atol=2e-3 * np.abs(g64).max())
