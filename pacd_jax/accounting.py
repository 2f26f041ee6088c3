"""Privacy accounting of a PACD-BO run with Google's ``dp-accounting`` (DESIGN.md section 7).

Each SVGD step a client releases ``K`` Gaussian mechanisms (one per particle,
eq. 13) with noise multiplier ``z = sigma`` (the sensitivity ``Delta = 2C`` is
already inside the noise std ``sigma * Delta``). A run of ``T`` rounds with
``S`` steps per round releases ``K * total_steps`` of them, composed as
``SelfComposedDpEvent(GaussianDpEvent(sigma), K * total_steps)`` under the
add-or-remove-one neighbouring relation. Both accountants are offered:

* PLD (privacy loss distributions; tight), with
  ``value_discretization_interval = max(1e-4, 1e-4 * n / sigma^2)`` so that
  long runs do not run out of memory (``n`` the number of compositions);
* RDP (Renyi DP; an upper bound, a little looser).

Gaussian mechanisms compose exactly as one with ``sigma / sqrt(n)``
(mu-GDP, mu = sqrt(n) / sigma), whose (epsilon, delta) curve is the analytic
``delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)``
(Balle & Wang 2018; Dong, Roth & Su 2019); :func:`gdp_epsilon` solves it and the
tests check both accountants against it.

The guarantee is per client and per data point of that client (record-level
DP of each client's released gradients); the coordinator's SVGD update and
everything downstream are post-processing.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from scipy import optimize, special

ACCOUNTANTS = ("pld", "rdp", "gdp")

#: Above this PLD grid step the library's PLD overflows (exp of the step) or is
#: needlessly coarse; epsilon is then astronomically large (mu = sqrt(n)/sigma
#: in the hundreds) and :func:`pld_or_exact` uses the exact mu-GDP value instead.
MAX_PLD_INTERVAL = 50.0


class RunPrivacy(NamedTuple):
    """The releases of one client over a run: ``compositions = particles * total_steps``."""

    sigma: float
    particles: int
    total_steps: int

    @property
    def compositions(self) -> int:
        return self.particles * self.total_steps


def total_steps(steps_per_round: int, rounds: int, steps_init: int | None = None) -> int:
    """SVGD steps of a run: ``S * T``, or ``steps_init + (T - 1) * S`` when round 0 differs."""
    if steps_init is None:
        return int(steps_per_round) * int(rounds)
    return int(steps_init) + (int(rounds) - 1) * int(steps_per_round)


#: The noise multipliers the accountants are asked about (the run's ``dp_sigma`` range when DP is on).
SIGMA_RANGE = (1e-6, 1e6)


def _check(sigma: float, compositions: int, delta: float) -> None:
    if not (isinstance(sigma, (int, float)) and math.isfinite(sigma) and sigma > 0):
        raise ValueError(f"sigma must be a positive finite number, got {sigma!r}")
    if not SIGMA_RANGE[0] <= sigma <= SIGMA_RANGE[1]:
        raise ValueError(f"sigma must be in [{SIGMA_RANGE[0]:g}, {SIGMA_RANGE[1]:g}], got {sigma!r}")
    if not (isinstance(compositions, (int, np.integer)) and compositions >= 1):
        raise ValueError(f"the number of releases must be a positive integer, got {compositions!r}")
    if not (0 < delta < 1):
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")


def pld_discretisation(sigma: float, compositions: int) -> float:
    """The PLD value discretisation interval of DESIGN.md section 7."""
    return max(1e-4, 1e-4 * compositions / sigma**2)


def epsilon(sigma: float, compositions: int, delta: float, accountant: str = "pld") -> float:
    """epsilon at ``delta`` of ``compositions`` Gaussian mechanisms with noise multiplier ``sigma``.

    ``accountant``: ``pld`` or ``rdp`` (dp-accounting), or ``gdp`` (the closed form, :func:`gdp_epsilon`).
    """
    import dp_accounting
    from dp_accounting import pld, rdp

    _check(sigma, compositions, delta)
    if accountant == "gdp":
        return gdp_epsilon(sigma, compositions, delta)
    if accountant == "pld" and pld_discretisation(sigma, compositions) > MAX_PLD_INTERVAL:
        raise ValueError(
            f"PLD grid step {pld_discretisation(sigma, compositions):.3g} too coarse for sigma={sigma} and "
            f"{compositions} releases (epsilon is astronomically large); use the closed form (accountant 'gdp')"
        )
    relation = dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
    event = dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(noise_multiplier=float(sigma)), int(compositions))
    if accountant == "pld":
        acc = pld.PLDAccountant(relation, value_discretization_interval=pld_discretisation(sigma, compositions))
    elif accountant == "rdp":
        acc = rdp.RdpAccountant(neighboring_relation=relation)
    else:
        raise ValueError(f"unknown accountant {accountant!r}; choose one of {', '.join(ACCOUNTANTS)}")
    acc.compose(event)
    return float(acc.get_epsilon(float(delta)))


def pld_or_exact(sigma: float, compositions: int, delta: float) -> tuple[float, str]:
    """``(epsilon, accountant)``: PLD, or the exact mu-GDP value where the PLD grid would be too coarse."""
    _check(sigma, compositions, delta)
    if pld_discretisation(sigma, compositions) > MAX_PLD_INTERVAL:
        return gdp_epsilon(sigma, compositions, delta), "gdp"
    return epsilon(sigma, compositions, delta, "pld"), "pld"


def run_epsilon(privacy: RunPrivacy, delta: float, accountant: str = "pld") -> float:
    """epsilon at ``delta`` of one client over a whole run."""
    return epsilon(privacy.sigma, privacy.compositions, delta, accountant)


def gdp_delta(eps: float, mu: float) -> float:
    """The analytic delta(eps) of mu-GDP: ``Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)``."""
    a = special.log_ndtr(-eps / mu + mu / 2)
    b = eps + special.log_ndtr(-eps / mu - mu / 2)
    return float(np.exp(a) * -np.expm1(b - a))  # e^a - e^b, accurate when b ~ a


def gdp_epsilon(sigma: float, compositions: int, delta: float) -> float:
    """Closed-form epsilon(delta) of ``compositions`` Gaussian mechanisms (mu = sqrt(n) / sigma)."""
    _check(sigma, compositions, delta)
    mu = math.sqrt(compositions) / sigma
    if gdp_delta(0.0, mu) <= delta:
        return 0.0
    hi = 1.0
    while gdp_delta(hi, mu) > delta:
        hi *= 2
    return float(optimize.brentq(lambda e: gdp_delta(e, mu) - delta, 0.0, hi, xtol=1e-12, rtol=1e-12))


def sigma_for_epsilon(
    target: float, compositions: int, delta: float, accountant: str = "pld", rel_tol: float = 1e-3
) -> float:
    """The smallest sigma whose run epsilon is at most ``target`` (bisection; epsilon decreases in sigma).

    Returns a sigma with ``epsilon(sigma) <= target`` within ``rel_tol`` of the boundary. With
    ``accountant="pld"``, sigmas whose PLD grid would be too coarse are judged by the exact mu-GDP
    value (:func:`pld_or_exact`), so small targets and short runs bracket like any other.
    """
    if not (math.isfinite(target) and target > 0):
        raise ValueError(f"target epsilon must be a positive finite number, got {target!r}")
    _check(1.0, compositions, delta)

    def eps(sigma: float) -> float:
        if accountant == "pld":
            return pld_or_exact(sigma, compositions, delta)[0]
        return epsilon(sigma, compositions, delta, accountant)

    # bracket the boundary from sigma = 1 outwards: eps(lo) > target >= eps(hi)
    lo = hi = 1.0
    while eps(hi) > target:
        hi *= 2
        if hi > SIGMA_RANGE[1]:
            raise ValueError(f"no sigma up to {SIGMA_RANGE[1]:g} reaches epsilon {target} at delta {delta}")
    while eps(lo) <= target:
        if 0.5 * lo < SIGMA_RANGE[0]:  # a target this large is met by the smallest sigma accounted for
            return lo
        lo *= 0.5
        hi = min(hi, 2 * lo)
    while (hi - lo) / hi > rel_tol:
        mid = 0.5 * (lo + hi)
        if eps(mid) > target:
            lo = mid
        else:
            hi = mid
    return hi


def run_record(sigma: float, clip: float, particles: int, steps: int, delta: float = 1e-5) -> dict:
    """The ``run.json`` ``epsilon`` entry (DESIGN.md section 9), plus the settings it rests on."""
    privacy = RunPrivacy(float(sigma), int(particles), int(steps))
    released = privacy.compositions > 0  # no SVGD step: nothing leaves the client
    eps, name = pld_or_exact(privacy.sigma, privacy.compositions, delta) if released else (0.0, "pld")
    return {
        "epsilon": eps,
        "delta": float(delta),
        "accountant": name,
        "epsilon_rdp": run_epsilon(privacy, delta, "rdp") if released else 0.0,
        "sigma": float(sigma),
        "clip": float(clip),
        "noise_std": 2.0 * float(sigma) * float(clip),
        "particles": int(particles),
        "total_steps": int(steps),
        "compositions": privacy.compositions,
    }
