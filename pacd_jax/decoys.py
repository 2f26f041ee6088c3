"""The decoy band: a no-information reference built from the attacker's own output.

A uniform guess is one no-information reconstruction, but not the one a given
attacker produces when the message tells it nothing: an attack fitted to pure
DP noise still has the attacker's habits (points on the box boundary, tight
clusters), and the truth it is scored against has BO's (clusters near the
optimum). Either can put a noise fit *above* the uniform-guess band, which
says nothing about leakage.

The decoy test asks the question leakage is about: is the reconstruction
closer to the target's queries than to the queries of a client it knows
nothing about? Decoys are the target client's queries at the same round in
runs with the same options and other seeds (other tasks of the same family,
other DP noise): draws from the attacker's prior over the truth, independent
of the intercepted message. Under the null hypothesis "the reconstruction
carries no information about this client's data", the matched RMSE to the
true queries is exchangeable with the matched RMSEs to the decoys, so

* the band is the ``q`` quantile range of the matched RMSE from the
  reconstruction to each decoy, and
* the rank ``p = (1 + #{decoys at least as close}) / (D + 1)`` is a valid
  one-sided p-value for "closer than chance" (leakage).

A reconstruction below the band is closer to its own target than to 95 % of
the decoys: it leaks. With D decoys a no-information reconstruction still
falls outside a 5-95 % band one time in ten, on either side.
"""

from __future__ import annotations

import numpy as np

#: decoy seeds are ``DECOY_SEED_BASE + j``: far from the seeds the sweeps use.
DECOY_SEED_BASE = 1_000_000


def decoy_seeds(count: int) -> list[int]:
    """The ``count`` decoy seeds (``DECOY_SEED_BASE``, ``DECOY_SEED_BASE + 1``, ...)."""
    return [DECOY_SEED_BASE + j for j in range(int(count))]


def target_trajectories(config, target: int, seeds, task_factory=None, on_round=None) -> list[np.ndarray]:
    """The ``target`` client's queries of a plain run of ``config`` for each of ``seeds``, in the unit box.

    One ``(m0 + T, d)`` array per seed, in query order (the first ``m`` rows
    are the client's data at the round where it holds ``m`` points). The runs
    are the same as ``pacd-bo run`` with those seeds (vectorised over seeds
    where the family allows), so a decoy is drawn exactly as the attacked
    run's own data was.
    """
    from pacd_jax import experiment

    config = config.replace(seeds=tuple(int(s) for s in seeds))
    doc = experiment.run(config, task_factory, on_round=on_round)
    fams = experiment.build_families(config, task_factory)
    out = []
    for fam, entry in zip(fams, doc["results"]):
        bounds = np.asarray(fam.bounds, np.float64)
        X = np.asarray(entry["clients"][int(target)]["X"], np.float64)
        out.append((X - bounds[:, 0]) / (bounds[:, 1] - bounds[:, 0]))
    return out


def band(X_rec, rmse: float | None, decoys, m: int, q=(0.05, 0.95)) -> dict:
    """Decoy band, rank p-value and verdict of one attacked round.

    Args:
        X_rec: ``(n, d)`` the reconstruction (unit box); None: the attack failed.
        rmse: its matched RMSE to the true queries (None: the attack failed).
        decoys: the decoy trajectories (:func:`target_trajectories`); the first
            ``m`` rows of each are compared.
        m: the target's number of points at the attacked round.

    Returns:
        ``{"matched_rmse": [lo, hi], "p_value", "p_above", "verdict", "draws"}``
        (``p_above``: the same rank p-value for "at least as far"); the
        verdict is ``below`` (leakage), ``within``, ``above`` or ``error``
        (no reconstruction: band and p-value None; no score: p-value None).
    """
    from pacd_jax import metrics

    if X_rec is None:  # the attack produced nothing to compare
        return {"matched_rmse": [None, None], "p_value": None, "verdict": "error", "draws": len(decoys)}
    X_rec = np.asarray(X_rec, np.float64)
    null = np.asarray([metrics.matched_rmse(X_rec, np.asarray(D, np.float64)[:m]) for D in decoys])
    lo, hi = (float(v) for v in np.quantile(null, q))
    if rmse is None:
        return {"matched_rmse": [lo, hi], "p_value": None, "verdict": "error", "draws": int(null.size)}
    p = (1.0 + float(np.sum(null <= rmse))) / (null.size + 1.0)
    p_above = (1.0 + float(np.sum(null >= rmse))) / (null.size + 1.0)
    verdict = "below" if rmse < lo else ("within" if rmse <= hi else "above")
    return {"matched_rmse": [lo, hi], "p_value": p, "p_above": p_above, "verdict": verdict, "draws": int(null.size)}
