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


def _authors_recursion(n, n_c, leaders):
    """The leader schedule as the authors' notebook runs it, in numpy: a uniform track W1 that moves
    by (N-1) kappa on the diagonal and -kappa off it every round, and the leader rule applied to it afresh."""
    kappa = 1.0 / (n_c * n)
    w1 = np.full((n, n), 1.0 / n)
    out = []
    for l in leaders:
        if w1[l, l] > (n - 1) ** 2 * kappa:
            w2 = w1 - kappa
            w2[:, l] = w1[:, l] + (n - 1) * kappa
            w2[l, :] = w1[l, :] + (n - 1) * kappa
            w2[l, l] = w1[l, l] - (n - 1) ** 2 * kappa
        else:
            w2 = np.full((n, n), (n - 2) / (n - 1) ** 2)
            w2[:, l] = w2[l, :] = 1.0 / (n - 1)
            w2[l, l] = 0.0
        out.append(w2)
        w1 = w1 + (n - 1) * kappa * np.eye(n) - kappa * (1.0 - np.eye(n))
    return out


@pytest.mark.parametrize("n,n_c", [(3, 4), (3, 10), (5, 12), (5, 100)])
def test_leader_schedule_equals_the_authors_recursion(n, n_c):
    rng = np.random.default_rng(n * n_c)
    leaders = rng.integers(0, n, size=n_c)
    step = jax.jit(consensus.leader_schedule, static_argnums=(2, 3))
    with jax.enable_x64(True):
        step(jnp.asarray(0, jnp.int32), jnp.asarray(0, jnp.int32), n, n_c)
        compiled = step._cache_size()
        for t, (leader, expected) in enumerate(zip(leaders, _authors_recursion(n, n_c, leaders))):
            w = np.asarray(step(jnp.asarray(t, jnp.int32), jnp.asarray(leader, jnp.int32), n, n_c))  # traced, no retrace
            np.testing.assert_allclose(w, expected, atol=1e-14)
            assert_symmetric_doubly_stochastic(w)
            assert w.min() >= -1e-15  # a convex combination of the proposals, every round
        assert step._cache_size() == compiled


def test_leader_schedule_hand_computed_and_reaches_identity():
    # N = 3, n_c = 10, t = 2: W_U = 0.8/3 11^T + 0.2 I (diag 14/30, off 8/30); kappa = 1/30; leader 1
    with jax.enable_x64(True):
        w = consensus.leader_schedule(2, 1, 3, 10)
        np.testing.assert_allclose(w, np.array([[13, 10, 7], [10, 10, 10], [7, 10, 13]]) / 30, atol=1e-15)
        # round 0 is the rule applied to the averaging matrix
        np.testing.assert_allclose(consensus.leader_schedule(0, 1, 3, 10), consensus.leader_matrix(consensus.averaging_matrix(3), 1, 10), atol=1e-15)
        for t in (10, 11, 50):  # from t = n_c on every agent keeps its own proposal
            np.testing.assert_allclose(consensus.leader_schedule(t, 2, 3, 10), np.eye(3), atol=1e-15)


def test_mix_is_row_weighted_average():
    w = jnp.asarray([[0.5, 0.5], [0.0, 1.0]])
    x = jnp.asarray([[0.0, 1.0], [1.0, 0.0]])
    np.testing.assert_allclose(consensus.mix(w, x), [[0.5, 0.5], [1.0, 0.0]])
