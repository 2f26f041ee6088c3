"""What an honest-but-curious coordinator records (paper section V, threat model).

At chosen rounds the coordinator keeps the target client's message of the
round's last SVGD step, ``{A_k}`` (K gradients, eq. 6, exactly as the client
sent it), together with the particles it had broadcast for that step, the
public count ``m`` of the target's points and the public box. That
:class:`Record` is the only input of the attack (:mod:`pacd_jax.attack`); it
holds no client data.

Both backends record: :func:`run_vmap` here (one process), and the MPI
coordinator (:func:`pacd_jax.distributed.backend.run` with ``intercept=``),
whose process never holds a client's data at all.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from pacd_jax import experiment, io, loop, methods
from pacd_jax.client import model_data
from pacd_jax.config import RunConfig

#: the fields of a record: what crosses the wire plus public facts, nothing else.
RECORD_FIELDS = ("round", "client", "m", "particles", "grads", "bounds")


class Record(NamedTuple):
    """One intercepted message.

    Attributes:
        round: BO round index t (0-based; the message is computed on ``m = m0 + t`` points).
        client: the target client's id.
        m: number of the target's points (public, beta = m).
        particles: ``(K, P)`` particles broadcast for the round's last SVGD step.
        grads: ``(K, P)`` the target's message for those particles, as received.
        bounds: ``(d, 2)`` the public search box, original units.
    """

    round: int
    client: int
    m: int
    particles: np.ndarray
    grads: np.ndarray
    bounds: np.ndarray


@dataclasses.dataclass(frozen=True)
class InterceptSpec:
    """Whom and when to record: ``client`` (global id) at ``rounds`` (0-based)."""

    client: int
    rounds: tuple[int, ...]

    def check(self, config: RunConfig) -> None:
        if config.method not in ("pacd", "pacoh"):
            raise ValueError(f"interception needs a method that sends gradients (pacd), not {config.method!r}")
        if config.output_warp != "none":
            # the attacks (and the truth they are scored against) model the
            # client's outputs as standardised observations, round to round
            raise ValueError(f"interception models the client's standardised observations; it needs output_warp none, "
                             f"not {config.output_warp!r}")
        if not 0 <= self.client < config.num_clients:
            raise ValueError(f"intercept client must be in [0, {config.num_clients - 1}], got {self.client}")
        if not self.rounds:
            raise ValueError("intercept rounds must not be empty")
        bad = [t for t in self.rounds if not 0 <= t < config.iters]
        if bad:
            raise ValueError(f"intercept rounds must be in [0, {config.iters - 1}] (--iters {config.iters}), got {bad}")
        silent = [t for t in self.rounds if (config.svgd_steps_init if t == 0 else config.svgd_steps) == 0]
        if silent:
            # no SVGD step, no message: there is nothing the coordinator saw to record
            raise ValueError(f"intercept rounds {silent} have no SVGD step (--svgd-steps-init {config.svgd_steps_init}, "
                             f"--svgd-steps {config.svgd_steps}): the client sends nothing in them")


def save_records(path, records: Sequence[Record]) -> None:
    """Write records to one ``.npz`` file atomically (arrays stacked by round)."""
    with io.atomic_path(path) as tmp:
        with open(tmp, "wb") as fh:
            np.savez(
                fh,
                round=np.asarray([r.round for r in records], np.int64),
                client=np.asarray([r.client for r in records], np.int64),
                m=np.asarray([r.m for r in records], np.int64),
                particles=np.stack([r.particles for r in records]),
                grads=np.stack([r.grads for r in records]),
                bounds=np.stack([r.bounds for r in records]),
            )


def load_records(path) -> list[Record]:
    with np.load(Path(path)) as z:
        if sorted(z.files) != sorted(RECORD_FIELDS):
            raise ValueError(f"{path}: not an interception file (fields {sorted(z.files)})")
        return [
            Record(int(z["round"][j]), int(z["client"][j]), int(z["m"][j]), z["particles"][j], z["grads"][j], z["bounds"][j])
            for j in range(len(z["round"]))
        ]


class Truth(NamedTuple):
    """The simulator's ground truth for one record (never given to the attack).

    ``X``: ``(m, d)`` target's points in the unit box; ``y``: ``(m,)`` its
    values standardised as the client standardises them.
    """

    X: np.ndarray
    y: np.ndarray


def run_vmap(config: RunConfig, spec: InterceptSpec, task_factory=None, seed: int | None = None, on_round=None):
    """Run PACD-BO for one seed in one process, recording the target's messages.

    ``on_round(rounds_done, rounds_total)`` is called after every round (progress).

    Returns:
        ``(records, truths, results)``: one :class:`Record` and :class:`Truth`
        per intercepted round (in round order) and the run's :class:`loop.SeedResults`.
    """
    spec.check(config)
    seed = config.seeds[0] if seed is None else seed
    config = config.replace(seeds=(seed,))
    dtype = jnp.result_type(float)
    (fam,) = experiment.build_families(config, task_factory)
    problem, params = loop.problem_from_family(fam, config.iters, config.init_points, config.noise_std)
    method = methods.build(config, problem.dim)
    target = spec.client
    bounds = np.stack([problem.lower, problem.upper], axis=1)

    place = loop.state_placement(method)

    def round_fn(state, t, s):
        learn = lambda model_state, buffers, t_, dp_keys: method.learn_intercept(model_state, buffers, t_, target, dp_keys)  # noqa: E731
        new, out, seen = loop.bo_round_aux(problem, method, state, t, s, params, learn)
        return place(new), out, seen

    round_jit = jax.jit(round_fn)
    seed_arr = jnp.asarray(seed, jnp.int32)
    state = place(jax.jit(lambda s: loop.initial_state(problem, method, s, params, dtype))(seed_arr))
    wanted = set(spec.rounds)
    records, truths = [], []
    for t in range(config.iters):
        if t in wanted:
            buf = jax.tree_util.tree_map(lambda a: a[target], state.buffers)
            m = int(buf.count)
            data = model_data(buf)
            truths.append(Truth(np.asarray(data.X[:m], np.float64), np.asarray(data.y[:m], np.float64)))
        state, (_, y), (particles, grads) = round_jit(state, jnp.asarray(t, jnp.int32), seed_arr)
        jax.effects_barrier()
        if method.bad_gradients is not None:  # the coordinator's check, as in loop.run_batch
            method.bad_gradients.raise_first(np.asarray(problem.ids))
        loop._check_finite(np.asarray(y)[None], [seed], np.asarray(problem.ids), f"at round {t}")
        if t in wanted:
            records.append(Record(t, target, m, np.asarray(particles), np.asarray(grads), bounds))
        if on_round is not None:
            on_round(t + 1, config.iters)
    X = problem.to_original(state.buffers.X)
    results = loop.SeedResults([seed], np.asarray(X, np.float64)[None], np.asarray(state.buffers.y, np.float64)[None], np.asarray(state.f, np.float64)[None])
    return records, truths, results


def run_document(config: RunConfig, spec: InterceptSpec, path, task_factory=None, on_round=None) -> dict:
    """``pacd-bo run --intercept-*`` on the vmap backend: one seed, records written to ``path``.

    Returns the run.json document (the same run as without interception).
    """
    import time

    if len(config.seeds) != 1:
        raise ValueError("interception on the vmap backend runs one seed (use --seed-list S)")
    start = time.perf_counter()
    records, _, res = run_vmap(config, spec, task_factory, on_round=on_round)
    save_records(path, records)
    (fam,) = experiment.build_families(config, task_factory)
    problem, _ = loop.problem_from_family(fam, config.iters, config.init_points, config.noise_std)
    clients = [
        experiment.client_summary(i, res.X[0, i], res.y[0, i], res.f[0, i], fam.optimum(i)[1], problem.init_points, share=True)
        for i in range(config.num_clients)
    ]
    return experiment.document(
        config,
        benchmark=getattr(fam, "name", config.benchmark),
        init_points=problem.init_points,
        noise_std=problem.noise_std,
        seed_clients=[(config.seeds[0], clients)],
        wall_time_s=time.perf_counter() - start,
        num_params=experiment.method_num_params(config, problem.dim),
    )
