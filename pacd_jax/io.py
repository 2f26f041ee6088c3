"""Atomic output files: write to a temporary file in the same folder, fsync, rename.

A crash or a bad input never leaves a half-written ``run.json`` or figure
behind, and an existing file is replaced only by a complete new one.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on success rename it onto ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix or ".tmp")
    os.close(fd)
    tmp = Path(tmp)
    try:
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_json(path: str | os.PathLike, doc: Any) -> None:
    """Write ``doc`` as JSON atomically (NaN/inf are refused rather than written as invalid JSON)."""
    with atomic_path(path) as tmp:
        with open(tmp, "w") as fh:
            json.dump(doc, fh, allow_nan=False)
            fh.write("\n")


def read_json(path: str | os.PathLike) -> Any:
    with open(path) as fh:
        return json.load(fh)
