"""``pacd-bo privacy``: the sigma sweep of paper section VI (Figure 4 right, Figure 5, the sigma table).

For every noise multiplier sigma and seed, one PACD-BO run with DP at that
sigma (paper eq. 12-13) is intercepted and attacked at the chosen rounds by
:func:`pacd_jax.leakage.run_leakage` (the same pipeline as ``pacd-bo
attack``), and the regret curve of that very run is kept. Per sigma the sweep
adds the privacy bought (epsilon at delta = 1e-5 of one client's run, PLD and
RDP, :mod:`pacd_jax.accounting`) and aggregates over seeds.

The no-information baseline *band* of an attacked round is the 5-95 %
quantile range of each score over :data:`BAND_DRAWS` uniform guesses with as
many points as the target has (:func:`guess_band`); a reconstruction whose
matched RMSE lies below the band's lower end beats guessing (leakage). The
*decoy band* (:mod:`pacd_jax.decoys`, ``--decoys D``) is the attacker-specific
reference: the 5-95 % range of the matched RMSE from the reconstruction to the
target client's queries in D runs with other seeds; below it, the
reconstruction is closer to its own target than to data it knows nothing
about.

Outputs (DIR): ``privacy.json`` (:func:`sweep_document`), ``privacy_sweep.png``
(Figure 4 right), ``dp_regret.png`` (Figure 5), ``privacy.md`` (the table),
``cells/sigma=S_seed=N.json``, one finished (sigma, seed) cell each, and
``decoys/sigma=S.json``, one sigma's decoy queries: a rerun with the same
options skips every cell whose file holds the same key and every decoy run
already saved, so a larger ``--decoys`` runs only the new decoy seeds.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

from pacd_jax.decoys import DECOY_SEED_BASE  # (numpy only at import: the CLI stays quick to start)

DELTA = 1e-5
#: uniform guesses per attacked round for the baseline band.
BAND_DRAWS = 200
#: the band's quantiles.
BAND_Q = (0.05, 0.95)
#: the family-wise reading (:func:`family_reading`): per sigma, the attacks of a message that carries no
#: information all fall within the family-wise band with probability at least 1 - FAMILY_ALPHA.
FAMILY_ALPHA = 0.10
#: uniform guesses per attack for its rank p-values in the family-wise reading.
FAMILY_DRAWS = 2000
#: decoy runs per sigma for the decoy band (``--decoys``).
DEFAULT_DECOYS = 40
#: decoy seeds run together and saved as one batch (:func:`decoy_trajectories`): the missing seeds
#: ``DECOY_SEED_BASE + j`` with the same ``j // DECOY_CHUNK``, so a set stopped between batches goes on in the
#: batches one uninterrupted call would have used.
DECOY_CHUNK = 20
#: the set scores the sweep aggregates (and draws in Figure 4 right).
SCORES = ("dispersion", "matched_rmse", "chamfer", "recall_at_r", "precision_at_r")
#: cell-file format version (part of the key: a change makes old cells stale).
CELL_VERSION = 1
#: distance to the box boundary under which a point counts as "on the edge" (:func:`edge_fraction`).
EDGE_TOL = 0.01
FLOOR = 1e-6  # regret 0 drawn at this height on log axes


# -- pure pieces ------------------------------------------------------------------------


def epsilon_entry(config) -> dict:
    """epsilon at ``DELTA`` of one client's run of ``config`` (PLD and RDP); sigma = 0 is ``"inf"``.

    JSON has no infinity, so "no DP" is written as the string ``"inf"``
    (``float("inf")`` reads it back). Same accounting as ``run.json``
    (:func:`pacd_jax.experiment.privacy_record`: ``K * total_steps`` Gaussian releases).
    """
    from pacd_jax import accounting, experiment

    steps = accounting.total_steps(config.svgd_steps, config.iters, config.svgd_steps_init)
    rec = experiment.privacy_record(config, DELTA)
    if rec is None:
        return {"pld": "inf", "rdp": "inf", "accountant": None, "delta": DELTA, "particles": config.num_particles,
                "total_steps": steps, "compositions": config.num_particles * steps}
    return {"pld": rec["epsilon"], "rdp": rec["epsilon_rdp"], "accountant": rec["accountant"], "delta": DELTA,
            "particles": rec["particles"], "total_steps": rec["total_steps"], "compositions": rec["compositions"]}


def guess_band(X_true, rng: np.random.Generator, draws: int = BAND_DRAWS, q=BAND_Q) -> dict:
    """Quantiles ``q`` of each set score of ``draws`` uniform guesses (as many points as ``X_true``).

    Returns ``{score: [lo, hi]}`` for :data:`SCORES`: the no-information band.
    """
    from pacd_jax import metrics

    X_true = np.asarray(X_true, np.float64)
    n, d = X_true.shape
    vals = {k: [] for k in SCORES}
    for _ in range(draws):
        s = metrics.reconstruction_scores(rng.uniform(size=(n, d)), X_true)
        for k in SCORES:
            vals[k].append(s[k])
    return {k: [float(np.quantile(v, q[0])), float(np.quantile(v, q[1]))] for k, v in vals.items()}


def guess_p_values(X_true, rmse: float, rng: np.random.Generator, draws: int = FAMILY_DRAWS) -> tuple[float, float]:
    """Rank p-values of the matched RMSE ``rmse`` among ``draws`` uniform guesses of as many points as ``X_true``.

    Returns ``(below, above)``: ``(1 + #guesses at least as close) / (draws + 1)``,
    small when the attack beats guessing, and ``(1 + #guesses at least as far) / (draws + 1)``.
    Each is a valid p-value when the reconstruction's score is exchangeable with
    a guess's (no information, and no habit of its own that a uniform guess
    lacks: the decoys' reading covers that case).
    """
    from pacd_jax import metrics

    X_true = np.asarray(X_true, np.float64)
    n, d = X_true.shape
    null = np.asarray([metrics.matched_rmse(rng.uniform(size=(n, d)), X_true) for _ in range(draws)])
    return (1.0 + float(np.sum(null <= rmse))) / (draws + 1.0), (1.0 + float(np.sum(null >= rmse))) / (draws + 1.0)


def family_verdict(p_below: float | None, p_above: float | None, level: float) -> str:
    """``below`` / ``above`` when that tail's p-value is at most ``level``, else ``within``; ``error`` without a score."""
    if p_below is None or p_above is None:
        return "error"
    if p_below <= level:
        return "below"
    return "above" if p_above <= level else "within"


def family_reading(cells: list[dict], alpha: float = FAMILY_ALPHA, draws: int = FAMILY_DRAWS) -> tuple[list[dict], dict]:
    """The family-wise reading of one sigma's attacks: "within the band at every attacked round" as a test.

    A 5-95 % band holds each attack of a message with no information one time
    in ten, so with n attacks "all within" fails by chance with probability
    1 - 0.9**n. Here each (seed, round) attack gets its two rank p-values
    against ``draws`` uniform guesses (:func:`guess_p_values`; the generator
    is seeded by seed and round, so a rerun gives the same) and is ``below``
    or ``above`` when one of them is at most ``alpha / (2 n)``, n the sigma's
    scored attacks (Bonferroni over the attacks and both tails): with no
    information all n are ``within`` with probability at least ``1 - alpha``.
    Where the cells were scored against decoys (:func:`with_decoys`), the
    decoy p-values are read at the same level; with D decoys the smallest
    p-value is 1 / (D + 1), so the decoy reading can say ``below`` only if
    that is at most the level (``"resolvable"``).

    Returns the cells with ``"family": {"p_below", "p_above", "verdict"}`` added to
    each attacked round (and ``"family_verdict"`` to its ``"decoy"``), and the
    summary ``{"alpha", "attacks", "level", "draws", "counts", "within_every_round",
    "below_every_round", "decoy"}`` (``"decoy"``: None without decoys, else
    ``{"draws", "resolvable", "counts", "within_every_round", "below_every_round"}``).
    """
    scored = sum(1 for c in cells for e in c["rounds"] if e.get("matched_rmse") is not None)
    level = alpha / (2 * max(scored, 1))
    out = []
    for c in cells:
        entries = []
        for e in c["rounds"]:
            rmse = e.get("matched_rmse")
            if rmse is None:
                fam = {"p_below": None, "p_above": None, "verdict": "error"}
            else:
                lo, hi = guess_p_values(e["X_true"], rmse, np.random.default_rng([int(c["seed"]), int(e["round"]), 13]), draws)
                fam = {"p_below": lo, "p_above": hi, "verdict": family_verdict(lo, hi, level)}
            e = {**e, "family": fam}
            if "decoy" in e:
                dec = e["decoy"]
                e["decoy"] = {**dec, "family_verdict": family_verdict(dec.get("p_value"), dec.get("p_above"), level)}
            entries.append(e)
        out.append({**c, "rounds": entries})

    def counts(verdicts):
        return {v: verdicts.count(v) for v in ("below", "within", "above", "error")}

    verdicts = [e["family"]["verdict"] for c in out for e in c["rounds"]]
    summary = {"alpha": alpha, "attacks": scored, "level": level, "draws": draws, "counts": counts(verdicts),
               "within_every_round": bool(verdicts) and all(v == "within" for v in verdicts),
               "below_every_round": bool(verdicts) and all(v == "below" for v in verdicts), "decoy": None}
    decoy_entries = [e["decoy"] for c in out for e in c["rounds"] if "decoy" in e]
    if decoy_entries:
        dv = [d["family_verdict"] for d in decoy_entries]
        n_decoys = min(int(d["draws"]) for d in decoy_entries)
        summary["decoy"] = {"draws": n_decoys, "resolvable": 1.0 / (n_decoys + 1.0) <= level, "counts": counts(dv),
                            "within_every_round": all(v == "within" for v in dv),
                            "below_every_round": all(v == "below" for v in dv)}
    return out, summary


def _stats(values) -> dict | None:
    """mean, population std, min, max over seeds of the finite values (None if there are none)."""
    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], np.float64)
    if v.size == 0:
        return None
    return {"mean": float(v.mean()), "std": float(v.std()), "min": float(v.min()), "max": float(v.max()), "n": int(v.size)}


