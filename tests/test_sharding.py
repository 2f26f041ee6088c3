"""``devices``: PACD-BO's particles split over several local devices, and the option's bookkeeping.

The multi-device runs happen in a subprocess started with two host devices
(this test process has one); they are compared there with the one-device run
of the same configuration.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest

from pacd_jax import sharding, table
from pacd_jax.config import ADDED_OPTIONS, RunConfig

ROOT = Path(__file__).resolve().parents[1]

# Two seeds (the seeds are vmapped around the sharded step), three clients, float64:
# the sharded run must reproduce the one-device run's queries; with DP the
# noise must be the same draw. Also: the gradients alone, in float32.
_CHILD = textwrap.dedent(
    """
    import json, sys
    import jax, jax.numpy as jnp, numpy as np
    from pacd_jax import experiment, sharding, gp
    from pacd_jax.client import model_data
    from pacd_jax.config import RunConfig
    from pacd_jax import methods

    out = {"devices": len(jax.local_devices())}
    with jax.enable_x64(True):
        base = RunConfig(benchmark="branin", num_clients=3, iters=3, seeds=(0, 1), hidden=(8, 8), svgd_steps=5,
                         svgd_steps_init=10, num_candidates=64, num_local=16, refine_steps=5, num_particles=4, x64=True)
        from pacd_jax import loop
        traced, original = [], loop.bo_round_aux
        def counting(*args, **kwargs):
            traced.append(1)
            return original(*args, **kwargs)
        for sigma in (0.0, 2.0):
            cfg = base.replace(dp_sigma=sigma, dp_clip=5.0)
            one = experiment.run(cfg)
            loop.bo_round_aux, traced[:] = counting, []
            try:
                two = experiment.run(cfg.replace(devices=2))
            finally:
                loop.bo_round_aux = original
            out[f"round_traces_{sigma}"] = len(traced)
            out[f"x_diff_{sigma}"] = max(float(np.max(np.abs(np.asarray(a["X"]) - np.asarray(b["X"]))))
                                         for ra, rb in zip(one["results"], two["results"])
                                         for a, b in zip(ra["clients"], rb["clients"]))
            out[f"devices_recorded_{sigma}"] = two["config"]["devices"]
    # every client's gradients, K = 10 split 5 + 5, in float32 and float64
    from pacd_jax.client import ClientBuffer
    cfg = RunConfig(benchmark="hartmann6", num_particles=10, hidden=(16, 16))
    learner = methods.meta_learner(cfg, 6)
    for dtype in ("float32", "float64"):
        with jax.enable_x64(dtype == "float64"):
            particles = learner.init(jnp.asarray(0), dtype).particles
            X = jax.random.uniform(jax.random.key(1), (5, 40, 6), dtype)
            bufs = ClientBuffer(X, jnp.sin(3.0 * X.sum(-1)), jnp.full((5,), 33, jnp.int32))
            g1 = jax.jit(sharding.client_gradients(learner.model, 1))(particles, bufs)
            g2 = jax.jit(sharding.client_gradients(learner.model, 2))(particles, bufs)
            out[f"grad_rel_diff_{dtype}"] = float(jnp.max(jnp.abs(g1 - g2)) / jnp.max(jnp.abs(g1)))
            out["grad_shape"] = list(g2.shape)
    # the compiled learning round: collectives per SVGD step (the while loop's body)
    import re
    method = methods.pacd(cfg.replace(devices=2, num_clients=5, svgd_steps=3, svgd_steps_init=3), 6)
    state = learner.init(jnp.asarray(0), jnp.float32)
    hlo = jax.jit(method.learn_checked).lower(state, bufs, jnp.asarray(1, jnp.int32)).compile().as_text()
    out["collectives"] = len(re.findall(r" (all-gather|all-reduce|collective-permute|all-to-all)(-start)?[(]", hlo))
    print(json.dumps(out))
    """
)


def _child_env():
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {sharding.HOST_DEVICES_FLAG}=2".strip()
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def test_sharded_runs_equal_one_device_runs():
    proc = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=600, env=_child_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["devices"] == 2
    for sigma in ("0.0", "2.0"):
        assert out[f"devices_recorded_{sigma}"] == 2
        assert out[f"x_diff_{sigma}"] < 1e-9, out  # float64 round-off, DP noise included
        assert out[f"round_traces_{sigma}"] == 1, out  # one compile of the round on the mesh, not two
    assert out["grad_shape"][:2] == [5, 10]
    # the same arithmetic on 5 particles at a time: round-off apart (float32: of a 33-point Gram inverse)
    assert out["grad_rel_diff_float64"] < 1e-11 and out["grad_rel_diff_float32"] < 1e-3, out
    # one all-gather of the messages per step; the coordinator's step runs whole on each device
    # (left to XLA's partitioner it took seven collectives: median, kernel, scores, finiteness)
    assert out["collectives"] == 1, out


def test_cli_devices_flag_sets_up_the_host_devices_itself(tmp_path):
    """``pacd-bo run --devices 2`` works from a plain shell: the CLI asks XLA for the host devices."""
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    env["PYTHONPATH"] = str(ROOT)
    args = ["run", "--benchmark", "sinusoid", "--clients", "2", "--iters", "2", "--particles", "4", "--hidden", "8,8",
            "--svgd-steps", "2", "--svgd-steps-init", "4", "--candidates", "32", "--quiet"]
    proc = subprocess.run([sys.executable, "-m", "pacd_jax.cli", *args, "--devices", "2", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((tmp_path / "run.json").read_text())
    assert doc["config"]["devices"] == 2 and np.isfinite(doc["summary"]["final_regret_mean"])
    bad = subprocess.run([sys.executable, "-m", "pacd_jax.cli", *args, "--devices", "3", "--out", str(tmp_path / "x")],
                         capture_output=True, text=True, timeout=120, env=env)
    assert bad.returncode == 2 and bad.stderr.strip() == "pacd-bo: error: num_particles (4) must be a multiple of devices (3)"


def test_too_few_devices_is_one_clear_error():
    assert len(jax.local_devices()) == 1  # this process was started without extra host devices
    with pytest.raises(ValueError, match=r"devices=2 needs 2 local JAX devices, found 1 \(cpu\); on a CPU start Python with "
                                         r"XLA_FLAGS=--xla_force_host_platform_device_count=2"):
        sharding.device_mesh(2)


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(devices=3), "num_particles (10) must be a multiple of devices (3)"),
        (dict(devices=2, method="independent"), "devices > 1 spreads PACD-BO's particles over devices; method independent runs on one"),
        (dict(devices=2, backend="mpi"), "devices > 1 shards the vmap backend"),
        (dict(devices=0), "devices must be in"),
    ],
)
def test_bad_devices(changes, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        RunConfig(**changes)


def test_request_host_devices_keeps_the_users_flag(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")
    sharding.request_host_devices(2)
    assert os.environ["XLA_FLAGS"] == "--xla_cpu_multi_thread_eigen=false --xla_force_host_platform_device_count=2"
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
    sharding.request_host_devices(2)
    assert os.environ["XLA_FLAGS"] == "--xla_force_host_platform_device_count=4"
    monkeypatch.delenv("XLA_FLAGS")
    sharding.request_host_devices(1)
    assert "XLA_FLAGS" not in os.environ


def test_added_options_leave_the_identity_at_their_neutral_value():
    """Options added later drop out of a run's identity at the value that computes what runs did before them."""
    default = RunConfig()
    for name, neutral in ADDED_OPTIONS.items():
        assert getattr(default, name) == neutral  # the default computes what the committed results did
        assert name not in default.identity()
    other = {"input_kernel": True, "feature_kernel": "matern52", "learn_outputscale": True, "devices": 2,
             "output_warp": "yeo-johnson"}
    assert set(other) == set(ADDED_OPTIONS)
    for name, value in other.items():
        assert RunConfig(**{name: value}).identity()[name] == value
    assert set(default.to_dict()) - set(default.identity()) == set(ADDED_OPTIONS)


