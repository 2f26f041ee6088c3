"""CBOC-U / CBOC-L and centralised PACOH-BO (DESIGN.md section 5)."""

import jax
import jax.numpy as jnp
import numpy as np

from helpers import small_config
from pacd_jax import client, consensus, experiment, keys, loop, methods, standard_gp, tasks


def _round0(config):
    fam = tasks.make(config.benchmark, num_clients=config.num_clients, seed=config.seeds[0])
    problem, params = loop.problem_from_family(fam, config.iters, config.init_points, config.noise_std)
    method = methods.build(config, problem.dim)
    seed = jnp.asarray(config.seeds[0], jnp.int32)
    state = loop.initial_state(problem, method, seed, params, jnp.float32)
    return problem, method, state, seed


def test_cboc_uniform_round0_everyone_queries_the_average_proposal():
    config = small_config(method="cboc-u", benchmark="branin", iters=4)
    problem, method, state, seed = _round0(config)
    learned = jax.jit(method.learn)(state.model, state.buffers, jnp.asarray(0, jnp.int32))
    x = method.propose(learned, state.buffers, None)
    # W(0) = (1/N) 11^T: every agent evaluates the mean of the N EI proposals
    np.testing.assert_allclose(np.asarray(x), np.broadcast_to(np.asarray(x[0]), x.shape), atol=1e-6)
    gp_config = standard_gp.StandardGPConfig(dim=problem.dim, kernel=config.gp_kernel, fit_steps=config.gp_fit_steps)
    keys_ = jax.vmap(lambda i: keys.client_key(seed, "propose", i, 0))(jnp.arange(config.num_clients))
    x_hat, _ = jax.vmap(client.propose_ei, (None, 0, 0, 0, None))(
        gp_config, learned.hyper, state.buffers, keys_, methods.maximiser_config(config)
    )
    np.testing.assert_allclose(np.asarray(x[0]), np.asarray(x_hat).mean(axis=0), atol=1e-5)
    assert not np.allclose(np.asarray(x_hat[0]), np.asarray(x_hat[1]), atol=1e-3)  # the proposals did differ


def test_cboc_leader_moves_weight_to_the_best_ei_agent():
    config = small_config(method="cboc-l", benchmark="branin", iters=4, consensus_steps=100)  # kappa = 1/500: the tilt, not the reset
    problem, method, state, seed = _round0(config)
    learned = jax.jit(method.learn)(state.model, state.buffers, jnp.asarray(0, jnp.int32))
    gp_config = standard_gp.StandardGPConfig(dim=problem.dim, kernel=config.gp_kernel, fit_steps=config.gp_fit_steps)
    keys_ = jax.vmap(lambda i: keys.client_key(seed, "propose", i, 0))(jnp.arange(config.num_clients))
    x_hat, values = jax.vmap(client.propose_ei, (None, 0, 0, 0, None))(
        gp_config, learned.hyper, state.buffers, keys_, methods.maximiser_config(config)
    )
    expected_w = consensus.leader_matrix(consensus.averaging_matrix(5), int(np.argmax(values)), 100)
    np.testing.assert_allclose(np.asarray(learned.weights), np.asarray(expected_w), atol=1e-6)
    np.testing.assert_allclose(np.asarray(learned.queries), np.asarray(expected_w @ x_hat), atol=1e-5)
    # round 1: the rule tilts the uniform schedule's W_U(1), not round 0's leader matrix
    second = jax.jit(method.learn)(learned, state.buffers, jnp.asarray(1, jnp.int32))
    keys_ = jax.vmap(lambda i: keys.client_key(seed, "propose", i, 1))(jnp.arange(config.num_clients))
    x_hat, values = jax.vmap(client.propose_ei, (None, 0, 0, 0, None))(
        gp_config, second.hyper, state.buffers, keys_, methods.maximiser_config(config)
    )
    leader = int(np.argmax(values))
    expected_w = consensus.leader_matrix(consensus.uniform_matrix(1, 5, 100), leader, 100)
    np.testing.assert_allclose(np.asarray(second.weights), np.asarray(expected_w), atol=1e-6)
    np.testing.assert_allclose(np.asarray(second.queries), np.clip(np.asarray(expected_w @ x_hat), 0, 1), atol=1e-5)


