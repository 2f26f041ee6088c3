"""The custom-objective example (examples/curing.py): a valid task family, runnable with --task in both backends."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from helpers import SMALL
from pacd_jax import cli

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from examples import curing  # noqa: E402

SMALL_CLI = [
    "--particles", str(SMALL["num_particles"]), "--hidden", ",".join(map(str, SMALL["hidden"])),
    "--svgd-steps", str(SMALL["svgd_steps"]), "--svgd-steps-init", str(SMALL["svgd_steps_init"]),
    "--candidates", str(SMALL["num_candidates"]), "--local-candidates", str(SMALL["num_local"]),
    "--refine", str(SMALL["num_refine"]), "--refine-steps", str(SMALL["refine_steps"]),
]


def test_jax_cost_matches_float64_numpy():
    fam = curing.factory(3, seed=1)
    rng = np.random.default_rng(0)
    x = fam.bounds[:, 0] + rng.random((200, 3)) * np.ptp(fam.bounds, axis=1)
    for i in range(3):
        ref = curing.cost(fam.ambient[i], x, xp=np)
        got = np.asarray(jax.jit(fam.evaluate, static_argnums=0)(i, x))
        np.testing.assert_allclose(got, ref, rtol=2e-5)


def test_optimum_beats_dense_random_search_and_is_stationary():
    fam = curing.factory(4, seed=0)
    rng = np.random.default_rng(1)
    lo, hi = fam.bounds[:, 0], fam.bounds[:, 1]
    x = lo + rng.random((50_000, 3)) * (hi - lo)
    for i in range(4):
        x_star, f_star = fam.optimum(i)
        assert np.all(x_star >= lo) and np.all(x_star <= hi)
        assert f_star == pytest.approx(curing.cost(fam.ambient[i], x_star, xp=np), rel=1e-12)
        assert f_star <= curing.cost(fam.ambient[i], x, xp=np).min() + 1e-9
        # interior optimum: central finite differences of the float64 cost vanish
        h = 1e-4 * (hi - lo)
        grad = [(curing.cost(fam.ambient[i], x_star + h * e, xp=np) - curing.cost(fam.ambient[i], x_star - h * e, xp=np)) / (2 * h[j])
                for j, e in enumerate(np.eye(3))]
        assert np.all(np.abs(np.asarray(grad) * (hi - lo)) < 1e-2)


def test_ambient_temperature_moves_the_optimum():
    fam = curing.factory(5, seed=0)
    order = np.argsort(fam.ambient)
    temps = np.array([fam.optimum(int(i))[0][0] for i in order])
    times = np.array([fam.optimum(int(i))[0][1] for i in order])
    assert np.all(np.diff(temps) < 0)  # warmer shop floor: a cooler oven set-point is enough
    assert np.all(np.diff(times) > 0)  # ... for a slightly longer cure
    assert np.ptp(temps) > 3.0


def test_split_is_consistent_with_evaluate():
    fam = curing.factory(3, seed=2)
    params, fn = fam.split()
    x = np.array([[150.0, 60.0, 1.5], [170.0, 30.0, 2.5]])
    for i in range(3):
        np.testing.assert_allclose(fn(params, i, x), fam.evaluate(i, x))


def test_cli_runs_the_example_with_task(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    out = tmp_path / "run"
    rc = cli.main(["run", "--task", "examples.curing:factory", "--clients", "2", "--iters", "3", "--quiet",
                   *SMALL_CLI, "--out", str(out)])
    assert rc == 0
    doc = json.loads((out / "run.json").read_text())
    assert doc["benchmark"] == "curing" and doc["num_clients"] == 2
    for client in doc["results"][0]["clients"]:
        assert len(client["regret"]) == 4 and np.all(np.isfinite(client["regret"]))


BIN = Path(sys.executable).parent
MPIEXEC = shutil.which("mpiexec", path=str(BIN)) or shutil.which("mpiexec")


@pytest.mark.heavy  # an MPI job; the example's vmap run stays in CI
@pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec")
def test_mpi_backend_runs_the_example(tmp_path):
    env = {**os.environ, "PATH": os.pathsep.join([str(BIN), os.environ.get("PATH", "")])}
    out = tmp_path / "run"
    cmd = [MPIEXEC, "-n", "3", sys.executable, "-m", "pacd_jax.cli", "run", "--backend", "mpi", "--quiet",
           "--task", "examples.curing:factory", "--clients", "2", "--iters", "2", *SMALL_CLI, "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=400, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads((out / "run.json").read_text())
    assert doc["backend"] == "mpi" and len(doc["results"][0]["clients"]) == 2
