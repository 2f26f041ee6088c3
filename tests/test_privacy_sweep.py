"""`pacd-bo privacy` (the sigma sweep) end to end on a tiny run, its accounting, resume and errors."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from pacd_jax import accounting, cli, decoys, privacy_sweep

RUN = ["--benchmark", "branin", "--clients", "2", "--iters", "3", "--particles", "2", "--hidden", "4", "--svgd-steps", "2",
       "--svgd-steps-init", "3", "--candidates", "16", "--local-candidates", "4", "--refine", "1", "--refine-steps", "1"]
TINY = [*RUN, "--seeds", "0", "--rounds", "1,2", "--restarts", "1", "--steps", "4", "--clip", "2.5", "--quiet", "--decoys", "0"]
DECOYS = 3


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("privacy") / "sweep"
    argv = ["privacy", *TINY, "--sigmas", "0,1.5", "--operating-sigma", "1.5", "--decoys", str(DECOYS), "--out", str(out)]
    assert cli.main(argv) == 0
    return out, argv, json.loads((out / "privacy.json").read_text())


def test_writes_the_documented_files(sweep):
    out, _, doc = sweep
    assert set(doc["sigmas"]) == {"0", "1.5"}
    assert doc["rounds"] == [1, 2] and doc["seeds"] == [0] and doc["clip"] == 2.5 and doc["operating_sigma"] == 1.5
    assert {"command", "commit", "machine", "wall_time_s"} <= set(doc["meta"])
    assert doc["meta"]["command"].startswith("pacd-bo privacy ")
    for key, e in doc["sigmas"].items():
        assert e["sigma"] == float(key) and e["noise_std"] == pytest.approx(2 * float(key) * 2.5)
        r = e["regret"]
        assert len(r["curve_mean"]) == 4 and r["curve_mean"][0] == 1.0
        assert {"mean", "std", "min", "max"} <= set(r["final_regret"]) and {"mean", "std"} <= set(r["auc"])
        (cell,) = e["per_seed"]
        assert cell["seed"] == 0 and len(cell["clients"]) == 2
        assert r["final_regret"]["mean"] == pytest.approx(np.mean([c["final_regret"] for c in cell["clients"]]))
        for t in ("1", "2"):
            a = e["attack"][t]
            for score in (*privacy_sweep.SCORES, "rmse_ratio"):
                assert set(a[score]) >= {"mean", "std"}
            lo, hi = a["band"]["matched_rmse"]
            assert 0 <= lo < hi <= math.sqrt(2)
            # the leakage baseline (mean of uniform guesses) lies inside the 5-95 % band of the same kind of guess
            assert lo <= a["baseline"]["matched_rmse"]["mean"] <= hi
            (entry,) = [x for x in cell["rounds"] if x["round"] == int(t)]
            assert a["rmse_ratio"]["mean"] == pytest.approx(entry["matched_rmse"] / entry["baseline"]["matched_rmse"])
            assert a["verdicts"] == [privacy_sweep.verdict(entry["matched_rmse"], entry["band"]["matched_rmse"])]
            assert a["m"] == entry["m"] == 5 + int(t)
            assert a["decoy_verdicts"] == [entry["decoy"]["verdict"]] and entry["decoy"]["draws"] == DECOYS
        assert e["within_decoy_band_every_round"] == all(v == "within" for a in e["attack"].values() for v in a["decoy_verdicts"])
        ps = [x["decoy"]["p_value"] for x in cell["rounds"]]
        assert e["decoy_p_min"] == min(ps) and e["decoy_p_min_bonferroni"] == pytest.approx(min(1.0, min(ps) * len(ps)))
        # the family-wise reading: this sigma's 2 attacks at level alpha / 4, decoys too few to say "below"
        f = e["family"]
        assert f["attacks"] == 2 and f["level"] == pytest.approx(privacy_sweep.FAMILY_ALPHA / 4)
        assert sum(f["counts"].values()) == 2 and f["decoy"]["draws"] == DECOYS and not f["decoy"]["resolvable"]
        for x in cell["rounds"]:
            p_lo, p_hi = x["family"]["p_below"], x["family"]["p_above"]
            assert x["family"]["verdict"] == privacy_sweep.family_verdict(p_lo, p_hi, f["level"])
            assert min(p_lo, p_hi) >= 1 / (privacy_sweep.FAMILY_DRAWS + 1)
            assert p_lo + p_hi > 1  # every guess is counted in one tail at least
            assert x["decoy"]["p_value"] + x["decoy"]["p_above"] >= 1
        assert f["within_every_round"] == all(v == "within" for a in e["attack"].values() for v in a["family_verdicts"])
    assert doc["decoy_band"]["draws"] == DECOYS and doc["decoy_band"]["first_seed"] == decoys.DECOY_SEED_BASE
    md = (out / "privacy.md").read_text()
    assert md.startswith("| sigma |") and "| 0 | 0 | ∞ (no DP) |" in md and "\n| 1.5 | 7.5 | " in md
    assert "attack vs decoy band (below/within/above) | smallest decoy p (Bonferroni) |" in md and f"in {DECOYS} runs with other seeds" in md
    assert "| family-wise 90 % band: guesses (below/within/above) | family-wise: decoys |" in md
    assert f"against {privacy_sweep.FAMILY_DRAWS} uniform guesses" in md and doc["family_band"]["alpha"] == privacy_sweep.FAMILY_ALPHA
    assert sorted(p.name for p in (out / "decoys").iterdir()) == ["sigma=0.json", "sigma=1.5.json"]
    for name in ("privacy_sweep.png", "dp_regret.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in (out / "cells").iterdir()) == ["sigma=0_seed=0.json", "sigma=1.5_seed=0.json"]


def test_figures_as_pdf(sweep, tmp_path):
    _, _, doc = sweep
    privacy_sweep.plot_sweep(doc, tmp_path / "s.pdf")
    privacy_sweep.plot_regret(doc, tmp_path / "r.pdf")
    assert (tmp_path / "s.pdf").read_bytes()[:5] == b"%PDF-" and (tmp_path / "r.pdf").read_bytes()[:5] == b"%PDF-"


def test_epsilon_is_the_accountants(sweep):
    _, _, doc = sweep
    n = 2 * accounting.total_steps(2, 3, 3)  # K = 2 particles x (3 + 2 x 2) SVGD steps
    e = doc["sigmas"]["1.5"]["epsilon"]
    assert e["compositions"] == n == 14
    assert e["pld"] == accounting.epsilon(1.5, n, 1e-5, "pld")
    assert e["rdp"] == accounting.epsilon(1.5, n, 1e-5, "rdp")
    assert e["pld"] == pytest.approx(accounting.gdp_epsilon(1.5, n, 1e-5), rel=1e-2)  # closed-form mu-GDP
    zero = doc["sigmas"]["0"]["epsilon"]
    assert float(zero["pld"]) == math.inf and float(zero["rdp"]) == math.inf


def test_regret_is_that_of_a_plain_run(sweep, tmp_path):
    """The sweep's run is `pacd-bo run` with the same options and sigma: interception and attack change nothing."""
    _, _, doc = sweep
    run_argv = ["run", *RUN, "--method", "pacd", "--seed-list", "0", "--dp-sigma", "1.5", "--dp-clip", "2.5", "--quiet",
                "--out", str(tmp_path / "run")]
    assert cli.main(run_argv) == 0
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    (cell,) = doc["sigmas"]["1.5"]["per_seed"]
    for mine, plain in zip(cell["clients"], run["results"][0]["clients"]):
        np.testing.assert_array_equal(mine["regret"], plain["regret"])
        assert mine["auc"] == plain["auc"] and mine["final_regret"] == plain["final_regret"]
    assert run["epsilon"]["epsilon"] == doc["sigmas"]["1.5"]["epsilon"]["pld"]


