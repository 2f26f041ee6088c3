"""What this installation is made of: package versions, the MPI library, devices, precision.

``pacd-bo info`` prints :func:`collect`; attach its output to a bug report.
"""

from __future__ import annotations

import importlib.metadata
import platform
import sys

#: Distributions reported by :func:`collect` (name on PyPI -> label).
PACKAGES = ("pacd-jax", "jax", "jaxlib", "optax", "flax", "chex", "numpy", "scipy", "mpi4jax", "mpi4py", "dp-accounting")


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def mpi_library() -> str | None:
    """The MPI library's own version string, or None without mpi4py.

    ``MPI_Get_library_version`` may be called before ``MPI_Init``, so this does
    not start MPI when it is not already running (a plain ``pacd-bo info`` stays
    a single process that any launcher, or none, can run).
    """
    try:
        import mpi4py
    except ImportError:
        return None
    if "mpi4py.MPI" not in sys.modules:
        mpi4py.rc.initialize = False
        mpi4py.rc.finalize = False
    try:
        from mpi4py import MPI
    except Exception as exc:  # a broken MPI shared library is worth reporting, not a crash
        return f"unavailable ({type(exc).__name__}: {exc})"
    lines = [line.strip() for line in MPI.Get_library_version().splitlines() if line.strip()]
    return lines[0] if lines else "unknown"  # the first line names the library and version


def collect() -> dict:
    """Versions, MPI library, JAX backend and devices, and whether float64 is enabled."""
    import jax

    return {
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.release()} ({platform.machine()})",
        "versions": {name: _version(name) for name in PACKAGES},
        "mpi_library": mpi_library(),
        "jax_backend": jax.default_backend(),
        "devices": [f"{d.platform}:{d.id} {d.device_kind}" for d in jax.devices()],
        "x64": bool(jax.config.read("jax_enable_x64")),
    }


def format_info(info: dict) -> str:
    """Aligned ``key: value`` lines for the terminal."""
    rows = [("python", info["python"]), ("platform", info["platform"])]
    rows += [(name, version or "not installed") for name, version in info["versions"].items()]
    rows += [
        ("MPI library", info["mpi_library"] or "not available (install the mpi extra)"),
        ("JAX backend", info["jax_backend"]),
        ("devices", ", ".join(info["devices"])),
        ("float64", "on" if info["x64"] else "off (pass --x64 to a command, or set JAX_ENABLE_X64=1)"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)
