"""GP core and meta-learned prior against independent oracles (scipy, plain float64 code, finite differences)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

from pacd_jax import gp
from pacd_jax.gp import GPData, MetaGP, MetaGPConfig


def _data(key, m, capacity, d, dtype):
    kx, ky = jax.random.split(key)
    X = jax.random.uniform(kx, (capacity, d), dtype)
    y = jnp.sin(5.0 * X.sum(-1)) + 0.1 * jax.random.normal(ky, (capacity,), dtype)
    # padding deliberately holds junk: it must not matter
    X = X.at[m:].set(7.0)
    y = y.at[m:].set(-3.0)
    return GPData(X, y, gp.make_mask(m, capacity))


def _plain_gmll(model, phi, X, y):
    """Unpadded GMLL written directly (no masking, no custom VJP): the autodiff oracle."""
    mean, kxx = model.prior_moments(phi, X)
    K = kxx + (model.noise_variance(phi) + gp.DEFAULT_JITTER) * jnp.eye(X.shape[0], dtype=X.dtype)
    L = jnp.linalg.cholesky(K)
    r = y - mean
    a = jax.scipy.linalg.solve_triangular(L, r, lower=True)
    return -0.5 * a @ a - jnp.sum(jnp.log(jnp.diag(L))) - 0.5 * X.shape[0] * np.log(2 * np.pi)


@pytest.mark.parametrize("d,features,learn_ls", [(1, 2, True), (3, 4, False)])
def test_gmll_matches_scipy_padded_and_unpadded(d, features, learn_ls):
    with jax.enable_x64(True):
        model = MetaGP(MetaGPConfig(dim=d, features=features, learn_lengthscale=learn_ls))
        phi = model.sample_hyperprior(jax.random.key(1), 3)
        m = 9
        padded = _data(jax.random.key(2), m, 16, d, jnp.float64)
        unpadded = GPData(padded.X[:m], padded.y[:m], gp.make_mask(m, m))
        for k in range(3):
            mean, kxx = model.prior_moments(phi[k], unpadded.X)
            cov = np.asarray(kxx) + float(model.noise_variance(phi[k]) + gp.DEFAULT_JITTER) * np.eye(m)
            oracle = scipy.stats.multivariate_normal.logpdf(np.asarray(unpadded.y), np.asarray(mean), cov)
            np.testing.assert_allclose(float(model.gmll(phi[k], unpadded)), oracle, rtol=1e-10)
            np.testing.assert_allclose(float(model.gmll(phi[k], padded)), oracle, rtol=1e-10)


def test_gmll_grad_matches_autodiff_and_finite_differences():
    with jax.enable_x64(True):
        model = MetaGP(MetaGPConfig(dim=2))
        phi = model.sample_hyperprior(jax.random.key(3), 2)
        m = 7
        padded = _data(jax.random.key(4), m, 12, 2, jnp.float64)
        X, y = padded.X[:m], padded.y[:m]
        for k in range(2):
            closed = jax.jit(model.gmll_grad)(phi[k], padded)
            auto = jax.jit(jax.grad(_plain_gmll, argnums=1), static_argnums=0)(model, phi[k], X, y)
            np.testing.assert_allclose(np.asarray(closed), np.asarray(auto), rtol=1e-8, atol=1e-9)
            # central finite differences along random directions
            value = jax.jit(model.gmll)
            f = lambda p: float(value(p, padded))
            for j, v in enumerate(jax.random.normal(jax.random.key(10 + k), (4, model.num_params), jnp.float64)):
                v = v / jnp.linalg.norm(v)
                eps = 1e-5
                fd = (f(phi[k] + eps * v) - f(phi[k] - eps * v)) / (2 * eps)
                np.testing.assert_allclose(float(closed @ v), fd, rtol=1e-5, atol=1e-6)


def test_gmll_float32_close_to_float64():
    model = MetaGP(MetaGPConfig(dim=2))
    with jax.enable_x64(True):
        phi64 = model.sample_hyperprior(jax.random.key(5), 2)
        data64 = _data(jax.random.key(6), 10, 16, 2, jnp.float64)
        v64 = np.asarray(jax.jit(jax.vmap(model.gmll, (0, None)))(phi64, data64))
        g64 = np.asarray(jax.jit(gp.gmll_grads, static_argnums=0)(model, phi64, data64))
    phi32 = jnp.asarray(phi64, jnp.float32)
    data32 = GPData(jnp.asarray(data64.X, jnp.float32), jnp.asarray(data64.y, jnp.float32), jnp.asarray(data64.mask))
    v32 = np.asarray(jax.jit(jax.vmap(model.gmll, (0, None)))(phi32, data32))
    g32 = np.asarray(jax.jit(gp.gmll_grads, static_argnums=0)(model, phi32, data32))
    assert v32.dtype == np.float32 and g32.dtype == np.float32
    np.testing.assert_allclose(v32, v64, rtol=1e-4, atol=1e-3)
    scale = np.abs(g64).max()
    np.testing.assert_allclose(g32, g64, atol=2e-3 * scale)


def test_gmll_grads_shape_and_particle_independence():
    model = MetaGP(MetaGPConfig(dim=1))
    phi = model.sample_hyperprior(jax.random.key(7), 4)
    data = _data(jax.random.key(8), 6, 10, 1, jnp.float32)
    grads = jax.jit(gp.gmll_grads, static_argnums=0)(model, phi, data)
    assert grads.shape == (4, model.num_params)
    one = jax.jit(model.gmll_grad)(phi[2], data)
    np.testing.assert_allclose(np.asarray(grads[2]), np.asarray(one), rtol=0, atol=1e-5 * float(jnp.abs(one).max()))


def test_num_params_matches_pacoh_anchor():
    # 1-D, nets (32, 32), 2 features, per-feature lengthscale and noise: 2342 parameters
    assert MetaGP(MetaGPConfig(dim=1)).num_params == 2342


def test_hyperprior_density_score_and_samples():
    with jax.enable_x64(True):
        model = MetaGP(MetaGPConfig(dim=2, features=3))
        mean, std = model.hyperprior_mean, model.hyperprior_std
        # the documented hyper-prior: weights 0.5, biases 3 (PACOH), lengthscale N(0,1), noise N(-4,1)
        assert set(np.unique(std)) == {0.5, 1.0, 3.0}
        assert np.sum(mean == -4.0) == 1 and np.sum(std == 1.0) == 4
        # leaf by leaf: every dense kernel 0.5, every bias 3, lengthscales N(0, 1), noise N(-4, 1)
        stds, means = model.unravel(jnp.asarray(std)), model.unravel(jnp.asarray(mean))
        for net in ("mean", "features"):
            for layer in stds[net].values():
                assert np.all(np.asarray(layer["kernel"]) == 0.5) and np.all(np.asarray(layer["bias"]) == 3.0)
        assert np.all(np.asarray(stds["lengthscale_raw"]) == 1.0) and np.all(np.asarray(means["lengthscale_raw"]) == 0.0)
        assert float(stds["noise_raw"][0]) == 1.0 and float(means["noise_raw"][0]) == -4.0
        phi = model.sample_hyperprior(jax.random.key(9), 3)
        oracle = scipy.stats.norm.logpdf(np.asarray(phi), mean, std).sum(-1)
        np.testing.assert_allclose(np.asarray(model.log_hyperprior(phi)), oracle, rtol=1e-12)
        score = jax.vmap(jax.grad(model.log_hyperprior))(phi)
        np.testing.assert_allclose(np.asarray(model.hyperprior_score(phi)), np.asarray(score), rtol=1e-12)
        many = np.asarray(model.sample_hyperprior(jax.random.key(10), 4000))
        z = (many - mean) / std
        assert abs(z.mean()) < 0.01 and abs(z.std() - 1) < 0.01


def test_posterior_matches_closed_form():
    with jax.enable_x64(True):
        model = MetaGP(MetaGPConfig(dim=2))
        phi = model.sample_hyperprior(jax.random.key(11), 1)[0]
        m = 8
        data = _data(jax.random.key(12), m, 13, 2, jnp.float64)
        Xt = jax.random.uniform(jax.random.key(13), (5, 2), jnp.float64)
        mu, var = model.predict(model.posterior(phi, data), Xt)
        # oracle: textbook GP conditioning with numpy.linalg.solve on the unpadded data
        X, y = np.asarray(data.X[:m]), np.asarray(data.y[:m])
        both = jnp.concatenate([data.X[:m], Xt])
        mean_all, k_all = model.prior_moments(phi, both)
        mean_all, k_all = np.asarray(mean_all), np.asarray(k_all)
        K = k_all[:m, :m] + float(model.noise_variance(phi) + gp.DEFAULT_JITTER) * np.eye(m)
        Ks = k_all[:m, m:]
        mu_ref = mean_all[m:] + Ks.T @ np.linalg.solve(K, y - mean_all[:m])
        var_ref = np.diag(k_all[m:, m:] - Ks.T @ np.linalg.solve(K, Ks))
        np.testing.assert_allclose(np.asarray(mu), mu_ref, rtol=1e-9, atol=1e-10)
        np.testing.assert_allclose(np.asarray(var), var_ref, rtol=1e-8, atol=1e-10)


def test_mixture_moments_equal_eq9_by_hand():
    rng = np.random.default_rng(0)
    K, T = 6, 11
    means = rng.normal(size=(K, T))
    variances = rng.uniform(0.1, 2.0, size=(K, T))
    mu, var = gp.mixture_moments(jnp.asarray(means), jnp.asarray(variances))
    # eq. 8-9 written out with loops
    mu_hand = np.zeros(T)
    var_hand = np.zeros(T)
    for t in range(T):
        mu_hand[t] = sum(means[k, t] for k in range(K)) / K
        var_hand[t] = sum(variances[k, t] for k in range(K)) / K + sum((means[k, t] - mu_hand[t]) ** 2 for k in range(K)) / K
    np.testing.assert_allclose(np.asarray(mu), mu_hand, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(var), var_hand, rtol=1e-5)
    # and the second-moment identity of an equal-weight Gaussian mixture: E[x^2] - E[x]^2
    second = np.mean(variances + means**2, axis=0)
    np.testing.assert_allclose(np.asarray(var), second - mu_hand**2, rtol=1e-5)


def test_mixture_prediction_uses_all_particles():
    model = MetaGP(MetaGPConfig(dim=1))
    phi = model.sample_hyperprior(jax.random.key(14), 3)
    data = _data(jax.random.key(15), 5, 8, 1, jnp.float32)
    Xt = jnp.linspace(0, 1, 7)[:, None]
    mixture = jax.jit(lambda p, d, x: model.predict_mixture(jax.vmap(model.posterior, (0, None))(p, d), x))
    mu, var = mixture(phi, data, Xt)
    single = jax.jit(lambda p, d, x: model.predict(model.posterior(p, d), x))
    per = [single(phi[k], data, Xt) for k in range(3)]
    means = np.stack([np.asarray(p[0]) for p in per])
    variances = np.stack([np.asarray(p[1]) for p in per])
    np.testing.assert_allclose(np.asarray(mu), means.mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(var), variances.mean(0) + means.var(0), rtol=1e-4, atol=1e-6)


def test_standardise_matches_numpy_and_handles_constants():
    y = jnp.asarray([3.0, 5.0, 10.0, 99.0, -4.0])
    mask = gp.make_mask(3, 5)
    ys, mean, std = gp.standardise(y, mask)
    ref = np.array([3.0, 5.0, 10.0])
    np.testing.assert_allclose(np.asarray(ys[:3]), (ref - ref.mean()) / ref.std(), rtol=1e-6)
    assert float(ys[3]) == 0.0 and float(ys[4]) == 0.0
    np.testing.assert_allclose([float(mean), float(std)], [ref.mean(), ref.std()], rtol=1e-6)
    const, _, std_c = gp.standardise(jnp.full((4,), 2.5), gp.make_mask(4, 4))
    assert np.all(np.isfinite(np.asarray(const))) and float(std_c) > 0


def test_config_validation():
    with pytest.raises(ValueError, match="dim"):
        MetaGPConfig(dim=0)
    with pytest.raises(ValueError, match="kernel_variance"):
        MetaGPConfig(dim=1, kernel_variance=-1.0)
    with pytest.raises(ValueError, match="hidden"):
        MetaGPConfig(dim=1, hidden=(32, 0))


@pytest.mark.parametrize("learn_ls", [True, False])
def test_input_kernel_is_the_feature_kernel_times_an_ard_se_kernel(learn_ls):
    """``input_kernel``: k = s exp(-1/2 |dh/l|^2) * exp(-1/2 |dx/l_x|^2), written out in float64 numpy."""
    with jax.enable_x64(True):
        plain = MetaGP(MetaGPConfig(dim=3, learn_lengthscale=learn_ls))
        model = MetaGP(MetaGPConfig(dim=3, learn_lengthscale=learn_ls, input_kernel=True))
        assert model.num_params == plain.num_params + 3
        phi = model.sample_hyperprior(jax.random.key(5), 1)[0]
        params = model.unravel(phi)
        # the same networks without the input lengthscales
        phi_plain = plain.ravel({k: v for k, v in params.items() if k != "input_lengthscale_raw"})
        X = np.asarray(jax.random.uniform(jax.random.key(6), (7, 3), jnp.float64))
        _, k_feat = plain.prior_moments(phi_plain, jnp.asarray(X))
        scale = np.log1p(np.exp(np.asarray(params["input_lengthscale_raw"])))
        z = (X - 0.5) * np.sqrt(12.0) / scale  # the networks' standardised inputs
        ard = np.exp(-0.5 * ((z[:, None, :] - z[None, :, :]) ** 2).sum(-1))
        mean, kxx = model.prior_moments(phi, jnp.asarray(X))
        np.testing.assert_allclose(np.asarray(kxx), np.asarray(k_feat) * ard, rtol=1e-12)
        np.testing.assert_allclose(np.asarray(mean), np.asarray(plain.mean(phi_plain, jnp.asarray(X))), rtol=1e-12)
        # hyper-prior of the new coordinates: the configured N(mean, std)
        index = np.asarray(model.unravel(jnp.arange(model.num_params))["input_lengthscale_raw"])
        np.testing.assert_array_equal(model.hyperprior_mean[index], 0.0)
        np.testing.assert_array_equal(model.hyperprior_std[index], 1.0)


@pytest.mark.parametrize("kind", ["se", "matern52"])
def test_learned_outputscale_scales_prior_and_posterior(kind):
    """``learn_outputscale``: k = s0 exp(raw_s) k_1 with k_1 the fixed-scale kernel; the posterior is scipy's GP regression."""
    with jax.enable_x64(True):
        plain = MetaGP(MetaGPConfig(dim=2, kernel=kind))
        model = MetaGP(MetaGPConfig(dim=2, kernel=kind, learn_outputscale=True, outputscale_prior=(0.3, 0.7)))
        assert model.num_params == plain.num_params + 1
        phi = model.sample_hyperprior(jax.random.key(9), 1)[0]
        params = model.unravel(phi)
        phi_plain = plain.ravel({k: v for k, v in params.items() if k != "outputscale_raw"})
        s = plain.config.kernel_variance * np.exp(float(params["outputscale_raw"][0]))
        X = jax.random.uniform(jax.random.key(10), (8, 2), jnp.float64)
        _, k_plain = plain.prior_moments(phi_plain, X)
        mean, kxx = model.prior_moments(phi, X)
        np.testing.assert_allclose(np.asarray(kxx), s / plain.config.kernel_variance * np.asarray(k_plain), rtol=1e-12)
        assert float(model.outputscale(phi)) == pytest.approx(s, rel=1e-12)
        # posterior at test points: the textbook GP formulas in numpy with the scaled kernel
        Xt = jax.random.uniform(jax.random.key(11), (5, 2), jnp.float64)
        y = jnp.cos(3.0 * X.sum(-1))
        data = GPData(X, y, gp.make_mask(8, 8))
        mu, var = model.predict(model.posterior(phi, data), Xt)
        both = jnp.concatenate([X, Xt])
        m_all, k_all = model.prior_moments(phi, both)
        m_all, k_all = np.asarray(m_all), np.asarray(k_all)
        noise = float(model.noise_variance(phi)) + gp.DEFAULT_JITTER
        K = k_all[:8, :8] + noise * np.eye(8)
        ks = k_all[:8, 8:]
        mu_ref = m_all[8:] + ks.T @ np.linalg.solve(K, np.asarray(y) - m_all[:8])
        var_ref = np.diag(k_all[8:, 8:]) - np.einsum("ij,ij->j", ks, np.linalg.solve(K, ks))
        np.testing.assert_allclose(np.asarray(mu), mu_ref, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(np.asarray(var), var_ref, rtol=1e-8, atol=1e-12)
        # hyper-prior of the new coordinate: the configured N(mean, std)
        index = int(np.asarray(model.unravel(jnp.arange(model.num_params))["outputscale_raw"])[0])
        assert model.hyperprior_mean[index] == 0.3 and model.hyperprior_std[index] == 0.7


def test_input_kernel_must_be_a_bool():
    with pytest.raises(ValueError, match="input_kernel must be a bool"):
        MetaGPConfig(dim=2, input_kernel=1)


@pytest.mark.parametrize("input_kernel", [False, True])
def test_matern_feature_kernel_matches_sklearn(input_kernel):
    """``kernel="matern52"``: s * scikit-learn's Matern(nu=2.5, length_scale=1) of the scaled features."""
    from sklearn.gaussian_process.kernels import Matern

    with jax.enable_x64(True):
        model = MetaGP(MetaGPConfig(dim=2, kernel="matern52", input_kernel=input_kernel))
        phi = model.sample_hyperprior(jax.random.key(7), 1)[0]
        X = jax.random.uniform(jax.random.key(8), (9, 2), jnp.float64)
        X = X.at[4].set(X[2])  # coincident points: k = s, and the gradient stays finite
        h = np.asarray(model.features(phi, X))
        assert h.shape == (9, 2 + 2 * input_kernel)
        _, kxx = model.prior_moments(phi, X)
        oracle = model.config.kernel_variance * Matern(length_scale=1.0, nu=2.5)(h)
        np.testing.assert_allclose(np.asarray(kxx), oracle, rtol=1e-12, atol=1e-15)
        data = GPData(X, jnp.sin(4.0 * X.sum(-1)), gp.make_mask(9, 9))
        assert bool(jnp.all(jnp.isfinite(model.gmll_grad(phi, data))))


def test_unknown_feature_kernel():
    with pytest.raises(ValueError, match="unknown kernel 'laplace'"):
        MetaGPConfig(dim=2, kernel="laplace")


def _np_mlp(layers: dict, x: np.ndarray) -> np.ndarray:
    """tanh MLP, plain numpy: ``Dense_0 .. Dense_L`` with tanh between (paper eq. 5's networks)."""
    for i in range(len(layers)):
        x = x @ np.asarray(layers[f"Dense_{i}"]["kernel"]) + np.asarray(layers[f"Dense_{i}"]["bias"])
        if i < len(layers) - 1:
            x = np.tanh(x)
    return x


def _np_prior_logpdf(model: MetaGP, phi: np.ndarray, X: np.ndarray, y: np.ndarray) -> float:
    """ln N(y; m(X), K(X, X) + sigma^2 I) of paper eq. 5 with the options of DESIGN.md section 3, numpy/scipy only."""
    cfg = model.config
    p = jax.tree_util.tree_map(np.asarray, model.unravel(jnp.asarray(phi)))  # the parameter layout only
    x = (X - 0.5) * np.sqrt(12.0) if cfg.standardise_inputs else X
    softplus = lambda z: np.log1p(np.exp(z))
    h = _np_mlp(p["features"], x)
    if cfg.learn_lengthscale:
        h = h / softplus(p["lengthscale_raw"])
    if cfg.input_kernel:
        h = np.concatenate([h, x / softplus(p["input_lengthscale_raw"])], axis=-1)
    d2 = ((h[:, None, :] - h[None, :, :]) ** 2).sum(-1)
    s = cfg.kernel_variance * (np.exp(p["outputscale_raw"][0]) if cfg.learn_outputscale else 1.0)
    if cfg.kernel == "se":
        K = s * np.exp(-0.5 * d2)
    else:
        r = np.sqrt(d2)
        K = s * (1 + np.sqrt(5) * r + 5 / 3 * d2) * np.exp(-np.sqrt(5) * r)
    noise = softplus(p["noise_raw"][0]) + cfg.noise_floor + gp.DEFAULT_JITTER
    return scipy.stats.multivariate_normal.logpdf(y, _np_mlp(p["mean"], x)[:, 0], K + noise * np.eye(len(y)))


@pytest.mark.parametrize("options", [
    dict(dim=2, hidden=(6, 6)),
    dict(dim=3, hidden=(5,), learn_lengthscale=False),
    dict(dim=2, hidden=(6, 6), learn_outputscale=True, input_kernel=True),
    dict(dim=2, hidden=(6, 6), kernel="matern52"),
    dict(dim=1, hidden=(6, 6), standardise_inputs=False),
])
def test_prior_model_against_a_numpy_transcription(options):
    # the GMLL tests build their scipy oracle from model.prior_moments; this one checks the
    # networks and kernel themselves (eq. 5) against plain numpy, on padded buffers with junk rows
    with jax.enable_x64(True):
        model = MetaGP(MetaGPConfig(**options))
        rng = np.random.default_rng(0)
        m, size, d = 7, 11, options["dim"]
        X, y = rng.uniform(size=(size, d)), rng.normal(size=size)
        X[m:], y[m:] = 5.0, 9.0
        data = GPData(jnp.asarray(X), jnp.asarray(y), gp.make_mask(m, size))
        gmll = jax.jit(model.gmll)  # one compile, not one per primitive
        for phi in np.asarray(model.sample_hyperprior(jax.random.key(1), 2, jnp.float64)):
            want = _np_prior_logpdf(model, phi, X[:m], y[:m])
            assert float(gmll(jnp.asarray(phi), data)) == pytest.approx(want, rel=1e-10, abs=1e-10)
