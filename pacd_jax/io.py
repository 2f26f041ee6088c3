"""Atomic output files (write to a temporary file in the same folder, fsync, rename) and error lines.

A crash or a bad input never leaves a half-written ``run.json`` or figure
behind, and an existing file is replaced only by a complete new one.
"""

from __future__ import annotations

import contextlib
import json
import io
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterator


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on success rename it onto ``path``.

    The file gets the permissions a plain ``open(path, "w")`` would give it
    (an existing file's, else ``0o666`` less the umask), not ``mkstemp``'s
    owner-only ``0o600``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix or ".tmp")
    os.close(fd)
    tmp = Path(tmp)
    try:
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp, path.stat().st_mode & 0o7777 if path.exists() else 0o666 & ~_umask())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def check_output_folder(path: str | os.PathLike, flag: str = "--out") -> None:
    """Raise ValueError (one line) unless ``path`` is, or can be made, a writable folder.

    Checked before a run starts, so that hours of work are not lost to an
    output path that fails only when the results are written; nothing is
    created (a probe folder in the nearest existing ancestor is removed at once).
    """
    target = Path(path).absolute()
    if target.exists() and not target.is_dir():
        raise ValueError(f"{flag} {str(path)!r} exists and is not a folder")
    ancestor = target
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ValueError(f"{flag} {str(path)!r} cannot be created: {str(ancestor)!r} is not a folder")
    try:
        os.rmdir(tempfile.mkdtemp(dir=ancestor, prefix=".pacd-bo-probe-"))
    except OSError as exc:
        raise ValueError(f"{flag} {str(path)!r} cannot be written: {exc.strerror or exc}") from None


def _umask() -> int:
    mask = os.umask(0o022)  # reading the umask means setting it; put it back at once
    os.umask(mask)
    return mask


def write_json(path: str | os.PathLike, doc: Any) -> None:
    """Write ``doc`` as JSON atomically (NaN/inf are refused rather than written as invalid JSON)."""
    with atomic_path(path) as tmp:
        with open(tmp, "w") as fh:
            json.dump(doc, fh, allow_nan=False)
            fh.write("\n")


def replace_marked_block(path: str | os.PathLike, name: str, body: str) -> None:
    """Replace the text between ``<!-- name:begin -->`` and ``<!-- name:end -->`` in ``path`` with ``body``, atomically.

    The generated tables in README.md live between such markers; the markers
    themselves are kept, everything else in the file is left byte for byte.

    Raises:
        ValueError: if the file lacks either marker or has them out of order.
    """
    path = Path(path)
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    text = path.read_text()
    i, j = text.find(begin), text.find(end)
    if i < 0 or j < 0 or j < i:
        raise ValueError(f"{path.name} has no {begin} ... {end} block")
    with atomic_path(path) as tmp:
        tmp.write_text(f"{text[:i]}{begin}\n{body.strip(chr(10))}\n{text[j:]}")


def read_json(path: str | os.PathLike) -> Any:
    with open(path) as fh:
        return json.load(fh)


def error_line(text: str) -> None:
    """Write ``text`` and its newline to stderr in one ``write`` call.

    Under ``mpiexec`` every rank's stderr is merged by the process manager;
    ``print`` may issue the text and the newline as two writes, and another
    rank's line can land between them.  One write of a short line keeps each
    rank's error on a line of its own.
    """
    line = text.rstrip("\n") + "\n"
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, io.UnsupportedOperation):  # captured stderr (pytest, notebooks)
        sys.stderr.write(line)
        sys.stderr.flush()
        return
    sys.stderr.flush()
    data = line.encode("utf-8", "replace")
    while data:
        data = data[os.write(fd, data):]