def test_cboc_runs_end_to_end():
    for method in ("cboc-u", "cboc-l"):
        doc = experiment.run(small_config(method=method, benchmark="sinusoid", seeds=(0, 1), iters=2))
        assert doc["method"] == method and doc["config"]["consensus_steps"] is None
        for r in doc["results"]:
            for c in r["clients"]:
                assert len(c["regret"]) == 3 and c["regret"][0] == 1.0
                assert np.all(np.diff(c["regret"]) <= 0)
                X = np.asarray(c["X"])
                assert np.all((X >= 0.5) & (X <= 2.5))


def test_pacoh_equals_pacd_to_round_off_in_float64():
    config = small_config(benchmark="branin", seeds=(3,), iters=3, x64=True)
    docs = {m: experiment.run(config.replace(method=m)) for m in ("pacd", "pacoh")}
    for rp, rc in zip(docs["pacd"]["results"], docs["pacoh"]["results"]):
        for cp, cc in zip(rp["clients"], rc["clients"]):
            np.testing.assert_allclose(cc["X"], cp["X"], rtol=1e-8, atol=1e-8)
            np.testing.assert_allclose(cc["regret"], cp["regret"], rtol=1e-8, atol=1e-10)


def test_pacoh_score_equals_aggregated_client_gradients():
    # one learning round on the same buffers: centralised (pooled autodiff) vs distributed (sum of messages)
    with jax.enable_x64(True):
        config = small_config(benchmark="hartmann6", seeds=(11,), iters=2, x64=True, svgd_steps_init=3)
        fam = tasks.make("hartmann6", num_clients=5, seed=11)
        problem, params = loop.problem_from_family(fam, config.iters, None, None)
        seed = jnp.asarray(11, jnp.int32)
        out = {}
        for m in ("pacd", "pacoh"):
            method = methods.build(config.replace(method=m), problem.dim)
            state = loop.initial_state(problem, method, seed, params, jnp.float64)
            out[m] = np.asarray(method.learn(state.model, state.buffers, jnp.asarray(0, jnp.int32)).particles)
        np.testing.assert_allclose(out["pacoh"], out["pacd"], rtol=1e-9, atol=1e-11)
        assert not np.allclose(out["pacd"], np.asarray(methods.build(config, problem.dim).init(seed, state.buffers).particles))


def test_a_dropped_value_does_not_change_the_data_weight():
    # beta of eq. 7 is the schedule's m0 + t (what the MPI coordinator uses), whichever client
    # dropped a bad value (on_bad_value="skip" leaves that client one row short)
    from pacd_jax.config import RunConfig

    with jax.enable_x64(True):
        cfg = RunConfig(num_clients=3, num_particles=3, hidden=(4,), svgd_steps=1, svgd_steps_init=1,
                        learning_rate=0.05, x64=True)
        rng = np.random.default_rng(1)
        X, y = jnp.asarray(rng.uniform(size=(3, 9, 2))), jnp.asarray(rng.normal(size=(3, 9)))
        learner = methods.meta_learner(cfg, 2)
        # jitted once each (op by op, every primitive compiled on first use: a minute of CI)
        grads_of = jax.jit(jax.vmap(client.local_gradients, (None, None, 0)), static_argnums=0)
        update = jax.jit(learner.coordinator_update)
        learn = {m: jax.jit(methods.build(cfg.replace(method=m), 2).learn) for m in ("pacd", "pacoh")}
        for counts in ([5, 6, 6], [6, 6, 5]):
            bufs = client.ClientBuffer(X, y, jnp.asarray(counts, jnp.int32))
            state = methods.pacd(cfg, 2).init(jnp.asarray(0), bufs)
            grads = grads_of(learner.model, state.particles, bufs)
            want = {b: np.asarray(update(state, grads, jnp.asarray(b)).particles) for b in (5.0, 6.0)}
            assert np.abs(want[5.0] - want[6.0]).max() > 1e-9  # Adam mostly normalises the weight away, not quite
            for m in ("pacd", "pacoh"):
                got = learn[m](state, bufs, jnp.asarray(0))
                np.testing.assert_allclose(np.asarray(got.particles), want[6.0], rtol=0, atol=1e-11, err_msg=f"{m} {counts}")
