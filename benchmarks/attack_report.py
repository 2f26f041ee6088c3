"""Exploitation leakage on Branin (paper section V-B): DLG by the coordinator on client 0.

Runs PACD-BO once (float64 by default: in float32 the particles of this run
become NaN between rounds 40 and 60), records client 0's last-step message at
the paper's rounds, and attacks each record with several attacker variants.
Also measures the basin of the true data: L-BFGS started at the truth plus
Gaussian noise of a few radii (does it come back?). Writes
``benchmarks/results/attack_branin.json`` (per variant and round: loss,
matched RMSE and its ratio to a uniform guess, recall, dispersion, time) with
provenance, and Figure 3 / Figure 4 (left) of the main variant under
``benchmarks/results/attack_branin/``.

    PYTHONPATH=. python benchmarks/attack_report.py

The ``pursuit`` variant (:func:`pacd_jax.pursuit.pursuit_attack`) reads the
points off the message's Jacobian atoms; ``--readme`` puts its table in
README.md between the ``attack-pursuit`` markers:

    PYTHONPATH=. python benchmarks/attack_report.py --variants pursuit --readme \
        --out benchmarks/results/attack_branin_pursuit.json

A pursuit attack at round 99 takes over half an hour here: ``--cache FILE``
keeps the BO run between invocations and ``--resume`` keeps the rounds an
interrupted report already attacked (with the same settings), so rerunning
the same command goes on where it stopped. For ``pursuit_follow`` it goes on
from the last round whose points were saved (every round's are, unclipped, so it goes on exactly).

The ``pursuit_follow`` variant (:func:`pacd_jax.pursuit.pursuit_follow`)
is the pursuit attack following the target from round 0 to the last listed
round (the coordinator receives every round's message); it scores every
round, and ``--readme`` puts its table between the ``attack-follow`` markers
(``attack-follow-repair`` with ``--repairs``):

    PYTHONPATH=. python benchmarks/attack_report.py --variants pursuit_follow --readme \
        --out benchmarks/results/attack_branin_follow.json

``--repairs N`` lets it revisit earlier points (``pursuit_follow(repairs=N)``);
``--start-from FILE --start-round R`` keeps rounds 0..R of an earlier follow
report (same settings but the repairs and how a missed round is retried) and goes on
from its round-R reconstruction,
into its own ``--out``:

    PYTHONPATH=. python benchmarks/attack_report.py --variants pursuit_follow --readme --repairs 1 \
        --start-from benchmarks/results/attack_branin_follow.json --start-round 56 \
        --out benchmarks/results/attack_branin_follow_repair.json

The ``progressive`` variant (:func:`pacd_jax.attack.progressive_attack`)
follows the target through every round from 0 to the last listed one and
scores every round; run it alone into its own file:

    PYTHONPATH=. python benchmarks/attack_report.py --variants progressive \
        --out benchmarks/results/attack_branin_progressive.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pickle
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from pacd_jax import attack, intercept, io, leakage, methods, metrics, pursuit  # noqa: E402
from pacd_jax.config import RunConfig  # noqa: E402
from pacd_jax.provenance import command, commit, machine  # noqa: E402

#: attacker variants: name -> (AttackConfig options, rounds to attack or None for all)
VARIANTS = {
    "paper": (dict(restarts=5, steps=500), None),
    "known_y": (dict(restarts=5, steps=500, learn_y=False), (5, 99)),
    "box_uniform": (dict(restarts=5, steps=500, init="uniform", bounded=True), (5, 99)),
    "cosine_box": (dict(restarts=5, steps=500, init="uniform", bounded=True, cosine=True), (5, 99)),
    "one_particle": (dict(restarts=5, steps=500, init="uniform", particles=1), (5, 99)),
    "pursuit": (dict(), None),  # pacd_jax.pursuit.PursuitConfig defaults
}


#: the progressive attacker's options (see pacd_jax.attack.ProgressiveConfig)
PROGRESSIVE = dict(first=dict(restarts=64, steps=300, init="uniform", bounded=True, particles=2), candidates=16,
                   search_steps=40, search_particles=2, refine_steps=30, tries=3)


#: the follow attacker's options (pacd_jax.pursuit.pursuit_follow; PursuitConfig defaults otherwise)
FOLLOW = dict(converged_rtol=1e-6)
#: with --repairs: pursuit_follow's repair_bar and repair_candidates (recorded in the report)
REPAIR_BAR, REPAIR_CANDIDATES = 1e-28, 4
REPAIR_KEYS = ("repairs", "repair_bar", "repair_candidates")
#: how a round that missed its bar is retried: --start-from may go on from a run that retried otherwise
RETRY_KEYS = ("retries", "screen")


def progressive_config(opts=PROGRESSIVE) -> attack.ProgressiveConfig:
    return attack.ProgressiveConfig(**{**opts, "first": attack.AttackConfig(**opts["first"])})


def bo_records(config: RunConfig, rounds, cache: str | None):
    """Client 0's intercepted records and true data at ``rounds``: ``(records, truths, from_cache)``.

    From the pickle ``cache`` when it exists, else from a fresh BO run, which
    is then pickled to ``cache`` if one is named.
    """
    if cache and Path(cache).exists():
        with open(cache, "rb") as fh:
            pairs = [(r, t) for r, t in zip(*pickle.load(fh)) if r.round in rounds]
        return [r for r, _ in pairs], [t for _, t in pairs], True
    with jax.enable_x64(config.x64):
        records, truths, _ = intercept.run_vmap(config, intercept.InterceptSpec(0, tuple(rounds)))
    if cache:
        with open(cache, "wb") as fh:
            pickle.dump((records, truths), fh)
    return records, truths, False


def basin(model, rec, truth, radii, steps, seed) -> list[dict]:
    """L-BFGS from the truth plus N(0, r^2) noise (y known): final loss and matched RMSE per radius."""
    out = []
    rng = np.random.default_rng(seed)
    for r in radii:
        X0 = np.clip(truth.X + r * rng.standard_normal(truth.X.shape), 0.0, 1.0)[None]
        cfg = attack.AttackConfig(restarts=1, steps=steps, learn_y=False)
        with jax.enable_x64(True):
            res = attack.run_attack(
                model, jnp.asarray(rec.particles, jnp.float64), jnp.asarray(rec.grads, jnp.float64), rec.m,
                jax.random.key(0), cfg, y_known=truth.y, start=(X0, np.asarray(truth.y)[None]),
            )
        out.append({
            "radius": r,
            "start_rmse": metrics.matched_rmse(X0[0], truth.X),
            "final_rmse": metrics.matched_rmse(res.X, truth.X),
            "final_loss": res.loss,
        })
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", default=",".join(map(str, leakage.PAPER_ROUNDS)))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--float32", action="store_true", help="run BO in float32 (the attack is float64 either way)")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--basin-rounds", default="5,40,99")
    parser.add_argument("--basin-radii", default="0.001,0.01,0.05")
    parser.add_argument("--cache", help="pickle of (records, truths): loaded if present, else written after the BO run")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "attack_branin.json"))
    parser.add_argument("--readme", action="store_true", help="put the pursuit variant's table in README.md (attack-pursuit markers)")
    parser.add_argument("--resume", action="store_true",
                        help="keep the rounds --out already holds for a variant with the same settings (defaults included), seed and "
                             "BO precision; attack only the rest")
    parser.add_argument("--repairs", type=int, default=0,
                        help="pursuit_follow: earlier points revisited per round left above the repair bar (pursuit_follow(repairs=...); 0: off)")
    parser.add_argument("--start-from", metavar="FILE",
                        help="pursuit_follow: keep rounds 0..--start-round of this earlier report (same follow settings but --repairs) "
                             "and go on from its reconstruction there with this run's settings")
    parser.add_argument("--start-round", type=int, help="with --start-from: the last round kept from it")
    parser.add_argument("--collect-only", action="store_true",
                        help="attack nothing: redraw the pursuit_follow figures from --out and, with --readme, put its tables in "
                             "README.md (for a report stopped before its last round; each round is saved as it is attacked)")
    args = parser.parse_args(argv)
    if args.repairs < 0:
        parser.error(f"--repairs must be >= 0, got {args.repairs}")
    if (args.start_from is None) != (args.start_round is None) or (args.start_from and args.resume):
        parser.error("--start-from and --start-round go together, and not with --resume")
    if args.collect_only:
        return collect(args)
    rounds = tuple(int(t) for t in args.rounds.split(","))
    report_rounds = rounds
    names = args.variants.split(",")
    if {"progressive", "progressive_known_init", "pursuit_follow"} & set(names):  # every round up to the last
        rounds = tuple(range(0, max(rounds) + 1))
    elif "newpoint" in names:  # and the round before each
        rounds = tuple(sorted(set(rounds) | {t - 1 for t in rounds if t > 0}))
    start = time.perf_counter()
    config = RunConfig(benchmark="branin", iters=100, seeds=(args.seed,), x64=not args.float32)
    records, truths, bo_from_cache = bo_records(config, rounds, args.cache)
    run_time = time.perf_counter() - start
    model = methods.meta_gp(config, 2)
    out_dir = Path(args.out).with_suffix("")
    result = {"benchmark": "branin", "target_client": 0, "seed": args.seed, "bo_precision": "float32" if args.float32 else "float64",
              "run_time_s": run_time, "bo_from_cache": bo_from_cache, "variants": {}, "basin": {}}
    previous = resumable(args.out, result) if args.resume else None

    def save():
        result["meta"] = {"command": command("benchmarks/attack_report.py", argv), "commit": commit(), "machine": machine(),
                          "wall_time_s": time.perf_counter() - start}
        if previous is not None:
            result["meta"]["resumed_from"] = previous["meta"]
        io.write_json(args.out, result)

    def measure_basin():
        radii = [float(r) for r in args.basin_radii.split(",")]
        for rec, truth in zip(records, truths):
            if str(rec.round) in args.basin_rounds.split(",") and np.all(np.isfinite(rec.grads)):
                result["basin"][str(rec.round)] = basin(model, rec, truth, radii, 300, args.seed)
                print("basin", rec.round, result["basin"][str(rec.round)], flush=True)
                save()

    for name in names:
        if name == "newpoint":
            # diagnostic: the attacker has round t-1's points exactly; can it find round t's new one?
            entries = []
            pcfg = progressive_config()
            by_round = {rec.round: (rec, truth) for rec, truth in zip(records, truths)}
            for t in report_rounds:
                if t == 0 or t not in by_round or t - 1 not in by_round:
                    continue
                rec, truth = by_round[t]
                _, prev = by_round[t - 1]
                with jax.enable_x64(True):
                    (s,) = attack.progressive_attack(model, [rec], jax.random.key(args.seed), pcfg, initial=(prev.X, prev.y))
                err = float(np.linalg.norm(s.X[-1] - truth.X[-1]))
                nn = float(np.min(np.linalg.norm(prev.X - truth.X[-1], axis=1)))
                e = {"round": t, "m": rec.m, "new_point_error": err, "new_point_nn_distance": nn, "rel_loss": s.rel_loss, "tries": s.tries,
                     "matched_rmse": metrics.matched_rmse(s.X, truth.X), "time_s": s.time_s, "r": metrics.default_radius(2)}
                entries.append(e)
                print(name, json.dumps(e), flush=True)
                result["variants"][name] = {"options": PROGRESSIVE, "start": "the truth at round t-1", "rounds": entries}
                save()
            continue
        if name == "pursuit_follow":
            # the coordinator follows the target from round 0 (5 points) with the pursuit attack; every round is scored
            cfg = pursuit.PursuitConfig(**FOLLOW)
            settings = json.loads(json.dumps(dataclasses.asdict(cfg)))
            brief = ("round", "m", "loss", "matched_rmse", "rmse_ratio", "recall_at_r", "precision_at_r", "swaps", "reference", "confirmed",
                     "time_s", "cumulative_time_s")
            header = {"options": FOLLOW, "config": settings, "pad": leakage.FOLLOW_PAD, "accept": leakage.FOLLOW_ACCEPT,
                      "accept_growth": leakage.FOLLOW_ACCEPT_GROWTH, "retries": leakage.FOLLOW_RETRIES,
                      "polish": "levenberg-marquardt", "scores": leakage.FOLLOW_SCORES, "screen": leakage.FOLLOW_SCREEN,
                      "start": "round 0, from scratch"}
            if args.repairs:
                header.update(repairs=args.repairs, repair_bar=REPAIR_BAR, repair_candidates=REPAIR_CANDIDATES)
            if args.start_from:
                earlier = resumable(args.start_from, result)
                if earlier is None:
                    raise SystemExit(f"error: --start-from {args.start_from}: not a report of the same benchmark, target, seed and BO precision")
                entries, every, resume_from, elapsed = follow_resume_point(earlier, name, header, upto=args.start_round,
                                                                           ignore=REPAIR_KEYS + RETRY_KEYS)
                if resume_from is None or every[-1]["round"] != args.start_round:
                    raise SystemExit(f"error: --start-from {args.start_from}: no saved reconstruction of round {args.start_round} "
                                     "with the same follow settings")
                header["start"] = (f"rounds 0-{args.start_round} kept from {args.start_from} (each report round names the run "
                                   "that attacked it), then this run's settings from its reconstruction")
            elif args.resume:
                entries, every, resume_from, elapsed = follow_resume_point(previous, name, header)
            else:
                entries, every, resume_from, elapsed = [], [], None, 0.0
            reference = every[-1].get("reference", float("inf")) if resume_from is not None else float("inf")
            if resume_from is not None:
                header["resumed_after_round"] = every[-1]["round"]

            def keep_follow(e):
                every.append({**{k: e[k] for k in brief}, "baseline_rmse": e["baseline"]["matched_rmse"], "nn_spacing": nn_spacing(e["X_true"]),
                              "X_rec": e["X_rec"]})
                if e["round"] in report_rounds:
                    entries.append({**e, "attacked_by": {"command": command("benchmarks/attack_report.py", argv), "commit": commit()}})
                print(name, json.dumps({k: v for k, v in every[-1].items() if k != "X_rec"}), flush=True)
                result["variants"][name] = {**header, "rounds": entries, "every_round": every}
                save()

            def keep_carried(step, _elapsed, _entries):
                # the unclipped points the next round starts from (X_rec is clipped to the box, so a follow resumed from it
                # would not go on exactly where this one stopped once a point has left the box)
                if every and every[-1]["round"] == step.round and step.carried is not None:
                    every[-1]["carried"] = np.asarray(step.carried, np.float64).tolist()
                    save()

            result["variants"][name] = {**header, "rounds": entries, "every_round": every}
            todo = [(r, t) for r, t in zip(records, truths) if not every or r.round > every[-1]["round"]]
            if todo:
                leakage.follow_entries(model, [r for r, _ in todo], [t for _, t in todo], cfg, jax.random.key(args.seed), args.seed,
                                       None, keep_follow, start=resume_from, elapsed=elapsed, reference=reference,
                                       repairs=args.repairs, repair_bar=REPAIR_BAR, repair_candidates=REPAIR_CANDIDATES,
                                       on_progress=keep_carried)
            save()
            doc = {"benchmark": "branin", "target_client": 0, "dp": None, "rounds": entries}
            leakage.plot_leakage([doc], out_dir / "leakage.png")
            leakage.plot_dispersion([doc], out_dir / "dispersion_vs_round.png")
            plot_follow(every, out_dir / "ratio_vs_round.png")
            continue
        if name in ("progressive", "progressive_known_init"):
            entries = []
            # progressive_known_init: a diagnostic attacker that knows the initial design (round 0's points)
            initial = (truths[0].X, truths[0].y) if name == "progressive_known_init" else None
            recs_, truths_ = (records[1:], truths[1:]) if initial is not None else (records, truths)

            def keep(e):
                entries.append(e)
                print(name, json.dumps({k: e.get(k) for k in ("round", "m", "loss", "rel_loss", "tries", "matched_rmse", "rmse_ratio", "recall_at_r", "time_s", "cumulative_time_s")}), flush=True)
                result["variants"][name] = {"options": PROGRESSIVE, "scored": "every round", "rounds": entries,
                                            "initial": "round 0's true points (diagnostic)" if initial is not None else "none (from scratch)"}
                save()

            leakage.progressive_entries(model, recs_, truths_, progressive_config(), jax.random.key(args.seed), np.random.default_rng(args.seed), None, keep, initial)
            save()
            doc = {"benchmark": "branin", "target_client": 0, "dp": None, "rounds": [e for e in entries if e["round"] in report_rounds]}
            leakage.plot_leakage([doc], out_dir / "leakage.png")
            leakage.plot_dispersion([doc], out_dir / "dispersion_vs_round.png")
            continue
        opts, only = VARIANTS[name]
        cfg = pursuit.PursuitConfig(**opts) if name == "pursuit" else attack.AttackConfig(**opts)
        rng = np.random.default_rng(args.seed)
        # resume only what was attacked with the same effective settings (defaults included)
        settings = json.loads(json.dumps(dataclasses.asdict(cfg)))
        done = kept_rounds(previous, name, settings)
        entries = []
        for rec, truth in zip(records, truths):
            if (only is not None and rec.round not in only) or rec.round not in report_rounds:
                continue
            if rec.round in done:
                entries.append(done[rec.round])
                result["variants"][name] = {"options": opts, "config": settings, "rounds": entries}
                continue
            e = leakage.attack_record(model, rec, truth, cfg, jax.random.fold_in(jax.random.key(args.seed), rec.round), rng)
            e["attacked_by"] = {"command": command("benchmarks/attack_report.py", argv), "commit": commit()}
            entries.append(e)
            print(name, json.dumps({k: e.get(k) for k in ("round", "m", "loss", "matched_rmse", "rmse_ratio", "recall_at_r", "dispersion", "true_dispersion", "time_s")}), flush=True)
            result["variants"][name] = {"options": opts, "config": settings, "rounds": entries}
            save()
        if name in ("paper", "pursuit"):
            doc = {"benchmark": "branin", "target_client": 0, "dp": None, "rounds": entries}
            leakage.plot_leakage([doc], out_dir / "leakage.png")
            leakage.plot_dispersion([doc], out_dir / "dispersion_vs_round.png")
        if name == "paper":
            measure_basin()
    save()
    if args.readme and "pursuit" in result["variants"]:
        update_readme(result, "attack-pursuit")
    if args.readme and "pursuit_follow" in result["variants"]:
        update_readme(result, follow_marker(result), "pursuit_follow")
    return 0


def collect(args) -> int:
    """``--collect-only``: the figures and README tables of the variants a saved report holds."""
    with open(args.out) as fh:
        result = json.load(fh)
    out_dir = Path(args.out).with_suffix("")
    follow = result["variants"].get("pursuit_follow")
    if follow is not None:
        doc = {"benchmark": result["benchmark"], "target_client": result["target_client"], "dp": None, "rounds": follow["rounds"]}
        leakage.plot_leakage([doc], out_dir / "leakage.png")
        leakage.plot_dispersion([doc], out_dir / "dispersion_vs_round.png")
        plot_follow(follow["every_round"], out_dir / "ratio_vs_round.png")
        if args.readme:
            update_readme(result, follow_marker(result), "pursuit_follow")
    if args.readme and "pursuit" in result["variants"]:
        update_readme(result, "attack-pursuit")
    return 0


def follow_marker(result: dict) -> str:
    """The README markers of a follow report: ``attack-follow``, or ``attack-follow-repair`` for a run with ``--repairs``."""
    return "attack-follow-repair" if result["variants"]["pursuit_follow"].get("repairs") else "attack-follow"


def resumable(path, result: dict) -> dict | None:
    """The earlier report at ``path`` if it was made for the same benchmark, target, seed and BO precision, else None."""
    try:
        with open(path) as fh:
            previous = json.load(fh)
    except (OSError, json.JSONDecodeError):
        return None
    same = all(previous.get(k) == result[k] for k in ("benchmark", "target_client", "seed", "bo_precision"))
    return previous if same and "meta" in previous else None


def follow_resume_point(previous: dict | None, name: str, header: dict, upto: int | None = None, ignore=()):
    """Where an interrupted follow report goes on: ``(report entries, every-round entries, points, attacker time)``.

    The last round of ``previous`` (same follow settings but the keys in
    ``ignore``, rounds 0.. without a gap, at most ``upto``) whose
    reconstruction was saved: the rounds up to it are kept (each report
    entry names the run that attacked it), the follow restarts from its
    points: the unclipped ``carried`` points where the every-round entry
    has them (the exact continuation), else the clipped ``X_rec`` (older
    reports; differs only where a point had left the box). Nothing to
    resume: ``([], [], None, 0.0)``.
    """
    prior = None if previous is None else previous["variants"].get(name)
    keys = (set(header) | set(REPAIR_KEYS)) - {"start", "resumed_after_round", *ignore}  # repairs: in a header only when on
    if prior is None or any(prior.get(k) != header.get(k) for k in keys):
        return [], [], None, 0.0
    saved = {e["round"]: e["X_rec"] for e in prior["rounds"]}
    saved.update({e["round"]: e["X_rec"] for e in prior["every_round"] if "X_rec" in e})
    # a round's unclipped points (``carried``; older reports lack it) continue the follow exactly
    saved.update({e["round"]: e["carried"] for e in prior["every_round"] if "carried" in e})
    rounds = [e["round"] for e in prior["every_round"]]
    contiguous = [t for i, t in enumerate(rounds) if rounds[: i + 1] == list(range(i + 1))]
    ready = [t for t in contiguous if t in saved and (upto is None or t <= upto)]
    if not ready:
        return [], [], None, 0.0
    last = ready[-1]
    every = [e for e in prior["every_round"] if e["round"] <= last]
    entries = [{**e, "attacked_by": attacked_by(e, previous["meta"])} for e in prior["rounds"] if e["round"] <= last]
    return entries, every, saved[last], every[-1]["cumulative_time_s"]


def nn_spacing(X) -> tuple[float, float]:
    """Minimum and lower quartile of each point's distance to its nearest other point (how tightly the queries cluster)."""
    X = np.asarray(X, np.float64)
    D = np.linalg.norm(X[:, None] - X[None], axis=-1) + np.diag(np.full(len(X), np.inf))
    nn = D.min(axis=1)
    return float(nn.min()), float(np.quantile(nn, 0.25))


