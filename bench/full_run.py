"""Whole-run wall time: PACD-BO (and baselines) over T rounds, with where a round's time goes.

For each (benchmark, method) the script runs the library's own
``experiment.run`` once to compile, then times one more identical run, and
separately times the two halves of a round on the final state: the method's
``learn`` (PACD-BO: the round's SVGD steps; Independent: the GP refits) and
``propose`` (the acquisition maximiser of every client).

    python bench/full_run.py --json bench/results/full_run.json                 # Hartmann-6, PACD-BO, T = 100
    python bench/full_run.py --devices 2 --json out.json                       # the same, particles over 2 cores
    python bench/full_run.py --benchmarks hartmann6,branin --methods pacd,independent --json out.json
    python bench/full_run.py --quick --json /tmp/full_run.json                  # T = 3, small settings
    python bench/full_run.py --estimate-table --seeds 10 --json bench/results/table_estimate.json   # Table I's cost

Records: ``run-<benchmark>-<method>-T<T>`` with ``median_ms`` the wall time
of the whole run with its programs already compiled (loaded from a persistent
compilation cache the first run filled; ``compile_s`` is the first run's
extra time), and ``config.learn_ms`` / ``config.propose_ms``, the time of one
round's halves at the end of the run (``m0 + T`` points per client).
With ``--estimate-table``: ``estimate-<benchmark>-<method>-T<T>-S<seeds>``,
one Table I cell's estimated wall time (:func:`estimate_cell`), and
``estimate-table-T<T>-S<seeds>``, their sum.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402


SMALL = dict(num_particles=4, hidden=(8, 8), svgd_steps=5, svgd_steps_init=20, num_candidates=64, num_local=16,
             num_refine=2, refine_steps=5, gp_fit_steps=10)


def round_timer(config):
    """``time(round_idx) -> {"learn_ms", "propose_ms", "count"}``: one round's halves, one seed, all clients.

    The buffers hold ``m0 + round_idx`` valid rows of random data (the cost
    depends on the sizes, not on the values), cut to the row count the run's
    round uses at that round (:func:`pacd_jax.loop.row_sizes`); round 0's
    ``learn`` runs the initial SVGD steps. ``learn`` and ``propose`` compile
    once per row count (the round and the count are traced).
    """
    import jax
    import jax.numpy as jnp
    import numpy as np

    from pacd_jax import client, loop, methods, tasks

    fam = tasks.make(config.benchmark, num_clients=config.num_clients, seed=0)
    problem, params = loop.problem_from_family(fam, config.iters, config.init_points, config.noise_std)
    method_fns = methods.build(config, problem.dim)
    seed = jnp.asarray(0, jnp.int32)
    state = jax.jit(lambda s, p: loop.initial_state(problem, method_fns, s, p, jnp.float32))(seed, params)
    rng = np.random.default_rng(0)
    X = jnp.asarray(rng.uniform(size=state.buffers.X.shape), jnp.float32)
    y = jnp.asarray(rng.normal(size=state.buffers.y.shape), jnp.float32)
    learn = jax.jit(method_fns.learn)
    propose = jax.jit(method_fns.propose)

    def time_round(round_idx: int, repeats: int = 3) -> dict:
        count = problem.init_points + round_idx
        rows = next(r for r in problem.sizes if r >= count)  # the rows the run's round computes on (loop.bo_round_aux)
        buffers = state.buffers._replace(X=X, y=y, count=jnp.full_like(state.buffers.count, count))
        buffers = client.leading_rows(buffers, rows)
        idx = jnp.asarray(round_idx, jnp.int32)
        keys_ = problem.client_keys(seed, "propose", idx)
        model = common.block(learn(state.model, buffers, idx))  # compiles on the first round only
        learn_t = [common.time_call(lambda: learn(state.model, buffers, idx), 0)[0] for _ in range(repeats)]
        common.block(propose(model, buffers, keys_))
        propose_t = [common.time_call(lambda: propose(model, buffers, keys_), 0)[0] for _ in range(repeats)]
        return {"learn_ms": 1e3 * float(np.median(learn_t)), "propose_ms": 1e3 * float(np.median(propose_t)),
                "count": count}

    return time_round


def estimate_cell(benchmark: str, method: str, iters: int, seeds: int, quick: bool) -> dict:
    """Estimated wall time of one Table I cell (``seeds`` seeds of ``iters`` rounds), from timed rounds.

    Round 0 (initial SVGD steps) is timed on its own. A round's programs have
    fixed shapes within a row count (:func:`pacd_jax.loop.row_sizes`), so one
    timed round per row count (its last, the fullest) stands for every round
    on that many rows; the cell is round 0 plus the sum over row counts of
    (rounds on it) x (its round's time). Seeds are counted as independent
    work (the table's single-threaded workers gain little from vectorising
    them). The run loop's per-round host work (transfers, checks,
    checkpoints) is left out, which underestimates: compare a cell with the
    ``run-*`` record of the same benchmark and method.
    """
    from pacd_jax import loop, tasks
    from pacd_jax.config import RunConfig

    config = RunConfig(benchmark=benchmark, method=method, iters=iters, **(SMALL if quick else {}))
    fam = tasks.make(benchmark, num_clients=config.num_clients, seed=0)
    problem, _ = loop.problem_from_family(fam, iters, config.init_points, config.noise_std)
    rows_of = [next(r for r in problem.sizes if r >= problem.init_points + t) for t in range(iters)]
    time_round = round_timer(config)
    per_round = lambda h: h["learn_ms"] + h["propose_ms"]  # noqa: E731
    first = time_round(0, repeats=1)
    by_rows = {}
    for rows in sorted(set(rows_of[1:])):
        t_last = max(t for t in range(1, iters) if rows_of[t] == rows)
        timed = time_round(t_last, repeats=1)
        by_rows[str(rows)] = {**timed, "round": t_last, "rounds": sum(1 for r in rows_of[1:] if r == rows)}
    one_seed_ms = per_round(first) + sum(v["rounds"] * per_round(v) for v in by_rows.values())
    return common.record(
        f"estimate-{benchmark}-{method}-T{iters}-S{seeds}",
        {"benchmark": benchmark, "method": method, "iters": iters, "seeds": seeds, "quick": quick,
         "round0": first, "by_rows": by_rows, "one_seed_s": one_seed_ms / 1e3},
        [seeds * one_seed_ms / 1e3], 0.0,
    )


def _round_ms_by_rows(config, round_ms) -> dict:
    """Median wall time of the timed run's rounds 1.. grouped by the row count each computed on.

    ``round_ms[t]`` is round t's wall time (round 0, with its initial SVGD
    steps and the program's loading, is left out); with several seeds the
    rounds of all seeds are pooled.
    """
    from pacd_jax import loop, tasks

    fam = tasks.make(config.benchmark, num_clients=config.num_clients, seed=0)
    problem, _ = loop.problem_from_family(fam, config.iters, config.init_points, config.noise_std)
    groups: dict[int, list] = {}
    for k, ms in enumerate(round_ms):
        t = k % config.iters
        if t > 0:
            rows = next(r for r in problem.sizes if r >= problem.init_points + t)
            groups.setdefault(rows, []).append(float(ms))
    return {str(rows): float(np.median(v)) for rows, v in sorted(groups.items())}


def time_run(benchmark: str, method: str, iters: int, seeds: int, quick: bool, devices: int = 1) -> dict:
    from pacd_jax import experiment
    from pacd_jax.config import RunConfig

    import tempfile

    import jax
    from jax.experimental.compilation_cache import compilation_cache

    config = RunConfig(benchmark=benchmark, method=method, iters=iters, seeds=tuple(range(seeds)),
                       devices=devices if method == "pacd" else 1, **(SMALL if quick else {}))
    # Every experiment.run builds and compiles its jitted round afresh; a
    # persistent compilation cache lets the second run load the compiled
    # programs instead (it still traces and lowers them), so the second run is
    # the run's own time and the first minus the second the compile time.
    with tempfile.TemporaryDirectory() as cache_dir:
        previous = {k: getattr(jax.config, k) for k in ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
                                                        "jax_persistent_cache_min_entry_size_bytes")}
        jax.config.update("jax_compilation_cache_dir", cache_dir)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
        try:
            t0 = time.perf_counter()
            experiment.run(config)
            first = time.perf_counter() - t0
            stamps = []
            t0 = time.perf_counter()
            experiment.run(config, on_round=lambda done, total: stamps.append(time.perf_counter()))
            wall = time.perf_counter() - t0
        finally:
            for k, v in previous.items():
                jax.config.update(k, v)
            # the cache object outlives the config: drop it, or later compilations
            # try to write into the deleted temporary folder
            compilation_cache.reset_cache()

    halves = round_timer(config)(iters - 1)
    by_rows = _round_ms_by_rows(config, np.diff(np.asarray([t0] + stamps)) * 1e3)
    rec = common.record(
        f"run-{benchmark}-{method}-T{iters}",
        {"benchmark": benchmark, "method": method, "iters": iters, "seeds": seeds, "clients": config.num_clients,
         "quick": quick, "devices": config.devices, "learn_ms": halves["learn_ms"], "propose_ms": halves["propose_ms"],
         "round_ms_by_rows": by_rows},
        [wall], max(first - wall, 0.0),
    )
    return rec


def _describe_run(rec: dict) -> str:
    c = rec["config"]
    return (f"{rec['name']:36s} {rec['median_ms'] / 1e3:7.1f} s  (compile {rec['compile_s']:.1f} s; "
            f"last round: learn {c['learn_ms']:.0f} ms, propose {c['propose_ms']:.0f} ms)")


def _describe_estimate(rec: dict) -> str:
    c = rec["config"]
    ms = lambda h: h["learn_ms"] + h["propose_ms"]  # noqa: E731
    rounds = ", ".join([f"round 0 {ms(c['round0']):.0f}"] + [f"{rows} rows {ms(v):.0f}" for rows, v in c["by_rows"].items()])
    return f"{rec['name']:40s} {rec['median_ms'] / 6e4:8.1f} min  ({c['one_seed_s']:.1f} s per seed; {rounds} ms)"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", required=True, help="output file (a JSON list of records)")
    parser.add_argument("--benchmarks", default=None, help="comma-separated (default hartmann6; all four with --estimate-table)")
    parser.add_argument("--methods", default=None, help="comma-separated (default pacd; all five with --estimate-table)")
    parser.add_argument("--iters", type=int, default=100, help="BO rounds T (default 100)")
    parser.add_argument("--seeds", type=int, default=1, help="seeds, vectorised in one run (default 1)")
    parser.add_argument("--quick", action="store_true", help="T = 3 with small settings (for tests)")
    parser.add_argument("--estimate-table", action="store_true",
                        help="estimate each (benchmark, method) cell of a --seeds-seed Table I grid from three timed "
                             "rounds instead of timing whole runs; with the default lists, the paper's full grid")
    parser.add_argument("--devices", type=int, default=1,
                        help="PACD-BO runs split their particles over this many local devices, e.g. this machine's cores (default %(default)s)")
    args = parser.parse_args(argv)
    if args.devices < 1:
        parser.error(f"--devices must be positive, got {args.devices}")
    if args.devices > 1 and args.estimate_table:
        parser.error("--devices applies to whole runs, not --estimate-table")
    from pacd_jax.sharding import request_host_devices

    request_host_devices(args.devices)  # before JAX starts
    if args.quick:
        args.iters = 3
    if args.estimate_table:
        measure, describe = estimate_cell, _describe_estimate
        benchmarks = args.benchmarks or "sinusoid,branin,hartmann6,wingweight"
        methods_ = args.methods or "independent,pacoh,pacd,cboc-u,cboc-l"
    else:
        measure, describe = time_run, _describe_run
        benchmarks, methods_ = args.benchmarks or "hartmann6", args.methods or "pacd"
    records = []
    for benchmark in benchmarks.split(","):
        for method in methods_.split(","):
            extra = {"devices": args.devices} if not args.estimate_table else {}
            records.append(measure(benchmark, method, args.iters, args.seeds, args.quick, **extra))
            print(describe(records[-1]), flush=True)
    if args.estimate_table:
        total_s = sum(r["median_ms"] for r in records) / 1e3
        records.append(common.record(f"estimate-table-T{args.iters}-S{args.seeds}",
                                     {"cells": len(records), "total_hours_one_process": total_s / 3600},
                                     [total_s], 0.0))
        print(f"whole grid: {total_s / 3600:.2f} h in one process", flush=True)
    common.write(args.json, records, "bench/full_run.py", argv)
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
