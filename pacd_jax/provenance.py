"""Where a result came from: the commit, the machine and the command (for committed results).

Every figure or table committed under ``benchmarks/results/`` or ``bench/results/``
records these, so that a reader can rerun exactly what produced it.
"""

from __future__ import annotations

import platform
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def machine() -> str:
    """OS, CPU model and count, Python and JAX versions, as one line."""
    import jax

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            names = [line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")]
        cpu = f"{names[0]} x{len(names)}" if names else cpu
    except OSError:
        pass
    return f"{platform.system()} {platform.release()}, {cpu}, python {platform.python_version()}, jax {jax.__version__}"


def commit(root: Path = ROOT) -> str:
    """The short hash of HEAD, with ``+dirty`` when tracked files differ from it.

    Committed results (``bench/results``, ``benchmarks/results``) and
    ``README.md`` (whose result blocks report scripts rewrite) do not count:
    a script that rewrites one of them, or a run after another script has,
    still ran the committed code.
    """
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True, check=True).stdout.strip()
        outputs = [":(exclude)bench/results", ":(exclude)benchmarks/results", ":(exclude)README.md"]
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".", *outputs],
                               cwd=root, capture_output=True, text=True).stdout.strip()
        return rev + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def command(script: str, argv: list[str] | None = None) -> str:
    """The command line that reproduces this run: ``python SCRIPT ARGS``."""
    args = sys.argv[1:] if argv is None else list(argv)
    return " ".join(["python", script, *map(shlex.quote, args)])