def edge_fraction(X, tol: float = EDGE_TOL) -> float | None:
    """Share of the points within ``tol`` of the unit box's boundary (None for no points).

    The paper attacker's reconstruction is clipped to the box and the box
    attacker's is a sigmoid, so both pile up on the boundary; where the true
    queries do too (DP runs), a uniform guess is a weak reference.
    """
    if X is None:
        return None
    X = np.asarray(X, np.float64)
    if X.size == 0:
        return None
    return float(np.mean(np.any((X < tol) | (X > 1 - tol), axis=1)))


def verdict(rmse: float | None, band: list[float]) -> str:
    """``below`` (beats guessing: leakage), ``within`` or ``above`` the band; ``error`` without a score."""
    if rmse is None:
        return "error"
    if rmse < band[0]:
        return "below"
    return "within" if rmse <= band[1] else "above"


def aggregate(cells: list[dict], rounds) -> dict:
    """One sigma's entry of ``privacy.json``'s ``sigmas`` from its per-seed cells."""
    finals = [c["final_regret"] for c in cells]
    aucs = [c["auc"] for c in cells]
    curves = np.asarray([c["regret_curve"] for c in cells], np.float64)  # (S, T+1), client-averaged
    attack = {}
    for t in rounds:
        entries = [next(e for e in c["rounds"] if e["round"] == t) for c in cells]
        agg = {k: _stats([e.get(k) for e in entries]) for k in (*SCORES, "rmse_ratio", "loss")}
        agg["baseline"] = {k: _stats([e["baseline"].get(k) for e in entries]) for k in SCORES}
        agg["band"] = {k: [float(np.mean([e["band"][k][0] for e in entries])), float(np.mean([e["band"][k][1] for e in entries]))]
                       for k in SCORES}
        agg["true_dispersion"] = _stats([e["true_dispersion"] for e in entries])
        agg["edge_fraction_true"] = _stats([edge_fraction(e.get("X_true")) for e in entries])
        agg["edge_fraction_rec"] = _stats([edge_fraction(e.get("X_rec")) for e in entries])
        agg["verdicts"] = [e["verdict"] for e in entries]
        if all("family" in e for e in entries):
            agg["family_verdicts"] = [e["family"]["verdict"] for e in entries]
        if all("decoy" in e for e in entries):
            ends = [[e["decoy"]["matched_rmse"][j] for e in entries if e["decoy"]["matched_rmse"][j] is not None] for j in (0, 1)]
            agg["decoy_band"] = {"matched_rmse": [float(np.mean(v)) if v else None for v in ends]}
            agg["decoy_p"] = _stats([e["decoy"]["p_value"] for e in entries])
            agg["decoy_verdicts"] = [e["decoy"]["verdict"] for e in entries]
        agg["m"] = entries[0]["m"]
        attack[str(t)] = agg
    return {
        "regret": {
            "final_regret": _stats(finals),
            "auc": _stats(aucs),
            "curve_mean": curves.mean(axis=0).tolist(),
            "curve_std": curves.std(axis=0).tolist(),
        },
        "attack": attack,
        "within_band_every_round": all(v == "within" for a in attack.values() for v in a["verdicts"]),
        "below_band_every_round": all(v == "below" for a in attack.values() for v in a["verdicts"]),
        "below_band_any": any(v == "below" for a in attack.values() for v in a["verdicts"]),
        **(_decoy_summary(attack) if attack and all("decoy_verdicts" in a for a in attack.values()) else {}),
    }


def _decoy_summary(attack: dict) -> dict:
    """Per sigma: every attack within its decoy band? any below? and the smallest rank p-value, alone and
    Bonferroni-adjusted for the number of attacks (the family-wise test of "some attack beats chance")."""
    verdicts = [v for a in attack.values() for v in a["decoy_verdicts"]]
    ps = [a["decoy_p"]["min"] for a in attack.values() if a.get("decoy_p")]
    n = sum(a["decoy_p"]["n"] for a in attack.values() if a.get("decoy_p"))
    smallest = min(ps) if ps else None
    return {
        "within_decoy_band_every_round": all(v == "within" for v in verdicts),
        "below_decoy_band_any": any(v == "below" for v in verdicts),
        "decoy_p_min": smallest,
        "decoy_p_min_bonferroni": None if smallest is None else min(1.0, smallest * n),
        "decoy_attacks": n,
    }


