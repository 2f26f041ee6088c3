"""Progressive (warm-started) DLG attack: it follows a client whose data grows by
one point per round, recovers all points on a small known case, and is not
fooled by a candidate that diverges."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from pacd_jax import attack
from pacd_jax.gp import MetaGP, MetaGPConfig
from pacd_jax.intercept import Record


def _model():
    return MetaGP(MetaGPConfig(dim=2, hidden=(4,), features=2))


def _matched_max(X, X_true):
    cost = np.linalg.norm(np.asarray(X)[:, None] - np.asarray(X_true)[None], axis=-1)
    r, c = linear_sum_assignment(cost)
    return float(np.max(cost[r, c])), r, c


def test_standardise_free_matches_the_clients_standardisation_and_is_affine_invariant():
    from pacd_jax.gp import standardise

    y = jnp.array([3.0, -1.0, 0.5, 7.0, 2.0], jnp.float32)
    ref, _, _ = standardise(y, jnp.ones(5, bool))
    np.testing.assert_allclose(np.asarray(attack.standardise_free(y)), np.asarray(ref), rtol=1e-6)
    # the round-(t+1) values from the round-t standardised ones plus one new value in round-t units
    prev = attack.standardise_free(y[:4])
    mean, std = float(jnp.mean(y[:4])), float(jnp.std(y[:4]))
    u = (y[4] - mean) / std
    np.testing.assert_allclose(np.asarray(attack.standardise_free(jnp.append(prev, u))), np.asarray(ref), rtol=1e-5, atol=1e-6)


def test_progressive_attack_recovers_a_growing_known_case():
    """3 points at round 0, one more per round for 3 rounds (one particle, float64):
    every round's reconstruction matches the truth. The from-scratch first round
    is run_attack (tested in test_attack.py); here the attacker starts with
    round 0's points (``initial``) and must find each new point and the
    re-standardised values itself."""
    with jax.enable_x64(True):
        model = _model()
        X_all = jnp.array([[0.2, 0.7], [0.8, 0.3], [0.5, 0.5], [0.35, 0.15], [0.9, 0.85], [0.62, 0.4]], jnp.float64)
        raw = jnp.array([1.0, -1.2, 0.2, 0.7, -0.4, 1.6], jnp.float64)
        records, truths = [], []
        for t, m in enumerate(range(4, 7), start=1):
            phi = model.sample_hyperprior(jax.random.key(10 + t), 1, jnp.float64)  # particles move between rounds
            y = attack.standardise_free(raw[:m])
            records.append(Record(t, 0, m, np.asarray(phi), np.asarray(attack.dummy_gradients(model, phi, X_all[:m], y)), None))
            truths.append((X_all[:m], y))
        cfg = attack.ProgressiveConfig(candidates=8, search_steps=40, search_particles=None, refine_steps=20, pad=8)
        seen = []
        initial = (X_all[:3], attack.standardise_free(raw[:3]))
        steps = attack.progressive_attack(model, records, jax.random.key(0), cfg, on_step=seen.append, initial=initial)
        assert [s.round for s in steps] == [1, 2, 3] and len(seen) == 3
        for step, (X_true, y_true) in zip(steps, truths):
            assert step.X.shape == X_true.shape and step.time_s > 0
            err, r, c = _matched_max(step.X, X_true)
            assert err < 1e-3, (step.round, err, step.loss)
            np.testing.assert_allclose(step.y[r], np.asarray(y_true)[c], atol=1e-3)
            assert step.loss < 1e-8


def test_new_point_search_never_keeps_a_diverged_candidate():
    losses = jnp.array([jnp.nan, 3.0, -jnp.inf, 1.0, jnp.inf])
    assert int(attack.best_finite(losses)) == 3
    assert int(jax.jit(attack.best_finite)(jnp.array([2.0, jnp.nan]))) == 0


def test_progressive_config_validates():
    with pytest.raises(ValueError, match="candidates"):
        attack.ProgressiveConfig(candidates=0)
    with pytest.raises(ValueError, match="local_fraction"):
        attack.ProgressiveConfig(local_fraction=1.5)
    with pytest.raises(ValueError, match="repair_passes"):
        attack.ProgressiveConfig(repair_passes=-1)
    with pytest.raises(ValueError, match="first round"):
        attack.ProgressiveConfig(first=attack.AttackConfig(cosine=True))
