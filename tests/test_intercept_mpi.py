"""Interception on the MPI backend: rank 0 records exactly what the vmap backend records."""

import numpy as np
import pytest

from helpers import SMALL
from pacd_jax import intercept
from pacd_jax.config import RunConfig
from test_mpi import MPIEXEC, SMALL_CLI, mpirun

pytestmark = pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec")


def test_mpi_coordinator_records_the_same_messages_as_vmap(tmp_path):
    args = ["--benchmark", "branin", "--clients", "3", "--iters", "2", "--x64", *SMALL_CLI,
            "--intercept-client", "1", "--intercept-rounds", "0,1", "--out", str(tmp_path / "out")]
    proc = mpirun(4, args, tmp_path)
    assert proc.returncode == 0, proc.stderr
    path = tmp_path / "out" / "intercept.npz"
    with np.load(path) as z:
        assert sorted(z.files) == sorted(intercept.RECORD_FIELDS)  # the message and public facts only
    got = intercept.load_records(path)
    config = RunConfig(benchmark="branin", num_clients=3, iters=2, x64=True, **SMALL)
    import jax

    with jax.enable_x64(True):
        want, _, _ = intercept.run_vmap(config, intercept.InterceptSpec(1, (0, 1)))
    assert [r.round for r in got] == [0, 1] and [r.m for r in got] == [5, 6]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.particles, w.particles, rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(g.grads, w.grads, rtol=1e-8, atol=1e-10)
        np.testing.assert_array_equal(g.bounds, w.bounds)
