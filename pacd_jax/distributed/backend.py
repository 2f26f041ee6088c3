"""PACD-BO on MPI: the coordinator's program (rank 0) and the clients' (ranks 1..N).

Each BO round is one jitted function per role. Its ``n_t`` SVGD steps run in
one ``lax.fori_loop`` on every rank; each step is one communication cycle of
paper section III-D:

    coordinator: broadcast particles -> collect (N, K, P) gradients -> eq. 7 score + SVGD step
    client i:    receive particles   -> A_i = grad ln Z(S_i, P_phi_k) (eq. 6) -> send A_i

followed by one more broadcast of the round's final particles, with which each
client proposes, evaluates and appends its next query locally. The client
computes exactly what a client computes in the single-process backend
(:func:`pacd_jax.client.local_gradients`, :func:`pacd_jax.methods.propose_meta_all`,
:func:`pacd_jax.loop.bo_round`) and the coordinator exactly its update
(:meth:`pacd_jax.methods.MetaLearner.coordinator_update`), with keys from
(seed, client, round), so both backends give the same run.

What the coordinator learns, and no more:

* at the start, from each client, a manifest of public facts: the family's
  name, the input dimension, the initial-design size and the noise level of
  the configuration (to check all clients run the same problem);
* during the run, every client's ``(K, P)`` gradients at every SVGD step
  (what the paper's honest-but-curious coordinator sees and may attack);
  the number of points per client is public (``m0 + t``);
* at the end, each client's published summary per seed: its normalised
  regret curve, early AUC and best observed value; the queried points and
  values only with ``share_results`` (a privacy choice).

It cannot learn more because its process never constructs a task family, an
objective, a data buffer or a client's PRNG stream: the coordinator's program
takes no task argument at all. Clients build their family from the seed (in a
simulation the factory describes every client; a client keeps its own
objective's parameters and drops the rest) and derive the collaborative
initial design from the shared seed, so no data is exchanged for it.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import time
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from pacd_jax import client, coordinator, experiment, loop, methods, tasks
from pacd_jax.config import RunConfig
from pacd_jax.io import error_line
from pacd_jax.distributed.channel import COORDINATOR, Channel, CommLog
from pacd_jax.methods import Method

_TAG_MANIFEST = 31
_TAG_SUMMARY = 32


class RankCountError(ValueError):
    """The job has the wrong number of MPI ranks for ``num_clients`` (raised on every rank)."""


def _manifest(fam: tasks.TaskFamily, problem: loop.Problem) -> dict:
    return {
        "name": getattr(fam, "name", "custom"),
        "dim": problem.dim,
        "init_points": problem.init_points,
        "noise_std": problem.noise_std,
        "num_clients": int(fam.num_clients),
        "bounds": np.asarray(fam.bounds, np.float64).tolist(),  # public: the shared search box
    }


def client_method(config: RunConfig, dim: int, channel: Channel) -> Method:
    """The method as one client rank runs it: PACD-BO learns through ``channel``."""
    if config.method == "independent":
        return methods.independent(config, dim)
    learner = methods.meta_learner(config, dim)
    model = learner.model
    privacy = methods.dp_config(config)

    def init(seed, buffers):
        del seed  # the coordinator owns the particles; this is only a receive buffer
        return jnp.zeros((learner.num_particles, model.num_params), buffers.X.dtype)

    def learn(particles, buffers, round_idx, dp_keys=None):
        own = jax.tree_util.tree_map(lambda a: a[0], buffers)  # this client's buffer
        steps = learner.num_steps(round_idx)

        def one_step(j, p):
            p = channel.broadcast(p, round_idx, j)
            # privatised here (eq. 12-13) with the key of (seed, this client's global id, round, step)
            key = client.dp_step_key(dp_keys[0], j) if privacy.enabled else None
            channel.collect(client.local_gradients(model, p, own, privacy, key), round_idx, j)
            return p

        particles = jax.lax.fori_loop(0, steps, one_step, particles)
        return channel.broadcast(particles, round_idx, steps)

    def propose(particles, buffers, keys_):
        return methods.propose_meta_all(learner, config, particles, buffers, keys_)

    return Method(config.method, init, learn, propose)


def coordinator_round_fn(
    config: RunConfig,
    learner: methods.MetaLearner,
    channel: Channel,
    init_points: int,
    target: int | None = None,
    bad_gradients: coordinator.BadGradientLog | None = None,
):
    """The coordinator's BO round (jitted, plus a host step): ``n_t`` communication cycles and the final broadcast.

    Non-finite gradients it receives go to ``bad_gradients`` (a fresh log if
    None), for the caller's ``raise_first`` after the round.

    With ``target`` (a client id) the round also returns what the coordinator
    saw in its last SVGD step: ``(state, (particles broadcast, target's (K, P)
    message as received))`` (paper section V; see :mod:`pacd_jax.intercept`).
    """

    bad_log = bad_gradients if bad_gradients is not None else coordinator.BadGradientLog()

    def one_round(state, round_idx):
        """The jitted round; also returns the ``(client, step)`` record of non-finite gradients."""
        steps = learner.num_steps(round_idx)
        beta = (init_points + round_idx).astype(state.particles.dtype)  # m, public

        def one_step(j, carry):
            s, seen, bad = carry
            channel.broadcast(s.particles, round_idx, j)
            grads = channel.collect(jnp.zeros_like(s.particles), round_idx, j)
            bad = coordinator.validate_gradients(grads, config.num_clients, s.particles, bad, j)
            if target is not None:
                seen = (s.particles, grads[target])
            return learner.coordinator_update(s, grads, beta), seen, bad

        empty = (jnp.zeros_like(state.particles), jnp.zeros_like(state.particles)) if target is not None else ()
        state, seen, bad = jax.lax.fori_loop(0, steps, one_step, (state, empty, coordinator.no_bad_gradient()))
        channel.broadcast(state.particles, round_idx, steps)
        return ((state, seen) if target is not None else state), bad

    jitted = jax.jit(one_round)

    def round_fn(state, round_idx):
        # the record comes back as an output (no host callback in the program), kept on the host
        out, bad = jitted(state, round_idx)
        bad_log.record(np.asarray(bad), int(round_idx))
        return out

    return round_fn


def _client_problem(fam: tasks.TaskFamily, client_id: int, config: RunConfig):
    """This client's objective only: its row of the family parameters, its global id."""
    full, params = loop.problem_from_family(fam, config.iters, config.init_points, config.noise_std)
    if jax.tree_util.tree_structure(params).num_leaves:
        own = jax.tree_util.tree_map(lambda a: np.asarray(a)[client_id : client_id + 1], params)
        evaluate = full.evaluate
    else:  # closure-style family: it evaluates by global client id
        own = ()
        evaluate = lambda p, j, x: fam.evaluate(client_id, x)
    problem = loop.Problem(
        num_clients=1,
        dim=full.dim,
        lower=full.lower,
        upper=full.upper,
        init_points=full.init_points,
        iters=full.iters,
        noise_std=full.noise_std,
        evaluate=evaluate,
        client_ids=(client_id,),
        total_clients=int(fam.num_clients),
    )
    return problem, own


