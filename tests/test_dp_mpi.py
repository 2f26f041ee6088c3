"""DP in the MPI backend: the same noise as the single-process backend (float64 runs agree to 1e-8)."""

import json

from helpers import SMALL
from pacd_jax import experiment
from pacd_jax.config import RunConfig
from test_mpi import SMALL_CLI, _compare, mpirun, pytestmark  # noqa: F401 - skip without mpiexec


def test_float64_dp_run_equals_vmap_backend(tmp_path):
    iters, sigma, clip = 3, 0.5, 2.0
    proc = mpirun(3, ["--benchmark", "branin", "--clients", "2", "--iters", str(iters), "--x64", "--share-results",
                      "--dp-sigma", str(sigma), "--dp-clip", str(clip), "--out", "out", *SMALL_CLI], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    mpi_doc = json.loads((tmp_path / "out" / "run.json").read_text())
    config = RunConfig(benchmark="branin", num_clients=2, iters=iters, x64=True, dp_sigma=sigma, dp_clip=clip, **SMALL)
    vmap_doc = experiment.run(config)
    assert mpi_doc["epsilon"] == vmap_doc["epsilon"] and mpi_doc["epsilon"]["epsilon"] > 0
    # equal queries with DP on; that the noise changes a run (so this is not vacuous) is
    # test_dp_run.py::test_learn_step_is_svgd_on_privatised_client_messages
    _compare(mpi_doc, vmap_doc, rtol=1e-8, atol=1e-12)
