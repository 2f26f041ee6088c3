"""BO methods as pure (init, learn, propose) triples over stacked client buffers.

A method's state is a pytree; ``learn`` runs once per BO round before the
proposals (PACD-BO: the round's SVGD steps; Independent: each client refits
its GP), ``propose`` returns every client's next query in the unit box. These
are the single-process (vmap) compositions of the client and coordinator
functions; the MPI backend composes the same functions across ranks.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from pacd_jax import client, consensus, coordinator, dp, keys, sharding, standard_gp
from pacd_jax.acquisition import MaximiserConfig
from pacd_jax.client import ClientBuffer
from pacd_jax.config import RunConfig
from pacd_jax.gp import MetaGP, MetaGPConfig
from pacd_jax.svgd import SVGDState, svgd

Array = jax.Array


class Method(NamedTuple):
    """``init(seed, buffers) -> state``, ``learn(state, buffers, t, dp_keys=None) -> state``,
    ``propose(state, buffers, keys) -> (N, d)``. ``buffers``, the per-client
    proposal ``keys`` and the per-client DP round keys ``dp_keys`` (used only
    when differential privacy is on) are stacked over clients."""

    name: str
    init: Callable[[Array, ClientBuffer], Any]
    learn: Callable[[Any, ClientBuffer, Array], Any]
    propose: Callable[[Any, ClientBuffer, Array], Array]
    #: ``learn_intercept(state, buffers, t, target, dp_keys=None) -> (state, (particles, message))``:
    #: ``learn`` that also returns the target client's message of the round's
    #: last SVGD step and the particles it answered (paper section V); None for
    #: methods that send no gradients.
    learn_intercept: Callable | None = None
    #: where the coordinator's check records non-finite gradients (one log per
    #: method object; None for methods without a coordinator); the backend
    #: calls ``raise_first`` after each round.
    bad_gradients: coordinator.BadGradientLog | None = None
    #: ``learn_checked(state, buffers, t, dp_keys=None) -> (state, bad)``: ``learn``
    #: that returns the round's ``(client, step)`` record of non-finite gradients
    #: (:data:`coordinator.NO_BAD_GRADIENT` if none) instead of sending it to
    #: ``bad_gradients`` by a host callback, so the round's program holds no
    #: callback and JAX's persistent compilation cache can keep it; the backend
    #: passes the record to ``bad_gradients.record`` on the host. None: use ``learn``.
    learn_checked: Callable | None = None
    #: ``placement(tree) -> tree``: puts a state (built on the host or on one device)
    #: where the method's jitted round leaves it, so that the round's first call
    #: and every later one see the same input shardings and compile once; None: as is.
    placement: Callable | None = None


def maximiser_config(config: RunConfig) -> MaximiserConfig:
    return MaximiserConfig(
        num_candidates=config.num_candidates,
        num_local=config.num_local,
        num_refine=config.num_refine,
        refine_steps=config.refine_steps,
    )


def meta_gp(config: RunConfig, dim: int) -> MetaGP:
    return MetaGP(
        MetaGPConfig(
            dim=dim,
            hidden=config.hidden,
            features=config.features,
            kernel_variance=config.kernel_variance,
            learn_lengthscale=config.learn_lengthscale,
            noise_prior=config.noise_prior,
            noise_floor=config.noise_floor,
            input_kernel=config.input_kernel,
            kernel=config.feature_kernel,
            learn_outputscale=config.learn_outputscale,
            output_warp=config.output_warp,
        )
    )


@dataclasses.dataclass(frozen=True)
class MetaLearner:
    """The pieces PACD-BO shares between backends: prior model, SVGD, score weights."""

    model: MetaGP
    objective: coordinator.MetaObjective
    num_particles: int
    learning_rate: float
    steps: int
    steps_init: int

    @property
    def svgd(self):
        return svgd(learning_rate=self.learning_rate)

    def init(self, seed: Array, dtype) -> SVGDState:
        particles = self.model.sample_hyperprior(keys.stream(seed, "particles"), self.num_particles, dtype)
        return self.svgd.init(particles)

    def num_steps(self, round_idx: Array) -> Array:
        return jnp.where(round_idx == 0, self.steps_init, self.steps)

    def coordinator_update(self, state: SVGDState, grads: Array, beta: Array) -> SVGDState:
        return coordinator.update(self.model, self.objective, self.svgd, state, grads, beta)


def public_count(buffers) -> Array:
    """``beta = m0 + t`` of eq. 7, the rows each client holds by the round's schedule.

    The largest count over the clients: a client whose bad value was dropped
    (``on_bad_value="skip"``) holds one row fewer, and must not lower everyone's
    weight; this is the public count the MPI coordinator uses, equal to it
    unless every client dropped a value.
    """
    return jnp.max(buffers.count, axis=-1).astype(buffers.X.dtype)


def dp_config(config: RunConfig) -> dp.DPConfig:
    """The run's differential-privacy setting (``enabled`` iff ``dp_sigma > 0``)."""
    return dp.check_config(config.dp_sigma, config.dp_clip)


