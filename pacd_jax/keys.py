"""PRNG streams derived from (seed, purpose, client, round, step).

Every random draw of a run comes from a key that depends only on these
integers, never on the order in which a backend happens to compute things,
so the single-process and the MPI backends draw the same numbers.
"""

from __future__ import annotations

import jax

Array = jax.Array

#: One integer per purpose; new purposes get new numbers, old ones never change.
STREAMS = {
    "design": 1,  # collaborative LHS initial design
    "particles": 2,  # initial SVGD particles (hyper-prior draws)
    "propose": 3,  # acquisition-maximiser candidates
    "noise": 4,  # observation noise
    "dp": 5,  # differential-privacy noise
    "attack": 6,  # DLG restarts
}


def stream(seed: int | Array, name: str) -> Array:
    """The root key of one purpose for one seed."""
    return jax.random.fold_in(jax.random.key(seed), STREAMS[name])


def client_key(seed: int | Array, name: str, client: int | Array, round_idx: int | Array) -> Array:
    """Key of ``name`` for ``client`` at BO round ``round_idx`` (round -1 = initial design)."""
    key = jax.random.fold_in(stream(seed, name), client)
    return jax.random.fold_in(key, round_idx + 1)


def step_key(seed: int | Array, name: str, client: int | Array, round_idx: int | Array, step: int | Array) -> Array:
    """Key of ``name`` for ``client`` at SVGD ``step`` of BO round ``round_idx``."""
    return jax.random.fold_in(client_key(seed, name, client, round_idx), step)