def kept_rounds(previous: dict | None, name: str, settings: dict) -> dict:
    """``{round: entry}`` of variant ``name`` in an earlier report, if it ran with exactly ``settings``; each entry names its run."""
    if previous is None or previous["variants"].get(name, {}).get("config") != settings:
        return {}
    return {e["round"]: {**e, "attacked_by": attacked_by(e, previous["meta"])} for e in previous["variants"][name]["rounds"]}


def attacked_by(entry: dict, meta: dict) -> dict:
    """Which run attacked a stored round: its own record, else the first run of the ``resumed_from`` chain (rounds kept
    by a resumed run always carry a record, so a round without one came from the run that started the file)."""
    if "attacked_by" in entry:
        return entry["attacked_by"]
    while "resumed_from" in meta:
        meta = meta["resumed_from"]
    return {"command": meta["command"], "commit": meta["commit"]}


def pursuit_table(result: dict, name: str = "pursuit") -> str:
    """Markdown: a pursuit variant's scores per round, next to a uniform guess's, with provenance."""
    entries = result["variants"][name]["rounds"]
    row = lambda name, fmt: f"| {name} | " + " | ".join(fmt(e) for e in entries) + " |"
    lines = [
        "| round t | " + " | ".join(str(e["round"]) for e in entries) + " |",
        "|---|" + "---|" * len(entries),
        row("points m", lambda e: str(e["m"])),
        row("matched RMSE", lambda e: f"{e['matched_rmse']:.1e}"),
        row("uniform guess", lambda e: f"{e['baseline']['matched_rmse']:.2f}"),
        row("ratio", lambda e: f"{e['rmse_ratio']:.1e}"),
        row("recall@r / precision@r", lambda e: f"{e['recall_at_r']:.2f} / {e['precision_at_r']:.2f}"),
        row("guess's recall / precision", lambda e: f"{e['baseline']['recall_at_r']:.2f} / {e['baseline']['precision_at_r']:.2f}"),
        row("dispersion (true)", lambda e: f"{e['dispersion']:.3f} ({e['true_dispersion']:.3f})"),
        row("true points' NN spacing: min / lower quartile", lambda e: "{:.0e} / {:.0e}".format(*nn_spacing(e["X_true"]))),
        row("relative residual", lambda e: f"{e['loss']:.0e}"),
        row("swaps kept", lambda e: str(e.get("swaps"))),
        row("time (s)", lambda e: f"{e['time_s']:.0f}"),
    ]
    if all("cumulative_time_s" in e for e in entries):
        lines.append(row("time since round 0 (s)", lambda e: f"{e['cumulative_time_s']:.0f}"))
    meta = result["meta"]
    bo = "the BO run loaded from --cache" if result.get("bo_from_cache") else "BO run included"
    text = (f"Generated by `{meta['command']}` at commit `{meta['commit']}` on {meta['machine']} "
            f"({meta['wall_time_s'] / 60:.0f} min, {bo}).")
    runs = {}  # rounds attacked by earlier runs, grouped by run
    for e in entries:
        by = attacked_by(e, meta)
        if by["commit"] != meta["commit"] or by["command"] != meta["command"]:
            runs.setdefault((by["command"], by["commit"]), []).append(e["round"])
    start = result["variants"][name].get("start", "")
    how = ("`--start-from`; this run's settings from the round after them, see the follow settings" if start.startswith("rounds 0-")
           else "`--resume`; same settings")
    for (cmd, rev), kept in runs.items():
        text += (f" Rounds {', '.join(map(str, kept))} were attacked by the earlier run `{cmd}` "
                 f"at commit `{rev}` and kept ({how}).")
    lines += ["", text]
    return "\n".join(lines)


def plot_follow(every: list[dict], path) -> None:
    """Matched RMSE / uniform guess's at every round the follow attacker visited (log scale)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.semilogy([e["round"] for e in every], [max(e["rmse_ratio"], 1e-16) for e in every], ".-", lw=0.8, label="pursuit, following")
    ax.axhline(1.0, c="gray", ls=":", label="uniform guess")
    ax.set_xlabel("BO round t")
    ax.set_ylabel("matched RMSE / uniform guess's")
    ax.legend(fontsize=7)
    fig.tight_layout()
    leakage._save(fig, path)


def update_readme(result: dict, block: str, name: str = "pursuit") -> bool:
    try:
        io.replace_marked_block(ROOT / "README.md", block, pursuit_table(result, name))
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return False
    print(f"updated README.md ({block})")
    return True


if __name__ == "__main__":
    sys.exit(main())
