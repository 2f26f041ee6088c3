"""CBOC consensus matrices (DESIGN.md section 5): structure and hand-computed cases."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pacd_jax import consensus


def assert_symmetric_doubly_stochastic(w):
    w = np.asarray(w, np.float64)
    np.testing.assert_allclose(w, w.T, atol=1e-12)
    np.testing.assert_allclose(w.sum(axis=0), 1.0, atol=1e-12)
    np.testing.assert_allclose(w.sum(axis=1), 1.0, atol=1e-12)


@pytest.mark.parametrize("n,n_c", [(2, 1), (3, 4), (5, 100)])
def test_uniform_schedule(n, n_c):
    with jax.enable_x64(True):
        f = jax.jit(consensus.uniform_matrix, static_argnums=(1, 2))
        np.testing.assert_allclose(f(0, n, n_c), np.full((n, n), 1.0 / n), atol=1e-15)
        for t in range(n_c + 2):
            assert_symmetric_doubly_stochastic(f(t, n, n_c))
        np.testing.assert_allclose(f(n_c, n, n_c), np.eye(n), atol=1e-15)  # W(n_c) = I
        np.testing.assert_allclose(f(n_c + 5, n, n_c), np.eye(n), atol=1e-15)
        s = 1 / n_c
        np.testing.assert_allclose(f(1, n, n_c), (1 - s) / n + s * np.eye(n), atol=1e-15)


def test_leader_rule_hand_computed():
    # N = 3, n_c = 10: kappa = 1/30, (N-1)^2 kappa = 4/30
    with jax.enable_x64(True):
        w0 = consensus.averaging_matrix(3)
        w1 = consensus.leader_matrix(w0, 1, 10)
        np.testing.assert_allclose(w1, np.array([[9, 12, 9], [12, 6, 12], [9, 12, 9]]) / 30, atol=1e-15)
        w2 = consensus.leader_matrix(w1, 0, 10)
        np.testing.assert_allclose(w2, np.array([[5, 14, 11], [14, 5, 11], [11, 11, 8]]) / 30, atol=1e-15)
        # the leader's self-weight is used up (W1[l,l] <= (N-1)^2 kappa): reset branch
        reset = consensus.leader_matrix(w0, 2, 2)  # kappa = 1/6: 1/3 <= 4/6
        np.testing.assert_allclose(reset, np.array([[1, 1, 2], [1, 1, 2], [2, 2, 0]]) / 4, atol=1e-15)


@pytest.mark.parametrize("n", [3, 4, 5])
def test_leader_sequence_stays_symmetric_doubly_stochastic(n):
    rng = np.random.default_rng(n)
    step = jax.jit(consensus.leader_matrix, static_argnums=2)
    with jax.enable_x64(True):
        w = step(consensus.averaging_matrix(n), jnp.asarray(0, jnp.int32), 20)
        compiled = step._cache_size()
        for leader in rng.integers(0, n, size=40):
            w = step(w, jnp.asarray(leader, jnp.int32), 20)  # traced leader: no retrace
            assert_symmetric_doubly_stochastic(w)
        assert step._cache_size() == compiled


def test_mix_is_row_weighted_average():
    w = jnp.asarray([[0.5, 0.5], [0.0, 1.0]])
    x = jnp.asarray([[0.0, 1.0], [1.0, 0.0]])
    np.testing.assert_allclose(consensus.mix(w, x), [[0.5, 0.5], [1.0, 0.0]])