def _run_client(config: RunConfig, channel: Channel, task_factory, dtype, store=None) -> None:
    comm = channel.comm
    client_id = channel.rank - 1
    fams = experiment.build_families(config, task_factory)
    problems = [_client_problem(fam, client_id, config) for fam in fams]
    f_stars = [float(fam.optimum(client_id)[1]) for fam in fams]
    comm.send(_manifest(fams[0], problems[0][0]), dest=COORDINATOR, tag=_TAG_MANIFEST)
    method = client_method(config, problems[0][0].dim, channel)
    for k, (seed, (problem, params), f_star) in enumerate(zip(config.seeds, problems, f_stars)):
        if store is not None and store.done_seed(k):
            continue  # finished before the checkpoint; rank 0 holds its summary
        res = loop.run_batch(problem, method, [seed], params, False, dtype, vectorise=False,
                             store=store.for_seed(k) if store is not None else None, on_bad_value=config.on_bad_value)
        summary = experiment.client_summary(
            client_id, res.X[0, 0], res.y[0, 0], res.f[0, 0], f_star, problem.init_points, share=config.share_results,
            skipped_rounds=experiment._skips(config, [(i, t) for _, i, t in res.skipped], 0),
        )
        comm.send(summary, dest=COORDINATOR, tag=_TAG_SUMMARY)


