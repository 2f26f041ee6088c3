"""Progress bars (on a terminal only, off with --quiet, rank 0 only) and figures (--format, shared method colours).

The long commands' heavy work is replaced by stand-ins that report rounds the
way the real backends do, so these tests check the wiring in seconds; the
bar itself is checked on a real pseudo-terminal.
"""

from __future__ import annotations

import fcntl
import io
import os
import pty
import struct
import subprocess
import sys
import termios
import textwrap
from pathlib import Path

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

from pacd_jax import cli, plotting, progress  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


class _Stream(io.StringIO):
    def __init__(self, tty: bool):
        super().__init__()
        self._tty = tty

    def isatty(self):
        return self._tty


def test_enabled_needs_a_terminal_no_quiet_and_rank_0():
    assert progress.enabled(False, True, _Stream(True))
    assert not progress.enabled(True, True, _Stream(True))  # --quiet
    assert not progress.enabled(False, True, _Stream(False))  # piped, redirected, CI log
    assert not progress.enabled(False, False, _Stream(True))  # an MPI client rank
    assert not progress.enabled(False, True, object())  # a stream without isatty
    closed = io.StringIO()
    closed.close()
    assert not progress.enabled(False, True, closed)  # isatty raises ValueError on a closed stream


def _bar_output(quiet: bool, use_pty: bool) -> str:
    """stderr of a process that moves a bar over 3 rounds, with stderr on a pty or a pipe."""
    code = textwrap.dedent(f"""
        import time
        from pacd_jax import progress
        bar = progress.bar(3, "round", "demo", quiet={quiet})
        tick = progress.round_callback(bar)
        for done in (1, 2, 3):
            time.sleep(0.05)
            tick(done, 3)
        bar.refresh()
        time.sleep(0.2)
        bar.close()
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    if not use_pty:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return proc.stderr
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # a 120-column terminal
    proc = subprocess.Popen([sys.executable, "-c", code], stderr=follower, stdout=subprocess.DEVNULL, env=env)
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 4096)
        except OSError:  # the child closed the pty
            break
        if not data:
            break
        chunks.append(data)
    os.close(leader)
    assert proc.wait(timeout=60) == 0
    return b"".join(chunks).decode(errors="replace")


def test_bar_on_a_terminal_shows_rounds_done_and_time_left():
    out = _bar_output(quiet=False, use_pty=True)
    assert "demo: 3/3 rounds" in out and "left]" in out, out
    assert "demo" not in _bar_output(quiet=True, use_pty=True)
    assert _bar_output(quiet=False, use_pty=False) == ""


def test_every_long_command_has_quiet_and_every_figure_writer_has_format():
    subs = {a.dest: a for a in cli.build_parser()._actions if a.__class__.__name__ == "_SubParsersAction"}["command"].choices
    for name in ("run", "table", "attack", "gradnorms"):
        options = subs[name]._option_string_actions
        assert "--quiet" in options, name
        assert options["--format"].choices == ("png", "pdf"), name
        assert options["--format"].default == "png", name


@pytest.fixture
def tty(monkeypatch):
    """stderr counts as a terminal (capsys replaces it with a pipe)."""
    monkeypatch.setattr(progress, "_isatty", lambda stream: True)


def _fake_gradnorms_record(config, rounds, quantile=0.5, on_round=None):
    total = len(config.seeds) * (max(rounds) + 1)
    for done in range(1, total + 1):
        on_round(done, total)
    norms = {str(r): list(np.geomspace(1, 100, 30) * (r + 1)) for r in rounds}
    return {"benchmark": config.benchmark, "config": {}, "rounds": list(rounds), "quantile": quantile, "norms": norms,
            "summary": {"round0_median": 10.0, "round0_q10": 2.0, "round0_q90": 50.0, "suggested_clip": 10.0}}


@pytest.mark.parametrize("quiet", [False, True])
def test_gradnorms_shows_a_bar_and_writes_the_chosen_format(quiet, tty, monkeypatch, tmp_path, capsys):
    from pacd_jax import gradnorms

    monkeypatch.setattr(gradnorms, "record", _fake_gradnorms_record)
    args = ["gradnorms", "--seeds", "2", "--rounds", "0,3", "--format", "pdf", "--out", str(tmp_path)]
    assert cli.main(args + (["--quiet"] if quiet else [])) == 0
    err = capsys.readouterr().err
    assert ("pacd-bo gradnorms: 8/8 rounds" in err) != quiet, err
    assert (tmp_path / "gradnorms.pdf").read_bytes()[:4] == b"%PDF"
    assert not (tmp_path / "gradnorms.png").exists()


def _fake_leakage(config, target, rounds, attack_config, task_factory=None, on_round=None, on_bo_round=None, progressive=None, follow=False):
    rng = np.random.default_rng(0)
    for done in range(1, config.iters + 1):
        on_bo_round(done, config.iters)
    entries = []
    for t in rounds:
        X = rng.uniform(size=(5 + t, 2))
        entry = {"round": t, "m": len(X), "loss": 1.0, "matched_rmse": 0.4, "chamfer": 0.3, "recall_at_r": 0.1,
                 "precision_at_r": 0.1, "dispersion": 0.5, "true_dispersion": 0.4, "time_s": 0.0,
                 "baseline": {"matched_rmse": 0.4, "dispersion": 0.5}, "X_true": X.tolist(), "X_rec": X[::-1].tolist()}
        on_round(entry)
        entries.append(entry)
    dp = {"sigma": config.dp_sigma, "clip": config.dp_clip} if config.dp_sigma > 0 else None
    return {"benchmark": config.benchmark, "target_client": target, "dp": dp, "rounds": entries}


@pytest.mark.parametrize("quiet", [False, True])
def test_attack_shows_bars_for_the_run_and_the_attacks_and_writes_the_chosen_format(quiet, tty, monkeypatch, tmp_path, capsys):
    from pacd_jax import leakage

    monkeypatch.setattr(leakage, "run_leakage", _fake_leakage)
    args = ["attack", "--iters", "4", "--rounds", "1,3", "--dp-sigma", "2", "--format", "pdf", "--out", str(tmp_path)]
    assert cli.main(args + (["--quiet"] if quiet else [])) == 0
    captured = capsys.readouterr()
    for bar in ("PACD-BO run (no DP): 4/4 rounds", "DLG attacks (no DP): 2/2 attacks", "PACD-BO run (DP sigma=2): 4/4 rounds",
                "DLG attacks (DP sigma=2): 2/2 attacks"):
        assert (bar in captured.err) != quiet, captured.err
    assert ("matched RMSE" in captured.out) != quiet
    for name in ("leakage.pdf", "dispersion_vs_round.pdf"):
        assert (tmp_path / name).read_bytes()[:4] == b"%PDF"


@pytest.mark.parametrize("rank, shown", [(0, True), (1, False)])
def test_run_shows_the_bar_only_on_rank_0_under_mpi(rank, shown, tty, monkeypatch, tmp_path, capsys):
    from pacd_jax import experiment

    def fake_run(config, factory, on_round, comm_log, **kwargs):
        for done in range(1, config.iters + 1):
            on_round(done, config.iters)
        return None  # every rank returns None here: we only look at the bar

    monkeypatch.setattr(experiment, "run", fake_run)
    monkeypatch.setattr(cli, "_world_rank", lambda: rank)
    monkeypatch.setattr(cli, "_prepare_mpi_process", lambda argv: None)
    assert cli.main(["run", "--backend", "mpi", "--iters", "5", "--out", str(tmp_path)]) == 0
    assert ("pacd-bo run: 5/5 rounds" in capsys.readouterr().err) == shown


# -- figures: one colour per method ------------------------------------------------------


@pytest.fixture
def saved_lines(monkeypatch):
    """Every saved figure's labelled lines as ``{label: colour}`` (and its axis labels)."""
    from matplotlib.colors import to_hex
    from matplotlib.figure import Figure

    saved = []
    original = Figure.savefig

    def spy(fig, *args, **kwargs):
        lines = {ln.get_label(): to_hex(ln.get_color()) for ax in fig.axes for ln in ax.get_lines() if not ln.get_label().startswith("_")}
        labels = [(ax.get_xlabel(), ax.get_ylabel()) for ax in fig.axes]
        saved.append((lines, labels))
        return original(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", spy)
    return saved


def _fake_run_doc(method: str, seeds=(0, 1), clients=2, rounds=6) -> dict:
    rng = np.random.default_rng(len(method))
    results = []
    for s in seeds:
        cl = []
        for i in range(clients):
            regret = np.minimum.accumulate(np.r_[1.0, rng.uniform(0.01, 1.0, rounds)]).tolist()
            cl.append({"client": i, "regret": regret, "final_regret": regret[-1], "auc": float(np.mean(regret[1:2]))})
        results.append({"seed": s, "clients": cl})
    return {"benchmark": "branin", "method": method, "num_clients": clients, "iters": rounds, "results": results,
            "wall_time_s": 1.0}


def test_convergence_and_table_figures_use_the_shared_method_colours(saved_lines, tmp_path):
    from pacd_jax import io as pio
    from pacd_jax import table
    from pacd_jax.config import RunConfig

    for method in plotting.METHOD_COLOURS:
        plotting.plot_convergence(_fake_run_doc(method), tmp_path / f"{method}.pdf")
        lines, labels = saved_lines[-1]
        assert lines[f"{plotting.METHOD_LABELS[method]} (mean)"] == plotting.METHOD_COLOURS[method].lower()
        assert all(x and y for x, y in labels)
        assert (tmp_path / f"{method}.pdf").read_bytes()[:4] == b"%PDF"

    methods = list(plotting.METHOD_COLOURS)
    for method in methods:
        pio.write_json(table.cell_path(tmp_path / "grid", "branin", method), _fake_run_doc(method))
    table.summarise_grid(RunConfig(seeds=(0, 1), iters=6), ["branin"], methods, tmp_path / "grid", "test", None, fmt="pdf")
    lines, labels = saved_lines[-1]
    assert lines == {plotting.METHOD_LABELS[m]: plotting.METHOD_COLOURS[m].lower() for m in methods}
    assert labels[0][0] and labels[0][1]
    assert (tmp_path / "grid" / "convergence.pdf").read_bytes()[:4] == b"%PDF"
    assert not (tmp_path / "grid" / "convergence.png").exists()


def test_table_command_passes_format_and_the_progress_rule(monkeypatch, tmp_path):
    from pacd_jax import table

    seen = {}

    def fake_grid(base, benchmarks, methods, out, jobs, progress, command, fmt):
        seen.update(progress=progress, fmt=fmt)
        return {}

    monkeypatch.setattr(table, "run_grid", fake_grid)
    assert cli.main(["table", "--seeds", "1", "--format", "pdf", "--quiet", "--out", str(tmp_path)]) == 0
    assert seen == {"progress": False, "fmt": "pdf"}
