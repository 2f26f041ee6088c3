"""Helpers of benchmarks/attack_report.py (resume, README table) and benchmarks/pursuit_landscape.py (no attack is run)."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks import attack_report, pursuit_landscape  # noqa: E402

HEAD = {"benchmark": "branin", "target_client": 0, "seed": 0, "bo_precision": "float64"}


def _entry(t, by=None):
    e = {"round": t, "m": t + 5, "matched_rmse": 0.1, "rmse_ratio": 0.3, "recall_at_r": 1.0, "precision_at_r": 0.5,
         "dispersion": 0.4, "true_dispersion": 0.5, "loss": 1e-9, "swaps": 3, "time_s": 10.0,
         "baseline": {"matched_rmse": 0.33, "recall_at_r": 0.2, "precision_at_r": 0.2},
         "X_true": [[0.1, 0.2], [0.3, 0.4], [0.3, 0.41]]}
    return e if by is None else {**e, "attacked_by": by}


def test_resumable_needs_the_same_run(tmp_path):
    path = tmp_path / "a.json"
    assert attack_report.resumable(path, HEAD) is None  # missing
    path.write_text("{not json")
    assert attack_report.resumable(path, HEAD) is None  # corrupt
    old = {**HEAD, "variants": {}, "meta": {"command": "x", "commit": "abc"}}
    path.write_text(json.dumps(old))
    assert attack_report.resumable(path, HEAD) == old
    assert attack_report.resumable(path, {**HEAD, "seed": 1}) is None
    assert attack_report.resumable(path, {**HEAD, "bo_precision": "float32"}) is None
    path.write_text(json.dumps({**HEAD, "variants": {}}))  # no provenance: not resumable
    assert attack_report.resumable(path, HEAD) is None


def test_table_footer_names_kept_rounds_and_the_cache():
    first = {"command": "python first", "commit": "c0"}
    second = {"command": "python second", "commit": "c1"}
    now = {"command": "python now", "commit": "c2"}
    # now resumed from second, which resumed from first: rounds without a record come from first
    meta = {**now, "machine": "m", "wall_time_s": 600.0, "resumed_from": {**second, "resumed_from": first}}
    result = {"bo_from_cache": True, "meta": meta,
              "variants": {"pursuit": {"rounds": [_entry(1), _entry(5), _entry(20, second), _entry(40, now)]}}}
    text = attack_report.pursuit_table(result)
    footer = text.splitlines()[-1]
    assert "Rounds 1, 5 were attacked by the earlier run `python first` at commit `c0`" in footer
    assert "Rounds 20 were attacked by the earlier run `python second` at commit `c1`" in footer
    assert "40" not in footer.split("c2")[-1]
    assert "loaded from --cache" in footer and "BO run included" not in footer
    assert text.splitlines()[0] == "| round t | 1 | 5 | 20 | 40 |"
    fresh = {"bo_from_cache": False, "meta": {**now, "machine": "m", "wall_time_s": 60.0},
             "variants": {"pursuit": {"rounds": [_entry(1, now)]}}}
    footer = attack_report.pursuit_table(fresh).splitlines()[-1]
    assert "BO run included" in footer and "earlier" not in footer
    assert "(`--resume`; same settings)" in text
    # rounds kept by --start-from ran with the earlier run's settings: the footer says so
    started = {**result, "variants": {"pursuit": {"start": "rounds 0-5 kept from f.json (...)", "rounds": result["variants"]["pursuit"]["rounds"]}}}
    footer = attack_report.pursuit_table(started).splitlines()[-1]
    assert "`--start-from`" in footer and "same settings" not in footer


def test_follow_table_adds_the_running_time():
    now = {"command": "python now", "commit": "c2"}
    entries = [{**_entry(r, now), "cumulative_time_s": 10.0 * r} for r in (1, 5)]
    result = {"bo_from_cache": True, "meta": {**now, "machine": "m", "wall_time_s": 60.0},
              "variants": {"pursuit_follow": {"rounds": entries}}}
    lines = attack_report.pursuit_table(result, "pursuit_follow").splitlines()
    assert lines[0] == "| round t | 1 | 5 |"
    assert "| time since round 0 (s) | 10 | 50 |" in lines
    # rounds attacked one at a time have no running total, and no such row
    single = {**result, "variants": {"pursuit": {"rounds": [_entry(1, now)]}}}
    assert not any("time since" in line for line in attack_report.pursuit_table(single).splitlines())


def test_nn_spacing_against_a_hand_case():
    X = [[0.0, 0.0], [0.0, 0.1], [0.5, 0.5], [0.5, 0.53]]  # nearest distances 0.1, 0.1, 0.03, 0.03
    lo, q1 = attack_report.nn_spacing(X)
    assert lo == pytest.approx(0.03)
    assert q1 == pytest.approx(float(np.quantile([0.03, 0.03, 0.1, 0.1], 0.25)))


def test_collapse_pairs_moves_one_point_of_each_closest_pair():
    X = np.array([[0.0, 0.0], [0.0, 0.1], [0.5, 0.5], [0.5, 0.53], [0.9, 0.9]])
    Z, spacings = pursuit_landscape.collapse_pairs(X, 2, np.random.default_rng(0))
    assert spacings == pytest.approx([0.03, 0.1])
    moved = np.flatnonzero(np.any(Z != X, axis=1))
    assert len(moved) == 2 and {moved[0], moved[1]} & {0, 1} and {moved[0], moved[1]} & {2, 3}
    np.testing.assert_array_equal(Z[4], X[4])
    assert np.all((Z >= 0) & (Z <= 1))


def test_landscape_table_rows_and_missing_attack_round():
    dec = lambda n, res, ratio, sp: {"collapsed_pairs": n, "pair_spacings": sp, "refined_residual": res, "refined_rmse_ratio": ratio}
    landscape = {"meta": {"command": "python land", "commit": "c", "machine": "m", "wall_time_s": 120.0},
                 "entries": [{"round": 20, "truth_residual": 1.5e-15, "decoys": [dec(1, 4.9e-11, 0.149, [0.011])]},
                             {"round": 99, "truth_residual": 2e-14, "decoys": [dec(1, 3e-14, 0.1, [2e-4])]}]}
    attack = {"meta": {"command": "python atk"}, "variants": {"pursuit": {"rounds": [{"round": 20, "loss": 1.1e-9, "rmse_ratio": 0.28}]}}}
    lines = pursuit_landscape.landscape_table(landscape, attack).splitlines()
    assert lines[0] == "| round | truth | 1 closest pair merged | the attack |"
    assert lines[2] == "| 20 | 1.5e-15 | 4.9e-11 (ratio 0.15; pairs <= 1e-02 apart) | 1.1e-09 (ratio 0.28) |"
    assert lines[3].endswith("| not run |")
    assert "`python land`" in lines[-1] and "`python atk`" in lines[-1]


def test_kept_rounds_need_identical_settings():
    settings = {"swaps": 20, "radii": [0.004, 0.015]}
    previous = {"meta": {"command": "python first", "commit": "c0"},
                "variants": {"pursuit": {"config": settings, "rounds": [_entry(1), _entry(5)]}}}
    kept = attack_report.kept_rounds(previous, "pursuit", dict(settings))
    assert sorted(kept) == [1, 5] and kept[1]["attacked_by"] == {"command": "python first", "commit": "c0"}
    assert attack_report.kept_rounds(previous, "pursuit", {**settings, "swaps": 40}) == {}  # a default changed
    assert attack_report.kept_rounds(previous, "paper", settings) == {}
    assert attack_report.kept_rounds(None, "pursuit", settings) == {}


def test_collect_only_redraws_a_saved_follow_report(tmp_path):
    """``--collect-only`` attacks nothing: it reads --out and draws the follow variant's figures."""
    now = {"command": "python now", "commit": "c2"}
    entries = [{**_entry(r, now), "X_rec": [[0.1, 0.2], [0.3, 0.4], [0.31, 0.4]], "chamfer": 0.01} for r in (1, 5)]
    for e in entries:
        e["baseline"] = {**e["baseline"], "dispersion": 0.5}
    every = [{"round": r, "rmse_ratio": 10.0 ** -r} for r in range(6)]
    report = {"benchmark": "branin", "target_client": 0, "meta": {**now, "machine": "m", "wall_time_s": 1.0},
              "variants": {"pursuit_follow": {"rounds": entries, "every_round": every}}}
    path = tmp_path / "follow.json"
    path.write_text(json.dumps(report))
    assert attack_report.main(["--collect-only", "--out", str(path)]) == 0
    for name in ("leakage.png", "dispersion_vs_round.png", "ratio_vs_round.png"):
        assert (tmp_path / "follow" / name).stat().st_size > 0
    assert json.loads(path.read_text()) == report  # the report itself is untouched


