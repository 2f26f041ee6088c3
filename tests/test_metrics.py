"""Normalised regret and early AUC against hand-computed curves."""

import numpy as np
import pytest

from pacd_jax import metrics


def test_regret_curve_by_hand():
    f_star = 1.0
    # initial design (m0 = 3): best 5.0; then queries 6, 3, 4, 1.5, 1.0
    f = np.array([9.0, 5.0, 7.0, 6.0, 3.0, 4.0, 1.5, 1.0])
    r = metrics.normalised_regret(f, f_star, 3)
    expected = np.array([4.0, 4.0, 2.0, 2.0, 0.5, 0.0]) / 4.0
    np.testing.assert_allclose(r, expected)
    assert r[0] == 1.0 and r.shape == (6,)


def test_regret_batched_and_clipped():
    f = np.array([[2.0, 3.0, 0.999999], [4.0, 4.0, 4.0]])
    r = metrics.normalised_regret(f, 1.0, 1)
    np.testing.assert_allclose(r[0], [1.0, 1.0, 0.0])  # below f* by round-off counts as 0
    np.testing.assert_allclose(r[1], [1.0, 1.0, 1.0])


def test_regret_when_initial_design_hits_optimum():
    r = metrics.normalised_regret(np.array([1.0, 2.0, 3.0]), 1.0, 2)
    np.testing.assert_allclose(r, [0.0, 0.0])


def test_auc_window_excludes_r0():
    T = 25  # window ceil(2.5) = 3
    r = np.concatenate([[1.0], np.arange(1, T + 1) / 100.0])
    assert metrics.auc_window(T) == 3
    np.testing.assert_allclose(metrics.early_auc(r), np.mean([0.01, 0.02, 0.03]))
    assert metrics.auc_window(100) == 10 and metrics.auc_window(1) == 1


def test_summary_over_seeds():
    s = metrics.summarise(np.array([0.1, 0.3]), np.array([0.5, 0.7]))
    assert s == pytest.approx({"final_regret_mean": 0.2, "final_regret_std": 0.1, "auc_mean": 0.6, "auc_std": 0.1})


def test_bad_init_points():
    with pytest.raises(ValueError, match="init_points"):
        metrics.normalised_regret(np.ones(3), 0.0, 0)
