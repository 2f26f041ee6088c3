"""Per-rank process set-up that must happen before JAX initialises its CPU client."""

from __future__ import annotations

import os


def pin_one_core_per_rank(rank: int) -> set[int] | None:
    """Restrict this process to one of the cores it may use (round-robin by rank).

    XLA sizes its CPU thread pool from the process's CPU affinity, and
    ``--xla_cpu_multi_thread_eigen=false`` does not stop it from running
    matrix products on several threads (measured: CPU time / wall time 1.95
    on 2 cores with the flag, 1.0 with a one-core affinity). With more ranks
    than cores every rank should compute on one thread, or per-step timings
    mean nothing and ranks fight over cores. Call before the first JAX
    computation; set ``PACD_NO_PIN=1`` to keep the inherited affinity.

    Returns:
        The new affinity, or None when pinning is off or unsupported.
    """
    if os.environ.get("PACD_NO_PIN") == "1" or not hasattr(os, "sched_setaffinity"):
        return None
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) <= 1:
        return set(allowed)
    core = {allowed[rank % len(allowed)]}
    os.sched_setaffinity(0, core)
    return core


def world_rank() -> int:
    """This process's rank in MPI_COMM_WORLD (initialises MPI; does not import JAX)."""
    from mpi4py import MPI

    return MPI.COMM_WORLD.Get_rank()
