"""Run a configured experiment over its seeds and assemble ``run.json`` (DESIGN.md section 9)."""

from __future__ import annotations

import contextlib
import time
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from pacd_jax import loop, messages, methods, metrics, tasks
from pacd_jax.config import RunConfig

TaskFactory = Callable[[int, int], tasks.TaskFamily]


def build_families(config: RunConfig, factory: TaskFactory | None) -> list[tasks.TaskFamily]:
    """One task family per seed (checked when it comes from a user factory)."""
    user = factory is not None
    if factory is None:
        factory = lambda n, s: tasks.make(config.benchmark, num_clients=n, seed=s)
    fams = []
    for seed in config.seeds:
        fam = factory(config.num_clients, seed)
        if user:
            tasks.check_family(fam)
        if int(fam.num_clients) != config.num_clients:
            raise ValueError(
                f"task family {getattr(fam, 'name', '?')!r} has {fam.num_clients} clients, "
                f"but the run asks for {config.num_clients}"
            )
        fams.append(fam)
    return fams


def _vectorisable(splits: list) -> bool:
    """Seeds can share one vmapped run when their families differ only in array parameters."""
    first_params, first_fn = splits[0]
    structure = jax.tree_util.tree_structure(first_params)
    if structure.num_leaves == 0:
        return False  # closure-based family: each seed's function is baked into its trace
    for params, fn in splits[1:]:
        if fn is not first_fn or jax.tree_util.tree_structure(params) != structure:
            return False
        if any(np.shape(a) != np.shape(b) for a, b in zip(jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(first_params))):
            return False
    return True


def run(
    config: RunConfig,
    task_factory: TaskFactory | None = None,
    on_round: Callable[[int, int], None] | None = None,
    comm_log: str | None = None,
    checkpoint: str | None = None,
    resume: bool = False,
) -> dict | None:
    """Run ``config`` and return the ``run.json`` document.

    With ``config.backend == "mpi"`` this must be called on every rank of an
    MPI job (see :func:`pacd_jax.distributed.backend.run`); it returns the
    document on rank 0 and None on the client ranks.

    Args:
        config: the run's options.
        task_factory: ``factory(num_clients, seed) -> TaskFamily``; default
            ``tasks.make(config.benchmark, ...)``.
        on_round: progress callback ``on_round(rounds_done, rounds_total)``
            counting rounds over all seed batches.
        comm_log: MPI backend only: write every message to this JSON-lines file.
        checkpoint: save the complete state after every round in this folder
            (:mod:`pacd_jax.checkpoint`); with ``resume`` continue from it.

    Raises:
        ValueError: bad configuration or task; :class:`loop.NonFiniteObjectiveError`
            when a task returns NaN/inf (naming seed, client and round).
    """
    if config.backend == "mpi":
        from pacd_jax.distributed.backend import run as run_mpi

        if checkpoint is not None or resume:
            return run_mpi(config, task_factory, on_round, comm_log, checkpoint=checkpoint, resume=resume)
        return run_mpi(config, task_factory, on_round, comm_log)
    if comm_log is not None:
        raise ValueError("a communication log needs the mpi backend (--backend mpi)")
    store = checkpoint_store(config, checkpoint, resume)
    x64 = jax.enable_x64(True) if config.x64 else contextlib.nullcontext()
    with x64:
        return _run(config, task_factory, on_round, store)


def checkpoint_store(config: RunConfig, directory, resume: bool, suffix: str = ""):
    """The :class:`pacd_jax.checkpoint.Store` of a run (None without a folder)."""
    from pacd_jax import checkpoint

    if directory is None:
        if resume:
            raise ValueError("--resume needs --checkpoint DIR")
        return None
    extra = {"role": suffix}
    return checkpoint.Store(directory, checkpoint.config_hash(config, extra), resume)


def _run(config, task_factory, on_round, store=None) -> dict:
    start = time.perf_counter()
    dtype = jnp.result_type(float)
    fams = build_families(config, task_factory)
    dim = int(fams[0].dim)
    method = methods.build(config, dim)
    built = [loop.problem_from_family(f, config.iters, config.init_points, config.noise_std) for f in fams]
    problems = [problem for problem, _ in built]

    if _vectorisable([(params, problem.evaluate) for problem, params in built]):
        params = jax.tree_util.tree_map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *[p for _, p in built])
        batches = [(problems[0], list(config.seeds), params, True)]
    else:
        batches = [(problem, [s], params, False) for (problem, params), s in zip(built, config.seeds)]

    total = config.iters * len(batches)
    done = [0]

    def tick(_t):
        done[0] += 1
        if on_round is not None:
            on_round(done[0], total)

    results: list[loop.SeedResults] = []
    for b, (problem, seeds, params, batched) in enumerate(batches):
        results.append(
            loop.run_batch(problem, method, seeds, params, batched, dtype, tick,
                           store=store, store_name=f"batch-{b}", on_bad_value=config.on_bad_value)
        )

    by_seed, skipped = {}, {}
    for res in results:
        for j, seed in enumerate(res.seeds):
            by_seed[seed] = (res.X[j], res.y[j], res.f[j])
            skipped[seed] = [(i, t) for s, i, t in res.skipped if s == j]

    problem = problems[0]
    seed_clients = []
    for fam, seed in zip(fams, config.seeds):
        X, y, f = by_seed[seed]
        clients = [
            client_summary(i, X[i], y[i], f[i], fam.optimum(i)[1], problem.init_points, share=True,
                           skipped_rounds=_skips(config, skipped[seed], i))
            for i in range(config.num_clients)
        ]
        seed_clients.append((seed, clients))
    return document(
        config,
        benchmark=getattr(fams[0], "name", config.benchmark),
        init_points=problem.init_points,
        noise_std=problem.noise_std,
        seed_clients=seed_clients,
        wall_time_s=time.perf_counter() - start,
        num_params=method_num_params(config, dim),
    )