def test_committed_cells_still_match_their_configuration():
    """The committed Table I and privacy-sweep cells predate the added options and must still count as done."""
    cell = ROOT / "benchmarks" / "results" / "table1_cells_full" / "cells" / "branin" / "pacd" / "run.json"
    doc = json.loads(cell.read_text())
    options = {k: tuple(v) if isinstance(v, list) else v for k, v in doc["config"].items()}
    # run.json records the resolved init points and noise; the table's cell options leave them to the family
    options.update(init_points=None, noise_std=None)
    assert table.cell_done(cell, table.config_dict(RunConfig(**options)))
    cells = sorted((ROOT / "benchmarks" / "results" / "privacy_branin_follow" / "cells").rglob("*.json"))
    assert cells
    for path in cells:
        key = json.loads(path.read_text())["key"]
        config = RunConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in key["config"].items()})
        assert json.loads(json.dumps(config.identity())) == key["config"]


def test_committed_decoy_runs_and_follow_progress_can_be_reused():
    """Saved decoy runs (every sweep's decoys/) and follow cells stopped part-way (cells/*.progress.json with their
    BO runs) must still load under the current keys, or rerunning a sweep would start hours of work over."""
    from pathlib import Path

    from pacd_jax import decoys, privacy_sweep

    sets = sorted((ROOT / "benchmarks" / "results").glob("privacy_*/decoys/sigma=*.json"))
    assert len(sets) >= 14  # the paper, box and follow sweeps' decoys
    for path in sets:
        doc = json.loads((path.parents[1] / "privacy.json").read_text())
        config = RunConfig.from_dict(doc["config"]).replace(dp_sigma=float(path.stem.split("=")[1]))
        saved = privacy_sweep.load_decoys(path, config, doc["target_client"])
        assert sorted(saved)[: doc["decoy_band"]["draws"]] == decoys.decoy_seeds(doc["decoy_band"]["draws"]), path
    out = ROOT / "benchmarks" / "results" / "privacy_branin_follow100"
    progress = sorted((out / "cells").glob("*.progress.json"))
    for path in progress:
        key = json.loads(path.read_text())["key"]
        config = RunConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in key["config"].items()})
        assert json.loads(json.dumps(config.identity())) == key["config"]
        state = privacy_sweep.load_progress(Path(path), key)
        assert state is not None and state["round"] < max(key["rounds"])
        stored = privacy_sweep.load_run_store(out, config.dp_sigma, config.seeds[0], key, need=state["round"])
        assert stored is not None and stored[0][0].round <= state["round"] and stored[0][-1].round == max(key["rounds"])
