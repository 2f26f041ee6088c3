"""CI-sized end-to-end check: meta-learning across clients beats learning alone.

The full comparison (Branin and Sinusoid, 5 clients, 2 seeds, 30 rounds) is
`python benchmarks/compare_methods.py`; its committed result is in
benchmarks/results/compare_methods.json and the README.
"""

import numpy as np
import pytest

from pacd_jax import experiment
from pacd_jax.config import RunConfig


@pytest.mark.slow
def test_pacd_beats_independent_on_sinusoid():
    common = dict(benchmark="sinusoid", num_clients=5, seeds=(0, 1), iters=15)
    pacd = experiment.run(RunConfig(method="pacd", **common))
    independent = experiment.run(RunConfig(method="independent", **common))
    p, i = pacd["summary"]["final_regret_mean"], independent["summary"]["final_regret_mean"]
    print(f"final normalised regret after 15 rounds: PACD-BO {p:.4f}, Independent {i:.4f}")
    assert np.isfinite(p) and np.isfinite(i)
    assert p < i
