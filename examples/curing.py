"""A custom task family: thermal curing of a resin part at plants with different ambient temperatures.

Each plant (client) tunes three process parameters to make a good part at low
cost:

* ``x[0]`` oven set-point temperature, 100-180 degC;
* ``x[1]`` cure time, 10-120 min;
* ``x[2]`` catalyst fraction, 0.5-3.0 wt%.

The part loses heat to the shop floor, so its effective cure temperature is
``T_eff = T - gamma * (T - T_ambient)``; plants in cold climates need a hotter
oven or a longer cure for the same result. Cure follows first-order Arrhenius
kinetics, ``alpha = 1 - exp(-k(T_eff) * c * t)`` with
``k(T) = k_ref * exp(-Ea / R * (1/T - 1/T_ref))`` (temperatures in kelvin),
and the cost to minimise is

    f = 100 (1 - alpha)^2                      under-cure (weak, tacky parts)
      + 4 exp((T_eff - 145) / 8) * t / 60      thermal degradation (yellowing, brittleness)
      + (T - T_ambient) t / 4000               oven energy (heat lost to the shop floor)
      + t / 60                                 throughput (time the oven is busy)
      + 4 c                                    catalyst cost

in arbitrary cost units. The numbers are made up but physically plausible; what
matters is that the plants' optima are related (same physics) yet different
(ambient temperature shifts them), which is the setting PACD-BO is for.

Use it from the command line (from the repository root, so ``examples`` is importable):

    pacd-bo run --task examples.curing:factory --clients 4 --iters 30 --out runs/curing
    mpiexec -n 5 pacd-bo run --backend mpi --task examples.curing:factory --clients 4 --iters 30 --out runs/curing-mpi

or from Python: ``pacd_jax.experiment.run(RunConfig(benchmark="curing", ...), examples.curing.factory)``.
"""

from __future__ import annotations

import numpy as np
import jax.numpy as jnp
from scipy.optimize import minimize
from scipy.stats import qmc

from pacd_jax.tasks import TaskFamily

BOUNDS = np.array([[100.0, 180.0], [10.0, 120.0], [0.5, 3.0]])
GAMMA = 0.15  # share of the oven-to-ambient difference the part loses
K_REF = 0.02  # 1 / (min * wt%) at T_REF
T_REF = 150.0 + 273.15
EA_OVER_R = 8000.0  # activation energy over the gas constant, K
AMBIENT_RANGE = (0.0, 35.0)  # degC, from a northern winter shop to a tropical one


def cost(ambient, x, xp=jnp):
    """The cost of one cure at ambient temperature ``ambient`` (degC); ``x`` is ``(..., 3)``.

    ``xp`` is ``jax.numpy`` (jittable, the default) or ``numpy`` (float64, for
    the optimum search).
    """
    temp, time, cat = x[..., 0], x[..., 1], x[..., 2]
    t_eff = temp - GAMMA * (temp - ambient)
    rate = K_REF * xp.exp(-EA_OVER_R * (1.0 / (t_eff + 273.15) - 1.0 / T_REF))
    alpha = 1.0 - xp.exp(-rate * cat * time)
    degradation = 4.0 * xp.exp((t_eff - 145.0) / 8.0) * time / 60.0
    return 100.0 * (1.0 - alpha) ** 2 + degradation + (temp - ambient) * time / 4000.0 + time / 60.0 + 4.0 * cat


def evaluate_fn(params, i, x):
    """Module-level ``evaluate_fn(params, i, x)`` so seeds share one compiled run (TaskFamily.split)."""
    return cost(params[i], jnp.asarray(x))


class CuringFamily(TaskFamily):
    """``num_clients`` plants whose ambient temperatures are drawn from ``AMBIENT_RANGE`` by ``seed``."""

    name = "curing"
    dim = 3
    noise_std = 0.05  # measurement noise of the quality/cost score

    def __init__(self, num_clients: int, seed: int = 0):
        if num_clients < 1:
            raise ValueError(f"num_clients must be >= 1, got {num_clients}")
        self.num_clients = num_clients
        self.bounds = BOUNDS.copy()
        rng = np.random.default_rng(seed)
        self.ambient = rng.uniform(*AMBIENT_RANGE, size=num_clients)
        self._optima: dict[int, tuple[np.ndarray, float]] = {}

    def evaluate(self, i, x):
        return evaluate_fn(jnp.asarray(self.ambient), i, x)

    def split(self):
        return jnp.asarray(self.ambient), evaluate_fn

    def optimum(self, i: int) -> tuple[np.ndarray, float]:
        """Multistart L-BFGS-B (scipy, float64) from the best of a 4096-point Sobol design."""
        if i not in self._optima:
            lo, hi = self.bounds[:, 0], self.bounds[:, 1]
            design = qmc.scale(qmc.Sobol(3, seed=0).random(4096), lo, hi)
            values = cost(self.ambient[i], design, xp=np)
            best_x, best_f = None, np.inf
            for start in design[np.argsort(values)[:8]]:
                res = minimize(lambda z: float(cost(self.ambient[i], z, xp=np)), start, method="L-BFGS-B",
                               bounds=list(zip(lo, hi)))
                if res.fun < best_f:
                    best_x, best_f = res.x, float(res.fun)
            self._optima[i] = (np.asarray(best_x, dtype=np.float64), best_f)
        return self._optima[i]


def factory(num_clients: int, seed: int) -> CuringFamily:
    """What ``--task examples.curing:factory`` calls."""
    return CuringFamily(num_clients, seed)