def privacy_record(config: RunConfig, delta: float = 1e-5) -> dict | None:
    """run.json's ``epsilon``: None without DP, else epsilon at ``delta`` of one client's whole run (PLD, and RDP)."""
    if config.dp_sigma == 0 or config.method == "independent":
        return None
    from pacd_jax import accounting

    steps = accounting.total_steps(config.svgd_steps, config.iters, config.svgd_steps_init)
    return accounting.run_record(config.dp_sigma, config.dp_clip, config.num_particles, steps, delta)


def _skips(config: RunConfig, skipped: list, client: int) -> list | None:
    """Rounds whose value ``client`` dropped (None unless ``on_bad_value == "skip"``)."""
    if config.on_bad_value != "skip":
        return None
    return sorted(t for i, t in skipped if i == client)


def method_num_params(config: RunConfig, dim: int) -> int:
    """P, the length of one particle (what each message carries K of)."""
    return methods.meta_gp(config, dim).num_params if messages.communicates(config) else 0


def client_summary(client_id: int, X, y, f, f_star: float, init_points: int, share: bool, skipped_rounds=None) -> dict:
    """What one client reports for one seed: its regret curve, AUC and best observed value.

    With ``share`` the queried points ``X`` (original units), the observed ``y``
    and the noise-free ``f`` are included; otherwise they are ``None`` (the MPI
    backend's default: a client publishes its curve, not its data).

    ``skipped_rounds`` (``on_bad_value="skip"``): the rounds whose value was
    dropped. ``X`` and ``y`` are the client's buffer (its valid rows first),
    ``f`` the noise-free record by round; the dropped rounds are left out of
    the lists, count as no improvement in the regret curve (still ``T + 1``
    values), and are listed under ``"skipped_rounds"``.
    """
    f = np.asarray(f, np.float64)
    f_curve = f
    if skipped_rounds is not None:
        rows = [init_points + int(t) for t in skipped_rounds]
        keep = np.ones(f.shape[-1], bool)
        keep[rows] = False
        f_curve = f.copy()
        f_curve[rows] = np.inf
        f = f[keep]
        X = np.asarray(X)[: int(keep.sum())]
        y = np.asarray(y)[: int(keep.sum())]
    regret = metrics.normalised_regret(f_curve, float(f_star), init_points)
    out = {
        "client": int(client_id),
        "X": np.asarray(X, np.float64).tolist() if share else None,
        "y": np.asarray(y, np.float64).tolist() if share else None,
        "f": f.tolist() if share else None,
        "regret": regret.tolist(),
        "final_regret": float(regret[-1]),
        "auc": float(metrics.early_auc(regret)),
        "best_y": float(np.min(y)),
    }
    if skipped_rounds is not None:
        out["skipped_rounds"] = [int(t) for t in skipped_rounds]
    return out


def document(
    config: RunConfig,
    *,
    benchmark: str,
    init_points: int,
    noise_std: float,
    seed_clients: list,
    wall_time_s: float,
    num_params: int,
) -> dict:
    """Assemble ``run.json`` from every seed's client summaries (both backends use this)."""
    finals = [np.mean([c["final_regret"] for c in clients]) for _, clients in seed_clients]
    aucs = [np.mean([c["auc"] for c in clients]) for _, clients in seed_clients]
    return {
        "benchmark": benchmark,
        "method": config.method,
        "backend": config.backend,
        "num_clients": config.num_clients,
        "iters": config.iters,
        "config": {**config.to_dict(), "init_points": init_points, "noise_std": noise_std},
        "wall_time_s": wall_time_s,
        "epsilon": privacy_record(config),
        "summary": metrics.summarise(np.asarray(finals), np.asarray(aucs)),
        "communication": messages.schedule(config, num_params, messages.itemsize(config.x64)),
        "results": [{"seed": seed, "clients": clients} for seed, clients in seed_clients],
    }


def regret_curves(doc: dict) -> np.ndarray:
    """``(S, N, T + 1)`` regret curves of a ``run.json`` document."""
    return np.asarray([[c["regret"] for c in r["clients"]] for r in doc["results"]], np.float64)
