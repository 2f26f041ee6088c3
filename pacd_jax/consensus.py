"""Consensus matrices of the CBOC baselines (Yue et al., IEEE T-ASE 2025; DESIGN.md section 5).

CBOC agents each propose a point ``x_hat_i`` and then query the mixed point
``x_i = sum_j W_ij x_hat_j``. Two schedules for ``W(t)``:

* uniform (CBOC-U): ``W(t) = (1 - t/n_c) (1/N) 11^T + (t/n_c) I`` for
  ``t < n_c`` and ``I`` from ``t = n_c`` on: full averaging at first, each
  agent on its own at the end.
* leader (CBOC-L): the uniform schedule tilted towards the agent ``l`` whose
  acquisition maximum is largest this round, ``W(t) = rule(W_U(t), l)`` for
  ``t < n_c`` and ``I`` from ``t = n_c`` on. With ``kappa = 1 / (n_c N)`` and
  ``W1 = W_U(t)``: if ``W1[l,l] > (N-1)^2 kappa`` every entry off row/column
  ``l`` loses ``kappa``, row and column ``l`` gain ``(N-1) kappa`` and
  ``W[l,l] = W1[l,l] - (N-1)^2 kappa``; otherwise ``W`` is reset to
  ``(N-2)/(N-1)^2`` everywhere with row and column ``l`` equal to ``1/(N-1)``
  and ``W[l,l] = 0``.

Both keep ``W`` symmetric and doubly stochastic (rows and columns sum to 1)
with non-negative entries, so every mixed point is a convex combination of
the proposals. ``W1`` is the uniform schedule's matrix of the round, not the
previous leader matrix: that is how the authors' code runs it (its
``W_matrix_1`` moves by ``(N-1) kappa`` on the diagonal and ``-kappa`` off it
every round, whoever leads, and the rule is applied to it afresh; public
repository ``UMDataScienceLab/Consensus_Bayesian_Opt``, ``Branin_code.ipynb``).
Chaining the rule on its own output instead drains the self-weight of an
agent that leads often and can push an entry between two rarely leading
agents below zero.
All functions are pure ``jnp`` and jit-able with traced ``t`` and ``l``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

Array = jax.Array


def averaging_matrix(num_agents: int, dtype=None) -> Array:
    """``(1/N) 11^T``: the first matrix of both schedules."""
    dtype = dtype or jnp.result_type(float)
    return jnp.full((num_agents, num_agents), 1.0 / num_agents, dtype)


def uniform_matrix(t: ArrayLike, num_agents: int, n_c: int, dtype=None) -> Array:
    """CBOC-U: ``W(t) = (1 - s) (1/N) 11^T + s I`` with ``s = min(t / n_c, 1)``.

    Args:
        t: round index (0 for the first round; may be traced).
        num_agents: N.
        n_c: rounds until ``W = I`` (``n_c >= 1``).
    """
    dtype = dtype or jnp.result_type(float)
    s = jnp.clip(jnp.asarray(t, dtype) / n_c, 0.0, 1.0)
    return (1.0 - s) * averaging_matrix(num_agents, dtype) + s * jnp.eye(num_agents, dtype=dtype)


def leader_matrix(previous: ArrayLike, leader: ArrayLike, n_c: int) -> Array:
    """The leader rule: ``W1`` tilted towards agent ``l`` (:func:`leader_schedule` applies it to ``W_U(t)``).

    Args:
        previous: ``(N, N)`` symmetric doubly stochastic ``W1``.
        leader: index of the agent with the largest acquisition value (may be traced).
        n_c: consensus horizon; ``kappa = 1 / (n_c N)``.
    """
    w1 = jnp.asarray(previous)
    n = w1.shape[0]
    if n == 1:
        return jnp.ones_like(w1)
    kappa = 1.0 / (n_c * n)
    idx = jnp.arange(n)
    on_leader = (idx[:, None] == leader) | (idx[None, :] == leader)  # row or column l
    diag_leader = (idx[:, None] == leader) & (idx[None, :] == leader)
    # Branch 1: W = W1 - kappa off row/col l, W1 + (N-1) kappa on it, W[l,l] = W1[l,l] - (N-1)^2 kappa.
    moved = jnp.where(on_leader, w1 + (n - 1) * kappa, w1 - kappa)
    moved = jnp.where(diag_leader, w1 - (n - 1) ** 2 * kappa, moved)
    # Branch 2 (the leader's self-weight is used up): reset.
    reset = jnp.where(on_leader, 1.0 / (n - 1), (n - 2) / (n - 1) ** 2)
    reset = jnp.where(diag_leader, 0.0, reset).astype(w1.dtype)
    return jnp.where(w1[leader, leader] > (n - 1) ** 2 * kappa, moved, reset)


def leader_schedule(t: ArrayLike, leader: ArrayLike, num_agents: int, n_c: int, dtype=None) -> Array:
    """CBOC-L's ``W(t)``: the leader rule applied to the uniform schedule's ``W_U(t)``; ``I`` from ``t = n_c`` on.

    Args:
        t: round index (0 for the first round; may be traced).
        leader: index of the agent with the largest acquisition value this round (may be traced).
        num_agents: N.
        n_c: consensus horizon (``n_c >= 1``); ``kappa = 1 / (n_c N)``.
    """
    dtype = dtype or jnp.result_type(float)
    tilted = leader_matrix(uniform_matrix(t, num_agents, n_c, dtype), leader, n_c)
    return jnp.where(jnp.asarray(t) >= n_c, jnp.eye(num_agents, dtype=dtype), tilted)


def mix(weights: ArrayLike, proposals: ArrayLike) -> Array:
    """``x_i = sum_j W_ij x_hat_j``: ``(N, N) @ (N, d) -> (N, d)``."""
    return jnp.asarray(weights) @ jnp.asarray(proposals)
