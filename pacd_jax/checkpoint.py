"""Checkpoints of a run's complete state, written atomically after every round.

Format: one NumPy ``.npz`` file per unit of work (a vmapped batch of seeds:
``DIR/batch-<b>.npz``; an MPI rank: ``DIR/rank-<r>.npz``) holding every leaf
of the loop's state pytree as an array (``leaf_00000``, ...) and a JSON
metadata record (``meta``, stored as UTF-8 bytes) with the format version,
the configuration hash, the number of completed rounds and the leaves'
shapes and dtypes.

Why ``.npz`` + JSON rather than orbax-checkpoint: the state is a small pytree
of host-sized arrays (particles, Adam moments, GP hyperparameters, data
buffers, counters), so NumPy's own container stores it exactly (bit for bit,
any dtype) with no extra dependency and no background threads; the files are
readable by any NumPy on any platform; and one file per writer makes the
write atomic with one ``rename`` (:func:`pacd_jax.io.atomic_path`: temporary
file, fsync, rename), so a crash leaves either the previous complete
checkpoint or the new one, never a torn one. The pytree structure is not
stored: the loader rebuilds it from a freshly initialised state of the same
configuration and checks every leaf's shape and dtype against it.

PRNG state: every key of a run is derived from (seed, purpose, client,
round) (:mod:`pacd_jax.keys`), so the round counter is the only PRNG-relevant
counter and a resumed run draws exactly the keys the uninterrupted run draws.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import jax
import numpy as np

from pacd_jax import io

FORMAT_VERSION = 1

#: options that do not change what an uninterrupted run computes, so a run may
#: be resumed with a different value (e.g. ``--on-bad-value skip`` after a run
#: stopped on a bad value).
RESUMABLE_OPTIONS = ("on_bad_value",)


class CheckpointError(ValueError):
    """A checkpoint cannot be used: other configuration, other state layout, or unreadable."""


def config_hash(config, extra: dict | None = None) -> str:
    """SHA-256 of the run's options (minus :data:`RESUMABLE_OPTIONS`) and ``extra`` (e.g. the task)."""
    options = {k: v for k, v in config.identity().items() if k not in RESUMABLE_OPTIONS}
    text = json.dumps({"config": options, "extra": extra or {}}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def save(path: str | os.PathLike, state: Any, rounds_done: int, chash: str, extra: dict | None = None) -> None:
    """Write ``state`` (any pytree of arrays) and its metadata to ``path`` atomically."""
    leaves = [np.asarray(a) for a in jax.tree_util.tree_leaves(state)]
    meta = {
        "format": FORMAT_VERSION,
        "config_hash": chash,
        "rounds_done": int(rounds_done),
        "leaves": [[list(a.shape), a.dtype.str] for a in leaves],
        "extra": extra or {},
    }
    arrays = {f"leaf_{j:05d}": a for j, a in enumerate(leaves)}
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    with io.atomic_path(path) as tmp:
        with open(tmp, "wb") as fh:
            np.savez(fh, **arrays)


def read_meta(path: str | os.PathLike) -> dict:
    try:
        with np.load(path) as z:
            return json.loads(bytes(z["meta"]).decode())
    except Exception as exc:  # a foreign or damaged file
        raise CheckpointError(f"cannot read checkpoint {str(path)!r}: {exc}") from None


def load(path: str | os.PathLike, like: Any, chash: str) -> tuple[Any, int, dict]:
    """Read a checkpoint into the structure of ``like`` (arrays or ``jax.ShapeDtypeStruct``); returns ``(state, rounds_done, extra)``.

    Raises:
        CheckpointError: the file was written for another configuration, or its
            arrays do not match ``like``'s leaves in number, shape or dtype.
    """
    meta = read_meta(path)
    if meta.get("format") != FORMAT_VERSION:
        raise CheckpointError(f"checkpoint {str(path)!r} has format {meta.get('format')!r}, expected {FORMAT_VERSION}")
    if meta.get("config_hash") != chash:
        raise CheckpointError(
            f"checkpoint {str(path)!r} was written by a run with other options (config hash "
            f"{meta.get('config_hash')}, this run {chash}); resume with the same options or use another --checkpoint folder"
        )
    like_leaves, treedef = jax.tree_util.tree_flatten(like)
    try:
        with np.load(path) as z:
            leaves = [z[f"leaf_{j:05d}"] for j in range(len(meta["leaves"]))]
    except (KeyError, OSError, ValueError, EOFError) as exc:  # an archive damaged after its metadata was read
        raise CheckpointError(f"checkpoint {str(path)!r} is damaged ({exc}); remove it or use another --checkpoint folder") from None
    if len(leaves) != len(like_leaves):
        raise CheckpointError(f"checkpoint {str(path)!r} holds {len(leaves)} arrays, this run's state has {len(like_leaves)}")
    for j, (a, b) in enumerate(zip(leaves, like_leaves)):
        shape, dtype = tuple(b.shape), np.dtype(b.dtype)  # arrays or jax.ShapeDtypeStruct
        if a.shape != shape or a.dtype != dtype:
            raise CheckpointError(
                f"checkpoint {str(path)!r}: array {j} is {a.dtype}{list(a.shape)}, this run expects {dtype}{list(shape)}"
            )
    state = jax.tree_util.tree_unflatten(treedef, [jax.numpy.asarray(a) for a in leaves])
    return state, int(meta["rounds_done"]), meta.get("extra", {})


class Store:
    """The checkpoints of one run in folder ``directory``.

    Args:
        directory: the ``--checkpoint`` folder (created if needed).
        chash: :func:`config_hash` of the run.
        resume: continue from the checkpoints found; without it a folder that
            already holds checkpoints is refused (nothing is overwritten by accident).
        pattern: the files of this writer (an MPI rank checks only its own).
    """

    def __init__(self, directory: str | os.PathLike, chash: str, resume: bool, pattern: str = "*.npz"):
        self.directory = Path(directory)
        self.chash = chash
        self.resume = resume
        if self.directory.exists() and not self.directory.is_dir():
            raise CheckpointError(f"--checkpoint {str(self.directory)!r} exists and is not a folder")
        # (not the hidden temporary files of an interrupted atomic write)
        existing = sorted(p for p in self.directory.glob(pattern) if not p.name.startswith(".")) if self.directory.exists() else []
        if existing and not resume:
            raise CheckpointError(
                f"--checkpoint {str(self.directory)!r} already holds a checkpoint; pass --resume to continue it or choose an empty folder"
            )
        self.directory.mkdir(parents=True, exist_ok=True)

    def path(self, name: str) -> Path:
        return self.directory / f"{name}.npz"

    def save(self, name: str, state: Any, rounds_done: int, extra: dict | None = None) -> None:
        save(self.path(name), state, rounds_done, self.chash, extra)

    def load(self, name: str, like: Any):
        """``(state, rounds_done, extra)`` from checkpoint ``name``, or None (no checkpoint, or not resuming)."""
        path = self.path(name)
        if not self.resume or not path.exists():
            return None
        return load(path, like, self.chash)
