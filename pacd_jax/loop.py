"""The single-process (vmap) backend: clients stacked on a leading axis.

One BO round (the method's learning phase, one proposal per client, one
evaluation per client) is one jitted function of fixed-shape state: client
buffers are preallocated to ``m0 + T`` rows and masked, and the round index
is a traced integer, so the round compiles once and never retraces as data
grows. So that early rounds do not pay for the whole capacity, the round's
learning and proposal run on the smallest of a few row counts that holds
every point so far (:func:`row_sizes`: 32, 64, 128, ... and the capacity),
chosen by ``lax.switch`` on the traced round: still one program, and padded
rows are ignored exactly, so the result is the same up to round-off.

Seeds are vectorised with ``vmap`` when the task family exposes its
parameters as arrays (every built-in family does); otherwise they run one
after another.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from pacd_jax import coordinator, keys, tasks
from pacd_jax.client import ClientBuffer, append, empty_buffer, leading_rows
from pacd_jax.methods import Method

Array = jax.Array


class NonFiniteObjectiveError(ValueError):
    """A task returned NaN or inf; the message names seed, client and round."""


class RunState(NamedTuple):
    """Everything a round needs. ``f`` is the simulator's noise-free record for
    the regret metric; a real client would not have it and nothing learns from it."""

    buffers: ClientBuffer  # stacked over clients: X (N, M, d), y (N, M), count (N,)
    f: Array  # (N, M)
    model: Any


@dataclasses.dataclass(frozen=True)
class Problem:
    """Static description of the optimisation problem seen by the jitted round.

    ``evaluate`` is ``evaluate(params, i, x)`` from :meth:`TaskFamily.split`.
    """

    num_clients: int
    dim: int
    lower: tuple[float, ...]
    upper: tuple[float, ...]
    init_points: int
    iters: int
    noise_std: float
    evaluate: Callable
    #: global ids of the clients this process simulates (all of them in the
    #: vmap backend, one in an MPI client rank); keys derive from these ids.
    client_ids: tuple[int, ...] | None = None
    #: clients in the whole federation (for the collaborative design).
    total_clients: int | None = None
    #: row counts the round may compute on (ascending, the last the capacity);
    #: None: :func:`row_sizes` of the capacity.
    row_sizes: tuple[int, ...] | None = None

    @property
    def capacity(self) -> int:
        return self.init_points + self.iters

    @property
    def sizes(self) -> tuple[int, ...]:
        sizes = self.row_sizes if self.row_sizes is not None else row_sizes(self.capacity)
        if list(sizes) != sorted(set(sizes)) or sizes[-1] != self.capacity or sizes[0] < 1:
            raise ValueError(f"row_sizes must ascend and end at the capacity {self.capacity}, got {sizes}")
        return tuple(int(s) for s in sizes)

    @property
    def ids(self) -> Array:
        ids = self.client_ids if self.client_ids is not None else tuple(range(self.num_clients))
        return jnp.asarray(ids, jnp.int32)

    def client_keys(self, seed: Array, name: str, round_idx: Array | int) -> Array:
        """One key per local client from (seed, purpose, global client id, round)."""
        return jax.vmap(lambda i: keys.client_key(seed, name, i, round_idx))(self.ids)

    def to_original(self, x_unit: Array) -> Array:
        lower = jnp.asarray(self.lower, x_unit.dtype)
        upper = jnp.asarray(self.upper, x_unit.dtype)
        return lower + x_unit * (upper - lower)

    def evaluate_all(self, params: Any, x_unit: Array) -> Array:
        """Noise-free ``f_i`` of every client: ``(N, ..., d)`` unit-box points -> ``(N, ...)``."""
        x = self.to_original(x_unit)
        out = [jnp.asarray(self.evaluate(params, i, x[i])) for i in range(self.num_clients)]
        return jnp.stack(out).astype(x_unit.dtype)

    def observe(self, f: Array, seed: Array, round_idx: Array) -> Array:
        """``y = f + noise`` (paper eq. 1) with keys from (seed, client, round)."""
        if self.noise_std == 0.0:
            return f
        keys_ = self.client_keys(seed, "noise", round_idx)
        return jax.vmap(lambda k, fi: tasks.add_noise(k, fi, self.noise_std))(keys_, f)


def row_sizes(capacity: int, smallest: int = 32, ratio: float = 1.5) -> tuple[int, ...]:
    """Row counts a round computes on: ``smallest * 2^k`` up to ``capacity / ratio``, then ``capacity``.

    The step cost grows like ``m^1.4`` (``bench/svgd_step.py``), so a run
    whose buffers fill from ``m0`` to ``m0 + T`` rows saves about half its
    learning time on the smaller sizes; a size within ``ratio`` of the next
    would save little and cost another compiled branch. Short runs (capacity
    below ``smallest * ratio``) get the capacity alone.
    """
    sizes, rows = [], int(smallest)
    while rows * ratio <= capacity:
        sizes.append(rows)
        rows *= 2
    return tuple(sizes) + (int(capacity),)


def problem_from_family(family: tasks.TaskFamily, iters: int, init_points: int | None, noise_std: float | None) -> tuple[Problem, Any]:
    """Build the static :class:`Problem` and the array parameters of a family."""
    params, evaluate = family.split()
    bounds = np.asarray(family.bounds, np.float64)
    problem = Problem(
        num_clients=int(family.num_clients),
        dim=int(family.dim),
        lower=tuple(float(v) for v in bounds[:, 0]),
        upper=tuple(float(v) for v in bounds[:, 1]),
        init_points=int(init_points if init_points is not None else tasks.default_init_points(family.dim)),
        iters=int(iters),
        noise_std=float(family.noise_std if noise_std is None else noise_std),
        evaluate=evaluate,
    )
    return problem, params


def initial_state(problem: Problem, method: Method, seed: Array, params: Any, dtype) -> RunState:
    """Collaborative LHS design, its evaluations, and the method's initial state."""
    n, m0, d = problem.num_clients, problem.init_points, problem.dim
    total = problem.total_clients or n
    # The design is a function of the shared seed only: every client can derive
    # the federation-wide LHS and keep its own rows, with no data exchanged.
    x0 = tasks.collaborative_lhs(keys.stream(seed, "design"), total, m0, d)[problem.ids].astype(dtype)
    f0 = problem.evaluate_all(params, x0)
    y0 = problem.observe(f0, seed, -1)
    empty = empty_buffer(problem.capacity, d, dtype)
    buffers = jax.vmap(lambda x, y: append(empty, x, y))(x0, y0)
    f = jnp.zeros((n, problem.capacity), dtype).at[:, :m0].set(f0)
    return RunState(buffers, f, method.init(seed, buffers))


