"""The PACD-BO message schedule: what crosses between coordinator and clients, and how many bytes.

Per BO round ``t`` with ``n_t`` SVGD steps (``svgd_steps_init`` in round 0,
``svgd_steps`` after), the protocol of paper section III-D sends

* ``n_t + 1`` broadcasts of the particles, ``(K, P)``, coordinator -> every
  client (one per step, plus the final particles for the round's proposals);
* ``n_t`` gradient messages ``{A_{i,k}}_k``, ``(K, P)``, every client -> coordinator.

Nothing else crosses during a run; no message has a shape that depends on a
client's data. The Independent baseline sends nothing. Both backends report
this schedule in ``run.json``; the MPI backend's ``--comm-log`` records the
messages it actually sent, and the tests check that the two agree.
"""

from __future__ import annotations

import numpy as np

from pacd_jax.config import RunConfig


def steps_in_round(config: RunConfig, round_idx: int) -> int:
    return config.svgd_steps_init if round_idx == 0 else config.svgd_steps


def communicates(config: RunConfig) -> bool:
    return config.method in ("pacd", "pacoh")


def schedule(config: RunConfig, num_params: int, itemsize: int) -> dict:
    """Message counts and bytes of one seed's run, per round and per party.

    Args:
        config: the run (method, K, steps, clients, rounds).
        num_params: P, the length of one particle.
        itemsize: bytes per number (4 in float32, 8 with ``--x64``).

    Returns:
        A JSON-ready dict: ``message_shape``, ``bytes_per_message``,
        ``per_round`` (rounds, each with its step count, the bytes the
        coordinator sent to each client and each client sent back, and the
        round's total over all parties), and run totals per party.
    """
    n = config.num_clients
    message = config.num_particles * num_params * itemsize
    per_round = []
    for t in range(config.iters):
        steps = steps_in_round(config, t) if communicates(config) else 0
        down = (steps + 1) * message if communicates(config) else 0
        up = steps * message
        per_round.append(
            {
                "round": t,
                "svgd_steps": steps,
                "coordinator_to_each_client_bytes": down,
                "each_client_to_coordinator_bytes": up,
                "total_bytes": n * (down + up),
            }
        )
    seeds = len(config.seeds)
    up_total = seeds * sum(r["each_client_to_coordinator_bytes"] for r in per_round)
    down_total = seeds * sum(r["coordinator_to_each_client_bytes"] for r in per_round)
    return {
        "message_shape": [config.num_particles, num_params] if communicates(config) else None,
        "bytes_per_message": message if communicates(config) else 0,
        "per_round": per_round,
        "bytes_sent_per_client": [int(up_total)] * n,
        "bytes_sent_by_coordinator": int(n * down_total),
        "total_bytes": int(n * (up_total + down_total)),
        "seeds": seeds,
    }


def itemsize(x64: bool) -> int:
    return int(np.dtype(np.float64 if x64 else np.float32).itemsize)