def _run_coordinator(config: RunConfig, channel: Channel, on_round, dtype, intercept=None, store=None) -> dict:
    comm = channel.comm
    start = time.perf_counter()
    manifests = [comm.recv(source=r, tag=_TAG_MANIFEST) for r in range(1, channel.size)]
    _log_host_messages(channel, "manifest", manifests, senders=range(1, channel.size))
    first = manifests[0]
    for r, m in enumerate(manifests[1:], start=2):
        if m != first:
            raise ValueError(f"client ranks disagree on the problem: rank 1 has {first}, rank {r} has {m}")
    learner = methods.meta_learner(config, first["dim"])
    target = intercept[0].client if intercept is not None else None
    bad_log = coordinator.BadGradientLog()  # this run's record of non-finite gradients received
    round_fn = (
        coordinator_round_fn(config, learner, channel, first["init_points"], target, bad_log) if config.method != "independent" else None
    )
    records = []

    seed_clients, done, total = [], 0, config.iters * len(config.seeds)
    if store is not None and store.position is not None:
        # the clients' published summaries of the seeds finished before the checkpoint
        seed_clients = [(s, c) for s, c in store.published_summaries()]
        done = config.iters * len(seed_clients)
    for k, seed in enumerate(config.seeds):
        if store is not None and store.done_seed(k):
            continue
        if channel.log is not None:
            channel.log.seed = seed
        if round_fn is not None:
            state = learner.init(jnp.asarray(seed, jnp.int32), dtype)
            start_round = 0
            if store is not None:
                loaded = store.load(k, state)
                if loaded is not None:
                    state, start_round, _ = loaded
                    done += start_round
                else:
                    store.save(k, state, 0, {"summaries": seed_clients})
            for t in range(start_round, config.iters):
                state = round_fn(state, jnp.asarray(t, jnp.int32))
                if target is not None:
                    state, (seen_particles, seen_grads) = state
                    if t in intercept[0].rounds and seed == config.seeds[0]:
                        records.append(_record(t, target, first, seen_particles, seen_grads))
                jax.block_until_ready(state.particles)
                jax.effects_barrier()
                bad_log.raise_first(range(config.num_clients))
                if store is not None:
                    store.save(k, state, t + 1, {"summaries": seed_clients})
                done += 1
                if on_round is not None:
                    on_round(done, total)
        summaries = [comm.recv(source=r, tag=_TAG_SUMMARY) for r in range(1, channel.size)]
        _log_host_messages(channel, "summary", summaries, senders=range(1, channel.size))
        seed_clients.append((seed, summaries))
        if round_fn is None and on_round is not None:
            done += config.iters
            on_round(done, total)

    if intercept is not None:
        from pacd_jax.intercept import save_records

        save_records(intercept[1], records)
    return experiment.document(
        config,
        benchmark=first["name"],
        init_points=first["init_points"],
        noise_std=first["noise_std"],
        seed_clients=seed_clients,
        wall_time_s=time.perf_counter() - start,
        num_params=experiment.method_num_params(config, first["dim"]),
    )


def _record(t, target, manifest, particles, grads):
    from pacd_jax.intercept import Record

    return Record(
        int(t), int(target), int(manifest["init_points"]) + int(t), np.asarray(particles), np.asarray(grads), np.asarray(manifest["bounds"])
    )


def _rank_store(config: RunConfig, directory, resume: bool, rank: int, channel: Channel):
    """This rank's checkpoint store, with the resume position agreed by all ranks (collective)."""
    if directory is None:
        return None
    from pacd_jax import checkpoint
    from pacd_jax.distributed.resume import RankStore

    store = RankStore(directory, checkpoint.config_hash(config, {"role": "mpi"}), resume, rank, config.iters)
    positions = store.agree(channel.comm)
    _log_host_messages(channel, "resume_positions", positions[1:], range(1, len(positions)))
    return store


