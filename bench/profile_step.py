"""Where an SVGD step's time goes: a JAX profiler trace of the library's round, summed by kind of XLA op.

    python bench/profile_step.py --json bench/results/profile_step.json
    python bench/profile_step.py --quick --json /tmp/profile.json

The script traces ``--calls`` calls of the jitted round of ``bench/svgd_step.py``
(``methods.pacd(...).learn``, ``--steps`` SVGD steps each) with
``jax.profiler.trace``, reads the Perfetto trace, and sums the time of every
XLA operation by kind:

* ``matmul``: ``dot`` / ``dot_general`` (MLP layers, the Schur-complement inverse, SVGD kernel);
* ``lapack``: ``cholesky`` / ``triangular_solve`` (the inverse's base blocks);
* ``elementwise``: loop and reduction fusions (tanh, exp of the Gram matrix, ``G * K``, Adam);
* ``layout``: copies, concatenations, transposes, slices, bitcasts;
* ``collective``: the all-gather of the clients' messages, waiting for the
  other devices included (only with ``--devices D > 1``);
* ``other``: sort (the median heuristic), control flow and the rest.

Records: ``profile-<config>/<kind>`` with ``median_ms`` the traced time per
SVGD step in that kind of op (summed over ops; tracing slows every op, and
ops that overlap on the two cores are counted in full, so read the kinds as
shares), and ``profile-<config>/wall``, the untraced wall time per step with
the eight most expensive ops in its ``config.top_ops_ms`` and, in
``config.busy_ms_by_thread``, how long each of XLA's compute threads was
busy with ops per step (traced): XLA's CPU runtime runs independent ops of
one program side by side, so even one device keeps more than one core busy.
With ``--devices D`` the round splits the particles over D host devices as
``pacd-bo run --devices D`` does, and the records are named
``profile-<config>-devices<D>/...``.

Arithmetic, to read the times against what the machine can do:

* ``profile-<config>/wall`` has ``config.flops_per_step``: XLA's cost
  analysis of one step compiled alone (the clients' messages, the
  coordinator's update, and their sum), and ``config.gflops``, that sum
  over the wall time;
* ``profile-<config>/matmul`` has ``config.dot_flops_per_step``, the flops
  of the round's matrix products counted from its compiled HLO
  (2 x output elements x contracted elements per ``dot``; with D devices,
  D times the per-device program's, the coordinator's replicated products
  included), and
  ``config.gflops``, those flops over the products' traced time;
* ``profile-gemm-<n>``: one ``n x n`` float32 matrix product on one device
  (XLA's CPU backend runs it on all cores), the machine's large-product
  rate in ``config.gflops``.
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import math
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

KINDS = ("matmul", "lapack", "elementwise", "layout", "collective", "other")
# host-side events, and the rendezvous events nested inside a collective op
_HOST = ("$", "Thunk", "Pjit", "Common", "SlinkyThreadPool", "TfrtCpu", "PjRt", "ExecuteReplicated", "shard_args",
         "Rendezvous", "Wait", "cpp_pjit")


def kind_of(op: str) -> str:
    name = op.split(".")[0]
    if name.replace("_", "-").startswith(("all-gather", "all-reduce", "collective-permute", "all-to-all")):
        return "collective"
    if name in ("dot", "dot_general") or name.startswith("dot"):
        return "matmul"
    if name.startswith(("cholesky", "triangular_solve", "lapack")):
        return "lapack"
    layout_words = ("copy", "concatenate", "transpose", "slice", "bitcast", "broadcast", "dynamic-update-slice", "pad")
    if name.startswith(layout_words) or name.split("_")[0] in layout_words:
        return "layout"
    if "fusion" in name or name.startswith(("wrapped", "reduce", "add", "multiply", "exponential", "tanh")):
        return "elementwise"
    return "other"


_DEFINITION = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*[a-z]\w*\[([\d,]*)\]")
_DOT = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*[a-z]\w*\[([\d,]*)\]\S*\s+dot\(%?([\w.\-]+),.*?"
                  r"lhs_contracting_dims=\{([\d,]*)\}")


def _dims(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v]


def dot_flops(hlo_text: str) -> dict[str, float]:
    """Flops of every ``dot`` in an HLO module's text: ``2 x prod(output) x prod(lhs contracting dims)``.

    Instruction names are unique within a module, so an operand's shape is
    looked up from its defining line.
    """
    lines = hlo_text.splitlines()
    shapes = {m[1]: _dims(m[2]) for m in map(_DEFINITION.match, lines) if m}
    flops = {}
    for m in filter(None, map(_DOT.match, lines)):
        lhs = shapes[m[3]]
        contracted = math.prod(lhs[i] for i in _dims(m[4]))
        flops[m[1]] = 2.0 * math.prod(_dims(m[2])) * contracted
    return flops


def _flops(compiled) -> float:
    analysis = compiled.cost_analysis()
    analysis = analysis[0] if isinstance(analysis, (list, tuple)) else analysis
    return float(analysis["flops"])


def step_flops(cfg: common.StepConfig) -> dict[str, float]:
    """XLA's flop count of one SVGD step, compiled alone in its two halves (one device)."""
    import jax

    import svgd_step
    from pacd_jax import methods, sharding

    _, learner, buffers, state = svgd_step._setup(cfg, 1)
    messages = jax.jit(sharding.client_messages(learner.model))
    update = jax.jit(lambda s, g, b: learner.coordinator_update(s, g, methods.public_count(b)))
    grads = jax.eval_shape(messages, state.particles, buffers)  # shapes are all the coordinator's compile needs
    out = {
        "clients": _flops(messages.lower(state.particles, buffers).compile()),
        "coordinator": _flops(update.lower(state, grads, buffers).compile()),
    }
    out["total"] = out["clients"] + out["coordinator"]
    return out


