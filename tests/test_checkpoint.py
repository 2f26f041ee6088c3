"""Checkpoint/resume and bad values in the vmap backend.

* kill -9 a real ``pacd-bo run --checkpoint`` process at a random round, resume
  it, and compare run.json with an uninterrupted run's (bit for bit, except the
  wall time);
* a resume with other options, or a checkpoint folder reused without
  ``--resume``: one line, exit code 2;
* ``--on-bad-value stop`` checkpoints first; ``skip`` drops and records values.
"""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from helpers import small_config
from pacd_jax import checkpoint, cli, experiment

TESTS = Path(__file__).parent
SMALL_ARGS = [
    "--particles", "3", "--hidden", "8,8", "--svgd-steps", "5", "--svgd-steps-init", "20",
    "--candidates", "64", "--local-candidates", "16", "--refine", "2", "--refine-steps", "5", "--gp-fit-steps", "10",
]


def _env():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    return env


def _without_time(doc):
    return {k: v for k, v in doc.items() if k != "wall_time_s"}


def _rounds_done(path):
    try:
        return checkpoint.read_meta(path)["rounds_done"]
    except (checkpoint.CheckpointError, FileNotFoundError):
        return -1


@pytest.mark.parametrize("method", ["pacd"])
def test_kill_at_a_random_round_and_resume_gives_the_same_run_json(tmp_path, capsys, monkeypatch, method):
    iters = 6
    kill_after = random.randrange(1, iters - 1)  # the run is killed once this many rounds are saved
    args = ["run", "--task", "helpers:slow_factory", "--method", method, "--clients", "2", "--iters", str(iters),
            "--noise-std", "0.05", "--quiet", *SMALL_ARGS]
    ckpt = tmp_path / "ckpt"
    proc = subprocess.Popen([sys.executable, "-m", "pacd_jax.cli", *args, "--out", str(tmp_path / "killed"),
                             "--checkpoint", str(ckpt)], env=_env(), cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while _rounds_done(ckpt / "batch-0.npz") < kill_after:
        assert proc.poll() is None, f"the run ended before round {kill_after}: {proc.stderr.read()[-2000:]}"
        assert time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=60) == -signal.SIGKILL
    saved = _rounds_done(ckpt / "batch-0.npz")
    assert kill_after <= saved < iters, (kill_after, saved)  # killed mid-run, with rounds left to do
    assert not (tmp_path / "killed" / "run.json").exists()

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PACD_TEST_EVAL_LOG", str(tmp_path / "evals-resumed"))
    code = cli.main([*args, "--out", str(tmp_path / "resumed"), "--checkpoint", str(ckpt), "--resume"])
    _, err = capsys.readouterr()
    assert code == 0, err
    monkeypatch.setenv("PACD_TEST_EVAL_LOG", str(tmp_path / "evals-straight"))
    code = cli.main([*args, "--out", str(tmp_path / "straight")])
    _, err = capsys.readouterr()
    assert code == 0, err
    count = lambda name: sum(len(p.read_text().splitlines()) for p in tmp_path.glob(f"{name}-*"))
    # the resumed run evaluated only the rounds left, 2 clients x (iters - saved), plus the user-task check
    # at the box centre (tasks.check_family, one per client); not the initial design again
    assert count("evals-resumed") == 2 * (iters - saved) + 2, (count("evals-resumed"), saved)
    assert count("evals-straight") > count("evals-resumed")
    resumed = json.loads((tmp_path / "resumed" / "run.json").read_text())
    straight = json.loads((tmp_path / "straight" / "run.json").read_text())
    assert _without_time(resumed) == _without_time(straight), f"killed after round {saved}"
    assert _rounds_done(ckpt / "batch-0.npz") == iters
    print(f"{method}: killed with {saved}/{iters} rounds saved; resumed run.json identical")


def test_resume_with_other_options_is_one_clear_error(tmp_path, capsys):
    args = ["run", "--benchmark", "sinusoid", "--clients", "2", "--iters", "2", "--quiet", "--out", str(tmp_path / "o"),
            "--checkpoint", str(tmp_path / "ck"), *SMALL_ARGS]
    assert cli.main(args) == 0
    capsys.readouterr()
    code = cli.main([*args[:6], "3", *args[7:], "--resume"])  # --iters 3
    out, err = capsys.readouterr()
    assert code == 2
    assert err.count("\n") == 1 and "other options" in err and "Traceback" not in err
    # reusing the folder without --resume is refused too (nothing is overwritten)
    code = cli.main(args)
    out, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and "--resume" in err
    # and --resume alone needs a folder
    code = cli.main(["run", "--benchmark", "sinusoid", "--out", str(tmp_path / "p"), "--resume"])
    out, err = capsys.readouterr()
    assert code == 2 and err.strip() == "pacd-bo: error: --resume needs --checkpoint DIR"