# -- one (sigma, seed) cell -------------------------------------------------------------


def attack_mode(attack_config, follow: bool = False) -> str:
    """``"paper"``, ``"pursuit"`` or ``"pursuit-follow"`` (the pursuit attacker following every round)."""
    if type(attack_config).__name__ != "PursuitConfig":
        if follow:
            raise ValueError("following the target needs the pursuit attacker (a PursuitConfig)")
        return "paper"
    return "pursuit-follow" if follow else "pursuit"


def cell_key(config, target: int, rounds, attack_config, follow: bool = False) -> dict:
    """What makes a finished cell reusable: the run, the target, the rounds, the attacker, the format."""
    import dataclasses

    key = {"version": CELL_VERSION, "config": config.identity(), "target": int(target), "rounds": [int(t) for t in rounds],
           "attack": dataclasses.asdict(attack_config), "band": {"draws": BAND_DRAWS, "q": list(BAND_Q)}}
    mode = attack_mode(attack_config, follow)
    if mode != "paper":  # (paper-attacker cells keep their earlier keys)
        key["attack_mode"] = mode
    if follow:  # the follow attacker's own thresholds
        from pacd_jax import leakage

        key["follow"] = {"pad": leakage.FOLLOW_PAD, "accept": leakage.FOLLOW_ACCEPT, "accept_growth": leakage.FOLLOW_ACCEPT_GROWTH,
                         "retries": leakage.FOLLOW_RETRIES, "scores": leakage.FOLLOW_SCORES,
                         "screen": leakage.FOLLOW_SCREEN}
    return json.loads(json.dumps(key))  # tuples -> lists, as read back from the file


def run_cell(config, target: int, rounds, attack_config, task_factory=None, on_step=None, on_bo_round=None,
             follow: bool = False, resume: dict | None = None, on_progress=None, intercepted: tuple | None = None,
             on_intercepted=None) -> dict:
    """Run, intercept and attack one seed at one sigma (``config.seeds == (seed,)``); the cell's result.

    ``on_step()`` is called once per scored round, ``on_bo_round(done, total)`` after each BO round.
    ``follow``: the pursuit attacker follows the target through every round
    from ``min(rounds)`` to ``max(rounds)`` (:func:`pacd_jax.pursuit.pursuit_follow`)
    and the listed rounds are scored. With ``follow``, ``on_progress(state)``
    after every followed round gives a state that ``resume=state`` continues
    from (:func:`pacd_jax.leakage.run_leakage`; ``state["wall_time_s"]`` is the
    cell's wall time so far, carried into the resumed cell's). ``intercepted`` /
    ``on_intercepted``: a saved BO run used instead of repeating it, and the
    hook that saves it (:func:`pacd_jax.leakage.run_leakage`).
    """
    from pacd_jax import experiment, leakage, loop

    box = {}

    def on_run(results):
        box["results"] = results

    start = time.perf_counter()
    before = float(resume.get("wall_time_s", 0.0)) if resume is not None else 0.0
    progress = None
    if on_progress is not None:
        def progress(state):
            on_progress({**state, "wall_time_s": before + time.perf_counter() - start})
    doc = leakage.run_leakage(config, target, rounds, attack_config, task_factory,
                              on_round=(lambda e: on_step()) if on_step is not None else None,
                              on_bo_round=on_bo_round, on_run=on_run, follow=follow, resume=resume, on_progress=progress,
                              intercepted=intercepted, on_intercepted=on_intercepted)
    res = box["results"]
    (fam,) = experiment.build_families(config, task_factory)
    problem, _ = loop.problem_from_family(fam, config.iters, config.init_points, config.noise_std)
    clients = [
        experiment.client_summary(i, res.X[0, i], res.y[0, i], res.f[0, i], fam.optimum(i)[1], problem.init_points, share=False)
        for i in range(config.num_clients)
    ]
    seed = config.seeds[0]
    entries = []
    for e in doc["rounds"]:
        band = guess_band(e["X_true"], np.random.default_rng([seed, e["round"], 7]))
        rmse = e.get("matched_rmse")
        entries.append({**e, "band": band, "verdict": verdict(rmse, band["matched_rmse"])})
    curve = np.mean([c["regret"] for c in clients], axis=0)
    return {
        "seed": int(seed),
        "sigma": float(config.dp_sigma),
        "final_regret": float(np.mean([c["final_regret"] for c in clients])),
        "auc": float(np.mean([c["auc"] for c in clients])),
        "regret_curve": curve.tolist(),
        "clients": [{k: c[k] for k in ("client", "regret", "final_regret", "auc")} for c in clients],
        "rounds": entries,
        "run_time_s": doc["run_time_s"],
        "wall_time_s": before + time.perf_counter() - start,
        **({"resumed_after_round": doc["resumed_after_round"]} if "resumed_after_round" in doc else {}),
    }


def _cell_path(out: Path, sigma: float, seed: int) -> Path:
    return out / "cells" / f"sigma={sigma:g}_seed={seed}.json"


def _progress_path(out: Path, sigma: float, seed: int) -> Path:
    """Where a follow cell keeps its progress until it is finished (to resume an interrupted cell)."""
    return out / "cells" / f"sigma={sigma:g}_seed={seed}.progress.json"


#: a follow cell's saved BO run keeps the rounds from the last multiple of this at or below its progress
STORE_PRUNE_EVERY = 10


def _store_paths(out: Path, sigma: float, seed: int) -> tuple[Path, Path]:
    """A follow cell's saved BO run: its intercepted records (``.records.npz``) and the rest (``.run.json``)."""
    base = out / "cells" / f"sigma={sigma:g}_seed={seed}"
    return Path(f"{base}.records.npz"), Path(f"{base}.run.json")


def save_run_store(out: Path, sigma: float, seed: int, key: dict, records, truths, results, run_time: float,
                   from_round: int | None = None) -> None:
    """Save a follow cell's BO run (the records and true points from ``from_round`` on, the clients' data), atomically.

    A resumed cell then skips the BO run: the run need not be reproducible on
    the machine that resumes it. Records are written first and the JSON names
    the rounds it goes with, so a half-written pair is never taken for a store.
    """
    from pacd_jax import intercept, io

    keep = [j for j, r in enumerate(records) if from_round is None or int(r.round) >= from_round]
    npz, js = _store_paths(out, sigma, seed)
    intercept.save_records(npz, [records[j] for j in keep])
    io.write_json(js, {"key": key, "run_time_s": float(run_time), "rounds": [int(records[j].round) for j in keep],
                       "truths": [{"X": np.asarray(truths[j].X, np.float64).tolist(), "y": np.asarray(truths[j].y, np.float64).tolist()}
                                  for j in keep],
                       "results": {"seeds": [int(v) for v in results.seeds], "X": np.asarray(results.X).tolist(),
                                   "y": np.asarray(results.y).tolist(), "f": np.asarray(results.f).tolist(),
                                   "count": None if results.count is None else np.asarray(results.count).tolist()}})


