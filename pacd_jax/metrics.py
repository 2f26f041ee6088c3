"""Optimisation metrics: normalised regret curves and early AUC (DESIGN.md section 6, paper Table I)."""

from __future__ import annotations

import math

import numpy as np


def normalised_regret(f: np.ndarray, f_star: float, init_points: int) -> np.ndarray:
    """Normalised simple regret after the initial design and after each query.

    ``r(t) = (f(x+_t) - f*) / (f(x+_0) - f*)`` where ``x+_t`` is the best point
    so far by noise-free value and ``x+_0`` the best initial-design point.

    Args:
        f: ``(..., m0 + T)`` noise-free values in evaluation order, initial design first.
        f_star: the client's optimum value.
        init_points: ``m0``.

    Returns:
        ``(..., T + 1)`` with ``r(0) = 1``. Values below ``f*`` by round-off
        (float32 evaluations of the optimum) count as regret 0; if the initial
        design already attains ``f*`` the curve is 0 throughout.
    """
    f = np.asarray(f, np.float64)
    if init_points < 1 or init_points > f.shape[-1]:
        raise ValueError(f"init_points must be in [1, {f.shape[-1]}], got {init_points}")
    best = np.minimum.accumulate(f, axis=-1)[..., init_points - 1 :]
    gap = np.maximum(best - f_star, 0.0)
    denom = gap[..., :1]
    safe = np.where(denom > 0, denom, 1.0)
    return np.where(denom > 0, gap / safe, 0.0)


def auc_window(iters: int) -> int:
    """Number of rounds in the early window: ``ceil(0.1 T)``."""
    return max(1, math.ceil(0.1 * iters))


def early_auc(regret: np.ndarray) -> np.ndarray:
    """Mean normalised regret over the first ``ceil(0.1 T)`` queries (paper's AUC).

    ``r(0) = 1`` is excluded: the window is ``r(1) .. r(ceil(0.1 T))``.

    Args:
        regret: ``(..., T + 1)`` from :func:`normalised_regret`.
    """
    regret = np.asarray(regret, np.float64)
    iters = regret.shape[-1] - 1
    if iters < 1:
        raise ValueError("a regret curve needs at least one query")
    return regret[..., 1 : 1 + auc_window(iters)].mean(axis=-1)


def summarise(final_by_seed: np.ndarray, auc_by_seed: np.ndarray) -> dict:
    """Mean and (population) std over seeds of the client-averaged metrics."""
    final_by_seed = np.asarray(final_by_seed, np.float64)
    auc_by_seed = np.asarray(auc_by_seed, np.float64)
    return {
        "final_regret_mean": float(final_by_seed.mean()),
        "final_regret_std": float(final_by_seed.std()),
        "auc_mean": float(auc_by_seed.mean()),
        "auc_std": float(auc_by_seed.std()),
    }


# -- reconstruction metrics of the gradient-leakage attack (DESIGN.md section 7) --------
#
# The GMLL is invariant to the order of the points, so a reconstruction is
# scored as a set against the true points. Distances are Euclidean in the
# unit box [0, 1]^d.

#: recall@r and precision@r use r = RADIUS_FRACTION * (box diagonal) = 0.05 sqrt(d).
RADIUS_FRACTION = 0.05


def _points(P) -> np.ndarray:
    P = np.asarray(P, np.float64)
    if P.ndim != 2 or P.shape[0] == 0:
        raise ValueError(f"expected a non-empty (n, d) point set, got shape {P.shape}")
    return P


def _distances(A, B) -> np.ndarray:
    A, B = _points(A), _points(B)
    if A.shape[1] != B.shape[1]:
        raise ValueError(f"point sets of different dimension: {A.shape[1]} and {B.shape[1]}")
    return np.sqrt(np.sum((A[:, None, :] - B[None, :, :]) ** 2, axis=-1))


def default_radius(dim: int) -> float:
    """``r = 0.05 * sqrt(d)``: 5 % of the unit box's diagonal."""
    return RADIUS_FRACTION * math.sqrt(dim)


def dispersion(P) -> float:
    """Mean pairwise distance of a point set (the paper's dispersion, Figure 4); 0 for one point."""
    P = _points(P)
    n = P.shape[0]
    if n < 2:
        return 0.0
    D = _distances(P, P)
    return float(D[np.triu_indices(n, 1)].mean())


def matched_rmse(recovered, true) -> float:
    """RMSE over the minimum-cost one-to-one matching of the two sets (Hungarian).

    ``sqrt(mean_j ||x^_pi(j) - x_j||^2)`` with ``pi`` minimising the summed
    squared distance (:func:`scipy.optimize.linear_sum_assignment`). With sets
    of different sizes only ``min(n, m)`` pairs are matched.
    """
    from scipy.optimize import linear_sum_assignment

    D2 = _distances(recovered, true) ** 2
    rows, cols = linear_sum_assignment(D2)
    return float(np.sqrt(D2[rows, cols].mean()))


def chamfer(recovered, true) -> float:
    """Symmetric Chamfer distance: ``1/2 (mean_a min_b d(a,b) + mean_b min_a d(a,b))``."""
    D = _distances(recovered, true)
    return float(0.5 * (D.min(axis=1).mean() + D.min(axis=0).mean()))


def recall_at(recovered, true, r: float) -> float:
    """Share of true points with a recovered point within distance ``r``."""
    return float((_distances(recovered, true).min(axis=0) <= r).mean())


def precision_at(recovered, true, r: float) -> float:
    """Share of recovered points with a true point within distance ``r``."""
    return float((_distances(recovered, true).min(axis=1) <= r).mean())


def reconstruction_scores(recovered, true, r: float | None = None) -> dict:
    """All set scores of a reconstruction against the true points (unit box)."""
    true = _points(true)
    r = default_radius(true.shape[1]) if r is None else float(r)
    return {
        "dispersion": dispersion(recovered),
        "matched_rmse": matched_rmse(recovered, true),
        "chamfer": chamfer(recovered, true),
        "recall_at_r": recall_at(recovered, true, r),
        "precision_at_r": precision_at(recovered, true, r),
        "r": r,
    }


def no_information_baseline(true, rng: np.random.Generator, kind: str = "uniform", draws: int = 20, r: float | None = None) -> dict:
    """Scores of guesses made without the message, averaged over ``draws`` guesses.

    Each guess has as many points as the true set, drawn ``uniform`` on the
    unit box, or from the attack's ``init`` distribution (N(0, I) in model
    space) clipped to the box as the attack's output is.
    """
    true = _points(true)
    n, d = true.shape
    keys_ = ("dispersion", "matched_rmse", "chamfer", "recall_at_r", "precision_at_r")
    acc = {k: 0.0 for k in keys_}
    for _ in range(draws):
        if kind == "uniform":
            guess = rng.uniform(size=(n, d))
        elif kind == "init":
            guess = np.clip(rng.standard_normal((n, d)), 0.0, 1.0)
        else:
            raise ValueError(f"unknown baseline kind {kind!r}; choose uniform or init")
        s = reconstruction_scores(guess, true, r)
        for k in keys_:
            acc[k] += s[k] / draws
    return acc