def test_checkpoint_holds_the_complete_state(tmp_path):
    config = small_config(num_clients=2, iters=2, seeds=(0, 1))
    experiment.run(config, checkpoint=str(tmp_path))
    with np.load(tmp_path / "batch-0.npz") as z:
        meta = json.loads(bytes(z["meta"]).decode())
        shapes = [tuple(s) for s, _ in meta["leaves"]]
    assert meta["rounds_done"] == 2 and meta["extra"]["seeds"] == [0, 1]
    capacity = 5 + 2
    # buffers (X, y, count), the noise-free record, particles and both Adam moments, step counter
    assert (2, 2, capacity, 2) in shapes and (2, 2, capacity) in shapes and (2, 2) in shapes
    assert any(len(s) == 3 and s[:2] == (2, 3) for s in shapes)  # particles (S, K, P)
    assert meta["config_hash"] == checkpoint.config_hash(config, {"role": ""})


def test_stop_on_bad_value_checkpoints_the_last_complete_round(tmp_path, capsys):
    code = cli.main(["run", "--task", "helpers:nan_round_factory", "--clients", "2", "--iters", "3", "--quiet",
                     "--out", str(tmp_path / "o"), "--checkpoint", str(tmp_path / "ck"), *SMALL_ARGS])
    _, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1
    assert "client 1 returned a non-finite objective value (nan) at round 0 (seed 0)" in err
    assert "initial design is saved" in err
    assert _rounds_done(tmp_path / "ck" / "batch-0.npz") == 0
    # resuming with skip continues from the saved state
    code = cli.main(["run", "--task", "helpers:nan_round_factory", "--clients", "2", "--iters", "3", "--quiet",
                     "--out", str(tmp_path / "o"), "--checkpoint", str(tmp_path / "ck"), "--resume",
                     "--on-bad-value", "skip", *SMALL_ARGS])
    _, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads((tmp_path / "o" / "run.json").read_text())
    c0, c1 = doc["results"][0]["clients"]
    assert c0["skipped_rounds"] == [] and c1["skipped_rounds"] == [0, 1, 2]


def test_skip_drops_bad_values_and_records_them():
    config = small_config(num_clients=2, iters=3, on_bad_value="skip", method="independent")
    from helpers import nan_round_factory

    doc = experiment.run(config, nan_round_factory)
    good, bad = doc["results"][0]["clients"]
    assert good["skipped_rounds"] == [] and len(good["X"]) == 5 + 3
    # client 1 is NaN off its design: every query was dropped, its buffer holds the design only
    assert bad["skipped_rounds"] == [0, 1, 2]
    assert len(bad["X"]) == len(bad["y"]) == len(bad["f"]) == 5
    assert np.all(np.isfinite(bad["y"])) and np.all(np.isfinite(bad["f"]))
    assert len(bad["regret"]) == 4 and bad["regret"] == [1.0] * 4  # no improvement in skipped rounds
    # client 0 (its own GP) is unaffected: the same queries as a run where nothing is skipped
    stop_doc = experiment.run(config.replace(num_clients=2, on_bad_value="stop"), _finite_factory)
    np.testing.assert_array_equal(stop_doc["results"][0]["clients"][0]["X"], good["X"])


def _finite_factory(num_clients, seed):
    from helpers import Shifted

    return Shifted(num_clients, seed)


def test_a_damaged_archive_and_a_stray_temporary_file(tmp_path, capsys):
    args = ["run", "--benchmark", "sinusoid", "--clients", "2", "--iters", "2", "--quiet", "--out", str(tmp_path / "o"),
            "--checkpoint", str(tmp_path / "ck"), *SMALL_ARGS]
    # a temporary file an interrupted first save left behind is not a checkpoint to resume
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / ".batch-0.npz.x1y2.npz").write_bytes(b"partial")
    assert cli.main(args) == 0
    capsys.readouterr()
    # an archive that lost an array after its metadata: one line, exit 2, not a KeyError traceback
    path = tmp_path / "ck" / "batch-0.npz"
    with np.load(path) as z:
        kept = {k: z[k] for k in z.files if k != "leaf_00003"}
    np.savez(path, **kept)
    code = cli.main([*args, "--resume"])
    out, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and "is damaged" in err and "Traceback" not in err, err