def meta_learner(config: RunConfig, dim: int) -> MetaLearner:
    return MetaLearner(
        model=meta_gp(config, dim),
        objective=coordinator.MetaObjective(config.num_clients, config.meta_lambda, config.prior_factor),
        num_particles=config.num_particles,
        learning_rate=config.learning_rate,
        steps=config.svgd_steps,
        steps_init=config.svgd_steps_init,
    )


def pacd(config: RunConfig, dim: int) -> Method:
    """PACD-BO (paper section III): SVGD on the aggregated score, UCB on the K-GP mixture."""
    learner = meta_learner(config, dim)
    privacy = dp_config(config)
    bad_log = coordinator.BadGradientLog()
    # every client's (N, K, P) message; the particle axis split over config.devices devices
    client_messages = sharding.client_messages(learner.model, config.devices, privacy)

    def init(seed, buffers):
        return learner.init(seed, buffers.X.dtype)

    def step(s, buffers, round_idx, step_idx, dp_keys=None):
        """One SVGD step; returns the new state and the ``(N, K, P)`` messages as sent."""
        beta = public_count(buffers)
        # every client computes its K gradients on its own data (eq. 6), privatised
        # there when DP is on (eq. 12-13) ...
        step_keys = jax.vmap(client.dp_step_key, (0, None))(dp_keys, step_idx) if privacy.enabled else None
        grads = client_messages(s.particles, buffers, step_keys)
        # ... and the coordinator aggregates them and moves the particles (eq. 7)
        return learner.coordinator_update(s, grads, beta), grads

    def checked_step(j, carry, buffers, round_idx, dp_keys):
        """``step`` with the coordinator's check of what it received (carry: ``(state, bad record)``)."""
        s, bad = carry
        new, grads = step(s, buffers, round_idx, j, dp_keys)
        return new, coordinator.validate_gradients(grads, buffers.X.shape[0], s.particles, bad, j), grads

    def _check_keys(dp_keys):
        if privacy.enabled and dp_keys is None:
            raise ValueError("differential privacy needs the clients' DP round keys")

    def learn_checked(state, buffers, round_idx, dp_keys=None):
        _check_keys(dp_keys)
        one_step = lambda j, carry: checked_step(j, carry, buffers, round_idx, dp_keys)[:2]
        return jax.lax.fori_loop(0, learner.num_steps(round_idx), one_step, (state, coordinator.no_bad_gradient()))

    def learn(state, buffers, round_idx, dp_keys=None):
        state, bad = learn_checked(state, buffers, round_idx, dp_keys)
        bad_log.report(bad, round_idx)
        return state

    def learn_intercept(state, buffers, round_idx, target, dp_keys=None):
        """``learn`` that also returns what the coordinator saw in the round's last step:
        ``(state, (particles broadcast, target's (K, P) message as sent, DP included))``."""
        _check_keys(dp_keys)
        n = learner.num_steps(round_idx)
        one_step = lambda j, carry: checked_step(j, carry, buffers, round_idx, dp_keys)[:2]
        state, bad = jax.lax.fori_loop(0, jnp.maximum(n - 1, 0), one_step, (state, coordinator.no_bad_gradient()))
        new, last_bad, grads = checked_step(jnp.maximum(n - 1, 0), (state, bad), buffers, round_idx, dp_keys)
        new = jax.tree_util.tree_map(lambda a, b: jnp.where(n > 0, a, b), new, state)
        bad_log.report(jnp.where(n > 0, last_bad, bad), round_idx)
        return new, (state.particles, grads[target])

    def propose(state, buffers, keys_):
        particles = sharding.split_particles(state.particles, config.devices)
        return propose_meta_all(learner, config, particles, buffers, keys_)

    placement = sharding.replicator(config.devices)
    return Method(config.method, init, learn, propose, learn_intercept, bad_log, learn_checked, placement)


