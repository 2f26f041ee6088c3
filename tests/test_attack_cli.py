"""`pacd-bo attack` end to end on a tiny run, and its one-line errors."""

import json

import pytest

from pacd_jax import cli

TINY = ["--clients", "2", "--iters", "2", "--particles", "2", "--hidden", "4", "--svgd-steps", "2",
        "--svgd-steps-init", "3", "--candidates", "16", "--local-candidates", "4", "--refine", "1",
        "--refine-steps", "1", "--restarts", "2", "--steps", "5", "--quiet"]


def test_attack_writes_the_documented_outputs(tmp_path):
    out = tmp_path / "a"
    assert cli.main(["attack", "--rounds", "1", "--box", *TINY, "--out", str(out)]) == 0
    doc = json.loads((out / "attack.json").read_text())
    assert doc["benchmark"] == "branin" and doc["target_client"] == 0 and doc["dp"] is None
    (entry,) = doc["rounds"]
    for key in ("round", "m", "loss", "dispersion", "matched_rmse", "chamfer", "recall_at_r", "precision_at_r", "r", "time_s"):
        assert key in entry
    assert entry["round"] == 1 and entry["m"] == 6
    assert set(doc["rounds"][0]["baseline"]) >= {"matched_rmse", "chamfer", "recall_at_r", "dispersion"}
    assert all(0.0 <= v <= 1.0 for p in entry["X_rec"] for v in p)  # unit box
    assert (out / "leakage.png").stat().st_size > 0 and (out / "dispersion_vs_round.png").stat().st_size > 0


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--rounds", "2"], "--rounds must be in [0, 1]"),
        (["--target-client", "2"], "--target-client must be in [0, 1]"),
        (["--benchmark", "nope"], "unknown benchmark"),
        (["--restarts", "0"], "restarts"),
        (["--rounds", "1", "--attack-mode", "pursuit-follow", "--pursuit-converged-rtol", "2"], "converged_rtol"),
        (["--rounds", "1", "--attack-mode", "pursuit", "--pursuit-shortlist", "-1"], "pursuit-shortlist"),
        (["--rounds", "1", "--attack-mode", "pursuit", "--pursuit-faces", "x"], "pursuit-faces"),
        (["--rounds", "1", "--attack-particles", "3"], "--attack-particles must be at most --particles (2)"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, extra, message):
    assert cli.main(["attack", *TINY, *extra, "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_a_non_finite_message_is_reported_not_attacked():
    import numpy as np

    from pacd_jax import attack, intercept, leakage, methods
    from pacd_jax.config import RunConfig

    model = methods.meta_gp(RunConfig(hidden=(4,)), 2)
    P = model.num_params
    rec = intercept.Record(3, 0, 4, np.zeros((2, P)), np.full((2, P), np.nan), np.array([[0.0, 1.0], [0.0, 1.0]]))
    truth = intercept.Truth(np.random.default_rng(0).uniform(size=(4, 2)), np.zeros(4))
    e = leakage.attack_record(model, rec, truth, attack.AttackConfig(), None, np.random.default_rng(0))
    assert "not finite" in e["error"] and e["matched_rmse"] is None and e["X_rec"] is None


@pytest.mark.heavy  # a whole progressive attack
def test_progressive_mode_follows_every_round_and_scores_the_listed_ones(tmp_path):
    out = tmp_path / "p"
    args = ["attack", "--attack-mode", "progressive", "--rounds", "0,2", *TINY, "--iters", "3",
            "--first-restarts", "2", "--new-candidates", "2", "--search-steps", "3", "--joint-steps", "2", "--tries", "1"]
    assert cli.main([*args, "--out", str(out)]) == 0
    doc = json.loads((out / "attack.json").read_text())
    assert doc["attack"]["mode"] == "progressive" and doc["attack"]["candidates"] == 2
    assert [e["round"] for e in doc["rounds"]] == [0, 2]
    assert [e["m"] for e in doc["rounds"]] == [5, 7]  # Branin: 5 initial points, one per round
    first, last = doc["rounds"]
    assert last["cumulative_time_s"] >= first["cumulative_time_s"] + last["time_s"] - 1e-9
    for e in doc["rounds"]:
        assert e["rmse_ratio"] >= 0 and e["tries"] == 1 and "rel_loss" in e
        assert all(0.0 <= v <= 1.0 for p in e["X_rec"] for v in p)


@pytest.mark.heavy  # a pursuit attack through the CLI
def test_pursuit_mode_writes_its_options_and_stages(tmp_path):
    out = tmp_path / "u"
    args = ["attack", "--attack-mode", "pursuit", "--rounds", "1", *TINY, "--pursuit-candidates", "64",
            "--pursuit-grow-steps", "2", "--pursuit-final-steps", "3", "--pursuit-swaps", "1",
            "--pursuit-exchange-steps", "2", "--pursuit-search-particles", "0"]
    assert cli.main([*args, "--out", str(out)]) == 0
    doc = json.loads((out / "attack.json").read_text())
    assert doc["attack"]["mode"] == "pursuit" and doc["attack"]["candidates"] == 64 and doc["attack"]["swaps"] == 1
    assert doc["attack"]["converged_rtol"] is None  # fixed step counts, as the README's pursuit table ran
    assert doc["attack"]["shortlist"] is None and doc["attack"]["faces"] == 512  # every candidate scored, faces too
    (entry,) = doc["rounds"]
    assert entry["m"] == 6 and len(entry["X_rec"]) == 6
    assert [name for name, _ in entry["stages"]][:2] == ["grow", "refine"]
    assert entry["loss"] == entry["stages"][-1][1] and 0.0 <= entry["loss"] <= 1.0
    assert all(0.0 <= v <= 1.0 for p in entry["X_rec"] for v in p)


@pytest.mark.heavy  # a whole follow attack
def test_pursuit_follow_mode_follows_every_round_and_scores_the_listed_ones(tmp_path):
    out = tmp_path / "f"
    args = ["attack", "--attack-mode", "pursuit-follow", "--rounds", "0,2", *TINY, "--iters", "3", "--pursuit-candidates", "64",
            "--pursuit-grow-steps", "2", "--pursuit-final-steps", "3", "--pursuit-swaps", "1",
            "--pursuit-exchange-steps", "2", "--pursuit-search-particles", "0"]
    assert cli.main([*args, "--out", str(out)]) == 0
    doc = json.loads((out / "attack.json").read_text())
    assert doc["attack"]["mode"] == "pursuit-follow" and doc["attack"]["candidates"] == 64
    assert doc["attack"]["converged_rtol"] == 1e-6  # the follow mode's default
    assert doc["attack"]["shortlist"] is None  # every candidate rescored
    assert doc["attack"]["accept_growth"] == 2.0
    assert [e["round"] for e in doc["rounds"]] == [0, 2]
    assert [e["m"] for e in doc["rounds"]] == [5, 7] and [len(e["X_rec"]) for e in doc["rounds"]] == [5, 7]
    first, last = doc["rounds"]
    # round 1 was followed but not scored: its time is in the running total
    assert last["cumulative_time_s"] >= first["cumulative_time_s"] + last["time_s"] - 1e-9
    assert [name for name, _ in last["stages"]][0] == "grow"
    for e in doc["rounds"]:
        assert 0.0 <= e["loss"] <= 1.0 and e["rmse_ratio"] >= 0
        assert all(0.0 <= v <= 1.0 for p in e["X_rec"] for v in p)


def test_follow_needs_a_pursuit_config():
    from pacd_jax import attack, leakage
    from pacd_jax.config import RunConfig

    with pytest.raises(ValueError, match="PursuitConfig"):
        leakage.run_leakage(RunConfig(iters=2), 0, [1], attack.AttackConfig(), follow=True)
