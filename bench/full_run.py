"""Whole-run wall time: PACD-BO (and baselines) over T rounds, with where a round's time goes.

For each (benchmark, method) the script runs the library's own
``experiment.run`` once to compile, then times one more identical run, and
separately times the two halves of a round on the final state: the method's
``learn`` (PACD-BO: the round's SVGD steps; Independent: the GP refits) and
``propose`` (the acquisition maximiser of every client).

    python bench/full_run.py --json bench/results/full_run.json                 # Hartmann-6, PACD-BO, T = 100
    python bench/full_run.py --benchmarks hartmann6,branin --methods pacd,independent --json out.json
    python bench/full_run.py --quick --json /tmp/full_run.json                  # T = 3, small settings

Records: ``run-<benchmark>-<method>-T<T>`` with ``median_ms`` the wall time
of the whole run (compile excluded; ``compile_s`` is the first run's extra
time), and ``config.learn_ms`` / ``config.propose_ms``, the time of one
round's halves at the end of the run (``m0 + T`` points per client).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402


def time_run(benchmark: str, method: str, iters: int, seeds: int, quick: bool) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from pacd_jax import experiment, loop, methods, tasks
    from pacd_jax.config import RunConfig

    small = dict(num_particles=3, hidden=(8, 8), svgd_steps=5, svgd_steps_init=20, num_candidates=64, num_local=16,
                 num_refine=2, refine_steps=5, gp_fit_steps=10) if quick else {}
    config = RunConfig(benchmark=benchmark, method=method, iters=iters, seeds=tuple(range(seeds)), **small)
    t0 = time.perf_counter()
    experiment.run(config)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    experiment.run(config)
    wall = time.perf_counter() - t0

    # the halves of one round, on a state with the buffers full (the run's last round)
    fam = tasks.make(benchmark, num_clients=config.num_clients, seed=0)
    problem, params = loop.problem_from_family(fam, iters, config.init_points, config.noise_std)
    method_fns = methods.build(config, problem.dim)
    seed = jnp.asarray(0, jnp.int32)
    state = jax.jit(lambda s, p: loop.initial_state(problem, method_fns, s, p, jnp.float32))(seed, params)
    rng = np.random.default_rng(0)
    X = jnp.asarray(rng.uniform(size=state.buffers.X.shape), jnp.float32)
    y = jnp.asarray(rng.normal(size=state.buffers.y.shape), jnp.float32)
    buffers = state.buffers._replace(X=X, y=y, count=jnp.full_like(state.buffers.count, problem.capacity - 1))
    last = jnp.asarray(iters - 1, jnp.int32)
    learn = jax.jit(method_fns.learn)
    propose = jax.jit(method_fns.propose)
    model = learn(state.model, buffers, last)
    keys_ = problem.client_keys(seed, "propose", last)
    _, learn_t = common.time_call(lambda: learn(state.model, buffers, last), 3)
    _, propose_t = common.time_call(lambda: propose(model, buffers, keys_), 3)
    rec = common.record(
        f"run-{benchmark}-{method}-T{iters}",
        {"benchmark": benchmark, "method": method, "iters": iters, "seeds": seeds, "clients": config.num_clients,
         "quick": quick, "learn_ms": 1e3 * float(np.median(learn_t)), "propose_ms": 1e3 * float(np.median(propose_t))},
        [wall], max(first - wall, 0.0),
    )
    return rec


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", required=True, help="output file (a JSON list of records)")
    parser.add_argument("--benchmarks", default="hartmann6", help="comma-separated (default hartmann6)")
    parser.add_argument("--methods", default="pacd", help="comma-separated (default pacd)")
    parser.add_argument("--iters", type=int, default=100, help="BO rounds T (default 100)")
    parser.add_argument("--seeds", type=int, default=1, help="seeds, vectorised in one run (default 1)")
    parser.add_argument("--quick", action="store_true", help="T = 3 with small settings (for tests)")
    args = parser.parse_args(argv)
    if args.quick:
        args.iters = 3
    records = []
    for benchmark in args.benchmarks.split(","):
        for method in args.methods.split(","):
            rec = time_run(benchmark, method, args.iters, args.seeds, args.quick)
            records.append(rec)
            c = rec["config"]
            print(f"{rec['name']:36s} {rec['median_ms'] / 1e3:7.1f} s  (compile {rec['compile_s']:.1f} s; "
                  f"last round: learn {c['learn_ms']:.0f} ms, propose {c['propose_ms']:.0f} ms)", flush=True)
    common.write(args.json, records, "bench/full_run.py", argv)
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