def bo_round(problem: Problem, method: Method, state: RunState, round_idx: Array, seed: Array, params: Any):
    """One BO round for all clients: learn, propose, evaluate, append.

    Returns:
        ``(state, (x_unit, y))`` with the new queries ``(N, d)`` and observations ``(N,)``.
    """
    learn = lambda model, buffers, t, dp_keys: (method.learn(model, buffers, t, dp_keys), ())  # noqa: E731
    state, out, _ = bo_round_aux(problem, method, state, round_idx, seed, params, learn)
    return state, out


def bo_round_aux(problem: Problem, method: Method, state: RunState, round_idx: Array, seed: Array, params: Any, learn_aux):
    """:func:`bo_round` with ``learn_aux(model, buffers, round_idx, dp_keys) -> (model, aux)`` as the learning
    phase; returns ``(state, (x_unit, y), aux)`` (the interception hook passes out what the coordinator saw).

    Learning and proposal see the buffers cut to the smallest of
    ``problem.sizes`` that holds the ``m0 + round_idx`` rows filled so far
    (a client that skipped a bad value holds fewer); the new point is
    appended to the full buffer.
    """
    dp_keys = problem.client_keys(seed, "dp", round_idx)
    propose_keys = problem.client_keys(seed, "propose", round_idx)

    def on_rows(rows):
        def branch(operand):
            model_state, buffers = operand
            view = leading_rows(buffers, rows)
            model, aux = learn_aux(model_state, view, round_idx, dp_keys)
            return model, method.propose(model, view, propose_keys), aux

        return branch

    sizes = problem.sizes
    operand = (state.model, state.buffers)
    if len(sizes) == 1:
        model, x, aux = on_rows(sizes[0])(operand)
    else:
        filled = jnp.asarray(problem.init_points, jnp.int32) + jnp.asarray(round_idx, jnp.int32)
        which = jnp.sum(jnp.asarray(sizes[:-1], jnp.int32) < filled)
        model, x, aux = jax.lax.switch(which, [on_rows(r) for r in sizes], operand)
    f = problem.evaluate_all(params, x)
    y = problem.observe(f, seed, round_idx)
    buffers = jax.vmap(append)(state.buffers, x, y)
    # the noise-free record is indexed by round (row m0 + t), so it stays aligned
    # when a client skips a bad value and its buffer count falls behind
    row = jnp.asarray(problem.init_points, jnp.int32) + jnp.asarray(round_idx, jnp.int32)
    f_buf = jax.lax.dynamic_update_slice(state.f, f[:, None].astype(state.f.dtype), (jnp.zeros_like(row), row))
    return RunState(buffers, f_buf, model), (x, y), aux