def _log_host_messages(channel: Channel, kind: str, objs, senders) -> None:
    """Record the host-level (pickled) messages: manifests and end-of-run summaries."""
    if channel.log is None:
        return
    for sender, obj in zip(senders, objs):
        size = len(pickle.dumps(obj))
        channel.log.record(kind, -1, -1, sender, COORDINATOR, (size,), np.uint8)


#: seconds between printing a rank's error line and aborting the job
ABORT_GRACE_S = 0.5


def run(
    config: RunConfig,
    task_factory: Callable | None = None,
    on_round: Callable[[int, int], None] | None = None,
    comm_log: str | None = None,
    comm=None,
    intercept=None,
    checkpoint: str | None = None,
    resume: bool = False,
) -> dict | None:
    """Run ``config`` across MPI ranks; returns the run.json document on rank 0, None elsewhere.

    Call it on every rank of a job with ``num_clients + 1`` ranks (``mpiexec
    -n N+1``). Errors that every rank detects alike (configuration, rank
    count) are raised on every rank. Any other exception on any rank prints
    ``pacd-bo [rank r]: error: ...`` and aborts the whole job, so that no
    rank waits forever on a message that will not come.

    Args:
        config: the run; ``config.backend`` should be ``"mpi"``.
        task_factory: as for :func:`pacd_jax.experiment.run`; used only on client ranks.
        on_round: progress callback, called on rank 0.
        comm_log: write every message (JSON lines) to this path (rank 0).
        comm: the communicator to clone (default ``MPI.COMM_WORLD``).
        intercept: ``(InterceptSpec, path)``: the coordinator records the
            target's messages at the spec's rounds (first seed) and writes them
            to ``path`` (see :mod:`pacd_jax.intercept`); rank 0 only reads it.


        checkpoint, resume: each rank saves its own state in this folder after
            every round and resumes from the latest round all ranks hold
            (:mod:`pacd_jax.distributed.resume`).
    """
    from mpi4py import MPI

    world = comm if comm is not None else MPI.COMM_WORLD
    size, rank = world.Get_size(), world.Get_rank()
    if size != config.num_clients + 1:
        raise RankCountError(
            f"the mpi backend needs {config.num_clients + 1} MPI ranks (1 coordinator + {config.num_clients} clients) "
            f"for {config.num_clients} clients, but this job has {size}; run "
            f"`mpiexec -n {config.num_clients + 1} pacd-bo run --backend mpi --clients {config.num_clients} ...`"
        )
    log = CommLog() if comm_log is not None and rank == COORDINATOR else None
    channel = Channel(world.Clone(), config.transport, log)
    x64 = jax.enable_x64(True) if config.x64 else contextlib.nullcontext()
    if checkpoint is not None and config.method == "independent":
        raise ValueError("--checkpoint with --backend mpi needs a communicating method (pacd or pacoh); "
                         "run the independent baseline with --backend vmap")
    try:
        with x64:
            dtype = jnp.result_type(float)
            store = _rank_store(config, checkpoint, resume, rank, channel)
            if rank == COORDINATOR:
                if intercept is not None:
                    intercept[0].check(config)
                doc = _run_coordinator(config, channel, on_round, dtype, intercept, store)
                if log is not None:
                    log.write(comm_log)
                    doc["comm_log"] = {"path": str(comm_log), "messages": len(log.entries), **log.totals()}
                return doc
            _run_client(config, channel, task_factory, dtype, store)
            return None
    except BaseException as exc:  # noqa: BLE001 - any failure must end the whole job
        message = str(exc) or type(exc).__name__
        error_line(f"pacd-bo [rank {rank}]: error: {message}")
        # The line sits in the pipe to this node's process manager until it
        # forwards it; MPI_Abort makes the manager tear the job down, and on a
        # busy machine it could do so before forwarding, losing the only
        # explanation the user gets. A short pause lets it drain first.
        time.sleep(ABORT_GRACE_S)
        world.Abort(2)
        # MPICH's MPI_Abort can return to the caller before the process
        # manager kills the job; end here so the message is printed once.
        os._exit(2)  # pragma: no cover