def test_a_rerun_reuses_finished_cells(sweep):
    out, argv, doc = sweep
    before = {p.name: p.read_text() for p in [*(out / "cells").iterdir(), *(out / "decoys").iterdir()]}
    assert cli.main(argv) == 0
    again = json.loads((out / "privacy.json").read_text())
    assert again["meta"]["cells_reused"] == 2 and again["meta"]["decoy_sets_reused"] == 2
    assert again["sigmas"] == doc["sigmas"]
    assert {p.name: p.read_text() for p in [*(out / "cells").iterdir(), *(out / "decoys").iterdir()]} == before


def _brute_matched_rmse(A, B) -> float:
    """Matched RMSE by trying every one-to-one pairing (independent of scipy's assignment)."""
    import itertools

    A, B = np.asarray(A, np.float64), np.asarray(B, np.float64)
    return min(math.sqrt(np.mean(np.sum((A[list(perm)] - B) ** 2, axis=1))) for perm in itertools.permutations(range(len(A))))


def test_decoy_band_is_the_matched_rmse_to_plain_runs_with_other_seeds(sweep, tmp_path):
    """Decoys are the target's queries of `pacd-bo run` with the decoy seeds; the band, p-value and verdict follow from them."""
    from pacd_jax import tasks

    _, _, doc = sweep
    seeds = decoys.decoy_seeds(DECOYS)
    run_argv = ["run", *RUN, "--method", "pacd", "--seed-list", ",".join(map(str, seeds)), "--dp-sigma", "1.5", "--dp-clip", "2.5",
                "--quiet", "--out", str(tmp_path / "run")]
    assert cli.main(run_argv) == 0
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert [r["seed"] for r in run["results"]] == seeds
    trajectories = []
    for r in run["results"]:
        b = np.asarray(tasks.make("branin", num_clients=2, seed=r["seed"]).bounds, np.float64)
        trajectories.append((np.asarray(r["clients"][0]["X"]) - b[:, 0]) / (b[:, 1] - b[:, 0]))
    (cell,) = doc["sigmas"]["1.5"]["per_seed"]
    for e in cell["rounds"]:
        null = np.sort([_brute_matched_rmse(e["X_rec"], X[: e["m"]]) for X in trajectories])
        d = e["decoy"]
        np.testing.assert_allclose(d["matched_rmse"], np.quantile(null, [0.05, 0.95]), rtol=1e-9)
        assert d["p_value"] == pytest.approx((1 + np.sum(null <= e["matched_rmse"])) / (DECOYS + 1))
        lo, hi = d["matched_rmse"]
        assert d["verdict"] == ("below" if e["matched_rmse"] < lo else "within" if e["matched_rmse"] <= hi else "above")