def _check_finite(values, seeds: Sequence[int], client_ids: np.ndarray, where: str) -> None:
    """``values``: ``(S, N, ...)`` observations of the seeds in ``seeds``, clients ``client_ids``."""
    values = np.asarray(values)
    bad = ~np.isfinite(values)
    if bad.any():
        s, i = np.argwhere(bad)[0][:2]
        value = values[(s, i) + tuple(np.argwhere(bad[s, i])[0])] if values.ndim > 2 else values[s, i]
        raise NonFiniteObjectiveError(
            f"client {int(client_ids[i])} returned a non-finite objective value ({float(value)}) {where} (seed {seeds[s]})"
        )


@dataclasses.dataclass
class SeedResults:
    """Host-side arrays of one batch of seeds, original units.

    Attributes:
        X: ``(S, N, m0 + T, d)``; y, f: ``(S, N, m0 + T)``.
    """

    seeds: list[int]
    X: np.ndarray
    y: np.ndarray
    f: np.ndarray
    #: ``(S, N)`` valid buffer rows per client (``m0 + T`` unless values were skipped).
    count: np.ndarray | None = None
    #: ``[(seed_index, client_index, round), ...]`` values dropped by ``on_bad_value="skip"``.
    skipped: list = dataclasses.field(default_factory=list)


def _drop_values(state: RunState, bad: np.ndarray, batched: bool) -> RunState:
    """Undo the last round's append for the ``(S, N)`` clients in ``bad``.

    The dropped row is zeroed and the client's count decremented, so the model
    never sees the value (the noise-free record, indexed by round, keeps it).
    """
    buffers = jax.tree_util.tree_map(np.array, state.buffers)
    if not batched:
        buffers = jax.tree_util.tree_map(lambda a: a[None], buffers)
    for s, i in np.argwhere(bad):
        c = int(buffers.count[s, i]) - 1
        buffers.X[s, i, c] = 0.0
        buffers.y[s, i, c] = 0.0
        buffers.count[s, i] = c
    if not batched:
        buffers = jax.tree_util.tree_map(lambda a: a[0], buffers)
    return state._replace(buffers=jax.tree_util.tree_map(jnp.asarray, buffers))


def state_placement(method: Method) -> Callable[[Any], Any]:
    """The method's placement of a round's state (identity without one): one sharding for the state in and out of a round,
    so a jitted round finds its cache from the second round on."""
    return method.placement or (lambda tree: tree)


