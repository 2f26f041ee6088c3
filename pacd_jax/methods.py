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

from pacd_jax import client, coordinator, keys, standard_gp
from pacd_jax.acquisition import MaximiserConfig
from pacd_jax.client import ClientBuffer
from pacd_jax.config import RunConfig
from pacd_jax.gp import MetaGP, MetaGPConfig
from pacd_jax.svgd import SVGDState, svgd

Array = jax.Array


class Method(NamedTuple):
    """``init(seed, buffers) -> state``, ``learn(state, buffers, t) -> state``,
    ``propose(state, buffers, keys) -> (N, d)``. ``buffers`` and the per-client
    proposal ``keys`` are stacked over clients."""

    name: str
    init: Callable[[Array, ClientBuffer], Any]
    learn: Callable[[Any, ClientBuffer, Array], Any]
    propose: Callable[[Any, ClientBuffer, Array], Array]


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

    def init(seed, buffers):
        return learner.init(seed, buffers.X.dtype)

    def learn(state, buffers, round_idx):
        beta = buffers.count[0].astype(buffers.X.dtype)  # beta = m, the same for every client

        def one_step(j, s):
            # every client computes its K gradients on its own data (eq. 6) ...
            grads = jax.vmap(client.local_gradients, (None, None, 0))(learner.model, s.particles, buffers)
            coordinator.validate_gradients(grads, buffers.X.shape[0], s.particles, round_idx, j)
            # ... and the coordinator aggregates them and moves the particles (eq. 7)
            return learner.coordinator_update(s, grads, beta)

        return jax.lax.fori_loop(0, learner.num_steps(round_idx), one_step, state)

    def propose(state, buffers, keys_):
        return propose_meta_all(learner, config, state.particles, buffers, keys_)

    return Method(config.method, init, learn, propose)


def propose_meta_all(learner: MetaLearner, config: RunConfig, particles: Array, buffers: ClientBuffer, keys_: Array) -> Array:
    """Every client's UCB query on the K-particle mixture (clients stacked; eq. 8-10)."""
    return jax.vmap(client.propose_meta, (None, None, 0, 0, None, None))(
        learner.model, particles, buffers, keys_, config.kappa, maximiser_config(config)
    )


def independent(config: RunConfig, dim: int) -> Method:
    """Independent BO: each client fits its own standard GP (DESIGN.md section 5)."""
    gp_config = standard_gp.StandardGPConfig(dim=dim, kernel=config.gp_kernel, fit_steps=config.gp_fit_steps)
    maximiser = maximiser_config(config)

    def init(seed, buffers):
        del seed
        n = buffers.X.shape[0]
        h = standard_gp.default_hyper(gp_config, buffers.X.dtype)
        return jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, (n,) + a.shape), h)

    def learn(state, buffers, round_idx):
        del round_idx
        return jax.vmap(client.fit_standard_gp, (None, 0, 0))(gp_config, state, buffers)

    def propose(state, buffers, keys_):
        return jax.vmap(client.propose_standard, (None, 0, 0, 0, None, None))(
            gp_config, state, buffers, keys_, config.kappa, maximiser
        )

    return Method("independent", init, learn, propose)


def build(config: RunConfig, dim: int) -> Method:
    """The method named by ``config.method``."""
    if config.method in ("pacd", "pacoh"):
        return pacd(config, dim)
    if config.method == "independent":
        return independent(config, dim)
    raise ValueError(f"unknown method {config.method!r}")  # pragma: no cover - config validates