def test_a_decoy_run_of_the_attacked_seed_reproduces_the_attacked_data(sweep):
    """Decoys are drawn exactly as the target's data: the decoy generator given the attacked seed returns its true queries."""
    from pacd_jax.config import RunConfig

    out, _, _ = sweep
    cell = json.loads((out / "cells" / "sigma=1.5_seed=0.json").read_text())
    config = RunConfig.from_dict(cell["key"]["config"])
    (X,) = decoys.target_trajectories(config, 0, [0])
    for e in cell["result"]["rounds"]:
        np.testing.assert_allclose(X[: e["m"]], e["X_true"], rtol=0, atol=1e-6)


def test_decoy_band_by_hand():
    X_rec = [[0.5, 0.5]]
    # decoys whose first point lies 0.1, 0.2, ..., 1.0 from the reconstruction; later rows (later rounds) are not compared at m = 1
    traj = [np.array([[0.5 - 0.1 * j, 0.5], [9.0, 9.0]]) for j in range(1, 11)]
    null = np.arange(1, 11) / 10
    close = decoys.band(X_rec, 0.05, traj, 1)
    assert close["p_value"] == pytest.approx(1 / 11) and close["verdict"] == "below" and close["draws"] == 10
    np.testing.assert_allclose(close["matched_rmse"], np.quantile(null, [0.05, 0.95]))
    mid = decoys.band(X_rec, 0.55, traj, 1)
    assert mid["p_value"] == pytest.approx(6 / 11) and mid["verdict"] == "within"
    assert decoys.band(X_rec, 0.99, traj, 1)["verdict"] == "above"
    assert decoys.band(X_rec, None, traj, 1)["verdict"] == "error"
    assert decoys.decoy_seeds(2) == [decoys.DECOY_SEED_BASE, decoys.DECOY_SEED_BASE + 1]


def test_decoy_runs_are_saved_by_seed_so_a_stopped_set_goes_on_and_a_larger_one_adds_only_new_seeds(tmp_path, monkeypatch):
    """The decoy store (decoy_trajectories) with the runs replaced by a recorder: batches of DECOY_CHUNK seeds fixed by
    the seed, saved after each; a rerun runs nothing, a larger count only the new seeds, a stop keeps the finished
    batches; other options start afresh; a file keyed by its exact seeds (the older format) is read."""
    from pacd_jax import io
    from pacd_jax.config import RunConfig

    base = decoys.DECOY_SEED_BASE
    calls, fail_at = [], [None]

    def runs(config, target, seeds, task_factory=None, on_round=None):
        assert list(config.seeds) == list(seeds) and target == 0
        if fail_at[0] is not None and seeds[0] >= base + fail_at[0]:
            raise KeyboardInterrupt
        calls.append([s - base for s in seeds])
        for t in range(1, config.iters + 1):
            on_round(t, config.iters)
        return [np.full((3, 2), (s - base) / 100.0 + config.dp_sigma) for s in seeds]

    monkeypatch.setattr(decoys, "target_trajectories", runs)
    monkeypatch.setattr(privacy_sweep, "DECOY_CHUNK", 3)
    config, path = RunConfig(benchmark="branin", iters=4, dp_sigma=8.0), tmp_path / "decoys" / "sigma=8.json"
    expect = [np.full((3, 2), j / 100.0 + 8.0) for j in range(8)]
    ticks = []
    got, ran = privacy_sweep.decoy_trajectories(config, 0, 5, path, on_round=lambda n, of: ticks.append((n, of)))
    assert calls == [[0, 1, 2], [3, 4]] and ran == 5
    assert all(np.array_equal(a, b) for a, b in zip(got, expect[:5], strict=True))
    assert ticks[-1] == (4 * 5, 4 * 5) and [n for n, _ in ticks] == sorted(n for n, _ in ticks)
    saved = path.read_text()
    calls.clear()
    got, ran = privacy_sweep.decoy_trajectories(config, 0, 5, path)
    assert calls == [] and ran == 0 and path.read_text() == saved
    assert all(np.array_equal(a, b) for a, b in zip(got, expect[:5], strict=True))
    got, ran = privacy_sweep.decoy_trajectories(config, 0, 2, path)  # fewer: the first seeds, nothing run
    assert calls == [] and ran == 0 and len(got) == 2
    # a larger set: only the new seeds, in their own batches (5 with 3 and 4's batch, 6 and 7 in the next)
    got, ran = privacy_sweep.decoy_trajectories(config, 0, 8, path)
    assert calls == [[5], [6, 7]] and ran == 3 and all(np.array_equal(a, b) for a, b in zip(got, expect, strict=True))
    # stopped in its second batch: the first is kept and a rerun runs only the rest
    other = tmp_path / "other.json"
    calls.clear()
    fail_at[0] = 3
    with pytest.raises(KeyboardInterrupt):
        privacy_sweep.decoy_trajectories(config, 0, 6, other)
    assert sorted(privacy_sweep.load_decoys(other, config, 0)) == [base, base + 1, base + 2]
    fail_at[0] = None
    calls.clear()
    privacy_sweep.decoy_trajectories(config, 0, 6, other)
    assert calls == [[3, 4, 5]]
    # other options: nothing reused
    calls.clear()
    got, _ = privacy_sweep.decoy_trajectories(config.replace(dp_sigma=2.0), 0, 2, path)
    assert calls == [[0, 1]] and got[0][0, 0] == 2.0
    # the older format, keyed by the set's exact seeds, is read; a file of other options is not
    legacy = tmp_path / "legacy.json"
    old_key = json.loads(json.dumps({"version": privacy_sweep.CELL_VERSION, "config": config.replace(seeds=(base, base + 1)).identity(),
                                     "target": 0}))
    io.write_json(legacy, {"key": old_key, "result": {"seeds": [base, base + 1], "X": [[[0.5, 0.5]], [[0.25, 0.75]]]}})
    assert privacy_sweep.load_decoys(legacy, config, 0) == {base: [[0.5, 0.5]], base + 1: [[0.25, 0.75]]}
    assert privacy_sweep.load_decoys(legacy, config, 1) == {} and privacy_sweep.load_decoys(legacy, config.replace(iters=5), 0) == {}
    assert privacy_sweep.load_decoys(tmp_path / "missing.json", config, 0) == {}