def propose_meta_all(learner: MetaLearner, config: RunConfig, particles: Array, buffers: ClientBuffer, keys_: Array) -> Array:
    """Every client's UCB query on the K-particle mixture (clients stacked; eq. 8-10)."""
    return jax.vmap(client.propose_meta, (None, None, 0, 0, None, None))(
        learner.model, particles, buffers, keys_, config.kappa, maximiser_config(config)
    )


def independent(config: RunConfig, dim: int) -> Method:
    """Independent BO: each client fits its own standard GP (DESIGN.md section 5)."""
    if dp_config(config).enabled:
        raise ValueError("--dp-sigma applies to the meta-learner's gradients; the independent method sends nothing to privatise")
    gp_config = standard_gp.StandardGPConfig(dim=dim, kernel=config.gp_kernel, fit_steps=config.gp_fit_steps,
                                           output_warp=config.output_warp)
    maximiser = maximiser_config(config)

    def init(seed, buffers):
        del seed
        n = buffers.X.shape[0]
        h = standard_gp.default_hyper(gp_config, buffers.X.dtype)
        return jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, (n,) + a.shape), h)

    def learn(state, buffers, round_idx, dp_keys=None):
        del round_idx, dp_keys
        return jax.vmap(client.fit_standard_gp, (None, 0, 0))(gp_config, state, buffers)

    def propose(state, buffers, keys_):
        return jax.vmap(client.propose_standard, (None, 0, 0, 0, None, None))(
            gp_config, state, buffers, keys_, config.kappa, maximiser
        )

    return Method("independent", init, learn, propose)


def pacoh(config: RunConfig, dim: int) -> Method:
    """Centralised PACOH-BO: one learner that holds every client's data (non-private reference).

    The score of eq. 4 is the gradient of the pooled meta-objective
    ``sum_i ln Z_beta(S_i, P_phi_k)``, taken by autodiff of the exact marginal
    likelihood over all tasks at once (no per-client messages, not the
    hand-written batched gradient PACD-BO's clients use). Mathematically it is
    PACD-BO's aggregated score ``G_k`` (eq. 7), so the two agree to round-off.
    """
    if dp_config(config).enabled:
        raise ValueError("--dp-sigma needs clients that send gradients; centralised PACOH-BO holds all data in one place (use --method pacd)")
    learner = meta_learner(config, dim)
    model = learner.model

    def pooled_log_likelihood(phi, pooled):
        return jnp.sum(jax.vmap(model.gmll, (None, 0))(phi, pooled))

    def init(seed, buffers):
        return learner.init(seed, buffers.X.dtype)

    def learn(state, buffers, round_idx, dp_keys=None):
        del dp_keys  # nothing leaves a client: DP is refused above
        beta = public_count(buffers)
        pooled = jax.vmap(lambda b: client.model_data(b, model.config.output_warp))(buffers)  # all tasks' data in one place

        def one_step(_, s):
            grad_sum = jax.vmap(jax.grad(pooled_log_likelihood), (0, None))(s.particles, pooled)
            scores = coordinator.meta_score(model, learner.objective, s.particles, grad_sum, beta)
            return learner.svgd.step(s, scores)

        return jax.lax.fori_loop(0, learner.num_steps(round_idx), one_step, state)

    def propose(state, buffers, keys_):
        return propose_meta_all(learner, config, state.particles, buffers, keys_)

    return Method("pacoh", init, learn, propose)


