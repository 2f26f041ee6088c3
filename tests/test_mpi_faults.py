"""MPI faults: a client rank killed with SIGKILL mid-run ends the job in bounded time,
every rank's checkpoint survives, and ``--resume`` under mpiexec finishes the run
with the uninterrupted run's run.json. Rank 0's checkpoint holds no client data."""

import json
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from pacd_jax import checkpoint
from test_mpi import BIN, MPIEXEC, SMALL_CLI, TESTS, mpirun

pytestmark = pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec")

#: the job must be gone this many seconds after the kill
END_WITHIN_S = 60


def _rounds(path):
    try:
        return checkpoint.read_meta(path)["rounds_done"]
    except (checkpoint.CheckpointError, FileNotFoundError, KeyError):
        return -1


@pytest.mark.heavy  # two MPI jobs, one killed
def test_client_rank_killed_mid_run_ends_the_job_and_resumes(tmp_path):
    iters = 6
    kill_after = random.randrange(1, iters - 1)
    marks = tmp_path / "marks"
    marks.mkdir()
    args = ["--task", "helpers:slow_recording_pid", "--clients", "2", "--iters", str(iters), "--share-results", *SMALL_CLI]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
           "PACD_TEST_MARKS": str(marks)}
    env["PATH"] = os.pathsep.join([str(BIN), env.get("PATH", "")])
    cmd = [MPIEXEC, "-n", "3", sys.executable, "-m", "pacd_jax.cli", "run", "--backend", "mpi", "--quiet", *args,
           "--out", "killed", "--checkpoint", "ck"]
    job = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while _rounds(tmp_path / "ck" / "rank-2.npz") < kill_after:
            assert job.poll() is None, job.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "no checkpoint of rank 2 appeared"
            time.sleep(0.02)
        pid = int((marks / "pid-rank-2").read_text())
        os.kill(pid, signal.SIGKILL)  # client 1 dies without a word
        killed_at = time.monotonic()
        out, err = job.communicate(timeout=END_WITHIN_S)
        ended_after = time.monotonic() - killed_at
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    assert job.returncode != 0
    # MPICH's process manager names the dead process and the signal (on stdout) and cleans up the rest
    assert "BAD TERMINATION" in out and "Killed (signal 9)" in out, (out + err)[-3000:]
    assert not (tmp_path / "killed" / "run.json").exists()
    print(f"client rank killed after {kill_after}+ rounds; the job ended {ended_after:.1f} s later")

    resumed = mpirun(3, [*args, "--out", "resumed", "--checkpoint", "ck", "--resume"], tmp_path,
                     env={"PACD_TEST_MARKS": str(marks), "PACD_TEST_EVAL_LOG": str(tmp_path / "evals-resumed")})
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    straight = mpirun(3, [*args, "--out", "straight", "--checkpoint", "ck2"], tmp_path,
                      env={"PACD_TEST_MARKS": str(marks), "PACD_TEST_EVAL_LOG": str(tmp_path / "evals-straight")})
    assert straight.returncode == 0, straight.stderr[-3000:]
    count = lambda name: sum(len(p.read_text().splitlines()) for p in tmp_path.glob(f"{name}-*"))
    # the resumed job evaluated only the rounds left (the uninterrupted one: design + every round)
    assert 0 < count("evals-resumed") < count("evals-straight"), (count("evals-resumed"), count("evals-straight"))
    a = json.loads((tmp_path / "resumed" / "run.json").read_text())
    b = json.loads((tmp_path / "straight" / "run.json").read_text())
    a.pop("wall_time_s"), b.pop("wall_time_s")
    assert a == b

    # each rank saved only its own state: rank 0 particles and optimiser moments, no buffers
    k = 3  # SMALL particles
    meta0 = checkpoint.read_meta(tmp_path / "ck2" / "rank-0.npz")
    shapes0 = [tuple(s) for s, _ in meta0["leaves"]]
    capacity = 5 + iters
    assert all(s == () or s[0] == k for s in shapes0), shapes0  # (K, P) arrays and counters only
    assert not any(capacity in s for s in shapes0)
    assert meta0["extra"]["summaries"] == []  # one seed: nothing published yet while it ran
    meta1 = checkpoint.read_meta(tmp_path / "ck2" / "rank-1.npz")
    assert any(tuple(s) == (1, capacity, 1) for s, _ in meta1["leaves"])  # client 0's own buffer
    assert meta1["rounds_done"] == meta0["rounds_done"] == iters


def test_nan_gradient_from_one_client_rank_aborts_naming_it(tmp_path):
    proc = mpirun(3, ["--task", "helpers:nan_gradients_on_rank_2", "--clients", "2", "--iters", "2", "--out", "out",
                      *SMALL_CLI], tmp_path, timeout=240)
    assert proc.returncode != 0
    assert "pacd-bo [rank 0]: error: client 1 sent a non-finite gradient at round 0, SVGD step 0" in proc.stderr, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out" / "run.json").exists()


def test_skip_bad_values_on_a_client_rank(tmp_path):
    proc = mpirun(3, ["--task", "helpers:nan_on_client_1_after_design", "--clients", "2", "--iters", "2", "--out", "out",
                      "--on-bad-value", "skip", "--share-results", "--checkpoint", "ck", *SMALL_CLI], tmp_path, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((tmp_path / "out" / "run.json").read_text())
    c0, c1 = doc["results"][0]["clients"]
    assert c0["skipped_rounds"] == [] and len(c0["X"]) == 5 + 2
    assert c1["skipped_rounds"] == [0, 1] and len(c1["X"]) == 5 and np.all(np.isfinite(c1["y"]))
    assert checkpoint.read_meta(tmp_path / "ck" / "rank-2.npz")["extra"]["skipped"] == [[0, 0, 0], [0, 0, 1]]
