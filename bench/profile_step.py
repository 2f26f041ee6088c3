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
* ``other``: sort (the median heuristic), control flow and the rest.

Records: ``profile-<config>/<kind>`` with ``median_ms`` the traced time per
SVGD step in that kind of op (summed over ops; tracing slows every op, and
ops that overlap on the two cores are counted in full, so read the kinds as
shares), and ``profile-<config>/wall``, the untraced wall time per step with
the eight most expensive ops in its ``config.top_ops_ms``.
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import sys
import statistics
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

KINDS = ("matmul", "lapack", "elementwise", "layout", "other")
_HOST = ("$", "Thunk", "Pjit", "Common", "SlinkyThreadPool", "TfrtCpu", "PjRt", "ExecuteReplicated", "shard_args")


def kind_of(op: str) -> str:
    name = op.split(".")[0]
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


def profile(cfg: common.StepConfig, steps: int, calls: int) -> tuple[dict, float, list]:
    import jax

    import svgd_step

    call = svgd_step.ours(cfg, steps)
    compile_s, times = common.time_call(call, calls)  # untraced: the trace itself slows the ops
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
    for e in events:
        if e.get("ph") == "X" and "dur" in e and not e["name"].startswith(_HOST) and not e["name"].startswith("while"):
            per_op[e["name"]] += e["dur"] * 1e-3 / (calls * steps)  # ms per step
    by_kind = {k: 0.0 for k in KINDS}
    for op, ms in per_op.items():
        by_kind[kind_of(op)] += ms
    top = sorted(per_op.items(), key=lambda kv: -kv[1])[:8]
    return by_kind, wall * 1e3, top, compile_s


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", required=True)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="anchor only, 2 calls of 5 steps")
    args = parser.parse_args(argv)
    configs = [common.ANCHOR] if args.quick else [common.ANCHOR, common.BO]
    if args.quick:
        args.steps, args.calls = 5, 2
    records = []
    for cfg in configs:
        by_kind, wall_ms, top, compile_s = profile(cfg, args.steps, args.calls)
        base = {**cfg.to_dict(), "steps_per_call": args.steps, "calls": args.calls}
        records.append(common.record(f"profile-{cfg.name}/wall", {**base, "top_ops_ms": dict(top)}, [wall_ms * 1e-3], compile_s))
        for kind, ms in by_kind.items():
            records.append(common.record(f"profile-{cfg.name}/{kind}", {**base, "traced": True}, [ms * 1e-3], compile_s))
        print(f"{cfg.name}: wall {wall_ms:.3f} ms/step; " + ", ".join(f"{k} {v:.3f}" for k, v in by_kind.items()))
    common.write(args.json, records, "bench/profile_step.py", argv)
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
