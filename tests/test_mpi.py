"""The MPI backend, run under mpiexec in subprocesses (with timeouts: nothing may hang).

* equivalence with the single-process backend (float64 to 1e-8, float32 to a stated tolerance);
* what crosses: only (K, P) particles down and (K, P) gradients up, byte totals as run.json says;
* what the coordinator holds: no task family is ever built in rank 0's process;
* failures: wrong rank count, an exception on one rank, a NaN on one client.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers import SMALL
from pacd_jax import experiment, loop
from pacd_jax.config import RunConfig

TESTS = Path(__file__).parent
BIN = Path(sys.executable).parent
MPIEXEC = shutil.which("mpiexec", path=str(BIN)) or shutil.which("mpiexec")
pytestmark = pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec (install the mpi extra: pip install -e '.[mpi]')")

SMALL_CLI = [
    "--particles", str(SMALL["num_particles"]), "--hidden", ",".join(map(str, SMALL["hidden"])),
    "--svgd-steps", str(SMALL["svgd_steps"]), "--svgd-steps-init", str(SMALL["svgd_steps_init"]),
    "--candidates", str(SMALL["num_candidates"]), "--local-candidates", str(SMALL["num_local"]),
    "--refine", str(SMALL["num_refine"]), "--refine-steps", str(SMALL["refine_steps"]),
    "--gp-fit-steps", str(SMALL["gp_fit_steps"]),
]


def mpirun(n, args, tmp_path, timeout=400, env=None):
    full_env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]), **(env or {})}
    full_env["PATH"] = os.pathsep.join([str(BIN), full_env.get("PATH", "")])
    cmd = [MPIEXEC, "-n", str(n), sys.executable, "-m", "pacd_jax.cli", "run", "--backend", "mpi", "--quiet", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env, cwd=tmp_path)


def _compare(mpi_doc, vmap_doc, rtol, atol):
    worst = 0.0
    for rm, rv in zip(mpi_doc["results"], vmap_doc["results"]):
        for cm, cv in zip(rm["clients"], rv["clients"]):
            Xm, Xv = np.asarray(cm["X"]), np.asarray(cv["X"])
            np.testing.assert_allclose(Xm, Xv, rtol=rtol, atol=atol)
            np.testing.assert_allclose(cm["regret"], cv["regret"], rtol=rtol, atol=atol)
            worst = max(worst, float(np.max(np.abs(Xm - Xv) / np.maximum(np.abs(Xv), 1e-300))))
    return worst


def _vmap_reference(benchmark, clients, iters, x64, **changes):
    config = RunConfig(benchmark=benchmark, num_clients=clients, iters=iters, x64=x64, **{**SMALL, **changes})
    return experiment.run(config)


# each transport (one MPI_Gather; a direct message per client) gives the vmap backend's run.
# Branin starts from 28 points and runs 22 rounds: capacity 50, so the rounds switch from 32
# to 50 rows (loop.row_sizes) on the client ranks, with the round's messages inside the
# switched branch; Hartmann-6 keeps one row count (10 + 10 points).
@pytest.mark.parametrize("benchmark,transport,init_points,iters", [("branin", "gather", 28, 22), ("hartmann6", "p2p", None, 10)])
def test_float64_equivalence_with_vmap_backend(tmp_path, benchmark, transport, init_points, iters):
    extra = ["--init-points", str(init_points)] if init_points else []
    proc = mpirun(3, ["--benchmark", benchmark, "--clients", "2", "--iters", str(iters), "--x64", "--share-results",
                      "--transport", transport, "--out", "out", *extra, *SMALL_CLI], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    mpi_doc = json.loads((tmp_path / "out" / "run.json").read_text())
    vmap_doc = _vmap_reference(benchmark, 2, iters, True, init_points=init_points)
    assert mpi_doc["backend"] == "mpi" and vmap_doc["backend"] == "vmap"
    assert mpi_doc["config"]["transport"] == transport
    if init_points:  # the run did cross from one row count to the next
        assert len(loop.row_sizes(init_points + iters)) == 2 and init_points < loop.row_sizes(init_points + iters)[0]
    worst = _compare(mpi_doc, vmap_doc, rtol=1e-8, atol=1e-12)
    print(f"{benchmark}: largest relative difference of a queried coordinate after {iters} rounds: {worst:.2e}")


def test_float32_equivalence_within_stated_tolerance(tmp_path):
    # float32 round-off differs between one vmapped process and N+1 processes
    # (XLA fuses and orders the batched and the unbatched sums differently);
    # over these 10 rounds every queried coordinate agrees to 1e-4 of the box
    # width and every regret value to 1e-4 (README, "Distributed runs").
    proc = mpirun(3, ["--benchmark", "branin", "--clients", "2", "--iters", "10", "--share-results", "--out", "out",
                      *SMALL_CLI], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    mpi_doc = json.loads((tmp_path / "out" / "run.json").read_text())
    vmap_doc = _vmap_reference("branin", 2, 10, False)
    width = np.array([15.0, 15.0])  # Branin's box: [-5, 10] x [0, 15]
    worst = 0.0
    for rm, rv in zip(mpi_doc["results"], vmap_doc["results"]):
        for cm, cv in zip(rm["clients"], rv["clients"]):
            dx = np.abs(np.asarray(cm["X"]) - np.asarray(cv["X"])) / width
            worst = max(worst, float(dx.max()))
            np.testing.assert_allclose(cm["regret"], cv["regret"], rtol=0, atol=1e-4)
    assert worst <= 1e-4, worst
    print(f"float32: largest difference of a queried coordinate after 10 rounds: {worst:.2e} of the box width")


def test_five_clients_log_only_particle_and_gradient_shapes(tmp_path):
    """-n 6: what crosses is (K, P) both ways, as often as run.json says, and rank 0 never builds a task."""
    marks = tmp_path / "marks"
    marks.mkdir()
    proc = mpirun(6, ["--task", "helpers:recording_branin", "--clients", "5", "--iters", "2", "--seeds", "2",
                      "--comm-log", "comm.jsonl", "--checkpoint", "ck", "--out", "out", *SMALL_CLI], tmp_path,
                  env={"PACD_TEST_MARKS": str(marks)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((tmp_path / "out" / "run.json").read_text())
    log = [json.loads(line) for line in (tmp_path / "comm.jsonl").read_text().splitlines()]

    K, P = doc["communication"]["message_shape"]
    assert K == SMALL["num_particles"]
    protocol = [e for e in log if e["kind"] in ("particles", "gradients")]
    assert {tuple(e["shape"]) for e in protocol} == {(K, P)}
    assert all(e["dtype"] == "float32" and e["bytes"] == K * P * 4 for e in protocol)
    assert all(e["sender"] == 0 and e["receiver"] in range(1, 6) for e in protocol if e["kind"] == "particles")
    assert all(e["receiver"] == 0 and e["sender"] in range(1, 6) for e in protocol if e["kind"] == "gradients")
    # the only other messages: one manifest per client at the start, its saved round positions
    # (--checkpoint: where to resume), one summary per client and seed at the end
    others = [e for e in log if e["kind"] not in ("particles", "gradients")]
    assert sorted((e["kind"], e["sender"]) for e in others) == sorted(
        [("manifest", r) for r in range(1, 6)] + [("resume_positions", r) for r in range(1, 6)]
        + [("summary", r) for r in range(1, 6) for _ in range(2)]
    )
    # byte totals in run.json equal the log
    comm = doc["communication"]
    sent = {r: sum(e["bytes"] for e in protocol if e["sender"] == r) for r in range(6)}
    assert sent[0] == comm["bytes_sent_by_coordinator"]
    assert [sent[r] for r in range(1, 6)] == comm["bytes_sent_per_client"]
    steps = [SMALL["svgd_steps_init"], SMALL["svgd_steps"]]
    assert [r["svgd_steps"] for r in comm["per_round"]] == steps
    per_round = [sum(e["bytes"] for e in protocol if e["round"] == t and e["seed"] == 0) for t in range(2)]
    assert per_round == [r["total_bytes"] for r in comm["per_round"]]
    # no data crossed: the coordinator's document has curves, not points
    for r in doc["results"]:
        for c in r["clients"]:
            assert c["X"] is None and c["y"] is None and c["f"] is None
            assert len(c["regret"]) == 3 and np.isfinite(c["best_y"])
    # and the coordinator's process never built a task family; every client did, for every seed
    built = sorted(p.name for p in marks.iterdir())
    assert built == sorted(f"built-by-rank-{r}-seed-{s}" for r in range(1, 6) for s in range(2))


def test_independent_runs_without_messages(tmp_path):
    proc = mpirun(2, ["--method", "independent", "--benchmark", "sinusoid", "--clients", "1", "--iters", "2",
                      "--comm-log", "comm.jsonl", "--out", "out", *SMALL_CLI], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = [json.loads(line) for line in (tmp_path / "comm.jsonl").read_text().splitlines()]
    assert sorted(e["kind"] for e in log) == ["manifest", "summary"]
    doc = json.loads((tmp_path / "out" / "run.json").read_text())
    assert doc["communication"]["total_bytes"] == 0


def test_wrong_rank_count_fails_cleanly_on_every_rank(tmp_path):
    proc = mpirun(3, ["--benchmark", "branin", "--clients", "5", "--iters", "2", "--out", "out"], tmp_path, timeout=180)
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if "needs 6 MPI ranks" in line]
    # one clear line from each of the 3 ranks (each written in one call, so ranks cannot splice)
    assert len(lines) == 3 and all(line.count("needs 6 MPI ranks") == 1 for line in lines), proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


def test_exception_on_one_rank_aborts_the_job(tmp_path):
    proc = mpirun(3, ["--task", "helpers:failing_on_rank_2", "--clients", "2", "--iters", "2", "--out", "out",
                      *SMALL_CLI], tmp_path, timeout=240)
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if "the objective of client 1 is unavailable" in line]
    assert lines == ["pacd-bo [rank 2]: error: task factory failed: RuntimeError: the objective of client 1 is unavailable"]
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out" / "run.json").exists()


def test_nan_on_one_client_aborts_with_client_and_round(tmp_path):
    proc = mpirun(3, ["--task", "helpers:nan_on_client_1_after_design", "--clients", "2", "--iters", "3", "--out", "out",
                      *SMALL_CLI], tmp_path, timeout=240)
    assert proc.returncode != 0
    assert "client 1 returned a non-finite objective value (nan) at round 0 (seed 0)" in proc.stderr
    assert not (tmp_path / "out" / "run.json").exists()
