"""Shared small settings and user-style task families for the loop, API and CLI tests."""

import os
import subprocess
import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from pacd_jax import keys, tasks
from pacd_jax.config import RunConfig

#: A run small enough for CI: few particles, small nets, few steps and candidates.
SMALL = dict(
    num_particles=3,
    hidden=(8, 8),
    svgd_steps=5,
    svgd_steps_init=20,
    num_candidates=64,
    num_local=16,
    num_refine=2,
    refine_steps=5,
    gp_fit_steps=10,
)


def small_config(**changes) -> RunConfig:
    return RunConfig(**{**SMALL, "iters": 3, **changes})


def run_fully_optimised(code: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run Python ``code`` in a fresh process whose XLA backend optimises fully.

    ``make test`` turns XLA's backend optimisation off (most tests compile far
    more than they run); a test that runs a long jitted loop does better with
    it on, and XLA's flags are fixed once per process.
    """
    env = dict(os.environ)
    flags = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith("--xla_backend_optimization_level")]
    env["XLA_FLAGS"] = " ".join(flags)
    tests_dir = str(Path(__file__).resolve().parent)
    env["PYTHONPATH"] = os.pathsep.join([tests_dir, str(Path(tests_dir).parent), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout)


class Shifted(tasks.TaskFamily):
    """A user family written as a plain class (closure-style, no split override)."""

    name, dim, noise_std = "shifted", 1, 0.0

    def __init__(self, num_clients, seed, bad_round=None, bad_client=0):
        self.num_clients = num_clients
        self.bounds = np.array([[-1.0, 1.0]])
        self.shift = np.linspace(-0.5, 0.5, num_clients) + 0.01 * seed
        self.bad_round = bad_round
        self.bad_client = bad_client

    def evaluate(self, i, x):
        value = (jnp.asarray(x)[..., 0] - self.shift[i]) ** 2
        return value

    def optimum(self, i):
        return np.array([self.shift[i]]), 0.0


class NaNRegion(Shifted):
    """Client 1 returns NaN on ``x < threshold`` (everywhere with the default)."""

    name = "nan-region"
    threshold = 2.0

    def evaluate(self, i, x):
        value = super().evaluate(i, x)
        if i == 1:
            value = jnp.where(jnp.asarray(x)[..., 0] < self.threshold, jnp.nan, value)
        return value


class NaNOffDesign(Shifted):
    """Client 1 is finite at its initial-design points only: its first BO query returns NaN."""

    name = "nan-off-design"

    def __init__(self, num_clients, seed):
        super().__init__(num_clients, seed)
        unit = np.asarray(tasks.collaborative_lhs(keys.stream(seed, "design"), num_clients, 5, 1))
        self.design = self.bounds[0, 0] + unit[1, :, 0] * (self.bounds[0, 1] - self.bounds[0, 0])

    def evaluate(self, i, x):
        value = super().evaluate(i, x)
        if i == 1:
            x0 = jnp.asarray(x)[..., 0]
            near = jnp.min(jnp.abs(x0[..., None] - jnp.asarray(self.design, x0.dtype)), axis=-1) < 1e-4
            value = jnp.where(near, value, jnp.nan)
        return value


def shifted_factory(num_clients, seed):
    return Shifted(num_clients, seed)


def nan_factory(num_clients, seed):
    return NaNRegion(num_clients, seed)


def nan_round_factory(num_clients, seed):
    return NaNOffDesign(num_clients, seed)


class WrongShape(Shifted):
    name = "wrong-shape"

    def evaluate(self, i, x):
        return jnp.asarray(x)  # keeps the trailing d axis: wrong


def wrong_shape_factory(num_clients, seed):
    return WrongShape(num_clients, seed)


class NoOptimum(Shifted):
    """A user family that forgot ``optimum`` (the base class raises NotImplementedError)."""

    def optimum(self, i):
        return tasks.TaskFamily.optimum(self, i)


def no_optimum_factory(num_clients, seed):
    return NoOptimum(num_clients, seed)


# -- factories for the MPI tests (each rank is its own process) -------------------

def _rank() -> str:
    import os

    return os.environ.get("PMI_RANK", "?")


def recording_branin(num_clients, seed):
    """tasks.make('branin') that leaves a mark file naming the rank that built it."""
    import os
    from pathlib import Path

    mark_dir = os.environ.get("PACD_TEST_MARKS")
    if mark_dir:
        Path(mark_dir, f"built-by-rank-{_rank()}-seed-{seed}").touch()
    return tasks.make("branin", num_clients, seed)


def failing_on_rank_2(num_clients, seed):
    """A factory that raises only in the process of rank 2 (client 1)."""
    if _rank() == "2":
        raise RuntimeError("the objective of client 1 is unavailable")
    return Shifted(num_clients, seed)


def nan_on_client_1_after_design(num_clients, seed):
    return NaNOffDesign(num_clients, seed)


class SlowShifted(Shifted):
    """An 'expensive experiment': every evaluation waits ``delay`` seconds on the host."""

    name = "slow-shifted"
    delay = 0.15

    def evaluate(self, i, x):
        import time

        import jax

        def wait(v):
            import os

            time.sleep(self.delay)
            log = os.environ.get("PACD_TEST_EVAL_LOG")
            if log:  # count the evaluations a process makes
                with open(f"{log}-{os.getpid()}", "a") as fh:
                    fh.write("1\n")
            return v

        x = jnp.asarray(x)
        x = jax.pure_callback(wait, jax.ShapeDtypeStruct(x.shape, x.dtype), x, vmap_method="sequential")
        return super().evaluate(i, x)


def slow_factory(num_clients, seed):
    return SlowShifted(num_clients, seed)


def slow_recording_pid(num_clients, seed):
    """``slow_factory`` that writes this process's pid to ``$PACD_TEST_MARKS/pid-rank-<r>`` (fault tests)."""
    import os
    from pathlib import Path

    mark_dir = os.environ.get("PACD_TEST_MARKS")
    if mark_dir:
        Path(mark_dir, f"pid-rank-{_rank()}").write_text(str(os.getpid()))
    return SlowShifted(num_clients, seed)


class Offset(Shifted):
    """Client 1's values are offset by +1000 (finite, but easy to tell apart)."""

    name = "offset"

    def evaluate(self, i, x):
        return super().evaluate(i, x) + (1000.0 if i == 1 else 0.0)


def offset_factory(num_clients, seed):
    return Offset(num_clients, seed)


def nan_gradients_on_rank_2(num_clients, seed):
    """A misbehaving client: in rank 2's process (client 1) every gradient message is NaN."""
    if _rank() == "2":
        import pacd_jax.client as client_module

        original = client_module.local_gradients
        client_module.local_gradients = lambda model, particles, buf, *dp: original(model, particles, buf, *dp) * jnp.nan
    return Shifted(num_clients, seed)
