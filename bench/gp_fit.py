"""The Independent/CBOC baselines' GP fit for a whole round, against the vmapped fixed-step fit it replaced.

Every round, each of the table's seeds x clients refits its GP's MAP
hyperparameters from two starts (:func:`pacd_jax.standard_gp.fit`). The
library runs the batch one fit after another (``sequential_vmap``), each
L-BFGS stopping on scipy's relative-decrease rule. The baseline in the same
run is the previous version: both starts and the whole batch in one
``vmap`` through a fixed number of L-BFGS iterations, so every member runs
as long as the slowest, and a converged float32 fit spends its line
search's 20 evaluations per iteration on round-off.

    python bench/gp_fit.py --json bench/results/gp_fit.json    # 10 seeds x 5 clients, m = 110, Hartmann-6
    python bench/gp_fit.py --quick --json /tmp/gp_fit.json     # small settings (tests)

Records: ``gp-fit-<S>x<N>x<m>x<d>d-<dtype>``, ``median_ms`` per round (all
S x N fits); ``baselines.vmapped-fixed-steps``; ``objective`` holds both
versions' mean MAP objective over the batch (the library's must not be worse
beyond round-off).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402


def batch_data(benchmark: str, seeds: int, clients: int, points: int, capacity: int, dtype):
    """``seeds x clients`` GP buffers: uniform points of each client's task, ``points`` of ``capacity`` rows valid."""
    import jax.numpy as jnp
    import numpy as np

    from pacd_jax import gp, tasks

    family = tasks.make(benchmark, num_clients=clients, seed=0)
    bounds = np.asarray(family.bounds)
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(seeds, clients, capacity, family.dim))
    f = np.stack([[np.asarray(family.evaluate(i, bounds[:, 0] + X[s, i] * (bounds[:, 1] - bounds[:, 0])))
                   for i in range(clients)] for s in range(seeds)])
    mask = np.broadcast_to(np.arange(capacity) < points, f.shape)
    valid = f[..., :points]
    y = np.where(mask, (f - valid.mean(-1, keepdims=True)) / valid.std(-1, keepdims=True), 0.0)
    return family.dim, gp.GPData(jnp.asarray(X, dtype), jnp.asarray(y, dtype), jnp.asarray(mask))


def fixed_step_fit(config, data, warm):
    """The previous fit: both starts vmapped through ``config.fit_steps`` L-BFGS iterations."""
    import jax
    import jax.numpy as jnp

    from pacd_jax import optim, standard_gp

    starts = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), standard_gp.default_hyper(config, data.y.dtype), warm)

    def one(h0):
        fun = lambda h: standard_gp.neg_log_posterior(config, h, data)  # noqa: E731
        h = optim.lbfgs(fun, h0, config.fit_steps, initial_guess="keep")
        value = fun(h)
        return h, jnp.where(jnp.isfinite(value), value, jnp.inf)

    hypers, values = jax.vmap(one)(starts)
    return jax.tree_util.tree_map(lambda a: a[jnp.argmin(values)], hypers)


def time_fit(benchmark: str, seeds: int, clients: int, points: int, capacity: int, fit_steps: int,
             dtype_name: str, repeats: int, baseline: bool) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from pacd_jax import standard_gp

    dtype = jnp.float64 if dtype_name == "float64" else jnp.float32
    dim, data = batch_data(benchmark, seeds, clients, points, capacity, dtype)
    config = standard_gp.StandardGPConfig(dim=dim, fit_steps=fit_steps)
    # the warm start a round gets: the previous round's fit (here: the default with a changed output scale)
    warm = standard_gp.default_hyper(config, dtype)._replace(log_outputscale=jnp.asarray(0.3, dtype))
    warm = jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, (seeds, clients) + a.shape), warm)
    objective = jax.jit(jax.vmap(jax.vmap(lambda d, h: standard_gp.neg_log_posterior(config, h, d))))

    def over_batch(fit):
        return jax.jit(jax.vmap(jax.vmap(lambda d, w: fit(config, d, w))))

    ours = over_batch(standard_gp.fit)
    compile_s, times = common.time_call(lambda: ours(data, warm), repeats)
    rec = common.record(
        f"gp-fit-{seeds}x{clients}x{points}x{dim}d-{dtype_name}",
        {"benchmark": benchmark, "seeds": seeds, "clients": clients, "points": points, "capacity": capacity,
         "dim": dim, "fit_steps": fit_steps, "dtype": dtype_name},
        times, compile_s,
    )
    rec["objective"] = {"ours": float(np.mean(objective(data, ours(data, warm))))}
    if baseline:
        base = over_batch(fixed_step_fit)
        base_compile, base_times = common.time_call(lambda: base(data, warm), repeats)
        rec["baselines"]["vmapped-fixed-steps"] = common.record("base", {}, base_times, base_compile)["median_ms"]
        rec["baseline_compile_s"] = base_compile
        rec["objective"]["vmapped-fixed-steps"] = float(np.mean(objective(data, base(data, warm))))
    return rec


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", required=True, help="output file (a JSON list of records)")
    parser.add_argument("--benchmark", default="hartmann6")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--clients", type=int, default=5)
    parser.add_argument("--points", default="20,55,110", help="comma-separated valid rows per GP (default 20,55,110)")
    parser.add_argument("--capacity", type=int, default=110, help="buffer rows (default 110: round 100)")
    parser.add_argument("--fit-steps", type=int, default=50, help="L-BFGS iteration cap (default 50, the table's)")
    parser.add_argument("--dtypes", default="float32", help="comma-separated (default float32, the table's)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-baseline", action="store_true", help="time only the library's fit")
    parser.add_argument("--quick", action="store_true", help="2 x 2 Branin GPs of 12 points, 10 steps (for tests)")
    args = parser.parse_args(argv)

    import jax

    jax.config.update("jax_enable_x64", True)  # float64 records need it; float32 arrays stay float32
    if args.quick:
        args.benchmark, args.seeds, args.clients, args.points = "branin", 2, 2, "12"
        args.capacity, args.fit_steps, args.repeats = 16, 10, 2
    records = []
    for dtype_name in args.dtypes.split(","):
        for points in (int(p) for p in args.points.split(",")):
            rec = time_fit(args.benchmark, args.seeds, args.clients, points, args.capacity, args.fit_steps,
                           dtype_name, args.repeats, not args.no_baseline)
            records.append(rec)
            extra = "".join(f"   {k} {v:10.1f} ms ({v / rec['median_ms']:.1f}x)" for k, v in rec["baselines"].items())
            obj = "  objective " + ", ".join(f"{k} {v:.4f}" for k, v in rec["objective"].items())
            print(f"{rec['name']:32s} {rec['median_ms']:10.1f} ms (compile {rec['compile_s']:.1f} s){extra}{obj}",
                  flush=True)
    common.write(args.json, records, "bench/gp_fit.py", argv)
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
