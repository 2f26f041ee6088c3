"""Wall time per SVGD step: the MPI backend (1 coordinator + N client ranks) against the vmap backend.

Both sides run the library's own round functions, not a re-implementation:
the vmap side jits ``methods.pacd(...).learn`` (all clients vmapped in one
process); the MPI side jits the coordinator's round
(``distributed.backend.coordinator_round_fn``) on rank 0 and each client's
``learn`` (``distributed.backend.client_method``) on ranks 1..N. One call is
one BO round of ``--steps`` SVGD steps (each a broadcast, the clients'
gradients, a gather and the update) plus the round's final broadcast; the
time per step is the call's time divided by ``--steps``.

    python bench/mpi_step.py --json bench/results/mpi_step.json          # both configs, gather and p2p
    python bench/mpi_step.py --quick --json /tmp/mpi_step.json           # fewer repeats

Run plainly, the script times the vmap baseline in this process, then starts
``mpiexec -n N+1`` on itself for the MPI side (the two cannot share a
process) and writes one list of records with ``baselines: {"vmap": ms}`` on
the MPI records. Under mpiexec every rank is pinned to one core
(:mod:`pacd_jax.distributed.process`); with more ranks than cores they share,
and a waiting rank polls (MPICH's default); ``--mpi-waits spin,yield`` times
polling against sleeping between polls side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402


def _run_config(cfg: common.StepConfig, steps: int, transport: str = "gather"):
    from pacd_jax.config import RunConfig

    return RunConfig(
        num_clients=cfg.num_clients, num_particles=cfg.num_particles, hidden=cfg.hidden, features=cfg.features,
        svgd_steps=steps, svgd_steps_init=steps, init_points=cfg.points, iters=1, transport=transport,
    )


def _client_buffer(cfg: common.StepConfig, client_id: int):
    """Client ``client_id``'s ``m`` points: uniform in the unit box, a smooth function plus noise."""
    import jax
    import jax.numpy as jnp

    from pacd_jax.client import append, empty_buffer

    kx, ky = jax.random.split(jax.random.fold_in(jax.random.key(1234), client_id))
    X = jax.random.uniform(kx, (cfg.points, cfg.dim))
    y = jnp.sin(6.0 * X).sum(-1) + 0.3 * client_id + 0.05 * jax.random.normal(ky, (cfg.points,))
    return append(empty_buffer(cfg.points, cfg.dim), X, y)


def time_vmap(cfg: common.StepConfig, steps: int, repeats: int) -> dict:
    import jax
    import jax.numpy as jnp

    from pacd_jax import methods

    config = _run_config(cfg, steps)
    method = methods.pacd(config, cfg.dim)
    buffers = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *[_client_buffer(cfg, i) for i in range(cfg.num_clients)])
    state = method.init(jnp.asarray(0), buffers)
    learn = jax.jit(method.learn)
    round_idx = jnp.asarray(1, jnp.int32)
    compile_s, times = common.time_call(lambda: learn(state, buffers, round_idx).particles, repeats)
    return common.record(f"{cfg.name}/vmap", {**cfg.to_dict(), "steps_per_call": steps, "backend": "vmap"},
                         times, compile_s, per=steps)


def time_mpi(cfg: common.StepConfig, steps: int, repeats: int, transport: str, wait: str = "default") -> dict | None:
    """Run on every rank of a job with N + 1 ranks; returns the record on rank 0."""
    import jax
    import jax.numpy as jnp
    from mpi4py import MPI

    from pacd_jax import methods
    from pacd_jax.distributed.backend import client_method, coordinator_round_fn
    from pacd_jax.distributed.channel import Channel

    world = MPI.COMM_WORLD
    config = _run_config(cfg, steps, transport)
    channel = Channel(world.Clone(), transport)
    round_idx = jnp.asarray(1, jnp.int32)
    if channel.is_coordinator:
        learner = methods.meta_learner(config, cfg.dim)
        round_fn = coordinator_round_fn(config, learner, channel, cfg.points)
        state = learner.init(jnp.asarray(0), jnp.float32)
        call = lambda: round_fn(state, round_idx).particles
    else:
        method = client_method(config, cfg.dim, channel)
        buffers = jax.tree_util.tree_map(lambda a: a[None], _client_buffer(cfg, channel.rank - 1))
        particles = method.init(None, buffers)
        learn = jax.jit(method.learn)
        call = lambda: learn(particles, buffers, round_idx)

    def synchronised():
        world.Barrier()  # every repeat starts together, so rank 0 times one whole cycle
        return call()

    compile_s, times = common.time_call(synchronised, repeats)
    if not channel.is_coordinator:
        return None
    suffix = "" if wait == "default" else f"-{wait}"
    return common.record(
        f"{cfg.name}/mpi-{transport}{suffix}",
        {**cfg.to_dict(), "steps_per_call": steps, "backend": "mpi", "transport": transport, "ranks": world.Get_size(),
         "mpi_wait": wait, "heavy_yield": os.environ.get(HEAVY_YIELD, "0") not in ("", "0")},
        times, compile_s, per=steps,
    )


