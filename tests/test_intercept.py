"""Interception by the coordinator: the record is the target's message as sent,
holds nothing but public facts and the message, and does not change the run."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pacd_jax import attack, client, experiment, intercept, loop, methods
from pacd_jax.client import ClientBuffer

from helpers import small_config


@pytest.fixture(scope="module")
def intercepted():
    config = small_config(benchmark="branin", num_clients=3, iters=4)
    spec = intercept.InterceptSpec(client=1, rounds=(0, 2, 3))
    records, truths, results = intercept.run_vmap(config, spec)
    return config, spec, records, truths, results


def test_the_record_is_the_targets_message_and_nothing_else(intercepted, tmp_path):
    config, spec, records, truths, results = intercepted
    assert [r.round for r in records] == [0, 2, 3]
    model = methods.meta_gp(config, 2)
    for rec, truth in zip(records, truths):
        assert set(rec._fields) == set(intercept.RECORD_FIELDS) == {"round", "client", "m", "particles", "grads", "bounds"}
        assert rec.client == 1 and rec.m == 5 + rec.round == truth.X.shape[0]
        assert rec.particles.shape == rec.grads.shape == (config.num_particles, model.num_params)
        # the message equals the GMLL gradient on the target's own data at those particles (eq. 6),
        # here by autodiff (MetaGP.gmll_grad), not the hand-written backward pass that sent it
        m = rec.m
        buf = ClientBuffer(jnp.asarray(truth.X), jnp.asarray(results.y[0, 1, :m]), jnp.asarray(m, jnp.int32))
        sent = jax.jit(jax.vmap(model.gmll_grad, (0, None)))(jnp.asarray(rec.particles), client.model_data(buf))
        np.testing.assert_allclose(rec.grads, np.asarray(sent), rtol=2e-3, atol=2e-4)
        # truth is the buffer in model space
        lo, hi = rec.bounds[:, 0], rec.bounds[:, 1]
        np.testing.assert_allclose(lo + truth.X * (hi - lo), results.X[0, 1, :m], rtol=1e-5, atol=1e-5)
    path = tmp_path / "intercept.npz"
    intercept.save_records(path, records)
    with np.load(path) as z:
        assert sorted(z.files) == sorted(intercept.RECORD_FIELDS)  # no X, no y
    back = intercept.load_records(path)
    np.testing.assert_array_equal(back[1].grads, records[1].grads)


def test_interception_does_not_change_the_run(intercepted):
    config, spec, records, truths, results = intercepted
    doc = experiment.run(config)
    X = np.asarray(doc["results"][0]["clients"][1]["X"])
    # same queries; float32 round-off differs between the seed-vmapped and the unbatched compile
    np.testing.assert_allclose(results.X[0, 1], X, rtol=1e-5, atol=1e-4)


def test_bad_spec_is_rejected():
    config = small_config(iters=4)
    with pytest.raises(ValueError, match="rounds must be in"):
        intercept.InterceptSpec(0, (4,)).check(config)
    with pytest.raises(ValueError, match="client must be"):
        intercept.InterceptSpec(9, (1,)).check(config)
    with pytest.raises(ValueError, match="sends gradients"):
        intercept.InterceptSpec(0, (1,)).check(config.replace(method="independent"))
    # a round without SVGD steps sends no message: nothing to record (both backends call check)
    with pytest.raises(ValueError, match=r"rounds \[1, 3\] have no SVGD step"):
        intercept.InterceptSpec(0, (0, 1, 3)).check(config.replace(svgd_steps=0))
    with pytest.raises(ValueError, match=r"rounds \[0\] have no SVGD step"):
        intercept.InterceptSpec(0, (0, 1)).check(config.replace(svgd_steps_init=0))
    intercept.InterceptSpec(0, (0,)).check(config.replace(svgd_steps=0))  # round 0 has its own steps
