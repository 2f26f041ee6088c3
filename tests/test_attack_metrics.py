"""Set-based reconstruction metrics against brute-force oracles."""

import itertools
import math

import numpy as np
import pytest

from pacd_jax import metrics


def _brute_matched_rmse(A, B):
    best = np.inf
    for perm in itertools.permutations(range(len(B))):
        best = min(best, np.mean(np.sum((A - B[list(perm)]) ** 2, axis=1)))
    return math.sqrt(best)


@pytest.mark.parametrize("seed", range(5))
def test_matched_rmse_equals_brute_force_over_permutations(seed):
    rng = np.random.default_rng(seed)
    A, B = rng.uniform(size=(6, 2)), rng.uniform(size=(6, 2))
    assert metrics.matched_rmse(A, B) == pytest.approx(_brute_matched_rmse(A, B), rel=1e-12)


def test_matched_rmse_is_order_invariant_and_zero_on_equal_sets():
    rng = np.random.default_rng(0)
    A = rng.uniform(size=(8, 3))
    assert metrics.matched_rmse(A[::-1], A) == pytest.approx(0.0, abs=1e-15)
    assert metrics.chamfer(A[rng.permutation(8)], A) == pytest.approx(0.0, abs=1e-15)


def test_chamfer_recall_precision_dispersion_by_loops():
    rng = np.random.default_rng(1)
    A, B = rng.uniform(size=(5, 2)), rng.uniform(size=(7, 2))
    d = lambda a, b: math.dist(a, b)
    ab = np.mean([min(d(a, b) for b in B) for a in A])
    ba = np.mean([min(d(a, b) for a in A) for b in B])
    assert metrics.chamfer(A, B) == pytest.approx(0.5 * (ab + ba), rel=1e-12)
    r = 0.2
    assert metrics.recall_at(A, B, r) == pytest.approx(np.mean([min(d(a, b) for a in A) <= r for b in B]))
    assert metrics.precision_at(A, B, r) == pytest.approx(np.mean([min(d(a, b) for b in B) <= r for a in A]))
    pairs = [d(A[i], A[j]) for i in range(5) for j in range(i + 1, 5)]
    assert metrics.dispersion(A) == pytest.approx(np.mean(pairs), rel=1e-12)
    assert metrics.dispersion(A[:1]) == 0.0


def test_radius_is_five_percent_of_the_diagonal():
    assert metrics.default_radius(2) == pytest.approx(0.05 * math.sqrt(2))
    s = metrics.reconstruction_scores(np.zeros((2, 2)), np.zeros((2, 2)))
    assert s["r"] == pytest.approx(0.05 * math.sqrt(2)) and s["recall_at_r"] == 1.0


def test_uniform_baseline_matches_its_expectation_on_one_point():
    # one true point at the centre of [0,1]^2: E ||U - c|| = 0.3826 (closed form)
    true = np.array([[0.5, 0.5]])
    base = metrics.no_information_baseline(true, np.random.default_rng(0), "uniform", draws=4000)
    expected = (math.sqrt(2) + math.log(1 + math.sqrt(2))) / 6
    assert base["matched_rmse"] == pytest.approx(expected, rel=0.03)  # one point: RMSE = distance
    assert base["chamfer"] == pytest.approx(expected, rel=0.03)


def test_bad_point_sets_are_rejected():
    with pytest.raises(ValueError, match="dimension"):
        metrics.chamfer(np.zeros((2, 2)), np.zeros((2, 3)))
    with pytest.raises(ValueError, match="non-empty"):
        metrics.dispersion(np.zeros((0, 2)))