def test_a_cell_with_other_options_is_not_reused(tmp_path):
    from pacd_jax import attack, io
    from pacd_jax.config import RunConfig

    key = privacy_sweep.cell_key(RunConfig(dp_sigma=1.0), 0, [1], attack.AttackConfig())
    io.write_json(tmp_path / "c.json", {"key": key, "result": {"x": 1}})
    assert privacy_sweep.load_cell(tmp_path / "c.json", key) == {"x": 1}
    other = privacy_sweep.cell_key(RunConfig(dp_sigma=1.0), 0, [1], attack.AttackConfig(steps=7))
    assert privacy_sweep.load_cell(tmp_path / "c.json", other) is None
    (tmp_path / "bad.json").write_text("{truncated")
    assert privacy_sweep.load_cell(tmp_path / "bad.json", key) is None
    assert privacy_sweep.load_cell(tmp_path / "missing.json", key) is None


def test_guess_band_and_verdict():
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(12, 2))
    band = privacy_sweep.guess_band(X, np.random.default_rng(1), draws=400)
    # independent oracle: quantiles of the Hungarian-matched RMSE of fresh uniform guesses (scipy)
    from scipy.optimize import linear_sum_assignment

    g = np.random.default_rng(2)
    vals = []
    for _ in range(400):
        G = g.uniform(size=X.shape)
        D2 = ((G[:, None] - X[None]) ** 2).sum(-1)
        r, c = linear_sum_assignment(D2)
        vals.append(np.sqrt(D2[r, c].mean()))
    assert band["matched_rmse"][0] == pytest.approx(np.quantile(vals, 0.05), abs=0.03)
    assert band["matched_rmse"][1] == pytest.approx(np.quantile(vals, 0.95), abs=0.03)
    assert privacy_sweep.verdict(0.0, [0.2, 0.5]) == "below"
    assert privacy_sweep.verdict(0.3, [0.2, 0.5]) == "within"
    assert privacy_sweep.verdict(0.9, [0.2, 0.5]) == "above"
    assert privacy_sweep.verdict(None, [0.2, 0.5]) == "error"


def test_edge_fraction():
    X = np.array([[0.5, 0.5], [0.0, 0.3], [0.995, 0.5], [0.5, 0.02], [0.2, 1.0]])
    assert privacy_sweep.edge_fraction(X) == pytest.approx(3 / 5)
    assert privacy_sweep.edge_fraction(X, tol=0.03) == pytest.approx(4 / 5)
    assert privacy_sweep.edge_fraction(None) is None


