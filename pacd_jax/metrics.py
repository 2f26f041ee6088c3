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