def test_follow_resume_point_goes_on_from_the_last_saved_reconstruction():
    """The follow report resumes after the last round of an unbroken 0.. run whose points were saved
    (a report round's or an every-round entry's), keeps the rounds up to it and its attacker time;
    other follow settings, a gap or no saved points: start over."""
    first = {"command": "python first", "commit": "c0"}
    header = {"options": {"converged_rtol": 1e-6}, "config": {"swaps": 20}, "pad": 16, "accept": 1e-26,
              "accept_growth": 2.0, "retries": 8, "polish": "levenberg-marquardt", "start": "round 0, from scratch"}
    X = {t: [[0.1 * t, 0.2]] for t in range(6)}
    every = [{"round": t, "cumulative_time_s": 10.0 * (t + 1)} for t in range(6)]
    every[2]["X_rec"] = X[2]
    rounds = [{**_entry(t), "X_rec": X[t]} for t in (1, 4)]
    previous = {"meta": first, "variants": {"pursuit_follow": {**header, "rounds": rounds, "every_round": every}}}
    entries, kept, start, elapsed = attack_report.follow_resume_point(previous, "pursuit_follow", dict(header))
    assert [e["round"] for e in kept] == [0, 1, 2, 3, 4] and start == X[4] and elapsed == 50.0
    assert [e["round"] for e in entries] == [1, 4] and entries[0]["attacked_by"] == first
    # a gap before round 4: only round 2's saved points are usable
    gap = {**previous, "variants": {"pursuit_follow": {**header, "rounds": rounds, "every_round": every[:3] + every[4:]}}}
    entries, kept, start, elapsed = attack_report.follow_resume_point(gap, "pursuit_follow", dict(header))
    assert [e["round"] for e in kept] == [0, 1, 2] and start == X[2] and elapsed == 30.0 and [e["round"] for e in entries] == [1]
    nothing = ([], [], None, 0.0)
    assert attack_report.follow_resume_point(previous, "pursuit_follow", {**header, "accept": 1e-20}) == nothing
    assert attack_report.follow_resume_point(None, "pursuit_follow", header) == nothing
    bare = {**previous, "variants": {"pursuit_follow": {**header, "rounds": [], "every_round": every[:2]}}}
    assert attack_report.follow_resume_point(bare, "pursuit_follow", header) == nothing
    # --start-from/--start-round: at most round 3 (so round 2's points), repair settings ignored only where named
    repaired = {**header, "repairs": 1, "repair_bar": 1e-28}
    entries, kept, start, elapsed = attack_report.follow_resume_point(previous, "pursuit_follow", repaired, upto=3,
                                                                       ignore=("repairs", "repair_bar"))
    assert [e["round"] for e in kept] == [0, 1, 2] and start == X[2] and elapsed == 30.0 and [e["round"] for e in entries] == [1]
    assert attack_report.follow_resume_point(previous, "pursuit_follow", repaired) == nothing
    # a round's unclipped points, where saved, win over its clipped reconstruction (the exact continuation)
    outside = [[1.3, 0.2]]
    carried = {**previous, "variants": {"pursuit_follow": {**header, "rounds": rounds,
                                                           "every_round": every[:4] + [{**every[4], "carried": outside}] + every[5:]}}}
    entries, kept, start, elapsed = attack_report.follow_resume_point(carried, "pursuit_follow", dict(header))
    assert start == outside and [e["round"] for e in kept] == [0, 1, 2, 3, 4] and elapsed == 50.0
    # a report made with repairs does not resume a run without them, nor with other ones
    with_repairs = {**previous, "variants": {"pursuit_follow": {**repaired, "rounds": rounds, "every_round": every}}}
    assert attack_report.follow_resume_point(with_repairs, "pursuit_follow", header) == nothing
    assert attack_report.follow_resume_point(with_repairs, "pursuit_follow", {**repaired, "repairs": 2}) == nothing
    assert attack_report.follow_resume_point(with_repairs, "pursuit_follow", dict(repaired))[2] == X[4]
    assert attack_report.follow_marker(with_repairs) == "attack-follow-repair" and attack_report.follow_marker(previous) == "attack-follow"