def load_run_store(out: Path, sigma: float, seed: int, key: dict, need: int) -> tuple | None:
    """``(records, truths, results, run_time_s)`` of a saved follow cell's BO run whose key is ``key``, else None.

    ``need``: the first round the follow needs (the resumed round, or the first
    followed one); a store pruned past it is not used.
    """
    from pacd_jax import intercept, loop

    npz, js = _store_paths(out, sigma, seed)
    doc = _read_keyed(js, key)
    if doc is None:
        return None
    try:
        records = intercept.load_records(npz)
    except (OSError, ValueError):
        return None
    if doc.get("rounds") != [int(r.round) for r in records]:
        return None
    if not records or int(records[0].round) > need:
        return None
    truths = [intercept.Truth(np.asarray(t["X"], np.float64), np.asarray(t["y"], np.float64)) for t in doc["truths"]]
    r = doc["results"]
    results = loop.SeedResults(seeds=list(r["seeds"]), X=np.asarray(r["X"]), y=np.asarray(r["y"]), f=np.asarray(r["f"]),
                               count=None if r["count"] is None else np.asarray(r["count"]))
    return records, truths, results, float(doc["run_time_s"])


def _decoy_path(out: Path, sigma: float) -> Path:
    return out / "decoys" / f"sigma={sigma:g}.json"


def decoy_key(config, target: int) -> dict:
    """What makes saved decoy runs reusable: the decoy runs' options but their seeds (each run is saved under its
    seed, so a set can grow), and the target client."""
    identity = {k: v for k, v in config.identity().items() if k != "seeds"}
    return json.loads(json.dumps({"version": CELL_VERSION, "config": identity, "target": int(target)}))


def _exact_decoy_key(config, target: int, seeds) -> dict:
    """The key of a decoy file written before sets could grow: the options with exactly these seeds."""
    return json.loads(json.dumps({"version": CELL_VERSION, "config": config.replace(seeds=tuple(seeds)).identity(),
                                  "target": int(target)}))


def load_decoys(path: Path, config, target: int) -> dict[int, list]:
    """``{seed: the target's queries}`` of the decoy runs saved at ``path`` with ``config``'s options (any seeds) and
    ``target``; ``{}`` where there are none (or the file is of other options, or unreadable).

    A file keyed by its exact seeds (written before sets could grow) is read too.
    """
    from pacd_jax import io

    try:
        doc = io.read_json(path)
    except (OSError, ValueError):
        return {}
    result = doc.get("result") if isinstance(doc, dict) else None
    if not isinstance(result, dict) or len(result.get("seeds", [])) != len(result.get("X", [])):
        return {}
    seeds = [int(s) for s in result["seeds"]]
    if doc.get("key") != decoy_key(config, target) and not (seeds and doc.get("key") == _exact_decoy_key(config, target, seeds)):
        return {}
    return dict(zip(seeds, result["X"]))


