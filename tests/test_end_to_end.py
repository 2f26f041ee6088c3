"""CI-sized end-to-end check: meta-learning across clients beats learning alone.

The full comparison (Branin and Sinusoid, 5 clients, 2 seeds, 30 rounds) is
`python benchmarks/compare_methods.py`; its committed result is in
benchmarks/results/compare_methods.json and the README.
"""

import json

import numpy as np
import pytest

from helpers import run_fully_optimised


@pytest.mark.slow
def test_pacd_beats_independent_on_sinusoid():
    # full-size settings: a long jitted run, so in a process with XLA's full optimisation (helpers.py)
    code = (
        "import json; from pacd_jax import experiment; from pacd_jax.config import RunConfig\n"
        "common = dict(benchmark='sinusoid', num_clients=5, seeds=(0, 1), iters=15)\n"
        "print(json.dumps([experiment.run(RunConfig(method=m, **common))['summary']['final_regret_mean']"
        " for m in ('pacd', 'independent')]))\n"
    )
    proc = run_fully_optimised(code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    p, i = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"final normalised regret after 15 rounds: PACD-BO {p:.4f}, Independent {i:.4f}")
    assert np.isfinite(p) and np.isfinite(i)
    assert p < i