def test_privacy_readme_puts_the_table_between_the_markers(tmp_path):
    from benchmarks import privacy_readme

    readme = tmp_path / "README.md"
    readme.write_text("intro\n<!-- sweep:begin -->\nold\n<!-- sweep:end -->\nafter\n")
    folder = tmp_path / "run"
    assert privacy_readme.main([str(folder), "sweep", "--readme", str(readme)]) == 2  # no table yet
    folder.mkdir()
    (folder / "privacy.md").write_text("| sigma |\n|---|\n| 0 |\n\nGenerated by `pacd-bo privacy ...`\n")
    assert privacy_readme.main([str(folder), "sweep", "--readme", str(readme)]) == 0
    text = readme.read_text()
    assert "old" not in text and "| 0 |\n\nGenerated by `pacd-bo privacy ...`" in text and text.endswith("after\n")
    assert privacy_readme.main([str(folder), "missing", "--readme", str(readme)]) == 2


def test_follow_identifiability_picks_the_ratio_jumps_and_the_worst_matched_point(tmp_path):
    import itertools

    from benchmarks import follow_identifiability as fi

    every = [{"round": r, "rmse_ratio": v} for r, v in [(0, 1e-9), (1, 0.02), (2, 0.025), (3, 0.2), (5, 0.9), (6, 0.5)]]
    assert fi.jump_rounds(every, 0.01) == [1, 3]  # 5 follows 3 with a gap: not a jump
    assert fi.jump_rounds(every, 0.1) == [3]
    rng = np.random.default_rng(0)
    X_true = rng.uniform(size=(4, 2))
    X_rec = X_true[[2, 0, 3, 1]] + rng.normal(scale=0.01, size=(4, 2))
    X_rec[1] = [0.9, 0.9]
    dist, true, rec = fi.worst_point(X_rec, X_true)
    # oracle: the assignment of least total distance by brute force, its largest pair
    D = np.linalg.norm(X_rec[:, None] - X_true[None], axis=-1)
    best = min(itertools.permutations(range(4)), key=lambda p: sum(D[i, p[i]] for i in range(4)))
    k = max(range(4), key=lambda i: D[i, best[i]])
    assert dist == pytest.approx(D[k, best[k]]) and rec == X_rec[k].tolist() and true == X_true[best[k]].tolist()
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(SystemExit) as exc:
        fi.main(["--report", str(bad), "--out", str(tmp_path / "o.json")])
    assert exc.value.code == 2 and not (tmp_path / "o.json").exists()


def test_follow_identifiability_table_rows_and_provenance():
    from benchmarks import follow_identifiability as fi

    entry = {"round": 67, "m": 72, "ratio_before": 0.0151, "ratio": 0.0789,
             "residual": {"truth": 5.7e-30, "attack": 1.83e-29, "alternative": 1.13e-29},
             "matched_rmse": {"attack": 0.026, "alternative": 0.005},
             "attack_worst_point": {"distance": 0.443, "true": [0.54, 0.106], "reconstructed": [0.424, 0.534]}}
    result = {"entries": [entry], "report_meta": {"commit": "abc"},
              "meta": {"command": "python x", "commit": "def", "machine": "m", "wall_time_s": 12.0}}
    lines = fi.table(result).splitlines()
    assert lines[2] == ("| 67 | 0.015 -> 0.079 | 5.7e-30 | 1.8e-29 | 1.1e-29 | 0.026 / 0.005 | "
                        "(0.540, 0.106) -> (0.424, 0.534) (0.443) |")
    assert "`python x` at commit `def`" in lines[-1] and "commit `abc`" in lines[-1]
