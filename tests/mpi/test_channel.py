"""Rank-level tests of the coordinator-client channel (run under mpiexec -n 2, 3 and 6).

Every rank computes the answer it expects itself, eagerly and under jit, as in
mpi4jax's own test suite.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from mpi4py import MPI

from pacd_jax.distributed.channel import Channel, CommLog

WORLD = MPI.COMM_WORLD
RANK, SIZE = WORLD.Get_rank(), WORLD.Get_size()


def _particles(step):
    return jnp.arange(12.0).reshape(3, 4) + 100.0 * step


def _grads(rank, step):
    return jnp.full((3, 4), float(rank)) + 10.0 * step


@pytest.mark.parametrize("transport", ["gather", "p2p"])
@pytest.mark.parametrize("jit", [False, True])
def test_broadcast_then_collect(transport, jit):
    channel = Channel(WORLD.Clone(), transport, CommLog())

    def cycle(x, g):
        p = channel.broadcast(x, 0, 0)
        out = channel.collect(g, 0, 0)
        return p, out

    fn = jax.jit(cycle) if jit else cycle
    mine = _particles(0) if RANK == 0 else jnp.zeros((3, 4))
    p, out = fn(mine, _grads(RANK, 0))
    np.testing.assert_array_equal(np.asarray(p), np.asarray(_particles(0)))
    if RANK == 0:
        expected = np.stack([np.asarray(_grads(r, 0)) for r in range(1, SIZE)])
        np.testing.assert_array_equal(np.asarray(out), expected)
        kinds = [(e["kind"], e["sender"], e["receiver"]) for e in channel.log.entries]
        assert kinds == [("particles", 0, r) for r in range(1, SIZE)] + [("gradients", r, 0) for r in range(1, SIZE)]
        assert all(e["shape"] == [3, 4] and e["bytes"] == 12 * 4 for e in channel.log.entries)
    else:
        assert out is None


def test_cycles_inside_a_jitted_fori_loop():
    channel = Channel(WORLD.Clone(), "gather")
    steps = 4

    @jax.jit
    def run(x):
        def body(j, carry):
            x, acc = carry
            p = channel.broadcast(x, 0, j)
            out = channel.collect(p * (RANK + 1.0), 0, j)
            if RANK == 0:
                x = x + jnp.sum(out, axis=0)
            return x, acc + jnp.sum(p)
        return jax.lax.fori_loop(0, steps, body, (x, 0.0))

    x0 = jnp.ones((2, 2)) if RANK == 0 else jnp.zeros((2, 2))
    x, acc = run(x0)
    # every client multiplies by (rank + 1); the coordinator adds the sum: x <- x (1 + sum_r (r + 1))
    factor = 1.0 + sum(r + 1.0 for r in range(1, SIZE))
    expected_acc = sum(4.0 * factor**j for j in range(steps))
    assert float(acc) == pytest.approx(expected_acc)
    if RANK == 0:
        np.testing.assert_allclose(np.asarray(x), factor**steps)