def decoy_trajectories(config, target: int, count: int, path: Path, task_factory=None, on_round=None,
                       log=None) -> tuple[list[np.ndarray], int]:
    """The target's queries in the first ``count`` decoy runs of ``config`` (:func:`pacd_jax.decoys.decoy_seeds`),
    in seed order, and how many of them were run now (the rest were read from ``path``).

    Missing runs are made in batches of the seeds that share ``j // DECOY_CHUNK``
    (vectorised over the batch); after each batch ``path`` is rewritten
    (atomically) with every run it holds, so a stopped set loses at most one
    batch and a larger ``count`` later adds only the new seeds. ``on_round(done,
    total)`` counts the rounds of the runs still to make.
    """
    from pacd_jax import decoys as decoys_mod
    from pacd_jax import io

    wanted = decoys_mod.decoy_seeds(count)
    have = load_decoys(path, config, target)
    missing = [s for s in wanted if s not in have]
    batches: dict[int, list[int]] = {}
    for s in missing:
        batches.setdefault((s - DECOY_SEED_BASE) // DECOY_CHUNK, []).append(s)
    if missing and log is not None:
        log(f"{path}: {len(wanted) - len(missing)} of {count} decoy runs saved; running {len(missing)} "
            f"in {len(batches)} batch(es) of up to {DECOY_CHUNK}")
    total, done = config.iters * len(missing), 0
    for seeds in batches.values():
        def tick(n, of, done=done, size=len(seeds)):
            if on_round is not None:  # experiment.run counts one batch's rounds; count rounds x runs
                on_round(done + (n * config.iters * size) // of, total)

        runs = decoys_mod.target_trajectories(config.replace(seeds=tuple(seeds)), target, seeds, task_factory, on_round=tick)
        have.update((s, np.asarray(X, np.float64).tolist()) for s, X in zip(seeds, runs))
        done += config.iters * len(seeds)
        order = sorted(have)
        io.write_json(path, {"key": decoy_key(config, target), "result": {"seeds": order, "X": [have[s] for s in order]}})
    return [np.asarray(have[s], np.float64) for s in wanted], len(missing)


def with_decoys(cell: dict, trajectories) -> dict:
    """``cell`` with each attacked round's decoy band, p-value and verdict (:func:`pacd_jax.decoys.band`) added.

    The cell file itself is left as it is: the decoys are scored when the
    sweep is aggregated, so the decoy count can change without rerunning an attack.
    """
    from pacd_jax import decoys

    return {**cell, "rounds": [{**e, "decoy": decoys.band(e.get("X_rec"), e.get("matched_rmse"), trajectories, int(e["m"]), BAND_Q)}
                               for e in cell["rounds"]]}


def _read_keyed(path: Path, key: dict) -> dict | None:
    """The JSON document at ``path`` if it is readable and its ``"key"`` equals ``key`` (else None)."""
    from pacd_jax import io

    try:
        doc = io.read_json(path)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and doc.get("key") == key else None


def load_progress(path: Path, key: dict) -> dict | None:
    """The saved progress of an unfinished follow cell at ``path`` if its key equals ``key`` (else None: start afresh)."""
    doc = _read_keyed(path, key)
    return doc["progress"] if doc is not None and isinstance(doc.get("progress"), dict) else None


def load_cell(path: Path, key: dict) -> dict | None:
    """The cached result at ``path`` if its key equals ``key`` (else None: rerun it)."""
    doc = _read_keyed(path, key)
    return None if doc is None else doc.get("result")


# -- the sweep --------------------------------------------------------------------------


def sweep(base, sigmas, seeds, target: int, rounds, attack_config, out, operating_sigma: float,
          task_factory=None, quiet: bool = False, meta: dict | None = None, log=print, fmt: str = "png", follow: bool = False,
          decoys: int = 0) -> dict:
    """Run every (sigma, seed) cell not already finished in ``out/cells``; write every output; the document.

    ``follow``: attack with the pursuit attacker following every round (:func:`run_cell`).
    ``decoys``: per sigma, run that many decoy seeds (:mod:`pacd_jax.decoys`;
    kept in ``out/decoys``) and score every attack against its decoy band; 0: none.
    """
    from pacd_jax import io, leakage, progress

    out = Path(out)
    start = time.perf_counter()
    per_cell = base.iters + len(rounds)  # BO rounds, then attacks
    total = len(sigmas) * len(seeds) * per_cell + (len(sigmas) * base.iters if decoys else 0)
    bar = progress.bar(total, "step", "privacy sweep (BO rounds + attacks + decoy runs)" if decoys else "privacy sweep (BO rounds + attacks)", quiet)
    cells: dict[float, list[dict]] = {}
    reused = 0
    for sigma in sigmas:
        for seed in seeds:
            config = base.replace(dp_sigma=float(sigma), seeds=(int(seed),))
            key = cell_key(config, target, rounds, attack_config, follow)
            path = _cell_path(out, sigma, seed)
            result = load_cell(path, key)
            if result is None:
                bar.set_description(f"sigma={sigma:g} seed={seed}")
                saving = resume = None
                if follow:  # a follow cell takes hours: keep its progress after every round and resume from it
                    ppath = _progress_path(out, sigma, seed)
                    resume = load_progress(ppath, key)
                    if resume is not None and not quiet:
                        log(f"sigma {sigma:g} seed {seed}: resuming the follow after round {resume['round']} "
                            f"({ppath}; the run is repeated first)")

                    # and its BO run, so that resuming needs neither the time nor a machine that repeats it bit for bit
                    stored = load_run_store(out, sigma, seed, key, resume["round"] if resume is not None else min(rounds))
                    run_box = {"run": stored}

                    def saving(state, ppath=ppath, key=key, sigma=sigma, seed=seed, run_box=run_box):
                        io.write_json(ppath, {"key": key, "progress": state})
                        if run_box["run"] is not None and state["round"] % STORE_PRUNE_EVERY == 0:
                            save_run_store(out, sigma, seed, key, *run_box["run"], from_round=state["round"])

                    def keeping(records, truths, results, run_time, sigma=sigma, seed=seed, key=key, run_box=run_box):
                        run_box["run"] = (records, truths, results, run_time)
                        save_run_store(out, sigma, seed, key, records, truths, results, run_time)
                    if resume is not None:
                        bar.update(len(resume["entries"]))
                    if stored is not None:
                        bar.update(base.iters)
                try:
                    result = run_cell(config, target, rounds, attack_config, task_factory, on_step=lambda: bar.update(1),
                                      on_bo_round=lambda done, total: bar.update(1), follow=follow, resume=resume, on_progress=saving,
                                      intercepted=stored if follow else None, on_intercepted=keeping if follow else None)
                except leakage.ResumeError as err:
                    raise ValueError(f"{_progress_path(out, sigma, seed)}: {err}; delete it to start this cell over") from None
                io.write_json(path, {"key": key, "result": result})
                if follow:
                    for done in (_progress_path(out, sigma, seed), *_store_paths(out, sigma, seed)):
                        done.unlink(missing_ok=True)
                if not quiet:
                    ratios = " ".join(f"t={e['round']}:{e['rmse_ratio']:.2f}" if e.get("rmse_ratio") is not None else f"t={e['round']}:err"
                                      for e in result["rounds"])
                    log(f"sigma {sigma:g} seed {seed}: final regret {result['final_regret']:.4f}  AUC {result['auc']:.3f}  "
                        f"RMSE ratio {ratios}  ({result['wall_time_s']:.0f} s)")
            else:
                reused += 1
                bar.update(per_cell)
            cells.setdefault(float(sigma), []).append(result)
    decoys_reused = 0
    if decoys:
        for sigma in sigmas:
            bar.set_description(f"sigma={sigma:g} decoys")
            done = [0]

            def tick(n, of, done=done):
                # the bar counts one run's rounds per sigma, whatever the number of decoy runs still to make
                step = int(n * base.iters / of) - done[0]
                done[0] += step
                bar.update(step)

            trajectories, ran = decoy_trajectories(base.replace(dp_sigma=float(sigma)), target, decoys, _decoy_path(out, sigma),
                                                   task_factory, on_round=tick, log=None if quiet else log)
            decoys_reused += ran == 0
            bar.update(base.iters - done[0])
            cells[float(sigma)] = [with_decoys(c, trajectories) for c in cells[float(sigma)]]
    bar.close()
    doc = sweep_document(base, sigmas, seeds, target, rounds, attack_config, operating_sigma, cells, meta or {}, follow,
                         decoys=decoys)
    doc["meta"]["wall_time_s"] = time.perf_counter() - start
    doc["meta"]["cells_reused"] = reused
    if decoys:
        doc["meta"]["decoy_sets_reused"] = decoys_reused
    doc["meta"]["cells_wall_time_s"] = float(sum(c["wall_time_s"] for cs in cells.values() for c in cs))
    io.write_json(out / "privacy.json", doc)
    plot_sweep(doc, out / f"privacy_sweep.{fmt}")
    plot_regret(doc, out / f"dp_regret.{fmt}")
    with io.atomic_path(out / "privacy.md") as tmp:
        tmp.write_text(table(doc) + "\n")
    return doc


def sweep_document(base, sigmas, seeds, target, rounds, attack_config, operating_sigma, cells, meta, follow: bool = False,
                   decoys: int = 0) -> dict:
    """``privacy.json``: options, provenance, and per sigma epsilon, regret, attack scores and bands."""
    import dataclasses

    out = {}
    for sigma in sigmas:
        config = base.replace(dp_sigma=float(sigma))
        entry = {"sigma": float(sigma), "noise_std": 2.0 * float(sigma) * base.dp_clip, "epsilon": epsilon_entry(config)}
        per_seed, family = family_reading(cells[float(sigma)])
        entry.update(aggregate(per_seed, rounds))
        entry["family"] = family
        entry["per_seed"] = per_seed
        out[f"{float(sigma):g}"] = entry
    return {
        "benchmark": base.benchmark,
        "target_client": int(target),
        "sigmas": out,
        "sigma_list": [float(s) for s in sigmas],
        "seeds": [int(s) for s in seeds],
        "rounds": [int(t) for t in rounds],
        "clip": base.dp_clip,
        "operating_sigma": float(operating_sigma),
        "delta": DELTA,
        "band": {"kind": "uniform guesses", "draws": BAND_DRAWS, "quantiles": list(BAND_Q)},
        "family_band": {"kind": "rank p-values against uniform guesses (and decoys), Bonferroni over each sigma's attacks",
                        "alpha": FAMILY_ALPHA, "draws": FAMILY_DRAWS},
        "decoy_band": ({"kind": "the target client's queries in runs with other seeds", "draws": int(decoys),
                        "first_seed": DECOY_SEED_BASE, "quantiles": list(BAND_Q)}
                       if decoys else None),
        "attack": {"mode": attack_mode(attack_config, follow), **dataclasses.asdict(attack_config), "precision": "float64"},
        "config": base.to_dict(),
        "meta": dict(meta),
    }


# -- outputs ----------------------------------------------------------------------------


def _fmt_eps(e) -> str:
    return "∞ (no DP)" if e == "inf" else f"{e:.1f}"


def _pm(s, fmt=".3f") -> str:
    return "–" if s is None else f"{s['mean']:{fmt}} ± {s['std']:{fmt}}"


def table(doc: dict) -> str:
    """The markdown table: sigma -> epsilon, final regret, AUC, matched-RMSE ratio per attacked round."""
    rounds = doc["rounds"]
    head = ["sigma", "noise std 2σC", "ε PLD", "ε RDP", "final regret", "AUC"]
    decoy = doc.get("decoy_band")
    head += [f"RMSE ratio t={t}" for t in rounds] + ["attack vs band (below/within/above)"]
    if decoy:
        head += ["attack vs decoy band (below/within/above)", "smallest decoy p (Bonferroni)"]
    family_doc = doc.get("family_band")
    if family_doc:
        head += [f"family-wise {100 * (1 - family_doc['alpha']):.0f} % band: guesses (below/within/above)"]
        if decoy:
            head += ["family-wise: decoys"]
    head += [f"on box edge t={rounds[-1]}: true / recovered"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key in sorted(doc["sigmas"], key=float):
        e = doc["sigmas"][key]
        r = e["regret"]
        verdicts = [v for t in rounds for v in e["attack"][str(t)]["verdicts"]]
        counts = "/".join(str(verdicts.count(v)) for v in ("below", "within", "above"))
        cols = [f"{e['sigma']:g}", f"{e['noise_std']:.3g}", _fmt_eps(e["epsilon"]["pld"]), _fmt_eps(e["epsilon"]["rdp"]),
                _pm(r["final_regret"], ".4f"), _pm(r["auc"])]
        last = e["attack"][str(rounds[-1])]
        edges = f"{_pm(last.get('edge_fraction_true'), '.2f')} / {_pm(last.get('edge_fraction_rec'), '.2f')}"
        cols += [_pm(e["attack"][str(t)]["rmse_ratio"], ".2f") for t in rounds] + [counts]
        if decoy:
            dv = [v for t in rounds for v in e["attack"][str(t)].get("decoy_verdicts", [])]
            p_min, p_adj = e.get("decoy_p_min"), e.get("decoy_p_min_bonferroni")
            cols += ["/".join(str(dv.count(v)) for v in ("below", "within", "above")),
                     "–" if p_min is None else f"{p_min:.3f} ({p_adj:.2f})"]
        if family_doc:
            f = e["family"]
            cols += ["/".join(str(f["counts"][v]) for v in ("below", "within", "above"))]
            if decoy:
                fd = f.get("decoy")
                cols += ["–" if fd is None else "/".join(str(fd["counts"][v]) for v in ("below", "within", "above"))
                         + ("" if fd["resolvable"] else f" (below needs ≥ {math.ceil(1 / f['level']) - 1} decoys)")]
        cols += [edges]
        rows.append("| " + " | ".join(cols) + " |")
    c = doc["config"]
    m = doc["meta"]
    a = doc["attack"]
    if a.get("mode") == "pursuit-follow":
        attacker = (f"Attack: pursuit following the target through every round from {rounds[0]} to {rounds[-1]} "
                    f"(pacd_jax.pursuit.pursuit_follow: {a['candidates']} candidates and {a['faces']} per face, "
                    f"Levenberg-Marquardt polish; the listed rounds are scored). ")
    elif a.get("mode") == "pursuit":
        attacker = (f"Attack: pursuit (pacd_jax.pursuit), {a['candidates']} candidates, {a['grow_steps']} + {a['final_steps']} "
                    f"L-BFGS steps, up to {a['swaps']} swaps. ")
    else:
        attacker = (f"Attack: {a['restarts']} restarts x {a['steps']} L-BFGS steps, init {a['init']}, "
                    f"{'y known' if not a['learn_y'] else 'y optimised'}{', box' if a['bounded'] else ''}"
                    f"{', cosine' if a['cosine'] else ''}. ")
    rows.append("")
    rows.append(
        f"{doc['benchmark']}, {c['num_clients']} clients, target client {doc['target_client']}, seeds {doc['seeds']}, "
        f"{c['iters']} rounds, K = {c['num_particles']}, C = {doc['clip']:g}; ε at δ = {doc['delta']:g} of one client's run. "
        f"{attacker}"
        f"RMSE ratio = matched RMSE / a uniform guess's (mean ± std over seeds; < 1 beats guessing); "
        f"band = {int(100 * doc['band']['quantiles'][0])}-{int(100 * doc['band']['quantiles'][1])} % of the guesses' matched RMSE; "
        f"the next column counts (seed, round) attacks below / within / above it; "
        + (f"decoy band = {int(100 * decoy['quantiles'][0])}-{int(100 * decoy['quantiles'][1])} % of the matched RMSE from the "
           f"reconstruction to the target client's queries in {decoy['draws']} runs with other seeds (pacd_jax.decoys: below it, "
           f"the reconstruction is closer to its own target than to data it carries no information about), counted the same way, "
           f"and the smallest rank p-value (1 + decoys at least as close) / (decoys + 1) over the attacks, in brackets times "
           f"the number of attacks (Bonferroni: the family-wise p of \"some attack beats chance\"); " if decoy else "")
        + (f"family-wise band: each attack's rank p-values against {family_doc['draws']} uniform guesses (as close or closer; "
           f"as far or farther), below / above when one is at most {family_doc['alpha']:g} / (2 × the σ's attacks), so that with "
           f"no information every attack of a σ is within with probability at least {1 - family_doc['alpha']:g}"
           + ("; the decoys' rank p-values read the same way" if decoy else "") + "; " if family_doc else "")
        + f"the last, the share of points within {EDGE_TOL:g} of the box boundary at the last attacked round."
    )
    if m.get("command"):
        rows.append("")
        rows.append(f"Generated by `{m['command']}` at commit `{m.get('commit')}` on {m.get('machine')} "
                    f"({m.get('wall_time_s', 0):.0f} s; {m.get('cells_reused', 0)} of the cells reused from earlier calls; "
                    f"the cells took {m.get('cells_wall_time_s', 0):.0f} s in all).")
    return "\n".join(rows)


def _sigma_axis(doc):
    keys = sorted(doc["sigmas"], key=float)
    sig = np.asarray([float(k) for k in keys])
    pos = sig[sig > 0]
    zero_at = pos.min() / 2 if pos.size else 0.5
    return keys, sig, np.where(sig == 0, zero_at, sig)


def plot_sweep(doc: dict, path) -> None:
    """Figure 4 (right): dispersion and the set scores vs sigma, mean ± std over seeds, per attacked round, with the guess band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from matplotlib.ticker import NullLocator

    keys, sig, x = _sigma_axis(doc)
    titles = {"dispersion": "dispersion of the reconstruction", "matched_rmse": "matched RMSE", "chamfer": "Chamfer distance",
              "recall_at_r": "recall@r", "precision_at_r": "precision@r",
              "rmse_ratio": "matched RMSE / uniform guess's (< 1: leakage)"}
    panels = (*SCORES, "rmse_ratio")
    fig, axes = plt.subplots(2, 3, figsize=(13, 7))
    axes = axes.ravel()
    for ax, score in zip(axes, panels):
        for j, t in enumerate(doc["rounds"]):
            color = f"C{j}"
            a = [doc["sigmas"][k]["attack"][str(t)] for k in keys]
            mean = np.asarray([np.nan if e[score] is None else e[score]["mean"] for e in a])
            std = np.asarray([np.nan if e[score] is None else e[score]["std"] for e in a])
            if score == "rmse_ratio":  # the band in units of the guess's mean matched RMSE
                base = np.asarray([np.nan if e["baseline"]["matched_rmse"] is None else e["baseline"]["matched_rmse"]["mean"] for e in a])
                lo = np.asarray([e["band"]["matched_rmse"][0] for e in a]) / base
                hi = np.asarray([e["band"]["matched_rmse"][1] for e in a]) / base
            else:
                lo = np.asarray([e["band"][score][0] for e in a])
                hi = np.asarray([e["band"][score][1] for e in a])
            ax.fill_between(x, lo, hi, color=color, alpha=0.12, lw=0)
            ax.errorbar(x, mean, std, marker="o", ms=4, capsize=3, color=color, label=f"attack, t={t}")
            if score == "dispersion":
                td = [np.nan if e["true_dispersion"] is None else e["true_dispersion"]["mean"] for e in a]
                ax.plot(x, td, ls="--", color=color, lw=1, label=f"true queries, t={t}")
        if score == "rmse_ratio":
            ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xscale("log")
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticks(x, ["0 (off)" if s == 0 else f"{s:g}" for s in sig], fontsize=8)
        ax.set_xlabel("noise multiplier sigma")
        ax.set_title(titles[score], fontsize=9)
    axes[0].legend(fontsize=6)
    q = doc["band"]["quantiles"]
    fig.suptitle(f"{doc['benchmark']}: DLG on client {doc['target_client']} vs sigma (mean ± std over seeds {doc['seeds']}; "
                 f"shaded: {int(100 * q[0])}-{int(100 * q[1])} % of uniform guesses)", fontsize=9)
    fig.tight_layout()
    _save(fig, path)


def plot_regret(doc: dict, path) -> None:
    """Figure 5: normalised regret and its running mean (AUC up to round t) vs round, without DP and at the operating sigma."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pacd_jax import metrics

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    op = doc["operating_sigma"]
    series = [(0.0, "no DP", "C0"), (op, f"DP sigma={op:g}, C={doc['clip']:.3g}", "C3")]
    for sigma, label, color in series:
        e = doc["sigmas"].get(f"{sigma:g}")
        if e is None:
            continue
        m = np.asarray(e["regret"]["curve_mean"])
        s = np.asarray(e["regret"]["curve_std"])
        t = np.arange(m.size)
        eps = e["epsilon"]["pld"]
        label = f"{label} (ε={'∞' if eps == 'inf' else f'{eps:.3g}'})"
        axes[0].plot(t, np.maximum(m, FLOOR), color=color, label=label)
        axes[0].fill_between(t, np.maximum(m - s, FLOOR), np.maximum(m + s, FLOOR), color=color, alpha=0.15)
        curves = np.asarray([c["regret_curve"] for c in e["per_seed"]])
        running = np.cumsum(curves[:, 1:], axis=1) / np.arange(1, curves.shape[1])
        rm, rs = running.mean(axis=0), running.std(axis=0)
        axes[1].plot(t[1:], rm, color=color, label=label)
        axes[1].fill_between(t[1:], rm - rs, rm + rs, color=color, alpha=0.15)
    w = metrics.auc_window(doc["config"]["iters"])
    axes[1].axvline(w, color="gray", ls=":", lw=1, label=f"paper AUC window (first {w} rounds)")
    axes[0].set_yscale("log")
    axes[0].set_xlabel("BO round t")
    axes[0].set_ylabel("normalised regret (client mean)")
    axes[1].set_xlabel("BO round t")
    axes[1].set_ylabel("mean regret over rounds 1..t (AUC)")
    for ax in axes:
        ax.legend(fontsize=7)
    fig.suptitle(f"{doc['benchmark']}: regret with and without DP (mean ± std over seeds {doc['seeds']})", fontsize=9)
    fig.tight_layout()
    _save(fig, path)


def _save(fig, path) -> None:
    import matplotlib.pyplot as plt

    from pacd_jax import io

    path = Path(path)
    with io.atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120, format=path.suffix.lstrip(".") or "png")
    plt.close(fig)


# -- command line -----------------------------------------------------------------------


def _sigma_list(text: str) -> list[float]:
    from pacd_jax.cli import _float

    parts = [p for p in text.split(",") if p.strip() != ""]
    if not parts:
        raise argparse.ArgumentTypeError(f"expected comma-separated sigmas, got {text!r}")
    values = [_float(p) for p in parts]
    bad = [v for v in values if v < 0]
    if bad:
        raise argparse.ArgumentTypeError(f"sigmas must be >= 0, got {bad}")
    if len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"sigmas must be distinct, got {text!r}")
    return values


def _borrowed_groups(helpers) -> dict:
    """The ``attack`` and ``run`` argument groups of ``pacd-bo attack``, so both commands take the same options.

    Built from :func:`pacd_jax.attack_cli.add_parser` (argparse actions may be
    shared between parsers, as ``parents=`` does), so a new attacker option
    there appears here too.
    """
    from pacd_jax import attack_cli

    subs = argparse.ArgumentParser(add_help=False).add_subparsers()
    attack_cli.add_parser(subs, helpers)
    return {g.title: g._group_actions for g in subs.choices["attack"]._action_groups}


def add_parser(sub) -> None:
    from pacd_jax.cli import _float, _int_list, _nonneg_int, _positive_int
    from pacd_jax.config import RunConfig

    d = RunConfig()
    p = sub.add_parser(
        "privacy",
        help="sigma sweep: DP noise vs the DLG attack and vs regret (Figure 4 right, Figure 5, sigma table)",
        description="For each sigma and seed run PACD-BO with DP, attack the target client's messages at the chosen rounds "
        "(as pacd-bo attack), keep that run's regret; write DIR/privacy.json, privacy_sweep.png, dp_regret.png, privacy.md. "
        "Finished (sigma, seed) cells in DIR/cells are reused when their options match.",
    )
    p.add_argument("--benchmark", default="branin", help="task family (default %(default)s)")
    p.add_argument("--sigmas", type=_sigma_list, default=[0.0, 1.0, 2.0, 4.0, 8.0, 16.0], help="noise multipliers, 0 = no DP (default 0,1,2,4,8,16)")
    p.add_argument("--seeds", type=_int_list, default=[0, 1], help="seeds, comma-separated (default 0,1)")
    p.add_argument("--rounds", type=_int_list, default=[1, 20, 60, 99], help="0-based rounds to attack (default 1,20,60,99)")
    p.add_argument("--iters", type=_positive_int, default=100, help="BO rounds T (default %(default)s)")
    p.add_argument("--clients", type=_positive_int, default=d.num_clients, help="number of clients N (default %(default)s)")
    p.add_argument("--target-client", type=_nonneg_int, default=0, help="client to attack (default %(default)s)")
    p.add_argument("--clip", type=_float, default=d.dp_clip, help="DP clip norm C (paper eq. 12; default %(default)s; see pacd-bo gradnorms)")
    p.add_argument("--operating-sigma", type=_float, default=8.0, help="the sigma drawn against no DP in dp_regret.png (default %(default)s)")
    p.add_argument("--decoys", type=_nonneg_int, default=DEFAULT_DECOYS, metavar="D",
                   help="per sigma, D plain runs with other seeds (from %d) give the decoy band: the matched RMSE from each "
                        "reconstruction to the target client's queries there; 0 = none (default %%(default)s)" % DECOY_SEED_BASE)
    p.add_argument("--out", required=True, metavar="DIR", help="output folder")
    p.add_argument("--format", choices=("png", "pdf"), default="png", help="figure format (default %(default)s)")
    p.add_argument("--quiet", action="store_true", help="no progress bar or per-cell lines")
    p.add_argument("--attack-mode", choices=("paper", "pursuit", "pursuit-follow"), default="paper",
                   help="paper: eq. 11 from random starts (default); pursuit: from the message's atoms (as pacd-bo attack); "
                        "pursuit-follow: the pursuit attacker follows the target through every round from min(--rounds) to "
                        "max(--rounds), the listed rounds are scored (as pacd-bo attack)")
    groups = _borrowed_groups({"positive_int": _positive_int, "nonneg_int": _nonneg_int, "int_list": _int_list, "float": _float})
    for title in ("attack", "pursuit attacker", "run (defaults as pacd-bo run)"):
        g = p.add_argument_group(title)
        for action in groups[title]:
            g._add_action(action)
    p.set_defaults(attack_dests=[a.dest for a in groups["attack"]], pursuit_dests=[a.dest for a in groups["pursuit attacker"]])


#: ``pacd-bo attack`` option (dest) -> AttackConfig field, where the names differ.
_ATTACK_FIELDS = {"known_y": ("learn_y", lambda v: not v), "attack_init": ("init", None), "box": ("bounded", None),
                  "attack_particles": ("particles", None)}


def attack_config_from_args(args):
    """The attacker of the options (same meaning as in ``pacd-bo attack``).

    :class:`pacd_jax.attack.AttackConfig` (``--attack-mode paper``) or
    :class:`pacd_jax.pursuit.PursuitConfig` (``--attack-mode pursuit`` or ``pursuit-follow``).
    """
    import dataclasses

    from pacd_jax import attack, pursuit

    mode = getattr(args, "attack_mode", "paper")
    if mode in ("pursuit", "pursuit-follow"):
        kw = {dest.removeprefix("pursuit_"): getattr(args, dest) for dest in args.pursuit_dests}
        for name in ("search_particles", "shortlist"):
            if kw.get(name) == 0:  # the options' "all"
                kw[name] = None
        if kw.get("converged_rtol") is None and mode == "pursuit-follow":  # as pacd-bo attack
            kw["converged_rtol"] = 1e-6
        fields = {f.name for f in dataclasses.fields(pursuit.PursuitConfig)}
        unknown = set(kw) - fields
        if unknown:
            raise ValueError(f"pursuit options {sorted(unknown)} have no PursuitConfig field")
        return pursuit.PursuitConfig(**kw)

    fields = {f.name for f in dataclasses.fields(attack.AttackConfig)}
    kw = {}
    for dest in args.attack_dests:
        value = getattr(args, dest)
        if dest in _ATTACK_FIELDS:
            name, fn = _ATTACK_FIELDS[dest]
            kw[name] = fn(value) if fn else value
        elif dest in fields:
            kw[dest] = value
        else:
            raise ValueError(f"attacker option --{dest.replace('_', '-')} has no AttackConfig field (update privacy_sweep._ATTACK_FIELDS)")
    return attack.AttackConfig(**kw)


def cmd_privacy(args) -> int:
    from pacd_jax import provenance, tasks
    from pacd_jax.cli import UsageError
    from pacd_jax.config import RunConfig

    prog = "pacd-bo privacy"
    if args.benchmark not in tasks.known_families():
        raise UsageError(f"unknown benchmark {args.benchmark!r}; choose one of {', '.join(tasks.known_families())}", prog)
    out = Path(args.out)
    from pacd_jax import io

    try:
        io.check_output_folder(out)
    except ValueError as exc:
        raise UsageError(str(exc), prog) from None
    if args.target_client >= args.clients:
        raise UsageError(f"--target-client must be in [0, {args.clients - 1}], got {args.target_client}", prog)
    bad = [t for t in args.rounds if not 0 <= t < args.iters]
    if bad:
        raise UsageError(f"--rounds must be in [0, {args.iters - 1}] (--iters {args.iters}), got {bad}", prog)
    if len(set(args.rounds)) != len(args.rounds):
        raise UsageError(f"--rounds must be distinct, got {args.rounds}", prog)
    if any(s < 0 for s in args.seeds) or len(set(args.seeds)) != len(args.seeds):
        raise UsageError(f"--seeds must be distinct non-negative integers, got {args.seeds}", prog)
    if args.clip <= 0:
        raise UsageError(f"--clip must be > 0, got {args.clip}", prog)
    from pacd_jax import decoys

    clash = sorted(set(args.seeds) & set(decoys.decoy_seeds(args.decoys)))
    if clash:
        raise UsageError(f"--seeds {clash} are decoy seeds (from {decoys.DECOY_SEED_BASE}); choose other seeds or fewer --decoys", prog)
    if args.operating_sigma not in args.sigmas:
        raise UsageError(f"--operating-sigma {args.operating_sigma:g} must be one of --sigmas {','.join(f'{s:g}' for s in args.sigmas)}", prog)
    base = RunConfig(
        benchmark=args.benchmark, method="pacd", num_clients=args.clients, iters=args.iters, seeds=(args.seeds[0],),
        x64=args.x64, num_particles=args.particles, hidden=tuple(args.hidden), svgd_steps=args.svgd_steps,
        svgd_steps_init=args.svgd_steps_init, num_candidates=args.candidates, num_local=args.local_candidates,
        num_refine=min(args.refine, args.candidates), refine_steps=args.refine_steps, dp_clip=args.clip,
    )
    attack_config = attack_config_from_args(args)
    import shlex

    meta = {"command": "pacd-bo " + shlex.join(getattr(args, "argv", sys.argv[1:])), "commit": provenance.commit(),
            "machine": provenance.machine()}
    doc = sweep(base, args.sigmas, args.seeds, args.target_client, sorted(args.rounds), attack_config, out,
                args.operating_sigma, quiet=args.quiet, meta=meta, fmt=args.format, follow=args.attack_mode == "pursuit-follow",
                decoys=args.decoys)
    if not args.quiet:
        print(table(doc))
        print(f"wrote {out / 'privacy.json'}, {out / f'privacy_sweep.{args.format}'}, {out / f'dp_regret.{args.format}'} "
              f"and {out / 'privacy.md'}")
    return 0