class CBOCState(NamedTuple):
    """CBOC's state: every agent's GP hyperparameters, the consensus matrix and the round's queries."""

    hyper: standard_gp.GPHyper  # stacked over agents
    weights: Array  # (N, N) W(t) of the last round
    seed: Array
    queries: Array  # (N, d) mixed points of the current round, unit box


def cboc(config: RunConfig, dim: int, schedule: str) -> Method:
    """CBOC-U / CBOC-L (Yue et al. 2025; DESIGN.md section 5).

    Each round every agent refits its own GP (the Independent baseline's GP),
    proposes ``x_hat_i = argmax EI_i``; the proposals are mixed by the consensus
    matrix, ``x_i = sum_j W_ij(t) x_hat_j``, and agent ``i`` evaluates its own
    ``f_i(x_i)``. ``schedule``: ``uniform`` or ``leader`` (:mod:`pacd_jax.consensus`).
    The proposals are made in ``learn`` (the leader schedule's ``W`` depends on
    them), with the keys ``propose`` would receive: ``(seed, "propose", i, t)``.
    """
    if schedule not in ("uniform", "leader"):
        raise ValueError(f"unknown consensus schedule {schedule!r}")
    if dp_config(config).enabled:
        raise ValueError("--dp-sigma applies to the meta-learner's gradients; CBOC exchanges proposals, not gradients")
    gp_config = standard_gp.StandardGPConfig(dim=dim, kernel=config.gp_kernel, fit_steps=config.gp_fit_steps,
                                           output_warp=config.output_warp)
    maximiser = maximiser_config(config)
    n_c = config.n_c
    name = "cboc-u" if schedule == "uniform" else "cboc-l"

    def init(seed, buffers):
        n = buffers.X.shape[0]
        dtype = buffers.X.dtype
        h = standard_gp.default_hyper(gp_config, dtype)
        hyper = jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, (n,) + a.shape), h)
        return CBOCState(hyper, consensus.averaging_matrix(n, dtype), jnp.asarray(seed, jnp.int32), jnp.zeros((n, dim), dtype))

    def learn(state, buffers, round_idx, dp_keys=None):
        del dp_keys
        n = buffers.X.shape[0]
        hyper = jax.vmap(client.fit_standard_gp, (None, 0, 0))(gp_config, state.hyper, buffers)
        keys_ = jax.vmap(lambda i: keys.client_key(state.seed, "propose", i, round_idx))(jnp.arange(n))
        x_hat, values = jax.vmap(client.propose_ei, (None, 0, 0, 0, None))(gp_config, hyper, buffers, keys_, maximiser)
        if schedule == "uniform":
            weights = consensus.uniform_matrix(round_idx, n, n_c, buffers.X.dtype)
        else:
            weights = consensus.leader_schedule(round_idx, jnp.argmax(values), n, n_c, buffers.X.dtype)
        queries = jnp.clip(consensus.mix(weights, x_hat), 0.0, 1.0)  # a convex combination; clip only round-off
        return CBOCState(hyper, weights, state.seed, queries)

    def propose(state, buffers, keys_):
        del buffers, keys_
        return state.queries

    return Method(name, init, learn, propose)


def build(config: RunConfig, dim: int) -> Method:
    """The method named by ``config.method``."""
    if config.method == "pacd":
        return pacd(config, dim)
    if config.method == "pacoh":
        return pacoh(config, dim)
    if config.method == "independent":
        return independent(config, dim)
    if config.method in ("cboc-u", "cboc-l"):
        return cboc(config, dim, "uniform" if config.method == "cboc-u" else "leader")
    raise ValueError(f"unknown method {config.method!r}")  # pragma: no cover - config validates
