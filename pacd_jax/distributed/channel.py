"""The two messages of PACD-BO as jit-compatible mpi4jax operations, and their log.

``broadcast`` sends the particles from the coordinator (rank 0) to every
client; ``collect`` brings every client's ``(K, P)`` gradients to the
coordinator, either with one ``MPI_Gather`` (the paper's choice) or with one
point-to-point message per client. MPICH gathers along a binomial tree, so
with ``gather`` some clients relay other clients' gradient blocks on their
way to rank 0; ``p2p`` keeps every client's gradients on a direct channel to
the coordinator. Particles are public to every client, so a relayed
broadcast reveals nothing.

Both functions run inside ``jax.jit`` (also inside ``lax.fori_loop``). They
must not be ``vmap``-ed or differentiated: mpi4jax has no rules for that,
so they are called on whole arrays. When a :class:`CommLog` is attached, a
host callback on rank 0 records every message at the moment it completes.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import jax
import jax.numpy as jnp
import mpi4jax
import numpy as np

from pacd_jax import io

COORDINATOR = 0
_TAG_GRADIENTS = 17


@dataclasses.dataclass
class CommLog:
    """Messages seen by the coordinator: one JSON object per message and receiver/sender."""

    entries: list = dataclasses.field(default_factory=list)
    seed: int = -1

    def record(self, kind: str, round_idx, step, sender: int, receiver: int, shape, dtype) -> None:
        self.entries.append(
            {
                "seed": self.seed,
                "round": int(round_idx),
                "step": int(step),
                "kind": kind,
                "sender": int(sender),
                "receiver": int(receiver),
                "shape": [int(s) for s in shape],
                "dtype": str(np.dtype(dtype)),
                "bytes": int(np.prod(shape, dtype=np.int64) * np.dtype(dtype).itemsize),
            }
        )

    def write(self, path: str | os.PathLike) -> None:
        with io.atomic_path(path) as tmp:
            with open(tmp, "w") as fh:
                for entry in self.entries:
                    fh.write(json.dumps(entry) + "\n")

    def totals(self) -> dict:
        """Bytes by kind and by sender, to check against :func:`pacd_jax.messages.schedule`."""
        by_sender: dict[int, int] = {}
        by_kind: dict[str, int] = {}
        for e in self.entries:
            by_sender[e["sender"]] = by_sender.get(e["sender"], 0) + e["bytes"]
            by_kind[e["kind"]] = by_kind.get(e["kind"], 0) + e["bytes"]
        return {"by_sender": by_sender, "by_kind": by_kind}


class Channel:
    """The coordinator-client links of one communicator.

    Args:
        comm: an mpi4py communicator (the backend passes a clone of
            ``MPI_COMM_WORLD``); rank 0 is the coordinator.
        transport: ``"gather"`` or ``"p2p"`` (see the module docstring).
        log: where rank 0 records messages, or None.
    """

    def __init__(self, comm: Any, transport: str = "gather", log: CommLog | None = None):
        if transport not in ("gather", "p2p"):
            raise ValueError(f"unknown transport {transport!r}")
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.transport = transport
        self.log = log if self.rank == COORDINATOR else None

    @property
    def num_clients(self) -> int:
        return self.size - 1

    @property
    def is_coordinator(self) -> bool:
        return self.rank == COORDINATOR

    def _log(self, kind: str, x: jax.Array, round_idx, step, pairs) -> None:
        if self.log is None:
            return
        shape, dtype, log = tuple(x.shape), x.dtype, self.log

        def write(r, j):
            for sender, receiver in pairs:
                log.record(kind, r, j, sender, receiver, shape, dtype)

        jax.debug.callback(write, round_idx, step, ordered=True)

    def broadcast(self, particles: jax.Array, round_idx, step) -> jax.Array:
        """Coordinator -> every client: the ``(K, P)`` particles (MPI_Bcast).

        On rank 0 ``particles`` is sent and returned; on a client it only
        gives the shape and dtype of what is received.
        """
        out = mpi4jax.bcast(particles, COORDINATOR, comm=self.comm)
        self._log("particles", particles, round_idx, step, [(COORDINATOR, r) for r in range(1, self.size)])
        return out

    def collect(self, grads: jax.Array, round_idx, step) -> jax.Array | None:
        """Every client -> coordinator: its ``(K, P)`` gradients.

        Returns ``(N, K, P)`` on the coordinator (client ``i`` at row ``i - 1``,
        rank order) and None on a client. On the coordinator ``grads`` only
        gives the shape and dtype.
        """
        if self.transport == "gather":
            out = mpi4jax.gather(grads, COORDINATOR, comm=self.comm)
            result = out[1:] if self.is_coordinator else None
        elif self.is_coordinator:
            parts = [mpi4jax.recv(grads, source=r, tag=_TAG_GRADIENTS, comm=self.comm) for r in range(1, self.size)]
            result = jnp.stack(parts)
        else:
            mpi4jax.send(grads, COORDINATOR, tag=_TAG_GRADIENTS, comm=self.comm)
            result = None
        self._log("gradients", grads, round_idx, step, [(r, COORDINATOR) for r in range(1, self.size)])
        return result
