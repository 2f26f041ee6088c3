"""The exploitation-leakage experiment (paper section V-B, Figures 3 and 4 left).

Run PACD-BO, let the coordinator record the target client's message at
chosen rounds (:mod:`pacd_jax.intercept`), attack each record with DLG
(:mod:`pacd_jax.attack`) and score the reconstruction as a set against the
client's true points, next to no-information guesses (:mod:`pacd_jax.metrics`).
Produces the ``attack.json`` document of DESIGN.md section 9.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import dataclasses

from pacd_jax import attack, intercept, io, methods, metrics, pursuit
from pacd_jax.config import RunConfig

#: The paper's rounds (section V-B); 0-based round indices of a T = 100 run.
PAPER_ROUNDS = (1, 5, 20, 40, 60, 80, 99)


def attack_record(
    model,
    record: intercept.Record,
    truth: intercept.Truth,
    attack_config: attack.AttackConfig | pursuit.PursuitConfig,
    key,
    rng: np.random.Generator,
) -> dict:
    """Attack one record in float64 and score it; one entry of ``attack.json``'s ``rounds``.

    ``attack_config`` picks the attacker: eq. 11 from random starts
    (:class:`pacd_jax.attack.AttackConfig`) or the pursuit attack
    (:class:`pacd_jax.pursuit.PursuitConfig`, whose ``loss`` is the relative
    residual and whose ``restart_losses`` is that single value).

    A record whose message is not finite (the run itself diverged) cannot be
    attacked: its entry has ``"error"`` and null scores.
    """
    if not (np.all(np.isfinite(record.grads)) and np.all(np.isfinite(record.particles))):
        return {
            "round": int(record.round),
            "m": int(record.m),
            "error": "the intercepted message is not finite (the run's particles diverged)",
            "loss": None,
            "matched_rmse": None,
            "chamfer": None,
            "recall_at_r": None,
            "precision_at_r": None,
            "dispersion": None,
            "r": metrics.default_radius(truth.X.shape[1]),
            "baseline": metrics.no_information_baseline(truth.X, rng, "uniform"),
            "true_dispersion": metrics.dispersion(truth.X),
            "time_s": 0.0,
            "X_true": truth.X.tolist(),
            "X_rec": None,
        }
    extra = {}
    with jax.enable_x64(True):
        start = time.perf_counter()
        particles = jnp.asarray(record.particles, jnp.float64)
        grads = jnp.asarray(record.grads, jnp.float64)
        if isinstance(attack_config, pursuit.PursuitConfig):
            found = pursuit.pursuit_attack(model, particles, grads, int(record.m), key, attack_config)
            res = attack.AttackResult(found.X, found.y, found.loss, np.asarray([found.loss]), 0)
            extra = {"stages": [[name, value] for name, value in found.history], "swaps": found.swaps}
        else:
            res = attack.run_attack(model, particles, grads, record.m, key, attack_config, y_known=truth.y)
        elapsed = time.perf_counter() - start
    scores = metrics.reconstruction_scores(res.X, truth.X)
    uniform = metrics.no_information_baseline(truth.X, rng, "uniform")
    init = metrics.no_information_baseline(truth.X, rng, "init")
    pick = ("matched_rmse", "chamfer", "recall_at_r", "precision_at_r", "dispersion")
    return {
        "round": int(record.round),
        "m": int(record.m),
        "loss": float(res.loss),
        **scores,
        "baseline": {k: uniform[k] for k in pick},
        "baseline_init": {k: init[k] for k in pick},
        "rmse_ratio": scores["matched_rmse"] / uniform["matched_rmse"],
        "true_dispersion": metrics.dispersion(truth.X),
        "restart_losses": [float(v) if np.isfinite(v) else None for v in res.losses],
        **extra,
        "time_s": elapsed,
        "X_true": truth.X.tolist(),
        "X_rec": res.X.tolist(),
    }


class _RoundScorer:
    """Scores the rounds a round-by-round attacker reports: ``attack.json`` entries with the set metrics and both baselines.

    ``__call__(round, X, loss, time_s, **extra)`` adds this round's time to
    the running total and, if the round is wanted, appends its entry (with
    ``extra``) to ``entries`` and passes it to ``on_round``.
    """

    PICK = ("matched_rmse", "chamfer", "recall_at_r", "precision_at_r", "dispersion")

    def __init__(self, records, truths, rng: np.random.Generator | int, report=None, on_round=None, elapsed: float = 0.0):
        self.truth_of = {rec.round: t for rec, t in zip(records, truths)}
        self.wanted = None if report is None else set(int(t) for t in report)
        self.rng, self.on_round = rng, on_round
        self.entries, self.total = [], float(elapsed)

    def __call__(self, round_, X, loss: float, time_s: float, **extra):
        self.total += time_s
        if self.wanted is not None and round_ not in self.wanted:
            return
        truth = self.truth_of[round_]
        scores = metrics.reconstruction_scores(X, truth.X)
        # an integer seed draws each round's baselines from its own generator (a resumed run draws the same)
        rng = self.rng if isinstance(self.rng, np.random.Generator) else np.random.default_rng([int(self.rng), int(round_)])
        uniform = metrics.no_information_baseline(truth.X, rng, "uniform")
        init = metrics.no_information_baseline(truth.X, rng, "init")
        entry = {
            "round": int(round_),
            "m": int(len(X)),
            "loss": float(loss),
            **scores,
            "baseline": {k: uniform[k] for k in self.PICK},
            "baseline_init": {k: init[k] for k in self.PICK},
            "rmse_ratio": scores["matched_rmse"] / uniform["matched_rmse"],
            "true_dispersion": metrics.dispersion(truth.X),
            **extra,
            "time_s": float(time_s),
            "cumulative_time_s": float(self.total),
            "X_true": truth.X.tolist(),
            "X_rec": np.asarray(X).tolist(),
        }
        self.entries.append(entry)
        if self.on_round is not None:
            self.on_round(entry)


def _float64_records(records) -> list:
    return [r._replace(particles=np.asarray(r.particles, np.float64), grads=np.asarray(r.grads, np.float64)) for r in records]


def progressive_entries(
    model, records, truths, pconfig: attack.ProgressiveConfig, key, rng: np.random.Generator, report=None, on_round=None, initial=None
) -> list[dict]:
    """Attack consecutive records with :func:`pacd_jax.attack.progressive_attack` (float64) and score them.

    Args:
        records, truths: every round from the first attacked one to the last
            (the attacker follows the target round after round).
        report: rounds to score and return (None: all).
        initial: passed to :func:`pacd_jax.attack.progressive_attack` (diagnostics).

    Returns:
        ``attack.json`` entries as :func:`attack_record`'s, plus ``rel_loss``
        (loss / sum_k ||A_k||^2), ``tries`` and ``cumulative_time_s`` (the
        attacker's time from the first round up to this one; ``time_s`` is
        this round's share).
    """
    score = _RoundScorer(records, truths, rng, report, on_round)

    def step(s):
        score(s.round, s.X, s.loss, s.time_s, rel_loss=float(s.rel_loss), tries=int(s.tries),
              restart_losses=[float(v) if np.isfinite(v) else None for v in np.ravel(s.search_losses)])

    with jax.enable_x64(True):
        attack.progressive_attack(model, _float64_records(records), key, pconfig, on_step=step, initial=initial)
    return score.entries


#: pursuit_follow's buffer padding, acceptance thresholds and retries as the attack command and report use them
FOLLOW_PAD, FOLLOW_ACCEPT, FOLLOW_ACCEPT_GROWTH, FOLLOW_RETRIES = 16, 1e-27, 2.0, 24
#: how pursuit_follow ranks a new point's candidates ("exact": pursuit_follow(exact_scores=True))
FOLLOW_SCORES = "exact"
#: how it screens the retries ("placed": pursuit_follow(screen_placed=True), each candidate placed alone)
FOLLOW_SCREEN = "placed"


def follow_entries(
    model, records, truths, config: pursuit.PursuitConfig, key, rng: np.random.Generator | int, report=None, on_round=None,
    pad: int = FOLLOW_PAD, accept: float = FOLLOW_ACCEPT, retries: int = FOLLOW_RETRIES,
    accept_growth: float = FOLLOW_ACCEPT_GROWTH, start=None, elapsed: float = 0.0, reference: float = float("inf"),
    repairs: int = 0, repair_bar: float = 1e-28, repair_candidates: int = 4, on_progress=None,
) -> list[dict]:
    """Follow consecutive records with :func:`pacd_jax.pursuit.pursuit_follow` (float64) and score them.

    Args:
        records, truths: every round from the first attacked one to the last.
        rng: the baselines' generator, or an integer seed (each round's own generator).
        report: rounds to score and return (None: all).
        start: the reconstruction (unit box, as the entries' ``X_rec``) of the
            round before the first record, to resume an interrupted follow from.
        elapsed: the attacker's time before the first record (the resumed run's).
        reference: the resumed round's ``reference`` (the next round's bar; ``inf``: unknown).
        repairs, repair_bar, repair_candidates: revisiting earlier points
            (:func:`pacd_jax.pursuit.pursuit_follow`; ``repairs=0``: off).
        on_progress: ``on_progress(step, elapsed, entries)`` after every followed
            round (scored or not): its :class:`pacd_jax.pursuit.FollowStep`,
            the attacker's time so far and the entries scored so far (what
            saving the follow to resume it later needs).

    Returns:
        ``attack.json`` entries as :func:`attack_record`'s for the pursuit
        attack (``loss`` the relative residual, ``stages``, ``swaps``), plus
        ``cumulative_time_s`` (the attacker's time from the first round up to
        this one; ``time_s`` is this round's share).
    """
    score = _RoundScorer(records, truths, rng, report, on_round, elapsed)

    def step(s):
        res = s.result
        score(s.round, res.X, res.loss, s.time_s, restart_losses=[float(res.loss)],
              stages=[[name, value] for name, value in res.history], swaps=int(res.swaps), reference=s.reference,
              confirmed=s.confirmed)
        if on_progress is not None:
            on_progress(s, score.total, score.entries)

    with jax.enable_x64(True):
        pursuit.pursuit_follow(model, _float64_records(records), key, config, pad=pad, accept=accept, retries=retries,
                               accept_growth=accept_growth, start=start, reference=reference,
                               exact_scores=FOLLOW_SCORES == "exact", screen_placed=FOLLOW_SCREEN == "placed", repairs=repairs, repair_bar=repair_bar,
                               repair_candidates=repair_candidates, on_step=step)
    return score.entries


def run_leakage(
    config: RunConfig,
    target: int,
    rounds,
    attack_config: attack.AttackConfig | pursuit.PursuitConfig,
    task_factory=None,
    on_round=None,
    on_bo_round=None,
    on_run=None,
    progressive: attack.ProgressiveConfig | None = None,
    follow: bool = False,
    resume: dict | None = None,
    on_progress=None,
    intercepted: tuple | None = None,
    on_intercepted=None,
) -> dict:
    """Run, intercept and attack; returns the ``attack.json`` document for one seed.

    Args:
        config: the PACD-BO run (``config.seeds[0]`` is the seed; DP options as configured).
        target: the target client id; rounds: 0-based rounds to attack.
        on_round: ``on_round(entry)`` after each attacked round (progress).
        on_bo_round: ``on_bo_round(rounds_done, rounds_total)`` after each BO round of the run (progress).
        on_run: ``on_run(results)`` with the run's :class:`pacd_jax.loop.SeedResults`
            once the run is done, before any attack (the regret of the very run attacked).
        progressive: use the progressive attacker (:class:`pacd_jax.attack.ProgressiveConfig`)
            instead of ``attack_config``'s from-scratch one: every round from
            ``min(rounds)`` to ``max(rounds)`` is intercepted and followed,
            the listed rounds are scored.
        follow: with a :class:`pacd_jax.pursuit.PursuitConfig`, follow the
            target as ``progressive`` does, with the pursuit attack
            (:func:`pacd_jax.pursuit.pursuit_follow`).
        on_progress: with ``follow``, ``on_progress(state)`` after every
            followed round, ``state`` a JSON-able dict (:func:`follow_progress`)
            from which ``resume=state`` continues an interrupted follow.
        resume: with ``follow``, a saved ``state`` of the same run: the run is
            repeated (it is deterministic; the saved round's intercepted
            message is checked against its digest, and every saved entry's
            true points against the rerun's) and the follow goes on after the
            saved round, with the same result as an uninterrupted follow.
        intercepted: ``(records, truths, results, run_time_s)`` of this very run,
            saved earlier (``on_intercepted``): used instead of repeating the
            BO run (which another machine may not reproduce bit for bit). With
            ``follow`` the records may start at any round up to a resumed one.
        on_intercepted: ``on_intercepted(records, truths, results, run_time_s)``
            once the BO run is done (to save it).
    """
    if (resume is not None or on_progress is not None) and not follow:
        raise ValueError("resume and on_progress are for follow=True")
    rounds = tuple(int(t) for t in rounds)
    if follow and not isinstance(attack_config, pursuit.PursuitConfig):
        raise ValueError("follow=True needs a pursuit.PursuitConfig")
    if progressive is not None and follow:
        raise ValueError("choose one of progressive and follow")
    if progressive is not None or follow:
        rounds = tuple(range(min(rounds), max(rounds) + 1)), rounds
        rounds, report = rounds
    else:
        report = None
    spec = intercept.InterceptSpec(int(target), rounds)
    spec.check(config)
    seed = config.seeds[0]
    ctx = jax.enable_x64(True) if config.x64 else contextlib.nullcontext()
    if intercepted is not None:
        records, truths, results, run_time = intercepted
    else:
        start = time.perf_counter()
        with ctx:
            records, truths, results = intercept.run_vmap(config, spec, task_factory, on_round=on_bo_round)
        run_time = time.perf_counter() - start
        if on_intercepted is not None:
            on_intercepted(records, truths, results, run_time)
    if on_run is not None:
        on_run(results)
    model = methods.meta_gp(config, int(records[0].bounds.shape[0]))
    rng = np.random.default_rng(seed)
    out = []
    following = progressive is not None or follow
    if following and not all(np.all(np.isfinite(r.grads)) and np.all(np.isfinite(r.particles)) for r in records):
        raise ValueError("an intercepted message is not finite (the run's particles diverged); following the target needs every round")
    if progressive is not None:
        out = progressive_entries(model, records, truths, progressive, jax.random.key(seed), rng, report, on_round)
    elif follow:
        out = _follow_resumable(model, records, truths, attack_config, seed, rng, report, on_round, resume, on_progress)
    for rec, truth in zip(records, truths) if not following else ():
        key = jax.random.fold_in(jax.random.key(seed), rec.round)
        entry = attack_record(model, rec, truth, attack_config, key, rng)
        out.append(entry)
        if on_round is not None:
            on_round(entry)
    if isinstance(attack_config, pursuit.PursuitConfig):
        options = {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(attack_config).items()}
        attack_doc = {"mode": "pursuit-follow" if follow else "pursuit", **options, "precision": "float64"}
        if follow:
            attack_doc.update(pad=FOLLOW_PAD, accept=FOLLOW_ACCEPT, accept_growth=FOLLOW_ACCEPT_GROWTH, retries=FOLLOW_RETRIES, polish="levenberg-marquardt",
                              scores=FOLLOW_SCORES, screen=FOLLOW_SCREEN)
    else:
        attack_doc = {
            "mode": "paper",
            "restarts": attack_config.restarts,
            "steps": attack_config.steps,
            "learn_y": attack_config.learn_y,
            "init": attack_config.init,
            "cosine": attack_config.cosine,
            "normalise": attack_config.normalise,
            "particles": attack_config.particles,
            "bounded": attack_config.bounded,
            "precision": "float64",
        }
    if progressive is not None:
        attack_doc = {"mode": "progressive", **progressive_options(progressive), "precision": "float64"}
    return {
        "benchmark": config.benchmark,
        "target_client": int(target),
        "seed": int(seed),
        "dp": {"sigma": config.dp_sigma, "clip": config.dp_clip} if config.dp_sigma > 0 else None,
        "attack": attack_doc,
        "radius_fraction": metrics.RADIUS_FRACTION,
        "run_time_s": run_time,
        "config": config.to_dict(),
        "rounds": out,
        **({"resumed_after_round": int(resume["round"])} if resume is not None else {}),
    }


class ResumeError(ValueError):
    """A saved follow state that does not fit the repeated run (:func:`run_leakage`'s ``resume``)."""


def message_digest(record) -> str:
    """SHA-256 of an intercepted record's particles and message in float64 (a resumed follow's check that the
    repeated run intercepted the same message)."""
    h = hashlib.sha256()
    for a in (record.particles, record.grads):
        h.update(np.ascontiguousarray(np.asarray(a, np.float64)).tobytes())
    return h.hexdigest()


def follow_progress(step, elapsed: float, entries, rng: np.random.Generator, record) -> dict:
    """The JSON-able state of a follow after ``step`` (:class:`pacd_jax.pursuit.FollowStep`), to resume it from.

    ``carried`` are the unclipped points the next round starts from,
    ``reference`` its bar's base (None: infinite), ``rng_state`` the
    baselines' generator after this round (so a resumed run draws the same
    baselines), ``digest`` the :func:`message_digest` of this round's record.
    """
    ref = float(step.reference)
    return {"round": int(step.round), "carried": np.asarray(step.carried, np.float64).tolist(),
            "reference": ref if np.isfinite(ref) else None, "elapsed": float(elapsed), "entries": list(entries),
            "rng_state": rng.bit_generator.state, "digest": message_digest(record)}


def _follow_resumable(model, records, truths, config, seed: int, rng: np.random.Generator, report, on_round, resume, on_progress):
    """:func:`follow_entries` over the run's records, optionally resumed from a :func:`follow_progress` state."""
    index = {int(rec.round): i for i, rec in enumerate(records)}
    earlier, start, elapsed, reference, first = [], None, 0.0, float("inf"), 0
    if resume is not None:
        r = int(resume["round"])
        if r not in index:
            raise ResumeError(f"cannot resume after round {r}: the run follows rounds {records[0].round}..{records[-1].round}")
        if message_digest(records[index[r]]) != resume["digest"]:
            raise ResumeError(f"cannot resume after round {r}: the repeated run intercepted a different message "
                             "(not the same run, or not reproducible on this machine)")
        for e in resume["entries"]:  # (a saved run may keep only the rounds from some round on)
            if int(e["round"]) in index and not np.array_equal(np.asarray(e["X_true"]), np.asarray(truths[index[int(e["round"])]].X)):
                raise ResumeError(f"cannot resume: the saved round {e['round']}'s true points differ from the repeated run's")
        rng.bit_generator.state = resume["rng_state"]
        earlier, first = list(resume["entries"]), index[r] + 1
        start, elapsed = np.asarray(resume["carried"], np.float64), float(resume["elapsed"])
        reference = float("inf") if resume["reference"] is None else float(resume["reference"])
    progress = None
    if on_progress is not None:
        def progress(step, total, entries):
            on_progress(follow_progress(step, total, earlier + list(entries), rng, records[index[int(step.round)]]))
    return earlier + follow_entries(model, records[first:], truths[first:], config, jax.random.key(seed), rng, report, on_round,
                                    start=start, elapsed=elapsed, reference=reference, on_progress=progress)


def progressive_options(p: attack.ProgressiveConfig) -> dict:
    """The progressive attacker's options as JSON."""
    import dataclasses

    out = dataclasses.asdict(p)
    return out


# -- figures -------------------------------------------------------------------------


def plot_leakage(docs: list[dict], path) -> None:
    """Figure 3: per attacked round, true queries vs reconstruction on the 2-D unit box.

    One row per document (first: no DP; second, if given: with DP).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ncols = max(len(d["rounds"]) for d in docs)
    fig, axes = plt.subplots(len(docs), ncols, figsize=(2.2 * ncols, 2.4 * len(docs)), squeeze=False)
    for row, doc in enumerate(docs):
        label = "no DP" if doc["dp"] is None else f"DP sigma={doc['dp']['sigma']:g}"
        for col in range(ncols):
            ax = axes[row, col]
            if col >= len(doc["rounds"]):
                ax.axis("off")
                continue
            e = doc["rounds"][col]
            if e.get("X_rec") is None:
                ax.set_title(f"t={e['round']}: message not finite", fontsize=7)
                ax.axis("off")
                continue
            Xt, Xr = np.asarray(e["X_true"]), np.asarray(e["X_rec"])
            if Xt.shape[1] < 2:
                Xt, Xr = np.c_[Xt, np.zeros(len(Xt))], np.c_[Xr, np.zeros(len(Xr))]
            ax.scatter(Xt[:, 0], Xt[:, 1], s=10, c="tab:blue", label="true")
            ax.scatter(Xr[:, 0], Xr[:, 1], s=14, marker="x", c="tab:red", label="recovered")
            ax.set_xlim(0, 1)
            ax.set_ylim(0, 1)
            ax.set_aspect("equal")
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_title(f"t={e['round']}  rmse {e['matched_rmse']:.2f}/{e['baseline']['matched_rmse']:.2f}", fontsize=7)
            if col == 0:
                ax.set_ylabel(f"{label}\n$x_2$ (unit box)", fontsize=8)
            if row == len(docs) - 1:
                ax.set_xlabel("$x_1$ (unit box)", fontsize=8)
    axes[0, 0].legend(fontsize=6, loc="lower left")
    fig.suptitle(f"{docs[0]['benchmark']}: client {docs[0]['target_client']}'s queries, true vs DLG (unit box)", fontsize=9)
    fig.tight_layout()
    _save(fig, path)


def plot_dispersion(docs: list[dict], path) -> None:
    """Figure 4 (left): dispersion of the reconstruction per round, with the truth and a uniform guess."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.5, 3.2))
    for doc in docs:
        t = [e["round"] for e in doc["rounds"]]
        label = "no DP" if doc["dp"] is None else f"DP sigma={doc['dp']['sigma']:g}"
        ax.plot(t, [np.nan if e["dispersion"] is None else e["dispersion"] for e in doc["rounds"]], "o-", label=f"recovered ({label})")
    ref = docs[0]
    t = [e["round"] for e in ref["rounds"]]
    ax.plot(t, [e["true_dispersion"] for e in ref["rounds"]], "k--", label="true queries")
    ax.plot(t, [e["baseline"]["dispersion"] for e in ref["rounds"]], ":", c="gray", label="uniform guess")
    ax.set_xlabel("BO round t")
    ax.set_ylabel("dispersion (mean pairwise distance)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    _save(fig, path)


def _save(fig, path) -> None:
    import matplotlib.pyplot as plt

    path = Path(path)
    with io.atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=130, format=path.suffix.lstrip(".") or "png")
    plt.close(fig)
