"""Per-rank checkpoints of an MPI run: each rank saves only its own state.

Rank 0 (the coordinator) saves its SVGD state (particles, Adam moments, step
counter) and the summaries the clients published for finished seeds; client
rank ``r`` saves its own :class:`pacd_jax.loop.RunState` (its data buffer, its
noise-free record, its copy of the round's particles). A client's data never
lands in the coordinator's file, ``DIR/rank-0.npz``.

A run's position is ``(seed index, rounds done)``. Ranks save one after the
other, so when a job dies some ranks may have saved one round more than
others; every rank therefore keeps its latest and its previous checkpoint
(``rank-<r>.npz``, ``rank-<r>.prev.npz``), and on ``--resume`` the ranks
agree (one ``allgather`` of the positions each can restore) on the latest
position all of them hold. In the communicating methods a rank cannot start
round ``t + 1``'s messages before every rank has saved round ``t``, so the
ranks are never more than one position apart and two files suffice.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pacd_jax import checkpoint


class RankStore:
    """The checkpoints of rank ``rank`` in ``directory`` (see the module docstring)."""

    def __init__(self, directory, chash: str, resume: bool, rank: int, iters: int):
        self.store = checkpoint.Store(directory, chash, resume, pattern=f"rank-{rank}.*npz")
        self.directory = self.store.directory
        self.rank = rank
        self.iters = iters
        self.current = self.directory / f"rank-{rank}.npz"
        self.previous = self.directory / f"rank-{rank}.prev.npz"
        self.position: tuple[int, int] | None = None
        self._path: Path | None = None

    def _g(self, seed_index: int, rounds: int) -> int:
        return seed_index * (self.iters + 1) + rounds

    def available(self) -> dict[int, Path]:
        """Positions this rank can restore (global round counter -> file)."""
        out = {}
        if not self.store.resume:
            return out
        for path in (self.previous, self.current):
            if path.exists():
                meta = checkpoint.read_meta(path)
                if meta.get("config_hash") != self.store.chash:
                    raise checkpoint.CheckpointError(
                        f"checkpoint {str(path)!r} was written by a run with other options (config hash "
                        f"{meta.get('config_hash')}, this run {self.store.chash}); resume with the same options or use another --checkpoint folder"
                    )
                out[self._g(int(meta["extra"]["seed_index"]), int(meta["rounds_done"]))] = path
        return out

    def agree(self, comm) -> list:
        """Collective: settle on the latest position every rank holds (none: start afresh).

        Returns what every rank sent, by rank (its restorable round positions).
        """
        mine = self.available()
        everyone = comm.allgather(sorted(mine))
        common = set(everyone[0]).intersection(*map(set, everyone[1:]))
        if common:
            g = max(common)
            self.position = divmod(g, self.iters + 1)
            self._path = mine[g]
        return everyone

    def published_summaries(self) -> list:
        """Rank 0: the ``[seed, summaries]`` of the seeds finished before the agreed position."""
        if self.position is None:
            return []
        return [tuple(v) for v in checkpoint.read_meta(self._path)["extra"].get("summaries", [])]

    def done_seed(self, seed_index: int) -> bool:
        """The seed finished before the position resumed from (its summaries are on rank 0)."""
        return self.position is not None and seed_index < self.position[0]

    def for_seed(self, seed_index: int) -> "_SeedStore":
        return _SeedStore(self, seed_index)

    def save(self, seed_index: int, state: Any, rounds_done: int, extra: dict | None = None) -> None:
        if self.current.exists():
            os.replace(self.current, self.previous)
        self.store.save(self.current.stem, state, rounds_done, {**(extra or {}), "seed_index": seed_index})

    def load(self, seed_index: int, like: Any):
        if self.position is None or self.position[0] != seed_index:
            return None
        return checkpoint.load(self._path, like, self.store.chash)


class _SeedStore:
    """The interface :func:`pacd_jax.loop.run_batch` expects, for one seed of one rank."""

    def __init__(self, parent: RankStore, seed_index: int):
        self.parent = parent
        self.seed_index = seed_index
        self.directory = parent.directory

    def save(self, name, state, rounds_done, extra=None):
        del name
        self.parent.save(self.seed_index, state, rounds_done, extra)

    def load(self, name, like):
        del name
        return self.parent.load(self.seed_index, like)