def worker(args) -> None:
    from mpi4py import MPI

    from pacd_jax.distributed.process import pin_one_core_per_rank

    pin_one_core_per_rank(MPI.COMM_WORLD.Get_rank())
    records = []
    for name in args.configs:
        for transport in args.transports:
            rec = time_mpi(common.NAMED[name], args.steps, args.repeats, transport, args.wait)
            if rec is not None:
                records.append(rec)
                print(f"{rec['name']:32s} median {rec['median_ms']:8.3f} ms/step  min {rec['min_ms']:8.3f}", flush=True)
    if MPI.COMM_WORLD.Get_rank() == 0:
        Path(args.json).write_text(json.dumps(records))


#: MPICH's switch between polling and sleeping while a rank waits in a blocking call
HEAVY_YIELD = "MPIR_CVAR_ENABLE_HEAVY_YIELD"
#: how a rank waits: as the environment says (MPICH polls unless told otherwise), polling, sleeping
MPI_WAITS = {"default": None, "spin": "0", "yield": "1"}


def run_mpi(configs: list[str], transports: list[str], steps: int, repeats: int, waits=("default",)) -> list[dict]:
    """Time the MPI side: one ``mpiexec -n N+1`` job of this script per client count and wait mode; returns its records.

    ``waits``: keys of :data:`MPI_WAITS`; "default" leaves the environment
    as it is, "spin" and "yield" set MPICH's ``MPIR_CVAR_ENABLE_HEAVY_YIELD``
    to 0 or 1 for the job and add ``-spin``/``-yield`` to the record names."""
    bindir = Path(sys.executable).parent
    mpiexec = shutil.which("mpiexec", path=str(bindir)) or shutil.which("mpiexec")
    if mpiexec is None:
        raise SystemExit("no mpiexec found: install the mpi extra (pip install -e '.[mpi]')")
    records = []
    with tempfile.TemporaryDirectory() as tmp:
        for wait in waits:
            for n_ranks in sorted({common.NAMED[n].num_clients + 1 for n in configs}):
                names = [n for n in configs if common.NAMED[n].num_clients + 1 == n_ranks]
                part = Path(tmp) / f"mpi-{n_ranks}-{wait}.json"
                cmd = [mpiexec, "-n", str(n_ranks), sys.executable, str(Path(__file__).resolve()), "--worker", "--json", str(part),
                       "--configs", ",".join(names), "--transports", ",".join(transports),
                       "--steps", str(steps), "--repeats", str(repeats), "--mpi-waits", wait]
                env = {**os.environ, "PATH": os.pathsep.join([str(bindir), os.environ.get("PATH", "")])}
                if MPI_WAITS[wait] is not None:
                    env[HEAVY_YIELD] = MPI_WAITS[wait]
                subprocess.run(cmd, check=True, env=env)
                records.extend(json.loads(part.read_text()))
    return records


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", required=True, help="output file (a JSON list of records)")
    parser.add_argument("--configs", default=",".join(common.NAMED), help="comma-separated config names (default: all)")
    parser.add_argument("--transports", default="gather,p2p", help="MPI transports to time (default gather,p2p)")
    parser.add_argument("--steps", type=int, default=20, help="SVGD steps per timed call (default 20)")
    parser.add_argument("--repeats", type=int, default=20, help="timed calls per record (default 20)")
    parser.add_argument("--quick", action="store_true", help="5 repeats of 10 steps")
    parser.add_argument("--mpi-waits", default="default",
                        help="comma-separated: default (the environment's setting), spin, yield (MPICH's "
                             "MPIR_CVAR_ENABLE_HEAVY_YIELD=0/1); each is one set of MPI records (default: default)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.configs = [c for c in args.configs.split(",") if c]
    args.transports = [t for t in args.transports.split(",") if t]
    args.mpi_waits = [w for w in args.mpi_waits.split(",") if w]
    bad = [w for w in args.mpi_waits if w not in MPI_WAITS]
    if bad or not args.mpi_waits:
        parser.error(f"unknown --mpi-waits {bad[0] if bad else ''!r}; choose from {', '.join(MPI_WAITS)}")
    unknown = [c for c in args.configs if c not in common.NAMED]
    if unknown:
        parser.error(f"unknown config {unknown[0]!r}; choose from {', '.join(common.NAMED)}")
    if args.quick:
        args.steps, args.repeats = 10, 5
    if args.worker:
        args.wait = args.mpi_waits[0]
        worker(args)
        return 0

    records = []
    for name in args.configs:
        rec = time_vmap(common.NAMED[name], args.steps, args.repeats)
        records.append(rec)
        print(f"{rec['name']:32s} median {rec['median_ms']:8.3f} ms/step  min {rec['min_ms']:8.3f}", flush=True)

    vmap_ms = {r["name"].split("/")[0]: r["median_ms"] for r in records}
    for rec in run_mpi(args.configs, args.transports, args.steps, args.repeats, args.mpi_waits):
        rec["baselines"] = {"vmap": vmap_ms[rec["name"].split("/")[0]]}
        records.append(rec)
    common.write(args.json, records, "bench/mpi_step.py", argv)
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
