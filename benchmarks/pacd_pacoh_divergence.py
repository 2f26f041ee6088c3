"""How far PACD-BO's and centralised PACOH-BO's particles drift apart in round 0 (float64).

Both learners start from the same particles and data (Sinusoid, seed 0, the
library defaults) and take S SVGD steps; prints max |phi_pacd - phi_pacoh|
after each S. The two compute the same step to round-off; the differences
show how the SVGD/Adam trajectory amplifies round-off (README, Table I section).

    python benchmarks/pacd_pacoh_divergence.py
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from pacd_jax import loop, methods, tasks  # noqa: E402
from pacd_jax.config import RunConfig  # noqa: E402


def main() -> None:
    cfg = RunConfig(benchmark="sinusoid", seeds=(0,), iters=30, x64=True)
    problem, params = loop.problem_from_family(tasks.make("sinusoid", num_clients=5, seed=0), cfg.iters, None, None)
    seed = jnp.asarray(0, jnp.int32)
    for steps in (1, 10, 50, 200, 250, 300, 350, 400, 450, 500):
        out = {}
        for m in ("pacd", "pacoh"):
            method = methods.build(cfg.replace(method=m, svgd_steps_init=steps), problem.dim)
            state = loop.initial_state(problem, method, seed, params, jnp.float64)
            out[m] = np.asarray(jax.jit(method.learn)(state.model, state.buffers, jnp.asarray(0, jnp.int32)).particles)
        d = np.abs(out["pacd"] - out["pacoh"]).max()
        print(f"{steps:4d} SVGD steps: max |phi_pacd - phi_pacoh| = {d:.3g}", flush=True)


if __name__ == "__main__":
    main()