def run_batch(
    problem: Problem,
    method: Method,
    seeds: Sequence[int],
    params: Any,
    batched_params: bool,
    dtype,
    on_round: Callable[[int], None] | None = None,
    vectorise: bool = True,
    store=None,
    store_name: str = "batch-0",
    on_bad_value: str = "stop",
) -> SeedResults:
    """Run all rounds for a batch of seeds.

    Args:
        params: the family parameters; stacked over seeds when ``batched_params``.
        on_round: called with the round index after each round (progress bars).
        vectorise: ``vmap`` the rounds over the seeds. Without it (one seed),
            the round is jitted as it is, which lets a method's ``learn``
            contain collective communication (the MPI backend), which has no
            batching rule.
        store: a :class:`pacd_jax.checkpoint.Store`: the state is saved as
            ``store_name`` after the initial design and after every round, and
            loaded from there when the store resumes (the run continues with
            the first round not yet done; keys derive from the round index, so
            the result is the uninterrupted run's, bit for bit).
        on_bad_value: ``"stop"``: a NaN/inf observation raises
            :class:`NonFiniteObjectiveError` (the last complete round is
            already saved in ``store``); ``"skip"``: the value is dropped (not
            appended to the client's buffer) and recorded in ``skipped``. A bad
            value in the initial design always stops.
    """
    seed_arr = jnp.asarray(seeds, jnp.int32)
    checked = method.learn_checked is not None and method.bad_gradients is not None
    if checked:  # the coordinator's record comes back with the round (no host callback in the program)
        learn_aux = method.learn_checked
    else:
        learn_aux = lambda m, b, t, k: (method.learn(m, b, t, k), ())  # noqa: E731
    place = state_placement(method)

    def one_round(st, t, s, p):
        new, out, bad_record = bo_round_aux(problem, method, st, t, s, p, learn_aux)
        return place(new), out, bad_record

    if vectorise:
        p_axis = 0 if batched_params else None
        init = jax.jit(jax.vmap(lambda s, p: initial_state(problem, method, s, p, dtype), (0, p_axis)))
        round_fn = jax.jit(jax.vmap(one_round, (0, None, 0, p_axis)))
        batch = lambda a: a
    else:
        if len(seeds) != 1 or batched_params:
            raise ValueError("an unvectorised run takes one seed and unstacked parameters")
        init = jax.jit(lambda s, p: initial_state(problem, method, s[0], p, dtype))
        round_fn = jax.jit(lambda st, t, s, p: one_round(st, t, s[0], p))
        batch = lambda a: np.asarray(a)[None]

    if on_bad_value not in ("stop", "skip"):
        raise ValueError(f"on_bad_value must be 'stop' or 'skip', got {on_bad_value!r}")
    ids = np.asarray(problem.ids)
    start, skipped = 0, []
    # on resume only the state's structure is needed: eval_shape runs no objective evaluation
    loaded = store.load(store_name, jax.eval_shape(init, seed_arr, params)) if store is not None else None
    if loaded is not None:
        state, start, extra = loaded
        skipped = [tuple(v) for v in extra.get("skipped", [])]
        if extra.get("seeds", list(seeds)) != list(seeds):
            raise ValueError(f"checkpoint {store_name!r} holds seeds {extra.get('seeds')}, this run {list(seeds)}")
    else:
        state = init(seed_arr, params)
        _check_finite(batch(state.buffers.y[..., : problem.init_points]), list(seeds), ids, "in the initial design")
        if store is not None:
            store.save(store_name, state, 0, {"seeds": list(seeds), "skipped": []})
    state = place(state)
    for t in range(start, problem.iters):
        state, (_, y), bad_record = round_fn(state, jnp.asarray(t, jnp.int32), seed_arr, params)
        y_host = batch(y)
        jax.effects_barrier()
        if method.bad_gradients is not None:
            if checked:
                method.bad_gradients.record(batch(bad_record), t)
            method.bad_gradients.raise_first(ids)
        bad = ~np.isfinite(np.asarray(y_host))
        if bad.any() and on_bad_value == "skip":
            state = place(_drop_values(state, bad, vectorise))
            skipped += [(int(s), int(i), t) for s, i in np.argwhere(bad)]
        elif bad.any():
            try:
                _check_finite(y_host, list(seeds), ids, f"at round {t}")
            except NonFiniteObjectiveError as exc:
                if store is not None:
                    raise NonFiniteObjectiveError(
                        f"{exc}; rounds 0..{t - 1} are saved in {str(store.directory)!r} (resume with --resume, "
                        f"e.g. with --on-bad-value skip)" if t > 0 else f"{exc}; the initial design is saved in {str(store.directory)!r}"
                    ) from None
                raise
        if store is not None:
            store.save(store_name, state, t + 1, {"seeds": list(seeds), "skipped": [list(v) for v in skipped]})
        if on_round is not None:
            on_round(t)
    X = batch(problem.to_original(state.buffers.X))
    return SeedResults(
        list(seeds),
        np.asarray(X, np.float64),
        np.asarray(batch(state.buffers.y), np.float64),
        np.asarray(batch(state.f), np.float64),
        np.asarray(batch(state.buffers.count)),
        skipped,
    )
