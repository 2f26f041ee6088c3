"""Shared pieces of the microbenchmarks: the named configurations, timing, JSON records.

Records follow DESIGN.md section 9:
``{"name", "config", "median_ms", "min_ms", "compile_s", "baselines": {name: median_ms}}``;
a file is a JSON list of them. Each record also carries ``repeats`` and
``meta`` (``command``, ``commit``, ``machine``) so that it says how it was made.
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@dataclasses.dataclass(frozen=True)
class StepConfig:
    """One SVGD-step workload: N clients with m points each in d dimensions, K particles."""

    name: str
    num_clients: int
    points: int
    dim: int
    num_particles: int = 10
    hidden: tuple[int, ...] = (32, 32)
    features: int = 2

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "hidden": list(self.hidden)}


#: The PACOH anchor (meta_learning_pacoh's sinusoid set-up; 2342 parameters per particle)
#: and the realistic BO configuration (5 Hartmann/Wing-Weight clients after 100 rounds).
ANCHOR = StepConfig("anchor-5x20x1d", num_clients=5, points=20, dim=1)
BO = StepConfig("bo-5x110x6d", num_clients=5, points=110, dim=6)
NAMED = {c.name: c for c in (ANCHOR, BO)}


def block(tree: Any) -> Any:
    import jax

    return jax.block_until_ready(tree)


def time_call(fn: Callable[[], Any], repeats: int, min_seconds: float = 0.0) -> tuple[float, list[float]]:
    """Compile (first call, timed separately), then time ``repeats`` calls.

    Returns:
        ``(compile_s, times_s)``; calls continue past ``repeats`` until
        ``min_seconds`` have elapsed, so fast kernels get enough samples.
    """
    t0 = time.perf_counter()
    block(fn())
    compile_s = time.perf_counter() - t0
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < repeats or time.perf_counter() - start < min_seconds:
        t0 = time.perf_counter()
        block(fn())
        times.append(time.perf_counter() - t0)
    return compile_s, times


def record(name: str, config: dict, per_call_s: list[float], compile_s: float, per: int = 1, **extra) -> dict:
    """A JSON record with median and min in milliseconds per unit (``per`` units per call)."""
    ms = [1e3 * t / per for t in per_call_s]
    return {
        "name": name,
        "config": config,
        "median_ms": statistics.median(ms),
        "min_ms": min(ms),
        "compile_s": compile_s,
        "repeats": len(ms),
        "baselines": {},
        **extra,
    }


def write(path: str, records: list[dict], script: str, argv: list[str] | None = None) -> None:
    from pacd_jax import io
    from pacd_jax.provenance import command, commit, machine

    meta = {"command": command(script, argv), "commit": commit(), "machine": machine()}
    io.write_json(path, [{**r, "meta": meta} for r in records])