def test_aggregate_skips_unattackable_rounds(tmp_path):
    base = {"baseline": {k: 0.5 for k in privacy_sweep.SCORES}, "band": {k: [0.3, 0.6] for k in privacy_sweep.SCORES},
            "true_dispersion": 0.4, "m": 6, "round": 1, "X_true": [[0.0, 0.5], [0.5, 0.5]]}
    good = {**base, **{k: 0.4 for k in privacy_sweep.SCORES}, "rmse_ratio": 0.8, "loss": 1.0, "verdict": "within"}
    good["X_rec"] = [[0.5, 0.5], [0.5, 0.5]]
    bad = {**base, **{k: None for k in privacy_sweep.SCORES}, "loss": None, "verdict": "error", "X_rec": None}
    cells = [{"final_regret": 0.1, "auc": 0.5, "regret_curve": [1.0, 0.1], "rounds": [good]},
             {"final_regret": 0.3, "auc": 0.7, "regret_curve": [1.0, 0.3], "rounds": [bad]}]
    agg = privacy_sweep.aggregate(cells, [1])
    assert agg["attack"]["1"]["matched_rmse"] == {"mean": 0.4, "std": 0.0, "min": 0.4, "max": 0.4, "n": 1}
    assert agg["regret"]["final_regret"]["mean"] == pytest.approx(0.2) and agg["regret"]["final_regret"]["std"] == pytest.approx(0.1)
    assert agg["regret"]["curve_mean"] == pytest.approx([1.0, 0.2])
    assert agg["attack"]["1"]["verdicts"] == ["within", "error"] and not agg["within_band_every_round"]
    assert agg["attack"]["1"]["edge_fraction_true"]["mean"] == 0.5 and agg["attack"]["1"]["edge_fraction_rec"]["n"] == 1
    assert "decoy_verdicts" not in agg["attack"]["1"] and "within_decoy_band_every_round" not in agg
    # with decoys: the failed attack is an "error" verdict, left out of the band and p-value, and the document stays valid JSON
    far = [np.array([[0.9, 0.9], [0.9, 0.9]]), np.array([[0.95, 0.9], [0.9, 0.95]])]
    scored = [privacy_sweep.with_decoys(c, far) for c in cells]
    assert [c["rounds"][0]["decoy"]["verdict"] for c in scored] == ["below", "error"]
    agg = privacy_sweep.aggregate(scored, [1])
    a = agg["attack"]["1"]
    assert a["decoy_verdicts"] == ["below", "error"] and a["decoy_p"]["n"] == 1 and a["decoy_p"]["min"] == pytest.approx(1 / 3)
    assert a["decoy_band"]["matched_rmse"] == scored[0]["rounds"][0]["decoy"]["matched_rmse"]
    assert not agg["within_decoy_band_every_round"] and agg["below_decoy_band_any"] and agg["decoy_attacks"] == 1
    from pacd_jax import io

    io.write_json(tmp_path / "agg.json", {"agg": agg, "cells": scored})


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--sigmas", "0,-1"], "sigmas must be >= 0"),
        (["--sigmas", ""], "expected comma-separated sigmas"),
        (["--sigmas", "0,nan"], "must be finite"),
        (["--sigmas", "0,1,1"], "distinct"),
        (["--sigmas", "0,1", "--operating-sigma", "8"], "--operating-sigma 8 must be one of --sigmas 0,1"),
        (["--sigmas", "0", "--operating-sigma", "0", "--rounds", "3"], "--rounds must be in [0, 2]"),
        (["--sigmas", "0", "--operating-sigma", "0", "--seeds", ""], "expected at least one integer"),
        (["--sigmas", "0", "--operating-sigma", "0", "--clip", "0"], "--clip must be > 0"),
        (["--sigmas", "0", "--operating-sigma", "0", "--benchmark", "nope"], "unknown benchmark"),
        (["--sigmas", "0", "--operating-sigma", "0", "--restarts", "0"], "restarts"),
        (["--sigmas", "0", "--operating-sigma", "0", "--format", "svg"], "invalid choice"),
        (["--sigmas", "0", "--operating-sigma", "0", "--seeds", "1000001", "--decoys", "2"], "are decoy seeds"),
        (["--sigmas", "0", "--operating-sigma", "0", "--decoys", "-1"], "--decoys"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, extra, message):
    out = tmp_path / "bad"
    assert cli.main(["privacy", *TINY, *extra, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not out.exists()


@pytest.mark.heavy  # pursuit attacks in a sweep
def test_pursuit_attacker_runs_in_the_sweep_and_keys_its_cells(tmp_path):
    from pacd_jax import attack, pursuit
    from pacd_jax.config import RunConfig

    out = tmp_path / "p"
    argv = ["privacy", *RUN, "--seeds", "0", "--rounds", "1", "--clip", "2.5", "--quiet", "--sigmas", "0", "--operating-sigma", "0",
            "--decoys", "0", "--attack-mode", "pursuit", "--pursuit-candidates", "64", "--pursuit-grow-steps", "2", "--pursuit-final-steps", "3",
            "--pursuit-swaps", "0", "--pursuit-search-particles", "0", "--out", str(out)]
    assert cli.main(argv) == 0
    doc = json.loads((out / "privacy.json").read_text())
    assert doc["attack"]["mode"] == "pursuit" and doc["attack"]["candidates"] == 64 and doc["attack"]["swaps"] == 0
    # a pursuit cell is never taken for a paper-attacker cell of the same run
    paper = privacy_sweep.cell_key(RunConfig(), 0, [1], attack.AttackConfig())
    assert privacy_sweep.cell_key(RunConfig(), 0, [1], pursuit.PursuitConfig())["attack_mode"] == "pursuit"
    assert "attack_mode" not in paper


@pytest.mark.heavy  # follow attacks in a sweep
def test_follow_attacker_runs_in_the_sweep_scores_the_listed_rounds_and_keys_its_cells(tmp_path):
    """``--attack-mode pursuit-follow`` follows every round from min to max of --rounds and scores the listed ones;
    its cells are keyed apart from the one-round pursuit attacker's (a rerun reuses them)."""
    from pacd_jax import attack, pursuit
    from pacd_jax.config import RunConfig

    out = tmp_path / "f"
    argv = ["privacy", *RUN, "--seeds", "0", "--rounds", "0,2", "--clip", "2.5", "--quiet", "--sigmas", "0,4", "--operating-sigma", "4",
            "--decoys", "0", "--attack-mode", "pursuit-follow", "--pursuit-candidates", "64", "--pursuit-faces", "8", "--pursuit-grow-steps", "2",
            "--pursuit-final-steps", "3", "--pursuit-swaps", "0", "--pursuit-search-particles", "0", "--out", str(out)]
    assert cli.main(argv) == 0
    doc = json.loads((out / "privacy.json").read_text())
    assert doc["attack"]["mode"] == "pursuit-follow" and doc["attack"]["converged_rtol"] == 1e-6
    for sigma in ("0", "4"):
        (cell,) = doc["sigmas"][sigma]["per_seed"]
        assert [e["round"] for e in cell["rounds"]] == [0, 2]
        # the follow attacker's time runs on through the unscored round 1
        assert cell["rounds"][1]["cumulative_time_s"] > cell["rounds"][0]["cumulative_time_s"] + cell["rounds"][1]["time_s"]
    assert "pursuit_follow" in (out / "privacy.md").read_text()
    stamp = {p.name: p.stat().st_mtime_ns for p in (out / "cells").iterdir()}
    assert cli.main(argv) == 0  # every cell reused
    assert {p.name: p.stat().st_mtime_ns for p in (out / "cells").iterdir()} == stamp
    key = privacy_sweep.cell_key(RunConfig(), 0, [1], pursuit.PursuitConfig(), follow=True)
    assert key["attack_mode"] == "pursuit-follow" and key["follow"]["accept"] > 0
    assert key != privacy_sweep.cell_key(RunConfig(), 0, [1], pursuit.PursuitConfig())
    with pytest.raises(ValueError, match="pursuit attacker"):
        privacy_sweep.cell_key(RunConfig(), 0, [1], attack.AttackConfig(), follow=True)


def test_decoy_round_script_with_the_sweeps_decoy_seeds_gives_the_sweeps_band(sweep, tmp_path):
    """benchmarks/decoy_round.py runs decoys only up to the round; with the sweep's decoy seeds it must
    reproduce the sweep's full-length decoy band, p-value and verdict at that round."""
    import importlib.util
    from pathlib import Path

    out, _, doc = sweep
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "decoy_round.py"
    spec = importlib.util.spec_from_file_location("decoy_round", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    result = tmp_path / "r1.json"
    assert mod.main([str(out), "--sigma", "1.5", "--round", "1", "--decoys", str(DECOYS),
                     "--first-seed", str(decoys.DECOY_SEED_BASE), "--out", str(result)]) == 0
    got = json.loads(result.read_text())
    assert got["decoy_iters"] == 2 and got["attacked_seeds_reproduced_max_abs_diff"] < 1e-6
    assert got["meta"]["command"].startswith("python benchmarks/decoy_round.py ")
    (cell,) = doc["sigmas"]["1.5"]["per_seed"]
    (entry,) = [e for e in cell["rounds"] if e["round"] == 1]
    (attack,) = got["attacks"]
    np.testing.assert_allclose(attack["decoy_band"], entry["decoy"]["matched_rmse"], atol=1e-6)
    assert attack["p_value"] == entry["decoy"]["p_value"] and attack["verdict"] == entry["decoy"]["verdict"]
    assert mod.main([str(out), "--sigma", "7", "--round", "1", "--out", str(tmp_path / "x.json")]) == 2


@pytest.mark.heavy  # three follow cells
def test_an_interrupted_follow_cell_resumes_from_its_saved_progress_with_the_same_result(tmp_path, monkeypatch, capsys):
    """A follow cell saves its BO run once and its state after every followed round. Interrupted (Ctrl-C) and rerun,
    the sweep resumes from the saved state without repeating the BO run and ends with the uninterrupted cell's scores
    and reconstructions; without the saved run it repeats the run and checks the message digest; a state that does
    not fit the run is refused with one line naming the file to delete. Nothing is left once the cell is written."""
    from pacd_jax import intercept, io

    saved, stop_after = [], {"round": None}
    real = io.write_json

    def spy(path, doc):
        real(path, doc)
        if str(path).endswith(".progress.json"):
            saved.append((Path(path).name, json.loads(json.dumps(doc))))
            if doc["progress"]["round"] == stop_after["round"]:
                raise KeyboardInterrupt

    monkeypatch.setattr(io, "write_json", spy)
    opts = ["privacy", *RUN, "--iters", "4", "--seeds", "0", "--rounds", "0,3", "--clip", "2.5", "--quiet", "--sigmas", "4", "--operating-sigma", "4",
            "--decoys", "0", "--attack-mode", "pursuit-follow", "--pursuit-candidates", "64", "--pursuit-faces", "8",
            "--pursuit-grow-steps", "2", "--pursuit-final-steps", "3", "--pursuit-swaps", "0", "--pursuit-search-particles", "0"]
    leftovers = ("*.progress.json", "*.records.npz", "*.run.json")
    whole = tmp_path / "whole"
    assert cli.main([*opts, "--out", str(whole)]) == 0
    # one state per followed round 0..3, each with the rounds scored so far; none left once the cell is written
    assert [(name, doc["progress"]["round"]) for name, doc in saved] == [("sigma=4_seed=0.progress.json", t) for t in range(4)]
    assert [[e["round"] for e in doc["progress"]["entries"]] for _, doc in saved] == [[0], [0], [0], [0, 3]]
    assert not [p for g in leftovers for p in (whole / "cells").glob(g)]
    (uninterrupted,) = json.loads((whole / "privacy.json").read_text())["sigmas"]["4"]["per_seed"]
    name, state = saved[1]  # after round 1: round 0 scored, rounds 2 and 3 still to follow

    def same_as_uninterrupted(out, elapsed):
        (cell,) = json.loads((out / "privacy.json").read_text())["sigmas"]["4"]["per_seed"]
        assert cell["resumed_after_round"] == 1 and "resumed_after_round" not in uninterrupted
        timing = {"time_s", "cumulative_time_s"}
        for a, b in zip(uninterrupted["rounds"], cell["rounds"], strict=True):
            assert {k: v for k, v in a.items() if k not in timing} == {k: v for k, v in b.items() if k not in timing}
        assert cell["rounds"][1]["cumulative_time_s"] > elapsed  # the attacker's time goes on from the saved state's
        assert cell["final_regret"] == uninterrupted["final_regret"] and cell["regret_curve"] == uninterrupted["regret_curve"]
        assert not [p for g in leftovers for p in (out / "cells").glob(g)]

    # Ctrl-C after round 1, then the same command: the saved BO run is used (running it again would fail here)
    interrupted = tmp_path / "interrupted"
    stop_after["round"] = 1
    assert cli.main([*opts, "--out", str(interrupted)]) == 130
    stop_after["round"] = None
    assert sorted(p.name for p in (interrupted / "cells").iterdir()) == [
        "sigma=4_seed=0.progress.json", "sigma=4_seed=0.records.npz", "sigma=4_seed=0.run.json"]
    elapsed = saved[-1][1]["progress"]["elapsed"]
    with monkeypatch.context() as mp:
        mp.setattr(intercept, "run_vmap", lambda *a, **k: pytest.fail("the saved BO run was repeated"))
        saved.clear()
        assert cli.main([*opts, "--out", str(interrupted)]) == 0
    assert [doc["progress"]["round"] for _, doc in saved] == [2, 3]  # only the rest was followed
    same_as_uninterrupted(interrupted, elapsed)

    # only the progress kept (no saved run): the BO run is repeated and checked against the digest
    rerun = tmp_path / "rerun"
    (rerun / "cells").mkdir(parents=True)
    (rerun / "cells" / name).write_text(json.dumps(state))
    assert cli.main([*opts, "--out", str(rerun)]) == 0
    same_as_uninterrupted(rerun, state["progress"]["elapsed"])

    bad_dir = tmp_path / "bad"
    (bad_dir / "cells").mkdir(parents=True)
    state["progress"]["digest"] = "0" * 64
    (bad_dir / "cells" / name).write_text(json.dumps(state))
    capsys.readouterr()
    assert cli.main([*opts, "--out", str(bad_dir)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "sigma=4_seed=0.progress.json: cannot resume after round 1: the repeated run intercepted a different message" in err
    assert "delete it to start this cell over" in err and not (bad_dir / "cells" / "sigma=4_seed=0.json").exists()


def test_a_saved_follow_run_is_pruned_keyed_and_only_used_where_it_reaches(tmp_path):
    """The saved BO run of a follow cell round-trips exactly, keeps the rounds from ``from_round`` on, and is not used
    for another key, for a follow that needs an earlier round, or when its two files do not belong together."""
    from pacd_jax import intercept, loop

    rng = np.random.default_rng(0)
    records = [intercept.Record(t, 0, 5 + t, rng.normal(size=(3, 7)), rng.normal(size=(3, 7)), np.array([[0.0, 1.0]] * 2))
               for t in range(1, 6)]
    truths = [intercept.Truth(rng.uniform(size=(5 + t, 2)), rng.normal(size=5 + t)) for t in range(1, 6)]
    results = loop.SeedResults(seeds=[4], X=rng.uniform(size=(1, 2, 10, 2)), y=rng.normal(size=(1, 2, 10)), f=rng.normal(size=(1, 2, 10)),
                               count=np.full((1, 2), 10))
    key = {"version": 1, "x": [1, 2]}
    out = tmp_path
    (out / "cells").mkdir()
    privacy_sweep.save_run_store(out, 8.0, 4, key, records, truths, results, 12.5)
    got = privacy_sweep.load_run_store(out, 8.0, 4, key, need=1)
    assert got is not None and got[3] == 12.5
    for a, b in zip(records, got[0], strict=True):
        assert a.round == b.round and a.m == b.m and np.array_equal(a.particles, b.particles) and np.array_equal(a.grads, b.grads)
    for a, b in zip(truths, got[1], strict=True):
        assert np.array_equal(a.X, b.X) and np.array_equal(a.y, b.y)
    assert np.array_equal(got[2].X, results.X) and np.array_equal(got[2].f, results.f) and got[2].seeds == [4]
    assert privacy_sweep.load_run_store(out, 8.0, 4, {"version": 2}, need=1) is None
    privacy_sweep.save_run_store(out, 8.0, 4, key, *got, from_round=3)
    pruned = privacy_sweep.load_run_store(out, 8.0, 4, key, need=4)
    assert [r.round for r in pruned[0]] == [3, 4, 5] and np.array_equal(pruned[1][0].X, truths[2].X)
    assert privacy_sweep.load_run_store(out, 8.0, 4, key, need=2) is None  # pruned past the round it must start from
    npz, _ = privacy_sweep._store_paths(out, 8.0, 4)
    intercept.save_records(npz, records)  # records of another save: the pair does not belong together
    assert privacy_sweep.load_run_store(out, 8.0, 4, key, need=4) is None


def _plain_matched_rmse(A, B):
    """Hungarian-matched RMSE by scipy, written out here (the oracle for pacd_jax.metrics.matched_rmse)."""
    from scipy.optimize import linear_sum_assignment

    cost = ((A[:, None, :] - B[None, :, :]) ** 2).sum(-1)
    r, c = linear_sum_assignment(cost)
    return float(np.sqrt(cost[r, c].mean()))


def test_guess_p_values_are_the_ranks_among_the_same_uniform_guesses():
    X = np.random.default_rng(3).uniform(size=(6, 2))
    rmse = 0.25
    lo, hi = privacy_sweep.guess_p_values(X, rmse, np.random.default_rng(9), draws=300)
    rng = np.random.default_rng(9)
    null = np.array([_plain_matched_rmse(rng.uniform(size=(6, 2)), X) for _ in range(300)])
    assert lo == pytest.approx((1 + np.sum(null <= rmse)) / 301) and hi == pytest.approx((1 + np.sum(null >= rmse)) / 301)
    # the truth itself beats every guess; a set far from it is beaten by every guess
    assert privacy_sweep.guess_p_values(X, 0.0, np.random.default_rng(1), draws=300) == (1 / 301, 1.0)
    assert privacy_sweep.guess_p_values(X, 5.0, np.random.default_rng(1), draws=300) == (1.0, 1 / 301)


def _cell(seed, entries):
    return {"seed": seed, "final_regret": 0.1, "auc": 0.5, "regret_curve": [1.0, 0.1], "rounds": entries}


def test_family_reading_levels_verdicts_and_decoy_resolution():
    """Bonferroni over the sigma's scored attacks and both tails; the exact truth is below, a far set above, a failed
    attack an error that does not count; decoys can say below only with at least 2n/alpha - 1 of them."""
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(5, 2))
    exact = {"round": 1, "m": 5, "X_true": X.tolist(), "X_rec": X.tolist(), "matched_rmse": 0.0}
    far = {"round": 2, "m": 5, "X_true": (0.1 * X).tolist(), "X_rec": np.ones((5, 2)).tolist(),
           "matched_rmse": _plain_matched_rmse(np.ones((5, 2)), 0.1 * X)}
    guesses = [rng.uniform(size=(5, 2)) for _ in range(101)]  # the guess of median score: a typical one
    guess = sorted(guesses, key=lambda G: _plain_matched_rmse(G, X))[50]
    typical = {"round": 1, "m": 5, "X_true": X.tolist(), "X_rec": guess.tolist(), "matched_rmse": _plain_matched_rmse(guess, X)}
    failed = {"round": 2, "m": 5, "X_true": X.tolist(), "X_rec": None, "matched_rmse": None}
    cells = [_cell(0, [exact, far]), _cell(1, [typical, failed])]
    out, summary = privacy_sweep.family_reading(cells, alpha=0.1, draws=400)
    assert summary["attacks"] == 3 and summary["level"] == pytest.approx(0.1 / 6)
    assert [[e["family"]["verdict"] for e in c["rounds"]] for c in out] == [["below", "above"], ["within", "error"]]
    assert summary["counts"] == {"below": 1, "within": 1, "above": 1, "error": 1} and not summary["within_every_round"]
    assert summary["decoy"] is None and cells[0]["rounds"][0].get("family") is None  # inputs untouched
    # the same seed and round draw the same guesses: a rerun reads the same
    assert privacy_sweep.family_reading(cells, alpha=0.1, draws=400)[0] == out
    # decoys: 40 cannot resolve level 0.1/6 (1/41 > 0.0167), 80 can (1/81 < 0.0167)
    for n, resolvable in ((40, False), (80, True)):
        decoys = [np.ones((5, 2)) * 0.5 + 0.01 * k for k in range(n)]
        scored = [privacy_sweep.with_decoys(c, decoys) for c in cells]
        _, s = privacy_sweep.family_reading(scored, alpha=0.1, draws=400)
        assert s["decoy"]["draws"] == n and s["decoy"]["resolvable"] is resolvable
        # the exact reconstruction is closer to its truth than to any decoy: p = 1/(n+1)
        assert scored[0]["rounds"][0]["decoy"]["p_value"] == pytest.approx(1 / (n + 1))
        assert s["decoy"]["counts"]["below"] == (1 if resolvable else 0)


def test_family_band_holds_every_attack_of_no_information_within_at_its_stated_rate():
    """Attacks that are themselves uniform guesses (no information): every one of a sigma's 4 attacks is within the
    family-wise band in at least 1 - alpha of the sigmas (Bonferroni: conservative), while the 5-95 % per-attack
    reading has all 4 within only about 0.9**4 = 66 % of the time."""
    rng = np.random.default_rng(42)
    families, family_ok, per_attack_ok = 150, 0, 0
    for f in range(families):
        entries = []
        for t in range(4):
            X = rng.uniform(size=(4, 2))
            G = rng.uniform(size=(4, 2))
            entries.append({"round": t, "m": 4, "X_true": X.tolist(), "X_rec": G.tolist(), "matched_rmse": _plain_matched_rmse(G, X)})
        _, s = privacy_sweep.family_reading([_cell(f, entries)], alpha=0.2, draws=99)
        family_ok += s["within_every_round"]
        per_attack_ok += all(0.05 < e["family"]["p_below"] and 0.05 < e["family"]["p_above"]
                             for e in privacy_sweep.family_reading([_cell(f, entries)], alpha=0.2, draws=99)[0][0]["rounds"])
    assert family_ok / families >= 0.8 - 2 * math.sqrt(0.8 * 0.2 / families)
    assert per_attack_ok / families < 0.8
