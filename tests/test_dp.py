"""The client-side clip-and-noise transform (paper eq. 12-13)."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from pacd_jax import dp


def _tree(k, scale):
    """A two-leaf pytree with particle k's entries all equal to scale[k] (norm known by construction)."""
    return {"w": jnp.ones((k, 3, 2)) * scale[:, None, None], "b": jnp.ones((k, 4)) * scale[:, None]}


def test_small_gradients_unchanged_large_scaled_to_exactly_c():
    scale = jnp.arange(6.0)  # particle i filled with i, including 0
    tree = _tree(6, scale)
    norms = np.sqrt(10.0) * np.arange(6.0)  # 10 entries per particle
    np.testing.assert_allclose(dp.per_particle_norms(tree), norms, rtol=1e-6)
    c = 10.0
    out = dp.clip(tree, c)
    out_norms = np.asarray(dp.per_particle_norms(out))
    small = norms <= c
    for name in ("w", "b"):
        np.testing.assert_array_equal(np.asarray(out[name])[small], np.asarray(tree[name])[small])
    np.testing.assert_allclose(out_norms[~small], c, rtol=1e-6)
    # direction is kept: clipped = g * C / ||g||
    np.testing.assert_allclose(out["w"][5], tree["w"][5] * c / norms[5], rtol=1e-6)


def test_zero_gradient_no_nan_in_value_or_derivative():
    g = jnp.zeros((3, 5))
    out = dp.clip_and_noise(g, jax.random.key(0), 1.0, 1.0)
    assert np.isfinite(np.asarray(out)).all()
    np.testing.assert_array_equal(dp.clip(g, 1.0), g)
    d = jax.jacobian(lambda x: dp.clip(x, 1.0))(g)
    assert np.isfinite(np.asarray(d)).all()
    d_norm = jax.grad(lambda x: dp.per_particle_norms(x).sum())(g)
    assert np.isfinite(np.asarray(d_norm)).all()


def test_noise_has_stated_std():
    # with zero gradients the output is the noise: K * P draws of N(0, (2 sigma C)^2)
    sigma, c, k, p = 1.5, 0.7, 8, 5000
    out = np.asarray(dp.clip_and_noise(jnp.zeros((k, p)), jax.random.key(42), sigma, c), np.float64)
    std = 2 * sigma * c
    z = out.ravel() / std
    n = z.size
    # chi-square test of the variance: sum z^2 ~ chi2(n); reject outside [0.1%, 99.9%]
    s = float(np.sum(z**2))
    lo, hi = stats.chi2.ppf([1e-3, 1 - 1e-3], n)
    assert lo < s < hi, (s, lo, hi)
    # the same for a wrong std (5% off) must fail: the test has power at this n
    s_wrong = float(np.sum((out.ravel() / (1.05 * std)) ** 2))
    assert not (lo < s_wrong < hi)
    # shape: Kolmogorov-Smirnov against N(0, 1)
    assert stats.kstest(z, "norm").pvalue > 1e-3
    # the noise is added to the clipped gradient, not the raw one
    big = jnp.full((k, p), 100.0)
    out_big = np.asarray(dp.clip_and_noise(big, jax.random.key(42), sigma, c), np.float64)
    np.testing.assert_allclose(out_big - out, c / np.sqrt(p), rtol=1e-3, atol=1e-4)


def test_particles_get_independent_noise():
    k, p = 10, 4000
    out = np.asarray(dp.clip_and_noise(jnp.zeros((k, p)), jax.random.key(3), 1.0, 1.0), np.float64)
    corr = np.corrcoef(out)  # (K, K)
    off = corr[~np.eye(k, dtype=bool)]
    # under independence each correlation is ~ N(0, 1/p); bound at 5 std (Bonferroni over 90 pairs)
    assert np.max(np.abs(off)) < 5 / np.sqrt(p), np.max(np.abs(off))
    # and a shared key per particle would be caught: identical rows correlate at 1
    assert not np.allclose(out[0], out[1])
    # leaves of one particle are independent too
    tree = {"a": jnp.zeros((2, p)), "b": jnp.zeros((2, p))}
    noisy = dp.clip_and_noise(tree, jax.random.key(4), 1.0, 1.0)
    r = np.corrcoef(np.asarray(noisy["a"][0]), np.asarray(noisy["b"][0]))[0, 1]
    assert abs(r) < 5 / np.sqrt(p)


def test_per_particle_noise_depends_only_on_that_particle():
    # clipping and noise act per particle: changing particle 0's gradient leaves the others' outputs equal
    key = jax.random.key(7)
    g = jax.random.normal(jax.random.key(1), (4, 6)) * 3
    a = dp.clip_and_noise(g, key, 2.0, 1.0)
    b = dp.clip_and_noise(g.at[0].multiply(50.0), key, 2.0, 1.0)
    np.testing.assert_array_equal(a[1:], b[1:])


def test_transform_state_advances_and_jit_vmap_no_retrace():
    tx = dp.private_gradients(1.0, 2.0)
    state = tx.init(jax.random.key(0))
    g = jnp.ones((3, 4))
    out1, state = tx.update(g, state)
    out2, state = tx.update(g, state)
    assert not np.allclose(out1, out2)  # fresh noise each release

    @jax.jit
    @chex.assert_max_traces(n=1)
    def step(grads, key):
        return dp.clip_and_noise(grads, key, 1.0, 2.0)

    for i in range(3):
        step(g * i, jax.random.key(i)).block_until_ready()
    # vmap over clients (a leading client axis, one key each) equals the loop
    keys_ = jax.random.split(jax.random.key(9), 5)
    gs = jax.random.normal(jax.random.key(2), (5, 3, 4))
    batched = jax.vmap(lambda gg, kk: dp.clip_and_noise(gg, kk, 1.0, 2.0))(gs, keys_)
    looped = jnp.stack([dp.clip_and_noise(gs[i], keys_[i], 1.0, 2.0) for i in range(5)])
    np.testing.assert_allclose(batched, looped, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("sigma,clip_norm", [(-1.0, 1.0), (1.0, 0.0), (float("nan"), 1.0), (1.0, float("inf"))])
def test_bad_settings_rejected(sigma, clip_norm):
    with pytest.raises(ValueError):
        dp.check_config(sigma, clip_norm)