def gemm_rate(n: int, repeats: int) -> tuple[float, list[float]]:
    """Compile time and call times of one ``n x n`` float32 product on one device."""
    import jax
    import jax.numpy as jnp

    a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
    product = jax.jit(jnp.matmul)
    return common.time_call(lambda: product(a, a), repeats, min_seconds=1.0)


class Profile(NamedTuple):
    by_kind: dict[str, float]  # traced ms per step by kind of op
    wall_ms: float  # untraced ms per step
    top: list  # the eight most expensive ops, (name, ms per step)
    busy_ms_by_thread: list[float]  # traced ms per step each compute thread spent in ops, largest first
    compile_s: float
    matmul: dict  # the products' flops and rate


def profile(cfg: common.StepConfig, steps: int, calls: int, devices: int = 1) -> Profile:
    import jax

    import svgd_step

    learn, args = svgd_step.ours_program(cfg, steps, devices)
    start = time.perf_counter()
    compiled = learn.lower(*args).compile()  # the program traced below, so the op names match its HLO
    compile_s = time.perf_counter() - start
    dots = dot_flops(compiled.as_text())
    call = lambda: compiled(*args)[0].particles  # noqa: E731
    _, times = common.time_call(call, calls)  # untraced: the trace itself slows the ops
    wall = statistics.median(times) / steps
    with tempfile.TemporaryDirectory() as tmp:
        with jax.profiler.trace(tmp, create_perfetto_trace=True):
            for _ in range(calls):
                jax.block_until_ready(call())
        (path,) = glob.glob(f"{tmp}/**/*.trace.json.gz", recursive=True)
        with gzip.open(path) as fh:
            events = json.load(fh)
    events = events["traceEvents"] if isinstance(events, dict) else events
    per_op: dict[str, float] = collections.defaultdict(float)
    per_thread: dict[tuple, float] = collections.defaultdict(float)
    for e in events:
        if e.get("ph") == "X" and "dur" in e and not e["name"].startswith(_HOST) and not e["name"].startswith("while"):
            per_op[e["name"]] += e["dur"] * 1e-3 / (calls * steps)  # ms per step
            per_thread[e.get("pid"), e.get("tid")] += e["dur"] * 1e-3 / (calls * steps)
    # threads that ran a real share of the ops (not the host thread's occasional copy)
    busy = sorted((ms for ms in per_thread.values() if ms >= 0.05 * wall * 1e3), reverse=True)
    by_kind = {k: 0.0 for k in KINDS}
    for op, ms in per_op.items():
        by_kind[kind_of(op)] += ms
    top = sorted(per_op.items(), key=lambda kv: -kv[1])[:8]
    # the products' rate inside the step: flops of the dots the trace shows over their traced time;
    # every device runs the (SPMD) program's dots, and the trace sums their time over the devices
    dots = {op: devices * f for op, f in dots.items()}
    traced = [op for op in dots if op in per_op]
    matmul = {
        "dot_flops_per_step": sum(dots.values()),
        "dots": len(dots),
        "dots_traced": len(traced),
        "gflops": sum(dots[op] for op in traced) / (sum(per_op[op] for op in traced) * 1e-3) / 1e9 if traced else 0.0,
    }
    return Profile(by_kind, wall * 1e3, top, busy, compile_s, matmul)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", required=True)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--devices", type=int, default=1, help="host devices to split the particles over, as in pacd-bo run")
    parser.add_argument("--gemm", type=int, default=1024, help="size of the square product that gives the machine's rate")
    parser.add_argument("--quick", action="store_true", help="anchor only, 2 calls of 5 steps, a 256 x 256 product")
    args = parser.parse_args(argv)
    configs = [common.ANCHOR] if args.quick else [common.ANCHOR, common.BO]
    if args.quick:
        args.steps, args.calls, args.gemm = 5, 2, 256
    if args.devices < 1 or any(c.num_particles % args.devices for c in configs):
        parser.error(f"--devices must divide K = {common.ANCHOR.num_particles}, got {args.devices}")
    from pacd_jax.sharding import request_host_devices

    request_host_devices(args.devices)  # before JAX starts
    records = []
    for cfg in configs:
        prof = profile(cfg, args.steps, args.calls, args.devices)
        flops = step_flops(cfg)
        name = f"profile-{cfg.name}" + (f"-devices{args.devices}" if args.devices > 1 else "")
        base = {**cfg.to_dict(), "steps_per_call": args.steps, "calls": args.calls, "devices": args.devices}
        wall_config = {**base, "top_ops_ms": dict(prof.top), "busy_ms_by_thread": prof.busy_ms_by_thread,
                       "flops_per_step": flops, "gflops": flops["total"] / prof.wall_ms / 1e6}
        records.append(common.record(f"{name}/wall", wall_config, [prof.wall_ms * 1e-3], prof.compile_s))
        for kind, ms in prof.by_kind.items():
            if kind == "collective" and args.devices == 1:
                continue  # one device gathers nothing
            extra = prof.matmul if kind == "matmul" else {}
            records.append(common.record(f"{name}/{kind}", {**base, "traced": True, **extra}, [ms * 1e-3], prof.compile_s))
        print(f"{name}: wall {prof.wall_ms:.3f} ms/step, {flops['total'] / 1e6:.1f} MFLOP, "
              f"{wall_config['gflops']:.1f} GFLOP/s; threads busy " + ", ".join(f"{v:.3f}" for v in prof.busy_ms_by_thread)
              + "; " + ", ".join(f"{k} {v:.3f}" for k, v in prof.by_kind.items())
              + f"; products {prof.matmul['gflops']:.1f} GFLOP/s")
    compile_s, times = gemm_rate(args.gemm, 5)
    gflops = 2.0 * args.gemm**3 / statistics.median(times) / 1e9
    records.append(common.record(f"profile-gemm-{args.gemm}", {"n": args.gemm, "dtype": "float32", "gflops": gflops}, times, compile_s))
    print(f"{args.gemm} x {args.gemm} product: {gflops:.1f} GFLOP/s")
    common.write(args.json, records, "bench/profile_step.py", argv)
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
