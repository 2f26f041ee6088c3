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
