"""The coordinator validates every gathered gradient (shape at trace time, finiteness at run time)."""

import jax.numpy as jnp
import numpy as np
import pytest

from helpers import offset_factory, small_config
from pacd_jax import client, coordinator, experiment


def test_first_bad_client_matches_numpy():
    rng = np.random.default_rng(0)
    for _ in range(20):
        g = rng.normal(size=(4, 3, 5)).astype(np.float32)
        bad = rng.random(4) < 0.4
        for i in np.flatnonzero(bad):
            g[i, rng.integers(3), rng.integers(5)] = rng.choice([np.nan, np.inf, -np.inf])
        expected = int(np.flatnonzero(bad)[0]) if bad.any() else -1
        assert int(coordinator.first_bad_client(jnp.asarray(g))) == expected


def test_huge_finite_gradients_are_not_flagged():
    # finite entries whose plain sum overflows to inf must still count as finite
    big = np.finfo(np.float32).max
    g = np.full((2, 3, 5), big, np.float32)
    g[1, 0, 0] = -big
    with np.errstate(over="ignore"):
        assert not np.isfinite(g.sum(axis=(1, 2), dtype=np.float32)[0])  # the plain sum would overflow
    assert int(coordinator.first_bad_client(jnp.asarray(g))) == -1
    g[1, 2, 4] = np.nan
    assert int(coordinator.first_bad_client(jnp.asarray(g))) == 1


def test_wrong_gradient_shape_is_refused():
    particles = jnp.zeros((3, 7))
    coordinator.check_gradient_shape(jnp.zeros((2, 3, 7)), 2, particles)
    with pytest.raises(coordinator.BadGradientError, match=r"shape \(2, 3, 6\), expected \(2, 3, 7\)"):
        coordinator.check_gradient_shape(jnp.zeros((2, 3, 6)), 2, particles)
    with pytest.raises(coordinator.BadGradientError, match=r"expected \(3, 3, 7\)"):
        coordinator.check_gradient_shape(jnp.zeros((2, 3, 7)), 3, particles)


def test_nan_gradient_of_one_client_stops_the_vmap_run_naming_it(monkeypatch):
    original = client.local_gradients

    def misbehaving(model, particles, buf, *dp):  # client 1 (values near 1000) sends NaN
        g = original(model, particles, buf, *dp)
        return jnp.where(jnp.max(jnp.where(buf.mask, buf.y, -jnp.inf)) > 500.0, jnp.nan, g)

    monkeypatch.setattr(client, "local_gradients", misbehaving)
    with pytest.raises(coordinator.BadGradientError, match=r"^client 1 sent a non-finite gradient at round 0, SVGD step 0;"):
        experiment.run(small_config(num_clients=3, iters=2), offset_factory)
    # a well-behaved run records nothing
    monkeypatch.setattr(client, "local_gradients", original)
    doc = experiment.run(small_config(num_clients=3, iters=1), offset_factory)
    assert np.isfinite(doc["summary"]["final_regret_mean"])


def test_each_run_has_its_own_bad_gradient_log():
    """A record in one log (one run) is raised there, once, and never by another run's log."""
    import jax

    first, second = coordinator.BadGradientLog(), coordinator.BadGradientLog()

    @jax.jit
    def round_with(grads):
        bad = coordinator.validate_gradients(grads, 3, jnp.zeros((2, 4)), coordinator.no_bad_gradient(), jnp.asarray(7))
        first.report(bad, jnp.asarray(5))
        clean = coordinator.validate_gradients(jnp.zeros((3, 2, 4)), 3, jnp.zeros((2, 4)), coordinator.no_bad_gradient(), 0)
        second.report(clean, jnp.asarray(5))
        return bad

    grads = jnp.zeros((3, 2, 4)).at[2, 1, 3].set(jnp.nan)
    np.testing.assert_array_equal(np.asarray(round_with(grads)), [2, 7])
    jax.effects_barrier()
    second.raise_first([10, 11, 12])  # nothing recorded there
    with pytest.raises(coordinator.BadGradientError, match=r"^client 12 sent a non-finite gradient at round 5, SVGD step 7;"):
        first.raise_first([10, 11, 12])
    first.raise_first([10, 11, 12])  # cleared
