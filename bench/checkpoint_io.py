"""Size and save/load time of one checkpoint (Hartmann-6, 5 clients, T = 100, default model).

Usage: ``python bench/checkpoint_io.py`` (prints one line; README, Reliability).
"""

import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

from pacd_jax import checkpoint, loop, methods, tasks
from pacd_jax.config import RunConfig


def main() -> None:
    config = RunConfig(benchmark="hartmann6", num_clients=5, iters=100)
    fam = tasks.make("hartmann6", 5, 0)
    problem, params = loop.problem_from_family(fam, config.iters, None, None)
    method = methods.build(config, fam.dim)
    state = jax.jit(lambda s, p: loop.initial_state(problem, method, s, p, jnp.float32))(jnp.asarray(0), params)
    leaves = jax.tree_util.tree_leaves(state)
    nbytes = sum(np.asarray(a).nbytes for a in leaves)
    folder = tempfile.mkdtemp()
    times = []
    for i in range(20):
        start = time.perf_counter()
        checkpoint.save(f"{folder}/x.npz", state, i, "h")
        times.append(time.perf_counter() - start)
    start = time.perf_counter()
    checkpoint.load(f"{folder}/x.npz", jax.eval_shape(lambda: state), "h")
    load = time.perf_counter() - start
    print(f"hartmann6, 5 clients, T=100, K=10 (default nets): state {nbytes / 1e6:.2f} MB in {len(leaves)} arrays; "
          f"save median {np.median(times) * 1e3:.1f} ms (min {min(times) * 1e3:.1f}), load {load * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
