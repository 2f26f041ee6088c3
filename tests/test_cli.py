"""``pacd-bo run``: the run.json contract, and one clear line with exit code 2 for bad input."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pacd_jax import cli

TESTS = Path(__file__).parent
SMALL_ARGS = [
    "--particles", "3", "--hidden", "8,8", "--svgd-steps", "5", "--svgd-steps-init", "20",
    "--candidates", "64", "--refine", "2", "--refine-steps", "5", "--gp-fit-steps", "10",
]


def _run(args, capsys):
    code = cli.main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_run_writes_run_json_with_the_documented_schema(tmp_path, capsys):
    out_dir = tmp_path / "out"
    code, out, err = _run(["run", "--benchmark", "sinusoid", "--method", "pacd", "--clients", "3", "--seeds", "2",
                           "--iters", "3", "--out", str(out_dir), *SMALL_ARGS], capsys)
    assert code == 0, err
    doc = json.loads((out_dir / "run.json").read_text())
    assert set(doc) == {"benchmark", "method", "backend", "num_clients", "iters", "config", "wall_time_s",
                        "epsilon", "summary", "communication", "results"}
    comm = doc["communication"]
    K, P = comm["message_shape"]
    assert K == 3 and comm["bytes_per_message"] == K * P * 4
    steps = [doc["config"]["svgd_steps_init"]] + [doc["config"]["svgd_steps"]] * 2
    assert [r["svgd_steps"] for r in comm["per_round"]] == steps
    # per client and seed: one gradient message per step up, one particle broadcast per step plus one down
    assert comm["bytes_sent_per_client"] == [2 * sum(steps) * K * P * 4] * 3
    assert comm["bytes_sent_by_coordinator"] == 3 * 2 * (sum(steps) + 3) * K * P * 4
    assert (doc["benchmark"], doc["method"], doc["backend"], doc["num_clients"], doc["iters"]) == ("sinusoid", "pacd", "vmap", 3, 3)
    assert doc["epsilon"] is None and doc["wall_time_s"] > 0
    assert set(doc["summary"]) == {"final_regret_mean", "final_regret_std", "auc_mean", "auc_std"}
    assert doc["config"]["num_particles"] == 3 and doc["config"]["seeds"] == [0, 1]
    assert [r["seed"] for r in doc["results"]] == [0, 1]
    for r in doc["results"]:
        assert [c["client"] for c in r["clients"]] == [0, 1, 2]
        for c in r["clients"]:
            assert set(c) == {"client", "X", "y", "f", "regret", "final_regret", "auc", "best_y"}
            assert c["best_y"] == min(c["y"])
            assert np.shape(c["X"]) == (5 + 3, 1) and len(c["y"]) == len(c["f"]) == 8
            assert len(c["regret"]) == 4 and c["final_regret"] == c["regret"][-1]
            assert np.all(np.diff(c["regret"]) <= 1e-12)  # best-so-far regret never increases
    finals = [np.mean([c["final_regret"] for c in r["clients"]]) for r in doc["results"]]
    assert doc["summary"]["final_regret_mean"] == pytest.approx(np.mean(finals))
    assert (out_dir / "convergence.png").stat().st_size > 1000
    assert "final normalised regret" in out and "client2" in out


def test_kernel_flags_reach_the_model(tmp_path, capsys):
    """``--input-kernel``, ``--feature-kernel`` and ``--learn-outputscale`` are recorded; they add one input lengthscale per dimension and one output scale to every message."""
    from pacd_jax.gp import MetaGP, MetaGPConfig

    code, _, err = _run(["run", "--benchmark", "branin", "--clients", "2", "--iters", "2", "--input-kernel", "--feature-kernel", "matern52",
                         "--learn-outputscale", "--quiet", "--out", str(tmp_path), *SMALL_ARGS], capsys)
    assert code == 0, err
    doc = json.loads((tmp_path / "run.json").read_text())
    assert doc["config"]["input_kernel"] is True and doc["config"]["feature_kernel"] == "matern52"
    assert doc["config"]["learn_outputscale"] is True
    expected = MetaGP(MetaGPConfig(dim=2, hidden=(8, 8), input_kernel=True, learn_outputscale=True)).num_params
    assert doc["communication"]["message_shape"] == [3, expected]
    assert expected == MetaGP(MetaGPConfig(dim=2, hidden=(8, 8))).num_params + 2 + 1
    assert np.isfinite(doc["summary"]["final_regret_mean"])


def test_run_pdf_and_independent(tmp_path, capsys):
    code, _, err = _run(["run", "--benchmark", "branin", "--method", "independent", "--clients", "2", "--iters", "2",
                         "--seed-list", "4", "--format", "pdf", "--quiet", "--out", str(tmp_path), *SMALL_ARGS], capsys)
    assert code == 0, err
    doc = json.loads((tmp_path / "run.json").read_text())
    assert [r["seed"] for r in doc["results"]] == [4]
    assert (tmp_path / "convergence.pdf").read_bytes()[:4] == b"%PDF"


@pytest.mark.parametrize(
    "args, message",
    [
        (["--benchmark", "nope"], "unknown benchmark 'nope'"),
        (["--clients", "0"], "--clients: must be >= 1"),
        (["--iters", "0"], "--iters: must be >= 1"),
        (["--iters", "ten"], "--iters: expected an integer"),
        (["--method", "magic"], "--method: invalid choice"),
        (["--seed-list", "1,1"], "seeds must be distinct"),
        (["--seed-list", "-3"], "seed must be in"),
        (["--lr", "nan"], "--lr: must be finite"),
        (["--kappa", "-1"], "kappa must be >= 0"),
        (["--task", "no_such_module:make"], "cannot import task module 'no_such_module'"),
        (["--task", "helpers"], "MODULE:FACTORY"),
        (["--task", "helpers:missing"], "no callable 'missing'"),
        (["--task", "helpers:nan_factory", "--clients", "3"], "client 1 returned a non-finite objective value"),
        (["--task", "helpers:wrong_shape_factory", "--clients", "2"], "must return shape (2,)"),
        (["--task", "helpers:no_optimum_factory", "--clients", "2"], "optimum(i) is not implemented"),
        (["--seeds", "99999999999"], "--seeds must be at most 100000"),
        (["--dp-sigma", "1e-300"], "dp_sigma must be 0 (no DP) or at least 1e-6"),
        (["--dp-sigma", "1e200"], "dp_sigma must be >= 0.0 and <= 1000000.0"),
        (["--lr", "1e300"], "learning_rate must be > 0.0 and <= 100.0"),
        (["--noise-std", "1e300"], "noise_std must be >= 0.0 and <= 1000000000000.0"),
    ],
)
def test_bad_input_one_line_exit_2_no_output(tmp_path, capsys, args, message):
    out_dir = tmp_path / "out"
    code, out, err = _run(["run", "--out", str(out_dir), "--iters", "2", *SMALL_ARGS, *args], capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("pacd-bo") and "error" in lines[0] and message in lines[0], lines[0]
    assert "Traceback" not in err
    assert not (out_dir / "run.json").exists()


def test_missing_out_and_unknown_command(capsys):
    code, _, err = _run(["run", "--benchmark", "branin"], capsys)
    assert code == 2 and "--out" in err and len(err.strip().splitlines()) == 1
    code, _, err = _run(["fly"], capsys)
    assert code == 2 and "invalid choice" in err


def test_console_script_help_and_error_exit_code(tmp_path):
    exe = Path(sys.executable).with_name("pacd-bo")
    ok = subprocess.run([str(exe), "run", "--help"], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and "--benchmark" in ok.stdout and "--x64" in ok.stdout
    bad = subprocess.run([str(exe), "run", "--benchmark", "nope", "--out", str(tmp_path / "o")],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr


@pytest.mark.parametrize("args", [
    ["privacy", "--sigmas", "0", "--operating-sigma", "8"],  # UsageError raised by a subcommand module
    ["run", "--benchmark", "nope"],  # ValueError from the configuration
])
def test_python_dash_m_errors_are_one_line_too(tmp_path, args):
    # `python -m pacd_jax.cli` (what the benchmark scripts and mpiexec use) runs cli.py as __main__;
    # its errors must be the same one line and exit code 2 as the console script's
    bad = subprocess.run([sys.executable, "-m", "pacd_jax.cli", *args, "--out", str(tmp_path / "o")],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2, bad.stderr
    assert bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr and ": error: " in bad.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("command", ["run", "table", "gradnorms"])
def test_a_huge_seed_count_is_one_line_before_any_work(tmp_path, capsys, command):
    # the count is checked before range(N) is built (config.seeds_from_options), in every command that takes --seeds N
    code, _, err = _run([command, "--seeds", "99999999999", "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and "--seeds must be at most 100000, got 99999999999" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_user_task_from_the_command_line(tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(TESTS))
    code, _, err = _run(["run", "--task", "helpers:shifted_factory", "--clients", "2", "--iters", "2", "--quiet",
                         "--out", str(tmp_path), *SMALL_ARGS], capsys)
    assert code == 0, err
    assert json.loads((tmp_path / "run.json").read_text())["benchmark"] == "shifted"


@pytest.mark.parametrize("flag", ["--out", "--checkpoint", "--intercept-out", "--comm-log"])
def test_an_output_path_that_cannot_be_made_is_refused_before_the_run(tmp_path, capsys, flag):
    # found before any work (it used to end a finished run with a traceback); nothing is created
    (tmp_path / "afile").write_text("")
    bad = str(tmp_path / "afile" / ("x.npz" if flag == "--intercept-out" else "x"))
    extra = {"--out": [], "--checkpoint": ["--checkpoint", bad], "--comm-log": ["--comm-log", bad],
             "--intercept-out": ["--intercept-client", "0", "--intercept-rounds", "1", "--intercept-out", bad]}[flag]
    out_dir = bad if flag == "--out" else str(tmp_path / "out")
    code, out, err = _run(["run", "--out", out_dir, "--iters", "2", *SMALL_ARGS, *extra], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "is not a folder" in err and "Traceback" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]
