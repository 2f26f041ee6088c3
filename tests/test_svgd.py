"""SVGD against a slow, obviously-correct reference and a known target."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from pacd_jax import svgd as svgd_lib


def _reference_direction(particles, scores):
    """psi_k = 1/K sum_j [k(x_j, x_k) s_j + grad_{x_j} k(x_j, x_k)], with loops and autodiff."""
    x = np.asarray(particles, np.float64)
    K = x.shape[0]
    d2 = np.array([[np.sum((x[i] - x[j]) ** 2) for j in range(K)] for i in range(K)])
    gamma = np.log(K + 1) / np.median(d2)
    kern = lambda a, b: jnp.exp(-gamma * jnp.sum((a - b) ** 2))
    grad_first = jax.grad(kern, argnums=0)
    out = np.zeros_like(x)
    for k in range(K):
        for j in range(K):
            out[k] += float(kern(x[j], x[k])) * np.asarray(scores[j]) + np.asarray(grad_first(x[j], x[k]))
    return out / K


@pytest.mark.parametrize("K,P", [(2, 3), (5, 7), (10, 4)])
def test_direction_matches_loop_reference(K, P):
    with jax.enable_x64(True):
        x = jax.random.normal(jax.random.key(K), (K, P), jnp.float64)
        s = jax.random.normal(jax.random.key(K + 100), (K, P), jnp.float64)
        np.testing.assert_allclose(np.asarray(svgd_lib.svgd_direction(x, s)), _reference_direction(x, s), rtol=1e-10, atol=1e-12)


def test_direction_float32_close_to_reference():
    x = jax.random.normal(jax.random.key(1), (6, 5), jnp.float32)
    s = jax.random.normal(jax.random.key(2), (6, 5), jnp.float32)
    np.testing.assert_allclose(np.asarray(svgd_lib.svgd_direction(x, s)), _reference_direction(x, s), rtol=1e-4, atol=1e-5)


def test_float32_keeps_accuracy_for_close_particles_far_from_origin():
    """Late in meta-training the particles sit close together: |x|^2 + |y|^2 - 2 x.y must not cancel."""
    rng = np.random.default_rng(0)
    x64 = rng.normal(size=(1, 300)) + 1e-3 * rng.normal(size=(6, 300))
    x32 = jnp.asarray(x64, jnp.float32)
    xr = np.asarray(x32, np.float64)  # the float32 particles, exactly, in float64
    s32 = jnp.asarray(rng.normal(size=(6, 300)), jnp.float32)
    d2_ref = np.array([[np.sum((xr[i] - xr[j]) ** 2) for j in range(6)] for i in range(6)])
    np.testing.assert_allclose(np.asarray(svgd_lib.squared_distances(x32)), d2_ref, rtol=1e-4, atol=1e-6 * d2_ref.max())
    psi_ref = _reference_direction(xr, np.asarray(s32, np.float64))
    np.testing.assert_allclose(np.asarray(svgd_lib.svgd_direction(x32, s32)), psi_ref, rtol=1e-4, atol=1e-4 * np.abs(psi_ref).max())


def test_step_is_adam_on_minus_direction():
    with jax.enable_x64(True):
        x0 = jax.random.normal(jax.random.key(3), (4, 3), jnp.float64)
        score_fn = lambda x: -(x - 1.0)  # N(1, I) target
        sv = svgd_lib.svgd(learning_rate=0.1)
        state = sv.init(x0)
        # reference: Adam written out (b1=0.9, b2=0.999, eps=1e-8) on g = -psi
        x, m, v = np.asarray(x0), np.zeros((4, 3)), np.zeros((4, 3))
        for t in range(1, 4):
            state = sv.step(state, score_fn(state.particles))
            g = -_reference_direction(x, np.asarray(score_fn(jnp.asarray(x))))
            m = 0.9 * m + 0.1 * g
            v = 0.999 * v + 0.001 * g**2
            x = x - 0.1 * (m / (1 - 0.9**t)) / (np.sqrt(v / (1 - 0.999**t)) + 1e-8)
            np.testing.assert_allclose(np.asarray(state.particles), x, rtol=1e-9, atol=1e-11)


def test_recovers_1d_gaussian_mean_and_variance():
    mu, sigma = 2.0, 0.5
    sv = svgd_lib.svgd(optax.sgd(0.05))
    state = sv.init(jax.random.normal(jax.random.key(4), (100, 1)) * 0.1 - 3.0)

    @jax.jit
    def run(state):
        body = lambda _, s: sv.step(s, -(s.particles - mu) / sigma**2)
        return jax.lax.fori_loop(0, 3000, body, state)

    x = np.asarray(run(state).particles)[:, 0]
    assert abs(x.mean() - mu) < 0.02
    assert abs(x.var() - sigma**2) / sigma**2 < 0.1


def test_single_particle_is_gradient_ascent_and_finite():
    x0 = jnp.asarray([[0.3, -0.2]])
    s = jnp.asarray([[1.0, 2.0]])
    psi = svgd_lib.svgd_direction(x0, s)
    np.testing.assert_allclose(np.asarray(psi), np.asarray(s), rtol=1e-6)
    # coincident particles: the kernel is 1, repulsion 0, nothing NaN
    same = jnp.ones((3, 2))
    assert np.all(np.isfinite(np.asarray(svgd_lib.svgd_direction(same, s.repeat(3, 0)))))


def test_no_kkp_intermediate():
    K, P = 10, 2342
    jaxpr = jax.make_jaxpr(svgd_lib.svgd_direction)(jnp.zeros((K, P)), jnp.zeros((K, P)))
    shapes = [v.aval.shape for eqn in jaxpr.eqns for v in eqn.outvars]
    assert (K, K, P) not in shapes and all(np.prod(s) <= K * P for s in shapes if len(s) >= 2 and s != (K, K))


def test_jitted_step_compiles_once():
    sv = svgd_lib.svgd(learning_rate=1e-2)

    @jax.jit
    @chex.assert_max_traces(n=1)
    def step(state, scores):
        return sv.step(state, scores)

    chex.clear_trace_counter()
    state = sv.init(jnp.zeros((5, 3)) + jnp.arange(5.0)[:, None])
    for i in range(4):
        state = step(state, jnp.full((5, 3), float(i)))
    assert np.all(np.isfinite(np.asarray(state.particles)))
