"""UCB and its maximiser on functions whose maximisers are known."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pacd_jax import acquisition
from pacd_jax.acquisition import MaximiserConfig


def test_ucb_formula():
    mean = jnp.asarray([0.0, 1.0, -2.0])
    var = jnp.asarray([1.0, 4.0, 0.0])
    np.testing.assert_allclose(np.asarray(acquisition.ucb(mean, var, 2.0)), [2.0, 3.0, 2.0 + 2.0 * 1e-6], rtol=1e-6)
    # finite gradient at zero variance (observed points)
    g = jax.grad(lambda v: acquisition.ucb(0.0, v, 2.0))(0.0)
    assert np.isfinite(float(g))


def test_maximiser_finds_interior_quadratic_maximum():
    c = jnp.asarray([0.3, 0.7, 0.55])
    acq = lambda X: -jnp.sum((X - c) ** 2, axis=-1)
    x, v = jax.jit(lambda k: acquisition.maximise(acq, k, 3))(jax.random.key(0))
    np.testing.assert_allclose(np.asarray(x), np.asarray(c), atol=2e-3)
    assert float(v) > -1e-5


def test_maximiser_respects_box_and_finds_corner():
    acq = lambda X: jnp.sum(X, axis=-1)
    x, _ = acquisition.maximise(acq, jax.random.key(1), 4)
    assert np.all(np.asarray(x) <= 1.0) and np.all(np.asarray(x) >= 0.0)
    np.testing.assert_allclose(np.asarray(x), np.ones(4), atol=1e-6)


def _branin_unit(X):
    x1 = -5.0 + 15.0 * X[..., 0]
    x2 = 15.0 * X[..., 1]
    b, c, t = 5.1 / (4 * np.pi**2), 5 / np.pi, 1 / (8 * np.pi)
    return (x2 - b * x1**2 + c * x1 - 6) ** 2 + 10 * (1 - t) * jnp.cos(x1) + 10


def test_maximiser_finds_a_global_maximiser_of_multimodal_function():
    acq = lambda X: -_branin_unit(X)
    minimisers = np.array([[-np.pi, 12.275], [np.pi, 2.275], [9.42478, 2.475]])
    unit = (minimisers - np.array([-5.0, 0.0])) / 15.0
    for seed in range(3):
        x, v = jax.jit(lambda k: acquisition.maximise(acq, k, 2))(jax.random.key(seed))
        np.testing.assert_allclose(-float(v), 0.397887, atol=2e-3)
        assert np.min(np.linalg.norm(unit - np.asarray(x), axis=1)) < 5e-3


def test_incumbent_candidates_are_used():
    # a needle the random candidates almost surely miss, next to the incumbent
    centre = jnp.asarray([0.123, 0.877])
    acq = lambda X: jnp.exp(-jnp.sum((X - centre) ** 2, axis=-1) / 1e-4)
    cfg = MaximiserConfig(num_candidates=16, num_local=64, local_scale=0.01)
    x, v = acquisition.maximise(acq, jax.random.key(3), 2, cfg, incumbent=centre + 0.01)
    assert float(v) > 0.99


def test_maximiser_config_validation():
    with pytest.raises(ValueError, match="num_candidates"):
        MaximiserConfig(num_candidates=0)
    with pytest.raises(ValueError, match="num_refine"):
        MaximiserConfig(num_candidates=2, num_local=0, num_refine=5)
    with pytest.raises(ValueError, match="refine_lr"):
        MaximiserConfig(refine_lr=float("nan"))


def test_expected_improvement_matches_scipy_closed_form_and_quadrature():
    from scipy import integrate, stats

    mean = np.array([0.0, 1.0, -0.5, 2.0, 0.3])
    var = np.array([1.0, 0.25, 4.0, 0.01, 1e-14])
    best = 0.2
    with jax.enable_x64(True):
        ei = np.asarray(acquisition.expected_improvement(jnp.asarray(mean), jnp.asarray(var), best))
    sd = np.sqrt(np.maximum(var, acquisition.VARIANCE_FLOOR))
    z = (best - mean) / sd
    np.testing.assert_allclose(ei, (best - mean) * stats.norm.cdf(z) + sd * stats.norm.pdf(z), rtol=1e-12, atol=1e-15)
    # EI = E[max(best - f, 0)], f ~ N(mu, sigma^2): numerical integration, an independent oracle
    for m, s, e in zip(mean[:4], sd[:4], ei[:4]):
        quad, _ = integrate.quad(lambda f: (best - f) * stats.norm.pdf(f, m, s), -np.inf, best)
        np.testing.assert_allclose(e, quad, rtol=1e-7, atol=1e-12)
    # zero variance: max(best - mu, 0); finite gradient
    np.testing.assert_allclose(ei[4], 0.0, atol=1e-12)
    g = jax.grad(lambda v: acquisition.expected_improvement(0.0, v, 0.1))(0.0)
    assert np.isfinite(float(g))
